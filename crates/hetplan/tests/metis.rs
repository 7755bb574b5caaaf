//! The Metis planner (Um et al., USENIX ATC '24): where the released code cannot go (GPU counts
//! that are not powers of two, uneven nodes, more than 9 GPUs per node, any GPU type), the
//! paper's T4+V100 behaviour, and the exhaustive oracle as referee (Metis §5.4: "for the
//! experiments with 4 and 8 GPUs, Metis outputs the same parallel plan as Oracle").

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::model::TransformerConfig;
use hetplan::plan::Precision;
use hetplan::planners::metis::Metis;
use hetplan::planners::oracle::Oracle;
use hetplan::planners::{
    Limits, NoClock, NoProgress, Outcome, PlanOptions, Planner, PlannerError, Problem, Search,
    StopReason,
};
use hetplan::sim::{simulate, SimOptions};
use hetplan::{Cluster, Model};

/// Node groups `(gpu, gpus per node, nodes)`, in order, `bandwidth` between nodes.
fn cluster(groups: &[(&str, u32, u32)], bandwidth: &str) -> Cluster {
    let mut s = String::from("name = \"test\"\n");
    for (gpu, per, n) in groups {
        s.push_str(&format!(
            "[[node_group]]\ngpu = \"{gpu}\"\ngpus_per_node = {per}\nnodes = {n}\n\
             inter_node_bandwidth = \"{bandwidth}\"\n"
        ));
    }
    parse_cluster_toml(&s).unwrap()
}

/// tests/planners.rs's small model: 4 blocks, hidden 1024, 16 heads.
fn small_model() -> Model {
    TransformerConfig::gpt("tiny-gpt", 4, 1024, 16, 1024).build()
}

/// A GPT of `blocks` blocks, hidden `hidden` (32 heads), vocabulary `vocab`.
fn gpt(blocks: u64, hidden: u64, vocab: u64) -> Model {
    let mut c = TransformerConfig::gpt("test-gpt", blocks, hidden, 32, 1024);
    c.vocab = vocab;
    c.build()
}

fn problem<'a>(model: &'a Model, cluster: &'a Cluster, batch: u64) -> Problem<'a> {
    Problem {
        model,
        cluster,
        global_batch: batch,
        seq_len: 1024,
        compute: &Analytic,
        options: PlanOptions::default(),
    }
}

fn metis(p: &Problem<'_>) -> Outcome {
    Metis::default().plan(p, &mut Search::unbounded()).unwrap()
}

/// A plan Metis returns is complete: it fits, uses every GPU once, keeps TP inside a node, and
/// its ranked list is sorted by Metis's cost.
fn check_complete(o: &Outcome, c: &Cluster) {
    assert!(o.estimate.fits, "{:?}", o.estimate.notes);
    assert_eq!(o.stop_reason, StopReason::Exhausted);
    let mut used = o.plan.devices();
    used.sort();
    assert_eq!(used, c.gpus(), "{}", o.plan.summary());
    assert_eq!(
        o.plan.stages.iter().map(|s| s.devices.len()).sum::<usize>(),
        c.num_gpus()
    );
    for s in &o.plan.stages {
        for r in 0..s.dp as usize {
            let rep = s.replica(r);
            assert!(rep.iter().all(|g| g.node == rep[0].node), "TP across nodes");
        }
    }
    assert!(!o.ranked.is_empty());
    assert!(o
        .ranked
        .windows(2)
        .all(|w| w[0].planner_cost_s <= w[1].planner_cost_s));
    // Metis's cost of its answer is what the ranked list says.
    let p = o.ranked.iter().find(|r| r.plan == o.plan).unwrap();
    assert!(p.fits);
}

/// Metis's DetectOOM is hetplan's memory model: every plan it kept fits by the estimate.
fn check_memory_agrees(o: &Outcome) {
    for r in &o.ranked {
        assert!(
            r.fits,
            "Metis kept a plan that does not fit: {}",
            r.plan.summary()
        );
    }
}

#[test]
fn works_on_8_plus_4_gpus() {
    // 12 GPUs: not a power of two (the released code enumerates power-of-two groups only).
    let c = cluster(
        &[("a100-sxm4-40gb", 8, 1), ("v100-sxm2-16gb", 4, 1)],
        "25 Gbps",
    );
    let m = small_model();
    let o = metis(&problem(&m, &c, 24));
    check_complete(&o, &c);
    check_memory_agrees(&o);
}

