//! Compute time of a layer on one GPU: from a profile when one is given, otherwise from the
//! analytic op model
//!
//! `time(op) = max(FLOPs ÷ (peak × efficiency(shape)), bytes ÷ (HBM × hbm_efficiency)) + kernel overhead`
//!
//! per kernel (docs/cost-model.md §2).

use super::constants as k;
use crate::gpu::GpuSpec;
use crate::model::{AttnImpl, Layer, Model, Op, OpKind, TpSplit};
use crate::plan::Precision;
use crate::units::{Flop, FlopPerSec, Seconds};
use serde::Serialize;

/// Where a layer time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeSource {
    Analytic,
    Measured,
    Interpolated,
    Extrapolated,
}

/// Forward and backward time of one layer for one micro-batch on one GPU of a TP group.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LayerTime {
    pub forward: Seconds,
    pub backward: Seconds,
    /// The part of `forward` that selective recomputation repeats (the attention core).
    pub selective_forward: Seconds,
    /// The part of `forward` that op-level selective checkpointing repeats
    /// (`Recompute::Ops`, `Layer::op_checkpointing`); zero outside transformer blocks and
    /// unless the shape asks for it (`LayerShape::op_checkpointing`).
    pub op_checkpoint_forward: Seconds,
    /// What recomputing the layer whole repeats of `forward`: all of it but FSDP2's copies of
    /// the gathered weights (backward gathers them itself) and, where the recomputation stops
    /// early (`LayerShape::early_stop`), the ops it skips (`Layer::skipped_by_early_stop`:
    /// under autocast their weights' casts still run).
    pub recompute_forward: Seconds,
    /// The attention core's share of `forward` and `backward` (the products with the keys and
    /// values): what a context-parallel ring's transfers overlap with.
    pub attention_forward: Seconds,
    pub attention_backward: Seconds,
    /// The host's loop over the local experts (`LayerShape::host_expert_loop`), a third of it
    /// in `forward` (and `recompute_forward`) and two thirds in `backward`: time the GPU waits,
    /// which no load factor on its work scales.
    pub host_expert_loop: Seconds,
    /// FLOPs executed in forward / backward (hardware FLOPs, per GPU).
    pub forward_flop: Flop,
    pub backward_flop: Flop,
    /// Whether the times already include the tensor-parallel collectives (measured profiles do).
    pub includes_tp_comm: bool,
    pub source: TimeSource,
}

/// What the micro-batch looks like to one layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerShape {
    /// Samples in the micro-batch on this replica.
    pub mbs: u64,
    pub seq: u64,
    pub tp: u32,
    /// Sequence parallelism: norms and residuals split over the TP ranks too.
    pub sequence_parallel: bool,
    pub precision: Precision,
    /// Expert parallelism: each GPU runs `1/ep` of a MoE layer's experts on the tokens `ep`
    /// replicas route to them — as many FLOPs, in larger GEMMs.
    pub ep: u32,
    /// Expert tensor parallelism below TP (`Stage::etp`): the expert GEMMs split `etp` ways,
    /// on the tokens of `ep` expert ranks of `etp` GPUs each. `None`: `tp`.
    pub etp: Option<u32>,
    /// Context parallelism: each GPU holds `1/cp` of every sequence's tokens (`mbs · seq / cp`
    /// of them) and attends them to all `seq` keys, in blocks of `seq / cp` (ring attention).
    pub cp: u32,
    /// Context parallelism by all-to-all (Ulysses) instead of the ring: each GPU attends
    /// `1/cp` of its heads over the whole sequence, in one kernel.
    pub cp_all_to_all: bool,
    /// The engine runs an attention kernel written for the GPU's architecture where there is
    /// one (Transformer Engine's cuDNN fused attention on Hopper and later:
    /// [`crate::plan::Engine::native_attention`]), not FlashAttention-2 (PyTorch's SDPA as the
    /// published torchtitan runs picked it, DeepSpeed's flash-attn). Changes nothing before
    /// Hopper.
    pub native_attention: bool,
    /// The weight and gradient traffic of PyTorch's mixed precision beside the products, per
    /// micro-batch ([`WeightCasts`]).
    pub weight_casts: WeightCasts,
    /// The model's PyTorch code runs eagerly (`Plan::compile` off, under the FSDP engine):
    /// each elementwise op moves its `eager_bytes_per_token`, one kernel per tensor operation.
    pub eager: bool,
    /// The engine pads the vocabulary to aligned rows (`Engine::pads_vocabulary`): the head's
    /// product runs at full speed whatever the model's vocabulary.
    pub pads_vocabulary: bool,
    /// The stage checkpoints op by op (`Recompute::Ops`): the time also says what that
    /// repeats (`LayerTime::op_checkpoint_forward`, zero otherwise).
    pub op_checkpointing: bool,
    /// A checkpointed block runs again only as far as backward reads it: PyTorch's
    /// non-reentrant checkpoint stops early by default and torch.compile's partitioner leaves
    /// dead code out (engines running PyTorch code, `Engine::runs_pytorch_code`). Megatron's
    /// and DeepSpeed's checkpoint functions rerun the whole forward. Where set, what a
    /// recomputation repeats leaves out the ops it skips (`Layer::skipped_by_early_stop`, as
    /// `eager` says): a block's closing product.
    pub early_stop: bool,
    /// The engine issues each local expert's products from the host behind a synchronisation
    /// (`Engine::loops_experts_on_host`): a MoE layer adds
    /// [`k::MOE_HOST_S_PER_LOCAL_EXPERT`] per local expert.
    pub host_expert_loop: bool,
}

