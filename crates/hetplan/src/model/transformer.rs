//! Decoder (and encoder) transformers described by their shape, and their expansion into ops.
//!
//! Activation bytes follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
//! Transformer Models", §4.1): per token and layer, with 16-bit activations, attention stores its
//! QKV input 2h, Q,K,V 6h (less with GQA), the output-projection input 2h and a dropout mask h;
//! the MLP its input 2h, the activation input 8h and the second GEMM's input 8h (for a 4h MLP)
//! and a mask h; each layer norm its input 2h — 34h in all with dropout, of which 10h are
//! replicated across tensor-parallel ranks (norm inputs, GEMM inputs before the column split,
//! masks) unless sequence parallelism shards them too.

use super::{Layer, LayerKind, Model, Op, OpKind, TpSplit, LIMITS};
use crate::error::InputError;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MlpKind {
    /// Two GEMMs h→f→h with GeLU (GPT-2/3, MPT, Falcon, BERT, GPT-NeoX).
    Gelu,
    /// Three GEMMs (gate and up h→f, down f→h) with SiLU-gating (LLaMA, Mistral, Qwen2).
    SwiGlu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormKind {
    LayerNorm,
    RmsNorm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PositionKind {
    /// A learned table of `max_seq_len` × h (GPT-2/3, MPT, OPT, BERT).
    Learned,
    /// Rotary or ALiBi: no parameters.
    Rotary,
    Alibi,
}

/// The attention-core kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttnImpl {
    /// FlashAttention-2 (Dao 2023): no s² activations, recomputes in backward.
    Flash,
    /// The Triton flash-attention kernel used by MPT/llm-foundry (`attn_impl: triton`).
    Triton,
    /// Unfused PyTorch/Megatron attention that materialises the s×s scores.
    Torch,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MoeConfig {
    pub experts: u64,
    pub top_k: u64,
    /// FFN width of one expert.
    pub expert_ffn: u64,
    /// A dense FFN of this width beside the experts (Qwen2-MoE's shared expert), if any.
    pub shared_ffn: Option<u64>,
}

/// Normalisation of queries and keys before the scores (QK-norm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QkNorm {
    /// A weight for every head (`(heads + kv_heads)·head_dim`: Cohere, StableLM, and OLMo 2 and
    /// OLMoE, which normalise the whole query and key vectors); else one `head_dim` norm shared by
    /// the heads, for queries and for keys (Qwen3, Gemma 3, Persimmon).
    pub per_head: bool,
    /// The norms carry a bias (Persimmon's LayerNorms).
    pub bias: bool,
}

/// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass through low-rank
/// projections, each followed by an RMSNorm; keys carry a rotary part shared by the heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the query down-projection; `None`: a plain query projection.
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

/// What sets a family's blocks apart from the plain pre-norm decoder `TransformerConfig`
/// describes, each written once here and set by the readers (`model::hf`). The defaults are the
/// plain decoder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quirks {
    /// Bias on the attention output projection; `None`: as `attn_bias` (the QKV bias).
    pub proj_bias: Option<bool>,
    /// Norms carry weights (OLMo's LayerNorm has none).
    pub norm_affine: bool,
    /// Norms before attention and before the MLP (pre-norm).
    pub pre_norms: bool,
    /// Norms on the attention and MLP outputs before each residual add (Gemma 2/3, OLMo 2,
    /// GLM-4).
    pub post_norms: bool,
    pub qk_norm: Option<QkNorm>,
    /// A learned logit per head that absorbs attention (gpt-oss's sinks).
    pub attn_sinks: bool,
    pub mla: Option<Mla>,
    /// Sliding-window attention: the window in tokens, and which blocks use it (`local_layers`
    /// empty: every block). Attention then costs only its window.
    pub window: Option<u64>,
    pub local_layers: Vec<bool>,
    /// The LM head has a bias (Phi-2, GPT-J, CodeGen).
    pub lm_head_bias: bool,
    /// A norm right after the token embedding (BLOOM).
    pub embed_norm: bool,
    /// A norm before the LM head (all but OPT-350m).
    pub final_norm: bool,
    /// Extra rows of the learned position table (OPT: 2).
    pub position_offset: u64,
    /// Token-embedding width when it differs from the model's, with bias-free projections in
    /// after the embedding and out before the LM head (OPT-350m).
    pub embed_dim: Option<u64>,
    /// Biases on every expert's GEMMs (gpt-oss).
    pub expert_bias: bool,
    /// Bias on the MoE router (gpt-oss).
    pub router_bias: bool,
    /// A one-output gate on the shared expert (Qwen2-MoE).
    pub shared_expert_gate: bool,
    /// With `moe`: the blocks that keep a dense MLP of `ffn` (DeepSeek's first layers, Qwen's
    /// `mlp_only_layers` and `decoder_sparse_step`); empty: every block is MoE.
    pub dense_layers: Vec<bool>,
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks {
            proj_bias: None,
            norm_affine: true,
            pre_norms: true,
            post_norms: false,
            qk_norm: None,
            attn_sinks: false,
            mla: None,
            window: None,
            local_layers: Vec::new(),
            lm_head_bias: false,
            embed_norm: false,
            final_norm: true,
            position_offset: 0,
            embed_dim: None,
            expert_bias: false,
            router_bias: false,
            shared_expert_gate: false,
            dense_layers: Vec::new(),
        }
    }
}

