//! The simulator against hand-worked schedules, against the estimate where the formula is exact,
//! and its properties (issue 3).

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::model::layerlist::parse_layer_list;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::validate;
use hetplan::sim::{simulate, Label, Pass, SimError, SimOptions};
use hetplan::{Cluster, Model, Plan};

mod sim_cases;

/// Identical opaque layers of 1 TFLOP per sample and no boundary bytes: one layer's forward on an
/// A100 is 1e12 / (312e12 · 0.75) + 4 µs.
fn layers(n: usize, output: &str) -> Model {
    parse_layer_list(
        &format!(
            r#"
name = "uniform"
[[layer]]
name = "l"
count = {n}
params = 1000
forward_flops = 1e12
activation_bytes = "1 MiB"
output_bytes = "{output}"
"#
        ),
        false,
    )
    .unwrap()
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    let p = parse_inline_plan(spec, model, cluster).unwrap();
    validate(&p, model, cluster).unwrap();
    p
}

fn no_interference() -> SimOptions {
    SimOptions {
        interference: false,
        ..SimOptions::default()
    }
}

const F: f64 = 1e12 / (312e12 * 0.75) + 4e-6;

/// Two stages of one layer, four micro-batches, 1F1B, free sends: worked by hand with f = F,
/// b = 2F (see the comment in the body), then each stage's optimizer step.
#[test]
fn two_stages_four_micro_batches_by_hand() {
    let model = layers(2, "0 B");
    let cluster = catalog_cluster("1x2xa100-80gb").unwrap();
    let p = plan("pp=2,dp=1,mbs=1,gbs=4", &model, &cluster);
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 1,
    };
    let s = simulate(w, &w.validate(&p).unwrap(), &Analytic, &no_interference()).unwrap();
    // In units of F:
    // stage 0: F0 [0,1] F1 [1,2] B0 [4,6] F2 [6,7] B1 [7,9] F3 [9,10] B2 [10,12] B3 [13,15]
    // stage 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] F2 [7,8] B2 [8,10] F3 [10,11] B3 [11,13]
    let at = |stage: usize, mb: u64, pass: Pass| {
        s.spans
            .iter()
            .find(|sp| {
                matches!(sp.label, Label::Compute { stage: st, mb: m, pass: ps, .. }
                    if st == stage && m == mb && ps == pass)
            })
            .map(|sp| (sp.start_s / F, sp.end_s / F))
            .unwrap()
    };
    let close = |got: (f64, f64), want: (f64, f64)| {
        assert!(
            (got.0 - want.0).abs() < 1e-9 && (got.1 - want.1).abs() < 1e-9,
            "{got:?} vs {want:?}"
        )
    };
    close(at(0, 0, Pass::Forward), (0.0, 1.0));
    close(at(1, 0, Pass::Forward), (1.0, 2.0));
    close(at(1, 0, Pass::Backward), (2.0, 4.0));
    close(at(0, 0, Pass::Backward), (4.0, 6.0));
    close(at(0, 2, Pass::Forward), (6.0, 7.0));
    close(at(1, 3, Pass::Backward), (11.0, 13.0));
    close(at(0, 3, Pass::Backward), (13.0, 15.0));
    // Adam over 1000 parameters: 30 kB at 2039 GB/s · 0.8.
    let opt = 1000.0 * 30.0 / (2039e9 * 0.8);
    assert!((s.iteration_time_s - (15.0 * F + opt)).abs() < 1e-12);
    // The same iteration from the formula.
    let e = estimate(w, &w.validate(&p).unwrap(), &Analytic);
    assert!((e.iteration_time_s - s.iteration_time_s).abs() / e.iteration_time_s < 1e-9);
}

/// Uniform homogeneous stages, no overlap, no contention: estimate and simulation agree within 1%.
#[test]
fn agrees_with_the_estimate_where_the_formula_is_exact() {
    let model = layers(8, "1 MiB");
    let cluster = catalog_cluster("1x4xa100-80gb").unwrap();
    for spec in [
        "pp=4,dp=1,mbs=1,gbs=8",
        "pp=4,dp=1,mbs=2,gbs=32",
        "pp=2,dp=1,mbs=1,gbs=16,schedule=gpipe",
        "pp=2,dp=1,mbs=1,gbs=8,schedule=interleaved,v=2",
    ] {
        let p = plan(spec, &model, &cluster);
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 1,
        };
        let v = w.validate(&p).unwrap();
        let s = simulate(w, &v, &Analytic, &no_interference()).unwrap();
        let e = estimate(w, &v, &Analytic);
        let diff = (s.iteration_time_s - e.iteration_time_s).abs() / e.iteration_time_s;
        assert!(
            diff < 0.01,
            "{spec}: simulate {} estimate {}",
            s.iteration_time_s,
            e.iteration_time_s
        );
    }
}

