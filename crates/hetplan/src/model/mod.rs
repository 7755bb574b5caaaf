//! Models as lists of layers, and layers as lists of ops.
//!
//! FLOPs, tensor-parallel sharding and activation memory are derived from the ops (a GEMM knows
//! its shape and how TP splits it; an attention core knows its heads and whether it is flash),
//! never from one blanket per-layer formula. Quantities are given **per token** for sequence
//! models (multiply by micro-batch × sequence length), or **per sample** for models read from a
//! layer-list file (`Model::per_sample`), such as CNNs.

pub mod catalog;
pub mod hf;
pub mod layerlist;
mod limits;
pub mod transformer;

pub use limits::{Limits, LIMITS};
pub use transformer::{
    AttnImpl, Departure, Mla, MlpKind, MoeConfig, NormKind, PositionKind, QkNorm, Quirks,
    TransformerConfig,
};

use serde::{Deserialize, Serialize};

/// How tensor parallelism splits a GEMM's weight (Megatron-LM, Shoeybi et al. 2019 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TpSplit {
    /// Output features split: no communication after it.
    Column,
    /// Input features split: partial sums all-reduced after it.
    Row,
    /// Every TP rank computes all of it.
    Replicated,
}

/// What an op computes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum OpKind {
    /// `count` products of the (tokens × k) input with k × n weights. Each product sees
    /// `token_fraction` of the tokens (MoE experts: top_k / experts; dense: 1).
    Gemm {
        k: u64,
        n: u64,
        split: TpSplit,
        count: u64,
        token_fraction: f64,
    },
    /// The attention core softmax(QKᵀ)V over the sequence.
    Attention {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        causal: bool,
        implementation: AttnImpl,
        /// Attention dropout stores a mask and its output (non-flash implementations).
        dropout: bool,
        /// Sliding-window attention: each query attends to at most this many keys.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<u64>,
    },
    /// A memory-bound op (norm, activation, residual add, bias, dropout, loss): moves
    /// `bytes_per_token` through HBM in forward (reads + writes, 16-bit) and does
    /// `flops_per_token`. `sharded`: split over TP ranks. `eager_bytes_per_token`: what the
    /// op moves when PyTorch runs the model's code eagerly, each of its tensor operations a
    /// kernel of its own (`Plan::compile` off); `bytes_per_token` is one fused kernel
    /// (Megatron's and DeepSpeed's, or the code under `torch.compile`).
    Elementwise {
        bytes_per_token: f64,
        eager_bytes_per_token: f64,
        flops_per_token: f64,
        sharded: bool,
    },
    /// Softmax cross-entropy over `vocab` (vocab-parallel) logits: memory-bound, reads the 16-bit
    /// logits and writes and re-reads fp32 probabilities (10 B per entry). What it keeps for
    /// backward depends on the implementation: a fused kernel (`fused`), else the engine's
    /// (`cost::memory::loss_saved_bytes_per_entry`).
    Loss { vocab: u64, fused: bool },
    /// Embedding-table gather of `width` elements per token.
    Lookup { width: u64 },
    /// An op known only by its totals per sample (layer-list files); TP-sharded evenly.
    Opaque { flops_per_sample: f64 },
}

/// One op of a layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub name: String,
    pub kind: OpKind,
    /// Parameters before TP sharding.
    pub params: u64,
    /// Parameters split over TP ranks (column/row GEMMs, vocab-parallel embeddings).
    pub params_sharded: bool,
    /// The weight is the tied input embedding (its copy on another stage is kept in sync, but it
    /// is one parameter of the model).
    pub tied: bool,
    /// Bytes kept for the backward pass per token (per sample for per-sample models), at 16-bit
    /// activations, before sharding. For the attention core this excludes the s-dependent part,
    /// see [`Op::saved_bytes_per_token`].
    pub saved_bytes_per_token: f64,
    /// Saved tensors split over TP ranks even without sequence parallelism.
    pub saved_sharded: bool,
}

