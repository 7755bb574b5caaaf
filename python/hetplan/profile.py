"""Measures a model's layers with PyTorch and writes hetplan's profile database.

    python -m hetplan.profile --model llama3-8b --gpu h100-sxm5-80gb --seq-len 4096 \\
        --mbs 1,2,4 --out profile.json
    hetplan estimate --model llama3-8b ... --profile profile.json

The model is built from hetplan's description of it (the shape `hetplan.model` reads from the
catalog or a HuggingFace `config.json`), with random weights: nothing is downloaded. Each kind
of layer — the embedding, one decoder block (they are alike), the head with its loss — runs
forward and backward at every micro-batch size on the device, in the plan's precision, after
warm-up, `repeats` times; the median is written and the spread (slowest over fastest) goes in
the profile's `source`. The optimizer time is one AdamW step over the layer's parameters.
Times come from CUDA events on a GPU and from the host clock on the CPU.

With `--collectives` it also measures all-reduce, all-gather, reduce-scatter, all-to-all and
point-to-point sends among `--world-size` local processes (NCCL on GPUs, gloo on the CPU) over
message sizes, as bandwidth samples (`collectives()`); run it on one node for `intra-node` and
with a process per node for `inter-node`. hetplan's estimate and simulator take a collective (or
a send) among as many GPUs of that type over that link at least the measured time
(docs/cost-model.md §3).

At a TP degree above 1 (`--tp 1,2,4`) it runs that many local processes, one GPU each, with
Megatron's sharding (heads and MLP width column- then row-parallel, the vocabulary split over
embedding and head with a vocabulary-parallel loss) and its all-reduces: a TP group's times
include its collectives, as hetplan's profile database expects. Each sample also carries the
bytes autograd keeps for backward (`activation_memory`) and, on a GPU, the peak allocated over
forward and backward (`peak_memory`); `hetplan profile compare` sets both beside the model's.

A mixture-of-experts block is measured at each EP degree of `--ep` as one GPU of the group
runs it: its `1/ep` of the experts, each token's choices folded onto them (the load under
balanced routing), the experts as a loop of GEMMs (as transformers' eager implementation runs
them; the engines' grouped GEMMs are faster), without the all-to-alls, which hetplan prices.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Union

import hetplan


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:  # pragma: no cover - the message is the point
        raise hetplan.HetplanError(
            "the profiler needs PyTorch: pip install torch"
        ) from e
    import torch

    return torch


def _tp_regions(torch, group):
    """Megatron's tensor-parallel region operators over process group `group`: `reduce`
    all-reduces forward and passes the gradient through (after a row-parallel layer), `copy`
    passes forward and all-reduces the gradient (before a column-parallel one). Without a group
    both are the identity."""
    if group is None:
        return (lambda x: x), (lambda x: x)
    dist = torch.distributed

    class Reduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x, group=group)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    class Copy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g, group=group)
            return g

    return Reduce.apply, Copy.apply


def _check_ep(shape: dict, ep: int) -> None:
    moe = shape.get("moe")
    if ep < 1:
        raise hetplan.HetplanError(f"EP degree {ep}: it must be at least 1")
    if ep > 1 and not moe:
        raise hetplan.HetplanError(
            f"EP degree {ep} for a model without mixture-of-experts layers; leave --ep out"
        )
    if moe and moe["experts"] % ep:
        raise hetplan.HetplanError(
            f"EP degree {ep} does not divide the model's {moe['experts']} experts; pick a divisor"
        )


def _check_tp(shape: dict, tp: int) -> None:
    """Megatron's divisibility rules for a TP degree (experts split at the same degree)."""
    if tp < 1:
        raise hetplan.HetplanError(f"TP degree {tp}: it must be at least 1")
    sizes = [("attention heads", shape["heads"]), ("key-value heads", shape["kv_heads"]),
             ("MLP width", shape["ffn"])]
    if shape.get("moe"):
        sizes.append(("expert MLP width", shape["moe"]["expert_ffn"]))
        if shape["moe"].get("shared_ffn"):
            sizes.append(("shared expert width", shape["moe"]["shared_ffn"]))
    for what, n in sizes:
        if n % tp:
            raise hetplan.HetplanError(
                f"TP degree {tp} does not divide the model's {what} ({n}); pick a divisor"
            )


