//! AMP (Li, Wang, Ding, Xing, Zhang et al., "AMP: Automatically Finding Model Parallel
//! Strategies with Heterogeneity Awareness", NeurIPS 2022): a grid search over uniform
//! 3D-parallel strategies, each with its layer assignment solved by a dynamic program, ranked by
//! AMP's own cost model.
//!
//! # What is faithful
//!
//! **The strategy** (§3.3, Eq. 2) is the tuple (pp, dp, tmp, placement, mbs, assignment):
//! * *degrees*: every (pp, dp, tp) with pp·dp·tp = |D| (every GPU is used); tp and dp are the
//!   same for every stage (AMP's 3D grid);
//! * *placement*: AMP uses Megatron's heuristic (§3.6, after Narayanan et al. 2021): "prioritize
//!   placing model parallelism workers in the same node. If there is more available intra-node
//!   bandwidth, then place data parallelism workers and pipeline parallelism workers". Virtual
//!   rank (pp_i, dp_i, tp_i) ↦ `pp_i·dp·tp + dp_i·tp + tp_i`, ranks laid on the GPUs in
//!   node-major order (the host-file order of AMP's code): tp innermost, then dp, then pp;
//! * *micro-batch size*: every mbs with dp·mbs dividing the global batch (Algorithm 1's
//!   `enumerate_(d.dp)`); the number of micro-batches is gas = gbs / (dp·mbs);
//! * *layer assignment*: the §3.5 dynamic program, exact for its objective (below).
//!
//! **The cost model** (§3.4), with AMP's formulas, not hetplan's:
//! * Eq. 3, ring all-reduce: T = 2(n−1)·M / (n·B′), B′ the *slowest* link of the ring (the
//!   links between consecutive members, in rank order, as AMP's code walks them); the link
//!   bandwidth is the cluster's (intra-node, or the node pair's), used in full: no α term, no
//!   efficiency factor, no sharing of a NIC;
//! * Eq. 4, T = max over pipelines of T_pp + max over devices of T_dpsync, where a device's sync
//!   all-reduces the gradients of the parameters it holds (its stage's parameters ÷ tp, at the
//!   plan's gradient element size) over its data-parallel ring;
//! * Eq. 5, T_pp = (gas − 1)·max tᵢ + Σ eᵢ + Σ tᵢ, tᵢ = Σ t_layer over the stage's layers, and
//!   eᵢ = v / b the P2P time of the activation crossing boundary i (v = mbs × tokens × the
//!   boundary layer's output bytes, the full activation per TP rank as in AMP's code, over the
//!   boundary's slowest link).
//!
//! **No memory model** (§4.5, Limitations): AMP ranks plans that cannot fit. The planner returns
//! AMP's ranked list (its top [`TOP_K`], the plans AMP would launch as real trials in
//! Algorithm 1) in `Outcome::ranked`, each with AMP's cost and hetplan's estimate and memory
//! verdict, and notes which of them hetplan's memory model says would run out of memory.
//!
//! # The plan it returns
//!
//! `Outcome::plan` is AMP's top-ranked plan, **even when it runs out of memory**: that is what
//! AMP's cost model picks, and `hetplan plan --algo amp` is asked what AMP would do — comparing
//! planners is the point of having them side by side. A user may expect otherwise, because
//! Algorithm 1 ends with real trials of the top plans (`run(record, budget)`), where a plan that
//! runs out of memory fails and the fastest trial wins. hetplan has no real trials; letting its
//! own estimate stand in for them would make the answer hetplan's choice rather than AMP's, so
//! the trials are reported, not played: when the top plan does not fit, a note says so, by how
//! much, and names the best-ranked plan that fits (in the list, else further down AMP's
//! ranking), and another note names the plan of the list that hetplan's estimate finds fastest
//! — the one AMP's real trials would be expected to keep.
//!
//! # The layer-assignment DP, and how it is faster than O(k·L⁴)
//!
//! AMP's DP (§3.5) minimises Eq. 5 over the assignments of L layers to k stages. It handles
//! the max term with a "tolerance" m ranging over the O(L²) possible stage times: states
//! (i, j, m), O(L) cuts each, O(k·L⁴). [`assign_layers`] computes the same optimum by
//! enumerating the bottleneck instead: for a cap T on the stage time, let g(T) be the least
//! Σ eᵢ over the assignments whose stages all take ≤ T; then
//! min over assignments of Eq. 5 = Σt + min over T of [(gas−1)·T + g(T)], T ranging over the
//! possible stage times (the optimal assignment's own bottleneck T* gives (gas−1)T* + g(T*) ≤
//! its cost; every cap's value is ≥ the cost of the assignment achieving g(T)). For a fixed cap,
//! the stages that may end at layer i start in a window [lo(i), i−1] whose ends only move right
//! as i grows (layer times are ≥ 0), so each stage count is one sliding-window minimum, O(L):
//! g(T) costs O(k·L). Over the O(L²) caps, O(k·L³) (plus O(L² log L) to sort the caps). In
//! practice far fewer: caps below the largest layer or the average stage are never feasible,
//! the first feasible cap is found by binary search (feasibility only grows with T), the caps
//! are then scanned upwards and the scan stops once (gas−1)·T + g(∞) cannot beat the best
//! found — a handful of caps. With gas = 1 only g(∞) is needed.
//! The result is the exact optimum of Eq. 5 (the same arithmetic decides every comparison; the
//! integration tests check it against the paper's O(k·L⁴) DP and against brute force).
//!
//! Eq. 5 has many ties on uniform models (which stage gets the extra block); the paper does not
//! say which assignment its DP keeps. Here a tie goes to the assignment with the smaller data
//! parallel sync (Eq. 4's second term), which does depend on the assignment: one more pass,
//! lexicographic in (Σ eᵢ, max sync) under each optimal cap, O(k·L²). This makes AMP's pick
//! the best of its DP's optima under its own Eq. 4. Like the paper's Algorithm 1, the DP does
//! not trade Eq. 5 for sync time: Eq. 4 is evaluated on the DP's assignment.
//!
//! # Where the paper is silent, and what is chosen here
//!
//! * *Layer times on a heterogeneous cluster.* Eq. 5's t_layer has no device index: AMP
//!   profiles a layer per tp degree and uses one number per layer. Its released code
//!   (`cost_het_cluster.py`) averages the V100 and T4 profiles 0.75 : 0.25 — the two types'
//!   shares of the cluster's GPUs. Here t_layer(tp, mbs) is the GPU-count-weighted mean, over
//!   the cluster's GPU types, of hetplan's per-layer time of one micro-batch (forward, backward
//!   and the tensor-parallel all-reduces, `cost::layer_costs` on a tp group inside one node of
//!   that type: AMP's profile includes the TP communication). AMP is therefore blind to which
//!   stage runs on the slower GPUs — as it was; it is heterogeneity-aware through bandwidth.
//! * *Which pipeline's P2P times.* The DP needs one eᵢ per boundary, but Eq. 4 has dp pipelines
//!   whose links may differ. AMP's code averages them; here the boundary's slowest link over
//!   all pipelines and TP ranks is used (Eq. 3's slowest-link rule), so the dp pipelines have
//!   the same T_pp and the DP is exact for Eq. 4's first term.
//! * *TP placement.* A TP group never spans nodes (tp divides every node's GPU count), tp ≤
//!   `PlanOptions::max_tp`, and tp divides every attention layer's heads (Megatron's rule).
//!   pp ≤ L (every stage holds a layer); mbs ≤ `PlanOptions::max_micro_batch`.
//! * *Ties between strategies* keep the enumeration order: tp, then pp, then mbs ascending.
//! * *The schedule* is 1F1B (DeepSpeed's pipeline engine, which AMP ran); ZeRO and activation
//!   checkpointing are off (AMP searches neither).
//!
//! # Bounds
//!
//! A search node is a strategy (a candidate of Algorithm 1) or one capped pass of the DP; the
//! search stops at a limit with the strategies ranked so far. Deterministic: fixed orders, no
//! hash maps.

