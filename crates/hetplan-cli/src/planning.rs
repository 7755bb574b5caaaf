//! `hetplan plan`, `hetplan compare` and `hetplan scenarios`: running the planners.

use crate::diag::{CliError, Result};
use crate::inputs;
use hetplan::cost::{Analytic, ComputeTimes, Profiled, Workload};
use hetplan::plan::runtime::Runtime;
use hetplan::plan::{Compile, Plan, Precision, ValidPlan};
use hetplan::planners::{
    self, Clock, Limits, Outcome, PlanOptions, Planner, Problem, Progress, Search,
};
use hetplan::profile::{ProfileDb, ProfileIndex};
use hetplan::sim::{self, SimOptions};
use hetplan::units::Seconds;
use hetplan::{Cluster, Model};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::time::Instant;

/// The wall clock, for time limits: only the CLI reads it.
struct WallClock(Instant);

impl Clock for WallClock {
    fn elapsed(&self) -> Seconds {
        Seconds(self.0.elapsed().as_secs_f64())
    }
}

/// A spinner on stderr when it is a terminal; one line when the search starts otherwise.
struct Bar(Option<ProgressBar>);

impl Bar {
    fn new(what: &str) -> Bar {
        if !std::io::stderr().is_terminal() {
            // Off a terminal, one line a search, so a log shows what ran (progress on stderr).
            eprintln!("{what}: searching");
            return Bar(None);
        }
        let pb = ProgressBar::new_spinner();
        pb.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        pb.set_prefix(what.to_string());
        Bar(Some(pb))
    }
    fn finish(&self) {
        if let Some(pb) = &self.0 {
            pb.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn report(&self, explored: u64, best: Option<Seconds>) {
        if let Some(pb) = &self.0 {
            let best = best.map(|b| format!(", best {b}")).unwrap_or_default();
            pb.set_message(format!("{explored} candidates{best}"));
            pb.tick();
        }
    }
}

/// What the planning commands share.
#[derive(clap::Args)]
pub struct ProblemArgs {
    /// Model: a catalog name, a HuggingFace config.json or a layer list (with --cluster and
    /// --gbs; or use --scenario).
    #[arg(long, value_name = "MODEL", required_unless_present = "scenario")]
    pub model: Option<String>,
    /// Cluster: a built-in name, NxGxGPU[@BANDWIDTH] (groups joined by `+`:
    /// 2x8xa100-80gb+4x8xv100-32gb@100Gbps), or a TOML file; see docs/inputs.md.
    #[arg(long, value_name = "CLUSTER", required_unless_present = "scenario")]
    pub cluster: Option<String>,
    /// Global batch size (samples per iteration).
    #[arg(long, value_name = "N", required_unless_present = "scenario")]
    pub gbs: Option<u64>,
    /// A built-in scenario (see `hetplan scenarios`) instead of --model/--cluster/--gbs.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["model", "cluster", "gbs"])]
    pub scenario: Option<String>,
    /// Sequence length (default: the scenario's or the model's).
    #[arg(long, value_name = "N")]
    pub seq_len: Option<u64>,
    /// Measured layer times to use where they exist (a profile database).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<String>,
    /// Stop each search after this long (e.g. `30s`, `2 min`; `none` for no time limit); the
    /// best plan so far is kept. `compare` gives each planner this long.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub time_limit: String,
    /// Stop each search after evaluating this many candidates. Default: no node limit while a
    /// time limit governs; 10,000,000 with `--time-limit none`.
    #[arg(long, value_name = "N")]
    pub max_nodes: Option<u64>,
    /// Largest tensor-parallel degree to consider.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_tp: u32,
    /// Largest expert-parallel degree hetplan's planner considers for MoE models (1: none).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_ep: u32,
    /// Largest context-parallel degree hetplan's planner considers: each sequence split over
    /// that many GPUs (ring attention), for long contexts (1: none).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_cp: u32,
    /// The engine the plan must run on. `any`: any plan, a heterogeneity-aware runtime's
    /// included, with the best plan each mainstream engine runs beside it (hetplan's planner).
    /// An engine also sets what the cost model assumes overlaps compute and how ZeRO
    /// prefetches (`any`: Megatron's behaviour).
    #[arg(long, value_enum, default_value_t = EngineArg::Any)]
    pub engine: EngineArg,
    /// Training precision; layer times of a --profile are looked up in it.
    #[arg(long, value_enum, default_value_t = PrecisionArg::Bf16)]
    pub precision: PrecisionArg,
    /// How much of the model's PyTorch code runs under torch.compile, with --engine
    /// torchtitan or fsdp: `on`, the blocks and the loss (torchtitan's CompileConfig
    /// components); `blocks`, the loss eager; `off`, eagerly (torchtitan's default), each
    /// norm, rotary embedding and gated activation the separate kernels its code writes.
    #[arg(long, value_enum, default_value_t = CompileArg::On)]
    pub compile: CompileArg,
}

/// `--compile`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompileArg {
    On,
    Blocks,
    Off,
}

impl From<CompileArg> for Compile {
    fn from(c: CompileArg) -> Compile {
        match c {
            CompileArg::On => Compile::On,
            CompileArg::Blocks => Compile::Blocks,
            CompileArg::Off => Compile::Off,
        }
    }
}

/// `--engine`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum EngineArg {
    Any,
    Megatron,
    Deepspeed,
    Torchtitan,
    Fsdp,
}

