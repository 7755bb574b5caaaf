//! Scenarios: the seed papers' evaluation set-ups as files, so that every planner can be run on
//! exactly what a paper ran (`scenarios/*.toml` at the repository root, built in here).
//!
//! ```toml
//! name = "amp-hetero-model"
//! description = "AMP's heterogeneous model on 4 p3.8xlarge nodes of 4 V100"
//! source = "AMP (Li et al., NeurIPS 2022) §4.3 'Heterogeneous model', Table 5"
//! model = "amp-hetero"          # a catalog model (`hetplan models`)
//! global_batch = 64             # samples per iteration
//! seq_len = 1024                # tokens per sample (1 for per-sample models: Wide-ResNet)
//! max_position_embeddings = 4096  # optional: resize a learned position table (Megatron's
//!                                 # --max-position-embeddings), plain transformers only
//! assumptions = """
//! What the paper gives and what had to be assumed.
//! """
//! cluster = "4x4xv100-sxm2-16gb@10Gbps"   # a built-in or NxGxGPU[@BW] cluster name, or:
//!
//! [cluster]                     # an inline cluster: the cluster file format (`cluster::spec`)
//! name = "my-cluster"           # with every table under `cluster.`
//! [[cluster.node_group]]
//! gpu = "v100-sxm2-16gb"
//! gpus_per_node = 4
//! nodes = 4
//! inter_node_bandwidth = "10 Gbps"
//! [cluster.gpu_overrides."v100-sxm2-16gb"]
//! memory = "15 GiB"
//! ```
//!
//! Every field but `max_position_embeddings` is required; an inline cluster's `[cluster]` table
//! (with the cluster's `name`) comes after every top-level key and before its
//! `[[cluster.node_group]]` entries. Errors carry the line, column and dotted field
//! (`cluster.node_group[1].gpu`), unknown keys the nearest known one as a hint; an inline
//! cluster's errors point into the scenario file itself.

use crate::cluster::spec::{catalog_cluster, parse_cluster_toml};
use crate::cluster::Cluster;
use crate::error::InputError;
use crate::model::catalog::catalog_model;
use crate::model::{Model, PositionKind, LIMITS};
use crate::names::{self, did_you_mean};
use crate::parse::{self, Num, MAX_BATCH};
use crate::plan::validate::validate_seq_len;
use serde::{Deserialize, Serialize};
use toml::{Spanned, Value};

/// A paper's set-up: what to plan for, and where it comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Paper and table or figure.
    pub source: String,
    /// What the paper gives and what had to be assumed.
    pub assumptions: String,
    pub model: Model,
    pub cluster: Cluster,
    /// Samples per iteration.
    pub global_batch: u64,
    pub seq_len: u64,
}

type Leaf = Option<Spanned<Value>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Leaf,
    description: Leaf,
    source: Leaf,
    assumptions: Leaf,
    model: Leaf,
    global_batch: Leaf,
    seq_len: Leaf,
    max_position_embeddings: Leaf,
    cluster: Leaf,
}

/// The keys of a scenario, for hints.
const KEYS: &[&str] = &[
    "name",
    "description",
    "source",
    "assumptions",
    "model",
    "global_batch",
    "seq_len",
    "max_position_embeddings",
    "cluster",
];

