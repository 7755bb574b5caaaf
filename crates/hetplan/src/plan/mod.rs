//! Training plans: everything the seed papers search over, as one complete value.
//!
//! A plan is read from JSON (`serde`) or from the inline form (`inline`), then checked against a
//! model and a cluster (`validate`) into a [`ValidPlan`], the only plan the cost model and the
//! simulator accept.

pub mod inline;
pub mod runtime;
pub mod validate;

use crate::cluster::GpuId;
use serde::{Deserialize, Serialize};

/// How a context-parallel group runs attention over its chunks of a sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpComm {
    /// Ring attention (Megatron's `p2p`): each GPU keeps its queries and passes its chunk's
    /// keys and values around the group while attention runs on the blocks already there.
    #[default]
    Ring,
    /// Ulysses (Jacobs et al. 2023; Megatron's `a2a`): an all-to-all before attention trades
    /// sequence chunks for heads — each GPU then attends `1/cp` of the heads over the whole
    /// sequence — and one after it trades back; the heads must split over `tp × cp`.
    AllToAll,
}

impl CpComm {
    pub fn is_ring(&self) -> bool {
        *self == CpComm::Ring
    }

    /// Megatron's name (`--cp-comm-type`).
    pub fn megatron_name(self) -> &'static str {
        match self {
            CpComm::Ring => "p2p",
            CpComm::AllToAll => "a2a",
        }
    }
}

/// Pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Schedule {
    /// All forwards, then all backwards (Huang et al. 2019).
    Gpipe,
    /// One-forward-one-backward (PipeDream-Flush; Narayanan et al. 2021).
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B with `virtual_stages` model chunks per device (Narayanan et al. 2021 §2.2).
    #[serde(rename = "interleaved-1f1b")]
    Interleaved { virtual_stages: u32 },
}

/// The training engine whose behaviour the plan assumes where engines differ (which
/// communication overlaps compute, how ZeRO-3 prefetches).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    #[default]
    Megatron,
    Deepspeed,
    Fsdp,
}

impl Engine {
    /// The name plans and command lines use (`engine=`, `--engine`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Megatron => "megatron",
            Engine::Deepspeed => "deepspeed",
            Engine::Fsdp => "fsdp",
        }
    }

    /// Whether the parameter all-gather that follows a ZeRO-1/2 optimizer step runs behind the
    /// next iteration's forward, bucket by bucket as each layer's forward needs it: Megatron's
    /// `--overlap-param-gather` (which hetplan's Megatron export sets) and FSDP's prefetch do;
    /// DeepSpeed gathers right after the step and waits for it.
    pub fn gathers_params_during_forward(self) -> bool {
        matches!(self, Engine::Megatron | Engine::Fsdp)
    }

    /// Whether a stage at ZeRO stage `zero` reduces its gradients on a stream of their own
    /// beside the backward that produces them. Megatron does (`--overlap-grad-reduce`, which
    /// hetplan's Megatron export sets), as do DDP's and FSDP's hooks. DeepSpeed does only where
    /// `zero_optimization.overlap_comm` is on, which defaults to ZeRO-3 alone
    /// (`runtime/zero/config.py`, `overlap_comm_valid`; hetplan's export leaves it so).
    /// Below ZeRO-3 it reduces on the compute stream: ZeRO-0 and ZeRO-1 once the backward is
    /// done (the engine's `allreduce_gradients`; the pipeline engine schedules `ReduceGrads`
    /// after the last backward, `runtime/pipe/engine.py`: "We schedule the all-reduces, so
    /// disable it in super().backward()"), and ZeRO-2 in its gradient hooks, each bucket
    /// holding the backward up while it is reduced.
    pub fn overlaps_grad_reduce(self, zero: u8) -> bool {
        match self {
            Engine::Megatron | Engine::Fsdp => true,
            Engine::Deepspeed => zero >= 3,
        }
    }

    /// Whether the engine's attention runs a kernel written for Hopper there: Megatron's
    /// Transformer Engine selects cuDNN's fused attention over FlashAttention on Hopper and
    /// later (its backend selection: "to give FusedAttention preference on Hopper+ for
    /// performance reasons"). DeepSpeed's Megatron runs the flash-attn package (v2), and
    /// torchtitan/FSDP PyTorch's SDPA, whose priority put FlashAttention-2 first in the
    /// releases the published runs used (PyTorch 2.11 on an H200 picked cuDNN:
    /// docs/validation.md §5).
    pub fn native_attention(self) -> bool {
        matches!(self, Engine::Megatron)
    }

    /// Whether the engine issues each local expert's products of a MoE layer from the host,
    /// one after the other, behind a device-to-host synchronisation
    /// (`constants::MOE_HOST_S_PER_LOCAL_EXPERT`): Megatron-Core's dropless dispatchers feed
    /// Transformer Engine's `GroupedLinear` a host list of tokens per expert, one product per
    /// expert; DeepSpeed-MoE's gating copies the tokens per expert to the host
    /// (`exp_counts ... .to('cpu')`, deepspeed/moe/sharded_moe.py) and `Experts.forward` calls
    /// each local expert's module in a Python loop (deepspeed/moe/experts.py) — priced with
    /// the same constant, not measured there. torchtitan runs a rank's experts in one grouped
    /// product on device offsets (`torch._grouped_mm`).
    pub fn loops_experts_on_host(self) -> bool {
        matches!(self, Engine::Megatron | Engine::Deepspeed)
    }

    /// Whether the engine runs the model as PyTorch code, which may run compiled or not
    /// (`Plan::compile`): FSDP's (torchtitan's); Megatron and DeepSpeed run their own fused
    /// kernels.
    pub fn runs_pytorch_code(self) -> bool {
        self == Engine::Fsdp
    }

    /// Whether the engine pads the vocabulary so that the embedding's and the head's rows are
    /// aligned: Megatron builds every tokenizer with `padded_vocab_size`, a multiple of
    /// `--make-vocab-size-divisible-by` (128) × TP (megatron/training/tokenizer). torchtitan,
    /// FSDP and DeepSpeed's `PipelineModule` run the model's vocabulary as it is.
    pub fn pads_vocabulary(self) -> bool {
        self == Engine::Megatron
    }

    /// Whether the engine trains from FP32 weights cast to 16 bits at each use, with 16-bit
    /// gradients cast back to FP32: PyTorch's mixed precision (AMP's autocast, FSDP's
    /// `MixedPrecisionPolicy`), which torchtitan and FSDP run. Megatron and DeepSpeed keep
    /// 16-bit weights that the optimizer step writes (in `ADAM_BYTES_PER_PARAM`).
    pub fn casts_weights_at_use(self, precision: Precision) -> bool {
        self == Engine::Fsdp && !precision.is_fp32()
    }
}

