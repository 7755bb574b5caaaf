//! Loading models, clusters, plans and profiles from command-line arguments: catalog names,
//! files, or the inline plan form. Every error keeps the text it points into, so that it can be
//! shown with its file, line and column.

use crate::diag::{CliError, Origin, Result};
use hetplan::cluster::spec::{catalog_cluster_noted, parse_cluster_toml_noted};
use hetplan::gpu::AliasNote;
use hetplan::model::catalog::catalog_model;
use hetplan::model::hf::parse_hf_config;
use hetplan::model::layerlist::parse_layer_list;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::parse_plan_json;
use hetplan::plan::ValidPlan;
use hetplan::profile::ProfileDb;
use hetplan::{Cluster, InputError, Model, Plan};
use std::path::Path;

/// Reads a file, or fails with "cannot read FILE: reason".
pub fn read_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| CliError::read(path, &e))
}

/// Reads a file and keeps it as the origin of later errors.
pub fn read_origin(path: &str) -> Result<Origin> {
    Ok(Origin::file(path, read_file(path)?))
}

fn ext(path: &str) -> String {
    Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .unwrap_or_default()
}

/// Whether `arg` names a file rather than a catalog entry: an existing path, a name with a file
/// extension hetplan reads, or a path with a directory part.
fn is_path(arg: &str, allow_slash_in_names: bool) -> bool {
    let p = Path::new(arg);
    if p.exists() {
        return true;
    }
    matches!(ext(arg).as_str(), "json" | "toml" | "csv")
        || (!allow_slash_in_names && (arg.contains('/') || arg.contains('\\')))
}

fn located(origin: &Origin, e: InputError) -> CliError {
    CliError::input(Some(origin.clone()), e)
}

/// An error about a name given on the command line (`--model gpt-13`): points at the argument.
fn name_error(flag: &str, arg: &str, e: InputError) -> CliError {
    let e = if e.line.is_none() { e.at(1, 1) } else { e };
    CliError::input(Some(Origin::arg(flag, arg)), e)
}

/// What a JSON document is, by its top-level keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonKind {
    Plan,
    Profile,
    HfConfig,
    LayerList,
    Unknown,
}

pub fn json_kind(v: &serde_json::Value) -> JsonKind {
    let Some(obj) = v.as_object() else {
        return JsonKind::Unknown;
    };
    if obj.contains_key("stages") {
        JsonKind::Plan
    } else if obj.contains_key("format_version") {
        JsonKind::Profile
    } else if obj.contains_key("model_type") {
        JsonKind::HfConfig
    } else if obj.contains_key("layer") {
        JsonKind::LayerList
    } else {
        JsonKind::Unknown
    }
}

/// Parses JSON only to look at it; a syntax error is reported with its position.
pub fn json_value(origin: &Origin) -> Result<serde_json::Value> {
    serde_json::from_str(&origin.text).map_err(|e| located(origin, InputError::from_json(&e)))
}

/// The model name a HuggingFace config file suggests: its directory for `config.json`
/// (`llama-2-7b/config.json`), else the file's stem.
fn hf_name_hint(path: &str) -> String {
    let p = Path::new(path);
    let stem = p
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model")
        .to_string();
    if stem.eq_ignore_ascii_case("config") {
        let dir = p
            .canonicalize()
            .ok()
            .and_then(|c| c.parent().and_then(|d| d.file_name()).map(|d| d.to_owned()))
            .and_then(|d| d.to_str().map(|s| s.to_string()));
        if let Some(d) = dir {
            return d;
        }
    }
    stem
}

/// A model file: a HuggingFace `config.json`, or a layer list (TOML, or JSON with `layer`).
pub fn model_from_file(origin: &Origin, path: &str) -> Result<Model> {
    if is_megatron_args(&origin.text) {
        return hetplan::import::megatron::MegatronJob::parse(&origin.text, &megatron_name(path))
            .map(|job| job.model)
            .map_err(|e| located(origin, e));
    }
    let e = ext(path);
    let looks_json = e == "json" || (e != "toml" && origin.text.trim_start().starts_with('{'));
    if !looks_json {
        return parse_layer_list(&origin.text, false).map_err(|e| located(origin, e));
    }
    let v = json_value(origin)?;
    match json_kind(&v) {
        JsonKind::HfConfig => {
            parse_hf_config(&origin.text, &hf_name_hint(path)).map_err(|e| located(origin, e))
        }
        JsonKind::LayerList => parse_layer_list(&origin.text, true).map_err(|e| located(origin, e)),
        other => Err(located(
            origin,
            InputError::new(format!(
                "not a model file{}",
                match other {
                    JsonKind::Plan => " (it looks like a plan: it has `stages`)",
                    JsonKind::Profile => " (it looks like a profile database)",
                    _ => "",
                }
            ))
            .at(1, 1)
            .hint(Some(
                "a model is a catalog name (`hetplan models`), a HuggingFace config.json (with \
                 `model_type`), or a layer list (with a `layer` array)"
                    .into(),
            )),
        )),
    }
}

