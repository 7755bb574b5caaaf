//! HuggingFace `config.json` import.
//!
//! Reads the shape of a decoder from the `config.json` of a HuggingFace checkpoint and builds it
//! with [`TransformerConfig`]: the `model_type`s of [`SUPPORTED_MODEL_TYPES`] (also Falcon's
//! older `RefinedWebModel`/`RefinedWeb`). LLaMA-style families share one reading of the standard
//! fields ([`Std`]: each family's `transformers` defaults) and differ in
//! [`Quirks`](super::Quirks) set once per family here; MoE families share one reading of their
//! experts. A multimodal config's language model under `text_config` is used when present.
//!
//! Shape fields (width, depth, heads, vocabulary, FFN width) are required at the top level even
//! where the `transformers` class has a default: a config without them is not the model meant.
//! A nested `text_config` takes its class's defaults for them (`CLASS_DEFAULTS`), as older
//! `transformers` wrote it as a diff against them. Optional fields take the family's
//! `transformers` defaults, except `num_key_value_heads`, which defaults to the number of
//! attention heads. Parameter counts equal `transformers`' for every family
//! (`tests/hf_reference.rs`). Not modelled: rope scaling and partial rotary (no parameters),
//! logit soft-capping, the cost of routing beyond the router GEMM.
//!
//! Every whole-number field must lie within the shape limits of `model::LIMITS` (width 2²⁰,
//! FFN 2²², vocabulary 2²⁴, 10 000 layers, 2¹⁴ heads, 2¹² experts, 2²⁴ positions); errors
//! name the field and its position in the file.

use super::layerlist::JsonSpans;
use super::{
    AttnImpl, Mla, MlpKind, Model, MoeConfig, NormKind, PositionKind, QkNorm, TransformerConfig,
    LIMITS,
};
use crate::error::InputError;
use crate::names;
use crate::names::did_you_mean;
use crate::parse::{self, Num};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The `model_type`s understood, in the order error messages list them.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi",
    "phi3",
    "phimoe",
    "olmo",
    "olmo2",
    "olmoe",
    "deepseek_v3",
    "stablelm",
    "starcoder2",
    "cohere",
    "granite",
    "persimmon",
    "nemotron",
    "smollm3",
    "glm4",
    "dbrx",
    "gpt_oss",
    "gpt2",
    "gptj",
    "codegen",
    "gpt_neo",
    "gpt_bigcode",
    "bloom",
    "opt",
    "gpt_neox",
    "falcon",
    "mpt",
];

/// Builds the model described by a HuggingFace `config.json`. `name_hint` names it (e.g. the
/// file or repository name); when empty, `_name_or_path` or the `model_type` is used.
pub fn parse_hf_config(src: &str, name_hint: &str) -> Result<Model, InputError> {
    let root: Value = serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
    let spans = JsonSpans::index(src);
    let Value::Object(root_obj) = &root else {
        return Err(InputError::new("expected a JSON object (a HuggingFace config.json)").at(1, 1));
    };
    let top = Cfg {
        obj: root_obj,
        prefix: String::new(),
        src,
        spans: &spans,
        defaults: &[],
        outer: None,
    };
    // The language model a wrapper builds when its `text_config` names none.
    let wrapper_text_type: Option<&'static str> = top
        .str_opt("model_type")?
        .and_then(|w| WRAPPER_TEXT_TYPES.iter().find(|(k, _)| *k == w))
        .map(|(_, t)| *t);
    let cfg = match root_obj.get("text_config") {
        Some(Value::Object(t)) => {
            let inner_type = t
                .get("model_type")
                .and_then(Value::as_str)
                .or(wrapper_text_type);
            Cfg {
                obj: t,
                prefix: "text_config".to_string(),
                src,
                spans: &spans,
                defaults: inner_type
                    .and_then(|t| CLASS_DEFAULTS.iter().find(|(k, _)| *k == t))
                    .map_or(&[][..], |(_, d)| *d),
                outer: Some(root_obj),
            }
        }
        _ => top.clone(),
    };
    let nested_default_type = wrapper_text_type.filter(|_| cfg.outer.is_some());
    let (model_type, mt_cfg) = match cfg.str_opt("model_type")? {
        Some(t) => (t.to_string(), &cfg),
        None if nested_default_type.is_some() => {
            (nested_default_type.expect("checked").to_string(), &top)
        }
        None => match top.str_opt("model_type")? {
            Some(t) => (t.to_string(), &top),
            None => {
                return Err(InputError::new(format!(
                    "missing `model_type`; supported: {}",
                    supported_list()
                ))
                .field(cfg.path("model_type"))
                .at(1, 1))
            }
        },
    };
    let name = {
        let hint = name_hint.trim();
        if !hint.is_empty() {
            hint.to_string()
        } else {
            match top.str_opt("_name_or_path").ok().flatten() {
                Some(n) if !n.trim().is_empty() => n.trim().to_string(),
                _ => model_type.clone(),
            }
        }
    };

    let mut model = match model_type.to_ascii_lowercase().as_str() {
        t @ ("llama" | "mistral" | "qwen2" | "qwen3" | "gemma" | "gemma2" | "gemma3_text"
        | "phi" | "phi3" | "olmo" | "olmo2" | "stablelm" | "starcoder2" | "cohere"
        | "granite" | "persimmon" | "nemotron" | "smollm3" | "glm4") => {
            llama_family(&cfg, &name, t)?
        }
        t @ ("mixtral" | "qwen2_moe" | "qwen3_moe" | "phimoe" | "olmoe" | "deepseek_v3"
        | "gpt_oss") => moe_family(&cfg, &name, t)?,
        "dbrx" => dbrx(&cfg, &name)?,
        "gptj" | "codegen" => gptj(&cfg, &name)?,
        "gpt_neo" => gpt_neo(&cfg, &name)?,
        "gpt_bigcode" => gpt_bigcode(&cfg, &name)?,
        "bloom" => bloom(&cfg, &name)?,
        "opt" => opt(&cfg, &name)?,
        "gpt2" => gpt2(&cfg, &name)?,
        "gpt_neox" => gpt_neox(&cfg, &name)?,
        "falcon" | "refinedwebmodel" => falcon(&cfg, &name, false)?,
        // The original Falcon-40B configs: the new decoder architecture without the flag.
        "refinedweb" => falcon(&cfg, &name, true)?,
        "mpt" => mpt(&cfg, &name)?,
        _ => {
            let hint = names::nearest(&model_type, SUPPORTED_MODEL_TYPES.iter().copied());
            return Err(mt_cfg.located(
                "model_type",
                InputError::new(format!(
                    "unsupported model_type `{model_type}`; supported: {}",
                    supported_list()
                ))
                .hint(did_you_mean(hint)),
            ));
        }
    };
    model.name = name;
    Ok(model)
}

/// The language model a multimodal wrapper builds when its `text_config` names none.
const WRAPPER_TEXT_TYPES: &[(&str, &str)] = &[
    ("llava", "llama"),
    ("llava_next", "llama"),
    ("mistral3", "mistral"),
    ("gemma3", "gemma3_text"),
];

/// Shape defaults of the `transformers` config classes a `text_config` is most often written
/// against (transformers 5.24; `head_dim` only where it is not width ÷ heads). Used only for a
/// nested `text_config`: a top-level config without its shape is not the model meant.
const CLASS_DEFAULTS: &[(&str, &[(&str, u64)])] = &[
    (
        "llama",
        &[
            ("hidden_size", 4096),
            ("intermediate_size", 11008),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("vocab_size", 32000),
            ("max_position_embeddings", 2048),
        ],
    ),
    (
        "mistral",
        &[
            ("hidden_size", 4096),
            ("intermediate_size", 14336),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 8),
            ("vocab_size", 32000),
            ("max_position_embeddings", 131072),
        ],
    ),
    (
        "qwen2",
        &[
            ("hidden_size", 4096),
            ("intermediate_size", 22016),
            ("num_hidden_layers", 32),
            ("num_attention_heads", 32),
            ("vocab_size", 151936),
            ("max_position_embeddings", 32768),
        ],
    ),
    (
        "gemma",
        &[
            ("hidden_size", 3072),
            ("intermediate_size", 24576),
            ("num_hidden_layers", 28),
            ("num_attention_heads", 16),
            ("num_key_value_heads", 16),
            ("head_dim", 256),
            ("vocab_size", 256000),
            ("max_position_embeddings", 8192),
        ],
    ),
    (
        "gemma3_text",
        &[
            ("hidden_size", 2304),
            ("intermediate_size", 9216),
            ("num_hidden_layers", 26),
            ("num_attention_heads", 8),
            ("num_key_value_heads", 4),
            ("head_dim", 256),
            ("vocab_size", 262208),
            ("max_position_embeddings", 131072),
            ("sliding_window", 4096),
        ],
    ),
];

