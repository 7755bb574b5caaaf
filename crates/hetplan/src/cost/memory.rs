//! Per-GPU memory of a stage replica (docs/cost-model.md §5).

use super::constants as k;
use crate::model::{AttnImpl, Layer, Model, OpKind};
use crate::plan::{Engine, Precision, Recompute, Schedule, Stage};
use crate::units::Bytes;
use serde::Serialize;

/// Where one GPU's memory goes at its peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    pub weights: Bytes,
    pub gradients: Bytes,
    pub optimizer: Bytes,
    pub activations: Bytes,
    /// Transient buffers: ZeRO-3 gathered layers, the loss's fp32 logits, recompute working set.
    pub temporary: Bytes,
    /// Allocator fragmentation, the CUDA context and workspaces, NCCL's buffers.
    pub overhead: Bytes,
    /// The part of `overhead` outside PyTorch's allocator: the CUDA context and workspaces and
    /// NCCL's communicators' buffers ([`runtime_bytes`]), which nvidia-smi counts and
    /// `torch.cuda.max_memory_reserved` does not.
    pub runtime: Bytes,
    pub total: Bytes,
    /// Offloaded to the node's host memory (not in `total`): weights, gradients and optimizer
    /// states by their offload fractions, and the offloaded activations of the micro-batches
    /// in flight.
    pub host: Bytes,
}

/// Parameters of `layers` held by one TP rank (a tied head weight counts: the last stage keeps a
/// copy, as Megatron does, unless the embedding is on the same stage).
pub fn stage_params(model: &Model, layers: std::ops::Range<usize>, tp: u32) -> f64 {
    let (dense, expert) = stage_params_split(model, layers, tp);
    dense + expert
}

/// [`stage_params`] as (dense, expert) parameters: the experts' (`Op::is_expert`) are what
/// expert parallelism splits further.
pub fn stage_params_split(model: &Model, layers: std::ops::Range<usize>, tp: u32) -> (f64, f64) {
    let has_embedding = stage_has_embedding(model, layers.clone());
    layers
        .map(|i| layer_params_split(model, i, tp, has_embedding))
        .fold((0.0, 0.0), |(d, e), (dl, el)| (d + dl, e + el))
}

fn stage_has_embedding(model: &Model, layers: std::ops::Range<usize>) -> bool {
    layers
        .clone()
        .any(|i| model.layers[i].kind == crate::model::LayerKind::Embedding)
}

/// Layer `i`'s (dense, expert) parameters on one TP rank; a tied weight not when the stage
/// holds the embedding it shares.
fn layer_params_split(model: &Model, i: usize, tp: u32, has_embedding: bool) -> (f64, f64) {
    let (mut dense, mut expert) = (0.0, 0.0);
    for op in &model.layers[i].ops {
        if op.tied && has_embedding {
            continue;
        }
        let shard = if op.params_sharded || matches!(op.kind, OpKind::Opaque { .. }) {
            tp.max(1) as f64
        } else {
            1.0
        };
        let p = op.params as f64 / shard;
        if op.is_expert() {
            expert += p;
        } else {
            dense += p;
        }
    }
    (dense, expert)
}

/// Parameters of layer `layer` on one GPU of a stage over `stage` (TP degree `tp`, experts
/// split `expert_shards` ways): its share of [`gpu_params`] over the stage, so a tied head
/// weight counts once per stage (gradient buckets are made of these).
pub fn layer_gpu_params(
    model: &Model,
    stage: std::ops::Range<usize>,
    layer: usize,
    tp: u32,
    expert_shards: f64,
) -> f64 {
    let (dense, expert) = layer_params_split(model, layer, tp, stage_has_embedding(model, stage));
    dense + expert / expert_shards
}

/// Parameters of `layers` on one GPU of a TP rank whose experts' share is split
/// `expert_shards` ways further (`Stage::expert_shards`: `ep · etp / tp`).
pub fn gpu_params(
    model: &Model,
    layers: std::ops::Range<usize>,
    tp: u32,
    expert_shards: f64,
) -> f64 {
    let (dense, expert) = stage_params_split(model, layers, tp);
    dense + expert / expert_shards
}

/// Weights, gradients and optimizer states (bytes) of one GPU holding `dense` and `expert`
/// parameters (its expert-parallel share) of a stage with `dp` replicas whose experts are split
/// `ep` ways beyond TP (`Stage::expert_shards`): ZeRO shards the dense states over the `dp`
/// replicas and the experts' over the `dp / ep` GPUs that hold the same ones (Megatron's expert
/// data-parallel group).
pub fn sharded_states_ep(
    dense: f64,
    expert: f64,
    bytes: (f64, f64, f64),
    zero: u8,
    dp: f64,
    ep: f64,
) -> (f64, f64, f64) {
    let (w, g, o) = sharded_states_of(dense, bytes, zero, dp);
    let (we, ge, oe) = sharded_states_of(expert, bytes, zero, (dp / ep.max(1.0)).max(1.0));
    (w + we, g + ge, o + oe)
}

