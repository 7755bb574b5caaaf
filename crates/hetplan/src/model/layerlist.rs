//! Layer-list files (TOML or JSON) for any model.
//!
//! A model the transformer builder cannot describe (a CNN, a model with unusual blocks) is given
//! as a list of layers, each known only by its totals **per sample**:
//!
//! ```toml
//! name = "resnet-50"
//! seq_len = 1                       # optional, informational
//!
//! [[layer]]
//! name = "stem"
//! kind = "embedding"                # optional: embedding | transformer | head | other
//! params = 9536
//! forward_flops = 2.4e8             # FLOP per sample (a number, or "0.24 GFLOP")
//! activation_bytes = "7.7 MiB"      # saved for backward per sample, 16-bit activations
//! output_bytes = "392 KiB"          # crosses a stage boundary, per sample
//! tp_comm_bytes = "392 KiB"         # optional: one all-reduce of this size in fwd and in bwd
//! count = 1                         # optional: repeat the layer
//! ```
//!
//! JSON has the same keys: `{"name": ..., "layer": [{...}, ...]}`. Each layer becomes one
//! [`OpKind::Opaque`] op whose parameters and saved tensors shard evenly under tensor
//! parallelism; the model has `per_sample = true`. Limits (`model::LIMITS`): at most 10¹⁵
//! parameters and 10²¹ FLOP per layer, 10¹⁸ bytes per size, 100 000 layers in all (`count`
//! included), `seq_len` up to 2²⁴.

use super::{Layer, LayerKind, Model, Op, OpKind, LIMITS};
use crate::error::InputError;
use crate::names;
use crate::names::did_you_mean;
use crate::parse::{self, Num};
use crate::units::{Bytes, UnitError, BYTES_EXPECTED};
use std::collections::{BTreeMap, HashMap};

const TOP_KEYS: &[&str] = &["name", "seq_len", "layer"];
const LAYER_KEYS: &[&str] = &[
    "name",
    "kind",
    "params",
    "forward_flops",
    "activation_bytes",
    "output_bytes",
    "tp_comm_bytes",
    "count",
];
/// The layer kinds by name, as layer-list files and profile databases write them.
pub const KINDS: &[&str] = &["embedding", "transformer", "head", "other"];

/// A layer kind by name (compared after `names::normalize`): the one reader of kind names,
/// shared with the profile database.
pub fn layer_kind(name: &str) -> Option<LayerKind> {
    match names::normalize(name).as_str() {
        "embedding" => Some(LayerKind::Embedding),
        "transformer" => Some(LayerKind::Transformer),
        "head" => Some(LayerKind::Head),
        "other" => Some(LayerKind::Other),
        _ => None,
    }
}

/// The name of a layer kind, as [`layer_kind`] reads it.
pub fn layer_kind_name(kind: LayerKind) -> &'static str {
    match kind {
        LayerKind::Embedding => KINDS[0],
        LayerKind::Transformer => KINDS[1],
        LayerKind::Head => KINDS[2],
        LayerKind::Other => KINDS[3],
    }
}

/// One layer known by its per-sample totals, as one opaque op that shards evenly under TP.
/// `tp_comm_bytes` > 0 adds one all-reduce of that size in forward and one in backward.
pub(crate) fn opaque_layer(
    name: &str,
    kind: LayerKind,
    params: u64,
    forward_flops: f64,
    activation_bytes: f64,
    output_bytes: f64,
    tp_comm_bytes: f64,
) -> Layer {
    let tp = if tp_comm_bytes > 0.0 { 1 } else { 0 };
    Layer {
        name: name.to_string(),
        kind,
        ops: vec![Op {
            name: name.to_string(),
            kind: OpKind::Opaque {
                flops_per_sample: forward_flops,
            },
            params,
            params_sharded: true,
            tied: false,
            saved_bytes_per_token: activation_bytes,
            saved_sharded: true,
        }],
        output_bytes_per_token: output_bytes,
        tp_allreduces_fwd: tp,
        tp_allreduces_bwd: tp,
        tp_comm_bytes_per_token: tp_comm_bytes,
    }
}

/// Reads a layer-list file: TOML, or JSON when `is_json`.
pub fn parse_layer_list(src: &str, is_json: bool) -> Result<Model, InputError> {
    let doc = if is_json {
        read_json(src)?
    } else {
        read_toml(src)?
    };
    build(src, doc)
}

