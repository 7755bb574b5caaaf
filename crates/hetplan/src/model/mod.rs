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
