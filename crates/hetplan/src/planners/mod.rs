//! Planners: from a problem (model, cluster, global batch) to a plan and its estimate.
//!
//! Every planner implements [`Planner`] and reaches the outside world only through the
//! [`Search`] it is given: a node budget, a time budget read through a [`Clock`] (the library
//! never reads the clock itself), and a [`Progress`] sink. A search returns why it stopped
//! ([`StopReason`]). Planners are deterministic: same problem, same limits → same plan.
//!
//! One module per planner: `oracle` (exhaustive, the referee of the property tests), `metis`,
//! `amp`, `mist`, `ditto` (Ditto and its exhaustive baseline), `poplar`, `baselines` (Megatron
//! heuristics, Alpa-style averaged GPU, plain data parallelism).

pub mod amp;
pub mod baselines;
pub mod bound;
pub mod common;
pub mod ditto;
pub mod hetplan;
pub mod metis;
pub mod mist;
pub mod oracle;
pub mod poplar;
pub mod referee;

use crate::cluster::Cluster;
use crate::cost::{ComputeTimes, Estimate};
use crate::model::Model;
use crate::plan::{Compile, Engine, Plan, Precision};
use crate::units::{Bytes, Seconds};
use serde::Serialize;

/// What to plan for.
pub struct Problem<'a> {
    pub model: &'a Model,
    pub cluster: &'a Cluster,
    /// Samples per iteration.
    pub global_batch: u64,
    pub seq_len: u64,
    /// Layer times: analytic or from a profile.
    pub compute: &'a dyn ComputeTimes,
    pub options: PlanOptions,
}

impl Problem<'_> {
    /// The shape the seed planners price a layer at: `mbs` samples at TP degree `tp`, in the
    /// problem's precision, with its engine's kernels (attention, compiled or eager code, the
    /// vocabulary's padding), and no sequence, expert or context parallelism nor mixed-precision
    /// casts (which the final estimate adds).
    pub fn layer_shape(&self, mbs: u64, tp: u32) -> crate::cost::LayerShape {
        crate::cost::LayerShape {
            native_attention: self.options.engine.native_attention(),
            eager: self.options.runs_eagerly(),
            pads_vocabulary: self.options.engine.pads_vocabulary(),
            host_expert_loop: self.options.engine.loops_experts_on_host(),
            ..crate::cost::LayerShape::plain(mbs, self.seq_len, tp, self.options.precision)
        }
    }
}

/// Choices the user fixes for every candidate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PlanOptions {
    pub engine: Engine,
    pub precision: Precision,
    /// Largest tensor-parallel degree to consider (a TP group stays inside a node regardless).
    pub max_tp: u32,
    /// Largest micro-batch size per replica to consider.
    pub max_micro_batch: u64,
    /// Largest expert-parallel degree to consider (1: none). Only hetplan's planner searches
    /// expert parallelism; the seeds' spaces have none.
    pub max_ep: u32,
    /// Largest context-parallel degree to consider (1: none). Only hetplan's planner searches
    /// context parallelism; the seeds' spaces have none.
    pub max_cp: u32,
    /// The engine the plan must run on (`--engine`); `None`: any, a heterogeneity-aware
    /// runtime included. Honoured by hetplan's planner; the seeds search their own spaces.
    pub runtime: Option<crate::plan::runtime::Runtime>,
    /// How much of the model's PyTorch code the plans run compiled (`Plan::compile`; engine
    /// `fsdp` only, the others run their own fused kernels).
    pub compile: Compile,
}

impl PlanOptions {
    /// The `Plan::compile` of the plans the planners make: the option under the FSDP engine,
    /// `on` (the engine's own kernels) under the others.
    pub fn compile_of(&self) -> Compile {
        self.compile.under(self.engine)
    }

    /// Whether those plans compile PyTorch's loss (`Plan::compiles_loss`).
    pub fn compiles_loss(&self) -> bool {
        self.compile.compiles_loss_under(self.engine)
    }

    /// Whether they run the model's code eagerly (`Plan::runs_eagerly`).
    pub fn runs_eagerly(&self) -> bool {
        self.compile_of() == Compile::Off
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            engine: Engine::Megatron,
            precision: Precision::Bf16,
            max_tp: 8,
            max_micro_batch: 64,
            max_ep: 64,
            max_cp: 16,
            runtime: None,
            compile: Compile::On,
        }
    }
}