/// What PyTorch's mixed precision moves through HBM beside each matrix product, per
/// micro-batch, per weight of it on this GPU (`constants::MASTER_CAST_BYTES_PER_ELEMENT`,
/// `FSDP_COPY_OUT_BYTES_PER_ELEMENT`). Measured on an H200 (docs/validation.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightCasts {
    /// The engine keeps 16-bit weights that the optimizer step writes and accumulates
    /// gradients into FP32 inside the product (Megatron's `gradient_accumulation_fusion`,
    /// DeepSpeed's BF16 optimizer), or trains in FP32.
    #[default]
    None,
    /// Autocast over FP32 weights (AMP and DDP; FSDP's stages under a pipeline, whose weights
    /// stay gathered): each weight cast to 16 bits at its use, each 16-bit weight gradient
    /// cast to FP32.
    Autocast,
    /// FSDP2's full sharding over `shard` ranks (torchtitan): forward and again backward, its
    /// `1/shard` of the weights cast into the all-gather's input and the gathered buffer copied
    /// out into the parameters; backward, the 16-bit gradients copied into the FP32
    /// reduce-scatter's input (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py).
    FullShard { shard: u32 },
}

impl LayerShape {
    /// `mbs` samples of `seq` tokens at TP degree `tp` in `precision`, and nothing else: no
    /// sequence, expert or context parallelism, FlashAttention-2, no mixed-precision casts,
    /// fused elementwise kernels, the vocabulary as it is (what the profiler runs); set the
    /// other fields with struct update syntax.
    pub fn plain(mbs: u64, seq: u64, tp: u32, precision: Precision) -> LayerShape {
        LayerShape {
            mbs,
            seq,
            tp,
            sequence_parallel: false,
            precision,
            ep: 1,
            etp: None,
            cp: 1,
            cp_all_to_all: false,
            native_attention: false,
            weight_casts: WeightCasts::None,
            eager: false,
            pads_vocabulary: false,
            op_checkpointing: false,
            early_stop: false,
            host_expert_loop: false,
        }
    }
}

impl WeightCasts {
    /// (forward, backward) HBM bytes per weight element.
    pub fn bytes_per_weight(self) -> (f64, f64) {
        let cast = k::MASTER_CAST_BYTES_PER_ELEMENT;
        match self {
            WeightCasts::None => (0.0, 0.0),
            WeightCasts::Autocast => (cast, cast),
            WeightCasts::FullShard { shard } => {
                let gather = cast / shard.max(1) as f64 + k::FSDP_COPY_OUT_BYTES_PER_ELEMENT;
                (gather, gather + cast)
            }
        }
    }
}