fn supported_list() -> String {
    SUPPORTED_MODEL_TYPES
        .iter()
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A view of one config object with typed, located field access.
#[derive(Clone)]
struct Cfg<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
    src: &'a str,
    spans: &'a JsonSpans,
    /// For a nested `text_config`: the shape defaults of its config class, for the fields
    /// older `transformers` left out of it (it wrote the nested config as a diff against them).
    defaults: &'static [(&'static str, u64)],
    /// For a nested `text_config`: the wrapper's config, whose `tie_word_embeddings` decides.
    outer: Option<&'a Map<String, Value>>,
}

impl<'a> Cfg<'a> {
    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn located(&self, key: &str, e: InputError) -> InputError {
        let path = self.path(key);
        let e = e.field(path.clone());
        match self.spans.values.get(&path) {
            Some(&o) => e.at_offset(self.src, o),
            None => e,
        }
    }

    /// The value of `key`, treating JSON `null` as absent. A wrapper's `tie_word_embeddings`
    /// is the one `transformers` ties its language model's head by.
    fn get(&self, key: &str) -> Option<&'a Value> {
        let outer = self
            .outer
            .filter(|_| key == "tie_word_embeddings")
            .and_then(|o| o.get(key))
            .filter(|v| !v.is_null());
        outer.or_else(|| self.obj.get(key).filter(|v| !v.is_null()))
    }

    fn sub(&self, key: &str) -> Result<Option<Cfg<'a>>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(Cfg {
                obj: o,
                prefix: self.path(key),
                src: self.src,
                spans: self.spans,
                defaults: &[],
                outer: None,
            })),
            Some(v) => Err(self.type_error(key, "an object", v)),
        }
    }

    fn type_error(&self, key: &str, expected: &str, found: &Value) -> InputError {
        let what = match found {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        self.located(
            key,
            InputError::new(format!("expected {expected}, found {what}")),
        )
    }

    /// A positive whole number up to the key's limit (`limit_of`); JSON floats such as `4.0`
    /// are accepted when integral.
    fn uint_opt(&self, key: &str) -> Result<Option<u64>, InputError> {
        let Some(v) = self.get(key) else {
            return Ok(self
                .defaults
                .iter()
                .find(|(k, _)| *k == key)
                .map(|&(_, v)| v));
        };
        let num = match v {
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Num::Int(u as i128),
                (None, Some(i)) => Num::Int(i as i128),
                _ => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            _ => return Err(self.type_error(key, "a positive whole number", v)),
        };
        let max = limit_of(key);
        parse::whole(num, 1, max).map(Some).map_err(|e| {
            let hint = matches!(e, parse::WholeError::TooLarge { .. }).then(|| {
                format!("hetplan accepts models up to the limits of `model::LIMITS`; {key} at most {max}")
            });
            self.located(key, InputError::new(e.to_string()).hint(hint))
        })
    }

    /// The first of `keys` present (HF renamed some fields over time).
    fn uint_any(&self, keys: &[&str]) -> Result<Option<u64>, InputError> {
        for k in keys {
            if let Some(v) = self.uint_opt(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    fn uint(&self, keys: &[&str], what: &str) -> Result<u64, InputError> {
        self.uint_any(keys)?.ok_or_else(|| {
            let e = InputError::new(format!("missing `{}` ({what})", keys[0]))
                .field(self.path(keys[0]));
            match self.spans.values.get(&self.prefix) {
                Some(&o) if !self.prefix.is_empty() => e.at_offset(self.src, o),
                _ => e,
            }
        })
    }

    fn bool_opt(&self, key: &str) -> Result<Option<bool>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.type_error(key, "true or false", v)),
        }
    }

    fn float_opt(&self, key: &str) -> Result<Option<f64>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(v) => Err(self.type_error(key, "a number", v)),
        }
    }

    fn str_opt(&self, key: &str) -> Result<Option<&'a str>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.type_error(key, "a string", v)),
        }
    }

    /// Whether any of the dropout probabilities given is positive (each must lie in 0..=1).
    fn dropout(&self, keys: &[&str]) -> Result<bool, InputError> {
        let mut any = false;
        for k in keys {
            let p = self.float_opt(k)?.unwrap_or(0.0);
            if !(0.0..=1.0).contains(&p) {
                return Err(self.located(
                    k,
                    InputError::new(format!(
                        "a dropout probability must lie between 0 and 1, found {}",
                        parse::show_f64(p)
                    )),
                ));
            }
            any |= p > 0.0;
        }
        Ok(any)
    }

    /// `attn_implementation` (`eager` materialises the scores; `sdpa` and `flash_attention_2`
    /// are fused), flash when absent.
    fn attn_impl(&self) -> Result<AttnImpl, InputError> {
        for k in ["attn_implementation", "_attn_implementation"] {
            if let Some(s) = self.str_opt(k)? {
                return Ok(if s == "eager" {
                    AttnImpl::Torch
                } else {
                    AttnImpl::Flash
                });
            }
        }
        Ok(AttnImpl::Flash)
    }
}

/// The largest value a whole-number field may take: the shape limits of [`LIMITS`], by what
/// the field is. Fields not listed (`decoder_sparse_step`, `num_ln_in_parallel_attn`) are
/// bounded by the layer limit.
fn limit_of(key: &str) -> u64 {
    match key {
        "hidden_size" | "n_embd" | "n_embed" | "d_model" | "head_dim" => LIMITS.hidden,
        "intermediate_size"
        | "n_inner"
        | "ffn_hidden_size"
        | "moe_intermediate_size"
        | "shared_expert_intermediate_size" => LIMITS.ffn,
        "vocab_size" => LIMITS.vocab,
        "num_hidden_layers" | "n_layer" | "n_layers" => LIMITS.layers,
        "num_attention_heads"
        | "n_head"
        | "n_heads"
        | "num_key_value_heads"
        | "num_kv_heads"
        | "n_head_kv"
        | "kv_n_heads" => LIMITS.heads,
        "num_local_experts" | "num_experts" | "num_experts_per_tok" => LIMITS.experts,
        "max_position_embeddings" | "n_positions" | "n_ctx" | "max_seq_len" => LIMITS.seq,
        _ => LIMITS.layers,
    }
}

/// Builds a shape whose fields were all read within their limits; `check_limits` again as a
/// second line of defence (it names the `TransformerConfig` field, not the config key).
fn build(c: &TransformerConfig) -> Result<Model, InputError> {
    c.check_limits()?;
    Ok(c.build())
}

/// Checks the head counts against the width and each other.
fn check_heads(
    cfg: &Cfg,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: Option<u64>,
    heads_key: &str,
    kv_key: &str,
) -> Result<u64, InputError> {
    if kv_heads > heads || !heads.is_multiple_of(kv_heads) {
        return Err(cfg.located(
            kv_key,
            InputError::new(format!(
                "{kv_heads} key/value heads must divide the {heads} attention heads"
            )),
        ));
    }
    match head_dim {
        Some(d) => Ok(d),
        None if hidden.is_multiple_of(heads) => Ok(hidden / heads),
        None => Err(cfg.located(
            heads_key,
            InputError::new(format!(
                "{heads} attention heads do not divide the width {hidden} (and no `head_dim` is given)"
            )),
        )),
    }
}