/// Parses a scenario file and resolves its model and cluster.
pub fn parse_scenario(src: &str) -> Result<Scenario, InputError> {
    let raw: RawScenario = toml::from_str(src).map_err(|e| serde_error(src, &e))?;
    let r = Reader { src };
    let name = r.text(&raw.name, "name", "\"my-scenario\"")?;
    let description = r.text(
        &raw.description,
        "description",
        "\"what is trained on what\"",
    )?;
    let source = r.text(&raw.source, "source", "\"paper, table or figure\"")?;
    let assumptions = r.text(
        &raw.assumptions,
        "assumptions",
        "\"what the paper gives and what was assumed\"",
    )?;

    let model_v = r.required(&raw.model, "model", "\"gpt3-1.3b\"")?;
    let model_name = r.string(model_v, "model")?;
    let mut model = catalog_model(&model_name).map_err(|e| r.relocate(e, model_v, "model"))?;
    if let Some(v) = &raw.max_position_embeddings {
        let n = r.whole(v, "max_position_embeddings", 1, LIMITS.seq)?;
        model = resize_positions(model, n)
            .map_err(|(msg, hint)| r.err(v, "max_position_embeddings", msg).hint(hint))?;
    }

    let gbs_v = r.required(&raw.global_batch, "global_batch", "1024")?;
    let global_batch = r.whole(gbs_v, "global_batch", 1, MAX_BATCH)?;
    let seq_v = r.required(&raw.seq_len, "seq_len", "2048")?;
    let seq_len = r.whole(seq_v, "seq_len", 1, LIMITS.seq)?;
    validate_seq_len(&model, seq_len).map_err(|msg| {
        let learned = model
            .transformer
            .as_ref()
            .is_some_and(|t| t.position == PositionKind::Learned);
        r.err(seq_v, "seq_len", msg).hint(learned.then(|| {
            format!(
                "or add `max_position_embeddings = {seq_len}` to resize the position table, as \
                 Megatron's --max-position-embeddings does"
            )
        }))
    })?;

    let cluster_v = r.required(&raw.cluster, "cluster", "\"amp-hetero\"")?;
    let cluster = match cluster_v.get_ref() {
        Value::String(s) => catalog_cluster(s).map_err(|e| r.relocate(e, cluster_v, "cluster"))?,
        Value::Table(t) => r.inline_cluster(cluster_v, t)?,
        other => {
            return Err(r
                .err(
                    cluster_v,
                    "cluster",
                    format!(
                        "expected a cluster name or a `[cluster]` table, found {}",
                        describe(other)
                    ),
                )
                .hint(Some(
                    "write `cluster = \"amp-hetero\"`, or a `[cluster]` table with \
                     `[[cluster.node_group]]` entries"
                        .into(),
                )))
        }
    };

    Ok(Scenario {
        name,
        description,
        source,
        assumptions,
        model,
        cluster,
        global_batch,
        seq_len,
    })
}

/// A catalog transformer with its learned position table resized to `n` entries.
fn resize_positions(model: Model, n: u64) -> Result<Model, (String, Option<String>)> {
    let Some(t) = model.transformer.clone() else {
        return Err((
            format!(
                "{} is not a transformer: it has no position table",
                model.name
            ),
            Some("remove `max_position_embeddings`".into()),
        ));
    };
    if t.position != PositionKind::Learned {
        return Err((
            format!(
                "{} has no learned position table to resize (its positions are {:?})",
                model.name, t.position
            ),
            Some("remove `max_position_embeddings`: any sequence length fits".into()),
        ));
    }
    if t.clone().build() != model {
        return Err((
            format!(
                "{} is assembled from parts, not one transformer shape; its position table \
                 cannot be resized here",
                model.name
            ),
            Some("remove `max_position_embeddings`".into()),
        ));
    }
    let mut resized = t;
    resized.max_seq_len = n;
    resized.check_limits().map_err(|e| (e.message, e.hint))?;
    Ok(resized.build())
}

struct Reader<'a> {
    src: &'a str,
}