// ---------------------------------------------------------------------------------------------
// A format-neutral view of the document: scalars with the byte offsets of their keys and values.

#[derive(Debug, Clone)]
enum Scalar {
    Int(i64),
    Float(f64),
    Str(String),
    /// Anything else, by what it is ("a boolean", "a table", ...).
    Other(&'static str),
}

#[derive(Debug, Clone)]
struct Entry {
    key: String,
    key_at: Option<usize>,
    value_at: Option<usize>,
    value: Scalar,
}

#[derive(Debug, Default)]
struct Table {
    at: Option<usize>,
    entries: Vec<Entry>,
}

impl Table {
    fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

#[derive(Debug, Default)]
struct Doc {
    top: Table,
    /// `None`: no `layer` key at all.
    layers: Option<Vec<Table>>,
    layers_at: Option<usize>,
    /// `layer` is present but not a list of tables: what it is instead.
    layers_wrong_type: Option<&'static str>,
}

fn located(src: &str, e: InputError, at: Option<usize>) -> InputError {
    match at {
        Some(o) => e.at_offset(src, o),
        None => e,
    }
}

// --- TOML ------------------------------------------------------------------------------------

fn toml_scalar(v: &toml::Value) -> Scalar {
    match v {
        toml::Value::Integer(i) => Scalar::Int(*i),
        toml::Value::Float(f) => Scalar::Float(*f),
        toml::Value::String(s) => Scalar::Str(s.clone()),
        toml::Value::Boolean(_) => Scalar::Other("a boolean"),
        toml::Value::Datetime(_) => Scalar::Other("a date"),
        toml::Value::Array(_) => Scalar::Other("an array"),
        toml::Value::Table(_) => Scalar::Other("a table"),
    }
}

type SpannedMap = BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;

fn toml_table(map: &SpannedMap, at: Option<usize>) -> Table {
    let mut entries: Vec<Entry> = map
        .iter()
        .map(|(k, v)| Entry {
            key: k.get_ref().clone(),
            key_at: Some(k.span().start),
            value_at: Some(v.span().start),
            value: toml_scalar(v.get_ref()),
        })
        .collect();
    entries.sort_by_key(|e| e.key_at);
    Table { at, entries }
}

#[derive(serde::Deserialize)]
struct TomlLayers {
    #[serde(default)]
    layer: Option<toml::Spanned<Vec<toml::Spanned<SpannedMap>>>>,
}

fn read_toml(src: &str) -> Result<Doc, InputError> {
    let top: SpannedMap = toml::from_str(src).map_err(|e| InputError::from_toml(src, &e))?;
    let mut doc = Doc::default();
    let mut top_table = toml_table(&top, Some(0));
    top_table.entries.retain(|e| e.key != "layer");
    doc.top = top_table;
    if let Some((k, v)) = top.iter().find(|(k, _)| k.get_ref() == "layer") {
        doc.layers_at = Some(k.span().start);
        match v.get_ref() {
            toml::Value::Array(items) if items.iter().all(|i| i.is_table()) => {
                let layers: TomlLayers =
                    toml::from_str(src).map_err(|e| InputError::from_toml(src, &e))?;
                let list = layers.layer.map(|l| l.into_inner()).unwrap_or_default();
                doc.layers = Some(
                    list.iter()
                        .map(|t| toml_table(t.get_ref(), Some(t.span().start)))
                        .collect(),
                );
            }
            other => doc.layers_wrong_type = Some(scalar_kind(&toml_scalar(other))),
        }
    }
    Ok(doc)
}

// --- JSON ------------------------------------------------------------------------------------

fn json_scalar(v: &serde_json::Value) -> Scalar {
    match v {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Scalar::Int(i),
            None => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Scalar::Str(s.clone()),
        serde_json::Value::Bool(_) => Scalar::Other("a boolean"),
        serde_json::Value::Null => Scalar::Other("null"),
        serde_json::Value::Array(_) => Scalar::Other("an array"),
        serde_json::Value::Object(_) => Scalar::Other("an object"),
    }
}

fn json_table(
    obj: &serde_json::Map<String, serde_json::Value>,
    path: &str,
    spans: &JsonSpans,
) -> Table {
    let child = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    let mut entries: Vec<Entry> = obj
        .iter()
        .map(|(k, v)| Entry {
            key: k.clone(),
            key_at: spans.keys.get(&child(k)).copied(),
            value_at: spans.values.get(&child(k)).copied(),
            value: json_scalar(v),
        })
        .collect();
    entries.sort_by_key(|e| e.key_at);
    Table {
        at: spans.values.get(path).copied(),
        entries,
    }
}

fn read_json(src: &str) -> Result<Doc, InputError> {
    let v: serde_json::Value = serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
    let spans = JsonSpans::index(src);
    let obj = match &v {
        serde_json::Value::Object(o) => o,
        other => {
            return Err(InputError::new(format!(
                "expected an object with `name` and `layer`, found {}",
                scalar_kind(&json_scalar(other))
            ))
            .at(1, 1))
        }
    };
    let mut doc = Doc {
        top: json_table(obj, "", &spans),
        ..Doc::default()
    };
    doc.top.entries.retain(|e| e.key != "layer");
    if let Some(l) = obj.get("layer") {
        doc.layers_at = spans.keys.get("layer").copied();
        match l {
            serde_json::Value::Array(items) if items.iter().all(|i| i.is_object()) => {
                doc.layers = Some(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| {
                            json_table(
                                item.as_object().expect("checked above"),
                                &format!("layer[{i}]"),
                                &spans,
                            )
                        })
                        .collect(),
                );
            }
            other => doc.layers_wrong_type = Some(scalar_kind(&json_scalar(other))),
        }
    }
    Ok(doc)
}

/// Byte offsets of the keys and values of a (valid) JSON text, by dotted path
/// (`layer[3].params`), since `serde_json::Value` forgets where things were.
#[derive(Debug, Default)]
pub(crate) struct JsonSpans {
    pub(crate) keys: HashMap<String, usize>,
    pub(crate) values: HashMap<String, usize>,
}

impl JsonSpans {
    /// Indexes `src`, which must already have parsed as JSON (the scanner trusts its syntax and
    /// stops quietly on anything unexpected).
    pub(crate) fn index(src: &str) -> JsonSpans {
        let mut s = JsonScanner {
            b: src.as_bytes(),
            i: 0,
            spans: JsonSpans::default(),
        };
        s.value(String::new(), 0);
        s.spans
    }
}

struct JsonScanner<'a> {
    b: &'a [u8],
    i: usize,
    spans: JsonSpans,
}

