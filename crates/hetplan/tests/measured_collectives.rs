//! Measured collective bandwidths (a profile database's `collectives`, as `python -m
//! hetplan.profile --collectives` writes them) in the estimate and the simulator: where a GPU
//! type has a curve for a collective (or a point-to-point send) among as many GPUs over the
//! same kind of link, it takes at least the measured time; where the model is already slower,
//! or nothing was measured, the model's time stays.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, ComputeTimes, Estimate, Profiled, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::profile::{ProfileDb, ProfileIndex};
use hetplan::sim::{simulate, SimOptions, Simulation};

/// A database with one `op` curve among `group` A100s over `link` at `gbps` GB/s.
fn db_of(op: &str, gbps: f64, group: u32, link: &str) -> ProfileDb {
    let samples: Vec<String> = [1u64 << 10, 1 << 20, 1 << 26, 1 << 32]
        .iter()
        .map(|m| {
            format!(
                r#"{{"op": "{op}", "group_size": {group}, "link": "{link}", "message": {m}, "bandwidth": {}}}"#,
                gbps * 1e9
            )
        })
        .collect();
    ProfileDb::parse(&format!(
        r#"{{"format_version": 1, "profiles": [{{"gpu": "a100-sxm4-80gb", "model": "gpt3-1.3b",
            "source": "test", "layers": [], "collectives": [{}]}}]}}"#,
        samples.join(",")
    ))
    .unwrap()
}

/// An all-reduce curve among `group` A100s over `link`.
fn db_on(gbps: f64, group: u32, link: &str) -> ProfileDb {
    db_of("all-reduce", gbps, group, link)
}

/// ... among 8 in a node.
fn db(gbps: f64, group: u32) -> ProfileDb {
    db_on(gbps, group, "intra-node")
}

fn run(db: Option<&ProfileDb>) -> Estimate {
    run_on("1x8xa100-80gb", db)
}

fn run_on(cluster: &str, db: Option<&ProfileDb>) -> Estimate {
    both("dp=8,mbs=2,gbs=64", cluster, db, false).0
}

/// The estimate of inline plan `plan` of gpt3-1.3b on `cluster` with the profile `db`, and
/// its simulation when `sim`.
fn both(
    plan: &str,
    cluster: &str,
    db: Option<&ProfileDb>,
    sim: bool,
) -> (Estimate, Option<Simulation>) {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster(cluster).unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 2048,
    };
    let plan = parse_inline_plan(plan, &model, &cluster).unwrap();
    let valid = w.validate(&plan).unwrap();
    let go = |compute: &dyn ComputeTimes| {
        let e = estimate(w, &valid, compute);
        let s = sim.then(|| simulate(w, &valid, compute, &SimOptions::default()).unwrap());
        (e, s)
    };
    match db {
        None => go(&Analytic),
        Some(db) => {
            let index = ProfileIndex::new(db);
            go(&Profiled {
                index: &index,
                interpolation: Default::default(),
            })
        }
    }
}

/// Simulated over estimated iteration time, minus one.
fn disagreement(e: &Estimate, s: &Simulation) -> f64 {
    s.iteration_time_s / e.iteration_time_s - 1.0
}

#[test]
fn a_measured_all_reduce_slower_than_the_links_sets_the_gradient_reduction() {
    let model = run(None);
    let slow = run(Some(&db(1.0, 8)));
    // 1.3B parameters' gradients at 1 GB/s, 4 B each (Megatron reduces BF16 gradients in
    // FP32): about 5.2 s, far above NVLink's time.
    let (m, s) = (model.stages[0].dp_sync.get(), slow.stages[0].dp_sync.get());
    assert!(s > 10.0 * m, "model {m} s, measured {s} s");
    assert!(s > 4.5 && s < 6.0, "{s}");
    assert!(slow.iteration_time_s > model.iteration_time_s);
    // A curve faster than the links leaves the model's time (the model adds what sharing costs).
    let fast = run(Some(&db(1e4, 8)));
    assert_eq!(fast.stages[0].dp_sync, model.stages[0].dp_sync);
    // A curve for another group size does not apply.
    let other = run(Some(&db(1.0, 4)));
    assert_eq!(other.stages[0].dp_sync, model.stages[0].dp_sync);
}

#[test]
fn a_curve_applies_to_groups_of_its_gpu_type_over_its_link_only() {
    let across = db_on(1.0, 8, "inter-node");
    let same = "2x4xa100-sxm4-80gb@100Gbps";
    let mixed = "1x4xa100-sxm4-80gb@100Gbps+1x4xa100-sxm4-40gb@100Gbps";
    let dp = |c: &str, d: Option<&ProfileDb>| run_on(c, d).stages[0].dp_sync.get();
    assert!(dp(same, Some(&across)) > 2.0 * dp(same, None));
    // Half the ring is of another type: the A100-80GB curve says nothing about it.
    assert_eq!(dp(mixed, Some(&across)), dp(mixed, None));
    // An intra-node curve does not price a ring across nodes.
    assert_eq!(dp(same, Some(&db(1.0, 8))), dp(same, None));
}