/// Bytes one GPU of `stage` (at TP degree `tp`) keeps beside its weights when training in FP8:
/// Transformer Engine (Megatron) casts each FP8 linear's weight once per iteration and keeps
/// the FP8 copy and its transpose for the remaining micro-batches (`is_first_microbatch`, TE's
/// weight workspaces): 2 B per parameter of the blocks' matrix products. torchao's Float8
/// (torchtitan, FSDP) casts the weight at every call and keeps nothing (its transient copy is
/// one layer's, within the temporaries). 0 for other precisions, and under Megatron's
/// `--fp8-param-gather` (`fp8_params`, `Plan::fp8_params`), where the FP8 weight and its
/// transpose are what the GPU holds of those parameters in place of their 16-bit copy.
pub fn fp8_weight_copy_bytes(
    model: &Model,
    stage: &Stage,
    tp: u32,
    precision: Precision,
    engine: Engine,
    fp8_params: bool,
) -> f64 {
    if !transformer_engine_fp8(precision, engine) || fp8_params {
        return 0.0;
    }
    let per_param = 2.0;
    let mut params = 0.0;
    for i in stage.layers.iter() {
        let layer = &model.layers[i];
        for op in &layer.ops {
            if !super::compute::fp8_gemm(op, layer.kind, precision) {
                continue;
            }
            let shard = if op.params_sharded {
                tp.max(1) as f64
            } else {
                1.0
            };
            let experts = if op.is_expert() {
                stage.expert_shards()
            } else {
                1.0
            };
            params += op.params as f64 / shard / experts;
        }
    }
    per_param * params
}

/// Bytes of DeepSpeed's gradient-reduction bucket under ZeRO-1 and -2: with
/// `contiguous_gradients` (on by default) its optimizer allocates one buffer of
/// `reduce_bucket_size` elements (5·10⁸ by default, `constants::grad_bucket_params`) in the
/// gradients' element type, two with `overlap_comm` (off by default below ZeRO-3)
/// (deepspeed/runtime/zero/stage_1_and_2.py, `setup_buckets` and, under pipeline
/// parallelism, `reduce_gradients`; defaults in zero/config.py). 0 for other engines and
/// stages (ZeRO-3 and FSDP reduce-scatter layer by layer; Megatron's buckets are views of its
/// gradient buffer).
pub fn reduce_bucket_bytes(engine: Engine, zero: u8, dp: u32, gradient_bytes: f64) -> f64 {
    match (engine, zero) {
        (Engine::Deepspeed, 1 | 2) => {
            super::constants::grad_bucket_params(engine, dp).unwrap_or(0.0) * gradient_bytes
        }
        _ => 0.0,
    }
}

/// Bytes DeepSpeed's ZeRO-1 and -2 optimizer allocates at its step beyond the model states,
/// with 16-bit gradients and the optimizer on the GPU: a flat 16-bit copy of the gradients of
/// its partition and that copy cast to FP32, side by side for the cast
/// (deepspeed/runtime/zero/stage_1_and_2.py, `step`:
/// `self.flatten(self.averaged_gradients[i]).to(fp32)`, before the parameters' own gradients
/// are freed), `(g + 4)` bytes per parameter of the partition — when the step runs, the
/// activations are freed. 0 for other engines and stages, for FP32 gradients (the
/// `BF16_Optimizer` accumulates them in FP32 already) and for an offloaded optimizer (its
/// FP32 gradients live on the host).
pub fn optimizer_step_bytes(
    engine: Engine,
    zero: u8,
    gradient_bytes: f64,
    params: f64,
    dp: u32,
    offloaded: bool,
) -> f64 {
    match (engine, zero) {
        (Engine::Deepspeed, 1 | 2) if gradient_bytes < 4.0 && !offloaded => {
            (gradient_bytes + 4.0) * params / dp.max(1) as f64
        }
        _ => 0.0,
    }
}

/// Bytes per vocabulary entry and token that the loss keeps for backward.
/// - A fused cross-entropy kernel (`fused`: flash-attn's, as llm-foundry runs MPT with
///   `loss_fn: fused_crossentropy`, or PyTorch's compiled, `Plan::compiles_loss`: Inductor
///   fuses `F.cross_entropy(logits.float())` into passes over the 16-bit logits that keep a
///   log-sum-exp per token and write the 16-bit gradient): only the 16-bit logits, 2 B.
/// - Otherwise every engine keeps the fp32 softmax or log-softmax, 4 B: Megatron's
///   vocab-parallel cross-entropy and DeepSpeed's (Korthikanti et al. 2022 §4.1, 4sbv/t), and
///   PyTorch's `F.cross_entropy(logits.float(), …)` as torchtitan calls it (log_softmax saves
///   its fp32 output; torchtitan/components/loss.py).
pub fn loss_saved_bytes_per_entry(fused: bool) -> f64 {
    if fused {
        2.0
    } else {
        4.0
    }
}