impl EngineArg {
    fn runtime(self) -> Option<Runtime> {
        match self {
            EngineArg::Any => None,
            EngineArg::Megatron => Some(Runtime::Megatron),
            EngineArg::Deepspeed => Some(Runtime::Deepspeed),
            EngineArg::Torchtitan => Some(Runtime::Torchtitan),
            EngineArg::Fsdp => Some(Runtime::Fsdp),
        }
    }
}

/// `--precision`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PrecisionArg {
    /// BF16 compute, FP32 master weights and Adam states.
    Bf16,
    /// FP16 with loss scaling.
    Fp16,
    /// FP32 throughout, the matrix products too (PyTorch's default).
    Fp32,
    /// FP32 with the matrix products in TF32 on Ampere and later GPUs
    /// (`torch.backends.cuda.matmul.allow_tf32 = True`); FP32 on older ones.
    Tf32,
    /// FP8 matrix products in the transformer blocks (Transformer Engine, torchao Float8),
    /// BF16 elsewhere; needs Ada, Hopper or Blackwell GPUs.
    Fp8,
    /// FP8 by torchao's rowwise recipe (per-row scales, CUTLASS's rowwise kernel; torchtitan
    /// `float8.recipe_name = "rowwise"`): slower than per-tensor scaling, better at outliers.
    Fp8Rowwise,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Precision {
        match p {
            PrecisionArg::Bf16 => Precision::Bf16,
            PrecisionArg::Fp16 => Precision::Fp16,
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Tf32 => Precision::Tf32,
            PrecisionArg::Fp8 => Precision::Fp8,
            PrecisionArg::Fp8Rowwise => Precision::Fp8Rowwise,
        }
    }
}

struct LoadedProblem {
    model: Model,
    cluster: Cluster,
    global_batch: u64,
    seq_len: u64,
    db: Option<ProfileDb>,
    scenario: Option<String>,
}

fn load(a: &ProblemArgs) -> Result<LoadedProblem> {
    let (model, cluster, global_batch, default_seq, scenario) = match &a.scenario {
        Some(name) => {
            let s = hetplan::scenario::scenario(name).map_err(|e| {
                CliError::Usage(format!(
                    "--scenario {name}: {}{}",
                    e.message,
                    e.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                ))
            })?;
            (s.model, s.cluster, s.global_batch, s.seq_len, Some(s.name))
        }
        None => {
            let model = inputs::load_model(a.model.as_deref().unwrap_or_default())?;
            let cluster = inputs::load_cluster(a.cluster.as_deref().unwrap_or_default())?;
            let seq = model.default_seq_len;
            (model, cluster, a.gbs.unwrap_or(0), seq, None)
        }
    };
    if global_batch == 0 {
        return Err(CliError::Usage("--gbs must be at least 1".into()));
    }
    if a.compile != CompileArg::On
        && !a
            .engine
            .runtime()
            .is_some_and(|r| r.engine().runs_pytorch_code())
    {
        return Err(CliError::Usage(format!(
            "--compile {}: only PyTorch's own model code (--engine torchtitan or fsdp) runs \
             uncompiled; Megatron and DeepSpeed run their own fused kernels (drop --compile, or \
             give --engine torchtitan)",
            Compile::from(a.compile).name()
        )));
    }
    let seq_len = a.seq_len.unwrap_or(default_seq);
    hetplan::plan::validate::validate_seq_len(&model, seq_len)
        .map_err(|e| CliError::Usage(format!("--seq-len {seq_len}: {e}")))?;
    let db = match &a.profile {
        Some(p) => Some(inputs::load_profile(p)?),
        None => None,
    };
    Ok(LoadedProblem {
        model,
        cluster,
        global_batch,
        seq_len,
        db,
        scenario,
    })
}