/// Numeric precision of training.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// BF16 compute and activations, FP32 master weights and Adam states.
    #[default]
    Bf16,
    /// FP16 with loss scaling; memory as BF16.
    Fp16,
    /// Everything in FP32, the matrix products too (PyTorch's default since 1.12:
    /// `torch.backends.cuda.matmul.allow_tf32 = False`).
    Fp32,
    /// FP32 storage and training with the matrix products in TF32 on tensor cores that have
    /// it, Ampere and later (`torch.backends.cuda.matmul.allow_tf32 = True`,
    /// `torch.set_float32_matmul_precision("high")`, or `TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`,
    /// which the exports' launch sets); as `Fp32` where PyTorch's switch does not reach TF32
    /// (`gpu::tf32_peak`: Volta, Turing, AMD's parts). Memory as `Fp32`.
    Tf32,
    /// FP8 matrix products in the transformer blocks with per-tensor scaling (Transformer
    /// Engine's `--fp8-format hybrid`: E4M3 forward, E5M2 gradients; torchao's Float8 linears),
    /// BF16 everywhere else — activations, the embedding and the output layer, attention —
    /// FP32 master weights and Adam states as BF16 training. Needs FP8 tensor cores (Ada,
    /// Hopper, Blackwell).
    Fp8,
    /// FP8 by torchao's rowwise recipe (torchtitan's `float8.recipe_name = "rowwise"`,
    /// `Float8LinearConfig.from_recipe_name("rowwise")`): every operand of the blocks' products
    /// scaled per row, E4M3 throughout, the products in PyTorch's CUTLASS rowwise-scaled kernel
    /// rather than cuBLAS's per-tensor one, and the BF16 operands kept for backward and cast
    /// again there along the axis each backward product needs (no FP8 transposes). Better at
    /// outliers than per-tensor scaling, slower. Otherwise as `Fp8`.
    Fp8Rowwise,
}

impl Precision {
    /// Bytes of one activation or 16/32-bit weight element (FP8 keeps BF16 activations and
    /// weights; its FP8 copies are `memory::fp8_weight_copy_bytes`).
    pub fn element_bytes(self) -> f64 {
        match self {
            Precision::Bf16 | Precision::Fp16 | Precision::Fp8 | Precision::Fp8Rowwise => 2.0,
            Precision::Fp32 | Precision::Tf32 => 4.0,
        }
    }

    /// The name plans and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp8 => "fp8",
            Precision::Fp8Rowwise => "fp8-rowwise",
        }
    }

    /// Every precision, in the order the inputs list them.
    pub const ALL: [Precision; 6] = [
        Precision::Bf16,
        Precision::Fp16,
        Precision::Fp32,
        Precision::Tf32,
        Precision::Fp8,
        Precision::Fp8Rowwise,
    ];

    /// The precision `name` names ([`Precision::name`]), if any.
    pub fn from_name(name: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether weights, gradients and activations are FP32 (`Fp32`, `Tf32`).
    pub fn is_fp32(self) -> bool {
        matches!(self, Precision::Fp32 | Precision::Tf32)
    }

    /// Whether the blocks' matrix products run in FP8 (either scaling recipe).
    pub fn is_fp8(self) -> bool {
        matches!(self, Precision::Fp8 | Precision::Fp8Rowwise)
    }
}

