//! The baselines: Megatron's heuristics (AMP §4.1), Alpa over an averaged GPU (Metis §3) and
//! plain data parallelism with the lowest ZeRO stage that fits.

mod shared;
use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::validate::validate;
use hetplan::plan::Recompute;
use hetplan::planners::baselines::{averaged_cluster, AlpaAverage, DataParallel, Megatron};
use hetplan::planners::{
    self, oracle::Oracle, Limits, NoClock, NoProgress, Outcome, PlanOptions, Planner, PlannerError,
    Problem, Search, StopReason,
};
use hetplan::scenario::{scenario, Scenario};
use hetplan::{Cluster, Model};
use shared::{small_cluster, small_model};

fn problem<'a>(model: &'a Model, cluster: &'a Cluster, gbs: u64, seq: u64) -> Problem<'a> {
    Problem {
        model,
        cluster,
        global_batch: gbs,
        seq_len: seq,
        compute: &Analytic,
        options: PlanOptions::default(),
    }
}

fn scenario_problem(s: &Scenario) -> Problem<'_> {
    problem(&s.model, &s.cluster, s.global_batch, s.seq_len)
}

fn baselines() -> Vec<Box<dyn Planner>> {
    vec![
        Box::new(Megatron),
        Box::new(AlpaAverage),
        Box::new(DataParallel),
    ]
}

/// A returned plan is complete and valid, its estimate is hetplan's for the real cluster.
fn check(name: &str, p: &Problem<'_>, o: &Outcome) {
    validate(&o.plan, p.model, p.cluster).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(o.plan.global_batch, p.global_batch, "{name}");
    assert_eq!(
        o.plan.devices().len(),
        p.cluster.num_gpus(),
        "{name}: uses every GPU"
    );
    let again = planners::common::evaluate(p, &o.plan).unwrap();
    assert_eq!(
        again.iteration_time_s, o.estimate.iteration_time_s,
        "{name}"
    );
    assert!(o.estimate.fits, "{name}: {:?}", o.notes);
    assert!(o.explored > 0, "{name}");
}

#[test]
fn names_are_the_cli_names() {
    let names: Vec<&str> = baselines().iter().map(|p| p.name()).collect();
    assert_eq!(names, vec!["megatron", "alpa", "dp"]);
    for p in baselines() {
        assert!(!p.description().is_empty());
    }
}

#[test]
fn no_baseline_beats_the_oracle_and_each_is_deterministic() {
    let (m, c) = (small_model(), small_cluster());
    let p = problem(&m, &c, 8, 1024);
    let best = Oracle.plan(&p, &mut Search::unbounded()).unwrap();
    for planner in baselines() {
        let o = planner.plan(&p, &mut Search::unbounded()).unwrap();
        check(planner.name(), &p, &o);
        assert!(
            o.estimate.iteration_time_s >= best.estimate.iteration_time_s * (1.0 - 1e-9),
            "{} beat the oracle: {} < {}",
            planner.name(),
            o.estimate.iteration_time_s,
            best.estimate.iteration_time_s
        );
        let again = planner.plan(&p, &mut Search::unbounded()).unwrap();
        assert_eq!(o.plan, again.plan, "{}", planner.name());
        assert_eq!(o.explored, again.explored, "{}", planner.name());
        assert_eq!(o.stop_reason, StopReason::Exhausted);
    }
}

#[test]
fn baselines_plan_the_papers_scenarios() {
    for name in [
        "amp-hetero-cluster",
        "poplar-cluster-b",
        "metis-p100-t4-4-gpt3",
    ] {
        let s = scenario(name).unwrap();
        let p = scenario_problem(&s);
        for planner in baselines() {
            match planner.plan(&p, &mut Search::unbounded()) {
                Ok(o) => check(&format!("{name}/{}", planner.name()), &p, &o),
                Err(PlannerError::Infeasible(why)) => {
                    assert!(why.len() > 30, "{name}/{}: {why}", planner.name())
                }
                Err(e) => panic!("{name}/{}: {e}", planner.name()),
            }
        }
    }
}

