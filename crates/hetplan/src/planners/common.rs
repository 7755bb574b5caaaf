//! What every planner needs: building a complete plan from per-stage choices, evaluating it
//! with hetplan's cost model, keeping the best deterministically, enumerating device groups and
//! layer splits, and explaining infeasibility.

use super::{PlannerError, Problem};
use crate::cluster::{Cluster, GpuId};
use crate::cost::{self, Estimate, Workload};
use crate::plan::{LayerRange, Offload, Plan, Recompute, Schedule, Stage};
use crate::units::Bytes;

/// One stage as a planner chooses it.
#[derive(Clone, Debug, PartialEq)]
pub struct StageChoice {
    pub layers: LayerRange,
    /// `dp × tp` GPUs, replica-major (replica r = devices[r·tp..(r+1)·tp]).
    pub devices: Vec<GpuId>,
    pub tp: u32,
    /// Micro-batch size of each replica (its length is dp).
    pub micro_batch_sizes: Vec<u64>,
    pub zero: u8,
    pub recompute: Recompute,
    /// Offload ratios (Mist); `Offload::default()` keeps everything on the GPU.
    pub offload: Offload,
}

impl StageChoice {
    /// A stage whose `devices.len() / tp` replicas all take `mbs` samples a micro-batch, with
    /// nothing sharded, recomputed or offloaded (the space of Metis, AMP, Ditto and the oracle).
    pub fn uniform(layers: LayerRange, devices: Vec<GpuId>, tp: u32, mbs: u64) -> StageChoice {
        let dp = devices.len() / tp.max(1) as usize;
        StageChoice {
            layers,
            devices,
            tp,
            micro_batch_sizes: vec![mbs; dp],
            zero: 0,
            recompute: Recompute::None,
            offload: Offload::default(),
        }
    }
}

/// A complete plan from stage choices (1F1B, the problem's engine and precision).
pub fn make_plan(problem: &Problem<'_>, stages: Vec<StageChoice>, micro_batches: u64) -> Plan {
    Plan {
        global_batch: problem.global_batch,
        micro_batches,
        schedule: Schedule::OneFOneB,
        engine: problem.options.engine,
        precision: problem.options.precision,
        collective_dtypes: Default::default(),
        moe_capacity_factor: None,
        cp_comm: Default::default(),
        tp_comm_overlap: false,
        compile: problem.options.compile_of(),
        made_for: None,
        stages: stages
            .into_iter()
            .map(|s| Stage {
                etp: None,
                ep: 1,
                cp: 1,
                layers: s.layers,
                dp: s.micro_batch_sizes.len() as u32,
                devices: s.devices,
                tp: s.tp,
                micro_batch_sizes: s.micro_batch_sizes,
                zero: s.zero,
                recompute: s.recompute,
                offload: s.offload,
                sequence_parallel: false,
                replica_samples: Vec::new(),
                replica_tp: Vec::new(),
            })
            .collect(),
    }
}

/// The workload of a problem.
pub fn workload<'a>(problem: &Problem<'a>) -> Workload<'a> {
    Workload {
        model: problem.model,
        cluster: problem.cluster,
        seq_len: problem.seq_len,
    }
}

/// `Infeasible` when there is nothing to plan: a model without layers, a cluster without GPUs,
/// a global batch of 0 samples. Every planner's answer goes through it (`Planner::plan`), and
/// a `find` that cannot start without these calls it first.
/// The problem's precision against its GPUs and engine, before any search: FP8 needs at
/// least one GPU with FP8 tensor cores (the plan then uses only those), and the engine asked
/// for (`--engine`) must train in it.
pub fn precision_runs(problem: &Problem<'_>) -> Result<(), PlannerError> {
    let p = problem.options.precision;
    if p.is_fp8() {
        let types = &problem.cluster.gpu_types;
        if types.iter().all(|t| crate::gpu::fp8_peak(t).is_none()) {
            let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
            return Err(PlannerError::Infeasible(format!(
                "FP8 training needs GPUs with FP8 tensor cores (Ada, Hopper, Blackwell); the \
                 cluster has {}; plan in BF16 (--precision bf16)",
                names.join(", ")
            )));
        }
    }
    let engine = problem.options.engine;
    // Without `--engine` (with one, the next check says what that engine trains in).
    if p == crate::plan::Precision::Fp8Rowwise
        && problem.options.runtime.is_none()
        && !engine.runs_pytorch_code()
    {
        return Err(PlannerError::Infeasible(format!(
            "torchao's rowwise FP8 runs under PyTorch's engines, and the plans' engine is {}; \
             plan with engine fsdp (`runtime::planning_engine` picks it)",
            engine.name()
        )));
    }
    match problem.options.runtime {
        Some(rt) if !rt.trains_in(p) => Err(PlannerError::Infeasible(format!(
            "{} does not train in {}; plan for it in {}, or for an engine that runs it \
             (--engine {})",
            rt.name(),
            p.name().to_uppercase(),
            if rt == crate::plan::runtime::Runtime::Torchtitan {
                "BF16 or by torchao's rowwise recipe (--precision bf16, fp8-rowwise)"
            } else {
                "BF16 (--precision bf16)"
            },
            if p == crate::plan::Precision::Fp8Rowwise {
                "torchtitan"
            } else {
                "megatron"
            }
        ))),
        _ => Ok(()),
    }
}

