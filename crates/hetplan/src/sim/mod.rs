//! The discrete-event simulator: executes a plan event by event on the cluster and reports
//! where each GPU's time goes. It uses the same per-layer compute times as the cost model (from
//! a profile or the analytic op model), the same byte counts and the same measured collective
//! times (a profile's curves, as floors under its flows), but computes time only by
//! executing events — transfers as bytes over links and NICs, collectives as NCCL's ring: pipeline
//! dependencies, blocking sends (a backward's beside the next passes under Megatron's
//! interleaved schedule), gradient buckets behind the last backward, ZeRO gathers with
//! prefetch, offload copies, stragglers among heterogeneous replicas, and transfers sharing
//! links fairly. See `docs/validation.md` for how it compares with the estimate.

pub mod build;
pub mod engine;
pub mod svg;
pub mod trace;

pub use build::{Direction, Executor, Label, Pass, Resource};

use crate::cluster::GpuId;
use crate::cost::{ComputeTimes, Workload};
use crate::plan::{Plan, ValidPlan};
use engine::{EngineError, TaskId, Work};
use serde::Serialize;

/// Limits of a run.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    /// Refuse, before building anything, a plan whose task graph would have more tasks (memory
    /// grows with them: 0.52 KiB a task, measured on a 2.7 M-task run).
    pub max_tasks: u64,
    /// Stop with an error after this many events.
    pub max_events: u64,
    /// Model the slowdown of compute and communication running together (Mist).
    pub interference: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            max_tasks: DEFAULT_MAX_TASKS,
            max_events: 50_000_000,
            interference: true,
        }
    }
}

/// How one GPU spent the iteration (fractions of the iteration time).
#[derive(Clone, Debug, Serialize)]
pub struct GpuActivity {
    pub gpu: GpuId,
    pub node: u32,
    pub local: u32,
    pub stage: usize,
    pub replica: usize,
    /// Computing (layers, optimizer; slowed when communication runs beside).
    pub busy: f64,
    /// Waiting while a transfer it needs is in flight.
    pub comm_wait: f64,
    /// Waiting for other stages (pipeline bubble) or done early.
    pub idle: f64,
}

/// One step of the critical path: consecutive tasks of the same kind on the same stage merged.
#[derive(Clone, Debug, Serialize)]
pub struct PathSegment {
    pub what: String,
    pub stage: Option<usize>,
    pub tasks: usize,
    pub seconds: f64,
}

/// One executed task, for traces and pictures.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    pub start_s: f64,
    pub end_s: f64,
    pub label: Label,
    /// The executor that computed it, or the resources the flow crossed.
    pub executor: Option<usize>,
    pub resources: Vec<usize>,
}

/// The result of a simulation.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    pub iteration_time_s: f64,
    pub samples_per_s: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_per_gpu: f64,
    /// Mean over GPUs of the idle fraction.
    pub bubble_fraction: f64,
    pub per_gpu: Vec<GpuActivity>,
    pub critical_path: Vec<PathSegment>,
    /// The tasks on the critical path, in time order: indices into `spans`.
    #[serde(skip)]
    pub critical_spans: Vec<usize>,
    /// Distinct event times processed (tasks finishing together count once).
    pub events: u64,
    pub tasks: usize,
    #[serde(skip)]
    pub spans: Vec<Span>,
    #[serde(skip)]
    pub executors: Vec<Executor>,
    #[serde(skip)]
    pub resources: Vec<Resource>,
}

/// The default `SimOptions::max_tasks`: 4 million tasks, about 2 GiB (`hetplan simulate` of
/// gpt3-1.3b, pp=2, 450,000 micro-batches: 2.7 M tasks, 1.4 GB resident, 5 s).
pub const DEFAULT_MAX_TASKS: u64 = 4_000_000;