#[test]
fn megatron_takes_the_smallest_tp_times_pp_that_fits() {
    // AMP §4.5: the model fits one GPU, so Megatron proposes dp = 16 on the heterogeneous
    // cluster for the micro-batch sizes that divide 32 / 16; larger micro-batches need fewer
    // replicas, and then the smallest tp·pp is 2. In fp16, as AMP ran it (the scenario's
    // assumptions): in BF16 Megatron's FP32 gradients double the all-reduce over 10 Gbps and
    // pure data parallelism leaves the ten best.
    let s = scenario("amp-hetero-cluster").unwrap();
    let mut p = scenario_problem(&s);
    p.options.precision = hetplan::plan::Precision::Fp16;
    let o = Megatron.plan(&p, &mut Search::unbounded()).unwrap();
    check("megatron", &p, &o);
    assert!(!o.ranked.is_empty() && o.ranked.len() <= 10);
    assert!(o
        .ranked
        .windows(2)
        .all(|w| w[0].planner_cost_s <= w[1].planner_cost_s));
    assert!(o.ranked.iter().all(|r| r.fits));
    let shape = |r: &planners::Ranked| {
        let st = &r.plan.stages[0];
        (
            st.tp,
            r.plan.stages.len() as u32,
            st.dp,
            st.micro_batch_sizes[0],
        )
    };
    let proposals: Vec<_> = o.ranked.iter().map(shape).collect();
    for (tp, pp, dp, mbs) in &proposals {
        assert!(tp * pp == 1 || *dp as u64 * mbs > 2, "{proposals:?}");
    }
    assert!(proposals.contains(&(1, 1, 16, 1)), "{proposals:?}");
    assert!(proposals.contains(&(1, 1, 16, 2)), "{proposals:?}");
    assert_eq!(o.estimate.iteration_time_s, o.ranked[0].estimate_s);

    // A model that needs 16 GB of states per copy cannot be pure DP on 16 GB GPUs: tp·pp > 1,
    // and tp never leaves the smallest node.
    let m = catalog_model("gpt3-1.3b").unwrap();
    let p = problem(&m, &s.cluster, 32, 1024);
    let o = Megatron.plan(&p, &mut Search::unbounded()).unwrap();
    check("megatron/1.3b", &p, &o);
    let st = &o.plan.stages[0];
    assert!(st.tp as usize * o.plan.stages.len() > 1);
    assert!(st.tp <= 4);
    // Every stage has the same shape and an even share of the blocks.
    assert!(o.plan.stages.iter().all(|x| x.tp == st.tp && x.dp == st.dp));
}

#[test]
fn alpa_plans_on_the_average_and_is_costed_on_the_real_cluster() {
    let s = scenario("metis-t4-v100-8-gpt3").unwrap();
    let p = scenario_problem(&s);
    let o = AlpaAverage.plan(&p, &mut Search::unbounded()).unwrap();
    check("alpa", &p, &o);
    // Uniform: every stage the same (dp, tp) and micro-batch size.
    let st = &o.plan.stages[0];
    assert!(o
        .plan
        .stages
        .iter()
        .all(|x| x.tp == st.tp && x.dp == st.dp && x.micro_batch_sizes == st.micro_batch_sizes));
    // The ranked list carries the averaged-GPU prediction and the real estimate.
    assert!(!o.ranked.is_empty());
    assert!(o.ranked.iter().any(|r| r.planner_cost_s != r.estimate_s));
    assert!(o.notes[0].contains("average("), "{:?}", o.notes);
    // On a homogeneous cluster the abstraction is the cluster itself.
    let h = scenario("amp-homogeneous-t4").unwrap();
    assert_eq!(averaged_cluster(&h.cluster), h.cluster);
}

