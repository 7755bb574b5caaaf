"""Checks hetplan's torchtitan exports with torchtitan's own code (issue 11).

Usage: python check_torchtitan.py EXPORT_DIR [EXPORT_DIR ...]

Each EXPORT_DIR holds `hetplan_job.py` and `launch.sh` written by `hetplan export --to
torchtitan` (torchtitan 0.3.0). For each, what `python -m torchtitan.train --module hetplan_job
--config hetplan_job` does before it touches a GPU:

1. `ConfigManager().parse_args` imports the module the way `torchtitan.train` does
   (`config/manager.py` `_load_config`), runs tyro over its `Trainer.Config` (with a
   `--training.steps` override, as `launch.sh` passes extra arguments on) and
   `_validate_config`; `Trainer.Config.__post_init__` checks the pipeline micro-batches and
   CUDA graphs.
2. The model config's `update_from_config(config=...)`, as `Trainer.__init__` runs it (weight
   tying with pipelining, TP dividing the heads and KV heads, the sequence against RoPE), then
   the model built on the meta device; its parameter count must be hetplan's (`HETPLAN_PARAMS`).
3. `module_fqns_per_model_part`: every name is a module of the model, each of
   `tok_embeddings`, `layers.0` … `layers.L-1`, `norm`, `lm_head` is in exactly one part, in
   model order; torchtitan's `_split_module` keeps exactly those modules for each part; the
   part count is PP times 1 (single-stage schedules) or more (looped schedules).
4. The degrees multiply to the world size `launch.sh` starts (the sum of its `NPROC`s):
   `ParallelDims.from_config` validates them as the trainer does.
5. The batches: the global batch divides into local batch × data-parallel degree (Trainer),
   the local batch into pipeline micro-batches, and torch's schedule accepts the micro-batch
   count (Schedule1F1B: at least the stage count; Interleaved 1F1B: a multiple of its rounds).
6. FP8 (`precision=fp8-rowwise`, the module's `FP8_RECIPE`, which the Rust side checks against
   the plan it exported): torchao's rowwise recipe on every block linear — every operand of
   every product scaled per row, none kept in BF16 (`rowwise_with_gw_hp` would) — the output
   layer in BF16, as hetplan priced it; a BF16 export has no Float8 linear. The converter
   refuses to start without an SM89+ GPU (`Float8LinearConverter.__init__`); this check runs
   where there is none, so the capability check is answered as an H100 would answer it.

Every export is checked; the exit status is 1 if any fails.
"""

import importlib
import logging
import re
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402
from torch.distributed.pipelining.schedules import (  # noqa: E402
    get_schedule_class,
    PipelineScheduleSingle,
    Schedule1F1B,
    ScheduleInterleaved1F1B,
)
from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402
from torchtitan.distributed.pipeline_parallel import _split_module  # noqa: E402
from torchtitan.hf_datasets.text_datasets import DATASETS  # noqa: E402
from torchtitan.models.llama3.model import Llama3Model  # noqa: E402
import torchtitan.components.quantization.float8 as tt_float8  # noqa: E402

# 6. An H100's answer to the converter's capability check (see the docstring).
tt_float8.has_cuda_capability = lambda major, minor: (9, 0) >= (major, minor)

MODULE = "hetplan_job"
CONFIG_FN = "hetplan_job"


def world_size(directory):
    """The processes launch.sh starts: the sum of NPROC over its node ranks."""
    script = (Path(directory) / "launch.sh").read_text()
    nprocs = [int(n) for n in re.findall(r"\bNPROC=(\d+)", script)]
    assert nprocs, "launch.sh sets no NPROC"
    assert "-m torchtitan.train --module hetplan_job --config hetplan_job" in script
    return sum(nprocs)


def load(directory):
    """The export's Trainer.Config, through torchtitan's ConfigManager."""
    path = str(Path(directory).resolve())
    sys.modules.pop(MODULE, None)
    importlib.invalidate_caches()
    sys.path.insert(0, path)
    try:
        config = ConfigManager().parse_args(
            ["--module", MODULE, "--config", CONFIG_FN, "--training.steps", "7"]
        )
        module = sys.modules[MODULE]
    finally:
        sys.path.remove(path)
    assert config.training.steps == 7, "the tyro override did not reach the config"
    return config, module


