//! Mist (Zhu et al., "Mist: Efficient Distributed Training of Large Language Models via
//! Memory-Parallelism Co-Optimization", EuroSys '25), extended to heterogeneous clusters.
//!
//! Mist co-tunes, per pipeline stage, data and tensor parallelism, the micro-batch size, ZeRO
//! 0–3, the number of activation-checkpointed layers and four offloading ratios (weights,
//! gradients, optimizer states, activations), with an overlap- and imbalance-aware cost.
//!
//! # What is faithful (paper → code)
//!
//! * **Search space, Table 2 / §5.1.** Per stage (Lᵢ, bᵢ, DPᵢ, TPᵢ, ZeROᵢ, CKPTᵢ, WOᵢ, GOᵢ,
//!   OOᵢ, AOᵢ) → [`stage::StageConfig`]; G and S are chosen by the outer loops. All layers of a
//!   stage share the stage's configuration (stage-wise granularity). The plan carries them as
//!   `Stage::{zero, recompute: Recompute::Layers(n), offload}`.
//! * **Overlap schedule, Fig. 7.** [`stage::intra_stage`] costs a pass as four streams — layer
//!   compute, NCCL (ZeRO-3 parameter all-gather in forward and backward, ZeRO-2/3 gradient
//!   reduce-scatter in backward), host→device (swapped-in weights, activations coming back in
//!   backward) and device→host (activations going out in forward, gradients in backward) — that
//!   run together, each prefetched one layer ahead, so the first layer's share of each transfer
//!   is exposed and the rest overlaps compute. TP all-reduces and pipeline sends stay serial.
//! * **Interference, §5.2.2 and Algorithm 1.** [`interference::pred_intf`] is Algorithm 1
//!   (`Update` over the four-, three- and two-stream combinations, then the remainder alone);
//!   its two-stream case is `cost::overlap::co_run_with`, and the compute/NCCL factors are the
//!   ones hetplan's estimate uses (`cost::constants`), so there is one set of numbers.
//!   [`interference::InterferenceParams::default`] documents every default;
//!   [`interference::fit`] refits them from measured co-run points (Mist fits them from
//!   benchmarks of sampled kernel pairs).
//! * **t and d, Eq. 5–6.** t = the stable micro-batch (forward and backward passes above); d =
//!   what the first and last micro-batches add: the repositioned optimizer step (§5.1: each
//!   layer's step before its first forward — GPU Adam on the resident share, CPU Adam on the
//!   offloaded share, whose gradients go down and updated weights come up beside the first
//!   forward), ZeRO-1/2's parameter all-gather in the first forward, the gradient all-reduce
//!   (ZeRO-0) or reduce-scatter (ZeRO-1) beside the last backward, and the tied-embedding
//!   all-reduce of the first and last stages.
//! * **Symbolic analysis, §5.2.1.** The analogue of "one symbolic pass, then value
//!   substitution": per (layers, group shape, TP, micro-batch size) one table of per-layer
//!   quantities (hetplan's `ComputeTimes::layer_time`, `cost::comm`, `cost::memory`) with prefix
//!   sums over the checkpoint count; every configuration is then a few additions. Memory is
//!   the peak of hetplan's memory model (states sharded by ZeRO and reduced by the offload
//!   ratios, 1F1B in-flight activations of which AO leave the GPU except the one in progress,
//!   recompute working set, logits buffer, ZeRO-3's two gathered layers, allocator overhead,
//!   the CUDA context and NCCL's communicators for the stage's place in the pipeline), so
//!   that Mist and hetplan's estimate agree on what fits (Mist counts the job's default group
//!   on every GPU of the cluster, where the estimate counts the plan's).
//! * **Intra-stage tuning, Eq. 4.** Exhaustive ("we simply search in a brute-force way"):
//!   every (DP, TP) of the group (b = B / (G·DP), Table 2), every ZeRO level, every point of
//!   the offload grid and, for each, the fewest checkpointed layers that fit (exact: more
//!   recomputation only adds time, so larger counts are dominated; found by binary search on
//!   the prefix minimum of the memory curve). A grid point whose ratio one step lower fits
//!   with as few checkpointed layers is dominated and not costed. The Pareto frontier of
//!   (t, d) is sampled by sweeping α over [0, 1] in α·G·t + (1−α)·d ([`Mist::space`]`.alphas`
//!   samples, ties to G·t + d, then to the first found).
//! * **Inter-stage tuning, Eq. 2–3.** [`milp::solve`] linearises Eq. 2 (the two maxima by
//!   auxiliary variables) over one binary per (stage, layer count, group shape, sampled
//!   Pareto point) and solves it with microlp by default (called directly, under a node limit:
//!   [`MILP_NODE_ENTRIES`]), HiGHS through good_lp with `--features highs`
//!   (`#[cfg(feature = "highs")]` switches the backend). One MILP per (S, G), S =
//!   1..=min(layers, GPUs), G every divisor of the global batch. The objective is Eq. 1 — the
//!   same form hetplan's estimate uses — so inter-microbatch imbalance (the third term) and
//!   pipeline bubbles in which first/last-micro-batch work hides are priced.
//!
//! # Heterogeneous extension *(silent: Mist's device mesh is homogeneous)*
//!
//! Nodes are grouped into classes (GPU type, GPUs per node, bandwidths; a node with a pair
//! bandwidth override is a class of its own). A stage's device group is one of Alpa's submesh
//! shapes, which Mist's (nᵢ, mᵢ) follow, inside one class: a power-of-two slice (1, 2ᵏ) of a
//! node with 2ᵏ dividing its GPU count, or n whole nodes (n, M). Every intra-stage frontier is
//! computed on its class's GPU type, so every stage's memory fits its own GPUs. The MILP
//! chooses per stage a shape and a frontier point under one constraint per class: the
//! stages' GPUs of that class ≤ the class's GPUs. Because slice sizes form a divisor chain of
//! M, any choice within the counts packs onto the nodes ([`place`]: whole nodes first, then
//! slices first-fit decreasing). GPUs may stay unused when that is faster by Eq. 2.
//!
//! # Where the paper is silent, and what is chosen here
//!
//! * *Offload ratio granularity*: floats in [0, 1] (Table 2) without a step; a grid of
//!   quarters on each ratio (625 points per (DP, TP, ZeRO) before the dominance cut).
//! * *α samples*: 11, uniform.
//! * *Identical layers* (§5.1, §8: "its efficient tuning algorithm assumes identical
//!   layers"): a stage's cost depends on its layer count and position only — the first stage
//!   is costed on the first l layers (with the embedding), the last on the last l (with the
//!   head), a middle stage on blocks 1..=l. On models whose blocks differ, the MILP's picture
//!   is approximate; the returned plan is costed by hetplan's estimate on its real layers.
//! * *Checkpointed layers are the stage's first transformer layers* (hetplan's
//!   `Recompute::Layers`; the embedding and the head are never recomputed,
//!   `Layer::checkpointable`).
//! * *ZeRO-2 reduces gradients every micro-batch* (DeepSpeed's behaviour, hetplan's model);
//!   ZeRO above 0 is not searched with DP = 1 (nothing to shard).
//! * *Pipeline sends* are costed to a GPU of another node when the cluster has several (the
//!   neighbour's placement is not known inside a stage), else inside the node.
//! * *Interference defaults* other than compute/NCCL (the paper fits, and prints none):
//!   documented estimates in [`interference`]; in a combination of three or four streams a
//!   stream is slowed by the product of its pairwise factors.
//! * *Host memory* is not bounded (the paper states no host budget).
//! * *The returned plan* is the best by Eq. 2 over all (S, G) that hetplan's estimate confirms
//!   fits (Mist's memory model is hetplan's, so the first one normally does); `ranked` lists
//!   the best MILP solution of each (S, G), by Eq. 2, with hetplan's estimate beside it.
//! * *Schedule*: 1F1B (in-flight micro-batches min(S − i, G)); sequence parallelism off.
//!
//! # Bounds, cuts and determinism
//!
//! `Search::tick` is called per (S, G) and per intra-stage (stage, shape, TP, ZeRO) group of
//! configurations; a stopped search returns the best solution so far. Exact cuts: dominated
//! offload/checkpoint points are not costed; frontier points with G·t at least the best
//! Eq. 2 value found are left out of later MILPs ((G−1)·max t + Σ t ≥ G·tᵢ). Frontiers are
//! memoised per (layers, shape, G, in-flight count, neighbours), per-layer tables per
//! (layers, shape, TP, b). The MILP is not interruptible; its size is what the cuts leave.
//! Every order is fixed, ties keep the first, maps are `BTreeMap`s.
//!
//! Exact speed-ups (same plans, byte-identical `plan --json` apart from `search_time_s`):
//! [`interference::pred_intf`] skips combinations with an idle stream (bit-identical to
//! Algorithm 1, tested); the offload grid is walked once in loop order, and since the fewest
//! checkpointed layers never increase with a ratio, a point's lower neighbours bound it, so
//! dominated and non-fitting points take O(1); a ZeRO level whose fullest offload cannot fit
//! is skipped; the first/last passes reuse the stable ones when their inputs are the same.
//!
//! Search time (release, one core of a 2-core x86-64 VM shared with other builds, 60 s
//! budget), standalone `hetplan plan --scenario … --algo mist`: 16 A100 19.4 s → 5.4 s, 8 A100
//! 5.3 → 1.4 s, 4 L4 1.2 → 0.30 s, fig2-l4 0.51 → 0.12 s. `MIST_BUDGET_S=60 cargo bench -p
//! hetplan --bench mist` (one core busy beside it): 0.02–0.4 s on 2–4 GPUs, 1.9–2.5 s on 8,
//! 7.9–8.3 s on 16, 23 s on 32 A100 (exhausted); 32 L4 and the 256-GPU A100+V100+T4 cluster
//! (GPT-3 13B) stop at the time limit with their best plan so far (60.2 s and 66.5 s: the MILP
//! running when the limit passes is not interrupted).

