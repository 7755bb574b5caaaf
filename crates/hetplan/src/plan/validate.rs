//! Reading plans from JSON, and checking any plan against a model and a cluster.
//!
//! # The JSON form
//!
//! A plan is the serde form of [`Plan`](super::Plan). A complete example (a 6-layer model, i.e.
//! embedding, 4 transformer blocks and head, on two nodes of 4 GPUs; two pipeline stages of
//! 2 DP replicas × 2 TP ranks each):
//!
//! ```json
//! {
//!   "global_batch": 32,
//!   "micro_batches": 8,
//!   "schedule": { "kind": "1f1b" },
//!   "engine": "megatron",
//!   "precision": "bf16",
//!   "stages": [
//!     {
//!       "layers": { "start": 0, "end": 3 },
//!       "devices": [
//!         { "node": 0, "local": 0 }, { "node": 0, "local": 1 },
//!         { "node": 0, "local": 2 }, { "node": 0, "local": 3 }
//!       ],
//!       "tp": 2,
//!       "dp": 2,
//!       "micro_batch_sizes": [2, 2],
//!       "zero": 1,
//!       "recompute": "selective",
//!       "sequence_parallel": true
//!     },
//!     {
//!       "layers": { "start": 3, "end": 6 },
//!       "devices": [
//!         { "node": 1, "local": 0 }, { "node": 1, "local": 1 },
//!         { "node": 1, "local": 2 }, { "node": 1, "local": 3 }
//!       ],
//!       "tp": 2,
//!       "dp": 2,
//!       "micro_batch_sizes": [3, 1],
//!       "zero": 1,
//!       "recompute": 2,
//!       "offload": { "optimizer": 0.5 },
//!       "sequence_parallel": true
//!     }
//!   ]
//! }
//! ```
//!
//! Fields:
//! - `global_batch`: samples per iteration; `micro_batches`: micro-batches per iteration. Every
//!   stage must satisfy `sum(micro_batch_sizes) / cp × micro_batches == global_batch`, unless
//!   it gives `replica_samples` (one-stage plans: per-replica samples summing to `global_batch`).
//! - `schedule`: `{"kind": "gpipe"}`, `{"kind": "1f1b"}` or
//!   `{"kind": "interleaved-1f1b", "virtual_stages": 2}`. With interleaving, `stages` lists the
//!   `pp × virtual_stages` model chunks in layer order, and chunk `j` runs on exactly the GPUs of
//!   chunk `j mod pp`.
//! - `engine` (optional, default `megatron`): `megatron`, `deepspeed` or `fsdp`.
//! - `precision` (optional, default `bf16`): `bf16`, `fp16`, `fp32`, `tf32` (FP32 with TF32
//!   matrix products on Ampere and later), `fp8` or `fp8-rowwise`.
//! - `stages[i].layers`: the half-open range `[start, end)` of model layer indices (the
//!   embedding and the head count as layers). Stages cover every layer once, in order.
//! - `stages[i].devices`: `dp × tp` GPUs, replica-major (replica `r` is
//!   `devices[r·tp .. (r+1)·tp]`); a GPU is `{"node": n, "local": g}` (`n{n}g{g}` in messages).
//! - `stages[i].replica_tp` (optional): each DP replica's TP degree when they differ, each
//!   dividing `tp`, which is then the largest; `devices` lists `sum(replica_tp)` GPUs, replica
//!   by replica.
//! - `stages[i].micro_batch_sizes`: one micro-batch size per DP replica (they may differ).
//! - `zero` (0–3, default 0), `recompute` (`"none"`, `"selective"`, `"full"` or a number of
//!   layers, default `"none"`), `offload` (fractions 0–1 of `weights`, `gradients`, `optimizer`,
//!   `activations` kept in host memory, default all 0) and `sequence_parallel` (default false).
//! - `ep` (default 1): expert parallelism over groups of `ep` consecutive replicas; it divides
//!   dp and every MoE layer's experts.
//! - `cp` (default 1): context parallelism over groups of `cp` consecutive replicas sharing
//!   their samples, each holding `1/cp` of every sequence; it divides dp, is the same on every
//!   stage, and a group's replicas have one micro-batch size and TP degree.
//! - `cp_comm` (plan level, default `"ring"`): `"ring"` or `"all-to-all"` (Ulysses; every TP
//!   rank's heads must then split over `cp`).
//! - `tp_comm_overlap` (plan level, default false): tensor-parallel collectives pipelined with
//!   their GEMMs; every stage with `tp > 1` must have `sequence_parallel` on, and every TP
//!   group must sit in one node.
//! - `compile` (plan level, default `"on"`): how much of the model's PyTorch code runs under
//!   `torch.compile`, `"on"` (blocks and loss), `"blocks"` or `"off"` (eager); anything but
//!   `"on"` only with engine `fsdp`; `"off"` takes no `tp_comm_overlap` (async TP is a pass of
//!   `torch.compile`).
//!
//! Unknown fields are errors, with the nearest known field as hint.

use super::{Plan, Recompute, Schedule, Stage};
use crate::cluster::{Cluster, GpuId};
use crate::error::InputError;
use crate::model::{Model, OpKind};
use crate::names;
use std::collections::{BTreeMap, BTreeSet};

/// Reads a plan from its JSON form (see the module documentation). Errors carry line and column,
/// and for unknown fields and names the dotted path of the field and the nearest known name.
pub fn parse_plan_json(src: &str) -> Result<Plan, InputError> {
    serde_json::from_str::<Plan>(src).map_err(|e| json_error(src, &e))
}

