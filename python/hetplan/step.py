"""Measures whole training steps of a model with plain PyTorch on one device and sets them
beside hetplan's estimate of the same step: the check of the cost model against this GPU.

    python -m hetplan.step --model llama3-1b --gpu h100-sxm5-80gb --seq-len 2048 --mbs 2 \\
        --profile profile.json

The model is built as `python -m hetplan.profile` builds its layers (hetplan's description,
random weights, nothing downloaded), whole: embedding, every block, head. A step is
`accumulation` micro-batches forward and backward, then an AdamW step (fused, as torchtitan
runs it; `--optimizer foreach` for PyTorch's default), as PyTorch's automatic mixed precision
runs it (FP32 weights, gradients and optimizer states; BF16 or FP16 matrix products under
`torch.autocast`), without activation checkpointing. The median of `repeats` steps after
`warmup` is measured (CUDA events on a GPU, the host clock on the CPU), and on a GPU the peak
allocated and reserved memory and what the CUDA context adds to them. A step that runs out of
memory is a result too (`out_of_memory`), set beside hetplan's verdict (`verdict_holds`).
hetplan's estimate is of the matching one-GPU plan (`dp=1`, engine `fsdp`, whose dtypes are
these) on GPU type `--gpu`, analytic and, with `--profile`, from the measured layer times. The
output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Callable, Dict, List, Optional

import hetplan
from hetplan.profile import _DTYPES, _Timer, _modules, _torch, tf32_products


def measure(
    model: "hetplan.Model",
    seq_len: Optional[int] = None,
    mbs: int = 1,
    accumulation: int = 1,
    precision: str = "bf16",
    device: Optional[str] = None,
    warmup: int = 2,
    repeats: int = 5,
    optimizer: str = "fused",
) -> Dict:
    """Seconds per training step (median, and the spread: slowest over fastest) and, on a
    GPU, the peak bytes allocated and reserved, of `model` at micro-batch size `mbs`."""
    torch = _torch()
    shape_json = model._h.transformer
    if shape_json is None:
        raise hetplan.HetplanError(f"{model.name} is not a transformer hetplan can build")
    if mbs < 1 or accumulation < 1 or repeats < 1 or warmup < 0:
        raise hetplan.HetplanError("mbs, accumulation and repeats ≥ 1, warmup ≥ 0")
    if precision not in _DTYPES:
        raise hetplan.HetplanError(f"precision {precision!r}: one of {', '.join(_DTYPES)}")
    # Autocast to 16 bits; `fp32` and `tf32` keep FP32 weights throughout, `tf32` running the
    # products in TF32 (`tf32_products`).
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}
    shape = json.loads(shape_json)
    seq = seq_len or model.default_seq_len
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # One flag per block: it has experts (a MoE model's blocks but those kept dense).
    moe, dense = shape.get("moe"), shape.get("quirks", {}).get("dense_layers", [])
    n_blocks = sum(1 for k in model._h.layer_kinds if k == "transformer")
    experts = [bool(moe) and not (j < len(dense) and dense[j]) for j in range(n_blocks)]
    torch.manual_seed(0)
    try:
        emb, layers, head = _modules(shape, torch, torch.float32, dev, blocks=experts)
    except torch.cuda.OutOfMemoryError as e:
        # The weights alone do not fit: a verdict as well.
        return {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                "out_of_memory": True, "message": str(e).split("\n")[0]}
    # Each parameter once (a tied head shares the embedding's matrix).
    params = list({id(p): p for m in (emb, layers, head) for p in m.parameters()}.values())
    if optimizer not in ("fused", "foreach"):
        raise hetplan.HetplanError(f"optimizer {optimizer!r}: fused or foreach")
    # torchtitan's default (`optimizer.implementation = "fused"`): one kernel per parameter
    # group, no temporaries. PyTorch's own default, foreach, keeps a list as large as the
    # parameters (the square root of the second moments) over the step, and time to match.
    # Fused AdamW on the CPU needs PyTorch 2.4; there the default implementation serves.
    opt = torch.optim.AdamW(params, lr=1e-5, **({optimizer: True} if dev.type == "cuda" else {}))
    scaler = torch.amp.GradScaler(dev.type) if precision == "fp16" else None
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, shape["vocab"], (mbs, seq), generator=gen).to(dev)
    dtype = autocast.get(precision)

    def step():
        for _ in range(accumulation):
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
                x = emb(tokens)
                for layer in layers:
                    x = layer(x)
                loss = head(x, tokens) / accumulation
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type,
           "torch": torch.__version__}
    with tf32_products(torch, precision == "tf32"):
        out.update(time_steps(torch, dev, step, warmup, repeats))
    if not out.get("out_of_memory"):
        # The block built is the plain decoder of the family's shape: a family's extras
        # (learned positions, QK-norm, a shared expert's gate, ...) are not, so this may fall
        # short of hetplan's count by their parameters.
        out["parameters"] = sum(p.numel() for p in params)
        out["hetplan_parameters"] = int(model.parameters)
    return out


def time_steps(torch, dev, step: Callable[[], None], warmup: int, repeats: int) -> Dict:
    """Runs `step()` `warmup + repeats` times: the median seconds of the timed ones and their
    spread (slowest over fastest), and on a GPU the peak bytes allocated and reserved over
    them and what the CUDA context holds beside the allocator (`context_bytes`: the device's
    used memory less the reservation — what nvidia-smi adds). A step that runs out of memory
    is a result too, `out_of_memory` with the message and what the allocator held."""
    timer = _Timer(torch, dev)
    cuda = dev.type == "cuda"
    times: List[float] = []
    try:
        for i in range(warmup + repeats):
            if cuda and i == warmup:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            t = timer(step)
            if i >= warmup:
                times.append(t)
    except torch.cuda.OutOfMemoryError as e:
        # The verdict to check hetplan's against: the step does not fit.
        return {"out_of_memory": True, "message": str(e).split("\n")[0],
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(dev)}
    out = {"step_s": statistics.median(times), "spread": max(times) / max(min(times), 1e-12)}
    if cuda:
        free, total = torch.cuda.mem_get_info(dev)
        out.update(peak_allocated_bytes=torch.cuda.max_memory_allocated(dev),
                   peak_reserved_bytes=torch.cuda.max_memory_reserved(dev),
                   context_bytes=total - free - torch.cuda.memory_reserved(dev),
                   device_total_bytes=total)
    return out


def compare(
    model: "hetplan.Model",
    gpu: str,
    seq_len: Optional[int] = None,
    mbs: int = 1,
    accumulation: int = 1,
    precision: str = "bf16",
    device: Optional[str] = None,
    warmup: int = 2,
    repeats: int = 5,
    profile=None,
    optimizer: str = "fused",
) -> Dict:
    """`measure`'s step beside hetplan's estimate of the same one-GPU plan on GPU type `gpu`
    (analytic, and from `profile` where given): times, their ratio, and the memory."""
    seq = seq_len or model.default_seq_len
    measured = measure(model, seq, mbs, accumulation, precision, device, warmup, repeats,
                       optimizer)
    cluster = hetplan.cluster(f"1x1x{gpu}")
    # The step's loss is `F.cross_entropy` uncompiled, its blocks' norm one kernel
    # (`nn.RMSNorm`), its SwiGLU two and no rotary embedding: compile=blocks (hetplan's
    # Plan.compile) prices it nearest.
    plan = hetplan.load_plan(
        model, cluster,
        f"dp=1,mbs={mbs},gbs={mbs * accumulation},engine=fsdp,precision={precision},"
        "compile=blocks",
        seq_len=seq,
    )
    out = {"model": model.name, "gpu": gpu, "seq_len": seq, "mbs": mbs,
           "accumulation": accumulation, "precision": precision, "optimizer": optimizer,
           "measured": measured}
    for name, prof in (("analytic", None), ("profiled", profile)):
        if name == "profiled" and prof is None:
            continue
        e = plan.estimate(profile=prof)
        est = {"step_s": e.iteration_time_s, "compute_source": e.stages[0].compute_source,
               "memory_bytes": e.stages[0].memory.total, "fits": e.fits}
        if measured.get("out_of_memory"):
            # Only the verdict can be compared: hetplan must not call this step a fit.
            est["verdict_holds"] = not e.fits
        else:
            est["error"] = e.iteration_time_s / measured["step_s"] - 1
            if "peak_reserved_bytes" in measured:
                # hetplan's total is the device's (nvidia-smi's): the allocator's reservation
                # and the CUDA context beside it.
                device = measured["peak_reserved_bytes"] + measured["context_bytes"]
                est["memory_error"] = est["memory_bytes"] / device - 1
                est["verdict_holds"] = e.fits
        out[name] = est
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetplan.step", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="catalog name, config.json path or model directory")
    p.add_argument("--gpu", required=True, help="the catalog GPU type this device is (hetplan gpus)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--accumulation", type=int, default=1, help="micro-batches per step")
    p.add_argument("--precision", default="bf16", choices=list(_DTYPES))
    p.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda if there is one)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", default=None, help="a profile database to estimate with as well")
    p.add_argument("--optimizer", default="fused", choices=["fused", "foreach"],
                   help="AdamW's implementation (default: fused, as torchtitan runs it)")
    a = p.parse_args(argv)
    try:
        r = compare(hetplan.model(a.model), a.gpu, a.seq_len, a.mbs, a.accumulation, a.precision,
                    a.device, a.warmup, a.repeats, a.profile, a.optimizer)
    except (hetplan.HetplanError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