/// How a LLaMA-style family reads the standard fields (`hidden_size`, `num_hidden_layers`,
/// `num_attention_heads`, `num_key_value_heads`, `head_dim`, `intermediate_size`, `vocab_size`,
/// `max_position_embeddings`, `tie_word_embeddings`, `attention_bias`, `mlp_bias`), with the
/// defaults of its `transformers` config class.
struct Std {
    mlp: MlpKind,
    norm: NormKind,
    norm_bias: bool,
    /// `tie_word_embeddings` when absent.
    tied: bool,
    /// `attention_bias` when absent (it sets the QKV bias; the output projection's follows
    /// unless the family says otherwise).
    attn_bias: bool,
    /// The dense FFN width is required (MoE families without dense layers may omit it).
    ffn_required: bool,
}

impl Std {
    /// Gated SiLU MLP, RMSNorm, untied, no biases: LLaMA and most of its descendants.
    const LLAMA: Std = Std {
        mlp: MlpKind::SwiGlu,
        norm: NormKind::RmsNorm,
        norm_bias: false,
        tied: false,
        attn_bias: false,
        ffn_required: true,
    };

    fn tied(self, tied: bool) -> Std {
        Std { tied, ..self }
    }
}

/// The standard fields read into a LLaMA-style shape (see [`Std`]).
fn standard(cfg: &Cfg, name: &str, std: Std) -> Result<TransformerConfig, InputError> {
    let hidden = cfg.uint(&["hidden_size"], "the model width")?;
    let layers = cfg.uint(&["num_hidden_layers"], "the number of layers")?;
    let heads = cfg.uint(&["num_attention_heads"], "the number of attention heads")?;
    let kv = cfg.uint_opt("num_key_value_heads")?.unwrap_or(heads);
    let head_dim = check_heads(
        cfg,
        hidden,
        heads,
        kv,
        cfg.uint_opt("head_dim")?,
        "num_attention_heads",
        "num_key_value_heads",
    )?;
    let vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    let max_seq = cfg.uint_opt("max_position_embeddings")?.unwrap_or(2048);
    let ffn = if std.ffn_required {
        cfg.uint(&["intermediate_size"], "the FFN width")?
    } else {
        cfg.uint_opt("intermediate_size")?.unwrap_or(0)
    };
    let mut c = TransformerConfig::llama(name, layers, hidden, heads, kv, ffn, vocab, max_seq);
    c.head_dim = head_dim;
    c.mlp = std.mlp;
    c.norm = std.norm;
    c.norm_bias = std.norm_bias;
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(std.tied);
    c.attn_bias = cfg.bool_opt("attention_bias")?.unwrap_or(std.attn_bias);
    c.mlp_bias = cfg.bool_opt("mlp_bias")?.unwrap_or(false);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["attention_dropout", "hidden_dropout"])?;
    read_window(cfg, &mut c)?;
    Ok(c)
}

/// Sliding-window attention, for its cost: `layer_types` (what `transformers` writes now), else
/// each family's older fields — `use_sliding_window` with `max_window_layers` (Qwen2/3: the
/// layers from there on slide), `sliding_window_pattern` (Gemma 3: every n-th layer global),
/// Gemma 2's alternation, and a bare `sliding_window` for every layer (Mistral, Starcoder2,
/// Phi-3).
fn read_window(cfg: &Cfg, c: &mut TransformerConfig) -> Result<(), InputError> {
    let layers = c.layers as usize;
    let model_type = cfg.str_opt("model_type")?.unwrap_or("");
    let local: Vec<bool> = match cfg.get("layer_types") {
        Some(Value::Array(a)) => {
            if a.len() != layers {
                return Err(cfg.located(
                    "layer_types",
                    InputError::new(format!("{} layer types for {layers} layers", a.len())),
                ));
            }
            let mut v = Vec::with_capacity(layers);
            for t in a {
                match t.as_str() {
                    Some("sliding_attention") | Some("chunked_attention") => v.push(true),
                    Some(_) => v.push(false),
                    None => {
                        return Err(cfg
                            .located("layer_types", InputError::new("expected a list of strings")))
                    }
                }
            }
            v
        }
        Some(v) => return Err(cfg.type_error("layer_types", "a list of layer types", v)),
        None => match model_type {
            "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" | "smollm3" => {
                if cfg.bool_opt("use_sliding_window")?.unwrap_or(false) {
                    let from = cfg.uint_opt("max_window_layers")?.unwrap_or(0) as usize;
                    (0..layers).map(|i| i >= from).collect()
                } else {
                    vec![false; layers]
                }
            }
            "gemma2" => (0..layers).map(|i| i % 2 == 0).collect(),
            "gemma3_text" => {
                let n = cfg.uint_opt("sliding_window_pattern")?.unwrap_or(6) as usize;
                (0..layers).map(|i| (i + 1) % n != 0).collect()
            }
            _ => vec![true; layers],
        },
    };
    if !local.iter().any(|&l| l) {
        return Ok(());
    }
    let Some(w) = cfg.uint_opt("sliding_window")? else {
        return Ok(());
    };
    c.quirks.window = Some(w);
    c.quirks.local_layers = if local.iter().all(|&l| l) {
        Vec::new()
    } else {
        local
    };
    Ok(())
}

/// LLaMA-style families that differ only in what [`Std`] and the quirks say.
fn llama_family(cfg: &Cfg, name: &str, model_type: &str) -> Result<Model, InputError> {
    let gemma = Std {
        mlp: MlpKind::SwiGlu,
        ..Std::LLAMA.tied(true)
    };
    let shared_qk = QkNorm {
        per_head: false,
        bias: false,
    };
    let whole_qk = QkNorm {
        per_head: true,
        bias: false,
    };
    let c = match model_type {
        "llama" | "mistral" | "phi3" | "granite" => standard(cfg, name, Std::LLAMA)?,
        "smollm3" => standard(cfg, name, Std::LLAMA.tied(true))?,
        "qwen2" => {
            // Biases on q, k and v, not on the output projection.
            let mut c = standard(cfg, name, Std::LLAMA)?;
            c.attn_bias = true;
            c.quirks.proj_bias = Some(false);
            c
        }
        "qwen3" => {
            let mut c = standard(cfg, name, Std::LLAMA)?;
            c.quirks.qk_norm = Some(shared_qk);
            c
        }
        "gemma" => standard(cfg, name, gemma)?,
        "gemma2" | "gemma3_text" => {
            let mut c = standard(cfg, name, gemma)?;
            c.quirks.post_norms = true;
            if model_type == "gemma3_text" {
                c.quirks.qk_norm = Some(shared_qk);
            }
            c
        }
        "olmo" => {
            // OLMo's LayerNorm has neither weight nor bias.
            let mut c = standard(
                cfg,
                name,
                Std {
                    norm: NormKind::LayerNorm,
                    ..Std::LLAMA
                },
            )?;
            c.quirks.norm_affine = false;
            c
        }
        "olmo2" => {
            let mut c = standard(cfg, name, Std::LLAMA)?;
            c.quirks.pre_norms = false;
            c.quirks.post_norms = true;
            c.quirks.qk_norm = Some(whole_qk);
            c
        }
        "glm4" => {
            let mut c = standard(
                cfg,
                name,
                Std {
                    attn_bias: true,
                    ..Std::LLAMA
                },
            )?;
            c.quirks.proj_bias = Some(false);
            c.quirks.post_norms = true;
            c
        }
        "cohere" => {
            // One bias-free LayerNorm feeds attention and MLP side by side.
            let mut c = standard(
                cfg,
                name,
                Std {
                    norm: NormKind::LayerNorm,
                    ..Std::LLAMA.tied(true)
                },
            )?;
            c.parallel_attn = true;
            c.shared_norm = true;
            if cfg.bool_opt("use_qk_norm")?.unwrap_or(false) {
                c.quirks.qk_norm = Some(whole_qk);
            }
            c
        }
        "stablelm" => {
            let mut c = standard(
                cfg,
                name,
                Std {
                    norm: NormKind::LayerNorm,
                    norm_bias: true,
                    ..Std::LLAMA
                },
            )?;
            c.attn_bias = cfg.bool_opt("use_qkv_bias")?.unwrap_or(false);
            c.quirks.proj_bias = Some(false);
            if cfg.bool_opt("qk_layernorm")?.unwrap_or(false) {
                c.quirks.qk_norm = Some(whole_qk);
            }
            if cfg.bool_opt("use_parallel_residual")?.unwrap_or(false) {
                c.parallel_attn = true;
                c.shared_norm = true;
            }
            c
        }
        "nemotron" => {
            // Squared-ReLU MLP without a gate; LayerNorm1P with bias.
            standard(
                cfg,
                name,
                Std {
                    mlp: MlpKind::Gelu,
                    norm: NormKind::LayerNorm,
                    norm_bias: true,
                    ..Std::LLAMA
                },
            )?
        }
        "starcoder2" => {
            let mut c = standard(
                cfg,
                name,
                Std {
                    mlp: MlpKind::Gelu,
                    norm: NormKind::LayerNorm,
                    norm_bias: true,
                    ..Std::LLAMA.tied(true)
                },
            )?;
            let bias = cfg.bool_opt("use_bias")?.unwrap_or(true);
            c.attn_bias = bias;
            c.mlp_bias = bias;
            c
        }
        "persimmon" | "phi" => {
            // Non-gated MLP with biases, LayerNorm with bias, biases on every projection;
            // Phi-2 runs attention and MLP side by side from one norm and has an LM-head bias.
            let mut c = standard(
                cfg,
                name,
                Std {
                    mlp: MlpKind::Gelu,
                    norm: NormKind::LayerNorm,
                    norm_bias: true,
                    attn_bias: true,
                    ..Std::LLAMA
                },
            )?;
            c.attn_bias = true;
            c.mlp_bias = true;
            let qk_default = model_type == "persimmon";
            if cfg.bool_opt("qk_layernorm")?.unwrap_or(qk_default) {
                c.quirks.qk_norm = Some(QkNorm {
                    per_head: false,
                    bias: true,
                });
            }
            if model_type == "phi" {
                c.parallel_attn = true;
                c.shared_norm = true;
                c.quirks.lm_head_bias = true;
            }
            c
        }
        other => unreachable!("llama_family called for `{other}`"),
    };
    c.check_limits()?;
    Ok(c.build())
}

