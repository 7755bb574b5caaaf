//! Metis (Um et al., "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs",
//! USENIX ATC '24), §4: hetero-aware device groups, pruned stage ↔ device-group mapping, a
//! DP-first depth-first search over intra-stage plans with OOM detection and TP escalation
//! (Algorithm 1), capacity-aware layer and data load balancing, and plans ranked by the paper's
//! cost, Eq. 1:
//!
//! ```text
//! T* = Σᵢ tᵢ + (B − 1)·maxⱼ tⱼ + DP_all
//! ```
//!
//! Where the paper is silent or its pseudo-code cannot be taken literally, the choice made is
//! marked *(silent)* below; where we follow the released code (github.com/SamsungLabs/Metis)
//! it says so. Unlike the released code, nothing here assumes power-of-two GPU counts, equal
//! nodes, fewer than 10 GPUs per node or a fixed list of GPU types.
//!
//! # The search, step by step
//!
//! 1. **Stage counts and micro-batch counts** (§4.1, Algorithm 1 line 4): every stage count
//!    `S = 1..=min(GPUs, layers)` and every number of micro-batches `B` dividing the global
//!    batch (the global batch is never changed). *(silent)* The order: stage counts from half
//!    the GPU count outward (see "Search time" below).
//! 2. **Device-group sizes** (§4.2.2, first pruning knob): multisets of `S` group sizes summing
//!    to the cluster's GPU count ("all stages fully use the entire GPUs"), each at least
//!    `N_GPUs / S · (1 − var)`, `var = 0.5` (Table 4's caption). *(silent)* Which sizes a group
//!    may have: §2.2 "assumes the number of GPUs is in powers of 2" and the released code
//!    enumerates powers of two only (so it cannot cover 12 GPUs); we take the powers of two plus
//!    every sum of whole nodes' GPU counts — groups that are power-of-two slices or whole
//!    nodes, the O(N·(N + log M)) device groups of Table 1.
//! 3. **Permutations** (second knob): the sizes are ordered over the stages by permuting them;
//!    while there are more than `max_permute_len = 10` (Table 4) elements, groups of the
//!    smallest size are paired into one element — all of them at once, as the released code's
//!    `permute` does (the paper's example pairs g₁g₂ and g₃g₄). The paper counts these
//!    permutations over group *sizes* (binom(5, 1) = 5 for four one-GPU groups and one of two).
//! 4. **Placement and uniqueness** (§4.1 "Expanding device groups"). *(silent)* How the sized
//!    groups take GPUs: the released code fills ranks contiguously along a permutation of the
//!    GPU types; we fill along every permutation of *node classes* (GPU type, GPUs per node,
//!    bandwidths; a node with a pair-bandwidth override is a class of its own), nodes of a
//!    class in index order, and also take each fill's ring-closing rotation (the last stage's
//!    group first on the walk, so the first and last stages — which share a tied embedding —
//!    can sit on one node; the paper's permutations of device groups over stages include these
//!    placements, a contiguous fill alone does not). A group mixing GPU types is heterogeneous.
//!    Two placements are the same candidate when every stage's group has the same three factors
//!    of §4.1 — size, GPU types, and how the GPUs of each type sit on nodes (node class and
//!    count per node) — and adjacent stages share a node at the same boundaries.
//! 5. **Algorithm 1** for every (B, stages, device groups). Every stage starts with the largest
//!    DP degree whose micro-batch split is valid (`dp = group size, tp = 1` when it is; the
//!    released code's strategy generator likewise moves on to higher TP past invalid
//!    strategies, whereas a literal line 26 would end the path), micro-batch `GBS/B/dp` per
//!    replica or, on a heterogeneous group, the data load balancer's split; the layer load
//!    balancer splits the layers; then the DP-first DFS walks the stages. A stage whose memory
//!    exceeds its GPUs' (DetectOOM) explores two paths: TP escalation, recursing on the same
//!    stage with data and layers rebalanced — *(silent)* the pseudo-code's `(DP−1, TP+1)`
//!    cannot keep `dp·tp` equal to the group size; the text says "increasing the TP degree while
//!    decreasing the DP degree" and the released code doubles TP: we take the next degree that
//!    divides the group and its per-node counts (a TP group stays inside a node, §4.2.1) and
//!    splits the micro-batch validly; and layer rebalancing at the current TP, moving the OOM
//!    stage's layers to the *remaining* stages — *(silent)* those after it, which the DFS has
//!    not committed — in proportion to their capacity until it fits, or dropping the path. A
//!    stage that fits keeps its DP-first plan. Invalid intra-stage plans (a homogeneous stage
//!    whose replicas cannot split the micro-batch evenly, a replica with no sample or more than
//!    `max_micro_batch`, TP beyond `max_tp`, TP not splitting the attention heads) end a path.
//! 6. **Capacity-aware load balancing** (§4.2.2 part 3). A stage's capacity is its throughput
//!    on the whole model under its intra-stage plan (S = 1: one over the slowest replica's time
//!    for all layers); a layer's load is its time on the first node's GPU type at tp = 1,
//!    mbs = 1, normalised (as the released code). Layers are cut so that each stage's share of
//!    the load follows its share of the capacity, then boundary layers move between neighbours
//!    while that lowers the largest load/capacity ratio (the released code's adjustment pass).
//!    Data: a heterogeneous group splits the micro-batch over its replicas in proportion to
//!    their throughput (largest remainder, every replica at least one sample, §4.1's
//!    Σ mbsᵢ = bs); *(silent)* throughput is measured at the even share (the released code
//!    uses 1).
//! 7. **Ranking**: every complete plan is costed with Eq. 1 and the best `ranked` are kept.
//!    The answer is the best of them by Eq. 1 that hetplan's estimate confirms fits.
//!
//! # Metis's cost (Eq. 1) in hetplan's terms
//!
//! Computed from hetplan's parts, not from `cost::estimate`: `tᵢ` is the per-micro-batch
//! latency of stage i's slowest replica — the forward and backward times of its layers from
//! `problem.compute` (`ComputeTimes::layer_time`, the numbers `cost::layer_costs` sums; Metis's
//! per-layer profile summed over the stage's layers, §4.3), the tensor-parallel all-reduces of
//! each layer (`cost::comm::collective_time` inside the node; Metis profiles them), and the
//! pipeline sends to both neighbours (`cost::comm::p2p_time`: activation size over the link
//! between the stages, §4.2.1). `DP_all` is the largest over stages of the gradient all-reduce
//! over the stage's DP group (`collective_time`, whose slowest link sets the pace: Metis's
//! "slowest bandwidth within the DP group"; the released code also takes the maximum).
//! *(silent)* With tied embeddings, `DP_all` also counts the embedding's gradient all-reduce
//! between the first and the last stage: §4.2.1 prices "the model synchronization parameters"
//! and Metis's profiler records `embedding_grads_all_reduce_time_ms`; without it, on
//! embedding-heavy models Metis picks plans several times slower by hetplan's estimate. Eq. 1
//! has no optimizer term (the released code adds one) and overlaps nothing; hetplan's estimate
//! (Mist's form, overlap and optimizer included) is what `Outcome::estimate` reports, and
//! `Metis::cost` prices any plan in Metis's space. Where `problem.compute` is a profile,
//! unprofiled TP/micro-batch points are composed as the profile's interpolation says
//! (`profile::Interpolation::MetisPowersOfTwo` is Metis's sum of profiled powers of two).
//!
//! Memory (DetectOOM) is hetplan's memory model evaluated per stage from per-layer prefix sums
//! (weights, gradients and Adam states of the stage's parameters, the 1F1B in-flight
//! activations `min(S − i, B)`, the logits buffer, allocator overhead and the runtime reserve) —
//! the analogue of Metis's profiled per-layer memory — so the search and the estimate agree on
//! what fits.
//!
//! # Bounds, exact cuts and determinism
//!
//! `Search::tick` is called for every inter-stage plan (B, stages, device groups), every DFS
//! node that branches on an OOM, and every complete plan costed; the search stops cleanly when
//! it returns false. Four cuts keep the exhaustive DFS of Algorithm 1 tractable without changing
//! the best plan: a size multiset whose lower bound on Eq. 1 (best per-sample GPU-time of every
//! layer, fill over the largest group, steady state over all GPUs) exceeds the worst kept plan
//! for every B is skipped; a (B, placement) whose stages cannot hold the layers even at their
//! most memory-efficient TP is skipped, and so is a DFS node whose remaining stages cannot hold
//! the remaining layers; a DFS path whose committed stages already cost more than the worst kept
//! plan is cut; and a path is cut when a prefix with the same continuation (next stage, layer
//! bounds from it on, last TP degree) and no larger Eq. 1 terms was explored before, or whose
//! continuation is known to hold no plan. Enumeration orders are fixed and ties keep the first
//! plan found; hash maps serve only as caches and memos and are never iterated.
//!
//! # Search time
//!
//! `cargo bench -p hetplan --bench metis` (release, one core of a 2-core x86-64 VM), T4+V100
//! with GPT-3 (the paper's §5.4 set-up, its numbers in parentheses): 16 GPUs 1.0 s (1.7 s),
//! 32 GPUs 30 s (58.9 s), 64 GPUs 2,753 s (600 s; measured at low priority beside other builds)
//! — 332 million candidates, best Eq. 1 6.95 s with 32 stages. With the released code's
//! permutation length of 4: 0.07 s, 1.5 s and 202 s. The space is what grows: at 64 GPUs it has
//! about 5 million distinct placements (× 8 micro-batch counts), and the best plans have many
//! stages (32 of them at 64 GPUs, 18 at 32; at 32 GPUs the best 8-stage plan is 4% behind), so
//! no lower bound cuts them; the cuts above keep the answer exact but cannot make the
//! exhaustive search fast. Under a time limit the search returns its best plan so far; stage
//! counts are visited from half the GPU count outward, which finds the many-stage plans early:
//! at 64 GPUs after 60 s, 8.70 s by Eq. 1 (25% above the optimum; 9.85 s visiting stage counts
//! in increasing order), and with permutation length 4 the optimum of that space, 6.99 s
//! (8.33 s in increasing order).

