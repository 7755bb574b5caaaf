//! Algorithm 1's intra-stage plans and Metis's load balancers (§4.2.2 part 3): the DP-first
//! starting plan of a device group and TP escalation, the data load balancer (a heterogeneous
//! group's micro-batch split by replica throughput), the layer load balancer (capacity-aware
//! cuts, rebalancing the stages not yet committed, shedding an OOM stage's layers) and the
//! memory room bound (at most how many layers a stage can hold) that prunes the search.

use super::ctx::Ctx;
use super::groups::Group;
use super::search::State;
use crate::cost::memory;
use crate::plan::Schedule;
use crate::planners::common;

/// A group's DP-first intra-stage plan: (TP degree, replica micro-batch sizes, capacity).
pub(super) type DpFirst = (u32, Vec<u64>, f64);

impl Ctx<'_, '_> {
    /// Algorithm 1's starting point for a group (DP first: the lowest valid TP degree) and
    /// that plan's capacity, cached per shape.
    pub(super) fn dp_first(&mut self, g: &Group, per_mb: u64) -> Option<DpFirst> {
        let key = (g.shape, per_mb);
        if let Some(v) = self.first_cache.get(&key) {
            return v.clone();
        }
        let v = self.escalate(g, 0, per_mb).map(|(tp, m)| {
            let cap = self.capacity(g, tp, &m);
            (tp, m, cap)
        });
        // The entry, the map's slot and the replica micro-batch sizes.
        self.cached(64 + v.as_ref().map_or(0, |(_, m, _)| 8 * m.len()));
        self.first_cache.insert(key, v.clone());
        v
    }

    /// Class of the node holding replica r.
    pub(super) fn replica_class(&self, g: &Group, tp: u32, r: usize) -> usize {
        self.node_class[g.devices[r * tp as usize].node as usize]
    }

    /// TP degrees valid for a group: dividing its size and every per-node count (a TP group
    /// stays inside a node), at most `max_tp`.
    fn tp_divides(&self, g: &Group, tp: u32) -> bool {
        tp >= 1
            && tp <= self.p.options.max_tp
            && g.size().is_multiple_of(tp)
            && g.per_node.iter().all(|&(_, c)| c.is_multiple_of(tp))
    }

    /// The next TP degree above `tp` (escalation), if any.
    fn next_tp(&self, g: &Group, tp: u32) -> Option<u32> {
        ((tp + 1)..=g.size().min(self.p.options.max_tp)).find(|&t| self.tp_divides(g, t))
    }

    /// The next TP degree above `tp` (0: from the start) whose micro-batch split is valid, with
    /// that split.
    pub(super) fn escalate(&mut self, g: &Group, tp: u32, per_mb: u64) -> Option<(u32, Vec<u64>)> {
        let mut t = tp;
        loop {
            t = if t == 0 {
                if self.tp_divides(g, 1) {
                    1
                } else {
                    self.next_tp(g, 1)?
                }
            } else {
                self.next_tp(g, t)?
            };
            if let Some(m) = self.data_lb(g, t, per_mb) {
                return Some((t, m));
            }
        }
    }

    /// The replicas' micro-batch sizes of a stage (data load balancing), or `None` for an
    /// invalid intra-stage plan.
    fn data_lb(&mut self, g: &Group, tp: u32, per_mb: u64) -> Option<Vec<u64>> {
        let dp = (g.size() / tp) as usize;
        let max = self.p.options.max_micro_batch;
        if per_mb < dp as u64 {
            return None;
        }
        let classes: Vec<usize> = (0..dp).map(|r| self.replica_class(g, tp, r)).collect();
        let cluster = self.cluster();
        let types: Vec<usize> = classes
            .iter()
            .map(|&c| cluster.nodes[self.class_rep[c] as usize].gpu_type.0)
            .collect();
        if !g.hetero || types.iter().all(|&t| t == types[0]) {
            // Algorithm 1 line 11: [GBS/B/DP] × DP.
            if !per_mb.is_multiple_of(dp as u64) || per_mb / dp as u64 > max {
                return None;
            }
            return Some(vec![per_mb / dp as u64; dp]);
        }
        // Capacity of each replica: samples per second at the even share.
        let even = (per_mb / dp as u64).max(1);
        let caps: Vec<f64> = classes
            .iter()
            .map(|&c| {
                let t = self.time(c, tp, even, 0, self.layers);
                even as f64 / t.max(f64::MIN_POSITIVE)
            })
            .collect();
        common::largest_remainder(per_mb, &caps, &vec![max; dp])
    }