pub fn nothing_to_plan(problem: &Problem<'_>) -> Result<(), PlannerError> {
    let mut missing = Vec::new();
    if problem.model.layers.is_empty() {
        missing.push("the model has no layers");
    }
    if problem.cluster.num_gpus() == 0 {
        missing.push("the cluster has no GPUs");
    }
    if problem.global_batch == 0 {
        missing.push("the global batch has no sample");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PlannerError::Infeasible(format!(
            "nothing to plan: {}",
            missing.join(", ")
        )))
    }
}

/// When the model's weights, gradients and optimizer states alone exceed the memory of every
/// GPU of the cluster together, in words: why no plan fits short of offloading nearly all of
/// them to host memory. `None` when they fit (activations and buffers come on top, so fitting
/// here proves nothing).
pub fn state_exceeds_cluster(problem: &Problem<'_>) -> Option<String> {
    let (w, g, o) =
        crate::cost::memory::state_bytes(problem.options.engine, problem.options.precision);
    let params = problem.model.params() as f64;
    let state = params * (w + g + o);
    let cluster = problem.cluster;
    let capacity: f64 = cluster
        .gpus()
        .iter()
        .map(|&gpu| cluster.gpu(gpu).memory.get())
        .sum();
    (state > capacity).then(|| {
        format!(
            "the model's weights, gradients and optimizer states alone take {} ({} parameters at \
             {} B each), more than the {} of all {} GPUs together: add GPUs, or offload nearly \
             all of the state to host memory",
            crate::units::Bytes(state),
            crate::parse::show_f64((params / 1e9 * 10.0).round() / 10.0) + "B",
            crate::parse::show_f64(w + g + o),
            crate::units::Bytes(capacity),
            cluster.num_gpus()
        )
    })
}

/// The end of a search, written once: the chosen plan as an `Outcome` (with the search's node
/// count and stop reason), or, without one, `Stopped` when a limit cut the search short and
/// `Infeasible` with `why` when the space has no plan.
pub fn conclude(
    chosen: Option<(Plan, Estimate)>,
    search: &super::Search<'_>,
    ranked: Vec<super::Ranked>,
    notes: Vec<String>,
    why: impl FnOnce() -> String,
) -> Result<super::Outcome, PlannerError> {
    match chosen {
        Some((plan, estimate)) => Ok(super::Outcome {
            plan,
            estimate,
            explored: search.explored(),
            stop_reason: search.stop_reason(),
            ranked,
            notes,
            per_engine: Vec::new(),
        }),
        None if search.stopped() => Err(PlannerError::Stopped(search.stop_reason())),
        None => Err(PlannerError::Infeasible(why())),
    }
}

/// hetplan's estimate of a plan, or `None` when the plan is not valid for the problem.
pub fn evaluate(problem: &Problem<'_>, plan: &Plan) -> Option<Estimate> {
    let plan = crate::plan::ValidPlan::check(plan, problem.model, problem.cluster).ok()?;
    Some(cost::estimate(workload(problem), &plan, problem.compute))
}

/// The best feasible plan seen so far. Ties keep the first found: search orders are fixed, so
/// the result is deterministic.
#[derive(Default)]
pub struct Best {
    pub plan: Option<(Plan, Estimate)>,
    /// The infeasible candidate that came closest to fitting: (plan, peak over capacity).
    pub closest_oom: Option<(Plan, f64)>,
}

