//! Baselines the seed papers compare against, each a rule of thumb or a homogeneous planner run
//! as its paper describes it, its plans evaluated with hetplan's cost model.
//!
//! # `megatron`: Megatron-LM's heuristics as AMP states them
//!
//! AMP (Li et al., NeurIPS 2022) §4.1 summarises the heuristics of Megatron-LM (Narayanan et al.
//! 2021) as the procedure it compares against:
//!
//! > Megatron explores all possible micro-batch sizes as in AMP. For each micro-batch size, it
//! > forces tmp to be smaller than the smallest number of devices in a node. Then it selects
//! > parallelism degrees with the smallest tmp × pp. It solves the device placement problem by
//! > prioritizing tensor model parallelism workers in the same node. If there are additional
//! > available intra-node connections, it places data parallelism workers next. It solves the
//! > pipeline layer assignment problem by either balancing the number of parameters or the
//! > number of layers in each stage.
//!
//! and §4.5 adds that the degrees must fit in memory ("Megatron proposes 10 feasible
//! strategies"; "since the model can be fit in a single GPU, Megatron selects dp=16"), that dp
//! takes every GPU that tp and pp leave, and (Table 5) that its layer assignment is uniform.
//! Here, for every micro-batch size `mbs` (1 to `PlanOptions::max_micro_batch`, dividing the
//! global batch over the replicas):
//!
//! * `tp` at most the smallest node's GPU count (we read "smaller than" as "at most": tp equal to
//!   the node size is Megatron's usual choice) and at most `PlanOptions::max_tp`;
//! * `tp × pp` divides the GPU count, `dp = gpus ÷ (tp × pp)` uses every GPU;
//! * the smallest `tp × pp` whose plan fits in memory (hetplan's memory estimate) is kept; every
//!   `(tp, pp)` of that product that fits is a candidate (the paper does not break ties);
//! * placement is Megatron's rank order (`plan::inline`): TP ranks innermost on consecutive GPUs
//!   of a node, then DP, then PP outermost; layers are split evenly (`inline::split_layers`:
//!   equal transformer blocks per stage, embedding on the first and head on the last);
//! * no ZeRO, no activation checkpointing, 1F1B.
//!
//! AMP ran Megatron's 10 proposals for real and reported the best; here the candidates are ranked
//! by hetplan's estimate, the best returned and the others listed in `Outcome::ranked` (Megatron
//! has no cost model of its own: `planner_cost_s` is hetplan's estimate too).
//!
//! # `alpa`: Alpa over one averaged GPU
//!
//! Metis (Um et al., USENIX ATC 2024) §3 on the planners it compares against: "key performance
//! metrics (e.g., execution time and memory usage for each layer) of heterogeneous GPUs are
//! profiled but abstracted as homogeneous ones. For instance, Alpa and AMP simply take an average
//! of the computing power across GPUs and operate on the premise that all GPUs have this
//! averaged compute capacity"; with it Alpa "partitions layers without consideration of
//! different heterogeneous GPUs" (§5.2.2) and "chooses the same layer load balancing strategy"
//! as on homogeneous GPUs (Fig. 2). This baseline:
//!
//! 1. builds a virtual cluster with the real nodes and links but one GPU type, the average:
//!    peak rates, HBM and PCIe bandwidth are count-weighted arithmetic means (the averaged
//!    computing power); memory is the **minimum** over the GPUs, because a layer's memory need
//!    does not depend on the GPU type and Alpa compiles and profiles its stages on the real
//!    devices, where a plan that only fits an average capacity fails on the smallest GPU; the
//!    architecture is the one most GPUs have (ties: cluster order);
//! 2. times each layer on the average GPU as the count-weighted harmonic mean of its times on
//!    the real types (averaged computing power = mean throughput), so profiles are averaged too;
//! 3. searches uniform plans on it — `pp` stages of equal device groups (contiguous GPUs in
//!    cluster order, Megatron rank order inside), the same `(dp, tp)` per stage, the same
//!    micro-batch size per replica, every `(pp, tp, mbs)` whose degrees divide the GPU count
//!    and the global batch — with the layers split to balance their time on the average GPU
//!    (minimum of the slowest stage; for a stack of identical blocks an even split), 1F1B, no
//!    ZeRO nor checkpointing, ranked by hetplan's estimate *on the virtual cluster*;
//! 4. returns the best-ranked plan that fits the real cluster, with hetplan's estimate *on the
//!    real cluster* — what the seed papers measure when they run Alpa's plan. `Outcome::ranked`
//!    lists the top plans with both times (`planner_cost_s`: virtual, `estimate_s`: real).
//!
//! Alpa's intra-operator ILP (arbitrary operator sharding) is not modelled: a stage's
//! parallelism is Megatron-style `dp × tp`, as in the Metis and AMP spaces.
//!
//! # `dp`: plain data parallelism
//!
//! What most users start with (PyTorch DDP / DeepSpeed ZeRO, Rajbhandari et al. SC 2020): every
//! GPU holds the whole model, the global batch is split evenly, gradient accumulation makes up
//! the rest. The lowest ZeRO stage (0, 1, 2, 3) that fits at micro-batch size 1 is taken; only
//! if none fits, the same with full activation checkpointing; then the largest micro-batch size
//! (up to `PlanOptions::max_micro_batch`, dividing the per-GPU batch) that still fits.
//!
//! All three are deterministic (fixed enumeration orders, ties keep the first) and bounded: each
//! plan evaluated costs one `Search::tick`.

