//! hetplan's own planner (issue 10): uniform layouts and the seeds' searches, then a search of
//! its own over the union of their spaces, with a certified gap.
//!
//! No seed planner wins everywhere (docs/planners.md): Mist wins where memory binds, Metis where
//! data parallelism over a slow network hurts, Poplar on data-parallel-friendly clusters, the
//! Megatron heuristic on uniform farms. This planner first lays out uniform plans (on each GPU
//! type alone and on every GPU; pipelines of 1–4 stages, then deeper ones), then runs each
//! seed's search on the problem (Mist, in an anytime order of its loops, on a second thread
//! beside the others, which run fast first), then `refine`'s local search from the best
//! distinct starts over moves no single seed makes, ranks everything by hetplan's estimate
//! (each answer fits: `Planner::plan`), and answers the best, with the next best distinct
//! plans, the gap to `planners::bound`, the simulator's check of the three best (as far as the
//! time left allows), and — without `--engine` — the best plan each mainstream engine runs
//! (`plan::runtime`).
//!
//! Limits: the uniform starts take up to `UNIFORM_FIRST_SHARE` of a time or node limit, and
//! (under 1,024 GPUs) refining the best of them `EARLY_REFINE_SHARE` of what is left; the
//! seeds run until `MEMBERS_SHARE` of a node limit and `MEMBERS_TIME_SHARE` of a time limit
//! (`LARGE_CLUSTER_MEMBERS_SHARE` from a thousand GPUs on, and at least `SEEDS_LEAST_SHARE`
//! of the time then left; their node shares, what the uniform starts and the early
//! refinement left of that, fixed before the threads start, so a node-limited answer does
//! not depend on the thread count); the context-parallel starts take
//! `CONTEXT_PARALLEL_STARTS_SHARE` of the time then left, the local search runs until
//! `REFINE_SHARE` (when its first starts end early, further ones, `refine_more`, each batch
//! on half of what is left), the per-engine searches until `SEARCH_SHARE`, and the rest is
//! kept for the simulator's check. In the chain, member i of n gets `remaining / (n − i)`, so
//! time a fast member does not use goes to the ones after it. Without limits every search
//! runs to its own end, and the answer is deterministic.
//! Not yet here (docs/planners.md): a layer split by dynamic programming per stage structure,
//! TP groups across nodes and mixed-degree replicas in the moves, a network-aware bound.

mod refine;

use super::{bound, common, EngineBest, PlanOptions, StopReason};
use super::{Clock, Limits, Outcome, Planner, PlannerError, Problem, Progress, Ranked, Search};
use crate::cost::Estimate;
use crate::plan::runtime::Runtime;
use crate::plan::{Plan, Recompute};
use crate::units::Seconds;
use rayon::prelude::*;
use std::sync::Mutex;

/// The seed planners hetplan runs, fast first (`planners::all()` minus the oracle, which is a
/// referee for small problems, and hetplan itself).
fn members() -> Vec<Box<dyn Planner + Send + Sync>> {
    use super::{amp, baselines, ditto, metis, mist, poplar};
    vec![
        Box::new(baselines::DataParallel),
        Box::new(baselines::Megatron),
        Box::new(baselines::AlpaAverage),
        Box::new(amp::Amp),
        Box::new(poplar::Poplar::default()),
        Box::new(ditto::Ditto::default()),
        // A quarter of its own memo cap: hetplan keeps under 2 GiB (issue 10), and where the
        // exhaustive baseline needs more it is the slowest answer anyway.
        Box::new(ditto::DittoExhaustive {
            max_memo_bytes: 1 << 30,
            ..Default::default()
        }),
        Box::new(metis::Metis::default()),
        // Mist's space, its stage counts in an anytime order (`StageOrder::PowersFirst`).
        Box::new(mist::Mist {
            stage_order: mist::StageOrder::PowersFirst,
            ..Default::default()
        }),
    ]
}

/// hetplan's planner (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct Hetplan;

/// The parent search's clock, from when a member started.
struct Since<'a> {
    clock: &'a dyn Clock,
    start: Seconds,
}

impl Clock for Since<'_> {
    fn elapsed(&self) -> Seconds {
        Seconds((self.clock.elapsed().get() - self.start.get()).max(0.0))
    }
}

/// The share of a node limit the seeds' searches get (of a time limit: [`MEMBERS_TIME_SHARE`],
/// [`LARGE_CLUSTER_MEMBERS_SHARE`]); hetplan's own search from their answers runs until
/// `REFINE_SHARE` of it, and the best plan per mainstream engine (without
/// `--engine`) is searched until `SEARCH_SHARE` (of a node limit, to its end: with none of it,
/// FSDP's best plan went unfound where `--engine fsdp` found it). The engines' 2% of a time
/// limit holds their uniform layouts at 48 GPUs from a 3 s limit on, not at 1 s; at 4% the
/// local search's answer at 4,096 GPUs (`benches/speed.rs`) was 18% slower, 3.011 s against
/// 2.553 s: it still improves in the last seconds of a minute.
const MEMBERS_SHARE: f64 = 0.9;
const REFINE_SHARE: f64 = 0.96;

/// The seeds' share of a *time* limit under [`LARGE_CLUSTER_GPUS`] GPUs (node limits keep
/// [`MEMBERS_SHARE`]): the rest up to [`REFINE_SHARE`] goes to the local search (and the
/// context-parallel starts before it), up to 16% of the limit instead of 6%. On the quality
/// bench (`T_S=10 PLANNERS=megatron`, 2-core VM, 16 problems) the geometric mean against the
/// seeds' 50 s answers of the f6431b3 table went 1.077 → 1.083 at 80%
/// (1.084 at 75%, 1.084 at 60%), `a100-80-40-70b` 98.65 → 97.54 s, `h100-l40s-30b` 14.90 →
/// 14.58 s, `frontier-3type-70b` 181.8 → 179.9 s, `hopper-ampere-mixtral` 7.88 → 7.48 s, none
/// slower; the speed bench's 256 GPUs 5.391 → 5.047 s, its 64 GPUs unchanged. Below 80% Metis
/// no longer always exhausts its space on `l4-t4-edge-7b` (about 7 s alone on that VM): one of
/// three runs at 75%, and the run at 60%, answered its 4-stage plan (49.9 s simulated)
/// instead of the deep pipeline Metis finds (46.1 s); at 80% three of three found it.
const MEMBERS_TIME_SHARE: f64 = 0.8;

/// The seeds' share of a *time* limit on clusters of at least [`LARGE_CLUSTER_GPUS`] GPUs,
/// where the local search from the uniform starts is what finds the answer: on
/// `benches/speed.rs`' 4,096 GPUs the seeds' best answer took 4.607 s where the best uniform
/// start took 3.045 s, and with 60% instead of 90% of the minute the local search had 21 s
/// instead of 3.6 s and answered 2.389 s instead of 2.553 s; at 1,024 and 256 GPUs the answers
/// were the same either way, and at 64 GPUs (13.084 s against 13.006 s at 10 s) Mist's answer,
/// the best start there, needed the 9 s. Node limits keep `MEMBERS_SHARE`. 40% since the
/// uniform starts end in a second or two there ([`evaluate_starts`]): at 60% the seeds had
/// the time they left, 1.1 → 6 s of a 10 s limit at 1,024 GPUs, for answers 28–51% behind
/// the best uniform start (Mist's 8.3–9.8 s against 6.5 s), and the local search's best start
/// stopped two moves short (5.998 s against 5.916 s at 40%); the 4,096-GPU answer is the same
/// at either share.
const LARGE_CLUSTER_MEMBERS_SHARE: f64 = 0.4;
const LARGE_CLUSTER_GPUS: usize = 1024;
/// The least share of the time the uniform starts leave that the seeds get: the uniform
/// starts may take up to [`UNIFORM_FIRST_SHARE`] of a limit, more than the seeds' 40% from
/// [`LARGE_CLUSTER_GPUS`] on, and where they did every seed would be stopped before it
/// started (DataParallel and the Megatron heuristic, which answer at once, included). A
/// floor, not a tuned value: on `benches/speed.rs` the uniform starts end long before it binds
/// (at 1.1 s of 10 s at 1,024 GPUs), so no bench measures it.
const SEEDS_LEAST_SHARE: f64 = 0.25;
/// The share of a time limit the searches end by: the rest is kept for the simulator's check
/// of the best candidates and the notes after them (at 1,024 GPUs 0.04 s of a 10 s limit), and
/// for the last neighbours a search starts before its end (measured waves, one unmeasured:
/// 0.05–0.09 s there).
const SEARCH_SHARE: f64 = 0.98;

/// Starts hetplan's own search takes first (the best distinct ones), and the most runners-up
/// of the seeds that join them (`runners_up`).
const STARTS: usize = 3;

/// Passes a member's progress on with the best answer so far instead of the member's own best.
struct Relay<'a> {
    inner: &'a dyn Progress,
    best: Mutex<Option<Seconds>>,
}

impl Relay<'_> {
    fn answer(&self, t: Seconds) {
        let mut best = self.best.lock().unwrap_or_else(|e| e.into_inner());
        if best.is_none_or(|b| t < b) {
            *best = Some(t);
            self.inner.report(0, *best);
        }
    }
}

impl Progress for Relay<'_> {
    fn report(&self, explored: u64, _: Option<Seconds>) {
        let best = *self.best.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.report(explored, best);
    }
}

/// What a sub-search left behind: its answer, nodes, and why it stopped; or, when its
/// limits were used up before it began, why it did not run.
type SubRun<T> = Result<(T, u64, StopReason), StopReason>;