/// Element types of the data-parallel collectives, where engines let them differ from the
/// training precision: PyTorch FSDP's `MixedPrecision(param_dtype, reduce_dtype)` (Composer's
/// `DEFAULT` gathers fp32 parameters and reduces in bf16), Megatron's
/// `--accumulate-allreduce-grads-in-fp32` (fp32 gradient reduction), and `params: "fp8"` in
/// FP8 training under Megatron, its `--fp8-param-gather` ("Keep the compute param in fp8 ... and
/// perform the param all-gather in fp8", megatron/training/arguments.py; distributed optimizer
/// only): the blocks' FP8 weights are the parameters, gathered at 1 B, with no 16-bit copy
/// ([`Plan::fp8_params`]). `None`: the training precision's 16- or 32-bit element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectiveDtypes {
    /// Parameters all-gathered by ZeRO-1/2/3 (and FSDP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Precision>,
    /// Gradients all-reduced or reduce-scattered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gradients: Option<Precision>,
}

impl CollectiveDtypes {
    pub fn is_default(&self) -> bool {
        *self == CollectiveDtypes::default()
    }
}

/// Activation checkpointing of a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Recompute {
    #[default]
    None,
    /// Recompute the attention core only (Korthikanti et al. 2022 §5).
    Selective,
    /// Recompute every transformer layer of the stage from its input (not the embedding or
    /// the head: `Layer::checkpointable`).
    Full,
    /// Recompute this many of the stage's transformer layers fully (Mist's per-stage count), the
    /// first ones (`memory::fully_recomputed`: the embedding and the head never are).
    Layers(u32),
    /// Op-level selective checkpointing as torchtitan runs it (its `SelectiveAC`;
    /// `selective_ac_option = "op"` in the configs of 2024, torchtitan/parallelisms/
    /// parallelize_llama.py at 9dec370): in every transformer block the outputs of the
    /// attention core and of every other matrix product (the first, third, … in forward
    /// order) are kept, everything else is recomputed in backward from the block's input
    /// (`Layer::op_checkpointing`). PyTorch code only (`Engine::runs_pytorch_code`).
    Ops,
}

impl Serialize for Recompute {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Recompute::None => s.serialize_str("none"),
            Recompute::Selective => s.serialize_str("selective"),
            Recompute::Full => s.serialize_str("full"),
            Recompute::Layers(n) => s.serialize_u32(*n),
            Recompute::Ops => s.serialize_str("ops"),
        }
    }
}

impl<'de> Deserialize<'de> for Recompute {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u32),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Recompute::Layers(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl std::str::FromStr for Recompute {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "off" => Ok(Recompute::None),
            "selective" => Ok(Recompute::Selective),
            "full" | "on" => Ok(Recompute::Full),
            "ops" | "op" => Ok(Recompute::Ops),
            n => n.parse::<u32>().map(Recompute::Layers).map_err(|_| {
                format!(
                    "activation checkpointing `{n}`: expected `none`, `selective`, `full`, `ops` \
                     or a number of layers"
                )
            }),
        }
    }
}

/// Fractions (0..=1) of each state kept in host memory instead of the GPU (Mist §4).
#[derive(Clone, Copy, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Offload {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    pub activations: f64,
}

impl Offload {
    pub fn is_none(&self) -> bool {
        *self == Offload::default()
    }
}