use super::common::{self, Best, StageChoice};
use super::{Outcome, Planner, PlannerError, Problem, Ranked, Search};
use crate::cluster::{Cluster, GpuTypeId};
use crate::cost::{ComputeTimes, Estimate, LayerShape, LayerTime};
use crate::gpu::{Arch, GpuSpec};
use crate::model::Model;
use crate::plan::inline::parse_inline_plan;
use crate::plan::{LayerRange, Plan, Recompute};
use crate::units::{Bytes, BytesPerSec, FlopPerSec, Seconds};
use std::collections::BTreeMap;

/// How many plans a baseline lists in `Outcome::ranked`.
pub const RANKED: usize = 10;

// ------------------------------------------------------------------------------ helpers

/// A uniform plan in Megatron's rank order (`plan::inline`) on every GPU of `cluster`, or `None`
/// when the model or the cluster rules it out (e.g. tp does not divide the heads).
fn megatron_plan(
    problem: &Problem<'_>,
    cluster: &Cluster,
    tp: u64,
    pp: u64,
    dp: u64,
    mbs: u64,
) -> Option<Plan> {
    let spec = format!(
        "tp={tp},pp={pp},dp={dp},mbs={mbs},gbs={},engine={},precision={},compile={}",
        problem.global_batch,
        problem.options.engine.name(),
        problem.options.precision.name(),
        problem.options.compile_of().name()
    );
    parse_inline_plan(&spec, problem.model, cluster).ok()
}

/// The GPU that runs out of memory the most: "needs X on GPU (type), which has Y".
fn oom_detail(est: &Estimate) -> String {
    let worst = est.per_gpu.iter().max_by(|a, b| {
        (a.peak_memory_bytes / a.capacity_bytes)
            .total_cmp(&(b.peak_memory_bytes / b.capacity_bytes))
    });
    match worst {
        Some(g) => format!(
            "needs {} on {} ({}), which has {}",
            Bytes(g.peak_memory_bytes),
            g.gpu,
            g.gpu_type,
            Bytes(g.capacity_bytes)
        ),
        None => "uses no GPU".to_string(),
    }
}

/// The smallest GPU memory of a cluster, with its type.
fn smallest_gpu(cluster: &Cluster) -> (Bytes, String) {
    cluster
        .gpu_types
        .iter()
        .map(|t| (t.memory, t.name.clone()))
        .fold(None, |acc: Option<(Bytes, String)>, (m, n)| match acc {
            Some((am, an)) if am <= m => Some((am, an)),
            _ => Some((m, n)),
        })
        .unwrap_or((Bytes::ZERO, String::new()))
}

