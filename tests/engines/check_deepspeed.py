"""Checks hetplan's DeepSpeed exports with DeepSpeed's own code (issue 11).

Usage: python check_deepspeed.py EXPORT_DIR [EXPORT_DIR ...]

For each export (`hetplan export --to deepspeed`):
- `ds_config.json` is read by DeepSpeed's `DeepSpeedConfig`, which checks the batch arithmetic
  (`train_batch_size == micro-batch x accumulation steps x data-parallel size`, the DP size taken
  from the export's `ranks.json`), the ZeRO and offload sections and their combinations;
- `hetplan_pipeline.py`, when there is one, runs inside DeepSpeed's real `PipelineModule`: one
  process per pipeline stage on the gloo backend (CPU) builds `HetplanPipelineModule` over
  `NUM_LAYERS` small layers, and each stage must own exactly `PARTS[s]..PARTS[s+1]`.
DeepSpeed compiles its shared-memory communication op the first time (ninja and a C++
compiler; ninja from the same environment must be on PATH). Exit status 1 if any export fails.
"""

import json
import os
import queue as queues
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def init_gloo(rank, world, store):
    """Joins a gloo group that meets through the file `store`, then hands it to DeepSpeed.

    A file, not a TCP port: a port picked free here can be taken by any other process (the
    engine tests run side by side, and gloo opens ephemeral ports of its own) before rank 0
    listens on it, and then every rank waits out the store's ten-minute timeout. DeepSpeed
    skips its own set-up for a group already made; the environment it reads is still set
    (MASTER_PORT unused).
    """
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="1", RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import deepspeed
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=Path(store).as_uri(), rank=rank,
                            world_size=world)
    deepspeed.init_distributed(dist_backend="gloo")


def new_store():
    """A path for a group's file store, in a fresh directory (the file must not exist yet)."""
    return os.path.join(tempfile.mkdtemp(prefix="hetplan-ds-"), "store")


class Mpu:
    """What DeepSpeedConfig asks of a model-parallel unit: the data-parallel size."""

    def __init__(self, dp, tp):
        self.dp, self.tp = dp, tp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp


def check_config(directory):
    from deepspeed.runtime.config import DeepSpeedConfig

    ranks = json.loads((directory / "ranks.json").read_text())
    config = json.loads((directory / "ds_config.json").read_text())
    c = DeepSpeedConfig(config, mpu=Mpu(ranks["data_parallel"], ranks["tensor_parallel"]))
    world = ranks["pipeline_stages"] * ranks["data_parallel"] * ranks["tensor_parallel"]
    assert world == ranks["world_size"], f"degrees make {world} ranks, the launch {ranks['world_size']}"
    return c


def stage_bounds(rank, world, store, directory, queue):
    warnings.filterwarnings("ignore")
    import torch
    from deepspeed.pipe import LayerSpec

    init_gloo(rank, world, store)
    sys.path.insert(0, str(directory))
    import hetplan_pipeline as hp

    layers = [LayerSpec(torch.nn.Linear, 2, 2) for _ in range(hp.NUM_LAYERS)]
    m = hp.HetplanPipelineModule(layers=layers)
    queue.put((m.stage_id, m._local_start, m._local_stop, list(m.parts)))


def check_pipeline(directory):
    import torch.multiprocessing as mp

    source = directory / "hetplan_pipeline.py"
    if not source.exists():
        return
    ranks = json.loads((directory / "ranks.json").read_text())
    parts = ranks["parts"]
    world = ranks["pipeline_stages"]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = new_store()
    procs = [ctx.Process(target=stage_bounds, args=(r, world, store, directory, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    got, deadline = [], time.time() + 600
    while len(got) < world:
        try:
            got.append(queue.get(timeout=2))
        except queues.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.time() > deadline:
                for p in procs:
                    p.kill()
            assert not failed, f"a stage process failed (exit codes {failed})"
            assert time.time() < deadline, "the stage processes did not answer in 10 minutes"
    got.sort()
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"a stage process failed ({p.exitcode})"
    shutil.rmtree(os.path.dirname(store), ignore_errors=True)
    for stage, start, stop, module_parts in got:
        assert module_parts == parts, f"PipelineModule parts {module_parts}, ranks.json {parts}"
        assert (start, stop) == (parts[stage], parts[stage + 1]), (
            f"stage {stage} owns layers {start}..{stop}, the plan {parts[stage]}..{parts[stage + 1]}")
    assert [g[0] for g in got] == list(range(world))


def main(dirs):
    init_gloo(0, 1, new_store())
    failed = 0
    for d in dirs:
        d = Path(d).resolve()
        try:
            c = check_config(d)
            check_pipeline(d)
            print(f"ok  {d}: batch {c.train_batch_size} = {c.train_micro_batch_size_per_gpu} x "
                  f"{c.gradient_accumulation_steps} x DP, ZeRO-{c.zero_optimization_stage}")
        except Exception as e:  # every export is checked and reported
            failed += 1
            print(f"FAIL {d}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