#[test]
fn works_on_uneven_nodes() {
    // Nodes of 4, 2 and 2 GPUs (the released code assumes every node has node 0's count).
    let c = cluster(&[("v100-sxm2-16gb", 4, 1), ("t4", 2, 2)], "25 Gbps");
    let m = small_model();
    let o = metis(&problem(&m, &c, 16));
    check_complete(&o, &c);
    check_memory_agrees(&o);
}

#[test]
fn works_on_a_16_gpu_node() {
    // More than 9 GPUs per node (the released hostfile parser reads one digit).
    let c = cluster(&[("a100-sxm4-40gb", 16, 1)], "25 Gbps");
    let m = small_model();
    let o = metis(&problem(&m, &c, 32));
    check_complete(&o, &c);
}

#[test]
fn works_on_three_gpu_types() {
    let c = cluster(
        &[
            ("a100-sxm4-40gb", 4, 1),
            ("v100-sxm2-16gb", 4, 1),
            ("t4", 4, 1),
        ],
        "25 Gbps",
    );
    let m = small_model();
    let o = metis(&problem(&m, &c, 24));
    check_complete(&o, &c);
    check_memory_agrees(&o);
}

#[test]
fn heterogeneous_stages_split_the_micro_batch_by_capacity() {
    // Two A100 and two T4 on a fast network, a small model: the best plan is one stage over all
    // four GPUs, and its replicas' micro-batches follow their throughput (Metis §4.1's
    // Σ mbsᵢ = bs with per-GPU sizes), the A100s taking most of the samples. In fp16: in
    // BF16 Megatron reduces FP32 gradients, and two stages of two replicas win instead.
    let c = cluster(&[("a100-sxm4-40gb", 2, 1), ("t4", 2, 1)], "100 Gbps");
    let m = gpt(2, 1024, 2048);
    let mut p = problem(&m, &c, 32);
    p.options.precision = hetplan::plan::Precision::Fp16;
    let o = metis(&p);
    check_complete(&o, &c);
    let mixed = o
        .ranked
        .iter()
        .flat_map(|r| r.plan.stages.iter())
        .find(|s| {
            let names: Vec<&str> = s.devices.iter().map(|g| c.gpu(*g).name.as_str()).collect();
            names.contains(&"t4") && names.iter().any(|n| n.starts_with("a100"))
        })
        .expect("a stage over both GPU types among the kept plans");
    for r in 0..mixed.dp as usize {
        for q in 0..mixed.dp as usize {
            let fast = |x: usize| c.gpu(mixed.replica(x)[0]).name.starts_with("a100");
            if fast(r) && !fast(q) {
                assert!(
                    mixed.micro_batch_sizes[r] > mixed.micro_batch_sizes[q],
                    "{:?}",
                    mixed.micro_batch_sizes
                );
            }
        }
    }
    assert!(mixed.micro_batch_sizes.iter().all(|&m| m >= 1));
}

/// Metis §5.2.1: "in T4 + V100 16 GPU experiment of GPT-3 (Fig. 4 (a)) ... Metis partitions
/// layers into four stages where 36% of the total layers are assigned to two stages mapped to
/// slower T4 device groups". The cluster is Table 3's 16-GPU column: 2 nodes × 4 V100 and
/// 2 nodes × 4 T4, 16 Gbps between nodes (§5.1); the model Table 2's 16-GPU GPT-3, 6.7B; FP16
/// as Alpa runs it. The global batch is not stated in the paper; 128 is the released code's
/// example.
#[test]
fn on_t4_v100_the_v100_stages_get_more_layers() {
    let c = cluster(&[("v100-sxm2-16gb", 4, 2), ("t4", 4, 2)], "16 Gbps");
    let m = catalog_model("metis-gpt3-6.7b").unwrap();
    let mut p = problem(&m, &c, 128);
    p.options.precision = Precision::Fp16;
    let o = metis(&p);
    check_complete(&o, &c);
    check_memory_agrees(&o);
    let (mut t4, mut v100) = (0usize, 0usize);
    for s in &o.plan.stages {
        let n_t4 = s.devices.iter().filter(|g| c.gpu(**g).name == "t4").count();
        // Stages are counted by their GPUs: a mixed stage's layers are shared pro rata.
        let share = n_t4 as f64 / s.devices.len() as f64;
        t4 += (s.layers.len() as f64 * share).round() as usize;
        v100 += s.layers.len() - (s.layers.len() as f64 * share).round() as usize;
    }
    let t4_share = t4 as f64 / (t4 + v100) as f64;
    assert!(
        t4_share < 0.45 && v100 > t4,
        "T4 stages hold {t4} of {} layers: {}",
        t4 + v100,
        o.plan.summary()
    );
}

