//! The exhaustive oracle: every plan of the space the seed planners search, evaluated with
//! hetplan's cost model. Slow and readable on purpose — it is the referee of the property tests
//! (no planner beats it under the same cost model) and only meant for small problems (about
//! ≤ 8 GPUs and ≤ 24 layers).
//!
//! The space: the number of stages; the device group of each stage, as how many GPUs it takes
//! from each node (GPUs of a node are interchangeable), all GPUs used; each stage's tensor
//! parallel degree (its data-parallel degree follows); the layer split (every composition); the
//! number of micro-batches (every divisor of the global batch); and, where a stage's replicas
//! run on different GPU types, every split of the micro-batch's samples among them. 1F1B, no
//! ZeRO, no recomputation — the space of Metis and AMP.

use super::common::{self, Best, StageChoice};
use super::{Outcome, Planner, PlannerError, Problem, Search};
use crate::plan::Recompute;

/// The exhaustive planner.
#[derive(Clone, Copy, Debug, Default)]
pub struct Oracle;

/// Every ordered sequence of `parts` non-empty count vectors summing to `totals`.
fn group_sequences(totals: &[u32], parts: usize) -> Vec<Vec<Vec<u32>>> {
    fn vectors(rest: &[u32]) -> Vec<Vec<u32>> {
        // All vectors 0 ≤ c ≤ rest, not all zero, in lexicographic order.
        let mut out = vec![vec![]];
        for &r in rest {
            out = out
                .into_iter()
                .flat_map(|v| {
                    (0..=r).map(move |c| {
                        let mut w = v.clone();
                        w.push(c);
                        w
                    })
                })
                .collect();
        }
        out.retain(|v| v.iter().any(|&c| c > 0));
        out
    }
    fn rec(rest: &[u32], parts: usize, acc: &mut Vec<Vec<u32>>, out: &mut Vec<Vec<Vec<u32>>>) {
        if parts == 1 {
            if rest.iter().any(|&c| c > 0) {
                acc.push(rest.to_vec());
                out.push(acc.clone());
                acc.pop();
            }
            return;
        }
        for v in vectors(rest) {
            let left: Vec<u32> = rest.iter().zip(&v).map(|(r, c)| r - c).collect();
            if left.iter().sum::<u32>() < (parts - 1) as u32 {
                continue;
            }
            acc.push(v);
            rec(&left, parts - 1, acc, out);
            acc.pop();
        }
    }
    let mut out = Vec::new();
    rec(totals, parts, &mut Vec::new(), &mut out);
    out
}

/// Every way to give `samples` samples to `replicas` replicas, each at least 1 and at most
/// `max`: all compositions when the replicas differ, the even split when they are alike.
fn sample_splits(samples: u64, replicas: usize, alike: bool, max: u64) -> Vec<Vec<u64>> {
    if alike {
        let r = replicas as u64;
        if samples.is_multiple_of(r) && samples / r <= max {
            return vec![vec![samples / r; replicas]];
        }
        return vec![];
    }
    common::compositions(samples as usize, replicas)
        .into_iter()
        .map(|c| c.into_iter().map(|x| x as u64).collect::<Vec<u64>>())
        .filter(|c| c.iter().all(|&x| x <= max))
        .collect()
}

impl Planner for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn description(&self) -> &'static str {
        "exhaustive search of the Metis/AMP space under hetplan's cost model (small problems)"
    }

    fn plan(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let cluster = problem.cluster;
        let totals: Vec<u32> = cluster.nodes.iter().map(|n| n.num_gpus).collect();
        let gpus = cluster.num_gpus();
        let layers = problem.model.layers.len();
        let mut best = Best::default();
        'all: for stages in 1..=gpus.min(layers) {
            for groups in group_sequences(&totals, stages) {
                let mut taken = vec![0u32; totals.len()];
                let devices: Vec<_> = groups
                    .iter()
                    .map(|c| common::take_devices(c, &mut taken))
                    .collect();
                // TP degrees per stage: divisors of the group size up to the option's limit.
                let tp_options: Vec<Vec<u32>> = devices
                    .iter()
                    .map(|d| {
                        common::divisors(d.len() as u64)
                            .into_iter()
                            .map(|t| t as u32)
                            .filter(|&t| t <= problem.options.max_tp)
                            .collect()
                    })
                    .collect();
                for tps in cartesian(&tp_options) {
                    for lengths in common::compositions(layers, stages) {
                        let ranges = common::ranges(&lengths);
                        for m in common::divisors(problem.global_batch) {
                            let per_mb = problem.global_batch / m;
                            // Sample splits per stage.
                            let mut split_options = Vec::with_capacity(stages);
                            for (s, d) in devices.iter().enumerate() {
                                let tp = tps[s] as usize;
                                let dp = d.len() / tp;
                                let alike = d
                                    .chunks(tp)
                                    .map(|rep| cluster.gpu_type_of(rep[0]))
                                    .all(|t| t == cluster.gpu_type_of(d[0]));
                                split_options.push(sample_splits(
                                    per_mb,
                                    dp,
                                    alike,
                                    problem.options.max_micro_batch,
                                ));
                            }
                            for splits in cartesian(&split_options) {
                                if !search.tick() {
                                    break 'all;
                                }
                                let choices: Vec<StageChoice> = (0..stages)
                                    .map(|s| StageChoice {
                                        layers: ranges[s],
                                        devices: devices[s].clone(),
                                        tp: tps[s],
                                        micro_batch_sizes: splits[s].clone(),
                                        zero: 0,
                                        recompute: Recompute::None,
                                    })
                                    .collect();
                                let plan = common::make_plan(problem, choices, m);
                                if let Some(est) = common::evaluate(problem, &plan) {
                                    if let Some(t) = best.offer(plan, est) {
                                        search.offer(crate::units::Seconds(t));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        match best.plan {
            Some((plan, estimate)) => Ok(Outcome {
                plan,
                estimate,
                explored: search.explored(),
                stop_reason: search.stop_reason(),
                ranked: vec![],
                notes: vec![],
            }),
            None if search.stopped() => Err(PlannerError::Stopped(search.stop_reason())),
            None => Err(PlannerError::Infeasible(common::infeasible_reason(
                problem, cluster,
            ))),
        }
    }
}

/// The cartesian product of option lists, in lexicographic order.
pub fn cartesian<T: Clone>(options: &[Vec<T>]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![vec![]];
    for opts in options {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                opts.iter().map(move |o| {
                    let mut p = prefix.clone();
                    p.push(o.clone());
                    p
                })
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sequences_cover_every_ordered_split() {
        // Two nodes of 1 GPU into 2 groups: (1,0)(0,1) and (0,1)(1,0).
        let g = group_sequences(&[1, 1], 2);
        assert_eq!(
            g,
            vec![vec![vec![0, 1], vec![1, 0]], vec![vec![1, 0], vec![0, 1]]]
        );
        // One node of 3 GPUs into 2 groups: 1+2, 2+1.
        assert_eq!(group_sequences(&[3], 2).len(), 2);
    }

    #[test]
    fn sample_splits_even_or_all() {
        assert_eq!(sample_splits(4, 2, true, 64), vec![vec![2, 2]]);
        assert!(sample_splits(3, 2, true, 64).is_empty());
        assert_eq!(sample_splits(3, 2, false, 64), vec![vec![1, 2], vec![2, 1]]);
    }
}