/// Simulated time is never below the compute lower bound: the busiest GPU's own work.
#[test]
fn never_below_the_compute_bound() {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster("t4-v100").unwrap();
    for spec in [
        "pp=2,dp=5,mbs=1,gbs=20",
        "tp=2,pp=1,dp=5,mbs=2,gbs=40,zero=3",
        "pp=5,dp=2,mbs=1,gbs=20,ckpt=full",
    ] {
        let p = plan(spec, &model, &cluster);
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 1024,
        };
        let s = simulate(
            w,
            &w.validate(&p).unwrap(),
            &Analytic,
            &SimOptions::default(),
        )
        .unwrap();
        for g in &s.per_gpu {
            assert!(g.busy <= 1.0 + 1e-9, "{spec}: {g:?}");
            assert!(
                (g.busy + g.comm_wait + g.idle - 1.0).abs() < 1e-9,
                "{spec}: {g:?}"
            );
        }
        assert!(s.iteration_time_s > 0.0);
    }
}

#[test]
fn identical_input_identical_output() {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster("t4-v100").unwrap();
    let p = plan("pp=2,dp=5,mbs=1,gbs=20,zero=1", &model, &cluster);
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 1024,
    };
    let v = w.validate(&p).unwrap();
    let run = || {
        serde_json::to_string(&simulate(w, &v, &Analytic, &SimOptions::default()).unwrap()).unwrap()
    };
    assert_eq!(run(), run());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Replacing a GPU type by a faster one (every rate scaled up) never makes the step slower.
        ///
        /// Exactly so where no two transfers compete for a link (data parallelism alone, one
        /// gradient stream). Where they do, fair sharing has the scheduling anomalies of any
        /// greedy list schedule (Graham 1969): a faster stage can send earlier, into another
        /// stage's transfer, and delay it — pp=2, dp=5 on t4-v100 with V100s 1.41× faster is
        /// 0.12% slower. We bound that effect at 1% (docs/validation.md).
        #[test]
        fn a_faster_gpu_never_slows_the_step(
            which in 0usize..2,
            factor in 1.0f64..4.0,
            spec in prop::sample::select(vec![
                "pp=2,dp=5,mbs=1,gbs=20",
                "pp=2,dp=5,mbs=1,gbs=20,zero=1",
                "tp=2,pp=1,dp=5,mbs=1,gbs=20,zero=3",
                "dp=10,mbs=1,gbs=20",
                "pp=5,dp=2,mbs=1,gbs=16,ckpt=full",
            ]),
        ) {
            let model = catalog_model("gpt3-350m").unwrap();
            let cluster = catalog_cluster("t4-v100").unwrap();
            let p = plan(spec, &model, &cluster);
            let run = |c: &Cluster| {
                simulate(
                    Workload { model: &model, cluster: c, seq_len: 1024 },
                    &hetplan::plan::ValidPlan::check(&p, &model, c).unwrap(),
                    &Analytic,
                    &SimOptions::default(),
                )
                .unwrap()
                .iteration_time_s
            };
            let base = run(&cluster);
            let mut fast = cluster.clone();
            let g = &mut fast.gpu_types[which];
            g.peak_tensor = g.peak_tensor * factor;
            g.peak_fp32 = g.peak_fp32 * factor;
            g.hbm_bandwidth = g.hbm_bandwidth * factor;
            let faster = run(&fast);
            let exact = !spec.contains("pp=") || spec.contains("pp=1,");
            let bound = if exact { 1e-9 } else { 0.01 };
            prop_assert!(faster <= base * (1.0 + bound), "{spec}: {faster} > {base}");
        }
    }
}

/// The simulator is a judge: it never prices communication with the estimate's formulas.
#[test]
fn the_simulator_does_not_use_the_estimates_communication_times() {
    for (file, src) in [
        ("sim/mod.rs", include_str!("../src/sim/mod.rs")),
        ("sim/build.rs", include_str!("../src/sim/build.rs")),
        ("sim/engine.rs", include_str!("../src/sim/engine.rs")),
    ] {
        for f in ["collective_time", "p2p_time"] {
            assert!(!src.contains(f), "{file} calls cost::comm::{f}");
        }
    }
}