/// Runs `work` under a search of its own on the parent's clock and progress: until `until`
/// (seconds on the parent's clock) and with at most `nodes` nodes.
fn run_sub<T>(
    clock: &dyn Clock,
    progress: &dyn Progress,
    until: Option<f64>,
    nodes: Option<u64>,
    work: impl FnOnce(&mut Search<'_>) -> T,
) -> SubRun<T> {
    let start = clock.elapsed();
    let budget = until.map(|u| Seconds((u - start.get()).max(0.0)));
    if nodes == Some(0) {
        return Err(StopReason::NodeLimit);
    }
    if budget.is_some_and(|b| b.get() <= 0.0) {
        return Err(StopReason::TimeLimit);
    }
    let since = Since { clock, start };
    let mut sub = Search::new(
        Limits {
            max_nodes: nodes,
            time: budget,
        },
        &since,
        progress,
    );
    let out = work(&mut sub);
    Ok((out, sub.explored(), sub.stop_reason()))
}

/// Runs `planners` one after the other until `until`, member i of n with `1/(n − i)` of the
/// time and nodes left (time a fast member does not use goes to the ones after it).
fn run_chain(
    problem: &Problem<'_>,
    planners: &[Box<dyn Planner + Send + Sync>],
    clock: &dyn Clock,
    relay: &Relay<'_>,
    until: Option<f64>,
    nodes: Option<u64>,
) -> Vec<SubRun<Result<Outcome, PlannerError>>> {
    let n = planners.len();
    let mut used = 0u64;
    let mut out = Vec::with_capacity(n);
    for (i, member) in planners.iter().enumerate() {
        let left = (n - i) as f64;
        let now = clock.elapsed().get();
        let mine = until.map(|u| now + (u - now).max(0.0) / left);
        let my_nodes = nodes.map(|m| m.saturating_sub(used) / (n - i) as u64);
        let r = run_sub(clock, relay, mine, my_nodes, |sub| {
            member.plan(problem, sub)
        });
        if let Ok((Ok(o), _, _)) = &r {
            relay.answer(Seconds(o.estimate.iteration_time_s));
        }
        if let Ok((_, explored, _)) = &r {
            used = used.saturating_add(*explored);
        }
        out.push(r);
    }
    out
}

impl Planner for Hetplan {
    fn name(&self) -> &'static str {
        "hetplan"
    }

    fn description(&self) -> &'static str {
        "hetplan's planner: uniform layouts, every seed's search (Metis, Mist, Poplar, Ditto, \
         AMP, the Megatron heuristic, ...), then its own local search over the union of their \
         spaces from the best of them, ranked by hetplan's estimate, with the gap to a \
         certified lower bound"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        // An engine that runs no plan of the problem whatever the layout (a model it does not
        // implement, a precision it does not train in) is said so before any search.
        if let Some(rt) = problem.options.runtime {
            let refusals = refine::engine_refusals(problem);
            if !refusals.is_empty() {
                return Err(PlannerError::Infeasible(format!(
                    "{} cannot run this problem: {}",
                    rt.name(),
                    refusals.join("; ")
                )));
            }
        }
        // The bound first, so that its time comes out of the members' budgets.
        let bound = bound::lower_bound(problem);
        let time = search.limits.time.map(|t| t.get());
        // Uniform layouts before the seeds, on a share of the limit: at a thousand GPUs and
        // more they are what a slow network favours (deep pipelines of wide replicas) and no
        // seed reaches them in time, and left for after the seeds they got what the seeds
        // leave, a fraction of a second (`benches/speed.rs` at 1,024 GPUs: 3.0 s for all
        // of them, 9.1 s gone when they began).
        // Under a node limit they take at most the same share of its nodes, and the seeds
        // what they leave of theirs.
        let nodes = search.limits.max_nodes;
        let uniform = {
            let now = search.elapsed().get();
            let until = time.map(|t| now + UNIFORM_FIRST_SHARE * (t - now).max(0.0));
            let cap = nodes.map(|m| (m as f64 * UNIFORM_FIRST_SHARE) as u64);
            uniform_starts(problem, search, until, cap, &bound)
        };
        // Under a thousand GPUs, the best uniform start refined at once, before the seeds, on
        // a share of what is left: where it is the best start (pipelines over every node on
        // the speed bench's 64 GPUs), a short limit otherwise left its refinement the last
        // few percent (`EARLY_REFINE_SHARE`). Its result joins the answers, not the starts:
        // the local search's starts stay what they were.
        let early: Option<Seen> = {
            let now = search.elapsed().get();
            let until = time.map(|t| now + EARLY_REFINE_SHARE * (t - now).max(0.0));
            let done = search.explored();
            let cap =
                nodes.map(|m| done + (m.saturating_sub(done) as f64 * EARLY_REFINE_SHARE) as u64);
            let small = problem.cluster.num_gpus() < LARGE_CLUSTER_GPUS;
            match uniform.first() {
                Some(best) if small && search.poll() => {
                    let mut early_stop = StopReason::Exhausted;
                    refine_from(
                        problem,
                        std::slice::from_ref(best),
                        search,
                        until,
                        cap,
                        &mut early_stop,
                    )
                    .into_iter()
                    .next()
                }
                _ => None,
            }
        };
        let members = members();
        let n = members.len();
        let time_share = if problem.cluster.num_gpus() >= LARGE_CLUSTER_GPUS {
            LARGE_CLUSTER_MEMBERS_SHARE
        } else {
            MEMBERS_TIME_SHARE
        };
        // At least `SEEDS_LEAST_SHARE` of what the uniform starts left, where those took more
        // than the seeds' share left them.
        let now = search.elapsed().get();
        let members_until =
            time.map(|t| (t * time_share).max(now + SEEDS_LEAST_SHARE * (t - now).max(0.0)));
        let members_nodes =
            nodes.map(|m| ((m as f64 * MEMBERS_SHARE) as u64).saturating_sub(search.explored()));
        // Mist (the last member) on a thread of its own beside the others, one after the
        // other: on two cores the two searches that gain most from time (Mist, Metis) both
        // get most of it. Node shares are fixed up front, so a node-limited answer does not
        // depend on the thread count. On one thread Mist runs first with 1/n of the time.
        // Members report their node counts with the best *answer* so far, not their own
        // cost models' bests (which may not fit, and price plans their own way).
        let relay = Relay {
            inner: search.progress(),
            // The early refinement's plan is already reported as the best so far.
            best: Mutex::new(
                (uniform.first().into_iter().chain(&early))
                    .map(|u| Seconds(u.est.iteration_time_s))
                    .min_by(|a, b| a.get().total_cmp(&b.get())),
            ),
        };
        let clock = search.clock();
        let (chain, solo) = members.split_at(n - 1);
        let solo_nodes = members_nodes.map(|m| m / n as u64);
        let chain_nodes = members_nodes.map(|m| m - m / n as u64);
        let solo_until = members_until.map(|u| {
            if rayon::current_num_threads() >= 2 {
                u
            } else {
                let now = clock.elapsed().get();
                now + (u - now).max(0.0) / n as f64
            }
        });
        let (solo_run, mut runs) = rayon::join(
            || {
                let r = run_sub(clock, &relay, solo_until, solo_nodes, |sub| {
                    solo[0].plan(problem, sub)
                });
                if let Ok((Ok(o), _, _)) = &r {
                    relay.answer(Seconds(o.estimate.iteration_time_s));
                }
                r
            },
            || run_chain(problem, chain, clock, &relay, members_until, chain_nodes),
        );
        runs.push(solo_run);
        let mut answers: Vec<(&'static str, Outcome)> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut stop = StopReason::Exhausted;
        for (member, run) in members.iter().zip(runs) {
            let out = match run {
                Ok((out, explored, stopped)) => {
                    search.add_explored(explored);
                    if stopped != StopReason::Exhausted && stop == StopReason::Exhausted {
                        stop = stopped;
                    }
                    out
                }
                Err(why) => {
                    if stop == StopReason::Exhausted {
                        stop = why;
                    }
                    failures.push(format!(
                        "{}: not run, its limits were used up",
                        member.name()
                    ));
                    continue;
                }
            };
            match out {
                Ok(o) => {
                    search.offer(Seconds(o.estimate.iteration_time_s));
                    answers.push((member.name(), o));
                }
                Err(e) => failures.push(format!("{}: {e}", member.name())),
            }
        }
        // The members' answers as starting points, best first (ties to the earlier member),
        // each plan once; with `--engine`, made to run there (and fit) first.
        let mut tally: Vec<(&'static str, f64)> = (answers.iter())
            .map(|(w, o)| (*w, o.estimate.iteration_time_s))
            .collect();
        tally.sort_by(|a, b| a.1.total_cmp(&b.1));
        let runners_up = runners_up(
            problem,
            &answers,
            &uniform,
            search,
            time.map(|t| t * REFINE_SHARE),
        );
        let seen: Vec<Seen> = (answers.into_iter())
            .map(|(who, o)| Seen {
                who: who.to_string(),
                plan: o.plan,
                est: o.estimate,
                steps: Vec::new(),
            })
            .chain(runners_up)
            .collect();
        // Long sequences: the seeds have no context parallelism, so uniform plans with it join
        // them as starting points (where nothing else fits, they are the only ones). They come
        // after the seeds, which take most of a time limit: a share of what is left
        // (unbounded, they and the uniform starts, which then ran after them too, took 6 s of
        // a 60 s limit at 4,096 GPUs and left the local search nothing).
        let mut seen = seen;
        let now = search.elapsed().get();
        let until = time.map(|t| now + CONTEXT_PARALLEL_STARTS_SHARE * (t - now).max(0.0));
        seen.extend(context_parallel_starts(problem, search, until, None));
        seen.extend(uniform);
        let cands = admit(problem, &seen, search, time);
        if cands.is_empty() {
            return Err(match (stop, problem.options.runtime) {
                (StopReason::Exhausted, None) => PlannerError::Infeasible(format!(
                    "no seed planner found a plan that fits (nor did a uniform plan with \
                     context parallelism, where the model and engine take one): {}",
                    failures.join("; ")
                )),
                (StopReason::Exhausted, Some(rt)) => PlannerError::Infeasible(format!(
                    "no plan seen (the seeds' answers and their other plans, uniform layouts) can \
                     be made to run on {} and fit{}",
                    rt.name(),
                    match (seen.iter())
                        .min_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s))
                    {
                        Some(s) => match refine::engine_reasons(problem, &s.plan) {
                            why if why.is_empty() => format!(
                                " (the best, {}'s, runs there but does not fit in memory)",
                                s.who
                            ),
                            why => format!(" (the best, {}'s: {})", s.who, why.join("; ")),
                        },
                        None => format!(": {}", failures.join("; ")),
                    }
                )),
                (s, _) => PlannerError::Stopped(s),
            });
        }
        // hetplan's own search from the best of them; without `--engine`, it ends where the
        // best plan for each mainstream engine is searched.
        let until = match (time, problem.options.runtime) {
            (Some(t), None) => Some(t * REFINE_SHARE),
            (t, _) => t.map(|t| t * SEARCH_SHARE),
        };
        // Its own stop reason: a seed stopped by its share of the limits leaves the local
        // search free to end early, and then to search on from further starts.
        let refine_nodes = match problem.options.runtime {
            None => nodes.map(|m| (m as f64 * REFINE_SHARE) as u64),
            Some(_) => nodes,
        };
        let mut refine_stop = StopReason::Exhausted;
        let mut refined = refine_from(
            problem,
            &cands,
            search,
            until,
            refine_nodes,
            &mut refine_stop,
        );
        if refine_stop == StopReason::Exhausted {
            refined.extend(refine_more(problem, &cands, search, until, refine_nodes));
        } else if stop == StopReason::Exhausted {
            stop = refine_stop;
        }
        // After the local search's plans, so that ties go to them (not to the starts: an
        // unmoved start equal to it loses the tie).
        refined.extend(early);
        let chosen = (refined.iter().chain(&cands))
            .min_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s))
            .cloned()
            .expect("cands is not empty");
        let (mut per_engine, faster) = match problem.options.runtime {
            Some(_) => (Vec::new(), None),
            None => engines(
                problem,
                &bound,
                &chosen,
                refined.iter().chain(&cands).cloned().collect(),
                search,
                time.map(|t| t * SEARCH_SHARE),
                &mut stop,
            ),
        };
        // An engine's own search can end below the answer (it refines from other starts): the
        // answer is the fastest plan seen, and each engine is compared with it.
        let chosen = match faster {
            Some(f) => {
                for e in &mut per_engine {
                    if let Some(t) = e.estimate_s {
                        e.slower = t / f.est.iteration_time_s;
                    }
                }
                f
            }
            None => chosen,
        };
        // Every other plan seen, best first, each once.
        let mut pool: Vec<&Seen> = refined.iter().chain(&cands).collect();
        pool.sort_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
        let mut others: Vec<Seen> = Vec::new();
        for s in pool {
            if s.plan == chosen.plan || others.iter().any(|o| o.plan == s.plan) {
                continue;
            }
            others.push(s.clone());
        }
        // The simulator checks the best candidates, and breaks a tie of the estimate among them.
        let left = time.map(|t| (t - search.elapsed().get()).max(0.0));
        let (mut checked, max_tasks) =
            simulate_candidates(problem, std::iter::once(&chosen).chain(&others), left);
        let mut tie = None;
        let chosen = match tie_broken(&checked).filter(|&i| others[i - 1].est.fits) {
            Some(i) => {
                let promoted = others.remove(i - 1);
                tie = Some((i, checked[0], checked[i]));
                // The old answer is now the best of the others by the estimate.
                let first = checked[0];
                checked[0] = checked.remove(i);
                checked.insert(1, first);
                others.insert(0, chosen);
                for e in &mut per_engine {
                    if let Some(t) = e.estimate_s {
                        e.slower = t / promoted.est.iteration_time_s;
                    }
                }
                promoted
            }
            None => chosen,
        };
        let ranked: Vec<Ranked> = (others.iter())
            .map(|s| Ranked {
                plan: s.plan.clone(),
                planner_cost_s: s.est.iteration_time_s,
                estimate_s: s.est.iteration_time_s,
                fits: s.est.fits,
            })
            .collect();
        let tally: Vec<String> = (tally.iter())
            .map(|(w, t)| format!("{w} {}", Seconds(*t)))
            .collect();
        let t = chosen.est.iteration_time_s;
        let mut notes = Vec::new();
        if let Some(rt) = problem.options.runtime {
            notes.push(format!(
                "restricted to what {} runs (--engine {0})",
                rt.name()
            ));
        }
        // The seeds' answers as they came: with `--engine`, before they were made to run there.
        let answers = match problem.options.runtime {
            Some(rt) => format!(
                "the seeds' answers, before they were made to run on {}: {}",
                rt.name(),
                tally.join(", ")
            ),
            None => format!("the seeds' answers: {}", tally.join(", ")),
        };
        if chosen.steps.is_empty() && tie.is_some() {
            notes.push(format!(
                "the plan of {}, as it started ({answers})",
                chosen.who
            ));
        } else if chosen.steps.is_empty() {
            notes.push(format!(
                "the plan of {}, the best of the plans hetplan started from by its estimate \
                 ({answers}); no move of hetplan's own search improves it",
                chosen.who,
            ));
        } else {
            let from = chosen.steps.first().map_or(t, |s| s.1 .0);
            let steps: Vec<String> = (chosen.steps.iter())
                .map(|(m, (_, after))| {
                    format!("{} ({})", m.describe(problem.cluster), Seconds(*after))
                })
                .collect();
            notes.push(format!(
                "hetplan's own search improved the plan of {} ({}) by {:.1}% in {} moves: {}; \
                 {answers}",
                chosen.who,
                Seconds(from),
                (1.0 - t / from) * 100.0,
                chosen.steps.len(),
                steps.join(", "),
            ));
        }
        notes.push(format!(
            "{:.1}% above the lower bound of {} (compute alone, every GPU busy)",
            bound.gap(Seconds(t)) * 100.0,
            Seconds(bound.iteration_time_s)
        ));
        if let Some((i, (e0, s0), (ei, si))) = tie {
            let (s0, si) = (s0.unwrap_or(f64::NAN), si.unwrap_or(f64::NAN));
            notes.push(format!(
                "the simulator broke a tie: the estimate put plan #{} of its ranking ({}) within \
                 {:.1}% of its first ({}), and the simulator, which follows each transfer on the \
                 links it shares, runs it {:.1}% faster ({} against {}): it is the answer",
                i + 1,
                Seconds(ei),
                SIMULATOR_BREAKS_TIES_WITHIN * 100.0,
                Seconds(e0),
                (1.0 - si / s0) * 100.0,
                Seconds(si),
                Seconds(s0)
            ));
        }
        notes.extend(simulation_notes(&checked, max_tasks, left));
        notes.extend(explain(problem, &chosen.plan));
        notes.extend(memory_options(problem, &chosen.plan, &chosen.est));
        notes.extend(expert_parallelism(problem, &chosen.plan, &chosen.est));
        notes.extend(context_parallelism(problem, &chosen.plan, &chosen.est));
        notes.extend(compilation(problem, &chosen.plan, &chosen.est));
        // GPUs left out: what using them all would cost, by the best such plan seen.
        let all = problem.cluster.num_gpus();
        let used = chosen.plan.devices().len();
        if used < all {
            let full = (refined.iter().chain(&cands))
                .filter(|s| s.plan.devices().len() == all)
                .min_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
            notes.push(match full {
                Some(s) if s.est.iteration_time_s >= t => format!(
                    "{} of {all} GPUs are left idle: the best plan seen that uses them all ({}, \
                     {}) is {:.2}× slower",
                    all - used,
                    s.who,
                    Seconds(s.est.iteration_time_s),
                    s.est.iteration_time_s / t
                ),
                // Within the tie the simulator broke.
                Some(s) => format!(
                    "{} of {all} GPUs are left idle: the best plan seen that uses them all ({}, \
                     {}) is as fast by the estimate, slower by the simulator",
                    all - used,
                    s.who,
                    Seconds(s.est.iteration_time_s),
                ),
                None => format!(
                    "{} of {all} GPUs are left idle: no plan seen uses them all",
                    all - used
                ),
            });
        }
        for f in &failures {
            notes.push(format!("no answer from {f}"));
        }
        Ok(Outcome {
            plan: chosen.plan,
            estimate: chosen.est,
            explored: search.explored(),
            stop_reason: stop,
            ranked,
            notes,
            per_engine,
        })
    }
}