pub mod interference;
pub mod milp;
pub mod stage;

use super::common::{self, StageChoice};
use super::{Outcome, Planner, PlannerError, Problem, Ranked, Search};
use crate::cluster::{Cluster, GpuId, NodeClass};
use crate::plan::{LayerRange, Plan, Recompute};
use crate::units::Seconds;
use interference::InterferenceParams;
use milp::Cand;
use stage::{CkptSpace, Point, Space, StageSpec, TableCache};
use std::collections::BTreeMap;

/// *(silent: the paper hands Eq. 2 to CBC and states no limit)* The branch-and-bound nodes of
/// one inter-stage MILP times its binaries. Every open node keeps a basis of one byte per
/// variable and its bound changes (24 B per branching above it), so this bounds the tree's
/// memory. Measured at 4,096 GPUs (`cargo bench -p hetplan --bench mist`, its second table;
/// GPT-3 13B on the three-type fleet): without a limit a program of 18,362 binaries held
/// 5.4 GB after 49k nodes in 30 s; one of 10,506 binaries needed 24,937 nodes (13.8 s, 1.3 GB)
/// to prove its optimum. 10⁸ gives that program 9,518 nodes, and its answer there is 59% above
/// the optimum (9% after 20,000 nodes): the price of the bound, paid only by programs of
/// thousands of binaries, which a time limit cut short before as well. The largest gets 5,446
/// nodes; the process peaked at 819 MB over six such programs, against 5.4 GB unlimited.
/// Programs under 5,000 binaries get 20,000 nodes or more.
pub const MILP_NODE_ENTRIES: u64 = 100_000_000;