/// How long a search may run. `None`: unbounded in that dimension.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Limits {
    /// Candidate plans (or search nodes) a planner may evaluate.
    pub max_nodes: Option<u64>,
    /// Wall-clock budget, measured by the [`Clock`] the caller supplies.
    pub time: Option<Seconds>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: Some(10_000_000),
            time: None,
        }
    }
}

/// Time as the caller measures it (`Sync`: hetplan's planner runs searches side by side). The CLI passes a real clock; tests pass [`NoClock`], whose
/// time never advances, so results never depend on machine speed.
pub trait Clock: Sync {
    fn elapsed(&self) -> Seconds;
}

/// A clock that never advances: a time limit never triggers.
pub struct NoClock;

impl Clock for NoClock {
    fn elapsed(&self) -> Seconds {
        Seconds::ZERO
    }
}

/// Where a search reports how far it got (a progress bar on a terminal, nothing in tests).
pub trait Progress: Sync {
    /// `explored` candidates so far; `best` the best iteration time found.
    fn report(&self, explored: u64, best: Option<Seconds>);
}

/// Reports nowhere.
pub struct NoProgress;

impl Progress for NoProgress {
    fn report(&self, _: u64, _: Option<Seconds>) {}
}

/// Why a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The whole (pruned) search space was explored.
    Exhausted,
    /// The node budget ran out; the best plan so far is returned.
    NodeLimit,
    /// The time budget ran out; the best plan so far is returned.
    TimeLimit,
    /// The search's memory cap was reached (Ditto's exhaustive memo); the best plan so far is
    /// returned.
    MemoryLimit,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Exhausted => "exhausted",
            StopReason::NodeLimit => "node limit",
            StopReason::TimeLimit => "time limit",
            StopReason::MemoryLimit => "memory limit",
        })
    }
}

/// A running search: counts nodes, checks the limits, reports progress.
pub struct Search<'a> {
    pub limits: Limits,
    clock: &'a dyn Clock,
    progress: &'a dyn Progress,
    explored: u64,
    /// Calls of `tick`/`poll` since the clock was last read, how many calls they wait between
    /// reads (adapted so that reads come about every millisecond), and the last reading.
    polls: u32,
    poll_stride: u32,
    last_read: f64,
    best: Option<Seconds>,
    stopped: Option<StopReason>,
}

