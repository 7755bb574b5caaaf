//! From a plan to a job an engine starts (issue 11): the engine's configuration, one launch
//! command per node that puts every stage on the GPUs the plan gave it, and a README.
//!
//! One module per engine behind [`export`]; the rank layout the engines share
//! ([`ranks::stage_major`]) is written once. Like the rest of the library this module writes no
//! files: an [`Export`] is a list of file names and contents, which the CLI writes. A plan the
//! engine cannot run gives no files but [`ExportError::Unsupported`] with every reason.

/// PyTorch's environment switch for TF32 matrix products in FP32 training (read once, before
/// any product, by ATen's context: `allowTF32CuBLAS`, later the initial
/// `float32_matmul_precision`), which the export of a `tf32` plan sets in `launch.sh` and the
/// Megatron importer reads back.
pub const TF32_SWITCH: &str = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE";

pub mod deepspeed;
pub mod flashflex;
pub mod megatron;
pub mod mist;
pub mod ranks;
pub mod sailor;
pub mod torchtitan;

use crate::cluster::Cluster;
use crate::model::Model;
use crate::plan::{Precision, ValidPlan};
use serde::Serialize;

/// An engine hetplan writes jobs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Megatron-LM's `pretrain_gpt.py` (Megatron-Core 0.13 or later: the pipeline layout).
    Megatron,
    /// DeepSpeed's engine and `PipelineModule` (0.19).
    Deepspeed,
    /// torchtitan 0.3's `torchtitan.train` with a config module (`--module/--config`).
    Torchtitan,
    /// Sailor's Megatron-DeepSpeed fork (eth-easl/sailor): per-stage, per-replica TP degrees
    /// from `dist_config.json`.
    Sailor,
    /// Mist's executor (Dazz993/Mist, `benchmark_one_case.py`): a per-stage strategy YAML.
    Mist,
    /// FlashFlex (HexiScale, Relaxed-System-Lab/FlashFlex): `llama_train.py` with pipelines of
    /// different shapes (`--hetero_configs`, `--pp_layouts`).
    Flashflex,
}

impl Target {
    pub const ALL: [Target; 6] = [
        Target::Megatron,
        Target::Deepspeed,
        Target::Torchtitan,
        Target::Sailor,
        Target::Mist,
        Target::Flashflex,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::Megatron => "megatron",
            Target::Deepspeed => "deepspeed",
            Target::Torchtitan => "torchtitan",
            Target::Sailor => "sailor",
            Target::Mist => "mist",
            Target::Flashflex => "flashflex",
        }
    }

    /// The precisions the engine trains in (torchtitan: `training.mixed_precision_param` is
    /// `bfloat16` or `float32`, `config/configs.py:85`). TF32 is FP32 training to every
    /// engine, with PyTorch's cuBLAS switch set in the launch's environment (`launch_script`).
    pub fn precisions(self) -> &'static [Precision] {
        use Precision::{Bf16, Fp16, Fp32, Fp8, Fp8Rowwise, Tf32};
        match self {
            // `--fp8-format hybrid` beside `--bf16`: Transformer Engine's FP8 linears.
            Target::Megatron => &[Bf16, Fp16, Fp32, Tf32, Fp8],
            // Its Float8 converter takes only torchao's rowwise recipes
            // (components/quantization/float8.py).
            Target::Torchtitan => &[Bf16, Fp32, Tf32, Fp8Rowwise],
            // DeepSpeed's and Megatron-DeepSpeed's (Sailor's) --fp16/--bf16 or neither
            // (Sailor's default is FP32); Mist's `training.params_dtype`/`exec_dtype`, parsed
            // by `str_to_torch_dtype`; FlashFlex's `--mixed_precision fp32|fp16|bf16`
            // (llama/arguments.py:39).
            Target::Deepspeed | Target::Sailor | Target::Mist | Target::Flashflex => {
                &[Bf16, Fp16, Fp32, Tf32]
            }
        }
    }

    /// The exporter of a mainstream engine, if hetplan has one (not for FSDP alone).
    pub fn of(runtime: crate::plan::runtime::Runtime) -> Option<Target> {
        use crate::plan::runtime::Runtime;
        match runtime {
            Runtime::Megatron => Some(Target::Megatron),
            Runtime::Deepspeed => Some(Target::Deepspeed),
            Runtime::Torchtitan => Some(Target::Torchtitan),
            Runtime::Fsdp => None,
        }
    }

    /// The mainstream engine whose rules (`plan::runtime`) decide what it runs, if any. The
    /// research runtimes (Sailor, Mist, FlashFlex) have none: hetplan's planner cannot be restricted to
    /// them (`--engine`), only their exporters say what they run.
    pub fn runtime(self) -> Option<crate::plan::runtime::Runtime> {
        match self {
            Target::Megatron => Some(crate::plan::runtime::Runtime::Megatron),
            Target::Deepspeed => Some(crate::plan::runtime::Runtime::Deepspeed),
            Target::Torchtitan => Some(crate::plan::runtime::Runtime::Torchtitan),
            Target::Sailor | Target::Mist | Target::Flashflex => None,
        }
    }
}

