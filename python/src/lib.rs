//! hetplan's Python extension (`hetplan._hetplan`): thin functions over the library that take
//! and give text (JSON), with `hetplan/__init__.py` building the Python API on top. Errors
//! become `hetplan.HetplanError` with the line, column, field and hint the library reports;
//! searches and simulations run without the GIL.

use hetplan::cost::{estimate, Analytic, Profiled, Workload};
use hetplan::error::InputError;
use hetplan::export::{export, Job, Target};
use hetplan::plan::runtime::Runtime;
use hetplan::plan::{Compile, Plan, Precision, ValidPlan};
use hetplan::planners::{self, Clock, Limits, NoProgress, PlanOptions, Problem, Search};
use hetplan::profile::ProfileIndex;
use hetplan::sim::{simulate, SimOptions};
use hetplan::units::Seconds;
use hetplan::{Cluster, Model};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::time::Instant;

pyo3::create_exception!(
    hetplan,
    HetplanError,
    PyValueError,
    "Bad input or an impossible request: `message`, and where known `line`, `column`, `field` \
     and a `hint`."
);

/// A `HetplanError` from the library's located error.
fn input_error(py: Python<'_>, e: InputError) -> PyErr {
    let err = HetplanError::new_err(e.to_string());
    let value = err.value(py);
    let _ = value.setattr("message", e.message.clone());
    let _ = value.setattr("line", e.line);
    let _ = value.setattr("column", e.column);
    let _ = value.setattr("field", e.field.clone());
    let _ = value.setattr("hint", e.hint.clone());
    err
}

/// A `HetplanError` from a message (and a hint).
fn error(py: Python<'_>, message: impl Into<String>, hint: Option<String>) -> PyErr {
    input_error(py, InputError::new(message.into()).hint(hint))
}

fn json<T: serde::Serialize>(py: Python<'_>, v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| error(py, format!("serialising: {e}"), None))
}

/// A model: from the catalog, a HuggingFace `config.json`, or a layer list.
#[pyclass(frozen, module = "hetplan._hetplan")]
struct ModelHandle {
    model: Model,
}

#[pymethods]
impl ModelHandle {
    #[getter]
    fn name(&self) -> String {
        self.model.name.clone()
    }
    #[getter]
    fn parameters(&self) -> f64 {
        self.model.params() as f64
    }
    #[getter]
    fn layers(&self) -> usize {
        self.model.layers.len()
    }
    #[getter]
    fn default_seq_len(&self) -> u64 {
        self.model.default_seq_len
    }
    /// The transformer's shape (JSON), when the model is one: what the profiler builds.
    #[getter]
    fn transformer(&self) -> Option<String> {
        (self.model.transformer.as_ref()).and_then(|t| serde_json::to_string(t).ok())
    }
    /// Each layer's kind: embedding, transformer, head or other.
    #[getter]
    fn layer_kinds(&self) -> Vec<String> {
        (self.model.layers.iter())
            .map(|l| hetplan::model::layerlist::layer_kind_name(l.kind).to_string())
            .collect()
    }
}

/// A cluster: built-in, the `2x8xa100-80gb+...` form, or cluster TOML.
#[pyclass(frozen, module = "hetplan._hetplan")]
struct ClusterHandle {
    cluster: Cluster,
}

#[pymethods]
impl ClusterHandle {
    #[getter]
    fn name(&self) -> String {
        self.cluster.name.clone()
    }
    #[getter]
    fn gpus(&self) -> usize {
        self.cluster.num_gpus()
    }
}

/// A catalog model (`name`), or a model file's text: a HuggingFace config (JSON with
/// `model_type`) or a layer list (TOML, or JSON with a `layer` array). `name` names a model read
/// from text.
#[pyfunction]
#[pyo3(signature = (spec, text=None))]
fn load_model(py: Python<'_>, spec: &str, text: Option<&str>) -> PyResult<ModelHandle> {
    let model = match text {
        None => hetplan::model::catalog::catalog_model(spec),
        Some(t) => {
            let trimmed = t.trim_start();
            if trimmed.starts_with('{') && t.contains("\"model_type\"") {
                hetplan::model::hf::parse_hf_config(t, spec)
            } else {
                hetplan::model::layerlist::parse_layer_list(t, trimmed.starts_with('{'))
            }
        }
    }
    .map_err(|e| input_error(py, e))?;
    Ok(ModelHandle { model })
}

/// A built-in cluster or the inline form (`spec`), or cluster TOML (`text`).
#[pyfunction]
#[pyo3(signature = (spec, text=None))]
fn load_cluster(py: Python<'_>, spec: &str, text: Option<&str>) -> PyResult<ClusterHandle> {
    let cluster = match text {
        None => hetplan::cluster::spec::catalog_cluster(spec),
        Some(t) => hetplan::cluster::spec::parse_cluster_toml(t),
    }
    .map_err(|e| input_error(py, e))?;
    Ok(ClusterHandle { cluster })
}

/// `plan` (JSON or the inline form) checked against the model and the cluster: its JSON.
#[pyfunction]
fn check_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    plan: &str,
) -> PyResult<String> {
    let valid = valid_plan(py, model, cluster, plan)?;
    json(py, &*valid)
}