/// "optimizer state 25%, gradients 100%": what is in host memory, or "nothing".
impl std::fmt::Display for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer state", self.optimizer),
            ("activations", self.activations),
        ]
        .iter()
        .filter(|(_, r)| *r > 0.0)
        .map(|(what, r)| format!("{what} {:.0}%", r * 100.0))
        .collect();
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A half-open range of layer indices `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRange {
    pub start: usize,
    pub end: usize,
}

impl LayerRange {
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn iter(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }
}

/// One pipeline stage (with interleaving: one model chunk).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub layers: LayerRange,
    /// The stage's GPUs, replica-major: `dp × tp` of them, replica r is
    /// `devices[r·tp .. (r+1)·tp]`; with `replica_tp`, replica r is the next `replica_tp[r]`.
    pub devices: Vec<GpuId>,
    /// The TP degree of every replica; with `replica_tp`, the largest of them.
    pub tp: u32,
    /// The TP degree of each DP replica, when replicas differ (Sailor's OPT plans mix A100
    /// replicas at TP 1 with V100 replicas at TP 4 in one stage; FlashFlex, HexiScale). Each
    /// degree divides the largest, so the parameters split into `tp` shards and a replica at
    /// degree t holds `tp / t` of them per GPU. Empty: every replica has `tp`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_tp: Vec<u32>,
    pub dp: u32,
    /// Micro-batch size of each DP replica (replicas may differ, as Metis and Poplar need).
    pub micro_batch_sizes: Vec<u64>,
    #[serde(default)]
    pub zero: u8,
    #[serde(default)]
    pub recompute: Recompute,
    #[serde(default, skip_serializing_if = "Offload::is_none")]
    pub offload: Offload,
    #[serde(default)]
    pub sequence_parallel: bool,
    /// Samples each DP replica processes per iteration, when replicas run different numbers of
    /// micro-batches (Poplar's per-GPU step counts and last-batch sizes): replica r runs
    /// ⌈samples_r / mbs_r⌉ micro-batches, all of `micro_batch_sizes[r]` samples but the last,
    /// which carries the rest. Only for one-stage plans; `micro_batches` is then the largest
    /// count and ZeRO-2/3 (collectives every micro-batch) need equal counts. Empty: every
    /// replica runs `micro_batches` micro-batches of its size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_samples: Vec<u64>,
    /// Expert parallelism: each MoE layer's experts are split over `ep` consecutive expert
    /// ranks — DP replicas (replica r is in group r / ep), or with `etp` below `tp` groups of
    /// `etp` GPUs — whose GPUs of one position exchange tokens by all-to-all
    /// (`Stage::expert_peers`), as Megatron forms its expert-parallel groups. The expert
    /// weights, gradients and optimizer states on a GPU shrink by `ep` (`expert_shards`), and
    /// the experts' gradients are reduced over the GPUs holding the same experts. 1: every
    /// replica holds every expert.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub ep: u32,
    /// Expert tensor parallelism (Megatron's `--expert-tensor-parallel-size`, MoE parallel
    /// folding): the MoE layers' experts are split over `etp` GPUs instead of the `tp` of a
    /// replica. The stage's GPUs, flattened replica by replica (GPU `r·tp + k` is TP rank k of
    /// replica r), form expert ranks of `etp` consecutive GPUs, and `ep` consecutive expert
    /// ranks exchange tokens; with `etp = tp` (the default) an expert rank is a replica. Each
    /// TP rank routes its own tokens (sequence parallelism). `None`: `tp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etp: Option<u32>,
    /// Context parallelism: `cp` consecutive DP replicas share each of their micro-batch's
    /// samples, each holding `1/cp` of every sequence's tokens (Megatron's load-balanced
    /// chunks: chunk c and 2·cp − 1 − c of 2·cp), and pass the keys and values of their chunk
    /// around a ring while attention runs (ring attention, Liu et al. 2023; Megatron-core's
    /// `--context-parallel-size`, torchtitan's `context_parallel_degree`). Replica r is in
    /// group r / cp; the replicas of a group have one micro-batch size, and a micro-batch
    /// carries `sum(micro_batch_sizes) / cp` samples through the stage. Gradients are reduced
    /// over all `dp` replicas, CP members included, as Megatron reduces over its dp×cp group.
    /// Every stage has the same `cp`. 1: every replica holds whole sequences.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cp: u32,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

impl Stage {
    /// The TP degree of the MoE layers' experts (`etp`, else `tp`).
    pub fn expert_tp(&self) -> u32 {
        self.etp.unwrap_or(self.tp).max(1)
    }

    /// How many ways the experts' parameters of a TP rank's share are split further on one
    /// GPU: `ep · etp / tp` (`ep` with `etp = tp`). A GPU holds `expert / expert_shards()` of
    /// them, and `dp / expert_shards()` GPUs hold the same ones (the expert data-parallel group).
    pub fn expert_shards(&self) -> f64 {
        self.ep.max(1) as f64 * self.expert_tp() as f64 / self.tp.max(1) as f64
    }

    /// The GPUs that exchange tokens with TP rank `k` of replica `r` at every MoE layer, itself
    /// included, in order: the same position in each of the `ep` expert ranks of its group
    /// (one TP degree in the stage; `Stage::etp`).
    pub fn expert_peers(&self, r: usize, k: usize) -> Vec<GpuId> {
        let (tp, etp, ep) = (
            self.tp.max(1) as usize,
            self.expert_tp() as usize,
            self.ep.max(1) as usize,
        );
        let g = r * tp + k;
        let (rank, j) = (g / etp, g % etp);
        let first = rank / ep * ep;
        (first..first + ep)
            .map(|x| x * etp + j)
            .filter(|&i| i < self.devices.len())
            .map(|i| self.devices[i])
            .collect()
    }

    /// The replicas whose GPUs replica `r`'s exchange tokens with (its own included): they run
    /// every MoE layer in step.
    pub fn expert_replicas(&self, r: usize) -> std::ops::Range<usize> {
        let tp = self.tp.max(1) as usize;
        let per = self.ep.max(1) as usize * self.expert_tp() as usize;
        let first = (r * tp) / per * per;
        let last = ((r + 1) * tp - 1) / per * per + per;
        first / tp..last.div_ceil(tp).min(self.dp as usize)
    }

    /// The DP replicas in replica `r`'s context-parallel group (`cp` consecutive ones).
    pub fn cp_group(&self, r: usize) -> std::ops::Range<usize> {
        let cp = self.cp.max(1) as usize;
        let start = r / cp * cp;
        start..(start + cp).min(self.dp as usize)
    }

