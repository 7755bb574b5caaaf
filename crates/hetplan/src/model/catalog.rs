//! Built-in models: the published shapes of the models the seed papers and the calibration data
//! use, each with its source.
//!
//! Names are compared after [`names::normalize`] with hyphens ignored, so `GPT-3 175B`,
//! `gpt3_175b` and `gpt3-175b` are the same model; a miss suggests the nearest name.
//!
//! Besides the plain transformers this holds three models built from parts:
//! * the Metis MoE models (Alpa's GShard MoE benchmark), whose blocks alternate between an MoE
//!   block and a dense one;
//! * AMP's heterogeneous model, 12 blocks of width 1024 followed by 12 of width 16;
//! * the Metis Wide-ResNets, per-sample layer lists derived from the ResNet bottleneck formulas.

use super::layerlist::opaque_layer;
use super::{
    AttnImpl, Layer, LayerKind, MlpKind, Model, MoeConfig, NormKind, Op, OpKind, PositionKind,
    TpSplit, TransformerConfig,
};
use crate::error::InputError;
use crate::names;
use crate::names::did_you_mean;

/// One built-in model, for listings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: &'static str,
    pub description: &'static str,
    pub source: &'static str,
}

struct Def {
    name: &'static str,
    aliases: &'static [&'static str],
    description: &'static str,
    source: &'static str,
    build: fn() -> Model,
}

/// The built-in models, in listing order.
pub fn catalog_names() -> Vec<CatalogEntry> {
    defs()
        .into_iter()
        .map(|d| CatalogEntry {
            name: d.name,
            description: d.description,
            source: d.source,
        })
        .collect()
}

/// Names compare equal when they normalise equal with their hyphens removed.
fn squash(name: &str) -> String {
    names::normalize(name).replace('-', "")
}

/// A built-in model by name or alias.
pub fn catalog_model(name: &str) -> Result<Model, InputError> {
    let want = squash(name);
    let all = defs();
    if let Some(d) = all
        .iter()
        .find(|d| squash(d.name) == want || d.aliases.iter().any(|a| squash(a) == want))
    {
        return Ok((d.build)());
    }
    let candidates: Vec<&str> = all
        .iter()
        .flat_map(|d| std::iter::once(d.name).chain(d.aliases.iter().copied()))
        .collect();
    // Suggest the canonical name of whichever name or alias is nearest.
    let hint = did_you_mean(
        names::nearest(name, candidates.iter().copied()).map(|near| {
            all.iter()
                .find(|d| d.name == near || d.aliases.contains(&near.as_str()))
                .map_or(near, |d| d.name.to_string())
        }),
    );
    Err(InputError::new(format!(
        "unknown model `{}`; `hetplan models` lists the built-in ones, or give a HuggingFace \
         config.json or a layer-list file",
        name.trim()
    ))
    .field("model")
    .hint(hint))
}

// ---------------------------------------------------------------------------------------------
// Shapes.

const GPT3_SRC: &str = "Brown et al. 2020, \"Language Models are Few-Shot Learners\", Table 2.1";
const LLAMA2_SRC: &str =
    "Touvron et al. 2023, \"Llama 2\", Table 1; meta-llama/Llama-2-*-hf config.json";
const LLAMA3_SRC: &str =
    "Llama Team 2024, \"The Llama 3 Herd of Models\", Table 3; meta-llama config.json";
const MPT_SRC: &str =
    "mosaicml/llm-foundry scripts/train/benchmarking (shapes and nparams of calibration/a100_80gb_fsdp_mpt.csv)";
const METIS_SRC: &str = "Metis (Um et al., USENIX ATC '24) Table 2; shapes from the Alpa benchmark suites it runs on (alpa-projects/alpa benchmark/alpa/suite_*.py)";

fn gpt3(name: &str, layers: u64, hidden: u64, heads: u64) -> Model {
    TransformerConfig::gpt(name, layers, hidden, heads, 2048).build()
}

fn llama2(name: &str, layers: u64, hidden: u64, heads: u64, kv: u64, ffn: u64) -> Model {
    TransformerConfig::llama(name, layers, hidden, heads, kv, ffn, 32000, 4096).build()
}

fn llama3(name: &str, layers: u64, hidden: u64, heads: u64, ffn: u64) -> Model {
    TransformerConfig::llama(name, layers, hidden, heads, 8, ffn, 128256, 8192).build()
}

fn mixtral_8x7b() -> Model {
    // mistralai/Mixtral-8x7B-v0.1 config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
    // 8 experts of FFN 14336, 2 per token, vocab 32000, max_position_embeddings 32768, untied.
    let mut c = TransformerConfig::llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768);
    c.moe = Some(MoeConfig {
        experts: 8,
        top_k: 2,
        expert_ffn: 14336,
        shared_ffn: None,
    });
    c.build()
}

/// Falcon: LayerNorm with bias, rotary, GeLU 4h MLP, no linear biases, parallel attention.
fn falcon(
    name: &str,
    layers: u64,
    hidden: u64,
    heads: u64,
    kv: u64,
    shared_norm: bool,
) -> TransformerConfig {
    TransformerConfig {
        name: name.to_string(),
        hidden,
        layers,
        heads,
        kv_heads: kv,
        head_dim: hidden / heads,
        ffn: 4 * hidden,
        mlp: MlpKind::Gelu,
        norm: NormKind::LayerNorm,
        position: PositionKind::Rotary,
        vocab: 65024,
        max_seq_len: 2048,
        attn_bias: false,
        mlp_bias: false,
        norm_bias: true,
        tied_embeddings: true,
        parallel_attn: true,
        shared_norm,
        causal: true,
        attn_impl: AttnImpl::Flash,
        fused_loss: false,
        fused_norm: false,
        dropout: false,
        moe: None,
        quirks: Default::default(),
    }
}