/// The node limit of a MILP over `binaries` candidates: [`MILP_NODE_ENTRIES`] shared out, and
/// at least 1,000 nodes.
pub fn milp_node_limit(entries: u64, binaries: usize) -> u64 {
    (entries / (binaries as u64).max(1)).max(1_000)
}

/// The Mist planner: its search space and interference factors.
#[derive(Clone, Debug, PartialEq)]
pub struct Mist {
    pub space: Space,
    pub interference: InterferenceParams,
    /// How many of the best inter-stage solutions (one per (S, G)) to keep in `ranked`.
    pub ranked: usize,
    /// In which order the stage counts S are tried (the space is the same; a time limit
    /// decides how much of it is seen).
    pub stage_order: StageOrder,
    /// The branch-and-bound nodes of one inter-stage MILP times its binaries
    /// ([`MILP_NODE_ENTRIES`]; `None`: no limit). Past its limit the best integer solution
    /// found is taken, unproven, and the notes count such MILPs.
    pub milp_node_entries: Option<u64>,
}

/// The order of Mist's outer loop over stage counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StageOrder {
    /// 1, 2, 3, ... (the released code's loop).
    #[default]
    Ascending,
    /// Stage counts that are powers of two first (1, 2, 4, 8, ...), then the others
    /// ascending, and for each the micro-batch counts G from the most: under a time limit
    /// every scale of pipeline depth is tried early, and many small micro-batches (what fits
    /// and fills a pipeline) before few large ones. hetplan runs Mist so: with the paper's
    /// loops, MPT-30B on 16 workstation GPUs reaches its 4-stage, 64-micro-batch optimum only
    /// after 9 s.
    PowersFirst,
}