impl Reader<'_> {
    fn err(&self, v: &Spanned<Value>, field: &str, msg: impl Into<String>) -> InputError {
        InputError::new(msg)
            .field(field)
            .at_offset(self.src, v.span().start)
    }

    /// An error from a catalog lookup, placed at the value that named it.
    fn relocate(&self, e: InputError, v: &Spanned<Value>, field: &str) -> InputError {
        let mut out = self.err(v, field, e.message);
        out.hint = e.hint;
        out
    }

    fn required<'v>(
        &self,
        leaf: &'v Leaf,
        key: &str,
        example: &str,
    ) -> Result<&'v Spanned<Value>, InputError> {
        leaf.as_ref().ok_or_else(|| {
            InputError::new(format!("the scenario has no `{key}`"))
                .field(key)
                .at(1, 1)
                .hint(Some(format!(
                    "add `{key} = {example}` before the `[cluster]` table"
                )))
        })
    }

    fn string(&self, v: &Spanned<Value>, key: &str) -> Result<String, InputError> {
        match v.get_ref() {
            Value::String(s) => Ok(s.clone()),
            other => Err(self
                .err(
                    v,
                    key,
                    format!("expected a string, found {}", describe(other)),
                )
                .hint(Some(format!("quote it: `{key} = \"...\"`")))),
        }
    }

    /// A required, non-empty string.
    fn text(&self, leaf: &Leaf, key: &str, example: &str) -> Result<String, InputError> {
        let v = self.required(leaf, key, example)?;
        let s = self.string(v, key)?;
        if s.trim().is_empty() {
            return Err(self.err(v, key, format!("`{key}` is empty")));
        }
        Ok(s.trim().to_string())
    }

    fn whole(&self, v: &Spanned<Value>, key: &str, min: u64, max: u64) -> Result<u64, InputError> {
        match v.get_ref() {
            Value::Integer(n) => parse::whole(Num::Int(*n as i128), min, max)
                .map_err(|e| self.err(v, key, format!("`{key}` {e}"))),
            Value::String(s) => Err(self
                .err(
                    v,
                    key,
                    format!("expected a whole number, found the string \"{s}\""),
                )
                .hint(Some(format!(
                    "write it without quotes: `{key} = {}`",
                    s.trim()
                )))),
            other => Err(self.err(
                v,
                key,
                format!("expected a whole number, found {}", describe(other)),
            )),
        }
    }

    /// An inline `[cluster]`: its tables are cut out of the scenario with every other line
    /// blanked and `cluster.` turned into spaces, so the cluster parser's lines and columns are
    /// the scenario file's.
    fn inline_cluster(
        &self,
        v: &Spanned<Value>,
        table: &toml::Table,
    ) -> Result<Cluster, InputError> {
        let (text, header) = cluster_source(self.src);
        let locate = |e: InputError| -> InputError {
            let mut e = e;
            e.field = Some(match e.field.take() {
                Some(f) => format!("cluster.{f}"),
                None => "cluster".to_string(),
            });
            if e.line.is_none() {
                let at = header.unwrap_or(v.span().start);
                e = e.at_offset(self.src, at);
            }
            e
        };
        if !table.contains_key("name") {
            let at = header.unwrap_or(v.span().start);
            return Err(InputError::new("the inline cluster has no `name`")
                .field("cluster.name")
                .at_offset(self.src, at)
                .hint(Some(
                    "add `name = \"my-cluster\"` right under `[cluster]`".into(),
                )));
        }
        match header {
            Some(_) => parse_cluster_toml(&text).map_err(locate),
            // An inline table (`cluster = { ... }`): no lines of its own to point into.
            None => {
                let text = toml::to_string(table).map_err(|e| {
                    self.err(v, "cluster", format!("cannot read the inline cluster: {e}"))
                })?;
                parse_cluster_toml(&text).map_err(|e| {
                    let mut out = self.err(v, "cluster", e.message);
                    out.field = Some(match e.field {
                        Some(f) => format!("cluster.{f}"),
                        None => "cluster".into(),
                    });
                    out.hint = e.hint;
                    out
                })
            }
        }
    }
}

/// The first key of a table header line (`[[ cluster . node_group ]]` → `cluster`), and the
/// byte range from just inside the brackets to just after the first `.` (if any).
fn header_head(line: &str) -> Option<(String, usize, Option<usize>)> {
    let b = line.as_bytes();
    let mut i = line.len() - line.trim_start().len();
    if b.get(i) != Some(&b'[') {
        return None;
    }
    while b.get(i) == Some(&b'[') {
        i += 1;
    }
    let inside = i;
    while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
        i += 1;
    }
    let key = match b.get(i) {
        Some(&q @ (b'"' | b'\'')) => {
            let end = line[i + 1..].find(q as char)? + i + 1;
            let k = line[i + 1..end].to_string();
            i = end + 1;
            k
        }
        _ => {
            let start = i;
            while b
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
            {
                i += 1;
            }
            line[start..i].to_string()
        }
    };
    while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
        i += 1;
    }
    let dot = (b.get(i) == Some(&b'.')).then_some(i + 1);
    Some((key, inside, dot))
}

/// Where a multi-line string left off: inside `"""` or `'''`, or not.
#[derive(Clone, Copy, PartialEq)]
enum Str {
    Out,
    Basic,
    Literal,
}