/// A structure the plain pre-norm decoder lacks (`Quirks::departures`): what an engine that
/// builds its decoder from flags must express or refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Departure {
    NormWithoutWeights,
    OutputNorms,
    /// One `head_dim` norm shared by the heads, without bias (Megatron's `--qk-layernorm`).
    QkNorm,
    /// QK-norm with a weight per head or a bias.
    QkNormPerHeadOrBias,
    AttentionSinks,
    LatentAttention,
    SlidingWindow,
    LmHeadBias,
    EmbeddingNorm,
    NoFinalNorm,
    EmbeddingWidth,
    ExpertBiases,
    SharedExpertGate,
}

impl Departure {
    pub fn describe(self) -> &'static str {
        match self {
            Departure::NormWithoutWeights => "LayerNorms without weights (OLMo)",
            Departure::OutputNorms => {
                "norms on the attention and MLP outputs (Gemma 2/3, OLMo 2, GLM-4)"
            }
            Departure::QkNorm => "QK-norm",
            Departure::QkNormPerHeadOrBias => "QK-norm with weights per head or a bias",
            Departure::AttentionSinks => "attention sinks (gpt-oss)",
            Departure::LatentAttention => "multi-head latent attention (DeepSeek)",
            Departure::SlidingWindow => "sliding-window attention",
            Departure::LmHeadBias => "a bias on the LM head",
            Departure::EmbeddingNorm => "a norm after the token embedding (BLOOM)",
            Departure::NoFinalNorm => "no norm before the LM head",
            Departure::EmbeddingWidth => {
                "an embedding of another width than the model, with projections (OPT-350m)"
            }
            Departure::ExpertBiases => "biases on the experts and the router (gpt-oss)",
            Departure::SharedExpertGate => "a gate on the shared expert (Qwen2-MoE)",
        }
    }
}

impl Quirks {
    /// What the model has beyond the plain pre-norm decoder: what an engine that builds only
    /// that decoder from flags would silently leave out.
    pub fn departures(&self) -> Vec<Departure> {
        let mut d = Vec::new();
        let mut add = |cond: bool, x: Departure| {
            if cond {
                d.push(x)
            }
        };
        add(!self.norm_affine, Departure::NormWithoutWeights);
        add(self.post_norms || !self.pre_norms, Departure::OutputNorms);
        if let Some(q) = self.qk_norm {
            add(!q.per_head && !q.bias, Departure::QkNorm);
            add(q.per_head || q.bias, Departure::QkNormPerHeadOrBias);
        }
        add(self.attn_sinks, Departure::AttentionSinks);
        add(self.mla.is_some(), Departure::LatentAttention);
        add(self.window.is_some(), Departure::SlidingWindow);
        add(self.lm_head_bias, Departure::LmHeadBias);
        add(self.embed_norm, Departure::EmbeddingNorm);
        add(!self.final_norm, Departure::NoFinalNorm);
        add(self.embed_dim.is_some(), Departure::EmbeddingWidth);
        add(
            self.expert_bias || self.router_bias,
            Departure::ExpertBiases,
        );
        add(self.shared_expert_gate, Departure::SharedExpertGate);
        d
    }
}

/// The shape of a transformer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransformerConfig {
    pub name: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub mlp: MlpKind,
    pub norm: NormKind,
    pub position: PositionKind,
    pub vocab: u64,
    pub max_seq_len: u64,
    /// Biases on the QKV and output projections.
    pub attn_bias: bool,
    /// Biases on the MLP GEMMs.
    pub mlp_bias: bool,
    /// Norms carry a bias (LayerNorm with bias).
    pub norm_bias: bool,
    pub tied_embeddings: bool,
    /// Attention and MLP read the same normed input (GPT-J, Falcon, GPT-NeoX with
    /// `use_parallel_residual`); `shared_norm`: a single norm feeds both (Falcon-7B).
    pub parallel_attn: bool,
    pub shared_norm: bool,
    pub causal: bool,
    pub attn_impl: AttnImpl,
    /// The loss is a fused softmax cross-entropy kernel that keeps only the 16-bit logits and
    /// writes their gradient in place (flash-attn's `CrossEntropyLoss`, llm-foundry's
    /// `loss_fn: fused_crossentropy`); otherwise the engine's own loss (`cost::memory`).
    #[serde(default)]
    pub fused_loss: bool,
    /// The norms run as one fused kernel (forward and backward) even where the rest of the
    /// model's code runs eagerly (`Plan::compile` off): torchtitan's `norm_type =
    /// "fused_rmsnorm"` of 2024, a Triton RMSNorm (torchtitan/models/norms.py at 1ea476e).
    /// Compiled code or an engine's own kernels fuse the norms anyway.
    #[serde(default)]
    pub fused_norm: bool,
    /// Dropout layers present (they store masks).
    pub dropout: bool,
    pub moe: Option<MoeConfig>,
    /// What sets the family apart (all default for the plain decoder).
    #[serde(default)]
    pub quirks: Quirks,
}

