//! The Mist planner (Zhu et al., EuroSys '25): its Fig. 2 motivational example in simulation,
//! the inter-stage MILP against brute force over the Pareto points, a brute-force referee over
//! Mist's own (wider than the oracle's) space, the heterogeneous extension, determinism, and
//! errors instead of panics.

mod shared;

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cluster::GpuId;
use hetplan::cost::Analytic;
use hetplan::model::{AttnImpl, TransformerConfig};
use hetplan::plan::{LayerRange, Offload, Plan, Recompute};
use hetplan::planners::common::{self, StageChoice};
use hetplan::planners::mist::milp::{self, Cand};
use hetplan::planners::mist::Mist;
use hetplan::planners::oracle::Oracle;
use hetplan::planners::{
    Limits, NoClock, NoProgress, Outcome, PlanOptions, Planner, PlannerError, Problem, Search,
    StopReason,
};
use hetplan::scenario::scenario;
use hetplan::sim::{simulate, SimOptions};
use hetplan::{Cluster, Model};

fn problem<'a>(model: &'a Model, cluster: &'a Cluster, batch: u64, seq: u64) -> Problem<'a> {
    Problem {
        model,
        cluster,
        global_batch: batch,
        seq_len: seq,
        compute: &Analytic,
        options: PlanOptions::default(),
    }
}

/// Fig. 2's set-up: GPT-3 2.7B on 4 L4 (PCIe Gen3), sequence 4096, global batch 8, from the
/// `mist-fig2-l4` scenario. The catalog's GPT-3 uses FlashAttention; Fig. 2 tunes against
/// Aceso's space, which has no FlashAttention (§6.1: "Aceso does not support it"), and with it
/// hetplan's memory model fits a 4-stage pipeline with no memory optimisation at all, which
/// Fig. 2(a) rules out. So the model here uses unfused attention (Fig. 12's setting).
fn fig2() -> (Model, Cluster, u64, u64) {
    let sc = scenario("mist-fig2-l4").unwrap();
    let mut cfg = sc.model.transformer.clone().expect("a transformer");
    cfg.attn_impl = AttnImpl::Torch;
    (cfg.build(), sc.cluster, sc.global_batch, sc.seq_len)
}

fn simulated(p: &Problem<'_>, plan: &Plan) -> f64 {
    simulate(
        common::workload(p),
        &common::workload(p).validate(plan).unwrap(),
        p.compute,
        &SimOptions::default(),
    )
    .unwrap()
    .iteration_time_s
}

#[test]
fn fig2_without_memory_optimisation_every_plan_is_out_of_memory() {
    let (model, cluster, batch, seq) = fig2();
    let p = problem(&model, &cluster, batch, seq);
    // The plain space (ZeRO-0, no checkpointing, no offloading) searched exhaustively by the
    // oracle under hetplan's estimate, and by Mist restricted to it.
    let o = Oracle.plan(&p, &mut Search::unbounded());
    assert!(
        matches!(&o, Err(PlannerError::Infeasible(m)) if m.contains("fits in memory")),
        "{o:?}"
    );
    let m = Mist::parallelism_only().plan(&p, &mut Search::unbounded());
    assert!(matches!(m, Err(PlannerError::Infeasible(_))), "{m:?}");
}