def _modules(shape: dict, torch, dtype, device, tp: int = 1, rank: int = 0, group=None,
             ep: int = 1, blocks: Optional[List[bool]] = None):
    """The embedding, a dense decoder block, a mixture-of-experts block (None for a dense
    model) and the head of a transformer of `shape` (hetplan's `TransformerConfig`), as
    PyTorch modules — at TP degree `tp`, rank `rank`'s shard as Megatron splits it: attention
    heads and the MLP's width (and each expert's) column- then row-parallel, the vocabulary
    split over the embedding and the head (with a vocabulary-parallel loss), and an all-reduce
    over `group` where Megatron has one. At EP degree `ep` the MoE block holds `1/ep` of the
    experts and every token's choices are folded onto them (expert `e` → `e mod
    experts/ep`): the load one GPU of an EP group carries when routing is balanced, without
    the all-to-alls (hetplan prices those from the collective curves). With `blocks` (one
    flag per block: has experts), the whole model instead: (embedding, [blocks], head)."""
    nn = torch.nn
    F = torch.nn.functional
    h, heads, kv, hd = shape["hidden"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    ffn, vocab = shape["ffn"], shape["vocab"]
    _check_tp(shape, tp)
    _check_ep(shape, ep)
    reduce, copy = _tp_regions(torch, group)
    heads, kv, ffn = heads // tp, kv // tp, ffn // tp
    moe = shape.get("moe")
    quirks = shape.get("quirks", {})
    # Megatron pads the vocabulary to a multiple of the TP degree (and more); each rank holds
    # an equal slice.
    vocab_shard = -(-vocab // tp)
    lo = rank * vocab_shard

    def norm():
        if shape["norm"] == "rms-norm":
            return nn.RMSNorm(h, eps=1e-5)
        return nn.LayerNorm(h, bias=shape.get("norm_bias", True))

    gated = shape["mlp"] == "swi-glu"

    def act(u):
        if gated:
            g, u = u.chunk(2, dim=-1)
            return F.silu(g) * u
        return F.gelu(u)

    class Mlp(nn.Module):
        def __init__(self, width, bias):
            super().__init__()
            self.up = nn.Linear(h, width * (2 if gated else 1), bias=bias)
            self.down = nn.Linear(width, h, bias=bias)

        def forward(self, x):  # x: the normed input, replicated over the TP group
            return reduce(self.down(act(self.up(copy(x)))))

    class Experts(nn.Module):
        """A router over every expert, this GPU's `experts/ep` experts (each `1/tp` wide)
        as batched weights, and the shared expert if the model has one."""

        def __init__(self):
            super().__init__()
            n, width = moe["experts"] // ep, moe["expert_ffn"] // tp
            self.router = nn.Linear(h, moe["experts"], bias=quirks.get("router_bias", False))
            self.up = nn.Parameter(0.02 * torch.randn(n, h, width * (2 if gated else 1)))
            self.down = nn.Parameter(0.02 * torch.randn(n, width, h))
            self.local = n
            shared = moe.get("shared_ffn")
            self.shared = Mlp(shared // tp, shape.get("mlp_bias", False)) if shared else None

        def forward(self, x):
            t = x.reshape(-1, h)
            probs = F.softmax(self.router(t).float(), dim=-1)
            weight, chosen = probs.topk(moe["top_k"], dim=-1)
            local = (chosen % self.local).flatten()
            order = local.argsort()
            counts = torch.bincount(local, minlength=self.local).tolist()
            token = (torch.arange(local.numel(), device=t.device) // moe["top_k"])[order]
            xs = copy(t)[token].split(counts)
            ys = [act(xe @ self.up[e]) @ self.down[e] for e, xe in enumerate(xs)]
            y = torch.cat(ys) * weight.flatten()[order].unsqueeze(-1).to(t.dtype)
            out = reduce(torch.zeros_like(t).index_add(0, token, y)).view_as(x)
            return out + self.shared(x) if self.shared is not None else out

    class Block(nn.Module):
        def __init__(self, experts: bool):
            super().__init__()
            self.norm1 = norm()
            self.qkv = nn.Linear(h, (heads + 2 * kv) * hd, bias=shape.get("attn_bias", False))
            self.out = nn.Linear(heads * hd, h, bias=shape.get("mlp_bias", False))
            self.norm2 = norm()
            self.mlp = Experts() if experts else Mlp(ffn, shape.get("mlp_bias", False))

        def forward(self, x):
            b, s, _ = x.shape
            qkv = self.qkv(copy(self.norm1(x)))
            q, k, v = qkv.split([heads * hd, kv * hd, kv * hd], dim=-1)
            q = q.view(b, s, heads, hd).transpose(1, 2)
            k = k.view(b, s, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            v = v.view(b, s, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=shape.get("causal", True))
            x = x + reduce(self.out(a.transpose(1, 2).reshape(b, s, heads * hd)))
            return x + self.mlp(self.norm2(x))

    class Embedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(vocab_shard, h)

        def forward(self, tokens):
            if group is None:
                return self.table(tokens)
            # Tokens of other ranks' slices look up row 0 and are zeroed; the sum over ranks
            # is the embedding.
            outside = (tokens < lo) | (tokens >= lo + vocab_shard)
            y = self.table((tokens - lo).masked_fill(outside, 0))
            return reduce(y.masked_fill(outside.unsqueeze(-1), 0.0))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm()
            self.proj = nn.Linear(h, vocab_shard, bias=False)

        def forward(self, x, targets):
            logits = self.proj(copy(self.norm(x))).float()
            if group is None:
                return F.cross_entropy(logits.view(-1, vocab_shard), targets.view(-1))
            # Megatron's vocabulary-parallel cross-entropy: the global maximum, the sum of
            # exponentials and the target's logit each all-reduced over the group.
            m = logits.detach().amax(dim=-1, keepdim=True)
            torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX, group=group)
            z = logits - m
            total = reduce(z.exp().sum(dim=-1))
            t = targets - lo
            outside = (t < 0) | (t >= vocab_shard)
            picked = z.gather(-1, t.masked_fill(outside, 0).unsqueeze(-1)).squeeze(-1)
            picked = reduce(picked.masked_fill(outside, 0.0))
            return (total.log() - picked).mean()

    # Built where they run: initialising a 7B model's weights on the host takes minutes.
    if blocks is not None:
        with torch.device(device):
            whole = (Embedding(), nn.ModuleList(Block(e) for e in blocks), Head())
        if shape.get("tied_embeddings"):
            whole[2].proj.weight = whole[0].table.weight  # one matrix, as the model has
        return [m.to(device=device, dtype=dtype) for m in whole]
    # A dense block where the model has one (every block of a dense model, DeepSeek's first
    # ones), a MoE block where it has experts.
    dense = not moe or any(quirks.get("dense_layers", []))
    with torch.device(device):
        modules = (Embedding(), Block(False) if dense else None, Block(True) if moe else None,
                   Head())
    return [m.to(device=device, dtype=dtype) if m is not None else None for m in modules]


class _Timer:
    """Seconds of `fn()`: CUDA events on a GPU, the host clock on the CPU."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"

    def __call__(self, fn: Callable[[], None]) -> float:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


_DTYPES = ("bf16", "fp16", "fp32", "tf32")


def _dtype(torch, precision: str):
    """The tensors' type: FP32 for `tf32` too, whose products PyTorch runs in TF32
    (`tf32_products`)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
            "tf32": torch.float32}[precision]


class tf32_products:
    """Within it, FP32 matrix products run in TF32 where the GPU has it (`allow_tf32`, what
    hetplan's `precision=tf32` prices) when `on`, in full FP32 otherwise (PyTorch's default);
    PyTorch's switch is restored after. (The models built here have no convolutions, whose
    switch is left alone.)"""

    def __init__(self, torch, on: bool):
        self.torch, self.on = torch, on

    def __enter__(self):
        matmul = self.torch.backends.cuda.matmul
        self.saved = matmul.allow_tf32
        matmul.allow_tf32 = self.on
        return self

    def __exit__(self, *_):
        self.torch.backends.cuda.matmul.allow_tf32 = self.saved
        return False


def _block_keys(shape: dict, kinds: List[str]) -> Dict[str, List]:
    """The database keys the dense and the MoE block's samples go under: the kind
    `"transformer"` for the more common of the two, every layer index of the other."""
    blocks = [i for i, k in enumerate(kinds) if k == "transformer"]
    moe = shape.get("moe")
    flags = shape.get("quirks", {}).get("dense_layers", [])
    dense = [i for j, i in enumerate(blocks) if not moe or (j < len(flags) and flags[j])]
    sparse = [i for i in blocks if i not in dense]
    if len(dense) >= len(sparse):
        return {"dense": ["transformer"] if dense else [], "moe": sparse}
    return {"dense": dense, "moe": ["transformer"]}


def _measure_layers(torch, dev, shape, kinds, seq, mbs, precision, *args, **kwargs):
    """`_measure_layers_at`, its products in TF32 for `tf32` and in full FP32 otherwise."""
    with tf32_products(torch, precision == "tf32"):
        return _measure_layers_at(torch, dev, shape, kinds, seq, mbs, precision, *args, **kwargs)


def _measure_layers_at(torch, dev, shape, kinds, seq, mbs, precision, warmup, repeats, tp=1,
                       rank=0, group=None, ep=1):
    """The layer samples of one sequence length at one TP degree, measured on `dev` (rank
    `rank`'s shard under TP), and the spreads (slowest over fastest run) seen. At an EP
    degree above 1 only the MoE block, the one layer it changes."""
    dtype = _dtype(torch, precision)
    torch.manual_seed(0)
    emb, block, moe_block, head = _modules(shape, torch, dtype, dev, tp, rank, group, ep)
    timer = _Timer(torch, dev)
    cuda = dev.type == "cuda"
    h, vocab = shape["hidden"], shape["vocab"]
    samples: List[Dict] = []
    spreads: List[float] = []

    def measure(run_fwd: Callable[[], object], grad_of: Callable[[object], None]) -> tuple:
        fwd, bwd = [], []
        for i in range(warmup + repeats):
            out = {}
            f = timer(lambda: out.setdefault("y", run_fwd()))
            b = timer(lambda: grad_of(out["y"]))
            if i >= warmup:
                fwd.append(f)
                bwd.append(b)
        for xs in (fwd, bwd):
            spreads.append(max(xs) / max(min(xs), 1e-12))
        return statistics.median(fwd), statistics.median(bwd)

    def memory(module, run_fwd, grad_of) -> Dict:
        """Bytes autograd keeps for backward (the tensors the forward saves, each storage
        once, the module's weights not counted), and on a GPU the most allocated above what
        was allocated before the forward, over forward and backward."""
        weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
        kept: Dict[int, int] = {}

        def pack(t):
            st = t.untyped_storage()
            if st.data_ptr() not in weights:
                kept[st.data_ptr()] = st.nbytes()
            return t

        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            before = torch.cuda.memory_allocated(dev)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = run_fwd()
        grad_of(y)
        out = {"activation_memory": float(sum(kept.values()))}
        if cuda:
            torch.cuda.synchronize(dev)
            out["peak_memory"] = float(torch.cuda.max_memory_allocated(dev) - before)
        return out

    def optimizer_time(module) -> float:
        params = [p for p in module.parameters()]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4)
        times = [timer(opt.step) for _ in range(warmup + repeats)][warmup:]
        return statistics.median(times)

    blocks = _block_keys(shape, kinds)
    keys = {
        "embedding": [next(i for i, k in enumerate(kinds) if k == "embedding")],
        "dense": blocks["dense"],
        "moe": blocks["moe"],
        "head": [max(i for i, k in enumerate(kinds) if k == "head")],
    }
    modules = {"embedding": emb, "dense": block, "moe": moe_block, "head": head}
    if ep > 1:
        modules = {"moe": moe_block}
    modules = {k: m for k, m in modules.items() if m is not None and keys[k]}
    opt = {name: optimizer_time(m) for name, m in modules.items()}
    for b in mbs:
        gen = torch.Generator(device="cpu").manual_seed(b)
        tokens = torch.randint(0, vocab, (b, seq), generator=gen).to(dev)
        x = torch.randn(b, seq, h, generator=gen).to(device=dev, dtype=dtype).requires_grad_()
        dy = torch.randn(b, seq, h, generator=gen).to(device=dev, dtype=dtype)
        runs = {
            # Embedding: gather rows; backward scatters into its table's gradient.
            "embedding": (lambda: emb(tokens), lambda y: y.backward(dy)),
            # A decoder block (dense, or with experts), keyed by its kind where most blocks
            # are like it, else by the indices of the blocks that are.
            "dense": (lambda: block(x), lambda y: y.backward(dy)),
            "moe": (lambda: moe_block(x), lambda y: y.backward(dy)),
            # The head and its loss.
            "head": (lambda: head(x, tokens), lambda y: y.backward()),
        }
        for name, module in modules.items():
            fwd, grad_of = runs[name]
            f, g = measure(fwd, grad_of)
            sample = {"tp": tp, "mbs": b, "forward": f, "backward": g, "optimizer": opt[name]}
            if name == "moe":
                sample["ep"] = ep
            sample.update(memory(module, fwd, grad_of))
            samples += [dict(layer=key, **sample) for key in keys[name]]
            x.grad = None
    return samples, spreads


def _tp_worker(rank, tp, store, backend, shape, kinds, seq, mbs, precision, warmup, repeats, ep,
               out):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, store=dist.FileStore(store, tp), rank=rank, world_size=tp)
    dev = torch.device(f"cuda:{rank}" if backend == "nccl" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    samples, spreads = _measure_layers(
        torch, dev, shape, kinds, seq, mbs, precision, warmup, repeats, tp, rank,
        dist.group.WORLD, ep,
    )
    # The group moves in lock step: rank 0's clock stands for it. A rank that raised above
    # exits, and mp.spawn stops the others (a barrier here would wait for it forever).
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"samples": samples, "spreads": spreads}, f)
    dist.barrier()
    dist.destroy_process_group()