impl Op {
    /// One of a mixture-of-experts layer's expert ops (the transformer builder names them
    /// `expert_…`): what expert parallelism splits.
    pub fn is_expert(&self) -> bool {
        self.name.starts_with("expert_")
    }

    /// Bytes saved for backward per token at sequence length `seq`, for 16-bit activations:
    /// (bytes, of which recomputed by selective checkpointing). The non-flash attention core
    /// stores its softmax output (2·a·s bytes per token) and, with dropout, a mask and the
    /// dropped-out probabilities (3·a·s) (Korthikanti et al. 2022, §4.1); selective
    /// recomputation drops exactly those (§5).
    pub fn saved_bytes_per_token(&self, seq: u64) -> (f64, f64) {
        match &self.kind {
            OpKind::Attention {
                heads,
                implementation: AttnImpl::Torch,
                dropout,
                ..
            } => {
                let per_elem = if *dropout { 5.0 } else { 2.0 };
                let quad = per_elem * (*heads as f64) * seq as f64;
                (self.saved_bytes_per_token + quad, quad)
            }
            _ => (self.saved_bytes_per_token, 0.0),
        }
    }
}

/// What a layer is, for reports and for planners that treat embeddings specially.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayerKind {
    Embedding,
    Transformer,
    Head,
    Other,
}

/// One layer: the unit of pipeline partitioning and of profiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub name: String,
    pub kind: LayerKind,
    pub ops: Vec<Op>,
    /// Bytes of the layer's output per token (16-bit): what crosses a stage boundary.
    pub output_bytes_per_token: f64,
    /// Tensor-parallel all-reduces in forward and in backward, each of `tp_comm_bytes_per_token`.
    pub tp_allreduces_fwd: u32,
    pub tp_allreduces_bwd: u32,
    pub tp_comm_bytes_per_token: f64,
}

impl Layer {
    /// A mixture-of-experts layer's expert count and the elements of its input each token sends
    /// to the experts it is routed to (top-k × width): what an expert-parallel all-to-all moves.
    pub fn experts(&self) -> Option<(u64, f64)> {
        self.ops.iter().find_map(|o| match o.kind {
            OpKind::Gemm {
                k,
                count,
                token_fraction,
                ..
            } if o.is_expert() && count > 1 => {
                Some((count, token_fraction * count as f64 * k as f64))
            }
            _ => None,
        })
    }

    /// Parameters of the layer, counting a tied weight (saturating at `u64::MAX`).
    pub fn params(&self) -> u64 {
        self.ops
            .iter()
            .fold(0u64, |acc, o| acc.saturating_add(o.params))
    }
    /// Parameters that are the model's own (a tied weight counts at the embedding only;
    /// saturating at `u64::MAX`).
    pub fn unique_params(&self) -> u64 {
        self.ops
            .iter()
            .filter(|o| !o.tied)
            .fold(0u64, |acc, o| acc.saturating_add(o.params))
    }

    /// Whether activation checkpointing recomputes this layer: every engine checkpoints its
    /// transformer layers and nothing else — Megatron's `--recompute-granularity full`
    /// within its transformer block (megatron/core/transformer/transformer_block.py,
    /// `_checkpointed_forward`), DeepSpeed's pipeline engine the layers its module calls
    /// checkpointable (Megatron-DeepSpeed's `GPTModelPipe`: `ParallelTransformerLayerPipe`
    /// only, deepspeed/runtime/pipe/module.py `_is_checkpointable`), torchtitan its
    /// `model.layers`. The embedding and the head (final norm, output layer, loss) keep what
    /// they keep.
    pub fn checkpointable(&self) -> bool {
        !matches!(self.kind, LayerKind::Embedding | LayerKind::Head)
    }