use super::common::{self, StageChoice};
use super::{Outcome, Planner, PlannerError, Problem, Ranked, Search};
use crate::cluster::{Cluster, GpuId};
use crate::cost::{self, memory};
use crate::model::{LayerKind, OpKind};
use crate::plan::{Plan, Recompute, Stage};
use crate::units::{Bytes, Seconds};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// How many of its best strategies AMP ranks for real trials (the paper evaluates the top 10).
pub const TOP_K: usize = 10;

/// The AMP planner.
#[derive(Clone, Copy, Debug, Default)]
pub struct Amp;

/// One strategy of Algorithm 1 before its layer assignment: the degrees and the micro-batch
/// size (the placement follows from the degrees).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Candidate {
    pub pp: u32,
    pub dp: u32,
    pub tp: u32,
    pub mbs: u64,
}

impl Candidate {
    /// gas: micro-batches per iteration of each pipeline.
    pub fn micro_batches(&self, global_batch: u64) -> u64 {
        global_batch / (self.dp as u64 * self.mbs)
    }
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pp={} dp={} tp={} mbs={}",
            self.pp, self.dp, self.tp, self.mbs
        )
    }
}

/// AMP's cost of a plan, Eq. 3–5 (seconds).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AmpCost {
    /// Eq. 4: the pipeline plus the slowest device's gradient all-reduce.
    pub total_s: f64,
    /// Eq. 5: (gas − 1)·max tᵢ + Σ eᵢ + Σ tᵢ.
    pub pipeline_s: f64,
    /// Eq. 4's second term: the slowest device's data-parallel all-reduce (Eq. 3).
    pub dp_sync_s: f64,
    /// max tᵢ: the slowest stage's time for one micro-batch.
    pub slowest_stage_s: f64,
    /// Σ tᵢ.
    pub stages_s: f64,
    /// Σ eᵢ.
    pub p2p_s: f64,
}

