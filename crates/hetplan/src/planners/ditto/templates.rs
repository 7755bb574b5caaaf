//! Oobleck's pipeline templates (§4.1.2 of Oobleck, Ditto §3 with one device type): the divide
//! and conquer over `T(S', u, v)` on the folded, virtual homogeneous cluster, and the unwinding
//! of a solution into its stages' layer ranges.

use super::Summary;
use crate::planners::Search;

/// One memo entry of the homogeneous divide and conquer: the sub-pipeline's summary and how it
/// was split (`k`, `s`; `s = 0`: one stage).
#[derive(Clone, Copy)]
pub(super) struct Entry {
    sum: Summary,
    k: usize,
    s: usize,
}

/// `T(S', u, v)` for every `S' ≤ max_stages` on a homogeneous cluster of nodes of `node` GPUs
/// whose stages take `per_stage` GPUs and cost `lat(u, v)`: Oobleck's divide and conquer (§3 with
/// one device type; a sub-pipeline spanning several nodes is split between whole nodes, one
/// within a node between its GPUs). `None` if stopped.
pub(super) fn homogeneous_dc(
    layers: usize,
    max_stages: usize,
    per_stage: usize,
    node: usize,
    nb: u64,
    lat: &dyn Fn(usize, usize) -> f64,
    search: &mut Search<'_>,
) -> Option<Vec<Vec<Option<Entry>>>> {
    let l1 = layers + 1;
    let idx = |u: usize, v: usize| u * l1 + v;
    let mut table: Vec<Vec<Option<Entry>>> = vec![vec![None; l1 * l1]];
    let mut one = vec![None; l1 * l1];
    for u in 0..layers {
        for v in u + 1..=layers {
            one[idx(u, v)] = Some(Entry {
                sum: Summary::base(lat(u, v)),
                k: 0,
                s: 0,
            });
        }
    }
    table.push(one);
    for sp in 2..=max_stages {
        let mut row = vec![None; l1 * l1];
        for u in 0..layers {
            for v in u + sp..=layers {
                let mut best: Option<(f64, Entry)> = None;
                for s in 1..sp {
                    // Oobleck splits whole nodes while the sub-pipeline spans more than one.
                    if sp * per_stage > node && !(s * per_stage).is_multiple_of(node) {
                        continue;
                    }
                    for kk in u + s..=v - (sp - s) {
                        if !search.tick() {
                            return None;
                        }
                        let (Some(l), Some(r)) = (table[s][idx(u, kk)], table[sp - s][idx(kk, v)])
                        else {
                            continue;
                        };
                        let sum = Summary::combine(&l.sum, &r.sum);
                        let t = sum.total(nb);
                        if best.as_ref().is_none_or(|(b, _)| t < *b) {
                            best = Some((t, Entry { sum, k: kk, s }));
                        }
                    }
                }
                row[idx(u, v)] = best.map(|(_, e)| e);
            }
        }
        table.push(row);
    }
    Some(table)
}

/// The stages (layer ranges) of `T(sp, u, v)`.
pub(super) fn unwind(
    table: &[Vec<Option<Entry>>],
    layers: usize,
    sp: usize,
    u: usize,
    v: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let l1 = layers + 1;
    let Some(e) = table[sp][u * l1 + v] else {
        return;
    };
    if e.s == 0 {
        out.push((u, v));
    } else {
        unwind(table, layers, e.s, u, e.k, out);
        unwind(table, layers, sp - e.s, e.k, v, out);
    }
}
