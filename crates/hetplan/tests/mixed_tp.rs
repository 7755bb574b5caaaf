//! Replicas of one stage at different TP degrees (issue 9, part 2): Sailor's OPT-350 plans on
//! 32 A100 + 96 V100 put A100 replicas at TP 1 beside V100 replicas at TP 4 in one stage;
//! FlashFlex and HexiScale do the same. The plan holds it, validation checks it, the estimate and
//! the simulator run it, and a uniform plan spelled with `replica_tp` is the same plan.

use hetplan::cluster::spec::parse_cluster_toml;
use hetplan::cluster::{Cluster, GpuId};
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::{parse_plan_json, PlanError};
use hetplan::plan::{Plan, ValidPlan};
use hetplan::sim::{simulate, SimOptions};
use hetplan::Model;

/// 4 nodes of 8 A100-40GB and 12 nodes of 8 V100-16GB, 100 Gbps between nodes.
fn sailor_cluster() -> Cluster {
    parse_cluster_toml(
        "name = \"a100-v100\"\n\
         [[node_group]]\ngpu = \"a100-40gb\"\ngpus_per_node = 8\nnodes = 4\n\
         inter_node_bandwidth = \"100 Gbps\"\n\
         [[node_group]]\ngpu = \"v100-16gb\"\ngpus_per_node = 8\nnodes = 12\n\
         inter_node_bandwidth = \"100 Gbps\"\n",
    )
    .unwrap()
}

/// One stage over all 128 GPUs: 32 A100 replicas at TP 1, then 24 V100 replicas at TP 4, each
/// with micro-batches of 2 samples, 8 micro-batches.
fn sailor_plan(model: &Model, cluster: &Cluster) -> Plan {
    let mut plan = parse_inline_plan("dp=128,mbs=1,gbs=128", model, cluster).unwrap();
    let st = &mut plan.stages[0];
    st.dp = 32 + 24;
    st.tp = 4;
    st.replica_tp = [vec![1; 32], vec![4; 24]].concat();
    st.micro_batch_sizes = vec![2; 56];
    plan.micro_batches = 8;
    plan.global_batch = 2 * 56 * 8;
    plan
}

fn w<'a>(model: &'a Model, cluster: &'a Cluster) -> Workload<'a> {
    Workload {
        model,
        cluster,
        seq_len: 2048,
    }
}

#[test]
fn a_stage_mixing_tp_1_and_tp_4_replicas_is_estimated_and_simulated() {
    let model = catalog_model("gpt3-350m").unwrap();
    let cluster = sailor_cluster();
    let plan = ValidPlan::new(sailor_plan(&model, &cluster), &model, &cluster).unwrap();
    assert_eq!(plan.stages[0].replica(31), &[GpuId { node: 3, local: 7 }]);
    assert_eq!(plan.stages[0].replica(32).len(), 4);
    assert_eq!(plan.stages[0].replica(55)[3], GpuId { node: 15, local: 7 });
    // Shard group 1 holds the second quarter of the parameters: every A100 (its whole copy)
    // and the second GPU of every V100 replica.
    let g1 = plan.stages[0].shard_group(1);
    assert_eq!(g1.len(), 56);
    assert_eq!(g1[0], GpuId { node: 0, local: 0 });
    assert_eq!(g1[32], GpuId { node: 4, local: 1 });

    let e = estimate(w(&model, &cluster), &plan, &Analytic);
    assert!(e.fits, "{:?}", e.notes);
    assert_eq!(e.per_gpu.len(), 128);
    // An A100 at TP 1 holds the whole model and a micro-batch's whole activations, a V100 at
    // TP 4 about a quarter of each (the runtime's reserve is the same on both).
    let a100 = e.per_gpu.iter().find(|g| g.replica == 0).unwrap();
    let v100 = e.per_gpu.iter().find(|g| g.replica == 40).unwrap();
    let ratio = a100.peak_memory_bytes / v100.peak_memory_bytes;
    assert!(
        (2.0..4.0).contains(&ratio),
        "peak memory A100/V100 = {ratio}"
    );
    assert_eq!(e.stages[0].replica_tp.len(), 56);

    let s = simulate(
        w(&model, &cluster),
        &plan,
        &Analytic,
        &SimOptions::default(),
    )
    .unwrap();
    eprintln!(
        "mixed: est {:.4} sim {:.4}",
        e.iteration_time_s, s.iteration_time_s
    );
    let gap = (e.iteration_time_s - s.iteration_time_s) / s.iteration_time_s;
    assert!(
        gap.abs() < 0.10,
        "estimate {:.3} s vs simulation {:.3} s ({:+.1}%)",
        e.iteration_time_s,
        s.iteration_time_s,
        gap * 100.0
    );

    // The JSON form carries it and reads back the same.
    let json = serde_json::to_string_pretty(&plan).unwrap();
    assert!(json.contains("\"replica_tp\""));
    assert_eq!(&parse_plan_json(&json).unwrap(), plan.as_plan());
}