/// A plan hetplan has seen: whose it is, its estimate, and the moves of hetplan's search that
/// led to it from a seed's answer (each with the times before and after).
#[derive(Clone)]
struct Seen {
    who: String,
    plan: Plan,
    est: Estimate,
    steps: Vec<(refine::Move, (f64, f64))>,
}

/// The seeds' other plans that hetplan's estimate puts among the best starts. A seed ranks
/// the plans it found (by its own cost model; Megatron's heuristic by hetplan's estimate) and
/// answers with the first that fits (`Outcome::ranked`, each with hetplan's estimate beside
/// it); by the estimate another may be faster: on the quality bench's `four-gen-56-13b` Mist's
/// answer was estimated at 13.244 s and its second-ranked plan at 10.989 s, below the 11.221 s
/// hetplan's search reached from the answer. Best first, a ranked plan that fits and is none
/// of the starts already known (the answers, the uniform starts) joins while it is estimated
/// below the `STARTS`-th best distinct start so far, those that joined included; each is a
/// node of `search`, estimated again in full (a start carries its estimate), and none is
/// tried past `deadline` (seconds into the search).
fn runners_up(
    problem: &Problem<'_>,
    answers: &[(&'static str, Outcome)],
    uniform: &[Seen],
    search: &mut Search<'_>,
    deadline: Option<f64>,
) -> Vec<Seen> {
    let mut known: Vec<(&Plan, f64)> = Vec::new();
    let starts = (answers
        .iter()
        .map(|(_, o)| (&o.plan, o.estimate.iteration_time_s)))
    .chain(uniform.iter().map(|u| (&u.plan, u.est.iteration_time_s)));
    for (plan, t) in starts {
        if !known.iter().any(|(p, _)| *p == plan) {
            known.push((plan, t));
        }
    }
    let mut times: Vec<f64> = known.iter().map(|(_, t)| *t).collect();
    let mut picks: Vec<(f64, String, &Plan)> = Vec::new();
    for (who, o) in answers {
        let n = o.ranked.len();
        for (k, r) in o.ranked.iter().enumerate() {
            if r.fits && !known.iter().any(|(p, _)| *p == &r.plan) {
                let label = format!("{who} (plan {} of the {n} it ranked)", k + 1);
                picks.push((r.estimate_s, label, &r.plan));
            }
        }
    }
    // Best first; ties keep the members' order.
    picks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Seen> = Vec::new();
    for (t, who, plan) in picks {
        times.sort_by(f64::total_cmp);
        let bar = times.get(STARTS - 1).copied().unwrap_or(f64::INFINITY);
        if out.len() >= STARTS || t >= bar || deadline.is_some_and(|d| search.elapsed().get() >= d)
        {
            break;
        }
        if out.iter().any(|s| s.plan == *plan) {
            continue;
        }
        if !search.tick() {
            break;
        }
        if let Some(est) = common::evaluate(problem, plan).filter(|e| e.fits) {
            search.offer(Seconds(est.iteration_time_s));
            times.push(est.iteration_time_s);
            out.push(Seen {
                who,
                plan: plan.clone(),
                est,
                steps: Vec::new(),
            });
        }
    }
    out
}

/// Uniform plans with context parallelism (Megatron's placement: TP innermost, then CP, then
/// DP, then the pipeline), made to fit by the memory ladder: for every power-of-two degree
/// `cp > 1` the problem allows, TP 1–8 and pipelines of 1, 2 and 4 stages, micro-batches of one
/// sample and as many replicas as divide the global batch. Each sketch and each start fitted
/// is a node of `search` ([`evaluate_starts`]); none once its limits are reached or past
/// `deadline`. Those that fit, best first,
/// at most `STARTS`.
fn context_parallel_starts(
    problem: &Problem<'_>,
    search: &mut Search<'_>,
    deadline: Option<f64>,
    node_cap: Option<u64>,
) -> Vec<Seen> {
    let model = problem.model;
    let cluster = problem.cluster;
    let gpus = cluster.num_gpus() as u64;
    let gbs = problem.global_batch;
    let engine_has_cp = Runtime::runs_megatron_only_parallelism(problem.options.runtime);
    if model.per_sample || !engine_has_cp || !search.poll() {
        return Vec::new();
    }
    let mut specs: Vec<String> = Vec::new();
    for cp in 2..=problem.options.max_cp.max(1) as u64 {
        if !cp.is_power_of_two() || !problem.seq_len.is_multiple_of(2 * cp) {
            continue;
        }
        for tp in [1u64, 2, 4, 8] {
            for pp in [1u64, 2, 4] {
                let per_replica = tp * cp * pp;
                if tp > problem.options.max_tp as u64
                    || per_replica > gpus
                    || pp as usize > model.layers.len()
                {
                    continue;
                }
                // Megatron's DP (groups of cp replicas): the most that divide the batch.
                if let Some(dp) = (1..=gpus / per_replica)
                    .rev()
                    .find(|d| gbs.is_multiple_of(*d))
                {
                    specs.push(format!("tp={tp},pp={pp},cp={cp},dp={dp},mbs=1,gbs={gbs}"));
                }
            }
        }
    }
    let cands: Vec<Start<'_>> = specs
        .into_iter()
        .map(|spec| {
            let who = format!("a uniform plan with context parallelism ({spec})");
            let build: Build<'_> = Box::new(move || {
                crate::plan::inline::parse_inline_plan(&spec, model, cluster).ok()
            });
            (who, 0.0, build)
        })
        .collect();
    // Not split by speed: these starts have a small share of what the seeds leave, and a
    // chunk's extra estimates overran it by 2.5 s at 4,096 GPUs (`benches/speed.rs`).
    evaluate_starts(problem, search, cands, deadline, node_cap, false)
}

/// Uniform plans on all the GPUs and, for clusters of several types, on the GPUs of each type
/// alone, the others idle: no seed forms tensor-parallel groups across nodes (Mist keeps
/// them in a node, Metis and AMP in a node class), which is what GPUs spread one per node
/// need when their states fit only split, and the seeds that lay out uniform plans on the whole
/// cluster (Megatron's heuristic, Alpa's) have no memory options to make them fit. Megatron's
/// layouts (`tp` of 1–8, `pp` of 1–4, the most replicas that divide the batch, micro-batches
/// of 1–8 samples or a replica's whole batch, sequence parallelism with TP) on those nodes,
/// fitted by the memory ladder (`refine::repair`: ZeRO, checkpointing, offloading); then, as
/// time allows, the same layouts in deeper pipelines (`pp` of 8, 16, … up to the layer count):
/// on hundreds of nodes behind a slow network each node then holds a smaller part of the
/// model, and the gradients it reduces over that network shrink with it (at 1,024 GPUs of
/// `benches/speed.rs` the best uniform plan has 8 stages, at 4,096 16).
fn uniform_starts(
    problem: &Problem<'_>,
    search: &mut Search<'_>,
    deadline: Option<f64>,
    node_cap: Option<u64>,
    bound: &bound::Bound,
) -> Vec<Seen> {
    let (model, cluster, gbs) = (problem.model, problem.cluster, problem.global_batch);
    if model.per_sample || !search.poll() {
        return Vec::new();
    }
    let all = (
        cluster.clone(),
        (0..cluster.nodes.len() as u32).collect::<Vec<u32>>(),
    );
    // Each type alone only where there are several.
    let types = if cluster.gpu_types.len() > 1 {
        cluster.gpu_types.len()
    } else {
        0
    };
    // No plan on a set's GPUs is faster than its floor (`Bound::alone_s` for a type alone,
    // the whole bound for every GPU).
    let floor = |t: Option<usize>| match t {
        Some(t) => bound.alone_s.get(t).copied().flatten().unwrap_or(0.0),
        None => bound.iteration_time_s,
    };
    // Within each pass, the sets of the lowest floor first (a stable sort: ties keep the
    // types' order, then every GPU). Every GPU's floor, the whole bound, is the lowest.
    let mut sets: Vec<_> = (0..types)
        .map(|t| (Some(t), nodes_of_type(cluster, t)))
        .chain(std::iter::once((None, all)))
        .collect();
    // (A type with no bound, one that cannot run some layer, sorts last.)
    let order = |t: Option<usize>| match t {
        Some(t) => bound
            .alone_s
            .get(t)
            .copied()
            .flatten()
            .unwrap_or(f64::INFINITY),
        None => bound.iteration_time_s,
    };
    sets.sort_by(|a, b| order(a.0).total_cmp(&order(b.0)));
    let mut cands: Vec<Start<'_>> = Vec::new();
    // Megatron's depths on every set first, then deeper pipelines: the first pass is what
    // the time limit must not cut short.
    let deeper: Vec<u64> = std::iter::successors(Some(8u64), |d| Some(d * 2))
        .take_while(|&d| d as usize <= model.layers.len())
        .collect();
    let passes: [&[u64]; 2] = [&[1, 2, 4], &deeper];
    for (depths, (t, (sub, keep))) in passes
        .iter()
        .flat_map(|d| sets.iter().map(move |s| (*d, s)))
    {
        let t = *t;
        let gpus = sub.num_gpus() as u64;
        let floor = floor(t);
        for tp in [1u64, 2, 4, 8] {
            for &pp in depths {
                if tp > problem.options.max_tp as u64
                    || tp * pp > gpus
                    || pp as usize > model.layers.len()
                    || !(problem.options.runtime).is_none_or(|rt| rt.runs_layout(tp, pp))
                {
                    continue;
                }
                let Some(dp) = (1..=gpus / (tp * pp))
                    .rev()
                    .find(|d| gbs.is_multiple_of(*d))
                else {
                    continue;
                };
                // Micro-batches of 1–8 samples, and each replica's whole batch in one (the
                // fewest steps, where memory options make it fit).
                let mut sizes = vec![1u64, 2, 4, 8];
                if !sizes.contains(&(gbs / dp)) {
                    sizes.push(gbs / dp);
                }
                for mbs in sizes {
                    if !(gbs / dp).is_multiple_of(mbs) || mbs > problem.options.max_micro_batch {
                        continue;
                    }
                    let sp = if tp > 1 { "on" } else { "off" };
                    let spec = format!("tp={tp},pp={pp},dp={dp},mbs={mbs},gbs={gbs},sp={sp}");
                    // Built when evaluated: at thousands of GPUs laying out a hundred plans
                    // takes longer than an engine's share of the time (see `engines`).
                    let layout = spec.clone();
                    let plan: Build<'_> = Box::new(move || {
                        let mut p =
                            crate::plan::inline::parse_inline_plan(&layout, model, sub).ok()?;
                        for st in &mut p.stages {
                            for g in &mut st.devices {
                                g.node = keep[g.node as usize];
                            }
                        }
                        Some(p)
                    });
                    let who = match t {
                        Some(t) => format!(
                            "a uniform plan on the {} GPUs alone ({spec})",
                            cluster.gpu_types[t].name
                        ),
                        None => format!("a uniform plan on every GPU ({spec})"),
                    };
                    cands.push((who, floor, plan));
                }
            }
        }
    }
    evaluate_starts(problem, search, cands, deadline, node_cap, true)
}