#[test]
fn fig2_co_optimisation_beats_full_checkpointing_in_simulation() {
    let (model, cluster, batch, seq) = fig2();
    let p = problem(&model, &cluster, batch, seq);
    // The full-checkpointing best is Mist's own search restricted to `Recompute::Full` on
    // every stage, ZeRO-0 and no offloading (Fig. 2(b): parallelism tuned).
    let full = Mist::full_checkpointing()
        .plan(&p, &mut Search::unbounded())
        .unwrap();
    for st in &full.plan.stages {
        assert_eq!(st.recompute, Recompute::Full);
        assert_eq!(st.zero, 0);
        assert!(st.offload.is_none());
    }
    let mist = Mist::default().plan(&p, &mut Search::unbounded()).unwrap();
    assert!(full.estimate.fits && mist.estimate.fits);
    assert_eq!(mist.stop_reason, StopReason::Exhausted);
    let (t_full, t_mist) = (simulated(&p, &full.plan), simulated(&p, &mist.plan));
    let speedup = t_full / t_mist;
    eprintln!(
        "Fig. 2: full ckpt {} {t_full:.3} s, Mist {} {t_mist:.3} s (simulated): {speedup:.3}x",
        full.plan.summary(),
        mist.plan.summary()
    );
    for n in &mist.notes {
        eprintln!("  {n}");
    }
    // Paper: 1.30×. Required here: at least 1.15× in simulation.
    assert!(
        speedup >= 1.15,
        "full ckpt {} ({t_full:.3} s) vs Mist {} ({t_mist:.3} s): {speedup:.3}×\n{:#?}",
        full.plan.summary(),
        mist.plan.summary(),
        mist.notes
    );
    // The co-optimised plan uses a memory optimisation beyond full checkpointing.
    assert!(mist
        .plan
        .stages
        .iter()
        .any(|s| s.zero > 0 || !s.offload.is_none() || s.recompute != Recompute::Full));
}

/// A small LCG so that the synthetic MILPs are the same on every run.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn assert_milp_matches_brute_force(stages: &[Vec<Cand>], g: u64, layers: usize, caps: &[u32]) {
    let bf = milp::brute_force(stages, g, layers, caps);
    let ilp = milp::solve(stages, g, layers, caps, milp::MilpLimits::NONE);
    match (bf, ilp) {
        (None, None) => {}
        (
            Some((_, b)),
            Some(milp::Solved {
                picks,
                value: v,
                proven_optimal,
                ..
            }),
        ) => {
            assert!(proven_optimal, "no limit, so the optimum is proven");
            assert!(
                (v - b).abs() <= 1e-9 * b.max(1.0),
                "MILP {v} vs brute force {b}"
            );
            let chosen: Vec<&Cand> = picks
                .iter()
                .enumerate()
                .map(|(i, &c)| &stages[i][c])
                .collect();
            assert!(milp::feasible(&chosen, layers, caps));
        }
        (b, i) => panic!("brute force {b:?} vs MILP {i:?}"),
    }
}

#[test]
fn milp_equals_brute_force_on_synthetic_pareto_points() {
    let mut r = Lcg(7);
    let mut limited_answers = 0;
    for case in 0..12 {
        let s = 2 + case % 3;
        let layers = 6 + case % 4;
        let g = 1 + (case as u64 % 5);
        let caps = vec![2 + (case as u32 % 3), 3];
        let stages: Vec<Vec<Cand>> = (0..s)
            .map(|_| {
                (0..7)
                    .map(|_| {
                        let class = (r.next() * 2.0) as usize;
                        let mut usage = vec![0, 0];
                        usage[class] = 1 + (r.next() * 2.0) as u32;
                        Cand {
                            t: 0.1 + r.next(),
                            d: r.next() * 2.0,
                            layers: 1 + (r.next() * 4.0) as usize,
                            usage,
                        }
                    })
                    .collect()
            })
            .collect();
        assert_milp_matches_brute_force(&stages, g, layers, &caps);
        // Under a node limit the solver stops there with a feasible pick, never better than
        // the optimum; the limit shares `MILP_NODE_ENTRIES` out by the program's size.
        let limited = milp::MilpLimits {
            nodes: Some(2),
            time: None,
        };
        if let Some(sol) = milp::solve(&stages, g, layers, &caps, limited) {
            limited_answers += 1;
            let (_, best) = milp::brute_force(&stages, g, layers, &caps).expect("it is feasible");
            assert!(sol.nodes <= 2, "{} nodes", sol.nodes);
            assert!(
                sol.value >= best * (1.0 - 1e-9),
                "{} below {best}",
                sol.value
            );
            let chosen: Vec<&Cand> = (sol.picks.iter().enumerate())
                .map(|(i, &c)| &stages[i][c])
                .collect();
            assert!(milp::feasible(&chosen, layers, &caps));
        }
    }
    assert!(limited_answers > 0, "no node-limited solve found a pick");
    assert_eq!(
        hetplan::planners::mist::milp_node_limit(100_000_000, 10_506),
        9_518
    );
    assert_eq!(hetplan::planners::mist::milp_node_limit(1_000, 10), 1_000);
}