/// Bytes per vocabulary entry and token the loss needs at its peak beyond what it keeps
/// (`loss_saved_bytes_per_entry`).
/// - Fused, Megatron, DeepSpeed: the 16-bit logits the head's GEMM writes, 2 B (Megatron's
///   vocab-parallel cross-entropy then works in place in its fp32 copy).
/// - FSDP (PyTorch's loss, as torchtitan calls it): the backward of `log_softmax` holds the
///   fp32 gradient of its output and writes an fp32 gradient of its input beside the saved
///   output, 8 B (torch's `_log_softmax_backward_data` is not in place).
pub fn loss_transient_bytes_per_entry(fused: bool, engine: Engine) -> f64 {
    match (fused, engine) {
        (false, Engine::Fsdp) => 8.0,
        _ => 2.0,
    }
}

/// Whether the plan's FP8 runs Transformer Engine's linears (Megatron's and DeepSpeed's FP8)
/// rather than torchao's (torchtitan, FSDP). Transformer Engine quantizes each product's input
/// for the forward and saves that quantized copy, 1 B per element, for the weight gradient
/// ("Discard row-wise data since it is not needed in backward pass", then
/// `saved_inputmat = inputmat`: TE 2.x `pytorch/module/linear.py`, `layernorm_linear.py`,
/// `grouped_linear.py`), and keeps the weights' FP8 copies ([`fp8_weight_copy_bytes`]);
/// torchao's Float8 saves the high-precision input (`matmul_with_hp_or_float8_args`) and keeps
/// no copy.
pub fn transformer_engine_fp8(precision: Precision, engine: Engine) -> bool {
    matches!(
        (precision, engine),
        (Precision::Fp8, Engine::Megatron | Engine::Deepspeed)
    )
}

/// Bytes one layer keeps for backward for one micro-batch on one TP rank, without checkpointing;
/// `compiled_loss`: the plan compiles PyTorch's loss (`Plan::compiles_loss`); `fp8_inputs`: its
/// FP8 products keep their inputs in FP8 ([`transformer_engine_fp8`]).
#[allow(clippy::too_many_arguments)]
pub fn layer_saved_bytes(
    layer: &Layer,
    tokens: f64,
    seq: u64,
    tp: u32,
    sequence_parallel: bool,
    selective: bool,
    precision: Precision,
    compiled_loss: bool,
    fp8_inputs: bool,
) -> f64 {
    let tp = tp.max(1) as f64;
    let scale = precision.element_bytes() / 2.0;
    // A flash kernel's backward reads the attention's output; the unfused one's reads its
    // probabilities and V, and selective recomputation runs the core again.
    let output_kept = fp8_inputs
        && !selective
        && layer.ops.iter().any(|op| {
            matches!(
                op.kind,
                OpKind::Attention {
                    implementation: AttnImpl::Flash | AttnImpl::Triton,
                    ..
                }
            )
        });
    let mut b = 0.0;
    for op in &layer.ops {
        let (mut all, recomputed) = op.saved_bytes_per_token(seq);
        if let OpKind::Loss { vocab, fused } = op.kind {
            all = loss_saved_bytes_per_entry(fused || compiled_loss) * vocab as f64;
        }
        // A 16-bit input kept in 8 bits. The attention output is the one input another op
        // can keep at 16 bits too: a flash kernel's backward reads it (the core's saved bytes
        // leave it to the projection), and then the projection's FP8 copy comes on top.
        if fp8_inputs && super::compute::fp8_gemm(op, layer.kind, precision) {
            all *= if op.name == "proj" && output_kept {
                1.5
            } else {
                0.5
            };
        }
        let kept = if selective { all - recomputed } else { all };
        let split = if op.saved_sharded || sequence_parallel {
            tp
        } else {
            1.0
        };
        b += kept * tokens / split;
    }
    b * scale
}

/// Input of a layer kept by full checkpointing: the previous layer's output.
fn checkpoint_bytes(
    model: &Model,
    layer: usize,
    tokens: f64,
    tp: u32,
    sp: bool,
    p: Precision,
) -> f64 {
    let prev = if layer == 0 {
        0.0
    } else {
        model.layers[layer - 1].output_bytes_per_token
    };
    let split = if sp { tp.max(1) as f64 } else { 1.0 };
    prev * tokens / split * p.element_bytes() / 2.0
}

/// How many of the stage's layers (its first ones) are fully recomputed in backward, at most:
/// of them only the checkpointable ones are ([`fully_recomputed`]).
pub fn recomputed_layers(stage: &Stage) -> usize {
    match stage.recompute {
        Recompute::Full => stage.layers.len(),
        Recompute::Layers(n) => (n as usize).min(stage.layers.len()),
        Recompute::None | Recompute::Selective | Recompute::Ops => 0,
    }
}