/// The share of a time limit the uniform starts may take before the seeds run (their
/// estimates, with both memory ladders, take seconds at a thousand GPUs: all 420 layouts of
/// `benches/speed.rs`' 1,024-GPU problem in 3.0 s on two cores, 6.1 s at 4,096 GPUs (2.8 and
/// 5.8 s before the pipelines over several types were also split by speed); at a quarter of
/// a 10 s limit the deep A100 pipelines were reached in one run of the bench and not in the
/// next). At 64 GPUs they take 0.47 s (0.67 s before the plans on one type alone were set
/// aside by its bound, [`evaluate_starts`]): with 0.3 of a 1 s limit the pipelines over
/// every node, the best starts there, were cut off and the answer was the A100s' alone
/// (15.863 s); with half, 14.2 s (13.373 s at 10 s). The seeds lose nothing that mattered
/// there: at 1 s their best answer was 19.1 s. Since 2026-11-29 the layouts are sketched
/// before any memory ladder and the ladders run fastest sketch first ([`evaluate_starts`]):
/// at 1,024 GPUs the uniform starts end at about 1.1 s of a 10 s limit (the 210 layouts not
/// set aside sketched by 0.9 s, the best three fitted 0.02 s later).
const UNIFORM_FIRST_SHARE: f64 = 0.5;

/// The share of what is left of a time or node limit after the uniform starts that refining
/// the best of them may take before the seeds run (it ends sooner where it reaches a local
/// optimum). On `benches/speed.rs`' 64 GPUs the 1 s answer became the 10 s one (13.373 s,
/// `hetplan plan`; 14.211 s before), reached at 0.58 s of the 10 s search. Not from 1,024 GPUs
/// on: there the refinement ran to its share without ending and the seeds' share of the limit
/// (then 60%) shrank by it, and the 1,024-GPU answer went from 6.459 s to 6.756 s. With the
/// sketched uniform starts (2026-11-29) it ends there in under a second, and the answer is
/// the same with it as without (5.916 s): still not run.
const EARLY_REFINE_SHARE: f64 = 0.25;

/// The share of the time the seeds leave that the context-parallel starts may take; the
/// local search keeps the rest.
const CONTEXT_PARALLEL_STARTS_SHARE: f64 = 0.125;

/// The nodes of GPU type `t` as a cluster of their own, and each one's index in `cluster`.
fn nodes_of_type(
    cluster: &crate::cluster::Cluster,
    t: usize,
) -> (crate::cluster::Cluster, Vec<u32>) {
    let keep: Vec<u32> = (0..cluster.nodes.len() as u32)
        .filter(|&i| {
            let n = &cluster.nodes[i as usize];
            n.gpu_type.0 == t && n.num_gpus > 0
        })
        .collect();
    let mut sub = cluster.clone();
    sub.gpu_types = vec![cluster.gpu_types[t].clone()];
    sub.nodes = (keep.iter())
        .map(|&i| {
            let mut n = cluster.nodes[i as usize].clone();
            n.gpu_type = crate::cluster::GpuTypeId(0);
            n
        })
        .collect();
    let at = |i: u32| keep.iter().position(|&k| k == i).map(|p| p as u32);
    sub.pair_bandwidth = (cluster.pair_bandwidth.iter())
        .filter_map(|(&(a, b), &bw)| Some(((at(a)?, at(b)?), bw)))
        .collect();
    (sub, keep)
}

/// How a starting plan is laid out, run when it is evaluated (`None`: it cannot be).
type Build<'a> = Box<dyn Fn() -> Option<Plan> + Send + Sync + 'a>;

/// A starting plan to evaluate: who it is, a lower bound on its estimate (seconds; 0 where
/// none is known) and how to lay it out.
type Start<'a> = (String, f64, Build<'a>);

/// Starting plans from uniform layouts (`who`, how to lay out the plan): each with
/// the problem's engine and precision, made to run on `--engine`'s runtime, fitted by the
/// memory ladder (with `rebalance`, split by speed where that is faster: [`sketch_start`],
/// [`fit_sketch`]); the best [`STARTS`] that fit. In two passes, each in chunks, in parallel,
/// each chunk only while the search has time and nodes left (an estimate at thousands of GPUs
/// takes milliseconds), before `deadline` (seconds into the search) and while it has
/// explored fewer than `node_cap` nodes (one a sketch, one a start fitted):
///
/// 1. Every start laid out and estimated as it is, and split by speed ([`sketch_start`]: one
///    to three estimates), in the order given, on up to [`SKETCH_SHARE`] of the nodes left
///    under `node_cap` and of the time to `deadline`.
/// 2. The memory ladders ([`fit_sketch`]: up to tens of estimates each), the start whose
///    sketch estimates fastest first (a stable sort: ties keep the order given). The ladders
///    of hopeless layouts had taken the time: on `benches/speed.rs`' 1,024 GPUs the first
///    sixteen layouts over every GPU (TP 1 and 2, one to four stages) took 3.6 s of the 5 s
///    the uniform starts had, and the deep pipelines over every GPU, the best starts there,
///    were reached in some runs and not in others. Under a time limit a chunk takes only
///    the starts whose ladders' predicted time fits before `deadline`; one passed over joins
///    as the faster of its sketches that fit as laid out, if any.
///
/// A start whose lower bound is not below the `STARTS`-th best kept so far is set aside
/// unevaluated (not a node): in the first pass against the starts that already fit as
/// sketched (a fitted start is no slower than its sketch that fits), in the second against
/// those fitted. Its estimate could not be kept (ties go to the earlier start in the
/// ladders' order), so without limits the starts kept are those of fitting every start (up
/// to ties: `the_uniform_starts_kept_are_those_of_every_start_fitted`), and under a limit
/// the time goes to starts that can be. On `benches/speed.rs`' 64 GPUs the plans on the
/// V100s or the T4s alone are all set aside once the A100s' are known.
fn evaluate_starts(
    problem: &Problem<'_>,
    search: &mut Search<'_>,
    cands: Vec<Start<'_>>,
    deadline: Option<f64>,
    node_cap: Option<u64>,
    rebalance: bool,
) -> Vec<Seen> {
    let capped = |search: &Search<'_>| node_cap.is_some_and(|c| search.explored() >= c);
    // The STARTS-th best of `times` (sorted), below which a start's floor must be.
    let bar = |times: &[f64]| times.get(STARTS - 1).copied().unwrap_or(f64::INFINITY);
    // The same of the starts kept (best first).
    let bar_kept = |out: &[Seen]| {
        out.get(STARTS - 1)
            .map_or(f64::INFINITY, |s| s.est.iteration_time_s)
    };
    // (A NaN bar sets nothing aside.)
    let below = |floor: f64, bar: f64| floor < bar || bar.is_nan();
    let now = search.elapsed().get();
    let sketch_until = deadline.map(|d| now + SKETCH_SHARE * (d - now).max(0.0));
    // Under a node cap, the sketches (a node each) take up to the same share of what is left,
    // and at least one node where one is left.
    let sketch_cap = node_cap.map(|c| {
        let e = search.explored();
        let share = (c.saturating_sub(e) as f64 * SKETCH_SHARE) as u64;
        e + share.max(u64::from(c > e))
    });
    let sketch_capped = |search: &Search<'_>| sketch_cap.is_some_and(|c| search.explored() >= c);
    // 1. Sketches, in the order given.
    let mut sketches: Vec<(&Start<'_>, Sketch)> = Vec::new();
    // The best times of sketches that fit as they are, sorted, at most STARTS.
    let mut fitting: Vec<f64> = Vec::new();
    // How many starts the next chunk takes: under a deadline, as many waves (a start per
    // thread) as the last wave's time fits before it (`refine::chunk_size`), at most 8.
    let size = |wave: Option<f64>, until: Option<f64>, search: &Search<'_>| {
        let left = until.map(|d| d - search.elapsed().get());
        match left {
            Some(l) if l <= 0.0 => 0,
            _ => refine::chunk_size(wave, left).min(8),
        }
    };
    let mut wave: Option<f64> = None;
    let mut rest = cands.iter();
    'sketches: loop {
        let b = bar(&fitting);
        let n = size(wave, sketch_until, search);
        if n == 0 || sketch_capped(search) || !search.poll() {
            break;
        }
        // No more than the node cap leaves.
        let n = match sketch_cap {
            Some(c) => n.min(c.saturating_sub(search.explored()) as usize),
            None => n,
        };
        let chunk: Vec<&Start<'_>> = rest.by_ref().filter(|c| below(c.1, b)).take(n).collect();
        if chunk.is_empty() {
            break;
        }
        let started = search.elapsed().get();
        let sketched: Vec<Option<Sketch>> = chunk
            .par_iter()
            .map(|(_, _, build)| {
                let clock = std::time::Instant::now();
                let plan = refine::in_problem_settings(problem, build()?);
                let plan = match problem.options.runtime {
                    Some(_) => refine::conformed(problem, plan)?,
                    None => plan,
                };
                let est = common::evaluate(problem, &plan)?;
                Some(sketch_start(problem, plan, est, rebalance, clock))
            })
            .collect();
        wave = Some(refine::wave_time(
            search.elapsed().get() - started,
            chunk.len(),
        ));
        for (c, s) in chunk.into_iter().zip(sketched) {
            if sketch_capped(search) || !search.tick() {
                break 'sketches;
            }
            let Some(s) = s else { continue };
            if let Some(t) = s.fits_within() {
                search.offer(Seconds(t));
                fitting.push(t);
                fitting.sort_by(f64::total_cmp);
                fitting.truncate(STARTS);
            }
            sketches.push((c, s));
        }
        // Those the sketches that fit now set aside are dropped as they go (at thousands of
        // GPUs each holds a plan and estimates of every GPU).
        let b = bar(&fitting);
        sketches.retain(|(c, _)| below(c.1, b));
    }
    // 2. Fitted, the fastest sketch first.
    sketches.sort_by(|a, b| a.1.key().total_cmp(&b.1.key()));
    let mut out: Vec<Seen> = Vec::new();
    let threads = rayon::current_num_threads().max(1) as f64;
    let mut rest = sketches.into_iter();
    'chunks: loop {
        let b = bar_kept(&out);
        if capped(search) || !search.poll() {
            break;
        }
        // Under a deadline, the starts whose ladders' predicted time (`Sketch::ladder_s`)
        // fits in what is left, shared by the threads. Those passed over for time join with
        // the faster of their variants that fit as laid out, if any (no ladder, no estimate).
        let left = deadline.map(|d| d - search.elapsed().get());
        let mut chunk: Vec<(&Start<'_>, Sketch)> = Vec::with_capacity(8);
        let mut cost = 0.0;
        // Past the ladders' reach: this chunk is the last.
        let mut last = false;
        while chunk.len() < 8 {
            let Some(c) = rest.next() else { break };
            if !below(c.0 .1, b) {
                continue;
            }
            if let Some(l) = left {
                // The sketches come fastest first: those past the ladder's reach, and
                // all after them, are not expected to be kept.
                if c.1.key() > LADDER_REACH * b {
                    last = true;
                    break;
                }
                if (cost + c.1.ladder_s()) / threads > l {
                    if let Some((plan, est)) = c.1.into_fitting() {
                        keep(&mut out, c.0 .0.clone(), plan, est);
                    }
                    continue;
                }
                cost += c.1.ladder_s();
            }
            chunk.push(c);
        }
        if chunk.is_empty() {
            break;
        }
        let (starts, chunk): (Vec<&Start<'_>>, Vec<Sketch>) = chunk.into_iter().unzip();
        let fitted: Vec<Option<(Plan, Estimate)>> = chunk
            .into_par_iter()
            .map(|s| fit_sketch(problem, s))
            .collect();
        for ((who, _, _), e) in starts.into_iter().zip(fitted) {
            if capped(search) || !search.tick() {
                break 'chunks;
            }
            if let Some((plan, est)) = e.filter(|(_, e)| e.fits) {
                search.offer(Seconds(est.iteration_time_s));
                keep(&mut out, who.clone(), plan, est);
            }
        }
        if last {
            break;
        }
    }
    // Ended by a limit or past the ladders' reach: the sketches not fitted join as they fit
    // as laid out (nodes already, no estimate; none are left without limits).
    for (c, sketch) in rest {
        let b = bar_kept(&out);
        if below(c.1, b) {
            if let Some((plan, est)) = sketch.into_fitting() {
                keep(&mut out, c.0.clone(), plan, est);
            }
        }
    }
    out
}