impl StageOrder {
    /// The micro-batch counts (divisors of the global batch) in this order.
    pub fn micro_batch_counts(self, global_batch: u64) -> Vec<u64> {
        let mut d = common::divisors(global_batch);
        if self == StageOrder::PowersFirst {
            d.reverse();
        }
        d
    }

    /// The stage counts 1..=max in this order.
    pub fn counts(self, max: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (1..=max).collect();
        if self == StageOrder::PowersFirst {
            all.sort_by_key(|&s| (!s.is_power_of_two(), s));
        }
        all
    }
}

impl Default for Mist {
    /// The full space: ZeRO 0–3, any number of checkpointed layers, offload ratios on a grid
    /// of quarters, α sampled at 11 points.
    fn default() -> Self {
        Mist {
            space: Space {
                max_zero: 3,
                ckpt: CkptSpace::Tuned,
                // *(silent)* The paper's ratios are floats in [0, 1] (Table 2) with no stated
                // granularity; a grid of quarters on each of the four keeps the exhaustive
                // intra-stage search at 625 offload points per (DP, TP, ZeRO).
                offload_steps: 4,
                // *(silent)* "a series of α ∈ [0, 1] are sampled uniformly": 11 samples.
                alphas: 11,
            },
            interference: InterferenceParams::default(),
            ranked: 10,
            stage_order: StageOrder::Ascending,
            milp_node_entries: Some(MILP_NODE_ENTRIES),
        }
    }
}

impl Mist {
    /// Mist's search restricted to full activation checkpointing on every stage, no ZeRO and
    /// no offloading (Fig. 2(b): Megatron-LM's and Alpa's memory strategy, parallelism tuned).
    pub fn full_checkpointing() -> Mist {
        let mut m = Mist::default();
        m.space.max_zero = 0;
        m.space.ckpt = CkptSpace::Full;
        m.space.offload_steps = 0;
        m
    }

    /// Parallelism only: no ZeRO, no checkpointing, no offloading (Fig. 2(a)).
    pub fn parallelism_only() -> Mist {
        let mut m = Mist::default();
        m.space.max_zero = 0;
        m.space.ckpt = CkptSpace::Off;
        m.space.offload_steps = 0;
        m
    }
}

/// The node classes Mist places device groups on: the cluster's (`Cluster::node_classes`),
/// those with GPUs.
pub fn node_classes(cluster: &Cluster) -> Vec<NodeClass> {
    let mut classes = cluster.node_classes();
    classes.retain(|c| c.per_node > 0);
    classes
}

/// A device-group shape: `nodes` whole nodes of a class, or a power-of-two slice of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub class: usize,
    pub nodes: u32,
    pub per_node: u32,
}

impl Shape {
    pub fn gpus(&self) -> u32 {
        self.nodes * self.per_node
    }
}

/// Alpa's submesh shapes, which Mist's (nᵢ, mᵢ) follow: (1, 2ᵏ) inside a node and (n, M)
/// whole nodes, per node class. *(silent)* With M not a power of two, the in-node slices are
/// the powers of two dividing M, so that the slices of a class always pack into its nodes
/// when their GPU count allows (every size divides the next and M).
pub fn shapes(classes: &[NodeClass]) -> Vec<Shape> {
    let mut out = Vec::new();
    for (ci, c) in classes.iter().enumerate() {
        let mut m = 1;
        while m < c.per_node {
            if c.per_node.is_multiple_of(m) {
                out.push(Shape {
                    class: ci,
                    nodes: 1,
                    per_node: m,
                });
            }
            m *= 2;
        }
        for n in 1..=c.nodes.len() as u32 {
            out.push(Shape {
                class: ci,
                nodes: n,
                per_node: c.per_node,
            });
        }
    }
    out
}

