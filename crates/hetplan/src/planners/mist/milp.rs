//! Mist's inter-stage tuning (§5.3, Eq. 2–3) as a mixed-integer linear program, solved by
//! pure-Rust microlp (called directly, for its node limit) or HiGHS with the `highs` feature
//! (through good_lp).
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

/// Limits of one MILP solve. A branch and bound keeps every open node's basis (one entry per
/// variable and constraint), so on thousands of candidates an unbounded tree grows to
/// gigabytes: at 4,096 GPUs one program of 18k binaries held 3.7 GB after 20 s. The node limit
/// bounds that memory and, unlike a time limit, stops at the same incumbent on every machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MilpLimits {
    /// Branch-and-bound nodes (the root relaxation not counted).
    pub nodes: Option<u64>,
    pub time: Option<Seconds>,
}

impl MilpLimits {
    /// No limit: the proven optimum (tests, small programs).
    pub const NONE: MilpLimits = MilpLimits {
        nodes: None,
        time: None,
    };
}

/// A solved Eq. 2: the chosen candidate per stage and Eq. 2's value (recomputed from the
/// picks), and whether the solver proved it optimal or stopped at a limit with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Solved {
    pub picks: Vec<usize>,
    pub value: f64,
    pub proven_optimal: bool,
    /// Branch-and-bound nodes solved.
    pub nodes: u64,
}

/// Eq. 2 written once as rows over variables, for whichever backend solves it: the binaries
/// x[i,c] first (stage by stage), then T and D.
struct Formulation {
    /// Objective coefficient per variable.
    objective: Vec<f64>,
    binaries: usize,
    rows: Vec<Row>,
    /// The first binary of each stage.
    offsets: Vec<usize>,
}

struct Row {
    terms: Vec<(usize, f64)>,
    equal: bool,
    /// `terms = rhs` when `equal`, else `terms ≤ rhs`.
    rhs: f64,
}

impl Formulation {
    fn new(stages: &[Vec<Cand>], g: u64, layers: usize, caps: &[u32]) -> Formulation {
        let mut offsets = Vec::with_capacity(stages.len());
        let mut binaries = 0;
        for s in stages {
            offsets.push(binaries);
            binaries += s.len();
        }
        let (t_max, tail) = (binaries, binaries + 1);
        let mut objective = vec![0.0; binaries + 2];
        objective[t_max] = g as f64 - 1.0;
        objective[tail] = 1.0;
        let var = |i: usize, c: usize| offsets[i] + c;
        let mut rows = Vec::new();
        let mut layer_sum = Vec::with_capacity(binaries);
        for (i, s) in stages.iter().enumerate() {
            rows.push(Row {
                terms: (0..s.len()).map(|c| (var(i, c), 1.0)).collect(),
                equal: true,
                rhs: 1.0,
            });
            let mut t_i = Vec::with_capacity(s.len() + 1);
            for (c, cand) in s.iter().enumerate() {
                objective[var(i, c)] = cand.t;
                layer_sum.push((var(i, c), cand.layers as f64));
                t_i.push((var(i, c), cand.t));
            }
            // tᵢ − T ≤ 0
            t_i.push((t_max, -1.0));
            rows.push(Row {
                terms: t_i,
                equal: false,
                rhs: 0.0,
            });
            // dᵢ − Σ_{j<i} tⱼ − D ≤ 0
            let mut d = Vec::new();
            for (c, cand) in s.iter().enumerate() {
                d.push((var(i, c), cand.d));
            }
            for (j, sj) in stages.iter().enumerate().take(i) {
                for (c, cand) in sj.iter().enumerate() {
                    d.push((var(j, c), -cand.t));
                }
            }
            d.push((tail, -1.0));
            rows.push(Row {
                terms: d,
                equal: false,
                rhs: 0.0,
            });
        }
        rows.push(Row {
            terms: layer_sum,
            equal: true,
            rhs: layers as f64,
        });
        for (k, &cap) in caps.iter().enumerate() {
            let used: Vec<(usize, f64)> = stages
                .iter()
                .enumerate()
                .flat_map(|(i, s)| {
                    s.iter()
                        .enumerate()
                        .filter(move |(_, c)| c.usage[k] > 0)
                        .map(move |(c, cand)| (var(i, c), cand.usage[k] as f64))
                })
                .collect();
            rows.push(Row {
                terms: used,
                equal: false,
                rhs: cap as f64,
            });
        }
        Formulation {
            objective,
            binaries,
            rows,
            offsets,
        }
    }
}

