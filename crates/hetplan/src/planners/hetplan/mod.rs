//! hetplan's own planner (issue 10), first increment: the best plan of the seeds' searches,
//! with a certified gap.
//!
//! No seed planner wins everywhere (docs/planners.md): Mist wins where memory binds, Metis where
//! data parallelism over a slow network hurts, Poplar on data-parallel-friendly clusters, the
//! Megatron heuristic on uniform farms. This planner runs each seed's search on the problem —
//! the fast ones first, Metis and Mist last with the time the others left — ranks their answers
//! by hetplan's estimate (each answer fits: `Planner::plan`), and answers the best, with every
//! member's answer as the next best distinct plans and the gap to `planners::bound`.
//!
//! So its space is the union of the members' spaces, searched by their methods; what it adds is
//! the choice, the ranking by one cost model, and the certificate. Not yet here (issue 10): a
//! search of its own over the whole union (per-replica TP degrees, memory options per stage
//! with heterogeneous device groups, interleaving), a network-aware bound, and rayon.
//!
//! Limits: with a time limit, member i of n (in order) gets `remaining / (n − i)`, so time a
//! fast member does not use goes to the ones after it; a node limit is shared the same way
//! (members count nodes their own way). Without limits every member runs to its own end, and
//! the answer is deterministic.

use super::{bound, StopReason};
use super::{Clock, Limits, Outcome, Planner, PlannerError, Problem, Progress, Ranked, Search};
use crate::units::Seconds;

