//! `hetplan`: plan and cost large-model training on heterogeneous GPU clusters.
//!
//! This file holds the command line (clap) and the dispatch; `inputs` loads models, clusters,
//! plans and profiles, `render` formats human-readable output, `diag` shows errors.

mod diag;
mod export;
mod import;
mod inputs;
mod jsonpos;
mod planning;
mod render;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use diag::{CliError, Origin, Result};
use hetplan::calibration;
use hetplan::cluster::spec::{catalog_cluster, catalog_cluster_names};
use hetplan::cost::{self, Analytic, ComputeTimes, Estimate, Profiled, TimeSource, Workload};
use hetplan::model::catalog::{catalog_model, catalog_names};
use hetplan::plan::Plan;
use hetplan::profile::{self, Interpolation, ProfileDb, ProfileIndex};
use hetplan::sim::{self, SimOptions, Simulation};
use hetplan::units::BytesPerSec;
use hetplan::InputError;
use inputs::{json_kind, json_value, JsonKind};
use serde::Serialize;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hetplan",
    version,
    about = "Plan and cost large-model training on heterogeneous GPU clusters",
    long_about = "Plan and cost large-model training on heterogeneous GPU clusters.\n\n\
        Models, clusters and plans are given by catalog name or as files; `hetplan models`, \
        `hetplan clusters` and `hetplan gpus` list the catalogs. Data goes to stdout, \
        diagnostics to stderr. Bad input exits with status 2, other failures with 1.",
    after_help = "Examples:\n  \
        hetplan estimate --model gpt3-1.3b --cluster dgx-a100-80gb --plan tp=2,pp=2,mbs=4,gbs=64\n  \
        hetplan simulate --model gpt3-1.3b --cluster dgx-a100-80gb --plan tp=2,pp=2,mbs=4,gbs=64\n  \
        hetplan validate my-cluster.toml\n  \
        hetplan calibrate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Estimate iteration time, throughput, MFU and per-GPU memory of a plan.
    #[command(after_help = "Examples:\n  \
        hetplan estimate --model gpt3-1.3b --cluster dgx-a100-80gb --plan tp=2,pp=2,mbs=4,gbs=64\n  \
        hetplan estimate --model llama/config.json --cluster cluster.toml --plan plan.json --json\n  \
        hetplan estimate --model opt-350m --cluster 2x4xa100-40gb --plan dp=8,mbs=2,m=4,precision=fp32 \\\n      \
        --profile profiles.json --seq-len 2048\n\n\
        The inline plan form is comma-separated key=value pairs: tp, pp, dp, mbs, gbs, m, zero, \
        ckpt, sp, schedule, v, engine, precision, offload_w, offload_g, offload_opt, offload_act.")]
    Estimate(EstimateArgs),
    /// Simulate one iteration of a plan event by event: where each GPU's time goes.
    #[command(
        after_help = "Executes the plan's schedule on the cluster: pipeline dependencies, \
        sends (blocking, or beside the compute under Megatron's interleaved schedule), \
        gradient buckets, ZeRO transfers, offload copies and links shared by \
        concurrent transfers. Prints the iteration time beside the estimate's, each GPU's busy, \
        communication-wait and idle time, and the critical path.\n\n\
        Examples:\n  \
        hetplan simulate --model gpt3-125m --cluster 1x4xa100-80gb --plan pp=4,mbs=1,gbs=8\n  \
        hetplan simulate --model gpt3-1.3b --cluster dgx-a100-80gb --plan tp=2,pp=2,mbs=4,gbs=64 \\\n      \
        --trace trace.json --svg gantt.svg\n  \
        hetplan simulate --model gpt3-1.3b --cluster dgx-a100-80gb --plan plan.json --json"
    )]
    Simulate(SimulateArgs),
    /// Write what starts the plan on an engine: its configuration, one launch command per
    /// node, and a README.
    #[command(
        after_help = "Each stage lands on the GPUs the plan gave it: the launch script \
        sets each node's `torchrun --node_rank` and `CUDA_VISIBLE_DEVICES` in the engine's \
        rank order. A plan the engine cannot run gives no files: every reason, and the command \
        that plans for that engine with how much slower its plan is (exit status 2).\n\n\
        Examples:\n  \
        hetplan export --model gpt3-1.3b --cluster dgx-a100-80gb --plan tp=2,pp=2,mbs=4,gbs=64 --to megatron\n  \
        hetplan plan --model llama3-8b --cluster 2x8xa100-80gb --gbs 512 --engine megatron -o plan.json\n  \
        hetplan export --model llama3-8b --cluster 2x8xa100-80gb --plan plan.json --to megatron --out job/\n  \
        hetplan export --model llama3-8b --cluster 2x8xa100-80gb --plan plan.json --to torchtitan --out job/"
    )]
    Export(export::ExportArgs),
    /// Read the job you run today (a Megatron-LM launch script or arguments, a DeepSpeed
    /// config, a torchtitan config module) into a plan, and compare it with hetplan's plan.
    #[command(
        after_help = "The imported plan (-o) works with `estimate`, `simulate` and \
        `export`; so does the job file as --model. Ranks are placed as `ranks.json` beside the \
        file says (an export writes one), else on the cluster's GPUs in order.\n\n\
        Examples:\n  \
        hetplan import --from megatron job/megatron_args.json --cluster 2x8xa100-80gb\n  \
        hetplan import --from megatron train_llama.sh --cluster cluster.toml -o plan.json\n  \
        hetplan import --from deepspeed ds_config.json --model gpt3-1.3b --cluster 2x4xa100-80gb --pipeline-stages 2\n  \
        hetplan estimate --model train_llama.sh --cluster cluster.toml --plan plan.json"
    )]
    Import(import::ImportArgs),
    /// List the GPU catalog.
    #[command(after_help = "Examples:\n  hetplan gpus\n  hetplan gpus --json")]
    Gpus(ListArgs),
    /// List the built-in models.
    #[command(after_help = "Examples:\n  hetplan models\n  hetplan models --json")]
    Models(ListArgs),
    /// List the built-in clusters.
    #[command(after_help = "Examples:\n  hetplan clusters\n  hetplan clusters --json")]
    Clusters(ListArgs),
    /// Check a cluster, plan, profile, model or calibration file.
    #[command(
        after_help = "The kind of file is detected: a cluster TOML (with [[node_group]]), a \
        plan JSON (with `stages`), a profile database (with `format_version`), a HuggingFace \
        config.json (with `model_type`), a layer list (TOML or JSON with `layer`), a calibration \
        CSV.\n\nExamples:\n  \
        hetplan validate cluster.toml\n  \
        hetplan validate plan.json --model gpt3-1.3b --cluster dgx-a100-80gb\n  \
        hetplan validate profiles.json"
    )]
    Validate(ValidateArgs),
    /// Work with profile databases (measured per-layer times).
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Compare the cost model with published measurements.
    #[command(
        after_help = "Prints, for every measured run: model, sequence length, GPUs, \
        micro-batch size, activation checkpointing, measured and estimated tokens/s per GPU and \
        the error; then the median and worst absolute error.\n\nExamples:\n  \
        hetplan calibrate\n  \
        hetplan calibrate --data data/validation/llm_foundry_h100_80gb.csv\n  \
        hetplan calibrate --inter-node-bandwidth \"400 Gbps\"\n  \
        hetplan calibrate --json"
    )]
    Calibrate(CalibrateArgs),
    /// Find a plan: the best way to train the model on the cluster, by one planner.
    #[command(
        after_help = "Searches stop at --time-limit (or --max-nodes candidates) and say why.\n\n\
        Examples:\n  \
        hetplan plan --model gpt3-1.3b --cluster t4-v100 --gbs 64 --algo metis -o plan.json\n  \
        hetplan plan --scenario amp-hetero-cluster --algo amp --json\n  \
        hetplan estimate --model gpt3-1.3b --cluster t4-v100 --plan plan.json"
    )]
    Plan(planning::PlanArgs),
    /// Run every planner on the same problem and compare their plans, estimated and simulated.
    #[command(after_help = "Examples:\n  \
        hetplan compare --model gpt3-1.3b --cluster t4-v100 --gbs 64\n  \
        hetplan compare --scenario metis-t4-v100-16-gpt3 --time-limit 30s --json")]
    Compare(planning::CompareArgs),
    /// List the built-in scenarios (the seed papers' set-ups).
    #[command(after_help = "Examples:\n  hetplan scenarios\n  hetplan scenarios --json")]
    Scenarios(planning::ScenariosArgs),
}