impl JsonScanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    /// Reads a string starting at the opening quote; returns its (unescaped where simple) text.
    fn string(&mut self) -> String {
        let mut out = Vec::new();
        self.i += 1;
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    if let Some(e) = self.peek() {
                        self.i += 1;
                        match e {
                            b'n' => out.push(b'\n'),
                            b't' => out.push(b'\t'),
                            b'r' => out.push(b'\r'),
                            b'u' => {
                                // Keep \uXXXX escapes verbatim: keys with them are not ours.
                                out.extend_from_slice(b"\\u");
                            }
                            other => out.push(other),
                        }
                    }
                }
                other => out.push(other),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    fn value(&mut self, path: String, depth: usize) {
        self.ws();
        if depth > 256 {
            return;
        }
        self.spans.values.insert(path.clone(), self.i);
        match self.peek() {
            Some(b'{') => {
                self.i += 1;
                loop {
                    self.ws();
                    match self.peek() {
                        Some(b'"') => {
                            let key_at = self.i;
                            let key = self.string();
                            let child = if path.is_empty() {
                                key
                            } else {
                                format!("{path}.{key}")
                            };
                            self.spans.keys.insert(child.clone(), key_at);
                            self.ws();
                            if self.peek() == Some(b':') {
                                self.i += 1;
                            }
                            self.value(child, depth + 1);
                            self.ws();
                            if self.peek() == Some(b',') {
                                self.i += 1;
                            }
                        }
                        Some(b'}') => {
                            self.i += 1;
                            return;
                        }
                        _ => return,
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut n = 0;
                loop {
                    self.ws();
                    match self.peek() {
                        Some(b']') => {
                            self.i += 1;
                            return;
                        }
                        None => return,
                        _ => {
                            self.value(format!("{path}[{n}]"), depth + 1);
                            n += 1;
                            self.ws();
                            if self.peek() == Some(b',') {
                                self.i += 1;
                            }
                        }
                    }
                }
            }
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while let Some(c) = self.peek() {
                    if c == b',' || c == b'}' || c == b']' || c.is_ascii_whitespace() {
                        break;
                    }
                    self.i += 1;
                }
            }
            None => {}
        }
    }
}

