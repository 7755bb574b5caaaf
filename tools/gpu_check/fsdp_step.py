"""What torchtitan's wrapping costs beyond the kernels, on one GPU: the same training step run
as plain automatic mixed precision (`hetplan.step`'s recipe), as FSDP2 over a single rank
(torchtitan's wrapping: `fully_shard` on every block and on the whole model,
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), and as FSDP2 with every block
compiled first (torchtitan's `compile`); and plain AMP with every block compiled, the baseline of
the last.

    python3 tools/gpu_check/fsdp_step.py --model llama2-7b --seq-len 2048 --mbs 1 > fsdp.jsonl

One JSON line per variant: the median step of `--repeats` after `--warmup` (CUDA events; the
compiled variant compiles during warm-up), the spread, the peak allocated and reserved memory.
A variant that runs out of memory or fails says so and the others still run. With a single rank
FSDP2's collectives move nothing, so what separates its step from plain AMP is its own work:
the per-block copy-in and copy-out around each all-gather and reduce-scatter, the casts it
makes, its hooks.
"""

import argparse
import gc
import json
import os
import sys

import torch

import hetplan
from hetplan.profile import _modules
from hetplan.step import time_steps


def whole_model(shape, blocks, dev):
    """The embedding, `blocks` dense decoder blocks and the head of a transformer of `shape`
    (hetplan's description) as one module, FP32 weights built on `dev` (seed 0); `ac_step.py`
    builds its cut models with it."""
    torch.manual_seed(0)
    emb, layers, head = _modules(shape, torch, torch.float32, dev, blocks=[False] * blocks)

    class Whole(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.layers, self.head = emb, layers, head

        def forward(self, tokens):
            x = self.emb(tokens)
            for layer in self.layers:
                x = layer(x)
            return self.head(x, tokens)

    return Whole()


def build(model, dev):
    shape = json.loads(model._h.transformer)
    n = sum(1 for k in model._h.layer_kinds if k == "transformer")
    return shape, whole_model(shape, n, dev)


def run(variant, model, seq, mbs, warmup, repeats, dev):
    shape, whole = build(model, dev)
    autocast = variant in ("amp", "amp-compile")
    if variant == "amp-compile":
        for i, layer in enumerate(whole.layers):
            whole.layers[i] = torch.compile(layer)
    if not autocast:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(dev.type, (1,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for i, layer in enumerate(whole.layers):
            if variant == "fsdp2-compile":
                whole.layers[i] = layer = torch.compile(layer)
            # torchtitan keeps the last block gathered after the forward (its backward
            # needs it at once).
            fully_shard(layer, mesh=mesh, mp_policy=mp,
                        reshard_after_forward=i < len(whole.layers) - 1)
        fully_shard(whole, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(whole.parameters(), lr=1e-5, fused=dev.type == "cuda")
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, shape["vocab"], (mbs, seq), generator=gen).to(dev)

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = whole(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out = {"model": model.name, "seq_len": seq, "mbs": mbs, "variant": variant,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__}
    out.update(time_steps(torch, dev, step, warmup, repeats))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama2-7b")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", default="amp,amp-compile,fsdp2,fsdp2-compile")
    p.add_argument("--device", default="cuda", help="cuda, or cpu to try the script out")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("fsdp_step.py measures a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    import torch.distributed as dist

    dev = torch.device(a.device)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    model = hetplan.model(a.model)
    for variant in a.variants.split(","):
        print(f"fsdp_step: {variant}", file=sys.stderr, flush=True)
        try:
            r = run(variant, model, a.seq_len, a.mbs, a.warmup, a.repeats, dev)
        except Exception as e:  # one variant failing leaves the others' figures
            r = {"model": a.model, "variant": variant,
                 "error": f"{type(e).__name__}: {e}".split("\n")[0][:300]}
        print(json.dumps(r), flush=True)
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