/// Whether a file is a Megatron-LM job's arguments (a launch script, a command line, or the JSON
/// list `hetplan export --to megatron` writes): it names Megatron's layer count.
pub fn is_megatron_args(text: &str) -> bool {
    let t = text.trim_start();
    (t.starts_with('[') && t.contains("\"--num-layers\""))
        || (!t.starts_with('{') && !t.starts_with('[') && t.contains("--num-layers"))
}

/// A model name for a Megatron job read from `path`: its file (or directory) name.
pub fn megatron_name(path: &str) -> String {
    let p = Path::new(path);
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("job");
    let stem = if matches!(stem, "megatron_args" | "launch") {
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or(stem)
    } else {
        stem
    };
    format!("megatron-{stem}")
}

/// `--model`: a catalog name or a file.
pub fn load_model(arg: &str) -> Result<Model> {
    if is_path(arg, false) {
        // A HuggingFace model directory: its config.json.
        let path = if Path::new(arg).is_dir() {
            Path::new(arg)
                .join("config.json")
                .to_string_lossy()
                .into_owned()
        } else {
            arg.to_string()
        };
        let origin = read_origin(&path)?;
        let value = model_from_file(&origin, &path)?;
        return Ok(value);
    }
    catalog_model(arg).map_err(|e| name_error("--model", arg, e))
}

/// `--cluster`: a built-in name, an `NxGxGPU[@BW]` pattern (node groups joined by `+`) or a
/// TOML file.
pub fn load_cluster(arg: &str) -> Result<Cluster> {
    // Patterns may carry a bandwidth such as `@25 GB/s`: a slash there is no directory.
    let (cluster, notes) = if is_path(arg, arg.contains('@')) {
        let origin = read_origin(arg)?;
        parse_cluster_toml_noted(&origin.text).map_err(|e| located(&origin, e))?
    } else {
        catalog_cluster_noted(arg).map_err(|e| name_error("--cluster", arg, e))?
    };
    print_notes(&notes);
    Ok(cluster)
}

/// Says on stderr which card each ambiguous GPU name was taken for.
pub fn print_notes(notes: &[AliasNote]) {
    for n in notes {
        eprintln!("note: {n}");
    }
}

/// Whether a `--plan` argument is the inline form rather than a file.
pub fn is_inline_plan(arg: &str) -> bool {
    arg.contains('=') && !Path::new(arg).is_file()
}

/// Reads a plan file (syntax only).
pub fn plan_from_file(origin: &Origin) -> Result<Plan> {
    parse_plan_json(&origin.text).map_err(|e| located(origin, e))
}

/// `--plan`: a JSON file or the inline form, checked against the model and the cluster.
pub fn load_plan(arg: &str, model: &Model, cluster: &Cluster) -> Result<ValidPlan> {
    let (plan, origin) = if is_inline_plan(arg) {
        let origin = Origin::arg("--plan", arg);
        let plan = parse_inline_plan(arg, model, cluster).map_err(|e| located(&origin, e))?;
        (plan, origin)
    } else {
        let origin = read_origin(arg)?;
        (plan_from_file(&origin)?, origin)
    };
    check_plan(plan, Some(&origin), model, cluster)
}

/// Full validation: every problem, each located in the plan's text when it is JSON.
pub fn check_plan(
    plan: Plan,
    origin: Option<&Origin>,
    model: &Model,
    cluster: &Cluster,
) -> Result<ValidPlan> {
    ValidPlan::new(plan, model, cluster).map_err(|problems| CliError::Plan {
        origin: origin.cloned().map(Box::new),
        problems,
        model: model.name.clone(),
        cluster: cluster.name.clone(),
    })
}

/// `--profile`: a profile database file.
pub fn load_profile(path: &str) -> Result<ProfileDb> {
    let origin = read_origin(path)?;
    ProfileDb::parse(&origin.text).map_err(|e| located(&origin, e))
}