/// What to cost or simulate: the inputs `estimate` and `simulate` share.
#[derive(Args)]
struct PlanInputs {
    /// Model: a catalog name (see `hetplan models`), a HuggingFace config.json, or a layer list
    /// (.toml, or .json with a `layer` array).
    #[arg(long, value_name = "MODEL")]
    model: String,
    /// Cluster: a built-in name (see `hetplan clusters`), NxGxGPU[@BANDWIDTH] (groups joined by
    /// `+`: 2x8xa100-80gb+4x8xv100-32gb@100Gbps), or a TOML file; see docs/inputs.md.
    #[arg(long, value_name = "CLUSTER")]
    cluster: String,
    /// Plan: a JSON file, or the inline form such as `tp=2,pp=4,mbs=1,gbs=64,zero=1`.
    #[arg(long, value_name = "PLAN")]
    plan: String,
    /// Sequence length (default: the model's).
    #[arg(long, value_name = "N")]
    seq_len: Option<u64>,
    /// Measured layer times to use where they exist (a profile database).
    #[arg(long, value_name = "FILE")]
    profile: Option<String>,
    /// How to read unmeasured micro-batch sizes from the profile.
    #[arg(long, value_enum, default_value_t = InterpolationArg::MonotoneCubic, requires = "profile")]
    interpolation: InterpolationArg,
    /// Use a plan file although it was made for another cluster or model (its GPU indices then
    /// mean other GPUs).
    #[arg(long)]
    ignore_fingerprint: bool,
}

