//! The referee: an exhaustive search of the whole union of the seed planners' spaces, for tiny
//! problems (about ≤ 4 GPUs of two types and ≤ 6 layers), evaluated with hetplan's estimate.
//! Slow and readable on purpose: it is what hetplan's planner is measured against
//! (`tests/hetplan_referee.rs`), not a planner (it is not in `planners::all()`).
//!
//! # The space
//!
//! Every plan that is valid for the problem (`plan::validate`) and made of these choices:
//!
//! - **GPUs**: any non-empty subset of the cluster's GPUs (GPUs may be left out), in `pp`
//!   ordered pipeline stages, `1 ≤ pp ≤ min(GPUs, layers)`.
//! - **Replicas**: each stage's GPUs split into an *ordered* list of data-parallel replicas,
//!   each a tensor-parallel group of `t` GPUs, `t` in [`tp_degrees`]: at most
//!   `options.max_tp`, dividing the heads (and fitting the KV heads) of every attention core of
//!   the model. A group may span nodes, as the Megatron heuristic's and Alpa's placements
//!   make them where nodes are too small, with its ranks' nodes in any order. Replicas of one
//!   stage may have different degrees when each divides the largest (`Stage::replica_tp`,
//!   empty when they are all equal).
//! - **Layers**: every contiguous split into non-empty stages (model chunks).
//! - **Batches**: every number of micro-batches `m` dividing the global batch (a multiple of `pp`
//!   when interleaved), and every split of the `global_batch / m` samples of a micro-batch over
//!   the replicas of each stage, each replica `1..=options.max_micro_batch` samples.
//! - **Memory options, per stage**: ZeRO 0–3 (0 only without data parallelism); activation
//!   checkpointing none, selective, full, or the first `k` layers (`1 ≤ k < ` the stage's
//!   layers; per model chunk when interleaved); sequence parallelism off, or on when the
//!   stage's TP degree is above 1; weights, gradients and optimizer states each on the GPU or
//!   all of them in host memory (`offload.weights`, `.gradients`, `.optimizer` each 0 or 1;
//!   Mist's offloading at its extremes).
//! - **Schedules**: 1F1B, GPipe, and interleaved 1F1B with 2 virtual stages (`2·pp` chunks,
//!   chunk j on the GPUs of chunk j mod pp, with its layout), wherever valid (`pp = 1` too).
//! - **TP communication overlap** (`tp_comm_overlap`) off, or on where a stage has TP and
//!   every TP group sits in one node (every such stage then with sequence parallelism): hetplan's own move, in no seed's space, but
//!   one whose plans the local search reaches from every seed's, so the referee holds it.
//! - The problem's engine and precision, default collective types, equal step counts.
//!
//! **Outside it** (so [`contains`] says no): offload ratios other than 0 and 1 (Mist's α-swept
//! ratios such as 0.25, and hetplan's 0.5 and the 0.25–0.75 ratios it takes from Mist: a
//! continuum that cannot be exhausted) and any offloading of activations; per-replica step
//! counts (`replica_samples`, Poplar's uneven last batches); TP degrees outside
//! [`tp_degrees`] (e.g. a degree that only an embedding-only stage allows); interleaving with
//! more than 2 virtual stages; other collective types; ZeRO-3 without data parallelism;
//! sequence parallelism at TP degree 1; micro-batches above `options.max_micro_batch`; expert
//! and context parallelism (`ep`, `cp` above 1: hetplan's own moves, in no seed's space);
//! op-level checkpointing (`Recompute::Ops`, torchtitan's: hetplan's own move where the engine
//! runs PyTorch code, in no seed's space).
//! `options.runtime` is ignored: the space is that of any runtime.
//!
//! # What it exploits, and why that is exact
//!
//! **GPUs of one node are interchangeable.** The estimate (`cost::estimate`) and the validator
//! read a `GpuId` only through its node (GPU type, bandwidths, host memory, `g.node`) and
//! through equality (a GPU listed once; a send to the same GPU; members counted per node);
//! `local` is copied into the per-GPU report and nothing else. So renaming the GPUs inside each
//! node (a bijection per node) changes neither the iteration time nor whether the plan fits,
//! and every plan is such a renaming of its *canonical form*, in which the GPUs of each node are
//! numbered 0, 1, 2, … in the order the plan first lists them (physical stages in order, replicas
//! in order, TP ranks in order). The referee enumerates canonical forms only: it chooses the
//! node of each rank of each replica, and gives it that node's next free GPU. The *order* of
//! replicas is not a symmetry (replica r sends to replica `r mod dp` of the neighbouring stage,
//! and the tied embedding pairs replicas likewise), nor is the order of a group's ranks across
//! nodes (rank 0 sends the pipeline's activations, rank k pairs with rank k of the neighbour
//! and joins the k-th DP ring), so every order is enumerated, each with every sample split.
//! Nodes are not merged either (a ring's crossings depend on node order).
//!
//! **Equivalent values are enumerated once.** The estimate reads a stage's checkpointing only
//! through `memory::recomputed_layers`, `== Selective` and `== Ops` (and HFU, a report), so
//! `Layers(0)` *is* `None` and `Layers(len)` *is* `Full` (on a chunk holding the embedding or
//! the head, which are never recomputed, `Layers(k)` for k at least its transformer layers is
//! `Full` too, and is enumerated beside it: more candidates, the same optimum); ZeRO 1 and 2 without data parallelism
//! shard over one replica, so they are ZeRO 0 (every use is guarded by `dp > 1` or divides by
//! `dp`); `replica_tp` listing one degree for every replica is `tp`. [`contains`] accepts these
//! forms; the referee evaluates the first of each.
//!
//! Nothing else is merged. [`optimum`] estimates every candidate ([`Enumeration::Every`]);
//! ties keep the first found in the fixed order of the loops (pipeline depth, replica layout,
//! schedule, layer split, micro-batch count, sample splits, memory options). The product grows
//! fast: a 4-GPU, 6-layer problem has 0.5 to 2.2 billion candidates with a global batch of 4,
//! 1.3 to 5 billion with 8 (two nodes of two GPUs; four nodes of one), at about 6 µs an
//! estimate (opt-level 1) hours to days. [`space_size`] counts them without estimating any.
//!
//! # Undominated memory options ([`Enumeration::Undominated`])
//!
//! The same optimum from far fewer candidates (a few hundredths to a thousandth on 4-GPU
//! problems: about the sum of the stages' options per skeleton, `SpaceSize::stage_options`,
//! instead of their product), by dropping memory options that another option of the *same
//! stage* provably does at least as well as. Fix a skeleton (everything but the memory
//! options) and, for each stage with data parallelism, whether it runs ZeRO-3. Then a physical
//! stage p's remaining options — ZeRO 0, 1 or 2 (or 3), sequence parallelism, offloading, each
//! chunk's checkpointing — change only p's own numbers in `cost::estimate`:
//!
//! - its per-micro-batch time `t_p` (the sum over its chunks of the slowest replica's
//!   `replica_time`: compute, recomputation, TP all-reduces on its own devices (sharing a
//!   node's network with the other stages' cross-node TP groups, fixed by the devices), sends
//!   whose bytes and contention (`NicLoad::sends`, `SendTiming`: when they leave is timed by
//!   model FLOPs) depend on micro-batch sizes, TP degrees, layers and devices only, ZeRO-2/3 and
//!   offload traffic of its own);
//! - its end-of-iteration extra `d_p` (`end_of_iteration`: its own DP synchronisation, whose
//!   ring sharing `NicLoad::dp_rings` counts the rings of every stage with `dp > 1` and
//!   `zero ≤ 2` — fixed once ZeRO-3-or-not is; the tied embedding, fixed by the devices; its own
//!   optimizer step), and its start `s_p` (its own ZeRO-1/2 parameter gather ahead of its
//!   first forward);
//! - its GPUs' memory (`device_memory` of its chunks only) and the host memory they take
//!   (offloaded states: its own parameters, ZeRO and offload; activations are never offloaded
//!   here).
//!
//! The iteration time is `T = Σ_p s_p + (m − 1/v)·max_p t_p + Σ_p t_p / v + max(0, max_p (d_p −
//! Σ_{q<p} t_q / v))`, non-decreasing in every `s_p`, `d_p` and `t_q` (raising `t_q` by δ adds
//! δ/v to the sum and takes at most δ/v off the last term); the plan fits when every GPU fits
//! and every node's host memory holds the sum of its GPUs' offloaded bytes. So if option o' of
//! stage p fits p's GPUs and has `t'_p ≤ t_p`, `d'_p ≤ d_p`, `s'_p ≤ s_p` and no more host
//! memory on any node than
//! option o, then any candidate with o becomes, with o' instead, a candidate that is no slower
//! and fits whenever it did: options that do not fit p's GPUs, or that another option
//! dominates (or equals and precedes), never make the optimum better and are dropped. Per
//! skeleton and ZeRO-3 choice this estimates each stage's options once (the other stages at
//! their first option; the first options together are the plan without memory options, or
//! with ZeRO-3) and then the product of the options kept. The premise is checked on every
//! estimate: the other stages' numbers must not move (`independence_violations`, which the
//! tests assert is 0), and the tests check that both enumerations find the same optimum on
//! generated problems. Up to floating-point rounding of `T`'s sums, the optimum is the same;
//! under ties the plan returned may differ.