impl TransformerConfig {
    /// A GPT-style decoder: MHA, 4h GeLU MLP, LayerNorm with bias, learned positions, biases,
    /// tied embeddings, vocabulary 50257, flash attention, no dropout.
    pub fn gpt(name: &str, layers: u64, hidden: u64, heads: u64, max_seq_len: u64) -> Self {
        TransformerConfig {
            name: name.to_string(),
            hidden,
            layers,
            heads,
            kv_heads: heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            ffn: hidden.saturating_mul(4),
            mlp: MlpKind::Gelu,
            norm: NormKind::LayerNorm,
            position: PositionKind::Learned,
            vocab: 50257,
            max_seq_len,
            attn_bias: true,
            mlp_bias: true,
            norm_bias: true,
            tied_embeddings: true,
            parallel_attn: false,
            shared_norm: false,
            causal: true,
            attn_impl: AttnImpl::Flash,
            fused_loss: false,
            fused_norm: false,
            dropout: false,
            moe: None,
            quirks: Quirks::default(),
        }
    }

    /// A LLaMA-style decoder: GQA with `kv_heads`, SwiGLU of width `ffn`, RMSNorm, rotary, no
    /// biases, untied embeddings.
    #[allow(clippy::too_many_arguments)]
    pub fn llama(
        name: &str,
        layers: u64,
        hidden: u64,
        heads: u64,
        kv_heads: u64,
        ffn: u64,
        vocab: u64,
        max_seq_len: u64,
    ) -> Self {
        TransformerConfig {
            name: name.to_string(),
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            ffn,
            mlp: MlpKind::SwiGlu,
            norm: NormKind::RmsNorm,
            position: PositionKind::Rotary,
            vocab,
            max_seq_len,
            attn_bias: false,
            mlp_bias: false,
            norm_bias: false,
            tied_embeddings: false,
            parallel_attn: false,
            shared_norm: false,
            causal: true,
            attn_impl: AttnImpl::Flash,
            fused_loss: false,
            fused_norm: false,
            dropout: false,
            moe: None,
            quirks: Quirks::default(),
        }
    }

    fn norm_params_of(&self, width: u64) -> u64 {
        match (self.quirks.norm_affine, self.norm_bias) {
            (false, _) => 0,
            (true, true) => width.saturating_mul(2),
            (true, false) => width,
        }
    }

    fn norm_op(&self, name: &str) -> Op {
        self.norm_op_of(name, self.hidden)
    }

    /// A norm over `width` elements per token (the model width, or a low-rank projection's).
    fn norm_op_of(&self, name: &str, width: u64) -> Op {
        let h = width as f64;
        Op {
            name: name.to_string(),
            // Reads x, writes y (2 bytes each per element); ~5 FLOP per element (mean, variance,
            // scale, shift).
            kind: OpKind::Elementwise {
                bytes_per_token: 4.0 * h,
                eager_bytes_per_token: self.eager_norm_bytes_per_element() * h,
                flops_per_token: 5.0 * h,
                sharded: false,
            },
            params: self.norm_params_of(width),
            params_sharded: false,
            tied: false,
            saved_bytes_per_token: 2.0 * h,
            saved_sharded: false,
        }
    }

    /// QK-norm over the queries and keys of one token (`width` = (heads + kv_heads)·head_dim),
    /// split over TP ranks with the heads.
    fn qk_norm_op(&self, q: QkNorm, width: u64) -> Op {
        let w = width as f64;
        let weights = if q.per_head {
            width
        } else {
            self.head_dim.saturating_mul(2)
        };
        Op {
            name: "qk_norm".to_string(),
            kind: OpKind::Elementwise {
                bytes_per_token: 4.0 * w,
                eager_bytes_per_token: self.eager_norm_bytes_per_element() * w,
                flops_per_token: 5.0 * w,
                sharded: true,
            },
            params: if q.bias {
                weights.saturating_mul(2)
            } else {
                weights
            },
            params_sharded: q.per_head,
            tied: false,
            saved_bytes_per_token: 2.0 * w,
            saved_sharded: true,
        }
    }