/// `out` (the best starts, best first) with one more fitted start, if it is among the best
/// [`STARTS`]: only the best are kept as they come (a stable sort: ties to the earlier), not
/// every estimate of thousands of GPUs.
fn keep(out: &mut Vec<Seen>, who: String, plan: Plan, est: Estimate) {
    out.push(Seen {
        who,
        plan,
        est,
        steps: Vec::new(),
    });
    out.sort_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
    out.truncate(STARTS);
}

/// The share of the time to its deadline, and of the nodes left under its node cap, that
/// [`evaluate_starts`]' first pass (the sketches) may take; the ladders have the rest. At
/// 1,024 GPUs the sketches of all of `benches/speed.rs`' uniform layouts take about a second
/// on two cores.
const SKETCH_SHARE: f64 = 0.5;

/// Under a time limit, [`evaluate_starts`]' second pass ends at the first sketch estimated
/// more than this factor above the [`STARTS`]-th best start fitted so far (the sketches come
/// fastest first). A ladder adds recomputation, sharding and offloading; what it can make
/// faster is ZeRO-1's sharded optimizer step and overlapped parameter gather, by at most 10%
/// on `benches/speed.rs`' 1,024 GPUs (TP 1, 8 stages over every GPU: 7.51 s sketched, 6.785 s
/// fitted). There the ladders of the starts past this reach had taken 4.1 s of the uniform
/// starts' 5 s (the best three fitted by 0.92 s), and the seeds what was left. Without a time
/// limit every ladder runs.
const LADDER_REACH: f64 = 1.25;

/// Rounds of [`sketch_start`]'s split by speed at most. With six allowed, on
/// `benches/speed.rs`' fleet (`hetplan plan`, GPT-3 13B, batch 512, 10 s) a third round made a
/// start faster once in 85 starts split at 1,024 GPUs and never in 97 at 64: the first
/// round's split, read from the even split's time per layer, is nearly the min–max one, and a
/// second corrects for the embedding and the head.
const REBALANCE_ROUNDS: usize = 2;

/// A uniform start as laid out, and, where its pipeline spans more than one GPU type and
/// `rebalance` is asked, the same layout with its layers split by the stages' speeds
/// (`refine::balanced_counts`, each round from the last round's estimate, while that makes it
/// faster); [`fit_sketch`] fits both by the memory ladder (`refine::repair_both`) and keeps the
/// faster. A uniform layout splits the layers evenly, which leaves the slowest type's stages the
/// bottleneck: on `benches/speed.rs`' 64 GPUs (A100, V100 and T4 nodes) the pipeline over every
/// node was never among the local search's starts, and its 1 s answer used the A100s alone (15.4 s;
/// 13.5 s from the split start, 13.8 s before the local search). The split is made before the
/// ladder, which would otherwise fit the even split's heavy stages with offloading or recomputation
/// that the split no longer needs. A better start is not always a better end: on the quality bench
/// (docs/planners.md) `datacenter-64-40b` gained 2.3%, `workstations-30b` lost 3.2% and
/// `four-gen-56-13b` 1.2%. Plans on one type keep the even split (Megatron's layouts); splitting
/// them too would spend the uniform starts' share of a limit on extra estimates at a thousand GPUs.
fn sketch_start(
    problem: &Problem<'_>,
    plan: Plan,
    est: Estimate,
    rebalance: bool,
    clock: std::time::Instant,
) -> Sketch {
    let cluster = problem.cluster;
    let mut types =
        (plan.stages.iter()).flat_map(|st| st.devices.iter().map(|g| cluster.gpu_type_of(*g)));
    let first = types.next();
    let mixed = types.any(|t| Some(t) != first);
    // The split after each round that made the plan faster; none while none did.
    let mut split: Option<(Plan, Estimate)> = None;
    // Estimates made (the layout's own is made before).
    let mut rounds = 0;
    if rebalance && mixed {
        for _ in 0..REBALANCE_ROUNDS {
            let (p, e) = split.as_ref().map_or((&plan, &est), |(p, e)| (p, e));
            let Some(counts) = refine::balanced_counts(p, e) else {
                break;
            };
            let next = refine::apply(problem, p, &refine::Move::Rebalance { counts })
                .and_then(|p| refine::conformed(problem, p))
                .and_then(|p| {
                    let e = common::evaluate(problem, &p)?;
                    Some((p, e))
                });
            rounds += usize::from(next.is_some());
            match next {
                Some(n) if n.1.iteration_time_s < e.iteration_time_s => split = Some(n),
                _ => break,
            }
        }
    }
    let estimates = 1 + rounds;
    Sketch {
        even: (plan, est),
        split,
        estimate_s: clock.elapsed().as_secs_f64() / estimates as f64,
    }
}

/// A uniform start before the memory ladder ([`sketch_start`]): its even split and, where
/// splitting by speed made it faster, that split, each estimated as it is.
struct Sketch {
    even: (Plan, Estimate),
    split: Option<(Plan, Estimate)>,
    /// Seconds one estimate of the layout took, as measured (build and layout included):
    /// what predicts its ladders' time under a time limit, read nowhere else.
    estimate_s: f64,
}

impl Sketch {
    fn both(&self) -> impl Iterator<Item = &Estimate> {
        std::iter::once(&self.even.1).chain(self.split.as_ref().map(|s| &s.1))
    }

    /// What orders the ladders: the faster of its estimates, fitting or not.
    fn key(&self) -> f64 {
        (self.both())
            .map(|e| e.iteration_time_s)
            .fold(f64::INFINITY, f64::min)
    }

    /// The faster of its plans that fit as laid out, if any.
    fn into_fitting(self) -> Option<(Plan, Estimate)> {
        std::iter::once(self.even)
            .chain(self.split)
            .filter(|(_, e)| e.fits)
            .min_by(|a, b| a.1.iteration_time_s.total_cmp(&b.1.iteration_time_s))
    }

    /// Seconds [`fit_sketch`] may take at most: each plan that does not fit climbs two
    /// ladders of up to `refine::MAX_REPAIRS` rungs, an estimate each.
    fn ladder_s(&self) -> f64 {
        let climbing = self.both().filter(|e| !e.fits).count();
        (climbing * 2 * refine::MAX_REPAIRS) as f64 * self.estimate_s
    }

    /// The faster of its estimates that fit as they are: [`fit_sketch`] returns a plan no
    /// slower (the ladder leaves a plan that fits as it is).
    fn fits_within(&self) -> Option<f64> {
        (self.both())
            .filter(|e| e.fits)
            .map(|e| e.iteration_time_s)
            .min_by(f64::total_cmp)
    }
}

/// A sketch fitted by the memory ladder: the faster of its even split and its split by speed,
/// each fitted (`refine::repair_both`); ties to the even split.
fn fit_sketch(problem: &Problem<'_>, s: Sketch) -> Option<(Plan, Estimate)> {
    let even = refine::repair_both(problem, s.even.0, s.even.1);
    let Some((p, e)) = s.split else {
        return even;
    };
    match (even, refine::repair_both(problem, p, e)) {
        (Some(e), Some(b)) if b.1.iteration_time_s < e.1.iteration_time_s => Some(b),
        (Some(e), _) => Some(e),
        (None, b) => b,
    }
}

/// The plans hetplan may start from, best first, each once: as they are, or with `--engine`
/// made uniform for that engine and fitted by the memory ladder (`refine::conformed`,
/// `refine::repair`); those that cannot run there or fit are dropped. Those the engine runs
/// as they are come first, and past `deadline` (seconds into `search`) no further plan is
/// made to run there, but the first always is: at 1,024 GPUs fitting every plan seen to each
/// of four engines took the search 0.1–0.8 s past its limit.
fn admit(
    problem: &Problem<'_>,
    seen: &[Seen],
    search: &Search<'_>,
    deadline: Option<f64>,
) -> Vec<Seen> {
    // Those the engine runs as they are first: under a deadline they are the likeliest to fit.
    let mut order: Vec<&Seen> = seen.iter().collect();
    if let Some(rt) = problem.options.runtime {
        order.sort_by_key(|s| !rt.why_not(&s.plan).is_empty());
    }
    let mut out: Vec<Seen> = Vec::new();
    for (i, s) in order.into_iter().enumerate() {
        if i > 0
            && problem.options.runtime.is_some()
            && deadline.is_some_and(|d| search.elapsed().get() >= d)
        {
            break;
        }
        let admitted = match problem.options.runtime {
            None => Some(s.clone()),
            Some(rt) => refine::conformed(problem, s.plan.clone())
                .and_then(|p| {
                    let e = common::evaluate(problem, &p)?;
                    refine::repair(problem, p, e)
                })
                .map(|(plan, est)| Seen {
                    who: if plan == s.plan {
                        s.who.clone()
                    } else {
                        format!("{}, made to run on {}", s.who, rt.name())
                    },
                    plan,
                    est,
                    steps: s.steps.clone(),
                }),
        };
        if let Some(a) = admitted.filter(|a| a.est.fits) {
            if !out.iter().any(|o| o.plan == a.plan) {
                out.push(a);
            }
        }
    }
    out.sort_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
    out
}

/// The candidates a local search starts from: the best [`STARTS`], then the best of every
/// other family of starts (a seed's answer, uniform plans with context parallelism, on one GPU
/// type, on every GPU) within [`DIVERSE_WITHIN`] of the best, up to `STARTS` more. The best
/// start is not always the best end: a layout the seeds do not reach (TP 8 with a pipeline
/// where they found context parallelism) can start 15% behind and finish ahead.
fn diverse_starts(cands: &[Seen]) -> Vec<Seen> {
    let family = |s: &Seen| s.who.split(" (").next().unwrap_or("").to_string();
    let mut out: Vec<Seen> = cands.iter().take(STARTS).cloned().collect();
    let Some(best) = cands.first().map(|c| c.est.iteration_time_s) else {
        return out;
    };
    for c in cands.iter().skip(STARTS) {
        if out.len() >= 2 * STARTS || c.est.iteration_time_s > DIVERSE_WITHIN * best {
            break;
        }
        if !out.iter().any(|o| family(o) == family(c)) {
            out.push(c.clone());
        }
    }
    out
}

/// How far behind the best start another family's best may start and still be refined.
const DIVERSE_WITHIN: f64 = 1.25;