def _spawn(fn, args: tuple, nprocs: int, what: str):
    """Runs `fn(rank, *args, out)` in `nprocs` fresh processes and returns the JSON rank 0
    wrote to `out`. Rank 0 writes its results before the group is torn down, so a crash in
    the backend's teardown (gloo has aborted there, "terminate called without an active
    exception", on a loaded machine) loses nothing. A run that fails before rank 0 wrote is
    tried once more, then is an error saying so. The processes meet through a file store in a
    fresh directory (`args[1]` is replaced by its path): a TCP port picked free beforehand can
    be taken by another process before rank 0 listens on it."""
    import tempfile

    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    failure: object = "no results written"
    for _ in range(2):
        with tempfile.TemporaryDirectory() as d:
            out = f"{d}/out.json"
            run = (args[0], f"{d}/store") + args[2:] + (out,)
            try:
                mp.spawn(fn, args=run, nprocs=nprocs, join=True)
            except ProcessException as e:
                failure = e
            try:
                with open(out) as f:
                    return json.load(f)
            except (OSError, ValueError):
                pass
    raise hetplan.HetplanError(f"{what} failed in a worker process: {failure}")


def _measure_tp(torch, dev, shape, kinds, seq, mbs, precision, warmup, repeats, tp, ep=1):
    """`_measure_layers` at TP degree `tp` > 1: `tp` local processes, one per GPU with NCCL
    (where `dev` is a GPU) or on the CPU with gloo."""
    if dev.type == "cuda":
        gpus = torch.cuda.device_count()
        if gpus < tp:
            raise hetplan.HetplanError(
                f"TP degree {tp} needs {tp} GPUs on this machine; it has {gpus}. Profile the "
                f"TP degrees up to {gpus} here, or --device cpu to test the profiler"
            )
        backend = "nccl"
    else:
        backend = "gloo"
    args = (tp, None, backend, shape, kinds, seq, list(mbs), precision, warmup, repeats, ep)
    r = _spawn(_tp_worker, args, tp, f"profiling at TP degree {tp}")
    return r["samples"], r["spreads"]