/// The attention shapes (heads, kv heads) of the model.
fn attention_shapes(problem: &Problem<'_>) -> Vec<(u64, u64)> {
    let mut shapes = Vec::new();
    for l in &problem.model.layers {
        for op in &l.ops {
            if let OpKind::Attention {
                heads, kv_heads, ..
            } = op.kind
            {
                if !shapes.contains(&(heads, kv_heads)) {
                    shapes.push((heads, kv_heads));
                }
            }
        }
    }
    shapes
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Every strategy of AMP's space (Algorithm 1's degrees × micro-batch sizes), in enumeration
/// order: tp, then pp, then mbs ascending.
pub fn candidates(problem: &Problem<'_>) -> Vec<Candidate> {
    let n = problem.cluster.num_gpus() as u64;
    let layers = problem.model.layers.len() as u64;
    let gbs = problem.global_batch;
    if n == 0 || layers == 0 || gbs == 0 {
        return vec![];
    }
    let node_gcd = problem
        .cluster
        .nodes
        .iter()
        .map(|nd| nd.num_gpus as u64)
        .filter(|&g| g > 0)
        .fold(0, gcd);
    let shapes = attention_shapes(problem);
    let mut out = Vec::new();
    for tp in common::divisors(n) {
        let heads_ok = shapes.iter().all(|&(h, kv)| {
            h.is_multiple_of(tp) && crate::plan::validate::tp_fits_kv_heads(tp, kv)
        });
        if tp > problem.options.max_tp as u64 || !node_gcd.is_multiple_of(tp) || !heads_ok {
            continue;
        }
        for pp in common::divisors(n / tp) {
            if pp > layers {
                continue;
            }
            let dp = n / tp / pp;
            if !gbs.is_multiple_of(dp) {
                continue;
            }
            for mbs in common::divisors(gbs / dp) {
                if mbs > problem.options.max_micro_batch {
                    break;
                }
                out.push(Candidate {
                    pp: pp as u32,
                    dp: dp as u32,
                    tp: tp as u32,
                    mbs,
                });
            }
        }
    }
    out
}

/// Megatron's placement: stage i gets virtual ranks i·dp·tp .. (i+1)·dp·tp, laid on the GPUs in
/// node-major order; inside a stage replica r is ranks r·tp .. (r+1)·tp (replica-major, as a
/// plan's stage lists its devices).
pub fn placement(cluster: &Cluster, c: Candidate) -> Vec<Vec<GpuId>> {
    let gpus = cluster.gpus();
    let per_stage = (c.dp * c.tp) as usize;
    gpus.chunks(per_stage)
        .take(c.pp as usize)
        .map(|s| s.to_vec())
        .collect()
}

/// The plan of a strategy with the given layer assignment (stage lengths).
pub fn amp_plan(problem: &Problem<'_>, c: Candidate, lengths: &[usize]) -> Plan {
    let devices = placement(problem.cluster, c);
    let stages = common::ranges(lengths)
        .into_iter()
        .zip(devices)
        .map(|(layers, devices)| StageChoice::uniform(layers, devices, c.tp, c.mbs))
        .collect();
    common::make_plan(problem, stages, c.micro_batches(problem.global_batch))
}

/// AMP's t_layer for every layer: one micro-batch of `mbs` samples, forward and backward with
/// the TP all-reduces, on a TP group of `tp` GPUs inside one node, averaged over the cluster's
/// GPUs (each GPU type weighted by its number of GPUs; see the module docs). `None` when a GPU
/// type has no node of `tp` GPUs.
pub fn layer_times(problem: &Problem<'_>, tp: u32, mbs: u64) -> Option<Vec<f64>> {
    let cluster = problem.cluster;
    let layers = problem.model.layers.len();
    let total = cluster.num_gpus() as f64;
    let mut acc = vec![0.0; layers];
    for ty in 0..cluster.gpu_types.len() {
        let count: u32 = cluster
            .nodes
            .iter()
            .filter(|n| n.gpu_type.0 == ty)
            .map(|n| n.num_gpus)
            .sum();
        if count == 0 {
            continue;
        }
        let node = cluster
            .nodes
            .iter()
            .position(|n| n.gpu_type.0 == ty && n.num_gpus >= tp)?;
        let devices = (0..tp)
            .map(|local| GpuId {
                node: node as u32,
                local,
            })
            .collect();
        let probe = common::make_plan(
            problem,
            vec![StageChoice {
                layers: crate::plan::LayerRange {
                    start: 0,
                    end: layers,
                },
                devices,
                tp,
                micro_batch_sizes: vec![mbs],
                zero: 0,
                recompute: Recompute::None,
                offload: Default::default(),
            }],
            1,
        );
        let costs = cost::layer_costs(common::workload(problem), &probe, problem.compute, 0, 0);
        let w = count as f64 / total;
        for (a, c) in acc.iter_mut().zip(&costs) {
            *a += w
                * (c.forward
                    + c.backward
                    + c.recompute
                    + c.tp_recompute
                    + c.tp_forward
                    + c.tp_backward);
        }
    }
    Some(acc)
}

