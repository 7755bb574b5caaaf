//! `hetplan import`: the job a user runs today, as hetplan's model and plan, beside hetplan's
//! own plan (issue 11).

use crate::diag::{io_reason, CliError, Origin, Result};
use crate::{emit, emit_json, inputs};
use hetplan::cost::{self, Analytic, Workload};
use hetplan::export::ranks::NodeLaunch;
use hetplan::import::deepspeed::{DeepspeedJob, Split};
use hetplan::import::megatron::MegatronJob;
use hetplan::import::torchtitan::TorchtitanJob;
use hetplan::plan::{Plan, Recompute, ValidPlan};
use hetplan::units::Seconds;
use serde::Serialize;
use std::path::Path;

/// `--from`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SourceArg {
    /// A Megatron-LM job: a launch script or command line with `pretrain_gpt.py`'s flags, or
    /// the `megatron_args.json` of `hetplan export --to megatron`.
    Megatron,
    /// A DeepSpeed job: its `ds_config.json` (with --model; the layer split from `ranks.json`
    /// beside it, or --pipeline-stages and --partition-method).
    Deepspeed,
    /// A torchtitan 0.3 job: its config module (what it states literally; the model from the
    /// shape constants `hetplan export` writes, else --model; a pipeline's split from
    /// `ranks.json`).
    Torchtitan,
}

/// `--partition-method`: DeepSpeed's `PipelineModule(partition_method=...)`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PartitionArg {
    /// Balance the layers' parameter counts (DeepSpeed's default).
    Parameters,
    /// As many layers per stage as can be, the first stages one more.
    Uniform,
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// What the job is written for.
    #[arg(long, value_enum)]
    pub from: SourceArg,
    /// The job: a file, or its arguments as one string (`"--num-layers 24 --hidden-size ..."`).
    #[arg(value_name = "FILE_OR_ARGS", allow_hyphen_values = true)]
    pub source: String,
    /// The cluster it runs on: a built-in name, NxGxGPU[@BANDWIDTH], or a TOML file.
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: String,
    /// Where each rank runs (the `ranks.json` of `hetplan export`). Default: `ranks.json` beside
    /// FILE if there is one, else the cluster's GPUs in order, node by node.
    #[arg(long, value_name = "FILE")]
    pub ranks: Option<String>,
    /// The model (DeepSpeed: its config does not describe one): a catalog name, a HuggingFace
    /// config.json or a layer list.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Sequence length (DeepSpeed; default: the model's).
    #[arg(long, value_name = "N")]
    pub seq_len: Option<u64>,
    /// DeepSpeed: the PipelineModule's stages, when no `ranks.json` names the split.
    #[arg(long, value_name = "N")]
    pub pipeline_stages: Option<usize>,
    /// DeepSpeed: how the PipelineModule splits the layers, when no `ranks.json` names it.
    #[arg(long, value_enum, default_value_t = PartitionArg::Parameters)]
    pub partition_method: PartitionArg,
    /// How long hetplan may search for its own plan (`none`: do not compare).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub time_limit: String,
    /// Write the imported plan (JSON, for `estimate`, `simulate` and `export`) to this file.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `hetplan import --json`: these keys are an interface; add, never rename.
#[derive(Serialize)]
struct ImportOutput<'a> {
    model: &'a str,
    cluster: &'a str,
    seq_len: u64,
    plan: &'a Plan,
    iteration_time_s: f64,
    fits: bool,
    /// The same plan compiled whole (model and loss), when the job runs PyTorch's code
    /// uncompiled (`Plan::compile`): its iteration time.
    #[serde(skip_serializing_if = "Option::is_none")]
    compiled_iteration_time_s: Option<f64>,
    /// hetplan's plan for the same problem, when it searched and found one.
    hetplan: Option<HetplanSide<'a>>,
    /// Flags read but without effect on the plan.
    ignored: &'a [String],
}

#[derive(Serialize)]
struct HetplanSide<'a> {
    plan: &'a Plan,
    iteration_time_s: f64,
    /// The imported plan's time over hetplan's.
    speedup: f64,
}

/// What an import yields: the model, its sequence length, the plan and the flags it ignored.
struct Imported {
    model: hetplan::Model,
    seq_len: u64,
    plan: Plan,
    ignored: Vec<String>,
}

/// The export's `ranks.json`: where every rank runs, and the layer split.
#[derive(serde::Deserialize)]
struct RanksFile {
    nodes: Vec<NodeLaunch>,
    #[serde(default)]
    parts: Vec<usize>,
}