def profile(
    model: "hetplan.Model",
    gpu: str,
    seq_len: Union[None, int, Sequence[int]] = None,
    mbs: Sequence[int] = (1, 2, 4),
    precision: str = "bf16",
    device: Optional[str] = None,
    warmup: int = 2,
    repeats: int = 5,
    tp: Sequence[int] = (1,),
    ep: Sequence[int] = (1,),
) -> dict:
    """The profile database (a dict in hetplan's format) of `model` measured here, labelled
    as GPU type `gpu` (a catalog name, `hetplan gpus`): one profile per sequence length in
    `seq_len` (the model's default when None), each with every layer kind at every
    micro-batch size in `mbs` and TP degree in `tp` (a degree above 1 runs that many local
    processes, one GPU each); a mixture-of-experts block also at every EP degree in `ep`
    (one GPU's share of the experts, `_modules`)."""
    torch = _torch()
    shape_json = model._h.transformer
    if shape_json is None:
        raise hetplan.HetplanError(
            f"{model.name} is not a transformer hetplan can build (a layer list); profile a "
            "catalog model or a HuggingFace config"
        )
    shape = json.loads(shape_json)
    seqs = [seq_len] if isinstance(seq_len, int) else list(seq_len or [model.default_seq_len])
    tps, eps = list(tp), list(ep)
    if repeats < 1 or warmup < 0 or not mbs or min(mbs) < 1:
        raise hetplan.HetplanError("repeats ≥ 1, warmup ≥ 0 and micro-batch sizes ≥ 1")
    if not seqs or min(seqs) < 1 or not tps or not eps:
        raise hetplan.HetplanError("sequence lengths ≥ 1 and at least one TP and EP degree")
    if precision not in _DTYPES:
        raise hetplan.HetplanError(f"precision {precision!r}: one of {', '.join(_DTYPES)}")
    for t in tps:
        _check_tp(shape, t)
    for e in eps:
        _check_ep(shape, e)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    kinds = model._h.layer_kinds
    profiles = []
    for seq in seqs:
        samples: List[Dict] = []
        spreads: List[float] = []
        # Every layer at EP 1 first; then the MoE block alone at each higher EP degree.
        for e in sorted(set(eps) | {1}):
            for t in tps:
                args = (torch, dev, shape, kinds, seq, mbs, precision, warmup, repeats)
                if t > 1:
                    got, spread = _measure_tp(*args, t, e)
                else:
                    got, spread = _measure_layers(*args, ep=e)
                samples += got
                spreads += spread
        source = (
            f"hetplan.profile on {dev.type}"
            + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
            + f", torch {torch.__version__}, {precision}, TP {','.join(map(str, tps))}"
            + (f", EP {','.join(map(str, sorted(set(eps) | {1})))} (one GPU's experts, "
               "routing folded onto them, all-to-alls not included)" if shape.get("moe") else "")
            + (f" ({'NCCL' if dev.type == 'cuda' else 'gloo'} between local processes)" if max(tps) > 1 else "")
            + f", medians of {repeats} runs after {warmup} warm-up; slowest over fastest run at "
            f"most {max(spreads):.2f}; activation_memory: bytes autograd saves for backward"
            + ("; peak_memory: most allocated above the allocation before the forward" if dev.type == "cuda" else "")
        )
        profiles.append({
            "gpu": gpu,
            "model": model.name,
            "seq_len": seq,
            "precision": precision,
            "source": source,
            "layers": samples,
        })
    return {"format_version": 1, "profiles": profiles}