#[derive(Args)]
struct EstimateArgs {
    #[command(flatten)]
    inputs: PlanInputs,
    /// Print the estimate as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SimulateArgs {
    #[command(flatten)]
    inputs: PlanInputs,
    /// Print the simulation as JSON.
    #[arg(long)]
    json: bool,
    /// Write a Chrome trace (opens in https://ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE")]
    trace: Option<String>,
    /// Write a Gantt chart of the iteration as SVG.
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
    /// Leave out the slowdown of compute and communication running together.
    #[arg(long)]
    no_interference: bool,
    /// Refuse plans whose task graph would have more tasks than this (memory grows with them).
    #[arg(long, value_name = "N", default_value_t = sim::DEFAULT_MAX_TASKS)]
    max_tasks: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum InterpolationArg {
    /// Monotone cubic interpolation of time over micro-batch size.
    MonotoneCubic,
    /// Metis: sums of measured power-of-two sizes.
    MetisPowersOfTwo,
}

impl From<InterpolationArg> for Interpolation {
    fn from(a: InterpolationArg) -> Interpolation {
        match a {
            InterpolationArg::MonotoneCubic => Interpolation::MonotoneCubic,
            InterpolationArg::MetisPowersOfTwo => Interpolation::MetisPowersOfTwo,
        }
    }
}

#[derive(Args)]
struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ValidateArgs {
    /// The file to check.
    file: String,
    /// Model to check a plan against.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Cluster to check a plan against: a built-in name, NxGxGPU[@BANDWIDTH][+...] or a TOML
    /// file; see docs/inputs.md.
    #[arg(long, value_name = "CLUSTER")]
    cluster: Option<String>,
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Convert other tools' profiles into a hetplan profile database.
    #[command(after_help = "Sources:\n  \
        sailor  PATH is Sailor's data directory (profiles_tmp.json and, if present, llm_info.json)\n          \
        or its profiles_tmp.json\n  \
        metis   PATH... are Metis profile files (DeviceType.A100_tp1_bs2.json) or directories of them\n  \
        oobleck PATH... are Oobleck profile directories or files; needs --gpu and --model\n\n\
        Examples:\n  \
        hetplan profile import --from sailor sailor/profiling -o sailor.json\n  \
        hetplan profile import --from metis metis/profile_data_samples -o metis.json")]
    Import(ImportArgs),
    /// Measure a model's layers (and collectives) with PyTorch: runs `python -m
    /// hetplan.profile` with the arguments given (pip install ./python torch).
    #[command(after_help = "Examples:\n  \
        hetplan profile run --model llama3-8b --gpu h100-sxm5-80gb --seq-len 4096 --mbs 1,2,4 \
        --tp 1,2 --out profile.json\n  \
        hetplan profile run --help\n\n\
        The interpreter is $HETPLAN_PYTHON, else python3.")]
    Run(RunArgs),
    /// Set each measured layer sample of a profile database beside hetplan's analytic
    /// model: forward and backward time, and the activations kept for backward.
    #[command(after_help = "Examples:\n  \
        hetplan profile compare --profile profile.json --model llama3-8b\n  \
        hetplan profile compare --profile profile.json --model config.json --json")]
    Compare(CompareArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Arguments for `python -m hetplan.profile`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

#[derive(Args)]
struct CompareArgs {
    /// The profile database.
    #[arg(long, value_name = "PROFILE.json")]
    profile: String,
    /// The model the profiles measured: a catalog name or a HuggingFace config.
    #[arg(long)]
    model: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ImportFrom {
    Sailor,
    Metis,
    Oobleck,
}

#[derive(Args)]
struct ImportArgs {
    /// The tool whose profiles these are.
    #[arg(long = "from", value_enum)]
    from: ImportFrom,
    /// Input files or directories.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
    /// Where to write the database (`-` for stdout).
    #[arg(short = 'o', long = "output", value_name = "OUT.json")]
    output: String,
    /// GPU the profiles were measured on (Oobleck only).
    #[arg(long)]
    gpu: Option<String>,
    /// Model the profiles are of (Oobleck only).
    #[arg(long)]
    model: Option<String>,
}

#[derive(Args)]
struct CalibrateArgs {
    /// Measurements CSV (default: the data shipped with hetplan).
    #[arg(long, value_name = "CSV")]
    data: Option<String>,
    /// Check published runs in the shared schema instead (docs/validation.md §8), each beside
    /// the estimate and the simulation of the plan it ran: `torchtitan`, `megatron_lm_readme`,
    /// `bigscience_bloom_prequel`, `nemo_megatron_bridge` (built in), `all` of them, or a CSV in
    /// that schema.
    #[arg(long, value_name = "NAME|CSV", conflicts_with_all = ["data", "inter_node_bandwidth"])]
    published: Option<String>,
    /// Network bandwidth of each node, per direction, for every row (default: the CSV's
    /// `inter_node` column, else 1600 Gbps, the set-up of the built-in data).
    #[arg(long, value_name = "BANDWIDTH")]
    inter_node_bandwidth: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The planners, one per line with what each is, from the registry (`planners::all()`): `plan`
/// and `compare` print it after their help, so a new planner appears there by itself.
fn planner_list() -> String {
    let all = hetplan::planners::all();
    let width = all.iter().map(|p| p.name().len()).max().unwrap_or(0);
    let mut s = String::from("Planners (--algo NAME; `compare` runs them all):\n");
    for p in &all {
        s.push_str(&format!("  {:width$}  {}\n", p.name(), p.description()));
    }
    s
}

fn with_planner_list(cmd: clap::Command) -> clap::Command {
    let list = planner_list();
    let add = |c: clap::Command| {
        let rest = c
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        c.after_help(format!("{list}\n{rest}"))
    };
    cmd.mut_subcommand("plan", add)
        .mut_subcommand("compare", add)
}

fn main() -> ExitCode {
    // No backtraces and no panic messages in the user's face: a bug is reported in one line.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("error: internal error{at}: {msg}");
    }));
    let _ = miette::set_hook(Box::new(|_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .terminal_links(false)
                .build(),
        )
    }));
    let cli = match Cli::from_arg_matches(&with_planner_list(Cli::command()).get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match std::panic::catch_unwind(|| run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            e.report();
            ExitCode::from(e.exit_code() as u8)
        }
        Err(_) => ExitCode::from(diag::EXIT_FAILURE as u8),
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Estimate(a) => estimate(a),
        Command::Simulate(a) => simulate(a),
        Command::Export(a) => export::export(a),
        Command::Import(a) => import::import(a),
        Command::Gpus(a) => gpus(a),
        Command::Models(a) => models(a),
        Command::Clusters(a) => clusters(a),
        Command::Validate(a) => validate(a),
        Command::Profile(ProfileCommand::Import(a)) => profile_import(a),
        Command::Profile(ProfileCommand::Run(a)) => profile_run(a),
        Command::Profile(ProfileCommand::Compare(a)) => profile_compare(a),
        Command::Calibrate(a) => calibrate(a),
        Command::Plan(a) => planning::plan(a),
        Command::Compare(a) => planning::compare(a),
        Command::Scenarios(a) => planning::scenarios(a),
    }
}