/// The canonical devices of a shape (its class's first nodes, first GPUs).
fn canonical(classes: &[NodeClass], s: Shape) -> Vec<GpuId> {
    let c = &classes[s.class];
    c.nodes[..s.nodes as usize]
        .iter()
        .flat_map(|&n| (0..s.per_node).map(move |l| GpuId { node: n, local: l }))
        .collect()
}

/// Places the chosen shapes on GPUs: whole-node groups take whole nodes in stage order, slices
/// first-fit in decreasing size. `None` if they do not fit (cannot happen within the MILP's
/// GPU-count constraint; see [`shapes`]).
pub fn place(classes: &[NodeClass], picks: &[Shape]) -> Option<Vec<Vec<GpuId>>> {
    let mut out: Vec<Vec<GpuId>> = vec![Vec::new(); picks.len()];
    for (ci, c) in classes.iter().enumerate() {
        let mut used = vec![0u32; c.nodes.len()];
        for (si, s) in picks.iter().enumerate() {
            if s.class != ci || s.per_node != c.per_node {
                continue;
            }
            for _ in 0..s.nodes {
                let k = used.iter().position(|&u| u == 0)?;
                used[k] = c.per_node;
                out[si].extend((0..c.per_node).map(|l| GpuId {
                    node: c.nodes[k],
                    local: l,
                }));
            }
        }
        let mut slices: Vec<usize> = (0..picks.len())
            .filter(|&i| picks[i].class == ci && picks[i].per_node < c.per_node)
            .collect();
        slices.sort_by(|&a, &b| picks[b].per_node.cmp(&picks[a].per_node).then(a.cmp(&b)));
        for si in slices {
            let m = picks[si].per_node;
            let k = used.iter().position(|&u| u + m <= c.per_node)?;
            out[si].extend((used[k]..used[k] + m).map(|l| GpuId {
                node: c.nodes[k],
                local: l,
            }));
            used[k] += m;
        }
    }
    Some(out)
}

/// One inter-stage solution: Eq. 2's value and the plan.
struct Solution {
    cost: f64,
    plan: Plan,
    /// Per stage: the intra-stage point chosen.
    points: Vec<Point>,
}

/// Memo of intra-stage frontiers: (start, end, shape, G, in-flight, sends, tied, S ≥ 3).
type FrontierKey = (usize, usize, Shape, u64, u64, u32, bool, bool);

/// The candidates of one inter-stage MILP: per stage, Eq. 2's (t, d, l, GPUs) and what they
/// stand for.
pub struct StageCandidates {
    pub cands: Vec<Vec<Cand>>,
    pub meta: Vec<Vec<(Shape, Point)>>,
    /// GPUs per node class: the MILP's capacity constraints.
    pub caps: Vec<u32>,
}

/// The state of one tuning run: node classes, shapes and the memos of the intra-stage search.
struct Tuner<'p, 'a> {
    mist: &'p Mist,
    problem: &'p Problem<'a>,
    classes: Vec<NodeClass>,
    caps: Vec<u32>,
    shapes: Vec<Shape>,
    heads: Vec<(u64, u64)>,
    tied_all: f64,
    cache: TableCache,
    frontiers: BTreeMap<FrontierKey, Vec<Point>>,
    points_total: u64,
    cut_by_bound: u64,
}

impl<'p, 'a> Tuner<'p, 'a> {
    fn new(mist: &'p Mist, problem: &'p Problem<'a>) -> Self {
        let classes = node_classes(problem.cluster);
        let caps = classes
            .iter()
            .map(|c| c.per_node * c.nodes.len() as u32)
            .collect();
        let shapes = shapes(&classes);
        Tuner {
            mist,
            problem,
            caps,
            shapes,
            classes,
            heads: stage::attention_heads(problem),
            tied_all: stage::tied_params(problem),
            cache: BTreeMap::new(),
            frontiers: BTreeMap::new(),
            points_total: 0,
            cut_by_bound: 0,
        }
    }