use super::common;
use super::{PlannerError, Problem, Search, StopReason};
use crate::cluster::GpuId;
use crate::cost::Estimate;
use crate::model::OpKind;
use crate::plan::validate::tp_fits_kv_heads;
use crate::plan::{Offload, Plan, Recompute, Schedule, Stage};
use crate::units::Seconds;

/// The schedules the referee enumerates, in its order.
pub const SCHEDULES: [Schedule; 3] = [
    Schedule::OneFOneB,
    Schedule::Gpipe,
    Schedule::Interleaved { virtual_stages: 2 },
];

/// How [`optimum_with`] enumerates each stage's memory options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enumeration {
    /// Every candidate of the space.
    Every,
    /// Only memory options no other option of the same stage dominates (see the module
    /// documentation): the same optimum, from far fewer candidates.
    Undominated,
}

/// What the referee found.
#[derive(Clone, Debug)]
pub struct RefereeAnswer {
    /// The fastest candidate that fits (by hetplan's estimate), ties to the first found.
    pub best: Option<(Plan, Estimate)>,
    /// Candidates estimated.
    pub candidates: u64,
    /// Of them, those that fit.
    pub fitting: u64,
    /// Of those, the ones without memory options (ZeRO 0, no checkpointing, nothing
    /// offloaded, no sequence parallelism): 0 when only memory options make a plan fit. Both
    /// enumerations estimate every such candidate exactly once, so both count the same.
    pub fitting_plain: u64,
    /// Candidates the validator refused: 0 unless the enumeration is wrong (tests assert it).
    pub invalid: u64,
    /// [`Enumeration::Undominated`]: estimates in which another stage's effect changed with a
    /// stage's memory options — 0 unless the premise of its argument is wrong (tests assert it).
    pub independence_violations: u64,
    /// `Exhausted` when every candidate was estimated; otherwise the limit that stopped it (the
    /// best plan is then only the best of those seen).
    pub stop_reason: StopReason,
}

