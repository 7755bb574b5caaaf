//! The search (§4.1–4.2, Algorithm 1): stage counts and micro-batch counts, size multisets
//! under `var`, their permutations and placements, then per inter-stage plan the DP-first DFS
//! with OOM-driven TP escalation and layer shedding; every complete plan is costed with Eq. 1
//! and the best are kept (`TopK`). The exact cuts (the lower bound on a size multiset, the
//! memory room, the cost of the committed stages, the memo of explored prefixes) live here.

use super::ctx::Ctx;
use super::groups::{
    group_sizes, next_permutation, partitions, permutation_elements, place, placement_key, Group,
    PlacementKey,
};
use super::Metis;
use crate::plan::{LayerRange, Recompute};
use crate::planners::common::{self, StageChoice};
use crate::planners::Search;
use crate::units::Seconds;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// Counters for the notes.
#[derive(Default)]
pub(super) struct Stats {
    /// Size multisets cut by the lower bound for every B.
    pub(super) bounded: u64,
    pub(super) inter_stage_plans: u64,
    pub(super) complete_plans: u64,
}

/// The DFS state of one inter-stage plan: per stage its TP degree, its replicas' micro-batch
/// sizes, and the layer boundaries (`bounds[i]..bounds[i+1]` are stage i's layers).
#[derive(Clone, Debug)]
pub(super) struct State {
    pub(super) tp: Vec<u32>,
    pub(super) mbs: Vec<Vec<u64>>,
    pub(super) bounds: Vec<usize>,
    /// Each stage's capacity for the layer load balancer (`Ctx::capacity`).
    pub(super) caps: Vec<f64>,
}

impl Ctx<'_, '_> {
    /// `h_fast` and `speed` for the lower bound (see the fields). Per class and layer: the
    /// least `tp · T(tp, mbs) / mbs` over the TP degrees a group on such nodes may use and every
    /// micro-batch size; a stage's replicas cannot process a sample of a layer in less
    /// GPU-time, whatever the plan.
    fn bound_constants(&mut self) {
        let classes = self.class_rep.len();
        let layers = self.layers;
        let max_mb = self.p.options.max_micro_batch.max(1);
        let mut h = vec![vec![f64::INFINITY; layers]; classes];
        for (c, hc) in h.iter_mut().enumerate() {
            let per_node = self.cluster().nodes[self.class_rep[c] as usize].num_gpus;
            // Any degree a group's per-node count may have, not only divisors of the node size.
            for tp in 1..=per_node.min(self.p.options.max_tp) {
                for mbs in 1..=max_mb {
                    let v = self.prefix(c, tp, mbs).clone();
                    for (l, x) in hc.iter_mut().enumerate() {
                        *x = x.min(tp as f64 * (v[l + 1] - v[l]) / mbs as f64);
                    }
                }
            }
        }
        let fast: Vec<f64> = (0..layers)
            .map(|l| h.iter().map(|hc| hc[l]).fold(f64::INFINITY, f64::min))
            .collect();
        self.h_fast = fast.iter().sum();
        let kappa: Vec<f64> = h
            .iter()
            .map(|hc| {
                hc.iter()
                    .zip(&fast)
                    .map(|(a, f)| if *f > 0.0 { a / f } else { 1.0 })
                    .fold(f64::INFINITY, f64::min)
                    .max(1.0)
            })
            .collect();
        self.speed = self
            .cluster()
            .nodes
            .iter()
            .zip(&self.node_class)
            .map(|(n, &c)| n.num_gpus as f64 / kappa[c])
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
    }
}

/// The best plans by Eq. 1, best first; ties keep the first found.
pub(super) struct TopK {
    cap: usize,
    pub(super) items: Vec<(f64, u64, Vec<StageChoice>)>,
}

impl TopK {
    pub(super) fn new(cap: usize) -> TopK {
        TopK {
            cap,
            items: Vec::new(),
        }
    }

