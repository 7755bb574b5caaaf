//! Shapes shared by the planner test crates (each `tests/*.rs` includes this with `mod shared;`).
#![allow(dead_code)]

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::model::TransformerConfig;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{simulate, SimOptions, Simulation};
use hetplan::{Cluster, Model, Plan};

/// Two V100 and two T4 on a slow network: small enough for the exhaustive oracle.
pub fn small_cluster() -> Cluster {
    parse_cluster_toml(
        r#"
name = "small-hetero"
[[node_group]]
gpu = "v100-sxm2-16gb"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "25 Gbps"
[[node_group]]
gpu = "t4"
gpus_per_node = 2
nodes = 1
inter_node_bandwidth = "25 Gbps"
"#,
    )
    .expect("the small cluster parses")
}

/// A 4-block GPT with hidden 1024.
pub fn small_model() -> Model {
    TransformerConfig::gpt("tiny-gpt", 4, 1024, 16, 1024).build()
}

/// The inline plan `spec` of `model` on `cluster` at `seq_len` tokens, its estimate and its
/// simulation (analytic layer times, default options).
pub fn estimate_and_simulate(
    model: &Model,
    cluster: &Cluster,
    seq_len: u64,
    spec: &str,
) -> (Plan, Estimate, Simulation) {
    let w = Workload {
        model,
        cluster,
        seq_len,
    };
    let p = parse_inline_plan(spec, model, cluster).unwrap();
    let valid = w.validate(&p).unwrap();
    let e = estimate(w, &valid, &Analytic);
    let s = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
    (p, e, s)
}

/// Asserts that the simulation's iteration time is within `tolerance` (relative) of the
/// estimate's.
pub fn assert_simulation_agrees(e: &Estimate, s: &Simulation, tolerance: f64) {
    let diff = s.iteration_time_s / e.iteration_time_s - 1.0;
    assert!(
        diff.abs() < tolerance,
        "simulation {diff:+.4} from the estimate"
    );
}