/// The outcome for the best plan, or the error explaining why there is none.
fn finish(
    best: Best,
    search: &Search<'_>,
    ranked: Vec<Ranked>,
    notes: Vec<String>,
    infeasible: impl FnOnce(Option<(Plan, f64)>) -> String,
) -> Result<Outcome, PlannerError> {
    let closest = best.closest_oom;
    common::conclude(best.plan, search, ranked, notes, || infeasible(closest))
}

/// Ranked entries from (planner cost, plan, estimate), best planner cost first (stable).
fn ranked(mut list: Vec<(f64, Plan, Estimate)>) -> Vec<Ranked> {
    list.sort_by(|a, b| a.0.total_cmp(&b.0));
    list.into_iter()
        .take(RANKED)
        .map(|(cost, plan, est)| Ranked {
            plan,
            planner_cost_s: cost,
            estimate_s: est.iteration_time_s,
            fits: est.fits,
        })
        .collect()
}

// ----------------------------------------------------------------------------- Megatron

/// Megatron-LM's heuristics as AMP §4.1 states them (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct Megatron;

impl Planner for Megatron {
    fn name(&self) -> &'static str {
        "megatron"
    }

    fn description(&self) -> &'static str {
        "Megatron-LM heuristics as AMP §4.1 states them: tp within the smallest node, the \
         smallest tp×pp that fits, dp fills the rest, even layer split, Megatron placement"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let cluster = problem.cluster;
        let gpus = cluster.num_gpus() as u64;
        let smallest_node = cluster.nodes.iter().map(|n| n.num_gpus).min().unwrap_or(1) as u64;
        let max_tp = smallest_node.min(problem.options.max_tp as u64).max(1);
        let layers = problem.model.layers.len() as u64;
        // (tp, pp) by increasing tp × pp, then increasing tp.
        let mut degrees = Vec::new();
        for product in common::divisors(gpus) {
            for tp in common::divisors(product) {
                let pp = product / tp;
                if tp <= max_tp && pp <= layers {
                    degrees.push((tp, pp));
                }
            }
        }

        let mut best = Best::default();
        let mut candidates: Vec<(f64, Plan, Estimate)> = Vec::new();
        let mut proposals_per_mbs: BTreeMap<u64, u64> = BTreeMap::new();
        let mut built = 0u64;
        'mbs: for mbs in 1..=problem.options.max_micro_batch {
            let mut smallest_fit: Option<u64> = None;
            for &(tp, pp) in &degrees {
                let product = tp * pp;
                if smallest_fit.is_some_and(|p| product > p) {
                    break;
                }
                let dp = gpus / product;
                if !problem.global_batch.is_multiple_of(dp * mbs) {
                    continue;
                }
                if !search.tick() {
                    break 'mbs;
                }
                let Some(plan) = megatron_plan(problem, cluster, tp, pp, dp, mbs) else {
                    continue;
                };
                let Some(est) = common::evaluate(problem, &plan) else {
                    continue;
                };
                built += 1;
                if est.fits {
                    smallest_fit = Some(product);
                    *proposals_per_mbs.entry(mbs).or_insert(0) += 1;
                    candidates.push((est.iteration_time_s, plan.clone(), est.clone()));
                }
                if let Some(t) = best.offer(plan, est) {
                    search.offer(Seconds(t));
                }
            }
        }

        let notes = if candidates.is_empty() {
            vec![]
        } else {
            vec![format!(
                "Megatron proposes {} feasible strategies over {} micro-batch sizes (the \
                 smallest fitting tp×pp for each); hetplan's estimate ranks them",
                candidates.len(),
                proposals_per_mbs.len()
            )]
        };
        let ranked = ranked(candidates);
        finish(best, search, ranked, notes, |closest| {
            if built == 0 {
                return format!(
                    "no Megatron configuration exists: tp at most {max_tp} (the smallest node's \
                     GPUs, the tp limit), tp·pp dividing the {gpus} GPUs, pp at most the \
                     {layers} layers, mbs·dp dividing the global batch of {}, tp dividing the \
                     attention heads",
                    problem.global_batch
                );
            }
            match closest.and_then(|(plan, _)| Some((common::evaluate(problem, &plan)?, plan))) {
                Some((est, plan)) => format!(
                    "no Megatron configuration fits in memory (no ZeRO, no activation \
                     checkpointing); the closest, {}, {}",
                    plan.summary(),
                    oom_detail(&est)
                ),
                None => common::infeasible_reason(problem, cluster),
            }
        })
    }
}

