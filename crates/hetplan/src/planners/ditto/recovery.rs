//! Recovery (§6): mapping a template on the virtual cluster back to real GPUs — greedy recovery
//! (§6.1, Algorithm 1) on the one-node-per-stage template, bottom-up DP recovery (§6.2,
//! Algorithm 2) on the one-GPU-per-stage template.

use super::{oobleck_time, prefix, Model, RealStage};
use crate::planners::Search;

/// Algorithm 1 on a template of virtual stages `(u, v, virtual devices)`.
pub(super) fn greedy(
    m: &Model<'_>,
    template: &[(usize, usize, usize)],
    d: &[usize],
    w: usize,
    search: &mut Search<'_>,
) -> Option<Vec<RealStage>> {
    let s_total = template.len();
    // Unassigned stages cost their virtual latency: Σ c_w / g.
    let cw = prefix(m.types[w].layer_cost.iter().copied());
    let mut lat: Vec<f64> = template
        .iter()
        .map(|&(u, v, g)| (cw[v] - cw[u]) / g as f64)
        .collect();
    let mut assigned: Vec<Option<RealStage>> = vec![None; s_total];
    // From the strongest type to the weakest.
    let mut order: Vec<usize> = (0..m.types.len()).collect();
    order.sort_by(|&a, &b| {
        m.types[a]
            .total
            .total_cmp(&m.types[b].total)
            .then(a.cmp(&b))
    });
    for ty in order {
        let total = m.types[ty].gpus.len();
        let mut used = 0;
        while used < total {
            let mut best: Option<(f64, RealStage)> = None;
            for (j, &(u, v, g)) in template.iter().enumerate() {
                if assigned[j].is_some() {
                    continue;
                }
                if !search.tick() {
                    return None;
                }
                let x = g
                    .div_ceil(d[ty])
                    .min(total - used)
                    .min(m.types[ty].per_node);
                let Some((t, cfg)) = m.stage(ty, x, u, v, m.inflight(s_total - j - 1)) else {
                    continue;
                };
                let saved = lat[j];
                lat[j] = t;
                let time = oobleck_time(&lat, m.nb);
                lat[j] = saved;
                if best.as_ref().is_none_or(|(b, _)| time < *b) {
                    best = Some((
                        time,
                        RealStage {
                            u,
                            v,
                            ty,
                            x,
                            cfg,
                            lat: t,
                        },
                    ));
                }
            }
            let Some((_, st)) = best else {
                break;
            };
            let j = template
                .iter()
                .position(|&(u, v, _)| (u, v) == (st.u, st.v))?;
            lat[j] = st.lat;
            assigned[j] = Some(st);
            used += st.x;
        }
    }
    assigned.into_iter().collect()
}

/// One cell of Algorithm 2's table.
#[derive(Clone)]
struct Cell {
    used: Vec<usize>,
    cost: f64,
    stages: Vec<RealStage>,
}

/// Algorithm 2 on a template of `V` one-GPU virtual stages, each virtual GPU `unit` weakest
/// GPUs (1 unless the cluster was folded coarser): `x` GPUs of type `i` merge
/// `max(1, round(x·dᵢ / unit))` virtual stages.
pub(super) fn dp_recovery(
    m: &Model<'_>,
    template: &[(usize, usize)],
    d: &[usize],
    unit: usize,
    search: &mut Search<'_>,
) -> Option<Vec<RealStage>> {
    let s_total = template.len();
    let mut dp: Vec<Option<Cell>> = vec![None; s_total + 1];
    dp[0] = Some(Cell {
        used: vec![0; m.types.len()],
        cost: 0.0,
        stages: vec![],
    });
    for i in 1..=s_total {
        let mut best: Option<Cell> = None;
        for (ty, t) in m.types.iter().enumerate() {
            for x in 1..=t.per_node {
                let y = ((x * d[ty] + unit / 2) / unit).max(1);
                if y > i {
                    continue;
                }
                if !search.tick() {
                    return None;
                }
                let Some(prev) = dp[i - y].as_ref() else {
                    continue;
                };
                if prev.used[ty] + x > t.gpus.len() {
                    continue;
                }
                let (u, v) = (template[i - y].0, template[i - 1].1);
                let Some((lat, cfg)) = m.stage(ty, x, u, v, m.inflight(s_total - i)) else {
                    continue;
                };
                let mut stages = prev.stages.clone();
                stages.push(RealStage {
                    u,
                    v,
                    ty,
                    x,
                    cfg,
                    lat,
                });
                let cost = m.cost(&stages);
                if best.as_ref().is_none_or(|b| cost < b.cost) {
                    let mut used = prev.used.clone();
                    used[ty] += x;
                    best = Some(Cell { used, cost, stages });
                }
            }
        }
        dp[i] = best;
    }
    dp[s_total].take().map(|c| c.stages)
}