    /// Tokens one micro-batch puts on replica `r`: its samples' tokens, `1/cp` of each
    /// sequence under context parallelism.
    pub fn replica_tokens(&self, r: usize, tokens_per_sample: f64) -> f64 {
        self.micro_batch_sizes[r] as f64 * tokens_per_sample / self.cp.max(1) as f64
    }

    /// Replica r's micro-batches per iteration and the size of its last one, given the plan's
    /// `micro_batches` (see `replica_samples`).
    pub fn replica_steps(&self, r: usize, micro_batches: u64) -> (u64, u64) {
        let mbs = self.micro_batch_sizes[r].max(1);
        match self.replica_samples.get(r) {
            Some(&n) => {
                let steps = n.div_ceil(mbs);
                (steps, n - steps.saturating_sub(1) * mbs)
            }
            None => (micro_batches, mbs),
        }
    }

    /// The TP degree of DP replica `r`.
    pub fn tp_of(&self, r: usize) -> u32 {
        self.replica_tp.get(r).copied().unwrap_or(self.tp)
    }

    /// The smallest TP degree of the stage's replicas (`tp` when they agree): its GPUs hold
    /// the largest share of the stage's parameters.
    pub fn min_tp(&self) -> u32 {
        self.replica_tp.iter().copied().min().unwrap_or(self.tp)
    }

    /// The first of DP replica `r`'s GPUs in `devices`.
    fn replica_offset(&self, r: usize) -> usize {
        if self.replica_tp.is_empty() {
            r * self.tp as usize
        } else {
            self.replica_tp[..r].iter().map(|&t| t as usize).sum()
        }
    }

    /// Whether `gpus` are all on one node.
    pub fn in_one_node(gpus: &[GpuId]) -> bool {
        gpus.iter().all(|g| g.node == gpus[0].node)
    }

    /// Whether TP communication overlap can run on the stage: every replica with TP keeps its
    /// group inside one node (Transformer Engine's userbuffers and torch's symmetric memory map
    /// the peers' buffers through the node's GPU links) and sequence parallelism is on.
    pub fn can_overlap_tp(&self) -> bool {
        (0..self.dp as usize).all(|r| self.tp_of(r) <= 1 || Stage::in_one_node(self.replica(r)))
            && (self.tp <= 1 || self.sequence_parallel)
    }

    /// The GPUs of DP replica `r`.
    pub fn replica(&self, r: usize) -> &[GpuId] {
        let start = self.replica_offset(r);
        &self.devices[start..start + self.tp_of(r) as usize]
    }

    /// The members of the stage's `k`-th gradient-synchronisation group (`k < tp`): parameter
    /// shard k lives on GPU `k·t/tp` of a replica at degree t. With one TP degree these are the
    /// GPUs of TP rank k in every replica.
    pub fn shard_group(&self, k: usize) -> Vec<GpuId> {
        let tp = self.tp.max(1) as usize;
        (0..self.dp as usize)
            .map(|r| self.replica(r)[k * self.tp_of(r) as usize / tp])
            .collect()
    }
    /// Samples one micro-batch carries through this stage, over all replicas (a
    /// context-parallel group's replicas share theirs).
    pub fn samples_per_micro_batch(&self) -> u64 {
        self.micro_batch_sizes.iter().sum::<u64>() / self.cp.max(1) as u64
    }
}

/// How much of a model's PyTorch code runs under `torch.compile` (`Plan::compile`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compile {
    /// The blocks and the loss compiled: torchtitan's `compile.components = ["model",
    /// "loss"]` (its default with `compile.enable` since April 2025,
    /// torchtitan/components/loss.py). Norms, rotary embeddings and activations each one fused
    /// kernel; the cross-entropy one pass over the logits. For Megatron and DeepSpeed: their
    /// own fused kernels.
    #[default]
    On,
    /// The blocks compiled, the loss eager: torchtitan before it compiled the loss (its
    /// December 2024 benchmarks: `train.py` at 9dec370 leaves `torch.compile(loss_fn)`
    /// commented out), or `components = ["model"]`.
    Blocks,
    /// Eager (torchtitan's `compile.enable = false`, its default): norms, rotary embeddings and
    /// gated activations as the separate kernels the code writes, each through HBM
    /// (`OpKind::Elementwise`'s eager bytes).
    Off,
}

impl Compile {
    pub fn is_on(&self) -> bool {
        *self == Compile::On
    }

    /// What runs under `engine`: this, where the engine runs PyTorch code; `On` (its own
    /// fused kernels) where it does not.
    pub fn under(self, engine: Engine) -> Compile {
        if engine.runs_pytorch_code() {
            self
        } else {
            Compile::On
        }
    }

    /// Whether PyTorch's own loss runs compiled under `engine` (`on` under an engine that
    /// runs PyTorch code): one fused pass keeping no FP32 copy of the logits (`cost::memory`).
    pub fn compiles_loss_under(self, engine: Engine) -> bool {
        self == Compile::On && engine.runs_pytorch_code()
    }

    /// The inline plan's word for it (`compile=`).
    pub fn name(self) -> &'static str {
        match self {
            Compile::On => "on",
            Compile::Blocks => "blocks",
            Compile::Off => "off",
        }
    }
}