/// A data-parallel replica: a TP group, as the node of each of its ranks in rank order (its
/// degree is their number).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Replica {
    nodes: Vec<u32>,
}

impl Replica {
    fn tp(&self) -> u32 {
        self.nodes.len() as u32
    }
}

/// The memory options of a physical stage: shared by its model chunks (with interleaving) but
/// checkpointing, chosen per chunk.
#[derive(Clone, Debug, PartialEq)]
struct StageOption {
    zero: u8,
    sequence_parallel: bool,
    offload: Offload,
    /// One per model chunk of the stage, in layer order.
    recompute: Vec<Recompute>,
}

/// Everything of a candidate but its memory options.
struct Skeleton<'s> {
    schedule: Schedule,
    /// Devices of each physical stage, replica-major, and its replicas.
    devices: &'s [Vec<GpuId>],
    layout: &'s [Vec<Replica>],
    /// Layers of each model chunk (`pp × v` of them).
    lengths: &'s [usize],
    micro_batches: u64,
    /// Micro-batch size of each replica of each physical stage.
    sizes: &'s [Vec<u64>],
    /// TP communication overlap (`Plan::tp_comm_overlap`); only for layouts with TP, whose
    /// TP stages then all run sequence parallelism (the validation's rule).
    tp_overlap: bool,
}

/// TP degrees a replica may have: `1..=options.max_tp`, at most the cluster's GPUs, dividing
/// the heads and fitting the KV heads of every attention core of the model.
pub fn tp_degrees(problem: &Problem<'_>) -> Vec<u32> {
    let shapes: Vec<(u64, u64)> = (problem.model.layers.iter())
        .flat_map(|l| l.ops.iter())
        .filter_map(|op| match op.kind {
            OpKind::Attention {
                heads, kv_heads, ..
            } => Some((heads, kv_heads)),
            _ => None,
        })
        .collect();
    let gpus = problem.cluster.num_gpus() as u32;
    (1..=problem.options.max_tp.min(gpus))
        .filter(|&t| {
            shapes.iter().all(|&(heads, kv)| {
                heads.is_multiple_of(t as u64) && tp_fits_kv_heads(t as u64, kv)
            })
        })
        .collect()
}

/// Every TP group of `tp` ranks that fits in `free` GPUs per node: each rank's node, in rank
/// order (lexicographic).
fn tp_groups(free: &mut [u32], tp: u32) -> Vec<Replica> {
    fn rec(free: &mut [u32], left: u32, acc: &mut Vec<u32>, out: &mut Vec<Replica>) {
        if left == 0 {
            out.push(Replica { nodes: acc.clone() });
            return;
        }
        for node in 0..free.len() {
            if free[node] == 0 {
                continue;
            }
            free[node] -= 1;
            acc.push(node as u32);
            rec(free, left - 1, acc, out);
            acc.pop();
            free[node] += 1;
        }
    }
    let mut out = Vec::new();
    rec(free, tp, &mut Vec::new(), &mut out);
    out
}

