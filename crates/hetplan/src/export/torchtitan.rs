//! torchtitan: a config module (`hetplan_job.py`) whose function returns the job's
//! `Trainer.Config`, one `torchrun` per node, and a README.
//!
//! Written for torchtitan 0.3.0 (PyPI; torch 2.15), whose configuration is Python, not TOML:
//! `python -m torchtitan.train --module M --config F` imports `M` (a short name such as `llama3`,
//! or any importable module: `config/manager.py` `_load_config` tries `M.config_registry`, then
//! `M`), calls `F()` for a `Trainer.Config` and applies tyro overrides `--section.key value`.
//! Every name the module uses was read in the installed package
//! (`site-packages/torchtitan/…`, line numbers of 0.3.0):
//! - the model: torchtitan's Llama 3 (`models/llama3/__init__.py`): `Llama3Model.Config(dim,
//!   vocab_size, enable_weight_tying, tok_embeddings, norm, lm_head, layers)`
//!   (`models/common/decoder.py:70`, `models/llama3/model.py:62`), its blocks from
//!   `_build_llama3_layers(n_layers, dim, n_heads, n_kv_heads, hidden_dim, rope, fuse_qkv,
//!   attn_backend)` (`models/llama3/__init__.py:69`; head dim = dim / n_heads, SwiGLU
//!   `FeedForward` w1/w2/w3, RMSNorm, no biases), `Embedding.Config(num_embeddings,
//!   embedding_dim, param_init)`, `RMSNorm.Config(normalized_shape, param_init)`,
//!   `Linear.Config(in_features, out_features, param_init)`, `ComplexRoPE.Config(dim,
//!   max_seq_len, theta)` (`models/common/rope.py:95`), the inits `_EMBEDDING_INIT`,
//!   `_EMBEDDING_SKIP_INIT`, `_NORM_INIT`, `_output_linear_init` and the spec of
//!   `model_registry` (`models/llama3/__init__.py:369`: parallelize, pipelining and state-dict
//!   functions) with this model in it (`dataclasses.replace(…, flavor, model)`). Its modules are
//!   `tok_embeddings`, `layers.<i>`, `norm`, `lm_head` (`models/common/decoder.py:197-204`):
//!   hetplan's layers [embedding, block 0..L-1, head] map to `tok_embeddings`, `layers.i`, and
//!   `norm` + `lm_head`.
//! - `ParallelismConfig` (`config/configs.py:112`): `data_parallel_replicate_degree` (ZeRO-0:
//!   replicas) or `data_parallel_shard_degree` (ZeRO-3: FSDP2), `tensor_parallel_degree`,
//!   `enable_sequence_parallel` (on by default: always written), `pipeline_parallel_degree`,
//!   `module_fqns_per_model_part` (each stage's modules, in stage order; stage `i` on pipeline
//!   rank `i mod PP`, `distributed/pipeline_parallel.py:567`), `pipeline_parallel_schedule`
//!   (`1F1B`, `Interleaved1F1B`, `GPipe`: torch's `get_schedule_class`),
//!   `pipeline_parallel_microbatch_size`;
//! - `TrainingConfig` (`config/configs.py:36`): `local_batch_size` (per data-parallel rank and
//!   accumulation step; with pipelining split into micro-batches), `global_batch_size`,
//!   `seq_len`, `steps`, `enable_cpu_offload`, `mixed_precision_param` (`bfloat16`, `float32`:
//!   no FP16), `disable_cuda_graphs` (required with pipelining, `trainer.py:185`);
//! - `activation_checkpoint`: `None`, `SelectiveAC.Config()` (its op-level policy,
//!   `Recompute::Ops`) or `FullAC.Config()`
//!   (`distributed/activation_checkpoint.py:332`);
//! - `compile=CompileConfig(enable=True)` unless the plan runs eagerly (`Plan::compile`: hetplan
//!   priced the elementwise work and the loss fused), `components=["model"]` for a plan whose
//!   loss runs eagerly, `enable_async_tensor_parallel=True` for a plan with TP communication
//!   overlap (`config/configs.py:291`; async TP is an Inductor pass);
//! - data: `HuggingFaceTextDataLoader.Config(dataset="c4_test")` and `hf_assets_path=
//!   "./tests/assets/tokenizer"`, as `llama3_debugmodel` (`models/llama3/config_registry.py`)
//!   trains without downloads from a torchtitan checkout; torchtitan has no mock dataset;
//! - `loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size))`,
//!   `optimizer=default_adamw(lr)`, `metrics=MetricsProcessor.Config(log_freq)` as the llama3
//!   configs set them.
//!
//! Batches: with pipelining one accumulation step runs all the plan's micro-batches through the
//! pipeline (`local_batch_size` = micro-batches × micro-batch size, split by
//! `pipeline_parallel_microbatch_size`, `trainer.py:434`); without, `local_batch_size` is the
//! micro-batch and torchtitan accumulates global / (local × DP) = the plan's micro-batches.
//!
//! Rank order: torchtitan unflattens the world mesh as `("pp", "dp_replicate", "dp_shard",
//! "cp", "tp")` (`distributed/parallel_dims.py:318`, `init_device_mesh` over ranks in order):
//! pipeline stage outermost, TP fastest, which is [`ranks::stage_major`].
//!
//! What torchtitan checks and the export refuses up front: weight tying with pipelining
//! (`models/common/decoder.py:141`), a TP degree that does not divide the heads and the KV heads
//! (`decoder.py:151,156`), a sequence that sequence parallelism cannot split (`trainer.py:312`),
//! global batch = local batch × DP × accumulation steps (`trainer.py:424`), 1F1B with fewer
//! micro-batches than stages and Interleaved 1F1B with a micro-batch count that is not a
//! multiple of its rounds (`torch/distributed/pipelining/schedules.py:1441,4122`).