#[test]
fn a_uniform_stage_spelled_with_replica_tp_is_the_same_plan() {
    let model = catalog_model("gpt3-350m").unwrap();
    let cluster = sailor_cluster();
    let base = parse_inline_plan("tp=2,pp=2,dp=4,mbs=2,gbs=64", &model, &cluster).unwrap();
    let mut spelled = base.clone();
    for st in &mut spelled.stages {
        st.replica_tp = vec![st.tp; st.dp as usize];
    }
    let wl = w(&model, &cluster);
    let (b, s) = (wl.validate(&base).unwrap(), wl.validate(&spelled).unwrap());
    assert_eq!(
        estimate(wl, &b, &Analytic).iteration_time_s,
        estimate(wl, &s, &Analytic).iteration_time_s
    );
    let opts = SimOptions::default();
    assert_eq!(
        simulate(wl, &b, &Analytic, &opts).unwrap().iteration_time_s,
        simulate(wl, &s, &Analytic, &opts).unwrap().iteration_time_s
    );
}

#[test]
fn mixed_degrees_are_checked_and_each_error_names_its_field() {
    let model = catalog_model("gpt3-350m").unwrap();
    let cluster = sailor_cluster();
    let errors = |plan: &Plan| ValidPlan::check(plan, &model, &cluster).unwrap_err();
    let good = sailor_plan(&model, &cluster);

    let mut p = good.clone();
    p.stages[0].replica_tp.pop();
    let e = errors(&p);
    assert!(e.iter().any(|e| matches!(
        e,
        PlanError::ReplicaTpCount {
            given: 55,
            dp: 56,
            ..
        }
    )));
    assert!(e.iter().any(|e| e.path() == "stages[0].replica_tp"));

    let mut p = good.clone();
    p.stages[0].replica_tp[40] = 3;
    p.stages[0].devices.pop();
    let e = errors(&p);
    let divides = e
        .iter()
        .find(|e| matches!(e, PlanError::ReplicaTpDivides { .. }))
        .unwrap();
    assert_eq!(divides.path(), "stages[0].replica_tp[40]");
    assert!(divides.hint().unwrap().contains("1, 2, 4"));
    // 3 does not divide the 16 heads either.
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::TpHeads { tp: 3, .. })));

    let mut p = good.clone();
    p.stages[0].tp = 8;
    let e = errors(&p);
    let largest = e
        .iter()
        .find(|e| matches!(e, PlanError::ReplicaTpLargest { largest: 4, .. }))
        .unwrap();
    assert_eq!(
        largest.hint().unwrap(),
        "set tp to 4, the largest of replica_tp"
    );

    let mut p = good;
    p.stages[0].devices.truncate(100);
    let e = errors(&p);
    let count = e
        .iter()
        .find(|e| matches!(e, PlanError::DeviceCountReplicaTp { expected: 128, .. }))
        .unwrap();
    assert_eq!(count.path(), "stages[0].devices");
}