/// A source of layer compute times. `Sync`: hetplan's planner estimates plans in parallel.
pub trait ComputeTimes: Sync {
    fn layer_time(
        &self,
        gpu: &GpuSpec,
        model: &Model,
        layer: usize,
        shape: LayerShape,
    ) -> LayerTime;

    /// Whether spreading a micro-batch's tokens over `c` GPUs (context parallelism, by ring or
    /// all-to-all) never costs less GPU-time than keeping them on one: `c·(fwd + bwd)` at
    /// `cp = c` is at least `fwd + bwd` at `cp = 1`, every other part of the shape the same.
    /// The lower bound (`planners::bound`) then need not try context-parallel shapes. `false`,
    /// the safe default, makes it try them.
    fn context_parallelism_never_cheaper(&self) -> bool {
        false
    }

    /// A measured bandwidth (message ÷ time) of collective `op` among `group_size` GPUs of type
    /// `gpu` over `link`, for a message of `message` bytes (a profile database's
    /// `collectives`), where the source has one; `None`: the α–β model prices it alone.
    fn collective_bandwidth(
        &self,
        _gpu: &GpuSpec,
        _op: crate::profile::CollectiveOp,
        _group_size: u32,
        _link: crate::profile::LinkKind,
        _message: crate::units::Bytes,
    ) -> Option<crate::units::BytesPerSec> {
        None
    }
}

/// The analytic op model, no measurements needed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Analytic;

/// Whether a GEMM dimension of `width` elements of `elem` bytes (a share of the weight's
/// rows or columns on this GPU: fractional shares round up) spans whole `align` bytes
/// ([`k::GEMM_ALIGN_BYTES`], [`k::BATCHED_GEMM_ALIGN_BYTES`]).
fn aligned_row(width: f64, elem: f64, align: u64) -> bool {
    let bytes = (width.ceil() * elem).round() as u64;
    bytes.is_multiple_of(align)
}

fn saturate(x: f64, half: f64) -> f64 {
    x / (x + half)
}

/// Keys each query attends to on average over a sequence of `seq`: all of them, half of them
/// when causal (the kernels' cost, without the diagonal's half-tile), at most `window` (the query itself and the `window − 1`
/// before it) with a sliding window (Mistral, Gemma 2/3, gpt-oss local layers).
fn keys_per_query(seq: u64, causal: bool, window: Option<u64>) -> f64 {
    let s = seq as f64;
    match window {
        Some(w) if w < seq => {
            // Queries 0..w see i+1 keys, the other s−w see w each (a bidirectional window
            // would see twice as many; no model here has one).
            let w = w as f64;
            (w * (w + 1.0) / 2.0 + (s - w) * w) / s
        }
        _ if causal => s / 2.0,
        _ => s,
    }
}

/// Peak rate for GEMM-like work at the training precision. FP32 training uses the FP32 vector
/// rate (PyTorch disables TF32 for matmuls by default since 1.12); with TF32 allowed, the TF32
/// tensor rate where the GPU has one (`gpu::tf32_peak`; never below the FP32 rate, which the
/// RTX 3090's and 4090's TF32 about equal), the FP32 rate where not.
pub fn matmul_peak(gpu: &GpuSpec, p: Precision) -> FlopPerSec {
    match p {
        Precision::Fp32 => gpu.peak_fp32,
        Precision::Tf32 => match crate::gpu::tf32_peak(gpu) {
            Some(t) if t.get() > gpu.peak_fp32.get() => t,
            _ => gpu.peak_fp32,
        },
        _ => gpu.peak_tensor,
    }
}

/// Bytes per second a streaming kernel moves through `gpu`'s memory.
pub(crate) fn hbm_rate(gpu: &GpuSpec) -> f64 {
    gpu.hbm_bandwidth.get() * k::hbm_efficiency(gpu.arch)
}

fn hbm_time(gpu: &GpuSpec, bytes: f64) -> f64 {
    bytes / hbm_rate(gpu)
}

/// (forward seconds, backward seconds, forward FLOPs, backward FLOPs, selective-recompute part,
/// the weights' casts in the forward)
struct OpCost {
    fwd: f64,
    bwd: f64,
    fwd_flop: f64,
    bwd_flop: f64,
    selective: f64,
    /// The part of `fwd` that casts or copies the weights (`WeightCasts`): under FSDP2's full
    /// sharding a recomputation runs on the weights backward has gathered and does not
    /// repeat it; under autocast it casts them again, even for a product it stops before (the
    /// product's backward saves the cast copy).
    cast: f64,
}