// -------------------------------------------------------------------------- AlpaAverage

/// Alpa-style planning over one averaged GPU (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct AlpaAverage;

/// The averaged GPU of a cluster: count-weighted mean peak rates and bandwidths, the smallest
/// memory, the architecture most GPUs have. A homogeneous cluster's GPU is returned unchanged.
pub fn averaged_gpu(cluster: &Cluster) -> GpuSpec {
    let mut counts = vec![0u64; cluster.gpu_types.len()];
    for n in &cluster.nodes {
        counts[n.gpu_type.0] += n.num_gpus as u64;
    }
    let present: Vec<(&GpuSpec, f64)> = cluster
        .gpu_types
        .iter()
        .zip(&counts)
        .filter(|(_, &c)| c > 0)
        .map(|(t, &c)| (t, c as f64))
        .collect();
    if present.len() == 1 {
        return present[0].0.clone();
    }
    let total: f64 = present.iter().map(|(_, c)| c).sum();
    let mean =
        |f: &dyn Fn(&GpuSpec) -> f64| present.iter().map(|(t, c)| f(t) * c).sum::<f64>() / total;
    let mut arch_counts: Vec<(Arch, f64)> = Vec::new();
    for (t, c) in &present {
        match arch_counts.iter_mut().find(|(a, _)| *a == t.arch) {
            Some((_, n)) => *n += c,
            None => arch_counts.push((t.arch, *c)),
        }
    }
    let arch = arch_counts
        .iter()
        .fold(None, |acc: Option<(Arch, f64)>, &(a, n)| match acc {
            Some((_, best)) if best >= n => acc,
            _ => Some((a, n)),
        })
        .map(|(a, _)| a)
        .unwrap_or(Arch::Ampere);
    let names: Vec<String> = present
        .iter()
        .map(|(t, c)| format!("{}×{}", *c as u64, t.name))
        .collect();
    GpuSpec {
        name: format!("average({})", names.join(" + ")),
        aliases: vec![],
        arch,
        memory: present
            .iter()
            .map(|(t, _)| t.memory)
            .fold(Bytes(f64::INFINITY), Bytes::min),
        datasheet_memory_gb: present
            .iter()
            .map(|(t, _)| t.datasheet_memory_gb)
            .min()
            .unwrap_or(0),
        peak_tensor: FlopPerSec(mean(&|t| t.peak_tensor.get())),
        peak_fp32: FlopPerSec(mean(&|t| t.peak_fp32.get())),
        hbm_bandwidth: BytesPerSec(mean(&|t| t.hbm_bandwidth.get())),
        nvlink_bandwidth: if present.iter().all(|(t, _)| t.nvlink_bandwidth.is_some()) {
            Some(BytesPerSec(mean(&|t| {
                t.nvlink_bandwidth.map_or(0.0, |b| b.get())
            })))
        } else {
            None
        },
        pcie_bandwidth: BytesPerSec(mean(&|t| t.pcie_bandwidth.get())),
        source: format!(
            "hetplan's Alpa baseline: the average of {} (count-weighted mean peak rates and \
             bandwidths, the smallest memory, the majority architecture)",
            names.join(", ")
        ),
    }
}