/// hetplan's local search from [`diverse_starts`] of `cands` in turn: of the best `STARTS`
/// start k with `1/(n − k)` of the time (until `until`) and nodes left, the others after them
/// with what is left.
fn refine_from(
    problem: &Problem<'_>,
    cands: &[Seen],
    search: &mut Search<'_>,
    until: Option<f64>,
    nodes: Option<u64>,
    stop: &mut StopReason,
) -> Vec<Seen> {
    let starts = diverse_starts(cands);
    // The best `STARTS` share the time and nodes as if alone; the other families' starts run
    // on what those leave (a local optimum reached early, or no limit).
    let main = cands.len().min(STARTS);
    let mut out = Vec::new();
    for (k, s) in starts.iter().enumerate() {
        let left = if k < main { main - k } else { starts.len() - k } as f64;
        let now = search.elapsed().get();
        let mine = until.map(|u| now + (u - now).max(0.0) / left);
        let my_nodes = nodes.map(|m| (m.saturating_sub(search.explored()) as f64 / left) as u64);
        let run = run_sub(search.clock(), search.progress(), mine, my_nodes, |sub| {
            refine::refine(problem, s.plan.clone(), s.est.clone(), sub)
        });
        match run {
            Ok((r, explored, stopped)) => {
                search.add_explored(explored);
                if stopped != StopReason::Exhausted && *stop == StopReason::Exhausted {
                    *stop = stopped;
                }
                search.offer(Seconds(r.estimate.iteration_time_s));
                let mut before = s.est.iteration_time_s;
                let mut steps = s.steps.clone();
                for (m, after) in r.steps {
                    steps.push((m, (before, after)));
                    before = after;
                }
                out.push(Seen {
                    who: s.who.clone(),
                    plan: r.plan,
                    est: r.estimate,
                    steps,
                });
            }
            Err(why) => {
                if *stop == StopReason::Exhausted {
                    *stop = why;
                }
            }
        }
    }
    out
}

/// When every start of [`refine_from`] reached a local optimum before the limits: the other
/// candidates as starts too (the seeds' answers, at most `STARTS` of their other plans, and at
/// most `STARTS` uniform and as many context-parallel starts: tens of plans), in rank order, `STARTS` at a time, each batch on
/// half of the time (until `until`) and nodes left then — the best start is not always the
/// best end, and what the batches leave goes to the engines' searches. Stops after the first
/// batch its share cuts short; that share is not the search's limit, so the planner's
/// `StopReason` does not change.
fn refine_more(
    problem: &Problem<'_>,
    cands: &[Seen],
    search: &mut Search<'_>,
    until: Option<f64>,
    nodes: Option<u64>,
) -> Vec<Seen> {
    let first = diverse_starts(cands);
    let rest: Vec<Seen> = (cands.iter())
        .filter(|c| !first.iter().any(|f| f.plan == c.plan))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for batch in rest.chunks(STARTS) {
        let now = search.elapsed().get();
        let mine = until.map(|u| now + (u - now).max(0.0) / 2.0);
        let my_nodes = nodes.map(|m| {
            let e = search.explored();
            e + m.saturating_sub(e) / 2
        });
        let mut stop = StopReason::Exhausted;
        out.extend(refine_from(
            problem, batch, search, mine, my_nodes, &mut stop,
        ));
        if stop != StopReason::Exhausted {
            break;
        }
    }
    out
}

/// The best plan each mainstream engine runs: every plan seen made to run there
/// (`admit`) and the uniform layouts it runs ([`uniform_starts`] for the engine, on
/// [`UNIFORM_SHARE_OF_ENGINE`] of what is left of its time), the best refined by hetplan's
/// search restricted to the engine, engine k of n with `1/(n − k)` of the time left; and the
/// fastest of them where it beats `chosen`. `seen`: the plans refined, then the starts.
fn engines(
    problem: &Problem<'_>,
    bound: &bound::Bound,
    chosen: &Seen,
    seen: Vec<Seen>,
    search: &mut Search<'_>,
    time: Option<f64>,
    stop: &mut StopReason,
) -> (Vec<EngineBest>, Option<Seen>) {
    let n = Runtime::ALL.len();
    let mut out = Vec::new();
    let mut faster: Option<Seen> = None;
    for (k, rt) in Runtime::ALL.into_iter().enumerate() {
        let p = Problem {
            options: PlanOptions {
                runtime: Some(rt),
                engine: rt.engine(),
                // How the problem's plans run PyTorch's code: compiled, for another engine.
                compile: problem.options.compile_of(),
                ..problem.options
            },
            ..*problem
        };
        let left = (n - k) as f64;
        let now = search.elapsed().get();
        let until = time.map(|t| now + (t - now).max(0.0) / left);
        let nodes = search
            .limits
            .max_nodes
            .map(|m| (m.saturating_sub(search.explored()) as f64 / left) as u64);
        // The plans seen, made to run there, and the uniform layouts the engine runs, as
        // `--engine` starts from them: the best plan of an engine with a narrow space (FSDP
        // alone, torchtitan's one layout for every stage) is often one that the search for
        // any engine dropped as slower (a type's GPUs alone, others idle).
        let before = search.explored();
        let admitted = admit(&p, &seen, search, until);
        let now = search.elapsed().get();
        let uniform_until = until.map(|u| now + UNIFORM_SHARE_OF_ENGINE * (u - now).max(0.0));
        let cap = nodes.map(|m| search.explored() + (m as f64 * UNIFORM_SHARE_OF_ENGINE) as u64);
        let uniform: Vec<Seen> = uniform_starts(&p, search, uniform_until, cap, bound)
            .into_iter()
            .filter(|u| !admitted.iter().any(|a| a.plan == u.plan))
            .collect();
        // The local search starts from the best of each (a made-to-run plan that starts behind
        // a uniform one may end ahead of it).
        let mut starts: Vec<Seen> = (admitted.first().into_iter())
            .chain(uniform.first())
            .cloned()
            .collect();
        starts.sort_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
        // `refine_from` takes an absolute cap on the nodes explored, the engine's budget on
        // from here.
        let cap = nodes.map(|m| search.explored() + m.saturating_sub(search.explored() - before));
        let best = refine_from(&p, &starts, search, until, cap, stop)
            .into_iter()
            .chain(starts.first().cloned())
            .min_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
        let to_beat = faster.as_ref().unwrap_or(chosen).est.iteration_time_s;
        if let Some(b) = best.as_ref().filter(|b| b.est.iteration_time_s < to_beat) {
            faster = Some(Seen {
                who: format!("{} (the best plan found for {})", b.who, rt.name()),
                ..b.clone()
            });
        }
        out.push(match best {
            Some(b) => EngineBest {
                engine: rt,
                slower: b.est.iteration_time_s / chosen.est.iteration_time_s,
                estimate_s: Some(b.est.iteration_time_s),
                plan: Some(b.plan),
                why_none: None,
            },
            None => EngineBest {
                engine: rt,
                plan: None,
                estimate_s: None,
                slower: f64::INFINITY,
                why_none: Some(why_none(
                    &p,
                    (seen.iter())
                        .min_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s)),
                )),
            },
        });
    }
    (out, faster)
}

/// Why an engine (`problem.options.runtime`) got no plan: what it cannot run whatever the
/// layout (the model, the precision), else what keeps the best plan seen from it.
fn why_none(problem: &Problem<'_>, best: Option<&Seen>) -> String {
    let refusals = refine::engine_refusals(problem);
    if !refusals.is_empty() {
        return format!("it cannot run this problem: {}", refusals.join("; "));
    }
    match best.map(|s| refine::engine_reasons(problem, &s.plan)) {
        Some(why) if !why.is_empty() => format!(
            "no plan seen can be made to run on it and fit, nor a uniform layout that it runs; \
             the best plan's reasons: {}",
            why.join("; ")
        ),
        _ => "no plan seen can be made to run on it and fit in memory, nor a uniform layout \
              that it runs"
            .into(),
    }
}

/// The share of an engine's time (and nodes) that its uniform layouts may take in
/// [`engines`]; its local search keeps the rest. At 48 GPUs all of them take milliseconds; at
/// a thousand GPUs and more the deadline may end them early (they are sketched in the order
/// of [`uniform_starts`], shallow pipelines first, the GPU sets by their bound, and fitted
/// fastest sketch first: [`evaluate_starts`]).
const UNIFORM_SHARE_OF_ENGINE: f64 = 0.5;

/// The best candidates checked by the simulator (the answer and the next `SIMULATED - 1`).
const SIMULATED: usize = 3;

/// Larger task graphs are not simulated here (a bound on the check's time and memory).
const SIM_MAX_TASKS: u64 = 200_000;

/// Seconds one simulation takes per task of its plan: a 127,872-task plan (`benches/speed.rs`'
/// 1,024-GPU answer, 8 stages of 8 TP-8 replicas, 256 micro-batches) built and simulated in
/// 0.41 s on the 2-core VM (`hetplan simulate`), 3.2 µs a task.
const SIM_SECONDS_PER_TASK: f64 = 3.2e-6;

/// The share of the time left that the check may take (the notes after it estimate plans too).
const SIM_SHARE_OF_LEFT: f64 = 0.5;

/// Estimate and simulation parting by more than this fraction are reported.
const SIM_DISAGREES: f64 = 0.05;

/// How the note begins that says the planner's simulator check left the answer out (its task
/// graph too large for the time left): a caller that simulates the answer itself drops it.
pub const UNSIMULATED_NOTE: &str = "the simulator did not check the answer";

/// A candidate's estimate (seconds) beside its simulation: the simulated seconds, or whether
/// the time left was too short for its task graph (`true`) or it could not be simulated
/// (`false`).
type Checked = (f64, Result<f64, bool>);

/// Estimates within this fraction of the best are a tie, which the simulator breaks among the
/// candidates it checks (`SIMULATED`): the plan it runs fastest, when by more than the same
/// fraction, is the answer. The estimate prices contention on shared links by averages the
/// simulator follows transfer by transfer; over the quality suite's 112 answers the two differ
/// by 0.5–0.6% in median (docs/planners.md), so a difference of estimates below that is not one
/// the estimate can rank. (`l4-t4-edge-7b`: the first two plans of the ranking, hetplan's and
/// Metis's, estimated 46.125 and 46.179 s, simulated 48.03 and 46.12 s.) The answer's
/// estimate may then be up to this fraction above another plan's, a seed's included.
pub const SIMULATOR_BREAKS_TIES_WITHIN: f64 = 0.005;

/// Which of the checked candidates (estimate, simulation) the simulator makes the answer in
/// place of the first (see [`SIMULATOR_BREAKS_TIES_WITHIN`]): the fastest simulated of those
/// estimated within the tie, if it beats the first's simulation by more than the tie.
fn tie_broken(checked: &[Checked]) -> Option<usize> {
    let b = SIMULATOR_BREAKS_TIES_WITHIN;
    let &(e0, Ok(s0)) = checked.first()? else {
        return None;
    };
    (checked.iter().enumerate().skip(1))
        .filter_map(|(i, &(e, s))| Some((i, e, s.ok()?)))
        .filter(|&(_, e, s)| e <= e0 * (1.0 + b) && s < s0 * (1.0 - b))
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(i, _, _)| i)
}

/// The first `SIMULATED` of the best candidates (the answer first) run through the simulator,
/// in parallel, results in order: each one's estimate beside its simulated time, or whether
/// the time left was too short for its task graph (`true`) or it could not be simulated
/// (`false`); and the largest task graph the check allowed. With `left` seconds of a time limit, only task graphs the check can run in
/// `SIM_SHARE_OF_LEFT` of that time, its simulations in rounds of as many as there are threads
/// (`SIM_SECONDS_PER_TASK`).
fn simulate_candidates<'s>(
    problem: &Problem<'_>,
    best: impl Iterator<Item = &'s Seen>,
    left: Option<f64>,
) -> (Vec<Checked>, u64) {
    let best: Vec<&Seen> = best.take(SIMULATED).collect();
    use rayon::prelude::*;
    let w = common::workload(problem);
    let rounds = SIMULATED.div_ceil(rayon::current_num_threads().max(1)) as f64;
    let max_tasks = left.map_or(SIM_MAX_TASKS, |s| {
        SIM_MAX_TASKS.min((SIM_SHARE_OF_LEFT * s / (SIM_SECONDS_PER_TASK * rounds)) as u64)
    });
    let opts = crate::sim::SimOptions {
        max_tasks,
        ..Default::default()
    };
    let runs = best
        .par_iter()
        .map(|s| {
            let v = crate::plan::ValidPlan::check(&s.plan, problem.model, problem.cluster)
                .map_err(|_| false)?;
            match crate::sim::simulate(w, &v, problem.compute, &opts) {
                Ok(s) => Ok(s.iteration_time_s),
                // Too large for the time left, or for the check at all.
                Err(crate::sim::SimError::TooLarge { tasks, .. }) => Err(tasks <= SIM_MAX_TASKS),
                Err(_) => Err(false),
            }
        })
        .collect::<Vec<_>>();
    let checked = (best.iter().zip(runs))
        .map(|(s, r)| (s.est.iteration_time_s, r))
        .collect();
    (checked, max_tasks)
}