    /// Rotary position embedding of `width` query and key elements per token, split over TP
    /// ranks with the heads. Fused (Transformer Engine's and Megatron's `apply_rope_fusion`,
    /// or the code under `torch.compile`): one kernel reads and writes each element, 2 B each,
    /// ~3 FLOP (two products and a sum). Eager, torchtitan's `apply_rotary_emb`
    /// (torchtitan/models/llama/model.py at 9dec370, the commit of its December 2024
    /// benchmarks): `x.float()` (reads 2 B, writes 4), the complex product with the
    /// frequencies (reads 4, writes 4; the frequencies broadcast, one row per position) and
    /// `type_as` (reads 4, writes 2): 20 B. Backward needs only the frequencies (the op is
    /// linear in its input): nothing kept.
    fn rope_op(&self, width: u64) -> Op {
        let w = width as f64;
        Op {
            name: "rope".to_string(),
            kind: OpKind::Elementwise {
                bytes_per_token: 4.0 * w,
                eager_bytes_per_token: 20.0 * w,
                flops_per_token: 3.0 * w,
                sharded: true,
            },
            params: 0,
            params_sharded: false,
            tied: false,
            saved_bytes_per_token: 0.0,
            saved_sharded: true,
        }
    }

    /// HBM bytes per element of a norm run eagerly. RMSNorm as torchtitan writes it
    /// (torchtitan/models/norms.py at 9dec370; transformers' `LlamaRMSNorm` runs the same
    /// operations): `x.float()` (reads 2 B, writes 4), `pow(2)` (4 + 4), `mean(-1)` (reads 4),
    /// the product with the reciprocal root (4 + 4), `type_as` (4 + 2) and the weight's
    /// product (2 + 2): 36 B against the fused kernel's 4. `nn.LayerNorm` is one kernel
    /// eagerly too: 4 B, as is a fused kernel (`fused_norm`).
    fn eager_norm_bytes_per_element(&self) -> f64 {
        if self.fused_norm {
            return 4.0;
        }
        match self.norm {
            NormKind::RmsNorm => 36.0,
            NormKind::LayerNorm => 4.0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        name: &str,
        k: u64,
        n: u64,
        split: TpSplit,
        bias: bool,
        count: u64,
        token_fraction: f64,
        saved_per_token: f64,
    ) -> Op {
        // A row-parallel GEMM's bias is added after the all-reduce, on every rank: it is a
        // separate, replicated op (`row_bias`), not part of the split weight.
        let bias = bias && split != TpSplit::Row;
        // Saturating: a second line of defence behind the readers' shape limits (`LIMITS`).
        let params =
            count.saturating_mul(k.saturating_mul(n).saturating_add(if bias { n } else { 0 }));
        Op {
            name: name.to_string(),
            kind: OpKind::Gemm {
                k,
                n,
                split,
                count,
                token_fraction,
            },
            params,
            params_sharded: split != TpSplit::Replicated,
            tied: false,
            // The GEMM keeps its input for the weight gradient.
            saved_bytes_per_token: saved_per_token,
            // Row-parallel GEMMs take an already split input; column-parallel ones the full one.
            saved_sharded: split == TpSplit::Row,
        }
    }

    /// The bias of a row-parallel GEMM, replicated over the TP ranks (Megatron adds it after
    /// the all-reduce): reads and writes the output once.
    fn row_bias(&self, name: &str, n: u64, count: u64, token_fraction: f64) -> Op {
        let copies = token_fraction * count as f64;
        Op {
            name: name.to_string(),
            kind: OpKind::Elementwise {
                bytes_per_token: 4.0 * n as f64 * copies,
                eager_bytes_per_token: 4.0 * n as f64 * copies,
                flops_per_token: n as f64 * copies,
                sharded: false,
            },
            params: count.saturating_mul(n),
            params_sharded: false,
            tied: false,
            saved_bytes_per_token: 0.0,
            saved_sharded: false,
        }
    }

    /// Residual add (+ dropout when present): reads two h-vectors and writes one.
    fn residual_op(&self, name: &str) -> Op {
        let h = self.hidden as f64;
        Op {
            name: name.to_string(),
            kind: OpKind::Elementwise {
                bytes_per_token: 6.0 * h,
                eager_bytes_per_token: 6.0 * h,
                flops_per_token: h,
                sharded: false,
            },
            params: 0,
            params_sharded: false,
            tied: false,
            // A one-byte dropout mask per element.
            saved_bytes_per_token: if self.dropout { h } else { 0.0 },
            saved_sharded: false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mlp_ops(
        &self,
        ops: &mut Vec<Op>,
        prefix: &str,
        ffn: u64,
        count: u64,
        token_fraction: f64,
        bias: bool,
    ) {
        let h = self.hidden;
        let f = ffn as f64;
        // Tokens entering each expert set (top_k for MoE, 1 for dense).
        let copies = token_fraction * count as f64;
        let up_width = match self.mlp {
            MlpKind::Gelu => ffn,
            MlpKind::SwiGlu => ffn.saturating_mul(2),
        };
        // Without a shared norm each branch keeps its own copy of its GEMM input.
        let input_saved = if self.parallel_attn && self.shared_norm {
            0.0
        } else {
            2.0 * h as f64 * copies
        };
        ops.push(self.gemm(
            &format!("{prefix}fc1"),
            h,
            up_width,
            TpSplit::Column,
            bias,
            count,
            token_fraction,
            input_saved,
        ));
        let (act_bytes, eager_bytes, act_saved, act_flops) = match self.mlp {
            // GeLU reads 2f and writes 2f bytes and keeps its input (2f); ~8 FLOP per element
            // (tanh approximation). Eager `F.gelu` is the same one kernel.
            MlpKind::Gelu => (4.0 * f, 4.0 * f, 2.0 * f, 8.0 * f),
            // SwiGLU reads gate and up (4f), writes 2f, keeps both inputs. Eager,
            // `F.silu(w1(x)) * w3(x)` (torchtitan's FeedForward, transformers' LlamaMLP) is two
            // kernels: the SiLU reads and writes 2f, the product reads 4f and writes 2f.
            MlpKind::SwiGlu => (6.0 * f, 10.0 * f, 4.0 * f, 6.0 * f),
        };
        ops.push(Op {
            name: format!("{prefix}act"),
            kind: OpKind::Elementwise {
                bytes_per_token: act_bytes * copies,
                eager_bytes_per_token: eager_bytes * copies,
                flops_per_token: act_flops * copies,
                sharded: true,
            },
            params: 0,
            params_sharded: false,
            tied: false,
            saved_bytes_per_token: act_saved * copies,
            saved_sharded: true,
        });
        ops.push(self.gemm(
            &format!("{prefix}fc2"),
            ffn,
            h,
            TpSplit::Row,
            bias,
            count,
            token_fraction,
            2.0 * f * copies,
        ));
        if bias {
            ops.push(self.row_bias(&format!("{prefix}fc2_bias"), h, count, token_fraction));
        }
    }

    /// Block `i` keeps a dense MLP in a MoE model (`quirks.dense_layers`).
    pub fn is_dense_block(&self, i: u64) -> bool {
        (self.quirks.dense_layers.get(i as usize)).is_some_and(|&d| d)
    }

    /// The attention window of block `i`, if it slides.
    pub fn window_of(&self, i: u64) -> Option<u64> {
        let w = self.quirks.window?;
        let local = &self.quirks.local_layers;
        (local.is_empty() || local.get(i as usize).copied().unwrap_or(false)).then_some(w)
    }

    /// The attention projections and core: QKV (or MLA's low-rank projections), QK-norm,
    /// the core, the output projection. Returns the ops.
    fn attention_ops(&self, i: u64, ops: &mut Vec<Op>) {
        let h = self.hidden;
        let (a, g, d) = (self.heads, self.kv_heads, self.head_dim);
        // (query/key width per head, value width per head, KV heads of the core)
        let (dq, dv, kv) = match self.quirks.mla {
            None => {
                let qkv_width = a.saturating_add(g.saturating_mul(2)).saturating_mul(d);
                ops.push(self.gemm(
                    "qkv",
                    h,
                    qkv_width,
                    TpSplit::Column,
                    self.attn_bias,
                    1,
                    1.0,
                    2.0 * h as f64,
                ));
                (d, d, g)
            }
            Some(m) => {
                let dq = m.qk_nope_head_dim.saturating_add(m.qk_rope_head_dim);
                let saved_h = 2.0 * h as f64;
                match m.q_lora_rank {
                    None => ops.push(self.gemm(
                        "q",
                        h,
                        a.saturating_mul(dq),
                        TpSplit::Column,
                        self.attn_bias,
                        1,
                        1.0,
                        saved_h,
                    )),
                    Some(r) => {
                        // The down-projections are replicated over TP ranks (Megatron's MLA).
                        ops.push(self.gemm(
                            "q_down",
                            h,
                            r,
                            TpSplit::Replicated,
                            self.attn_bias,
                            1,
                            1.0,
                            saved_h,
                        ));
                        ops.push(self.norm_op_of("q_norm", r));
                        ops.push(self.gemm(
                            "q_up",
                            r,
                            a.saturating_mul(dq),
                            TpSplit::Column,
                            false,
                            1,
                            1.0,
                            2.0 * r as f64,
                        ));
                    }
                }
                let r = m.kv_lora_rank;
                ops.push(self.gemm(
                    "kv_down",
                    h,
                    r.saturating_add(m.qk_rope_head_dim),
                    TpSplit::Replicated,
                    self.attn_bias,
                    1,
                    1.0,
                    0.0,
                ));
                ops.push(self.norm_op_of("kv_norm", r));
                ops.push(self.gemm(
                    "kv_up",
                    r,
                    a.saturating_mul(m.qk_nope_head_dim.saturating_add(m.v_head_dim)),
                    TpSplit::Column,
                    false,
                    1,
                    1.0,
                    2.0 * r as f64,
                ));
                (dq, m.v_head_dim, a)
            }
        };
        if let Some(q) = self.quirks.qk_norm {
            ops.push(self.qk_norm_op(q, a.saturating_add(kv).saturating_mul(dq)));
        }
        if self.position == PositionKind::Rotary {
            // The rotary part of every query and key: the whole head (partial rotary, as
            // GPT-NeoX's `rotary_pct`, is taken whole), or MLA's rope part of each query and
            // the one key part the heads share.
            let rotated = match self.quirks.mla {
                None => a.saturating_add(kv).saturating_mul(dq),
                Some(m) => a.saturating_add(1).saturating_mul(m.qk_rope_head_dim),
            };
            ops.push(self.rope_op(rotated));
        }
        // Q, K and V as the core keeps them (2 bytes per element).
        let core_saved = 2.0 * ((a + kv) as f64 * dq as f64 + kv as f64 * dv as f64);
        ops.push(Op {
            name: "attention".to_string(),
            kind: OpKind::Attention {
                heads: a,
                kv_heads: kv,
                // The two products have the query/key and the value width: their mean gives
                // the FLOPs of both.
                head_dim: (dq + dv) / 2,
                causal: self.causal,
                implementation: self.attn_impl,
                dropout: self.dropout,
                window: self.window_of(i),
            },
            params: if self.quirks.attn_sinks { a } else { 0 },
            params_sharded: self.quirks.attn_sinks,
            tied: false,
            saved_bytes_per_token: core_saved,
            saved_sharded: true,
        });
        let attn_width = a.saturating_mul(dv);
        let proj_bias = self.quirks.proj_bias.unwrap_or(self.attn_bias);
        ops.push(self.gemm(
            "proj",
            attn_width,
            h,
            TpSplit::Row,
            proj_bias,
            1,
            1.0,
            2.0 * attn_width as f64,
        ));
        if proj_bias {
            ops.push(self.row_bias("proj_bias", h, 1, 1.0));
        }
    }

    fn block(&self, i: u64) -> Layer {
        let h = self.hidden;
        let q = &self.quirks;
        let mut ops = Vec::new();
        if q.pre_norms {
            ops.push(self.norm_op("ln1"));
        }
        self.attention_ops(i, &mut ops);
        if q.post_norms {
            ops.push(self.norm_op("post_attn_norm"));
        }
        if !self.parallel_attn {
            ops.push(self.residual_op("attn_residual"));
        }
        if q.pre_norms && !(self.parallel_attn && self.shared_norm) {
            ops.push(self.norm_op("ln2"));
        }
        match self.moe.filter(|_| !self.is_dense_block(i)) {
            None => self.mlp_ops(&mut ops, "", self.ffn, 1, 1.0, self.mlp_bias),
            Some(moe) => {
                ops.push(self.gemm(
                    "router",
                    h,
                    moe.experts,
                    TpSplit::Replicated,
                    q.router_bias,
                    1,
                    1.0,
                    0.0,
                ));
                let frac = moe.top_k as f64 / moe.experts as f64;
                self.mlp_ops(
                    &mut ops,
                    "expert_",
                    moe.expert_ffn,
                    moe.experts,
                    frac,
                    q.expert_bias,
                );
                if let Some(shared) = moe.shared_ffn {
                    self.mlp_ops(&mut ops, "shared_", shared, 1, 1.0, self.mlp_bias);
                    if q.shared_expert_gate {
                        ops.push(self.gemm(
                            "shared_gate",
                            h,
                            1,
                            TpSplit::Replicated,
                            false,
                            1,
                            1.0,
                            0.0,
                        ));
                    }
                }
            }
        }
        if q.post_norms {
            ops.push(self.norm_op("post_mlp_norm"));
        }
        ops.push(self.residual_op("mlp_residual"));
        Layer {
            name: format!("block{i}"),
            kind: LayerKind::Transformer,
            ops,
            output_bytes_per_token: 2.0 * h as f64,
            // Megatron: g after the output projection and after fc2 in forward; f before QKV and
            // before fc1 in backward (Shoeybi et al. 2019, Fig. 4). A parallel block reduces once.
            tp_allreduces_fwd: if self.parallel_attn { 1 } else { 2 },
            tp_allreduces_bwd: if self.parallel_attn { 1 } else { 2 },
            tp_comm_bytes_per_token: 2.0 * h as f64,
        }
    }

    /// The token-embedding width (the model's unless `quirks.embed_dim` says otherwise).
    fn embed_width(&self) -> u64 {
        self.quirks.embed_dim.unwrap_or(self.hidden)
    }

    fn embedding(&self) -> Layer {
        let h = self.hidden;
        let e = self.embed_width();
        let mut ops = vec![Op {
            name: "wte".to_string(),
            kind: OpKind::Lookup { width: e },
            params: self.vocab.saturating_mul(e),
            params_sharded: true,
            tied: false,
            saved_bytes_per_token: 0.0,
            saved_sharded: false,
        }];
        if e != h {
            ops.push(self.gemm(
                "project_in",
                e,
                h,
                TpSplit::Replicated,
                false,
                1,
                1.0,
                2.0 * e as f64,
            ));
        }
        if self.position == PositionKind::Learned {
            ops.push(Op {
                name: "wpe".to_string(),
                kind: OpKind::Lookup { width: h },
                params: self
                    .max_seq_len
                    .saturating_add(self.quirks.position_offset)
                    .saturating_mul(h),
                params_sharded: false,
                tied: false,
                saved_bytes_per_token: 0.0,
                saved_sharded: false,
            });
        }
        if self.quirks.embed_norm {
            ops.push(self.norm_op("embed_norm"));
        }
        Layer {
            name: "embedding".to_string(),
            kind: LayerKind::Embedding,
            ops,
            output_bytes_per_token: 2.0 * h as f64,
            // Vocab-parallel embedding: one all-reduce of the looked-up rows in forward.
            tp_allreduces_fwd: 1,
            tp_allreduces_bwd: 0,
            tp_comm_bytes_per_token: 2.0 * h as f64,
        }
    }

    fn head(&self) -> Layer {
        let h = self.hidden;
        let e = self.embed_width();
        let v = self.vocab as f64;
        let mut ops = Vec::new();
        if self.quirks.final_norm {
            ops.push(self.norm_op("ln_f"));
        }
        if e != h {
            ops.push(self.gemm(
                "project_out",
                h,
                e,
                TpSplit::Replicated,
                false,
                1,
                1.0,
                2.0 * h as f64,
            ));
        }
        let mut logits = self.gemm(
            "logits",
            e,
            self.vocab,
            TpSplit::Column,
            false,
            1,
            1.0,
            2.0 * e as f64,
        );
        logits.tied = self.tied_embeddings;
        ops.push(logits);
        if self.quirks.lm_head_bias {
            // The head's own bias, split with the vocabulary (not part of a tied table).
            ops.push(Op {
                name: "logits_bias".to_string(),
                kind: OpKind::Elementwise {
                    bytes_per_token: 4.0 * v,
                    eager_bytes_per_token: 4.0 * v,
                    flops_per_token: v,
                    sharded: true,
                },
                params: self.vocab,
                params_sharded: true,
                tied: false,
                saved_bytes_per_token: 0.0,
                saved_sharded: false,
            });
        }
        ops.push(Op {
            name: "loss".to_string(),
            kind: OpKind::Loss {
                vocab: self.vocab,
                fused: self.fused_loss,
            },
            params: 0,
            params_sharded: false,
            tied: false,
            // Megatron's fp32 softmax kept for the gradient: 4 bytes per vocabulary entry
            // (Korthikanti et al. 2022 §4.1, output layer 4sbv/t); engines with a fused loss
            // keep less (cost::memory).
            saved_bytes_per_token: 4.0 * v,
            saved_sharded: true,
        });
        Layer {
            name: "head".to_string(),
            kind: LayerKind::Head,
            ops,
            output_bytes_per_token: 0.0,
            tp_allreduces_fwd: 0,
            // The input gradient of the column-parallel logits GEMM.
            tp_allreduces_bwd: 1,
            tp_comm_bytes_per_token: 2.0 * h as f64,
        }
    }

    /// Checks the shape against [`LIMITS`] and for the zeros that make no model (no width, no
    /// heads, no vocabulary): what a shape from user input must pass before [`build`]
    /// (`TransformerConfig::build`), which allocates one layer per block and multiplies the
    /// fields together. The error names the field (`max_seq_len`, `heads`, ...).
    ///
    /// [`build`]: TransformerConfig::build
    pub fn check_limits(&self) -> Result<(), InputError> {
        let moe = self.moe.as_ref();
        let fields: [(&str, u64, u64, u64); 9] = [
            ("hidden", self.hidden, 1, LIMITS.hidden),
            ("layers", self.layers, 0, LIMITS.layers),
            ("heads", self.heads, 1, LIMITS.heads),
            ("kv_heads", self.kv_heads, 1, LIMITS.heads),
            ("head_dim", self.head_dim, 1, LIMITS.hidden),
            // 0 only where every block is MoE (Qwen2-MoE without dense layers).
            (
                "ffn",
                self.ffn,
                u64::from(moe.is_none() || self.quirks.dense_layers.iter().any(|&d| d)),
                LIMITS.ffn,
            ),
            ("vocab", self.vocab, 1, LIMITS.vocab),
            ("max_seq_len", self.max_seq_len, 1, LIMITS.seq),
            (
                "moe.experts",
                moe.map_or(1, |m| m.experts),
                1,
                LIMITS.experts,
            ),
        ];
        for (field, v, min, max) in fields {
            if v < min || v > max {
                return Err(InputError::new(format!(
                    "{field} = {v} is outside the {min}..={max} hetplan accepts"
                ))
                .field(field));
            }
        }
        if let Some(m) = moe {
            if m.top_k < 1 || m.top_k > m.experts {
                return Err(InputError::new(format!(
                    "{} experts per token, but {} experts",
                    m.top_k, m.experts
                ))
                .field("moe.top_k"));
            }
            if m.expert_ffn < 1 || m.expert_ffn > LIMITS.ffn {
                return Err(InputError::new(format!(
                    "expert FFN width {} is outside the 1..={} hetplan accepts",
                    m.expert_ffn, LIMITS.ffn
                ))
                .field("moe.expert_ffn"));
            }
            if m.shared_ffn.is_some_and(|f| !(1..=LIMITS.ffn).contains(&f)) {
                return Err(InputError::new(format!(
                    "shared-expert FFN width is outside the 1..={} hetplan accepts",
                    LIMITS.ffn
                ))
                .field("moe.shared_ffn"));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(InputError::new(format!(
                "{} key/value heads do not divide the {} attention heads",
                self.kv_heads, self.heads
            ))
            .field("kv_heads"));
        }
        Ok(())
    }

    /// Expands the shape into layers: embedding, `layers` blocks, head. The arithmetic
    /// saturates rather than overflows, but a shape from user input should pass
    /// [`check_limits`](TransformerConfig::check_limits) first: `layers` blocks are allocated.
    pub fn build(&self) -> Model {
        let mut layers = vec![self.embedding()];
        layers.extend((0..self.layers).map(|i| self.block(i)));
        layers.push(self.head());
        Model {
            name: self.name.clone(),
            layers,
            transformer: Some(self.clone()),
            default_seq_len: self.max_seq_len.min(2048),
            per_sample: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt3_175b_parameter_count() {
        // Brown et al. 2020 Table 2.1: 96 layers, d_model 12288, 96 heads; "175B" ≈ 174.6e9.
        let m = TransformerConfig::gpt("gpt3-175b", 96, 12288, 96, 2048).build();
        let p = m.params() as f64;
        assert!((p - 174.6e9).abs() / 174.6e9 < 0.003, "{p}");
    }

    #[test]
    fn llama2_7b_parameter_count() {
        let m =
            TransformerConfig::llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096).build();
        let p = m.params() as f64;
        assert!((p - 6.738e9).abs() / 6.738e9 < 0.002, "{p}");
    }

    #[test]
    fn huge_shapes_saturate_instead_of_overflowing() {
        // Regression: `count*(k*n+n)`, `vocab*h` and `4*hidden` overflowed u64 (and a zero head
        // count divided by zero) for shapes a config file can state.
        let mut c = TransformerConfig::gpt("big", 1, 1 << 62, 0, 2048);
        assert_eq!(c.head_dim, 0);
        assert_eq!(c.ffn, u64::MAX);
        assert!(c.check_limits().is_err());
        c.heads = 1;
        c.head_dim = 1 << 62;
        c.vocab = 1 << 32;
        let m = c.build();
        assert_eq!(m.params(), u64::MAX);
        assert_eq!(m.active_params(), u64::MAX);
        let e = TransformerConfig::llama("l", 2, 4096, 32, 32, 11008, 32000, 1 << 30)
            .check_limits()
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("max_seq_len"));
        assert!(TransformerConfig::gpt("ok", 96, 12288, 96, 2048)
            .check_limits()
            .is_ok());
    }

    #[test]
    fn korthikanti_activation_total_is_34_sbh_with_dropout() {
        // Per token and layer: 34h bytes with dropout, flash-free attention adds 5as.
        let mut c = TransformerConfig::gpt("t", 1, 1024, 16, 2048);
        c.dropout = true;
        c.attn_impl = AttnImpl::Torch;
        let m = c.build();
        let block = &m.layers[1];
        let seq = 2048;
        let (total, selective): (f64, f64) = block
            .ops
            .iter()
            .map(|o| o.saved_bytes_per_token(seq))
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let h = 1024.0;
        assert_eq!(total, 34.0 * h + 5.0 * 16.0 * seq as f64);
        assert_eq!(selective, 5.0 * 16.0 * seq as f64);
        // Replicated across TP ranks: 10h (norm inputs 4h, two column-GEMM inputs 4h, masks 2h).
        let replicated: f64 = block
            .ops
            .iter()
            .filter(|o| !o.saved_sharded)
            .map(|o| o.saved_bytes_per_token)
            .sum();
        assert_eq!(replicated, 10.0 * h);
    }
}
