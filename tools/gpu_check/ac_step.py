"""What activation checkpointing costs on one GPU, as torchtitan runs it: a model's training step
under FSDP2 over one rank (torchtitan's wrapping and mixed precision), each block left alone,
recomputed whole (torchtitan's `full`: `checkpoint_wrapper`) or under torchtitan's op-level
selective policy (`selective` / `op`: the outputs of the attention kernel and of every other
matrix product kept, the rest recomputed; the Dec 2024 `_save_list` policy of
`torchtitan/parallelisms/parallelize_llama.py`, the release its published benchmarks ran, with
cuDNN's attention op added since PyTorch now picks it on Hopper), eager and with every block
compiled after wrapping (torchtitan's order: checkpointing, then `torch.compile`, then FSDP).

    python3 tools/gpu_check/ac_step.py --model llama3-8b --blocks 8 --seq-len 8192 --mbs 1 > ac.jsonl

`--blocks` keeps the first N decoder blocks so that a large model's step fits one GPU; the
estimate to set beside it is of the same model cut to N blocks (`num_hidden_layers`). One JSON
line per variant: the median forward, backward and optimizer times and the whole step of
`--repeats` after `--warmup` (CUDA events; compiling happens in the warm-up) and every timed
step in order, the spread, and
the peak allocated and reserved memory over the timed steps with the allocated memory before
them (weights, gradients, optimizer states). A variant that fails or runs out of memory says so
and the others still run.
"""

import argparse
import gc
import json
import os
import statistics
import sys
from collections import defaultdict

import torch

import hetplan
from fsdp_step import whole_model  # this folder: Python puts a script's own folder on the path