use super::common::{self, StageChoice};
use super::{Outcome, Planner, PlannerError, Problem, Ranked, Search};
use crate::cluster::{Cluster, GpuId};
use crate::cost::comm::{collective_time, p2p_time, Collective};
use crate::cost::{memory, LayerShape};
use crate::model::{LayerKind, OpKind, TpSplit};
use crate::plan::{LayerRange, Plan, Recompute, Schedule};
use crate::units::{Bytes, Seconds};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The Metis planner with its two pruning knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metis {
    /// `var` of §4.2.2: device groups smaller than `N_GPUs / S · (1 − var)` are not explored.
    pub var: f64,
    /// The maximum permutation length of §4.2.2.
    pub max_permute_len: usize,
    /// How many of the best plans by Eq. 1 to keep (`Outcome::ranked`).
    pub ranked: usize,
}

impl Default for Metis {
    /// The paper's settings (Table 4's caption): `var = 0.5`, permutation length 10.
    fn default() -> Self {
        Metis {
            var: 0.5,
            max_permute_len: 10,
            ranked: 10,
        }
    }
}

impl Planner for Metis {
    fn name(&self) -> &'static str {
        "metis"
    }

    fn description(&self) -> &'static str {
        "Metis (Um et al., USENIX ATC '24): hetero-aware device groups, pruned stage mapping, \
         DP-first DFS with OOM-driven TP escalation, capacity-aware load balancing, Eq. 1"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        common::nothing_to_plan(problem)?;
        let mut ctx = Ctx::new(problem);
        let mut top = TopK::new(self.ranked.max(1));
        let mut stats = Stats::default();
        self.enumerate(&mut ctx, search, &mut top, &mut stats);
        self.finish(problem, search, top, &stats)
    }
}

/// Counters for the notes.
#[derive(Default)]
struct Stats {
    /// Size multisets cut by the lower bound for every B.
    bounded: u64,
    inter_stage_plans: u64,
    complete_plans: u64,
}

/// A device group: the GPUs of one stage.
#[derive(Clone, Debug)]
struct Group {
    /// Sorted by (node, local): replica r is `devices[r·tp..(r+1)·tp]`.
    devices: Vec<GpuId>,
    /// (node, GPUs of the group on it), node-ordered.
    per_node: Vec<(u32, u32)>,
    /// More than one GPU type.
    hetero: bool,
    /// Interned (node class, GPUs on the node) sequence in node order: everything the
    /// intra-stage choices of a group depend on (see `Ctx::shape_of`).
    shape: u32,
}