pub fn import(a: ImportArgs) -> Result<()> {
    let is_file = Path::new(&a.source).is_file();
    let origin = if is_file {
        inputs::read_origin(&a.source)?
    } else {
        Origin::arg("FILE_OR_ARGS", &a.source)
    };
    let cluster = inputs::load_cluster(&a.cluster)?;
    let ranks_path = a.ranks.clone().or_else(|| {
        let beside = Path::new(&a.source).parent()?.join("ranks.json");
        (is_file && beside.is_file()).then(|| beside.to_string_lossy().into_owned())
    });
    let ranks: Option<RanksFile> = match &ranks_path {
        None => None,
        Some(p) => {
            let o = inputs::read_origin(p)?;
            Some(serde_json::from_str(&o.text).map_err(|e| {
                CliError::input(Some(o.clone()), hetplan::InputError::from_json(&e))
            })?)
        }
    };
    let nodes = ranks.as_ref().map(|r| r.nodes.as_slice());
    let located = |e| CliError::input(Some(origin.clone()), e);
    let imported = match a.from {
        SourceArg::Megatron => {
            if a.model.is_some() || a.pipeline_stages.is_some() || a.seq_len.is_some() {
                return Err(CliError::Usage(
                    "--model, --seq-len and --pipeline-stages are for --from deepspeed: a \
                     Megatron job's flags say its model, sequence and stages"
                        .into(),
                ));
            }
            let name = if is_file {
                inputs::megatron_name(&a.source)
            } else {
                "megatron-job".to_string()
            };
            let job = MegatronJob::parse(&origin.text, &name).map_err(located)?;
            let plan = job.plan(&cluster, nodes).map_err(located)?;
            Imported {
                seq_len: job.seq_len,
                ignored: job.ignored.clone(),
                model: job.model,
                plan,
            }
        }
        SourceArg::Deepspeed => {
            let Some(m) = &a.model else {
                return Err(CliError::Usage(
                    "--from deepspeed needs --model: a DeepSpeed config does not describe the \
                     model"
                        .into(),
                ));
            };
            let model = inputs::load_model(m)?;
            let seq_len = a.seq_len.unwrap_or(model.default_seq_len);
            let job = DeepspeedJob::parse(&origin.text).map_err(located)?;
            let split = match (&ranks, a.pipeline_stages, a.partition_method) {
                (Some(r), None, _) if r.parts.len() > 1 => Split::Parts(r.parts.clone()),
                (_, n, PartitionArg::Parameters) => Split::Parameters(n.unwrap_or(1)),
                (_, n, PartitionArg::Uniform) => Split::Uniform(n.unwrap_or(1)),
            };
            // An export's HetplanPipelineModule says how it checkpoints.
            let recompute = Path::new(&a.source)
                .parent()
                .map(|d| d.join("hetplan_pipeline.py"))
                .and_then(|p| std::fs::read_to_string(p).ok())
                .filter(|t| t.contains("ACTIVATION_CHECKPOINT_INTERVAL = 1"))
                .map_or(Recompute::None, |_| Recompute::Full);
            let plan = job
                .plan(&model, &cluster, &split, nodes, recompute)
                .map_err(located)?;
            Imported {
                model,
                seq_len,
                plan,
                ignored: Vec::new(),
            }
        }
        SourceArg::Torchtitan => {
            if a.pipeline_stages.is_some() || a.seq_len.is_some() {
                return Err(CliError::Usage(
                    "--seq-len and --pipeline-stages are for --from deepspeed: a torchtitan job \
                     states its sequence and stages"
                        .into(),
                ));
            }
            let job = TorchtitanJob::parse(&origin.text).map_err(located)?;
            let name = Path::new(&a.source)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("torchtitan-job")
                .to_string();
            let model =
                match (&a.model, job.model(&name).map_err(located)?) {
                    (Some(m), _) => inputs::load_model(m)?,
                    (None, Some(m)) => m,
                    (None, None) => return Err(CliError::Usage(
                        "the module does not state the model's shape (DIM, N_LAYERS, ...): give \
                         --model"
                            .into(),
                    )),
                };
            let split = ranks
                .as_ref()
                .map(|r| (r.nodes.as_slice(), r.parts.as_slice()));
            let (plan, seq_len) = job.plan(&model, &cluster, split).map_err(located)?;
            Imported {
                model,
                seq_len,
                plan,
                ignored: Vec::new(),
            }
        }
    };
    let job = imported;
    let plan = job.plan.clone();
    let valid =
        ValidPlan::new(plan.clone(), &job.model, &cluster).map_err(|problems| CliError::Plan {
            origin: Some(Box::new(origin.clone())),
            problems,
            model: job.model.name.clone(),
            cluster: cluster.name.clone(),
        })?;
    let w = Workload {
        model: &job.model,
        cluster: &cluster,
        seq_len: job.seq_len,
    };
    let est = cost::estimate(w, &valid, &Analytic);
    // A job that runs PyTorch's code uncompiled: what compiling it would buy, apart from
    // hetplan's plan (which is compiled).
    let compiled = (!plan.compile.is_on())
        .then(|| {
            let mut c = plan.clone();
            c.compile = hetplan::plan::Compile::On;
            ValidPlan::new(c, &job.model, &cluster).ok()
        })
        .flatten()
        .map(|c| cost::estimate(w, &c, &Analytic));
    if let Some(path) = &a.output {
        let json =
            serde_json::to_string_pretty(&plan).map_err(|e| CliError::Failure(e.to_string()))?;
        std::fs::write(path, json + "\n")
            .map_err(|e| CliError::Failure(format!("cannot write {path}: {}", io_reason(&e))))?;
        eprintln!("wrote {path}: the imported plan");
    }
    let t = a.time_limit.trim();
    let best = if t.eq_ignore_ascii_case("none") {
        None
    } else {
        let time: Seconds = t
            .parse()
            .map_err(|e| CliError::Usage(format!("--time-limit {t}: {e}")))?;
        crate::planning::hetplan_best(
            &job.model,
            &cluster,
            &plan,
            job.seq_len,
            &Analytic,
            None,
            time,
        )
    };
    let mine = est.iteration_time_s;
    if a.json {
        return emit_json(&ImportOutput {
            model: &job.model.name,
            cluster: &cluster.name,
            seq_len: job.seq_len,
            plan: &plan,
            iteration_time_s: mine,
            fits: est.fits,
            compiled_iteration_time_s: compiled.as_ref().map(|c| c.iteration_time_s),
            hetplan: best.as_ref().map(|b| HetplanSide {
                plan: &b.plan,
                iteration_time_s: b.estimate.iteration_time_s,
                speedup: mine / b.estimate.iteration_time_s,
            }),
            ignored: &job.ignored,
        });
    }
    let mut s = format!(
        "model    {}: {:.2}B parameters, {} layers, seq {}\n\
         cluster  {}: {} GPUs\n\
         yours    {}\n\
         estimate {} per iteration{}\n",
        job.model.name,
        job.model.params() as f64 / 1e9,
        job.model.layers.len(),
        job.seq_len,
        cluster.name,
        cluster.gpus().len(),
        plan.summary(),
        Seconds(mine),
        if est.fits {
            String::new()
        } else {
            format!(
                ", does not fit: needs {:.1} GiB on its fullest GPU",
                est.peak_memory_bytes / (1u64 << 30) as f64
            )
        }
    );
    if let Some(c) = &compiled {
        s.push_str(&format!(
            "compile  your job runs PyTorch's code {} (compile={}): compiled whole, the same plan \
             would take {} ({:.2}×) and peak at {:.1} GiB instead of {:.1}\n",
            if plan.compile == hetplan::plan::Compile::Off {
                "eagerly"
            } else {
                "with an eager loss"
            },
            plan.compile.name(),
            Seconds(c.iteration_time_s),
            mine / c.iteration_time_s,
            c.peak_memory_bytes / (1u64 << 30) as f64,
            est.peak_memory_bytes / (1u64 << 30) as f64
        ));
    }
    match &best {
        Some(b) => s.push_str(&format!(
            "hetplan  {}\n\
             estimate {} per iteration: your configuration {}, hetplan's plan {} ({:.2}×)\n",
            b.plan.summary(),
            Seconds(b.estimate.iteration_time_s),
            Seconds(mine),
            Seconds(b.estimate.iteration_time_s),
            mine / b.estimate.iteration_time_s
        )),
        None if !t.eq_ignore_ascii_case("none") => {
            s.push_str("hetplan  no plan that fits found in the time given\n")
        }
        None => {}
    }
    if let Some(b) = &best {
        for e in &b.per_engine {
            if let (Some(p), Some(t)) = (&e.plan, e.estimate_s) {
                s.push_str(&format!(
                    "engine   {:<10} {} ({:.2}× your configuration): {}\n",
                    e.engine.name(),
                    Seconds(t),
                    mine / t,
                    p.summary()
                ));
            }
        }
    }
    if !job.ignored.is_empty() {
        s.push_str(&format!(
            "ignored  {} (no effect on the plan's time or memory)\n",
            job.ignored.join(" ")
        ));
    }
    emit(&s)
}