/// Why a simulation did not run or did not finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error(
        "the plan's task graph would have {tasks} tasks, over the limit of {limit} \
         ({micro_batches} micro-batches per iteration); raise the task limit, or simulate fewer \
         micro-batches: beyond the pipeline depth every micro-batch adds the same steady-state \
         cycle"
    )]
    TooLarge {
        tasks: u64,
        limit: u64,
        micro_batches: u64,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Simulates one iteration of a plan validated against the same model and cluster.
pub fn simulate(
    w: Workload<'_>,
    plan: &ValidPlan,
    compute: &dyn ComputeTimes,
    opts: &SimOptions,
) -> Result<Simulation, SimError> {
    debug_assert!(
        plan.checked_for(w.model, w.cluster),
        "validated for another problem"
    );
    // What the engine runs (FSDP's ZeRO-3 under a pipeline runs as ZeRO-1; `Plan::as_engine_runs`).
    let as_run = plan.as_engine_runs();
    let plan: &Plan = as_run.as_ref().unwrap_or(plan);
    let tasks = build::task_count(plan);
    if tasks > opts.max_tasks {
        return Err(SimError::TooLarge {
            tasks,
            limit: opts.max_tasks,
            micro_batches: plan.micro_batches,
        });
    }
    let mut built = build::build(w, plan, compute);
    built.graph.interference = opts.interference;
    let events = built.graph.run(opts.max_events)?;
    let tasks = &built.graph.tasks;
    let labels = &built.labels;
    let iteration = tasks.iter().map(|t| t.end).fold(0.0, f64::max);

    // Per executor: busy time, and the gaps before each compute task split into waiting for an
    // in-flight transfer and idling.
    let n_exec = built.executors.len();
    let mut busy = vec![0.0; n_exec];
    let mut wait = vec![0.0; n_exec];
    let mut prev_end = vec![0.0f64; n_exec];
    let mut order: Vec<TaskId> = (0..tasks.len()).collect();
    order.sort_by(|&a, &b| tasks[a].start.total_cmp(&tasks[b].start).then(a.cmp(&b)));
    for &t in &order {
        if let Work::Compute { exec, .. } = tasks[t].work {
            busy[exec] += tasks[t].end - tasks[t].start;
            let gap_start = prev_end[exec];
            let gap_end = tasks[t].start;
            if gap_end > gap_start {
                if let Some(d) = tasks[t].critical_dep {
                    if matches!(tasks[d].work, Work::Flow { .. }) {
                        let lo = gap_start.max(tasks[d].start);
                        let hi = gap_end.min(tasks[d].end);
                        wait[exec] += (hi - lo).max(0.0);
                    }
                }
            }
            prev_end[exec] = prev_end[exec].max(tasks[t].end);
        }
    }
    let frac = |x: f64| if iteration > 0.0 { x / iteration } else { 0.0 };
    let mut per_gpu = Vec::new();
    let mut idle_sum = 0.0;
    for (e, ex) in built.executors.iter().enumerate() {
        let b = frac(busy[e]);
        let c = frac(wait[e]);
        let i = (1.0 - b - c).max(0.0);
        idle_sum += i * ex.devices.len() as f64;
        for &g in &ex.devices {
            per_gpu.push(GpuActivity {
                gpu: g,
                node: g.node,
                local: g.local,
                stage: ex.stage,
                replica: ex.replica,
                busy: b,
                comm_wait: c,
                idle: i,
            });
        }
    }
    per_gpu.sort_by_key(|g| g.gpu);
    let n_gpus = per_gpu.len().max(1);

    // The critical path: from the task that ends last, back through what each task waited for.
    let mut path = Vec::new();
    let mut cur =
        (0..tasks.len()).max_by(|&a, &b| tasks[a].end.total_cmp(&tasks[b].end).then(b.cmp(&a)));
    while let Some(t) = cur {
        path.push(t);
        cur = tasks[t].critical_dep;
    }
    path.reverse();
    let mut critical_path: Vec<PathSegment> = Vec::new();
    for &t in &path {
        let (what, stage) = describe(&labels[t]);
        let secs = tasks[t].end - tasks[t].start;
        match critical_path.last_mut() {
            Some(s) if s.what == what && s.stage == stage => {
                s.tasks += 1;
                s.seconds += secs;
            }
            _ => critical_path.push(PathSegment {
                what,
                stage,
                tasks: 1,
                seconds: secs,
            }),
        }
    }

    let spans = tasks
        .iter()
        .zip(labels)
        .map(|(t, l)| Span {
            start_s: t.start,
            end_s: t.end,
            label: l.clone(),
            executor: match t.work {
                Work::Compute { exec, .. } => Some(exec),
                Work::Flow { .. } => None,
            },
            resources: t.work.resources(),
        })
        .collect();
    let samples_per_s = plan.global_batch as f64 / iteration;
    let tokens_per_s = samples_per_s * w.model.tokens_per_sample(w.seq_len) as f64;
    Ok(Simulation {
        iteration_time_s: iteration,
        samples_per_s,
        tokens_per_s,
        tokens_per_s_per_gpu: tokens_per_s / n_gpus as f64,
        bubble_fraction: idle_sum / n_gpus as f64,
        per_gpu,
        critical_path,
        critical_spans: path,
        events,
        tasks: tasks.len(),
        spans,
        executors: built.executors,
        resources: built.resources,
    })
}

/// A short name and the stage of a task, for the critical path.
fn describe(l: &Label) -> (String, Option<usize>) {
    match l {
        Label::Compute { stage, pass, .. } => (
            match pass {
                Pass::Forward => "forward".to_string(),
                Pass::Backward => "backward".to_string(),
            },
            Some(*stage),
        ),
        Label::Optimizer { stage, .. } => ("optimizer".into(), Some(*stage)),
        Label::Send {
            from_stage, pass, ..
        } => (
            match pass {
                Pass::Forward => "send activations".to_string(),
                Pass::Backward => "send gradients".to_string(),
            },
            Some(*from_stage),
        ),
        Label::GradSync { stage, .. } => ("gradient reduction".into(), Some(*stage)),
        Label::ParamGather { stage, .. } => ("parameter all-gather".into(), Some(*stage)),
        Label::ZeroGather { stage, .. } => ("ZeRO-3 gather".into(), Some(*stage)),
        Label::ZeroScatter { stage, .. } => ("ZeRO reduce-scatter".into(), Some(*stage)),
        Label::TpAllReduce { stage, .. } => ("TP all-reduce".into(), Some(*stage)),
        Label::EpAllToAll { stage, .. } => ("EP all-to-all".into(), Some(*stage)),
        Label::CpComm { stage, .. } => ("CP comm".into(), Some(*stage)),
        Label::Offload { stage, .. } => ("offload copy".into(), Some(*stage)),
        Label::TiedSync => ("tied-embedding all-reduce".into(), None),
    }
}
