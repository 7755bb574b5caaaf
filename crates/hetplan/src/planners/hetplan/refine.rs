//! hetplan's own search over the union of the seeds' spaces: best-improvement local search from
//! the seeds' answers.
//!
//! Each seed searches its own slice of the space: Metis heterogeneous device groups without
//! memory options, Mist memory options on homogeneous groups, Poplar per-replica batches on one
//! stage. Their answers are good starting points, and the best plan often combines what two of
//! them can express (Metis's stages with Mist's ZeRO and checkpointing, Poplar's uneven batches
//! inside a pipeline stage). From a plan this search evaluates every neighbour one [`Move`]
//! away — a ZeRO stage, a checkpointing choice or sequence parallelism (on one stage or on
//! all), an optimizer offload ratio, or offloaded weights or gradients back on the GPUs, on one
//! stage;
//! layers shifted between neighbouring stages, or every stage's layer count at once (the
//! min–max split by each stage's time per layer); micro-batches halved or doubled; another
//! schedule (GPipe, 1F1B, interleaved with 2–4 virtual stages); samples moved between the
//! replicas of two GPU types; a replica or a whole stage left out; idle GPUs added as a
//! replica; TP communication overlap on or off; stages split, merged or moved to another
//! place in the pipeline; expert and context
//! parallelism — each made to fit, where it does not, by a few rungs of a memory ladder
//! (`repair`) — and moves to the best neighbour that fits, until none is faster (a local
//! optimum) or a limit stops it. Expert-parallel moves and a stage's new place in the
//! pipeline join only at a local optimum of the others (`Move::is_late`), and the search goes
//! on with all moves from there.
//!
//! A round's neighbours are estimated in parallel (rayon) in chunks, and the search takes them
//! in their generated order, counting one node each; the best is the fastest, ties to the
//! earliest. So the answer does not depend on the number of threads, and under a node limit
//! not on the machine either.

use super::super::common;
use super::super::Search;
use crate::cluster::{Cluster, GpuId};
use crate::cost::Estimate;
use crate::plan::{LayerRange, Plan, Recompute, Schedule, Stage};
use crate::planners::Problem;
use rayon::prelude::*;

/// Neighbours estimated between two looks at the limits: small enough that a round on a
/// 1,024-GPU plan overshoots a time limit by little (a neighbour there costs up to 30 ms with
/// its memory ladder: 32 of them ran 0.3–0.8 s past a 10 s limit), large enough to keep two
/// cores busy.
const CHUNK: usize = 8;

/// A relative improvement smaller than this is no improvement (the estimate's own rounding).
const MIN_GAIN: f64 = 1e-9;

/// One step from a plan to a neighbouring plan. Stage indices are positions in
/// `Plan::stages`; with an interleaved schedule a move that changes a stage's GPUs or batches
/// changes every model chunk on those GPUs alike.
#[derive(Clone, Debug, PartialEq)]
pub enum Move {
    Zero {
        stage: usize,
        zero: u8,
    },
    /// One ZeRO stage, or one checkpointing choice, for every stage (engines take one).
    ZeroAll {
        zero: u8,
    },
    RecomputeAll {
        to: Recompute,
    },
    Recompute {
        stage: usize,
        to: Recompute,
    },
    SequenceParallel {
        stage: usize,
        on: bool,
    },
    /// Sequence parallelism on or off on every stage with TP (Megatron and torchtitan take one
    /// switch): where it helps on each such stage, one round instead of one per stage.
    SequenceParallelAll {
        on: bool,
    },
    OffloadOptimizer {
        stage: usize,
        ratio: f64,
    },
    /// The stage's weights (or gradients) back on its GPUs: only the memory ladder puts them in
    /// host memory, and this lets the search trade them for recomputation, which the ladder
    /// then climbs first.
    StatesOnGpu {
        stage: usize,
        weights: bool,
    },
    /// `n` layers from stage `from` to its neighbour `to` (`from ± 1`).
    ShiftLayers {
        from: usize,
        to: usize,
        n: usize,
    },
    /// Every stage's layer count set at once (`counts`, in stage order; see [`balanced_counts`]):
    /// the split that minimises the slowest stage when each stage's micro-batch time is its
    /// fixed part plus a time per layer, both read from the current estimate. A single shift
    /// cannot leave a plateau where several stages are equally the bottleneck: at 4,096 GPUs
    /// Megatron's plan gives two layers to each of four T4 stages, and moving one layer off one
    /// of them leaves the other three as slow.
    Rebalance {
        counts: Vec<usize>,
    },
    /// Every replica's micro-batch halved (and twice the micro-batches), or doubled.
    MicroBatches {
        halve: bool,
    },
    Schedule(Schedule),
    /// Every replica of GPU type `from` gives one sample per micro-batch to those of `to`.
    ShiftSamples {
        stage: usize,
        from: usize,
        to: usize,
    },
    /// The last replica on GPU type `gpu_type` leaves the stage; its samples go to the others.
    DropReplica {
        stage: usize,
        gpu_type: usize,
    },
    /// The stage's GPUs regrouped at twice (`up`) or half its TP degree: pairs of replicas on
    /// one node merge (their samples add up), or each replica splits in two (its samples
    /// split).
    Tp {
        stage: usize,
        up: bool,
    },
    /// The stage leaves the pipeline; its layers go to its neighbour.
    DropStage {
        stage: usize,
    },
    /// Idle GPUs of `gpu_type`, on one node, join the stage as a replica of its TP degree.
    AddReplica {
        stage: usize,
        gpu_type: usize,
    },
    /// Every stage's TP degree doubled (`up`) or halved at once, with twice (`up`) or half as
    /// many micro-batches so that each replica's micro-batch keeps its size: fewer replicas
    /// then run more micro-batches, a shorter pipeline bubble bought with TP communication
    /// (or the reverse). No single move gets there: TP doubled on one stage alone doubles its
    /// micro-batch, and halving micro-batches needs every stage's sizes even.
    TpAll {
        up: bool,
    },
    /// The stage's replicas split in two halves in order, each half a stage of its own with half
    /// the layers (the first half the first layers), each replica taking twice its micro-batch:
    /// a deeper pipeline with narrower data parallelism — less to synchronise and half the
    /// weights per GPU, for a longer bubble. Seeds reach such plans late (Metis's deep pipelines
    /// of small replica groups against Mist's few wide stages); no other move reaches them.
    SplitStage {
        stage: usize,
    },
    /// The stage and the next become one: their replicas side by side over all their layers,
    /// each replica taking half its micro-batch (the inverse of `SplitStage`).
    MergeStages {
        stage: usize,
    },
    /// Stage `from` leaves its place in the pipeline for place `to`, with its GPUs, its
    /// settings and its number of layers; the stages between close up. The order decides which
    /// stages neighbour which (the links their activations cross) and, under 1F1B, how many
    /// micro-batches' activations each holds in flight. On `datacenter-64-40b` hetplan's search
    /// from Mist's 10 s answer ended at 36.881 s with an H100 stage after the A10G and A100
    /// stages; that stage placed ahead of them gives 36.351 s (35.877 s at the search's end),
    /// where a swap with either neighbour alone gains nothing. No other move reorders stages.
    /// Every place up to [`REORDER_ANYWHERE_UP_TO`] stages; beyond, the next two either way.
    ReorderStage {
        from: usize,
        to: usize,
    },
    /// The stage's MoE layers' experts split over `ep` of its DP replicas (1: none): expert
    /// weights and optimizer states shrink `ep` times, for all-to-alls at every MoE layer.
    ExpertParallel {
        stage: usize,
        ep: u32,
    },
    /// One expert-parallel degree on every stage with MoE layers (engines take one).
    ExpertParallelAll {
        ep: u32,
    },
    /// Expert tensor parallelism `etp` on every stage with MoE layers whose TP degree it
    /// divides (sequence parallelism turned on there: each TP rank then routes its own tokens).
    ExpertTensorParallelAll {
        etp: u32,
    },
    /// Every stage's sequences split over `cp` consecutive replicas (ring attention; every
    /// stage takes one degree), with `cp / old` times the micro-batches so that the global
    /// batch stays: the same tokens per GPU, in micro-batches `cp / old` times shorter.
    ContextParallelAll {
        cp: u32,
    },
    /// How context-parallel groups run attention: the ring, or Ulysses' all-to-alls.
    ContextParallelComm {
        all_to_all: bool,
    },
    /// Tensor-parallel collectives pipelined with their GEMMs, or not (`Plan::tp_comm_overlap`:
    /// Megatron's `--tp-comm-overlap`, torchtitan's async TP), on every stage.
    TpCommOverlap {
        on: bool,
    },
}

impl Move {
    /// A move of expert parallelism. hetplan's search takes them only at a local optimum of
    /// the others: they change what fits, and taken early they led it elsewhere — Qwen3-30B-A3B
    /// on 16 H100 and 16 A100 at 50 Gbps ended at 5.34 s with them from the start and at 5.12 s
    /// without them at all (`tests/expert_parallel.rs`).
    fn is_expert(&self) -> bool {
        matches!(
            self,
            Move::ExpertParallel { .. }
                | Move::ExpertParallelAll { .. }
                | Move::ExpertTensorParallelAll { .. }
        )
    }