/// Every ordered, non-empty list of replicas that fits in `free` GPUs per node, whose degrees
/// all divide the largest of them (`Stage::replica_tp`'s rule). Depth first: a list comes
/// before its extensions; replicas by degree, then by their ranks' nodes.
fn stage_layouts(free: &[u32], degrees: &[u32]) -> Vec<Vec<Replica>> {
    fn rec(free: &mut [u32], degrees: &[u32], acc: &mut Vec<Replica>, out: &mut Vec<Vec<Replica>>) {
        for &tp in degrees {
            for replica in tp_groups(free, tp) {
                for &n in &replica.nodes {
                    free[n as usize] -= 1;
                }
                acc.push(replica);
                let largest = acc.iter().map(Replica::tp).max().unwrap_or(1);
                if acc.iter().all(|r| largest.is_multiple_of(r.tp())) {
                    out.push(acc.clone());
                }
                // A longer list may still become valid (a larger degree joins later).
                rec(free, degrees, acc, out);
                let replica = acc.pop().expect("pushed above");
                for &n in &replica.nodes {
                    free[n as usize] += 1;
                }
            }
        }
    }
    let mut out = Vec::new();
    rec(&mut free.to_vec(), degrees, &mut Vec::new(), &mut out);
    out
}

/// Calls `visit` with every sequence of `pp` stage layouts that fits in the cluster together,
/// depth first; stops when `visit` returns `false`.
fn for_each_layout(
    free: &mut Vec<u32>,
    degrees: &[u32],
    pp: usize,
    acc: &mut Vec<Vec<Replica>>,
    visit: &mut dyn FnMut(&[Vec<Replica>]) -> bool,
) -> bool {
    if acc.len() == pp {
        return visit(acc);
    }
    for stage in stage_layouts(free, degrees) {
        for n in stage.iter().flat_map(|r| &r.nodes) {
            free[*n as usize] -= 1;
        }
        acc.push(stage);
        let go = for_each_layout(free, degrees, pp, acc, visit);
        let stage = acc.pop().expect("pushed above");
        for n in stage.iter().flat_map(|r| &r.nodes) {
            free[*n as usize] += 1;
        }
        if !go {
            return false;
        }
    }
    true
}

/// The canonical devices of a layout: each rank takes the next free GPU of its node, in stage,
/// replica and rank order.
fn canonical_devices(layout: &[Vec<Replica>], nodes: usize) -> Vec<Vec<GpuId>> {
    let mut taken = vec![0u32; nodes];
    layout
        .iter()
        .map(|stage| {
            (stage.iter().flat_map(|r| &r.nodes))
                .map(|&node| {
                    let local = taken[node as usize];
                    taken[node as usize] += 1;
                    GpuId { node, local }
                })
                .collect()
        })
        .collect()
}

/// Every split of `samples` over `replicas` replicas, each `1..=max` (ordered: replicas differ
/// in their neighbours), lexicographic.
fn sample_splits(samples: u64, replicas: usize, max: u64) -> Vec<Vec<u64>> {
    common::bounded_compositions(samples, replicas, max, usize::MAX)
}

/// Calls `visit` with every choice of one option per list (lexicographic); stops when `visit`
/// returns `false`.
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
    rec(options, &mut Vec::with_capacity(options.len()), visit)
}

fn virtual_stages(schedule: Schedule) -> usize {
    match schedule {
        Schedule::Interleaved { virtual_stages } => virtual_stages as usize,
        _ => 1,
    }
}

/// Calls `visit` with every skeleton of the space, in the referee's order; stops when `visit`
/// returns `false` (and returns `false`).
fn for_each_skeleton(problem: &Problem<'_>, visit: &mut dyn FnMut(&Skeleton<'_>) -> bool) -> bool {
    let cluster = problem.cluster;
    let layers = problem.model.layers.len();
    let gbs = problem.global_batch;
    let degrees = tp_degrees(problem);
    let mut free: Vec<u32> = cluster.nodes.iter().map(|n| n.num_gpus).collect();
    for pp in 1..=cluster.num_gpus().min(layers) {
        let go = for_each_layout(&mut free, &degrees, pp, &mut Vec::new(), &mut |layout| {
            let devices = canonical_devices(layout, cluster.nodes.len());
            for schedule in SCHEDULES {
                let v = virtual_stages(schedule);
                for lengths in common::compositions(layers, pp * v) {
                    for m in common::divisors(gbs) {
                        if v > 1 && !m.is_multiple_of(pp as u64) {
                            continue;
                        }
                        let per_mb = gbs / m;
                        let splits: Vec<Vec<Vec<u64>>> = layout
                            .iter()
                            .map(|stage| {
                                sample_splits(per_mb, stage.len(), problem.options.max_micro_batch)
                            })
                            .collect();
                        // TP communication overlap where there is TP, every group in a node.
                        let tp: Vec<&Replica> =
                            layout.iter().flatten().filter(|r| r.tp() > 1).collect();
                        let in_node = |r: &&Replica| r.nodes.iter().all(|&n| n == r.nodes[0]);
                        let overlaps: &[bool] = if !tp.is_empty()
                            && tp.iter().all(in_node)
                            && problem.options.compile_of() != crate::plan::Compile::Off
                        {
                            &[false, true]
                        } else {
                            &[false]
                        };
                        let go = for_each_product(&splits, &mut |sizes| {
                            overlaps.iter().all(|&tp_overlap| {
                                visit(&Skeleton {
                                    schedule,
                                    devices: &devices,
                                    layout,
                                    lengths: &lengths,
                                    micro_batches: m,
                                    sizes,
                                    tp_overlap,
                                })
                            })
                        });
                        if !go {
                            return false;
                        }
                    }
                }
            }
            true
        });
        if !go {
            return false;
        }
    }
    true
}