/// The 4-GPU case of tests/planners.rs's shape (a V100 node of 2, a T4 node of 2), with a
/// GPT whose blocks dominate: Metis returns the oracle's plan. The best plan puts the first and
/// last stages (which share the tied embedding) on the V100 node and the middle ones on the T4s
/// — the ring-closing placement.
#[test]
fn equals_the_oracle_on_4_gpus() {
    let c = cluster(&[("v100-sxm2-16gb", 2, 1), ("t4", 2, 1)], "25 Gbps");
    let m = gpt(4, 2048, 51200);
    let p = problem(&m, &c, 16);
    let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
    let o = metis(&p);
    check_complete(&o, &c);
    let (a, b) = (o.estimate.iteration_time_s, best.estimate.iteration_time_s);
    assert!((a - b).abs() <= 1e-9 * b, "metis {a} vs oracle {b}");
}

/// 8 GPUs: a V100 node of 4 and a T4 node of 4. With TP allowed, the oracle's best is TP = 2
/// in every stage with 4 micro-batches of one sample; Metis reaches it because a DP degree that
/// cannot split the micro-batch escalates TP (as the released code's strategy generator does)
/// instead of ending the path. Same iteration time (the plans may mirror each other).
#[test]
fn equals_the_oracle_on_8_gpus() {
    let c = cluster(&[("v100-sxm2-16gb", 4, 1), ("t4", 4, 1)], "25 Gbps");
    let m = gpt(2, 4096, 8192);
    for max_tp in [1, 2, 4] {
        let mut p = problem(&m, &c, 4);
        p.options.max_tp = max_tp;
        let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
        let o = metis(&p);
        check_complete(&o, &c);
        let (a, b) = (o.estimate.iteration_time_s, best.estimate.iteration_time_s);
        assert!(
            (a - b).abs() <= 1e-9 * b,
            "max_tp {max_tp}: metis {a} ({}) vs oracle {b} ({})",
            o.plan.summary(),
            best.plan.summary()
        );
    }
}

/// Where Metis and the oracle differ on 4 GPUs, it is the cost model, not the pruning: Metis
/// ranks by Eq. 1 (no optimizer step, no overlap of the gradient all-reduce), the oracle by
/// hetplan's estimate. Metis's own cost of the oracle's plan is higher than that of the plan
/// Metis picked, and the loss by hetplan's estimate stays within 5%.
#[test]
fn differs_from_the_oracle_only_where_eq1_disagrees() {
    let c = cluster(&[("v100-sxm2-16gb", 2, 1), ("t4", 2, 1)], "25 Gbps");
    let m = gpt(2, 4096, 51200);
    let p = problem(&m, &c, 16);
    let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
    let o = metis(&p);
    let mine = o.ranked[0].planner_cost_s;
    let theirs = Metis::cost(&p, &best.plan).expect("the oracle's plan is in Metis's space");
    assert!(
        mine <= theirs * (1.0 + 1e-12),
        "Eq. 1: metis {mine} vs oracle's plan {theirs}"
    );
    let (a, b) = (o.estimate.iteration_time_s, best.estimate.iteration_time_s);
    assert!(
        a >= b * (1.0 - 1e-9) && a <= b * 1.05,
        "metis {a} vs oracle {b}"
    );
}

/// The oracle may put TP groups across nodes (here TP = 3 over a V100 and two T4s for the
/// head); Metis keeps TP inside a node (§4.2.1: "TP typically occurs within a single node"),
/// so such plans are outside its space and `Metis::cost` does not price them.
#[test]
fn cross_node_tp_is_outside_metis_space() {
    let c = cluster(&[("v100-sxm2-16gb", 2, 1), ("t4", 2, 1)], "25 Gbps");
    let m = gpt(4, 1024, 51200);
    let p = problem(&m, &c, 8);
    let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
    let crosses = best.plan.stages.iter().any(|s| {
        (0..s.dp as usize).any(|r| {
            let rep = s.replica(r);
            rep.iter().any(|g| g.node != rep[0].node)
        })
    });
    assert!(crosses, "{}", best.plan.summary());
    assert_eq!(Metis::cost(&p, &best.plan), None);
    let o = metis(&p);
    assert!(o.estimate.iteration_time_s >= best.estimate.iteration_time_s * (1.0 - 1e-9));
}