impl Best {
    /// Offers a candidate; returns its iteration time if it fits.
    pub fn offer(&mut self, plan: Plan, est: Estimate) -> Option<f64> {
        if !est.fits {
            let over = est
                .per_gpu
                .iter()
                .map(|g| g.peak_memory_bytes / g.capacity_bytes)
                .fold(0.0, f64::max);
            if self.closest_oom.as_ref().is_none_or(|(_, o)| over < *o) {
                self.closest_oom = Some((plan, over));
            }
            return None;
        }
        let t = est.iteration_time_s;
        if self
            .plan
            .as_ref()
            .is_none_or(|(_, b)| t < b.iteration_time_s)
        {
            self.plan = Some((plan, est));
        }
        Some(t)
    }
}

/// Splits `total` over items in proportion to `weights` by largest remainder, item i within
/// `1..=caps[i]`: each first gets its quota rounded down (clamped), then what is missing goes
/// one at a time to the item furthest below its quota and what is too much comes back from the
/// one furthest above it, ties to the lowest index. `None` when no split fits the bounds.
/// Metis's data load balancer and Poplar's expressible plans split samples this way.
pub fn largest_remainder(total: u64, weights: &[f64], caps: &[u64]) -> Option<Vec<u64>> {
    let n = weights.len();
    let room = caps.iter().fold(0u64, |a, &c| a.saturating_add(c));
    if n == 0 || caps.len() != n || total < n as u64 || total > room || caps.contains(&0) {
        return None;
    }
    let sum: f64 = weights.iter().sum();
    let quota: Vec<f64> = weights
        .iter()
        .map(|&w| {
            if sum > 0.0 {
                total as f64 * w / sum
            } else {
                total as f64 / n as f64
            }
        })
        .collect();
    let mut out: Vec<u64> = quota
        .iter()
        .zip(caps)
        .map(|(&q, &c)| (q.floor() as u64).clamp(1, c))
        .collect();
    let mut have: u64 = out.iter().sum();
    while have < total {
        let i = (0..n).filter(|&i| out[i] < caps[i]).max_by(|&a, &b| {
            (quota[a] - out[a] as f64)
                .total_cmp(&(quota[b] - out[b] as f64))
                .then(b.cmp(&a))
        })?;
        out[i] += 1;
        have += 1;
    }
    while have > total {
        let i = (0..n).filter(|&i| out[i] > 1).max_by(|&a, &b| {
            (out[a] as f64 - quota[a])
                .total_cmp(&(out[b] as f64 - quota[b]))
                .then(b.cmp(&a))
        })?;
        out[i] -= 1;
        have -= 1;
    }
    Some(out)
}

/// Positive integer divisors of `n`, ascending.
pub fn divisors(n: u64) -> Vec<u64> {
    let mut d: Vec<u64> = (1..=n.isqrt()).filter(|i| n.is_multiple_of(*i)).collect();
    let big: Vec<u64> = d
        .iter()
        .rev()
        .map(|i| n / i)
        .filter(|&j| j * j != n)
        .collect();
    d.extend(big);
    d
}

/// Every way to cut `n` items into `parts` non-empty consecutive runs: the run lengths.
pub fn compositions(n: usize, parts: usize) -> Vec<Vec<usize>> {
    fn rec(n: usize, parts: usize, acc: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if parts == 1 {
            if n >= 1 {
                acc.push(n);
                out.push(acc.clone());
                acc.pop();
            }
            return;
        }
        for first in 1..=n.saturating_sub(parts - 1) {
            acc.push(first);
            rec(n - first, parts - 1, acc, out);
            acc.pop();
        }
    }
    let mut out = Vec::new();
    if parts >= 1 && n >= parts {
        rec(n, parts, &mut Vec::new(), &mut out);
    }
    out
}

/// Every way to give `total` items to `parts` ordered parts, each `1..=max`, lexicographic,
/// stopping after `cap` of them (pruned so that no time goes to splits that cannot be valid).
/// The oracle's and the referee's per-replica sample splits.
pub fn bounded_compositions(total: u64, parts: usize, max: u64, cap: usize) -> Vec<Vec<u64>> {
    fn rec(
        left: u64,
        parts: usize,
        max: u64,
        cap: usize,
        acc: &mut Vec<u64>,
        out: &mut Vec<Vec<u64>>,
    ) {
        if out.len() >= cap {
            return;
        }
        if parts == 0 {
            if left == 0 {
                out.push(acc.clone());
            }
            return;
        }
        let rest = (parts - 1) as u64;
        let lo = left.saturating_sub(rest.saturating_mul(max)).max(1);
        let hi = max.min(left.saturating_sub(rest));
        for x in lo..=hi {
            acc.push(x);
            rec(left - x, parts - 1, max, cap, acc, out);
            acc.pop();
        }
    }
    let mut out = Vec::new();
    rec(total, parts, max, cap, &mut Vec::new(), &mut out);
    out
}

