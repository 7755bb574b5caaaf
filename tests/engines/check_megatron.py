"""Checks hetplan's Megatron-LM exports with megatron-core's own code (issue 11).

Usage: python check_megatron.py EXPORT_DIR [EXPORT_DIR ...]

Each EXPORT_DIR holds a `megatron_args.json` written by `hetplan export --to megatron`. The
arguments are mapped to the fields they set, the way Megatron-LM's `arguments.py` does it (the
`ArgumentGroupFactory` turns `--num-query-groups` into `num_query_groups`; `--swiglu` sets a
gated linear unit with SiLU), and megatron-core then does what `pretrain_gpt.py` does with
them before any GPU is touched: it parses the pipeline layout
(`PipelineParallelLayerLayout.from_str`) and builds the `TransformerConfig`, whose
`__post_init__` validates the shapes, the parallel sizes, the recompute settings and the
layout against the layer count. Every export is checked; the exit status is 1 if any fails.
"""

import json
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from megatron.core.transformer.enums import AttnBackend  # noqa: E402
from megatron.core.transformer.pipeline_parallel_layer_layout import (  # noqa: E402
    PipelineParallelLayerLayout,
)
from megatron.core.transformer.transformer_config import (  # noqa: E402
    MLATransformerConfig,
    TransformerConfig,
)

# Flags whose value is one of TransformerConfig's (or ModelParallelConfig's) fields, by type.
INT_FIELDS = {
    "num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups",
    "kv-channels", "tensor-model-parallel-size", "pipeline-model-parallel-size",
    "recompute-num-layers", "moe-router-topk", "moe-ffn-hidden-size",
    "moe-shared-expert-intermediate-size", "expert-model-parallel-size", "context-parallel-size",
    "expert-tensor-parallel-size",
    "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim",
}
FLOAT_FIELDS = {"attention-dropout", "hidden-dropout", "moe-expert-capacity-factor"}
STR_FIELDS = {"normalization", "recompute-granularity", "recompute-method",
              "pipeline-model-parallel-layout", "cp-comm-type", "fp8-format"}
BOOL_FIELDS = {"sequence-parallel", "bf16", "fp16", "add-qkv-bias", "qk-layernorm",
               "multi-latent-attention", "tp-comm-overlap"}
# Flags of the training script, not of the model config (checked for shape only).
TRAINING_FLAGS = {
    "seq-length": int, "max-position-embeddings": int, "micro-batch-size": int,
    "global-batch-size": int, "vocab-size": int, "train-iters": int, "lr": float,
    "lr-decay-style": str, "log-interval": int, "tokenizer-type": str,
    "position-embedding-type": str, "data-parallel-sharding-strategy": str,
    "optimizer-offload-fraction": float, "attention-backend": str, "num-experts": int,
    "window-size": str, "window-attn-skip-freq": str, "moe-layer-freq": str,
    "megatron-fsdp-main-grads-dtype": str,
}
TRAINING_SWITCHES = {
    "mock-data", "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather",
    "use-megatron-fsdp", "optimizer-cpu-offload", "use-precision-aware-optimizer",
    "untie-embeddings-and-output-weights", "group-query-attention", "swiglu",
    "disable-bias-linear", "grad-reduce-in-bf16", "accumulate-allreduce-grads-in-fp32",
    "fp8-param-gather",
}


def parse(args):
    """`--flag value` and `--switch` into a dict; unknown flags are an error."""
    out, i = {}, 0
    while i < len(args):
        flag = args[i]
        assert flag.startswith("--"), f"expected a flag, got {flag!r}"
        name = flag[2:]
        known = (INT_FIELDS | FLOAT_FIELDS | STR_FIELDS | set(TRAINING_FLAGS))
        if name in BOOL_FIELDS or name in TRAINING_SWITCHES:
            out[name] = True
            i += 1
        elif name in known:
            value = args[i + 1]
            kind = (int if name in INT_FIELDS else float if name in FLOAT_FIELDS
                    else str if name in STR_FIELDS else TRAINING_FLAGS[name])
            out[name] = kind(value)
            i += 2
        else:
            raise AssertionError(f"{flag}: not a flag this checker knows Megatron to take")
    return out