    /// The cost a plan must beat to be kept.
    fn bar(&self) -> f64 {
        if self.items.len() < self.cap {
            f64::INFINITY
        } else {
            self.items.last().map_or(f64::INFINITY, |i| i.0)
        }
    }

    fn offer(&mut self, cost: f64, b: u64, stages: Vec<StageChoice>) {
        if cost >= self.bar() {
            return;
        }
        if self
            .items
            .iter()
            .any(|(c, mb, s)| *c == cost && *mb == b && *s == stages)
        {
            return;
        }
        let at = self.items.partition_point(|i| i.0 <= cost);
        self.items.insert(at, (cost, b, stages));
        self.items.truncate(self.cap);
    }
}

/// Eq. 1's terms of the committed stages: Σ and max of the finished stages' tᵢ (their sends to
/// the next stage known), the largest DP + tied-embedding synchronisation, and, per replica, the
/// last committed stage's time without its send to the next stage.
#[derive(Clone, Default)]
struct Prefix {
    sum: f64,
    max: f64,
    sync: f64,
    last: Vec<f64>,
}

/// The most the set of placements seen (per stage count) may hold before it is emptied.
const MAX_SEEN_BYTES: usize = 256 << 20;

/// What the rest of the DFS depends on once stage i is committed: the next stage, stage i's TP
/// degree (its replicas receive the next stage's sends) and the layer bounds from the next
/// stage on, in that order in one vector (looked up by slice).
type MemoKey = Vec<usize>;

#[derive(Default)]
struct MemoEntry {
    /// Prefixes already explored with this key (Σ, max, sync, per-replica partial times).
    seen: Vec<Vec<f64>>,
    /// The subtree was explored completely and holds no complete plan.
    dead: bool,
}

/// The DP-first DFS of Algorithm 1 over one inter-stage plan. A path is cut when a prefix with
/// the same key and no larger Eq. 1 term was explored before (the same completions cost no more
/// after it), when the key's subtree is known to hold no plan, or when the prefix alone costs
/// more than the worst kept plan; none of these changes the best plan.
struct Dfs<'g> {
    groups: &'g [Group],
    b: u64,
    per_mb: u64,
    prefix: Prefix,
    memo: HashMap<MemoKey, MemoEntry>,
    /// The key being looked up (`commit`), and per-replica time buffers to reuse.
    key: MemoKey,
    pool: Vec<Vec<f64>>,
    /// `room[j]`: at most how many layers stages j.. can hold (see `Ctx::max_layers`).
    room: Vec<usize>,
    /// Complete plans reached, and cuts that may have hidden one (for `dead`).
    leaves: u64,
    uncertain: u64,
}