/// Layer ranges from run lengths.
pub fn ranges(lengths: &[usize]) -> Vec<LayerRange> {
    let mut start = 0;
    lengths
        .iter()
        .map(|&l| {
            let r = LayerRange {
                start,
                end: start + l,
            };
            start += l;
            r
        })
        .collect()
}

/// The GPUs of a device group that takes `counts[n]` GPUs from node `n`, after `taken[n]` GPUs
/// of that node went to earlier groups (GPUs of one node are interchangeable; they are taken in
/// local order).
pub fn take_devices(counts: &[u32], taken: &mut [u32]) -> Vec<GpuId> {
    let mut out = Vec::new();
    for (n, &c) in counts.iter().enumerate() {
        for k in 0..c {
            out.push(GpuId {
                node: n as u32,
                local: taken[n] + k,
            });
        }
        taken[n] += c;
    }
    out
}

/// The memory explanation when nothing fits: the smallest possible per-GPU need for model
/// states (everything sharded over every GPU) against the largest GPU.
pub fn infeasible_reason(problem: &Problem<'_>, cluster: &Cluster) -> String {
    let params = problem.model.params() as f64;
    let gpus = cluster.num_gpus().max(1) as f64;
    let (w, g, o) = cost::memory::state_bytes(problem.options.engine, problem.options.precision);
    let sharded = Bytes(params * (w + g + o) / gpus);
    let largest = cluster
        .gpu_types
        .iter()
        .map(|t| t.memory)
        .fold(Bytes::ZERO, Bytes::max);
    format!(
        "no candidate fits in memory: the model's {:.2}B parameters need {sharded} of weights, \
         gradients and optimizer state per GPU even spread over all {} GPUs, before activations; \
         the largest GPU has {largest}; allow ZeRO-3, activation checkpointing or offloading, or \
         add GPUs",
        params / 1e9,
        cluster.num_gpus()
    )
}

#[cfg(test)]
mod tests {

    #[test]
    fn largest_remainder_keeps_proportions_and_bounds() {
        assert_eq!(
            largest_remainder(10, &[3.0, 1.0], &[10, 10]),
            Some(vec![8, 2])
        );
        assert_eq!(
            largest_remainder(10, &[3.0, 1.0], &[6, 10]),
            Some(vec![6, 4])
        );
        assert_eq!(
            largest_remainder(4, &[100.0, 0.0, 0.0, 0.0], &[9, 9, 9, 9]),
            Some(vec![1, 1, 1, 1])
        );
        assert_eq!(largest_remainder(3, &[1.0; 4], &[9, 9, 9, 9]), None);
        assert_eq!(largest_remainder(40, &[1.0, 1.0], &[9, 9]), None);
        assert_eq!(largest_remainder(4, &[0.0, 0.0], &[9, 9]), Some(vec![2, 2]));
        assert_eq!(largest_remainder(4, &[], &[]), None);
    }
    use super::*;

    #[test]
    fn divisors_and_compositions() {
        assert_eq!(divisors(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(16), vec![1, 2, 4, 8, 16]);
        assert_eq!(compositions(4, 2), vec![vec![1, 3], vec![2, 2], vec![3, 1]]);
        assert_eq!(compositions(3, 3), vec![vec![1, 1, 1]]);
        assert!(compositions(2, 3).is_empty());
    }

    #[test]
    fn devices_are_taken_in_node_order() {
        let mut taken = vec![0, 0];
        let a = take_devices(&[2, 0], &mut taken);
        let b = take_devices(&[2, 1], &mut taken);
        assert_eq!(
            a,
            vec![GpuId { node: 0, local: 0 }, GpuId { node: 0, local: 1 }]
        );
        assert_eq!(
            b,
            vec![
                GpuId { node: 0, local: 2 },
                GpuId { node: 0, local: 3 },
                GpuId { node: 1, local: 0 }
            ]
        );
    }
}