fn json_error(src: &str, e: &serde_json::Error) -> InputError {
    let mut err = InputError::from_json(e);
    let msg = err.message.clone();
    let quoted = backticked(&msg);
    let unknown_field = msg.starts_with("unknown field");
    if (unknown_field || msg.starts_with("unknown variant")) && !quoted.is_empty() {
        let name = quoted[0];
        let candidates = &quoted[1..];
        err.hint = match names::did_you_mean(names::nearest(name, candidates.iter().copied())) {
            Some(h) => Some(h),
            None if !candidates.is_empty() => Some(format!(
                "expected one of {}",
                candidates
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            None => None,
        };
        if unknown_field {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(src) {
                err.field = find_key(&v, name, "");
            }
        }
    }
    err
}

/// The substrings of `msg` between backticks, in order.
fn backticked(msg: &str) -> Vec<&str> {
    msg.split('`').skip(1).step_by(2).collect()
}

/// Dotted path (`stages[1].offload.wieghts`) of the first object key equal to `key`.
fn find_key(v: &serde_json::Value, key: &str, path: &str) -> Option<String> {
    match v {
        serde_json::Value::Object(map) => {
            let join = |k: &str| {
                if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                }
            };
            if map.contains_key(key) {
                return Some(join(key));
            }
            map.iter().find_map(|(k, v)| find_key(v, key, &join(k)))
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| find_key(v, key, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// One reason a plan cannot run on a model and cluster. Stage indices count from 0 in the order
/// of `Plan::stages` (with interleaving: model chunks).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("the plan has no stages; it needs at least one")]
    NoStages,
    #[error("the plan has 0 micro-batches per iteration; it needs at least 1")]
    ZeroMicroBatches,
    #[error("the interleaved schedule has 0 virtual stages per GPU; it needs at least 1")]
    ZeroVirtualStages,
    #[error(
        "the interleaved schedule with {virtual_stages} virtual stages needs a number of stages \
         divisible by {virtual_stages}, but the plan has {stages}"
    )]
    StagesNotDivisibleByVirtual { stages: usize, virtual_stages: u32 },
    #[error(
        "the interleaved schedule needs the micro-batch count to be a multiple of the pipeline \
         depth, but {micro_batches} micro-batches is not a multiple of {pp} stages"
    )]
    MicroBatchesNotDivisibleByDepth { micro_batches: u64, pp: usize },
    #[error("stage {stage} has {which} = 0, but it must be at least 1")]
    ZeroDegree { stage: usize, which: &'static str },
    #[error(
        "stage {stage} lists {devices} GPUs, but dp × tp = {dp} × {tp} = {} GPUs",
        *.dp as u64 * *.tp as u64
    )]
    DeviceCount {
        stage: usize,
        devices: usize,
        dp: u32,
        tp: u32,
    },
    #[error(
        "stage {stage} lists {devices} GPUs, but its replicas' TP degrees (replica_tp) add up to \
         {expected}"
    )]
    DeviceCountReplicaTp {
        stage: usize,
        devices: usize,
        expected: u64,
    },
    #[error("stage {stage} lists GPU {gpu} more than once")]
    DeviceRepeated {
        stage: usize,
        gpu: GpuId,
        /// Where in `devices` it is listed again.
        index: usize,
    },
    #[error(
        "stage {stage} uses {} that stage {first} already uses, but a GPU can serve only one stage \
         (only interleaved chunks share GPUs)",
        gpu_list(.gpus)
    )]
    DeviceShared {
        stage: usize,
        first: usize,
        gpus: Vec<GpuId>,
        /// Where in `devices` the first of them is.
        index: usize,
    },
    #[error(
        "stage {stage} is a chunk of the interleaved schedule over {pp} GPU stages, so it must \
         run on exactly the GPUs of stage {base}, in the same order, but its GPUs differ"
    )]
    InterleavedDevices {
        stage: usize,
        base: usize,
        pp: usize,
    },
    #[error(
        "stage {stage} is a chunk on the GPUs of stage {base}, so its {what} must be the same as \
         stage {base}'s ({base_value}), not {value}"
    )]
    InterleavedLayout {
        stage: usize,
        base: usize,
        what: &'static str,
        /// The JSON field that differs.
        field: &'static str,
        value: String,
        base_value: String,
    },
    #[error(
        "stage {stage} uses {}, which the cluster does not have: {available}",
        gpu_list(.gpus)
    )]
    UnknownGpus {
        stage: usize,
        gpus: Vec<GpuId>,
        /// What the cluster does have, in words.
        available: String,
        /// Where in `devices` the first of them is.
        index: usize,
    },
    #[error(
        "stage {stage} has no layers: its range starts at layer {start} and ends before layer {end}"
    )]
    EmptyStage {
        stage: usize,
        start: usize,
        end: usize,
    },
    #[error(
        "stage {stage} covers {}, but the model has only {num_layers} layers (0-{})",
        span(.start, .end),
        .num_layers.saturating_sub(1)
    )]
    LayersOutOfRange {
        stage: usize,
        start: usize,
        end: usize,
        num_layers: usize,
    },
    #[error(
        "{} in no stage: stage {stage} starts at layer {start}, but the stages before it end before \
         layer {from}",
        span_are(.from, .to)
    )]
    LayerGap {
        stage: usize,
        /// The uncovered layers `[from, to)`.
        from: usize,
        to: usize,
        start: usize,
    },
    #[error(
        "stage {stage} starts at layer {start}, but {} already in an earlier stage (every layer \
         belongs to exactly one stage, in order)",
        span_are(.start, .overlap_end)
    )]
    LayerOverlap {
        stage: usize,
        start: usize,
        /// The doubly covered layers are `[start, overlap_end)`.
        overlap_end: usize,
    },
    #[error(
        "{} in no stage: the stages end before layer {from}, but the model has {to} layers",
        span_are(.from, .to)
    )]
    LayersUncovered {
        from: usize,
        to: usize,
        /// The last stage, which should end at `to`.
        last_stage: usize,
    },
    #[error(
        "stage {stage} lists {sizes} micro-batch sizes, but has dp = {dp} replicas; give one size \
         per replica"
    )]
    MicroBatchSizesCount { stage: usize, sizes: usize, dp: u32 },
    #[error(
        "stage {stage} gives DP replica {replica} a micro-batch size of 0, but every replica needs \
         at least 1 sample per micro-batch"
    )]
    ZeroMicroBatchSize { stage: usize, replica: usize },
    #[error(
        "stage {stage} processes {samples} samples per micro-batch × {micro_batches} micro-batches \
         = {} samples per iteration, but global_batch is {global_batch}",
        *.samples as u128 * *.micro_batches as u128
    )]
    BatchMismatch {
        stage: usize,
        /// Samples per micro-batch: the sum of the stage's micro-batch sizes, over cp.
        samples: u64,
        micro_batches: u64,
        global_batch: u64,
    },
    #[error(
        "stage {stage} has tp = {tp}, which does not divide the model's {heads} attention heads"
    )]
    TpHeads { stage: usize, tp: u32, heads: u64 },
    #[error(
        "stage {stage} has tp = {tp}, but the model's {kv_heads} KV heads neither split evenly \
         over {tp} ranks nor divide {tp} (to be replicated)"
    )]
    TpKvHeads {
        stage: usize,
        tp: u32,
        kv_heads: u64,
    },
    #[error(
        "stage {stage} gives {given} TP degrees in replica_tp, but has dp = {dp} replicas; give \
         one per replica"
    )]
    ReplicaTpCount { stage: usize, given: usize, dp: u32 },
    #[error(
        "stage {stage} gives DP replica {replica} a TP degree of {degree}, which does not divide \
         the stage's tp = {tp}"
    )]
    ReplicaTpDivides {
        stage: usize,
        replica: usize,
        degree: u32,
        tp: u32,
    },
    #[error(
        "stage {stage} has tp = {tp}, but the largest of its replicas' TP degrees (replica_tp) is \
         {largest}"
    )]
    ReplicaTpLargest { stage: usize, tp: u32, largest: u32 },
    #[error("stage {stage}'s replica_samples are inconsistent: {reason}")]
    ReplicaSamples { stage: usize, reason: String },
    #[error("stage {stage} has zero = {zero}, but the ZeRO stages are 0, 1, 2 and 3")]
    ZeroStage { stage: usize, zero: u8 },
    #[error("stage {stage} offloads {value} of its {which}, but offload ratios must lie in 0..=1")]
    OffloadRatio {
        stage: usize,
        which: &'static str,
        value: f64,
    },
    #[error("stage {stage} recomputes {layers} layers, but has only {stage_layers}")]
    RecomputeLayers {
        stage: usize,
        layers: u32,
        stage_layers: usize,
    },
    #[error("moe_capacity_factor is {value}, but it must be a positive number")]
    CapacityFactor { value: f64 },
    #[error(
        "tp_comm_overlap is on, but stage {stage} has tp = {tp} without sequence parallelism: \
         only its all-gathers and reduce-scatters are pipelined with the GEMMs"
    )]
    TpOverlapWithoutSequenceParallel { stage: usize, tp: u32 },
    #[error(
        "tp_comm_overlap is on, but replica {replica} of stage {stage} spans nodes: the overlap \
         exchanges the chunks through the GPUs' mapped memory, inside one node"
    )]
    TpOverlapAcrossNodes { stage: usize, replica: usize },
    #[error(
        "compile is {compile}, but the engine is {engine}: it runs its own fused kernels, not \
         PyTorch's model code"
    )]
    CompileOutsideFsdp {
        engine: &'static str,
        compile: &'static str,
    },
    #[error(
        "collective_dtypes.params is fp8 (Megatron's --fp8-param-gather), which needs \
         precision fp8, engine megatron and its distributed optimizer or Megatron-FSDP (zero of \
         1 or more on every stage: the flag is global); this plan has precision {precision}, \
         engine {engine}, zero {zero}"
    )]
    Fp8ParamGather {
        precision: &'static str,
        engine: &'static str,
        zero: u8,
    },
    #[error(
        "the plan trains in FP8 by torchao's rowwise recipe (fp8-rowwise) with engine {engine}, \
         whose FP8 is Transformer Engine's (per-tensor, block or MX scales) or none"
    )]
    RowwiseOutsideFsdp { engine: &'static str },
    #[error(
        "tp_comm_overlap is on, but compile is off: torchtitan's async TP is a pass of \
         torch.compile over the model"
    )]
    TpOverlapEager,
    #[error(
        "stage {stage} checkpoints op by op (recompute \"ops\"), but the engine is {engine}: \
         op-level checkpointing is a policy of PyTorch's checkpoint over the model's code"
    )]
    OpCheckpointOutsideFsdp { stage: usize, engine: &'static str },
    #[error("stage {stage} has ep = {ep}, which does not divide its dp = {dp}")]
    ExpertParallelDivides { stage: usize, ep: u32, dp: u32 },
    #[error("stage {stage} has ep = {ep}, but none of its layers is a mixture of experts")]
    ExpertParallelWithoutExperts { stage: usize, ep: u32 },
    #[error(
        "stage {stage} has ep = {ep}, which does not divide the {experts} experts of layer {layer}"
    )]
    ExpertParallelExperts {
        stage: usize,
        ep: u32,
        layer: usize,
        experts: u64,
    },
    #[error(
        "stage {stage} has ep = {ep}, but {reason}: the replicas of an expert-parallel group \
         exchange tokens at every MoE layer and must run in step"
    )]
    ExpertParallelReplicas {
        stage: usize,
        ep: u32,
        reason: &'static str,
    },
    #[error("stage {stage} has etp = {etp}, but {reason}")]
    ExpertTensorParallel {
        stage: usize,
        etp: u32,
        reason: String,
    },
    #[error("stage {stage} has cp = {cp}, which does not divide its dp = {dp}")]
    ContextParallelDivides { stage: usize, cp: u32, dp: u32 },
    #[error(
        "stage {stage} has cp = {cp}, but stage 0 has cp = {first}: every stage splits the \
         sequences the same way, since the pipeline passes each chunk between the same ranks"
    )]
    ContextParallelStages { stage: usize, cp: u32, first: u32 },
    #[error(
        "stage {stage} has cp = {cp}, but {reason}: the replicas of a context-parallel group hold \
         chunks of the same sequences and run attention together"
    )]
    ContextParallelReplicas {
        stage: usize,
        cp: u32,
        reason: &'static str,
    },
    #[error(
        "stage {stage} has cp = {cp}, but the model has no sequence to split (its layers are \
         costed per sample)"
    )]
    ContextParallelModel { stage: usize, cp: u32 },
    #[error(
        "the plan trains in FP8, but stage {stage} runs on {gpu} ({arch}), which has no FP8 \
         tensor cores (Ada, Hopper and Blackwell GPUs have them)"
    )]
    Fp8Unsupported {
        stage: usize,
        gpu: String,
        arch: String,
    },
    #[error(
        "stage {stage} has cp = {cp} with tp = {tp} and cp_comm all-to-all, but layer {layer}'s \
         {heads} attention heads do not split over tp × cp = {} GPUs",
        *.tp as u64 * *.cp as u64
    )]
    ContextParallelHeads {
        stage: usize,
        cp: u32,
        tp: u32,
        layer: usize,
        heads: u64,
    },
}