/// What the simulator's check of the best candidates says ((estimate, simulation), the answer
/// first): a note when estimate and simulation part by more than `SIM_DISAGREES` on any of
/// them, when the simulator would rank another of them first, and when the answer's task
/// graph was too large for the time left.
fn simulation_notes(checked: &[Checked], max_tasks: u64, left: Option<f64>) -> Vec<String> {
    let sims: Vec<Option<f64>> = checked.iter().map(|(_, r)| r.ok()).collect();
    let parts: Vec<String> = (checked.iter().zip(&sims).enumerate())
        .filter_map(|(i, ((est, _), sim))| {
            let sim = (*sim)?;
            let off = (sim - est) / est;
            (off.abs() > SIM_DISAGREES).then(|| {
                format!(
                    "{} {} estimated, {} simulated ({:+.1}%)",
                    if i == 0 {
                        "the answer".to_string()
                    } else {
                        format!("plan #{}", i + 1)
                    },
                    Seconds(*est),
                    Seconds(sim),
                    off * 100.0
                )
            })
        })
        .collect();
    let mut notes = Vec::new();
    if checked.first().map(|c| c.1) == Some(Err(true)) {
        notes.push(format!(
            "{UNSIMULATED_NOTE}: its task graph is larger than the {} tasks it could simulate \
             in the {} left of the time limit (`hetplan simulate` runs it)",
            max_tasks,
            Seconds(left.unwrap_or(0.0))
        ));
    }
    if !parts.is_empty() {
        notes.push(format!(
            "the simulator parts from the estimate on the best candidates: {}",
            parts.join("; ")
        ));
    }
    if let Some(Some(first)) = sims.first() {
        let faster = (sims.iter().enumerate().skip(1))
            .filter_map(|(i, s)| s.map(|s| (i, s)))
            .filter(|&(_, s)| s < first * (1.0 - 1e-9))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((i, s)) = faster {
            notes.push(format!(
                "the simulator runs plan #{} of the ranking ({}) faster than the answer ({}); \
                 hetplan ranks by its estimate",
                i + 1,
                Seconds(s),
                Seconds(*first)
            ));
        }
    }
    notes
}

/// A stage's memory options in words (ZeRO, checkpointing, offloading); empty when none.
fn memory_words(st: &crate::plan::Stage) -> Vec<String> {
    let mut out = Vec::new();
    if st.zero > 0 {
        out.push(format!("ZeRO-{}", st.zero));
    }
    if st.recompute != Recompute::None {
        out.push(refine::recompute_words(st.recompute));
    }
    let o = st.offload;
    for (what, r) in [
        ("weights", o.weights),
        ("gradients", o.gradients),
        ("optimizer state", o.optimizer),
        ("activations", o.activations),
    ] {
        if r > 0.0 {
            out.push(format!("{:.0}% of its {what} offloaded", r * 100.0));
        }
    }
    out
}

/// What each stage's memory options buy: the plan with one stage's ZeRO, checkpointing and
/// offloading turned off, estimated — slower, faster or out of memory.
fn memory_options(problem: &Problem<'_>, plan: &Plan, est: &Estimate) -> Vec<String> {
    let mut lines = Vec::new();
    for (s, st) in plan.stages.iter().enumerate() {
        if st.zero == 0 && st.recompute == Recompute::None && st.offload.is_none() {
            continue;
        }
        let mut without = plan.clone();
        let w = &mut without.stages[s];
        (w.zero, w.recompute, w.offload) = (0, Recompute::None, Default::default());
        let Some(e) = common::evaluate(problem, &without) else {
            continue;
        };
        let peak = |e: &Estimate| {
            e.per_gpu
                .iter()
                .map(|g| g.peak_memory_bytes / g.capacity_bytes)
                .fold(0.0, f64::max)
        };
        let change = est.iteration_time_s / e.iteration_time_s - 1.0;
        lines.push(if e.fits {
            format!(
                "stage {s}'s memory options ({}) make the iteration {:.1}% {}: without them it \
                 would fit and take {}",
                memory_words(st).join(", "),
                change.abs() * 100.0,
                if change > 0.0 { "slower" } else { "faster" },
                Seconds(e.iteration_time_s)
            )
        } else {
            format!(
                "stage {s} needs its memory options ({}): without them its fullest GPU would \
                 need {:.0}% of its memory",
                memory_words(st).join(", "),
                peak(&e) * 100.0
            )
        });
    }
    lines
}

/// What expert parallelism buys: the plan without it (every replica holding every expert),
/// estimated — slower, faster or out of memory.
fn expert_parallelism(problem: &Problem<'_>, plan: &Plan, est: &Estimate) -> Vec<String> {
    let eps: Vec<String> = (plan.stages.iter().enumerate())
        .filter(|(_, s)| s.ep > 1)
        .map(|(i, s)| format!("{} on stage {i}", s.ep))
        .collect();
    if eps.is_empty() {
        return Vec::new();
    }
    let mut without = plan.clone();
    without.stages.iter_mut().for_each(|s| s.ep = 1);
    let Some(e) = common::evaluate(problem, &without) else {
        return Vec::new();
    };
    let what = format!(
        "expert parallelism ({}) splits the experts' weights and optimizer states over the \
         replicas, for an all-to-all at every MoE layer",
        eps.join(", ")
    );
    vec![if e.fits {
        let change = est.iteration_time_s / e.iteration_time_s - 1.0;
        format!(
            "{what}: the iteration is {:.1}% {} than without it ({})",
            change.abs() * 100.0,
            if change > 0.0 { "slower" } else { "faster" },
            Seconds(e.iteration_time_s)
        )
    } else {
        format!("{what}: without it the plan would not fit in memory")
    }]
}

/// What context parallelism buys: the plan against the same plan with whole sequences on every
/// replica (the same replicas, cp times fewer micro-batches of cp times the samples).
fn context_parallelism(problem: &Problem<'_>, plan: &Plan, est: &Estimate) -> Vec<String> {
    let cp = plan.stages.first().map_or(1, |s| s.cp);
    if cp <= 1 {
        return Vec::new();
    }
    let what = format!(
        "context parallelism {cp} splits each sequence of {} tokens over {cp} GPUs ({} each), \
         which pass their keys and values around a ring while attention runs",
        problem.seq_len,
        problem.seq_len / cp as u64
    );
    let mut without = plan.clone();
    without.stages.iter_mut().for_each(|s| s.cp = 1);
    let e = (plan.micro_batches.is_multiple_of(cp as u64))
        .then(|| {
            without.micro_batches /= cp as u64;
            common::evaluate(problem, &without)
        })
        .flatten();
    vec![match e {
        Some(e) if e.fits => {
            let change = est.iteration_time_s / e.iteration_time_s - 1.0;
            format!(
                "{what}: the iteration is {:.1}% {} than with whole sequences on each replica \
                 ({})",
                change.abs() * 100.0,
                if change > 0.0 { "slower" } else { "faster" },
                Seconds(e.iteration_time_s)
            )
        }
        Some(_) => format!("{what}: with whole sequences the plan would not fit in memory"),
        None => what,
    }]
}

/// What `torch.compile` would buy a plan whose PyTorch code runs (partly) eagerly
/// (`Plan::compile` `off` or `blocks`): the same plan compiled whole, its time and its peak
/// memory. Nothing for a compiled plan.
fn compilation(problem: &Problem<'_>, plan: &Plan, est: &Estimate) -> Vec<String> {
    if plan.compile.is_on() {
        return Vec::new();
    }
    let mut compiled = plan.clone();
    compiled.compile = crate::plan::Compile::On;
    let Some(e) = common::evaluate(problem, &compiled) else {
        return Vec::new();
    };
    let what = match plan.compile {
        crate::plan::Compile::Off => {
            "the model's PyTorch code runs eagerly (compile off: norms, rotary embeddings and \
             activations kernel by kernel, the loss keeping FP32 copies of the logits)"
        }
        _ => "the loss runs eagerly (compile blocks: it keeps FP32 copies of the logits)",
    };
    let gib = |b: f64| b / (1u64 << 30) as f64;
    // The loss's time does not depend on compilation (cost-model §2): only eager blocks'.
    let faster = 1.0 - e.iteration_time_s / est.iteration_time_s;
    let time = if faster > 5e-4 {
        format!(
            "take {} ({:.1}% faster)",
            Seconds(e.iteration_time_s),
            faster * 100.0
        )
    } else {
        "take as long".to_string()
    };
    vec![format!(
        "{what}; compiled whole (torchtitan's compile.enable with the model and the loss) the \
         same plan would {time} and peak at {:.1} GiB per GPU instead of {:.1}",
        gib(e.peak_memory_bytes),
        gib(est.peak_memory_bytes)
    )]
}

