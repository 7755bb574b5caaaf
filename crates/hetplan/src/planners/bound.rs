//! A lower bound on the iteration time of every plan a planner can return, by hetplan's
//! estimate: what makes a planner's answer's gap *certified* (issue 10).
//!
//! **The compute bound.** Every sample passes every layer forward and backward on some GPU. Let
//! `c_g(l)` be the fewest GPU-seconds per sample that a GPU of type `g` spends on layer `l`,
//! over every TP degree `t ≤ max_tp` and micro-batch size `b ≤ min(max_micro_batch, gbs)` the
//! planners may choose, with and without sequence parallelism, and for MoE layers every
//! expert-parallel degree dividing the experts (larger expert GEMMs; the load imbalance the
//! estimate adds on top only raises a plan's time), and every context-parallel degree `c` the
//! planner may take (`c` GPUs share the samples; not needed where the compute source says
//! that never lowers the cost, `ComputeTimes::context_parallelism_never_cheaper`):
//! `c·t·(fwd + bwd)(l, g, t, b, c) / b`
//! from the same `ComputeTimes` the estimate uses. A plan's iteration is at least the busiest
//! GPU's compute, so with `n_g` GPUs of type `g` and `x_{g,l}` the samples of layer `l` that
//! type `g` processes, the iteration time `T` of any plan satisfies
//!
//! ```text
//!   Σ_g x_{g,l} = gbs                (every layer sees every sample)
//!   Σ_l c_g(l)·x_{g,l} ≤ n_g·T       (a type's GPUs have T seconds each)
//! ```
//!
//! and the smallest such `T`, a linear program over (types × distinct layers) variables, is a
//! lower bound. What it leaves out only adds time — pipeline bubbles, communication,
//! recomputation, the optimizer step, replicas waiting for their slowest GPU, GPUs left idle —
//! so it holds for every schedule, ZeRO stage, checkpointing and offloading choice. A second,
//! closed-form bound (every GPU as fast as the fastest type on each layer) is kept when the LP
//! solver is not trusted: the answer is the larger of the two, the LP's less a relative 1e-4
//! for the solver's tolerance. With one type's costs alone the same sum bounds every plan on
//! that type's GPUs, the others idle (`Bound::alone_s`).

use super::Problem;
use crate::cost::compute::LayerShape;
use crate::units::Seconds;
use good_lp::{variable, Expression, ProblemVariables, Solution, SolverModel, Variable};
use serde::Serialize;

/// The certified lower bound and what it is made of.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bound {
    /// No plan in the planners' space iterates faster, by hetplan's estimate.
    pub iteration_time_s: f64,
    /// The closed-form part: every GPU as fast as the fastest type on each layer.
    pub uniform_s: f64,
    /// The linear program's optimum (types take the layers they are best at), when solved.
    pub lp_s: Option<f64>,
    /// Per GPU type (indexed as `Cluster::gpu_types`), the bound of a plan on that type's GPUs
    /// alone, the others idle (`None` for a type the cluster has no GPU of, or a layer it
    /// cannot run): the same sum with that type's costs, `gbs · Σ_l c_g(l) / n_g`, less the
    /// LP's slack. What a search needs to set aside such plans unseen (`planners::hetplan`).
    pub alone_s: Vec<Option<f64>>,
}

impl Bound {
    /// How far `time` is above the bound, as a fraction of `time` (0 = proven optimal).
    pub fn gap(&self, time: Seconds) -> f64 {
        if time.get() <= 0.0 {
            return 0.0;
        }
        ((time.get() - self.iteration_time_s) / time.get()).max(0.0)
    }
}

/// Relative slack taken off the LP's optimum for the solver's floating-point tolerance.
const LP_SLACK: f64 = 1e-4;