/// The memory options of physical stage `p` of a skeleton, in the referee's order: ZeRO (0–3
/// with data parallelism, else 0), sequence parallelism (off, or on too at TP > 1; only on
/// at TP > 1 in a skeleton with TP communication overlap),
/// offloading ([`offload_choices`]), then the checkpointing of each of its model chunks
/// (lexicographic over the chunks). The first is the stage without memory options.
fn stage_options(sk: &Skeleton<'_>, p: usize) -> Vec<StageOption> {
    let replicas = &sk.layout[p];
    let tp = replicas.iter().map(Replica::tp).max().unwrap_or(1);
    let zeros: &[u8] = if replicas.len() > 1 {
        &[0, 1, 2, 3]
    } else {
        &[0]
    };
    let sps: &[bool] = match (tp > 1, sk.tp_overlap) {
        (false, _) => &[false],
        (true, false) => &[false, true],
        (true, true) => &[true],
    };
    let pp = sk.layout.len();
    let chunks: Vec<Vec<Recompute>> = (p..sk.lengths.len())
        .step_by(pp)
        .map(|j| recompute_options(sk.lengths[j]))
        .collect();
    let mut out = Vec::new();
    for &zero in zeros {
        for &sequence_parallel in sps {
            for offload in offload_choices() {
                for_each_product(&chunks, &mut |recompute| {
                    out.push(StageOption {
                        zero,
                        sequence_parallel,
                        offload,
                        recompute: recompute.to_vec(),
                    });
                    true
                });
            }
        }
    }
    out
}

/// How many memory options `stage_options(sk, p)` lists, without listing them.
fn option_count(sk: &Skeleton<'_>, p: usize) -> u64 {
    let replicas = &sk.layout[p];
    let zeros = if replicas.len() > 1 { 4 } else { 1 };
    let sps = if replicas.iter().any(|r| r.tp() > 1) && !sk.tp_overlap {
        2
    } else {
        1
    };
    let recompute: u64 = (p..sk.lengths.len())
        .step_by(sk.layout.len())
        .map(|j| sk.lengths[j] as u64 + 2)
        .product();
    zeros * sps * offload_choices().len() as u64 * recompute
}

/// What a stage may keep in host memory: nothing, or all of its weights, gradients and
/// optimizer states in any combination.
fn offload_choices() -> Vec<Offload> {
    let mut out = Vec::new();
    for weights in [0.0, 1.0] {
        for gradients in [0.0, 1.0] {
            for optimizer in [0.0, 1.0] {
                out.push(Offload {
                    weights,
                    gradients,
                    optimizer,
                    activations: 0.0,
                });
            }
        }
    }
    out
}

/// The checkpointing choices of a model chunk of `len` layers: none, selective, the first k
/// (`1 ≤ k < len`), full.
fn recompute_options(len: usize) -> Vec<Recompute> {
    let mut out = vec![Recompute::None, Recompute::Selective];
    out.extend((1..len as u32).map(Recompute::Layers));
    out.push(Recompute::Full);
    out
}

/// The plan of a skeleton with these memory options (one per physical stage).
fn build(problem: &Problem<'_>, sk: &Skeleton<'_>, options: &[&StageOption]) -> Plan {
    let pp = sk.layout.len();
    let ranges = common::ranges(sk.lengths);
    let stages = (0..sk.lengths.len())
        .map(|j| {
            let p = j % pp;
            let o = options[p];
            let replicas = &sk.layout[p];
            let tp = replicas.iter().map(Replica::tp).max().unwrap_or(1);
            let replica_tp = if replicas.iter().all(|r| r.tp() == tp) {
                Vec::new()
            } else {
                replicas.iter().map(Replica::tp).collect()
            };
            Stage {
                etp: None,
                ep: 1,
                cp: 1,
                layers: ranges[j],
                devices: sk.devices[p].clone(),
                tp,
                replica_tp,
                dp: replicas.len() as u32,
                micro_batch_sizes: sk.sizes[p].clone(),
                zero: o.zero,
                recompute: o.recompute[j / pp],
                offload: o.offload,
                sequence_parallel: o.sequence_parallel,
                replica_samples: Vec::new(),
            }
        })
        .collect();
    Plan {
        global_batch: problem.global_batch,
        micro_batches: sk.micro_batches,
        schedule: sk.schedule,
        engine: problem.options.engine,
        precision: problem.options.precision,
        collective_dtypes: Default::default(),
        moe_capacity_factor: None,
        cp_comm: Default::default(),
        tp_comm_overlap: sk.tp_overlap,
        compile: problem.options.compile_of(),
        stages,
        made_for: None,
    }
}