/// Whether `op` of a layer of kind `kind` runs in FP8 at precision `p`: the matrix products of
/// the transformer blocks (Transformer Engine's and torchao's FP8 linears) whose input and
/// output widths are multiples of 16, which FP8 tensor cores need (torchtitan's converter
/// leaves other linears in BF16: `module_filter_fn`, components/quantization/utils.py); the
/// embedding, the output layer and attention stay BF16.
pub fn fp8_gemm(op: &Op, kind: crate::model::LayerKind, p: Precision) -> bool {
    p.is_fp8()
        && kind == crate::model::LayerKind::Transformer
        && matches!(op.kind, OpKind::Gemm { k, n, .. } if k % 16 == 0 && n % 16 == 0)
}

fn op_cost(op: &Op, gpu: &GpuSpec, per_sample: bool, s: LayerShape, fp8: bool) -> OpCost {
    let tp = s.tp.max(1) as f64;
    let elem = s.precision.element_bytes();
    let act_scale = elem / 2.0;
    let peak = matmul_peak(gpu, s.precision).get();
    let eff = k::gemm_efficiency(gpu.arch);
    let ovh = k::KERNEL_OVERHEAD_S;
    // Tokens (or samples) of the micro-batch on this GPU: 1/cp of each sequence under
    // context parallelism.
    let cp = s.cp.max(1) as f64;
    let m = if per_sample {
        s.mbs as f64
    } else {
        s.mbs as f64 * s.seq as f64 / cp
    };
    match &op.kind {
        OpKind::Gemm {
            k: kd,
            n,
            split,
            count,
            token_fraction,
        } => {
            let (mut kl, mut nl) = (*kd as f64, *n as f64);
            // An expert GEMM splits over the expert tensor-parallel degree and takes the tokens
            // that `ep` expert ranks route to it: its TP rank's share of `ep·etp` GPUs' tokens
            // (each TP rank routes its own, 1/tp of the replica's).
            let (split_by, ep, fold) = if op.is_expert() {
                let etp = s.etp.unwrap_or(s.tp).max(1) as f64;
                (etp, s.ep.max(1) as f64, etp / tp)
            } else {
                (tp, 1.0, 1.0)
            };
            match split {
                TpSplit::Column => nl /= split_by,
                TpSplit::Row => kl /= split_by,
                TpSplit::Replicated => {}
            }
            let mt = m * token_fraction * ep * fold;
            let cnt = *count as f64 / ep;
            let flop = 2.0 * mt * kl * nl * cnt;
            // Rows of an odd 16-bit width leave cuBLAS its slow kernels (GPT-2's 50,257-entry
            // head), unless the engine pads the vocabulary.
            let padded = s.pads_vocabulary && op.name == "logits";
            let aligned = padded
                || (aligned_row(kl, elem, k::GEMM_ALIGN_BYTES)
                    && aligned_row(nl, elem, k::GEMM_ALIGN_BYTES));
            let shape_eff = saturate(mt, k::GEMM_HALF_DIM)
                * saturate(kl, k::GEMM_HALF_DIM)
                * saturate(nl, k::GEMM_HALF_DIM)
                * if aligned {
                    1.0
                } else {
                    k::UNALIGNED_GEMM_RELATIVE_EFFICIENCY
                };
            // PyTorch's mixed precision: the weights' casts and FSDP's copies around its
            // collectives, memory-bound kernels beside the product.
            let (cast_fwd, cast_bwd) = match s.weight_casts.bytes_per_weight() {
                (0.0, 0.0) => (0.0, 0.0),
                (f, b) => {
                    let weights = kl * nl * cnt;
                    (
                        hbm_time(gpu, f * weights) + ovh,
                        hbm_time(gpu, b * weights) + ovh,
                    )
                }
            };
            if let (true, Some(fp8_peak)) = (fp8, crate::gpu::fp8_peak(gpu)) {
                // FP8: 1-byte operands at the FP8 peak, BF16 output; before each product its
                // BF16 operands are cast (and transposed for the backward's products), the
                // gradient of the output in backward: memory-bound kernels of their own.
                let rowwise = s.precision == Precision::Fp8Rowwise;
                let relative = if rowwise {
                    k::FP8_ROWWISE_GEMM_RELATIVE_EFFICIENCY
                } else {
                    k::FP8_GEMM_RELATIVE_EFFICIENCY
                };
                let compute = flop / (fp8_peak.get() * eff * relative * shape_eff);
                let bytes = (mt * kl + kl * nl + 2.0 * mt * nl) * cnt;
                let gemm = compute.max(hbm_time(gpu, bytes)) + ovh * cnt;
                let cast = |bytes_per_element: f64, elements: f64| {
                    hbm_time(gpu, bytes_per_element * elements * cnt) + ovh * cnt
                };
                let (cast_ops_fwd, cast_ops_bwd) = if rowwise {
                    // Each operand scaled along the axis its product reduces: forward the
                    // input's and the weight's rows (their contiguous axis); backward the
                    // output's gradient along its rows (data gradient) and its columns (weight
                    // gradient), the weight along its columns, the input along its columns.
                    let (along, across) = (
                        k::FP8_ROWWISE_CAST_BYTES_PER_ELEMENT,
                        k::FP8_COLUMNWISE_CAST_BYTES_PER_ELEMENT,
                    );
                    (
                        cast(along, mt * kl) + cast(along, kl * nl),
                        cast(along, mt * nl)
                            + cast(across, mt * nl)
                            + cast(across, kl * nl)
                            + cast(across, mt * kl),
                    )
                } else {
                    // Per tensor: the forward's casts write the transposes backward reads.
                    let b = k::FP8_CAST_BYTES_PER_ELEMENT;
                    (cast(b, mt * kl) + cast(b, kl * nl), cast(b, mt * nl))
                };
                return OpCost {
                    fwd: gemm + cast_ops_fwd + cast_fwd,
                    bwd: 2.0 * gemm + cast_ops_bwd + cast_bwd,
                    fwd_flop: flop,
                    bwd_flop: 2.0 * flop,
                    selective: 0.0,
                    cast: cast_fwd,
                };
            }
            let compute = flop / (peak * eff * shape_eff);
            let bytes = elem * (mt * kl + kl * nl + mt * nl) * cnt;
            let fwd = compute.max(hbm_time(gpu, bytes)) + ovh * cnt;
            // Backward: the data-gradient and the weight-gradient products, same sizes.
            OpCost {
                fwd: fwd + cast_fwd,
                bwd: 2.0 * fwd + cast_bwd,
                fwd_flop: flop,
                bwd_flop: 2.0 * flop,
                selective: 0.0,
                cast: cast_fwd,
            }
        }
        OpKind::Attention {
            heads,
            head_dim,
            causal,
            implementation,
            window,
            ..
        } => {
            let seq = s.seq as f64;
            let hl = (*heads as f64 / tp).max(1.0);
            let d = *head_dim as f64;
            // QKᵀ and PV: 2·s·d FLOPs each per query and head; this GPU's `m` queries see all
            // `s` keys, with context parallelism in blocks of s/cp (the kernel's sequence).
            let full = 4.0 * m * seq * hl * d;
            // The kernel's sequence and launches: s/cp-long blocks, one per ring step; Ulysses
            // runs one kernel on the whole sequence (for 1/cp of the heads: the same FLOPs).
            let (block, launches) = if s.cp_all_to_all {
                (seq, 1.0)
            } else {
                (seq / cp, cp)
            };
            match implementation {
                AttnImpl::Flash | AttnImpl::Triton => {
                    let a_eff =
                        k::attention_efficiency_on(*implementation, gpu.arch, s.native_attention)
                            * saturate(block, k::attention_half_seq(gpu.arch));
                    // Flash kernels skip the masked part of the score matrix: the upper half
                    // of a causal one, and beyond a sliding window.
                    let flop = full * keys_per_query(s.seq, *causal, *window) / seq;
                    let fwd = flop / (peak * a_eff) + ovh * launches;
                    let bwd = k::FLASH_BWD_RATIO * flop / (peak * a_eff) + ovh * launches;
                    OpCost {
                        fwd,
                        bwd,
                        fwd_flop: flop,
                        bwd_flop: k::FLASH_BWD_RATIO * flop,
                        selective: 0.0,
                        cast: 0.0,
                    }
                }
                AttnImpl::Torch => {
                    // Unfused: the scores are materialised. Per element of the s×s matrix per
                    // head: write scores, read them into softmax, write probabilities, read them
                    // for PV (2 B each) = 8 B forward, twice that backward.
                    // The two products are batched GEMMs (s × d)·(d × s) and (s × s)·(s × d): GEMM
                    // efficiency of the GPU with the head dimension as their short side.
                    // A head width that is not a whole number of 16-byte vectors leaves both
                    // products cuBLAS's slow kernels (`BATCHED_GEMM_ALIGN_BYTES`), at a rate of
                    // their own in place of a tile's fill along the head
                    // (`UNALIGNED_BATCHED_GEMM_RELATIVE_EFFICIENCY`).
                    let flop = full;
                    let aligned = aligned_row(d, elem, k::BATCHED_GEMM_ALIGN_BYTES);
                    let head_eff = if aligned {
                        saturate(d, k::GEMM_HALF_DIM)
                    } else {
                        k::UNALIGNED_BATCHED_GEMM_RELATIVE_EFFICIENCY
                    };
                    let g_eff = k::attention_efficiency_on(AttnImpl::Torch, gpu.arch, false)
                        * saturate(seq, k::GEMM_HALF_DIM)
                        * saturate(seq, k::GEMM_HALF_DIM)
                        * head_eff;
                    let score_bytes = 8.0 * m * seq * hl * act_scale;
                    let fwd = flop / (peak * g_eff) + hbm_time(gpu, score_bytes) + 4.0 * ovh;
                    let bwd =
                        2.0 * flop / (peak * g_eff) + hbm_time(gpu, 2.0 * score_bytes) + 6.0 * ovh;
                    OpCost {
                        fwd,
                        bwd,
                        fwd_flop: flop,
                        bwd_flop: 2.0 * flop,
                        selective: fwd,
                        cast: 0.0,
                    }
                }
            }
        }
        OpKind::Elementwise {
            bytes_per_token,
            eager_bytes_per_token,
            flops_per_token,
            sharded,
        } => {
            let split = if *sharded || s.sequence_parallel {
                tp
            } else {
                1.0
            };
            let per_token = if s.eager {
                eager_bytes_per_token
            } else {
                bytes_per_token
            };
            let bytes = m * per_token * act_scale / split;
            let fwd = hbm_time(gpu, bytes) + ovh;
            // Backward reads the saved input and the incoming gradient, writes the gradient.
            OpCost {
                fwd,
                bwd: 2.0 * hbm_time(gpu, bytes) + ovh,
                fwd_flop: m * flops_per_token / split,
                bwd_flop: 2.0 * m * flops_per_token / split,
                selective: 0.0,
                cast: 0.0,
            }
        }
        OpKind::Loss { vocab, .. } => {
            // Reads the 16-bit logits, writes and re-reads fp32 probabilities: 10 B per entry;
            // backward twice that. ~5 FLOP per entry (max, exp, sum, log, scale).
            let bytes = m * 10.0 * *vocab as f64 * act_scale / tp;
            OpCost {
                fwd: hbm_time(gpu, bytes) + ovh,
                bwd: 2.0 * hbm_time(gpu, bytes) + ovh,
                fwd_flop: m * 5.0 * *vocab as f64 / tp,
                bwd_flop: 2.0 * m * 5.0 * *vocab as f64 / tp,
                selective: 0.0,
                cast: 0.0,
            }
        }
        OpKind::Lookup { width } => {
            // Gather a row per token and write it; backward scatters into the (dense) gradient
            // of this rank's table shard.
            let rows = m * *width as f64 * elem;
            let table = op.params as f64 / if op.params_sharded { tp } else { 1.0 } * elem;
            OpCost {
                fwd: hbm_time(gpu, 2.0 * rows) + ovh,
                bwd: hbm_time(gpu, 2.0 * rows + table) + 2.0 * ovh,
                fwd_flop: 0.0,
                bwd_flop: 0.0,
                selective: 0.0,
                cast: 0.0,
            }
        }
        OpKind::Opaque { flops_per_sample } => {
            let flop = m * flops_per_sample / tp;
            let fwd = flop / (peak * eff) + ovh;
            OpCost {
                fwd,
                bwd: 2.0 * fwd,
                fwd_flop: flop,
                bwd_flop: 2.0 * flop,
                selective: 0.0,
                cast: 0.0,
            }
        }
    }
}