    /// Whether backward reads each of the layer's ops' outputs, or anything the layer computes
    /// from them, in op order: `true` for an op whose output it never reads. In a transformer
    /// block those are the closing residual add and the product (with its bias) that only that
    /// add reads — the MLP's down projection, a shared expert's without a gate — and in a
    /// parallel block the attention's output projection too; not a product a post-norm reads,
    /// nor the routed experts' (their weighting's backward reads them). Every op of another
    /// layer is read. A recomputation that stops once it has what backward reads skips them
    /// ([`Layer::skipped_by_early_stop`]): torch.compile's partitioner, which leaves dead code
    /// out, all of them; PyTorch's eager non-reentrant checkpoint (`early_stop`,
    /// torch/utils/checkpoint.py) the closing ones (measured on an H200, docs/validation.md
    /// §5).
    pub fn unread_by_backward(&self) -> impl Iterator<Item = bool> + '_ {
        // The compiler's partitioner skips exactly those.
        self.skipped_by_early_stop(false)
    }

    /// Which of the layer's ops, in order, a recomputation that stops once it has what
    /// backward reads does not run again. Compiled (`eager` false), torch.compile's
    /// partitioner leaves out every op whose output backward never reads
    /// ([`Layer::unread_by_backward`]). Eager, PyTorch's non-reentrant checkpoint reruns the
    /// forward in order and stops once every tensor the forward saved is back: it skips only
    /// the block's closing tail, and nothing where an op of it saves a tensor of its own (a
    /// residual dropout's mask, which needs the product's output); a parallel block's
    /// attention projection, which runs before the MLP saves its inputs, runs again.
    pub fn skipped_by_early_stop(&self, eager: bool) -> impl Iterator<Item = bool> + '_ {
        let (tail, proj) = self.skipped_tail(eager);
        let proj = proj.map_or(0..0, |p| p..self.next_main(p));
        (0..self.ops.len()).map(move |i| i >= tail || proj.contains(&i))
    }

    /// Whether a recomputation that stops early ([`Layer::skipped_by_early_stop`]) leaves out
    /// the block's closing product, and so the TP collective after it (a dense block's; a
    /// mixture of experts reduces its routed and shared experts' outputs together).
    pub fn closing_product_skipped(&self, eager: bool) -> bool {
        self.experts().is_none() && self.skipped_tail(eager).0 + 1 < self.ops.len()
    }

    /// ([`Layer::skipped_by_early_stop`]) The first op of the closing tail a recomputation
    /// skips (the op count if none) and the parallel block's projection it skips.
    fn skipped_tail(&self, eager: bool) -> (usize, Option<usize>) {
        let n = self.ops.len();
        match self.unread_tail() {
            None => (n, None),
            Some((tail, proj)) if !eager => (tail, proj),
            Some((tail, _)) => {
                // What the tail saves beyond the closing product's own input, which the ops
                // before it produce.
                let from = if tail + 1 < n { tail + 1 } else { tail };
                let saves = self.ops[from..]
                    .iter()
                    .any(|o| o.saved_bytes_per_token > 0.0);
                (if saves { n } else { tail }, None)
            }
        }
    }

    /// The index of the next op after `i` that is not a bias (the op count if none).
    fn next_main(&self, i: usize) -> usize {
        (i + 1..self.ops.len())
            .find(|&j| !self.ops[j].name.ends_with("_bias"))
            .unwrap_or(self.ops.len())
    }

    /// ([`Layer::unread_by_backward`]) The first op of the block's unread tail (the closing
    /// product, or the residual add alone), and a parallel block's output projection; `None`
    /// for a layer without the closing residual add of a transformer block.
    fn unread_tail(&self) -> Option<(usize, Option<usize>)> {
        let n = self.ops.len();
        if self.kind != LayerKind::Transformer || self.ops.last()?.name != "mlp_residual" {
            return None;
        }
        // Only the residual add reads a row-parallel product's output, and its backward does
        // not; a replicated product (a gate) or a norm is read.
        let read_only_by_add = |op: &Op| {
            matches!(
                op.kind,
                OpKind::Gemm {
                    split: TpSplit::Row,
                    ..
                }
            ) && !op.is_expert()
        };
        let mut i = n - 1;
        while i > 0 && self.ops[i - 1].name.ends_with("_bias") {
            i -= 1;
        }
        let tail = if i > 0 && read_only_by_add(&self.ops[i - 1]) {
            i - 1
        } else {
            n - 1
        };
        // A parallel block adds the attention's output into the same closing sum: no residual
        // add (nor a post-norm) follows its projection.
        let proj = (tail < n - 1)
            .then(|| self.ops.iter().position(|o| o.name == "proj"))
            .flatten()
            .filter(|&p| {
                read_only_by_add(&self.ops[p]) && self.next_main(p) < tail && {
                    let next = &self.ops[self.next_main(p)].name;
                    next != "attn_residual" && next != "post_attn_norm"
                }
            });
        Some((tail, proj))
    }

    /// What op-level selective checkpointing (`plan::Recompute::Ops`) does with each of the
    /// layer's ops, in order; `None` for a layer that is not a transformer block (torchtitan
    /// checkpoints its blocks only: the embedding and the head keep what they keep).
    ///
    /// torchtitan's policy (`_custom_policy` in torchtitan/parallelisms/parallelize_llama.py
    /// at 9dec370; `SelectiveAC` in torchtitan/distributed/activation_checkpoint.py today)
    /// marks every op of a block *save* or *recompute*: the attention kernels' outputs (the
    /// output and its log-sum-exp; an unfused core is recomputed), and of the matrix products in forward order the first,
    /// third, fifth … (`mm_count % 2 == 1`), are saved; every other op — the second, fourth …
    /// product, norms, rotary embeddings, activations, residual adds — runs again in backward
    /// from the block's input. Products are counted as the code runs them: hetplan's QKV op is
    /// one (torchtitan's `fuse_qkv`, which its export writes; the unfused code of December 2024
    /// runs three, keeping the keys' product where this keeps it whole), a gated MLP's up
    /// projection is two (`w1`, then `w3`). A mixture of experts' expert products run as
    /// grouped GEMMs the policy does not save, and its router's product is always recomputed
    /// (`force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]`): both recomputed, not
    /// counted. An opaque op is recomputed.
    pub fn op_checkpointing(&self) -> Option<impl Iterator<Item = OpCheckpoint> + '_> {
        if self.kind != LayerKind::Transformer {
            return None;
        }
        let ops = &self.ops;
        let mut products = 0u32;
        let unread = self.unread_by_backward();
        Some(
            ops.iter()
                .enumerate()
                .zip(unread)
                .map(move |((i, op), unread)| match &op.kind {
                    OpKind::Gemm {
                        n,
                        split,
                        count,
                        token_fraction,
                        ..
                    } if !op.is_expert() && op.name != "router" => {
                        // A gated MLP's up projection: the down projection that follows takes half its
                        // width.
                        let gated = ops[i + 1..].iter().find_map(|o| match o.kind {
                            OpKind::Gemm { k: down, .. } if o.name.ends_with("fc2") => Some(down),
                            _ => None,
                        });
                        let parts: u32 =
                            if op.name.ends_with("fc1") && gated.is_some_and(|d| 2 * d == *n) {
                                2
                            } else {
                                1
                            };
                        let width = *n as f64 / parts as f64;
                        let (mut kept, mut recomputed) = (0.0, 0.0);
                        for _ in 0..parts {
                            products += 1;
                            if products % 2 == 1 {
                                kept += width;
                            } else {
                                recomputed += width;
                            }
                        }
                        let copies = *count as f64 * token_fraction;
                        OpCheckpoint {
                            recomputed: recomputed / *n as f64,
                            kept_bytes_per_token: 2.0 * kept * copies,
                            kept_sharded: *split == TpSplit::Column,
                            reduce_scattered_bytes_per_token: if *split == TpSplit::Row {
                                2.0 * *n as f64 * copies
                            } else {
                                0.0
                            },
                            unread,
                        }
                    }
                    // The unfused core is matrix products and a softmax of its own, none of which the
                    // policy saves (it saves the SDPA kernels' outputs): recomputed whole.
                    OpKind::Attention {
                        heads,
                        head_dim,
                        implementation,
                        ..
                    } if *implementation != AttnImpl::Torch => {
                        // The output (as wide as the product after it reads) and one FP32 log-sum-exp
                        // per head.
                        let out = ops[i + 1..]
                            .iter()
                            .find_map(|o| match o.kind {
                                OpKind::Gemm { k, .. } => Some(k),
                                _ => None,
                            })
                            .unwrap_or(heads * head_dim);
                        OpCheckpoint {
                            recomputed: 0.0,
                            kept_bytes_per_token: 2.0 * out as f64 + 4.0 * *heads as f64,
                            kept_sharded: true,
                            reduce_scattered_bytes_per_token: 0.0,
                            unread: false,
                        }
                    }
                    _ => OpCheckpoint {
                        recomputed: 1.0,
                        ..OpCheckpoint::default()
                    },
                }),
        )
    }
}