/// Writes data to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Failure(format!(
            "cannot write output: {}",
            diag::io_reason(&e)
        ))),
    }
}

fn emit_json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Failure(format!("cannot serialise the output: {e}")))?;
    s.push('\n');
    emit(&s)
}

// ------------------------------------------------------------------------------------ estimate

/// `hetplan estimate --json`: the estimate with what it is an estimate of. These keys are an
/// interface: add, never rename.
#[derive(Serialize)]
struct EstimateOutput<'a> {
    model: &'a str,
    cluster: &'a str,
    seq_len: u64,
    /// `analytic`, or `profile` when measured layer times were used.
    compute: &'static str,
    plan: &'a Plan,
    #[serde(flatten)]
    estimate: &'a Estimate,
}

/// The loaded and validated inputs of `estimate` and `simulate`.
struct Loaded {
    model: hetplan::Model,
    cluster: hetplan::Cluster,
    plan: hetplan::plan::ValidPlan,
    seq_len: u64,
    db: Option<ProfileDb>,
}

fn load_inputs(a: &PlanInputs) -> Result<Loaded> {
    let model = inputs::load_model(&a.model)?;
    let cluster = inputs::load_cluster(&a.cluster)?;
    let plan = inputs::load_plan(&a.plan, &model, &cluster)?;
    if let (Some(made_for), false) = (&plan.made_for, a.ignore_fingerprint) {
        let differs = made_for.differences(&hetplan::plan::MadeFor::of(&model, &cluster));
        if !differs.is_empty() {
            return Err(CliError::Usage(format!(
                "{}: this plan was made for another {}: {} differ{} from the one it was \
                 planned on (a plan names GPUs by node index, so reordered node groups mean \
                 other GPUs); plan again with `hetplan plan`, or pass --ignore-fingerprint",
                a.plan,
                if differs.len() == 2 {
                    "cluster and model"
                } else {
                    &differs[0][4..]
                },
                differs.join(" and "),
                if differs.len() == 2 { "" } else { "s" }
            )));
        }
    }
    let seq_len = a.seq_len.unwrap_or(model.default_seq_len);
    hetplan::plan::validate::validate_seq_len(&model, seq_len)
        .map_err(|e| CliError::Usage(format!("--seq-len {seq_len}: {e}")))?;
    let db = match &a.profile {
        Some(p) => Some(inputs::load_profile(p)?),
        None => None,
    };
    Ok(Loaded {
        model,
        cluster,
        plan,
        seq_len,
        db,
    })
}