fn valid_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    plan: &str,
) -> PyResult<ValidPlan> {
    let parsed: Plan = if plan.trim_start().starts_with('{') {
        hetplan::plan::validate::parse_plan_json(plan)
    } else {
        hetplan::plan::inline::parse_inline_plan(plan, &model.model, &cluster.cluster)
    }
    .map_err(|e| input_error(py, e))?;
    ValidPlan::check(&parsed, &model.model, &cluster.cluster).map_err(|errs| {
        let first = &errs[0];
        let more = if errs.len() > 1 {
            format!(" (and {} more)", errs.len() - 1)
        } else {
            String::new()
        };
        let mut e = InputError::new(format!("{first}{more}")).hint(first.hint());
        e.field = Some(first.path());
        input_error(py, e)
    })
}

/// The estimate of `plan` (JSON), with the layer times of a profile database (its JSON text)
/// where it has them.
#[pyfunction]
#[pyo3(signature = (model, cluster, plan, seq_len, profile=None))]
fn estimate_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    plan: &str,
    seq_len: u64,
    profile: Option<&str>,
) -> PyResult<String> {
    let valid = valid_plan(py, model, cluster, plan)?;
    let w = Workload {
        model: &model.model,
        cluster: &cluster.cluster,
        seq_len,
    };
    let db = profile
        .map(hetplan::profile::ProfileDb::parse)
        .transpose()
        .map_err(|e| input_error(py, e))?;
    let e = py.allow_threads(|| match &db {
        Some(db) => {
            let index = ProfileIndex::for_setup(db, Some(seq_len), Some(valid.precision));
            let profiled = Profiled {
                index: &index,
                interpolation: Default::default(),
            };
            estimate(w, &valid, &profiled)
        }
        None => estimate(w, &valid, &Analytic),
    });
    json(py, &e)
}

/// The simulation of `plan`: (its JSON without the spans, the Gantt chart as SVG).
#[pyfunction]
fn simulate_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    plan: &str,
    seq_len: u64,
) -> PyResult<(String, String)> {
    let valid = valid_plan(py, model, cluster, plan)?;
    let w = Workload {
        model: &model.model,
        cluster: &cluster.cluster,
        seq_len,
    };
    let sim = py
        .allow_threads(|| simulate(w, &valid, &Analytic, &SimOptions::default()))
        .map_err(|e| error(py, e.to_string(), None))?;
    let svg = hetplan::sim::svg::gantt_svg(&sim);
    let mut v = serde_json::to_value(&sim).map_err(|e| error(py, e.to_string(), None))?;
    if let Some(o) = v.as_object_mut() {
        o.remove("spans");
    }
    Ok((v.to_string(), svg))
}

struct WallClock(Instant);

impl Clock for WallClock {
    fn elapsed(&self) -> Seconds {
        Seconds(self.0.elapsed().as_secs_f64())
    }
}

/// Searches a plan: the planner's outcome (JSON: plan, estimate, notes, stop reason, ...).
#[pyfunction]
#[pyo3(signature = (model, cluster, gbs, seq_len, algo, engine, time_limit=None, max_nodes=None, precision="bf16", compile="on"))]
#[allow(clippy::too_many_arguments)]
fn search_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    gbs: u64,
    seq_len: u64,
    algo: &str,
    engine: &str,
    time_limit: Option<f64>,
    max_nodes: Option<u64>,
    precision: &str,
    compile: &str,
) -> PyResult<String> {
    let (runtime, precision) = (runtime_of(py, engine)?, precision_of(py, precision)?);
    let compile = compile_of(py, compile, runtime)?;
    if gbs == 0 {
        return Err(error(py, "gbs must be at least 1", None));
    }
    if time_limit.is_some_and(|t| !(t.is_finite() && t > 0.0)) {
        return Err(error(
            py,
            "time_limit must be a positive number of seconds",
            Some("or None for no time limit".into()),
        ));
    }
    // Checked here; built again inside the search, which runs without the GIL.
    planners::by_name(algo).map_err(|e| error(py, e, None))?;
    let problem = Problem {
        model: &model.model,
        cluster: &cluster.cluster,
        global_batch: gbs,
        seq_len,
        compute: &Analytic,
        options: PlanOptions {
            engine: hetplan::plan::runtime::planning_engine(runtime, precision),
            runtime,
            precision,
            compile,
            ..PlanOptions::default()
        },
    };
    let limits = Limits {
        max_nodes: match (max_nodes, time_limit) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(10_000_000),
        },
        time: time_limit.map(Seconds),
    };
    let outcome = py.allow_threads(|| {
        let clock = WallClock(Instant::now());
        let mut search = Search::new(limits, &clock, &NoProgress);
        let planner = planners::by_name(algo).map_err(|e| e.to_string())?;
        planner
            .plan(&problem, &mut search)
            .map_err(|e| e.to_string())
    });
    match outcome {
        Ok(o) => json(py, &o),
        Err(e) => Err(error(py, e, None)),
    }
}