/// The slowest of the links between corresponding ranks of two adjacent stages (same replica,
/// same TP rank): the bandwidth of a pipeline boundary, bytes/s.
fn boundary_bandwidth(cluster: &Cluster, a: &[GpuId], b: &[GpuId]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| cluster.link_bandwidth(*x, *y).get())
        .fold(f64::INFINITY, f64::min)
}

/// B′ of Eq. 3 for a stage's data-parallel rings: the slowest link between consecutive members
/// (in rank order, closing the ring) over the stage's tp rings, bytes/s. Infinite when dp = 1.
fn ring_bandwidth(cluster: &Cluster, devices: &[GpuId], dp: usize, tp: usize) -> f64 {
    let mut slowest = f64::INFINITY;
    if dp < 2 {
        return slowest;
    }
    for k in 0..tp {
        for r in 0..dp {
            let a = devices[r * tp + k];
            let b = devices[((r + 1) % dp) * tp + k];
            slowest = slowest.min(cluster.link_bandwidth(a, b).get());
        }
    }
    slowest
}

/// Eq. 3's 2(n−1)/(n·B′) × bytes per parameter: seconds per parameter of a stage's sync.
fn sync_coefficient(
    cluster: &Cluster,
    devices: &[GpuId],
    dp: u32,
    tp: u32,
    grad_bytes: f64,
) -> f64 {
    if dp < 2 {
        return 0.0;
    }
    let b = ring_bandwidth(cluster, devices, dp as usize, tp as usize);
    let n = dp as f64;
    2.0 * (n - 1.0) / (n * b) * grad_bytes
}

/// v of Eq. 5: the bytes of the activation leaving layer `cut − 1` for one micro-batch.
fn volume(problem: &Problem<'_>, mbs: u64, cut: usize) -> f64 {
    let tokens = mbs as f64 * problem.model.tokens_per_sample(problem.seq_len) as f64;
    let elem = problem.options.precision.element_bytes();
    tokens * problem.model.layers[cut - 1].output_bytes_per_token * elem / 2.0
}

/// AMP's cost (Eq. 3–5) of a plan whose stages all have the same dp, tp and micro-batch size
/// (`None` otherwise): any plan of AMP's space, or another grid plan such as Megatron's.
pub fn amp_cost(problem: &Problem<'_>, plan: &Plan) -> Option<AmpCost> {
    let first = plan.stages.first()?;
    let times = layer_times(problem, first.tp, *first.micro_batch_sizes.first()?)?;
    cost_with(problem, plan, &times)
}

fn cost_with(problem: &Problem<'_>, plan: &Plan, times: &[f64]) -> Option<AmpCost> {
    let first = plan.stages.first()?;
    let (dp, tp, mbs) = (first.dp, first.tp, *first.micro_batch_sizes.first()?);
    let uniform = |s: &Stage| {
        s.dp == dp
            && s.tp == tp
            && s.devices.len() == (dp * tp) as usize
            && s.micro_batch_sizes.iter().all(|&b| b == mbs)
    };
    if !plan.stages.iter().all(uniform) {
        return None;
    }
    let mut prefix = vec![0.0; times.len() + 1];
    for (i, t) in times.iter().enumerate() {
        prefix[i + 1] = prefix[i] + t;
    }
    let seg = |s: &Stage| prefix[s.layers.end] - prefix[s.layers.start];
    let slowest = plan.stages.iter().map(seg).fold(0.0, f64::max);
    let stages_s = prefix[times.len()];
    let mut p2p = 0.0;
    for w in plan.stages.windows(2) {
        let bw = boundary_bandwidth(problem.cluster, &w[0].devices, &w[1].devices);
        p2p += volume(problem, mbs, w[0].layers.end) / bw;
    }
    let gas = plan.micro_batches.max(1);
    let pipeline = (gas - 1) as f64 * slowest + p2p + stages_s;
    let grad_bytes = plan.collective_element_bytes().1;
    let sync = plan
        .stages
        .iter()
        .map(|s| {
            let params = memory::stage_params(problem.model, s.layers.iter(), tp);
            sync_coefficient(problem.cluster, &s.devices, dp, tp, grad_bytes) * params
        })
        .fold(0.0, f64::max);
    Some(AmpCost {
        total_s: pipeline + sync,
        pipeline_s: pipeline,
        dp_sync_s: sync,
        slowest_stage_s: slowest,
        stages_s,
        p2p_s: p2p,
    })
}

// ---------------------------------------------------------------- the layer-assignment DP