/// Whether each of the stage's layers, in order, is recomputed whole in backward: the first
/// [`recomputed_layers`] of its checkpointable ones (`Layer::checkpointable`: not the
/// embedding, not the head).
pub fn fully_recomputed<'a>(model: &'a Model, stage: &Stage) -> impl Iterator<Item = bool> + 'a {
    let n = recomputed_layers(stage);
    let mut taken = 0;
    stage.layers.iter().map(move |i| {
        let yes = taken < n && model.layers[i].checkpointable();
        if yes {
            taken += 1;
        }
        yes
    })
}

/// Bytes a transformer block keeps for backward under op-level selective checkpointing
/// (`Recompute::Ops`) beyond its input, as (kept, of which backward reads): the outputs its
/// ops keep (`Layer::op_checkpointing`) and, under TP with sequence parallelism, its
/// reduce-scatters' outputs; the ones backward never reads only where the code runs eagerly.
/// `None` for a layer that is not a block.
fn op_checkpoint_kept_bytes(
    layer: &Layer,
    tokens: f64,
    tp: u32,
    sequence_parallel: bool,
    precision: Precision,
    eager: bool,
) -> Option<(f64, f64)> {
    let tp = tp.max(1) as f64;
    let scale = precision.element_bytes() / 2.0;
    let (mut kept, mut read) = (0.0, 0.0);
    for c in layer.op_checkpointing()? {
        let row = c.reduce_scattered_bytes_per_token > 0.0;
        // A row-parallel product's output is its partial sums over the whole sequence, before
        // the collective: sequence parallelism splits what the reduce-scatter returns, not it.
        let split = if c.kept_sharded || (sequence_parallel && !row) {
            tp
        } else {
            1.0
        };
        let mut b = c.kept_bytes_per_token * tokens / split * scale;
        if sequence_parallel && tp > 1.0 {
            b += c.reduce_scattered_bytes_per_token * tokens / tp * scale;
        }
        if !c.unread {
            read += b;
        }
        if eager || !c.unread {
            kept += b;
        }
    }
    Some((kept, read))
}

/// Activation bytes of one micro-batch of `mbs` samples through a replica of a stage at TP
/// degree `tp`, and the working set of recomputing its largest checkpointed layer; `eager`:
/// the model's code runs uncompiled (`Plan::runs_eagerly`), `compiled_loss`: its loss runs
/// compiled (`Plan::compiles_loss`), `fp8_inputs`: its FP8 products keep their inputs in FP8
/// ([`transformer_engine_fp8`]).
#[allow(clippy::too_many_arguments)]
pub fn micro_batch_activations(
    model: &Model,
    stage: &Stage,
    mbs: u64,
    tp: u32,
    seq: u64,
    precision: Precision,
    eager: bool,
    compiled_loss: bool,
    fp8_inputs: bool,
) -> (f64, f64) {
    // Context parallelism: 1/cp of each sequence on this GPU.
    let tokens = mbs as f64 * model.tokens_per_sample(seq) as f64 / stage.cp.max(1) as f64;
    let selective = stage.recompute == Recompute::Selective;
    let by_op = stage.recompute == Recompute::Ops;
    let sp = stage.sequence_parallel;
    let mut kept = 0.0;
    let mut working: f64 = 0.0;
    for (i, whole) in stage.layers.iter().zip(fully_recomputed(model, stage)) {
        let layer = &model.layers[i];
        let full = layer_saved_bytes(
            layer,
            tokens,
            seq,
            tp,
            sp,
            selective,
            precision,
            compiled_loss,
            fp8_inputs,
        );
        let ops_kept = if by_op {
            op_checkpoint_kept_bytes(layer, tokens, tp, sp, precision, eager)
        } else {
            None
        };
        if whole {
            kept += checkpoint_bytes(model, i, tokens, tp, sp, precision);
            working = working.max(full);
        } else if let Some((ops, read)) = ops_kept {
            // Its input and what the policy saves; recomputing the rest in backward brings the
            // block's other activations (what it saves for backward, less what is kept) back.
            kept += checkpoint_bytes(model, i, tokens, tp, sp, precision) + ops;
            working = working.max((full - read).max(0.0));
        } else {
            kept += full;
        }
    }
    (kept, working)
}

/// Micro-batches whose activations a pipeline stage holds at once.
/// 1F1B: stage i of S holds min(S − i, m) (Narayanan et al. 2021 §2.2); GPipe: all m;
/// interleaved: Megatron's warm-up count 2(S − i − 1) + (v − 1)·S, plus the one in progress,
/// in units of chunks (each 1/v of the stage's layers), capped by m·v.
pub fn in_flight(schedule: Schedule, pipeline_depth: usize, stage: usize, m: u64) -> f64 {
    match schedule {
        Schedule::Gpipe => m as f64,
        Schedule::OneFOneB => (warm_up_passes(pipeline_depth, 1, stage) + 1).min(m) as f64,
        Schedule::Interleaved { virtual_stages } => {
            let v = virtual_stages.max(1) as u64;
            let chunks = (warm_up_passes(pipeline_depth, v, stage) + 1).min(m * v);
            chunks as f64 / v as f64
        }
    }
}