def config_kwargs(a):
    """What arguments.py's `core_transformer_config_from_args` would pass."""
    kw = {}
    for name in INT_FIELDS | FLOAT_FIELDS | STR_FIELDS | BOOL_FIELDS:
        if name in a:
            kw[name.replace("-", "_")] = a[name]
    # arguments.py: `--fp8-format` has `dest='fp8'`, TransformerConfig's `fp8` ("e4m3",
    # "hybrid").
    if "fp8_format" in kw:
        kw["fp8"] = kw.pop("fp8_format")
    if "num-experts" in a:
        kw["num_moe_experts"] = a["num-experts"]
    # arguments.py: `--window-size` is `tuple_type` ("L,R"), `--window-attn-skip-freq`
    # `moe_freq_type` (an int, or a Python list expression of 1 = sliding, 0 = full).
    if "window-size" in a:
        kw["window_size"] = tuple(int(i) for i in a["window-size"].strip("()").split(","))
    if "moe-layer-freq" in a:
        f = a["moe-layer-freq"]
        kw["moe_layer_freq"] = [int(i) for i in f.strip("[]").split(",")] if "[" in f else int(f)
    if "window-attn-skip-freq" in a:
        f = a["window-attn-skip-freq"]
        kw["window_attn_skip_freq"] = [int(i) for i in f.strip("[]").split(",")] if "[" in f else int(f)
    if a.get("swiglu"):
        kw["gated_linear_unit"] = True
        kw["activation_func"] = F.silu
        kw["bias_activation_fusion"] = False
    if a.get("disable-bias-linear"):
        kw["add_bias_linear"] = False
    if "attention-backend" in a:
        kw["attention_backend"] = AttnBackend[a["attention-backend"]]
    if a.get("bf16"):
        kw["params_dtype"] = torch.bfloat16
    if a.get("fp16"):
        kw["params_dtype"] = torch.float16
    # arguments.py: `kw_args['pipeline_dtype'] = args.params_dtype`.
    kw["pipeline_dtype"] = kw.get("params_dtype", torch.float32)
    return kw


def check(directory):
    args = json.loads((Path(directory) / "megatron_args.json").read_text())
    a = parse(args)
    pp = a["pipeline-model-parallel-size"]
    layout = a.get("pipeline-model-parallel-layout")
    if layout is not None:
        parsed = PipelineParallelLayerLayout.from_str(layout, pp)
        parsed.validate_layer_layout(a["num-layers"], None)
    kw = config_kwargs(a)
    if a.get("multi-latent-attention"):
        # arguments.py builds an MLATransformerConfig for --multi-latent-attention; without
        # --q-lora-rank the query projection is plain (q_lora_rank None).
        kw.setdefault("q_lora_rank", None)
        cfg = MLATransformerConfig(**kw)
    else:
        cfg = TransformerConfig(**kw)
    # What the launch relies on: the batch divides into micro-batches on every DP rank.
    assert a["global-batch-size"] % a["micro-batch-size"] == 0
    if a.get("group-query-attention"):
        assert cfg.num_query_groups == a["num-query-groups"]
    if a.get("sequence-parallel"):
        assert cfg.tensor_model_parallel_size > 1
    # arguments.py: "Tensor parallel communication/GEMM overlap can happen only when sequence
    # parallelism is enabled" (and sequence parallelism is turned off without TP).
    if a.get("tp-comm-overlap"):
        assert a.get("sequence-parallel") and cfg.tp_comm_overlap
    if "optimizer-offload-fraction" in a:
        assert 0.0 < a["optimizer-offload-fraction"] <= 1.0 and a.get("optimizer-cpu-offload")
    if a.get("use-megatron-fsdp"):
        assert pp == 1
    # arguments.py: `--megatron-fsdp-main-grads-dtype` choices, read by Megatron-FSDP only.
    if "megatron-fsdp-main-grads-dtype" in a:
        assert a["megatron-fsdp-main-grads-dtype"] in {"fp32", "bf16", "fp16", "auto"}
        assert a.get("use-megatron-fsdp")
    # arguments.py: "seq-length should be a multiple of 2 * context-parallel-size".
    cp = a.get("context-parallel-size", 1)
    if cp > 1:
        assert a["seq-length"] % (2 * cp) == 0, "sequence not in 2 * cp chunks"
    return cfg


def main(dirs):
    failed = 0
    for d in dirs:
        try:
            cfg = check(d)
            print(f"ok  {d}: {cfg.num_layers} layers, TP {cfg.tensor_model_parallel_size}, "
                  f"PP {cfg.pipeline_model_parallel_size}")
        except Exception as e:  # every export is checked and reported
            failed += 1
            print(f"FAIL {d}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