/// The estimate of the loaded plan, with the compute times it used (measured where the profile
/// has them) handed to `then`, and the line that says where they came from.
fn with_compute<T>(
    a: &PlanInputs,
    l: &Loaded,
    then: impl FnOnce(Workload<'_>, &dyn ComputeTimes, Estimate, render::ComputeSource) -> T,
) -> T {
    let index =
        l.db.as_ref()
            .map(|db| ProfileIndex::for_setup(db, Some(l.seq_len), Some(l.plan.precision)));
    let profiled = index.as_ref().map(|index| Profiled {
        index,
        interpolation: a.interpolation.into(),
    });
    let compute: &dyn ComputeTimes = match &profiled {
        Some(p) => p,
        None => &Analytic,
    };
    let w = Workload {
        model: &l.model,
        cluster: &l.cluster,
        seq_len: l.seq_len,
    };
    let est = cost::estimate(w, &l.plan, compute);
    let description = match &a.profile {
        Some(path) => {
            let how = match a.interpolation {
                InterpolationArg::MonotoneCubic => "monotone-cubic",
                InterpolationArg::MetisPowersOfTwo => "metis-powers-of-two",
            };
            let used = est
                .stages
                .iter()
                .any(|s| s.compute_source != TimeSource::Analytic);
            if used {
                format!("measured layer times from {path} ({how}), analytic where it has none")
            } else {
                format!(
                    "analytic: {path} has no layer times for `{}` at this sequence length, \
                     precision and tp on these GPUs",
                    l.model.name
                )
            }
        }
        None => "analytic (no profile)".to_string(),
    };
    then(w, compute, est, render::ComputeSource { description })
}

/// Says on stderr that a plan does not fit, with the estimate's reasons (the output says it
/// too: `fits` in JSON, the memory line in text).
fn warn_if_it_does_not_fit(est: &Estimate) {
    if !est.fits {
        eprintln!("warning: this plan does not fit in memory; it would not run");
        for n in est
            .notes
            .iter()
            .filter(|n| n.contains("out of memory") || n.contains("out of host memory"))
        {
            eprintln!("  {n}");
        }
    }
}

fn estimate(a: EstimateArgs) -> Result<()> {
    let l = load_inputs(&a.inputs)?;
    let (est, source) = with_compute(&a.inputs, &l, |_, _, est, source| (est, source));
    warn_if_it_does_not_fit(&est);
    if a.json {
        emit_json(&EstimateOutput {
            model: &l.model.name,
            cluster: &l.cluster.name,
            seq_len: l.seq_len,
            compute: if l.db.is_some() {
                "profile"
            } else {
                "analytic"
            },
            plan: l.plan.as_plan(),
            estimate: &est,
        })
    } else {
        emit(&render::estimate(
            &l.model, &l.cluster, &l.plan, l.seq_len, &est, &source,
        ))
    }
}

// ------------------------------------------------------------------------------------ simulate

/// `hetplan simulate --json`: the simulation with what it simulated. These keys are an
/// interface: add, never rename.
#[derive(Serialize)]
struct SimulateOutput<'a> {
    model: &'a str,
    cluster: &'a str,
    seq_len: u64,
    /// `analytic`, or `profile` when measured layer times were used.
    compute: &'static str,
    interference: bool,
    plan: &'a Plan,
    /// The cost model's iteration time, for comparison.
    estimate_iteration_time_s: f64,
    /// Whether the plan fits in memory (by the estimate), and the estimate's notes.
    fits: bool,
    notes: &'a [String],
    #[serde(flatten)]
    simulation: &'a Simulation,
}

/// Writes an output file, or fails (exit 1) naming it.
fn write_output(path: &str, text: &str, what: &str) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Failure(format!("cannot write {path}: {}", diag::io_reason(&e))))?;
    eprintln!("wrote {path}: {what}");
    Ok(())
}

fn simulate(a: SimulateArgs) -> Result<()> {
    let l = load_inputs(&a.inputs)?;
    let opts = SimOptions {
        interference: !a.no_interference,
        max_tasks: a.max_tasks,
        ..SimOptions::default()
    };
    let (sim, est, source) = with_compute(&a.inputs, &l, |w, compute, est, source| {
        (sim::simulate(w, &l.plan, compute, &opts), est, source)
    });
    warn_if_it_does_not_fit(&est);
    let sim = sim.map_err(|e| match e {
        // A limit the user can raise: a bad request, not a failure.
        sim::SimError::TooLarge { .. } => CliError::Usage(format!("{e} (--max-tasks)")),
        sim::SimError::Engine(_) => CliError::Failure(format!("the simulation failed: {e}")),
    })?;
    if let Some(path) = &a.trace {
        write_output(
            path,
            &sim::trace::chrome_trace(&sim),
            "Chrome trace (open it in https://ui.perfetto.dev)",
        )?;
    }
    if let Some(path) = &a.svg {
        write_output(path, &sim::svg::gantt_svg(&sim), "Gantt chart")?;
    }
    if a.json {
        emit_json(&SimulateOutput {
            model: &l.model.name,
            cluster: &l.cluster.name,
            seq_len: l.seq_len,
            compute: if l.db.is_some() {
                "profile"
            } else {
                "analytic"
            },
            interference: opts.interference,
            plan: &l.plan,
            estimate_iteration_time_s: est.iteration_time_s,
            fits: est.fits,
            notes: &est.notes,
            simulation: &sim,
        })
    } else {
        emit(&render::simulation(&render::SimReport {
            model: &l.model,
            cluster: &l.cluster,
            plan: &l.plan,
            seq_len: l.seq_len,
            sim: &sim,
            estimate: &est,
            compute: &source,
            interference: opts.interference,
        }))
    }
}

// ------------------------------------------------------------------------------------- catalogs

fn gpus(a: ListArgs) -> Result<()> {
    let catalog = hetplan::gpu::catalog();
    if a.json {
        emit_json(&catalog)
    } else {
        emit(&render::gpus(&catalog))
    }
}

fn models(a: ListArgs) -> Result<()> {
    let mut rows = Vec::new();
    for entry in catalog_names() {
        let m = catalog_model(entry.name).map_err(|e| {
            CliError::Failure(format!(
                "built-in model `{}` does not load: {e}",
                entry.name
            ))
        })?;
        rows.push(render::ModelRow {
            name: entry.name.to_string(),
            params: m.params(),
            layers: m.layers.len(),
            default_seq_len: m.default_seq_len,
            description: entry.description.to_string(),
            source: entry.source.to_string(),
        });
    }
    if a.json {
        emit_json(&rows)
    } else {
        // Where else models come from, on stderr (stdout is the table).
        eprintln!(
            "note: --model also takes a HuggingFace config.json (or its directory) of model_type {}",
            hetplan::model::hf::SUPPORTED_MODEL_TYPES.join(", ")
        );
        emit(&render::models(&rows))
    }
}

