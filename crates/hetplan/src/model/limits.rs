//! The largest model shapes hetplan accepts from a file, in one place.
//!
//! These are typo guards, not physical limits: each is far above any published model (the
//! largest dense models have widths of ~2¹⁴–2¹⁵, FFN widths below 2¹⁸, vocabularies below 2¹⁸,
//! a few hundred layers, a few hundred heads, a few hundred experts, context windows of 2²⁰ or
//! so). What they buy is arithmetic that cannot overflow: with every shape field within its
//! limit, every per-op product of the transformer builder (`count·(k·n + n)` with `count` ≤
//! experts, `k, n` ≤ 2·ffn or (heads + 2·kv_heads)·head_dim, `vocab·hidden`,
//! `max_seq_len·hidden`) stays below 2⁶⁰, and the model's layer and op lists stay small enough
//! to allocate. Sums over a whole model saturate (`Model::params`).
//!
//! Read by `hf` (HuggingFace configs), `layerlist` (layer-list files), `TransformerConfig::
//! check_limits` (any shape before it is built from user input) and the calibration CSV.

/// The limits; see [`LIMITS`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Model width (`hidden_size`, `n_embd`, `d_model`); also an explicit `head_dim`.
    pub hidden: u64,
    /// FFN width (dense, per expert, or shared expert).
    pub ffn: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Transformer blocks.
    pub layers: u64,
    /// Attention heads (and key/value heads).
    pub heads: u64,
    /// MoE experts per layer (and experts per token).
    pub experts: u64,
    /// Sequence length / position-table size (`max_position_embeddings`, `max_seq_len`, `seq`).
    pub seq: u64,
    /// Parameters of one layer of a layer-list file.
    pub layer_params: u64,
    /// Layers of a layer-list file, `count` copies included.
    pub total_layers: u64,
    /// Forward FLOP per sample of one layer of a layer-list file.
    pub flops_per_sample: f64,
    /// Any byte size per sample of one layer of a layer-list file (activations, output,
    /// tensor-parallel traffic).
    pub bytes_per_sample: f64,
}

/// The limits every model reader applies.
pub const LIMITS: Limits = Limits {
    hidden: 1 << 20,
    ffn: 1 << 22,
    vocab: 1 << 24,
    layers: 10_000,
    heads: 1 << 14,
    experts: 1 << 12,
    seq: 1 << 24,
    layer_params: 1_000_000_000_000_000,
    total_layers: 100_000,
    flops_per_sample: 1e21,
    bytes_per_sample: 1e18,
};