def check(directory):
    world = world_size(directory)
    config, module = load(directory)
    p = config.parallelism
    t = config.training
    spec = config.model_spec
    assert isinstance(spec.model, Llama3Model.Config), type(spec.model)
    assert config.dataloader.dataset in DATASETS, config.dataloader.dataset

    # 2. The model, as Trainer.__init__ builds it.
    model_config = spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        model = model_config.build()
    model.verify_module_protocol()
    n_layers = len(model_config.layers)
    params = sum(q.numel() for q in model.parameters())
    assert params == module.HETPLAN_PARAMS, (
        f"torchtitan's model has {params:,} parameters, hetplan's {module.HETPLAN_PARAMS:,}"
    )
    attention = model_config.layers[0].attention
    assert (attention.n_heads, attention.n_kv_heads or attention.n_heads) == (
        module.N_HEADS,
        module.N_KV_HEADS,
    )
    ffn = model_config.layers[0].feed_forward
    assert ffn.w1.out_features == module.FFN_HIDDEN_DIM

    # 6. FP8: the blocks' linears in torchao's rowwise recipe, the output layer not.
    float8_linear = getattr(tt_float8, "TorchAOFloat8Linear", None)
    modules = dict(model.named_modules())
    fp8 = [
        name
        for name, m in modules.items()
        if float8_linear is not None and isinstance(m, float8_linear)
    ]
    if getattr(module, "FP8_RECIPE", None) == "rowwise":
        block_linears = [
            name
            for name, m in modules.items()
            if isinstance(m, torch.nn.Linear) and name.startswith("layers.")
        ]
        assert block_linears and sorted(fp8) == sorted(block_linears), (
            f"Float8 linears {fp8[:4]}… are not the blocks' {block_linears[:4]}…"
        )
        for name in fp8:
            recipe = modules[name].config
            # Every operand of every product (Float8LinearConfig fills the *_for_grad_*
            # casts from the others): rowwise_with_gw_hp's are DISABLED (the weight gradient in
            # BF16) or TENSORWISE (the weight for the data gradient).
            casts = [
                recipe.cast_config_input,
                recipe.cast_config_weight,
                recipe.cast_config_grad_output,
                recipe.cast_config_input_for_grad_weight,
                recipe.cast_config_weight_for_grad_input,
                recipe.cast_config_grad_output_for_grad_weight,
            ]
            for cast in casts:
                assert cast.scaling_granularity.name == "AXISWISE", f"{name}: {cast}"
                assert cast.scaling_type.name == "DYNAMIC", f"{name}: {cast}"
        assert "lm_head" not in fp8, "the output layer runs in FP8; hetplan priced it in BF16"
    else:
        assert not fp8, f"a BF16 export with Float8 linears: {fp8[:4]}"

    # 4. The degrees against the launch.
    dims = ParallelDims.from_config(p, world)
    assert (
        dims.dp_replicate * dims.dp_shard * dims.cp * dims.tp * dims.pp == world
    ), f"degrees {dims} do not make {world} ranks"
    assert p.data_parallel_shard_degree >= 1, "the export leaves no degree to infer"

    # 3. The layer split.
    every = ["tok_embeddings"] + [f"layers.{i}" for i in range(n_layers)] + ["norm", "lm_head"]
    named = dict(model.named_modules())
    parts = p.module_fqns_per_model_part
    if dims.pp > 1:
        assert parts is not None, "pipelining without module_fqns_per_model_part"
        flat = [name for part in parts for name in part]
        for name in flat:
            assert name in named, f"{name}: not a module of the model"
        assert sorted(flat) == sorted(every) and len(flat) == len(set(flat)), (
            f"the parts do not hold every module once: {parts}"
        )
        assert flat == every, f"the parts are not in model order: {parts}"
        for part in parts:
            kept = _split_module(model, part)
            have = {n for n, m in kept.named_children() if m is not None}
            have.discard("layers")
            have |= {f"layers.{k}" for k in kept.layers.keys()}
            assert have == set(part), f"_split_module kept {sorted(have)} for {part}"
        schedule = get_schedule_class(p.pipeline_parallel_schedule)
        per_rank = len(parts) // dims.pp
        assert len(parts) % dims.pp == 0, f"{len(parts)} parts over PP {dims.pp}"
        if issubclass(schedule, PipelineScheduleSingle):
            assert per_rank == 1, f"{schedule.__name__} runs one stage per rank"
        else:
            assert per_rank >= 2, f"{schedule.__name__} runs several stages per rank"
        assert t.local_batch_size % p.pipeline_parallel_microbatch_size == 0
        micro = t.local_batch_size // p.pipeline_parallel_microbatch_size
        if schedule is Schedule1F1B:
            assert micro >= len(parts), f"1F1B: {micro} micro-batches, {len(parts)} stages"
        if schedule is ScheduleInterleaved1F1B:
            rounds = max(1, micro // dims.pp)
            assert micro % rounds == 0, f"Interleaved1F1B: {micro} micro-batches, {rounds} rounds"
    else:
        assert parts is None or parts == [every], parts

    # 5. The batches, as Trainer.__init__ checks them.
    dp = dims.dp_replicate * dims.dp_shard
    assert t.global_batch_size > 0
    assert t.global_batch_size % (t.local_batch_size * dp) == 0, (
        f"global batch {t.global_batch_size} is not a multiple of "
        f"{t.local_batch_size} × DP {dp}"
    )
    if p.enable_sequence_parallel and dims.tp > 1:
        assert t.seq_len % dims.tp == 0
    return dims, n_layers, parts


def main(dirs):
    failed = 0
    for d in dirs:
        try:
            dims, n_layers, parts = check(d)
            split = "" if parts is None else " (" + ", ".join(str(len(q)) for q in parts) + ")"
            print(
                f"ok  {d}: {n_layers} layers, PP {dims.pp}{split}, TP {dims.tp}, "
                f"DP {dims.dp_replicate}x{dims.dp_shard}"
            )
        except Exception as e:  # every export is checked and reported
            failed += 1
            print(f"FAIL {d}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