fn clusters(a: ListArgs) -> Result<()> {
    let mut rows = Vec::new();
    for name in catalog_cluster_names() {
        let c = catalog_cluster(name).map_err(|e| {
            CliError::Failure(format!("built-in cluster `{name}` does not load: {e}"))
        })?;
        rows.push(render::ClusterRow::of(&c));
    }
    if a.json {
        emit_json(&rows)
    } else {
        emit(&render::clusters(&rows))
    }
}

// ------------------------------------------------------------------------------------- validate

/// What a file to validate is.
#[derive(Debug, PartialEq, Eq)]
enum FileKind {
    Cluster,
    Plan,
    Profile,
    HfConfig,
    LayerList,
    Calibration,
}

fn detect_kind(path: &str, origin: &Origin) -> Result<FileKind> {
    let text = origin.text.trim_start();
    let ext = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .unwrap_or_default();
    if ext == "csv" {
        return Ok(FileKind::Calibration);
    }
    if ext == "json" || (ext != "toml" && (text.starts_with('{') || text.starts_with('['))) {
        let v = json_value(origin)?;
        return match json_kind(&v) {
            JsonKind::Plan => Ok(FileKind::Plan),
            JsonKind::Profile => Ok(FileKind::Profile),
            JsonKind::HfConfig => Ok(FileKind::HfConfig),
            JsonKind::LayerList => Ok(FileKind::LayerList),
            JsonKind::Unknown => Err(CliError::input(
                Some(origin.clone()),
                InputError::new("cannot tell what this JSON file is")
                    .at(1, 1)
                    .hint(Some(
                        "a plan has `stages`, a profile database `format_version`, a HuggingFace \
                         config `model_type`, a layer list a `layer` array"
                            .into(),
                    )),
            )),
        };
    }
    // TOML: a cluster has node groups, a layer list layers.
    let has_table = |name: &str| {
        origin.text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with(&format!("[[{name}]]"))
                || l.starts_with(&format!("[{name}"))
                || l.starts_with(&format!("{name} "))
                || l.starts_with(&format!("{name}="))
        })
    };
    if has_table("node_group") {
        Ok(FileKind::Cluster)
    } else if has_table("layer") {
        Ok(FileKind::LayerList)
    } else if ext == "toml" {
        // Let the cluster parser say what is missing.
        Ok(FileKind::Cluster)
    } else {
        Err(CliError::input(
            Some(origin.clone()),
            InputError::new("cannot tell what this file is")
                .at(1, 1)
                .hint(Some(
                    "hetplan reads cluster TOML files ([[node_group]]), layer lists ([[layer]]), \
                 plan, profile and HuggingFace config JSON files and calibration CSV files"
                        .into(),
                )),
        ))
    }
}

fn validate(a: ValidateArgs) -> Result<()> {
    let origin = inputs::read_origin(&a.file)?;
    let kind = detect_kind(&a.file, &origin)?;
    let err = |e: InputError| CliError::input(Some(origin.clone()), e);
    if kind != FileKind::Plan && (a.model.is_some() || a.cluster.is_some()) {
        return Err(CliError::Usage(format!(
            "--model and --cluster apply to plan files only, and {} is a {}",
            a.file,
            kind_name(&kind)
        )));
    }
    let msg =
        match kind {
            FileKind::Cluster => {
                let (c, notes) =
                    hetplan::cluster::spec::parse_cluster_toml_noted(&origin.text).map_err(err)?;
                inputs::print_notes(&notes);
                format!(
                    "ok: cluster `{}`: {} GPUs ({}) in {} nodes",
                    c.name,
                    c.num_gpus(),
                    render::gpu_mix(&c),
                    c.nodes.len()
                )
            }
            FileKind::HfConfig | FileKind::LayerList => {
                let m = inputs::model_from_file(&origin, &a.file)?;
                format!(
                    "ok: model `{}`: {} parameters, {} layers ({})",
                    m.name,
                    render::fmt_count(m.params() as f64),
                    m.layers.len(),
                    kind_name(&kind)
                )
            }
            FileKind::Profile => {
                let db = ProfileDb::parse(&origin.text).map_err(err)?;
                let samples: usize = db.profiles.iter().map(|p| p.layers.len()).sum();
                format!(
                    "ok: profile database: {} profiles, {} layer samples",
                    db.profiles.len(),
                    samples
                )
            }
            FileKind::Calibration => {
                let rows = calibration::parse_csv(&origin.text).map_err(err)?;
                format!("ok: calibration data: {} measured runs", rows.len())
            }
            FileKind::Plan => {
                let plan = inputs::plan_from_file(&origin)?;
                match (&a.model, &a.cluster) {
                    (Some(m), Some(c)) => {
                        let model = inputs::load_model(m)?;
                        let cluster = inputs::load_cluster(c)?;
                        let plan = inputs::check_plan(plan, Some(&origin), &model, &cluster)?;
                        format!(
                            "ok: plan: {} stages on {} GPUs, valid for `{}` on `{}`",
                            plan.stages.len(),
                            plan.devices().len(),
                            model.name,
                            cluster.name
                        )
                    }
                    (None, None) => format!(
                    "ok: plan syntax: {} stages on {} GPUs (give --model and --cluster to check it \
                     against them)",
                    plan.stages.len(),
                    plan.devices().len()
                ),
                    _ => return Err(CliError::Usage(
                        "checking a plan needs both --model and --cluster (or neither, for syntax \
                         only)"
                            .into(),
                    )),
                }
            }
        };
    emit(&format!("{msg}\n"))
}