/// A complete training plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Samples per iteration.
    pub global_batch: u64,
    /// Micro-batches per iteration (gradient-accumulation steps of each pipeline).
    pub micro_batches: u64,
    pub schedule: Schedule,
    #[serde(default)]
    pub engine: Engine,
    #[serde(default)]
    pub precision: Precision,
    #[serde(default, skip_serializing_if = "CollectiveDtypes::is_default")]
    pub collective_dtypes: CollectiveDtypes,
    /// MoE token dropping (Megatron's `--moe-expert-capacity-factor`): no expert takes more
    /// than this many times its even share of the tokens; the rest are dropped. `None`:
    /// dropless routing. With expert parallelism it caps the busiest rank's load
    /// (`constants::MOE_EP_LOAD_FACTOR` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_capacity_factor: Option<f64>,
    /// How the replicas of a context-parallel group (`Stage::cp`) exchange what attention
    /// needs (Megatron's `--cp-comm-type`); unused without context parallelism.
    #[serde(default, skip_serializing_if = "CpComm::is_ring")]
    pub cp_comm: CpComm,
    /// Tensor-parallel collectives pipelined with the GEMMs that produce or consume them:
    /// Megatron's `--tp-comm-overlap` (Transformer Engine's userbuffers), torchtitan's async TP
    /// (`compile.enable_async_tensor_parallel`, torch's micro-pipelined all-gather/matmul and
    /// matmul/reduce-scatter). Both split each collective into one chunk per TP rank behind
    /// the GEMM's chunks (Wang et al., ASPLOS '23); only sequence parallelism's all-gathers and
    /// reduce-scatters are decomposed, so every stage with TP needs it on; the chunks move
    /// through mapped peer memory, so every TP group sits in one node (`Stage::can_overlap_tp`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tp_comm_overlap: bool,
    /// How much of the model's PyTorch code runs under `torch.compile` (engine `fsdp`:
    /// torchtitan's `compile.enable` and `compile.components`); Megatron and DeepSpeed run
    /// their own fused kernels, which `Compile::On` stands for.
    #[serde(default, skip_serializing_if = "Compile::is_on")]
    pub compile: Compile,
    /// Stages in pipeline order (interleaved schedules: `pp × virtual_stages` chunks in layer
    /// order, chunk j on the devices of chunk j mod pp).
    pub stages: Vec<Stage>,
    /// The cluster and model the plan was made for (written by `hetplan plan`); absent in
    /// hand-written and older plan files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_for: Option<MadeFor>,
}

/// A plan that passed `plan::validate::validate` against a model and a cluster: the only plan
/// `cost::estimate` and `sim::simulate` accept. It reads as a [`Plan`] (`Deref`) and serialises
/// as one; it cannot be changed, only turned back into a `Plan` (`into_plan`).
#[derive(Clone, Debug, PartialEq)]
pub struct ValidPlan {
    plan: Plan,
    /// Layers of the model and GPUs of the cluster it was checked against: a cheap guard against
    /// handing it to the cost model with another problem.
    checked_for: (usize, usize),
}

impl ValidPlan {
    /// Checks `plan` against `model` and `cluster` (every problem, not only the first).
    pub fn new(
        plan: Plan,
        model: &crate::model::Model,
        cluster: &crate::cluster::Cluster,
    ) -> Result<ValidPlan, Vec<validate::PlanError>> {
        validate::validate(&plan, model, cluster)?;
        Ok(ValidPlan {
            plan,
            checked_for: (model.layers.len(), cluster.num_gpus()),
        })
    }

    /// Checks a copy of `plan`.
    pub fn check(
        plan: &Plan,
        model: &crate::model::Model,
        cluster: &crate::cluster::Cluster,
    ) -> Result<ValidPlan, Vec<validate::PlanError>> {
        ValidPlan::new(plan.clone(), model, cluster)
    }

    /// Whether this plan was checked against a model and a cluster of these sizes (the cost
    /// model and the simulator assert it in debug builds).
    pub fn checked_for(
        &self,
        model: &crate::model::Model,
        cluster: &crate::cluster::Cluster,
    ) -> bool {
        self.checked_for == (model.layers.len(), cluster.num_gpus())
    }

    pub fn as_plan(&self) -> &Plan {
        &self.plan
    }

    pub fn into_plan(self) -> Plan {
        self.plan
    }
}

impl std::ops::Deref for ValidPlan {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

impl Serialize for ValidPlan {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.plan.serialize(s)
    }
}

/// Fingerprints of the cluster and the model a plan was made for: a plan names GPUs by node
/// index, so the same file on a cluster whose node groups were reordered means other GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MadeFor {
    /// Of the nodes in order (GPU type and its numbers, GPU count, bandwidths), per-pair
    /// bandwidths and latencies; not the cluster's name.
    pub cluster: String,
    /// Of the model's layers (their ops, parameters, bytes); not its name.
    pub model: String,
}