    /// A move the search takes only at a local optimum of the others: expert parallelism
    /// ([`Move::is_expert`]) and a stage's new place in the pipeline. With reordering from the
    /// start `campus-v100-t4-1.3b` ended at 9.007 s where the search without it reached 8.512 s
    /// (which of the search's paths or time shares made the difference was not traced); taken
    /// once the others are done it ends at 8.512 s, and `datacenter-64-40b` still goes from
    /// 36.881 s to 35.877 s.
    fn is_late(&self) -> bool {
        self.is_expert() || matches!(self, Move::ReorderStage { .. })
    }

    /// What the move does, in words, with the cluster's GPU type names.
    pub fn describe(&self, cluster: &Cluster) -> String {
        let ty = |t: usize| cluster.gpu_types[t].name.clone();
        match self {
            Move::Zero { stage, zero } => format!("ZeRO-{zero} on stage {stage}"),
            Move::ZeroAll { zero } => format!("ZeRO-{zero} on every stage"),
            Move::RecomputeAll { to } => format!("{} on every stage", recompute_words(*to)),
            Move::Recompute { stage, to } => {
                format!("{} on stage {stage}", recompute_words(*to))
            }
            Move::ExpertParallel { stage, ep } => {
                format!("expert parallelism {ep} on stage {stage}")
            }
            Move::ExpertParallelAll { ep } => {
                format!("expert parallelism {ep} on every stage with experts")
            }
            Move::ContextParallelAll { cp } => {
                format!("context parallelism {cp} on every stage")
            }
            Move::ExpertTensorParallelAll { etp } => {
                format!("the experts split over {etp} GPUs (expert tensor parallelism) on every stage with experts")
            }
            Move::ContextParallelComm { all_to_all } => format!(
                "context parallelism by {}",
                if *all_to_all {
                    "all-to-all (Ulysses)"
                } else {
                    "ring attention"
                }
            ),
            Move::TpCommOverlap { on } => format!(
                "tensor-parallel communication overlapped with the GEMMs {}",
                if *on { "on" } else { "off" }
            ),
            Move::SequenceParallel { stage, on } => format!(
                "sequence parallelism {} on stage {stage}",
                if *on { "on" } else { "off" }
            ),
            Move::SequenceParallelAll { on } => format!(
                "sequence parallelism {} on every stage with tensor parallelism",
                if *on { "on" } else { "off" }
            ),
            Move::StatesOnGpu { stage, weights } => format!(
                "stage {stage}'s {} back on its GPUs",
                if *weights { "weights" } else { "gradients" }
            ),
            Move::OffloadOptimizer { stage, ratio } => format!(
                "{:.0}% of stage {stage}'s optimizer state in host memory",
                ratio * 100.0
            ),
            Move::ShiftLayers { from, to, n } => {
                format!("{n} layer(s) from stage {from} to stage {to}")
            }
            Move::Rebalance { counts } => format!(
                "the layers split {} over the stages, by each stage's time per layer",
                counts
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            Move::MicroBatches { halve: true } => "half the micro-batch size".into(),
            Move::MicroBatches { halve: false } => "twice the micro-batch size".into(),
            Move::Schedule(s) => match s {
                Schedule::Gpipe => "the GPipe schedule".into(),
                Schedule::OneFOneB => "the 1F1B schedule".into(),
                Schedule::Interleaved { virtual_stages } => {
                    format!("interleaved 1F1B with {virtual_stages} virtual stages")
                }
            },
            Move::ShiftSamples { stage, from, to } => format!(
                "samples from the {} to the {} replicas of stage {stage}",
                ty(*from),
                ty(*to)
            ),
            Move::DropReplica { stage, gpu_type } => {
                format!("a {} replica of stage {stage} left idle", ty(*gpu_type))
            }
            Move::DropStage { stage } => format!("stage {stage} left out, its layers moved"),
            Move::Tp { stage, up } => format!(
                "{} the TP degree of stage {stage}",
                if *up { "twice" } else { "half" }
            ),
            Move::AddReplica { stage, gpu_type } => {
                format!("idle {} GPUs added to stage {stage}", ty(*gpu_type))
            }
            Move::TpAll { up: true } => {
                "twice the TP degree of every stage, twice the micro-batches".into()
            }
            Move::TpAll { up: false } => {
                "half the TP degree of every stage, half the micro-batches".into()
            }
            Move::SplitStage { stage } => {
                format!("stage {stage} split in two, half its replicas each")
            }
            Move::MergeStages { stage } => {
                format!("stages {stage} and {} merged into one", stage + 1)
            }
            Move::ReorderStage { from, to } => format!("stage {from} moved to place {to}"),
        }
    }
}

/// Activation checkpointing in words.
pub fn recompute_words(r: Recompute) -> String {
    match r {
        Recompute::None => "no activation checkpointing".into(),
        Recompute::Selective => "selective recompute".into(),
        Recompute::Full => "full recompute".into(),
        Recompute::Layers(k) => format!("{k} layers recomputed"),
        Recompute::Ops => "op-level selective recompute".into(),
    }
}

/// The result of a local search from one start.
pub struct Refined {
    pub plan: Plan,
    pub estimate: Estimate,
    /// The moves taken, each with the iteration time after it.
    pub steps: Vec<(Move, f64)>,
}

/// Best-improvement local search from `start` (a plan that fits), under `search`'s limits.
pub fn refine(
    problem: &Problem<'_>,
    start: Plan,
    est: Estimate,
    search: &mut Search<'_>,
) -> Refined {
    let mut cur = Refined {
        plan: start,
        estimate: est,
        steps: Vec::new(),
    };
    // Seconds one wave of neighbours (one per thread) took, as last measured.
    let mut wave: Option<f64> = None;
    // Expert parallelism and reordering wait for a local optimum of the other moves
    // (`Move::is_late`); the round after it (`fresh`) tries those moves alone, the others
    // being known not to improve the plan.
    let mut late = false;
    let mut fresh = false;
    while search.poll() {
        let mut moves = neighbours(problem, &cur.plan);
        // First: on a large plan a round may be cut short by the time limit.
        if let Some(counts) = balanced_counts(&cur.plan, &cur.estimate) {
            moves.insert(0, Move::Rebalance { counts });
        }
        let all = moves.len();
        if !late {
            moves.retain(|m| !m.is_late());
        } else if fresh {
            moves.retain(Move::is_late);
            fresh = false;
        }
        let held_back = !late && moves.len() < all;
        let now = cur.estimate.iteration_time_s;
        let mut best: Option<(Move, Plan, Estimate)> = None;
        let mut stopped = false;
        let mut next = 0;
        while next < moves.len() {
            // A chunk started past the limit would run that much longer; under a time limit,
            // no longer than the time left (`chunk_size`).
            if !search.within_time() {
                stopped = true;
                break;
            }
            let size = chunk_size(wave, search.remaining().map(|r| r.get()));
            if size == 0 {
                search.stop_for_time();
                stopped = true;
                break;
            }
            let chunk = &moves[next..(next + size).min(moves.len())];
            next += chunk.len();
            let started = search.elapsed().get();
            let evals: Vec<Option<(Plan, Estimate)>> = chunk
                .par_iter()
                .map(|m| {
                    let p = conformed(problem, apply(problem, &cur.plan, m)?)?;
                    let e = common::evaluate(problem, &p)?;
                    repair(problem, p, e)
                })
                .collect();
            wave = Some(wave_time(search.elapsed().get() - started, chunk.len()));
            for (m, e) in chunk.iter().zip(evals) {
                if !search.tick() {
                    stopped = true;
                    break;
                }
                let Some((p, e)) = e else { continue };
                let t = e.iteration_time_s;
                if e.fits
                    && t < now * (1.0 - MIN_GAIN)
                    && best.as_ref().is_none_or(|(_, _, b)| t < b.iteration_time_s)
                {
                    search.offer(crate::units::Seconds(t));
                    best = Some((m.clone(), p, e));
                }
            }
            if stopped {
                break;
            }
        }
        // A round cut short still moves to the best neighbour it saw: it fits and is faster.
        match best {
            Some((m, p, e)) => {
                cur.steps.push((m, e.iteration_time_s));
                cur.plan = p;
                cur.estimate = e;
            }
            None if held_back && !stopped => {
                late = true;
                fresh = true;
            }
            None => break,
        }
        if stopped {
            break;
        }
    }
    cur
}

/// Seconds one wave (one item per thread) took, of `took` seconds for a parallel chunk of `n`.
pub(super) fn wave_time(took: f64, n: usize) -> f64 {
    took / n.div_ceil(rayon::current_num_threads().max(1)).max(1) as f64
}

/// How many neighbours to estimate before the next look at the limits: [`CHUNK`] without a
/// time limit (so that an untimed search does the same work whatever the clock says); under
/// one, as many waves of one neighbour per thread as fit in the time left by the last wave's
/// measured time (one wave before any was measured), at most `CHUNK`, and none when not even
/// one wave fits. On a 1,024-GPU plan a chunk of eight FSDP neighbours with their memory
/// ladders took 0.26 s, and the last chunk of a search started 35 ms before its limit.
pub(super) fn chunk_size(wave: Option<f64>, remaining: Option<f64>) -> usize {
    let threads = rayon::current_num_threads().max(1);
    match (remaining, wave) {
        (None, _) => CHUNK,
        (Some(_), None) => threads.min(CHUNK),
        (Some(left), Some(w)) if w > 0.0 => {
            let waves = (left / w).floor();
            if waves < 1.0 {
                0
            } else {
                (waves.min(CHUNK as f64) as usize * threads).min(CHUNK)
            }
        }
        (Some(_), Some(_)) => CHUNK,
    }
}

/// Rungs of the memory ladder a neighbour that does not fit may climb.
pub(super) const MAX_REPAIRS: usize = 7;

/// A neighbour made to fit, if a few memory options can: every stage with a GPU out of memory
/// climbs one rung of a fixed ladder per try — ZeRO-1 (with data parallelism), selective then
/// full recompute, ZeRO-3, the optimizer state, then the gradients, then the weights in host
/// memory — so that a move that needs memory
/// (more layers on a stage, a larger micro-batch) is judged with what makes it fit, as Mist
/// tunes memory options with the parallelism. `None` when the ladder runs out first.
pub fn repair(problem: &Problem<'_>, p: Plan, e: Estimate) -> Option<(Plan, Estimate)> {
    repair_by(problem, p, e, &RECOMPUTE_FIRST)
}

/// [`repair`] by both ladders — the recomputation-first one and one that shards and offloads
/// states first ([`STATES_FIRST`]: ZeRO-1, ZeRO-3, gradients, weights, then the optimizer
/// state to host memory, recomputation last) — keeping the faster plan that fits. Recomputing
/// costs a forward on every micro-batch; offloading states costs host-link transfers once per
/// step, which hide behind compute when the micro-batches are many or the model is
/// memory-bound: neither order is better everywhere. For starting plans, where a wrong rung
/// costs the whole search.
pub fn repair_both(problem: &Problem<'_>, p: Plan, e: Estimate) -> Option<(Plan, Estimate)> {
    let a = repair_by(problem, p.clone(), e.clone(), &RECOMPUTE_FIRST);
    let b = repair_by(problem, p, e, &STATES_FIRST);
    match (a, b) {
        (Some(a), Some(b)) if b.1.iteration_time_s < a.1.iteration_time_s => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

fn repair_by(
    problem: &Problem<'_>,
    mut p: Plan,
    mut e: Estimate,
    ladder: &[Rung],
) -> Option<(Plan, Estimate)> {
    for _ in 0..MAX_REPAIRS {
        if e.fits {
            return Some((p, e));
        }
        let mut over: Vec<usize> = (e.per_gpu.iter())
            .filter(|g| !g.fits)
            .map(|g| g.stage)
            .collect();
        over.sort_unstable();
        over.dedup();
        // An engine runs one choice on every stage: then every stage climbs.
        if problem.options.runtime.is_some() {
            over = (0..p.stages.len()).collect();
        }
        let mut climbed = false;
        for s in over {
            for j in chunk_group(&p, s) {
                climbed |= climb(ladder, &mut p.stages[j]);
            }
        }
        if !climbed {
            return None;
        }
        p = conformed(problem, p)?;
        e = common::evaluate(problem, &p)?;
    }
    e.fits.then_some((p, e))
}

/// With `--engine`, the plan made uniform for that engine (`Runtime::conform`), if it then
/// runs there — by the engine's exporter where hetplan has one (`export::why_not`: what the
/// engine checks when it starts, the model it implements, a launchable rank order), so that a
/// plan made for an engine exports to it; without, the plan as it is.
pub fn conformed(problem: &Problem<'_>, p: Plan) -> Option<Plan> {
    match problem.options.runtime {
        None => Some(p),
        Some(rt) => rt
            .conform(&p)
            .filter(|c| reasons_on(problem, rt, c).is_empty()),
    }
}

/// Every reason `rt` gives for not running `plan` as it is: its exporter's where hetplan has
/// one (`export::why_not`), its rules (`Runtime::why_not`) otherwise.
fn reasons_on(
    problem: &Problem<'_>,
    rt: crate::plan::runtime::Runtime,
    plan: &Plan,
) -> Vec<String> {
    match crate::export::Target::of(rt) {
        Some(t) => crate::export::why_not(t, problem.model, plan, problem.seq_len),
        None => rt.why_not(plan),
    }
}

/// Every reason the problem's engine (`--engine`) gives for not running `plan` once its
/// per-stage choices are made uniform (`Runtime::conform`) — or as it is, where its structure
/// does not fit the engine — by the same checks as [`conformed`]; empty when it runs there
/// (it may still not fit in memory) or without an engine.
pub fn engine_reasons(problem: &Problem<'_>, plan: &Plan) -> Vec<String> {
    let Some(rt) = problem.options.runtime else {
        return Vec::new();
    };
    let c = rt.conform(plan).unwrap_or_else(|| plan.clone());
    let mut why = reasons_on(problem, rt, &c);
    let mut seen = std::collections::BTreeSet::new();
    why.retain(|w| seen.insert(w.clone()));
    why
}

/// `plan` with the problem's engine, precision and compilation, as every seed's plans have
/// them.
pub fn in_problem_settings(problem: &Problem<'_>, mut plan: Plan) -> Plan {
    (plan.engine, plan.precision) = (problem.options.engine, problem.options.precision);
    plan.compile = problem.options.compile_of();
    plan
}

/// Why the problem's engine runs no plan of the problem whatever its layout: the reasons it
/// gives for the simplest one (one stage on one GPU, one sample a micro-batch, the problem's
/// precision and compilation) — the model it does not implement, a precision it does not
/// train in. Empty when it runs that plan.
pub fn engine_refusals(problem: &Problem<'_>) -> Vec<String> {
    let spec = format!("tp=1,pp=1,dp=1,mbs=1,gbs={}", problem.global_batch.max(1));
    let Ok(plan) = crate::plan::inline::parse_inline_plan(&spec, problem.model, problem.cluster)
    else {
        return Vec::new();
    };
    engine_reasons(problem, &in_problem_settings(problem, plan))
}

/// A memory option a stage that does not fit can take, one step at a time.
#[derive(Clone, Copy, Debug)]
enum Rung {
    /// ZeRO-1, with data parallelism.
    Zero1,
    /// ZeRO-3, with data parallelism.
    Zero3,
    /// Selective recomputation (from none, or from some layers fully recomputed).
    Selective,
    /// Full recomputation, after selective.
    Full,
    /// The optimizer state, the gradients, the weights in host memory.
    Optimizer,
    Gradients,
    Weights,
}

/// The ladder `repair` climbs: recomputation before sharding further and offloading.
const RECOMPUTE_FIRST: [Rung; 7] = [
    Rung::Zero1,
    Rung::Selective,
    Rung::Full,
    Rung::Zero3,
    Rung::Optimizer,
    Rung::Gradients,
    Rung::Weights,
];

/// The other ladder of [`repair_both`]: states sharded and offloaded first, recomputation last.
const STATES_FIRST: [Rung; 7] = [
    Rung::Zero1,
    Rung::Zero3,
    Rung::Gradients,
    Rung::Weights,
    Rung::Optimizer,
    Rung::Selective,
    Rung::Full,
];

/// Takes the first rung of `ladder` that still changes `st`; `false` at the ladder's top.
fn climb(ladder: &[Rung], st: &mut Stage) -> bool {
    let shards = st.dp > 1;
    for rung in ladder {
        let took = match rung {
            Rung::Zero1 if shards && st.zero < 1 => {
                st.zero = 1;
                true
            }
            Rung::Zero3 if shards && st.zero < 3 => {
                st.zero = 3;
                true
            }
            Rung::Selective if matches!(st.recompute, Recompute::None | Recompute::Layers(_)) => {
                st.recompute = Recompute::Selective;
                true
            }
            Rung::Full if matches!(st.recompute, Recompute::Selective | Recompute::Ops) => {
                st.recompute = Recompute::Full;
                true
            }
            Rung::Optimizer if st.offload.optimizer < 1.0 => {
                st.offload.optimizer = 1.0;
                true
            }
            Rung::Gradients if st.offload.gradients < 1.0 => {
                st.offload.gradients = 1.0;
                true
            }
            Rung::Weights if st.offload.weights < 1.0 => {
                st.offload.weights = 1.0;
                true
            }
            _ => false,
        };
        if took {
            return true;
        }
    }
    false
}

/// The stages sharing stage `s`'s GPUs: `s` alone, or with an interleaved schedule every model
/// chunk `j ≡ s (mod pp)`.
fn chunk_group(plan: &Plan, s: usize) -> Vec<usize> {
    let pp = plan.pipeline_depth().max(1);
    if pp == plan.stages.len() {
        vec![s]
    } else {
        (0..plan.stages.len())
            .filter(|j| j % pp == s % pp)
            .collect()
    }
}

/// The GPU type of each of a stage's replicas.
fn replica_types(cluster: &Cluster, st: &Stage) -> Vec<usize> {
    (0..st.dp as usize)
        .map(|r| cluster.gpu_type_of(st.replica(r)[0]).0)
        .collect()
}

/// The checkpointing a stage may take besides a count of layers: none, the attention core,
/// every layer, and where the engine runs PyTorch code, torchtitan's op-level policy.
fn checkpointing_kinds(problem: &Problem<'_>) -> Vec<Recompute> {
    let mut out = vec![Recompute::None, Recompute::Selective, Recompute::Full];
    if problem.options.engine.runs_pytorch_code() {
        out.push(Recompute::Ops);
    }
    out
}

/// Every move from `plan`, in a fixed order.
pub fn neighbours(problem: &Problem<'_>, plan: &Plan) -> Vec<Move> {
    let cluster = problem.cluster;
    let mut out = Vec::new();
    let pp = plan.pipeline_depth().max(1);
    let interleaved = pp != plan.stages.len();
    let uneven_steps = plan.stages.iter().any(|s| !s.replica_samples.is_empty());
    // Each stage's expert-parallel degrees, once: its own moves and the all-stage ones use them.
    let ep_degrees: Vec<Vec<u32>> = (plan.stages.iter())
        .map(|st| expert_parallel_degrees(problem, st))
        .collect();
    for (s, st) in plan.stages.iter().enumerate() {
        if st.dp > 1 {
            for zero in 0..=3u8 {
                if zero != st.zero {
                    out.push(Move::Zero { stage: s, zero });
                }
            }
        }
        let len = st.layers.len() as u32;
        let mut recompute = checkpointing_kinds(problem);
        for k in [len / 4, len / 2, (3 * len) / 4] {
            let r = Recompute::Layers(k);
            if k >= 1 && k < len && !recompute.contains(&r) {
                recompute.push(r);
            }
        }
        for to in recompute {
            if to != st.recompute {
                out.push(Move::Recompute { stage: s, to });
            }
        }
        if st.tp > 1 {
            out.push(Move::SequenceParallel {
                stage: s,
                on: !st.sequence_parallel,
            });
        }
        for &ep in &ep_degrees[s] {
            if ep != st.ep {
                out.push(Move::ExpertParallel { stage: s, ep });
            }
        }
        for ratio in [0.0, 0.5, 1.0] {
            if ratio != st.offload.optimizer {
                out.push(Move::OffloadOptimizer { stage: s, ratio });
            }
        }
        if st.offload.weights > 0.0 {
            out.push(Move::StatesOnGpu {
                stage: s,
                weights: true,
            });
        }
        if st.offload.gradients > 0.0 {
            out.push(Move::StatesOnGpu {
                stage: s,
                weights: false,
            });
        }
    }
    // Expert tensor parallelism: every degree dividing the TP degree of the first stage with
    // experts, where the engine has it (Megatron, or any).
    let moe_tp = (plan.stages.iter())
        .find(|s| (s.layers.iter()).any(|l| problem.model.layers[l].experts().is_some()));
    let engine_has_etp =
        crate::plan::runtime::Runtime::runs_megatron_only_parallelism(problem.options.runtime);
    if let Some(st) = moe_tp.filter(|s| s.tp > 1 && s.replica_tp.is_empty() && engine_has_etp) {
        for etp in (1..st.tp)
            .filter(|e| st.tp.is_multiple_of(*e))
            .chain([st.tp])
        {
            if etp != st.expert_tp() {
                out.push(Move::ExpertTensorParallelAll { etp });
            }
        }
    }
    let cp = plan.stages.first().map_or(1, |s| s.cp);
    for c in context_parallel_degrees(problem, plan) {
        if c != cp {
            out.push(Move::ContextParallelAll { cp: c });
        }
    }
    // TP communication overlap: where every stage with TP can run it (sequence parallelism,
    // groups inside nodes, the model compiled: the validation's rules).
    if plan.stages.iter().any(|s| s.tp > 1)
        && plan.stages.iter().all(Stage::can_overlap_tp)
        && plan.compile != crate::plan::Compile::Off
    {
        out.push(Move::TpCommOverlap {
            on: !plan.tp_comm_overlap,
        });
    }
    if cp > 1 {
        out.push(Move::ContextParallelComm {
            all_to_all: plan.cp_comm == crate::plan::CpComm::Ring,
        });
    }
    if plan.stages.len() > 1 {
        for zero in 0..=3u8 {
            if plan.stages.iter().any(|s| s.zero != zero) {
                out.push(Move::ZeroAll { zero });
            }
        }
        let with_tp = || plan.stages.iter().filter(|s| s.tp > 1);
        if with_tp().count() > 1 {
            for on in [true, false] {
                if with_tp().any(|s| s.sequence_parallel != on) {
                    out.push(Move::SequenceParallelAll { on });
                }
            }
        }
        // One expert-parallel degree on every stage with experts: those all of them can take.
        let moe: Vec<(&Stage, &Vec<u32>)> = (plan.stages.iter())
            .zip(&ep_degrees)
            .filter(|(_, d)| d.len() > 1)
            .collect();
        if moe.len() > 1 {
            for &ep in moe[0].1 {
                if moe.iter().all(|(_, d)| d.contains(&ep)) && moe.iter().any(|(s, _)| s.ep != ep) {
                    out.push(Move::ExpertParallelAll { ep });
                }
            }
        }
        let shortest = (plan.stages.iter())
            .map(|s| s.layers.len() as u32)
            .min()
            .unwrap_or(0);
        let mut all = checkpointing_kinds(problem);
        all.extend((1..shortest.min(4)).map(Recompute::Layers));
        for to in all {
            if plan.stages.iter().any(|s| s.recompute != to) {
                out.push(Move::RecomputeAll { to });
            }
        }
    }
    for s in 0..plan.stages.len().saturating_sub(1) {
        for n in [1, 2] {
            out.push(Move::ShiftLayers {
                from: s,
                to: s + 1,
                n,
            });
            out.push(Move::ShiftLayers {
                from: s + 1,
                to: s,
                n,
            });
        }
    }
    if !uneven_steps {
        out.push(Move::MicroBatches { halve: true });
        out.push(Move::MicroBatches { halve: false });
    }
    let schedules = [
        Schedule::OneFOneB,
        Schedule::Gpipe,
        Schedule::Interleaved { virtual_stages: 2 },
        Schedule::Interleaved { virtual_stages: 3 },
        Schedule::Interleaved { virtual_stages: 4 },
    ];
    if pp > 1 {
        for sch in schedules {
            if sch != plan.schedule {
                out.push(Move::Schedule(sch));
            }
        }
    }
    if uneven_steps {
        return out;
    }
    let idle = idle_gpus(cluster, plan);
    for s in 0..pp {
        let st = &plan.stages[s];
        let types = replica_types(cluster, st);
        let mut distinct = types.clone();
        distinct.sort_unstable();
        distinct.dedup();
        for &a in &distinct {
            for &b in &distinct {
                if a != b {
                    out.push(Move::ShiftSamples {
                        stage: s,
                        from: a,
                        to: b,
                    });
                }
            }
            if st.dp > 1 {
                out.push(Move::DropReplica {
                    stage: s,
                    gpu_type: a,
                });
            }
        }
        if st.replica_tp.is_empty() {
            for t in 0..cluster.gpu_types.len() {
                if free_group(cluster, &idle, t, st.tp).is_some() {
                    out.push(Move::AddReplica {
                        stage: s,
                        gpu_type: t,
                    });
                }
            }
        }
        if st.replica_tp.is_empty() {
            if st.dp >= 2 && st.dp.is_multiple_of(2) && st.tp * 2 <= problem.options.max_tp {
                out.push(Move::Tp { stage: s, up: true });
            }
            if st.tp >= 2 && st.tp.is_multiple_of(2) {
                out.push(Move::Tp {
                    stage: s,
                    up: false,
                });
            }
        }
        if !interleaved && pp > 1 {
            out.push(Move::DropStage { stage: s });
            let reach = if pp <= REORDER_ANYWHERE_UP_TO { pp } else { 2 };
            // A stage's move to the next place is the next stage's move back: generated once.
            for to in s.saturating_sub(reach)..(s + reach + 1).min(pp) {
                if to != s && to != s + 1 {
                    out.push(Move::ReorderStage { from: s, to });
                }
            }
        }
        if !interleaved && st.replica_tp.is_empty() && st.replica_samples.is_empty() {
            if st.dp >= 2 && st.dp.is_multiple_of(2) && st.layers.len() >= 2 {
                out.push(Move::SplitStage { stage: s });
            }
            let even = |x: &Stage| x.micro_batch_sizes.iter().all(|b| b.is_multiple_of(2));
            if let Some(nx) = plan.stages.get(s + 1) {
                if nx.tp == st.tp && nx.replica_tp.is_empty() && even(st) && even(nx) {
                    out.push(Move::MergeStages { stage: s });
                }
            }
        }
    }
    if plan.stages.iter().all(|s| s.replica_tp.is_empty()) {
        out.push(Move::TpAll { up: true });
        out.push(Move::TpAll { up: false });
    }
    out
}

/// Pipelines up to this deep try every stage in every place ([`Move::ReorderStage`]; a move
/// to the next place is the next stage's move back, generated once): up to 225 neighbours
/// beside about 20 per stage of the other moves (ZeRO, checkpointing, offloading, layer
/// shifts, replicas), some 40% of a round at 16 stages. Deeper ones (up to a stage per layer)
/// try the next two places either way.
pub const REORDER_ANYWHERE_UP_TO: usize = 16;

/// The cluster's GPUs the plan does not use, in node and local order.
fn idle_gpus(cluster: &Cluster, plan: &Plan) -> Vec<GpuId> {
    let mut used = plan.devices();
    used.sort_unstable_by_key(|g| (g.node, g.local));
    let mut out = Vec::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        for local in 0..node.num_gpus {
            let g = GpuId {
                node: n as u32,
                local,
            };
            if used
                .binary_search_by_key(&(g.node, g.local), |u| (u.node, u.local))
                .is_err()
            {
                out.push(g);
            }
        }
    }
    out
}

/// The first `tp` idle GPUs of type `t` on one node (a TP group stays inside a node).
fn free_group(cluster: &Cluster, idle: &[GpuId], t: usize, tp: u32) -> Option<Vec<GpuId>> {
    let mut i = 0;
    while i < idle.len() {
        let node = idle[i].node;
        let on_node: Vec<GpuId> = idle[i..]
            .iter()
            .take_while(|g| g.node == node)
            .copied()
            .collect();
        i += on_node.len();
        if cluster.nodes[node as usize].gpu_type.0 == t && on_node.len() >= tp as usize {
            return Some(on_node[..tp as usize].to_vec());
        }
    }
    None
}

/// Gives `n` samples per micro-batch to replicas `to` of `sizes`, one at a time round-robin.
fn give(sizes: &mut [u64], to: &[usize], n: u64) {
    for k in 0..n {
        sizes[to[k as usize % to.len()]] += 1;
    }
}

/// `plan` after `m`, or `None` when the move does not apply (the validator judges the rest).
pub fn apply(problem: &Problem<'_>, plan: &Plan, m: &Move) -> Option<Plan> {
    let cluster = problem.cluster;
    let mut p = plan.clone();
    match *m {
        Move::Zero { stage, zero } => p.stages[stage].zero = zero,
        Move::ZeroAll { zero } => p.stages.iter_mut().for_each(|s| s.zero = zero),
        Move::RecomputeAll { to } => {
            for s in &mut p.stages {
                s.recompute = to;
                clamp_recompute(s);
            }
        }
        Move::Recompute { stage, to } => p.stages[stage].recompute = to,
        Move::SequenceParallel { stage, on } => p.stages[stage].sequence_parallel = on,
        Move::SequenceParallelAll { on } => (p.stages.iter_mut())
            .filter(|s| s.tp > 1)
            .for_each(|s| s.sequence_parallel = on),
        Move::TpCommOverlap { on } => p.tp_comm_overlap = on,
        Move::ExpertParallel { stage, ep } => p.stages[stage].ep = ep,
        Move::ExpertParallelAll { ep } => {
            for s in &mut p.stages {
                if expert_parallel_degrees(problem, s).contains(&ep) {
                    s.ep = ep;
                }
            }
        }
        Move::ContextParallelAll { cp } => {
            let old = p.stages[0].cp.max(1) as u64;
            let m = p.micro_batches.checked_mul(cp as u64)?;
            if !m.is_multiple_of(old) {
                return None;
            }
            p.micro_batches = m / old;
            for s in &mut p.stages {
                s.cp = cp;
            }
        }
        Move::ExpertTensorParallelAll { etp } => {
            let model = problem.model;
            for s in &mut p.stages {
                let moe = s.layers.iter().any(|l| model.layers[l].experts().is_some());
                if moe && s.tp.is_multiple_of(etp) {
                    s.etp = (etp != s.tp).then_some(etp);
                    s.sequence_parallel |= s.etp.is_some();
                }
            }
        }
        Move::ContextParallelComm { all_to_all } => {
            p.cp_comm = if all_to_all {
                crate::plan::CpComm::AllToAll
            } else {
                crate::plan::CpComm::Ring
            }
        }
        Move::OffloadOptimizer { stage, ratio } => p.stages[stage].offload.optimizer = ratio,
        Move::StatesOnGpu { stage, weights } => {
            let o = &mut p.stages[stage].offload;
            if weights {
                o.weights = 0.0;
            } else {
                o.gradients = 0.0;
            }
        }
        Move::Rebalance { ref counts } => {
            if counts.len() != p.stages.len() || counts.contains(&0) {
                return None;
            }
            let mut start = 0;
            for (st, &n) in p.stages.iter_mut().zip(counts) {
                st.layers = LayerRange {
                    start,
                    end: start + n,
                };
                start += n;
                clamp_recompute(st);
            }
            if start != problem.model.layers.len() {
                return None;
            }
        }
        Move::ShiftLayers { from, to, n } => {
            if p.stages[from].layers.len() <= n {
                return None;
            }
            if to == from + 1 {
                p.stages[from].layers.end -= n;
                p.stages[to].layers.start -= n;
            } else {
                p.stages[from].layers.start += n;
                p.stages[to].layers.end += n;
            }
            clamp_recompute(&mut p.stages[from]);
        }
        Move::MicroBatches { halve } => {
            if halve {
                if p.stages
                    .iter()
                    .any(|s| s.micro_batch_sizes.iter().any(|b| !b.is_multiple_of(2)))
                {
                    return None;
                }
                for s in &mut p.stages {
                    s.micro_batch_sizes.iter_mut().for_each(|b| *b /= 2);
                }
                p.micro_batches *= 2;
            } else {
                if !p.micro_batches.is_multiple_of(2) {
                    return None;
                }
                for s in &mut p.stages {
                    s.micro_batch_sizes.iter_mut().for_each(|b| *b *= 2);
                }
                p.micro_batches /= 2;
                if problem.options.max_micro_batch.lt(p
                    .stages
                    .iter()
                    .flat_map(|s| s.micro_batch_sizes.iter())
                    .max()?)
                {
                    return None;
                }
            }
        }
        Move::Schedule(to) => {
            let v_now = match p.schedule {
                Schedule::Interleaved { virtual_stages } => virtual_stages as usize,
                _ => 1,
            };
            let v_to = match to {
                Schedule::Interleaved { virtual_stages } => virtual_stages as usize,
                _ => 1,
            };
            if v_now != v_to {
                p.stages = relayout(&p.stages, p.pipeline_depth(), v_to)?;
            }
            p.schedule = to;
        }
        Move::ShiftSamples { stage, from, to } => {
            let types = replica_types(cluster, &p.stages[stage]);
            let givers: Vec<usize> = (0..types.len())
                .filter(|&r| types[r] == from && p.stages[stage].micro_batch_sizes[r] > 1)
                .collect();
            let takers: Vec<usize> = (0..types.len()).filter(|&r| types[r] == to).collect();
            if givers.is_empty() || takers.is_empty() {
                return None;
            }
            for j in chunk_group(&p, stage) {
                let sizes = &mut p.stages[j].micro_batch_sizes;
                givers.iter().for_each(|&r| sizes[r] -= 1);
                give(sizes, &takers, givers.len() as u64);
            }
        }
        Move::DropReplica { stage, gpu_type } => {
            let types = replica_types(cluster, &p.stages[stage]);
            let r = (0..types.len()).rev().find(|&r| types[r] == gpu_type)?;
            for j in chunk_group(&p, stage) {
                let st = &mut p.stages[j];
                let first: usize = (0..r).map(|q| st.tp_of(q) as usize).sum();
                st.devices.drain(first..first + st.tp_of(r) as usize);
                if !st.replica_tp.is_empty() {
                    st.replica_tp.remove(r);
                    st.tp = st.replica_tp.iter().copied().max()?;
                }
                let m = st.micro_batch_sizes.remove(r);
                st.dp -= 1;
                let others: Vec<usize> = (0..st.dp as usize).collect();
                give(&mut st.micro_batch_sizes, &others, m);
            }
        }
        Move::Tp { stage, up } => {
            for j in chunk_group(&p, stage) {
                let st = &mut p.stages[j];
                if !st.replica_tp.is_empty() {
                    return None;
                }
                let sizes = &st.micro_batch_sizes;
                if up {
                    // Replicas 2k and 2k+1 merge; a TP group stays inside a node.
                    let t = st.tp as usize;
                    if st
                        .devices
                        .chunks(2 * t)
                        .any(|g| g.iter().any(|d| d.node != g[0].node))
                    {
                        return None;
                    }
                    st.micro_batch_sizes = sizes.chunks(2).map(|c| c.iter().sum()).collect();
                    st.tp *= 2;
                    st.dp /= 2;
                } else {
                    if st.tp < 2 || !st.tp.is_multiple_of(2) || sizes.iter().any(|&b| b < 2) {
                        return None;
                    }
                    st.micro_batch_sizes = sizes.iter().flat_map(|&b| [b - b / 2, b / 2]).collect();
                    st.tp /= 2;
                    st.dp *= 2;
                }
            }
        }
        Move::TpAll { up } => {
            if up && p.stages.iter().any(|s| s.tp * 2 > problem.options.max_tp) {
                return None;
            }
            // Down: micro-batches doubled first, so that every replica has two samples to
            // split. Chunks of an interleaved schedule share their GPUs: regroup each group
            // once.
            if !up {
                p = apply(problem, &p, &Move::MicroBatches { halve: false })?;
            }
            for s in 0..p.pipeline_depth().max(1) {
                p = apply(problem, &p, &Move::Tp { stage: s, up })?;
            }
            if up {
                p = apply(problem, &p, &Move::MicroBatches { halve: true })?;
            }
        }
        Move::DropStage { stage } => {
            let into = if stage > 0 { stage - 1 } else { stage + 1 };
            let layers = p.stages[stage].layers;
            let st = &mut p.stages[into];
            st.layers = LayerRange {
                start: st.layers.start.min(layers.start),
                end: st.layers.end.max(layers.end),
            };
            p.stages.remove(stage);
        }
        Move::SplitStage { stage } => {
            let st = &p.stages[stage];
            let half = st.dp as usize / 2;
            let sizes = &st.micro_batch_sizes;
            if matches!(p.schedule, Schedule::Interleaved { .. })
                || st.dp < 2
                || !st.dp.is_multiple_of(2)
                || st.layers.len() < 2
                || !st.replica_tp.is_empty()
                || !st.replica_samples.is_empty()
                || sizes[..half].iter().sum::<u64>() != sizes[half..].iter().sum::<u64>()
                || sizes
                    .iter()
                    .any(|&b| 2 * b > problem.options.max_micro_batch)
            {
                return None;
            }
            let t = st.tp as usize;
            let mid = st.layers.start + st.layers.len().div_ceil(2);
            let mut first = st.clone();
            first.dp = half as u32;
            first.devices.truncate(half * t);
            first.micro_batch_sizes = sizes[..half].iter().map(|b| 2 * b).collect();
            first.layers.end = mid;
            let mut second = st.clone();
            second.dp = half as u32;
            second.devices.drain(..half * t);
            second.micro_batch_sizes = sizes[half..].iter().map(|b| 2 * b).collect();
            second.layers.start = mid;
            clamp_recompute(&mut first);
            clamp_recompute(&mut second);
            p.stages.splice(stage..=stage, [first, second]);
        }
        Move::MergeStages { stage } => {
            let (a, b) = (p.stages.get(stage)?, p.stages.get(stage + 1)?);
            if matches!(p.schedule, Schedule::Interleaved { .. })
                || a.tp != b.tp
                || !a.replica_tp.is_empty()
                || !b.replica_tp.is_empty()
                || !a.replica_samples.is_empty()
                || !b.replica_samples.is_empty()
                || (a.micro_batch_sizes.iter())
                    .chain(&b.micro_batch_sizes)
                    .any(|s| !s.is_multiple_of(2))
            {
                return None;
            }
            let mut merged = a.clone();
            merged.devices.extend(b.devices.iter().copied());
            merged.dp += b.dp;
            merged.micro_batch_sizes = (a.micro_batch_sizes.iter())
                .chain(&b.micro_batch_sizes)
                .map(|s| s / 2)
                .collect();
            merged.layers.end = b.layers.end;
            p.stages.splice(stage..=stage + 1, [merged]);
        }
        Move::ReorderStage { from, to } => {
            if matches!(p.schedule, Schedule::Interleaved { .. })
                || from == to
                || from.max(to) >= p.stages.len()
            {
                return None;
            }
            let mut start = p.stages[0].layers.start;
            let st = p.stages.remove(from);
            p.stages.insert(to, st);
            for st in &mut p.stages {
                let end = start + st.layers.len();
                st.layers = LayerRange { start, end };
                start = end;
            }
        }
        Move::AddReplica { stage, gpu_type } => {
            let idle = idle_gpus(cluster, &p);
            let tp = p.stages[stage].tp;
            let group = free_group(cluster, &idle, gpu_type, tp)?;
            let sizes = &p.stages[stage].micro_batch_sizes;
            let largest = (0..sizes.len()).max_by_key(|&r| (sizes[r], std::cmp::Reverse(r)))?;
            if sizes[largest] < 2 {
                return None;
            }
            for j in chunk_group(&p, stage) {
                let st = &mut p.stages[j];
                st.devices.extend(group.iter().copied());
                st.micro_batch_sizes[largest] -= 1;
                st.micro_batch_sizes.push(1);
                st.dp += 1;
            }
        }
    }
    // Moves that change a stage's replicas keep its expert parallelism where it still divides
    // them, else the largest degree that does; a stage moved or shifted onto layers without
    // experts leaves expert tensor parallelism (the validator refuses it there).
    let model = problem.model;
    for s in &mut p.stages {
        if s.etp.is_some() && !s.layers.iter().any(|l| model.layers[l].experts().is_some()) {
            s.etp = None;
        }
        if s.ep > 1 {
            s.ep = expert_parallel_degrees(problem, s)
                .into_iter()
                .filter(|d| s.ep.is_multiple_of(*d))
                .max()
                .unwrap_or(1);
        }
    }
    Some(p)
}

/// The expert-parallel degrees stage `st` can take: 1, and where its layers include MoE ones
/// and its replicas run in step (one TP degree, one micro-batch size), every common divisor of
/// its expert ranks (dp, or `dp × tp / etp` with expert tensor parallelism below TP) and of each
/// MoE layer's experts up to the problem's `max_ep` (none under an engine without expert
/// parallelism).
pub fn expert_parallel_degrees(problem: &Problem<'_>, st: &Stage) -> Vec<u32> {
    let model = problem.model;
    let experts: Vec<u64> = st
        .layers
        .iter()
        .filter_map(|l| {
            model
                .layers
                .get(l)
                .and_then(|x| x.experts())
                .map(|(e, _)| e)
        })
        .collect();
    let in_step = st.replica_tp.is_empty()
        && st.replica_samples.is_empty()
        && st.micro_batch_sizes.windows(2).all(|w| w[0] == w[1]);
    // DeepSpeed and FSDP plans take none (`Runtime::why_not`).
    let engine_has_ep = !matches!(
        problem.options.runtime,
        Some(crate::plan::runtime::Runtime::Deepspeed | crate::plan::runtime::Runtime::Fsdp)
    );
    if experts.is_empty() || !in_step || !engine_has_ep {
        return vec![1];
    }
    // Expert ranks: replicas, or with expert tensor parallelism below TP, dp × tp / etp.
    let ranks = st.dp * st.tp.max(1) / st.expert_tp();
    (1..=ranks.min(problem.options.max_ep.max(1)))
        .filter(|d| ranks.is_multiple_of(*d) && experts.iter().all(|e| e.is_multiple_of(*d as u64)))
        .collect()
}

/// The context-parallel degrees every stage of `plan` can take: up to the problem's `max_cp`,
/// dividing every stage's dp with each group of that many consecutive replicas at one
/// micro-batch size and TP degree, splitting the sequence into `2·cp` chunks (Megatron's
/// load-balanced layout), with a whole number of micro-batches after the change (a multiple
/// of the pipeline depth when interleaved). 1 alone for models without sequences, per-replica
/// sample counts, and engines without ring attention (`Runtime::why_not`).
pub fn context_parallel_degrees(problem: &Problem<'_>, plan: &Plan) -> Vec<u32> {
    let Some(first) = plan.stages.first() else {
        return vec![1];
    };
    let engine_has_cp =
        crate::plan::runtime::Runtime::runs_megatron_only_parallelism(problem.options.runtime);
    if problem.model.per_sample
        || !engine_has_cp
        || plan.stages.iter().any(|s| !s.replica_samples.is_empty())
    {
        return vec![1];
    }
    let old = first.cp.max(1) as u64;
    let pp = plan.pipeline_depth().max(1) as u64;
    let interleaved = plan.stages.len() as u64 != pp;
    let most =
        (plan.stages.iter().map(|s| s.dp).min().unwrap_or(1)).min(problem.options.max_cp.max(1));
    (1..=most)
        .filter(|&c| {
            let m = plan.micro_batches * c as u64;
            problem.seq_len.is_multiple_of(2 * c as u64)
                && m.is_multiple_of(old)
                && (!interleaved || (m / old).is_multiple_of(pp))
                && plan.stages.iter().all(|s| {
                    let even =
                        |v: &[u64]| v.chunks(c as usize).all(|g| g.iter().all(|&x| x == g[0]));
                    let tps: Vec<u64> = s.replica_tp.iter().map(|&t| t as u64).collect();
                    s.dp.is_multiple_of(c) && even(&s.micro_batch_sizes) && even(&tps)
                })
        })
        .collect()
}

/// A `Layers(k)` count no larger than the stage.
/// The layer counts per stage (in stage order) that minimise the slowest stage's micro-batch
/// time when stage i takes fᵢ + l·τᵢ for l layers: fᵢ its pipeline sends, τᵢ the rest of its
/// estimated micro-batch time over its layers. Every stage gets one layer, then each further
/// layer goes to the stage whose time after taking it is least (ties to the first): for
/// increasing costs this greedy gives the min–max optimum. `None` when the split is already
/// that, or the plan has one stage.
pub fn balanced_counts(plan: &Plan, est: &Estimate) -> Option<Vec<usize>> {
    let n = plan.stages.len();
    if n < 2 || est.stages.len() != n {
        return None;
    }
    let total: usize = plan.stages.iter().map(|s| s.layers.len()).sum();
    if total < n {
        return None;
    }
    let cost: Vec<(f64, f64)> = plan
        .stages
        .iter()
        .zip(&est.stages)
        .map(|(st, e)| {
            let fixed = e.p2p.get();
            let per_layer = (e.micro_batch_time.get() - fixed).max(0.0) / st.layers.len() as f64;
            (fixed, per_layer)
        })
        .collect();
    if cost.iter().any(|&(f, t)| !f.is_finite() || !t.is_finite()) {
        return None;
    }
    let mut counts = vec![1usize; n];
    for _ in n..total {
        let mut best = 0;
        let mut best_t = f64::INFINITY;
        for (i, &(f, t)) in cost.iter().enumerate() {
            let after = f + (counts[i] + 1) as f64 * t;
            if after < best_t {
                best = i;
                best_t = after;
            }
        }
        counts[best] += 1;
    }
    let now: Vec<usize> = plan.stages.iter().map(|s| s.layers.len()).collect();
    (counts != now).then_some(counts)
}

fn clamp_recompute(st: &mut Stage) {
    if let Recompute::Layers(k) = st.recompute {
        let len = st.layers.len() as u32;
        st.recompute = if k >= len {
            Recompute::Full
        } else {
            Recompute::Layers(k)
        };
    }
}

/// The model chunks of `pp` device groups with `v` chunks each (`v = 1`: one stage per
/// group), keeping each group's share of the layers: group g's layers split into `v` near-equal
/// chunks, chunk `k·pp + g` its k-th, laid out in chunk order. Options come from the group's
/// first chunk. `None` when a group has fewer than `v` layers.
fn relayout(stages: &[Stage], pp: usize, v: usize) -> Option<Vec<Stage>> {
    let share: Vec<usize> = (0..pp)
        .map(|g| {
            (g..stages.len())
                .step_by(pp)
                .map(|j| stages[j].layers.len())
                .sum()
        })
        .collect();
    if share.iter().any(|&l| l < v) {
        return None;
    }
    let mut out = Vec::with_capacity(pp * v);
    let mut start = 0;
    for k in 0..v {
        for g in 0..pp {
            let len = share[g] / v + usize::from(k < share[g] % v);
            let mut st = stages[g].clone();
            st.layers = LayerRange {
                start,
                end: start + len,
            };
            clamp_recompute(&mut st);
            start += len;
            out.push(st);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_fit_the_time_left_and_stay_whole_without_a_limit() {
        let threads = rayon::current_num_threads().max(1);
        // Untimed: the same chunks whatever was measured, so the search does the same work.
        assert_eq!(chunk_size(None, None), CHUNK);
        assert_eq!(chunk_size(Some(3.0), None), CHUNK);
        // Timed, nothing measured yet: one wave.
        assert_eq!(chunk_size(None, Some(5.0)), threads.min(CHUNK));
        // Plenty of time: whole chunks; two waves' time: two waves; less than one: none.
        assert_eq!(chunk_size(Some(0.01), Some(5.0)), CHUNK);
        assert_eq!(chunk_size(Some(0.1), Some(0.25)), (2 * threads).min(CHUNK));
        assert_eq!(chunk_size(Some(0.1), Some(0.05)), 0);
    }

    fn stage(start: usize, end: usize) -> Stage {
        Stage {
            etp: None,
            ep: 1,
            cp: 1,
            layers: LayerRange { start, end },
            devices: vec![GpuId {
                node: 0,
                local: start as u32,
            }],
            tp: 1,
            replica_tp: Vec::new(),
            dp: 1,
            micro_batch_sizes: vec![1],
            zero: 0,
            recompute: Recompute::None,
            offload: Default::default(),
            sequence_parallel: false,
            replica_samples: Vec::new(),
        }
    }

    #[test]
    fn relayout_interleaves_and_back() {
        let stages = vec![stage(0, 5), stage(5, 8)];
        let v2 = relayout(&stages, 2, 2).unwrap();
        let lens: Vec<usize> = v2.iter().map(|s| s.layers.len()).collect();
        assert_eq!(lens, vec![3, 2, 2, 1]);
        assert_eq!(v2[3].layers.end, 8);
        assert_eq!(v2[2].devices, stages[0].devices);
        let back = relayout(&v2, 2, 1).unwrap();
        assert_eq!(back[0].layers, LayerRange { start: 0, end: 5 });
        assert_eq!(back[1].layers, LayerRange { start: 5, end: 8 });
        assert!(relayout(&stages, 2, 4).is_none());
    }

    /// Two nodes of four GPUs (A100, then V100) and an 8-block GPT.
    fn problem_parts() -> (crate::model::Model, Cluster) {
        let cluster = crate::cluster::spec::parse_cluster_toml(
            r#"
name = "two-types"
[[node_group]]
gpu = "a100-sxm4-80gb"
gpus_per_node = 4
nodes = 1
inter_node_bandwidth = "100 Gbps"
[[node_group]]
gpu = "v100-sxm2-32gb"
gpus_per_node = 4
nodes = 1
inter_node_bandwidth = "100 Gbps"
"#,
        )
        .unwrap();
        let model = crate::model::TransformerConfig::gpt("gpt-8", 8, 1024, 16, 1024).build();
        (model, cluster)
    }

    /// The two-stage plan's problem: 32 samples of sequence 1024, analytic layer times.
    fn problem_of<'a>(model: &'a crate::model::Model, cluster: &'a Cluster) -> Problem<'a> {
        Problem {
            model,
            cluster,
            global_batch: 32,
            seq_len: 1024,
            compute: &crate::cost::Analytic,
            options: Default::default(),
        }
    }

    fn gpu(node: u32, local: u32) -> GpuId {
        GpuId { node, local }
    }

    /// Stage 0: layers 0..4 on two A100s and two V100s, 4 replicas; stage 1: the rest on the
    /// other two A100s (two V100s idle); 4 samples a micro-batch.
    fn two_stage(layers: usize) -> Plan {
        let mut a = stage(0, 4);
        a.devices = vec![gpu(0, 0), gpu(0, 1), gpu(1, 0), gpu(1, 1)];
        a.dp = 4;
        a.micro_batch_sizes = vec![1; 4];
        let mut b = stage(4, layers);
        b.devices = vec![gpu(0, 2), gpu(0, 3)];
        b.dp = 2;
        b.micro_batch_sizes = vec![2, 2];
        Plan {
            global_batch: 32,
            micro_batches: 8,
            schedule: Schedule::OneFOneB,
            engine: Default::default(),
            precision: Default::default(),
            collective_dtypes: Default::default(),
            moe_capacity_factor: None,
            cp_comm: Default::default(),
            tp_comm_overlap: false,
            compile: Default::default(),
            stages: vec![a, b],
            made_for: None,
        }
    }

    #[test]
    fn rebalance_is_the_min_max_split_and_keeps_the_plan_valid() {
        let (model, cluster) = problem_parts();
        let problem = problem_of(&model, &cluster);
        let n = model.layers.len();
        // Every split of the layers over the two stages: wherever it starts, the move proposes
        // the split whose slower stage is fastest under the linear per-stage costs it reads.
        let mut proposed = 0;
        for first in 1..n {
            let mut plan = two_stage(n);
            plan.stages[0].layers.end = first;
            plan.stages[1].layers.start = first;
            let est = common::evaluate(&problem, &plan).unwrap();
            let cost: Vec<(f64, f64)> = (plan.stages.iter().zip(&est.stages))
                .map(|(st, e)| {
                    let f = e.p2p.get();
                    (f, (e.micro_batch_time.get() - f) / st.layers.len() as f64)
                })
                .collect();
            let worst = |c: &[usize]| -> f64 {
                c.iter()
                    .zip(&cost)
                    .map(|(&l, &(f, t))| f + l as f64 * t)
                    .fold(0.0, f64::max)
            };
            let best = (1..n)
                .map(|a| worst(&[a, n - a]))
                .fold(f64::INFINITY, f64::min);
            match balanced_counts(&plan, &est) {
                None => assert!(worst(&[first, n - first]) <= best * (1.0 + 1e-12)),
                Some(counts) => {
                    proposed += 1;
                    assert_eq!(counts.iter().sum::<usize>(), n);
                    assert!(worst(&counts) <= best * (1.0 + 1e-12), "{counts:?}");
                    let p = apply(
                        &problem,
                        &plan,
                        &Move::Rebalance {
                            counts: counts.clone(),
                        },
                    )
                    .expect("a split of every layer applies");
                    let got: Vec<usize> = p.stages.iter().map(|s| s.layers.len()).collect();
                    assert_eq!(got, counts);
                    assert!(
                        common::evaluate(&problem, &p).is_some(),
                        "the plan stays valid"
                    );
                }
            }
        }
        assert!(proposed > 0, "some start is not the balanced split");
        // A split that does not cover the model is refused.
        let plan = two_stage(n);
        assert!(apply(&problem, &plan, &Move::Rebalance { counts: vec![1, 1] }).is_none());
        assert!(apply(&problem, &plan, &Move::Rebalance { counts: vec![0, n] }).is_none());
    }

    #[test]
    fn every_move_keeps_the_plan_valid_or_is_refused() {
        let (model, cluster) = problem_parts();
        let problem = problem_of(&model, &cluster);
        let plan = two_stage(model.layers.len());
        assert!(
            common::evaluate(&problem, &plan).is_some(),
            "the start is valid"
        );
        let moves = neighbours(&problem, &plan);
        // Every kind of move is generated from this plan.
        for kind in [
            "Zero",
            "ZeroAll",
            "RecomputeAll",
            "Recompute",
            "Offload",
            "ShiftLayers",
            "MicroBatches",
            "Schedule",
            "ShiftSamples",
            "DropReplica",
            "AddReplica",
            "Tp",
            "DropStage",
            "TpAll",
            "SplitStage",
        ] {
            assert!(
                moves.iter().any(|m| format!("{m:?}").starts_with(kind)),
                "no {kind} move"
            );
        }
        // With TP, sequence parallelism too.
        let tp2 = apply(&problem, &plan, &Move::Tp { stage: 0, up: true }).unwrap();
        assert!(neighbours(&problem, &tp2).contains(&Move::SequenceParallel { stage: 0, on: true }));
        // ... and, with sequence parallelism wherever TP runs, TP communication overlap.
        assert!(!neighbours(&problem, &tp2).contains(&Move::TpCommOverlap { on: true }));
        let sp = apply(
            &problem,
            &tp2,
            &Move::SequenceParallel { stage: 0, on: true },
        )
        .unwrap();
        assert!(neighbours(&problem, &sp).contains(&Move::TpCommOverlap { on: true }));
        // With TP on both stages, one move turns sequence parallelism on for both, and only
        // for stages with TP.
        let both = apply(&problem, &plan, &Move::TpAll { up: true }).unwrap();
        assert!(both.stages.iter().all(|s| s.tp > 1 && !s.sequence_parallel));
        let all = Move::SequenceParallelAll { on: true };
        assert!(neighbours(&problem, &both).contains(&all));
        let on = apply(&problem, &both, &all).unwrap();
        assert!(on.stages.iter().all(|s| s.sequence_parallel));
        assert!(common::evaluate(&problem, &on).is_some());
        assert!(!neighbours(&problem, &on).contains(&all));
        assert!(neighbours(&problem, &on).contains(&Move::SequenceParallelAll { on: false }));
        // A plan with TP on one stage only has the per-stage move, not this one.
        assert!(!format!("{:?}", neighbours(&problem, &tp2)).contains("SequenceParallelAll"));
        // Offloaded weights or gradients (only the memory ladder puts them there) can come back.
        let mut offloaded = plan.clone();
        offloaded.stages[1].offload.weights = 1.0;
        offloaded.stages[1].offload.gradients = 0.5;
        let moves = neighbours(&problem, &offloaded);
        for weights in [true, false] {
            let m = Move::StatesOnGpu { stage: 1, weights };
            assert!(moves.contains(&m), "{m:?}");
            let back = apply(&problem, &offloaded, &m).unwrap().stages[1].offload;
            assert_eq!(
                (back.weights, back.gradients),
                if weights { (0.0, 0.5) } else { (1.0, 0.0) }
            );
        }
        assert!(!neighbours(&problem, &plan)
            .iter()
            .any(|m| matches!(m, Move::StatesOnGpu { .. })));
        let on = apply(&problem, &sp, &Move::TpCommOverlap { on: true }).unwrap();
        assert!(on.tp_comm_overlap && common::evaluate(&problem, &on).is_some());
        let mut valid = 0;
        for m in &moves {
            let Some(p) = apply(&problem, &plan, m) else {
                continue;
            };
            let e = common::evaluate(&problem, &p);
            assert!(e.is_some(), "{m:?} made an invalid plan: {}", p.summary());
            valid += 1;
            // Samples per iteration never change.
            let per_mb = p.stages[0].samples_per_micro_batch();
            assert!(
                p.stages
                    .iter()
                    .all(|s| s.samples_per_micro_batch() == per_mb),
                "{m:?}"
            );
            assert_eq!(per_mb * p.micro_batches, 32, "{m:?}");
            assert!(!m.describe(&cluster).is_empty());
        }
        assert!(valid * 10 >= moves.len() * 9, "{valid} of {}", moves.len());
    }

    #[test]
    fn replicas_regroup_leave_and_join() {
        let (model, cluster) = problem_parts();
        let problem = problem_of(&model, &cluster);
        let plan = two_stage(model.layers.len());
        let up = apply(&problem, &plan, &Move::Tp { stage: 0, up: true }).unwrap();
        assert_eq!((up.stages[0].tp, up.stages[0].dp), (2, 2));
        assert_eq!(up.stages[0].micro_batch_sizes, vec![2, 2]);
        let down = apply(
            &problem,
            &up,
            &Move::Tp {
                stage: 0,
                up: false,
            },
        )
        .unwrap();
        assert_eq!(down.stages[0], plan.stages[0]);
        // Every stage at once, each replica's micro-batch kept: twice the micro-batches.
        let all = apply(&problem, &plan, &Move::TpAll { up: true }).unwrap();
        assert_eq!((all.stages[0].tp, all.stages[0].dp), (2, 2));
        assert_eq!((all.stages[1].tp, all.stages[1].dp), (2, 1));
        assert_eq!(all.stages[0].micro_batch_sizes, vec![1, 1]);
        assert_eq!(all.stages[1].micro_batch_sizes, vec![2]);
        assert_eq!(all.micro_batches, 2 * plan.micro_batches);
        let back = apply(&problem, &all, &Move::TpAll { up: false }).unwrap();
        assert_eq!(back, plan);
        let v100 = cluster.gpu_type_of(gpu(1, 0)).0;
        let joined = apply(
            &problem,
            &plan,
            &Move::AddReplica {
                stage: 1,
                gpu_type: v100,
            },
        )
        .unwrap();
        assert_eq!(joined.stages[1].devices.len(), 3);
        assert_eq!(joined.stages[1].micro_batch_sizes, vec![1, 2, 1]);
        let left = apply(
            &problem,
            &joined,
            &Move::DropReplica {
                stage: 1,
                gpu_type: v100,
            },
        )
        .unwrap();
        assert_eq!(left.stages[1].devices, plan.stages[1].devices);
        assert_eq!(left.stages[1].micro_batch_sizes, vec![2, 2]);
        let a100 = cluster.gpu_type_of(gpu(0, 0)).0;
        assert!(apply(
            &problem,
            &plan,
            &Move::AddReplica {
                stage: 0,
                gpu_type: a100
            }
        )
        .is_none());
        let merged = apply(&problem, &plan, &Move::DropStage { stage: 1 }).unwrap();
        assert_eq!(merged.stages.len(), 1);
        assert_eq!(merged.stages[0].layers.len(), model.layers.len());
    }

    #[test]
    fn a_stage_splits_into_two_and_merges_back() {
        let (model, cluster) = problem_parts();
        let problem = problem_of(&model, &cluster);
        let plan = two_stage(model.layers.len());
        let split = apply(&problem, &plan, &Move::SplitStage { stage: 0 }).unwrap();
        assert_eq!(split.stages.len(), 3);
        let (a, b) = (&split.stages[0], &split.stages[1]);
        assert_eq!((a.dp, b.dp), (2, 2));
        assert_eq!(a.devices, plan.stages[0].devices[..2].to_vec());
        assert_eq!(b.devices, plan.stages[0].devices[2..].to_vec());
        assert_eq!(a.layers.start, plan.stages[0].layers.start);
        assert_eq!(a.layers.end, b.layers.start);
        assert_eq!(b.layers.end, plan.stages[0].layers.end);
        // Each stage still takes the whole micro-batch.
        assert_eq!(a.micro_batch_sizes, vec![2, 2]);
        assert_eq!(b.micro_batch_sizes, vec![2, 2]);
        assert!(common::evaluate(&problem, &split).is_some());
        let back = apply(&problem, &split, &Move::MergeStages { stage: 0 }).unwrap();
        assert_eq!(back, plan);
        // Odd micro-batches do not halve; the last stage has nothing to merge with.
        assert!(apply(&problem, &plan, &Move::MergeStages { stage: 0 }).is_none());
        assert!(apply(&problem, &plan, &Move::MergeStages { stage: 1 }).is_none());
    }

    /// A stage moves with its GPUs, settings and layer count; the layers stay in order and
    /// the stages between close up. Moving it back restores the plan.
    #[test]
    fn a_stage_moves_to_another_place_in_the_pipeline() {
        let (model, cluster) = problem_parts();
        let problem = problem_of(&model, &cluster);
        let mut split = apply(
            &problem,
            &two_stage(model.layers.len()),
            &Move::SplitStage { stage: 0 },
        )
        .unwrap();
        // Distinct layer counts and settings, so that what moves is seen to move.
        split = apply(
            &problem,
            &split,
            &Move::ShiftLayers {
                from: 1,
                to: 0,
                n: 1,
            },
        )
        .unwrap();
        split.stages[0].zero = 1;
        split.stages[0].recompute = Recompute::Layers(1);
        let moved = apply(&problem, &split, &Move::ReorderStage { from: 0, to: 2 }).unwrap();
        let counts = |p: &Plan| p.stages.iter().map(|s| s.layers.len()).collect::<Vec<_>>();
        let (before, after) = (counts(&split), counts(&moved));
        assert_eq!(after, vec![before[1], before[2], before[0]]);
        assert!(before[0] != before[1] && before[0] != before[2]);
        assert_eq!(
            (moved.stages[2].zero, moved.stages[2].recompute),
            (1, Recompute::Layers(1))
        );
        assert_eq!(moved.stages[2].devices, split.stages[0].devices);
        assert_eq!(moved.stages[0].devices, split.stages[1].devices);
        assert_eq!(moved.stages[0].layers.start, 0);
        for w in moved.stages.windows(2) {
            assert_eq!(w[0].layers.end, w[1].layers.start);
        }
        assert_eq!(moved.stages[2].layers.end, model.layers.len());
        assert!(common::evaluate(&problem, &moved).is_some());
        let back = apply(&problem, &moved, &Move::ReorderStage { from: 2, to: 0 }).unwrap();
        assert_eq!(back, split);
        assert!(apply(&problem, &split, &Move::ReorderStage { from: 1, to: 3 }).is_none());
        // Not under an interleaved schedule, whose chunks are placed by their stage's index.
        let mut interleaved = split.clone();
        interleaved.schedule = Schedule::Interleaved { virtual_stages: 2 };
        assert!(apply(
            &problem,
            &interleaved,
            &Move::ReorderStage { from: 0, to: 2 }
        )
        .is_none());
        // Offered for every other place of this short pipeline, a swap of neighbours once.
        let offered: Vec<(usize, usize)> = neighbours(&problem, &split)
            .into_iter()
            .filter_map(|m| match m {
                Move::ReorderStage { from, to } => Some((from, to)),
                _ => None,
            })
            .collect();
        assert_eq!(offered, vec![(0, 2), (1, 0), (2, 0), (2, 1)]);
    }

    #[test]
    fn give_is_round_robin() {
        let mut s = vec![1, 1, 1];
        give(&mut s, &[0, 2], 3);
        assert_eq!(s, vec![3, 1, 2]);
    }
}