use super::ranks::{self, RankLayout};
use super::{shell_quote, Export, ExportError, ExportFile, Job, Target};
use crate::model::{AttnImpl, LayerKind, MlpKind, Model, NormKind, PositionKind};
use crate::plan::runtime::Runtime;
use crate::plan::{Compile, Plan, Precision, Recompute, Schedule};

/// The module `torchtitan.train --module` imports (the file `hetplan_job.py`).
pub const MODULE: &str = "hetplan_job";
/// The function in it `--config` names.
pub const CONFIG_FN: &str = "hetplan_job";

/// Every keyword the job module passes to torchtitan, with where it was read
/// (`site-packages/torchtitan/…` of 0.3.0). A test checks the module uses no other.
pub const KEYWORDS: &[(&str, &str)] = &[
    (
        "dim",
        "models/common/decoder.py:71 Decoder.Config; models/common/rope.py:95 RoPE.Config",
    ),
    ("vocab_size", "models/common/decoder.py:72"),
    ("enable_weight_tying", "models/common/decoder.py:83"),
    ("tok_embeddings", "models/common/decoder.py:74"),
    ("norm", "models/common/decoder.py:75"),
    ("lm_head", "models/common/decoder.py:73"),
    ("layers", "models/common/decoder.py:79"),
    ("num_embeddings", "models/common/embedding.py:32"),
    ("embedding_dim", "models/common/embedding.py:33"),
    ("param_init", "protocols/module.py:58 Module.Config"),
    (
        "normalized_shape",
        "models/common/nn_modules.py:139 RMSNorm.Config",
    ),
    ("in_features", "models/common/linear.py:31"),
    ("out_features", "models/common/linear.py:32"),
    (
        "n_layers",
        "models/llama3/__init__.py:69 _build_llama3_layers",
    ),
    (
        "n_heads",
        "models/llama3/__init__.py:69 _build_llama3_layers",
    ),
    (
        "n_kv_heads",
        "models/llama3/__init__.py:69 _build_llama3_layers",
    ),
    (
        "hidden_dim",
        "models/llama3/__init__.py:69 _build_llama3_layers",
    ),
    ("rope", "models/llama3/__init__.py:69 _build_llama3_layers"),
    (
        "fuse_qkv",
        "models/llama3/__init__.py:69 _build_llama3_layers",
    ),
    (
        "attn_backend",
        "models/llama3/__init__.py:69; config_utils.py:71 (flex)",
    ),
    ("max_seq_len", "models/common/rope.py:96"),
    ("theta", "models/common/rope.py:97"),
    ("flavor", "protocols/model_spec.py:37 ModelSpec"),
    ("model", "protocols/model_spec.py:38 ModelSpec"),
    ("hf_assets_path", "trainer.py:79"),
    ("model_spec", "trainer.py:77"),
    ("loss", "trainer.py:116"),
    (
        "loss_fn",
        "components/loss.py:613 ChunkedLossWrapper.Config",
    ),
    (
        "global_vocab_size",
        "components/loss.py:343 CrossEntropyLoss.Config",
    ),
    ("optimizer", "trainer.py:97"),
    ("lr", "components/optimizer/optimizer.py:378 default_adamw"),
    ("metrics", "trainer.py:90"),
    (
        "log_freq",
        "components/metrics.py:279 MetricsProcessor.Config",
    ),
    ("training", "trainer.py:103"),
    ("local_batch_size", "config/configs.py:37"),
    ("global_batch_size", "config/configs.py:43"),
    ("seq_len", "config/configs.py:52"),
    ("steps", "config/configs.py:58"),
    ("enable_cpu_offload", "config/configs.py:61"),
    ("disable_cuda_graphs", "config/configs.py:66"),
    ("mixed_precision_param", "config/configs.py:85"),
    ("dataloader", "trainer.py:96"),
    ("dataset", "hf_datasets/text_datasets.py:247"),
    ("parallelism", "trainer.py:104"),
    ("data_parallel_replicate_degree", "config/configs.py:113"),
    ("data_parallel_shard_degree", "config/configs.py:124"),
    ("tensor_parallel_degree", "config/configs.py:157"),
    ("enable_sequence_parallel", "config/configs.py:160"),
    ("pipeline_parallel_degree", "config/configs.py:174"),
    ("module_fqns_per_model_part", "config/configs.py:181"),
    ("pipeline_parallel_schedule", "config/configs.py:210"),
    ("pipeline_parallel_microbatch_size", "config/configs.py:226"),
    ("activation_checkpoint", "trainer.py:108"),
    ("compile", "trainer.py:111"),
    ("enable", "config/configs.py:292 CompileConfig"),
    ("components", "config/configs.py:301 CompileConfig"),
    (
        "enable_async_tensor_parallel",
        "config/configs.py:295 CompileConfig",
    ),
];

/// Every reason torchtitan cannot run `plan` of `model` at `seq_len` (empty: it can).
pub fn reasons(model: &Model, plan: &Plan, seq_len: u64) -> Vec<String> {
    checked(model, plan, seq_len).err().unwrap_or_default()
}

/// The collectives' element types torchtitan cannot take: it reduce-scatters gradients in FP32
/// only (`Runtime::gradient_dtype`) and gathers the parameters in `mixed_precision_param`, the
/// training precision (FP8 gathers belong to torchao's tensorwise recipe, which hetplan does
/// not export).
fn collective_dtype_reasons(plan: &Plan) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(g) = (plan.collective_dtypes.gradients)
        .filter(|&g| Some(g) != Runtime::Torchtitan.gradient_dtype())
    {
        why.push(format!(
            "torchtitan reduces gradients in FP32 only (mixed_precision_reduce); the plan \
             reduces them in {} (collective_dtypes.gradients)",
            g.name().to_uppercase()
        ));
    }
    if let Some(p) = (plan.collective_dtypes.params).filter(|&p| p != plan.precision) {
        why.push(format!(
            "torchtitan gathers parameters in the training precision (mixed_precision_param); \
             the plan gathers them in {} (collective_dtypes.params)",
            p.name().to_uppercase()
        ));
    }
    why
}