/// The backend's answer: a value per variable, whether it is proven optimal, nodes solved.
type Raw = (Vec<f64>, bool, u64);

/// microlp, called directly for its node limit (good_lp sets only its time limit and gap).
#[cfg(not(feature = "highs"))]
fn run(f: &Formulation, limits: MilpLimits) -> Option<Raw> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem, SolutionStatus, SolveOptions};
    let mut p = Problem::new(OptimizationDirection::Minimize);
    let vars: Vec<microlp::Variable> = f
        .objective
        .iter()
        .enumerate()
        .map(|(v, &c)| {
            if v < f.binaries {
                p.add_binary_var(c)
            } else {
                p.add_var(c, (0.0, f64::INFINITY))
            }
        })
        .collect();
    for row in &f.rows {
        let expr: microlp::LinearExpr = row.terms.iter().map(|&(v, c)| (vars[v], c)).collect();
        let op = if row.equal {
            ComparisonOp::Eq
        } else {
            ComparisonOp::Le
        };
        p.add_constraint(expr, op, row.rhs);
    }
    let mut opts = SolveOptions::default();
    opts.node_limit = limits.nodes;
    opts.time_limit = limits
        .time
        .map(|t| std::time::Duration::from_secs_f64(t.get().max(0.0)));
    let sol = p.solve_with(opts).ok()?.into_solution().ok()?;
    let values = vars.iter().map(|&v| sol.var_value(v)).collect();
    let optimal = sol.status() == SolutionStatus::Optimal;
    Some((values, optimal, sol.stats().nodes_solved))
}

/// HiGHS through good_lp, with its time and node limits (`mip_max_nodes`).
#[cfg(feature = "highs")]
fn run(f: &Formulation, limits: MilpLimits) -> Option<Raw> {
    use good_lp::{variable, Expression, ProblemVariables, Solution, SolverModel, WithTimeLimit};
    let mut pv = ProblemVariables::new();
    let vars: Vec<good_lp::Variable> = (0..f.objective.len())
        .map(|v| {
            pv.add(if v < f.binaries {
                variable().binary()
            } else {
                variable().min(0.0)
            })
        })
        .collect();
    let obj: Expression = vars.iter().zip(&f.objective).map(|(&v, &c)| c * v).sum();
    // HiGHS stops at a relative gap of 10⁻⁴ by default: 0 proves the optimum, as microlp does.
    let mut model = pv
        .minimise(obj)
        .using(good_lp::highs)
        .set_option("mip_rel_gap", 0.0)
        .set_option("mip_abs_gap", 0.0);
    if let Some(t) = limits.time {
        model = model.with_time_limit(t.get().max(0.0));
    }
    if let Some(n) = limits.nodes {
        model = model.set_option("mip_max_nodes", i32::try_from(n).unwrap_or(i32::MAX));
    }
    for row in &f.rows {
        let e: Expression = row.terms.iter().map(|&(v, c)| c * vars[v]).sum();
        model = model.with(if row.equal {
            e.eq(row.rhs)
        } else {
            e.leq(row.rhs)
        });
    }
    let sol = model.solve().ok()?;
    let values = vars.iter().map(|&v| sol.value(v)).collect();
    let optimal = matches!(sol.status(), good_lp::SolutionStatus::Optimal);
    Some((values, optimal, 0))
}

/// Solves Eq. 2 within `limits`. `None` when the program is infeasible or a limit came before
/// any integer solution; otherwise the best integer solution found, with whether it is proven
/// optimal.
pub fn solve(
    stages: &[Vec<Cand>],
    g: u64,
    layers: usize,
    caps: &[u32],
    limits: MilpLimits,
) -> Option<Solved> {
    if stages.is_empty() || stages.iter().any(|s| s.is_empty()) {
        return None;
    }
    let f = Formulation::new(stages, g, layers, caps);
    let (values, proven_optimal, nodes) = run(&f, limits)?;
    let picks: Vec<usize> = stages
        .iter()
        .zip(&f.offsets)
        .map(|(s, &o)| {
            // The chosen binary; the largest value guards against solver round-off.
            let xs = &values[o..o + s.len()];
            let mut best = 0;
            for (c, v) in xs.iter().enumerate() {
                if *v > xs[best] {
                    best = c;
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
    Some(Solved {
        value: objective(g, &chosen),
        picks,
        proven_optimal,
        nodes,
    })
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
