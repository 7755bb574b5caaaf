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

/// Calls `visit` with every ordered sequence of `parts` non-empty count vectors summing to
/// `totals`, depth first, lexicographic; stops as soon as `visit` returns `false`. Lazy: the
/// number of sequences grows exponentially with the GPU count, and a search limit must be able
/// to stop it.
fn for_each_group_sequence(
    totals: &[u32],
    parts: usize,
    visit: &mut dyn FnMut(&[Vec<u32>]) -> bool,
) -> bool {
    fn rec(
        rest: &mut Vec<u32>,
        parts: usize,
        acc: &mut Vec<Vec<u32>>,
        visit: &mut dyn FnMut(&[Vec<u32>]) -> bool,
    ) -> bool {
        let left: u32 = rest.iter().sum();
        if parts == 1 {
            if left == 0 {
                return true;
            }
            acc.push(rest.clone());
            let go = visit(acc);
            acc.pop();
            return go;
        }
        // Vectors 0 ≤ c ≤ rest, not all zero, leaving at least one GPU per later part; built
        // like an odometer in lexicographic order.
        let n = rest.len();
        let mut c = vec![0u32; n];
        loop {
            // Advance the odometer (the last node is the fastest digit).
            let mut i = n;
            loop {
                if i == 0 {
                    return true;
                }
                i -= 1;
                if c[i] < rest[i] {
                    c[i] += 1;
                    for v in c.iter_mut().skip(i + 1) {
                        *v = 0;
                    }
                    break;
                }
            }
            let taken: u32 = c.iter().sum();
            if left - taken < (parts - 1) as u32 {
                continue;
            }
            for k in 0..n {
                rest[k] -= c[k];
            }
            acc.push(c.clone());
            let go = rec(rest, parts - 1, acc, visit);
            acc.pop();
            for k in 0..n {
                rest[k] += c[k];
            }
            if !go {
                return false;
            }
        }
    }
    rec(&mut totals.to_vec(), parts, &mut Vec::new(), visit)
}

/// Calls `visit` with every composition of `n` into `parts` positive parts (lexicographic),
/// lazily; stops when `visit` returns `false`.
fn for_each_composition(n: usize, parts: usize, visit: &mut dyn FnMut(&[usize]) -> bool) -> bool {
    fn rec(
        n: usize,
        parts: usize,
        acc: &mut Vec<usize>,
        visit: &mut dyn FnMut(&[usize]) -> bool,
    ) -> bool {
        if parts == 1 {
            if n == 0 {
                return true;
            }
            acc.push(n);
            let go = visit(acc);
            acc.pop();
            return go;
        }
        for first in 1..=n.saturating_sub(parts - 1) {
            acc.push(first);
            let go = rec(n - first, parts - 1, acc, visit);
            acc.pop();
            if !go {
                return false;
            }
        }
        true
    }
    if parts == 0 || n < parts {
        return true;
    }
    rec(n, parts, &mut Vec::new(), visit)
}

/// Calls `visit` with every choice of one option per list (lexicographic), lazily.
fn for_each_product<T: Clone>(options: &[Vec<T>], visit: &mut dyn FnMut(&[T]) -> bool) -> bool {
    fn rec<T: Clone>(
        options: &[Vec<T>],
        acc: &mut Vec<T>,
        visit: &mut dyn FnMut(&[T]) -> bool,
    ) -> bool {
        match options.split_first() {
            None => visit(acc),
            Some((first, rest)) => {
                for o in first {
                    acc.push(o.clone());
                    let go = rec(rest, acc, visit);
                    acc.pop();
                    if !go {
                        return false;
                    }
                }
                true
            }
        }
    }
    rec(options, &mut Vec::new(), visit)
}

/// At most this many sample splits per stage are enumerated: exhaustive for the small problems
/// the oracle is for (C(samples − 1, replicas − 1) grows past it only on large ones).
const MAX_SPLITS: usize = 4096;

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
    super::common::bounded_compositions(samples, replicas, max, MAX_SPLITS)
}

impl Planner for Oracle {
    fn name(&self) -> &'static str {
        "oracle"
    }

    fn description(&self) -> &'static str {
        "exhaustive search of the Metis/AMP space under hetplan's cost model (small problems)"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let cluster = problem.cluster;
        let totals: Vec<u32> = cluster.nodes.iter().map(|n| n.num_gpus).collect();
        let gpus = cluster.num_gpus();
        let layers = problem.model.layers.len();
        let mut best = Best::default();
        for stages in 1..=gpus.min(layers) {
            let go = for_each_group_sequence(&totals, stages, &mut |groups| {
                // Every device-group sequence counts as a node, so that a limit stops even a
                // search whose sequences yield no valid plan.
                if !search.tick() {
                    return false;
                }
                let mut taken = vec![0u32; totals.len()];
                let devices: Vec<Vec<_>> = groups
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
                for_each_product(&tp_options, &mut |tps| {
                    for m in common::divisors(problem.global_batch) {
                        let per_mb = problem.global_batch / m;
                        // The sample splits depend on the stages' replicas, not on the layers.
                        let split_options: Vec<Vec<Vec<u64>>> = devices
                            .iter()
                            .enumerate()
                            .map(|(s, d)| {
                                let tp = tps[s] as usize;
                                let alike = d.chunks(tp).all(|rep| {
                                    cluster.gpu_type_of(rep[0]) == cluster.gpu_type_of(d[0])
                                });
                                sample_splits(
                                    per_mb,
                                    d.len() / tp,
                                    alike,
                                    problem.options.max_micro_batch,
                                )
                            })
                            .collect();
                        if split_options.iter().any(|o| o.is_empty()) {
                            continue;
                        }
                        let go = for_each_composition(layers, stages, &mut |lengths| {
                            let ranges = common::ranges(lengths);
                            for_each_product(&split_options, &mut |splits| {
                                if !search.tick() {
                                    return false;
                                }
                                let choices: Vec<StageChoice> = (0..stages)
                                    .map(|s| StageChoice {
                                        layers: ranges[s],
                                        devices: devices[s].clone(),
                                        tp: tps[s],
                                        micro_batch_sizes: splits[s].clone(),
                                        zero: 0,
                                        recompute: Recompute::None,
                                        offload: Default::default(),
                                    })
                                    .collect();
                                let plan = common::make_plan(problem, choices, m);
                                if let Some(est) = common::evaluate(problem, &plan) {
                                    if let Some(t) = best.offer(plan, est) {
                                        search.offer(crate::units::Seconds(t));
                                    }
                                }
                                true
                            })
                        });
                        if !go {
                            return false;
                        }
                    }
                    true
                })
            });
            if !go {
                break;
            }
        }
        common::conclude(best.plan, search, vec![], vec![], || {
            common::infeasible_reason(problem, cluster)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group_sequences(totals: &[u32], parts: usize) -> Vec<Vec<Vec<u32>>> {
        let mut out = Vec::new();
        for_each_group_sequence(totals, parts, &mut |g| {
            out.push(g.to_vec());
            true
        });
        out
    }

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
        // A visitor that says stop stops the enumeration.
        let mut n = 0;
        for_each_group_sequence(&[4, 4], 3, &mut |_| {
            n += 1;
            n < 5
        });
        assert_eq!(n, 5);
    }

    #[test]
    fn sample_splits_even_or_all() {
        assert_eq!(sample_splits(4, 2, true, 64), vec![vec![2, 2]]);
        assert!(sample_splits(3, 2, true, 64).is_empty());
        assert_eq!(sample_splits(3, 2, false, 64), vec![vec![1, 2], vec![2, 1]]);
    }
}