#[test]
fn the_simulator_takes_the_measured_gradient_all_reduce_too() {
    let plan = "dp=8,mbs=2,gbs=64";
    let (e0, s0) = both(plan, "1x8xa100-80gb", None, true);
    let (e1, s1) = both(plan, "1x8xa100-80gb", Some(&db(1.0, 8)), true);
    let (s0, s1) = (s0.unwrap(), s1.unwrap());
    // About 5.2 s of FP32 gradient all-reduce at 1 GB/s, behind the last backward in both.
    let grown = s1.iteration_time_s - s0.iteration_time_s;
    assert!(
        grown > 4.5 && grown < 6.0,
        "the simulation grew by {grown} s"
    );
    assert!(e1.iteration_time_s - e0.iteration_time_s > 4.5);
    // The two still agree: they share the measurement, not the formula around it. (A tied
    // embedding's gradient is reduced once per stage: the simulator's buckets once counted it
    // at both ends, 8% more bytes, which NVLink had hidden.)
    let d = disagreement(&e1, &s1);
    assert!(
        d.abs() < 0.02,
        "simulated against estimated: {:+.1}%",
        100.0 * d
    );
    assert!(disagreement(&e0, &s0).abs() < 0.01);
}

#[test]
fn measured_tensor_parallel_all_reduces_slow_every_layer_in_both() {
    let plan = "tp=8,mbs=2,gbs=16";
    let (e0, s0) = both(plan, "1x8xa100-80gb", None, true);
    let (e1, s1) = both(plan, "1x8xa100-80gb", Some(&db(5.0, 8)), true);
    let (s0, s1) = (s0.unwrap(), s1.unwrap());
    // Every layer's activations all-reduced at 5 GB/s instead of NVLink's hundreds.
    assert!(e1.iteration_time_s > 1.5 * e0.iteration_time_s);
    assert!(s1.iteration_time_s > 1.5 * s0.iteration_time_s);
    let d = disagreement(&e1, &s1);
    assert!(
        d.abs() < 0.05,
        "simulated against estimated: {:+.1}%",
        100.0 * d
    );
}

#[test]
fn a_measured_point_to_point_send_sets_the_pipeline_sends_in_both() {
    // Two stages, one per node: every micro-batch's activations cross the network.
    let plan = "pp=2,mbs=4,gbs=128";
    let cluster = "2x1xa100-sxm4-80gb@400Gbps";
    let slow = db_of("p2p", 0.05, 2, "inter-node");
    let (e0, s0) = both(plan, cluster, None, true);
    let (e1, s1) = both(plan, cluster, Some(&slow), true);
    let (s0, s1) = (s0.unwrap(), s1.unwrap());
    // 16 MiB of activations per micro-batch at 50 MB/s: a third of a second each way.
    let p2p = |e: &Estimate| e.stages[0].p2p.get();
    assert!(
        p2p(&e1) > 10.0 * p2p(&e0),
        "{} against {}",
        p2p(&e1),
        p2p(&e0)
    );
    assert!(e1.iteration_time_s > 2.0 * e0.iteration_time_s);
    assert!(s1.iteration_time_s > 2.0 * s0.iteration_time_s);
    // An intra-node curve does not price a send across nodes.
    let inside = db_of("p2p", 0.05, 2, "intra-node");
    let (e2, s2) = both(plan, cluster, Some(&inside), true);
    assert_eq!(e2.iteration_time_s, e0.iteration_time_s);
    assert_eq!(s2.unwrap().iteration_time_s, s0.iteration_time_s);
}

#[test]
fn a_measured_all_gather_sets_the_context_parallel_ring_in_both() {
    // Four GPUs share each sequence; the ring's rounds move what an all-gather of their
    // chunks moves, measured here at 0.5 GB/s, far below NVLink.
    let plan = "dp=2,cp=4,mbs=1,gbs=8,ckpt=full";
    let slow = db_of("all-gather", 0.5, 4, "intra-node");
    let (e0, s0) = both(plan, "1x8xa100-80gb", None, true);
    let (e1, s1) = both(plan, "1x8xa100-80gb", Some(&slow), true);
    let (s0, s1) = (s0.unwrap(), s1.unwrap());
    assert!(e1.stages[0].cp_comm.get() > 10.0 * e0.stages[0].cp_comm.get().max(1e-6));
    assert!(e1.iteration_time_s > 1.5 * e0.iteration_time_s);
    assert!(s1.iteration_time_s > 1.5 * s0.iteration_time_s);
    let d = disagreement(&e1, &s1);
    assert!(
        d.abs() < 0.05,
        "simulated against estimated: {:+.1}%",
        100.0 * d
    );
}