/// Plan summaries in `compare`'s table are cut to this many characters (`--json` has them whole).
const SUMMARY_CHARS: usize = 72;

/// `s`, cut to `max` characters with an ellipsis.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// The node limit when no time limit bounds a search.
const UNTIMED_MAX_NODES: u64 = 10_000_000;

/// The search limits: the time limit governs (no node limit unless one is asked for); with
/// `--time-limit none`, the node limit bounds the search instead.
fn limits(a: &ProblemArgs) -> Result<Limits> {
    let t = a.time_limit.trim();
    let time = if t.eq_ignore_ascii_case("none") {
        None
    } else {
        Some(
            t.parse::<Seconds>()
                .map_err(|e| CliError::Usage(format!("--time-limit {t}: {e}")))?,
        )
    };
    let max_nodes = match (a.max_nodes, time) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(UNTIMED_MAX_NODES),
    };
    Ok(Limits { max_nodes, time })
}

/// Runs one planner with the wall clock and a spinner; returns the outcome and the search time.
fn run_planner(
    planner: &dyn Planner,
    problem: &Problem<'_>,
    limits: Limits,
    what: &str,
) -> (std::result::Result<Outcome, planners::PlannerError>, f64) {
    let clock = WallClock(Instant::now());
    let bar = Bar::new(what);
    let mut search = Search::new(limits, &clock, &bar);
    let out = planner.plan(problem, &mut search);
    bar.finish();
    (out, clock.elapsed().get())
}