/// Mixture-of-experts families whose every MoE block has `experts` of `expert_ffn` (and
/// maybe a shared expert beside them), and whose other blocks are dense with `intermediate_size`.
fn moe_family(cfg: &Cfg, name: &str, model_type: &str) -> Result<Model, InputError> {
    // transformers 5 writes `num_local_experts` where the Hub's configs say `num_experts`.
    let experts_keys: &[&str] = match model_type {
        "mixtral" | "phimoe" | "gpt_oss" => &["num_local_experts"],
        "deepseek_v3" => &["n_routed_experts"],
        _ => &["num_experts", "num_local_experts"],
    };
    let std = match model_type {
        "phimoe" => Std {
            norm: NormKind::LayerNorm,
            norm_bias: true,
            ..Std::LLAMA
        },
        "gpt_oss" => Std {
            attn_bias: true,
            ..Std::LLAMA
        },
        // Families whose dense width only matters for their dense layers.
        "qwen2_moe" | "qwen3_moe" => Std {
            ffn_required: false,
            ..Std::LLAMA
        },
        _ => Std::LLAMA,
    };
    let mut dense = if model_type == "deepseek_v3" {
        deepseek_attention(cfg, name)?
    } else {
        standard(cfg, name, std)?
    };
    let experts = cfg.uint(experts_keys, "the number of experts")?;
    let top_k = cfg.uint(&["num_experts_per_tok"], "experts per token")?;
    let expert_ffn = match model_type {
        // The expert width is `intermediate_size` where there are no dense layers.
        "mixtral" | "phimoe" | "gpt_oss" | "olmoe" => dense.ffn,
        _ => cfg.uint(&["moe_intermediate_size"], "the FFN width of one expert")?,
    };
    let shared_ffn = match model_type {
        "qwen2_moe" => match cfg.get("shared_expert_intermediate_size") {
            // Absent or 0: no shared expert.
            Some(v) if v.as_u64() == Some(0) => None,
            _ => cfg.uint_opt("shared_expert_intermediate_size")?,
        },
        "deepseek_v3" => cfg
            .uint_opt("n_shared_experts")?
            .map(|n| n.saturating_mul(expert_ffn)),
        _ => None,
    };
    let moe = MoeConfig {
        experts,
        top_k,
        expert_ffn,
        shared_ffn,
    };
    check_top_k(cfg, &moe, "num_experts_per_tok")?;
    match model_type {
        "qwen2_moe" => {
            dense.attn_bias = true;
            dense.quirks.proj_bias = Some(false);
            dense.quirks.shared_expert_gate = shared_ffn.is_some();
        }
        "qwen3_moe" => {
            dense.quirks.qk_norm = Some(QkNorm {
                per_head: false,
                bias: false,
            })
        }
        "olmoe" => {
            dense.quirks.qk_norm = Some(QkNorm {
                per_head: true,
                bias: false,
            })
        }
        "phimoe" => dense.quirks.lm_head_bias = cfg.bool_opt("lm_head_bias")?.unwrap_or(false),
        "gpt_oss" => {
            dense.quirks.attn_sinks = true;
            dense.quirks.expert_bias = true;
            dense.quirks.router_bias = true;
        }
        _ => {}
    }
    // Which blocks are MoE.
    let is_moe: Box<dyn Fn(u64) -> bool> = match model_type {
        "qwen2_moe" | "qwen3_moe" => {
            let step = cfg.uint_opt("decoder_sparse_step")?.unwrap_or(1);
            let dense_only = index_list(cfg, "mlp_only_layers")?;
            Box::new(move |i| !dense_only.contains(&i) && (i + 1).is_multiple_of(step))
        }
        "deepseek_v3" => {
            let k = match cfg.get("first_k_dense_replace") {
                Some(v) if v.as_u64() == Some(0) => 0,
                _ => cfg.uint_opt("first_k_dense_replace")?.unwrap_or(0),
            };
            let freq = cfg.uint_opt("moe_layer_freq")?.unwrap_or(1);
            Box::new(move |i| i >= k && i.is_multiple_of(freq))
        }
        _ => Box::new(|_| true),
    };
    mixed_blocks(cfg, dense, moe, is_moe)
}

/// DeepSeek-V3's attention: multi-head latent attention on a LLaMA-style block.
fn deepseek_attention(cfg: &Cfg, name: &str) -> Result<TransformerConfig, InputError> {
    let hidden = cfg.uint(&["hidden_size"], "the model width")?;
    let layers = cfg.uint(&["num_hidden_layers"], "the number of layers")?;
    let heads = cfg.uint(&["num_attention_heads"], "the number of attention heads")?;
    let vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    let max_seq = cfg.uint_opt("max_position_embeddings")?.unwrap_or(4096);
    let ffn = cfg.uint(&["intermediate_size"], "the FFN width")?;
    let mla = Mla {
        q_lora_rank: cfg.uint_opt("q_lora_rank")?,
        kv_lora_rank: cfg.uint(&["kv_lora_rank"], "the key/value projection rank")?,
        qk_nope_head_dim: cfg.uint(&["qk_nope_head_dim"], "the query/key width without rotary")?,
        qk_rope_head_dim: cfg.uint(&["qk_rope_head_dim"], "the rotary query/key width")?,
        v_head_dim: cfg.uint(&["v_head_dim"], "the value width per head")?,
    };
    let mut c = TransformerConfig::llama(name, layers, hidden, heads, heads, ffn, vocab, max_seq);
    c.head_dim = (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / 2;
    c.quirks.mla = Some(mla);
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(false);
    c.attn_bias = cfg.bool_opt("attention_bias")?.unwrap_or(false);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["attention_dropout"])?;
    Ok(c)
}