/// The layer-assignment problem of one strategy (§3.5).
pub struct Pipeline<'a> {
    /// t_layer of every layer (≥ 0).
    pub layer_times: &'a [f64],
    /// k, the number of stages (1 ≤ k ≤ L).
    pub stages: usize,
    /// gas, the micro-batches per iteration.
    pub micro_batches: u64,
    /// e(j, c): the P2P time across boundary j (stage j to stage j+1) when stage j ends before
    /// layer c (1 ≤ c < L).
    pub comm: &'a dyn Fn(usize, usize) -> f64,
    /// s(j, a, b): the data-parallel sync time of stage j holding layers a..b — only used to
    /// break ties of Eq. 5 (return 0 to ignore).
    pub sync: &'a dyn Fn(usize, usize, usize) -> f64,
}

/// The DP's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// Layers per stage, in pipeline order.
    pub lengths: Vec<usize>,
    /// Eq. 5 of the assignment: (gas − 1)·max tᵢ + Σ eᵢ + Σ tᵢ.
    pub objective: f64,
    /// max over stages of s(j, ·): the tie-breaker.
    pub sync: f64,
}

/// Relative tolerance under which two objective values count as a tie (rounding of sums taken
/// in different orders).
const TIE: f64 = 1e-12;

struct Dp<'a> {
    prefix: Vec<f64>,
    layers: usize,
    stages: usize,
    /// e(j, c) at [j·(L+1) + c]; infinite where no cut is possible.
    comm: Vec<f64>,
    sync: &'a dyn Fn(usize, usize, usize) -> f64,
}

impl Dp<'_> {
    fn seg(&self, a: usize, b: usize) -> f64 {
        self.prefix[b] - self.prefix[a]
    }

    fn comm(&self, j: usize, c: usize) -> f64 {
        self.comm[j * (self.layers + 1) + c]
    }

    /// g(cap): the least Σ e over the assignments whose stages all take ≤ cap, by one sliding
    /// window minimum per stage count: O(k·L).
    fn min_comm(&self, cap: f64) -> Option<f64> {
        let l = self.layers;
        let mut f = vec![f64::INFINITY; l + 1];
        for (i, fi) in f.iter_mut().enumerate().skip(1) {
            if self.seg(0, i) > cap {
                break;
            }
            *fi = 0.0;
        }
        for j in 1..self.stages {
            let val = |c: usize| f[c] + self.comm(j - 1, c);
            let mut g = vec![f64::INFINITY; l + 1];
            let mut window: VecDeque<usize> = VecDeque::new();
            let mut next = 0;
            let mut lo = 0;
            for (i, gi) in g.iter_mut().enumerate().skip(j + 1) {
                // Cuts c ≤ i − 1 enter the window; equal values keep the earlier cut in front.
                while next < i {
                    let v = val(next);
                    if v.is_finite() {
                        while window.back().is_some_and(|&b| val(b) > v) {
                            window.pop_back();
                        }
                        window.push_back(next);
                    }
                    next += 1;
                }
                // Cuts whose last stage c..i would exceed the cap leave it.
                while lo < i && self.seg(lo, i) > cap {
                    lo += 1;
                }
                while window.front().is_some_and(|&c| c < lo) {
                    window.pop_front();
                }
                if let Some(&c) = window.front() {
                    *gi = val(c);
                }
            }
            f = g;
        }
        f[l].is_finite().then_some(f[l])
    }

    /// Under a cap, the assignment least in (Σ e, max sync), lexicographically: O(k·L²).
    /// Returns (Σ e, max sync, lengths).
    fn tie_break(&self, cap: f64) -> Option<(f64, f64, Vec<usize>)> {
        let (l, k) = (self.layers, self.stages);
        // state[j][i]: the best (Σ e, max sync, previous cut) of layers 0..i in j+1 stages.
        let mut state: Vec<Vec<Option<(f64, f64, usize)>>> = vec![vec![None; l + 1]; k];
        for (i, st) in state[0].iter_mut().enumerate().skip(1) {
            if self.seg(0, i) > cap {
                break;
            }
            *st = Some((0.0, (self.sync)(0, 0, i), 0));
        }
        for j in 1..k {
            let (done, rest) = state.split_at_mut(j);
            let (prev, cur) = (&done[j - 1], &mut rest[0]);
            for (i, out) in cur.iter_mut().enumerate().skip(j + 1) {
                let mut best: Option<(f64, f64, usize)> = None;
                for (c, st) in prev.iter().enumerate().take(i).skip(j) {
                    if self.seg(c, i) > cap {
                        continue;
                    }
                    let Some((sum, sync, _)) = *st else {
                        continue;
                    };
                    let cand = (sum + self.comm(j - 1, c), sync.max((self.sync)(j, c, i)), c);
                    let better = match best {
                        None => true,
                        Some((bs, by, _)) => cand.0 < bs || (cand.0 == bs && cand.1 < by),
                    };
                    if better {
                        best = Some(cand);
                    }
                }
                *out = best;
            }
        }
        let (sum, sync, _) = state[k - 1][l]?;
        let mut lengths = vec![0; k];
        let mut end = l;
        for j in (0..k).rev() {
            let (_, _, start) = state[j][end].expect("a reachable state has a reachable parent");
            lengths[j] = end - start;
            end = start;
        }
        Some((sum, sync, lengths))
    }

    /// Eq. 5 of an assignment, as `cost_with` computes it.
    fn objective(&self, lengths: &[usize], gas: u64) -> f64 {
        let mut start = 0;
        let mut slowest = 0.0f64;
        let mut p2p = 0.0;
        for (j, &len) in lengths.iter().enumerate() {
            slowest = slowest.max(self.seg(start, start + len));
            if j + 1 < lengths.len() {
                p2p += self.comm(j, start + len);
            }
            start += len;
        }
        (gas.max(1) - 1) as f64 * slowest + p2p + self.prefix[self.layers]
    }
}