fn with_problem<T>(l: &LoadedProblem, a: &ProblemArgs, then: impl FnOnce(&Problem<'_>) -> T) -> T {
    let precision: Precision = a.precision.into();
    let index =
        l.db.as_ref()
            .map(|db| ProfileIndex::for_setup(db, Some(l.seq_len), Some(precision)));
    let profiled = index.as_ref().map(|index| Profiled {
        index,
        interpolation: Default::default(),
    });
    let compute: &dyn ComputeTimes = match &profiled {
        Some(p) => p,
        None => &Analytic,
    };
    let problem = Problem {
        model: &l.model,
        cluster: &l.cluster,
        global_batch: l.global_batch,
        seq_len: l.seq_len,
        compute,
        options: PlanOptions {
            max_tp: a.max_tp,
            max_ep: a.max_ep,
            max_cp: a.max_cp,
            engine: hetplan::plan::runtime::planning_engine(a.engine.runtime(), precision),
            runtime: a.engine.runtime(),
            precision,
            compile: a.compile.into(),
            ..PlanOptions::default()
        },
    };
    then(&problem)
}

// ----------------------------------------------------------------------------------------- plan

/// Estimate and simulation of a plan that differ by more than this fraction are reported.
const SIM_DISAGREES: f64 = 0.05;

#[derive(clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// The planner (listed below).
    #[arg(long, value_name = "NAME", default_value = "hetplan")]
    pub algo: String,
    /// Write the plan (JSON, accepted by `estimate` and `simulate`) to this file.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `hetplan plan --json`: keys are an interface, add never rename.
#[derive(Serialize)]
struct PlanOutput<'a> {
    algo: &'a str,
    model: &'a str,
    cluster: &'a str,
    global_batch: u64,
    seq_len: u64,
    search_time_s: f64,
    /// No plan of any planner is faster, by hetplan's estimate (`planners::bound`).
    lower_bound_s: f64,
    /// How far this plan's estimate is above it, as a fraction of the estimate.
    gap: f64,
    /// The simulator's iteration time of the plan (absent when it could not simulate it).
    simulate_s: Option<f64>,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

pub fn plan(a: PlanArgs) -> Result<()> {
    let l = load(&a.problem)?;
    let planner = planners::by_name(&a.algo).map_err(CliError::Usage)?;
    let limits = limits(&a.problem)?;
    let (out, secs, bound, simulated) = with_problem(&l, &a.problem, |p| {
        let (out, secs) = run_planner(planner.as_ref(), p, limits, planner.name());
        // The simulator checks the answer: a plan whose estimate it does not confirm says so.
        let simulated = out.as_ref().ok().map(|o| {
            let w = Workload {
                model: p.model,
                cluster: p.cluster,
                seq_len: p.seq_len,
            };
            ValidPlan::check(&o.plan, p.model, p.cluster)
                .map_err(|e| format!("{} problems", e.len()))
                .and_then(|v| {
                    sim::simulate(w, &v, p.compute, &SimOptions::default())
                        .map(|s| s.iteration_time_s)
                        .map_err(|e| e.to_string())
                })
        });
        (out, secs, planners::bound::lower_bound(p), simulated)
    });
    let mut outcome = out.map_err(|e| {
        // Say why when the model's state alone outgrows the cluster.
        let why = with_problem(&l, &a.problem, |p| {
            planners::common::state_exceeds_cluster(p)
        });
        CliError::Failure(match why {
            Some(w) => format!("{}: {e}; {w}", planner.name()),
            None => format!("{}: {e}", planner.name()),
        })
    })?;
    let est_s = outcome.estimate.iteration_time_s;
    drop_unsimulated_note(&mut outcome.notes, matches!(simulated, Some(Ok(_))));
    match &simulated {
        Some(Ok(sim_s)) if (sim_s - est_s).abs() > SIM_DISAGREES * est_s => {
            outcome.notes.push(format!(
                "the simulator does not confirm the estimate: it runs the plan in {} ({:+.1}%); \
                 `hetplan simulate` shows where the time goes",
                Seconds(*sim_s),
                (sim_s - est_s) / est_s * 100.0
            ));
        }
        Some(Err(e)) => outcome.notes.push(format!("not simulated: {e}")),
        _ => {}
    }
    // The plan remembers what it was made for: `estimate`/`simulate` refuse it elsewhere.
    outcome.plan.made_for = Some(hetplan::plan::MadeFor::of(&l.model, &l.cluster));
    if let Some(path) = &a.output {
        let json = serde_json::to_string_pretty(&outcome.plan)
            .map_err(|e| CliError::Failure(e.to_string()))?;
        std::fs::write(path, json + "\n").map_err(|e| {
            CliError::Failure(format!(
                "cannot write {path}: {}",
                crate::diag::io_reason(&e)
            ))
        })?;
        eprintln!("wrote {path}: the plan");
    }
    if a.json {
        return crate::emit_json(&PlanOutput {
            algo: planner.name(),
            model: &l.model.name,
            cluster: &l.cluster.name,
            global_batch: l.global_batch,
            seq_len: l.seq_len,
            search_time_s: secs,
            lower_bound_s: bound.iteration_time_s,
            gap: bound.gap(Seconds(outcome.estimate.iteration_time_s)),
            simulate_s: simulated.as_ref().and_then(|s| s.as_ref().ok().copied()),
            outcome: &outcome,
        });
    }
    let e = &outcome.estimate;
    let mut o = String::new();
    o.push_str(&format!(
        "planner  {} ({})\nproblem  {} on {} ({} GPUs), global batch {}, seq {}{}\n",
        planner.name(),
        planner.description(),
        l.model.name,
        l.cluster.name,
        l.cluster.num_gpus(),
        l.global_batch,
        l.seq_len,
        l.scenario
            .as_ref()
            .map(|s| format!(", scenario {s}"))
            .unwrap_or_default()
    ));
    o.push_str(&format!("plan     {}\n", outcome.plan.summary()));
    let simulated_line = match &simulated {
        Some(Ok(sim_s)) => format!(
            "{} ({:+.1}% vs the estimate)",
            Seconds(*sim_s),
            (sim_s - est_s) / est_s * 100.0
        ),
        _ => "not simulated".to_string(),
    };
    o.push_str(&format!(
        "estimate {} per iteration, {:.0} tokens/s per GPU, MFU {:.1}%, {}\n",
        Seconds(e.iteration_time_s),
        e.tokens_per_s_per_gpu,
        e.mfu * 100.0,
        if e.fits {
            format!("fits (peak {})", hetplan::Bytes(e.peak_memory_bytes))
        } else {
            "OUT OF MEMORY".to_string()
        }
    ));
    o.push_str(&format!("simulate {simulated_line}\n"));
    o.push_str(&format!(
        "bound    no plan of any planner is faster than {} (compute alone, every GPU busy): \
         this one is {:.1}% above it\n",
        Seconds(bound.iteration_time_s),
        bound.gap(Seconds(e.iteration_time_s)) * 100.0
    ));
    o.push_str(&format!(
        "search   {} candidates in {:.3} s, stopped: {}\n",
        outcome.explored, secs, outcome.stop_reason
    ));
    for n in &outcome.notes {
        o.push_str(&format!("note     {n}\n"));
    }
    // What a heterogeneity-aware runtime buys: the best plan each mainstream engine runs.
    for b in &outcome.per_engine {
        let name = b.engine.name();
        o.push_str(&match (&b.plan, b.estimate_s) {
            (Some(p), Some(t)) => format!(
                "engine   {name:<10} {} ({:.2}× the time{}): {}\n",
                Seconds(t),
                b.slower,
                // Equal by the estimate; below it only where the simulator broke a tie of
                // the estimate in the answer's favour.
                if (b.slower - 1.0).abs() <= 1e-9 {
                    ", runs this plan's equal"
                } else if b.slower < 1.0 {
                    ", a tie by the estimate that the simulator decided for the answer"
                } else {
                    ""
                },
                p.summary()
            ),
            _ => format!(
                "engine   {name:<10} none: {}\n",
                b.why_none.as_deref().unwrap_or("no plan")
            ),
        });
    }
    crate::emit(&o)
}

/// Where the planner's own check left the answer unsimulated for want of time and `plan` has
/// simulated it since (`simulated`), the planner's note would contradict the result beside it.
fn drop_unsimulated_note(notes: &mut Vec<String>, simulated: bool) {
    if simulated {
        notes.retain(|n| !n.starts_with(planners::hetplan::UNSIMULATED_NOTE));
    }
}

// -------------------------------------------------------------------------------------- compare

#[derive(clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One row of `hetplan compare --json`: keys are an interface, add never rename.
#[derive(Serialize)]
struct CompareRow {
    algo: String,
    /// The plan (absent when the planner found none).
    plan: Option<Plan>,
    plan_summary: Option<String>,
    /// hetplan's estimate and the simulator's time of it.
    estimate: Option<hetplan::cost::Estimate>,
    simulate: Option<f64>,
    search_time_s: f64,
    stop_reason: Option<planners::StopReason>,
    fits: Option<bool>,
    error: Option<String>,
    /// How far the estimate is above the certified lower bound, as a fraction of the estimate.
    gap: Option<f64>,
}

pub fn compare(a: CompareArgs) -> Result<()> {
    let l = load(&a.problem)?;
    let limits = limits(&a.problem)?;
    let (bound, rows) = with_problem(&l, &a.problem, |p| {
        let bound = planners::bound::lower_bound(p);
        let all = planners::all();
        let n = all.len();
        let rows: Vec<CompareRow> = all
            .into_iter()
            .enumerate()
            .map(|(i, planner)| {
                let what = format!("[{}/{n}] {}", i + 1, planner.name());
                let (out, secs) = run_planner(planner.as_ref(), p, limits, &what);
                match out {
                    Ok(o) => {
                        let w = Workload {
                            model: p.model,
                            cluster: p.cluster,
                            seq_len: p.seq_len,
                        };
                        // A planner's answer is valid (`Planner::plan`); a bug would show
                        // as a missing simulation, not a panic.
                        let sim = ValidPlan::check(&o.plan, p.model, p.cluster)
                            .ok()
                            .and_then(|v| {
                                sim::simulate(w, &v, p.compute, &SimOptions::default()).ok()
                            })
                            .map(|s| s.iteration_time_s);
                        CompareRow {
                            algo: planner.name().to_string(),
                            gap: Some(bound.gap(Seconds(o.estimate.iteration_time_s))),
                            plan_summary: Some(o.plan.summary()),
                            fits: Some(o.estimate.fits),
                            plan: Some(o.plan),
                            estimate: Some(o.estimate),
                            simulate: sim,
                            search_time_s: secs,
                            stop_reason: Some(o.stop_reason),
                            error: None,
                        }
                    }
                    Err(e) => CompareRow {
                        algo: planner.name().to_string(),
                        plan: None,
                        plan_summary: None,
                        estimate: None,
                        simulate: None,
                        search_time_s: secs,
                        stop_reason: None,
                        fits: None,
                        error: Some(e.to_string()),
                        gap: None,
                    },
                }
            })
            .collect();
        (bound, rows)
    });
    if a.json {
        return crate::emit_json(&rows);
    }
    let mut o = format!(
        "{} on {} ({} GPUs), global batch {}, seq {}\n\n",
        l.model.name,
        l.cluster.name,
        l.cluster.num_gpus(),
        l.global_batch,
        l.seq_len
    );
    // Best first: by simulated time (the judge), the estimate where the simulation failed;
    // planners without a plan last, in listing order.
    let mut order: Vec<&CompareRow> = rows.iter().collect();
    let key = |r: &CompareRow| {
        r.estimate
            .as_ref()
            .map(|e| r.simulate.unwrap_or(e.iteration_time_s))
            .unwrap_or(f64::INFINITY)
    };
    order.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let name_w = rows.iter().map(|r| r.algo.len()).max().unwrap_or(7).max(7) + 2;
    o.push_str(&format!(
        "  {:<name_w$} {:>10} {:>10} {:>6} {:>22} {:>9} {:<11} plan\n",
        "planner", "estimate", "simulate", "gap", "peak memory / capacity", "search", "stopped"
    ));
    for (i, r) in order.iter().enumerate() {
        let mark = if i == 0 && r.estimate.is_some() {
            "* "
        } else {
            "  "
        };
        match (&r.estimate, &r.plan_summary) {
            (Some(e), Some(s)) => {
                let cap = e
                    .per_gpu
                    .iter()
                    .map(|g| (g.peak_memory_bytes / g.capacity_bytes, g))
                    .max_by(|x, y| x.0.total_cmp(&y.0))
                    .map(|(_, g)| {
                        format!(
                            "{:.1}/{:.1} GiB{}",
                            g.peak_memory_bytes / 1073741824.0,
                            g.capacity_bytes / 1073741824.0,
                            if g.fits { "" } else { " OOM" }
                        )
                    })
                    .unwrap_or_default();
                o.push_str(&format!(
                    "{mark}{:<name_w$} {:>10} {:>10} {:>5.1}% {:>22} {:>8.3}s {:<11} {}\n",
                    r.algo,
                    Seconds(e.iteration_time_s).to_string(),
                    r.simulate
                        .map(|s| Seconds(s).to_string())
                        .unwrap_or_else(|| "-".into()),
                    r.gap.unwrap_or(0.0) * 100.0,
                    cap,
                    r.search_time_s,
                    r.stop_reason.map(|s| s.to_string()).unwrap_or_default(),
                    clip(s, SUMMARY_CHARS)
                ));
            }
            _ => o.push_str(&format!(
                "{mark}{:<name_w$} {:>10} {:>10} {:>6} {:>22} {:>8.3}s {:<11} {}\n",
                r.algo,
                "-",
                "-",
                "-",
                "-",
                r.search_time_s,
                "-",
                r.error.as_deref().unwrap_or("")
            )),
        }
    }
    o.push_str(&format!(
        "\n* fastest simulated; full plans with --json\ngap: above the lower bound of {}, which no \
         plan of any planner beats by hetplan's estimate (every GPU computing all the time at \
         its best TP degree and micro-batch size)\n",
        Seconds(bound.iteration_time_s)
    ));
    crate::emit(&o)
}

// ------------------------------------------------------------------------------------ scenarios

#[derive(clap::Args)]
pub struct ScenariosArgs {
    /// Print the scenarios as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct ScenarioRow {
    name: String,
    description: String,
    source: String,
    model: String,
    cluster: String,
    gpus: usize,
    global_batch: u64,
    seq_len: u64,
    assumptions: String,
}

pub fn scenarios(a: ScenariosArgs) -> Result<()> {
    let mut rows = Vec::new();
    for (name, _) in hetplan::scenario::builtin_scenarios() {
        let s = hetplan::scenario::scenario(name)
            .map_err(|e| CliError::Failure(format!("built-in scenario {name}: {}", e.message)))?;
        rows.push(ScenarioRow {
            name: s.name.clone(),
            description: s.description.clone(),
            source: s.source.clone(),
            model: s.model.name.clone(),
            cluster: crate::render::gpu_mix(&s.cluster),
            gpus: s.cluster.num_gpus(),
            global_batch: s.global_batch,
            seq_len: s.seq_len,
            assumptions: s.assumptions.clone(),
        });
    }
    if a.json {
        return crate::emit_json(&rows);
    }
    let mut o = format!(
        "{:<28} {:>5} {:<18} {:>6} {:>6}  {}\n",
        "scenario", "GPUs", "model", "gbs", "seq", "cluster / source"
    );
    for r in &rows {
        o.push_str(&format!(
            "{:<28} {:>5} {:<18} {:>6} {:>6}  {} — {}\n",
            r.name, r.gpus, r.model, r.global_batch, r.seq_len, r.cluster, r.source
        ));
    }
    crate::emit(&o)
}

// ------------------------------------------------------------------- re-plan (export, import)

/// hetplan's best plan (one that `runtime` runs, when given) for the problem `plan` was made
/// for (its global batch and precision), found within `time`: what `export` offers when the
/// engine cannot run the user's plan, and what `import` compares the user's job with. `None`
/// when no plan fits.
pub fn hetplan_best(
    model: &Model,
    cluster: &Cluster,
    plan: &Plan,
    seq_len: u64,
    compute: &dyn ComputeTimes,
    runtime: Option<Runtime>,
    time: Seconds,
) -> Option<Outcome> {
    let problem = Problem {
        model,
        cluster,
        global_batch: plan.global_batch,
        seq_len,
        compute,
        options: PlanOptions {
            engine: hetplan::plan::runtime::planning_engine(runtime, plan.precision),
            runtime,
            precision: plan.precision,
            // Another engine runs its own kernels (`PlanOptions::compile_of`).
            compile: plan.compile,
            ..PlanOptions::default()
        },
    };
    let planner = planners::by_name("hetplan").ok()?;
    let limits = Limits {
        max_nodes: None,
        time: Some(time),
    };
    let what = match runtime {
        Some(r) => format!("hetplan --engine {}", r.name()),
        None => "hetplan".to_string(),
    };
    run_planner(planner.as_ref(), &problem, limits, &what)
        .0
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unsimulated_note_goes_only_once_plan_simulated_the_answer() {
        let note = format!(
            "{}: its task graph is larger",
            planners::hetplan::UNSIMULATED_NOTE
        );
        let notes = vec!["29.4% above the lower bound".to_string(), note];
        let mut kept = notes.clone();
        drop_unsimulated_note(&mut kept, false);
        assert_eq!(kept, notes);
        drop_unsimulated_note(&mut kept, true);
        assert_eq!(kept, vec!["29.4% above the lower bound".to_string()]);
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        problem: ProblemArgs,
    }

    fn limits_of(args: &[&str]) -> Limits {
        let mut all = vec!["hetplan", "--scenario", "ditto-ex1"];
        all.extend_from_slice(args);
        limits(&Cli::parse_from(all).problem).unwrap()
    }

    /// The time limit governs (issue 9: a silent 10 M-node default stopped Metis after 34 s of
    /// a 120 s budget); a node limit applies when asked for, or when no time limit bounds the
    /// search.
    #[test]
    fn the_time_limit_governs_unless_a_node_limit_is_asked_for() {
        let l = limits_of(&[]);
        assert_eq!((l.time, l.max_nodes), (Some(Seconds(30.0)), None));
        let l = limits_of(&["--time-limit", "120s"]);
        assert_eq!((l.time, l.max_nodes), (Some(Seconds(120.0)), None));
        let l = limits_of(&["--time-limit", "120s", "--max-nodes", "5"]);
        assert_eq!((l.time, l.max_nodes), (Some(Seconds(120.0)), Some(5)));
        let l = limits_of(&["--time-limit", "none"]);
        assert_eq!((l.time, l.max_nodes), (None, Some(UNTIMED_MAX_NODES)));
    }
}