    /// The MILP's candidates for S stages and G micro-batches: for every stage position, layer
    /// count and shape, the sampled intra-stage frontier, without the points whose G·t reaches
    /// `bound`. `Err(())` when the search limit stopped it; `Ok(None)` when a stage has no
    /// candidate.
    fn candidates(
        &mut self,
        s: usize,
        g: u64,
        bound: f64,
        search: &mut Search<'_>,
    ) -> Result<Option<StageCandidates>, ()> {
        let problem = self.problem;
        let cluster = problem.cluster;
        let n_layers = problem.model.layers.len();
        let mut cands: Vec<Vec<Cand>> = Vec::with_capacity(s);
        let mut meta: Vec<Vec<(Shape, Point)>> = Vec::with_capacity(s);
        for i in 0..s {
            let in_flight = ((s - i) as u64).min(g);
            let sends = (i > 0) as u32 + (i + 1 < s) as u32;
            let tied = if s >= 2 && (i == 0 || i + 1 == s) {
                self.tied_all
            } else {
                0.0
            };
            let lmax = n_layers + 1 - s;
            let mut cs = Vec::new();
            let mut ms = Vec::new();
            for l in if s == 1 {
                n_layers..=n_layers
            } else {
                1..=lmax
            } {
                // *(silent)* Mist's layers are identical (§5.1, §8); a middle stage of l layers
                // is costed on blocks 1..=l, the first stage on the first l layers (with the
                // embedding), the last on the last l (with the head).
                let (start, end) = if s == 1 {
                    (0, n_layers)
                } else if i == 0 {
                    (0, l)
                } else if i + 1 == s {
                    (n_layers - l, n_layers)
                } else {
                    (1, 1 + l)
                };
                for si in 0..self.shapes.len() {
                    let shape = self.shapes[si];
                    let key = (start, end, shape, g, in_flight, sends, tied > 0.0, s >= 3);
                    if !self.frontiers.contains_key(&key) {
                        let gpu = &cluster.gpu_types[self.classes[shape.class].gpu_type.0];
                        let ctx = stage::Ctx {
                            problem,
                            gpu,
                            space: self.mist.space,
                            interference: &self.mist.interference,
                            heads: self.heads.clone(),
                        };
                        let spec = StageSpec {
                            start,
                            end,
                            devices: canonical(&self.classes, shape),
                            per_node: shape.per_node,
                            micro_batches: g,
                            in_flight,
                            sends,
                            tied_params: tied,
                            deep: s >= 3,
                        };
                        let pts =
                            stage::intra_stage(&ctx, &spec, &mut self.cache, search).ok_or(())?;
                        self.points_total += pts.len() as u64;
                        self.frontiers.insert(key, pts);
                    }
                    for p in &self.frontiers[&key] {
                        // (G − 1)·max t + Σ t ≥ G·tᵢ: a point this slow cannot beat the best
                        // solution found.
                        if g as f64 * p.t >= bound {
                            self.cut_by_bound += 1;
                            continue;
                        }
                        let mut usage = vec![0u32; self.classes.len()];
                        usage[shape.class] = shape.gpus();
                        cs.push(Cand {
                            t: p.t,
                            d: p.d,
                            layers: l,
                            usage,
                        });
                        ms.push((shape, *p));
                    }
                }
            }
            if cs.is_empty() {
                return Ok(None);
            }
            cands.push(cs);
            meta.push(ms);
        }
        Ok(Some(StageCandidates {
            cands,
            meta,
            caps: self.caps.clone(),
        }))
    }
}

impl Mist {
    /// The inter-stage MILP's candidates for `stages` stages and `micro_batches` micro-batches
    /// (every sampled Pareto point, no bound): what Eq. 2 chooses from. `None` when a stage has
    /// no candidate or the search stopped.
    pub fn stage_candidates(
        &self,
        problem: &Problem<'_>,
        stages: usize,
        micro_batches: u64,
        search: &mut Search<'_>,
    ) -> Option<StageCandidates> {
        if stages == 0
            || micro_batches == 0
            || !problem.global_batch.is_multiple_of(micro_batches)
            || stages > problem.model.layers.len()
        {
            return None;
        }
        Tuner::new(self, problem)
            .candidates(stages, micro_batches, f64::INFINITY, search)
            .ok()
            .flatten()
    }
}