impl Dfs<'_> {
    /// Algorithm 1's `DFS(i, ...)`.
    fn stage(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        i: usize,
        st: State,
        search: &mut Search<'_>,
        top: &mut TopK,
        stats: &mut Stats,
    ) {
        if search.stopped() {
            return;
        }
        let groups = self.groups;
        let s = groups.len();
        if i == s {
            self.leaf(ctx, &st, search, top, stats);
            return;
        }
        let g = &groups[i];
        // InvalidIntraPlan: the heads must split over the stage's TP degree.
        if !ctx.tp_heads_ok(st.tp[i], st.bounds[i], st.bounds[i + 1]) {
            return;
        }
        if ctx.oom(g, &st, i, self.b) {
            if !search.tick() {
                return;
            }
            // Increase TP (lines 30–36): the next degree, data and layers rebalanced.
            if let Some((tp, mbs)) = ctx.escalate(g, st.tp[i], self.per_mb) {
                let mut a = st.clone();
                a.tp[i] = tp;
                a.caps[i] = ctx.capacity(g, tp, &mbs);
                a.mbs[i] = mbs;
                ctx.rebalance_from(groups, &mut a, i);
                self.stage(ctx, i, a, search, top, stats);
                // Unwinding from a stopped search must not rebalance hundreds of stages.
                if search.stopped() {
                    return;
                }
            }
            // Restore and adjust layers (lines 38–41).
            let mut c = st;
            if !ctx.shed_layers(groups, &mut c, i, self.b) {
                return;
            }
            self.commit(ctx, i, c, search, top, stats);
        } else {
            self.commit(ctx, i, st, search, top, stats);
        }
    }

    /// Commits stage i (line 43) and goes on with stage i + 1.
    fn commit(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        i: usize,
        st: State,
        search: &mut Search<'_>,
        top: &mut TopK,
        stats: &mut Stats,
    ) {
        // The stages after i cannot hold the layers left to them: no plan below.
        if ctx.layers - st.bounds[i + 1] > self.room[i + 1] {
            return;
        }
        // Cut branches are not nodes, but late in the search they are most of the work.
        if !search.poll() {
            return;
        }
        // The prefix is restored on every way out; its per-replica times come from a pool of
        // buffers, so a committed stage allocates only what the memo keeps.
        let saved = (self.prefix.sum, self.prefix.max, self.prefix.sync);
        let mut last = self.pool.pop().unwrap_or_default();
        if i > 0 {
            // Stage i − 1's sends to stage i are known now.
            ctx.replica_times_into(self.groups, &st, i - 1, true, &mut last);
            let t = (self.prefix.last.iter())
                .zip(&last)
                .map(|(a, b)| a + b)
                .fold(0.0, f64::max);
            self.prefix.sum += t;
            self.prefix.max = self.prefix.max.max(t);
        }
        ctx.replica_times_into(self.groups, &st, i, false, &mut last);
        let saved_last = std::mem::replace(&mut self.prefix.last, last);
        let sync = ctx.stage_dp(&self.groups[i], &st, i) + ctx.stage_tied(self.groups, &st, i);
        self.prefix.sync = self.prefix.sync.max(sync);
        let p = &self.prefix;
        let last_max = p.last.iter().copied().fold(0.0, f64::max);
        let bound = p.sum + last_max + (self.b as f64 - 1.0) * p.max.max(last_max) + p.sync;
        // Cut by the worst kept plan (a NaN bound is not cut, as before the memo).
        let cut = bound >= top.bar();
        let go_on = !cut && {
            // The memo's key, `MemoKey`'s parts in one vector: looked up by slice, copied only
            // when a new entry is made.
            let key = &mut self.key;
            key.clear();
            key.extend([i + 1, st.tp[i] as usize]);
            key.extend_from_slice(&st.bounds[i + 1..]);
            let dominated = |q: &Vec<f64>| {
                q[0] <= p.sum
                    && q[1] <= p.max
                    && q[2] <= p.sync
                    && q[3..].iter().zip(&p.last).all(|(a, b)| a <= b)
            };
            match self.memo.get_mut(key.as_slice()) {
                Some(e) if e.dead => false,
                Some(e) if e.seen.iter().any(dominated) => {
                    self.uncertain += 1;
                    false
                }
                found => {
                    let mut point = Vec::with_capacity(3 + p.last.len());
                    point.extend([p.sum, p.max, p.sync]);
                    point.extend_from_slice(&p.last);
                    match found {
                        Some(e) => e.seen.push(point),
                        None => {
                            let e = self.memo.entry(key.clone()).or_default();
                            e.seen.push(point);
                        }
                    }
                    true
                }
            }
        };
        if cut {
            self.uncertain += 1;
        }
        if go_on {
            let key = self.key.clone();
            let (leaves, uncertain) = (self.leaves, self.uncertain);
            self.stage(ctx, i + 1, st, search, top, stats);
            if self.leaves == leaves && self.uncertain == uncertain && !search.stopped() {
                if let Some(e) = self.memo.get_mut(key.as_slice()) {
                    e.dead = true;
                }
            }
        }
        let used = std::mem::replace(&mut self.prefix.last, saved_last);
        self.pool.push(used);
        (self.prefix.sum, self.prefix.max, self.prefix.sync) = saved;
    }

    /// A complete plan: its Eq. 1 cost, kept if among the best.
    fn leaf(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        st: &State,
        search: &mut Search<'_>,
        top: &mut TopK,
        stats: &mut Stats,
    ) {
        if !search.tick() {
            return;
        }
        self.leaves += 1;
        stats.complete_plans += 1;
        let p = &self.prefix;
        let last = p.last.iter().copied().fold(0.0, f64::max);
        let cost = p.sum + last + (self.b as f64 - 1.0) * p.max.max(last) + p.sync;
        debug_assert!(
            (cost - ctx.eq1(self.groups, st, self.b)).abs() <= 1e-9 * cost.max(1e-9),
            "incremental Eq. 1 {cost} vs {}",
            ctx.eq1(self.groups, st, self.b)
        );
        search.offer(Seconds(cost));
        if cost < top.bar() {
            let stages = (0..self.groups.len())
                .map(|j| StageChoice {
                    layers: LayerRange {
                        start: st.bounds[j],
                        end: st.bounds[j + 1],
                    },
                    devices: self.groups[j].devices.clone(),
                    tp: st.tp[j],
                    micro_batch_sizes: st.mbs[j].clone(),
                    zero: 0,
                    recompute: Recompute::None,
                    offload: Default::default(),
                })
                .collect();
            top.offer(cost, self.b, stages);
        }
    }
}