/// The rank layout when torchtitan runs the plan; every reason otherwise.
fn checked(model: &Model, plan: &Plan, seq_len: u64) -> Result<RankLayout, Vec<String>> {
    let mut why = Runtime::Torchtitan.why_not(plan);
    why.extend(model_reasons(model));
    why.extend(plan_reasons(model, plan, seq_len));
    why.extend(collective_dtype_reasons(plan));
    let layout = ranks::stage_major(plan).map_err(|mut w| why.append(&mut w));
    match layout {
        Ok(l) if why.is_empty() => Ok(l),
        _ => Err(why),
    }
}

/// The export of `job` for torchtitan, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let plan: &Plan = job.plan;
    let layout =
        checked(job.model, plan, job.seq_len).map_err(|reasons| ExportError::Unsupported {
            target: Target::Torchtitan,
            reasons,
        })?;
    let mut notes = Vec::new();
    if let Some(cfg) = &job.model.transformer {
        if cfg.dropout {
            notes.push("the model has dropout; torchtitan's Llama 3 model has none".to_string());
        }
        if cfg.attn_impl == AttnImpl::Torch {
            notes.push(
                "hetplan modelled unfused attention (s × s scores kept); torchtitan runs \
                 FlexAttention, which keeps none"
                    .to_string(),
            );
        }
    }
    let files = vec![
        ExportFile {
            path: format!("{MODULE}.py"),
            contents: job_module(job),
            executable: false,
        },
        super::ranks_file(plan, &layout),
        ExportFile {
            path: "launch.sh".into(),
            contents: launch_script(job, &layout),
            executable: true,
        },
        ExportFile {
            path: "README.md".into(),
            contents: readme(job, &layout, &notes),
            executable: false,
        },
    ];
    Ok(Export {
        target: Target::Torchtitan,
        files,
        layout,
    })
}

/// Why torchtitan's Llama 3 model cannot be `model`: every difference of structure.
pub fn model_reasons(model: &Model) -> Vec<String> {
    let Some(cfg) = &model.transformer else {
        return vec![format!(
            "torchtitan's Llama 3 model is a transformer; {} is a layer list without one",
            model.name
        )];
    };
    let mut why = super::quirk_reasons(cfg, "torchtitan", &[]);
    if cfg.moe.is_some() {
        why.push(
            "hetplan exports dense models to torchtitan's Llama 3 model; the model is a mixture \
             of experts (torchtitan's MoE models, deepseek_v3 and qwen3, are not exported yet)"
                .to_string(),
        );
    }
    if cfg.parallel_attn || cfg.shared_norm {
        why.push(
            "torchtitan's Llama 3 block runs attention then the MLP (models/llama3/model.py); \
             the model runs them in parallel (GPT-J/Falcon style)"
                .to_string(),
        );
    }
    if cfg.norm == NormKind::LayerNorm {
        why.push(
            "torchtitan's Llama 3 model normalises with RMSNorm (models/common/decoder.py: \
             RMSNorm.Config); the model uses LayerNorm"
                .to_string(),
        );
    }
    if cfg.mlp == MlpKind::Gelu {
        why.push(
            "torchtitan's Llama 3 MLP is SwiGLU (FeedForward w1, w2, w3); the model's is GeLU"
                .to_string(),
        );
    }
    match cfg.position {
        PositionKind::Rotary => {}
        PositionKind::Learned => why.push(
            "torchtitan's Llama 3 model has rotary positions only; the model learns a position \
             table"
                .to_string(),
        ),
        PositionKind::Alibi => why.push(
            "torchtitan's Llama 3 model has rotary positions only; the model uses ALiBi"
                .to_string(),
        ),
    }
    if cfg.attn_bias || cfg.mlp_bias {
        why.push(format!(
            "torchtitan's Llama 3 projections have no biases (Linear.Config bias=False in \
             _build_llama3_layers); the model has biases on its {}",
            match (cfg.attn_bias, cfg.mlp_bias) {
                (true, true) => "attention and MLP projections",
                (true, false) => "attention projections",
                _ => "MLP projections",
            }
        ));
    }
    if !cfg.causal {
        why.push("torchtitan trains causal decoders; the model is bidirectional".to_string());
    }
    if cfg.heads == 0 || cfg.head_dim * cfg.heads != cfg.hidden {
        why.push(format!(
            "_build_llama3_layers makes heads of dim / n_heads wide; the model's {} heads of {} \
             make {}, not its width {}",
            cfg.heads,
            cfg.head_dim,
            cfg.heads * cfg.head_dim,
            cfg.hidden
        ));
    }
    if cfg.kv_heads == 0 || !cfg.heads.is_multiple_of(cfg.kv_heads.max(1)) {
        why.push(format!(
            "torchtitan's grouped-query attention needs the KV heads to divide the heads; the \
             model has {} and {}",
            cfg.heads, cfg.kv_heads
        ));
    }
    if model.layers.len() as u64 != cfg.layers + 2
        || model.layers.first().map(|l| l.kind) != Some(LayerKind::Embedding)
        || model.layers.last().map(|l| l.kind) != Some(LayerKind::Head)
        || model.layers[1..model.layers.len().saturating_sub(1)]
            .iter()
            .any(|l| l.kind != LayerKind::Transformer)
    {
        why.push(format!(
            "hetplan's layers of {} are not [embedding, {} blocks, head], which torchtitan's \
             modules tok_embeddings, layers.i, norm and lm_head are",
            model.name, cfg.layers
        ));
    }
    why
}