/// What op-level selective checkpointing does with one op of a transformer block
/// (`Layer::op_checkpointing`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpCheckpoint {
    /// Share (0..=1) of the op's forward that backward runs again.
    pub recomputed: f64,
    /// Bytes per token (16-bit) of the op's outputs kept for backward, before TP splits them.
    pub kept_bytes_per_token: f64,
    /// The kept output is split over the TP ranks (a column-parallel product's, the attention
    /// core's); a row-parallel product's is its partial sums over the whole sequence, which
    /// nothing splits.
    pub kept_sharded: bool,
    /// Bytes per token (16-bit), before the split, of the output a row-parallel product
    /// reduce-scatters over the TP ranks under sequence parallelism (0 for other ops): the
    /// policy keeps every reduce-scatter's output (`_c10d_functional.reduce_scatter_tensor`
    /// is in its save list), whether the product itself is kept or recomputed.
    pub reduce_scattered_bytes_per_token: f64,
    /// The kept output is one backward never reads (`Layer::unread_by_backward`: the closing
    /// product that only the residual add reads; not the attention's output projection of a
    /// sequential block, whose sum with the residual the second norm's backward reads):
    /// eager code keeps it anyway (the policy's cache holds every saved op's output,
    /// torch/utils/checkpoint.py `_CachingTorchDispatchMode`), the compiler's partitioner
    /// saves only what backward reads.
    pub unread: bool,
}