/// The cluster as Alpa's homogeneous abstraction sees it: the same nodes and links, every GPU
/// the averaged one (`averaged_gpu`).
pub fn averaged_cluster(cluster: &Cluster) -> Cluster {
    let mut c = cluster.clone();
    c.gpu_types = vec![averaged_gpu(cluster)];
    for n in &mut c.nodes {
        n.gpu_type = GpuTypeId(0);
    }
    if cluster.gpu_types.len() > 1 {
        c.name = format!("{} (averaged)", cluster.name);
    }
    c
}

/// Layer times on the averaged GPU: the count-weighted harmonic mean of the real types' times
/// (the mean throughput); other GPUs are passed through.
struct AveragedTimes<'a> {
    inner: &'a dyn ComputeTimes,
    average: String,
    /// Real GPU types and their counts.
    types: Vec<(GpuSpec, f64)>,
}

impl AveragedTimes<'_> {
    fn harmonic(&self, times: &[(f64, f64)]) -> f64 {
        let total: f64 = times.iter().map(|(_, c)| c).sum();
        if times.iter().all(|(t, _)| *t > 0.0) {
            total / times.iter().map(|(t, c)| c / t).sum::<f64>()
        } else {
            times.iter().map(|(t, c)| t * c).sum::<f64>() / total
        }
    }
}

impl ComputeTimes for AveragedTimes<'_> {
    /// A weighted harmonic mean of the inner times keeps the inner source's property.
    fn context_parallelism_never_cheaper(&self) -> bool {
        self.inner.context_parallelism_never_cheaper()
    }

    fn layer_time(
        &self,
        gpu: &GpuSpec,
        model: &Model,
        layer: usize,
        shape: LayerShape,
    ) -> LayerTime {
        if gpu.name != self.average || self.types.len() < 2 {
            return self.inner.layer_time(gpu, model, layer, shape);
        }
        let each: Vec<(LayerTime, f64)> = self
            .types
            .iter()
            .map(|(t, c)| (self.inner.layer_time(t, model, layer, shape), *c))
            .collect();
        let field = |f: &dyn Fn(&LayerTime) -> f64| {
            Seconds(self.harmonic(&each.iter().map(|(lt, c)| (f(lt), *c)).collect::<Vec<_>>()))
        };
        let first = each[0].0;
        LayerTime {
            forward: field(&|lt| lt.forward.get()),
            backward: field(&|lt| lt.backward.get()),
            selective_forward: field(&|lt| lt.selective_forward.get()),
            op_checkpoint_forward: field(&|lt| lt.op_checkpoint_forward.get()),
            recompute_forward: field(&|lt| lt.recompute_forward.get()),
            attention_forward: field(&|lt| lt.attention_forward.get()),
            attention_backward: field(&|lt| lt.attention_backward.get()),
            ..first
        }
    }
}

/// Consecutive layer ranges over `parts` stages minimising the slowest stage's time (ties: the
/// earliest cuts). `costs` has one entry per layer; `1 ≤ parts ≤ costs.len()`.
fn balanced_split(costs: &[f64], parts: usize) -> Vec<LayerRange> {
    let n = costs.len();
    let mut prefix = vec![0.0; n + 1];
    for (i, c) in costs.iter().enumerate() {
        prefix[i + 1] = prefix[i] + c;
    }
    let sum = |a: usize, b: usize| prefix[b] - prefix[a];
    // best[k][i]: the smallest possible slowest stage for the first i layers in k stages.
    let inf = f64::INFINITY;
    let mut best = vec![vec![inf; n + 1]; parts + 1];
    let mut cut = vec![vec![0usize; n + 1]; parts + 1];
    best[0][0] = 0.0;
    for k in 1..=parts {
        for i in k..=n - (parts - k) {
            for j in (k - 1)..i {
                let v = best[k - 1][j].max(sum(j, i));
                if v < best[k][i] {
                    best[k][i] = v;
                    cut[k][i] = j;
                }
            }
        }
    }
    let mut ends = vec![n];
    let mut i = n;
    for k in (1..=parts).rev() {
        i = cut[k][i];
        ends.push(i);
    }
    ends.reverse();
    ends.windows(2)
        .map(|w| LayerRange {
            start: w[0],
            end: w[1],
        })
        .collect()
}