impl Analytic {
    pub fn time(
        &self,
        gpu: &GpuSpec,
        model: &Model,
        layer: &Layer,
        shape: LayerShape,
    ) -> LayerTime {
        let mut t = LayerTime {
            forward: Seconds::ZERO,
            backward: Seconds::ZERO,
            selective_forward: Seconds::ZERO,
            op_checkpoint_forward: Seconds::ZERO,
            recompute_forward: Seconds::ZERO,
            attention_forward: Seconds::ZERO,
            attention_backward: Seconds::ZERO,
            host_expert_loop: Seconds::ZERO,
            forward_flop: Flop::ZERO,
            backward_flop: Flop::ZERO,
            includes_tp_comm: false,
            source: TimeSource::Analytic,
        };
        // What op-level checkpointing repeats, only where the stage does it: the lookahead it
        // takes costs about half of the rest of this loop.
        let mut by_op = layer.op_checkpointing().filter(|_| shape.op_checkpointing);
        let mut skips = (shape.early_stop).then(|| layer.skipped_by_early_stop(shape.eager));
        let full_shard = matches!(shape.weight_casts, WeightCasts::FullShard { .. });
        for op in &layer.ops {
            let fp8 = fp8_gemm(op, layer.kind, shape.precision);
            let c = op_cost(op, gpu, model.per_sample, shape, fp8);
            t.forward += Seconds(c.fwd);
            t.backward += Seconds(c.bwd);
            t.selective_forward += Seconds(c.selective);
            let skipped = skips.as_mut().and_then(|it| it.next()).unwrap_or(false);
            let redone = match (skipped, full_shard) {
                (false, false) => c.fwd,
                (false, true) => c.fwd - c.cast,
                (true, false) => c.cast,
                (true, true) => 0.0,
            };
            t.recompute_forward += Seconds(redone);
            if let Some(ck) = by_op.as_mut().and_then(|it| it.next()) {
                t.op_checkpoint_forward += Seconds(redone * ck.recomputed);
            }
            if matches!(op.kind, OpKind::Attention { .. }) {
                t.attention_forward += Seconds(c.fwd);
                t.attention_backward += Seconds(c.bwd);
            }
            t.forward_flop += Flop(c.fwd_flop);
            t.backward_flop += Flop(c.bwd_flop);
        }
        if shape.host_expert_loop {
            // The host issues the local experts' products one by one behind the dispatch's
            // synchronisation: a third of its time in the forward (which a recomputation
            // repeats), two thirds in the backward's data- and weight-gradient products.
            // The experts one GPU of the expert-parallel group holds (none outside MoE layers).
            let local = layer
                .experts()
                .map_or(0.0, |(n, _)| n as f64 / shape.ep.max(1) as f64);
            let host = k::MOE_HOST_S_PER_LOCAL_EXPERT * local;
            t.forward += Seconds(host / 3.0);
            t.recompute_forward += Seconds(host / 3.0);
            t.backward += Seconds(2.0 * host / 3.0);
            t.host_expert_loop = Seconds(host);
        }
        t
    }
}