/// How large a problem's space is: what each enumeration has to estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceSize {
    /// Candidates in the whole space (what [`Enumeration::Every`] estimates).
    pub candidates: u64,
    /// Skeletons: everything of a candidate but its memory options.
    pub skeletons: u64,
    /// The sum over skeletons of their stages' numbers of memory options: about what
    /// [`Enumeration::Undominated`] estimates, per choice of the stages that run ZeRO-3.
    pub stage_options: u64,
}

/// How large the referee's space of `problem` is, counted without estimating anything
/// (saturating at `u64::MAX`).
pub fn space_size(problem: &Problem<'_>) -> SpaceSize {
    let mut n = SpaceSize::default();
    if common::nothing_to_plan(problem).is_err() {
        return n;
    }
    for_each_skeleton(problem, &mut |sk| {
        let options: Vec<u64> = (0..sk.layout.len()).map(|p| option_count(sk, p)).collect();
        let product = options.iter().copied().fold(1u64, u64::saturating_mul);
        n.candidates = n.candidates.saturating_add(product);
        n.skeletons = n.skeletons.saturating_add(1);
        n.stage_options = n.stage_options.saturating_add(options.iter().sum());
        true
    });
    n
}

/// The search's running state.
struct Tally<'a, 'p, 's> {
    problem: &'a Problem<'p>,
    search: &'a mut Search<'s>,
    best: Option<(Plan, Estimate)>,
    candidates: u64,
    fitting: u64,
    fitting_plain: u64,
    invalid: u64,
    independence_violations: u64,
}

impl Tally<'_, '_, '_> {
    /// Estimates a candidate and keeps it if it is the fastest that fits so far (ties to the
    /// first); `None` when a limit stopped the search, else its estimate (`None` when invalid).
    fn estimate(&mut self, plan: Plan) -> Option<Option<Estimate>> {
        if !self.search.tick() {
            return None;
        }
        let Some(est) = common::evaluate(self.problem, &plan) else {
            self.invalid += 1;
            return Some(None);
        };
        self.candidates += 1;
        if est.fits {
            self.fitting += 1;
            if plan.stages.iter().all(|st| {
                st.zero == 0
                    && st.recompute == Recompute::None
                    && st.offload.is_none()
                    && !st.sequence_parallel
            }) {
                self.fitting_plain += 1;
            }
            let t = est.iteration_time_s;
            if self
                .best
                .as_ref()
                .is_none_or(|(_, b)| t < b.iteration_time_s)
            {
                self.search.offer(Seconds(t));
                self.best = Some((plan, est.clone()));
            }
        }
        Some(Some(est))
    }
}

/// Every candidate of a skeleton: the product of its stages' memory options.
fn every(tally: &mut Tally<'_, '_, '_>, sk: &Skeleton<'_>) -> bool {
    let options: Vec<Vec<StageOption>> =
        (0..sk.layout.len()).map(|p| stage_options(sk, p)).collect();
    let refs: Vec<Vec<&StageOption>> = options.iter().map(|o| o.iter().collect()).collect();
    for_each_product(&refs, &mut |choice| {
        let plan = build(tally.problem, sk, choice);
        tally.estimate(plan).is_some()
    })
}

/// What one physical stage's memory options do to an iteration, all else fixed: its
/// per-micro-batch time and end-of-iteration extra (summed over its model chunks, as the
/// estimate sums them), the host memory its GPUs take on each node, and whether its GPUs fit.
#[derive(Clone, Debug, PartialEq)]
struct Effect {
    t: f64,
    d: f64,
    /// What holds up its first forwards (`StageEstimate::start`).
    start: f64,
    /// (node, bytes), node-ordered.
    host: Vec<(u32, f64)>,
    fits: bool,
}

impl Effect {
    fn of(est: &Estimate, p: usize, pp: usize) -> Effect {
        let chunks = || est.stages.iter().skip(p).step_by(pp);
        let mut host: Vec<(u32, f64)> = Vec::new();
        for g in est.per_gpu.iter().filter(|g| g.stage == p) {
            match host.iter_mut().find(|(n, _)| *n == g.node) {
                Some((_, b)) => *b += g.host_memory_bytes,
                None => host.push((g.node, g.host_memory_bytes)),
            }
        }
        host.sort_by_key(|&(n, _)| n);
        Effect {
            t: chunks().map(|s| s.micro_batch_time.get()).sum(),
            d: chunks().map(|s| s.extra.get()).sum(),
            start: chunks().map(|s| s.start.get()).sum(),
            host,
            fits: est.per_gpu.iter().filter(|g| g.stage == p).all(|g| g.fits),
        }
    }