/// The seed planners hetplan runs, fast first (`planners::all()` minus the oracle, which is a
/// referee for small problems, and hetplan itself).
fn members() -> Vec<Box<dyn Planner>> {
    use super::{amp, baselines, ditto, metis, mist, poplar};
    vec![
        Box::new(baselines::DataParallel),
        Box::new(baselines::Megatron),
        Box::new(baselines::AlpaAverage),
        Box::new(amp::Amp),
        Box::new(poplar::Poplar::default()),
        Box::new(ditto::Ditto::default()),
        Box::new(ditto::DittoExhaustive::default()),
        Box::new(metis::Metis::default()),
        Box::new(mist::Mist::default()),
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

impl Planner for Hetplan {
    fn name(&self) -> &'static str {
        "hetplan"
    }

    fn description(&self) -> &'static str {
        "hetplan's planner: every seed's search (Metis, Mist, Poplar, Ditto, AMP, the Megatron \
         heuristic, ...) on the problem, the best answer by hetplan's estimate, with the gap to \
         a certified lower bound"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        // The bound first, so that its time comes out of the members' budgets.
        let bound = bound::lower_bound(problem);
        let members = members();
        let n = members.len();
        let mut answers: Vec<(&'static str, Outcome)> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut stop = StopReason::Exhausted;
        for (i, member) in members.iter().enumerate() {
            let left = (n - i) as f64;
            let budget = search.remaining().map(|r| Seconds(r.get().max(0.0) / left));
            let nodes = search
                .limits
                .max_nodes
                .map(|m| m.saturating_sub(search.explored()) / (n - i) as u64);
            if budget.is_some_and(|b| b.get() <= 0.0) || nodes == Some(0) {
                stop = if nodes == Some(0) {
                    StopReason::NodeLimit
                } else {
                    StopReason::TimeLimit
                };
                failures.push(format!(
                    "{}: not run, its limits were used up",
                    member.name()
                ));
                continue;
            }
            let since = Since {
                clock: search.clock(),
                start: search.elapsed(),
            };
            let progress: &dyn Progress = search.progress();
            let mut sub = Search::new(
                Limits {
                    max_nodes: nodes,
                    time: budget,
                },
                &since,
                progress,
            );
            let out = member.plan(problem, &mut sub);
            let (explored, stopped) = (sub.explored(), sub.stop_reason());
            search.add_explored(explored);
            if stopped != StopReason::Exhausted && stop == StopReason::Exhausted {
                stop = stopped;
            }
            match out {
                Ok(o) => {
                    search.offer(Seconds(o.estimate.iteration_time_s));
                    answers.push((member.name(), o));
                }
                Err(e) => failures.push(format!("{}: {e}", member.name())),
            }
        }
        // The best by hetplan's estimate; ties go to the earlier member.
        let best = (0..answers.len()).min_by(|&a, &b| {
            answers[a]
                .1
                .estimate
                .iteration_time_s
                .total_cmp(&answers[b].1.estimate.iteration_time_s)
                .then(a.cmp(&b))
        });
        let Some(best) = best else {
            return Err(match stop {
                StopReason::Exhausted => PlannerError::Infeasible(format!(
                    "no seed planner found a plan that fits: {}",
                    failures.join("; ")
                )),
                s => PlannerError::Stopped(s),
            });
        };
        // The other members' answers, best first, each plan once.
        let mut order: Vec<usize> = (0..answers.len()).collect();
        order.sort_by(|&a, &b| {
            answers[a]
                .1
                .estimate
                .iteration_time_s
                .total_cmp(&answers[b].1.estimate.iteration_time_s)
                .then(a.cmp(&b))
        });
        let mut ranked: Vec<Ranked> = Vec::new();
        let mut notes = Vec::new();
        let mut tally = Vec::new();
        for &i in &order {
            let (name, o) = &answers[i];
            tally.push(format!("{name} {}", Seconds(o.estimate.iteration_time_s)));
            if o.plan == answers[best].1.plan || ranked.iter().any(|r| r.plan == o.plan) {
                continue;
            }
            ranked.push(Ranked {
                plan: o.plan.clone(),
                planner_cost_s: o.estimate.iteration_time_s,
                estimate_s: o.estimate.iteration_time_s,
                fits: o.estimate.fits,
            });
        }
        let (name, chosen) = answers.swap_remove(best);
        notes.push(format!(
            "the plan of {name}, the best of {} seed answers by hetplan's estimate ({}); {:.1}% \
             above the lower bound of {} (compute alone, every GPU busy)",
            tally.len(),
            tally.join(", "),
            bound.gap(Seconds(chosen.estimate.iteration_time_s)) * 100.0,
            Seconds(bound.iteration_time_s)
        ));
        notes.extend(explain(problem, &chosen.plan));
        // GPUs left out: what using them all would cost, by the seeds' best such answer.
        let all = problem.cluster.num_gpus();
        let used = chosen.plan.devices().len();
        if used < all {
            let full = answers
                .iter()
                .filter(|(_, o)| o.plan.devices().len() == all)
                .min_by(|a, b| {
                    (a.1.estimate.iteration_time_s).total_cmp(&b.1.estimate.iteration_time_s)
                });
            notes.push(match full {
                Some((who, o)) => format!(
                    "{} of {all} GPUs are left idle: the best answer that uses them all ({who}, \
                     {}) is {:.2}× slower",
                    all - used,
                    Seconds(o.estimate.iteration_time_s),
                    o.estimate.iteration_time_s / chosen.estimate.iteration_time_s
                ),
                None => format!(
                    "{} of {all} GPUs are left idle: no seed planner's answer uses them all",
                    all - used
                ),
            });
        }
        for f in &failures {
            notes.push(format!("no answer from {f}"));
        }
        Ok(Outcome {
            plan: chosen.plan,
            estimate: chosen.estimate,
            explored: search.explored(),
            stop_reason: stop,
            ranked,
            notes,
        })
    }
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
                let mut options = Vec::new();
                if st.zero > 0 {
                    options.push(format!("ZeRO-{}", st.zero));
                }
                match st.recompute {
                    crate::plan::Recompute::None => {}
                    crate::plan::Recompute::Selective => options.push("selective recompute".into()),
                    crate::plan::Recompute::Full => options.push("full recompute".into()),
                    crate::plan::Recompute::Layers(k) => {
                        options.push(format!("{k} layers recomputed"))
                    }
                }
                if !st.offload.is_none() {
                    options.push("offloading".into());
                }
                format!(
                    "stage {i} (layers {}-{}, dp {} × tp {}{})",
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