def _op_policy():
    """torchtitan's op-level selective checkpointing policy (Dec 2024): save the outputs of
    matrix products, attention kernels and reductions for FP8 scaling, except every second
    matrix product, counted separately in the forward and in the recomputation."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten.abs.default, aten.max.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default}
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_cudnn_attention"):
        op = getattr(aten, name, None)
        if op is not None:
            save.add(op.default)

    def context():
        meta = defaultdict(int)

        def policy(ctx, func, *args, **kwargs):
            key = "recompute" if ctx.is_recompute else "forward"
            if func == aten.mm.default:
                meta[key] += 1
            keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context


class SplitMlp(torch.nn.Module):
    """A gated MLP as torchtitan's `FeedForward` runs it, `w2(silu(w1(x)) * w3(x))`: the gate
    and up projections two products (the profiler's block runs them as one), in that order,
    which is how its op-level policy counts them."""

    def __init__(self, fused):
        super().__init__()
        width = fused.down.in_features
        self.w1 = torch.nn.Linear(fused.up.in_features, width, bias=False)
        self.w3 = torch.nn.Linear(fused.up.in_features, width, bias=False)
        with torch.no_grad():
            self.w1.weight.copy_(fused.up.weight[:width])
            self.w3.weight.copy_(fused.up.weight[width:])
        self.w2 = fused.down

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


def build(shape, blocks, ac, compiled, dev, mlp="fused"):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh

    whole = whole_model(shape, blocks, dev)
    if mlp == "split":
        for layer in whole.layers:
            layer.mlp = SplitMlp(layer.mlp)
    mesh = init_device_mesh(dev.type, (1,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(whole.layers):
        if ac == "full":
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        elif ac == "ops":
            layer = checkpoint_wrapper(layer, context_fn=_op_policy(), preserve_rng_state=False)
        if compiled:
            # torchtitan compiles each block whole (`fullgraph=True`): a graph break would
            # change what the partitioner sees.
            layer = torch.compile(layer, fullgraph=True)
        fully_shard(layer, mesh=mesh, mp_policy=mp,
                    reshard_after_forward=i < len(whole.layers) - 1)
        whole.layers[i] = layer
    fully_shard(whole, mesh=mesh, mp_policy=mp)
    return whole


def run(shape, blocks, seq, mbs, ac, compiled, warmup, repeats, dev, sdpa, mlp="fused"):
    whole = build(shape, blocks, ac, compiled, dev, mlp)
    opt = torch.optim.AdamW(whole.parameters(), lr=1e-5, fused=dev.type == "cuda")
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, shape["vocab"], (mbs, seq), generator=gen).to(dev)
    cuda = dev.type == "cuda"
    parts = {"forward_s": [], "backward_s": [], "optimizer_s": [], "step_s": []}
    out = {"seq_len": seq, "mbs": mbs, "blocks": blocks, "ac": ac,
           "compile": "blocks" if compiled else "eager",
           "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "torch": torch.__version__, "sdpa": sdpa, "mlp": mlp}
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    kernel = sdpa_kernel([backends[sdpa]]) if sdpa in backends else nullcontext()
    try:
        with kernel:
            _steps(whole, opt, tokens, warmup, repeats, dev, parts, out)
    except torch.cuda.OutOfMemoryError as e:
        out.update(out_of_memory=True, message=str(e).split("\n")[0],
                   peak_allocated_bytes=torch.cuda.max_memory_allocated(dev))
        return out
    if parts["step_s"]:
        out.update({k: statistics.median(v) for k, v in parts.items()})
        out["spread"] = max(parts["step_s"]) / min(parts["step_s"])
        out["step_s_each"] = [round(t, 6) for t in parts["step_s"]]
        free, total = torch.cuda.mem_get_info(dev)
        out.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(dev),
                   peak_reserved_bytes=torch.cuda.max_memory_reserved(dev),
                   context_bytes=total - free - torch.cuda.memory_reserved(dev))
    return out


def _steps(whole, opt, tokens, warmup, repeats, dev, parts, out):
    """`warmup + repeats` steps, the timed ones' forward, backward, optimizer and whole step
    appended to `parts` (CUDA events), the memory allocated before the timed ones in `out`."""
    cuda = dev.type == "cuda"
    for i in range(warmup + repeats):
        if cuda and i == warmup:
            torch.cuda.synchronize(dev)
            out["allocated_before_bytes"] = torch.cuda.memory_allocated(dev)
            torch.cuda.reset_peak_memory_stats(dev)
        if cuda:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            ev[0].record()
        loss = whole(tokens)
        if cuda:
            ev[1].record()
        loss.backward()
        if cuda:
            ev[2].record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            ev[3].record()
            ev[3].synchronize()
            if i >= warmup:
                t = [ev[0].elapsed_time(e) / 1e3 for e in ev[1:]]
                parts["forward_s"].append(t[0])
                parts["backward_s"].append(t[1] - t[0])
                parts["optimizer_s"].append(t[2] - t[1])
                parts["step_s"].append(t[2])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama3-8b")
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", default="none,ops,full:eager,blocks",
                   help="checkpointing modes, a colon, compile modes (each comma-separated)")
    p.add_argument("--sdpa", default="default", choices=["default", "flash", "cudnn"],
                   help="the attention kernel: PyTorch's choice, FlashAttention-2 or cuDNN's")
    p.add_argument("--mlp", default="fused", choices=["fused", "split"],
                   help="a gated MLP's two up projections as one product (the profiler's block) "
                        "or two, w1 then w3 (torchtitan's FeedForward)")
    p.add_argument("--device", default="cuda", help="cuda, or cpu to try the script out")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("ac_step.py measures a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29518")
    import torch.distributed as dist

    dev = torch.device(a.device)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    shape = json.loads(hetplan.model(a.model)._h.transformer)
    acs, compiles = a.variants.split(":")
    for compiled in compiles.split(","):
        for ac in acs.split(","):
            print(f"ac_step: {ac} {compiled}", file=sys.stderr, flush=True)
            try:
                r = run(shape, a.blocks, a.seq_len, a.mbs, ac, compiled == "blocks",
                        a.warmup, a.repeats, dev, a.sdpa, a.mlp)
            except Exception as e:  # one variant failing leaves the others' figures
                r = {"ac": ac, "compile": compiled,
                     "error": f"{type(e).__name__}: {e}".split("\n")[0][:300]}
            r["model"] = a.model
            print(json.dumps(r), flush=True)
            # Free this variant's model before the next (compiled code holds references).
            torch._dynamo.reset()
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