#: What each collective's `message` is: the per-GPU buffer of an all-reduce, the gathered
#: output of an all-gather, the input of a reduce-scatter, each GPU's send buffer of an
#: all-to-all, and the bytes a point-to-point send carries. `bandwidth` is message ÷ time.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")


def _collective_worker(rank, world, store, backend, device_type, sizes, warmup, repeats, out):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, store=dist.FileStore(store, world), rank=rank,
                            world_size=world)
    dev = torch.device(f"cuda:{rank}" if device_type == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timer = _Timer(torch, dev)
    results = []
    for op in COLLECTIVES:
        for size in sizes:
            n = max(world, size // 4 // world * world)  # float32 elements, divisible by world
            buf = torch.ones(n, dtype=torch.float32, device=dev)
            part = torch.empty(n // world, dtype=torch.float32, device=dev)
            full = torch.empty(n, dtype=torch.float32, device=dev)

            def run():
                if op == "all-reduce":
                    dist.all_reduce(buf)
                elif op == "all-gather":
                    dist.all_gather_into_tensor(full, part)
                elif op == "reduce-scatter":
                    dist.reduce_scatter_tensor(part, buf)
                elif op == "all-to-all":
                    dist.all_to_all_single(full, buf)
                elif rank == 0:
                    dist.send(buf, 1)
                elif rank == 1:
                    dist.recv(buf, 0)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)

            try:
                times = []
                for i in range(warmup + repeats):
                    dist.barrier()
                    t = timer(run)
                    if i >= warmup:
                        times.append(t)
            except (RuntimeError, ValueError) as e:  # the backend lacks the collective
                results.append({"op": op, "skipped": str(e).splitlines()[0][:200]})
                dist.barrier()
                break
            # The slowest rank's median sets the collective's time.
            t = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            message = 4 * n
            results.append({
                "op": op,
                "group_size": 2 if op == "p2p" else world,
                "message": message,
                "bandwidth": message / max(t.item(), 1e-12),
            })
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def collectives(
    world_size: int = 2,
    backend: Optional[str] = None,
    sizes: Sequence[int] = tuple(1 << k for k in range(12, 27, 2)),
    link: str = "intra-node",
    warmup: int = 2,
    repeats: int = 5,
) -> tuple:
    """Measures all-reduce, all-gather, reduce-scatter, all-to-all and point-to-point sends
    among `world_size` local processes (NCCL on GPUs, one per process, where there are
    enough; gloo on the CPU otherwise) over message `sizes` in bytes. Returns (samples in the
    profile database's `collectives` format, the ops the backend lacks)."""
    torch = _torch()

    if world_size < 2 or not sizes or min(sizes) < 1 or repeats < 1:
        raise hetplan.HetplanError("world_size ≥ 2, message sizes ≥ 1 byte, repeats ≥ 1")
    if link not in ("intra-node", "inter-node"):
        raise hetplan.HetplanError(f"link {link!r}: intra-node or inter-node")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= world_size else "gloo")
    device_type = "cuda" if backend == "nccl" else "cpu"
    args = (world_size, None, backend, device_type, list(sizes), warmup, repeats)
    results = _spawn(_collective_worker, args, world_size, "measuring collectives")
    samples = [dict(r, link=link) for r in results if "skipped" not in r]
    skipped = {r["op"]: r["skipped"] for r in results if "skipped" in r}
    return samples, skipped


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetplan.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="catalog name, config.json path or model directory")
    p.add_argument("--gpu", required=True, help="the catalog GPU type the measurements stand for (hetplan gpus)")
    p.add_argument("--seq-len", default=None,
                   help="sequence lengths, comma-separated (default: the model's)")
    p.add_argument("--mbs", default="1,2,4", help="micro-batch sizes, comma-separated")
    p.add_argument("--tp", default="1",
                   help="TP degrees, comma-separated; a degree above 1 runs that many local processes")
    p.add_argument("--ep", default="1",
                   help="EP degrees for a mixture-of-experts model, comma-separated: one GPU's "
                   "share of the experts at each")
    p.add_argument("--precision", default="bf16", choices=list(_DTYPES))
    p.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda if there is one)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="-", help="the database file (default: stdout)")
    p.add_argument("--collectives", action="store_true",
                   help="also measure collectives among --world-size local processes")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--backend", default=None, help="nccl or gloo (default: nccl with enough GPUs)")
    p.add_argument("--link", default="intra-node", choices=["intra-node", "inter-node"])
    a = p.parse_args(argv)
    try:
        ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
        seqs = ints(a.seq_len) if a.seq_len else None
        db = profile(
            hetplan.model(a.model), a.gpu, seqs, ints(a.mbs), a.precision, a.device, a.warmup,
            a.repeats, ints(a.tp), ints(a.ep),
        )
        if a.collectives:
            samples, skipped = collectives(
                a.world_size, a.backend, link=a.link, warmup=a.warmup, repeats=a.repeats
            )
            for p in db["profiles"]:
                p["collectives"] = samples
            for op, why in skipped.items():
                print(f"note: {op} not measured: {why}", file=sys.stderr)
    except (hetplan.HetplanError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(db, indent=1)
    if a.out == "-":
        print(text)
    else:
        with open(a.out, "w") as f:
            f.write(text + "\n")
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