impl PlanError {
    /// The dotted path of the JSON field the error concerns (`stages[1].devices[3]`), for
    /// pointing at it in the plan's text.
    pub fn path(&self) -> String {
        let st = |i: &usize, f: &str| format!("stages[{i}].{f}");
        match self {
            PlanError::NoStages | PlanError::StagesNotDivisibleByVirtual { .. } => "stages".into(),
            PlanError::ZeroMicroBatches | PlanError::MicroBatchesNotDivisibleByDepth { .. } => {
                "micro_batches".into()
            }
            PlanError::ZeroVirtualStages => "schedule.virtual_stages".into(),
            PlanError::ZeroDegree { stage, which } => st(stage, which),
            PlanError::DeviceCount { stage, .. }
            | PlanError::DeviceCountReplicaTp { stage, .. }
            | PlanError::InterleavedDevices { stage, .. } => st(stage, "devices"),
            PlanError::DeviceRepeated { stage, index, .. }
            | PlanError::DeviceShared { stage, index, .. }
            | PlanError::UnknownGpus { stage, index, .. } => {
                st(stage, &format!("devices[{index}]"))
            }
            PlanError::InterleavedLayout { stage, field, .. } => st(stage, field),
            PlanError::EmptyStage { stage, .. } => st(stage, "layers"),
            PlanError::LayersOutOfRange { stage, .. } => st(stage, "layers.end"),
            PlanError::LayerGap { stage, .. } | PlanError::LayerOverlap { stage, .. } => {
                st(stage, "layers.start")
            }
            PlanError::LayersUncovered { last_stage, .. } => st(last_stage, "layers.end"),
            PlanError::MicroBatchSizesCount { stage, .. }
            | PlanError::BatchMismatch { stage, .. } => st(stage, "micro_batch_sizes"),
            PlanError::ZeroMicroBatchSize { stage, replica } => {
                st(stage, &format!("micro_batch_sizes[{replica}]"))
            }
            PlanError::TpHeads { stage, .. } | PlanError::TpKvHeads { stage, .. } => {
                st(stage, "tp")
            }
            PlanError::ReplicaTpCount { stage, .. } | PlanError::ReplicaTpLargest { stage, .. } => {
                st(stage, "replica_tp")
            }
            PlanError::ReplicaTpDivides { stage, replica, .. } => {
                st(stage, &format!("replica_tp[{replica}]"))
            }
            PlanError::ReplicaSamples { stage, .. } => st(stage, "replica_samples"),
            PlanError::ZeroStage { stage, .. } => st(stage, "zero"),
            PlanError::OffloadRatio { stage, which, .. } => st(stage, &format!("offload.{which}")),
            PlanError::RecomputeLayers { stage, .. }
            | PlanError::OpCheckpointOutsideFsdp { stage, .. } => st(stage, "recompute"),
            PlanError::CapacityFactor { .. } => "moe_capacity_factor".into(),
            PlanError::CompileOutsideFsdp { .. } | PlanError::TpOverlapEager => "compile".into(),
            PlanError::RowwiseOutsideFsdp { .. } => "engine".into(),
            PlanError::Fp8ParamGather { .. } => "collective_dtypes.params".into(),
            PlanError::TpOverlapAcrossNodes { stage, .. } => st(stage, "devices"),
            PlanError::TpOverlapWithoutSequenceParallel { stage, .. } => {
                st(stage, "sequence_parallel")
            }
            PlanError::ExpertParallelDivides { stage, .. }
            | PlanError::ExpertParallelWithoutExperts { stage, .. }
            | PlanError::ExpertParallelExperts { stage, .. }
            | PlanError::ExpertParallelReplicas { stage, .. } => st(stage, "ep"),
            PlanError::ExpertTensorParallel { stage, .. } => st(stage, "etp"),
            PlanError::ContextParallelDivides { stage, .. }
            | PlanError::ContextParallelStages { stage, .. }
            | PlanError::ContextParallelReplicas { stage, .. }
            | PlanError::ContextParallelModel { stage, .. }
            | PlanError::ContextParallelHeads { stage, .. } => st(stage, "cp"),
            PlanError::Fp8Unsupported { stage, .. } => st(stage, "devices"),
        }
    }

    /// What to change, when there is more to say than the message.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            PlanError::NoStages => "add at least one stage".into(),
            PlanError::ZeroMicroBatches => "micro_batches must be at least 1".into(),
            PlanError::ZeroVirtualStages => {
                "use at least 1 virtual stage, or the `1f1b` schedule".into()
            }
            PlanError::StagesNotDivisibleByVirtual { virtual_stages, .. } => format!(
                "list pp × {virtual_stages} model chunks, chunk j on the GPUs of chunk j mod pp"
            ),
            PlanError::MicroBatchesNotDivisibleByDepth { pp, .. } => {
                format!("use a multiple of {pp} micro-batches")
            }
            PlanError::ZeroDegree { .. } => return None,
            PlanError::DeviceCount { dp, tp, .. } => format!(
                "list exactly dp × tp = {} GPUs, or change dp/tp",
                *dp as u64 * *tp as u64
            ),
            PlanError::DeviceCountReplicaTp { expected, .. } => {
                format!("list exactly {expected} GPUs, replica by replica, or change replica_tp")
            }
            PlanError::DeviceRepeated { gpu, .. } => {
                format!("list GPU {gpu} once; every GPU of a stage must be distinct")
            }
            PlanError::DeviceShared { stage, first, .. } => {
                format!("give stage {stage} GPUs that stage {first} does not use")
            }
            PlanError::InterleavedDevices { base, .. } => {
                format!("use the same GPUs as stage {base}, in the same order")
            }
            PlanError::InterleavedLayout {
                base,
                what,
                base_value,
                ..
            } => format!("use stage {base}'s {what}: {base_value}"),
            PlanError::UnknownGpus { .. } => {
                "GPUs are {\"node\": n, \"local\": g}, counted from 0 in the cluster's node order"
                    .into()
            }
            PlanError::EmptyStage { .. } => {
                "a stage's layers are the half-open range [start, end) with end > start".into()
            }
            PlanError::LayersOutOfRange { num_layers, .. } => format!(
                "layer ranges are half-open [start, end); the last stage ends at {num_layers}"
            ),
            PlanError::LayerGap { stage, from, .. } => {
                format!("start stage {stage} at layer {from}")
            }
            PlanError::LayerOverlap {
                stage, overlap_end, ..
            } => format!("start stage {stage} at layer {overlap_end}"),
            PlanError::LayersUncovered { to, .. } => format!("end the last stage at layer {to}"),
            PlanError::MicroBatchSizesCount { dp, .. } => {
                format!("give {dp} micro-batch sizes, one per DP replica")
            }
            PlanError::ZeroMicroBatchSize { .. } => "use a micro-batch size of at least 1".into(),
            PlanError::BatchMismatch {
                samples,
                micro_batches,
                global_batch,
                ..
            } => {
                let mut h = format!(
                    "sum(micro_batch_sizes) × micro_batches must equal global_batch: set \
                     global_batch to {}",
                    *samples as u128 * *micro_batches as u128
                );
                if *samples > 0 && global_batch.is_multiple_of(*samples) {
                    h.push_str(&format!(", or micro_batches to {}", global_batch / samples));
                }
                h
            }
            PlanError::TpHeads { heads, .. } => {
                format!("use a tp that divides {heads}: {}", divisors(*heads))
            }
            PlanError::TpKvHeads { kv_heads, .. } => {
                format!("use a tp that divides {kv_heads} or is a multiple of it")
            }
            PlanError::ReplicaTpCount { dp, .. } => {
                format!("give {dp} TP degrees, one per DP replica, or leave replica_tp out")
            }
            PlanError::ReplicaTpDivides { tp, .. } => format!(
                "use a degree that divides {tp} ({}), so that every replica's shards line up for \
                 the gradient reduction",
                divisors(*tp as u64)
            ),
            PlanError::ReplicaTpLargest { largest, .. } => {
                format!("set tp to {largest}, the largest of replica_tp")
            }
            PlanError::ReplicaSamples { .. } => {
                "one count per replica, each at least 1, summing to global_batch; micro_batches is \
                 the largest ⌈count / micro-batch size⌉"
                    .into()
            }
            PlanError::ZeroStage { .. } => "zero is 0, 1, 2 or 3".into(),
            PlanError::OffloadRatio { .. } => "offload fractions lie between 0 and 1".into(),
            PlanError::RecomputeLayers { stage_layers, .. } => {
                format!("recompute at most {stage_layers} layers, or \"full\"")
            }
            PlanError::OpCheckpointOutsideFsdp { .. } => {
                "set engine to fsdp (torchtitan), or recompute \"selective\" (the attention \
                 core) or \"full\""
                    .into()
            }
            PlanError::TpOverlapAcrossNodes { .. } => {
                "keep each TP group inside a node (Transformer Engine's userbuffers and torch's \
                 symmetric memory map the peers' buffers over the node's GPU links), or turn \
                 tp_comm_overlap off"
                    .into()
            }
            PlanError::CompileOutsideFsdp { .. } => {
                "set engine to fsdp (torchtitan, PyTorch FSDP), or leave compile out (on)".into()
            }
            PlanError::Fp8ParamGather { .. } => {
                "train in precision \"fp8\" with engine \"megatron\" and zero 1 or more on every \
                 stage, or leave collective_dtypes.params out"
                    .into()
            }
            PlanError::RowwiseOutsideFsdp { .. } => {
                "set engine to fsdp (torchtitan, PyTorch FSDP with torchao), or train in \
                 per-tensor FP8 (precision \"fp8\")"
                    .into()
            }
            PlanError::TpOverlapEager => {
                "compile the model (compile \"on\" or \"blocks\"), or tp_comm_overlap off".into()
            }
            PlanError::TpOverlapWithoutSequenceParallel { .. } => {
                "turn sequence_parallel on in every stage with tp > 1 (Megatron's arguments.py \
                 asserts it for --tp-comm-overlap), or tp_comm_overlap off"
                    .into()
            }
            PlanError::CapacityFactor { .. } => {
                "a capacity factor such as 1.0 or 1.25, or leave it out for dropless routing".into()
            }
            PlanError::ExpertParallelDivides { dp, .. } => format!(
                "ep is one of {} (it groups DP replicas)",
                divisors(*dp as u64)
            ),
            PlanError::ExpertParallelWithoutExperts { .. } => {
                "set ep to 1 (expert parallelism splits the experts of MoE layers)".into()
            }
            PlanError::ExpertParallelExperts { experts, .. } => {
                format!("ep is one of {}", divisors(*experts))
            }
            PlanError::ExpertParallelReplicas { .. } => {
                "give the stage's replicas one TP degree, one micro-batch size and the same \
                 micro-batch count, or set ep to 1"
                    .into()
            }
            PlanError::ExpertTensorParallel { .. } => {
                "etp divides tp, on a stage with MoE layers, one TP degree and sequence \
                 parallelism, with ep dividing dp × tp / etp; or leave etp out (tp)"
                    .into()
            }
            PlanError::ContextParallelDivides { dp, .. } => format!(
                "cp is one of {} (it groups DP replicas)",
                divisors(*dp as u64)
            ),
            PlanError::ContextParallelStages { first, .. } => {
                format!("set cp to {first} on every stage")
            }
            PlanError::ContextParallelReplicas { .. } => {
                "give the replicas of each group of cp consecutive ones the same TP degree and \
                 micro-batch size, or set cp to 1"
                    .into()
            }
            PlanError::ContextParallelModel { .. } => "set cp to 1".into(),
            PlanError::Fp8Unsupported { .. } => {
                "train in BF16 (precision \"bf16\"), or keep FP8 and place the stage on FP8 GPUs"
                    .into()
            }
            PlanError::ContextParallelHeads { .. } => {
                "use the ring (cp_comm \"ring\"), whose GPUs keep every head, or a cp that \
                 divides the heads per TP rank"
                    .into()
            }
        })
    }
}