// --- Validation --------------------------------------------------------------------------------

fn scalar_kind(s: &Scalar) -> &'static str {
    match s {
        Scalar::Int(_) => "an integer",
        Scalar::Float(_) => "a number",
        Scalar::Str(_) => "a string",
        Scalar::Other(k) => k,
    }
}

fn unknown_key(src: &str, path: &str, e: &Entry, known: &[&str]) -> InputError {
    let hint = names::nearest(&e.key, known.iter().copied());
    let list = known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    located(
        src,
        InputError::new(format!("unknown key `{}`; expected one of {list}", e.key))
            .field(path.to_string())
            .hint(did_you_mean(hint)),
        e.key_at.or(e.value_at),
    )
}

fn wrong(src: &str, path: &str, e: &Entry, expected: &str) -> InputError {
    located(
        src,
        InputError::new(format!(
            "expected {expected}, found {}",
            scalar_kind(&e.value)
        ))
        .field(path.to_string()),
        e.value_at,
    )
}

/// A whole number in `min..=max` (JSON writes large ones as `1.5e9`: accepted when integral).
fn whole(
    src: &str,
    path: &str,
    e: &Entry,
    what: &str,
    min: u64,
    max: u64,
) -> Result<u64, InputError> {
    let n = match e.value {
        Scalar::Int(i) => Num::Int(i as i128),
        Scalar::Float(f) => Num::Float(f),
        _ => return Err(wrong(src, path, e, what)),
    };
    parse::whole(n, min, max).map_err(|err| {
        located(
            src,
            InputError::new(err.to_string()).field(path.to_string()),
            e.value_at,
        )
    })
}

/// A quantity read from the file, which must be at most `max` (model::LIMITS).
fn at_most(src: &str, path: &str, e: &Entry, v: f64, max: f64) -> Result<f64, InputError> {
    if v <= max {
        return Ok(v);
    }
    Err(located(
        src,
        InputError::new(format!(
            "{} is more than the {} hetplan accepts per sample",
            parse::show_f64(v),
            parse::show_f64(max)
        ))
        .field(path.to_string())
        .hint(Some("the limits are `model::LIMITS`".into())),
        e.value_at,
    ))
}

/// A size with its unit; a zero of any byte unit ("0 B") is accepted.
fn bytes(src: &str, path: &str, e: &Entry) -> Result<f64, InputError> {
    let text = match &e.value {
        Scalar::Str(s) => s,
        Scalar::Int(_) | Scalar::Float(_) => {
            return Err(located(
                src,
                InputError::new(format!("a bare number has no unit; write {BYTES_EXPECTED}"))
                    .field(path.to_string())
                    .hint(Some("e.g. \"12 MiB\"".to_string())),
                e.value_at,
            ))
        }
        Scalar::Other(_) => return Err(wrong(src, path, e, BYTES_EXPECTED)),
    };
    match text.parse::<Bytes>() {
        Ok(b) => at_most(src, path, e, b.get(), LIMITS.bytes_per_sample),
        Err(UnitError::NotPositive { .. }) if is_zero_bytes(text) => Ok(0.0),
        Err(err) => Err(located(
            src,
            InputError::new(err.to_string()).field(path.to_string()),
            e.value_at,
        )),
    }
}

fn is_zero_bytes(text: &str) -> bool {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    num.parse::<f64>() == Ok(0.0) && format!("1 {}", unit.trim()).parse::<Bytes>().is_ok()
}