/// What an export is made from.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    pub plan: &'a ValidPlan,
    pub seq_len: u64,
}

/// One file of an export, by its name inside the export directory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExportFile {
    pub path: String,
    pub contents: String,
    /// Whether the file is a script to run (mode 755).
    pub executable: bool,
}

/// The files of one export, and where every rank runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Export {
    pub target: Target,
    pub files: Vec<ExportFile>,
    pub layout: ranks::RankLayout,
}

/// Why a plan gives no files.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExportError {
    /// The engine cannot run the plan (or the model): every reason.
    #[error("{} cannot run this plan: {}", target.name(), reasons.join("; "))]
    Unsupported {
        target: Target,
        reasons: Vec<String>,
    },
}

/// Every reason `target` cannot run `plan` of `model` at `seq_len`, without writing a file:
/// what `export` refuses, and what hetplan's planner checks when restricted to an engine
/// (`--engine`), so that a plan made for an engine exports to it.
pub fn why_not(
    target: Target,
    model: &Model,
    plan: &crate::plan::Plan,
    seq_len: u64,
) -> Vec<String> {
    let mut why: Vec<String> = precision_reason(target, plan).into_iter().collect();
    why.extend(match target {
        Target::Megatron => megatron::reasons(model, plan, seq_len),
        Target::Deepspeed => deepspeed::reasons(plan),
        Target::Torchtitan => torchtitan::reasons(model, plan, seq_len),
        Target::Sailor => sailor::reasons(model, plan),
        Target::Mist => mist::reasons(model, plan),
        Target::Flashflex => flashflex::reasons(model, plan, seq_len),
    });
    why
}

/// Why `target` cannot run `plan`'s precision, if it cannot.
fn precision_reason(target: Target, plan: &crate::plan::Plan) -> Option<String> {
    if target.precisions().contains(&plan.precision) {
        return None;
    }
    let names: Vec<String> = (target.precisions().iter())
        .map(|p| p.name().to_uppercase())
        .collect();
    Some(format!(
        "hetplan's {} export trains in {}; the plan is {}{}",
        target.name(),
        names.join(", "),
        plan.precision.name().to_uppercase(),
        match plan.precision {
            Precision::Fp8 => " (Megatron-LM runs FP8 through Transformer Engine)",
            Precision::Fp8Rowwise => " (torchao's rowwise recipe, which torchtitan runs)",
            _ => "",
        }
    ))
}

/// The files that start `job` on `target`: every reason it cannot, the precision's first.
pub fn export(target: Target, job: Job<'_>) -> Result<Export, ExportError> {
    let precision = precision_reason(target, job.plan);
    match (export_to(target, job), precision) {
        (Ok(e), None) => Ok(e),
        (Ok(_), Some(why)) => Err(ExportError::Unsupported {
            target,
            reasons: vec![why],
        }),
        (Err(ExportError::Unsupported { target, reasons }), why) => Err(ExportError::Unsupported {
            target,
            reasons: why.into_iter().chain(reasons).collect(),
        }),
    }
}

fn export_to(target: Target, job: Job<'_>) -> Result<Export, ExportError> {
    match target {
        Target::Megatron => megatron::export(job),
        Target::Deepspeed => deepspeed::export(job),
        Target::Torchtitan => torchtitan::export(job),
        Target::Sailor => sailor::export(job),
        Target::Mist => mist::export(job),
        Target::Flashflex => flashflex::export(job),
    }
}

/// The GPU type's name of cluster node `node`.
fn gpu_type_of(cluster: &Cluster, node: u32) -> &str {
    &cluster.gpu_types[cluster.nodes[node as usize].gpu_type.0].name
}