    /// No worse than `other` in every respect (both fit).
    fn dominates(&self, other: &Effect) -> bool {
        self.t <= other.t
            && self.d <= other.d
            && self.start <= other.start
            && self.host.len() == other.host.len()
            && (self.host.iter().zip(&other.host)).all(|(a, b)| a.0 == b.0 && a.1 <= b.1)
    }
}

/// The candidates of a skeleton whose every stage's memory options are undominated (see the
/// module documentation, "Undominated memory options"): for each choice of which stages with
/// data parallelism run ZeRO-3, each stage's options are estimated with the other stages at
/// their first option, those that do not fit or that another option dominates are dropped, and
/// the product of what is left is estimated.
fn undominated(tally: &mut Tally<'_, '_, '_>, sk: &Skeleton<'_>) -> bool {
    let pp = sk.layout.len();
    let options: Vec<Vec<StageOption>> = (0..pp).map(|p| stage_options(sk, p)).collect();
    let zero3: Vec<Vec<bool>> = (0..pp)
        .map(|p| {
            if sk.layout[p].len() > 1 {
                vec![false, true]
            } else {
                vec![false]
            }
        })
        .collect();
    for_each_product(&zero3, &mut |zero3| {
        let lists: Vec<Vec<&StageOption>> = (0..pp)
            .map(|p| {
                (options[p].iter())
                    .filter(|o| (o.zero == 3) == zero3[p])
                    .collect()
            })
            .collect();
        // The reference: every stage at its first option.
        let firsts: Vec<&StageOption> = lists.iter().map(|l| l[0]).collect();
        let Some(reference) = tally.estimate(build(tally.problem, sk, &firsts)) else {
            return false;
        };
        let Some(reference) = reference else {
            return true;
        };
        let effects: Vec<Effect> = (0..pp).map(|q| Effect::of(&reference, q, pp)).collect();
        let mut kept: Vec<Vec<&StageOption>> = Vec::with_capacity(pp);
        for p in 0..pp {
            let mut seen: Vec<(&StageOption, Effect)> = Vec::new();
            for (i, &o) in lists[p].iter().enumerate() {
                let e = if i == 0 {
                    effects[p].clone()
                } else {
                    let mut choice = firsts.clone();
                    choice[p] = o;
                    let Some(est) = tally.estimate(build(tally.problem, sk, &choice)) else {
                        return false;
                    };
                    let Some(est) = est else { continue };
                    // The argument's premise, checked on every estimate: the other stages
                    // did not change.
                    if (0..pp).any(|q| q != p && Effect::of(&est, q, pp) != effects[q]) {
                        tally.independence_violations += 1;
                    }
                    Effect::of(&est, p, pp)
                };
                if e.fits {
                    seen.push((o, e));
                }
            }
            // Undominated: no other option is as good in every respect and better in one, or
            // as good in every respect and earlier.
            let undominated: Vec<&StageOption> = (0..seen.len())
                .filter(|&i| {
                    !(0..seen.len()).any(|j| {
                        j != i
                            && seen[j].1.dominates(&seen[i].1)
                            && (j < i || !seen[i].1.dominates(&seen[j].1))
                    })
                })
                .map(|i| seen[i].0)
                .collect();
            if undominated.is_empty() {
                // Nothing of this stage fits with this ZeRO-3 choice.
                return true;
            }
            kept.push(undominated);
        }
        for_each_product(&kept, &mut |choice| {
            // With at most one stage away from its first option, the plan was estimated above.
            let moved = (choice.iter().zip(&firsts))
                .filter(|(a, b)| !std::ptr::eq(**a, **b))
                .count();
            if moved <= 1 {
                return true;
            }
            let plan = build(tally.problem, sk, choice);
            tally.estimate(plan).is_some()
        })
    })
}

/// The fastest plan of the referee's space that fits, by hetplan's estimate, estimating every
/// candidate ([`Enumeration::Every`]); see [`optimum_with`].
pub fn optimum(
    problem: &Problem<'_>,
    search: &mut Search<'_>,
) -> Result<RefereeAnswer, PlannerError> {
    optimum_with(problem, search, Enumeration::Every)
}

/// The fastest plan of the referee's space that fits, by hetplan's estimate (see the module
/// documentation), under `search`'s limits: one node per candidate estimated. `Infeasible`
/// only when there is nothing to plan; an answer without a plan when nothing fits.
pub fn optimum_with(
    problem: &Problem<'_>,
    search: &mut Search<'_>,
    enumeration: Enumeration,
) -> Result<RefereeAnswer, PlannerError> {
    common::nothing_to_plan(problem)?;
    let mut tally = Tally {
        problem,
        search,
        best: None,
        candidates: 0,
        fitting: 0,
        fitting_plain: 0,
        invalid: 0,
        independence_violations: 0,
    };
    for_each_skeleton(problem, &mut |sk| {
        if !tally.search.poll() {
            return false;
        }
        match enumeration {
            Enumeration::Every => every(&mut tally, sk),
            Enumeration::Undominated => undominated(&mut tally, sk),
        }
    });
    Ok(RefereeAnswer {
        best: tally.best,
        candidates: tally.candidates,
        fitting: tally.fitting,
        fitting_plain: tally.fitting_plain,
        invalid: tally.invalid,
        independence_violations: tally.independence_violations,
        stop_reason: tally.search.stop_reason(),
    })
}