/// The files of `plan`'s export to `target`: a list of (path, contents, executable).
#[pyfunction]
fn export_plan(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    plan: &str,
    seq_len: u64,
    target: &str,
) -> PyResult<Vec<(String, String, bool)>> {
    let valid = valid_plan(py, model, cluster, plan)?;
    let target = Target::ALL
        .into_iter()
        .find(|t| t.name() == target)
        .ok_or_else(|| {
            let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
            error(
                py,
                format!("no export to {target:?}"),
                Some(format!("one of {}", names.join(", "))),
            )
        })?;
    let job = Job {
        model: &model.model,
        cluster: &cluster.cluster,
        plan: &valid,
        seq_len,
    };
    let out = export(target, job).map_err(|e| error(py, e.to_string(), None))?;
    Ok(out
        .files
        .into_iter()
        .map(|f| (f.path, f.contents, f.executable))
        .collect())
}

/// The certified lower bound on any plan's iteration time (seconds), as `hetplan compare`
/// reports each answer's gap to.
#[pyfunction]
#[pyo3(signature = (model, cluster, gbs, seq_len, engine="any", precision="bf16"))]
fn lower_bound(
    py: Python<'_>,
    model: &ModelHandle,
    cluster: &ClusterHandle,
    gbs: u64,
    seq_len: u64,
    engine: &str,
    precision: &str,
) -> PyResult<f64> {
    let (runtime, precision) = (runtime_of(py, engine)?, precision_of(py, precision)?);
    let problem = Problem {
        model: &model.model,
        cluster: &cluster.cluster,
        global_batch: gbs,
        seq_len,
        compute: &Analytic,
        options: PlanOptions {
            engine: hetplan::plan::runtime::planning_engine(runtime, precision),
            runtime,
            precision,
            ..PlanOptions::default()
        },
    };
    Ok(py.allow_threads(|| planners::bound::lower_bound(&problem).iteration_time_s))
}

/// `--engine`: `any` or a mainstream engine.
fn runtime_of(py: Python<'_>, engine: &str) -> PyResult<Option<Runtime>> {
    match engine {
        "any" => Ok(None),
        other => Runtime::ALL
            .into_iter()
            .find(|r| r.name() == other)
            .map(Some)
            .ok_or_else(|| {
                error(
                    py,
                    format!("engine {other:?} is not one hetplan knows"),
                    Some("one of any, megatron, deepspeed, torchtitan, fsdp".into()),
                )
            }),
    }
}

/// `--precision`.
fn precision_of(py: Python<'_>, precision: &str) -> PyResult<Precision> {
    Precision::from_name(precision).ok_or_else(|| {
        let names: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
        error(
            py,
            format!("precision {precision:?} is not one hetplan knows"),
            Some(names.join(", ")),
        )
    })
}

/// How much of PyTorch's model code runs compiled (`Plan::compile`): anything but "on" only
/// where the engine runs PyTorch's model code (torchtitan, fsdp).
fn compile_of(py: Python<'_>, compile: &str, runtime: Option<Runtime>) -> PyResult<Compile> {
    let c = match compile {
        "on" => Compile::On,
        "blocks" => Compile::Blocks,
        "off" => Compile::Off,
        other => {
            return Err(error(
                py,
                format!("compile {other:?} is not one hetplan knows"),
                Some("on, blocks or off".into()),
            ))
        }
    };
    if c != Compile::On && !runtime.is_some_and(|r| r.engine().runs_pytorch_code()) {
        return Err(error(
            py,
            format!(
                "compile={compile:?}: only PyTorch's own model code (engine torchtitan or fsdp) \
                 runs uncompiled; Megatron and DeepSpeed run their own fused kernels"
            ),
            Some("engine=\"torchtitan\", or leave compile out".into()),
        ));
    }
    Ok(c)
}

/// The names `load_model` and `load_cluster` take from the catalogs, and the planners.
#[pyfunction]
fn catalogs(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let models: Vec<String> = (hetplan::model::catalog::catalog_names().into_iter())
        .map(|e| e.name.to_string())
        .collect();
    d.set_item("models", models)?;
    d.set_item(
        "clusters",
        hetplan::cluster::builtin::catalog_cluster_names(),
    )?;
    d.set_item(
        "planners",
        planners::all().iter().map(|p| p.name()).collect::<Vec<_>>(),
    )?;
    Ok(d)
}

#[pymodule]
fn _hetplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HetplanError", m.py().get_type::<HetplanError>())?;
    m.add_class::<ModelHandle>()?;
    m.add_class::<ClusterHandle>()?;
    m.add_function(wrap_pyfunction!(load_model, m)?)?;
    m.add_function(wrap_pyfunction!(load_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(check_plan, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_plan, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_plan, m)?)?;
    m.add_function(wrap_pyfunction!(search_plan, m)?)?;
    m.add_function(wrap_pyfunction!(export_plan, m)?)?;
    m.add_function(wrap_pyfunction!(catalogs, m)?)?;
    m.add_function(wrap_pyfunction!(lower_bound, m)?)?;
    Ok(())
}