    /// Capacity of a stage for the layer load balancer: one over its slowest replica's time for
    /// the whole model.
    pub(super) fn capacity(&mut self, g: &Group, tp: u32, mbs: &[u64]) -> f64 {
        let mut worst: f64 = 0.0;
        for (r, &m) in mbs.iter().enumerate() {
            let c = self.replica_class(g, tp, r);
            worst = worst.max(self.time(c, tp, m, 0, self.layers));
        }
        1.0 / worst.max(f64::MIN_POSITIVE)
    }

    /// Re-splits layers `bounds[from]..L` over stages `from..S` by capacity.
    pub(super) fn rebalance_from(&mut self, groups: &[Group], st: &mut State, from: usize) {
        let s = groups.len();
        let start = st.bounds[from];
        let lengths = balance(&self.loads[start..], &st.caps[from..s]);
        let mut at = start;
        for (j, len) in lengths.into_iter().enumerate() {
            st.bounds[from + j] = at;
            at += len;
        }
        st.bounds[s] = self.layers;
    }

    /// Algorithm 1 lines 38–41: moves layers of the OOM stage i to the stages after it (in
    /// proportion to their capacity) until it fits. `false` if it cannot.
    pub(super) fn shed_layers(
        &mut self,
        groups: &[Group],
        st: &mut State,
        i: usize,
        b: u64,
    ) -> bool {
        let s = groups.len();
        if i + 1 >= s {
            return false;
        }
        // Shedding one layer at a time until stage i fits ends at the largest end that fits
        // (memory grows with the end; the later stages do not change stage i's memory).
        let orig = st.bounds[i + 1];
        let lo = st.bounds[i] + 1;
        let mut fits = |e: usize, st: &mut State| {
            st.bounds[i + 1] = e;
            !self.oom(&groups[i], st, i, b)
        };
        if lo >= orig || !fits(lo, st) {
            st.bounds[i + 1] = orig;
            return false;
        }
        // Invariant: fits(good), !fits(bad).
        let (mut good, mut bad) = (lo, orig);
        while bad - good > 1 {
            let mid = good + (bad - good) / 2;
            if fits(mid, st) {
                good = mid;
            } else {
                bad = mid;
            }
        }
        st.bounds[i + 1] = good;
        self.rebalance_from(groups, st, i + 1);
        true
    }

    /// At most how many layers stage i of `s` (with `b` micro-batches) can hold at any TP degree
    /// from `tp` up (DP-first splits): no layer takes less memory than the smallest layer's
    /// weights, gradients, optimizer states and in-flight activations.
    pub(super) fn max_layers(&mut self, g: &Group, tp: u32, s: usize, i: usize, b: u64) -> usize {
        let per_mb = self.p.global_batch / b;
        let inflight = memory::in_flight(Schedule::OneFOneB, s, i, b);
        let key = (g.shape, tp, per_mb, inflight.to_bits(), s as u32);
        if let Some(&v) = self.room_cache.get(&key) {
            return v;
        }
        let v = self.compute_max_layers(g, tp, per_mb, inflight, s);
        self.cached(48);
        self.room_cache.insert(key, v);
        v
    }

    fn compute_max_layers(
        &mut self,
        g: &Group,
        tp: u32,
        per_mb: u64,
        inflight: f64,
        s: usize,
    ) -> usize {
        let mut best = 0usize;
        let mut next = Some(tp);
        while let Some(t) = next {
            if let Some(mbs) = self.data_lb(g, t, per_mb) {
                let mut fit = usize::MAX;
                for (r, &m) in mbs.iter().enumerate() {
                    let gpu = g.devices[r * t as usize];
                    let cap = self.cluster().gpu(gpu).memory.get();
                    // The least the runtime can hold anywhere in the pipeline (a bound).
                    let dp = (g.devices.len() / t as usize) as u32;
                    let world = self.cluster().num_gpus() as u32;
                    let runtime = memory::runtime_bytes_by_place(
                        self.cluster(),
                        gpu,
                        (self.p.options.engine, self.ties),
                        (t, dp),
                        s,
                        world,
                    )
                    .fold(f64::INFINITY, f64::min);
                    let room = memory::allocatable_bytes(cap, runtime);
                    let least = self.least_layer_memory(t, m, inflight);
                    let n = if least > 0.0 {
                        (room / least).floor().min(self.layers as f64) as usize
                    } else {
                        self.layers
                    };
                    fit = fit.min(n);
                }
                best = best.max(fit);
            }
            next = self.next_tp(g, t);
        }
        best
    }

    /// The least memory one layer adds to a GPU at (`tp`, `mbs`) with `inflight` micro-batches
    /// (tied weights not counted: the embedding's stage does not hold them twice).
    fn least_layer_memory(&mut self, tp: u32, mbs: u64, inflight: f64) -> f64 {
        let key = (tp as usize, mbs, inflight.to_bits());
        if let Some(&v) = self.least_cache.get(&key) {
            return v;
        }
        let v = self.compute_least_layer_memory(tp, mbs, inflight);
        self.cached(40);
        self.least_cache.insert(key, v);
        v
    }