/// The task count is known before anything is built: an upper bound on what `build` makes,
/// tight within 2×, and a plan over the limit is refused at once, however large.
#[test]
fn the_task_graph_is_bounded_before_it_is_built() {
    use hetplan::sim::build::{build, task_count};
    let mut checked = 0;
    for case in sim_cases::cases() {
        let (model, cluster, plan) = case.inputs();
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: case.seq,
        };
        let built = build(w, &plan, &Analytic).graph.tasks.len() as u64;
        let counted = task_count(&plan);
        assert!(
            built <= counted && counted <= 2 * built,
            "{}: built {built}, counted {counted}",
            case.plan_name()
        );
        checked += 1;
    }
    assert_eq!(checked, 24);
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster("1x2xa100-80gb").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 2048,
    };
    for gbs in [2_000_000u64, 100_000_000, 1_000_000_000] {
        let p = plan(&format!("pp=2,mbs=1,gbs={gbs}"), &model, &cluster);
        match simulate(
            w,
            &w.validate(&p).unwrap(),
            &Analytic,
            &SimOptions::default(),
        ) {
            Err(SimError::TooLarge { tasks, limit, .. }) => {
                assert!(tasks > limit && tasks >= 8 * gbs, "{tasks} {limit}")
            }
            other => panic!("gbs {gbs}: {:?}", other.map(|s| s.tasks)),
        }
    }
}

/// docs/validation.md §3: estimate and simulation agree within 5% on every row of the table
/// but those listed with their cause, and those stay within their bound.
#[test]
fn the_validation_table_agrees() {
    let mut checked = 0;
    for case in sim_cases::cases() {
        let row = case.run();
        let (bound, why) = case.bound();
        assert!(
            row.difference().abs() <= bound,
            "{} on {} with {}: estimate {:.4} s, simulation {:.4} s ({:+.1}%, bound {:.0}%: {why})",
            row.model,
            row.cluster,
            row.plan,
            row.estimate_s,
            row.simulate_s,
            row.difference() * 100.0,
            bound * 100.0
        );
        checked += 1;
    }
    assert_eq!(checked, 24);
}

/// Per-replica step counts (`Stage::replica_samples`, Poplar): spelling out the uniform plan
/// changes nothing; an uneven split costs the slowest replica's own micro-batches, by hand, in
/// both the estimate and the simulation; inconsistent counts are rejected with the reason.
#[test]
fn replicas_with_different_micro_batch_counts() {
    let model = layers(2, "0 B");
    let cluster = catalog_cluster("1x2xa100-80gb").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 1,
    };
    let base = plan("dp=2,mbs=2,gbs=8", &model, &cluster);
    let mut spelled = base.clone();
    spelled.stages[0].replica_samples = vec![4, 4];
    let (vb, vs) = (w.validate(&base).unwrap(), w.validate(&spelled).unwrap());
    let (eb, es) = (estimate(w, &vb, &Analytic), estimate(w, &vs, &Analytic));
    assert_eq!(eb.iteration_time_s, es.iteration_time_s);
    let sb = simulate(w, &vb, &Analytic, &no_interference()).unwrap();
    let ss = simulate(w, &vs, &Analytic, &no_interference()).unwrap();
    assert_eq!(sb.iteration_time_s, ss.iteration_time_s);

    // Replica 0: 5 samples as 2 + 2 + 1; replica 1: 3 as 2 + 1. Replica 0 is the slowest: two
    // micro-batches of 2 samples and one of 1, then the end of the iteration.
    let mut uneven = base.clone();
    uneven.stages[0].replica_samples = vec![5, 3];
    uneven.micro_batches = 3;
    let v = w.validate(&uneven).unwrap();
    let e = estimate(w, &v, &Analytic);
    let s = simulate(w, &v, &Analytic, &no_interference()).unwrap();
    let per = |mbs: u64| {
        let mut one = base.clone();
        one.stages[0].micro_batch_sizes = vec![mbs, mbs];
        one.global_batch = 2 * mbs;
        one.micro_batches = 1;
        estimate(w, &w.validate(&one).unwrap(), &Analytic).stages[0]
            .micro_batch_time
            .get()
    };
    let span = 2.0 * per(2) + per(1);
    let end = e.stages[0].extra.get();
    assert!(
        ((e.iteration_time_s - (span + end)) / e.iteration_time_s).abs() < 1e-9,
        "estimate {} vs by hand {}",
        e.iteration_time_s,
        span + end
    );
    assert!(e.iteration_time_s > es.iteration_time_s);
    let diff = (s.iteration_time_s - e.iteration_time_s).abs() / e.iteration_time_s;
    assert!(
        diff < 0.01,
        "simulate {} estimate {}",
        s.iteration_time_s,
        e.iteration_time_s
    );

    // Inconsistent: wrong total, wrong micro-batch count, zero samples, two stages.
    for (samples, m) in [(vec![5, 2], 3), (vec![5, 3], 2), (vec![8, 0], 4)] {
        let mut bad = base.clone();
        bad.stages[0].replica_samples = samples.clone();
        bad.micro_batches = m;
        let errs = validate(&bad, &model, &cluster).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.to_string().contains("replica_samples")),
            "{samples:?}, m = {m}: {errs:?}"
        );
    }
    let mut two = plan("pp=2,dp=1,mbs=2,gbs=8", &model, &cluster);
    two.stages[0].replica_samples = vec![8];
    let errs = validate(&two, &model, &cluster).unwrap_err();
    assert!(errs
        .iter()
        .any(|e| e.to_string().contains("one-stage plan")));
}