/// The multi-line string state after `line`, starting in `state`. Only needs to be right about
/// `"""`/`'''` (the file has already parsed); one-line strings and comments are skipped.
fn scan(line: &str, mut state: Str) -> Str {
    // Bytes, not chars: every delimiter is ASCII, and multi-byte characters never contain one.
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match state {
            Str::Basic => {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if b[i..].starts_with(b"\"\"\"") {
                    state = Str::Out;
                    i += 3;
                    continue;
                }
                i += 1;
            }
            Str::Literal => {
                if b[i..].starts_with(b"'''") {
                    state = Str::Out;
                    i += 3;
                    continue;
                }
                i += 1;
            }
            Str::Out => match b[i] {
                b'#' => break,
                b'"' if b[i..].starts_with(b"\"\"\"") => {
                    state = Str::Basic;
                    i += 3;
                }
                b'\'' if b[i..].starts_with(b"'''") => {
                    state = Str::Literal;
                    i += 3;
                }
                b'"' => {
                    i += 1;
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'\'' => {
                    i += 1;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                }
                _ => i += 1,
            },
        }
    }
    state
}

/// The scenario's `[cluster]` tables as a cluster file with the same lines and columns, and
/// the offset of its first cluster header (`None` when the cluster has no table header of its
/// own, e.g. an inline table).
fn cluster_source(src: &str) -> (String, Option<usize>) {
    let mut out = String::with_capacity(src.len());
    let mut in_cluster = false;
    let mut state = Str::Out;
    let mut first_header = None;
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let newline = &line[body.len()..];
        let head = if state == Str::Out {
            header_head(body)
        } else {
            None
        };
        match head {
            Some((key, inside, dot)) => {
                in_cluster = key == "cluster";
                if in_cluster {
                    let lead = body.len() - body.trim_start().len();
                    first_header.get_or_insert(offset + lead);
                    if let Some(after) = dot {
                        // `[[cluster.node_group]]` → `[[        node_group]]`
                        out.push_str(&body[..inside]);
                        out.push_str(&" ".repeat(after - inside));
                        out.push_str(&body[after..]);
                    }
                }
            }
            None if in_cluster => out.push_str(body),
            None => {}
        }
        out.push_str(newline);
        state = scan(body, state);
        offset += line.len();
    }
    (out, first_header)
}

/// Turns a toml/serde error into a located `InputError`, with a hint for unknown keys.
fn serde_error(src: &str, e: &toml::de::Error) -> InputError {
    let mut err = InputError::from_toml(src, e);
    if let Some(rest) = e.message().strip_prefix("unknown field ") {
        let ticks: Vec<&str> = rest
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, t)| t)
            .collect();
        if let Some(unknown) = ticks.first() {
            err.message = format!("unknown key `{unknown}`");
            err.field = Some(unknown.to_string());
            err.hint = Some(
                did_you_mean(names::nearest(unknown, KEYS.iter().copied())).unwrap_or_else(|| {
                    format!(
                        "known keys: {}",
                        KEYS.iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }),
            );
        }
    }
    err
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a date",
        Value::Array(_) => "an array",
        Value::Table(_) => "a table",
    }
}

// --------------------------------------------------------------------- built-in scenarios

/// The built-in scenarios (`scenarios/*.toml`), in listing order: (name, file contents).
pub fn builtin_scenarios() -> Vec<(&'static str, &'static str)> {
    BUILTINS.to_vec()
}

/// Names of the built-in scenarios, in listing order.
pub fn scenario_names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}

/// A built-in scenario by name (compared after `names::normalize`); a miss suggests the
/// nearest name.
pub fn scenario(name: &str) -> Result<Scenario, InputError> {
    let want = names::normalize(name);
    match BUILTINS.iter().find(|(n, _)| names::normalize(n) == want) {
        Some((n, src)) => parse_scenario(src).map_err(|mut e| {
            e.message = format!("built-in scenario `{n}`: {}", e.message);
            e
        }),
        None => Err(InputError::new(format!(
            "unknown scenario `{}`; `hetplan scenarios` lists the {} built-in ones",
            name.trim(),
            BUILTINS.len()
        ))
        .field("scenario")
        .hint(did_you_mean(names::nearest(
            name,
            BUILTINS.iter().map(|(n, _)| *n),
        )))),
    }
}