impl Planner for AlpaAverage {
    fn name(&self) -> &'static str {
        "alpa"
    }

    fn description(&self) -> &'static str {
        "Alpa-style uniform plans searched on one averaged GPU (Metis §3), then costed on the \
         real cluster"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let real = problem.cluster;
        let virt = averaged_cluster(real);
        let average = virt.gpu_types[0].clone();
        let mut counts = vec![0f64; real.gpu_types.len()];
        for n in &real.nodes {
            counts[n.gpu_type.0] += n.num_gpus as f64;
        }
        let times = AveragedTimes {
            inner: problem.compute,
            average: average.name.clone(),
            types: real
                .gpu_types
                .iter()
                .cloned()
                .zip(counts)
                .filter(|(_, c)| *c > 0.0)
                .collect(),
        };
        let vproblem = Problem {
            model: problem.model,
            cluster: &virt,
            global_batch: problem.global_batch,
            seq_len: problem.seq_len,
            compute: &times,
            options: problem.options,
        };

        let gpus = real.num_gpus() as u64;
        let layers = problem.model.layers.len();
        let mut splits: BTreeMap<(u64, u64, u64), Vec<LayerRange>> = BTreeMap::new();
        let mut best_virtual = Best::default();
        let mut candidates: Vec<(f64, Plan)> = Vec::new();
        'all: for pp in common::divisors(gpus) {
            if pp as usize > layers {
                continue;
            }
            let group = gpus / pp;
            for tp in common::divisors(group) {
                if tp > problem.options.max_tp as u64 {
                    continue;
                }
                let dp = group / tp;
                if !problem.global_batch.is_multiple_of(dp) {
                    continue;
                }
                for mbs in common::divisors(problem.global_batch / dp) {
                    if mbs > problem.options.max_micro_batch {
                        break;
                    }
                    if !search.tick() {
                        break 'all;
                    }
                    let Some(mut plan) = megatron_plan(&vproblem, &virt, tp, pp, dp, mbs) else {
                        continue;
                    };
                    let ranges = splits.entry((pp, tp, mbs)).or_insert_with(|| {
                        let shape = problem.layer_shape(mbs, tp as u32);
                        let costs: Vec<f64> = (0..layers)
                            .map(|l| {
                                let t = times.layer_time(&average, problem.model, l, shape);
                                (t.forward + t.backward).get()
                            })
                            .collect();
                        balanced_split(&costs, pp as usize)
                    });
                    for (stage, r) in plan.stages.iter_mut().zip(ranges.iter()) {
                        stage.layers = *r;
                    }
                    let Some(est) = common::evaluate(&vproblem, &plan) else {
                        continue;
                    };
                    if est.fits {
                        candidates.push((est.iteration_time_s, plan.clone()));
                    }
                    if let Some(t) = best_virtual.offer(plan, est) {
                        search.offer(Seconds(t));
                    }
                }
            }
        }

        // Rank on the virtual cluster; the best that fits the real one is Alpa's plan.
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut best = Best::default();
        let mut listed: Vec<(f64, Plan, Estimate)> = Vec::new();
        let mut skipped = 0usize;
        let mut chosen_virtual = f64::NAN;
        for (t_virtual, plan) in candidates {
            if best.plan.is_some() && listed.len() >= RANKED {
                break;
            }
            let Some(est) = common::evaluate(problem, &plan) else {
                continue;
            };
            if best.plan.is_none() {
                if est.fits {
                    best.offer(plan.clone(), est.clone());
                    chosen_virtual = t_virtual;
                } else {
                    skipped += 1;
                }
            }
            if listed.len() < RANKED {
                listed.push((t_virtual, plan, est));
            }
        }
        let mut notes = Vec::new();
        if let Some((_, est)) = &best.plan {
            notes.push(format!(
                "planned on {} GPUs of {} ({}, {}, memory {}); it predicts {} for this plan, \
                 the real cluster takes {}",
                gpus,
                average.name,
                average.peak_tensor,
                average.hbm_bandwidth,
                average.memory,
                Seconds(chosen_virtual),
                Seconds(est.iteration_time_s)
            ));
        }
        if skipped > 0 && best.plan.is_some() {
            notes.push(format!(
                "the {skipped} plan(s) ranked above it on the averaged GPU run out of memory on \
                 the real cluster"
            ));
        }
        let ranked = listed
            .into_iter()
            .map(|(cost, plan, est)| Ranked {
                plan,
                planner_cost_s: cost,
                estimate_s: est.iteration_time_s,
                fits: est.fits,
            })
            .collect();
        let any_fit_virtual = best_virtual.plan.is_some();
        finish(best, search, ranked, notes, |_| {
            if any_fit_virtual {
                return "every uniform plan that fits the averaged GPU runs out of memory on the \
                        real cluster"
                    .to_string();
            }
            match best_virtual
                .closest_oom
                .and_then(|(plan, _)| Some((common::evaluate(&vproblem, &plan)?, plan)))
            {
                Some((est, plan)) => format!(
                    "no uniform plan fits in memory on the averaged GPU (the smallest GPU's {}); \
                     the closest, {}, {}",
                    average.memory,
                    plan.summary(),
                    oom_detail(&est)
                ),
                None => format!(
                    "no uniform plan exists: pp dividing the {gpus} GPUs (at most the {layers} \
                     layers), tp dividing each stage's GPUs (at most {}) and the heads, dp and \
                     the micro-batch size dividing the global batch of {}",
                    problem.options.max_tp, problem.global_batch
                ),
            }
        })
    }
}