fn falcon_7b() -> Model {
    // tiiuae/falcon-7b config.json: 32 layers, hidden 4544, 71 heads of 64, multi_query (one KV
    // head), parallel_attn with a single input_layernorm, bias false, vocab 65024; lm_head tied
    // to the input embedding (6.92e9 parameters, as published).
    falcon("falcon-7b", 32, 4544, 71, 1, true).build()
}

fn falcon_40b() -> Model {
    // tiiuae/falcon-40b config.json: 60 layers, hidden 8192, 128 heads of 64, 8 KV heads,
    // new_decoder_architecture (parallel attention with separate ln_attn and ln_mlp), vocab 65024.
    // The published 41.8e9 parameters count a separate lm_head (tied: 41.3e9).
    let mut c = falcon("falcon-40b", 60, 8192, 128, 8, false);
    c.tied_embeddings = false;
    c.build()
}

fn bert_large() -> Model {
    // Devlin et al. 2019 §3 (BERT-large: L=24, H=1024, A=16); vocab 30522 (uncased WordPiece),
    // 512 learned positions, bidirectional, dropout 0.1, MLM decoder tied to the embedding.
    // Trained with unfused attention (its s×s scores stored, Korthikanti et al. 2022 §4.1).
    // Not modelled: the 2×1024 token-type table, the pooler and the MLM transform (≈2.1M, 0.6%).
    let mut c = TransformerConfig::gpt("bert-large", 24, 1024, 16, 512);
    c.vocab = 30522;
    c.causal = false;
    c.dropout = true;
    c.attn_impl = AttnImpl::Torch;
    c.build()
}

/// The MPT family as benchmarked by llm-foundry (calibration CSV header): d_model, n_heads,
/// n_layers; expansion_ratio 4; vocab 50368; learned positions of max_seq_len 2048; tied;
/// LayerNorm; triton flash attention.
///
/// Biases: the HuggingFace MPT configs set `no_bias: true`, but the CSV's `nparams` column equals,
/// to the parameter, the count *with* biases on every linear layer and norm
/// (12h² + 13h per block, e.g. mpt-70b 64,862,437,376 at seq 2048), so the benchmarked models
/// had them; we follow the measured data.
fn mpt(name: &str, d_model: u64, n_heads: u64, n_layers: u64) -> Model {
    let mut c = TransformerConfig::gpt(name, n_layers, d_model, n_heads, 2048);
    c.vocab = 50368;
    c.attn_impl = AttnImpl::Triton;
    // llm-foundry's MPT benchmark configs: `loss_fn: fused_crossentropy`.
    c.fused_loss = true;
    c.build()
}

/// Removes `per_block` parameters from the op `op` of every transformer block (a bias the
/// builder's all-or-nothing `attn_bias` adds but the real model lacks).
pub(crate) fn drop_block_params(model: &mut Model, op: &str, per_block: u64) {
    for l in model
        .layers
        .iter_mut()
        .filter(|l| l.kind == LayerKind::Transformer)
    {
        for o in l.ops.iter_mut().filter(|o| o.name == op) {
            o.params -= per_block.min(o.params);
        }
    }
}

fn gpt_neo_2_7b() -> Model {
    // EleutherAI/gpt-neo-2.7B config.json: 32 layers, hidden 2560, 20 heads, vocab 50257,
    // max_position_embeddings 2048, learned positions, tied. Its q/k/v projections have no bias
    // (out_proj has one): 2,651,307,520 parameters. Not modelled: every other layer attends
    // within a local window of 256 tokens (we cost full causal attention).
    let mut m = TransformerConfig::gpt("gpt-neo-2.7b", 32, 2560, 20, 2048).build();
    drop_block_params(&mut m, "qkv", 3 * 2560);
    m
}

fn replicated_gemm(name: &str, k: u64, n: u64, saved: f64) -> Op {
    Op {
        name: name.to_string(),
        kind: OpKind::Gemm {
            k,
            n,
            split: TpSplit::Replicated,
            count: 1,
            token_fraction: 1.0,
        },
        params: k * n,
        params_sharded: false,
        tied: false,
        saved_bytes_per_token: saved,
        saved_sharded: false,
    }
}

fn opt_350m() -> Model {
    // facebook/opt-350m config.json (the model of Sailor's evaluation data): 24 layers,
    // hidden 1024, 16 heads, ffn 4096, vocab 50272, max_position_embeddings 2048 (learned; OPT
    // offsets them by 2, ignored), tied, biases. Unlike the other OPTs its embeddings are 512
    // wide (word_embed_proj_dim): tokens are looked up at 512, projected in to 1024 before the
    // first block and out to 512 before the tied logits (project_in/project_out, no bias), which
    // we model (331M parameters, as published; a 1024-wide table would give 356M). Not modelled:
    // OPT-350m is post-LN (no final norm, 2h parameters) and uses ReLU (costed as GeLU).
    let (h, e, v) = (1024u64, 512u64, 50272u64);
    let mut c = TransformerConfig::gpt("opt-350m", 24, h, 16, 2048);
    c.vocab = v;
    let mut m = c.build();
    let emb = &mut m.layers[0];
    emb.ops[0].kind = OpKind::Lookup { width: e };
    emb.ops[0].params = v * e;
    emb.ops
        .push(replicated_gemm("project_in", e, h, 2.0 * e as f64));
    // The vocab-parallel lookup and the logits' input gradient are 512 wide.
    emb.tp_comm_bytes_per_token = 2.0 * e as f64;
    let head = m.layers.last_mut().expect("a head");
    let at = head
        .ops
        .iter()
        .position(|o| o.name == "logits")
        .expect("a logits GEMM");
    head.ops[at].kind = OpKind::Gemm {
        k: e,
        n: v,
        split: TpSplit::Column,
        count: 1,
        token_fraction: 1.0,
    };
    head.ops[at].params = e * v;
    head.ops[at].saved_bytes_per_token = 2.0 * e as f64;
    head.ops
        .insert(at, replicated_gemm("project_out", h, e, 2.0 * h as f64));
    head.tp_comm_bytes_per_token = 2.0 * e as f64;
    m
}