    fn compute_least_layer_memory(&mut self, tp: u32, mbs: u64, inflight: f64) -> f64 {
        let tokens = mbs as f64 * self.tokens_per_sample * inflight;
        let sb = self.state_bytes;
        let t = self.tp_prefix(tp);
        (0..t.saved.len() - 1)
            .map(|l| {
                let states = (t.params[l + 1] - t.params[l] - (t.tied[l + 1] - t.tied[l])) * sb;
                states + (t.saved[l + 1] - t.saved[l]) * tokens
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// Capacity-aware layer balancing: cuts the layers whose normalised load prefix sums are
/// `prefix` (length layers + 1, relative to the first of them) into `caps.len()` runs of at
/// least one layer, each run's share of the load following its stage's share of the capacity,
/// then moves boundary layers between neighbours while that lowers the largest load/capacity.
fn balance(prefix: &[f64], caps: &[f64]) -> Vec<usize> {
    let n = caps.len();
    let len = prefix.len() - 1;
    debug_assert!(len >= n && n >= 1);
    let base = prefix[0];
    let w = |p: usize| prefix[p] - base;
    let total_w = w(len);
    let total_c: f64 = caps.iter().sum();
    let mut cuts = Vec::with_capacity(n + 1);
    cuts.push(0usize);
    let mut acc_c = 0.0;
    for (kk, c) in caps.iter().enumerate().take(n - 1) {
        acc_c += c;
        let target = total_w * acc_c / total_c;
        let lo = cuts[kk] + 1;
        let hi = len - (n - 1 - kk);
        // The loads' prefix sums grow: the nearest cut is next to the first one reaching the
        // target (the earlier one on a tie).
        let first = lo + prefix[lo..=hi].partition_point(|&x| x - base < target);
        let best = if first > hi {
            hi
        } else if first > lo && (target - w(first - 1)) <= (w(first) - target) {
            first - 1
        } else {
            first
        };
        cuts.push(best);
    }
    cuts.push(len);
    // Adjustment: move a boundary layer out of the most loaded stage while it helps.
    let ratio = |a: usize, b: usize, j: usize| (w(b) - w(a)) / caps[j];
    for _ in 0..len * n {
        let (worst, wr) = (0..n)
            .map(|j| (j, ratio(cuts[j], cuts[j + 1], j)))
            .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        if cuts[worst + 1] - cuts[worst] <= 1 {
            break;
        }
        let mut best: Option<(f64, usize, usize)> = None;
        // Give the first layer to the previous stage, or the last to the next.
        if worst > 0 {
            let c = cuts[worst] + 1;
            let m = ratio(c, cuts[worst + 1], worst).max(ratio(cuts[worst - 1], c, worst - 1));
            best = Some((m, worst, c));
        }
        if worst + 1 < n {
            let c = cuts[worst + 1] - 1;
            let m = ratio(cuts[worst], c, worst).max(ratio(c, cuts[worst + 2], worst + 1));
            if best.is_none_or(|(bm, _, _)| m < bm) {
                best = Some((m, worst + 1, c));
            }
        }
        match best {
            Some((m, at, v)) if m < wr * (1.0 - 1e-12) => cuts[at] = v,
            _ => break,
        }
    }
    cuts.windows(2).map(|p| p[1] - p[0]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_split_is_capacity_aware_and_exact() {
        let proportional_split =
            |t: u64, c: &[f64], max: u64| common::largest_remainder(t, c, &vec![max; c.len()]);
        assert_eq!(
            proportional_split(8, &[2.0, 1.0, 1.0], 64),
            Some(vec![4, 2, 2])
        );
        assert_eq!(
            proportional_split(3, &[10.0, 1.0, 1.0], 64),
            Some(vec![1, 1, 1])
        );
        assert_eq!(proportional_split(7, &[2.0, 1.0], 64), Some(vec![5, 2]));
        assert_eq!(proportional_split(7, &[2.0, 1.0], 4), Some(vec![4, 3]));
        assert_eq!(proportional_split(2, &[1.0, 1.0, 1.0], 64), None);
    }

    #[test]
    fn balance_follows_capacity() {
        // 12 equal layers, capacities 2:1 → 8 and 4.
        let prefix: Vec<f64> = (0..=12).map(|i| i as f64 / 12.0).collect();
        assert_eq!(balance(&prefix, &[2.0, 1.0]), vec![8, 4]);
        assert_eq!(balance(&prefix, &[1.0, 1.0, 1.0]), vec![4, 4, 4]);
        assert_eq!(balance(&prefix, &[1.0]), vec![12]);
        // Every stage keeps a layer.
        assert_eq!(balance(&prefix[..4], &[100.0, 1.0, 1.0]), vec![1, 1, 1]);
    }
}