const BUILTINS: &[(&str, &str)] = &[
    (
        "metis-p100-t4-4-gpt3",
        include_str!("../../../scenarios/metis-p100-t4-4-gpt3.toml"),
    ),
    (
        "metis-p100-t4-8-gpt3",
        include_str!("../../../scenarios/metis-p100-t4-8-gpt3.toml"),
    ),
    (
        "metis-p100-t4-16-gpt3",
        include_str!("../../../scenarios/metis-p100-t4-16-gpt3.toml"),
    ),
    (
        "metis-p100-t4-32-gpt3",
        include_str!("../../../scenarios/metis-p100-t4-32-gpt3.toml"),
    ),
    (
        "metis-t4-v100-4-gpt3",
        include_str!("../../../scenarios/metis-t4-v100-4-gpt3.toml"),
    ),
    (
        "metis-t4-v100-8-gpt3",
        include_str!("../../../scenarios/metis-t4-v100-8-gpt3.toml"),
    ),
    (
        "metis-t4-v100-16-gpt3",
        include_str!("../../../scenarios/metis-t4-v100-16-gpt3.toml"),
    ),
    (
        "metis-t4-v100-32-gpt3",
        include_str!("../../../scenarios/metis-t4-v100-32-gpt3.toml"),
    ),
    (
        "metis-p100-v100-4-gpt3",
        include_str!("../../../scenarios/metis-p100-v100-4-gpt3.toml"),
    ),
    (
        "metis-p100-v100-8-gpt3",
        include_str!("../../../scenarios/metis-p100-v100-8-gpt3.toml"),
    ),
    (
        "metis-p100-v100-16-gpt3",
        include_str!("../../../scenarios/metis-p100-v100-16-gpt3.toml"),
    ),
    (
        "metis-p100-v100-32-gpt3",
        include_str!("../../../scenarios/metis-p100-v100-32-gpt3.toml"),
    ),
    (
        "metis-p100-t4-4-moe",
        include_str!("../../../scenarios/metis-p100-t4-4-moe.toml"),
    ),
    (
        "metis-p100-t4-8-moe",
        include_str!("../../../scenarios/metis-p100-t4-8-moe.toml"),
    ),
    (
        "metis-p100-t4-16-moe",
        include_str!("../../../scenarios/metis-p100-t4-16-moe.toml"),
    ),
    (
        "metis-p100-t4-32-moe",
        include_str!("../../../scenarios/metis-p100-t4-32-moe.toml"),
    ),
    (
        "metis-t4-v100-4-moe",
        include_str!("../../../scenarios/metis-t4-v100-4-moe.toml"),
    ),
    (
        "metis-t4-v100-8-moe",
        include_str!("../../../scenarios/metis-t4-v100-8-moe.toml"),
    ),
    (
        "metis-t4-v100-16-moe",
        include_str!("../../../scenarios/metis-t4-v100-16-moe.toml"),
    ),
    (
        "metis-t4-v100-32-moe",
        include_str!("../../../scenarios/metis-t4-v100-32-moe.toml"),
    ),
    (
        "metis-p100-v100-4-moe",
        include_str!("../../../scenarios/metis-p100-v100-4-moe.toml"),
    ),
    (
        "metis-p100-v100-8-moe",
        include_str!("../../../scenarios/metis-p100-v100-8-moe.toml"),
    ),
    (
        "metis-p100-v100-16-moe",
        include_str!("../../../scenarios/metis-p100-v100-16-moe.toml"),
    ),
    (
        "metis-p100-v100-32-moe",
        include_str!("../../../scenarios/metis-p100-v100-32-moe.toml"),
    ),
    (
        "metis-p100-t4-4-wresnet",
        include_str!("../../../scenarios/metis-p100-t4-4-wresnet.toml"),
    ),
    (
        "metis-p100-t4-8-wresnet",
        include_str!("../../../scenarios/metis-p100-t4-8-wresnet.toml"),
    ),
    (
        "metis-p100-t4-16-wresnet",
        include_str!("../../../scenarios/metis-p100-t4-16-wresnet.toml"),
    ),
    (
        "metis-p100-t4-32-wresnet",
        include_str!("../../../scenarios/metis-p100-t4-32-wresnet.toml"),
    ),
    (
        "metis-t4-v100-4-wresnet",
        include_str!("../../../scenarios/metis-t4-v100-4-wresnet.toml"),
    ),
    (
        "metis-t4-v100-8-wresnet",
        include_str!("../../../scenarios/metis-t4-v100-8-wresnet.toml"),
    ),
    (
        "metis-t4-v100-16-wresnet",
        include_str!("../../../scenarios/metis-t4-v100-16-wresnet.toml"),
    ),
    (
        "metis-t4-v100-32-wresnet",
        include_str!("../../../scenarios/metis-t4-v100-32-wresnet.toml"),
    ),
    (
        "metis-p100-v100-4-wresnet",
        include_str!("../../../scenarios/metis-p100-v100-4-wresnet.toml"),
    ),
    (
        "metis-p100-v100-8-wresnet",
        include_str!("../../../scenarios/metis-p100-v100-8-wresnet.toml"),
    ),
    (
        "metis-p100-v100-16-wresnet",
        include_str!("../../../scenarios/metis-p100-v100-16-wresnet.toml"),
    ),
    (
        "metis-p100-v100-32-wresnet",
        include_str!("../../../scenarios/metis-p100-v100-32-wresnet.toml"),
    ),
    (
        "metis-fig5a-p100-4",
        include_str!("../../../scenarios/metis-fig5a-p100-4.toml"),
    ),
    (
        "metis-fig5b-v100-4",
        include_str!("../../../scenarios/metis-fig5b-v100-4.toml"),
    ),
    (
        "metis-fig5c-p100-8",
        include_str!("../../../scenarios/metis-fig5c-p100-8.toml"),
    ),
    (
        "metis-fig5d-v100-8",
        include_str!("../../../scenarios/metis-fig5d-v100-8.toml"),
    ),
    (
        "amp-homogeneous-t4",
        include_str!("../../../scenarios/amp-homogeneous-t4.toml"),
    ),
    (
        "amp-hetero-cluster",
        include_str!("../../../scenarios/amp-hetero-cluster.toml"),
    ),
    (
        "amp-hetero-model",
        include_str!("../../../scenarios/amp-hetero-model.toml"),
    ),
    (
        "ditto-ex1",
        include_str!("../../../scenarios/ditto-ex1.toml"),
    ),
    (
        "ditto-ex2",
        include_str!("../../../scenarios/ditto-ex2.toml"),
    ),
    (
        "ditto-ex3",
        include_str!("../../../scenarios/ditto-ex3.toml"),
    ),
    (
        "ditto-ex4",
        include_str!("../../../scenarios/ditto-ex4.toml"),
    ),
    (
        "ditto-ex5",
        include_str!("../../../scenarios/ditto-ex5.toml"),
    ),
    (
        "poplar-cluster-a",
        include_str!("../../../scenarios/poplar-cluster-a.toml"),
    ),
    (
        "poplar-cluster-b",
        include_str!("../../../scenarios/poplar-cluster-b.toml"),
    ),
    (
        "poplar-cluster-c",
        include_str!("../../../scenarios/poplar-cluster-c.toml"),
    ),
    (
        "mist-l4-2-gpt3",
        include_str!("../../../scenarios/mist-l4-2-gpt3.toml"),
    ),
    (
        "mist-l4-4-gpt3",
        include_str!("../../../scenarios/mist-l4-4-gpt3.toml"),
    ),
    (
        "mist-l4-8-gpt3",
        include_str!("../../../scenarios/mist-l4-8-gpt3.toml"),
    ),
    (
        "mist-l4-16-gpt3",
        include_str!("../../../scenarios/mist-l4-16-gpt3.toml"),
    ),
    (
        "mist-l4-32-gpt3",
        include_str!("../../../scenarios/mist-l4-32-gpt3.toml"),
    ),
    (
        "mist-a100-2-gpt3",
        include_str!("../../../scenarios/mist-a100-2-gpt3.toml"),
    ),
    (
        "mist-a100-4-gpt3",
        include_str!("../../../scenarios/mist-a100-4-gpt3.toml"),
    ),
    (
        "mist-a100-8-gpt3",
        include_str!("../../../scenarios/mist-a100-8-gpt3.toml"),
    ),
    (
        "mist-a100-16-gpt3",
        include_str!("../../../scenarios/mist-a100-16-gpt3.toml"),
    ),
    (
        "mist-a100-32-gpt3",
        include_str!("../../../scenarios/mist-a100-32-gpt3.toml"),
    ),
    (
        "mist-fig2-l4",
        include_str!("../../../scenarios/mist-fig2-l4.toml"),
    ),
    (
        "mist-fig3-l4",
        include_str!("../../../scenarios/mist-fig3-l4.toml"),
    ),
];