#[test]
fn milp_equals_brute_force_on_mists_own_candidates() {
    // Fig. 2 with two stages and 4 micro-batches; the small heterogeneous cluster with three.
    let (model, cluster, batch, seq) = fig2();
    let p = problem(&model, &cluster, batch, seq);
    let sc = Mist::default()
        .stage_candidates(&p, 2, 4, &mut Search::unbounded())
        .unwrap();
    assert!(sc.cands.iter().all(|c| c.len() > 10));
    assert_milp_matches_brute_force(&sc.cands, 4, model.layers.len(), &sc.caps);

    let (model, cluster) = (shared::small_model(), shared::small_cluster());
    let p = problem(&model, &cluster, 8, 1024);
    for g in [2, 4] {
        let sc = Mist::default()
            .stage_candidates(&p, 3, g, &mut Search::unbounded())
            .unwrap();
        assert_eq!(sc.caps, vec![2, 2]);
        assert_milp_matches_brute_force(&sc.cands, g, model.layers.len(), &sc.caps);
    }
}

#[test]
fn the_sampled_frontier_trades_stable_time_for_first_last_extra() {
    let (model, cluster, batch, seq) = fig2();
    let p = problem(&model, &cluster, batch, seq);
    let sc = Mist::default()
        .stage_candidates(&p, 1, 2, &mut Search::unbounded())
        .unwrap();
    // Per shape, the points are Pareto-optimal: t ascending, d strictly descending.
    let mut traded = false;
    for shape in hetplan::planners::mist::shapes(&hetplan::planners::mist::node_classes(&cluster)) {
        let pts: Vec<_> = sc.meta[0]
            .iter()
            .filter(|(s, _)| *s == shape)
            .map(|m| m.1)
            .collect();
        for w in pts.windows(2) {
            assert!(w[0].t <= w[1].t && w[0].d > w[1].d, "{w:?}");
            traded = true;
        }
        for pt in &pts {
            assert!(pt.memory <= cluster.gpu_types[0].memory.get());
        }
    }
    assert!(traded, "some stage has more than one frontier point");
}

fn small_hetero() -> (Model, Cluster) {
    (shared::small_model(), shared::small_cluster())
}

#[test]
fn deterministic() {
    let (model, cluster) = small_hetero();
    let p = problem(&model, &cluster, 8, 1024);
    let a = Mist::default().plan(&p, &mut Search::unbounded()).unwrap();
    let b = Mist::default().plan(&p, &mut Search::unbounded()).unwrap();
    assert_eq!(
        serde_json::to_string(&a.plan).unwrap(),
        serde_json::to_string(&b.plan).unwrap()
    );
    assert_eq!(a.notes, b.notes);
    assert_eq!(a.explored, b.explored);
}

#[test]
fn heterogeneous_stages_use_one_gpu_type_and_fit_it() {
    // 2 V100-16GB + 2 T4-16GB, and a model that needs memory optimisation on them.
    let cluster = shared::small_cluster();
    let mut cfg = TransformerConfig::gpt("hetero-gpt", 16, 2048, 16, 2048);
    cfg.attn_impl = AttnImpl::Torch;
    let model = cfg.build();
    let p = problem(&model, &cluster, 16, 2048);
    let o = Mist::default().plan(&p, &mut Search::unbounded()).unwrap();
    check_plan(&o, &cluster);
    for st in &o.plan.stages {
        let t = cluster.gpu_type_of(st.devices[0]);
        assert!(st.devices.iter().all(|g| cluster.gpu_type_of(*g) == t));
    }
    for g in &o.estimate.per_gpu {
        assert!(g.peak_memory_bytes <= g.capacity_bytes, "{g:?}");
    }
}

fn check_plan(o: &Outcome, cluster: &Cluster) {
    assert!(o.estimate.fits, "{:?}", o.estimate.notes);
    assert!(!o.ranked.is_empty());
    assert!(o
        .ranked
        .windows(2)
        .all(|w| w[0].planner_cost_s <= w[1].planner_cost_s));
    for st in &o.plan.stages {
        for r in 0..st.dp as usize {
            let rep = st.replica(r);
            assert!(rep.iter().all(|g| g.node == rep[0].node), "TP across nodes");
        }
    }
    assert!(o.plan.devices().len() <= cluster.num_gpus());
}

