//! Mist's inter-stage tuning (§5.3, Eq. 2–3) as a mixed-integer linear program, solved with
//! good_lp: pure-Rust microlp by default, HiGHS with the `highs` feature.
//!
//! For S stages and G micro-batches, stage i picks one candidate c = (layer count lᵢ, device
//! group shape, a sampled Pareto point fᵢ of the intra-stage frontier) with its (tᵢ, dᵢ):
//!
//! ```text
//! min  (G − 1)·T + Σᵢ tᵢ + D
//! s.t. Σ_c x[i,c] = 1                       (one candidate per stage)
//!      Σᵢ Σ_c l_c·x[i,c] = L                (the layers are covered)
//!      Σᵢ Σ_c gpus_c,k·x[i,c] ≤ GPUs of class k   (heterogeneous extension)
//!      T ≥ tᵢ,  D ≥ dᵢ − Σ_{j<i} tⱼ,  D ≥ 0  for every stage i
//! ```
//!
//! with tᵢ = Σ_c t_c·x[i,c] and dᵢ likewise: Eq. 2's two maxima linearised by T and D.

use crate::units::Seconds;
use good_lp::{
    variable, Expression, ProblemVariables, Solution, SolverModel, Variable, WithTimeLimit,
};

/// One choice for one stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Cand {
    pub t: f64,
    pub d: f64,
    pub layers: usize,
    /// GPUs taken from each node class (length = number of classes).
    pub usage: Vec<u32>,
}

/// Eq. 2's objective for one pick per stage.
pub fn objective(g: u64, picks: &[&Cand]) -> f64 {
    let t_max = picks.iter().map(|c| c.t).fold(0.0, f64::max);
    let t_sum: f64 = picks.iter().map(|c| c.t).sum();
    let mut prefix = 0.0;
    let mut tail = 0.0f64;
    for c in picks {
        tail = tail.max(c.d - prefix);
        prefix += c.t;
    }
    (g as f64 - 1.0) * t_max + t_sum + tail
}

/// Whether picks cover `layers` and stay within every class's GPUs.
pub fn feasible(picks: &[&Cand], layers: usize, caps: &[u32]) -> bool {
    picks.iter().map(|c| c.layers).sum::<usize>() == layers
        && (0..caps.len()).all(|k| picks.iter().map(|c| c.usage[k]).sum::<u32>() <= caps[k])
}

/// Solves Eq. 2. Returns the chosen candidate index per stage and Eq. 2's value (recomputed
/// from the picks), or `None` when the program is infeasible. With `time_limit` the solver
/// stops there and returns the best integer solution it has (or `None` without one): a MILP
/// in progress is otherwise not interruptible.
pub fn solve(
    stages: &[Vec<Cand>],
    g: u64,
    layers: usize,
    caps: &[u32],
    time_limit: Option<Seconds>,
) -> Option<(Vec<usize>, f64)> {
    if stages.is_empty() || stages.iter().any(|s| s.is_empty()) {
        return None;
    }
    let mut vars = ProblemVariables::new();
    let x: Vec<Vec<Variable>> = stages
        .iter()
        .map(|s| s.iter().map(|_| vars.add(variable().binary())).collect())
        .collect();
    let t_max = vars.add(variable().min(0.0));
    let tail = vars.add(variable().min(0.0));
    let t_of =
        |i: usize| -> Expression { stages[i].iter().zip(&x[i]).map(|(c, v)| c.t * *v).sum() };
    let mut obj: Expression = (g as f64 - 1.0) * t_max + tail;
    for i in 0..stages.len() {
        obj += t_of(i);
    }
    let mut cons = Vec::new();
    let mut layer_sum = Expression::default();
    for (i, s) in stages.iter().enumerate() {
        let one: Expression = x[i].iter().map(|v| Expression::from(*v)).sum();
        cons.push(one.eq(1.0));
        for (c, v) in s.iter().zip(&x[i]) {
            layer_sum += c.layers as f64 * *v;
        }
        cons.push(Expression::from(t_max).geq(t_of(i)));
        let mut d: Expression = s.iter().zip(&x[i]).map(|(c, v)| c.d * *v).sum();
        for j in 0..i {
            d -= t_of(j);
        }
        cons.push(Expression::from(tail).geq(d));
    }
    cons.push(layer_sum.eq(layers as f64));
    for (k, &cap) in caps.iter().enumerate() {
        let mut used = Expression::default();
        for (s, xs) in stages.iter().zip(&x) {
            for (c, v) in s.iter().zip(xs) {
                if c.usage[k] > 0 {
                    used += c.usage[k] as f64 * *v;
                }
            }
        }
        cons.push(used.leq(cap as f64));
    }
    let problem = vars.minimise(obj);
    #[cfg(feature = "highs")]
    let model = problem.using(good_lp::highs);
    #[cfg(not(feature = "highs"))]
    let model = problem.using(good_lp::microlp);
    let mut model = match time_limit {
        Some(t) => model.with_time_limit(t.get().max(0.0)),
        None => model,
    };
    for c in cons {
        model = model.with(c);
    }
    let sol = model.solve().ok()?;
    let picks: Vec<usize> = x
        .iter()
        .map(|xs| {
            // The chosen binary; the largest value guards against solver round-off.
            let mut best = 0;
            for (ci, v) in xs.iter().enumerate() {
                if sol.value(*v) > sol.value(xs[best]) {
                    best = ci;
                }
            }
            best
        })
        .collect();
    let chosen: Vec<&Cand> = picks
        .iter()
        .enumerate()
        .map(|(i, &c)| &stages[i][c])
        .collect();
    if !feasible(&chosen, layers, caps) {
        return None;
    }
    Some((picks, objective(g, &chosen)))
}

/// Eq. 2 by enumeration of every pick (tests and tiny cases): the referee of [`solve`].
pub fn brute_force(
    stages: &[Vec<Cand>],
    g: u64,
    layers: usize,
    caps: &[u32],
) -> Option<(Vec<usize>, f64)> {
    let mut best: Option<(Vec<usize>, f64)> = None;
    let mut idx = vec![0usize; stages.len()];
    if stages.is_empty() || stages.iter().any(|s| s.is_empty()) {
        return None;
    }
    loop {
        let picks: Vec<&Cand> = idx
            .iter()
            .enumerate()
            .map(|(i, &c)| &stages[i][c])
            .collect();
        if feasible(&picks, layers, caps) {
            let v = objective(g, &picks);
            if best.as_ref().is_none_or(|(_, b)| v < *b) {
                best = Some((idx.clone(), v));
            }
        }
        let mut i = stages.len();
        loop {
            if i == 0 {
                return best;
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < stages[i].len() {
                break;
            }
            idx[i] = 0;
        }
    }
}