impl Planner for Mist {
    fn name(&self) -> &'static str {
        "mist"
    }

    fn description(&self) -> &'static str {
        "Mist (EuroSys '25): ZeRO, per-stage checkpointing and offloading co-tuned with \
         parallelism; intra-stage Pareto frontiers joined by an imbalance-aware MILP"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let cluster = problem.cluster;
        let n_layers = problem.model.layers.len();
        let n_gpus = cluster.num_gpus();
        if problem.global_batch == 0 {
            return Err(PlannerError::Infeasible(
                "the global batch is 0 samples: give at least one".into(),
            ));
        }
        if n_layers == 0 {
            return Err(PlannerError::Infeasible("the model has no layers".into()));
        }
        if n_gpus == 0 {
            return Err(PlannerError::Infeasible("the cluster has no GPUs".into()));
        }
        if let Err(e) = crate::plan::validate::validate_seq_len(problem.model, problem.seq_len) {
            return Err(PlannerError::Infeasible(e));
        }
        let mut tuner = Tuner::new(self, problem);
        let mut solutions: Vec<Solution> = Vec::new();
        let mut best_cost = f64::INFINITY;
        let (mut milps, mut cands_total, mut unproven) = (0u64, 0u64, 0u64);
        let mut stopped = false;
        'outer: for s in self.stage_order.counts(n_layers.min(n_gpus)) {
            for g in self.stage_order.micro_batch_counts(problem.global_batch) {
                if !search.tick() {
                    stopped = true;
                    break 'outer;
                }
                let sc = match tuner.candidates(s, g, best_cost, search) {
                    Err(()) => {
                        stopped = true;
                        break 'outer;
                    }
                    Ok(None) => continue,
                    Ok(Some(sc)) => sc,
                };
                let StageCandidates {
                    cands: stages,
                    meta,
                    caps,
                } = sc;
                cands_total += stages.iter().map(|c| c.len() as u64).sum::<u64>();
                // The MILP cannot be interrupted: it gets the time left, and none is left
                // once the limit has passed (the clock is read now, not every 256 ticks).
                if !search.within_time() {
                    stopped = true;
                    break 'outer;
                }
                milps += 1;
                let limits = milp::MilpLimits {
                    nodes: self
                        .milp_node_entries
                        .map(|e| milp_node_limit(e, stages.iter().map(Vec::len).sum())),
                    time: search.remaining(),
                };
                let Some(solved) = milp::solve(&stages, g, n_layers, &caps, limits) else {
                    continue;
                };
                unproven += u64::from(!solved.proven_optimal);
                let (picks, cost) = (solved.picks, solved.value);
                let chosen: Vec<(Shape, Point)> =
                    picks.iter().enumerate().map(|(i, &c)| meta[i][c]).collect();
                let shapes_chosen: Vec<Shape> = chosen.iter().map(|c| c.0).collect();
                let Some(devices) = place(&tuner.classes, &shapes_chosen) else {
                    continue;
                };
                let mut start = 0;
                let mut choices = Vec::with_capacity(s);
                for (i, (&(_, p), devs)) in chosen.iter().zip(devices).enumerate() {
                    let l = stages[i][picks[i]].layers;
                    let cfg = p.config;
                    let blocks = (start..start + l)
                        .filter(|&j| problem.model.layers[j].checkpointable())
                        .count();
                    let recompute = match cfg.ckpt as usize {
                        0 => Recompute::None,
                        n if n >= blocks => Recompute::Full,
                        n => Recompute::Layers(n as u32),
                    };
                    choices.push(StageChoice {
                        layers: LayerRange {
                            start,
                            end: start + l,
                        },
                        devices: devs,
                        tp: cfg.tp,
                        micro_batch_sizes: vec![cfg.micro_batch; cfg.dp as usize],
                        zero: cfg.zero,
                        recompute,
                        offload: cfg.offload,
                    });
                    start += l;
                }
                let plan = common::make_plan(problem, choices, g);
                if cost < best_cost {
                    best_cost = cost;
                }
                search.offer(Seconds(cost));
                solutions.push(Solution {
                    cost,
                    plan,
                    points: chosen.iter().map(|c| c.1).collect(),
                });
            }
        }
        // Best by Eq. 2 first; ties keep the search order.
        solutions.sort_by(|a, b| a.cost.total_cmp(&b.cost));
        let mut ranked = Vec::new();
        let mut answer: Option<(usize, crate::cost::Estimate)> = None;
        let mut notes = Vec::new();
        for (i, sol) in solutions.iter().enumerate() {
            let est = common::evaluate(problem, &sol.plan);
            let (fits, est_s) = est
                .as_ref()
                .map_or((false, f64::NAN), |e| (e.fits, e.iteration_time_s));
            if answer.is_none() && fits {
                answer = Some((i, est.clone().expect("fits implies an estimate")));
            }
            if ranked.len() < self.ranked {
                ranked.push(Ranked {
                    plan: sol.plan.clone(),
                    planner_cost_s: sol.cost,
                    estimate_s: est_s,
                    fits,
                });
            }
        }
        notes.push(format!(
            "searched ZeRO 0–{}, {}, offload ratios {}, α sampled at {} points; {} inter-stage \
             MILPs (stages × micro-batch counts) over {} candidates from {} Pareto points; {} \
             points cut because G·t already exceeded the best solution; {}",
            self.space.max_zero,
            match self.space.ckpt {
                CkptSpace::Tuned => "any number of checkpointed layers per stage",
                CkptSpace::Full => "full checkpointing only",
                CkptSpace::Off => "no checkpointing",
            },
            if self.space.offload_steps == 0 {
                "off".to_string()
            } else {
                format!("on a grid of 1/{}", self.space.offload_steps)
            },
            self.space.alphas,
            milps,
            cands_total,
            tuner.points_total,
            tuner.cut_by_bound,
            match (unproven, self.milp_node_entries) {
                (0, _) => "every MILP solved to optimality".to_string(),
                (n, Some(e)) => format!(
                    "{n} MILP(s) stopped at their limit (branch-and-bound nodes × binaries ≤ \
                     {e}, or the time) with their best integer solution, unproven"
                ),
                (n, None) => format!(
                    "{n} MILP(s) stopped at the time limit with their best integer solution, \
                     unproven"
                ),
            }
        ));
        match answer {
            Some((i, estimate)) => {
                let sol = &solutions[i];
                if i > 0 {
                    notes.push(format!(
                        "the {i} solution(s) Mist ranks higher do not fit in memory by hetplan's \
                         estimate; the best that fits is returned"
                    ));
                }
                for (si, (st, p)) in sol.plan.stages.iter().zip(&sol.points).enumerate() {
                    notes.push(format!(
                        "stage {si}: {} GPUs dp={} tp={} b={} ZeRO-{} ckpt {}/{} offload \
                         W{:.2} G{:.2} O{:.2} A{:.2}: Mist t={:.3}s d={:.3}s, peak {:.1} GiB",
                        st.devices.len(),
                        st.dp,
                        st.tp,
                        p.config.micro_batch,
                        st.zero,
                        p.config.ckpt,
                        st.layers.len(),
                        st.offload.weights,
                        st.offload.gradients,
                        st.offload.optimizer,
                        st.offload.activations,
                        p.t,
                        p.d,
                        p.memory / (1u64 << 30) as f64
                    ));
                }
                Ok(Outcome {
                    plan: sol.plan.clone(),
                    estimate,
                    explored: search.explored(),
                    stop_reason: search.stop_reason(),
                    ranked,
                    notes,
                    per_engine: Vec::new(),
                })
            }
            None if stopped || search.stopped() => Err(PlannerError::Stopped(search.stop_reason())),
            None => Err(PlannerError::Infeasible(format!(
                "{} (Mist searched ZeRO 0–{}, {}, offloading {})",
                common::infeasible_reason(problem, cluster),
                self.space.max_zero,
                match self.space.ckpt {
                    CkptSpace::Tuned => "tuned checkpointing",
                    CkptSpace::Full => "full checkpointing",
                    CkptSpace::Off => "no checkpointing",
                },
                if self.space.offload_steps == 0 {
                    "off"
                } else {
                    "on"
                }
            ))),
        }
    }
}