#[test]
fn data_parallel_takes_the_lowest_zero_stage_that_fits() {
    // GPT-3 1.3B on 8 V100-16GB: 16 bytes of states per parameter (20.8 GB) do not fit a
    // replica, ZeRO-1 shards the 12 bytes of optimizer state over 8 GPUs and fits.
    let c = parse_cluster_toml(
        "name = \"v\"\n[[node_group]]\ngpu = \"v100-sxm2-16gb\"\ngpus_per_node = 8\nnodes = 1\n",
    )
    .unwrap();
    let m = catalog_model("gpt3-1.3b").unwrap();
    let p = problem(&m, &c, 64, 1024);
    let o = DataParallel.plan(&p, &mut Search::unbounded()).unwrap();
    check("dp", &p, &o);
    let st = &o.plan.stages[0];
    assert_eq!(st.zero, 1, "{:?}", o.notes);
    assert_eq!(st.recompute, Recompute::None);
    assert_eq!((st.dp, st.tp, o.plan.stages.len()), (8, 1, 1));
    // ZeRO-0 at the same micro-batch size runs out of memory.
    let mut zero0 = o.plan.clone();
    zero0.stages[0].zero = 0;
    zero0.stages[0].micro_batch_sizes = vec![1; 8];
    zero0.micro_batches = 8;
    assert!(!planners::common::evaluate(&p, &zero0).unwrap().fits);
    // The largest micro-batch that fits: one more (a divisor of 8) would not.
    let mbs = st.micro_batch_sizes[0];
    if mbs < 8 {
        let mut bigger = o.plan.clone();
        bigger.stages[0].micro_batch_sizes = vec![mbs * 2; 8];
        bigger.micro_batches = 64 / (8 * mbs * 2);
        assert!(!planners::common::evaluate(&p, &bigger).unwrap().fits);
    }
    assert!(
        o.notes.iter().any(|n| n.contains("ZeRO-1")),
        "{:?}",
        o.notes
    );

    // A small model needs no ZeRO at all.
    let (m, c) = (small_model(), small_cluster());
    let p = problem(&m, &c, 8, 1024);
    let o = DataParallel.plan(&p, &mut Search::unbounded()).unwrap();
    assert_eq!(o.plan.stages[0].zero, 0);
}

#[test]
fn infeasible_problems_say_why() {
    // 175B parameters on 4 GPUs of 16 GB: nothing fits, even ZeRO-3 with checkpointing.
    let m = catalog_model("gpt3-175b").unwrap();
    let c = small_cluster();
    let p = problem(&m, &c, 8, 2048);
    match DataParallel.plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(why)) => {
            assert!(
                why.contains("even ZeRO-3 with full activation checkpointing"),
                "{why}"
            );
            assert!(why.contains("smallest GPU"), "{why}");
        }
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
    match Megatron.plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(why)) => assert!(why.contains("fits in memory"), "{why}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
    match AlpaAverage.plan(&p, &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(why)) => assert!(why.contains("averaged GPU"), "{why}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
    // A global batch that does not split over the GPUs.
    let (m, c) = (small_model(), small_cluster());
    match DataParallel.plan(&problem(&m, &c, 6, 1024), &mut Search::unbounded()) {
        Err(PlannerError::Infeasible(why)) => assert!(why.contains("multiple of 4"), "{why}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
}

#[test]
fn a_node_limit_stops_every_baseline_with_its_reason() {
    let (m, c) = (small_model(), small_cluster());
    let p = problem(&m, &c, 8, 1024);
    for planner in baselines() {
        let mut s = Search::new(
            Limits {
                max_nodes: Some(1),
                time: None,
            },
            &NoClock,
            &NoProgress,
        );
        match planner.plan(&p, &mut s) {
            Ok(o) => assert_eq!(o.stop_reason, StopReason::NodeLimit, "{}", planner.name()),
            Err(e) => assert_eq!(
                e,
                PlannerError::Stopped(StopReason::NodeLimit),
                "{}",
                planner.name()
            ),
        }
    }
}