/// Whether `plan` lies in the referee's space for `problem` (see the module documentation):
/// valid for the problem, with the problem's batch, engine and precision, and every choice one
/// the referee enumerates, up to the renamings and equivalent values it merges (GPUs of one node
/// in another order; `Layers(0)`, `Layers(len)`, ZeRO 1–2 without data parallelism, a
/// `replica_tp` of equal degrees). A Mist plan that offloads a quarter of its optimizer state is
/// not in it.
pub fn contains(problem: &Problem<'_>, plan: &Plan) -> bool {
    let o = &problem.options;
    if plan.global_batch != problem.global_batch
        || plan.engine != o.engine
        || plan.precision != o.precision
        || !plan.collective_dtypes.is_default()
        || !SCHEDULES.contains(&plan.schedule)
        || crate::plan::validate::validate(plan, problem.model, problem.cluster).is_err()
    {
        return false;
    }
    let degrees = tp_degrees(problem);
    plan.stages.iter().all(|st| {
        let replicas_ok = (0..st.dp as usize).all(|r| degrees.contains(&st.tp_of(r)));
        let off = st.offload;
        replicas_ok
            && st.replica_samples.is_empty()
            && st.ep == 1
            && st.cp == 1
            && st.recompute != Recompute::Ops
            && st.micro_batch_sizes.iter().all(|&b| b <= o.max_micro_batch)
            && (st.dp > 1 || st.zero < 3)
            && (st.tp > 1 || !st.sequence_parallel)
            && [off.weights, off.gradients, off.optimizer]
                .iter()
                .all(|&x| x == 0.0 || x == 1.0)
            && off.activations == 0.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(layout: &[Replica]) -> Vec<Vec<u32>> {
        layout.iter().map(|r| r.nodes.clone()).collect()
    }

    #[test]
    fn stage_layouts_are_ordered_and_fit() {
        // One node of 2 GPUs, degrees 1 and 2: [1], [1,1], [2].
        let l = stage_layouts(&[2], &[1, 2]);
        let tps: Vec<Vec<u32>> = l
            .iter()
            .map(|s| s.iter().map(Replica::tp).collect())
            .collect();
        assert_eq!(tps, vec![vec![1], vec![1, 1], vec![2]]);
        // Two nodes of one GPU: both orders of two replicas, and a TP pair across the nodes in
        // both rank orders.
        let l: Vec<Vec<Vec<u32>>> = stage_layouts(&[1, 1], &[1, 2])
            .iter()
            .map(|s| nodes(s))
            .collect();
        assert_eq!(
            l,
            vec![
                vec![vec![0]],
                vec![vec![0], vec![1]],
                vec![vec![1]],
                vec![vec![1], vec![0]],
                vec![vec![0, 1]],
                vec![vec![1, 0]],
            ]
        );
        // Degrees 2 and 3 never share a stage (neither divides the other); 1 joins either.
        let l = stage_layouts(&[6], &[1, 2, 3]);
        for s in &l {
            let largest = s.iter().map(Replica::tp).max().unwrap();
            assert!(s.iter().all(|r| largest % r.tp() == 0), "{s:?}");
        }
        assert!(l.iter().any(|s| s.len() == 3 && s[0].tp() == 3));
    }

    #[test]
    fn canonical_devices_number_each_node_in_order() {
        let r = |nodes: &[u32]| Replica {
            nodes: nodes.to_vec(),
        };
        let layout = vec![vec![r(&[1]), r(&[0, 0])], vec![r(&[1, 0])]];
        let d = canonical_devices(&layout, 2);
        let g = |node, local| GpuId { node, local };
        assert_eq!(d[0], vec![g(1, 0), g(0, 0), g(0, 1)]);
        assert_eq!(d[1], vec![g(1, 1), g(0, 2)]);
    }

    #[test]
    fn sample_splits_are_every_ordered_split() {
        assert_eq!(
            sample_splits(4, 2, 64),
            vec![vec![1, 3], vec![2, 2], vec![3, 1]]
        );
        assert_eq!(sample_splits(4, 2, 2), vec![vec![2, 2]]);
        assert!(sample_splits(1, 2, 64).is_empty());
    }

    #[test]
    fn recompute_options_skip_the_equivalent_counts() {
        assert_eq!(
            recompute_options(1),
            vec![Recompute::None, Recompute::Selective, Recompute::Full]
        );
        assert_eq!(recompute_options(3).len(), 5);
    }
}
