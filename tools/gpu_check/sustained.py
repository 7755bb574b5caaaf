"""A matrix product's rate over a minute or more of back-to-back work, beside the GPU's clocks,
power and temperature: what a training run sustains, against the short bursts `kernels.py` times
(20 calls after 5).

    python3 tools/gpu_check/sustained.py --seconds 75 > sustained.jsonl

Runs Llama-3-8B's MLP up projection (16,384 tokens × 4,096 → 14,336, BF16, random data) back
to back for `--seconds`, and every `--window` seconds writes one JSON line: the seconds since
the start, the products' TFLOP/s over the window (CUDA events around the window's products) and
nvidia-smi's SM clock, power draw and temperature read at the window's end. Nothing here depends
on hetplan.
"""

import argparse
import json
import sys
import time

import torch

import kernels  # this folder: Python puts a script's own folder on the path


def smi():
    return kernels.smi("clocks.sm,clocks.mem,power.draw,temperature.gpu", units=False)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=75.0)
    p.add_argument("--window", type=float, default=2.5)
    p.add_argument("--m", type=int, default=16384)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--n", type=int, default=14336)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("sustained.py measures a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    x = torch.randn(a.m, a.k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(a.n, a.k, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * a.m * a.k * a.n
    # Calls per window from a short calibration: about `window` seconds of products each.
    for _ in range(5):
        y = x @ w.t()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        y = x @ w.t()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - t0) / 20
    calls = max(1, int(a.window / per_call))
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "shape": [a.m, a.k, a.n], "calls_per_window": calls, "idle": smi()}),
          flush=True)
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(calls):
            y = x @ w.t()
        e1.record()
        e1.synchronize()
        s = e0.elapsed_time(e1) / 1e3
        print(json.dumps({"t_s": round(time.perf_counter() - start, 2),
                          "tflops": round(flop * calls / s / 1e12, 1), **smi()}), flush=True)
    del y
    return 0


if __name__ == "__main__":
    sys.exit(main())