/// Forward passes (chunk passes with v chunks a device) that stage `stage` of `depth` runs
/// before its first backward under Megatron's 1F1B schedules (`get_pp_rank_microbatches`):
/// `S − i − 1` without interleaving, `2(S − i − 1) + (v − 1)·S` with it.
pub fn warm_up_passes(depth: usize, v: u64, stage: usize) -> u64 {
    let (s, i) = (depth as u64, stage as u64);
    let after = s.saturating_sub(i + 1);
    if v > 1 {
        2 * after + (v - 1) * s
    } else {
        after
    }
}

/// The largest transient buffer of one micro-batch: the loss's working buffers beyond what it
/// keeps ([`loss_transient_bytes_per_entry`]; the fp32 probabilities it keeps are counted
/// with the saved activations, Korthikanti et al. 2022 §4.1: 4sbv/t).
pub fn transient_bytes(
    model: &Model,
    stage: &Stage,
    mbs: u64,
    tp: u32,
    seq: u64,
    engine: Engine,
    compiled_loss: bool,
) -> f64 {
    let tokens = mbs as f64 * model.tokens_per_sample(seq) as f64 / stage.cp.max(1) as f64;
    let mut t: f64 = 0.0;
    for i in stage.layers.iter() {
        for op in &model.layers[i].ops {
            if let OpKind::Loss { vocab, fused } = op.kind {
                let per_entry = loss_transient_bytes_per_entry(fused || compiled_loss, engine);
                t = t.max(per_entry * tokens * vocab as f64 / tp.max(1) as f64);
            }
        }
    }
    t
}

/// Bytes of weights, gradients and optimizer state one GPU keeps for `params` parameters
/// under ZeRO `zero` over `dp` replicas (before any offloading): ZeRO-1 shards the optimizer
/// state, ZeRO-2 also the gradients, ZeRO-3 also the weights (Rajbhandari et al. 2020 §5).
pub fn sharded_states(
    params: f64,
    engine: Engine,
    precision: Precision,
    zero: u8,
    dp: f64,
) -> (f64, f64, f64) {
    sharded_states_of(params, state_bytes(engine, precision), zero, dp)
}

/// [`sharded_states`] with the bytes per parameter given, `(weights, gradients, optimizer)`:
/// [`state_bytes`], or [`plan_state_bytes`] for a plan.
pub fn sharded_states_of(
    params: f64,
    bytes: (f64, f64, f64),
    zero: u8,
    dp: f64,
) -> (f64, f64, f64) {
    let (w, g, o) = bytes;
    let shard = |from: u8| if zero >= from { dp.max(1.0) } else { 1.0 };
    (
        params * w / shard(3),
        params * g / shard(2),
        params * o / shard(1),
    )
}

/// Bytes per parameter of weights, gradients and optimizer state a plan keeps: as
/// [`state_bytes`] of its engine and precision, with the gradients in the element type the
/// plan accumulates and reduces them in ([`crate::plan::Plan::gradient_dtype`]). Megatron's
/// FP32 `main_grad` replaces the 16-bit gradient (its hook adds `param.grad` in and drops it);
/// DeepSpeed's `grad_accum_dtype: fp32` selects its `BF16_Optimizer` (engine.py
/// `_do_optimizer_sanity_check`), whose FP32 accumulation buffer (`fp32_groups_gradients`)
/// sits beside the 16-bit `param.grad`, which the pipeline engine zeroes but does not free
/// (`update_hp_grads(clear_lp_grads=False)`, then `clear_lp_grads()`:
/// runtime/bf16_optimizer.py, pipe/engine.py): both, 2 + 4 B.
pub fn plan_state_bytes(plan: &crate::plan::Plan) -> (f64, f64, f64) {
    let (w, _, o) = state_bytes(plan.engine, plan.precision);
    let g = plan.gradient_dtype().element_bytes();
    let wider = g > plan.precision.element_bytes();
    let g = match plan.engine {
        Engine::Deepspeed if wider => g + plan.precision.element_bytes(),
        _ => g,
    };
    (w, g, o)
}