/// The lower bound of `problem` (see the module documentation).
pub fn lower_bound(problem: &Problem<'_>) -> Bound {
    let model = problem.model;
    let cluster = problem.cluster;
    let gbs = problem.global_batch as f64;
    // Distinct layers and how often each occurs. Layers carry their names, so a transformer's
    // blocks stay distinct: a profile may time them differently, and merging equal-looking
    // layers could lift the bound above a plan.
    let mut classes: Vec<(usize, f64)> = Vec::new();
    for (l, layer) in model.layers.iter().enumerate() {
        match classes.iter_mut().find(|(r, _)| model.layers[*r] == *layer) {
            Some((_, n)) => *n += 1.0,
            None => classes.push((l, 1.0)),
        }
    }
    // GPUs per type.
    let mut gpus = vec![0.0; cluster.gpu_types.len()];
    for n in &cluster.nodes {
        gpus[n.gpu_type.0] += n.num_gpus as f64;
    }
    let types: Vec<usize> = (0..gpus.len()).filter(|&g| gpus[g] > 0.0).collect();
    if classes.is_empty() || types.is_empty() || gbs <= 0.0 {
        return Bound {
            iteration_time_s: 0.0,
            uniform_s: 0.0,
            lp_s: None,
            alone_s: vec![None; cluster.gpu_types.len()],
        };
    }
    let max_b = problem
        .options
        .max_micro_batch
        .min(problem.global_batch)
        .max(1);
    let max_tp = problem.options.max_tp.max(1);
    // Context parallelism: each of cp GPUs takes 1/cp of a sample's tokens in smaller kernels.
    // Where the compute source guarantees that this never lowers the GPU-time per sample
    // (`ComputeTimes::context_parallelism_never_cheaper`: the analytic model and profiles), the
    // shapes at cp = 1 bound them; otherwise every degree a plan may take is tried.
    let cps: Vec<u32> = if model.per_sample || problem.compute.context_parallelism_never_cheaper() {
        vec![1]
    } else {
        (1..=problem.options.max_cp.max(1))
            .filter(|&c| problem.seq_len.is_multiple_of(2 * c as u64) || c == 1)
            .collect()
    };
    // c[g][j]: fewest GPU-seconds per sample of layer class j on type g.
    let c: Vec<Vec<f64>> = types
        .iter()
        .map(|&g| {
            let spec = &cluster.gpu_types[g];
            classes
                .iter()
                .map(|&(l, _)| {
                    let mut best = f64::INFINITY;
                    // Expert parallelism runs a MoE layer's experts in larger GEMMs: every
                    // degree dividing the experts is a shape a plan may take.
                    let eps: Vec<u32> = match model.layers[l].experts() {
                        Some((e, _)) => (1..=e.min(problem.options.max_ep.max(1) as u64) as u32)
                            .filter(|d| e.is_multiple_of(*d as u64))
                            .collect(),
                        None => vec![1],
                    };
                    // (ep, cp, Ulysses instead of the ring) of every shape a plan may take.
                    let shapes: Vec<(u32, u32, bool)> = eps
                        .iter()
                        .flat_map(|&e| cps.iter().map(move |&c| (e, c)))
                        .flat_map(|(e, c)| {
                            let a2a: &[bool] = if c > 1 { &[false, true] } else { &[false] };
                            a2a.iter().map(move |&a| (e, c, a))
                        })
                        .collect();
                    for tp in 1..=max_tp {
                        for b in 1..=max_b {
                            for sequence_parallel in [false, true] {
                                for &(ep, cp, cp_all_to_all) in &shapes {
                                    let shape = LayerShape {
                                        mbs: b,
                                        seq: problem.seq_len,
                                        tp,
                                        sequence_parallel,
                                        precision: problem.options.precision,
                                        ep,
                                        etp: None,
                                        cp,
                                        cp_all_to_all,
                                        native_attention: true,
                                        weight_casts: crate::cost::WeightCasts::None,
                                        // The fastest kernels any engine runs: a bound.
                                        eager: false,
                                        pads_vocabulary: true,
                                        // Recomputation only adds time.
                                        op_checkpointing: false,
                                        early_stop: false,
                                        // torchtitan's grouped product has no host loop.
                                        host_expert_loop: false,
                                    };
                                    let t = problem.compute.layer_time(spec, model, l, shape);
                                    // cp·tp GPUs share the b samples.
                                    let per = (cp * tp) as f64 * (t.forward + t.backward).get()
                                        / b as f64;
                                    if per.is_finite() && per >= 0.0 {
                                        best = best.min(per);
                                    }
                                }
                            }
                        }
                    }
                    best
                })
                .collect()
        })
        .collect();
    let total_gpus: f64 = types.iter().map(|&g| gpus[g]).sum();
    let uniform: f64 = classes
        .iter()
        .enumerate()
        .map(|(j, &(_, n))| {
            let fastest = (0..types.len())
                .map(|i| c[i][j])
                .fold(f64::INFINITY, f64::min);
            gbs * n * fastest
        })
        .sum::<f64>()
        / total_gpus;
    let mut alone_s = vec![None; cluster.gpu_types.len()];
    for (i, &g) in types.iter().enumerate() {
        let work: f64 = (classes.iter().enumerate())
            .map(|(j, &(_, n))| gbs * n * c[i][j])
            .sum();
        let t = work / gpus[g] * (1.0 - LP_SLACK);
        alone_s[g] = (t.is_finite() && t >= 0.0).then_some(t);
    }
    let lp = solve_lp(&c, &classes, &types, &gpus, gbs);
    let uniform = if uniform.is_finite() { uniform } else { 0.0 };
    let best = lp.map_or(uniform, |t| t.max(uniform));
    Bound {
        iteration_time_s: best,
        uniform_s: uniform,
        lp_s: lp,
        alone_s,
    }
}

/// The module's linear program; `None` when it is not solved (a layer no type can run).
fn solve_lp(
    c: &[Vec<f64>],
    classes: &[(usize, f64)],
    types: &[usize],
    gpus: &[f64],
    gbs: f64,
) -> Option<f64> {
    if c.iter().flatten().any(|v| !v.is_finite()) {
        return None;
    }
    // Scale to keep the solver's numbers near 1: seconds per sample of the whole model on the
    // first type.
    let scale: f64 = classes
        .iter()
        .enumerate()
        .map(|(j, &(_, n))| n * c[0][j])
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let mut vars = ProblemVariables::new();
    let t = vars.add(variable().min(0.0));
    // x[i][j]: the share (0..1) of layer class j's samples that type i processes.
    let x: Vec<Vec<Variable>> = types
        .iter()
        .map(|_| {
            classes
                .iter()
                .map(|_| vars.add(variable().min(0.0).max(1.0)))
                .collect()
        })
        .collect();
    let mut model = vars.minimise(Expression::from(t)).using(good_lp::microlp);
    for j in 0..classes.len() {
        let share: Expression = x.iter().map(|xi| Expression::from(xi[j])).sum();
        model = model.with(share.eq(1.0));
    }
    for (i, &g) in types.iter().enumerate() {
        // Σ_j c·n·gbs·x ≤ n_g·T, in units of `scale`.
        let work: Expression = classes
            .iter()
            .enumerate()
            .map(|(j, &(_, n))| (c[i][j] * n * gbs / scale) * x[i][j])
            .sum();
        model = model.with(work.leq(gpus[g] * t));
    }
    let sol = model.solve().ok()?;
    let v = sol.value(t) * scale * (1.0 - LP_SLACK);
    (v.is_finite() && v >= 0.0).then_some(v)
}