impl Group {
    fn size(&self) -> u32 {
        self.devices.len() as u32
    }

    /// GPUs of the group on `node`: they share its network (the `concurrent` argument of
    /// `cost::comm`).
    fn on_node(&self, node: u32) -> usize {
        self.per_node
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |&(_, c)| c as usize)
    }
}

/// The DFS state of one inter-stage plan: per stage its TP degree, its replicas' micro-batch
/// sizes, and the layer boundaries (`bounds[i]..bounds[i+1]` are stage i's layers).
#[derive(Clone, Debug)]
struct State {
    tp: Vec<u32>,
    mbs: Vec<Vec<u64>>,
    bounds: Vec<usize>,
    /// Each stage's capacity for the layer load balancer (`Ctx::capacity`).
    caps: Vec<f64>,
}

/// Per-TP-degree prefix sums over layers for the memory model and TP validity.
struct TpPrefix {
    /// Parameters held by one TP rank, every op counted.
    params: Vec<f64>,
    /// Of which tied to the embedding (not held again when the embedding is on the stage).
    tied: Vec<f64>,
    /// Saved activation bytes per token.
    saved: Vec<f64>,
    /// Per layer: the head's logits buffer per token (0 elsewhere).
    transient: Vec<f64>,
    /// Layers whose attention heads this degree cannot split.
    bad: Vec<u32>,
}

/// A cache keyed by (a, b, c): a dense table where the key space is small, a map beyond.
struct Table<T> {
    dims: (usize, usize, usize),
    dense: Vec<Option<T>>,
    sparse: HashMap<(usize, u64, u64), T>,
}

impl<T> Table<T> {
    fn new(a: usize, b: usize, c: usize) -> Table<T> {
        let n = a.saturating_mul(b).saturating_mul(c);
        let dense = if n <= 1 << 20 {
            (0..n).map(|_| None).collect()
        } else {
            Vec::new()
        };
        Table {
            dims: (a, b, c),
            dense,
            sparse: HashMap::new(),
        }
    }

    fn index(&self, a: usize, b: u64, c: u64) -> Option<usize> {
        let (da, db, dc) = self.dims;
        (!self.dense.is_empty() && a < da && (b as usize) < db && (c as usize) < dc)
            .then(|| (a * db + b as usize) * dc + c as usize)
    }

    fn get(&self, a: usize, b: u64, c: u64) -> Option<&T> {
        match self.index(a, b, c) {
            Some(i) => self.dense[i].as_ref(),
            None => self.sparse.get(&(a, b, c)),
        }
    }

    fn insert(&mut self, a: usize, b: u64, c: u64, v: T) {
        match self.index(a, b, c) {
            Some(i) => self.dense[i] = Some(v),
            None => {
                self.sparse.insert((a, b, c), v);
            }
        }
    }
}

/// A group's DP-first intra-stage plan: (TP degree, replica micro-batch sizes, capacity).
type DpFirst = (u32, Vec<u64>, f64);

/// Node classes, caches and the problem's constants.
struct Ctx<'a, 'p> {
    p: &'a Problem<'p>,
    layers: usize,
    /// Class of each node.
    node_class: Vec<usize>,
    /// Per class: its first node.
    class_rep: Vec<u32>,
    tokens_per_sample: f64,
    elem: f64,
    grad_elem: f64,
    state_bytes: f64,
    /// Embedding layers before layer l.
    emb: Vec<u32>,
    /// Parameters of ops tied to the embedding before layer l (unsharded).
    tied_raw: Vec<f64>,
    head_layers: Vec<usize>,
    /// Normalised per-layer loads (prefix sums), for the layer load balancer.
    loads: Vec<f64>,
    time_cache: Table<Vec<f64>>,
    tp_cache: Table<TpPrefix>,
    least_cache: HashMap<(usize, u64, u64), f64>,
    /// Interned group shapes (`Group::shape`).
    shapes: HashMap<Vec<(usize, u32)>, u32>,
    /// Per (shape, micro-batch samples): the DP-first (TP, replica micro-batches, capacity).
    first_cache: HashMap<(u32, u64), Option<DpFirst>>,
    /// Per (shape, TP, micro-batch samples, in-flight micro-batches): `max_layers`.
    room_cache: HashMap<(u32, u32, u64, u64), usize>,
    /// Lower-bound constants: the whole model's GPU-seconds per sample at the best class, TP
    /// degree and micro-batch size of every layer (H_fast), and Σ over GPUs of 1/κ, κ being
    /// the smallest ratio of a GPU class's per-layer GPU-seconds to the best.
    h_fast: f64,
    speed: f64,
}

impl<'a, 'p> Ctx<'a, 'p> {
    fn new(p: &'a Problem<'p>) -> Ctx<'a, 'p> {
        let cluster = p.cluster;
        let model = p.model;
        // Node classes: nodes that are interchangeable for a device group.
        let classes = cluster.node_classes();
        let mut node_class = vec![0; cluster.nodes.len()];
        for (c, class) in classes.iter().enumerate() {
            for &n in &class.nodes {
                node_class[n as usize] = c;
            }
        }
        let class_rep: Vec<u32> = classes.iter().map(|c| c.nodes[0]).collect();
        let layers = model.layers.len();
        let mut emb = vec![0u32; layers + 1];
        for (l, layer) in model.layers.iter().enumerate() {
            emb[l + 1] = emb[l] + u32::from(layer.kind == LayerKind::Embedding);
        }
        let mut tied_raw = vec![0.0; layers + 1];
        for (l, layer) in model.layers.iter().enumerate() {
            let t: f64 = layer
                .ops
                .iter()
                .filter(|o| o.tied)
                .map(|o| o.params as f64)
                .sum();
            tied_raw[l + 1] = tied_raw[l] + t;
        }
        let head_layers = (0..layers)
            .filter(|&l| model.layers[l].kind == LayerKind::Head)
            .collect();
        let (w, g, o) = memory::state_bytes(p.options.precision);
        let elem = p.options.precision.element_bytes();
        let mut ctx = Ctx {
            p,
            layers,
            node_class,
            class_rep,
            tokens_per_sample: model.tokens_per_sample(p.seq_len) as f64,
            elem,
            grad_elem: elem,
            state_bytes: w + g + o,
            emb,
            tied_raw,
            head_layers,
            loads: Vec::new(),
            time_cache: Table::new(
                classes.len(),
                p.options.max_tp as usize + 1,
                p.options.max_micro_batch as usize + 1,
            ),
            tp_cache: Table::new(1, 1, p.options.max_tp as usize + 1),
            least_cache: HashMap::new(),
            shapes: HashMap::new(),
            first_cache: HashMap::new(),
            room_cache: HashMap::new(),
            h_fast: 0.0,
            speed: 0.0,
        };
        // Layer loads: the first GPU type's times at tp = 1, mbs = 1, normalised.
        let first = ctx.node_class[0];
        let raw = ctx.prefix(first, 1, 1).clone();
        let total = raw[layers].max(f64::MIN_POSITIVE);
        ctx.loads = raw.iter().map(|t| t / total).collect();
        ctx
    }

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