/// FLOP per sample: a number, or a string with a FLOP unit ("4.1 GFLOP").
fn flops(src: &str, path: &str, e: &Entry) -> Result<f64, InputError> {
    const EXPECTED: &str =
        "a number of FLOP per sample, e.g. 4.1e9, or a string with its unit, e.g. \"4.1 GFLOP\"";
    let v = match &e.value {
        Scalar::Int(i) => *i as f64,
        Scalar::Float(f) => *f,
        Scalar::Str(s) => match parse_flop(s) {
            Some(v) => v,
            None => {
                return Err(located(
                    src,
                    InputError::new(format!("cannot read `{s}`; write {EXPECTED}"))
                        .field(path.to_string()),
                    e.value_at,
                ))
            }
        },
        Scalar::Other(_) => return Err(wrong(src, path, e, EXPECTED)),
    };
    if !(v.is_finite() && v >= 0.0) {
        return Err(located(
            src,
            InputError::new(format!(
                "must be finite and not negative, found {}",
                parse::show_f64(v)
            ))
            .field(path.to_string()),
            e.value_at,
        ));
    }
    at_most(src, path, e, v, LIMITS.flops_per_sample)
}

fn parse_flop(s: &str) -> Option<f64> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')?;
    let (num, unit) = t.split_at(split);
    let v: f64 = num.trim().replace('_', "").parse().ok()?;
    let prefix = unit
        .trim()
        .strip_suffix("FLOPs")
        .or_else(|| unit.trim().strip_suffix("FLOP"))
        .or_else(|| unit.trim().strip_suffix("flop"))?;
    let m = match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return None,
    };
    Some(v * m)
}

fn required<'a>(
    src: &str,
    t: &'a Table,
    path: &str,
    key: &str,
    what: &str,
) -> Result<&'a Entry, InputError> {
    t.get(key).ok_or_else(|| {
        located(
            src,
            InputError::new(format!("missing `{key}` ({what})")).field(format!("{path}.{key}")),
            t.at,
        )
    })
}