// ------------------------------------------------------------------------- DataParallel

/// Plain data parallelism with the lowest ZeRO stage that fits (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct DataParallel;

impl DataParallel {
    fn plan_for(problem: &Problem<'_>, mbs: u64, zero: u8, recompute: Recompute) -> Plan {
        let gpus = problem.cluster.gpus();
        let n = gpus.len() as u64;
        common::make_plan(
            problem,
            vec![StageChoice {
                layers: LayerRange {
                    start: 0,
                    end: problem.model.layers.len(),
                },
                devices: gpus,
                tp: 1,
                micro_batch_sizes: vec![mbs; n as usize],
                zero,
                recompute,
                offload: Default::default(),
            }],
            problem.global_batch / (n * mbs),
        )
    }
}

impl Planner for DataParallel {
    fn name(&self) -> &'static str {
        "dp"
    }

    fn description(&self) -> &'static str {
        "plain data parallelism with the lowest ZeRO stage that fits (full activation \
         checkpointing only if none fits), the largest micro-batch that fits"
    }

    fn find(
        &self,
        problem: &Problem<'_>,
        search: &mut Search<'_>,
    ) -> Result<Outcome, PlannerError> {
        let cluster = problem.cluster;
        let n = cluster.num_gpus() as u64;
        if n == 0 || !problem.global_batch.is_multiple_of(n) {
            return Err(PlannerError::Infeasible(format!(
                "data parallelism splits the global batch evenly over the GPUs, but {} samples \
                 do not divide over {n} GPUs; use a global batch that is a multiple of {n}",
                problem.global_batch
            )));
        }
        let per_gpu = problem.global_batch / n;
        let mut notes = Vec::new();
        // The lowest ZeRO stage that fits at micro-batch 1, checkpointing only as a last resort.
        let mut chosen = None;
        let mut last: Option<Estimate> = None;
        'memory: for recompute in [Recompute::None, Recompute::Full] {
            for zero in 0..=3u8 {
                if !search.tick() {
                    break 'memory;
                }
                let plan = Self::plan_for(problem, 1, zero, recompute);
                let Some(est) = common::evaluate(problem, &plan) else {
                    continue;
                };
                if est.fits {
                    chosen = Some((zero, recompute, plan, est));
                    break 'memory;
                }
                last = Some(est);
            }
        }
        let Some((zero, recompute, mut plan, mut est)) = chosen else {
            if search.stopped() {
                return Err(PlannerError::Stopped(search.stop_reason()));
            }
            let (smallest, kind) = smallest_gpu(cluster);
            return Err(PlannerError::Infeasible(match last {
                Some(est) => {
                    let need = est
                        .per_gpu
                        .iter()
                        .map(|g| g.peak_memory_bytes)
                        .fold(0.0, f64::max);
                    format!(
                        "even ZeRO-3 with full activation checkpointing at micro-batch size 1 \
                         needs {} per GPU; the smallest GPU ({kind}) has {smallest}; add GPUs \
                         or use tensor or pipeline parallelism",
                        Bytes(need)
                    )
                }
                None => common::infeasible_reason(problem, cluster),
            }));
        };
        if zero > 0 {
            notes.push(format!(
                "ZeRO-{zero} is the lowest stage that fits{}",
                if recompute == Recompute::Full {
                    " (with full activation checkpointing: no stage fits without it)"
                } else {
                    ""
                }
            ));
        } else if recompute == Recompute::Full {
            notes.push("no ZeRO stage fits without full activation checkpointing".into());
        }
        // The largest micro-batch size that fits with that memory setting.
        let mut sizes: Vec<u64> = common::divisors(per_gpu)
            .into_iter()
            .filter(|&b| b > 1 && b <= problem.options.max_micro_batch)
            .collect();
        sizes.reverse();
        for mbs in sizes {
            if !search.tick() {
                break;
            }
            let candidate = Self::plan_for(problem, mbs, zero, recompute);
            if let Some(e) = common::evaluate(problem, &candidate) {
                if e.fits {
                    plan = candidate;
                    est = e;
                    break;
                }
            }
        }
        search.offer(Seconds(est.iteration_time_s));
        Ok(Outcome {
            plan,
            estimate: est,
            explored: search.explored(),
            stop_reason: search.stop_reason(),
            ranked: vec![],
            notes,
            per_engine: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_split_is_even_for_equal_layers_and_balances_unequal_ones() {
        let r = balanced_split(&[1.0; 8], 4);
        assert_eq!(
            r.iter().map(|r| r.len()).collect::<Vec<_>>(),
            vec![2, 2, 2, 2]
        );
        let r = balanced_split(&[1.0, 1.0, 1.0, 1.0, 4.0], 2);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), vec![4, 1]);
        let r = balanced_split(&[3.0, 1.0, 1.0], 3);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), vec![1, 1, 1]);
        assert_eq!(r.last().unwrap().end, 3);
    }

    #[test]
    fn the_average_gpu_averages_rates_and_takes_the_smallest_memory() {
        let c = crate::cluster::spec::catalog_cluster("t4-v100").unwrap();
        let g = averaged_gpu(&c);
        let v100 = crate::gpu::lookup("v100-sxm2-16gb").unwrap();
        let t4 = crate::gpu::lookup("t4").unwrap();
        let want = (8.0 * v100.peak_tensor.get() + 2.0 * t4.peak_tensor.get()) / 10.0;
        assert!((g.peak_tensor.get() - want).abs() < 1.0);
        assert_eq!(g.memory, v100.memory.min(t4.memory));
        assert_eq!(g.arch, Arch::Volta);
        let v = averaged_cluster(&c);
        assert_eq!(v.gpu_types.len(), 1);
        assert_eq!(v.num_gpus(), c.num_gpus());
        assert_eq!(v.nodes[2].inter_bandwidth, c.nodes[2].inter_bandwidth);
    }
}