impl ComputeTimes for Analytic {
    /// True: every op's time is a per-token part, which `1/c` of the tokens cuts at most `c`
    /// times (GEMM and attention efficiencies only fall with fewer tokens or shorter blocks,
    /// and a GEMM still reads all its weights), plus a per-launch overhead that context
    /// parallelism does not shrink (the ring launches more). Checked on generated shapes by
    /// `tests/context_parallel.rs`.
    fn context_parallelism_never_cheaper(&self) -> bool {
        true
    }

    fn layer_time(
        &self,
        gpu: &GpuSpec,
        model: &Model,
        layer: usize,
        shape: LayerShape,
    ) -> LayerTime {
        self.time(gpu, model, &model.layers[layer], shape)
    }
}

/// Forward FLOPs of `layers` for `tokens` tokens as Korthikanti et al. 2022 (§6) count them:
/// every GEMM and the attention products over the full s×s score matrix (causal kernels'
/// skipped half included); `unfused_attention` is the part that selective recomputation repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelFlop {
    pub all: f64,
    pub unfused_attention: f64,
}

/// One op's forward model FLOPs for `tokens` tokens (the convention of [`ModelFlop`]): its
/// products and attention; 0 for memory-bound ops.
fn op_model_flop(op: &Op, tokens: f64, seq: u64) -> f64 {
    match &op.kind {
        OpKind::Gemm {
            k,
            n,
            count,
            token_fraction,
            ..
        } => 2.0 * tokens * token_fraction * (*k as f64) * (*n as f64) * (*count as f64),
        OpKind::Attention {
            heads,
            head_dim,
            window,
            ..
        } => {
            // Without the causal half (the model-FLOPs convention) but within a sliding window:
            // a window only costs its keys.
            let keys = match window {
                Some(w) if *w < seq => 2.0 * keys_per_query(seq, true, Some(*w)) / seq as f64,
                _ => 1.0,
            };
            4.0 * tokens * seq as f64 * keys * (*heads as f64) * (*head_dim as f64)
        }
        OpKind::Opaque { flops_per_sample } => tokens * flops_per_sample,
        _ => 0.0,
    }
}