/// Which GPUs get which layers: per GPU type, the stages on it with their layers, parallelism
/// and memory options, and how many of its GPUs the plan uses.
fn explain(problem: &Problem<'_>, plan: &crate::plan::Plan) -> Vec<String> {
    let cluster = problem.cluster;
    let mut lines = Vec::new();
    for (t, spec) in cluster.gpu_types.iter().enumerate() {
        let total: u32 = (cluster.nodes.iter())
            .filter(|n| n.gpu_type.0 == t)
            .map(|n| n.num_gpus)
            .sum();
        if total == 0 {
            continue;
        }
        let on_type = |g: &crate::cluster::GpuId| cluster.gpu_type_of(*g).0 == t;
        let used = plan.devices().iter().filter(|g| on_type(g)).count();
        let stages: Vec<String> = (plan.stages.iter().enumerate())
            .filter(|(_, st)| st.devices.iter().any(on_type))
            .map(|(i, st)| {
                let options = memory_words(st);
                let groups = match (st.ep > 1, st.cp > 1) {
                    (false, false) => String::new(),
                    (true, false) => format!(", ep {}", st.ep),
                    (false, true) => format!(", cp {}", st.cp),
                    (true, true) => format!(", ep {}, cp {}", st.ep, st.cp),
                };
                format!(
                    "stage {i} (layers {}-{}, dp {} × tp {}{groups}{})",
                    st.layers.start,
                    st.layers.end.saturating_sub(1),
                    st.dp,
                    st.tp,
                    if options.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", options.join(", "))
                    }
                )
            })
            .collect();
        lines.push(if stages.is_empty() {
            format!("{}: none of its {total} GPUs is used", spec.name)
        } else {
            format!(
                "{}: {used} of {total} GPUs, {}",
                spec.name,
                stages.join("; ")
            )
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::spec::catalog_cluster;
    use crate::cost::Analytic;
    use crate::model::catalog::catalog_model;
    use crate::{Cluster, Model};

    /// Layouts of `one_node`'s four GPUs that fit, each estimated differently.
    const LAYOUTS: [&str; 7] = [
        "tp=1,pp=1,dp=4,mbs=2,gbs=8",
        "tp=2,pp=1,dp=2,mbs=2,gbs=8",
        "tp=1,pp=2,dp=2,mbs=1,gbs=8",
        "tp=4,pp=1,dp=1,mbs=1,gbs=8",
        "tp=1,pp=4,dp=1,mbs=1,gbs=8",
        "tp=2,pp=2,dp=1,mbs=1,gbs=8",
        "tp=1,pp=1,dp=4,mbs=1,gbs=8",
    ];

    /// GPT-3 1.3B on one node of four A100s, global batch 8.
    fn one_node() -> (Model, Cluster) {
        let model = catalog_model("gpt3-1.3b").unwrap();
        (model, catalog_cluster("1x4xa100-sxm4-80gb").unwrap())
    }

    fn problem<'a>(model: &'a Model, cluster: &'a Cluster) -> Problem<'a> {
        Problem {
            model,
            cluster,
            global_batch: 8,
            seq_len: 1024,
            compute: &Analytic,
            options: PlanOptions::default(),
        }
    }

    /// `refine_more` searches on from the candidates `refine_from`'s starts left, each once,
    /// and from none of those starts again; each end is at least as fast as its start.
    #[test]
    fn further_starts_are_the_ones_the_first_left() {
        let (model, cluster) = one_node();
        let problem = problem(&model, &cluster);
        let specs = &LAYOUTS[..5];
        let mut cands: Vec<Seen> = (specs.iter().enumerate())
            .map(|(k, spec)| {
                let plan = crate::plan::inline::parse_inline_plan(spec, &model, &cluster).unwrap();
                let est = common::evaluate(&problem, &plan).unwrap();
                // One family ("a test"): `diverse_starts` takes the best `STARTS` alone.
                Seen {
                    who: format!("a test ({k})"),
                    plan,
                    est,
                    steps: Vec::new(),
                }
            })
            .collect();
        cands.sort_by(|a, b| a.est.iteration_time_s.total_cmp(&b.est.iteration_time_s));
        let limits = Limits {
            max_nodes: None,
            time: None,
        };
        let mut search = Search::new(limits, &super::super::NoClock, &super::super::NoProgress);
        let more = refine_more(&problem, &cands, &mut search, None, None);
        let rest = &cands[STARTS..];
        assert_eq!(more.len(), rest.len());
        for (end, start) in more.iter().zip(rest) {
            assert_eq!(end.who, start.who);
            assert!(end.est.iteration_time_s <= start.est.iteration_time_s);
        }
        assert!(search.explored() > 0);
    }

    /// A seed's other plans join the starts while hetplan's estimate ranks them among the
    /// best `STARTS` distinct starts (those that joined counted), best first, at most
    /// `STARTS`, only those that fit and are not already a start, each a node of the search.
    #[test]
    fn a_seeds_runners_up_join_the_starts_by_the_estimate() {
        let (model, cluster) = one_node();
        let problem = problem(&model, &cluster);
        let specs = LAYOUTS;
        let mut plans: Vec<(Plan, Estimate)> = (specs.iter())
            .map(|s| {
                let p = crate::plan::inline::parse_inline_plan(s, &model, &cluster).unwrap();
                let e = common::evaluate(&problem, &p).unwrap();
                assert!(e.fits, "{s}");
                (p, e)
            })
            .collect();
        // r[0] the fastest by the estimate, r[6] the slowest.
        plans.sort_by(|a, b| a.1.iteration_time_s.total_cmp(&b.1.iteration_time_s));
        let distinct = plans
            .windows(2)
            .all(|w| w[0].1.iteration_time_s < w[1].1.iteration_time_s);
        assert!(distinct, "the test needs seven different estimates");
        // A seed's answer and its ranked list, each with hetplan's estimate beside it.
        let outcome = |answer: usize, at: &[(usize, bool)]| Outcome {
            plan: plans[answer].0.clone(),
            estimate: plans[answer].1.clone(),
            explored: 1,
            stop_reason: StopReason::Exhausted,
            ranked: (at.iter())
                .map(|&(i, fits)| Ranked {
                    plan: plans[i].0.clone(),
                    planner_cost_s: plans[i].1.iteration_time_s,
                    estimate_s: plans[i].1.iteration_time_s,
                    fits,
                })
                .collect(),
            notes: Vec::new(),
            per_engine: Vec::new(),
        };
        let run = |answers: &[(&'static str, Outcome)], max_nodes: Option<u64>| {
            let limits = Limits {
                max_nodes,
                time: None,
            };
            let mut search = Search::new(limits, &super::super::NoClock, &super::super::NoProgress);
            let got = runners_up(&problem, answers, &[], &mut search, None);
            let whos: Vec<String> = got.iter().map(|s| s.who.clone()).collect();
            (whos, search.explored())
        };
        // One answer, the third fastest plan: its faster runner-up joins, and the next two
        // while they are among the three best starts; the fastest does not fit (by its seed).
        let mist = outcome(2, &[(2, true), (0, false), (1, true), (3, true), (4, true)]);
        let (whos, explored) = run(&[("mist", mist)], None);
        assert_eq!(
            whos,
            [
                "mist (plan 3 of the 5 it ranked)",
                "mist (plan 4 of the 5 it ranked)"
            ]
        );
        assert_eq!(explored, 2);
        // Three distinct answers (two seeds answered the same plan, a third the fastest):
        // Mist's runner-up that is that answer is not tried again, and the next ones join
        // while they are among the three best starts.
        let mist = outcome(
            4,
            &[
                (4, true),
                (6, true),
                (0, true),
                (1, true),
                (2, true),
                (3, true),
            ],
        );
        let answers = [
            ("metis", outcome(6, &[])),
            ("amp", outcome(6, &[])),
            ("poplar", outcome(0, &[])),
            ("mist", mist),
        ];
        let (whos, explored) = run(&answers, None);
        assert_eq!(
            whos,
            [
                "mist (plan 4 of the 6 it ranked)",
                "mist (plan 5 of the 6 it ranked)"
            ]
        );
        assert_eq!(explored, 2);
        // Under a node limit each is a node: one node, one runner-up.
        let (whos, _) = run(&answers, Some(1));
        assert_eq!(whos, ["mist (plan 4 of the 6 it ranked)"]);
    }

    /// Estimates within the tie go to the simulator, and nothing else does.
    #[test]
    fn the_simulator_breaks_only_ties_of_the_estimate() {
        let b = SIMULATOR_BREAKS_TIES_WITHIN;
        // `l4-t4-edge-7b`: hetplan's plan and Metis's, the third far behind by the estimate.
        let l4 = [(46.125, Ok(48.03)), (46.13, Ok(46.12)), (47.0, Ok(40.0))];
        assert_eq!(tie_broken(&l4), Some(1));
        // An estimate beyond the tie, a simulation ahead by less than it, an answer the
        // simulator did not check: the estimate's ranking stands.
        assert_eq!(
            tie_broken(&[(10.0, Ok(11.0)), (10.0 * (1.0 + 2.0 * b), Ok(9.0))]),
            None
        );
        assert_eq!(
            tie_broken(&[(10.0, Ok(10.0)), (10.0, Ok(10.0 * (1.0 - b / 2.0)))]),
            None
        );
        assert_eq!(tie_broken(&[(10.0, Err(true)), (10.0, Ok(5.0))]), None);
        assert_eq!(tie_broken(&[(10.0, Ok(10.0)), (10.0, Err(false))]), None);
        // Of several tied, the fastest simulated.
        let three = [(10.0, Ok(12.0)), (10.01, Ok(11.0)), (10.02, Ok(10.5))];
        assert_eq!(tie_broken(&three), Some(2));
    }

    /// The simulator's check of the best candidates fits the time left: with none left it
    /// simulates nothing and says so; without a time limit it simulates the answer (which
    /// here agrees with its estimate, so no note at all).
    #[test]
    fn the_simulator_check_fits_the_time_left() {
        let (model, cluster) = one_node();
        let problem = problem(&model, &cluster);
        let plan =
            crate::plan::inline::parse_inline_plan("tp=1,pp=2,dp=2,mbs=1,gbs=8", &model, &cluster)
                .unwrap();
        let est = common::evaluate(&problem, &plan).unwrap();
        let seen = Seen {
            who: "a test".into(),
            plan,
            est,
            steps: Vec::new(),
        };
        let simulated = |left| {
            let (checked, max_tasks) = simulate_candidates(&problem, std::iter::once(&seen), left);
            simulation_notes(&checked, max_tasks, left)
        };
        let none_left = simulated(Some(0.0));
        assert_eq!(none_left.len(), 1, "{none_left:?}");
        assert!(none_left[0].starts_with(UNSIMULATED_NOTE), "{none_left:?}");
        // The plan simulates, within 5% of its estimate: no note without a time limit or
        // with plenty of time.
        let v = crate::plan::ValidPlan::check(&seen.plan, &model, &cluster).unwrap();
        let sim = crate::sim::simulate(
            common::workload(&problem),
            &v,
            &Analytic,
            &Default::default(),
        )
        .unwrap();
        let off = sim.iteration_time_s / seen.est.iteration_time_s - 1.0;
        assert!(off.abs() <= SIM_DISAGREES, "{off}");
        assert!(simulated(None).is_empty());
        assert!(simulated(Some(60.0)).is_empty());
    }

    /// Without limits, `evaluate_starts`' two passes (sketches, then ladders fastest sketch
    /// first) and its set-aside keep the starts that fitting every start and keeping the
    /// best `STARTS` keeps, on starts whose ladders climb (T4s too small for the even split)
    /// and with valid floors high enough to set some aside unbuilt.
    #[test]
    fn the_uniform_starts_kept_are_those_of_every_start_fitted() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let model = catalog_model("gpt3-2.7b").unwrap();
        let cluster = catalog_cluster("1x4xa100-sxm4-80gb+1x4xt4@100Gbps").unwrap();
        let problem = Problem {
            global_batch: 16,
            seq_len: 2048,
            ..problem(&model, &cluster)
        };
        let specs = [
            "tp=1,pp=1,dp=8,mbs=1,gbs=16",
            "tp=2,pp=1,dp=4,mbs=2,gbs=16",
            "tp=1,pp=2,dp=4,mbs=1,gbs=16",
            "tp=2,pp=2,dp=2,mbs=1,gbs=16",
            "tp=4,pp=2,dp=1,mbs=2,gbs=16",
            "tp=1,pp=4,dp=2,mbs=1,gbs=16",
            "tp=2,pp=4,dp=1,mbs=1,gbs=16",
            "tp=1,pp=8,dp=1,mbs=1,gbs=16",
            "tp=1,pp=2,dp=4,mbs=2,gbs=16",
            "tp=4,pp=1,dp=2,mbs=1,gbs=16",
        ];
        let layout = |spec: &str| {
            let plan = crate::plan::inline::parse_inline_plan(spec, &model, &cluster).unwrap();
            refine::in_problem_settings(&problem, plan)
        };
        // The oracle: every start sketched and fitted, the fastest STARTS that fit (ties to
        // the earlier).
        let fitted: Vec<Option<(Plan, Estimate)>> = (specs.iter())
            .map(|spec| {
                let plan = layout(spec);
                let est = common::evaluate(&problem, &plan)?;
                let clock = std::time::Instant::now();
                fit_sketch(&problem, sketch_start(&problem, plan, est, true, clock))
                    .filter(|(_, e)| e.fits)
            })
            .collect();
        let climbs = (specs.iter())
            .filter(|spec| !common::evaluate(&problem, &layout(spec)).unwrap().fits)
            .count();
        assert!(climbs >= 2, "only {climbs} starts need the ladder");
        let mut oracle: Vec<f64> = (fitted.iter().flatten())
            .map(|(_, e)| e.iteration_time_s)
            .collect();
        oracle.sort_by(f64::total_cmp);
        oracle.truncate(STARTS);
        assert_eq!(oracle.len(), STARTS);
        // Floors: 0 for most; just below its own time for the slowest starts (valid, and not
        // below the third best: set aside).
        let third = oracle[STARTS - 1];
        let built = AtomicUsize::new(0);
        let starts: Vec<Start<'_>> = (specs.iter().zip(&fitted))
            .map(|(spec, f)| {
                let floor = match f {
                    Some((_, e)) if e.iteration_time_s > 1.5 * third => e.iteration_time_s * 0.99,
                    _ => 0.0,
                };
                let (built, layout) = (&built, &layout);
                let build: Build<'_> = Box::new(move || {
                    built.fetch_add(1, Ordering::Relaxed);
                    Some(layout(spec))
                });
                (spec.to_string(), floor, build)
            })
            .collect();
        let high = starts.iter().filter(|s| s.1 > 0.0).count();
        assert!(
            high >= 1,
            "no start has a floor high enough to be set aside"
        );
        let limits = Limits {
            max_nodes: None,
            time: None,
        };
        let mut search = Search::new(limits, &super::super::NoClock, &super::super::NoProgress);
        let kept = evaluate_starts(&problem, &mut search, starts, None, None, true);
        let times: Vec<f64> = kept.iter().map(|s| s.est.iteration_time_s).collect();
        assert_eq!(times, oracle);
        assert!(
            built.load(Ordering::Relaxed) < specs.len(),
            "nothing was set aside"
        );
        // With no time for any ladder (a deadline a picosecond away on a clock that stands
        // still), every start is sketched and those that fit as laid out are the starts.
        let mut as_laid_out: Vec<f64> = (specs.iter())
            .filter_map(|spec| {
                let plan = layout(spec);
                let est = common::evaluate(&problem, &plan)?;
                let clock = std::time::Instant::now();
                sketch_start(&problem, plan, est, true, clock).fits_within()
            })
            .collect();
        as_laid_out.sort_by(f64::total_cmp);
        as_laid_out.truncate(STARTS);
        let starts: Vec<Start<'_>> = (specs.iter())
            .map(|spec| {
                let layout = &layout;
                let build: Build<'_> = Box::new(move || Some(layout(spec)));
                (spec.to_string(), 0.0, build)
            })
            .collect();
        let mut search = Search::new(limits, &super::super::NoClock, &super::super::NoProgress);
        let kept = evaluate_starts(&problem, &mut search, starts, Some(1e-12), None, true);
        let times: Vec<f64> = kept.iter().map(|s| s.est.iteration_time_s).collect();
        assert_eq!(times, as_laid_out);
        // A node each sketch, and one each start fitted: none of those that climb.
        assert!(search.explored() <= (2 * specs.len() - climbs) as u64);
    }
}