/// `1, 2, 4, 8` (the divisors up to 64).
fn divisors(n: u64) -> String {
    let d: Vec<String> = (1..=n.min(64))
        .filter(|k| n.is_multiple_of(*k))
        .map(|k| k.to_string())
        .collect();
    d.join(", ")
}

/// `layer 3` or `layers 3-5` for the half-open range `[start, end)`.
fn span(start: &usize, end: &usize) -> String {
    if *end <= start + 1 {
        format!("layer {start}")
    } else {
        format!("layers {start}-{}", end - 1)
    }
}

/// `layer 3 is` or `layers 3-5 are`.
fn span_are(start: &usize, end: &usize) -> String {
    let s = span(start, end);
    if *end <= start + 1 {
        format!("{s} is")
    } else {
        format!("{s} are")
    }
}

/// `GPU n0g1` or `GPUs n0g1, n0g2` (at most 8 named).
fn gpu_list(gpus: &[GpuId]) -> String {
    let named: Vec<String> = gpus.iter().take(8).map(|g| g.to_string()).collect();
    let more = if gpus.len() > 8 {
        format!(" and {} more", gpus.len() - 8)
    } else {
        String::new()
    };
    if gpus.len() == 1 {
        format!("GPU {}", named[0])
    } else {
        format!("GPUs {}{more}", named.join(", "))
    }
}

/// What GPUs the cluster has, in words, for the unknown-GPU message.
fn describe_cluster(cluster: &Cluster, missing: &[GpuId]) -> String {
    let n = cluster.nodes.len();
    if n == 0 {
        return "the cluster has no nodes".to_string();
    }
    // All missing GPUs on one existing node: say how many that node has.
    if let Some(node) = missing.first().map(|g| g.node) {
        if missing.iter().all(|g| g.node == node) && (node as usize) < n {
            let k = cluster.nodes[node as usize].num_gpus;
            return format!(
                "node {node} has {k} GPUs (n{node}g0..n{node}g{})",
                k.saturating_sub(1)
            );
        }
    }
    let counts: Vec<u32> = cluster.nodes.iter().map(|x| x.num_gpus).collect();
    let nodes = format!("{n} nodes (n0..n{})", n - 1);
    if counts.iter().all(|&c| c == counts[0]) {
        format!("the cluster has {nodes} with {} GPUs each", counts[0])
    } else if n <= 16 {
        let list: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
        format!(
            "the cluster has {nodes} with {} GPUs respectively",
            list.join(", ")
        )
    } else {
        format!(
            "the cluster has {nodes} with {} to {} GPUs each",
            counts.iter().min().unwrap(),
            counts.iter().max().unwrap()
        )
    }
}