fn kind_name(k: &FileKind) -> &'static str {
    match k {
        FileKind::Cluster => "cluster file",
        FileKind::Plan => "plan file",
        FileKind::Profile => "profile database",
        FileKind::HfConfig => "HuggingFace config",
        FileKind::LayerList => "layer list",
        FileKind::Calibration => "calibration CSV",
    }
}

// -------------------------------------------------------------------------------------- profile

/// Files given to an importer: directories expand to their JSON files, in name order.
fn collect_files(paths: &[String]) -> Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    for p in paths {
        let path = Path::new(p);
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| CliError::read(p, &e))?;
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file()
                        && f.extension()
                            .and_then(|x| x.to_str())
                            .is_some_and(|x| x.eq_ignore_ascii_case("json"))
                })
                .map(|f| f.to_string_lossy().into_owned())
                .collect();
            names.sort();
            if names.is_empty() {
                return Err(CliError::Usage(format!("{p} holds no .json files")));
            }
            for n in names {
                let text = inputs::read_file(&n)?;
                files.push((n, text));
            }
        } else {
            files.push((p.clone(), inputs::read_file(p)?));
        }
    }
    Ok(files)
}

/// Attributes an importer's error to the file whose name starts its message (`file.json: ...`).
fn attribute(files: &[(String, String)], mut e: InputError) -> CliError {
    for (path, text) in files {
        let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
        if let Some(rest) = e.message.strip_prefix(&format!("{base}: ")) {
            e.message = rest.to_string();
            return CliError::input(Some(Origin::file(path, text.clone())), e);
        }
    }
    if files.len() == 1 {
        let (path, text) = &files[0];
        return CliError::input(Some(Origin::file(path, text.clone())), e);
    }
    CliError::input(None, e)
}

fn profile_import(a: ImportArgs) -> Result<()> {
    if a.from != ImportFrom::Oobleck && (a.gpu.is_some() || a.model.is_some()) {
        return Err(CliError::Usage(
            "--gpu and --model apply to --from oobleck only".into(),
        ));
    }
    let db = match a.from {
        ImportFrom::Sailor => {
            if a.paths.len() != 1 {
                return Err(CliError::Usage(
                    "--from sailor takes one PATH: Sailor's data directory or its profiles_tmp.json"
                        .into(),
                ));
            }
            let p = &a.paths[0];
            let (profiles_path, info_path) = if Path::new(p).is_dir() {
                let dir = Path::new(p);
                let info = dir.join("llm_info.json");
                (
                    dir.join("profiles_tmp.json").to_string_lossy().into_owned(),
                    info.is_file().then(|| info.to_string_lossy().into_owned()),
                )
            } else {
                (p.clone(), None)
            };
            let profiles = inputs::read_origin(&profiles_path)?;
            let info = match &info_path {
                Some(ip) => Some(inputs::read_origin(ip)?),
                None => None,
            };
            profile::import_sailor(&profiles.text, info.as_ref().map(|o| o.text.as_str())).map_err(
                |e| {
                    let from_info = e
                        .field
                        .as_deref()
                        .is_some_and(|f| f == "llm_info" || f.starts_with("llm_info."));
                    match (&info, from_info) {
                        (Some(i), true) => CliError::input(Some(i.clone()), e),
                        _ => CliError::input(Some(profiles.clone()), e),
                    }
                },
            )?
        }
        ImportFrom::Metis => {
            let files = collect_files(&a.paths)?;
            profile::import_metis(&files).map_err(|e| attribute(&files, e))?
        }
        ImportFrom::Oobleck => {
            let (Some(gpu), Some(model)) = (&a.gpu, &a.model) else {
                return Err(CliError::Usage(
                    "--from oobleck needs --gpu and --model: Oobleck's files name neither".into(),
                ));
            };
            let files = collect_files(&a.paths)?;
            profile::import_oobleck(gpu, model, &files).map_err(|e| attribute(&files, e))?
        }
    };
    let json = db.to_json();
    let samples: usize = db.profiles.iter().map(|p| p.layers.len()).sum();
    if a.output == "-" {
        emit(&json)?;
    } else {
        std::fs::write(&a.output, &json).map_err(|e| {
            CliError::Failure(format!(
                "cannot write {}: {}",
                a.output,
                diag::io_reason(&e)
            ))
        })?;
    }
    eprintln!(
        "wrote {}: {} profiles, {} layer samples",
        if a.output == "-" { "stdout" } else { &a.output },
        db.profiles.len(),
        samples
    );
    Ok(())
}