// --- Models assembled from parts -------------------------------------------------------------

/// The transformer blocks of a shape, without its embedding and head.
pub(crate) fn blocks_of(cfg: &TransformerConfig) -> Vec<Layer> {
    let mut layers = cfg.build().layers;
    layers.pop();
    layers.remove(0);
    layers
}

/// A model from the embedding of `first`, the given blocks (each with the width of its input
/// and output) and the head of `last`. Where the width changes between two consecutive layers,
/// the earlier one ends with a replicated projection GEMM (with bias) to the next width, so that
/// its output — what crosses a stage boundary placed there — has the next layer's width.
/// Blocks are renamed `block0`, `block1`, ... The result has no single `transformer` shape.
pub(crate) fn assemble(
    name: &str,
    first: &TransformerConfig,
    blocks: Vec<(u64, Layer)>,
    last: &TransformerConfig,
) -> Model {
    let mut first_layers = first.build().layers;
    let embedding = first_layers.remove(0);
    let mut head = last.build().layers.pop().expect("a head");
    if first.hidden != last.hidden {
        // Logits of another width than the embedding cannot share its table.
        for o in head.ops.iter_mut() {
            o.tied = false;
        }
    }
    let mut seq: Vec<(u64, Layer)> = Vec::with_capacity(blocks.len() + 2);
    seq.push((first.hidden, embedding));
    for (i, (w, mut b)) in blocks.into_iter().enumerate() {
        b.name = format!("block{i}");
        seq.push((w, b));
    }
    seq.push((last.hidden, head));
    for i in 0..seq.len() - 1 {
        let (from, to) = (seq[i].0, seq[i + 1].0);
        if from != to {
            let l = &mut seq[i].1;
            let mut p = replicated_gemm("width_proj", from, to, 2.0 * from as f64);
            p.params += to;
            l.ops.push(p);
            l.output_bytes_per_token = 2.0 * to as f64;
        }
    }
    Model {
        name: name.to_string(),
        layers: seq.into_iter().map(|(_, l)| l).collect(),
        transformer: None,
        default_seq_len: first.max_seq_len.min(2048),
        per_sample: false,
    }
}

/// Metis's GPT-3 models are Alpa's GPT benchmark (`gpt_specs`): seq 1024, vocab 51200, GeLU 4h,
/// biases, learned positions, fp16. Alpa's "GPT" is its BERT encoder stack with an all-ones
/// attention mask, i.e. the full (non-causal) score matrix computed by XLA without a fused
/// kernel; dropout is off (`deterministic=True`). The embedding is counted once, as Alpa's
/// `compute_gpt_parameter_count` and Table 2's sizes do (the benchmark harness unties the
/// decoder, adding 51200·h).
fn metis_gpt(name: &str, layers: u64, hidden: u64, heads: u64) -> Model {
    let mut c = TransformerConfig::gpt(name, layers, hidden, heads, 1024);
    c.vocab = 51200;
    c.causal = false;
    c.attn_impl = AttnImpl::Torch;
    c.build()
}

/// Metis's MoE models are Alpa's GShard-style MoE benchmark (`moe_specs`, `alpa/model/moe.py`):
/// seq 1024, vocab 32000, 16 heads, 16 layers alternating an MoE block (even index: `E` experts
/// of FFN 8h without biases, top-2 gating, a gate of h×E) and a dense BERT block (FFN 8h with
/// biases), post-LN, learned positions, bidirectional, fp16. Expert ReLU is costed as GeLU (same
/// GEMMs). The embedding counted once, as Alpa's `compute_moe_parameter_count` does.
fn metis_moe(name: &str, hidden: u64, experts: u64) -> Model {
    let mut dense = TransformerConfig::gpt(name, 16, hidden, 16, 1024);
    dense.vocab = 32000;
    dense.ffn = 8 * hidden;
    dense.causal = false;
    dense.attn_impl = AttnImpl::Torch;
    let mut moe = dense.clone();
    moe.mlp_bias = false;
    moe.moe = Some(MoeConfig {
        experts,
        top_k: 2,
        expert_ffn: 8 * hidden,
        shared_ffn: None,
    });
    let (d, m) = (blocks_of(&dense), blocks_of(&moe));
    let blocks = (0..16)
        .map(|i| {
            let b = if i % 2 == 0 { &m[i] } else { &d[i] };
            (hidden, b.clone())
        })
        .collect();
    assemble(name, &dense, blocks, &dense)
}

/// AMP's heterogeneous model (Li et al. 2022 §4.3; DachengLi1/AMP `het_model.py`): a modified
/// TransGAN generator with 12 transformer layers of width 1024 followed by 12 of width 16,
/// sequence length 1024 and vocabulary 52256 as in AMP's model_config, run with
/// DeepSpeed/Megatron in fp16. Blocks: GPT-2 style (GeLU 4h, biases, LayerNorm), unfused
/// attention with dropout (Megatron's defaults); 16 heads at width 1024, 4 at width 16
/// (TransGAN's default head count). TransGAN moves from width 1024 to 16 by pixel shuffles that
/// multiply the tokens by 64 — not expressible with one sequence length per model — so here the
/// last wide block ends with a 1024→16 projection, and its output (the bytes crossing a stage
/// boundary there) is 16 wide.
fn amp_hetero() -> Model {
    let mut wide = TransformerConfig::gpt("amp-hetero", 12, 1024, 16, 1024);
    wide.vocab = 52256;
    wide.attn_impl = AttnImpl::Torch;
    wide.dropout = true;
    let mut narrow = wide.clone();
    narrow.hidden = 16;
    narrow.heads = 4;
    narrow.kv_heads = 4;
    narrow.head_dim = 4;
    narrow.ffn = 64;
    let blocks = blocks_of(&wide)
        .into_iter()
        .map(|b| (1024, b))
        .chain(blocks_of(&narrow).into_iter().map(|b| (16, b)))
        .collect();
    assemble("amp-hetero", &wide, blocks, &narrow)
}

