"""Whole training steps on one GPU beside hetplan's estimate, including ones hetplan says do
not fit: the check of the time and of the out-of-memory verdict on this device.

    python3 tools/gpu_check/steps.py --gpu h200 > steps.jsonl

Each line is `hetplan.step.compare`'s result for one (model, sequence, micro-batch) of
`CASES`, run in this one process (the allocator's cache emptied between them). The cases are
chosen around the device's memory: some hetplan estimates to fit with little room, some it
estimates not to fit by a few GiB, so the measured peaks (or out-of-memory errors) test the
memory model where it matters.
"""

import argparse
import gc
import json
import sys

import hetplan
from hetplan import step

# (model, sequence length, micro-batch size, AdamW implementation), for a 141 GB H200: AdamW in FP32 states with
# BF16 autocast, no checkpointing (hetplan.step's recipe).
CASES = [
    ("gpt3-1.3b", 2048, 8, "fused"),
    ("gpt3-1.3b", 2048, 16, "fused"),
    ("gpt3-2.7b", 2048, 8, "fused"),
    ("llama2-7b", 2048, 1, "fused"),
    ("llama2-7b", 2048, 1, "foreach"),
    ("llama2-7b", 2048, 2, "fused"),
    ("llama2-7b", 4096, 1, "fused"),
    ("llama2-7b", 2048, 4, "fused"),
    ("llama2-7b", 2048, 5, "fused"),
    ("llama3-8b", 2048, 1, "fused"),
    ("llama3-8b", 2048, 1, "foreach"),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpu", required=True)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", default=None, help="MODEL:SEQ:MBS:OPTIMIZER,... of CASES to run (default: all)")
    a = p.parse_args()
    only = set(a.only.split(",")) if a.only else None
    import torch

    for name, seq, mbs, optimizer in CASES:
        if only is not None and f"{name}:{seq}:{mbs}:{optimizer}" not in only:
            continue
        print(f"steps: {name} seq {seq} mbs {mbs} {optimizer}", file=sys.stderr, flush=True)
        try:
            r = step.compare(hetplan.model(name), a.gpu, seq_len=seq, mbs=mbs,
                             repeats=a.repeats, optimizer=optimizer)
        except (hetplan.HetplanError, RuntimeError) as e:
            r = {"model": name, "seq_len": seq, "mbs": mbs, "optimizer": optimizer, "error": str(e).split("\n")[0]}
        print(json.dumps(r), flush=True)
        gc.collect()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