/// Mist's space on a 2-GPU node, written out plainly: every stage count (1 or 2), every device
/// set (one GPU or both), every layer split, micro-batch count, TP degree, ZeRO level (with
/// data parallelism), number of checkpointed layers and offload ratio in {0, 1}; each plan
/// costed with hetplan's estimate.
fn brute_force_mist_space(p: &Problem<'_>) -> f64 {
    let g0 = GpuId { node: 0, local: 0 };
    let g1 = GpuId { node: 0, local: 1 };
    let layers = p.model.layers.len();
    let mut best = f64::INFINITY;
    let ratios = [0.0, 1.0];
    let mut offloads = Vec::new();
    for w in ratios {
        for g in ratios {
            for o in ratios {
                for a in ratios {
                    offloads.push(Offload {
                        weights: w,
                        gradients: g,
                        optimizer: o,
                        activations: a,
                    });
                }
            }
        }
    }
    // Every stage configuration of a stage with `l` layers on `devs`, for m micro-batches.
    let stage_options = |range: LayerRange, devs: &[GpuId], m: u64| -> Vec<StageChoice> {
        let mut out = Vec::new();
        let n = devs.len() as u32;
        for tp in 1..=n {
            if !n.is_multiple_of(tp) {
                continue;
            }
            let dp = n / tp;
            let per = p.global_batch / m;
            if !per.is_multiple_of(dp as u64) {
                continue;
            }
            let zeros = if dp > 1 { 0..=3 } else { 0..=0 };
            for zero in zeros {
                for c in 0..=range.len() {
                    let recompute = match c {
                        0 => Recompute::None,
                        c if c == range.len() => Recompute::Full,
                        c => Recompute::Layers(c as u32),
                    };
                    for off in &offloads {
                        out.push(StageChoice {
                            layers: range,
                            devices: devs.to_vec(),
                            tp,
                            micro_batch_sizes: vec![per / dp as u64; dp as usize],
                            zero,
                            recompute,
                            offload: *off,
                        });
                    }
                }
            }
        }
        out
    };
    for m in common::divisors(p.global_batch) {
        let whole = LayerRange {
            start: 0,
            end: layers,
        };
        for devs in [vec![g0], vec![g0, g1]] {
            for st in stage_options(whole, &devs, m) {
                let plan = common::make_plan(p, vec![st], m);
                if let Some(e) = common::evaluate(p, &plan) {
                    if e.fits {
                        best = best.min(e.iteration_time_s);
                    }
                }
            }
        }
        for cut in 1..layers {
            let a = LayerRange { start: 0, end: cut };
            let b = LayerRange {
                start: cut,
                end: layers,
            };
            for (da, db) in [(g0, g1), (g1, g0)] {
                let sa = stage_options(a, &[da], m);
                let sb = stage_options(b, &[db], m);
                for x in &sa {
                    for y in &sb {
                        let plan = common::make_plan(p, vec![x.clone(), y.clone()], m);
                        if let Some(e) = common::evaluate(p, &plan) {
                            if e.fits {
                                best = best.min(e.iteration_time_s);
                            }
                        }
                    }
                }
            }
        }
    }
    best
}

#[test]
fn no_plan_beats_brute_force_over_mists_space() {
    // Two V100s whose memory is cut to 2 GiB, so that ZeRO, checkpointing and offloading
    // matter; a 2-block GPT (4 layers with the embedding and the head).
    let cluster = parse_cluster_toml(
        r#"
name = "two-small"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 2
nodes = 1
[gpu_overrides."v100-sxm2-16gb"]
memory = "2 GiB"
"#,
    )
    .unwrap();
    let mut cfg = TransformerConfig::gpt("tiny", 2, 1024, 16, 1024);
    cfg.vocab = 32000;
    let model = cfg.build();
    let p = problem(&model, &cluster, 4, 1024);
    let mut mist = Mist::default();
    mist.space.offload_steps = 1;
    let o = mist.plan(&p, &mut Search::unbounded()).unwrap();
    let bf = brute_force_mist_space(&p);
    assert!(bf.is_finite());
    let got = o.estimate.iteration_time_s;
    eprintln!(
        "brute force over Mist's space {bf:.4} s, Mist {got:.4} s: {}",
        o.plan.summary()
    );
    assert!(
        got >= bf * (1.0 - 1e-9),
        "Mist {got} beats brute force {bf}"
    );
    // Mist's own model ranks; hetplan judges: it should land close to the optimum.
    assert!(
        got <= bf * 1.5,
        "Mist {got} vs the optimum {bf}: {}",
        o.plan.summary()
    );
}