impl Metis {
    /// Steps 1–4: stage counts, sizes under `var`, permutations, placements, micro-batches.
    pub(super) fn enumerate(
        &self,
        ctx: &mut Ctx<'_, '_>,
        search: &mut Search<'_>,
        top: &mut TopK,
        stats: &mut Stats,
    ) {
        let cluster = ctx.cluster();
        let n = cluster.num_gpus() as u32;
        let sizes = group_sizes(cluster);
        let classes = ctx.class_rep.len();
        let mut orders: Vec<Vec<usize>> = Vec::new();
        let mut o: Vec<usize> = (0..classes).collect();
        loop {
            orders.push(o.clone());
            if !next_permutation(&mut o) {
                break;
            }
        }
        let batches = common::divisors(ctx.p.global_batch);
        ctx.bound_constants();
        let max_stages = (n as usize).min(ctx.layers);
        // Stage counts from half the GPU count outward: the best plans have many stages (32 of
        // 64 GPUs, 18 of 32), so under a time limit this order finds them early; exhausted, the
        // search keeps the same best Eq. 1 whatever the order.
        let mut stage_counts: Vec<usize> = (1..=max_stages).collect();
        let mid = (n as usize / 2).clamp(1, max_stages);
        stage_counts.sort_by_key(|&s| (s.abs_diff(mid), s));
        for s in stage_counts {
            let lb = n as f64 / s as f64 * (1.0 - self.var);
            let allowed: Vec<u32> = sizes
                .iter()
                .copied()
                .filter(|&z| z as f64 >= lb - 1e-9)
                .collect();
            let mut seen: BTreeSet<PlacementKey> = BTreeSet::new();
            let mut seen_bytes = 0usize;
            let go = partitions(n, s, &allowed, &mut |multiset| {
                // Multisets cut by the bound and placements already seen are not nodes; at
                // 1,024 GPUs they are most of the late search.
                if !search.poll() {
                    return false;
                }
                // The multiset's lower bound on Eq. 1 for each B, against the worst kept plan.
                let k_max = multiset.iter().copied().max().unwrap_or(1) as f64;
                let bar = top.bar();
                let bound_ok: Vec<bool> = batches
                    .iter()
                    .map(|&b| {
                        let per_mb = (ctx.p.global_batch / b) as f64;
                        per_mb * ctx.h_fast * (1.0 / k_max + (b as f64 - 1.0) / ctx.speed) < bar
                    })
                    .collect();
                if !bound_ok.iter().any(|&x| x) {
                    stats.bounded += 1;
                    return true;
                }
                let mut elems = permutation_elements(multiset, self.max_permute_len);
                let mut sequences: BTreeSet<Vec<u32>> = BTreeSet::new();
                loop {
                    if !search.poll() {
                        return false;
                    }
                    let seq: Vec<u32> = elems.iter().flatten().copied().collect();
                    if sequences.insert(seq.clone()) {
                        for order in &orders {
                            for closed in [false, true] {
                                if closed && s < 2 {
                                    continue;
                                }
                                if !search.poll() {
                                    return false;
                                }
                                let groups = if closed {
                                    // The ring-closing rotation: the last stage's group first on
                                    // the node walk, next to the first stage's.
                                    let mut rot = Vec::with_capacity(s);
                                    rot.push(seq[s - 1]);
                                    rot.extend_from_slice(&seq[..s - 1]);
                                    let mut g = place(ctx, order, &rot);
                                    g.rotate_left(1);
                                    g
                                } else {
                                    place(ctx, order, &seq)
                                };
                                let key = placement_key(ctx, &groups);
                                let bytes = 48 + 4 * key.len();
                                if !seen.contains(&key) && seen_bytes + bytes > MAX_SEEN_BYTES {
                                    // Forgetting placements seen costs their re-evaluation
                                    // (same plans, same costs, ties keep the first), never a
                                    // result: at 4,096 GPUs the set grew past 7 GiB a minute.
                                    seen.clear();
                                    seen_bytes = 0;
                                }
                                if !seen.insert(key) {
                                    continue;
                                }
                                seen_bytes += bytes;
                                for (bi, &b) in batches.iter().enumerate() {
                                    if !bound_ok[bi] {
                                        continue;
                                    }
                                    if !search.tick() {
                                        return false;
                                    }
                                    stats.inter_stage_plans += 1;
                                    self.inter_stage(ctx, &groups, b, search, top, stats);
                                    if search.stopped() {
                                        return false;
                                    }
                                }
                            }
                        }
                    }
                    if !next_permutation(&mut elems) {
                        return true;
                    }
                }
            });
            if !go || search.stopped() {
                return;
            }
        }
    }