fn build(src: &str, doc: Doc) -> Result<Model, InputError> {
    // Top level.
    for e in &doc.top.entries {
        if !TOP_KEYS.contains(&e.key.as_str()) {
            return Err(unknown_key(src, &e.key, e, TOP_KEYS));
        }
    }
    let name = match doc.top.get("name") {
        Some(e) => match &e.value {
            Scalar::Str(s) if !s.trim().is_empty() => s.trim().to_string(),
            Scalar::Str(_) => {
                return Err(located(
                    src,
                    InputError::new("the model name is empty").field("name"),
                    e.value_at,
                ))
            }
            _ => return Err(wrong(src, "name", e, "a string")),
        },
        None => {
            return Err(InputError::new("missing `name` (the model's name)")
                .field("name")
                .at(1, 1))
        }
    };
    let seq_len = match doc.top.get("seq_len") {
        Some(e) => whole(src, "seq_len", e, "a whole number of tokens", 1, LIMITS.seq)?,
        None => 1,
    };
    if let Some(kind) = doc.layers_wrong_type {
        return Err(located(
            src,
            InputError::new(format!(
                "expected a list of layer tables (`[[layer]]` in TOML, an array of objects in \
                 JSON), found {kind}"
            ))
            .field("layer"),
            doc.layers_at,
        ));
    }
    let tables = match doc.layers {
        Some(l) if !l.is_empty() => l,
        _ => {
            return Err(located(
                src,
                InputError::new("the model has no layers; add `[[layer]]` entries").field("layer"),
                doc.layers_at,
            ))
        }
    };

    let mut layers = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let path = format!("layer[{i}]");
        let p = |k: &str| format!("{path}.{k}");
        for e in &t.entries {
            if !LAYER_KEYS.contains(&e.key.as_str()) {
                return Err(unknown_key(src, &p(&e.key), e, LAYER_KEYS));
            }
        }
        let e = required(src, t, &path, "name", "the layer's name")?;
        let lname = match &e.value {
            Scalar::Str(s) if !s.trim().is_empty() => s.trim().to_string(),
            Scalar::Str(_) => {
                return Err(located(
                    src,
                    InputError::new("the layer name is empty").field(p("name")),
                    e.value_at,
                ))
            }
            _ => return Err(wrong(src, &p("name"), e, "a string")),
        };
        let kind = match t.get("kind") {
            None => LayerKind::Other,
            Some(e) => match &e.value {
                Scalar::Str(s) => match layer_kind(s) {
                    Some(k) => k,
                    None => {
                        let hint = names::nearest(s, KINDS.iter().copied());
                        return Err(located(
                            src,
                            InputError::new(format!(
                                "unknown layer kind `{s}`; expected one of `embedding`, \
                                 `transformer`, `head`, `other`"
                            ))
                            .field(p("kind"))
                            .hint(did_you_mean(hint)),
                            e.value_at,
                        ));
                    }
                },
                _ => return Err(wrong(src, &p("kind"), e, "a string")),
            },
        };
        let e = required(src, t, &path, "params", "number of parameters")?;
        let params = whole(
            src,
            &p("params"),
            e,
            "a whole number of parameters",
            0,
            LIMITS.layer_params,
        )?;
        let e = required(src, t, &path, "forward_flops", "forward FLOP per sample")?;
        let fwd = flops(src, &p("forward_flops"), e)?;
        let e = required(
            src,
            t,
            &path,
            "activation_bytes",
            "bytes saved for backward per sample, e.g. \"12 MiB\"",
        )?;
        let act = bytes(src, &p("activation_bytes"), e)?;
        let e = required(
            src,
            t,
            &path,
            "output_bytes",
            "bytes of the layer's output per sample, e.g. \"1 MiB\"",
        )?;
        let out = bytes(src, &p("output_bytes"), e)?;
        let tp = match t.get("tp_comm_bytes") {
            Some(e) => bytes(src, &p("tp_comm_bytes"), e)?,
            None => 0.0,
        };
        let count_entry = t.get("count");
        let count = match count_entry {
            Some(e) => whole(
                src,
                &p("count"),
                e,
                "a whole number of copies",
                1,
                LIMITS.total_layers,
            )? as usize,
            None => 1,
        };
        // Every layer is allocated: the model as a whole stays within the layer limit.
        if (layers.len() + count) as u64 > LIMITS.total_layers {
            return Err(located(
                src,
                InputError::new(format!(
                    "{} layers in all, more than the {} hetplan accepts",
                    layers.len() + count,
                    LIMITS.total_layers
                ))
                .field(if count_entry.is_some() {
                    p("count")
                } else {
                    path.clone()
                }),
                count_entry.map_or(t.at, |e| e.value_at),
            ));
        }
        for c in 0..count {
            let n = if count > 1 {
                format!("{lname}.{c}")
            } else {
                lname.clone()
            };
            layers.push(opaque_layer(&n, kind, params, fwd, act, out, tp));
        }
    }

    Ok(Model {
        name,
        layers,
        transformer: None,
        default_seq_len: seq_len,
        per_sample: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML_SRC: &str = r#"
name = "tiny-cnn"
seq_len = 1

[[layer]]
name = "stem"
kind = "embedding"
params = 9536
forward_flops = 2.4e8
activation_bytes = "8 MiB"
output_bytes = "392 KiB"

[[layer]]
name = "block"
params = 70_000
forward_flops = "0.5 GFLOP"
activation_bytes = "4 MiB"
output_bytes = "392 KiB"
tp_comm_bytes = "196 KiB"
count = 3

[[layer]]
name = "fc"
kind = "head"
params = 2049000
forward_flops = 4098000
activation_bytes = "4 KiB"
output_bytes = "0 B"
"#;

    #[test]
    fn toml_layer_list() {
        let m = parse_layer_list(TOML_SRC, false).unwrap();
        assert_eq!(m.name, "tiny-cnn");
        assert!(m.per_sample);
        assert_eq!(m.layers.len(), 5);
        assert_eq!(m.layers[0].kind, LayerKind::Embedding);
        assert_eq!(m.layers[1].name, "block.0");
        assert_eq!(m.layers[3].name, "block.2");
        assert_eq!(m.layers[4].kind, LayerKind::Head);
        assert_eq!(m.params(), 9536 + 3 * 70_000 + 2_049_000);
        let b = &m.layers[2];
        assert_eq!(b.kind, LayerKind::Other);
        assert_eq!(b.ops.len(), 1);
        assert_eq!(
            b.ops[0].kind,
            OpKind::Opaque {
                flops_per_sample: 0.5e9
            }
        );
        assert!(b.ops[0].params_sharded && b.ops[0].saved_sharded);
        assert_eq!(b.ops[0].saved_bytes_per_token, 4.0 * 1024.0 * 1024.0);
        assert_eq!(b.output_bytes_per_token, 392.0 * 1024.0);
        assert_eq!((b.tp_allreduces_fwd, b.tp_allreduces_bwd), (1, 1));
        assert_eq!(b.tp_comm_bytes_per_token, 196.0 * 1024.0);
        assert_eq!(m.layers[0].tp_allreduces_fwd, 0);
        assert_eq!(m.layers[4].output_bytes_per_token, 0.0);
        assert_eq!(m.tokens_per_sample(2048), 1);
    }

    #[test]
    fn json_layer_list_matches_toml() {
        let src = r#"{
  "name": "tiny-cnn",
  "seq_len": 1,
  "layer": [
    {"name": "stem", "kind": "embedding", "params": 9536, "forward_flops": 2.4e8,
     "activation_bytes": "8 MiB", "output_bytes": "392 KiB"},
    {"name": "block", "params": 70000, "forward_flops": "0.5 GFLOP",
     "activation_bytes": "4 MiB", "output_bytes": "392 KiB", "tp_comm_bytes": "196 KiB",
     "count": 3},
    {"name": "fc", "kind": "head", "params": 2.049e6, "forward_flops": 4098000,
     "activation_bytes": "4 KiB", "output_bytes": "0 B"}
  ]
}"#;
        let j = parse_layer_list(src, true).unwrap();
        let t = parse_layer_list(TOML_SRC, false).unwrap();
        assert_eq!(j, t);
    }

    #[test]
    fn misspelled_layer_key_is_located_and_hinted() {
        let src = TOML_SRC.replace("forward_flops = 4098000", "forward_flop = 4098000");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[2].forward_flop"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `forward_flops`?"));
        let line = src
            .lines()
            .position(|l| l.starts_with("forward_flop ="))
            .unwrap()
            + 1;
        assert_eq!((e.line, e.column), (Some(line), Some(1)));
    }

    #[test]
    fn json_errors_name_the_field_and_position() {
        let src = "{\"name\": \"m\", \"layer\": [\n  {\"name\": \"a\", \"params\": 1, \"forward_flops\": 2,\n   \"activation_bytes\": 12, \"output_bytes\": \"1 KiB\"}\n]}";
        let e = parse_layer_list(src, true).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[0].activation_bytes"));
        assert!(e.message.contains("no unit"), "{e}");
        assert_eq!((e.line, e.column), (Some(3), Some(24)));

        let src = "{\"name\": \"m\", \"layer\": [{\"name\": \"a\", \"params\": 1}]}";
        let e = parse_layer_list(src, true).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[0].forward_flops"));
        assert!(e.message.contains("missing"), "{e}");
        assert_eq!((e.line, e.column), (Some(1), Some(25)));

        let e = parse_layer_list("{\"name\": \"m\",\n \"layer\": [}", true).unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn toml_errors() {
        // Syntax error: position from the TOML parser.
        let e = parse_layer_list("name = \"x\"\n[[layer]\n", false).unwrap_err();
        assert_eq!(e.line, Some(2));
        // Unknown unit.
        let src = TOML_SRC.replace("\"4 MiB\"", "\"4 MiBs\"");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[1].activation_bytes"));
        assert!(e.message.contains("unknown unit"), "{e}");
        // Missing field: points at the layer.
        let src = TOML_SRC.replace("output_bytes = \"0 B\"\n", "");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[2].output_bytes"));
        assert!(e.line.is_some());
        // Bad kind, with hint.
        let src = TOML_SRC.replace("kind = \"head\"", "kind = \"haed\"");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[2].kind"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `head`?"));
        // Unknown top-level key.
        let src = TOML_SRC.replace("seq_len = 1", "seqlen = 1");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("seqlen"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `seq_len`?"));
        assert_eq!((e.line, e.column), (Some(3), Some(1)));
        // Negative parameters, zero count, no layers.
        let src = TOML_SRC.replace("params = 9536", "params = -1");
        assert_eq!(
            parse_layer_list(&src, false).unwrap_err().field.as_deref(),
            Some("layer[0].params")
        );
        let src = TOML_SRC.replace("count = 3", "count = 0");
        assert_eq!(
            parse_layer_list(&src, false).unwrap_err().field.as_deref(),
            Some("layer[1].count")
        );
        let e = parse_layer_list("name = \"x\"\n", false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer"));
        let e = parse_layer_list("name = \"x\"\nlayer = 3\n", false).unwrap_err();
        assert_eq!((e.field.as_deref(), e.line), (Some("layer"), Some(2)));
    }

    /// Regression: `params = 9e18` with `count = 3` overflowed `Model::params()`.
    #[test]
    fn values_beyond_the_limits_are_errors() {
        let src = TOML_SRC.replace("params = 70_000", "params = 9000000000000000000");
        let e = parse_layer_list(&src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[1].params"));
        assert!(e.message.contains("at most 1000000000000000"), "{e}");
        assert!(e.line.is_some());
        let json = "{\"name\": \"m\", \"layer\": [{\"name\": \"a\", \"params\": 18446744073709551615,\n\"forward_flops\": 1, \"activation_bytes\": \"1 B\", \"output_bytes\": \"1 B\"}]}";
        let e = parse_layer_list(json, true).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[0].params"));
        for (from, to, field) in [
            (
                "forward_flops = 2.4e8",
                "forward_flops = 1e22",
                "layer[0].forward_flops",
            ),
            (
                "forward_flops = 2.4e8",
                "forward_flops = \"1e300 PFLOP\"",
                "layer[0].forward_flops",
            ),
            (
                "activation_bytes = \"8 MiB\"",
                "activation_bytes = \"1e308 TB\"",
                "layer[0].activation_bytes",
            ),
            (
                "activation_bytes = \"8 MiB\"",
                "activation_bytes = \"1e19 B\"",
                "layer[0].activation_bytes",
            ),
            ("count = 3", "count = 100001", "layer[1].count"),
            ("count = 3", "count = 99999", "layer[2]"),
            ("seq_len = 1", "seq_len = 1e300", "seq_len"),
            ("params = 9536", "params = 9536.5", "layer[0].params"),
        ] {
            let e = parse_layer_list(&TOML_SRC.replace(from, to), false).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{to}: {e}");
            assert!(e.line.is_some(), "{to}: {e}");
        }
        // At the limits it parses, and sums saturate rather than overflow.
        let src = TOML_SRC
            .replace("params = 70_000", "params = 1_000_000_000_000_000")
            .replace("count = 3", "count = 99998");
        let m = parse_layer_list(&src, false).unwrap();
        assert_eq!(m.layers.len(), 100_000);
        assert_eq!(m.params(), u64::MAX);
        let huge = opaque_layer("x", LayerKind::Other, u64::MAX / 2, 1.0, 1.0, 1.0, 0.0);
        let m = Model {
            name: "m".into(),
            layers: vec![huge.clone(), huge.clone(), huge],
            transformer: None,
            default_seq_len: 1,
            per_sample: true,
        };
        assert_eq!(m.params(), u64::MAX);
        assert_eq!(m.layers[0].params(), u64::MAX / 2);
        assert_eq!(m.active_params(), u64::MAX);
    }

    #[test]
    fn layer_kind_names_round_trip() {
        for k in KINDS {
            assert_eq!(layer_kind_name(layer_kind(k).unwrap()), *k);
        }
        assert_eq!(layer_kind(" Transformer"), Some(LayerKind::Transformer));
        assert_eq!(layer_kind("block"), None);
    }

    #[test]
    fn toml_inline_layer_array() {
        let src = "name = \"m\"\nlayer = [\n  { name = \"a\", params = 1, forward_flops = 2.0, activation_bytes = \"1 KiB\", output_bytes = \"1 KiB\" },\n  { name = \"b\", params = 1, forward_flops = 2.0, activation_bytes = 3, output_bytes = \"1 KiB\" },\n]\n";
        let e = parse_layer_list(src, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("layer[1].activation_bytes"));
        assert_eq!(e.line, Some(4));
        let ok = src.replace("activation_bytes = 3", "activation_bytes = \"3 MB\"");
        assert_eq!(parse_layer_list(&ok, false).unwrap().layers.len(), 2);
    }

    #[test]
    fn json_span_index() {
        let src = "{\"a\": [1, {\"b\": \"x\\\"y\"}], \"c\": {\"d\": null}}";
        let s = JsonSpans::index(src);
        assert_eq!(s.values["a[1].b"], src.find("\"x").unwrap());
        assert_eq!(s.keys["c.d"], src.find("\"d\"").unwrap());
        assert_eq!(s.values["a[0]"], src.find('1').unwrap());
    }
}