/// Bytes per parameter of weights, gradients and optimizer state an engine keeps in a precision:
/// the ZeRO paper's 16 B of mixed precision with 16-bit gradients, except that Megatron-LM
/// accumulates and reduces BF16 (and FP8, which runs with `--bf16`) gradients in an FP32
/// `main_grad` buffer, 4 B ([`crate::plan::default_gradient_dtype`]): 2 + 4 + 12 B, Megatron's
/// own table of "bf16 param, fp32 grads" (docs/source/api-guide/dist_optimizer.md: 18 B, or
/// 6 + 12/d with the distributed optimizer).
pub fn state_bytes(engine: Engine, p: Precision) -> (f64, f64, f64) {
    match p {
        Precision::Fp32 | Precision::Tf32 => (4.0, 4.0, k::OPTIMIZER_BYTES_FP32),
        _ => (
            k::WEIGHT_BYTES_16,
            crate::plan::default_gradient_dtype(engine, p)
                .element_bytes()
                .max(k::GRAD_BYTES_16),
            k::OPTIMIZER_BYTES_MIXED,
        ),
    }
}

/// NCCL communicators one GPU holds, by size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Communicators {
    /// Communicators of two GPUs.
    pub pairs: u32,
    /// Communicators of three or more.
    pub groups: u32,
}

/// What one GPU's rank communicates with: the parallel degrees of its stage, where the stage
/// sits in the pipeline, the job's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankLayout {
    pub engine: Engine,
    pub tp: u32,
    pub dp: u32,
    pub cp: u32,
    pub ep: u32,
    pub pipeline_depth: usize,
    pub stage: usize,
    /// Embedding and head weights tied across the first and last stages.
    pub tied_across_stages: bool,
    /// GPUs in the job.
    pub world: u32,
}

impl RankLayout {
    /// A rank of stage `stage` of a `depth`-deep pipeline, in one of `dp` replicas of `tp` GPUs,
    /// without context or expert parallelism, in a job of `world` GPUs: what the seed
    /// planners know when they check a stage's memory. `tied`: the model ties weights
    /// ([`ties_weights`]), which ties the first and last stages when `depth` > 1.
    pub fn stage(
        engine: Engine,
        tied: bool,
        (tp, dp): (u32, u32),
        (stage, depth): (usize, usize),
        world: u32,
    ) -> RankLayout {
        RankLayout {
            engine,
            tp,
            dp,
            cp: 1,
            ep: 1,
            pipeline_depth: depth,
            stage,
            tied_across_stages: tied && depth > 1,
            world,
        }
    }

    /// The NCCL communicators the rank uses in a training step. PyTorch creates one per process
    /// group on its first collective (ProcessGroupNCCL, lazily), and one per peer pair for
    /// unbatched `send`/`recv`:
    /// - one per parallel dimension larger than 1: TP, DP (ZeRO's and FSDP's collectives run
    ///   over it too), CP, EP;
    /// - the pipeline: Megatron and torchtitan batch their sends in the pipeline group
    ///   (`batch_isend_irecv`), one communicator; DeepSpeed's pipeline engine calls
    ///   `dist.send`/`recv` for each neighbour (runtime/pipe/p2p.py), a pair each, and
    ///   broadcasts the loss over the pipeline group (`_aggregate_total_loss`); under Megatron
    ///   and DeepSpeed the first and last stages reduce their tied embedding's gradient over a
    ///   pair of their own;
    /// - Megatron and DeepSpeed reduce the gradient norm and the overflow flag over the
    ///   model-parallel group (TP × PP ranks, a group of its own even when it has the TP ranks);
    /// - the job's default group, which both barrier on at start-up (torchtitan's device mesh
    ///   uses it for a dimension that spans the job, so only with two or more dimensions).
    pub fn communicators(&self) -> Communicators {
        let mut c = Communicators::default();
        let mut add = |ranks: u32| match ranks {
            0 | 1 => {}
            2 => c.pairs += 1,
            _ => c.groups += 1,
        };
        let depth = self.pipeline_depth.max(1) as u32;
        for d in [self.tp, self.dp, self.cp, self.ep] {
            add(d);
        }
        if depth > 1 {
            if self.engine == Engine::Deepspeed {
                let neighbours =
                    u32::from(self.stage > 0) + u32::from(self.stage + 1 < depth as usize);
                for _ in 0..neighbours {
                    add(2);
                }
            }
            add(depth);
            let end = self.stage == 0 || self.stage + 1 == depth as usize;
            if self.tied_across_stages && end && self.engine != Engine::Fsdp {
                add(2);
            }
        }
        if self.engine != Engine::Fsdp {
            add(self.tp.max(1) * depth);
        }
        let dimensions = [self.tp, self.dp, self.cp, self.ep, depth]
            .iter()
            .filter(|&&d| d > 1)
            .count();
        let own_default = self.engine != Engine::Fsdp || dimensions > 1;
        if own_default && self.world > 1 {
            add(self.world);
        }
        c
    }
}

