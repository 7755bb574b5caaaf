"""Achievable rates of the kernels hetplan's analytic cost model prices, measured on this GPU.

    python3 tools/gpu_check/kernels.py [SECTION,...] > kernels.json

hetplan's compute model (docs/cost-model.md §2, `crates/hetplan/src/cost/constants.rs`) times a
matrix product at a per-architecture fraction of the tensor-core peak, shrunk for short
dimensions; the attention core at a per-kernel fraction; element-wise work at a fraction of the
HBM bandwidth. This measures each of those on the device at the shapes of the catalog's Llama
layers, so the constants can be set beside a measurement instead of a datasheet:

- `gemm`: the three products of a linear layer (forward `x·Wᵀ`, input gradient `g·W`, weight
  gradient `gᵀ·x`) in BF16 for Llama-3-8B's and -70B's layer widths at 512–16,384 tokens,
  and the forward in FP8 (E4M3, per-tensor scales, BF16 out, `torch._scaled_mm`, the cuBLASLt
  call Transformer Engine makes).
- `attention`: `scaled_dot_product_attention`, causal, 128-wide heads, forward and forward +
  backward, 16,384 tokens split into sequences of 512–16,384, per SDPA backend available.
- `hbm`: a 2 GiB copy and an element-wise add.
- `alignment`: an output layer of GPT-2's 50,257-entry vocabulary against the same padded to a
  multiple of 128.

Each figure is the median of `REPEATS` timed calls (CUDA events) after warm-up, on random
data. The GPU's clocks, power and temperature are read with nvidia-smi before and after.
Nothing here depends on hetplan; the output is one JSON object on stdout.
"""

import json
import statistics
import subprocess
import sys

import torch

WARMUP, REPEATS = 5, 20
F = torch.nn.functional


def timed(fn, warmup=WARMUP, repeats=REPEATS):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times), max(times) / min(times)


def smi(q="name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,"
            "temperature.gpu", units=True):
    """nvidia-smi's reading of the fields `q` (with their units unless `units` is false)."""
    fmt = "csv,noheader" if units else "csv,noheader,nounits"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", f"--format={fmt}"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    return dict(zip(q.split(","), [v.strip() for v in out.split(",")]))


def gemms(dev):
    # (name, in features K, out features N): Llama-3-8B (hidden 4096, 32 heads, 8 KV heads of
    # 128, FFN 14336 gated) and Llama-3-70B (8192, 64 heads, 8 KV, FFN 28672 gated).
    layers = [
        ("8b.qkv", 4096, 6144), ("8b.out", 4096, 4096), ("8b.up", 4096, 2 * 14336),
        ("8b.down", 14336, 4096),
        ("70b.qkv", 8192, 10240), ("70b.out", 8192, 8192), ("70b.up", 8192, 2 * 28672),
        ("70b.down", 28672, 8192),
    ]
    rows = []
    fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    one = torch.ones((), device=dev, dtype=torch.float32)
    for m in (512, 2048, 8192, 16384):
        for name, k, n in layers:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02
            g = torch.randn(m, n, device=dev, dtype=torch.bfloat16)
            flops = 2.0 * m * n * k
            row = {"layer": name, "tokens": m, "k": k, "n": n, "flops": flops}
            for what, fn in (("fwd", lambda: F.linear(x, w)), ("dgrad", lambda: g @ w),
                             ("wgrad", lambda: g.t() @ x)):
                t, spread = timed(fn)
                row[f"bf16_{what}_s"] = t
                row[f"bf16_{what}_tflops"] = flops / t / 1e12
                row[f"bf16_{what}_spread"] = spread
            if fp8:
                x8 = x.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                try:
                    t, spread = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16))
                    row["fp8_fwd_s"] = t
                    row["fp8_fwd_tflops"] = flops / t / 1e12
                    row["fp8_fwd_spread"] = spread
                except Exception as e:  # an older torch's signature, or no FP8 on this GPU
                    row["fp8_error"] = str(e).split("\n")[0]
                del x8, w8
            rows.append(row)
            del x, w, g
    # The square product every datasheet-chaser runs, for reference.
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    t, spread = timed(lambda: a @ b)
    rows.append({"layer": "square", "tokens": 8192, "k": 8192, "n": 8192, "flops": 2 * 8192**3,
                 "bf16_fwd_s": t, "bf16_fwd_tflops": 2 * 8192**3 / t / 1e12, "bf16_fwd_spread": spread})
    return rows