fn index_list(cfg: &Cfg, key: &str) -> Result<BTreeSet<u64>, InputError> {
    match cfg.get(key) {
        None => Ok(BTreeSet::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_u64())
            .collect::<Option<BTreeSet<_>>>()
            .ok_or_else(|| {
                cfg.located(
                    key,
                    InputError::new("expected a list of layer indices (whole numbers)"),
                )
            }),
        Some(v) => Err(cfg.type_error(key, "a list of layer indices", v)),
    }
}

fn check_top_k(cfg: &Cfg, moe: &MoeConfig, key: &str) -> Result<(), InputError> {
    if moe.top_k > moe.experts {
        return Err(cfg.located(
            key,
            InputError::new(format!(
                "{} experts per token, but only {} experts",
                moe.top_k, moe.experts
            )),
        ));
    }
    Ok(())
}

/// Blocks that are MoE where `is_moe` says and dense elsewhere (then `dense.ffn` must be set):
/// one shape, its dense blocks in `quirks.dense_layers`.
fn mixed_blocks(
    cfg: &Cfg,
    dense: TransformerConfig,
    moe: MoeConfig,
    is_moe: Box<dyn Fn(u64) -> bool>,
) -> Result<Model, InputError> {
    let mut sparse = dense.clone();
    sparse.moe = Some(moe);
    if (0..dense.layers).all(&is_moe) {
        return build(&sparse);
    }
    if dense.ffn == 0 {
        return Err(cfg.located(
            "intermediate_size",
            InputError::new("missing `intermediate_size` (the FFN width of the dense layers)"),
        ));
    }
    sparse.quirks.dense_layers = (0..dense.layers).map(|i| !is_moe(i)).collect();
    build(&sparse)
}

/// DBRX: MoE of gated experts, bias-free LayerNorms and projections, its own field names.
fn dbrx(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let hidden = cfg.uint(&["d_model"], "the model width")?;
    let heads = cfg.uint(&["n_heads"], "the number of attention heads")?;
    let layers = cfg.uint(&["n_layers"], "the number of layers")?;
    let vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    let max_seq = cfg.uint_opt("max_seq_len")?.unwrap_or(2048);
    let attn = cfg.sub("attn_config")?;
    let kv = match &attn {
        Some(a) => a.uint_opt("kv_n_heads")?.unwrap_or(1),
        None => 1,
    };
    let head_dim = check_heads(cfg, hidden, heads, kv, None, "n_heads", "n_heads")?;
    let ffn_cfg = cfg.sub("ffn_config")?.ok_or_else(|| {
        InputError::new("missing `ffn_config` (the experts' shape)").field(cfg.path("ffn_config"))
    })?;
    let expert_ffn = ffn_cfg.uint(&["ffn_hidden_size"], "the FFN width of one expert")?;
    let moe = MoeConfig {
        experts: ffn_cfg.uint(&["moe_num_experts"], "the number of experts")?,
        top_k: ffn_cfg.uint(&["moe_top_k"], "experts per token")?,
        expert_ffn,
        shared_ffn: None,
    };
    check_top_k(&ffn_cfg, &moe, "moe_top_k")?;
    let mut c =
        TransformerConfig::llama(name, layers, hidden, heads, kv, expert_ffn, vocab, max_seq);
    c.head_dim = head_dim;
    c.norm = NormKind::LayerNorm;
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(false);
    c.attn_impl = cfg.attn_impl()?;
    c.moe = Some(moe);
    build(&c)
}

/// The GPT line's names for (width, depth, heads): the original and the current ones.
const GPT_KEYS: [&[&str]; 3] = [
    &["n_embd", "hidden_size"],
    &["n_layer", "num_hidden_layers"],
    &["n_head", "num_attention_heads"],
];

/// The current names alone (GPT-NeoX, OPT).
const HF_KEYS: [&[&str]; 3] = [
    &["hidden_size"],
    &["num_hidden_layers"],
    &["num_attention_heads"],
];

/// A GPT-style shape (`TransformerConfig::gpt`) from the first present of each of `keys`
/// (width, depth, heads), its heads checked against the width, and its vocabulary.
fn gpt_base(
    cfg: &Cfg,
    name: &str,
    keys: [&[&str]; 3],
    max_seq: u64,
) -> Result<TransformerConfig, InputError> {
    let hidden = cfg.uint(keys[0], "the model width")?;
    let layers = cfg.uint(keys[1], "the number of layers")?;
    let heads = cfg.uint(keys[2], "the number of attention heads")?;
    let heads_key = (keys[2].iter())
        .find(|k| cfg.get(k).is_some())
        .unwrap_or(&keys[2][0]);
    check_heads(cfg, hidden, heads, heads, None, heads_key, heads_key)?;
    let mut c = TransformerConfig::gpt(name, layers, hidden, heads, max_seq);
    c.vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    Ok(c)
}

/// GPT-J and CodeGen: attention and MLP side by side from one LayerNorm, bias-free attention
/// projections, an MLP and LM head with biases, rotary, untied.
fn gptj(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg.uint_any(&["n_positions", "n_ctx"])?.unwrap_or(2048);
    let mut c = gpt_base(cfg, name, GPT_KEYS, max_seq)?;
    c.ffn = cfg.uint_opt("n_inner")?.unwrap_or(4 * c.hidden);
    c.position = PositionKind::Rotary;
    c.attn_bias = false;
    c.parallel_attn = true;
    c.shared_norm = true;
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(false);
    c.quirks.lm_head_bias = true;
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["resid_pdrop", "embd_pdrop", "attn_pdrop"])?;
    build(&c)
}

/// GPT-Neo: GPT-2's block with bias-free q/k/v (the output projection has one), and local
/// attention over `window_size` tokens in the layers `attention_types` marks `local`.
fn gpt_neo(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg.uint_opt("max_position_embeddings")?.unwrap_or(2048);
    let keys: [&[&str]; 3] = [&["hidden_size"], &["num_layers"], &["num_heads"]];
    let mut c = gpt_base(cfg, name, keys, max_seq)?;
    let layers = c.layers;
    c.ffn = cfg.uint_opt("intermediate_size")?.unwrap_or(4 * c.hidden);
    c.attn_bias = false;
    c.quirks.proj_bias = Some(true);
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["resid_dropout", "embed_dropout", "attention_dropout"])?;
    // attention_types: [[["global", "local"], 12]] — a pattern repeated n times.
    let mut kinds = Vec::new();
    if let Some(Value::Array(groups)) = cfg.get("attention_types") {
        for g in groups {
            let bad = || {
                cfg.located(
                    "attention_types",
                    InputError::new("expected [[[\"global\", \"local\"], n], ...]"),
                )
            };
            let Some([Value::Array(pattern), n]) = g.as_array().map(|a| a.as_slice()) else {
                return Err(bad());
            };
            let n = n.as_u64().ok_or_else(bad)?.min(LIMITS.layers);
            for _ in 0..n {
                for p in pattern {
                    kinds.push(p.as_str().ok_or_else(bad)? == "local");
                }
            }
        }
    }
    if kinds.iter().any(|&l| l) {
        kinds.resize(layers as usize, false);
        c.quirks.window = Some(cfg.uint_opt("window_size")?.unwrap_or(256));
        c.quirks.local_layers = kinds;
    }
    build(&c)
}

/// GPT-BigCode (SantaCoder, StarCoder): GPT-2 with multi-query attention (`multi_query`).
fn gpt_bigcode(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg
        .uint_any(&["n_positions", "max_position_embeddings"])?
        .unwrap_or(1024);
    let mut c = gpt_base(cfg, name, GPT_KEYS, max_seq)?;
    let (hidden, heads) = (c.hidden, c.heads);
    // One key/value head divides any head count.
    let kv = if cfg.bool_opt("multi_query")?.unwrap_or(true) {
        1
    } else {
        heads
    };
    c.kv_heads = kv;
    c.vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    c.ffn = cfg.uint_opt("n_inner")?.unwrap_or(4 * hidden);
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["resid_pdrop", "embd_pdrop", "attn_pdrop"])?;
    build(&c)
}

