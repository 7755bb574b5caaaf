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
import zlib
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("DS_ACCELERATOR", "cpu")


def init_gloo(rank, world, store):
    """Joins a gloo group of `world` ranks that meet through the file `store`, then hands it to
    DeepSpeed.

    A file, not a TCP port: a port picked free here can be taken by any other process (the
    engine tests run side by side, and gloo opens ephemeral ports of its own) before rank 0
    listens on it, and then every rank waits out the store's timeout. DeepSpeed skips its own
    set-up for a group already made (deepspeed/comm/comm.py `init_distributed`); the
    environment it reads is still set, MASTER_PORT to a token of the store (DeepSpeed's CPU
    shared-memory buffers are named after it) rather than a port.
    """
    from datetime import timedelta

    token = 10000 + zlib.crc32(store.encode()) % 50000
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(token), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    import deepspeed
    import torch.distributed as dist

    # DeepSpeed's own default timeout (deepspeed/constants.py), not torch's half hour.
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world, timeout=timedelta(minutes=10))
    deepspeed.init_distributed(dist_backend="gloo")


def new_store():
    """A path for a group's file store, in a fresh directory (the file must not exist yet)."""
    return os.path.join(tempfile.mkdtemp(prefix="hetplan-ds-"), "store")


def run_ranks(target, world, args, limit_s):
    """Runs `target(rank, world, store, *args, queue)` in one spawned process per rank, the
    ranks meeting through a fresh file store; returns what each put on `queue`, sorted. A rank
    that fails, or a run past `limit_s` seconds, stops the others and raises."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = new_store()
    procs = [ctx.Process(target=target, args=(r, world, store, *args, queue))
             for r in range(world)]
    try:
        for p in procs:
            p.start()
        got, deadline = [], time.time() + limit_s
        while len(got) < world:
            try:
                got.append(queue.get(timeout=2))
            except queues.Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not failed, f"a rank failed (exit codes {[p.exitcode for p in procs]})"
                assert time.time() < deadline, f"the ranks did not finish in {limit_s} s"
        for p in procs:
            p.join()
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        return sorted(got)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


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
    source = directory / "hetplan_pipeline.py"
    if not source.exists():
        return
    ranks = json.loads((directory / "ranks.json").read_text())
    parts = ranks["parts"]
    world = ranks["pipeline_stages"]
    got = run_ranks(stage_bounds, world, (directory,), 600)
    for stage, start, stop, module_parts in got:
        assert module_parts == parts, f"PipelineModule parts {module_parts}, ranks.json {parts}"
        assert (start, stop) == (parts[stage], parts[stage + 1]), (
            f"stage {stage} owns layers {start}..{stop}, the plan {parts[stage]}..{parts[stage + 1]}")
    assert [g[0] for g in got] == list(range(world))


def main(dirs):
    store = new_store()
    try:
        init_gloo(0, 1, store)
        failed = 0
        for d in dirs:
            d = Path(d).resolve()
            try:
                c = check_config(d)
                check_pipeline(d)
                print(f"ok  {d}: batch {c.train_batch_size} = "
                      f"{c.train_micro_batch_size_per_gpu} x {c.gradient_accumulation_steps} x DP, "
                      f"ZeRO-{c.zero_optimization_stage}")
            except Exception as e:  # every export is checked and reported
                failed += 1
                print(f"FAIL {d}: {type(e).__name__}: {e}")
        return 1 if failed else 0
    finally:
        # The group's store is read again whenever a group is made: removed at the end.
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