def attention(dev):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    heads, hd, tokens = 32, 128, 16384
    rows = []
    for s in (512, 1024, 2048, 4096, 8192, 16384):
        b = tokens // s
        q, k, v = (torch.randn(b, heads, s, hd, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(b, heads, s, hd, device=dev, dtype=torch.bfloat16)
        # Causal: half of the 4·b·heads·s²·hd of the two products (the kernels skip the
        # masked tiles); the backward runs 2.5 times the forward's products.
        fwd_flops = 4.0 * b * heads * s * s * hd / 2
        for name, backend in backends.items():
            row = {"backend": name, "seq": s, "batch": b, "heads": heads, "head_dim": hd,
                   "fwd_flops": fwd_flops}

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd():
                # Each call's gradients anew: accumulating into the last call's would time
                # three 128 MiB additions with it (the first run of this script did: 0.28 ms).
                q.grad = k.grad = v.grad = None
                fwd().backward(dout)

            try:
                if backend is None:
                    tf, sf = timed(fwd)
                    tb, sb = timed(fwd_bwd)
                else:
                    with sdpa_kernel([backend]):
                        tf, sf = timed(fwd)
                        tb, sb = timed(fwd_bwd)
            except RuntimeError as e:
                row["error"] = str(e).split("\n")[0][:200]
                rows.append(row)
                continue
            row.update({"fwd_s": tf, "fwd_tflops": fwd_flops / tf / 1e12, "fwd_spread": sf,
                        "fwd_bwd_s": tb, "fwd_bwd_tflops": 3.5 * fwd_flops / tb / 1e12,
                        "fwd_bwd_spread": sb})
            rows.append(row)
            q.grad = k.grad = v.grad = None
        del q, k, v, dout
    return rows


def hbm(dev):
    n = 2**30  # 2 GiB of BF16
    x = torch.randn(n, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    z = torch.randn(n, device=dev, dtype=torch.bfloat16)
    t_copy, s_copy = timed(lambda: y.copy_(x))
    t_add, s_add = timed(lambda: torch.add(x, z, out=y))
    return {"bytes": 2 * n, "copy_s": t_copy, "copy_bytes_per_s": 2 * 2 * n / t_copy,
            "copy_spread": s_copy, "add_s": t_add, "add_bytes_per_s": 3 * 2 * n / t_add,
            "add_spread": s_add}


def alignment(dev):
    """An output layer whose vocabulary is not a multiple of 8 (GPT-2's 50,257) against the
    same padded to 50,304 (Megatron's multiple of 128): forward and both backward products at
    16,384 tokens of width 2,048."""
    rows = []
    x = torch.randn(16384, 2048, device=dev, dtype=torch.bfloat16)
    for vocab in (50257, 50304):
        w = torch.randn(vocab, 2048, device=dev, dtype=torch.bfloat16) * 0.02
        g = torch.randn(16384, vocab, device=dev, dtype=torch.bfloat16)
        flops = 2.0 * 16384 * 2048 * vocab
        row = {"vocab": vocab, "tokens": 16384, "k": 2048, "flops": flops}
        for what, fn in (("fwd", lambda: F.linear(x, w)), ("dgrad", lambda: g @ w),
                         ("wgrad", lambda: g.t() @ x)):
            t, spread = timed(fn)
            row[f"bf16_{what}_s"] = t
            row[f"bf16_{what}_tflops"] = flops / t / 1e12
        rows.append(row)
        del w, g
    return rows


def main():
    if not torch.cuda.is_available():
        print("kernels.py measures a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    out = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda, "sms": props.multi_processor_count,
           "memory_bytes": props.total_memory, "smi_before": smi(),
           "warmup": WARMUP, "repeats": REPEATS}
    sections = {"hbm": hbm, "attention": attention, "gemm": gemms, "alignment": alignment}
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else list(sections)
    for name, fn in ((n, sections[n]) for n in only):
        print(f"kernels: {name}", file=sys.stderr, flush=True)
        try:
            out[name] = fn(dev)
        except Exception as e:  # one part failing leaves the others' figures
            out[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        torch.cuda.empty_cache()
    out["smi_after"] = smi()
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