/// The part of a launch script that picks a node's GPUs and process count by `NODE_RANK`:
/// `NNODES`, then a `case` that sets `GPUS` and `NPROC` (shared by the engines' `launch.sh`).
fn node_cases(cluster: &Cluster, layout: &ranks::RankLayout) -> String {
    let mut s = format!("NNODES={}\n", layout.nodes.len());
    s.push_str(
        "case \"${NODE_RANK:?set NODE_RANK to the node rank of this node, see README.md}\" in\n",
    );
    for n in &layout.nodes {
        let gpus: Vec<String> = n.gpus.iter().map(|g| g.to_string()).collect();
        s.push_str(&format!(
            "  {}) GPUS={}; NPROC={} ;;  # cluster node n{} ({}), ranks {}..{}\n",
            n.node_rank,
            gpus.join(","),
            n.gpus.len(),
            n.node,
            gpu_type_of(cluster, n.node),
            n.first_rank,
            n.first_rank as usize + n.gpus.len() - 1
        ));
    }
    s.push_str("  *) echo \"NODE_RANK must be 0..$((NNODES - 1))\" >&2; exit 2 ;;\nesac\n\n");
    s
}

/// The README's table of node ranks: cluster node, GPU type, GPUs, global ranks, stages.
fn node_table(cluster: &Cluster, layout: &ranks::RankLayout) -> String {
    let mut s = String::from(
        "| node rank | cluster node | GPU type | CUDA_VISIBLE_DEVICES | global ranks | stages |\n\
         |---:|---|---|---|---|---|\n",
    );
    for n in &layout.nodes {
        s.push_str(&format!(
            "| {} | n{} | {} | {} | {}–{} | {} |\n",
            n.node_rank,
            n.node,
            gpu_type_of(cluster, n.node),
            n.gpus
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(","),
            n.first_rank,
            n.first_rank as usize + n.gpus.len() - 1,
            n.stages
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s
}

/// Why an engine that builds its decoder from flags (`engine` names it) would not build
/// `cfg`: one reason per structure the plain pre-norm decoder lacks (`Quirks::departures`)
/// that the export does not express (`handled`).
pub(crate) fn quirk_reasons(
    cfg: &crate::model::TransformerConfig,
    engine: &str,
    handled: &[crate::model::Departure],
) -> Vec<String> {
    cfg.quirks
        .departures()
        .into_iter()
        .filter(|d| !handled.contains(d))
        .map(|d| {
            format!(
                "hetplan exports plain pre-norm decoders to {engine}; the model has {}",
                d.describe()
            )
        })
        .collect()
}

/// Why `target` cannot train `model` under any plan (empty when some plan may run it): the
/// reasons no re-planning removes.
pub fn model_reasons(target: Target, model: &Model) -> Vec<String> {
    match target {
        Target::Megatron => megatron::model_args(model, model.default_seq_len)
            .err()
            .unwrap_or_default(),
        Target::Torchtitan => torchtitan::model_reasons(model),
        // DeepSpeed trains the user's own model code.
        Target::Deepspeed => Vec::new(),
        Target::Sailor => sailor::model_reasons(model),
        Target::Mist => mist::model_reasons(model),
        Target::Flashflex => flashflex::model_reasons(model),
    }
}

/// `launch.sh`: per node rank its GPUs and process count, then `torchrun`. `usage`, a sentence,
/// says where to run it and what it takes; `program` is an optional preamble (lines before the launch)
/// and the words after torchrun's options (default: the script's own arguments, `"$@"`).
pub(crate) fn launch_script(
    job: Job<'_>,
    layout: &ranks::RankLayout,
    engine: &str,
    usage: &str,
    program: Option<(&str, &str)>,
    default_port: u16,
) -> String {
    let cluster = job.cluster;
    let mut s = String::new();
    s.push_str("#!/usr/bin/env bash\n");
    s.push_str(&format!(
        "# {engine} job written by hetplan {} for {} on {} (global batch {}, sequence {}).\n",
        env!("CARGO_PKG_VERSION"),
        job.model.name,
        cluster.name,
        job.plan.global_batch,
        job.seq_len
    ));
    s.push_str(&format!(
        "# On every node: NODE_RANK=<k> MASTER_ADDR=<host of node rank 0> bash launch.sh ...\n\
         # {usage}.\n\
         # README.md says which cluster node is which node rank.\n\
         set -euo pipefail\n\n"
    ));
    let (preamble, command) = match program {
        Some((pre, cmd)) => (pre.to_string(), cmd.to_string()),
        None => (
            "if [ \"$#\" -eq 0 ]; then echo \"usage: bash launch.sh SCRIPT [ARGS...]\" >&2; exit 2; fi\n"
                .to_string(),
            "\"$@\"".to_string(),
        ),
    };
    s.push_str(&preamble);
    s.push('\n');
    if job.plan.precision == crate::plan::Precision::Tf32 {
        // No engine has a TF32 setting; PyTorch reads this before any product, in every
        // process torchrun starts.
        s.push_str(&format!(
            "# precision tf32: FP32 training, its matrix products in TF32 (PyTorch's cuBLAS \
             switch).\nexport {TF32_SWITCH}=1\n\n"
        ));
    }
    s.push_str(&node_cases(cluster, layout));
    s.push_str(&format!(
        "CUDA_VISIBLE_DEVICES=\"$GPUS\" exec torchrun \\\n  --nnodes \"$NNODES\" --node_rank \
         \"$NODE_RANK\" --nproc_per_node \"$NPROC\" \\\n  --master_addr \"${{MASTER_ADDR:?set \
         MASTER_ADDR to the address of node rank 0}}\" --master_port \"${{MASTER_PORT:-{default_port}}}\" \\\n  \
         {command}\n"
    ));
    s
}

/// The first layer of every stage, then the layer count: stage `s` runs `parts[s]..parts[s+1]`.
pub(crate) fn layer_parts(plan: &crate::plan::Plan) -> Vec<usize> {
    let mut p: Vec<usize> = plan.stages.iter().map(|s| s.layers.start).collect();
    p.push(plan.stages.last().map_or(0, |s| s.layers.end));
    p
}

/// `ranks.json`: the degrees, the layer split (stage `s` runs layers `parts[s]..parts[s+1]`)
/// and every node's place; `hetplan import` reads it back to put every rank on its GPU.
pub(crate) fn ranks_file(plan: &crate::plan::Plan, layout: &ranks::RankLayout) -> ExportFile {
    let first = &plan.stages[0];
    let parts = layer_parts(plan);
    let v = serde_json::json!({
        "world_size": layout.world_size(),
        "pipeline_stages": plan.pipeline_depth().max(1),
        "data_parallel": first.dp,
        "tensor_parallel": first.tp,
        "parts": parts,
        "nodes": layout.nodes,
    });
    ExportFile {
        path: "ranks.json".into(),
        contents: serde_json::to_string_pretty(&v).expect("JSON values serialise") + "\n",
        executable: false,
    }
}

/// A README's heading: the engine, the model and the cluster, and the plan it was written from.
pub(crate) fn readme_head(job: Job<'_>, engine: &str, target: Target) -> String {
    format!(
        "# {engine} job: {} on {}\n\nWritten by `hetplan export --to {}` (hetplan {}) from the \
         plan\n\n    {}\n\n",
        job.model.name,
        job.cluster.name,
        target.name(),
        env!("CARGO_PKG_VERSION"),
        job.plan.summary()
    )
}

/// " (v virtual stages each)" for an interleaved plan, nothing otherwise.
pub(crate) fn virtual_stages(plan: &crate::plan::Plan) -> String {
    let pp = plan.pipeline_depth().max(1);
    if plan.stages.len() > pp {
        format!(" ({} virtual stages each)", plan.stages.len() / pp)
    } else {
        String::new()
    }
}

/// The README's section on where every stage runs: `order` says how the engine orders ranks.
pub(crate) fn placement_table(
    cluster: &Cluster,
    layout: &ranks::RankLayout,
    order: &str,
) -> String {
    format!(
        "\n## Where each stage runs\n\n{order} torchrun numbers ranks node by node in \
         `--node_rank` order, local rank `i` on the `i`-th GPU of `CUDA_VISIBLE_DEVICES`. So the \
         node ranks and GPU lists below put every stage on the GPUs the plan gave it: start each \
         cluster node with its node rank.\n\n{}",
        node_table(cluster, layout)
    )
}

/// `word` quoted for a POSIX shell when it needs it (`t*4|t*4L` would glob).
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("--bf16"), "--bf16");
        assert_eq!(shell_quote("Et*4|t*4L"), "'Et*4|t*4L'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