/// AMP's layer assignment (§3.5): the assignment of consecutive layers to `stages` stages that
/// minimises Eq. 5 exactly, ties going to the smaller max sync. O(k·L³) worst case, usually a
/// few O(k·L) passes (see the module docs). `None` when k is 0 or exceeds L, or when the search
/// hit a limit (one node per capped pass).
pub fn assign_layers(p: &Pipeline<'_>, search: &mut Search<'_>) -> Option<Assignment> {
    let (l, k) = (p.layer_times.len(), p.stages);
    if k == 0 || k > l {
        return None;
    }
    let mut prefix = vec![0.0; l + 1];
    for (i, t) in p.layer_times.iter().enumerate() {
        prefix[i + 1] = prefix[i] + t;
    }
    let mut comm = vec![f64::INFINITY; (k - 1) * (l + 1)];
    for j in 0..k - 1 {
        for c in 1..l {
            comm[j * (l + 1) + c] = (p.comm)(j, c);
        }
    }
    let dp = Dp {
        prefix,
        layers: l,
        stages: k,
        comm,
        sync: p.sync,
    };
    let w = (p.micro_batches.max(1) - 1) as f64;
    if !search.tick() {
        return None;
    }
    let g_inf = dp.min_comm(f64::INFINITY)?;
    // The caps to try: every stage time not below the largest layer's, ascending, values within
    // rounding of each other merged into the largest (it admits all of them).
    let caps: Vec<f64> = if w == 0.0 {
        vec![f64::INFINITY]
    } else {
        // No stage is below the largest layer, nor (but for rounding) the bottleneck below
        // the average stage.
        let floor = (0..l)
            .map(|i| dp.seg(i, i + 1))
            .fold(dp.prefix[l] / k as f64 * (1.0 - 1e-9), f64::max);
        let mut all: Vec<f64> = (0..l)
            .flat_map(|a| (a + 1..=l).map(move |b| (a, b)))
            .map(|(a, b)| dp.seg(a, b))
            .filter(|&t| t >= floor)
            .collect();
        all.sort_by(f64::total_cmp);
        let mut merged: Vec<f64> = Vec::new();
        for t in all {
            match merged.last_mut() {
                Some(last) if t - *last <= TIE * t.abs() => *last = t,
                _ => merged.push(t),
            }
        }
        merged
    };
    // Feasibility only grows with the cap: binary search for the first feasible one.
    let (mut lo, mut hi) = (0, caps.len() - 1);
    while lo < hi {
        if !search.tick() {
            return None;
        }
        let mid = (lo + hi) / 2;
        if dp.min_comm(caps[mid]).is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let tol = |v: f64| TIE * v.abs();
    let mut best = f64::INFINITY;
    let mut tied: Vec<f64> = Vec::new();
    for &cap in &caps[lo..] {
        if cap.is_finite() && w * cap + g_inf > best + tol(best) {
            break;
        }
        if !search.tick() {
            return None;
        }
        let Some(g) = dp.min_comm(cap) else {
            continue;
        };
        let v = if cap.is_finite() { w * cap + g } else { g };
        if v < best - tol(best) {
            best = v;
            tied = vec![cap];
        } else if v <= best + tol(best) {
            best = best.min(v);
            tied.push(cap);
        }
    }
    let mut answer: Option<Assignment> = None;
    for cap in tied {
        if !search.tick() {
            return None;
        }
        let Some((_, sync, lengths)) = dp.tie_break(cap) else {
            continue;
        };
        let objective = dp.objective(&lengths, p.micro_batches);
        let better = match &answer {
            None => true,
            Some(a) => sync < a.sync || (sync == a.sync && objective < a.objective),
        };
        if better {
            answer = Some(Assignment {
                lengths,
                objective,
                sync,
            });
        }
    }
    answer
}

// ---------------------------------------------------------------- the search

/// One ranked strategy of Algorithm 1's record.
#[derive(Clone, Debug)]
pub struct Scored {
    pub candidate: Candidate,
    pub plan: Plan,
    pub cost: AmpCost,
}

/// Algorithm 1 without the real trials: every strategy of AMP's space with its DP layer
/// assignment and AMP's cost, best first (ties in enumeration order). Stops at the search's
/// limits with the strategies costed so far.
pub fn rank_all(problem: &Problem<'_>, search: &mut Search<'_>) -> Vec<Scored> {
    let model = problem.model;
    let mut times: BTreeMap<(u32, u64), Option<Vec<f64>>> = BTreeMap::new();
    let mut record = Vec::new();
    for c in candidates(problem) {
        if !search.tick() {
            break;
        }
        let Some(t) = times
            .entry((c.tp, c.mbs))
            .or_insert_with(|| layer_times(problem, c.tp, c.mbs))
            .as_ref()
        else {
            continue;
        };
        let devices = placement(problem.cluster, c);
        let bandwidth: Vec<f64> = devices
            .windows(2)
            .map(|w| boundary_bandwidth(problem.cluster, &w[0], &w[1]))
            .collect();
        // The plans reduce gradients in the engine's type (no collective dtype of their own).
        let grad_bytes =
            crate::plan::default_gradient_dtype(problem.options.engine, problem.options.precision)
                .element_bytes();
        let coef: Vec<f64> = devices
            .iter()
            .map(|d| sync_coefficient(problem.cluster, d, c.dp, c.tp, grad_bytes))
            .collect();
        let params = ParamPrefix::new(problem, c.tp);
        let comm = |j: usize, cut: usize| volume(problem, c.mbs, cut) / bandwidth[j];
        let sync = |j: usize, a: usize, b: usize| {
            if coef[j] == 0.0 {
                0.0
            } else {
                coef[j] * params.get(a, b)
            }
        };
        let pipe = Pipeline {
            layer_times: t,
            stages: c.pp as usize,
            micro_batches: c.micro_batches(problem.global_batch),
            comm: &comm,
            sync: &sync,
        };
        let Some(a) = assign_layers(&pipe, search) else {
            if search.stopped() {
                break;
            }
            continue;
        };
        debug_assert_eq!(a.lengths.iter().sum::<usize>(), model.layers.len());
        let plan = amp_plan(problem, c, &a.lengths);
        let Some(cost) = cost_with(problem, &plan, t) else {
            continue;
        };
        search.offer(Seconds(cost.total_s));
        record.push(Scored {
            candidate: c,
            plan,
            cost,
        });
    }
    record.sort_by(|a, b| a.cost.total_s.total_cmp(&b.cost.total_s));
    record
}

/// Parameters held per TP rank by a range of layers in O(1), as `memory::stage_params` counts
/// them (a tied weight is not counted again in a stage that holds the embedding).
struct ParamPrefix {
    all: Vec<f64>,
    tied: Vec<f64>,
    embeddings: Vec<usize>,
}

impl ParamPrefix {
    fn new(problem: &Problem<'_>, tp: u32) -> ParamPrefix {
        let model = problem.model;
        let n = model.layers.len();
        let mut p = ParamPrefix {
            all: vec![0.0; n + 1],
            tied: vec![0.0; n + 1],
            embeddings: vec![0; n + 1],
        };
        for (i, layer) in model.layers.iter().enumerate() {
            let mut all = 0.0;
            let mut tied = 0.0;
            for op in &layer.ops {
                let shard = if op.params_sharded || matches!(op.kind, OpKind::Opaque { .. }) {
                    tp.max(1) as f64
                } else {
                    1.0
                };
                all += op.params as f64 / shard;
                if op.tied {
                    tied += op.params as f64 / shard;
                }
            }
            p.all[i + 1] = p.all[i] + all;
            p.tied[i + 1] = p.tied[i] + tied;
            p.embeddings[i + 1] = p.embeddings[i] + usize::from(layer.kind == LayerKind::Embedding);
        }
        p
    }

    fn get(&self, a: usize, b: usize) -> f64 {
        let all = self.all[b] - self.all[a];
        if self.embeddings[b] > self.embeddings[a] {
            all - (self.tied[b] - self.tied[a])
        } else {
            all
        }
    }
}

fn empty_space(problem: &Problem<'_>) -> String {
    format!(
        "AMP's space is empty: it needs pp·dp·tp = {} GPUs with dp dividing the global batch \
         {}, tp ≤ {} dividing every node's GPU count and every attention layer's heads, and pp ≤ \
         {} layers",
        problem.cluster.num_gpus(),
        problem.global_batch,
        problem.options.max_tp,
        problem.model.layers.len()
    )
}

impl Planner for Amp {
    fn name(&self) -> &'static str {
        "amp"
    }

    fn description(&self) -> &'static str {
        "AMP (Li et al., NeurIPS 2022): uniform pp×dp×tp grids with Megatron placement and a \
         layer-assignment DP, ranked by AMP's cost model (no memory model)"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let record = rank_all(problem, search);
        if record.is_empty() {
            return Err(if search.stopped() {
                PlannerError::Stopped(search.stop_reason())
            } else {
                PlannerError::Infeasible(empty_space(problem))
            });
        }
        let mut notes = Vec::new();
        // AMP's top plans that are valid plans for hetplan: (rank in the record, plan, estimate).
        let mut top: Vec<(usize, &Scored, cost::Estimate)> = Vec::new();
        let mut invalid = Vec::new();
        let mut scanned = 0;
        for (i, s) in record.iter().enumerate() {
            if top.len() == TOP_K {
                break;
            }
            scanned = i + 1;
            match common::evaluate(problem, &s.plan) {
                Some(est) => top.push((i, s, est)),
                None => invalid.push(format!("#{} {}", i + 1, s.candidate)),
            }
        }
        if !invalid.is_empty() {
            notes.push(format!(
                "left out of the ranking, not valid plans for hetplan: {}",
                invalid.join("; ")
            ));
        }
        if top.is_empty() {
            return Err(PlannerError::Infeasible(
                "none of AMP's best strategies is a valid plan".into(),
            ));
        }
        let describe = |rank: usize, s: &Scored, est: &cost::Estimate| {
            format!(
                "#{} {} ({}; AMP {:.3} s, hetplan {:.3} s)",
                rank + 1,
                s.candidate,
                s.plan.summary(),
                s.cost.total_s,
                est.iteration_time_s
            )
        };
        let oom: Vec<String> = top
            .iter()
            .filter(|(_, _, est)| !est.fits)
            .map(|(i, s, est)| describe(*i, s, est))
            .collect();
        if !oom.is_empty() {
            notes.push(format!(
                "AMP has no memory model: {} of its top {} plans would run out of memory by \
                 hetplan's: {}",
                oom.len(),
                top.len(),
                oom.join("; ")
            ));
        }
        // Where none of the top plans fits, the best-ranked one that does, further down AMP's
        // record: `Planner::plan` answers with it.
        let mut further: Option<(usize, &Scored, cost::Estimate)> = None;
        if !top[0].2.fits {
            let worst = top[0]
                .2
                .per_gpu
                .iter()
                .max_by(|a, b| {
                    (a.peak_memory_bytes - a.capacity_bytes)
                        .total_cmp(&(b.peak_memory_bytes - b.capacity_bytes))
                })
                .map(|g| {
                    format!(
                        "{} ({}) needs {}, has {}",
                        g.gpu,
                        g.gpu_type,
                        Bytes(g.peak_memory_bytes),
                        Bytes(g.capacity_bytes)
                    )
                })
                .unwrap_or_default();
            // The best-ranked plan that fits: in the list, or further down AMP's record.
            let fallback = match top.iter().find(|(_, _, est)| est.fits) {
                Some((i, s, est)) => {
                    format!("the best-ranked plan that fits is {}", describe(*i, s, est))
                }
                None => {
                    further = record.iter().enumerate().skip(scanned).find_map(|(i, s)| {
                        let est = common::evaluate(problem, &s.plan)?;
                        est.fits.then_some((i, s, est))
                    });
                    further
                        .as_ref()
                        .map(|(i, s, est)| describe(*i, s, est))
                        .map_or_else(
                            || {
                                format!(
                                    "none of AMP's {} strategies fits by hetplan's memory model",
                                    record.len()
                                )
                            },
                            |d| {
                                format!(
                                "none of its top {} fits; the best-ranked plan that fits is {d}",
                                top.len()
                            )
                            },
                        )
                }
            };
            notes.push(format!(
                "AMP's top-ranked plan would run out of memory ({worst}); {fallback}"
            ));
        }
        let fastest = top
            .iter()
            .enumerate()
            .filter(|(_, (_, _, est))| est.fits)
            .min_by(|a, b| a.1 .2.iteration_time_s.total_cmp(&b.1 .2.iteration_time_s));
        if let Some((pos, (i, s, est))) = fastest {
            if pos != 0 {
                notes.push(format!(
                    "AMP would run its top {} as real trials and keep the fastest: by hetplan's \
                     estimate that is {}",
                    top.len(),
                    describe(*i, s, est)
                ));
            }
        }
        let ranked = top
            .iter()
            .chain(further.iter())
            .map(|(_, s, est)| Ranked {
                plan: s.plan.clone(),
                planner_cost_s: s.cost.total_s,
                estimate_s: est.iteration_time_s,
                fits: est.fits,
            })
            .collect();
        let (_, first, estimate) = top.swap_remove(0);
        Ok(Outcome {
            plan: first.plan.clone(),
            estimate,
            explored: search.explored(),
            stop_reason: search.stop_reason(),
            ranked,
            notes,
            per_engine: Vec::new(),
        })
    }
}