/// Checks `plan` against `model` and `cluster`, returning every problem found (not only the
/// first). The cost model and the simulator may assume a plan that passes.
///
/// Not checked (allowed): DP replicas of a stage with different micro-batch sizes (Metis,
/// Poplar); sequence parallelism with tp = 1 (a no-op); different tp or dp on different stages;
/// TP groups spanning nodes; GPUs of the cluster left unused. With an interleaved schedule whose
/// structure is broken (0 virtual stages, or a stage count not divisible by them), GPU sharing
/// between stages is not checked, since which stages may share is then undefined.
pub fn validate(plan: &Plan, model: &Model, cluster: &Cluster) -> Result<(), Vec<PlanError>> {
    let mut errs = Vec::new();
    let stages = &plan.stages;
    if stages.is_empty() {
        errs.push(PlanError::NoStages);
    }
    if plan.micro_batches == 0 {
        errs.push(PlanError::ZeroMicroBatches);
    }

    // Physical pipeline depth; `None` when an interleaved structure is broken.
    let mut depth = Some(stages.len());
    if let Schedule::Interleaved { virtual_stages: v } = plan.schedule {
        if v == 0 {
            errs.push(PlanError::ZeroVirtualStages);
            depth = None;
        } else if !stages.len().is_multiple_of(v as usize) {
            errs.push(PlanError::StagesNotDivisibleByVirtual {
                stages: stages.len(),
                virtual_stages: v,
            });
            depth = None;
        } else {
            let pp = stages.len() / v as usize;
            if pp > 0 && plan.micro_batches > 0 && !plan.micro_batches.is_multiple_of(pp as u64) {
                errs.push(PlanError::MicroBatchesNotDivisibleByDepth {
                    micro_batches: plan.micro_batches,
                    pp,
                });
            }
            depth = Some(pp);
        }
    }

    for i in 0..stages.len() {
        check_stage(plan, model, cluster, i, &mut errs);
    }
    if plan.precision.is_fp8() {
        for (i, s) in stages.iter().enumerate() {
            let lacking = (s.devices.iter())
                .filter(|g| cluster.contains(**g))
                .map(|g| &cluster.gpu_types[cluster.gpu_type_of(*g).0])
                .find(|t| crate::gpu::fp8_peak(t).is_none());
            if let Some(t) = lacking {
                errs.push(PlanError::Fp8Unsupported {
                    stage: i,
                    gpu: t.name.clone(),
                    arch: format!("{:?}", t.arch),
                });
            }
        }
    }
    check_layers(plan, model, &mut errs);
    let engine = plan.engine.name();
    if !plan.compile.is_on() && !plan.engine.runs_pytorch_code() {
        errs.push(PlanError::CompileOutsideFsdp {
            engine,
            compile: plan.compile.name(),
        });
    }
    if plan.precision == super::Precision::Fp8Rowwise && !plan.engine.runs_pytorch_code() {
        errs.push(PlanError::RowwiseOutsideFsdp { engine });
    }
    if plan.collective_dtypes.params == Some(super::Precision::Fp8) && !plan.stages.is_empty() {
        let zero = plan.stages.iter().map(|s| s.zero).min().unwrap_or(0);
        if plan.precision != super::Precision::Fp8
            || plan.engine != super::Engine::Megatron
            || zero < 1
        {
            errs.push(PlanError::Fp8ParamGather {
                precision: plan.precision.name(),
                engine,
                zero,
            });
        }
    }
    if !plan.engine.runs_pytorch_code() {
        if let Some(stage) = plan
            .stages
            .iter()
            .position(|s| s.recompute == Recompute::Ops)
        {
            errs.push(PlanError::OpCheckpointOutsideFsdp { stage, engine });
        }
    }
    // CompileConfig.__post_init__ refuses async TP without the model compiled.
    if plan.tp_comm_overlap
        && plan.compile == super::Compile::Off
        && plan.stages.iter().any(|s| s.tp > 1)
    {
        errs.push(PlanError::TpOverlapEager);
    }
    if plan.tp_comm_overlap {
        for (i, st) in plan.stages.iter().enumerate() {
            if st.tp > 1 && !st.sequence_parallel {
                errs.push(PlanError::TpOverlapWithoutSequenceParallel {
                    stage: i,
                    tp: st.tp,
                });
            }
            for r in 0..st.dp as usize {
                if st.tp_of(r) > 1 && !super::Stage::in_one_node(st.replica(r)) {
                    errs.push(PlanError::TpOverlapAcrossNodes {
                        stage: i,
                        replica: r,
                    });
                }
            }
        }
    }
    if let Some(c) = plan.moe_capacity_factor {
        if !(c > 0.0 && c.is_finite()) {
            errs.push(PlanError::CapacityFactor { value: c });
        }
    }
    if let Some(pp) = depth {
        check_sharing(plan, pp, &mut errs);
    }

    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

fn check_stage(plan: &Plan, model: &Model, cluster: &Cluster, i: usize, errs: &mut Vec<PlanError>) {
    let s = &plan.stages[i];
    if s.tp == 0 {
        errs.push(PlanError::ZeroDegree {
            stage: i,
            which: "tp",
        });
    }
    if s.dp == 0 {
        errs.push(PlanError::ZeroDegree {
            stage: i,
            which: "dp",
        });
    }
    if s.replica_tp.is_empty() {
        if s.tp > 0 && s.dp > 0 && s.devices.len() as u64 != s.tp as u64 * s.dp as u64 {
            errs.push(PlanError::DeviceCount {
                stage: i,
                devices: s.devices.len(),
                dp: s.dp,
                tp: s.tp,
            });
        }
    } else {
        check_replica_tp(i, s, errs);
    }
    check_expert_parallel(model, i, s, errs);
    check_expert_tensor_parallel(model, i, s, errs);
    check_context_parallel(plan, model, i, s, errs);
    if s.dp > 0 && s.micro_batch_sizes.len() != s.dp as usize {
        errs.push(PlanError::MicroBatchSizesCount {
            stage: i,
            sizes: s.micro_batch_sizes.len(),
            dp: s.dp,
        });
    }
    for (r, &b) in s.micro_batch_sizes.iter().enumerate() {
        if b == 0 {
            errs.push(PlanError::ZeroMicroBatchSize {
                stage: i,
                replica: r,
            });
        }
    }
    // A context-parallel group's replicas share their samples.
    let samples =
        (s.micro_batch_sizes.iter()).fold(0u64, |a, &b| a.saturating_add(b)) / s.cp.max(1) as u64;
    if !s.replica_samples.is_empty() {
        check_replica_samples(plan, i, s, errs);
    } else if samples > 0
        && plan.micro_batches > 0
        && samples as u128 * plan.micro_batches as u128 != plan.global_batch as u128
    {
        errs.push(PlanError::BatchMismatch {
            stage: i,
            samples,
            micro_batches: plan.micro_batches,
            global_batch: plan.global_batch,
        });
    }
    if s.zero > 3 {
        errs.push(PlanError::ZeroStage {
            stage: i,
            zero: s.zero,
        });
    }
    for (which, value) in [
        ("weights", s.offload.weights),
        ("gradients", s.offload.gradients),
        ("optimizer", s.offload.optimizer),
        ("activations", s.offload.activations),
    ] {
        if !(0.0..=1.0).contains(&value) {
            errs.push(PlanError::OffloadRatio {
                stage: i,
                which,
                value,
            });
        }
    }
    if let Recompute::Layers(n) = s.recompute {
        if !s.layers.is_empty() && n as usize > s.layers.len() {
            errs.push(PlanError::RecomputeLayers {
                stage: i,
                layers: n,
                stage_layers: s.layers.len(),
            });
        }
    }

    // GPUs: repeated inside the stage, or not in the cluster.
    let mut seen = BTreeSet::new();
    let mut missing = Vec::new();
    let mut first_missing = None;
    for (j, &g) in s.devices.iter().enumerate() {
        if !seen.insert(g) {
            // Report each repeated GPU once.
            let reported = errs.iter().any(|e| {
                matches!(e, PlanError::DeviceRepeated { stage, gpu, .. } if *stage == i && *gpu == g)
            });
            if !reported {
                errs.push(PlanError::DeviceRepeated {
                    stage: i,
                    gpu: g,
                    index: j,
                });
            }
        }
        if !cluster.contains(g) && !missing.contains(&g) {
            missing.push(g);
            first_missing.get_or_insert(j);
        }
    }
    if !missing.is_empty() {
        errs.push(PlanError::UnknownGpus {
            stage: i,
            available: describe_cluster(cluster, &missing),
            gpus: missing,
            index: first_missing.unwrap_or(0),
        });
    }

    // Tensor parallelism against the attention heads of every attention core in the stage
    // (models may mix shapes: MoE splices, AMP's heterogeneous model).
    let mut degrees: BTreeSet<u32> = s.replica_tp.iter().copied().collect();
    degrees.insert(s.tp);
    degrees.remove(&0);
    for degree in degrees {
        let tp = degree as u64;
        let end = s.layers.end.min(model.layers.len());
        let mut shapes: BTreeSet<(u64, u64)> = BTreeSet::new();
        for l in &model.layers[s.layers.start.min(end)..end] {
            for op in &l.ops {
                if let OpKind::Attention {
                    heads, kv_heads, ..
                } = op.kind
                {
                    shapes.insert((heads, kv_heads));
                }
            }
        }
        for (heads, kv_heads) in shapes {
            let heads_ok = heads.is_multiple_of(tp);
            if !heads_ok {
                errs.push(PlanError::TpHeads {
                    stage: i,
                    tp: degree,
                    heads,
                });
            }
            // With as many KV heads as heads the heads check already said it.
            if (heads_ok || kv_heads != heads) && !tp_fits_kv_heads(tp, kv_heads) {
                errs.push(PlanError::TpKvHeads {
                    stage: i,
                    tp: degree,
                    kv_heads,
                });
            }
        }
    }
}

/// Per-replica TP degrees (`Stage::replica_tp`): one per replica, each at least 1 and dividing
/// the stage's `tp`, which is the largest; the devices are their sum.
fn check_replica_tp(i: usize, s: &Stage, errs: &mut Vec<PlanError>) {
    if s.dp > 0 && s.replica_tp.len() != s.dp as usize {
        errs.push(PlanError::ReplicaTpCount {
            stage: i,
            given: s.replica_tp.len(),
            dp: s.dp,
        });
    }
    for (r, &t) in s.replica_tp.iter().enumerate() {
        if t == 0 {
            errs.push(PlanError::ZeroDegree {
                stage: i,
                which: "replica_tp",
            });
        } else if s.tp > 0 && !s.tp.is_multiple_of(t) {
            errs.push(PlanError::ReplicaTpDivides {
                stage: i,
                replica: r,
                degree: t,
                tp: s.tp,
            });
        }
    }
    let largest = s.replica_tp.iter().copied().max().unwrap_or(0);
    if s.tp > 0 && largest != s.tp {
        errs.push(PlanError::ReplicaTpLargest {
            stage: i,
            tp: s.tp,
            largest,
        });
    }
    let expected: u64 = s.replica_tp.iter().map(|&t| t as u64).sum();
    if s.devices.len() as u64 != expected {
        errs.push(PlanError::DeviceCountReplicaTp {
            stage: i,
            devices: s.devices.len(),
            expected,
        });
    }
}

/// Expert parallelism (`Stage::ep`): at least 1, dividing dp and every MoE layer's expert
/// count, on a stage with MoE layers whose replicas run in step (one TP degree, one
/// micro-batch size, no per-replica sample counts).
fn check_expert_parallel(model: &Model, i: usize, s: &Stage, errs: &mut Vec<PlanError>) {
    let ep = s.ep;
    if ep == 0 {
        errs.push(PlanError::ZeroDegree {
            stage: i,
            which: "ep",
        });
        return;
    }
    if ep == 1 {
        return;
    }
    // (With expert tensor parallelism below TP the expert ranks are not replicas:
    // `check_expert_tensor_parallel`.)
    if s.dp > 0 && s.expert_tp() == s.tp && !s.dp.is_multiple_of(ep) {
        errs.push(PlanError::ExpertParallelDivides {
            stage: i,
            ep,
            dp: s.dp,
        });
    }
    let layers = s.layers.start.min(model.layers.len())..s.layers.end.min(model.layers.len());
    let moe: Vec<(usize, u64)> = layers
        .filter_map(|l| model.layers[l].experts().map(|(e, _)| (l, e)))
        .collect();
    if moe.is_empty() {
        errs.push(PlanError::ExpertParallelWithoutExperts { stage: i, ep });
    }
    if let Some(&(layer, experts)) = moe.iter().find(|(_, e)| !e.is_multiple_of(ep as u64)) {
        errs.push(PlanError::ExpertParallelExperts {
            stage: i,
            ep,
            layer,
            experts,
        });
    }
    let reason = if !s.replica_tp.is_empty() {
        Some("its replicas have different TP degrees")
    } else if s.micro_batch_sizes.windows(2).any(|w| w[0] != w[1]) {
        Some("its replicas have different micro-batch sizes")
    } else if !s.replica_samples.is_empty() {
        Some("its replicas process different numbers of samples")
    } else {
        None
    };
    if let Some(reason) = reason {
        errs.push(PlanError::ExpertParallelReplicas {
            stage: i,
            ep,
            reason,
        });
    }
}

/// Expert tensor parallelism (`Stage::etp`): at least 1; below TP it divides tp, on a stage with
/// MoE layers whose replicas have one TP degree and sequence parallelism (each TP rank routes
/// its own tokens), and ep divides the stage's `dp × tp / etp` expert ranks.
fn check_expert_tensor_parallel(model: &Model, i: usize, s: &Stage, errs: &mut Vec<PlanError>) {
    let Some(etp) = s.etp else {
        return;
    };
    if etp == 0 {
        errs.push(PlanError::ZeroDegree {
            stage: i,
            which: "etp",
        });
        return;
    }
    if etp == s.tp || s.tp == 0 {
        return;
    }
    let layers = s.layers.start.min(model.layers.len())..s.layers.end.min(model.layers.len());
    let ranks = s.dp as u64 * s.tp as u64 / etp as u64;
    let reason = if !s.tp.is_multiple_of(etp) {
        Some(format!("it does not divide tp = {}", s.tp))
    } else if !s.replica_tp.is_empty() {
        Some("its replicas have different TP degrees".to_string())
    } else if !layers.clone().any(|l| model.layers[l].experts().is_some()) {
        Some("none of its layers is a mixture of experts".to_string())
    } else if !s.sequence_parallel {
        Some(
            "sequence parallelism is off: the experts take each TP rank's own tokens, which it \
             gives them"
                .to_string(),
        )
    } else if s.ep > 0 && !ranks.is_multiple_of(s.ep as u64) {
        Some(format!(
            "ep = {} does not divide the stage's dp × tp / etp = {ranks} expert ranks",
            s.ep
        ))
    } else {
        None
    };
    if let Some(reason) = reason {
        errs.push(PlanError::ExpertTensorParallel {
            stage: i,
            etp,
            reason,
        });
    }
}

/// Context parallelism (`Stage::cp`): at least 1, dividing dp, the same on every stage, on a
/// model with sequences, each group's replicas at one TP degree and micro-batch size, without
/// per-replica sample counts.
fn check_context_parallel(
    plan: &Plan,
    model: &Model,
    i: usize,
    s: &Stage,
    errs: &mut Vec<PlanError>,
) {
    let cp = s.cp;
    if cp == 0 {
        errs.push(PlanError::ZeroDegree {
            stage: i,
            which: "cp",
        });
        return;
    }
    let first = plan.stages[0].cp;
    if i > 0 && cp != first && first > 0 {
        errs.push(PlanError::ContextParallelStages {
            stage: i,
            cp,
            first,
        });
    }
    if cp == 1 {
        return;
    }
    if s.dp > 0 && !s.dp.is_multiple_of(cp) {
        errs.push(PlanError::ContextParallelDivides {
            stage: i,
            cp,
            dp: s.dp,
        });
        return;
    }
    if model.per_sample {
        errs.push(PlanError::ContextParallelModel { stage: i, cp });
    }
    let uneven = |v: &[u64]| v.chunks(cp as usize).any(|g| g.iter().any(|&x| x != g[0]));
    let tps: Vec<u64> = s.replica_tp.iter().map(|&t| t as u64).collect();
    let reason = if s.micro_batch_sizes.len() == s.dp as usize && uneven(&s.micro_batch_sizes) {
        Some("replicas of one group have different micro-batch sizes")
    } else if tps.len() == s.dp as usize && uneven(&tps) {
        Some("replicas of one group have different TP degrees")
    } else if !s.replica_samples.is_empty() {
        Some("its replicas process different numbers of samples")
    } else {
        None
    };
    if let Some(reason) = reason {
        errs.push(PlanError::ContextParallelReplicas {
            stage: i,
            cp,
            reason,
        });
    }
    // Ulysses hands each GPU 1/cp of its TP rank's heads.
    if plan.cp_comm == super::CpComm::AllToAll {
        let layers = s.layers.start.min(model.layers.len())..s.layers.end.min(model.layers.len());
        for r in 0..s.dp as usize {
            let tp = s.replica_tp.get(r).copied().unwrap_or(s.tp).max(1);
            let heads = layers.clone().find_map(|l| {
                model.layers[l].ops.iter().find_map(|o| match o.kind {
                    OpKind::Attention { heads, .. }
                        if !heads.is_multiple_of(tp as u64 * cp as u64) =>
                    {
                        Some((l, heads))
                    }
                    _ => None,
                })
            });
            if let Some((layer, heads)) = heads {
                errs.push(PlanError::ContextParallelHeads {
                    stage: i,
                    cp,
                    tp,
                    layer,
                    heads,
                });
                break;
            }
        }
    }
}

/// Per-replica sample counts (`Stage::replica_samples`): one per replica, each at least one,
/// summing to the global batch, on a one-stage plan whose `micro_batches` is the largest step
/// count; equal step counts under ZeRO-2/3.
fn check_replica_samples(plan: &Plan, i: usize, s: &Stage, errs: &mut Vec<PlanError>) {
    let bad = |reason: String| PlanError::ReplicaSamples { stage: i, reason };
    if plan.stages.len() != 1 {
        errs.push(bad(format!(
            "per-replica sample counts need a one-stage plan, but the plan has {} stages",
            plan.stages.len()
        )));
        return;
    }
    if s.replica_samples.len() != s.micro_batch_sizes.len() {
        errs.push(bad(format!(
            "{} counts for {} replicas; give one per replica",
            s.replica_samples.len(),
            s.micro_batch_sizes.len()
        )));
        return;
    }
    if let Some(r) = s.replica_samples.iter().position(|&n| n == 0) {
        errs.push(bad(format!(
            "replica {r} processes no sample; every replica needs at least one"
        )));
        return;
    }
    let total = s.replica_samples.iter().fold(0u128, |a, &n| a + n as u128);
    if total != plan.global_batch as u128 {
        errs.push(bad(format!(
            "the replicas process {total} samples per iteration, but global_batch is {}",
            plan.global_batch
        )));
    }
    if s.micro_batch_sizes.contains(&0) {
        return;
    }
    let steps: Vec<u64> = (0..s.replica_samples.len())
        .map(|r| s.replica_steps(r, plan.micro_batches).0)
        .collect();
    let most = steps.iter().copied().max().unwrap_or(0);
    if plan.micro_batches != most {
        errs.push(bad(format!(
            "the replicas run at most {most} micro-batches, so micro_batches must be {most}, not {}",
            plan.micro_batches
        )));
    }
    if s.zero >= 2 && steps.iter().any(|&n| n != most) {
        errs.push(bad(format!(
            "ZeRO-{} runs its collectives every micro-batch, so every replica must run the same \
             number of micro-batches (they run {})",
            s.zero,
            steps
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}

/// KV heads split over the TP ranks, or (tp a multiple of them) replicated as Megatron does.
pub(crate) fn tp_fits_kv_heads(tp: u64, kv_heads: u64) -> bool {
    kv_heads > 0 && (kv_heads.is_multiple_of(tp) || tp.is_multiple_of(kv_heads))
}

fn check_layers(plan: &Plan, model: &Model, errs: &mut Vec<PlanError>) {
    let n = model.layers.len();
    let mut next = 0usize;
    for (i, s) in plan.stages.iter().enumerate() {
        let (a, b) = (s.layers.start, s.layers.end);
        if b <= a {
            errs.push(PlanError::EmptyStage {
                stage: i,
                start: a,
                end: b,
            });
            continue;
        }
        if b > n {
            errs.push(PlanError::LayersOutOfRange {
                stage: i,
                start: a,
                end: b,
                num_layers: n,
            });
        }
        let gap_end = a.min(n);
        if gap_end > next {
            errs.push(PlanError::LayerGap {
                stage: i,
                from: next,
                to: gap_end,
                start: a,
            });
        } else if a < next {
            errs.push(PlanError::LayerOverlap {
                stage: i,
                start: a,
                overlap_end: b.min(next),
            });
        }
        next = next.max(b);
    }
    if !plan.stages.is_empty() && next < n {
        errs.push(PlanError::LayersUncovered {
            from: next,
            to: n,
            last_stage: plan.stages.len() - 1,
        });
    }
}

/// GPUs shared between stages. Stages `0..pp` must be disjoint; with interleaving, stage `j ≥ pp`
/// must use exactly the GPUs of stage `j mod pp`.
fn check_sharing(plan: &Plan, pp: usize, errs: &mut Vec<PlanError>) {
    let mut owner: BTreeMap<GpuId, usize> = BTreeMap::new();
    for (i, s) in plan.stages.iter().enumerate().take(pp) {
        // (first stage) -> GPUs this stage shares with it
        // (first stage) -> (GPUs this stage shares with it, where the first is in `devices`)
        let mut shared: BTreeMap<usize, (Vec<GpuId>, usize)> = BTreeMap::new();
        let mut own = BTreeSet::new();
        for (j, &g) in s.devices.iter().enumerate() {
            if !own.insert(g) {
                continue; // repeated inside the stage: reported by `check_stage`
            }
            match owner.get(&g) {
                Some(&first) => shared.entry(first).or_insert((Vec::new(), j)).0.push(g),
                None => {
                    owner.insert(g, i);
                }
            }
        }
        for (first, (gpus, index)) in shared {
            errs.push(PlanError::DeviceShared {
                stage: i,
                first,
                gpus,
                index,
            });
        }
    }
    if pp == 0 {
        return;
    }
    for (j, s) in plan.stages.iter().enumerate().skip(pp) {
        let base = j % pp;
        let b = &plan.stages[base];
        // Chunks share their GPUs' memory and replicas: the same layout, replica by replica.
        if s.devices != b.devices {
            errs.push(PlanError::InterleavedDevices { stage: j, base, pp });
        }
        let mut differ =
            |what: &'static str, field: &'static str, value: String, base_value: String| {
                if value != base_value {
                    errs.push(PlanError::InterleavedLayout {
                        stage: j,
                        base,
                        what,
                        field,
                        value,
                        base_value,
                    });
                }
            };
        differ("tp", "tp", s.tp.to_string(), b.tp.to_string());
        differ(
            "replicas' TP degrees",
            "replica_tp",
            format!("{:?}", s.replica_tp),
            format!("{:?}", b.replica_tp),
        );
        differ("dp", "dp", s.dp.to_string(), b.dp.to_string());
        differ(
            "micro-batch sizes",
            "micro_batch_sizes",
            format!("{:?}", s.micro_batch_sizes),
            format!("{:?}", b.micro_batch_sizes),
        );
        differ("ZeRO stage", "zero", s.zero.to_string(), b.zero.to_string());
        differ(
            "offload ratios",
            "offload",
            format!("{:?}", s.offload),
            format!("{:?}", b.offload),
        );
        differ(
            "sequence parallelism",
            "sequence_parallel",
            s.sequence_parallel.to_string(),
            b.sequence_parallel.to_string(),
        );
    }
}

/// Checks a sequence length against a model: at least 1, and within a learned position table.
pub fn validate_seq_len(model: &Model, seq: u64) -> Result<(), String> {
    if seq == 0 {
        return Err("the sequence length must be at least 1".to_string());
    }
    if let Some(t) = &model.transformer {
        if t.position == crate::model::PositionKind::Learned && seq > t.max_seq_len {
            return Err(format!(
                "{} learns {} position embeddings, so sequences of {seq} tokens do not fit; \
                 use at most {} (or a model with rotary or ALiBi positions)",
                model.name, t.max_seq_len, t.max_seq_len
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    use crate::cluster::{Cluster, GpuTypeId, Node};
    use crate::gpu;
    use crate::model::{Model, TransformerConfig};
    use crate::units::{BytesPerSec, Seconds};
    use std::collections::BTreeMap;

    /// A cluster of A100 nodes with the given GPU counts.
    pub fn cluster(gpus_per_node: &[u32]) -> Cluster {
        Cluster {
            name: "test".to_string(),
            gpu_types: vec![gpu::lookup("a100-sxm4-80gb").unwrap()],
            nodes: gpus_per_node
                .iter()
                .map(|&n| Node {
                    gpu_type: GpuTypeId(0),
                    num_gpus: n,
                    intra_bandwidth: BytesPerSec::gb_s(300.0),
                    inter_bandwidth: BytesPerSec::gbps(200.0),
                    host_memory: crate::cluster::default_host_memory(n),
                    group: 0,
                })
                .collect(),
            pair_bandwidth: BTreeMap::new(),
            intra_latency: Seconds::us(5.0),
            inter_latency: Seconds::us(10.0),
        }
    }

    /// GPT with `blocks` transformer blocks (so `blocks + 2` layers) and 16 heads.
    pub fn gpt(blocks: u64) -> Model {
        TransformerConfig::gpt("test-gpt", blocks, 1024, 16, 2048).build()
    }

    /// GPT-3 175B: 96 blocks, 96 heads.
    pub fn gpt3() -> Model {
        TransformerConfig::gpt("gpt3-175b", 96, 12288, 96, 2048).build()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{cluster, gpt};
    use super::*;
    use crate::model::TransformerConfig;
    use crate::plan::{Engine, LayerRange, Offload, Precision};

    /// The JSON example of the module documentation, extracted from this file.
    fn doc_example() -> String {
        let src = include_str!("validate.rs");
        let start = src.find("//! ```json\n").unwrap() + "//! ```json\n".len();
        let end = start + src[start..].find("//! ```\n").unwrap();
        src[start..end]
            .lines()
            .map(|l| {
                l.strip_prefix("//!")
                    .unwrap()
                    .strip_prefix(' ')
                    .unwrap_or("")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn g(node: u32, local: u32) -> GpuId {
        GpuId { node, local }
    }

    /// A valid two-stage plan for `gpt(4)` (6 layers) on `cluster(&[4, 4])`: the doc example.
    fn example() -> Plan {
        parse_plan_json(&doc_example()).unwrap()
    }

    fn errors(plan: &Plan) -> Vec<PlanError> {
        errors_on(plan, &gpt(4), &cluster(&[4, 4]))
    }

    fn errors_on(plan: &Plan, model: &Model, cluster: &Cluster) -> Vec<PlanError> {
        match validate(plan, model, cluster) {
            Ok(()) => vec![],
            Err(e) => e,
        }
    }

    /// Exactly one error, and its message names what it should.
    fn only(plan: &Plan, words: &[&str]) -> PlanError {
        let e = errors(plan);
        assert_eq!(e.len(), 1, "{e:#?}");
        let msg = e[0].to_string();
        for w in words {
            assert!(msg.contains(w), "`{msg}` lacks `{w}`");
        }
        e.into_iter().next().unwrap()
    }

    #[test]
    fn the_documented_example_parses_and_is_valid() {
        let p = example();
        assert_eq!(p.global_batch, 32);
        assert_eq!(p.stages.len(), 2);
        assert_eq!(p.stages[1].recompute, Recompute::Layers(2));
        assert_eq!(p.stages[1].offload.optimizer, 0.5);
        assert_eq!(p.stages[0].recompute, Recompute::Selective);
        assert_eq!(p.engine, Engine::Megatron);
        assert_eq!(p.precision, Precision::Bf16);
        assert_eq!(errors(&p), vec![]);
    }

    #[test]
    fn plans_round_trip_through_json() {
        let mut p = example();
        p.schedule = Schedule::Interleaved { virtual_stages: 1 };
        p.engine = Engine::Deepspeed;
        p.precision = Precision::Fp32;
        p.stages[0].recompute = Recompute::Full;
        p.stages[0].offload = Offload {
            weights: 0.25,
            gradients: 1.0,
            optimizer: 0.0,
            activations: 0.125,
        };
        for plan in [example(), p] {
            let text = serde_json::to_string_pretty(&plan).unwrap();
            assert_eq!(parse_plan_json(&text).unwrap(), plan, "{text}");
        }
    }

    #[test]
    fn unknown_fields_are_located_and_hinted() {
        let src = doc_example().replace(
            "\"sequence_parallel\": true\n    },\n    {",
            "\"sequence_paralel\": true\n    },\n    {",
        );
        let e = parse_plan_json(&src).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("stages[0].sequence_paralel"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `sequence_parallel`?"));
        assert!(e.line.is_some() && e.column.is_some());

        let src = doc_example().replace("\"optimizer\": 0.5", "\"optimiser\": 0.5");
        let e = parse_plan_json(&src).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("stages[1].offload.optimiser"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `optimizer`?"));
        assert_eq!(e.line, Some(32), "{e}");

        let src = doc_example().replace("\"global_batch\"", "\"globl_batch\"");
        let e = parse_plan_json(&src).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("globl_batch"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `global_batch`?"));
    }

    #[test]
    fn unknown_names_and_bad_values_are_located() {
        let src = doc_example().replace("\"megatron\"", "\"megatorn\"");
        let e = parse_plan_json(&src).unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("did you mean `megatron`?"));
        assert_eq!(e.line, Some(5));

        let src = doc_example().replace("{ \"kind\": \"1f1b\" }", "{ \"kind\": \"interleaved\" }");
        let e = parse_plan_json(&src).unwrap_err();
        assert_eq!(
            e.hint.as_deref(),
            Some("did you mean `interleaved-1f1b`?"),
            "{e}"
        );

        let src = doc_example().replace("\"selective\"", "\"selectve\"");
        let e = parse_plan_json(&src).unwrap_err();
        assert!(e.message.contains("selectve"), "{e}");
        assert_eq!(e.line, Some(18), "{e}");

        let e = parse_plan_json("{\"global_batch\": 8}").unwrap_err();
        assert!(e.message.contains("missing field"), "{e}");
    }

    #[test]
    fn no_stages() {
        let mut p = example();
        p.stages.clear();
        assert_eq!(only(&p, &["no stages"]), PlanError::NoStages);
    }

    #[test]
    fn zero_micro_batches() {
        let mut p = example();
        p.micro_batches = 0;
        p.global_batch = 0;
        assert_eq!(only(&p, &["0 micro-batches"]), PlanError::ZeroMicroBatches);
    }

    #[test]
    fn gpu_shared_between_stages() {
        let mut p = example();
        p.stages[1].devices[0] = g(0, 2);
        p.stages[1].devices[1] = g(0, 3);
        let e = only(&p, &["stage 1", "n0g2, n0g3", "stage 0"]);
        assert_eq!(
            e,
            PlanError::DeviceShared {
                stage: 1,
                first: 0,
                gpus: vec![g(0, 2), g(0, 3)],
                index: 0,
            }
        );
    }

    #[test]
    fn gpu_repeated_inside_a_stage() {
        let mut p = example();
        p.stages[0].devices[3] = g(0, 0);
        let e = only(&p, &["stage 0", "n0g0", "more than once"]);
        assert_eq!(
            e,
            PlanError::DeviceRepeated {
                stage: 0,
                gpu: g(0, 0),
                index: 3,
            }
        );
    }

    #[test]
    fn gpu_not_in_the_cluster() {
        let mut p = example();
        p.stages[1].devices[3] = g(3, 7);
        let e = only(
            &p,
            &["stage 1", "n3g7", "2 nodes (n0..n1) with 4 GPUs each"],
        );
        assert!(matches!(e, PlanError::UnknownGpus { stage: 1, .. }));
        p.stages[1].devices[3] = g(1, 7);
        only(
            &p,
            &["stage 1", "GPU n1g7", "node 1 has 4 GPUs (n1g0..n1g3)"],
        );
        let e = errors_on(&p, &gpt(4), &cluster(&[4, 4, 8, 2]));
        assert!(e[0].to_string().contains("node 1 has 4 GPUs"), "{}", e[0]);
        p.stages[1].devices[2] = g(9, 0);
        let e = errors_on(&p, &gpt(4), &cluster(&[4, 4, 8, 2]));
        assert!(
            e[0].to_string()
                .contains("with 4, 4, 8, 2 GPUs respectively"),
            "{}",
            e[0]
        );
    }

    #[test]
    fn layer_gap() {
        let mut p = example();
        p.stages[1].layers.start = 4;
        let e = only(&p, &["layer 3 is in no stage", "stage 1 starts at layer 4"]);
        assert_eq!(
            e,
            PlanError::LayerGap {
                stage: 1,
                from: 3,
                to: 4,
                start: 4
            }
        );
        let mut p = example();
        p.stages[0].layers.start = 1;
        only(&p, &["layer 0 is in no stage", "stage 0 starts at layer 1"]);
    }

    #[test]
    fn layer_overlap() {
        let mut p = example();
        p.stages[1].layers.start = 1;
        let e = only(&p, &["stage 1 starts at layer 1", "layers 1-2 are already"]);
        assert_eq!(
            e,
            PlanError::LayerOverlap {
                stage: 1,
                start: 1,
                overlap_end: 3
            }
        );
    }

    #[test]
    fn layers_out_of_range() {
        let mut p = example();
        p.stages[1].layers.end = 9;
        let e = only(&p, &["stage 1 covers layers 3-8", "only 6 layers (0-5)"]);
        assert!(matches!(
            e,
            PlanError::LayersOutOfRange {
                stage: 1,
                end: 9,
                num_layers: 6,
                ..
            }
        ));
    }

    #[test]
    fn layers_uncovered_at_the_end() {
        let mut p = example();
        p.stages[1].layers.end = 5;
        let e = only(&p, &["layer 5 is in no stage", "the model has 6 layers"]);
        assert_eq!(
            e,
            PlanError::LayersUncovered {
                from: 5,
                to: 6,
                last_stage: 1
            }
        );
        p.stages[1].layers.end = 4;
        p.stages[1].recompute = Recompute::None;
        only(&p, &["layers 4-5 are in no stage"]);
    }

    #[test]
    fn empty_stage() {
        let mut p = example();
        p.stages[1].layers = LayerRange { start: 3, end: 3 };
        let e = errors(&p);
        assert!(
            e.contains(&PlanError::EmptyStage {
                stage: 1,
                start: 3,
                end: 3
            }),
            "{e:?}"
        );
        assert!(e[0].to_string().contains("stage 1 has no layers"));
        // Layers 3..6 are then covered by no stage.
        assert!(
            e.contains(&PlanError::LayersUncovered {
                from: 3,
                to: 6,
                last_stage: 1
            }),
            "{e:?}"
        );
    }

    #[test]
    fn device_count_must_be_dp_times_tp() {
        let mut p = example();
        p.stages[0].devices.pop();
        let e = only(&p, &["stage 0 lists 3 GPUs", "2 × 2 = 4"]);
        assert_eq!(
            e,
            PlanError::DeviceCount {
                stage: 0,
                devices: 3,
                dp: 2,
                tp: 2
            }
        );
    }

    #[test]
    fn zero_tp_or_dp() {
        let mut p = example();
        p.stages[0].tp = 0;
        let e = only(&p, &["stage 0 has tp = 0"]);
        assert_eq!(
            e,
            PlanError::ZeroDegree {
                stage: 0,
                which: "tp"
            }
        );
    }

    #[test]
    fn one_micro_batch_size_per_replica() {
        let mut p = example();
        p.stages[0].micro_batch_sizes = vec![4];
        let e = only(&p, &["stage 0 lists 1 micro-batch sizes", "dp = 2"]);
        assert_eq!(
            e,
            PlanError::MicroBatchSizesCount {
                stage: 0,
                sizes: 1,
                dp: 2
            }
        );
    }

    #[test]
    fn zero_micro_batch_size() {
        let mut p = example();
        p.stages[1].micro_batch_sizes = vec![4, 0];
        let e = only(&p, &["stage 1", "replica 1", "size of 0"]);
        assert_eq!(
            e,
            PlanError::ZeroMicroBatchSize {
                stage: 1,
                replica: 1
            }
        );
    }

    #[test]
    fn batch_arithmetic_must_add_up_on_every_stage() {
        let mut p = example();
        p.stages[1].micro_batch_sizes = vec![3, 2];
        let e = only(
            &p,
            &[
                "stage 1",
                "5 samples",
                "8 micro-batches",
                "= 40",
                "global_batch is 32",
            ],
        );
        assert_eq!(
            e,
            PlanError::BatchMismatch {
                stage: 1,
                samples: 5,
                micro_batches: 8,
                global_batch: 32
            }
        );
    }

    #[test]
    fn tp_must_divide_the_heads() {
        let mut p = example();
        // 16 heads; tp = 3 over 2 replicas does not divide them.
        p.stages[0].tp = 3;
        p.stages[0].dp = 1;
        p.stages[0].devices.pop();
        p.stages[0].micro_batch_sizes = vec![4];
        let e = errors(&p);
        assert!(
            e.contains(&PlanError::TpHeads {
                stage: 0,
                tp: 3,
                heads: 16
            }),
            "{e:?}"
        );
        assert!(e[0].to_string().contains("tp = 3"));
    }

    #[test]
    fn tp_against_kv_heads() {
        // 32 heads, 8 KV heads: tp 2, 4, 8 split them, 16 and 32 replicate them.
        let llama = TransformerConfig::llama("l", 4, 4096, 32, 8, 11008, 32000, 4096).build();
        let c = cluster(&[16, 16]);
        let plan_with_tp = |tp: u32| {
            let mut p = example();
            p.stages.truncate(1);
            p.stages[0].layers = LayerRange { start: 0, end: 6 };
            p.stages[0].tp = tp;
            p.stages[0].dp = 1;
            p.stages[0].devices = (0..tp).map(|l| g(0, l)).collect();
            p.stages[0].micro_batch_sizes = vec![4];
            p
        };
        for tp in [1, 2, 4, 8, 16] {
            assert_eq!(errors_on(&plan_with_tp(tp), &llama, &c), vec![], "tp={tp}");
        }
        let mut cfg = TransformerConfig::llama("l", 4, 4096, 48, 12, 11008, 32000, 4096);
        cfg.head_dim = 64;
        let m = cfg.build();
        // 48 heads, 12 KV heads: tp = 8 divides the heads, but not the KV heads nor they it.
        let e = errors_on(&plan_with_tp(8), &m, &c);
        assert_eq!(
            e,
            vec![PlanError::TpKvHeads {
                stage: 0,
                tp: 8,
                kv_heads: 12
            }]
        );
        assert!(e[0].to_string().contains("12 KV heads"));
        // tp = 6 divides the 48 heads and the 12 KV heads; tp = 24 replicates the KV heads.
        assert_eq!(errors_on(&plan_with_tp(6), &m, &c), vec![]);
        assert!(tp_fits_kv_heads(24, 12) && !tp_fits_kv_heads(8, 12));
    }

    #[test]
    fn zero_stage_above_3() {
        let mut p = example();
        p.stages[1].zero = 4;
        let e = only(&p, &["stage 1 has zero = 4"]);
        assert_eq!(e, PlanError::ZeroStage { stage: 1, zero: 4 });
    }

    #[test]
    fn offload_ratio_outside_0_1() {
        let mut p = example();
        p.stages[0].offload.activations = 1.5;
        let e = only(&p, &["stage 0 offloads 1.5 of its activations"]);
        assert_eq!(
            e,
            PlanError::OffloadRatio {
                stage: 0,
                which: "activations",
                value: 1.5
            }
        );
        p.stages[0].offload.activations = f64::NAN;
        assert_eq!(errors(&p).len(), 1);
    }

    #[test]
    fn recompute_more_layers_than_the_stage_has() {
        let mut p = example();
        p.stages[1].recompute = Recompute::Layers(4);
        let e = only(&p, &["stage 1 recomputes 4 layers", "only 3"]);
        assert_eq!(
            e,
            PlanError::RecomputeLayers {
                stage: 1,
                layers: 4,
                stage_layers: 3
            }
        );
    }

    #[test]
    fn sequence_parallel_with_tp_1_is_allowed() {
        let mut p = example();
        for s in &mut p.stages {
            s.tp = 1;
            s.dp = 4;
            s.micro_batch_sizes = vec![1; 4];
            s.sequence_parallel = true;
        }
        assert_eq!(errors(&p), vec![]);
    }

    /// 4 chunks of `gpt(6)` (8 layers) over 2 GPU stages: chunks 2 and 3 reuse 0 and 1's GPUs.
    fn interleaved() -> Plan {
        let mut p = example();
        p.schedule = Schedule::Interleaved { virtual_stages: 2 };
        let (a, b) = (p.stages[0].clone(), p.stages[1].clone());
        p.stages = vec![a.clone(), b.clone(), a, b];
        for (j, s) in p.stages.iter_mut().enumerate() {
            s.layers = LayerRange {
                start: 2 * j,
                end: 2 * j + 2,
            };
            s.recompute = Recompute::None;
        }
        p
    }

    #[test]
    fn sequence_length_within_learned_positions() {
        let m = gpt(2);
        assert!(validate_seq_len(&m, 0).is_err());
        assert!(validate_seq_len(&m, 2048).is_ok());
        let e = validate_seq_len(&m, 4096).unwrap_err();
        assert!(e.contains("2048"), "{e}");
    }

    #[test]
    fn tp_is_checked_against_every_attention_shape() {
        // AMP's heterogeneous model: 16-head blocks, then 4-head blocks; tp = 8 fits the first
        // kind only.
        let m = crate::model::catalog::catalog_model("amp-hetero").unwrap();
        let c = cluster(&[8]);
        let mut p =
            crate::plan::inline::parse_inline_plan("tp=4,dp=1,mbs=1,gbs=1", &m, &c).unwrap();
        assert_eq!(errors_on(&p, &m, &c), vec![]);
        p.stages[0].tp = 8;
        p.stages[0].devices = c.gpus();
        let e = errors_on(&p, &m, &c);
        assert!(
            e.iter().any(|x| matches!(
                x,
                PlanError::TpHeads {
                    heads: 4,
                    tp: 8,
                    ..
                }
            )),
            "{e:?}"
        );
    }

    #[test]
    fn interleaved_chunks_share_the_gpus_of_chunk_j_mod_pp() {
        let p = interleaved();
        let (m, c) = (gpt(6), cluster(&[4, 4]));
        assert_eq!(errors_on(&p, &m, &c), vec![]);
        // Reversed order inside the chunk: the replicas would no longer line up.
        let mut q = p.clone();
        q.stages[2].devices.reverse();
        assert_eq!(
            errors_on(&q, &m, &c),
            vec![PlanError::InterleavedDevices {
                stage: 2,
                base: 0,
                pp: 2
            }]
        );
        // A chunk with another ZeRO stage than its base.
        let mut q = p.clone();
        q.stages[3].zero = 2;
        let e = errors_on(&q, &m, &c);
        assert!(
            matches!(
                &e[..],
                [PlanError::InterleavedLayout {
                    stage: 3,
                    base: 1,
                    what: "ZeRO stage",
                    ..
                }]
            ),
            "{e:?}"
        );
        // Chunk 3 on chunk 0's GPUs.
        let mut q = p.clone();
        q.stages[3].devices = q.stages[0].devices.clone();
        let e = errors_on(&q, &m, &c);
        assert_eq!(
            e,
            vec![PlanError::InterleavedDevices {
                stage: 3,
                base: 1,
                pp: 2
            }]
        );
        assert!(e[0].to_string().contains("stage 3"));
        // Without interleaving the same reuse is sharing.
        let mut q = p.clone();
        q.schedule = Schedule::OneFOneB;
        let e = errors_on(&q, &m, &c);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(matches!(
            e[0],
            PlanError::DeviceShared {
                stage: 2,
                first: 0,
                ..
            }
        ));
    }

    #[test]
    fn interleaved_structure() {
        let (m, c) = (gpt(6), cluster(&[4, 4]));
        let mut p = interleaved();
        p.schedule = Schedule::Interleaved { virtual_stages: 0 };
        assert_eq!(errors_on(&p, &m, &c), vec![PlanError::ZeroVirtualStages]);
        p.schedule = Schedule::Interleaved { virtual_stages: 3 };
        let e = errors_on(&p, &m, &c);
        assert_eq!(
            e,
            vec![PlanError::StagesNotDivisibleByVirtual {
                stages: 4,
                virtual_stages: 3
            }]
        );
        assert!(e[0].to_string().contains("the plan has 4"));
        let mut p = interleaved();
        p.micro_batches = 1;
        p.global_batch = 4;
        let e = errors_on(&p, &m, &c);
        assert_eq!(
            e,
            vec![PlanError::MicroBatchesNotDivisibleByDepth {
                micro_batches: 1,
                pp: 2
            }]
        );
        assert!(e[0]
            .to_string()
            .contains("1 micro-batches is not a multiple of 2"));
    }

    #[test]
    fn replicas_may_have_different_micro_batch_sizes() {
        let mut p = example();
        p.stages[0].micro_batch_sizes = vec![1, 3];
        assert_eq!(errors(&p), vec![]);
    }

    #[test]
    fn all_problems_are_reported() {
        let mut p = example();
        p.stages[0].zero = 7;
        p.stages[1].devices[0] = g(5, 0);
        p.stages[1].micro_batch_sizes = vec![1, 1];
        p.stages[1].layers.end = 5;
        let e = errors(&p);
        assert_eq!(e.len(), 4, "{e:#?}");
    }

    #[test]
    fn stages_without_blocks_skip_the_head_check() {
        // An embedding-only stage with tp = 3 does not split attention heads.
        let mut p = example();
        p.stages[0].layers.end = 1;
        p.stages[1].layers.start = 1;
        p.stages[0].tp = 3;
        p.stages[0].dp = 1;
        p.stages[0].devices.pop();
        p.stages[0].micro_batch_sizes = vec![4];
        p.stages[1].recompute = Recompute::None;
        assert_eq!(errors(&p), vec![]);
    }

    #[test]
    fn every_error_reads_as_one_sentence() {
        let samples = [
            PlanError::NoStages,
            PlanError::UnknownGpus {
                stage: 0,
                gpus: (0..10).map(|l| g(9, l)).collect(),
                available: "x".into(),
                index: 0,
            },
        ];
        for e in samples {
            let s = e.to_string();
            assert!(!s.contains('\n') && !s.ends_with('.'), "{s}");
        }
        assert!(PlanError::UnknownGpus {
            stage: 0,
            gpus: (0..10).map(|l| g(9, l)).collect(),
            available: "x".into(),
            index: 0,
        }
        .to_string()
        .contains("and 2 more"));
    }
}