/// What a GPU holds outside PyTorch's allocator: the CUDA context and workspaces
/// (`RUNTIME_RESERVED_GIB`) and NCCL's buffers, `NCCL_GROUP_BYTES` (or `NCCL_PAIR_BYTES`) per
/// communicator, scaled by the node's GPU-to-GPU link (`Node::intra_bandwidth`) against the A100
/// NVLink they were measured on (NCCL opens channels, and buffers, in proportion to the
/// bandwidth it aims at).
pub fn runtime_bytes(intra_link: crate::units::BytesPerSec, comms: Communicators) -> f64 {
    let link = intra_link.get() / (k::NCCL_MEASURED_LINK_GB_S * 1e9);
    let nccl = comms.pairs as f64 * k::NCCL_PAIR_BYTES + comms.groups as f64 * k::NCCL_GROUP_BYTES;
    Bytes::gib(k::RUNTIME_RESERVED_GIB).get() + link * nccl
}

/// Whether `model` ties a weight to its embedding (the head's, in most models).
pub fn ties_weights(model: &Model) -> bool {
    model.layers.iter().flat_map(|l| &l.ops).any(|o| o.tied)
}

/// [`runtime_bytes`] on GPU `gpu`'s node for a rank of stage `tp × dp` at each place of a
/// `depth`-deep pipeline whose communicators differ — the first, the second and the last
/// stage (the middle ones are alike) — for callers that do not know the place: the most bounds
/// what a stage may hold anywhere (Ditto), the least what it holds at best (Metis's layer
/// bound).
pub fn runtime_bytes_by_place(
    cluster: &crate::cluster::Cluster,
    gpu: crate::cluster::GpuId,
    (engine, tied): (Engine, bool),
    (tp, dp): (u32, u32),
    depth: usize,
    world: u32,
) -> impl Iterator<Item = f64> + '_ {
    (0..depth.max(1))
        .filter(move |&i| i <= 1 || i + 1 == depth)
        .map(move |i| {
            let layout = RankLayout::stage(engine, tied, (tp, dp), (i, depth), world);
            gpu_runtime_bytes(cluster, gpu, &layout)
        })
}

/// [`runtime_bytes`] on GPU `gpu`'s node for a rank of `layout`.
pub fn gpu_runtime_bytes(
    cluster: &crate::cluster::Cluster,
    gpu: crate::cluster::GpuId,
    layout: &RankLayout,
) -> f64 {
    runtime_bytes(cluster.node(gpu).intra_bandwidth, layout.communicators())
}

/// What the device needs beyond `allocated` bytes of tensors: the caching allocator's
/// fragmentation (`ALLOCATOR_OVERHEAD` of them) and `runtime` bytes outside the allocator
/// ([`runtime_bytes`]). Every memory check of the cost model and the planners goes through this
/// and its inverse, `allocatable_bytes`.
pub fn overhead_bytes(allocated: f64, runtime: f64) -> f64 {
    allocated * k::ALLOCATOR_OVERHEAD + runtime
}

/// Device bytes for `allocated` bytes of tensors (see `overhead_bytes`).
pub fn device_bytes(allocated: f64, runtime: f64) -> f64 {
    allocated + overhead_bytes(allocated, runtime)
}