impl MadeFor {
    pub fn of(model: &crate::model::Model, cluster: &crate::cluster::Cluster) -> MadeFor {
        let c = (
            &cluster.gpu_types,
            &cluster.nodes,
            cluster.pair_bandwidth.iter().collect::<Vec<_>>(),
            cluster.intra_latency,
            cluster.inter_latency,
        );
        MadeFor {
            cluster: fnv1a_hex(&serde_json::to_string(&c).unwrap_or_default()),
            model: fnv1a_hex(&serde_json::to_string(&model.layers).unwrap_or_default()),
        }
    }

    /// What differs from `other`, in words: "the cluster", "the model", or both.
    pub fn differences(&self, other: &MadeFor) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.cluster != other.cluster {
            d.push("the cluster");
        }
        if self.model != other.model {
            d.push("the model");
        }
        d
    }
}

/// FNV-1a, 64 bits, as 16 hex digits: stable across Rust versions (`DefaultHasher` is not).
fn fnv1a_hex(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The element type an engine accumulates and reduces gradients in when the plan names none
/// (`CollectiveDtypes::gradients`). Megatron-LM forces FP32 for BF16 ("bfloat16 requires
/// gradient accumulation and all-reduce to be done in fp32", megatron/training/arguments.py,
/// `accumulate_allreduce_grads_in_fp32`; FP8 runs with `--bf16` and inherits it); the others
/// reduce in the training precision (FP8 trains BF16 outside its products).
pub fn default_gradient_dtype(engine: Engine, precision: Precision) -> Precision {
    match (engine, precision) {
        (Engine::Megatron, Precision::Bf16 | Precision::Fp8 | Precision::Fp8Rowwise) => {
            Precision::Fp32
        }
        (_, Precision::Fp8 | Precision::Fp8Rowwise) => Precision::Bf16,
        (_, p) => p,
    }
}

impl Plan {
    /// The element type of the gradients the plan accumulates and reduces: the plan's own
    /// (`collective_dtypes.gradients`) or its engine's default ([`default_gradient_dtype`]).
    /// Megatron-FSDP's own default (`--megatron-fsdp-main-grads-dtype auto`: the parameters'
    /// type) is not hetplan's: its export passes the type priced here, its import reads `auto`
    /// as the parameters' type.
    pub fn gradient_dtype(&self) -> Precision {
        (self.collective_dtypes.gradients)
            .unwrap_or_else(|| default_gradient_dtype(self.engine, self.precision))
    }

    /// Megatron shards gradients (ZeRO-2/3) with Megatron-FSDP (`--use-megatron-fsdp`, which
    /// hetplan's export passes for such stages), not with its distributed optimizer.
    pub fn runs_megatron_fsdp(&self) -> bool {
        self.engine == Engine::Megatron && self.stages.iter().any(|s| s.zero >= 2)
    }

    /// Megatron's `--fp8-param-gather` (`collective_dtypes.params` FP8 in FP8 training): the
    /// blocks' products keep their weights in FP8 only, and the distributed optimizer gathers
    /// them in FP8.
    pub fn fp8_params(&self) -> bool {
        self.precision == Precision::Fp8 && self.collective_dtypes.params == Some(Precision::Fp8)
    }

    /// Bytes per element of gathered parameters and of reduced gradients. Under
    /// [`Plan::fp8_params`] every gathered element is taken at 1 B: the blocks' product weights,
    /// nearly all of them (Megatron gathers the embedding's and the norms' in 16 bits).
    pub fn collective_element_bytes(&self) -> (f64, f64) {
        let p = if self.fp8_params() {
            1.0
        } else {
            self.collective_dtypes
                .params
                .unwrap_or(self.precision)
                .element_bytes()
        };
        (p, self.gradient_dtype().element_bytes())
    }

    /// The plan as its engine runs it, where that differs from what it says; `None` when it
    /// runs as written. FSDP under pipeline parallelism (torchtitan's; plain FSDP has no
    /// pipeline) keeps a stage's parameters gathered after the forward
    /// (`fsdp_reshard_after_forward: "default"` is "not pp_enabled",
    /// torchtitan/distributed/fsdp.py), and PyTorch's pipeline stages accumulate unsharded
    /// gradients over the micro-batches and reduce them once, after the last
    /// (`set_requires_gradient_sync(False)`, torch/distributed/pipelining/stage.py): a ZeRO-3
    /// stage then has ZeRO-1's memory and traffic, and is costed as ZeRO-1. The cost model and
    /// the simulator both price this plan.
    pub fn as_engine_runs(&self) -> Option<Plan> {
        let fsdp_pipeline = self.engine == Engine::Fsdp && self.pipeline_depth() > 1;
        if !fsdp_pipeline || self.stages.iter().all(|s| s.zero != 3) {
            return None;
        }
        let mut p = self.clone();
        for s in &mut p.stages {
            if s.zero == 3 {
                s.zero = 1;
            }
        }
        Some(p)
    }

    /// Whether replica `r` of stage `st` runs its TP collectives overlapped with its GEMMs
    /// (`tp_comm_overlap`, on a stage with sequence parallelism and TP): what the estimate and
    /// the simulator both ask.
    pub fn overlaps_tp(&self, st: &Stage, r: usize) -> bool {
        self.tp_comm_overlap && st.sequence_parallel && st.tp_of(r) > 1
    }

    /// Whether the pipeline's sends run beside the compute: Megatron's interleaved schedule
    /// does by default (`--no-overlap-p2p-communication` is the switch, dest
    /// `overlap_p2p_comm`, megatron/training/arguments.py): in Megatron-Core 0.19's steady
    /// state a backward's gradients go while the next forward and backward compute, and a
    /// forward's activations are waited for at once, their buffer freed
    /// (`forward_backward_pipelining_with_interleaving`, core/pipeline_parallel/
    /// schedules.py); `validate_args` turns it off for any other schedule ("non-interleaved
    /// schedule does not support overlapping p2p communication"). The other engines' sends
    /// block. What the estimate and the simulator both ask.
    pub fn overlaps_pipeline_sends(&self) -> bool {
        self.engine == Engine::Megatron
            && matches!(self.schedule, Schedule::Interleaved { .. })
            && self.pipeline_depth() > 1
    }

    /// Whether every pipeline stage starts gathering its ZeRO-1/2 parameters at once, at the
    /// start of the step, rather than when the first micro-batch reaches it: Megatron's
    /// `align_param_gather` (on by default, `--no-align-param-gather` the switch), which
    /// `validate_args` keeps only for the interleaved schedule ("non-interleaved schedule
    /// does not support ... aligned param AG"); the schedule then dispatches every bucket of
    /// the first two model chunks before its first forward and a later chunk's at the same
    /// moment on every pipeline rank (`param_sync_func`, `start_param_sync`,
    /// core/pipeline_parallel/schedules.py). What the estimate and the simulator both ask.
    pub fn aligns_param_gather(&self) -> bool {
        self.engine == Engine::Megatron
            && matches!(self.schedule, Schedule::Interleaved { .. })
            && self.pipeline_depth() > 1
    }

    /// Whether the model's elementwise ops run as eager PyTorch's separate kernels
    /// (`compile: off`, which validation accepts only under the FSDP engine).
    pub fn runs_eagerly(&self) -> bool {
        self.compile.under(self.engine) == Compile::Off
    }

    /// Whether the loss is PyTorch's cross-entropy compiled ([`Compile::compiles_loss_under`]).
    pub fn compiles_loss(&self) -> bool {
        self.compile.compiles_loss_under(self.engine)
    }

    /// Model chunks per device: the interleaved schedule's virtual stages, else 1.
    pub fn virtual_stages(&self) -> usize {
        match self.schedule {
            Schedule::Interleaved { virtual_stages } => virtual_stages.max(1) as usize,
            _ => 1,
        }
    }

    /// Number of physical pipeline stages (chunks ÷ virtual stages).
    pub fn pipeline_depth(&self) -> usize {
        self.stages.len() / self.virtual_stages()
    }

    /// All GPUs the plan uses, each once, sorted.
    pub fn devices(&self) -> Vec<GpuId> {
        let mut d: Vec<GpuId> = self
            .stages
            .iter()
            .flat_map(|s| s.devices.iter().copied())
            .collect();
        d.sort();
        d.dedup();
        d
    }

    /// The compact summary used in tables: `0-12@n0g0..n0g3 (2×2) | ...`, `m=8`; expert
    /// parallelism as `(16x1 ep8)`.
    pub fn summary(&self) -> String {
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|s| {
                let first = s.devices.first().map(|g| g.to_string()).unwrap_or_default();
                let last = s.devices.last().map(|g| g.to_string()).unwrap_or_default();
                let tp = if s.replica_tp.is_empty() {
                    s.tp.to_string()
                } else {
                    let t: Vec<String> = s.replica_tp.iter().map(|t| t.to_string()).collect();
                    format!("[{}]", t.join(","))
                };
                // Expert and context parallelism after the degrees: `(16x1 ep8 cp2)`.
                let mut ep = if s.ep > 1 {
                    format!(" ep{}", s.ep)
                } else {
                    String::new()
                };
                if s.cp > 1 {
                    ep.push_str(&format!(" cp{}", s.cp));
                }
                format!(
                    "{}-{}@{}..{} ({}x{}{ep})",
                    s.layers.start,
                    s.layers.end.saturating_sub(1),
                    first,
                    last,
                    s.dp,
                    tp
                )
            })
            .collect();
        if self.stages.iter().any(|s| !s.replica_samples.is_empty()) {
            // Replicas run different numbers of micro-batches: the largest, and the samples.
            let samples: Vec<String> = (self.stages.iter())
                .flat_map(|s| s.replica_samples.iter().map(|n| n.to_string()))
                .collect();
            return format!(
                "{} m<={} samples={}",
                stages.join(" | "),
                self.micro_batches,
                samples.join("/")
            );
        }
        format!("{} m={}", stages.join(" | "), self.micro_batches)
    }
}