pub fn forward_model_flop(
    model: &Model,
    layers: std::ops::Range<usize>,
    tokens: f64,
    seq: u64,
) -> ModelFlop {
    let mut f = ModelFlop::default();
    for op in model.layers[layers].iter().flat_map(|l| &l.ops) {
        let a = op_model_flop(op, tokens, seq);
        f.all += a;
        if let OpKind::Attention {
            implementation: AttnImpl::Torch,
            ..
        } = op.kind
        {
            f.unfused_attention += a;
        }
    }
    f
}

/// The forward model FLOPs of `layers` that op-level selective checkpointing repeats
/// (`Recompute::Ops`, `Layer::op_checkpointing`), counted as [`forward_model_flop`] counts;
/// where the recomputation stops early (`LayerShape::early_stop`), not the ops it skips
/// (`Layer::skipped_by_early_stop`, compiled or `eager`).
pub fn op_checkpointed_flop(
    model: &Model,
    layers: std::ops::Range<usize>,
    tokens: f64,
    seq: u64,
    early_stop: bool,
    eager: bool,
) -> f64 {
    let mut f = 0.0;
    for l in &model.layers[layers] {
        if let Some(ck) = l.op_checkpointing() {
            let skips = l.skipped_by_early_stop(eager);
            for ((op, c), skipped) in l.ops.iter().zip(ck).zip(skips) {
                if !(early_stop && skipped) {
                    f += op_model_flop(op, tokens, seq) * c.recomputed;
                }
            }
        }
    }
    f
}

/// The forward model FLOPs that recomputing `layer` whole repeats, counted as
/// [`forward_model_flop`] counts: all of them, or where the recomputation stops early
/// (`LayerShape::early_stop`) all but those of the ops it skips
/// (`Layer::skipped_by_early_stop`, compiled or `eager`).
pub fn recomputed_flop(layer: &Layer, tokens: f64, seq: u64, early_stop: bool, eager: bool) -> f64 {
    (layer.ops.iter().zip(layer.skipped_by_early_stop(eager)))
        .filter(|&(_, skipped)| !(early_stop && skipped))
        .map(|(op, _)| op_model_flop(op, tokens, seq))
        .sum()
}

/// FLOPs the model "needs" per iteration for MFU: three times the forward model FLOPs
/// (forward, and backward's two products), independent of recomputation.
pub fn model_flop(model: &Model, samples: u64, seq: u64) -> Flop {
    let tokens = samples as f64 * model.tokens_per_sample(seq) as f64;
    Flop(3.0 * forward_model_flop(model, 0..model.layers.len(), tokens, seq).all)
}