/// The tensor bytes a device of `capacity` bytes holds beside `runtime` bytes: the inverse of
/// `device_bytes`, never negative.
pub fn allocatable_bytes(capacity: f64, runtime: f64) -> f64 {
    ((capacity - runtime) / (1.0 + k::ALLOCATOR_OVERHEAD)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::BytesPerSec;

    fn layout(engine: Engine, (tp, dp): (u32, u32), (stage, depth): (usize, usize)) -> RankLayout {
        let world = tp * dp * depth as u32;
        RankLayout::stage(engine, true, (tp, dp), (stage, depth), world)
    }

    fn comms(pairs: u32, groups: u32) -> Communicators {
        Communicators { pairs, groups }
    }

    /// Transformer Engine keeps an FP8 product's input in 8 bits for the weight gradient, so a
    /// Megatron FP8 block keeps less than a BF16 one by half of its QKV and MLP products'
    /// inputs; the attention output, which the attention's backward reads at 16 bits, gains its
    /// FP8 copy. The norms', attention's and activation's own saved tensors stay 16-bit, and
    /// torchao's Float8 (FSDP) saves its 16-bit inputs as BF16 does.
    #[test]
    fn transformer_engine_keeps_fp8_inputs_in_fp8() {
        let model = crate::model::catalog::catalog_model("llama3-8b").unwrap();
        let block = &model.layers[1];
        let saved = |p: Precision, e: Engine| {
            layer_saved_bytes(
                block,
                1.0,
                2048,
                1,
                false,
                false,
                p,
                true,
                transformer_engine_fp8(p, e),
            )
        };
        let bf16 = saved(Precision::Bf16, Engine::Megatron);
        assert_eq!(saved(Precision::Fp8, Engine::Fsdp), bf16);
        assert_eq!(saved(Precision::Bf16, Engine::Megatron), bf16);
        let te = saved(Precision::Fp8, Engine::Megatron);
        let inputs: f64 = (block.ops.iter())
            .filter(|op| crate::cost::compute::fp8_gemm(op, block.kind, Precision::Fp8))
            .map(|op| op.saved_bytes_per_token)
            .sum();
        assert!(inputs > 0.25 * bf16, "{inputs} of {bf16}");
        // The attention output stays in 16 bits for the attention's backward, and its FP8 copy
        // is kept beside it.
        let proj = (block.ops.iter().find(|op| op.name == "proj"))
            .unwrap()
            .saved_bytes_per_token;
        let expected = bf16 - (inputs - proj) / 2.0 + proj / 2.0;
        assert!((te - expected).abs() < 1e-9, "{bf16} {te} {inputs} {proj}");
        // Selective recomputation runs the core again, and an unfused core's backward reads
        // its probabilities, not its output: the output is not kept, only the FP8 copy.
        let sel = |p: Precision| {
            let fp8 = transformer_engine_fp8(p, Engine::Megatron);
            layer_saved_bytes(block, 1.0, 2048, 1, false, true, p, true, fp8)
        };
        let (sel_bf16, sel_te) = (sel(Precision::Bf16), sel(Precision::Fp8));
        assert!(
            (sel_bf16 - sel_te - inputs / 2.0).abs() < 1e-9,
            "{sel_bf16} {sel_te}"
        );
        let mut unfused = block.clone();
        for op in &mut unfused.ops {
            if let OpKind::Attention { implementation, .. } = &mut op.kind {
                *implementation = AttnImpl::Torch;
            }
        }
        let un = |p: Precision| {
            let fp8 = transformer_engine_fp8(p, Engine::Megatron);
            layer_saved_bytes(&unfused, 1.0, 2048, 1, false, false, p, true, fp8)
        };
        assert!((un(Precision::Bf16) - un(Precision::Fp8) - inputs / 2.0).abs() < 1e-9);
        assert!(!transformer_engine_fp8(
            Precision::Fp8Rowwise,
            Engine::Megatron
        ));
    }

    #[test]
    fn one_gpu_opens_no_communicator() {
        for engine in [Engine::Megatron, Engine::Deepspeed, Engine::Fsdp] {
            let l = layout(engine, (1, 1), (0, 1));
            assert_eq!(l.communicators(), comms(0, 0), "{engine:?}");
        }
        // The CUDA context alone.
        let r = runtime_bytes(BytesPerSec::gb_s(300.0), Communicators::default());
        assert_eq!(r, Bytes::gib(k::RUNTIME_RESERVED_GIB).get());
    }

    #[test]
    fn each_engine_counts_its_own_groups() {
        // BLOOM's middle stage under DeepSpeed's pipeline engine (TP 8, PP 6, DP 8): TP, DP,
        // a pair per neighbour, the pipeline group, the model-parallel group, the default one.
        assert_eq!(
            layout(Engine::Deepspeed, (8, 8), (2, 6)).communicators(),
            comms(2, 5)
        );
        // Its first stage: one neighbour, and the tied embedding's pair instead.
        assert_eq!(
            layout(Engine::Deepspeed, (8, 8), (0, 6)).communicators(),
            comms(2, 5)
        );
        // Megatron batches its sends in the pipeline group: a middle stage has no pair.
        assert_eq!(
            layout(Engine::Megatron, (8, 8), (2, 6)).communicators(),
            comms(0, 5)
        );
        // FSDP alone spans the job with one group: the default group is not another.
        assert_eq!(
            layout(Engine::Fsdp, (1, 8), (0, 1)).communicators(),
            comms(0, 1)
        );
        // Megatron's pure data parallelism: its DP group and the default group.
        assert_eq!(
            layout(Engine::Megatron, (1, 8), (0, 1)).communicators(),
            comms(0, 2)
        );
        // Groups of two ranks are pairs: torchtitan's TP and PP here, beside the default group
        // of all four (two dimensions).
        assert_eq!(
            layout(Engine::Fsdp, (2, 1), (0, 2)).communicators(),
            comms(2, 1)
        );
    }

    #[test]
    fn nccl_buffers_scale_with_the_link() {
        let c = comms(1, 2);
        let context = Bytes::gib(k::RUNTIME_RESERVED_GIB).get();
        let nvlink = runtime_bytes(BytesPerSec::gb_s(300.0), c) - context;
        assert!((nvlink - (k::NCCL_PAIR_BYTES + 2.0 * k::NCCL_GROUP_BYTES)).abs() < 1.0);
        let pcie = runtime_bytes(BytesPerSec::gb_s(31.5), c) - context;
        assert!((pcie / nvlink - 31.5 / 300.0).abs() < 1e-12);
        // The inverse holds beside any reserve.
        let cap = 80e9;
        let room = allocatable_bytes(cap, context + nvlink);
        assert!((device_bytes(room, context + nvlink) - cap).abs() < 1e-3);
    }
}