    /// Algorithm 1 for one (B, stages, device groups): initial DP-first plans, data and layer
    /// load balancing, then the DFS.
    fn inter_stage(
        &self,
        ctx: &mut Ctx<'_, '_>,
        groups: &[Group],
        b: u64,
        search: &mut Search<'_>,
        top: &mut TopK,
        stats: &mut Stats,
    ) {
        let s = groups.len();
        let per_mb = ctx.p.global_batch / b;
        let mut st = State {
            tp: vec![1; s],
            mbs: Vec::with_capacity(s),
            bounds: vec![0; s + 1],
            caps: Vec::with_capacity(s),
        };
        for (i, g) in groups.iter().enumerate() {
            // DP first: the largest DP degree whose micro-batch split is valid (the released
            // code's strategy generator also moves on to higher TP past invalid strategies).
            match ctx.dp_first(g, per_mb) {
                Some((tp, m, cap)) => {
                    st.tp[i] = tp;
                    st.caps.push(cap);
                    st.mbs.push(m);
                }
                None => return,
            }
        }
        // No plan if the stages cannot hold the layers even at their most memory-efficient TP.
        let mut room = vec![0usize; s + 1];
        for j in (0..s).rev() {
            room[j] = room[j + 1] + ctx.max_layers(&groups[j], st.tp[j], s, j, b);
        }
        if room[0] < ctx.layers {
            return;
        }
        ctx.rebalance_from(groups, &mut st, 0);
        let mut dfs = Dfs {
            groups,
            b,
            per_mb,
            room,
            prefix: Prefix::default(),
            memo: HashMap::default(),
            key: Vec::new(),
            pool: Vec::new(),
            leaves: 0,
            uncertain: 0,
        };
        dfs.stage(ctx, 0, st, search, top, stats);
    }
}