/// BLOOM: ALiBi, a LayerNorm after the word embeddings, biases everywhere, tied.
fn bloom(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let keys: [&[&str]; 3] = [&["hidden_size", "n_embed"], GPT_KEYS[1], GPT_KEYS[2]];
    let mut c = gpt_base(cfg, name, keys, 2048)?;
    c.position = PositionKind::Alibi;
    c.quirks.embed_norm = true;
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["hidden_dropout", "attention_dropout"])?;
    build(&c)
}

/// OPT: learned positions with two extra rows, a ReLU MLP of `ffn_dim`, biases per
/// `enable_bias`, a final LayerNorm only with `do_layer_norm_before`, and projections in and
/// out when `word_embed_proj_dim` differs from the width (OPT-350m); tied.
fn opt(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg.uint_opt("max_position_embeddings")?.unwrap_or(2048);
    let mut c = gpt_base(cfg, name, HF_KEYS, max_seq)?;
    let hidden = c.hidden;
    c.ffn = cfg.uint(&["ffn_dim"], "the FFN width")?;
    let bias = cfg.bool_opt("enable_bias")?.unwrap_or(true);
    c.attn_bias = bias;
    c.mlp_bias = bias;
    // `layer_norm_elementwise_affine: false`: LayerNorms without weight or bias.
    c.quirks.norm_affine = cfg
        .bool_opt("layer_norm_elementwise_affine")?
        .unwrap_or(true);
    c.quirks.position_offset = 2;
    c.quirks.final_norm = cfg.bool_opt("do_layer_norm_before")?.unwrap_or(true);
    let e = cfg.uint_opt("word_embed_proj_dim")?.unwrap_or(hidden);
    if e != hidden {
        c.quirks.embed_dim = Some(e);
    }
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["dropout", "attention_dropout"])?;
    build(&c)
}

/// GPT-2: learned positions, GeLU MLP of `n_inner` (4h), biases, LayerNorm, tied.
fn gpt2(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg.uint_any(&["n_positions", "n_ctx"])?.unwrap_or(1024);
    let mut c = gpt_base(cfg, name, GPT_KEYS, max_seq)?;
    c.ffn = cfg.uint_opt("n_inner")?.unwrap_or(4 * c.hidden);
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["resid_pdrop", "embd_pdrop", "attn_pdrop"])?;
    build(&c)
}

/// GPT-NeoX (Pythia, GPT-NeoX-20B): rotary on `rotary_pct` of each head (no parameters either
/// way), biases, LayerNorm, attention and MLP side by side with their own norms when
/// `use_parallel_residual`, untied.
fn gpt_neox(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let max_seq = cfg.uint_opt("max_position_embeddings")?.unwrap_or(2048);
    let mut c = gpt_base(cfg, name, HF_KEYS, max_seq)?;
    c.ffn = cfg.uint(&["intermediate_size"], "the FFN width")?;
    c.position = PositionKind::Rotary;
    let _rotary_pct = cfg.float_opt("rotary_pct")?;
    let bias = cfg.bool_opt("attention_bias")?.unwrap_or(true);
    c.attn_bias = bias;
    c.parallel_attn = cfg.bool_opt("use_parallel_residual")?.unwrap_or(true);
    c.shared_norm = false;
    c.tied_embeddings = cfg.bool_opt("tie_word_embeddings")?.unwrap_or(false);
    c.attn_impl = cfg.attn_impl()?;
    c.dropout = cfg.dropout(&["hidden_dropout", "attention_dropout"])?;
    build(&c)
}

/// Falcon: rotary (or ALiBi), GeLU MLP of `ffn_hidden_size` (4h), LayerNorm with bias, linear
/// biases per `bias`, tied. Attention heads: `num_kv_heads` KV heads with the new decoder
/// architecture (Falcon-40B/180B; parallel attention with two norms unless
/// `num_ln_in_parallel_attn` is 1), else one KV head when `multi_query` (Falcon-7B; parallel
/// attention with one shared norm when `parallel_attn`).
fn falcon(cfg: &Cfg, name: &str, refinedweb: bool) -> Result<Model, InputError> {
    let hidden = cfg.uint(&["hidden_size", "n_embed"], "the model width")?;
    let layers = cfg.uint(&["num_hidden_layers", "n_layer"], "the number of layers")?;
    let heads_key = if cfg.get("num_attention_heads").is_some() {
        "num_attention_heads"
    } else {
        "n_head"
    };
    let heads = cfg.uint(
        &["num_attention_heads", "n_head"],
        "the number of attention heads",
    )?;
    let vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    let new_arch = cfg
        .bool_opt("new_decoder_architecture")?
        .unwrap_or(refinedweb);
    let multi_query = cfg.bool_opt("multi_query")?.unwrap_or(true);
    let parallel = cfg.bool_opt("parallel_attn")?.unwrap_or(true);
    let kv_key = if cfg.get("num_kv_heads").is_some() {
        "num_kv_heads"
    } else {
        "n_head_kv"
    };
    let kv = if new_arch {
        cfg.uint_any(&["num_kv_heads", "n_head_kv"])?
            .unwrap_or(heads)
    } else if multi_query {
        1
    } else {
        heads
    };
    let head_dim = check_heads(cfg, hidden, heads, kv, None, heads_key, kv_key)?;
    let bias = cfg.bool_opt("bias")?.unwrap_or(false);
    let (parallel_attn, shared_norm) = if new_arch {
        (
            true,
            cfg.uint_opt("num_ln_in_parallel_attn")?.unwrap_or(2) == 1,
        )
    } else {
        (parallel, parallel)
    };
    let c = TransformerConfig {
        name: name.to_string(),
        hidden,
        layers,
        heads,
        kv_heads: kv,
        head_dim,
        ffn: cfg.uint_opt("ffn_hidden_size")?.unwrap_or(4 * hidden),
        mlp: MlpKind::Gelu,
        norm: NormKind::LayerNorm,
        position: if cfg.bool_opt("alibi")?.unwrap_or(false) {
            PositionKind::Alibi
        } else {
            PositionKind::Rotary
        },
        vocab,
        max_seq_len: cfg.uint_opt("max_position_embeddings")?.unwrap_or(2048),
        attn_bias: bias,
        mlp_bias: bias,
        norm_bias: true,
        tied_embeddings: cfg.bool_opt("tie_word_embeddings")?.unwrap_or(true),
        parallel_attn,
        shared_norm,
        causal: true,
        attn_impl: cfg.attn_impl()?,
        fused_loss: false,
        fused_norm: false,
        dropout: cfg.dropout(&["hidden_dropout", "attention_dropout"])?,
        moe: None,
        quirks: Default::default(),
    };
    build(&c)
}