impl<'a> Search<'a> {
    pub fn new(limits: Limits, clock: &'a dyn Clock, progress: &'a dyn Progress) -> Search<'a> {
        Search {
            limits,
            clock,
            progress,
            explored: 0,
            polls: 0,
            poll_stride: 1,
            last_read: 0.0,
            best: None,
            stopped: None,
        }
    }

    /// For work between nodes that is not itself a node (a branch cut by a bound, a placement
    /// seen before), without counting a node: reads the clock about every millisecond of such
    /// work (every call where a call is slow, every few hundred where it is fast), so that a
    /// search whose nodes grow rare as its bounds tighten still stops at its time limit.
    /// `false` once stopped.
    pub fn poll(&mut self) -> bool {
        self.stopped.is_none() && !self.time_is_up()
    }

    /// The clock the search reads (a planner that runs others gives them a clock of its own).
    pub fn clock(&self) -> &'a dyn Clock {
        self.clock
    }

    /// Where the search reports progress.
    pub fn progress(&self) -> &'a dyn Progress {
        self.progress
    }

    /// Counts nodes explored by a search run on this one's behalf (a member of a portfolio).
    pub fn add_explored(&mut self, n: u64) {
        self.explored = self.explored.saturating_add(n);
    }

    /// A search without limits, clock or progress (tests, small problems).
    pub fn unbounded() -> Search<'static> {
        Search::new(
            Limits {
                max_nodes: None,
                time: None,
            },
            &NoClock,
            &NoProgress,
        )
    }

    /// Counts one explored node. `false` once a limit is reached: the planner must stop and
    /// return its best plan so far.
    pub fn tick(&mut self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        self.explored += 1;
        if self.limits.max_nodes.is_some_and(|n| self.explored > n) {
            self.stopped = Some(StopReason::NodeLimit);
            return false;
        }
        if self.explored.is_multiple_of(256) {
            self.progress.report(self.explored, self.best);
        }
        !self.time_is_up()
    }

    /// Reads the clock about every millisecond of search, whatever a node or a poll costs
    /// (reading it is cheap but not free): after every call where calls are slow, every few
    /// hundred where they are fast. Stops the search with `TimeLimit` once it is over.
    fn time_is_up(&mut self) -> bool {
        let Some(limit) = self.limits.time else {
            return false;
        };
        self.polls += 1;
        if self.polls < self.poll_stride {
            return false;
        }
        self.polls = 0;
        let now = self.clock.elapsed().get();
        let gap = now - self.last_read;
        self.last_read = now;
        if gap > 2e-3 {
            self.poll_stride = (self.poll_stride / 2).max(1);
        } else if gap < 0.5e-3 {
            // At most 64 calls between reads: calls that turn slow are noticed soon.
            self.poll_stride = (self.poll_stride * 2).min(64);
        }
        if now >= limit.get() {
            self.stopped = Some(StopReason::TimeLimit);
            return true;
        }
        false
    }

    /// Time left before the time limit, read from the clock now (`None`: no time limit). A
    /// search about to start work it cannot interrupt (a MILP) gives it this budget.
    pub fn remaining(&self) -> Option<Seconds> {
        self.limits
            .time
            .map(|t| Seconds((t.get() - self.clock.elapsed().get()).max(0.0)))
    }

    /// Stops the search with `TimeLimit` before the limit is reached: the work it would start
    /// next is measured to take longer than the time left.
    pub fn stop_for_time(&mut self) {
        if self.stopped.is_none() {
            self.stopped = Some(StopReason::TimeLimit);
        }
    }

    /// Reads the clock now (`tick` reads it every 256 nodes): `false`, and the search stops
    /// with `TimeLimit`, once the time limit has passed.
    pub fn within_time(&mut self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        if self.remaining().is_some_and(|r| r.get() <= 0.0) {
            self.stopped = Some(StopReason::TimeLimit);
            return false;
        }
        true
    }

    /// Records a candidate's iteration time; a better one is reported at once (a progress bar
    /// shows it, a benchmark times the first plan).
    pub fn offer(&mut self, t: Seconds) {
        if self.best.is_none_or(|b| t < b) {
            self.best = Some(t);
            self.progress.report(self.explored, self.best);
        }
    }

    pub fn explored(&self) -> u64 {
        self.explored
    }

    /// Why the search ended: the limit it hit, or `Exhausted`.
    pub fn stop_reason(&self) -> StopReason {
        self.stopped.unwrap_or(StopReason::Exhausted)
    }

    pub fn stopped(&self) -> bool {
        self.stopped.is_some()
    }

    pub fn elapsed(&self) -> Seconds {
        self.clock.elapsed()
    }
}

/// A planner's answer.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub plan: Plan,
    pub estimate: Estimate,
    /// Candidates evaluated.
    pub explored: u64,
    pub stop_reason: StopReason,
    /// Other good plans, best first (AMP's ranked list), with their iteration times as the
    /// planner's own cost model ranks them.
    pub ranked: Vec<Ranked>,
    /// What the planner wants the user to know (e.g. top plans that would run out of memory).
    pub notes: Vec<String>,
    /// hetplan's planner without `--engine`: the best plan each mainstream engine can run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_engine: Vec<EngineBest>,
}

/// The best plan a mainstream engine can run, beside a plan that may need a
/// heterogeneity-aware runtime.
#[derive(Clone, Debug, Serialize)]
pub struct EngineBest {
    pub engine: crate::plan::runtime::Runtime,
    pub plan: Option<Plan>,
    pub estimate_s: Option<f64>,
    /// Its iteration time over the answer's (infinite when there is none).
    #[serde(serialize_with = "finite_or_null")]
    pub slower: f64,
    /// Why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_none: Option<String>,
}

fn finite_or_null<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() {
        s.serialize_some(x)
    } else {
        s.serialize_none()
    }
}

/// A plan of a ranked list.
#[derive(Clone, Debug, Serialize)]
pub struct Ranked {
    pub plan: Plan,
    /// The planner's own cost (its model, which may differ from hetplan's estimate).
    pub planner_cost_s: f64,
    /// hetplan's estimate of it.
    pub estimate_s: f64,
    pub fits: bool,
}