/// Why torchtitan refuses this plan of this model, beyond `Runtime::why_not` (what torchtitan
/// itself checks when it starts, and what its config cannot say).
fn plan_reasons(model: &Model, plan: &Plan, seq_len: u64) -> Vec<String> {
    let mut why = Vec::new();
    let Some(first) = plan.stages.first() else {
        return why;
    };
    let pp = plan.pipeline_depth().max(1);
    let tp = first.tp as u64;
    let mbs = first.micro_batch_sizes.first().copied().unwrap_or(0);
    let per_step = mbs * first.dp as u64;
    if per_step == 0 || per_step * plan.micro_batches != plan.global_batch {
        why.push(format!(
            "torchtitan runs global batch / (local batch × DP) accumulation steps \
             (trainer.py): {} / ({} × {}) micro-batches is not the plan's {}",
            plan.global_batch, mbs, first.dp, plan.micro_batches
        ));
    }
    if let Some(cfg) = &model.transformer {
        if pp > 1 && cfg.tied_embeddings {
            why.push(
                "torchtitan does not tie the embedding and output weights with pipeline \
                 parallelism (models/common/decoder.py: \"Weight tying is not supported with \
                 Pipeline Parallel\"); the model ties them"
                    .to_string(),
            );
        }
        if tp > 1
            && (!cfg.heads.is_multiple_of(tp)
                || cfg.kv_heads == 0
                || !cfg.kv_heads.is_multiple_of(tp))
        {
            why.push(format!(
                "torchtitan's tensor_parallel_degree must divide the heads and the KV heads \
                 (models/common/decoder.py); TP {tp} with {} heads and {} KV heads",
                cfg.heads, cfg.kv_heads
            ));
        }
    }
    if first.sequence_parallel && tp > 1 && !seq_len.is_multiple_of(tp) {
        why.push(format!(
            "torchtitan splits the sequence over the TP ranks with sequence parallelism \
             (trainer.py): {seq_len} is not a multiple of TP {tp}"
        ));
    }
    if pp > 1 {
        let m = plan.micro_batches;
        match plan.schedule {
            Schedule::OneFOneB if m < pp as u64 => why.push(format!(
                "torch's Schedule1F1B needs at least as many micro-batches as stages \
                 (torch/distributed/pipelining/schedules.py): the plan runs {m} on {pp}"
            )),
            Schedule::Interleaved { .. } => {
                let rounds = (m / pp as u64).max(1);
                if !m.is_multiple_of(rounds) {
                    why.push(format!(
                        "torch's ScheduleInterleaved1F1B needs the micro-batches to be a \
                         multiple of its rounds, max(1, micro-batches / PP) \
                         (torch/distributed/pipelining/schedules.py): {m} micro-batches, {rounds} \
                         rounds"
                    ));
                }
            }
            _ => {}
        }
    }
    why
}

/// The torchtitan modules of hetplan's layer `l` (embedding, block, head).
fn layer_fqns(model: &Model, l: usize) -> Vec<String> {
    match model.layers[l].kind {
        LayerKind::Embedding => vec!["tok_embeddings".into()],
        LayerKind::Head => vec!["norm".into(), "lm_head".into()],
        LayerKind::Transformer | LayerKind::Other => vec![format!("layers.{}", l - 1)],
    }
}

/// `module_fqns_per_model_part`: each stage's (chunk's) modules, in plan order.
pub fn model_parts(model: &Model, plan: &Plan) -> Vec<Vec<String>> {
    plan.stages
        .iter()
        .map(|st| {
            st.layers
                .iter()
                .flat_map(|l| layer_fqns(model, l))
                .collect()
        })
        .collect()
}

/// One part as a Python expression: named modules, the blocks as `_layers(a, b)`.
fn part_expr(model: &Model, layers: std::ops::Range<usize>) -> String {
    let mut pieces: Vec<String> = Vec::new();
    let mut blocks: Option<(usize, usize)> = None;
    let flush = |pieces: &mut Vec<String>, blocks: &mut Option<(usize, usize)>| {
        if let Some((a, b)) = blocks.take() {
            pieces.push(format!("_layers({a}, {b})"));
        }
    };
    for l in layers {
        match model.layers[l].kind {
            LayerKind::Transformer | LayerKind::Other => {
                let i = l - 1;
                blocks = Some(match blocks {
                    Some((a, _)) => (a, i + 1),
                    None => (i, i + 1),
                });
            }
            _ => {
                flush(&mut pieces, &mut blocks);
                let names: Vec<String> = layer_fqns(model, l)
                    .iter()
                    .map(|n| format!("\"{n}\""))
                    .collect();
                pieces.push(format!("[{}]", names.join(", ")));
            }
        }
    }
    flush(&mut pieces, &mut blocks);
    pieces.join(" + ")
}