    fn cluster(&self) -> &'p Cluster {
        self.p.cluster
    }

    /// Prefix sums over layers of one replica's per-micro-batch time on a node of `class` at
    /// (`tp`, `mbs`): forward + backward + TP all-reduces.
    fn prefix(&mut self, class: usize, tp: u32, mbs: u64) -> &Vec<f64> {
        if self.time_cache.get(class, tp as u64, mbs).is_none() {
            let v = self.compute_prefix(class, tp, mbs);
            self.time_cache.insert(class, tp as u64, mbs, v);
        }
        self.time_cache
            .get(class, tp as u64, mbs)
            .expect("just inserted")
    }

    fn compute_prefix(&self, class: usize, tp: u32, mbs: u64) -> Vec<f64> {
        let p = self.p;
        let rep = self.class_rep[class];
        let tokens = mbs as f64 * self.tokens_per_sample;
        let elem = self.elem;
        let cluster = p.cluster;
        let gpu = &cluster.gpu_types[cluster.nodes[rep as usize].gpu_type.0];
        let group: Vec<GpuId> = (0..tp)
            .map(|l| GpuId {
                node: rep,
                local: l,
            })
            .collect();
        let shape = LayerShape {
            mbs,
            seq: p.seq_len,
            tp,
            sequence_parallel: false,
            precision: p.options.precision,
        };
        let mut v = Vec::with_capacity(p.model.layers.len() + 1);
        v.push(0.0);
        let mut acc = 0.0;
        for (l, layer) in p.model.layers.iter().enumerate() {
            let lt = p.compute.layer_time(gpu, p.model, l, shape);
            let mut t = lt.forward.get() + lt.backward.get();
            if tp > 1 && !lt.includes_tp_comm {
                let bytes = Bytes(tokens * layer.tp_comm_bytes_per_token * elem / 2.0);
                let one =
                    collective_time(cluster, &group, bytes, Collective::AllReduce, &|_| 0).get();
                t += one * (layer.tp_allreduces_fwd + layer.tp_allreduces_bwd) as f64;
            }
            acc += t;
            v.push(acc);
        }
        v
    }

    fn time(&mut self, class: usize, tp: u32, mbs: u64, a: usize, b: usize) -> f64 {
        let v = self.prefix(class, tp, mbs);
        v[b] - v[a]
    }

    fn tp_prefix(&mut self, tp: u32) -> &TpPrefix {
        if self.tp_cache.get(0, 0, tp as u64).is_none() {
            let t = self.compute_tp_prefix(tp);
            self.tp_cache.insert(0, 0, tp as u64, t);
        }
        self.tp_cache.get(0, 0, tp as u64).expect("just inserted")
    }

    fn compute_tp_prefix(&self, tp: u32) -> TpPrefix {
        let p = self.p;
        {
            let model = p.model;
            let n = model.layers.len();
            let mut t = TpPrefix {
                params: vec![0.0; n + 1],
                tied: vec![0.0; n + 1],
                saved: vec![0.0; n + 1],
                transient: vec![0.0; n],
                bad: vec![0; n + 1],
            };
            let tpf = tp.max(1) as f64;
            for (l, layer) in model.layers.iter().enumerate() {
                let mut tied = 0.0;
                let mut bad = false;
                let mut trans: f64 = 0.0;
                for op in &layer.ops {
                    let shard = if op.params_sharded || matches!(op.kind, OpKind::Opaque { .. }) {
                        tpf
                    } else {
                        1.0
                    };
                    if op.tied {
                        tied += op.params as f64 / shard;
                    }
                    match op.kind {
                        OpKind::Attention {
                            heads, kv_heads, ..
                        } => {
                            let tpu = tp as u64;
                            if !heads.is_multiple_of(tpu)
                                || !crate::plan::validate::tp_fits_kv_heads(tpu, kv_heads)
                            {
                                bad = true;
                            }
                        }
                        OpKind::Gemm { n, split, .. }
                            if split == TpSplit::Column && layer.kind == LayerKind::Head =>
                        {
                            trans = trans.max(2.0 * n as f64 / tpf);
                        }
                        _ => {}
                    }
                }
                t.params[l + 1] = t.params[l] + memory::stage_params(model, l..l + 1, tp);
                t.tied[l + 1] = t.tied[l] + tied;
                t.saved[l + 1] = t.saved[l]
                    + memory::layer_saved_bytes(
                        layer,
                        1.0,
                        p.seq_len,
                        tp,
                        false,
                        false,
                        p.options.precision,
                        p.options.engine,
                    );
                t.transient[l] = trans;
                t.bad[l + 1] = t.bad[l] + u32::from(bad);
            }
            t
        }
    }

    /// Whether `tp` splits the attention heads of layers `a..b`.
    fn tp_heads_ok(&mut self, tp: u32, a: usize, b: usize) -> bool {
        let t = self.tp_prefix(tp);
        t.bad[b] == t.bad[a]
    }

    /// Parameters of layers `a..b` on one TP rank.
    fn params(&mut self, tp: u32, a: usize, b: usize) -> f64 {
        let has_emb = self.emb[b] > self.emb[a];
        let t = self.tp_prefix(tp);
        let tied = if has_emb { t.tied[b] - t.tied[a] } else { 0.0 };
        t.params[b] - t.params[a] - tied
    }

    /// Peak bytes of one GPU of a replica holding layers `a..b` at (`tp`, `mbs`) with
    /// `inflight` micro-batches of activations (hetplan's memory model, no ZeRO, no
    /// recomputation, no offloading).
    fn memory(&mut self, tp: u32, mbs: u64, a: usize, b: usize, inflight: f64) -> f64 {
        let states = self.params(tp, a, b) * self.state_bytes;
        let tokens = mbs as f64 * self.tokens_per_sample;
        let t = self
            .tp_cache
            .get(0, 0, tp as u64)
            .expect("params() filled it");
        let act = (t.saved[b] - t.saved[a]) * tokens * inflight;
        let trans = self
            .head_layers
            .iter()
            .filter(|&&l| l >= a && l < b)
            .map(|&l| t.transient[l] * tokens)
            .fold(0.0, f64::max);
        memory::device_bytes(states + act + trans)
    }

    /// At most how many layers stage i of `s` (with `b` micro-batches) can hold at any TP degree
    /// from `tp` up (DP-first splits): no layer takes less memory than the smallest layer's
    /// weights, gradients, optimizer states and in-flight activations.
    fn max_layers(&mut self, g: &Group, tp: u32, s: usize, i: usize, b: u64) -> usize {
        let per_mb = self.p.global_batch / b;
        let inflight = memory::in_flight(Schedule::OneFOneB, s, i, b);
        let key = (g.shape, tp, per_mb, inflight.to_bits());
        if let Some(&v) = self.room_cache.get(&key) {
            return v;
        }
        let v = self.compute_max_layers(g, tp, per_mb, inflight);
        self.room_cache.insert(key, v);
        v
    }

    fn compute_max_layers(&mut self, g: &Group, tp: u32, per_mb: u64, inflight: f64) -> usize {
        let mut best = 0usize;
        let mut next = Some(tp);
        while let Some(t) = next {
            if let Some(mbs) = self.data_lb(g, t, per_mb) {
                let mut fit = usize::MAX;
                for (r, &m) in mbs.iter().enumerate() {
                    let cap = self.cluster().gpu(g.devices[r * t as usize]).memory.get();
                    let room = memory::allocatable_bytes(cap);
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

    /// The interned shape of a group's GPUs: (node class, count) per node, in node order. Two
    /// groups of one shape have the same replica classes in the same order, the same valid TP
    /// degrees and the same memory, so their intra-stage choices are the same.
    fn shape_of(&mut self, per_node: &[(u32, u32)]) -> u32 {
        let key: Vec<(usize, u32)> = per_node
            .iter()
            .map(|&(n, c)| (self.node_class[n as usize], c))
            .collect();
        let next = self.shapes.len() as u32;
        *self.shapes.entry(key).or_insert(next)
    }

    /// Algorithm 1's starting point for a group (DP first: the lowest valid TP degree) and
    /// that plan's capacity, cached per shape.
    fn dp_first(&mut self, g: &Group, per_mb: u64) -> Option<DpFirst> {
        let key = (g.shape, per_mb);
        if let Some(v) = self.first_cache.get(&key) {
            return v.clone();
        }
        let v = self.escalate(g, 0, per_mb).map(|(tp, m)| {
            let cap = self.capacity(g, tp, &m);
            (tp, m, cap)
        });
        self.first_cache.insert(key, v.clone());
        v
    }

    /// Class of the node holding replica r.
    fn replica_class(&self, g: &Group, tp: u32, r: usize) -> usize {
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
    fn escalate(&mut self, g: &Group, tp: u32, per_mb: u64) -> Option<(u32, Vec<u64>)> {
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
    fn capacity(&mut self, g: &Group, tp: u32, mbs: &[u64]) -> f64 {
        let mut worst: f64 = 0.0;
        for (r, &m) in mbs.iter().enumerate() {
            let c = self.replica_class(g, tp, r);
            worst = worst.max(self.time(c, tp, m, 0, self.layers));
        }
        1.0 / worst.max(f64::MIN_POSITIVE)
    }

    /// DetectOOM for stage i of `s` stages with `b` micro-batches.
    fn oom(&mut self, g: &Group, st: &State, i: usize, b: u64) -> bool {
        let s = st.tp.len();
        let inflight = memory::in_flight(Schedule::OneFOneB, s, i, b);
        let (lo, hi) = (st.bounds[i], st.bounds[i + 1]);
        let tp = st.tp[i];
        let cluster = self.cluster();
        for (r, &m) in st.mbs[i].iter().enumerate() {
            let cap = cluster.gpu(g.devices[r * tp as usize]).memory.get();
            if self.memory(tp, m, lo, hi, inflight) > cap {
                return true;
            }
        }
        false
    }

    /// Re-splits layers `bounds[from]..L` over stages `from..S` by capacity.
    fn rebalance_from(&mut self, groups: &[Group], st: &mut State, from: usize) {
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
    fn shed_layers(&mut self, groups: &[Group], st: &mut State, i: usize, b: u64) -> bool {
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

    /// The gradient all-reduce of stage i over its DP group.
    fn stage_dp(&mut self, g: &Group, st: &State, i: usize) -> f64 {
        let tp = st.tp[i] as usize;
        let dp = g.devices.len() / tp;
        if dp <= 1 {
            return 0.0;
        }
        let (a, b) = (st.bounds[i], st.bounds[i + 1]);
        let bytes = Bytes(self.params(st.tp[i], a, b) * self.grad_elem);
        let group: Vec<GpuId> = (0..dp).map(|r| g.devices[r * tp]).collect();
        let conc = |node: u32| g.on_node(node);
        collective_time(self.cluster(), &group, bytes, Collective::AllReduce, &conc).get()
    }

    /// The tied embedding's gradient all-reduce between the first and the last stage, as stage
    /// i takes part in it (the same pairing hetplan's estimate uses; Megatron runs it with the
    /// DP gradient reduction).
    fn stage_tied(&mut self, groups: &[Group], st: &State, i: usize) -> f64 {
        let s = groups.len();
        let (a, b) = (st.bounds[i], st.bounds[i + 1]);
        let embedding_here = self.emb[b] > self.emb[a];
        let tied_here = self.tied_raw[b] - self.tied_raw[a];
        let tied = if tied_here > 0.0 && !embedding_here {
            tied_here
        } else if embedding_here && i == 0 {
            self.tied_raw[self.layers] - self.tied_raw[b]
        } else {
            0.0
        };
        if tied <= 0.0 {
            return 0.0;
        }
        let other = if embedding_here { s - 1 } else { 0 };
        let g = &groups[i];
        let pair = [g.devices[0], groups[other].devices[0]];
        let bytes = Bytes(tied / st.tp[i].max(1) as f64 * self.grad_elem);
        let conc = |node: u32| g.on_node(node);
        collective_time(self.cluster(), &pair, bytes, Collective::AllReduce, &conc).get()
    }

    /// Metis's Eq. 1 for a complete plan.
    fn eq1(&mut self, groups: &[Group], st: &State, b: u64) -> f64 {
        let mut sum = 0.0;
        let mut max: f64 = 0.0;
        let mut dp_all: f64 = 0.0;
        for i in 0..groups.len() {
            let own = self.replica_times(groups, st, i, false);
            let next = self.replica_times(groups, st, i, true);
            let ti = own
                .iter()
                .zip(&next)
                .map(|(a, b)| a + b)
                .fold(0.0, f64::max);
            sum += ti;
            max = max.max(ti);
            let sync = self.stage_dp(&groups[i], st, i) + self.stage_tied(groups, st, i);
            dp_all = dp_all.max(sync);
        }
        sum + (b as f64 - 1.0) * max + dp_all
    }

    /// Per replica of stage i: its compute and TP time plus its send to the previous stage, or
    /// (`next`) its send to the next stage. Eq. 1's tᵢ of a replica is the sum of the two.
    fn replica_times(&mut self, groups: &[Group], st: &State, i: usize, next: bool) -> Vec<f64> {
        let s = groups.len();
        let model = self.p.model;
        let cluster = self.cluster();
        let g = &groups[i];
        let tp = st.tp[i];
        let tpu = tp as usize;
        let (lo, hi) = (st.bounds[i], st.bounds[i + 1]);
        let conc = |node: u32| g.on_node(node);
        let mut out = Vec::with_capacity(st.mbs[i].len());
        for (r, &m) in st.mbs[i].iter().enumerate() {
            let tokens = m as f64 * self.tokens_per_sample;
            let from = g.devices[r * tpu];
            let mut t = 0.0;
            if next {
                if i + 1 < s {
                    let nx = &groups[i + 1];
                    let ntp = st.tp[i + 1] as usize;
                    let ndp = nx.devices.len() / ntp;
                    let out_b = model.layers[hi - 1].output_bytes_per_token;
                    let bytes = Bytes(tokens * out_b * self.elem / 2.0 / tp as f64);
                    let to = nx.devices[(r % ndp) * ntp];
                    t += p2p_time(cluster, from, to, bytes, conc(from.node) as f64).get();
                }
            } else {
                let c = self.replica_class(g, tp, r);
                t += self.time(c, tp, m, lo, hi);
                if i > 0 {
                    let pv = &groups[i - 1];
                    let ptp = st.tp[i - 1] as usize;
                    let pdp = pv.devices.len() / ptp;
                    let out_b = model.layers[lo - 1].output_bytes_per_token;
                    let bytes = Bytes(tokens * out_b * self.elem / 2.0 / tp as f64);
                    let to = pv.devices[(r % pdp) * ptp];
                    t += p2p_time(cluster, from, to, bytes, conc(from.node) as f64).get();
                }
            }
            out.push(t);
        }
        out
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

/// The sizes a device group may have: powers of two up to the GPU count, and every sum of whole
/// nodes' GPU counts. Ascending.
fn group_sizes(cluster: &Cluster) -> Vec<u32> {
    let n = cluster.num_gpus();
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for node in &cluster.nodes {
        let c = node.num_gpus as usize;
        for v in (c..=n).rev() {
            if reach[v - c] {
                reach[v] = true;
            }
        }
    }
    let mut p = 1usize;
    while p <= n {
        reach[p] = true;
        p *= 2;
    }
    (1..=n).filter(|&v| reach[v]).map(|v| v as u32).collect()
}

/// Calls `f` with every non-decreasing sequence of `parts` sizes from `sizes` (ascending)
/// summing to `total`; stops when `f` returns false (and returns false).
fn partitions(total: u32, parts: usize, sizes: &[u32], f: &mut dyn FnMut(&[u32]) -> bool) -> bool {
    fn rec(
        rem: u64,
        left: usize,
        from: usize,
        sizes: &[u32],
        acc: &mut Vec<u32>,
        f: &mut dyn FnMut(&[u32]) -> bool,
    ) -> bool {
        if left == 0 {
            return rem != 0 || f(acc);
        }
        let Some(&largest) = sizes.last() else {
            return true;
        };
        if (largest as u64) * (left as u64) < rem {
            return true;
        }
        for (idx, &z) in sizes.iter().enumerate().skip(from) {
            if (z as u64) * (left as u64) > rem {
                break;
            }
            acc.push(z);
            let go = rec(rem - z as u64, left - 1, idx, sizes, acc, f);
            acc.pop();
            if !go {
                return false;
            }
        }
        true
    }
    rec(total as u64, parts, 0, sizes, &mut Vec::new(), f)
}

/// The elements to permute (§4.2.2): while there are more than `max_len`, the groups of the
/// smallest size are paired up — all of them at once, or as many pairs as are needed if more,
/// as the released code's `permute` does (the paper's example pairs g₁g₂ and g₃g₄ of four
/// one-GPU groups); a pair is one element of their total size. Sorted.
fn permutation_elements(sizes: &[u32], max_len: usize) -> Vec<Vec<u32>> {
    let total = |e: &Vec<u32>| e.iter().map(|&x| x as u64).sum::<u64>();
    let mut elems: Vec<Vec<u32>> = sizes.iter().map(|&s| vec![s]).collect();
    elems.sort_by_key(total);
    let max_len = max_len.max(1);
    while elems.len() > max_len {
        let need = elems.len() - max_len;
        let smallest = total(&elems[0]);
        let k = elems.iter().take_while(|e| total(e) == smallest).count();
        if k < 2 {
            break;
        }
        let pairs = need.max(k / 2).min(k / 2);
        let rest = elems.split_off(2 * pairs);
        let mut merged: Vec<Vec<u32>> = elems
            .chunks(2)
            .map(|p| p.iter().flatten().copied().collect())
            .collect();
        merged.extend(rest);
        merged.sort_by_key(total);
        elems = merged;
    }
    elems.sort();
    elems
}

/// The next lexicographic permutation of `v` in place; false after the last.
fn next_permutation<T: Ord>(v: &mut [T]) -> bool {
    if v.len() < 2 {
        return false;
    }
    let mut i = v.len() - 1;
    while i > 0 && v[i - 1] >= v[i] {
        i -= 1;
    }
    if i == 0 {
        return false;
    }
    let mut j = v.len() - 1;
    while v[j] <= v[i - 1] {
        j -= 1;
    }
    v.swap(i - 1, j);
    v[i..].reverse();
    true
}

/// Places an ordered size sequence on the cluster: stages take consecutive GPUs along the nodes
/// of the classes in `order` (nodes of a class in index order).
fn place(ctx: &mut Ctx<'_, '_>, order: &[usize], seq: &[u32]) -> Vec<Group> {
    let cluster = ctx.cluster();
    let node_class = &ctx.node_class;
    let walk: Vec<u32> = order
        .iter()
        .flat_map(|&c| {
            (0..cluster.nodes.len() as u32).filter(move |&n| node_class[n as usize] == c)
        })
        .collect();
    let mut pos = 0usize;
    let mut used = 0u32;
    let mut groups = Vec::with_capacity(seq.len());
    for &size in seq {
        let mut need = size;
        let mut devices = Vec::with_capacity(size as usize);
        let mut per_node: Vec<(u32, u32)> = Vec::new();
        while need > 0 {
            let node = walk[pos];
            let cap = cluster.nodes[node as usize].num_gpus;
            let take = need.min(cap - used);
            devices.extend((used..used + take).map(|l| GpuId { node, local: l }));
            per_node.push((node, take));
            used += take;
            need -= take;
            if used == cap {
                pos += 1;
                used = 0;
            }
        }
        devices.sort();
        per_node.sort();
        let t0 = cluster.gpu_type_of(devices[0]);
        let hetero = devices.iter().any(|&d| cluster.gpu_type_of(d) != t0);
        let shape = ctx.shape_of(&per_node);
        groups.push(Group {
            devices,
            per_node,
            hetero,
            shape,
        });
    }
    groups
}

/// The three factors of a device group (§4.1): its GPUs as (node class, GPUs on that node),
/// sorted — which fixes its size, its GPU types and how each type sits on nodes.
type GroupKey = Vec<(usize, u32)>;

/// A placement's identity: its groups' three factors in stage order, and which adjacent stages
/// share a node.
type PlacementKey = (Vec<GroupKey>, Vec<bool>);

fn group_key(ctx: &Ctx<'_, '_>, g: &Group) -> GroupKey {
    let mut v: GroupKey = g
        .per_node
        .iter()
        .map(|&(n, c)| (ctx.node_class[n as usize], c))
        .collect();
    v.sort();
    v
}

/// The three-factor identity of a placement (per stage: its GPUs as (node class, count on the
/// node), sorted — which fixes size and GPU types — and whether adjacent stages share a node).
fn placement_key(ctx: &Ctx<'_, '_>, groups: &[Group]) -> PlacementKey {
    let stages = groups.iter().map(|g| group_key(ctx, g)).collect();
    let shared = groups
        .windows(2)
        .map(|w| {
            w[0].per_node
                .iter()
                .any(|(n, _)| w[1].per_node.iter().any(|(m, _)| m == n))
        })
        .collect();
    (stages, shared)
}

/// The best plans by Eq. 1, best first; ties keep the first found.
struct TopK {
    cap: usize,
    items: Vec<(f64, u64, Vec<StageChoice>)>,
}

impl TopK {
    fn new(cap: usize) -> TopK {
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

/// What the rest of the DFS depends on once stage i is committed: the next stage, the layer
/// bounds from it on, and stage i's TP degree (its replicas receive the next stage's sends).
type MemoKey = (usize, Vec<usize>, u32);

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
        let saved = self.prefix.clone();
        if i > 0 {
            // Stage i − 1's sends to stage i are known now.
            let next = ctx.replica_times(self.groups, &st, i - 1, true);
            let t = saved
                .last
                .iter()
                .zip(&next)
                .map(|(a, b)| a + b)
                .fold(0.0, f64::max);
            self.prefix.sum += t;
            self.prefix.max = self.prefix.max.max(t);
        }
        self.prefix.last = ctx.replica_times(self.groups, &st, i, false);
        let sync = ctx.stage_dp(&self.groups[i], &st, i) + ctx.stage_tied(self.groups, &st, i);
        self.prefix.sync = self.prefix.sync.max(sync);
        let p = &self.prefix;
        let last = p.last.iter().copied().fold(0.0, f64::max);
        let bound = p.sum + last + (self.b as f64 - 1.0) * p.max.max(last) + p.sync;
        if bound >= top.bar() {
            self.uncertain += 1;
            self.prefix = saved;
            return;
        }
        let key: MemoKey = (i + 1, st.bounds[i + 1..].to_vec(), st.tp[i]);
        let mut point = vec![p.sum, p.max, p.sync];
        point.extend_from_slice(&p.last);
        let entry = self.memo.entry(key.clone()).or_default();
        if entry.dead {
            self.prefix = saved;
            return;
        }
        if entry
            .seen
            .iter()
            .any(|q| q.iter().zip(&point).all(|(a, b)| a <= b))
        {
            self.uncertain += 1;
            self.prefix = saved;
            return;
        }
        entry.seen.push(point);
        let (leaves, uncertain) = (self.leaves, self.uncertain);
        self.stage(ctx, i + 1, st, search, top, stats);
        if self.leaves == leaves && self.uncertain == uncertain && !search.stopped() {
            if let Some(e) = self.memo.get_mut(&key) {
                e.dead = true;
            }
        }
        self.prefix = saved;
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
    /// Metis's cost (Eq. 1, as this module computes it) of any plan in Metis's space: 1F1B, no
    /// ZeRO, recomputation, offloading or sequence parallelism, every TP group inside a node.
    /// `None` for other plans and for plans that do not validate. Memory is not checked.
    pub fn cost(problem: &Problem<'_>, plan: &Plan) -> Option<f64> {
        if plan.schedule != Schedule::OneFOneB || plan.stages.is_empty() {
            return None;
        }
        crate::plan::validate::validate(plan, problem.model, problem.cluster).ok()?;
        let p = Problem {
            options: super::PlanOptions {
                engine: plan.engine,
                precision: plan.precision,
                ..problem.options
            },
            ..*problem
        };
        let mut ctx = Ctx::new(&p);
        ctx.grad_elem = plan.collective_element_bytes().1;
        let cluster = problem.cluster;
        let mut groups = Vec::with_capacity(plan.stages.len());
        let mut st = State {
            tp: Vec::new(),
            mbs: Vec::new(),
            bounds: vec![plan.stages[0].layers.start],
            caps: Vec::new(),
        };
        for s in &plan.stages {
            if s.zero != 0
                || s.recompute != Recompute::None
                || !s.offload.is_none()
                || s.sequence_parallel
            {
                return None;
            }
            let tp = s.tp.max(1) as usize;
            if s.devices
                .chunks(tp)
                .any(|r| r.iter().any(|d| d.node != r[0].node))
            {
                return None;
            }
            let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
            for d in &s.devices {
                *per_node.entry(d.node).or_insert(0) += 1;
            }
            let t0 = cluster.gpu_type_of(s.devices[0]);
            let per_node: Vec<(u32, u32)> = per_node.into_iter().collect();
            groups.push(Group {
                devices: s.devices.clone(),
                shape: ctx.shape_of(&per_node),
                per_node,
                hetero: s.devices.iter().any(|&d| cluster.gpu_type_of(d) != t0),
            });
            st.tp.push(s.tp);
            st.mbs.push(s.micro_batch_sizes.clone());
            st.bounds.push(s.layers.end);
        }
        Some(ctx.eq1(&groups, &st, plan.micro_batches))
    }

    /// Steps 1–4: stage counts, sizes under `var`, permutations, placements, micro-batches.
    fn enumerate(
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
            let go = partitions(n, s, &allowed, &mut |multiset| {
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
                    let seq: Vec<u32> = elems.iter().flatten().copied().collect();
                    if sequences.insert(seq.clone()) {
                        for order in &orders {
                            for closed in [false, true] {
                                if closed && s < 2 {
                                    continue;
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
                                if !seen.insert(placement_key(ctx, &groups)) {
                                    continue;
                                }
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
            memo: HashMap::new(),
            leaves: 0,
            uncertain: 0,
        };
        dfs.stage(ctx, 0, st, search, top, stats);
    }

    /// Step 7: hetplan's estimate of the kept plans; the answer is the best by Eq. 1 that fits.
    fn finish(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
        top: TopK,
        stats: &Stats,
    ) -> Result<Outcome, PlannerError> {
        let mut ranked = Vec::new();
        let mut chosen: Option<(Plan, crate::cost::Estimate)> = None;
        let mut notes = Vec::new();
        for (idx, (cost, b, stages)) in top.items.into_iter().enumerate() {
            let plan = common::make_plan(problem, stages, b);
            let Some(est) = common::evaluate(problem, &plan) else {
                notes.push(format!(
                    "Metis's plan #{} does not validate against the model and cluster; skipped",
                    idx + 1
                ));
                continue;
            };
            ranked.push(Ranked {
                plan: plan.clone(),
                planner_cost_s: cost,
                estimate_s: est.iteration_time_s,
                fits: est.fits,
            });
            if chosen.is_none() && est.fits {
                if idx > 0 {
                    notes.push(format!(
                        "the best {idx} plan(s) by Metis's cost do not fit in memory by \
                         hetplan's estimate; plan #{} is the best that does",
                        idx + 1
                    ));
                }
                chosen = Some((plan, est));
            }
        }
        notes.push(format!(
            "Metis searched {} inter-stage plans (var {}, permutation length ≤ {}; {} size \
             multisets cut by the lower bound) and costed {} complete plans with its Eq. 1",
            stats.inter_stage_plans,
            self.var,
            self.max_permute_len,
            stats.bounded,
            stats.complete_plans
        ));
        if chosen.is_none() {
            if let Some(r) = ranked.first() {
                notes.push(
                    "no plan Metis kept fits in memory by hetplan's estimate; the best by \
                     Metis's cost is returned"
                        .to_string(),
                );
                let est = common::evaluate(problem, &r.plan).expect("validated above");
                chosen = Some((r.plan.clone(), est));
            }
        }
        match chosen {
            Some((plan, estimate)) => Ok(Outcome {
                plan,
                estimate,
                explored: search.explored(),
                stop_reason: search.stop_reason(),
                ranked,
                notes,
            }),
            None if search.stopped() => Err(PlannerError::Stopped(search.stop_reason())),
            None => Err(PlannerError::Infeasible(format!(
                "Metis's search space (DP-first data and tensor parallelism, no ZeRO, no \
                 recomputation, no offloading) has no plan that fits: {}",
                common::infeasible_reason(problem, problem.cluster)
            ))),
        }
    }
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

    #[test]
    fn pairing_the_smallest_groups_limits_the_permutation_length() {
        // The paper's example: four groups of one GPU and one of two, length 3.
        let e = permutation_elements(&[1, 1, 1, 1, 2], 3);
        assert_eq!(e, vec![vec![1, 1], vec![1, 1], vec![2]]);
        let mut v = e;
        let mut n = 1;
        while next_permutation(&mut v) {
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(permutation_elements(&[4, 8], 10), vec![vec![4], vec![8]]);
    }

    #[test]
    fn partitions_respect_the_sizes() {
        let mut all = Vec::new();
        partitions(12, 2, &[1, 2, 4, 8, 12], &mut |p| {
            all.push(p.to_vec());
            true
        });
        assert_eq!(all, vec![vec![4, 8]]);
        let mut all = Vec::new();
        partitions(8, 3, &[2, 4, 6, 8], &mut |p| {
            all.push(p.to_vec());
            true
        });
        assert_eq!(all, vec![vec![2, 2, 4]]);
    }
}
