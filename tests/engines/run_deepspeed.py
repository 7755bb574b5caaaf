"""Trains a tiny model with DeepSpeed, as hetplan exported the plan: a real run (issue 11).

Usage: python run_deepspeed.py EXPORT_DIR [STEPS]
       bash EXPORT_DIR/launch.sh run_deepspeed.py --under-torchrun EXPORT_DIR [STEPS]
           (on every node rank: the export's own launch starts the ranks; each prints a
           `RESULT` line and the caller compares them)

One process per rank of the export's `ranks.json` on the gloo backend (CPU): each builds the
export's `HetplanPipelineModule` over `NUM_LAYERS` small linear layers (width 16, an MSE loss),
hands it and the export's `ds_config.json` (plus an SGD optimizer: the export leaves the
optimizer to the user) to `deepspeed.initialize`, and runs STEPS (default 3) pipeline steps of
`train_batch` on synthetic data. It fails unless every rank finishes, every loss is finite,
the ranks agree on each step's loss, and each stage holds the parameters of exactly its layers
of the split. Plans must be FP32 (`precision=fp32`): the CPU has no BF16 matmuls worth running.
"""

import json
import math
import os
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

WIDTH = 16


def worker(rank, world, store, directory, steps, queue):
    """One rank of a run without torchrun, the ranks meeting through the file `store`
    (`check_deepspeed.init_gloo`)."""
    from check_deepspeed import init_gloo

    init_gloo(rank, world, store)
    queue.put(train(directory, steps))


def train(directory, steps):
    """One rank's run, in torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)."""
    warnings.filterwarnings("ignore")
    import deepspeed
    import torch
    from deepspeed.pipe import LayerSpec

    deepspeed.init_distributed(dist_backend="gloo")
    sys.path.insert(0, str(directory))
    import hetplan_pipeline as hp

    torch.manual_seed(0)
    layers = [LayerSpec(torch.nn.Linear, WIDTH, WIDTH) for _ in range(hp.NUM_LAYERS)]
    model = hp.HetplanPipelineModule(layers=layers, loss_fn=torch.nn.MSELoss())
    config = json.loads((directory / "ds_config.json").read_text())
    config["optimizer"] = {"type": "SGD", "params": {"lr": 0.01}}
    # The optimizer is this test's choice, not the export's: let ZeRO shard it.
    config["zero_allow_untested_optimizer"] = True
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
        config=config)
    mbs = config["train_micro_batch_size_per_gpu"]

    def batches():
        g = torch.Generator().manual_seed(1 + engine.grid.get_data_parallel_id())
        while True:
            x = torch.randn(mbs, WIDTH, generator=g)
            yield x, 0.5 * x

    data = batches()
    losses = [float(engine.train_batch(data_iter=data)) for _ in range(steps)]
    owned = sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))
    return (int(os.environ["RANK"]), model.stage_id, owned, losses)


def main(directory, steps):
    from check_deepspeed import run_ranks

    directory = Path(directory).resolve()
    world = json.loads((directory / "ranks.json").read_text())["world_size"]
    results = run_ranks(worker, world, (directory, steps), 900)
    judge(directory, results, steps)


def judge(directory, results, steps):
    """Every rank ran its stage's layers and all agree on finite losses."""
    ranks = json.loads((directory / "ranks.json").read_text())
    world, parts = ranks["world_size"], ranks["parts"]
    assert sorted(r[0] for r in results) == list(range(world)), [r[0] for r in results]
    for rank, stage, owned, losses in results:
        assert owned == parts[stage + 1] - parts[stage], (
            f"rank {rank} (stage {stage}) holds {owned} layers, the split {parts}")
        assert len(losses) == steps and all(math.isfinite(x) for x in losses), losses
    first = results[0][3]
    assert all(r[3] == first for r in results), "ranks disagree on the loss"
    print(f"ok  {directory}: {world} processes, {steps} steps, losses "
          + ", ".join(f"{x:.4f}" for x in first))


if __name__ == "__main__":
    if sys.argv[1] == "--under-torchrun":
        out = train(Path(sys.argv[2]).resolve(), int(sys.argv[3]) if len(sys.argv) > 3 else 3)
        print("RESULT " + json.dumps(out), flush=True)
    elif sys.argv[1] == "--judge":
        # The RESULT lines of every rank on stdin.
        lines = [json.loads(l[len("RESULT "):]) for l in sys.stdin if l.startswith("RESULT ")]
        judge(Path(sys.argv[2]).resolve(), sorted(tuple(r) for r in lines),
              int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    else:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