/// `pipeline_parallel_schedule`.
fn schedule_name(plan: &Plan) -> &'static str {
    match plan.schedule {
        Schedule::Gpipe => "GPipe",
        Schedule::OneFOneB => "1F1B",
        Schedule::Interleaved { .. } => "Interleaved1F1B",
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// `hetplan_job.py`: the model spec and the `Trainer.Config` of the plan.
fn job_module(job: Job<'_>) -> String {
    let model = job.model;
    let plan: &Plan = job.plan;
    let cfg = model
        .transformer
        .as_ref()
        .expect("model_reasons refuses models without a transformer shape");
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mbs = st.micro_batch_sizes.first().copied().unwrap_or(1);
    let dp = st.dp;
    let (replicate, shard) = if st.zero == 3 { (1, dp) } else { (dp, 1) };
    // With pipelining one accumulation step runs the plan's micro-batches through the
    // pipeline; without, each micro-batch is an accumulation step.
    let local_batch = if pp > 1 {
        mbs * plan.micro_batches
    } else {
        mbs
    };
    let offload = !st.offload.is_none();
    let mut s = format!(
        "\"\"\"torchtitan job written by hetplan {ver}: {model} on {cluster}.\n\n\
         The plan: {summary}\n\n\
         `launch.sh` starts it on every node. By hand, from a torchtitan 0.3.0 checkout (for\n\
         tests/assets) with this directory on PYTHONPATH:\n\n    \
         torchrun ... -m torchtitan.train --module {MODULE} --config {CONFIG_FN} [--section.key value ...]\n\
         \"\"\"\n\n",
        ver = env!("CARGO_PKG_VERSION"),
        model = model.name,
        cluster = job.cluster.name,
        summary = plan.summary(),
    );
    s.push_str(
        "import dataclasses\n\n\
         from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n\
         from torchtitan.components.metrics import MetricsProcessor\n\
         from torchtitan.components.optimizer import default_adamw\n\
         from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig\n\
         from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC\n\
         from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader\n\
         from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm\n\
         from torchtitan.models.llama3 import (\n    \
         _EMBEDDING_INIT,\n    \
         _EMBEDDING_SKIP_INIT,\n    \
         _NORM_INIT,\n    \
         _build_llama3_layers,\n    \
         _output_linear_init,\n    \
         model_registry,\n\
         )\n\
         from torchtitan.models.llama3.model import Llama3Model\n\
         from torchtitan.protocols.model_spec import ModelSpec\n\
         from torchtitan.trainer import Trainer\n",
    );
    let rowwise = plan.precision == Precision::Fp8Rowwise;
    if rowwise {
        s.push_str("from torchtitan.components.quantization import Float8LinearConverter\n");
    }
    s.push('\n');
    s.push_str(&format!(
        "# The model's shape, as hetplan has it ({name}).\n\
         DIM = {hidden}\n\
         N_LAYERS = {layers}\n\
         N_HEADS = {heads}\n\
         N_KV_HEADS = {kv}\n\
         FFN_HIDDEN_DIM = {ffn}\n\
         VOCAB_SIZE = {vocab}\n\
         TIED_EMBEDDINGS = {tied}\n\
         # The parameters hetplan counts in it (tests/engines/check_torchtitan.py compares).\n\
         HETPLAN_PARAMS = {params}\n\
         # The FP8 recipe of the blocks' linears (None: BF16 or FP32 throughout).\n\
         FP8_RECIPE = {fp8_recipe}\n\
         # Not part of hetplan's model: RoPE.Config's default base, no scaling; RMSNorm.Config's\n\
         # default eps (1e-5). Llama 3 itself uses theta 500000 with \"llama\" scaling.\n\
         ROPE_THETA = 10000.0\n\
         ROPE_MAX_SEQ_LEN = {rope_len}\n\n\n",
        name = model.name,
        hidden = cfg.hidden,
        layers = cfg.layers,
        heads = cfg.heads,
        kv = cfg.kv_heads,
        ffn = cfg.ffn,
        vocab = cfg.vocab,
        tied = py_bool(cfg.tied_embeddings),
        params = model.params(),
        fp8_recipe = if rowwise { "\"rowwise\"" } else { "None" },
        rope_len = job.seq_len.max(cfg.max_seq_len),
    ));
    s.push_str(
        "def _layers(start, end):\n    \
         \"\"\"The transformer blocks start..end-1 by their module names.\"\"\"\n    \
         return [f\"layers.{i}\" for i in range(start, end)]\n\n\n",
    );
    if pp > 1 {
        s.push_str(&format!(
            "# Each pipeline stage's modules in stage order (stage i on pipeline rank i % {pp}): \
             the plan's layer split.\nMODULE_FQNS_PER_MODEL_PART = [\n"
        ));
        for st in &plan.stages {
            s.push_str(&format!(
                "    {},\n",
                part_expr(model, st.layers.start..st.layers.end)
            ));
        }
        s.push_str("]\n\n\n");
    } else {
        s.push_str("# One pipeline stage: the whole model on every GPU.\nMODULE_FQNS_PER_MODEL_PART = None\n\n\n");
    }
    s.push_str(&format!(
        "def model_spec() -> ModelSpec:\n    \
         \"\"\"torchtitan's Llama 3 model at this shape, built by its own builders.\"\"\"\n    \
         model = Llama3Model.Config(\n        \
         dim=DIM,\n        \
         vocab_size=VOCAB_SIZE,\n        \
         enable_weight_tying=TIED_EMBEDDINGS,\n        \
         tok_embeddings=Embedding.Config(\n            \
         num_embeddings=VOCAB_SIZE,\n            \
         embedding_dim=DIM,\n            \
         param_init=_EMBEDDING_SKIP_INIT if TIED_EMBEDDINGS else _EMBEDDING_INIT,\n        \
         ),\n        \
         norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),\n        \
         lm_head=Linear.Config(\n            \
         in_features=DIM,\n            \
         out_features=VOCAB_SIZE,\n            \
         param_init=_output_linear_init(DIM),\n        \
         ),\n        \
         layers=_build_llama3_layers(\n            \
         n_layers=N_LAYERS,\n            \
         dim=DIM,\n            \
         n_heads=N_HEADS,\n            \
         n_kv_heads=N_KV_HEADS,\n            \
         hidden_dim=FFN_HIDDEN_DIM,\n            \
         rope=ComplexRoPE.Config(\n                \
         dim=DIM // N_HEADS, max_seq_len=ROPE_MAX_SEQ_LEN, theta=ROPE_THETA\n            \
         ),\n            \
         fuse_qkv=True,\n            \
         attn_backend=\"flex\",\n        \
         ),\n    \
         )\n    \
         {fp8}\
         # Llama 3's spec (its parallelize, pipelining and state-dict functions) with this model.\n    \
         return dataclasses.replace(model_registry(\"debugmodel\"), flavor=\"hetplan\", model=model)\n\n\n",
        fp8 = if rowwise {
            format!(
                "# FP8 by torchao's rowwise recipe (fp8-rowwise) on the blocks' linears; the output\n    \
                 # layer stays BF16, as hetplan priced it.\n    \
                 model = (\n        \
                 Float8LinearConverter.Config(\n            \
                 recipe_name=\"rowwise\",\n            \
                 filter_fqns=[\"lm_head\"],\n            \
                 model_compile_enabled={},\n        \
                 )\n        \
                 .build()\n        \
                 .convert(model)\n    \
                 )\n    ",
                py_bool(plan.compile != Compile::Off)
            )
        } else {
            String::new()
        },
    ));
    let ac = match st.recompute {
        Recompute::None => "None",
        // torchtitan's selective checkpointing is op by op (`SelectiveAC`'s policy).
        Recompute::Ops => "SelectiveAC.Config()",
        // `Selective` (the attention core alone) and `Layers(_)` are refused by
        // `Runtime::why_not`.
        Recompute::Full | Recompute::Layers(_) | Recompute::Selective => "FullAC.Config()",
    };
    s.push_str(&format!(
        "def {CONFIG_FN}() -> Trainer.Config:\n    \
         \"\"\"The plan as torchtitan's Trainer.Config.\"\"\"\n    \
         return Trainer.Config(\n        \
         # torchtitan's test tokenizer and C4 sample (a checkout's tests/assets): no downloads.\n        \
         hf_assets_path=\"./tests/assets/tokenizer\",\n        \
         model_spec=model_spec(),\n        \
         loss=ChunkedLossWrapper.Config(\n            \
         loss_fn=CrossEntropyLoss.Config(global_vocab_size=VOCAB_SIZE),\n        \
         ),\n        \
         optimizer=default_adamw(lr=3e-4),\n        \
         metrics=MetricsProcessor.Config(log_freq=1),\n        \
         training=TrainingConfig(\n            \
         # Per data-parallel rank and accumulation step{lbs_note}.\n            \
         local_batch_size={local_batch},\n            \
         global_batch_size={gbs},\n            \
         seq_len={seq},\n            \
         steps=100,\n            \
         mixed_precision_param=\"{param_dtype}\",\n            \
         enable_cpu_offload={offload},\n{cuda_graphs}        \
         ),\n        \
         dataloader=HuggingFaceTextDataLoader.Config(dataset=\"c4_test\"),\n        \
         parallelism=ParallelismConfig(\n            \
         # ZeRO-{zero}: {dp_note}.\n            \
         data_parallel_replicate_degree={replicate},\n            \
         data_parallel_shard_degree={shard},\n            \
         tensor_parallel_degree={tp},\n            \
         enable_sequence_parallel={sp},\n            \
         pipeline_parallel_degree={pp},\n{pp_keys}        \
         ),\n        \
         activation_checkpoint={ac},\n{compile}    \
         )\n",
        lbs_note = if pp > 1 {
            format!(
                ": {} micro-batches of {mbs} through the pipeline",
                plan.micro_batches
            )
        } else {
            format!(
                "; {} accumulation steps make the global batch",
                plan.micro_batches
            )
        },
        gbs = plan.global_batch,
        seq = job.seq_len,
        param_dtype = if plan.precision.is_fp32() {
            "float32"
        } else {
            "bfloat16"
        },
        offload = py_bool(offload),
        cuda_graphs = if pp > 1 {
            "            # CUDA graphs do not support pipeline parallelism (trainer.py).\n            \
             disable_cuda_graphs=True,\n"
                .to_string()
        } else {
            String::new()
        },
        zero = st.zero,
        dp_note = if st.zero == 3 {
            "parameters, gradients and optimizer state sharded over the replicas (FSDP2)"
        } else {
            "every replica holds the whole stage"
        },
        tp = st.tp,
        sp = py_bool(st.sequence_parallel && st.tp > 1),
        compile = compile_config(plan, st.sequence_parallel && st.tp > 1),
        pp_keys = if pp > 1 {
            format!(
                "            pipeline_parallel_schedule=\"{}\",\n            \
                 pipeline_parallel_microbatch_size={mbs},\n            \
                 module_fqns_per_model_part=MODULE_FQNS_PER_MODEL_PART,\n",
                schedule_name(plan)
            )
        } else {
            String::new()
        },
    ));
    s
}

/// The `compile=` keyword as hetplan priced the plan (`Plan::compile`): the blocks and the loss
/// (CompileConfig's default components), the blocks alone, or nothing (eager, CompileConfig's
/// default); with async TP, an Inductor pass that needs the model compiled
/// (CompileConfig.__post_init__; an eager plan with it is refused by `Runtime::why_not`).
fn compile_config(plan: &Plan, tp_with_sp: bool) -> String {
    let components = match plan.compile {
        Compile::Off => {
            return "        # Eager, as the plan was priced (compile=off): CompileConfig's default.\n"
                .into()
        }
        Compile::On => "",
        Compile::Blocks => ", components=[\"model\"]",
    };
    let (async_tp, note) = if plan.tp_comm_overlap && tp_with_sp {
        (
            ", enable_async_tensor_parallel=True",
            "\n        # Async TP: the TP all-gathers and reduce-scatters pipelined with the matmuls \
             (an Inductor pass).",
        )
    } else {
        ("", "")
    };
    let what = match plan.compile {
        Compile::Blocks => "the norms, rotary embeddings and activations fused, the loss eager",
        _ => "the norms, rotary embeddings, activations and the loss fused",
    };
    format!(
        "        # Compiled: hetplan priced {what}.{note}\n        \
         compile=CompileConfig(enable=True{components}{async_tp}),\n"
    )
}

/// `launch.sh`: this directory on `PYTHONPATH` (the config module), then the shared launch.
fn launch_script(job: Job<'_>, layout: &RankLayout) -> String {
    let pre = "HERE=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n\
               export PYTHONPATH=\"$HERE${PYTHONPATH:+:$PYTHONPATH}\"\n";
    let command = format!(
        "-m torchtitan.train --module {} --config {} \"$@\"",
        shell_quote(MODULE),
        shell_quote(CONFIG_FN)
    );
    super::launch_script(
        job,
        layout,
        "torchtitan",
        &format!(
            "Run it from a torchtitan 0.3.0 checkout (tests/assets in the current directory): \
             bash /path/to/launch.sh [--section.key value ...]; {MODULE}.py beside it is the \
             job's config module"
        ),
        Some((pre, &command)),
        29500,
    )
}

/// README.md: what goes where.
fn readme(job: Job<'_>, layout: &RankLayout, notes: &[String]) -> String {
    let plan: &Plan = job.plan;
    let cluster = job.cluster;
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mut s = super::readme_head(job, "torchtitan", Target::Torchtitan);
    s.push_str(&format!(
        "TP {}, PP {}{}, DP {} ({}); micro-batch {}, global batch {} ({} micro-batches); \
         sequence {}.\n\n",
        st.tp,
        pp,
        super::virtual_stages(plan),
        st.dp,
        if st.zero == 3 {
            "FSDP2, sharded"
        } else {
            "replicated"
        },
        st.micro_batch_sizes.first().copied().unwrap_or(1),
        plan.global_batch,
        plan.micro_batches,
        job.seq_len
    ));
    s.push_str(&format!(
        "## Files\n\n\
         - `launch.sh`: run it on every node with `NODE_RANK` (below) and `MASTER_ADDR` (the \
         address of node rank 0) set, from a torchtitan 0.3.0 checkout; it puts this directory on \
         `PYTHONPATH` and starts `torchrun` with the node's GPUs in `CUDA_VISIBLE_DEVICES` and \
         `python -m torchtitan.train --module {MODULE} --config {CONFIG_FN}`. Extra arguments \
         to `launch.sh` are torchtitan's overrides, e.g. `--training.steps 1000`.\n\
         - `{MODULE}.py`: the job's config module. `{CONFIG_FN}()` returns the `Trainer.Config`: \
         torchtitan's Llama 3 model at this model's shape, the parallelism, the batches, \
         activation checkpointing.\n"
    ));
    s.push_str(&super::placement_table(
        cluster,
        layout,
        "torchtitan's device mesh is `pp` outermost, then the data-parallel dimensions, `tp` \
         innermost: pipeline stage `s` is global ranks `[s·TP·DP, (s+1)·TP·DP)`.",
    ));
    s.push_str(
        "\n## Before a real run\n\n\
         - Data: the job trains on torchtitan's C4 sample (`c4_test`) with its test tokenizer \
         (`hf_assets_path=\"./tests/assets/tokenizer\"`), both in a torchtitan checkout's \
         `tests/assets`, so it starts without downloads. For real data set \
         `dataloader=HuggingFaceTextDataLoader.Config(dataset=\"c4\")` (or your own) and \
         `hf_assets_path` to your tokenizer's directory.\n\
         - Model details hetplan does not record: the RoPE base (`ROPE_THETA`, torchtitan's \
         default 10000 without scaling; Llama 3 uses 500000 with `scaling=\"llama\"`) and the \
         RMSNorm eps (1e-5). Set them in the module if they matter to you.\n\
         - Schedule: `steps=100` and `default_adamw(lr=3e-4)` are placeholders; set your own.\n",
    );
    if pp > 1 {
        s.push_str(
            "- The layer split is `module_fqns_per_model_part`: `tok_embeddings` the embedding, \
             `layers.i` transformer block i, `norm` and `lm_head` the output layer; stage i runs \
             on pipeline rank i mod PP.\n",
        );
    }
    for n in notes {
        s.push_str(&format!("- Differs from the model: {n}.\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::model::catalog::catalog_model;
    use crate::plan::ValidPlan;

    fn cluster(gpus_per_node: u32, nodes: u32) -> Cluster {
        crate::cluster::spec::parse_cluster_toml(&format!(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = \
             {gpus_per_node}\nnodes = {nodes}\ninter_node_bandwidth = \"200 Gbps\"\n"
        ))
        .unwrap()
    }

    fn valid(plan: Plan, model: &Model, cluster: &Cluster) -> ValidPlan {
        ValidPlan::new(plan, model, cluster).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn try_export(model: &str, nodes: u32, spec: &str) -> Result<Export, ExportError> {
        let model = catalog_model(model).unwrap();
        let cluster = cluster(8, nodes);
        let plan = crate::plan::inline::parse_inline_plan(spec, &model, &cluster).unwrap();
        let plan = valid(plan, &model, &cluster);
        crate::export::export(
            Target::Torchtitan,
            Job {
                model: &model,
                cluster: &cluster,
                plan: &plan,
                seq_len: 4096,
            },
        )
    }

    fn module(e: &Export) -> &str {
        &e.files
            .iter()
            .find(|f| f.path == "hetplan_job.py")
            .unwrap()
            .contents
    }

    fn reasons(r: Result<Export, ExportError>) -> Vec<String> {
        match r {
            Err(ExportError::Unsupported { reasons, .. }) => reasons,
            Ok(_) => panic!("exported"),
        }
    }

    #[test]
    fn every_layer_is_in_one_part_in_order() {
        let model = catalog_model("llama3-8b").unwrap();
        let cluster = cluster(8, 1);
        // An uneven split: 3, 11, 10, 10 layers (34 in all).
        let mut plan =
            crate::plan::inline::parse_inline_plan("pp=4,dp=2,mbs=1,gbs=16", &model, &cluster)
                .unwrap();
        let cuts = [0, 3, 14, 24, 34];
        for (g, st) in plan.stages.iter_mut().enumerate() {
            st.layers.start = cuts[g];
            st.layers.end = cuts[g + 1];
        }
        let plan = valid(plan, &model, &cluster);
        let parts = model_parts(&model, &plan);
        let flat: Vec<String> = parts.concat();
        let mut want = vec!["tok_embeddings".to_string()];
        want.extend((0..32).map(|i| format!("layers.{i}")));
        want.extend(["norm".to_string(), "lm_head".to_string()]);
        assert_eq!(flat, want);
        assert_eq!(parts[0], ["tok_embeddings", "layers.0", "layers.1"]);
        assert_eq!(
            part_expr(&model, 0..3),
            "[\"tok_embeddings\"] + _layers(0, 2)"
        );
        assert_eq!(
            part_expr(&model, 24..34),
            "_layers(23, 32) + [\"norm\", \"lm_head\"]"
        );
        let e = export(Job {
            model: &model,
            cluster: &cluster,
            plan: &plan,
            seq_len: 8192,
        })
        .unwrap();
        let m = module(&e);
        assert!(m.contains("    _layers(2, 13),\n"), "{m}");
        assert!(m.contains("module_fqns_per_model_part=MODULE_FQNS_PER_MODEL_PART"));
        assert!(m.contains("pipeline_parallel_degree=4,"));
        assert!(
            m.contains("local_batch_size=8,"),
            "8 micro-batches of 1:\n{m}"
        );
        assert!(m.contains("pipeline_parallel_microbatch_size=1,"));
        assert!(m.contains("disable_cuda_graphs=True"));
    }

    #[test]
    fn zero_decides_replicate_or_shard() {
        let e = try_export("llama2-7b", 1, "tp=1,pp=1,dp=8,mbs=2,gbs=64,zero=3").unwrap();
        let m = module(&e);
        assert!(m.contains("data_parallel_replicate_degree=1,"), "{m}");
        assert!(m.contains("data_parallel_shard_degree=8,"), "{m}");
        assert!(m.contains("local_batch_size=2,"), "{m}");
        assert!(m.contains("MODULE_FQNS_PER_MODEL_PART = None"));
        assert!(!m.contains("pipeline_parallel_schedule"));
        let e = try_export("llama3-8b", 2, "tp=4,pp=2,mbs=1,gbs=64,ckpt=full,sp=on").unwrap();
        let m = module(&e);
        assert!(m.contains("data_parallel_replicate_degree=2,"), "{m}");
        assert!(m.contains("data_parallel_shard_degree=1,"), "{m}");
        assert!(m.contains("tensor_parallel_degree=4,"));
        assert!(m.contains("enable_sequence_parallel=True,"));
        assert!(m.contains("activation_checkpoint=FullAC.Config(),"));
        assert!(m.contains("pipeline_parallel_schedule=\"1F1B\","));
        assert_eq!(e.layout.world_size(), 16);
    }

    #[test]
    fn the_module_uses_only_keywords_read_in_torchtitan() {
        let e = try_export(
            "llama3-8b",
            2,
            "tp=2,pp=4,mbs=1,gbs=64,ckpt=ops,sp=on,schedule=interleaved,v=2,engine=fsdp",
        )
        .unwrap();
        let m = module(&e);
        assert!(m.contains("pipeline_parallel_schedule=\"Interleaved1F1B\","));
        let parts = m
            .split("MODULE_FQNS_PER_MODEL_PART = [\n")
            .nth(1)
            .and_then(|rest| rest.split("\n]\n").next())
            .unwrap();
        assert_eq!(
            parts.lines().count(),
            8,
            "8 chunks, 4 stages of 2:\n{parts}"
        );
        // Every `name=` inside a call.
        let mut used: Vec<&str> = Vec::new();
        for line in m.lines() {
            let t = line.trim_start();
            if t.starts_with('#') || !line.starts_with("    ") {
                continue;
            }
            for piece in t.split([',', '(']) {
                let piece = piece.trim();
                if let Some((k, _)) = piece.split_once('=') {
                    if !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !k.chars().next().unwrap().is_ascii_uppercase()
                    {
                        used.push(k);
                    }
                }
            }
        }
        assert!(used.len() > 30, "{used:?}");
        for k in used {
            assert!(
                KEYWORDS.iter().any(|(name, _)| *name == k),
                "`{k}=` is not one of the keywords read in torchtitan"
            );
        }
    }

    #[test]
    fn gpt3_and_moe_and_fp16_are_refused_with_every_reason() {
        let why = reasons(try_export("gpt3-1.3b", 1, "tp=2,pp=2,mbs=4,gbs=64"));
        for what in ["LayerNorm", "GeLU", "position table", "biases", "weight"] {
            assert!(why.iter().any(|w| w.contains(what)), "{what}: {why:?}");
        }
        let why = reasons(try_export("mixtral-8x7b", 2, "tp=2,pp=8,mbs=1,gbs=64"));
        assert!(
            why.iter().any(|w| w.contains("mixture of experts")),
            "{why:?}"
        );
        let why = reasons(try_export(
            "llama2-7b",
            1,
            "tp=2,pp=1,mbs=1,gbs=16,precision=fp16",
        ));
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("FP16"));
    }

    #[test]
    fn what_torchtitan_checks_at_start_is_refused_up_front() {
        // 1F1B over 4 stages with 2 micro-batches; KV heads 8 over TP 16 (Megatron replicates).
        let why = reasons(try_export("llama3-8b", 1, "tp=2,pp=4,mbs=1,gbs=2"));
        assert!(why.iter().any(|w| w.contains("Schedule1F1B")), "{why:?}");
        let why = reasons(try_export("llama3-70b", 2, "tp=16,pp=1,mbs=1,gbs=8"));
        assert!(
            why.iter()
                .any(|w| w.contains("must divide the heads and the KV heads")),
            "{why:?}"
        );
        // Selective checkpointing of k layers: the runtime's rule, with the rest.
        let why = reasons(try_export("llama3-8b", 1, "tp=2,pp=4,mbs=1,gbs=8,ckpt=2"));
        assert!(
            why.iter().any(|w| w.contains("cannot checkpoint")),
            "{why:?}"
        );
    }

    #[test]
    fn tied_embeddings_run_without_pipelining_only() {
        let mut cfg = catalog_model("llama2-7b").unwrap().transformer.unwrap();
        cfg.tied_embeddings = true;
        let model = cfg.build();
        let cluster = cluster(8, 1);
        let job = |spec: &str| {
            let plan = crate::plan::inline::parse_inline_plan(spec, &model, &cluster).unwrap();
            let plan = valid(plan, &model, &cluster);
            export(Job {
                model: &model,
                cluster: &cluster,
                plan: &plan,
                seq_len: 2048,
            })
        };
        let e = job("tp=2,pp=1,mbs=1,gbs=16").unwrap();
        assert!(module(&e).contains("TIED_EMBEDDINGS = True"));
        let why = reasons(job("tp=2,pp=2,mbs=1,gbs=16"));
        assert!(why.iter().any(|w| w.contains("Weight tying")), "{why:?}");
    }
}