/// `python -m hetplan.profile ARGS`, its output passed through; its exit status is ours.
fn profile_run(a: RunArgs) -> Result<()> {
    let python = std::env::var("HETPLAN_PYTHON").unwrap_or_else(|_| "python3".into());
    // Ask first whether the package and PyTorch import, to say what to install.
    let probe = std::process::Command::new(&python)
        .args(["-c", "import hetplan.profile, torch"])
        .output()
        .map_err(|e| {
            CliError::Failure(format!(
                "cannot run {python}: {}; set HETPLAN_PYTHON to a Python with the hetplan \
                 package and PyTorch",
                diag::io_reason(&e)
            ))
        })?;
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr);
        let last = why.lines().last().unwrap_or("").trim();
        return Err(CliError::Failure(format!(
            "{python} cannot import the profiler ({last}); install it with `pip install ./python \
             torch` from hetplan's repository, or set HETPLAN_PYTHON to a Python that has both"
        )));
    }
    let status = std::process::Command::new(&python)
        .args(["-m", "hetplan.profile"])
        .args(&a.args)
        .status()
        .map_err(|e| CliError::Failure(format!("cannot run {python}: {}", diag::io_reason(&e))))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => Err(CliError::Exit(code)),
        None => Err(CliError::Failure(format!(
            "{python} -m hetplan.profile was killed by a signal"
        ))),
    }
}

fn profile_compare(a: CompareArgs) -> Result<()> {
    let db = inputs::load_profile(&a.profile)?;
    let model = inputs::load_model(&a.model)?;
    let checks = hetplan::cost::profiled::compare_with_model(&db, &model).map_err(|e| {
        CliError::Refused {
            reasons: vec![format!("{}: {e}", a.profile)],
            help: Some(
                "--model names the model the profile measured (the name in its `model` field), \
                 and its GPUs must be catalog types (hetplan gpus)"
                    .into(),
            ),
        }
    })?;
    if a.json {
        emit_json(&checks)
    } else {
        emit(&render::profile_checks(&checks))
    }
}

// ------------------------------------------------------------------------------------ calibrate

/// What `calibrate --published` prints as JSON.
#[derive(Serialize)]
struct PublishedReport {
    rows: Vec<calibration::published::Checked>,
    /// Rows that cannot be checked: `(row_id, line, why)`.
    skipped: Vec<(String, usize, String)>,
}

fn calibrate_published(which: &str, json: bool) -> Result<()> {
    use calibration::published::{check, parse, Outcome, BUILTIN};
    let sources: Vec<Origin> = match which {
        "all" => (BUILTIN.iter())
            .map(|(name, text)| Origin {
                name: (*name).to_string(),
                text: (*text).to_string(),
                json: false,
            })
            .collect(),
        name => match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => vec![Origin {
                name: (*n).to_string(),
                text: (*text).to_string(),
                json: false,
            }],
            // A bare word is a name, not a file.
            None if !name.contains(['.', '/']) => {
                let known: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                return Err(CliError::input(
                    Some(Origin::arg("--published", name)),
                    InputError::new(format!("no built-in published data `{name}`"))
                        .at(1, 1)
                        .hint(Some(format!(
                            "the built-in ones are {}, or `all`; or give a CSV file",
                            known.join(", ")
                        ))),
                ));
            }
            None => vec![inputs::read_origin(name)?],
        },
    };
    let mut report = PublishedReport {
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    for origin in &sources {
        let err = |e: InputError| CliError::input(Some(origin.clone()), e);
        // The source's conventions follow its name (a file's stem).
        let source = Path::new(&origin.name)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(&origin.name)
            .to_string();
        for o in parse(&source, &origin.text).map_err(err)? {
            match o {
                Outcome::Case(c) => {
                    let checked = check(&c, true).map_err(|errs| {
                        let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
                        err(InputError::new(format!(
                            "row {}'s plan is not valid: {}",
                            c.id,
                            all.join("; ")
                        ))
                        .at(c.line, 1))
                    })?;
                    report.rows.push(checked);
                }
                Outcome::Skipped { id, line, reason } => report.skipped.push((id, line, reason)),
            }
        }
    }
    if json {
        emit_json(&report)
    } else {
        emit(&render::published(&report.rows, &report.skipped))
    }
}

fn calibrate(a: CalibrateArgs) -> Result<()> {
    if let Some(which) = &a.published {
        return calibrate_published(which, a.json);
    }
    let origin = match &a.data {
        Some(p) => inputs::read_origin(p)?,
        None => Origin {
            name: "built-in calibration data".into(),
            text: calibration::BUILTIN_CSV.to_string(),
            json: false,
        },
    };
    let err = |e: InputError| CliError::input(Some(origin.clone()), e);
    let rows = calibration::parse_csv(&origin.text).map_err(err)?;
    let mut rows = rows;
    if let Some(bw) = &a.inter_node_bandwidth {
        let bw: BytesPerSec = bw.parse().map_err(|e: hetplan::units::UnitError| {
            CliError::input(
                Some(Origin::arg("--inter-node-bandwidth", bw)),
                InputError::new(e.to_string())
                    .at(1, 1)
                    .hint(Some("e.g. --inter-node-bandwidth \"3200 Gbps\"".into())),
            )
        })?;
        for r in &mut rows {
            r.inter_node = bw;
        }
    }
    let report = calibration::check(&rows).map_err(err)?;
    if a.json {
        emit_json(&report)
    } else {
        emit(&render::calibration(&report))
    }
}