/// A model ready for the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub layers: Vec<Layer>,
    /// The transformer shape it was built from, when it is one.
    pub transformer: Option<TransformerConfig>,
    /// Sequence length used when the user gives none.
    pub default_seq_len: u64,
    /// Quantities are per sample (layer-list models), not per token.
    pub per_sample: bool,
}

impl Model {
    /// Number of parameters (a tied embedding counted once), saturating at `u64::MAX` (which
    /// the shape limits of [`LIMITS`] make unreachable for any real model).
    pub fn params(&self) -> u64 {
        self.layers
            .iter()
            .fold(0u64, |acc, l| acc.saturating_add(l.unique_params()))
    }

    /// Tokens in one sample at sequence length `seq` (1 for per-sample models).
    pub fn tokens_per_sample(&self, seq: u64) -> u64 {
        if self.per_sample {
            1
        } else {
            seq
        }
    }

    /// Parameters of MoE experts not used by one token: total minus active.
    pub fn inactive_params(&self) -> u64 {
        let mut inactive = 0.0;
        for l in &self.layers {
            for o in &l.ops {
                if let OpKind::Gemm {
                    count,
                    token_fraction,
                    ..
                } = o.kind
                {
                    if count > 1 {
                        inactive += o.params as f64 * (1.0 - token_fraction);
                    }
                }
            }
        }
        // Never more than the parameters there are (a float sum can round above them).
        // `as` saturates; the value is finite and not negative here.
        (inactive.round() as u64).min(self.params())
    }

    /// Parameters one token goes through (MoE: the top-k experts only).
    pub fn active_params(&self) -> u64 {
        self.params().saturating_sub(self.inactive_params())
    }
}