/// Wide-ResNet as Metis runs it: Alpa's benchmark (`suite_wresnet.py`, `alpa/model/wide_resnet.py`,
/// flax's ImageNet ResNet): 224×224×3 inputs, ResNet-50 stage sizes [3, 4, 6, 3] of bottleneck
/// blocks, `base` channels, width factor `width`, 1024 classes. Per sample, one layer per
/// residual block (Alpa pipelines these 16 blocks) plus a stem and a head:
///
/// * stem: conv 7×7/2, 3→C, to 112² (+BN+ReLU), max-pool 3×3/2 to 56²;
/// * stage i (F = C·2^i filters, spatial 56/2^i, the first block of stages 1–3 strides on its
///   3×3 conv): conv1 1×1 cin→F at the input resolution, conv2 3×3 F→F·W at the output
///   resolution, conv3 1×1 F·W→4F, each followed by BN (2 parameters per channel), ReLU after
///   the first two and after the residual add; a 1×1 projection cin→4F (+BN) where the shape
///   changes. No conv biases;
/// * head: global mean pool, dense 32C→1024 with bias, softmax cross-entropy.
///
/// FLOPs: 2·H_out·W_out·k²·c_in·c_out per conv; 5 per element for BN, 1 for ReLU and add, 9 per
/// max-pool output. Saved for backward (2 bytes per element, 16-bit activations as everywhere in
/// the IR; Alpa ran these in fp32, twice that — the plan's precision scales it): each layer keeps
/// its input and the outputs of its convs and ReLUs (BN and conv inputs); the projection output
/// when present; the head its input, the pooled vector and fp32 logits. Output bytes: the block
/// output, 2·H²·4F. Tensor parallelism as Megatron splits an MLP: conv1 by output channels,
/// conv2 by input channels (an all-reduce of its H²·F·W output), conv3/projection by output
/// channels and an all-gather of the block output before the next block (costed as an
/// all-reduce of half its size): one all-reduce of 2·H²·(F·W + 2F) bytes per sample forward,
/// one backward.
///
/// Parameter counts: 1B 1.006e9, 2B 1.965e9, 4B 4.001e9, 6.8B 6.728e9 (Table 2).
fn wide_resnet(name: &str, base: u64, width: u64) -> Model {
    const CLASSES: u64 = 1024;
    const E: f64 = 2.0; // bytes per activation element
    const BN: f64 = 5.0;
    let c = base;
    let mut layers = Vec::new();

    // Stem.
    let (h1, h2) = (112u64, 56u64);
    let params = 7 * 7 * 3 * c + 2 * c;
    let conv_out = (h1 * h1 * c) as f64;
    let flops = 2.0 * conv_out * 147.0 + (BN + 1.0) * conv_out + 9.0 * (h2 * h2 * c) as f64;
    let saved = E * (3.0 * 224.0 * 224.0 + 2.0 * conv_out);
    let out = E * (h2 * h2 * c) as f64;
    layers.push(opaque_layer(
        "stem",
        LayerKind::Embedding,
        params,
        flops,
        saved,
        out,
        0.0,
    ));

    // Bottleneck blocks.
    let mut cin = c;
    let mut hin = h2;
    let mut index = 0;
    for (stage, &n) in [3u64, 4, 6, 3].iter().enumerate() {
        let f = c << stage;
        let fw = f * width;
        for j in 0..n {
            let stride = if stage > 0 && j == 0 { 2 } else { 1 };
            let hout = hin / stride;
            let (ai, ao) = ((hin * hin) as f64, (hout * hout) as f64);
            let proj = cin != 4 * f || stride != 1;
            let mut params = cin * f + 9 * f * fw + fw * 4 * f + 2 * (f + fw + 4 * f);
            let (f_, fw_, cin_) = (f as f64, fw as f64, cin as f64);
            let mut flops = 2.0 * (ai * cin_ * f_ + ao * 9.0 * f_ * fw_ + ao * fw_ * 4.0 * f_)
                + (BN + 1.0) * (ai * f_ + ao * fw_)
                + (BN + 2.0) * ao * 4.0 * f_;
            let mut saved = ai * cin_ + 2.0 * ai * f_ + 2.0 * ao * fw_ + ao * 4.0 * f_;
            if proj {
                params += cin * 4 * f + 2 * 4 * f;
                flops += 2.0 * ao * cin_ * 4.0 * f_ + BN * ao * 4.0 * f_;
                saved += ao * 4.0 * f_;
            }
            let out = E * ao * 4.0 * f_;
            let tp = E * ao * (fw_ + 2.0 * f_);
            layers.push(opaque_layer(
                &format!("block{index}"),
                LayerKind::Other,
                params,
                flops,
                E * saved,
                out,
                tp,
            ));
            index += 1;
            cin = 4 * f;
            hin = hout;
        }
    }

    // Head.
    let (a, cf) = ((hin * hin) as f64, cin as f64);
    let params = cin * CLASSES + CLASSES;
    let flops = a * cf + 2.0 * cf * CLASSES as f64 + 5.0 * CLASSES as f64;
    let saved = E * (a * cf + cf) + 4.0 * CLASSES as f64;
    layers.push(opaque_layer(
        "head",
        LayerKind::Head,
        params,
        flops,
        saved,
        0.0,
        0.0,
    ));

    Model {
        name: name.to_string(),
        layers,
        transformer: None,
        default_seq_len: 1,
        per_sample: true,
    }
}

