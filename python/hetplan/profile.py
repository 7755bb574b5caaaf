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
with a process per node for `inter-node`. hetplan's estimate takes a collective among as many
GPUs of that type over that link at least the measured time (docs/cost-model.md §3).

What it does not measure yet: tensor-parallel degrees above 1 (a TP group's times include its
collectives, which need a process group per degree), mixture-of-experts layers, and peak
memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

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


def _modules(shape: dict, torch, dtype, device):
    """The embedding, one decoder block and the head of a transformer of `shape` (hetplan's
    `TransformerConfig`), as PyTorch modules."""
    nn = torch.nn
    F = torch.nn.functional
    h, heads, kv, hd = shape["hidden"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    ffn, vocab = shape["ffn"], shape["vocab"]
    if shape.get("moe"):
        raise hetplan.HetplanError(
            "the profiler builds dense decoders; this model has mixture-of-experts layers "
            "(hetplan's analytic model prices them)"
        )

    def norm():
        if shape["norm"] == "rms-norm":
            return nn.RMSNorm(h, eps=1e-5)
        return nn.LayerNorm(h, bias=shape.get("norm_bias", True))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = norm()
            self.qkv = nn.Linear(h, (heads + 2 * kv) * hd, bias=shape.get("attn_bias", False))
            self.out = nn.Linear(heads * hd, h, bias=shape.get("mlp_bias", False))
            self.norm2 = norm()
            gated = shape["mlp"] == "swi-glu"
            self.up = nn.Linear(h, ffn * (2 if gated else 1), bias=shape.get("mlp_bias", False))
            self.down = nn.Linear(ffn, h, bias=shape.get("mlp_bias", False))
            self.gated = gated

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([heads * hd, kv * hd, kv * hd], dim=-1)
            q = q.view(b, s, heads, hd).transpose(1, 2)
            k = k.view(b, s, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            v = v.view(b, s, kv, hd).transpose(1, 2).repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=shape.get("causal", True))
            x = x + self.out(a.transpose(1, 2).reshape(b, s, heads * hd))
            u = self.up(self.norm2(x))
            if self.gated:
                g, u = u.chunk(2, dim=-1)
                u = F.silu(g) * u
            else:
                u = F.gelu(u)
            return x + self.down(u)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm()
            self.proj = nn.Linear(h, vocab, bias=False)

        def forward(self, x, targets):
            logits = self.proj(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    emb = nn.Embedding(vocab, h)
    return [m.to(device=device, dtype=dtype) for m in (emb, Block(), Head())]


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


def profile(
    model: "hetplan.Model",
    gpu: str,
    seq_len: Optional[int] = None,
    mbs: Sequence[int] = (1, 2, 4),
    precision: str = "bf16",
    device: Optional[str] = None,
    warmup: int = 2,
    repeats: int = 5,
) -> dict:
    """The profile database (a dict in hetplan's format) of `model` measured here, labelled
    as GPU type `gpu` (a catalog name, `hetplan gpus`)."""
    torch = _torch()
    shape_json = model._h.transformer
    if shape_json is None:
        raise hetplan.HetplanError(
            f"{model.name} is not a transformer hetplan can build (a layer list); profile a "
            "catalog model or a HuggingFace config"
        )
    shape = json.loads(shape_json)
    seq = seq_len or model.default_seq_len
    if repeats < 1 or warmup < 0 or not mbs or min(mbs) < 1:
        raise hetplan.HetplanError("repeats ≥ 1, warmup ≥ 0 and micro-batch sizes ≥ 1")
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if precision not in dtypes:
        raise hetplan.HetplanError(f"precision {precision!r}: one of bf16, fp16, fp32")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = dtypes[precision]
    torch.manual_seed(0)
    emb, block, head = _modules(shape, torch, dtype, dev)
    kinds = model._h.layer_kinds
    timer = _Timer(torch, dev)
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

    def optimizer_time(module) -> float:
        params = [p for p in module.parameters()]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4)
        times = [timer(opt.step) for _ in range(warmup + repeats)][warmup:]
        return statistics.median(times)

    layers = {
        "embedding": next(i for i, k in enumerate(kinds) if k == "embedding"),
        "head": max(i for i, k in enumerate(kinds) if k == "head"),
    }
    opt = {name: optimizer_time(m) for name, m in (("embedding", emb), ("transformer", block), ("head", head))}
    for b in mbs:
        tokens = torch.randint(0, vocab, (b, seq), device=dev)
        x = torch.randn(b, seq, h, device=dev, dtype=dtype, requires_grad=True)
        dy = torch.randn(b, seq, h, device=dev, dtype=dtype)
        # Embedding: gather rows; backward scatters into its table's gradient.
        f, g = measure(lambda: emb(tokens), lambda y: y.backward(dy))
        samples.append({"layer": layers["embedding"], "tp": 1, "mbs": b, "forward": f, "backward": g, "optimizer": opt["embedding"]})
        # One decoder block, keyed by its kind: hetplan uses it for every block.
        f, g = measure(lambda: block(x), lambda y: y.backward(dy))
        samples.append({"layer": "transformer", "tp": 1, "mbs": b, "forward": f, "backward": g, "optimizer": opt["transformer"]})
        # The head and its loss.
        f, g = measure(lambda: head(x, tokens), lambda y: y.backward())
        samples.append({"layer": layers["head"], "tp": 1, "mbs": b, "forward": f, "backward": g, "optimizer": opt["head"]})
        x.grad = None
    source = (
        f"hetplan.profile on {dev.type}"
        + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
        + f", torch {torch.__version__}, {precision}, medians of {repeats} runs after {warmup} "
        f"warm-up; slowest over fastest run at most {max(spreads):.2f}"
    )
    return {
        "format_version": 1,
        "profiles": [
            {
                "gpu": gpu,
                "model": model.name,
                "seq_len": seq,
                "precision": precision,
                "source": source,
                "layers": samples,
            }
        ],
    }


#: What each collective's `message` is: the per-GPU buffer of an all-reduce, the gathered
#: output of an all-gather, the input of a reduce-scatter, each GPU's send buffer of an
#: all-to-all, and the bytes a point-to-point send carries. `bandwidth` is message ÷ time.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")


def _collective_worker(rank, world, port, backend, device_type, sizes, warmup, repeats, out):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
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
    import socket
    import tempfile

    torch = _torch()
    import torch.multiprocessing as mp

    if world_size < 2 or not sizes or min(sizes) < 1 or repeats < 1:
        raise hetplan.HetplanError("world_size ≥ 2, message sizes ≥ 1 byte, repeats ≥ 1")
    if link not in ("intra-node", "inter-node"):
        raise hetplan.HetplanError(f"link {link!r}: intra-node or inter-node")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= world_size else "gloo")
    device_type = "cuda" if backend == "nccl" else "cpu"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/collectives.json"
        mp.spawn(
            _collective_worker,
            args=(world_size, port, backend, device_type, list(sizes), warmup, repeats, out),
            nprocs=world_size,
            join=True,
        )
        with open(out) as f:
            results = json.load(f)
    samples = [dict(r, link=link) for r in results if "skipped" not in r]
    skipped = {r["op"]: r["skipped"] for r in results if "skipped" in r}
    return samples, skipped


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetplan.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="catalog name, config.json path or model directory")
    p.add_argument("--gpu", required=True, help="the catalog GPU type the measurements stand for (hetplan gpus)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--mbs", default="1,2,4", help="micro-batch sizes, comma-separated")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
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
        mbs = [int(x) for x in a.mbs.split(",") if x]
        db = profile(
            hetplan.model(a.model), a.gpu, a.seq_len, mbs, a.precision, a.device, a.warmup, a.repeats
        )
        if a.collectives:
            samples, skipped = collectives(
                a.world_size, a.backend, link=a.link, warmup=a.warmup, repeats=a.repeats
            )
            db["profiles"][0]["collectives"] = samples
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