/// MPT (llm-foundry): d_model/n_heads/n_layers, FFN `expansion_ratio`·d_model with GeLU,
/// LayerNorm (RMSNorm for the rmsnorm norm types), biases on linears and norms unless `no_bias`
/// (default true, as in `transformers`' MptConfig), learned positions unless
/// `attn_config.alibi`, tied, the attention kernel of `attn_config.attn_impl` (torch when absent).
fn mpt(cfg: &Cfg, name: &str) -> Result<Model, InputError> {
    let hidden = cfg.uint(&["d_model"], "the model width")?;
    let heads = cfg.uint(&["n_heads"], "the number of attention heads")?;
    let layers = cfg.uint(&["n_layers"], "the number of layers")?;
    let vocab = cfg.uint(&["vocab_size"], "the vocabulary size")?;
    let ratio = match cfg.float_opt("expansion_ratio")? {
        None => 4.0,
        Some(r) if r > 0.0 && r.is_finite() => r,
        Some(r) => {
            return Err(cfg.located(
                "expansion_ratio",
                InputError::new(format!("must be positive, found {r}")),
            ))
        }
    };
    let mut c = TransformerConfig::gpt(name, layers, hidden, heads, 2048);
    c.max_seq_len = cfg.uint_opt("max_seq_len")?.unwrap_or(2048);
    c.vocab = vocab;
    let ffn = (ratio * hidden as f64).round();
    if !(1.0..=LIMITS.ffn as f64).contains(&ffn) {
        return Err(cfg.located(
            "expansion_ratio",
            InputError::new(format!(
                "expansion_ratio {} × d_model {hidden} gives an FFN width of {}, outside the \
                 1..={} hetplan accepts",
                parse::show_f64(ratio),
                parse::show_f64(ffn),
                LIMITS.ffn
            )),
        ));
    }
    c.ffn = ffn as u64;
    let no_bias = cfg.bool_opt("no_bias")?.unwrap_or(true);
    c.attn_bias = !no_bias;
    c.mlp_bias = !no_bias;
    c.norm_bias = !no_bias;
    if let Some(n) = cfg.str_opt("norm_type")? {
        if n.contains("rmsnorm") {
            c.norm = NormKind::RmsNorm;
            c.norm_bias = false;
        }
    }
    c.tied_embeddings = true;
    c.attn_impl = AttnImpl::Torch;
    let mut kv = heads;
    let mut dropout = cfg.dropout(&["resid_pdrop", "emb_pdrop"])?;
    if let Some(a) = cfg.sub("attn_config")? {
        if let Some(imp) = a.str_opt("attn_impl")? {
            c.attn_impl = match imp {
                "flash" => AttnImpl::Flash,
                "triton" => AttnImpl::Triton,
                "torch" => AttnImpl::Torch,
                other => {
                    let hint = names::nearest(other, ["flash", "triton", "torch"]);
                    return Err(a.located(
                        "attn_impl",
                        InputError::new(format!(
                            "unknown attn_impl `{other}`; expected `flash`, `triton` or `torch`"
                        ))
                        .hint(did_you_mean(hint)),
                    ));
                }
            };
        }
        if a.bool_opt("alibi")?.unwrap_or(false) {
            c.position = PositionKind::Alibi;
        }
        match a.str_opt("attn_type")? {
            Some("multiquery_attention") => kv = 1,
            Some("grouped_query_attention") => {
                kv = a.uint(&["kv_n_heads"], "the number of key/value heads")?;
            }
            _ => {}
        }
        dropout |= a.dropout(&["attn_pdrop"])?;
    }
    c.kv_heads = kv;
    c.head_dim = check_heads(cfg, hidden, heads, kv, None, "n_heads", "n_heads")?;
    c.dropout = dropout;
    build(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(src: &str) -> f64 {
        parse_hf_config(src, "").unwrap().params() as f64
    }

    fn assert_close(got: f64, want: f64, tol: f64) {
        assert!((got - want).abs() / want <= tol, "{got:.6e} vs {want:.6e}");
    }

    const LLAMA2_7B: &str = r#"{
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "vocab_size": 32000
}"#;

    #[test]
    fn llama2_7b() {
        let m = parse_hf_config(LLAMA2_7B, "").unwrap();
        assert_eq!(m.name, "meta-llama/Llama-2-7b-hf");
        assert_eq!(m.params(), 6_738_415_616);
        let t = m.transformer.as_ref().unwrap();
        assert_eq!(
            (t.mlp, t.norm, t.max_seq_len),
            (MlpKind::SwiGlu, NormKind::RmsNorm, 4096)
        );
        assert_eq!(
            parse_hf_config(LLAMA2_7B, "my-llama").unwrap().name,
            "my-llama"
        );
    }

    #[test]
    fn mistral_7b() {
        let src = r#"{"architectures": ["MistralForCausalLM"], "hidden_act": "silu",
          "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
          "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
          "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
          "sliding_window": 4096, "tie_word_embeddings": false, "vocab_size": 32000}"#;
        assert_eq!(params(src) as u64, 7_241_732_096);
    }

    #[test]
    fn mixtral_8x7b() {
        let src = r#"{"architectures": ["MixtralForCausalLM"], "hidden_act": "silu",
          "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
          "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
          "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
          "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
          "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
          "vocab_size": 32000}"#;
        let m = parse_hf_config(src, "").unwrap();
        assert_eq!(m.params(), 46_702_792_704);
        assert_close(m.active_params() as f64, 12.88e9, 0.003);
    }

    #[test]
    fn qwen2_0_5b() {
        // Qwen/Qwen2-0.5B: 494,032,768 parameters (q/k/v biases, tied embeddings).
        let src = r#"{"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
          "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
          "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
          "max_position_embeddings": 131072, "max_window_layers": 24, "model_type": "qwen2",
          "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
          "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
          "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
          "use_sliding_window": false, "vocab_size": 151936}"#;
        assert_eq!(params(src) as u64, 494_032_768);
    }

    #[test]
    fn qwen15_moe_a27b() {
        // Qwen/Qwen1.5-MoE-A2.7B: 14.3B parameters, 2.7B activated.
        let src = r#"{"architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1,
          "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
          "max_position_embeddings": 8192, "model_type": "qwen2_moe",
          "moe_intermediate_size": 1408, "norm_topk_prob": false, "num_attention_heads": 16,
          "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
          "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
          "shared_expert_intermediate_size": 5632, "tie_word_embeddings": false,
          "vocab_size": 151936}"#;
        let m = parse_hf_config(src, "").unwrap();
        assert_close(m.params() as f64, 14.3e9, 0.005);
        assert_close(m.active_params() as f64, 2.7e9, 0.01);
        assert!(m.transformer.is_some());
        // Every other layer dense: one shape, its dense blocks marked.
        let src2 = src.replace("\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2");
        let m2 = parse_hf_config(&src2, "").unwrap();
        let t = m2.transformer.as_ref().unwrap();
        assert!(t.is_dense_block(0) && !t.is_dense_block(1));
        assert_eq!(m2.layers.len(), 26);
        assert!(m2.layers[1].ops.iter().all(|o| o.name != "router"));
        assert!(m2.layers[2].ops.iter().any(|o| o.name == "router"));
    }

    #[test]
    fn gpt2_small() {
        let src = r#"{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
          "attn_pdrop": 0.1, "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
          "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": null,
          "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}"#;
        let m = parse_hf_config(src, "gpt2").unwrap();
        assert_eq!(m.params(), 124_439_808);
        assert!(m.transformer.as_ref().unwrap().dropout);
    }

    #[test]
    fn pythia_160m() {
        let src = r#"{"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0,
          "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": 768,
          "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
          "max_position_embeddings": 2048, "model_type": "gpt_neox",
          "num_attention_heads": 12, "num_hidden_layers": 12, "rotary_emb_base": 10000,
          "rotary_pct": 0.25, "tie_word_embeddings": false, "use_cache": true,
          "use_parallel_residual": true, "vocab_size": 50304}"#;
        let m = parse_hf_config(src, "").unwrap();
        assert_eq!(m.params(), 162_322_944);
        let t = m.transformer.as_ref().unwrap();
        assert!(t.parallel_attn && !t.shared_norm);
    }

    #[test]
    fn falcon_7b_and_40b() {
        let src = r#"{"alibi": false, "apply_residual_connection_post_layernorm": false,
          "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "bias": false,
          "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": 4544,
          "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
          "multi_query": true, "new_decoder_architecture": false, "num_attention_heads": 71,
          "num_hidden_layers": 32, "parallel_attn": true, "vocab_size": 65024}"#;
        let m = parse_hf_config(src, "falcon-7b").unwrap();
        assert_close(m.params() as f64, 6.92e9, 0.002);
        let t = m.transformer.as_ref().unwrap();
        assert_eq!((t.kv_heads, t.head_dim), (1, 64));
        assert!(t.parallel_attn && t.shared_norm);
        // The original Falcon-40B config (RefinedWeb, n_* names), its lm_head untied.
        let src = r#"{"alibi": false, "architectures": ["RWForCausalLM"], "bias": false,
          "hidden_size": 8192, "model_type": "RefinedWeb", "n_head": 128, "n_head_kv": 8,
          "n_layer": 60, "parallel_attn": true, "tie_word_embeddings": false,
          "vocab_size": 65024}"#;
        let m = parse_hf_config(src, "falcon-40b").unwrap();
        assert_close(m.params() as f64, 41.8e9, 0.003);
        let t = m.transformer.as_ref().unwrap();
        assert!(t.parallel_attn && !t.shared_norm && t.kv_heads == 8);
    }

    #[test]
    fn mpt_7b() {
        // mosaicml/mpt-7b: 6,649,286,656 parameters (ALiBi, no biases, vocab 50432).
        let src = r#"{"architectures": ["MPTForCausalLM"], "attn_config": {"alibi": true,
          "alibi_bias_max": 8, "attn_impl": "triton", "attn_pdrop": 0, "attn_type":
          "multihead_attention", "attn_uses_sequence_id": false, "clip_qkv": null,
          "prefix_lm": false, "qk_ln": false, "softmax_scale": null}, "d_model": 4096,
          "emb_pdrop": 0, "embedding_fraction": 1.0, "expansion_ratio": 4, "init_device": "cpu",
          "learned_pos_emb": true, "logit_scale": null, "max_seq_len": 2048,
          "model_type": "mpt", "n_heads": 32, "n_layers": 32, "no_bias": true,
          "norm_type": "low_precision_layernorm", "resid_pdrop": 0, "tokenizer_name":
          "EleutherAI/gpt-neox-20b", "torch_dtype": "bfloat16", "use_cache": false,
          "verbose": 0, "vocab_size": 50432}"#;
        let m = parse_hf_config(src, "").unwrap();
        assert_eq!(m.params(), 6_649_286_656);
        let t = m.transformer.as_ref().unwrap();
        assert_eq!(
            (t.attn_impl, t.position),
            (AttnImpl::Triton, PositionKind::Alibi)
        );
        assert_eq!(m.name, "mpt");
        // Without ALiBi: a learned table of max_seq_len × d_model.
        let m2 = parse_hf_config(&src.replace("\"alibi\": true", "\"alibi\": false"), "").unwrap();
        assert_eq!(m2.params(), 6_649_286_656 + 2048 * 4096);
        let e = parse_hf_config(&src.replace("\"triton\"", "\"trition\""), "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("attn_config.attn_impl"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `triton`?"));
        assert_eq!(e.line, Some(2));
    }

    /// Regression: shapes a config can state overflowed u64 products in the transformer builder
    /// or aborted on allocation; every field is now read within `LIMITS`, with a located error.
    #[test]
    fn shapes_beyond_the_limits_are_located_errors() {
        let big = 1u64 << 32;
        let src = LLAMA2_7B
            .replace("\"hidden_size\": 4096", &format!("\"hidden_size\": {big}"))
            .replace("\"vocab_size\": 32000", &format!("\"vocab_size\": {big}"));
        let e = parse_hf_config(&src, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("hidden_size"));
        assert_eq!((e.line, e.column), (Some(6), Some(18)));
        assert!(e.message.contains("at most 1048576"), "{e}");
        assert!(e.hint.as_deref().unwrap().contains("LIMITS"), "{e}");

        let gpt2 = r#"{"model_type": "gpt2", "n_embd": 4611686018427387904, "n_head": 1,
          "n_layer": 1, "vocab_size": 10}"#;
        let e = parse_hf_config(gpt2, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("n_embd"));

        let mpt = r#"{"model_type": "mpt", "d_model": 64, "n_heads": 2, "n_layers": 1,
          "vocab_size": 10, "expansion_ratio": 1e300}"#;
        let e = parse_hf_config(mpt, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("expansion_ratio"));
        assert_eq!(e.line, Some(2));
        let e = parse_hf_config(&mpt.replace("1e300", "0.0001"), "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("expansion_ratio"));

        for (from, to, field) in [
            (
                "\"num_hidden_layers\": 32",
                "\"num_hidden_layers\": 1000000000000",
                "num_hidden_layers",
            ),
            (
                "\"num_attention_heads\": 32",
                "\"num_attention_heads\": 0",
                "num_attention_heads",
            ),
            (
                "\"num_key_value_heads\": 32",
                "\"num_key_value_heads\": 0",
                "num_key_value_heads",
            ),
            (
                "\"intermediate_size\": 11008",
                "\"intermediate_size\": 11008.5",
                "intermediate_size",
            ),
            (
                "\"intermediate_size\": 11008",
                "\"intermediate_size\": -11008",
                "intermediate_size",
            ),
            (
                "\"intermediate_size\": 11008",
                "\"intermediate_size\": 1e300",
                "intermediate_size",
            ),
            (
                "\"max_position_embeddings\": 4096",
                "\"max_position_embeddings\": 18446744073709551615",
                "max_position_embeddings",
            ),
            (
                "\"vocab_size\": 32000",
                "\"vocab_size\": 32000, \"attention_dropout\": 1.5",
                "attention_dropout",
            ),
        ] {
            let e = parse_hf_config(&LLAMA2_7B.replace(from, to), "").unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{to}: {e}");
            assert!(e.line.is_some(), "{to}: {e}");
        }
        // Heads that do not divide the width (no head_dim given).
        let src = LLAMA2_7B
            .replace("\"num_attention_heads\": 32", "\"num_attention_heads\": 3")
            .replace("\"num_key_value_heads\": 32", "\"num_key_value_heads\": 3");
        let e = parse_hf_config(&src, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("num_attention_heads"));
        // Within the limits, even at them, it builds.
        let at = LLAMA2_7B
            .replace("\"num_hidden_layers\": 32", "\"num_hidden_layers\": 2")
            .replace("\"vocab_size\": 32000", "\"vocab_size\": 16777216");
        assert!(parse_hf_config(&at, "").is_ok());
        // MoE: experts beyond the limit.
        let src = r#"{"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 64,
          "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 10,
          "num_local_experts": 1000000, "num_experts_per_tok": 2}"#;
        let e = parse_hf_config(src, "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("num_local_experts"));
    }

    #[test]
    fn text_config_is_used() {
        let src = format!("{{\"model_type\": \"llava\", \"text_config\": {LLAMA2_7B}}}");
        let m = parse_hf_config(&src, "llava").unwrap();
        assert_eq!(m.params(), 6_738_415_616);
        // A nested config without a shape field takes its class's default (older transformers
        // wrote it as a diff against them); a top-level one is an error.
        let missing = src.replace("\"hidden_size\": 4096,", "");
        assert_eq!(
            parse_hf_config(&missing, "").unwrap().params(),
            6_738_415_616
        );
        let e = parse_hf_config(&LLAMA2_7B.replace("\"hidden_size\": 4096,", ""), "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("hidden_size"));
        assert!(e.message.contains("missing `hidden_size`"), "{e}");
        // A nested config without its model_type is the wrapper's default text model.
        let untyped = src.replace("\"model_type\": \"llama\",", "");
        assert_ne!(untyped, src);
        assert_eq!(
            parse_hf_config(&untyped, "").unwrap().params(),
            6_738_415_616
        );
    }

    #[test]
    fn errors() {
        // Unknown model_type: the list and the nearest one.
        let e = parse_hf_config(&LLAMA2_7B.replace("\"llama\"", "\"lama\""), "").unwrap_err();
        assert!(e.message.contains("`qwen2_moe`"), "{e}");
        assert_eq!(e.hint.as_deref(), Some("did you mean `llama`?"));
        assert_eq!(e.field.as_deref(), Some("model_type"));
        assert_eq!(e.line, Some(10));
        // A missing required field is named.
        let e = parse_hf_config(&LLAMA2_7B.replace("\"vocab_size\": 32000", "\"x\": 1"), "")
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("vocab_size"));
        assert!(e.message.contains("missing"));
        // A wrong type is named and located.
        let e = parse_hf_config(
            &LLAMA2_7B.replace("\"hidden_size\": 4096", "\"hidden_size\": \"4096\""),
            "",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("hidden_size"));
        assert_eq!((e.line, e.column), (Some(6), Some(18)));
        // Syntax errors carry serde's line and column.
        let e = parse_hf_config(
            "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": ,\n}",
            "",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.column.is_some());
        // Inconsistent heads.
        let e = parse_hf_config(
            &LLAMA2_7B.replace("\"num_key_value_heads\": 32", "\"num_key_value_heads\": 5"),
            "",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("num_key_value_heads"));
        let e = parse_hf_config("{\"hidden_size\": 1}", "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("model_type"));
    }
}