#[rustfmt::skip]
fn defs() -> Vec<Def> {
    vec![
        // GPT-3 (Brown et al. 2020, Table 2.1): n_layers, d_model, n_heads; n_ctx 2048, the
        // GPT-2 BPE vocabulary of 50257, learned positions, tied embeddings, GeLU 4h, biases.
        Def { name: "gpt3-125m", aliases: &["gpt3-small"], description: "GPT-3 Small: 12 layers, d_model 768, 12 heads", source: GPT3_SRC, build: || gpt3("gpt3-125m", 12, 768, 12) },
        Def { name: "gpt3-350m", aliases: &["gpt3-medium"], description: "GPT-3 Medium: 24 layers, d_model 1024, 16 heads", source: GPT3_SRC, build: || gpt3("gpt3-350m", 24, 1024, 16) },
        Def { name: "gpt3-760m", aliases: &["gpt3-large"], description: "GPT-3 Large: 24 layers, d_model 1536, 16 heads", source: GPT3_SRC, build: || gpt3("gpt3-760m", 24, 1536, 16) },
        Def { name: "gpt3-1.3b", aliases: &["gpt3-xl"], description: "GPT-3 XL: 24 layers, d_model 2048, 24 heads", source: GPT3_SRC, build: || gpt3("gpt3-1.3b", 24, 2048, 24) },
        Def { name: "gpt3-2.7b", aliases: &[], description: "GPT-3 2.7B: 32 layers, d_model 2560, 32 heads", source: GPT3_SRC, build: || gpt3("gpt3-2.7b", 32, 2560, 32) },
        Def { name: "gpt3-6.7b", aliases: &[], description: "GPT-3 6.7B: 32 layers, d_model 4096, 32 heads", source: GPT3_SRC, build: || gpt3("gpt3-6.7b", 32, 4096, 32) },
        // Table 2.1 lists d_model 5140 with 40 heads of 128 (5120): kept as published.
        Def { name: "gpt3-13b", aliases: &[], description: "GPT-3 13B: 40 layers, d_model 5140, 40 heads of 128", source: GPT3_SRC, build: || gpt3("gpt3-13b", 40, 5140, 40) },
        Def { name: "gpt3-175b", aliases: &["gpt3"], description: "GPT-3 175B: 96 layers, d_model 12288, 96 heads", source: GPT3_SRC, build: || gpt3("gpt3-175b", 96, 12288, 96) },
        // GPT-2 XL (Radford et al. 2019, Table 2; openai-community/gpt2-xl config.json):
        // 48 layers, n_embd 1600, 25 heads, n_positions 1024, vocab 50257, tied.
        Def { name: "gpt2-xl", aliases: &["gpt2-1.5b"], description: "GPT-2 XL (1.5B): 48 layers, 1600, 25 heads, seq 1024", source: "Radford et al. 2019 Table 2; openai-community/gpt2-xl config.json", build: || TransformerConfig::gpt("gpt2-xl", 48, 1600, 25, 1024).build() },
        Def { name: "gpt-neo-2.7b", aliases: &[], description: "GPT-Neo 2.7B: 32 layers, 2560, 20 heads, seq 2048", source: "EleutherAI/gpt-neo-2.7B config.json", build: gpt_neo_2_7b },
        Def { name: "opt-350m", aliases: &[], description: "OPT-350M: 24 layers, 1024, 16 heads, 512-wide embeddings, seq 2048", source: "Zhang et al. 2022 Table 1; facebook/opt-350m config.json", build: opt_350m },
        Def { name: "bert-large", aliases: &["bert-large-uncased", "bert-340m"], description: "BERT-large: 24 layers, 1024, 16 heads, bidirectional, seq 512, dropout", source: "Devlin et al. 2019 §3; google-bert/bert-large-uncased config.json", build: bert_large },
        // LLaMA-2 (Touvron et al. 2023): RMSNorm, SwiGLU, rotary, untied, vocab 32000, seq 4096.
        Def { name: "llama2-7b", aliases: &["llama-2-7b-hf"], description: "LLaMA-2 7B: 32 layers, 4096, 32 heads, FFN 11008", source: LLAMA2_SRC, build: || llama2("llama2-7b", 32, 4096, 32, 32, 11008) },
        Def { name: "llama2-13b", aliases: &["llama-2-13b-hf"], description: "LLaMA-2 13B: 40 layers, 5120, 40 heads, FFN 13824", source: LLAMA2_SRC, build: || llama2("llama2-13b", 40, 5120, 40, 40, 13824) },
        Def { name: "llama2-70b", aliases: &["llama-2-70b-hf"], description: "LLaMA-2 70B: 80 layers, 8192, 64 heads (8 KV), FFN 28672", source: LLAMA2_SRC, build: || llama2("llama2-70b", 80, 8192, 64, 8, 28672) },
        // Llama 3 (and 3.1 405B): GQA with 8 KV heads, vocab 128256, rotary, seq 8192, untied.
        Def { name: "llama3-8b", aliases: &["llama3.1-8b", "meta-llama-3-8b"], description: "Llama 3 8B: 32 layers, 4096, 32 heads (8 KV), FFN 14336", source: LLAMA3_SRC, build: || llama3("llama3-8b", 32, 4096, 32, 14336) },
        Def { name: "llama3-70b", aliases: &["llama3.1-70b", "meta-llama-3-70b"], description: "Llama 3 70B: 80 layers, 8192, 64 heads (8 KV), FFN 28672", source: LLAMA3_SRC, build: || llama3("llama3-70b", 80, 8192, 64, 28672) },
        Def { name: "llama3-405b", aliases: &["llama3.1-405b", "meta-llama-3.1-405b"], description: "Llama 3.1 405B: 126 layers, 16384, 128 heads (8 KV), FFN 53248", source: LLAMA3_SRC, build: || llama3("llama3-405b", 126, 16384, 128, 53248) },
        Def { name: "mixtral-8x7b", aliases: &["mixtral", "mixtral-8x7b-v0.1"], description: "Mixtral 8x7B: 32 layers, 4096, 32 heads (8 KV), 8 experts of 14336, top-2", source: "Jiang et al. 2024 Table 1; mistralai/Mixtral-8x7B-v0.1 config.json", build: mixtral_8x7b },
        Def { name: "falcon-7b", aliases: &[], description: "Falcon-7B: 32 layers, 4544, 71 heads, multi-query, parallel attention, one norm", source: "Almazrouei et al. 2023; tiiuae/falcon-7b config.json", build: falcon_7b },
        Def { name: "falcon-40b", aliases: &[], description: "Falcon-40B: 60 layers, 8192, 128 heads (8 KV), parallel attention, two norms", source: "Almazrouei et al. 2023; tiiuae/falcon-40b config.json", build: falcon_40b },
        // MPT as benchmarked in the calibration data (d_model, n_heads, n_layers).
        Def { name: "mpt-125m", aliases: &[], description: "MPT 125M: d_model 768, 12 heads, 12 layers", source: MPT_SRC, build: || mpt("mpt-125m", 768, 12, 12) },
        Def { name: "mpt-350m", aliases: &[], description: "MPT 350M: d_model 1024, 16 heads, 24 layers", source: MPT_SRC, build: || mpt("mpt-350m", 1024, 16, 24) },
        Def { name: "mpt-760m", aliases: &[], description: "MPT 760M: d_model 1536, 12 heads, 24 layers", source: MPT_SRC, build: || mpt("mpt-760m", 1536, 12, 24) },
        Def { name: "mpt-1b", aliases: &[], description: "MPT 1B: d_model 2048, 16 heads, 24 layers", source: MPT_SRC, build: || mpt("mpt-1b", 2048, 16, 24) },
        Def { name: "mpt-3b", aliases: &[], description: "MPT 3B: d_model 2560, 20 heads, 32 layers", source: MPT_SRC, build: || mpt("mpt-3b", 2560, 20, 32) },
        Def { name: "mpt-7b", aliases: &[], description: "MPT 7B: d_model 4096, 32 heads, 32 layers", source: MPT_SRC, build: || mpt("mpt-7b", 4096, 32, 32) },
        Def { name: "mpt-13b", aliases: &[], description: "MPT 13B: d_model 5120, 40 heads, 40 layers", source: MPT_SRC, build: || mpt("mpt-13b", 5120, 40, 40) },
        Def { name: "mpt-30b", aliases: &[], description: "MPT 30B: d_model 7168, 56 heads, 48 layers", source: MPT_SRC, build: || mpt("mpt-30b", 7168, 56, 48) },
        Def { name: "mpt-70b", aliases: &[], description: "MPT 70B: d_model 8192, 64 heads, 80 layers", source: MPT_SRC, build: || mpt("mpt-70b", 8192, 64, 80) },
        // Metis evaluation models (Table 2), shapes from the Alpa suites Metis runs on:
        // gpt_specs S, H, L, heads, V = 1024, 2048/2560/4096/5120, 24/32/32/48, 32/32/32/40, 51200.
        Def { name: "metis-gpt3-1.3b", aliases: &["alpa-gpt-1.3b"], description: "Metis/Alpa GPT-3 1.3B: 24 layers, 2048, 32 heads, seq 1024, vocab 51200", source: METIS_SRC, build: || metis_gpt("metis-gpt3-1.3b", 24, 2048, 32) },
        Def { name: "metis-gpt3-2.6b", aliases: &["alpa-gpt-2.6b"], description: "Metis/Alpa GPT-3 2.6B: 32 layers, 2560, 32 heads, seq 1024", source: METIS_SRC, build: || metis_gpt("metis-gpt3-2.6b", 32, 2560, 32) },
        Def { name: "metis-gpt3-6.7b", aliases: &["alpa-gpt-6.7b"], description: "Metis/Alpa GPT-3 6.7B: 32 layers, 4096, 32 heads, seq 1024", source: METIS_SRC, build: || metis_gpt("metis-gpt3-6.7b", 32, 4096, 32) },
        Def { name: "metis-gpt3-15b", aliases: &["alpa-gpt-15b"], description: "Metis/Alpa GPT-3 15B: 48 layers, 5120, 40 heads, seq 1024", source: METIS_SRC, build: || metis_gpt("metis-gpt3-15b", 48, 5120, 40) },
        // moe_specs S, H, L, heads, V, E = 1024, 768/1024/1536/2048, 16, 16, 32000, 16/16/32/48.
        Def { name: "metis-moe-1.3b", aliases: &["alpa-moe-1.3b", "gshard-moe-1.3b"], description: "Metis/Alpa GShard MoE 1.3B: 16 layers (8 MoE), 768, 16 experts, top-2", source: METIS_SRC, build: || metis_moe("metis-moe-1.3b", 768, 16) },
        Def { name: "metis-moe-2.4b", aliases: &["alpa-moe-2.4b", "gshard-moe-2.4b"], description: "Metis/Alpa GShard MoE 2.4B: 16 layers (8 MoE), 1024, 16 experts, top-2", source: METIS_SRC, build: || metis_moe("metis-moe-2.4b", 1024, 16) },
        Def { name: "metis-moe-10b", aliases: &["alpa-moe-10b", "gshard-moe-10b"], description: "Metis/Alpa GShard MoE 10B: 16 layers (8 MoE), 1536, 32 experts, top-2", source: METIS_SRC, build: || metis_moe("metis-moe-10b", 1536, 32) },
        Def { name: "metis-moe-27b", aliases: &["alpa-moe-27b", "gshard-moe-27b"], description: "Metis/Alpa GShard MoE 27B: 16 layers (8 MoE), 2048, 48 experts, top-2", source: METIS_SRC, build: || metis_moe("metis-moe-27b", 2048, 48) },
        // wresnet_specs I, L, C, W = 224, 50, 320/448/640/320, 2/2/2/16.
        Def { name: "wresnet-1b", aliases: &["metis-wresnet-1b", "wide-resnet-1b"], description: "Metis/Alpa Wide-ResNet-50 1B: 320 channels, width 2 (per sample)", source: METIS_SRC, build: || wide_resnet("wresnet-1b", 320, 2) },
        Def { name: "wresnet-2b", aliases: &["metis-wresnet-2b", "wide-resnet-2b"], description: "Metis/Alpa Wide-ResNet-50 2B: 448 channels, width 2 (per sample)", source: METIS_SRC, build: || wide_resnet("wresnet-2b", 448, 2) },
        Def { name: "wresnet-4b", aliases: &["metis-wresnet-4b", "wide-resnet-4b"], description: "Metis/Alpa Wide-ResNet-50 4B: 640 channels, width 2 (per sample)", source: METIS_SRC, build: || wide_resnet("wresnet-4b", 640, 2) },
        Def { name: "wresnet-6.8b", aliases: &["metis-wresnet-6.8b", "wide-resnet-6.8b"], description: "Metis/Alpa Wide-ResNet-50 6.8B: 320 channels, width 16 (per sample)", source: METIS_SRC, build: || wide_resnet("wresnet-6.8b", 320, 16) },
        Def { name: "amp-hetero", aliases: &["amp-het-model", "amp-transgan"], description: "AMP's heterogeneous model: 12 blocks of width 1024 then 12 of width 16, seq 1024", source: "Li et al. 2022 (AMP, NeurIPS) §4.3; DachengLi1/AMP het_model.py", build: amp_hetero },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(name: &str) -> f64 {
        catalog_model(name).unwrap().params() as f64
    }

    fn close(name: &str, want: f64, tol: f64) {
        let p = params(name);
        assert!(
            (p - want).abs() / want < tol,
            "{name}: {p:.4e} parameters, published {want:.4e}"
        );
    }

    #[test]
    fn gpt3_parameter_counts() {
        close("gpt3-175b", 174.6e9, 0.005);
        close("gpt3-1.3b", 1.3e9, 0.03);
        close("gpt3-6.7b", 6.7e9, 0.03);
        close("gpt3-13b", 13.0e9, 0.03);
        close("gpt2-xl", 1.558e9, 0.005);
        close("gpt-neo-2.7b", 2_651_307_520.0, 1e-9);
        close("opt-350m", 331.2e6, 0.005);
        close("bert-large", 335e6, 0.03);
    }

    #[test]
    fn llama_parameter_counts() {
        close("llama2-7b", 6.74e9, 0.003);
        close("llama2-13b", 13.0e9, 0.005);
        close("llama2-70b", 69.0e9, 0.005);
        close("llama3-8b", 8.03e9, 0.003);
        close("llama3-70b", 70.6e9, 0.003);
        close("llama3-405b", 405.9e9, 0.003);
    }

    #[test]
    fn mixtral_total_and_active() {
        let m = catalog_model("Mixtral-8x7B").unwrap();
        let (total, active) = (m.params() as f64, m.active_params() as f64);
        assert!((total - 46.7e9).abs() / 46.7e9 < 0.003, "{total}");
        assert!((active - 12.9e9).abs() / 12.9e9 < 0.005, "{active}");
    }

    #[test]
    fn falcon_parameter_counts() {
        close("falcon-7b", 6.92e9, 0.003);
        close("falcon-40b", 41.8e9, 0.003);
        let m = catalog_model("falcon-7b").unwrap();
        let b = &m.layers[1];
        // One shared norm, no sequential residual, one TP all-reduce each way.
        assert_eq!(b.ops.iter().filter(|o| o.name.starts_with("ln")).count(), 1);
        assert_eq!(b.tp_allreduces_fwd, 1);
        let b40 = &catalog_model("falcon-40b").unwrap().layers[1];
        assert_eq!(
            b40.ops.iter().filter(|o| o.name.starts_with("ln")).count(),
            2
        );
    }

    /// `nparams` at seq 2048 of the calibration CSV (llm-foundry's benchmark table).
    #[test]
    fn mpt_matches_calibration_nparams() {
        let csv = [
            ("125m", 125_311_488u64),
            ("350m", 355_985_408),
            ("760m", 760_470_528),
            ("1b", 1_315_950_592),
            ("3b", 2_651_837_440),
            ("7b", 6_658_859_008),
            ("13b", 12_853_954_560),
            ("30b", 29_975_214_080),
            ("70b", 64_862_437_376),
        ];
        for (size, n) in csv {
            let m = catalog_model(&format!("mpt-{size}")).unwrap();
            let p = m.params() as f64;
            assert!(
                (p - n as f64).abs() / (n as f64) < 0.01,
                "mpt-{size}: {p} vs {n}"
            );
            // With the biases the benchmark used, the count is exact.
            assert_eq!(m.params(), n, "mpt-{size}");
            assert!(m.transformer.is_some());
        }
    }

    #[test]
    fn metis_models_match_table_2() {
        for (name, want) in [
            ("metis-gpt3-1.3b", 1.3e9),
            ("metis-gpt3-2.6b", 2.6e9),
            ("metis-gpt3-6.7b", 6.7e9),
            ("metis-gpt3-15b", 15e9),
            ("metis-moe-1.3b", 1.3e9),
            ("metis-moe-2.4b", 2.4e9),
            ("metis-moe-10b", 10e9),
            ("metis-moe-27b", 27e9),
            ("wresnet-1b", 1e9),
            ("wresnet-2b", 2e9),
            ("wresnet-4b", 4e9),
            ("wresnet-6.8b", 6.8e9),
        ] {
            close(name, want, 0.04);
        }
        // Exact Wide-ResNet counts from the bottleneck formulas (flax ResNet, 1024 classes).
        assert_eq!(params("wresnet-1b") as u64, 1_005_653_184);
        assert_eq!(params("wresnet-6.8b") as u64, 6_727_679_424);
    }

    #[test]
    fn metis_moe_alternates_moe_and_dense_blocks() {
        let m = catalog_model("metis-moe-1.3b").unwrap();
        assert_eq!(m.layers.len(), 18);
        let is_moe = |l: &Layer| l.ops.iter().any(|o| o.name == "router");
        assert!(is_moe(&m.layers[1]) && !is_moe(&m.layers[2]) && is_moe(&m.layers[15]));
        assert_eq!(m.layers[5].name, "block4");
        assert!(m.active_params() < m.params() / 4);
    }

    #[test]
    fn wide_resnet_is_per_sample_with_growing_rear_layers() {
        let m = catalog_model("wresnet-2b").unwrap();
        assert!(m.per_sample);
        assert_eq!(m.layers.len(), 18);
        assert_eq!(m.layers[0].kind, LayerKind::Embedding);
        assert_eq!(m.layers[17].kind, LayerKind::Head);
        // 56² × 4C elements out of the first block, 7² × 32C out of the last, 2 bytes each.
        assert_eq!(
            m.layers[1].output_bytes_per_token,
            2.0 * 56.0 * 56.0 * 4.0 * 448.0
        );
        assert_eq!(
            m.layers[16].output_bytes_per_token,
            2.0 * 49.0 * 32.0 * 448.0
        );
        let flops = |l: &Layer| match l.ops[0].kind {
            OpKind::Opaque { flops_per_sample } => flops_per_sample,
            _ => panic!(),
        };
        // Roughly constant FLOPs per block but parameters growing 4× per stage (Metis §5.2:
        // the rear layers dominate).
        assert!(m.layers[16].params() > 50 * m.layers[1].params());
        // The same formulas at base 64, width 1 are ResNet-50: torchvision's 25,557,032
        // parameters with 1000 classes (we have 1024: 24·2049 more) and ≈4.1 GMAC = 8.2 GFLOP.
        let r50 = wide_resnet("resnet-50", 64, 1);
        assert_eq!(r50.params(), 25_557_032 + 24 * 2049);
        let f: f64 = r50.layers.iter().map(flops).sum();
        assert!((f - 8.2e9).abs() / 8.2e9 < 0.06, "{f}");
        let total: f64 = m.layers.iter().map(flops).sum();
        // 448 channels with width 2: ≈ 650 GFLOP per sample, ~80 ResNet-50s.
        assert!(total > 60.0 * f && total < 100.0 * f, "{total}");
    }

    #[test]
    fn amp_hetero_has_two_widths_and_a_narrow_boundary() {
        let m = catalog_model("AMP-hetero").unwrap();
        assert_eq!(m.layers.len(), 26);
        assert!(m.transformer.is_none());
        let wide = &m.layers[1];
        let last_wide = &m.layers[12];
        let narrow = &m.layers[13];
        assert_eq!(wide.output_bytes_per_token, 2048.0);
        assert_eq!(last_wide.output_bytes_per_token, 32.0);
        assert!(last_wide.ops.iter().any(|o| o.name == "width_proj"));
        assert_eq!(narrow.output_bytes_per_token, 32.0);
        assert_eq!(narrow.name, "block12");
        assert!(wide.params() > 1000 * narrow.params());
        assert_eq!(m.layers[25].kind, LayerKind::Head);
        // The head projects width 16 to the vocabulary.
        let logits = m.layers[25]
            .ops
            .iter()
            .find(|o| o.name == "logits")
            .unwrap();
        assert!(matches!(
            logits.kind,
            OpKind::Gemm {
                k: 16,
                n: 52256,
                ..
            }
        ));
    }

    #[test]
    fn names_aliases_and_hints() {
        assert_eq!(catalog_model("GPT-3 175B").unwrap().name, "gpt3-175b");
        assert_eq!(catalog_model("gpt3_xl").unwrap().name, "gpt3-1.3b");
        assert_eq!(catalog_model("Llama-2-7B").unwrap().name, "llama2-7b");
        assert_eq!(catalog_model("llama-3.1-405b").unwrap().name, "llama3-405b");
        assert_eq!(catalog_model("MPT_7B").unwrap().name, "mpt-7b");
        let e = catalog_model("lama2-7b").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("did you mean `llama2-7b`?"));
        assert!(e.message.contains("lama2-7b"));
        let e = catalog_model("mixtrl").unwrap_err();
        assert_eq!(e.hint.as_deref(), Some("did you mean `mixtral-8x7b`?"));
        assert!(catalog_model("zzzzzzzzzzzzzzzz")
            .unwrap_err()
            .hint
            .is_none());
    }

    #[test]
    fn every_entry_builds_and_names_are_unambiguous() {
        let all = defs();
        let mut seen = std::collections::HashSet::new();
        for d in &all {
            for n in std::iter::once(d.name).chain(d.aliases.iter().copied()) {
                assert!(seen.insert(squash(n)), "`{n}` collides");
            }
            let m = (d.build)();
            assert_eq!(m.name, d.name);
            assert!(m.params() > 0 && !m.layers.is_empty());
            // Every built-in shape lies within the limits the file readers apply.
            if let Some(t) = &m.transformer {
                assert_eq!(t.check_limits(), Ok(()), "{}", d.name);
            }
            assert!(!d.description.is_empty() && !d.source.is_empty());
        }
        assert_eq!(catalog_names().len(), all.len());
        assert_eq!(catalog_names()[0].name, "gpt3-125m");
    }
}