/// GPT-3 13B at sequence 2048 on `cluster` under `spec`: (estimated, simulated) seconds per
/// iteration.
fn gpt3_13b_estimated_and_simulated(cluster: &str, spec: &str) -> (f64, f64) {
    let model = catalog_model("gpt3-13b").unwrap();
    let cluster = catalog_cluster(cluster).unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 2048,
    };
    let v = w.validate(&plan(spec, &model, &cluster)).unwrap();
    let e = estimate(w, &v, &Analytic).iteration_time_s;
    let s = simulate(w, &v, &Analytic, &SimOptions::default())
        .unwrap()
        .iteration_time_s;
    (e, s)
}

/// ZeRO-1/2 over many nodes: Megatron (overlap-param-gather) and FSDP gather the optimizer
/// step's parameters ahead of the next forward, one bucket after the other (Megatron's
/// gradient buckets, four of GPT-3 13B's layers each at dp 1,024; FSDP's layers), each gather
/// paying the ring's message latencies; the estimate prices them so, as the simulator runs
/// them. DeepSpeed gathers once, after the step. (Priced as one gather, GPT-3 13B on 128 nodes
/// of eight A100s at 100 Gb/s simulated 15.7% (FSDP, ZeRO-1), 19.5% (FSDP, ZeRO-2) and 11.8%
/// (Megatron) over its estimate; 1.2% for DeepSpeed. Priced per bucket, and with the
/// simulator counting a tied head weight once per stage: 1.1%, 1.8%, 1.0% and 1.2%.)
#[test]
fn zero1_and_2_gathers_over_many_nodes_agree_with_the_estimate() {
    for (zero, engine) in [(1, "fsdp"), (2, "fsdp"), (1, "megatron"), (1, "deepspeed")] {
        let (e, s) = gpt3_13b_estimated_and_simulated(
            "128x8xa100-sxm4-80gb@100Gbps",
            &format!("tp=1,pp=1,dp=1024,mbs=1,gbs=1024,zero={zero},engine={engine}"),
        );
        assert!(
            (s / e - 1.0).abs() < 0.03,
            "ZeRO-{zero} {engine}: estimate {e:.3} s, simulation {s:.3} s"
        );
    }
}

/// ZeRO-3 over many nodes: FSDP gathers and reduces layer by layer, each collective paying the
/// ring's message latencies; the estimate prices them so, as the simulator runs them. (Priced as
/// one collective a pass, GPT-3 13B on 32 nodes of eight A100s at 100 Gb/s simulated 7.6% over
/// its estimate, and 44% at 256 nodes.)
#[test]
fn zero3_over_many_nodes_agrees_with_the_estimate() {
    let (e, s) = gpt3_13b_estimated_and_simulated(
        "32x8xa100-sxm4-80gb@100Gbps",
        "tp=1,pp=1,dp=256,mbs=1,gbs=256,zero=3,engine=fsdp",
    );
    assert!(
        (s / e - 1.0).abs() < 0.04,
        "estimate {e:.3} s, simulation {s:.3} s"
    );
}