#[test]
fn never_beats_the_oracle() {
    let shapes: Vec<(Cluster, Model, u64)> = vec![
        (
            cluster(&[("v100-sxm2-16gb", 2, 1), ("t4", 2, 1)], "25 Gbps"),
            small_model(),
            8,
        ),
        (
            cluster(&[("a100-sxm4-40gb", 2, 1), ("t4", 2, 1)], "100 Gbps"),
            gpt(2, 2048, 8192),
            8,
        ),
        (
            cluster(&[("v100-sxm2-16gb", 4, 1)], "25 Gbps"),
            gpt(2, 2048, 8192),
            8,
        ),
    ];
    for (c, m, batch) in &shapes {
        let p = problem(m, c, *batch);
        let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
        let o = metis(&p);
        assert!(
            o.estimate.iteration_time_s >= best.estimate.iteration_time_s * (1.0 - 1e-9),
            "Metis beat the oracle: {} < {}",
            o.estimate.iteration_time_s,
            best.estimate.iteration_time_s
        );
    }
}

#[test]
fn is_deterministic() {
    let c = cluster(
        &[
            ("a100-sxm4-40gb", 4, 1),
            ("v100-sxm2-16gb", 4, 1),
            ("t4", 4, 1),
        ],
        "25 Gbps",
    );
    let m = small_model();
    let p = problem(&m, &c, 24);
    let a = metis(&p);
    let b = metis(&p);
    assert_eq!(a.plan, b.plan);
    assert_eq!(a.explored, b.explored);
    let ra: Vec<_> = a
        .ranked
        .iter()
        .map(|r| (&r.plan, r.planner_cost_s))
        .collect();
    let rb: Vec<_> = b
        .ranked
        .iter()
        .map(|r| (&r.plan, r.planner_cost_s))
        .collect();
    assert_eq!(ra, rb);
}

#[test]
fn a_node_limit_stops_it_with_its_reason() {
    let c = cluster(&[("v100-sxm2-16gb", 4, 1), ("t4", 2, 2)], "25 Gbps");
    let m = small_model();
    let p = problem(&m, &c, 16);
    for limit in [1, 50, 500] {
        let mut s = Search::new(
            Limits {
                max_nodes: Some(limit),
                time: None,
            },
            &NoClock,
            &NoProgress,
        );
        match Metis::default().plan(&p, &mut s) {
            Ok(o) => {
                assert_eq!(o.stop_reason, StopReason::NodeLimit);
                assert!(o.explored <= limit + 1);
                assert!(o.estimate.fits);
            }
            Err(e) => assert_eq!(e, PlannerError::Stopped(StopReason::NodeLimit)),
        }
    }
}

#[test]
fn an_impossible_problem_is_infeasible_with_a_reason() {
    // GPT-3 175B on four T4: nothing fits without ZeRO or offloading.
    let c = cluster(&[("t4", 4, 1)], "25 Gbps");
    let m = catalog_model("gpt3-175b").unwrap();
    let p = problem(&m, &c, 8);
    match Metis::default().plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(msg)) => assert!(msg.contains("fit"), "{msg}"),
        other => panic!(
            "expected infeasible, got {:?}",
            other.map(|o| o.plan.summary())
        ),
    }
}

#[test]
fn eq1_follows_the_simulation_on_its_plans() {
    // Eq. 1 uses hetplan's per-layer times and collectives; on this compute-bound problem it
    // follows the simulated step within 10% for the plans Metis keeps. hetplan's estimate
    // follows it within a few percent on them: the six-stage plan whose first and last stages
    // share a node, 17% slow when every send on a network was taken to meet the others, is now
    // +4.4% (`SendTiming`); the one with a 4-way TP stage on the T4 node was 20% slow while the
    // estimate charged each of the tied embedding's four shard pairs the whole embedding.
    let c = cluster(&[("v100-sxm2-16gb", 4, 1), ("t4", 4, 1)], "25 Gbps");
    let m = gpt(4, 2048, 8192);
    let p = problem(&m, &c, 32);
    let o = metis(&p);
    let w = Workload {
        model: &m,
        cluster: &c,
        seq_len: p.seq_len,
    };
    let mut checked = 0;
    for r in o.ranked.iter().take(20) {
        let sim = simulate(
            w,
            &w.validate(&r.plan).unwrap(),
            &Analytic,
            &SimOptions::default(),
        )
        .unwrap()
        .iteration_time_s;
        let rel = (r.planner_cost_s - sim).abs() / sim;
        assert!(
            rel < 0.10,
            "{} Eq. 1 {} vs simulation {sim}",
            r.plan.summary(),
            r.planner_cost_s,
        );
        let est = estimate(w, &w.validate(&r.plan).unwrap(), &Analytic).iteration_time_s;
        assert!(
            ((est - sim) / sim).abs() < 0.10,
            "{} hetplan's estimate {est} vs simulation {sim}",
            r.plan.summary()
        );
        let again = Metis::cost(&p, &r.plan).unwrap();
        assert!((again - r.planner_cost_s).abs() <= 1e-9 * again);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} plans ranked");
}