/// Why a planner found no plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlannerError {
    /// No plan in the planner's space fits in memory (or none exists); the message explains.
    #[error("no feasible plan: {0}")]
    Infeasible(String),
    /// A limit was reached before any feasible plan was found.
    #[error("the search stopped ({0}) before finding a feasible plan")]
    Stopped(StopReason),
}

/// A planning algorithm.
pub trait Planner {
    /// Short name used by `--algo` (`metis`, `amp`, `oracle`, ...).
    fn name(&self) -> &'static str;
    /// One line: what it is and where it comes from.
    fn description(&self) -> &'static str;
    /// The planner's own search: its best plan as its own cost model ranks them, which may
    /// not fit in memory by hetplan's estimate (AMP has no memory model, Metis's and Ditto's
    /// differ from hetplan's).
    fn find(&self, problem: &Problem<'_>, search: &mut Search<'_>)
        -> Result<Outcome, PlannerError>;

    /// The planner's answer: what `find` returns, held to one rule for every planner — a plan
    /// that does not fit is never an answer. When `find`'s choice does not fit, the planner's
    /// best-ranked plan that does is returned (and the note says so); when none does, the
    /// answer is `Infeasible` with the smallest shortfall.
    fn plan(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        common::nothing_to_plan(problem)?;
        common::precision_runs(problem)?;
        only_plans_that_fit(self.find(problem, search)?, problem)
    }
}

/// `Planner::plan`'s rule, written once for every planner.
fn only_plans_that_fit(out: Outcome, problem: &Problem<'_>) -> Result<Outcome, PlannerError> {
    if out.estimate.fits {
        return Ok(out);
    }
    let shortfall = shortfall(&out.estimate);
    let fallback = out
        .ranked
        .iter()
        .filter(|r| r.fits)
        .find_map(|r| common::evaluate(problem, &r.plan).map(|e| (r.plan.clone(), e)))
        .filter(|(_, e)| e.fits);
    match fallback {
        Some((plan, estimate)) => {
            let mut notes = out.notes;
            notes.push(format!(
                "its first choice does not fit ({shortfall}); this is its best-ranked plan that does"
            ));
            Ok(Outcome {
                plan,
                estimate,
                notes,
                ..out
            })
        }
        None => Err(PlannerError::Infeasible(format!(
            "its best candidate does not fit: {shortfall}; allow ZeRO-3, activation checkpointing \
             or offloading (`--algo mist` searches them), or use a smaller micro-batch"
        ))),
    }
}

/// "needs 44.4 GiB on a 16.0 GiB v100-sxm2-16gb (n1g2, stage 0)": the GPU furthest over its
/// capacity.
pub fn shortfall(e: &Estimate) -> String {
    match e.per_gpu.iter().filter(|g| !g.fits).max_by(|a, b| {
        (a.peak_memory_bytes - a.capacity_bytes)
            .total_cmp(&(b.peak_memory_bytes - b.capacity_bytes))
    }) {
        Some(g) => format!(
            "needs {} on a {} {} ({}, stage {})",
            Bytes(g.peak_memory_bytes),
            Bytes(g.capacity_bytes),
            g.gpu_type,
            g.gpu,
            g.stage
        ),
        None => e
            .notes
            .iter()
            .find(|n| n.contains("out of host memory"))
            .cloned()
            .unwrap_or_else(|| "it does not fit".to_string()),
    }
}

/// Every planner, in listing order.
pub fn all() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(hetplan::Hetplan),
        Box::new(oracle::Oracle),
        Box::new(metis::Metis::default()),
        Box::new(amp::Amp),
        Box::new(mist::Mist::default()),
        Box::new(ditto::Ditto::default()),
        Box::new(ditto::DittoExhaustive::default()),
        Box::new(poplar::Poplar::default()),
        Box::new(baselines::Megatron),
        Box::new(baselines::AlpaAverage),
        Box::new(baselines::DataParallel),
    ]
}

/// A planner by name (with a nearest-name hint on a miss).
pub fn by_name(name: &str) -> Result<Box<dyn Planner>, String> {
    let all = all();
    let names: Vec<&'static str> = all.iter().map(|p| p.name()).collect();
    let n = crate::names::normalize(name);
    match all.into_iter().find(|p| p.name() == n) {
        Some(p) => Ok(p),
        None => Err(format!(
            "unknown planner `{name}`{}; known: {}",
            crate::names::hint_suffix(&crate::names::nearest(name, names.iter().copied())),
            names.join(", ")
        )),
    }
}