#[test]
fn infeasible_and_bad_inputs_are_errors() {
    // GPUs of 1 GiB: the CUDA context alone takes it, so nothing fits even with everything
    // sharded, recomputed and offloaded (host memory is not bounded).
    let tiny = parse_cluster_toml(
        r#"
name = "tiny-gpus"
[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
[gpu_overrides."t4"]
memory = "1 GiB"
"#,
    )
    .unwrap();
    let model = shared::small_model();
    let p = problem(&model, &tiny, 8, 1024);
    match Mist::default().plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(m)) => {
            assert!(
                m.contains("fits in memory") && m.contains("Mist searched"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let cluster = shared::small_cluster();
    let model = shared::small_model();
    let zero_batch = problem(&model, &cluster, 0, 1024);
    assert!(matches!(
        Mist::default().plan(&zero_batch, &mut Search::unbounded()),
        Err(PlannerError::Infeasible(_))
    ));
    let bad_seq = problem(&model, &cluster, 8, 0);
    assert!(matches!(
        Mist::default().plan(&bad_seq, &mut Search::unbounded()),
        Err(PlannerError::Infeasible(_))
    ));
    let mut opts = problem(&model, &cluster, 8, 1024);
    opts.options.max_micro_batch = 0;
    assert!(matches!(
        Mist::default().plan(&opts, &mut Search::unbounded()),
        Err(PlannerError::Infeasible(_))
    ));
    // A node limit stops the search cleanly.
    let p = problem(&model, &cluster, 8, 1024);
    let mut s = Search::new(
        Limits {
            max_nodes: Some(3),
            time: None,
        },
        &NoClock,
        &NoProgress,
    );
    match Mist::default().plan(&p, &mut s) {
        Err(PlannerError::Stopped(StopReason::NodeLimit)) => {}
        Ok(o) => assert_eq!(o.stop_reason, StopReason::NodeLimit),
        other => panic!("{other:?}"),
    }
}

/// A clock that advances one second every time it is read.
struct SteppingClock(std::sync::Mutex<f64>);

impl hetplan::planners::Clock for SteppingClock {
    fn elapsed(&self) -> hetplan::units::Seconds {
        let mut t = self.0.lock().unwrap();
        *t += 1.0;
        hetplan::units::Seconds(*t)
    }
}

/// Mist stops at its time limit although each MILP is uninterruptible (issue 9: it overran
/// `--time-limit` 3.3× at 256 GPUs, 7× on llama3-70b on 8 T4s): the clock is read before every
/// MILP, not every 256 ticks, and each MILP gets only the time left.
#[test]
fn the_time_limit_is_checked_before_every_milp() {
    let s = scenario("mist-l4-16-gpt3").unwrap();
    let p = problem(&s.model, &s.cluster, s.global_batch, s.seq_len);
    let clock = SteppingClock(std::sync::Mutex::new(0.0));
    let limits = Limits {
        max_nodes: None,
        time: Some(hetplan::units::Seconds(6.0)),
    };
    let mut search = Search::new(limits, &clock, &NoProgress);
    let stop = match Mist::default().plan(&p, &mut search) {
        Ok(o) => o.stop_reason,
        Err(PlannerError::Stopped(r)) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(stop, StopReason::TimeLimit);
    // Two clock reads per MILP (is there time? how much?): a handful of reads, not hundreds.
    assert!(
        *clock.0.lock().unwrap() <= 12.0,
        "the clock was read {} times",
        *clock.0.lock().unwrap()
    );
}
