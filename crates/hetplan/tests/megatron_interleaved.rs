//! What Megatron does differently under its interleaved schedule, and only there, in the
//! estimate and in the simulator alike:
//! - it sends beside the compute (`overlap_p2p_comm`, `Plan::overlaps_pipeline_sends`): a
//!   backward's gradients go while the next forward and backward compute, in the steady state;
//!   a forward's activations are waited for at once (Megatron-Core 0.19 frees the output after
//!   its send). Every other schedule and engine waits for its sends.
//! - every pipeline stage starts its ZeRO-1 parameter gather at the start of the step
//!   (`align_param_gather`, `Plan::aligns_param_gather`), where under 1F1B each stage starts
//!   its own when the first micro-batch reaches it.

mod shared;

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::Estimate;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{Label, Pass, Simulation};
use hetplan::{Cluster, Model, Plan};

fn setup() -> (Model, Cluster) {
    // Two GPUs a node on a slow network: half the pipeline's boundaries cross it.
    (
        catalog_model("llama2-7b").unwrap(),
        catalog_cluster("8x2xa100-sxm4-80gb@25Gbps").unwrap(),
    )
}

fn run(model: &Model, cluster: &Cluster, spec: &str) -> (Plan, Estimate, Simulation) {
    shared::estimate_and_simulate(model, cluster, 4096, spec)
}

/// Whether some pipeline send of `which` pass is in flight while the executor that sent it
/// computes.
fn sends_beside_compute(plan: &Plan, sim: &Simulation, which: Pass) -> bool {
    let depth = plan.pipeline_depth();
    sim.spans.iter().any(|s| {
        let Label::Send {
            from_stage,
            from_replica,
            pass,
            ..
        } = s.label
        else {
            return false;
        };
        if pass != which {
            return false;
        }
        sim.spans.iter().any(|c| {
            matches!(c.label, Label::Compute { stage, replica, .. }
                if stage % depth == from_stage % depth && replica == from_replica)
                && c.start_s < s.end_s - 1e-9
                && c.end_s > s.start_s + 1e-9
        })
    })
}

#[test]
fn only_megatrons_interleaved_schedule_overlaps_its_sends() {
    let (model, cluster) = setup();
    let base = "tp=1,pp=16,mbs=1,gbs=64";
    for (spec, overlaps) in [
        ("engine=megatron,v=2", true),
        ("engine=megatron", false),
        ("engine=deepspeed,v=2", false),
        ("engine=fsdp,v=2", false),
    ] {
        let p = parse_inline_plan(&format!("{base},{spec}"), &model, &cluster).unwrap();
        assert_eq!(p.overlaps_pipeline_sends(), overlaps, "{spec}");
    }
    // One stage has nothing to send.
    let one = catalog_cluster("1x2xa100-sxm4-80gb").unwrap();
    let p = parse_inline_plan("tp=1,pp=1,dp=2,mbs=1,gbs=8", &model, &one).unwrap();
    assert!(!p.overlaps_pipeline_sends());
}

#[test]
fn overlapped_sends_hide_behind_the_compute_in_estimate_and_simulation() {
    let (model, cluster) = setup();
    let base = "tp=1,pp=16,mbs=1,gbs=64,v=2";
    // The same plan where the engine waits for its sends (DeepSpeed's assumptions price the
    // same compute and the same bytes here).
    let (mp, mega, mega_sim) = run(&model, &cluster, &format!("{base},engine=megatron"));
    let (dp, blocking, blocking_sim) = run(&model, &cluster, &format!("{base},engine=deepspeed"));
    let mut hidden = 0;
    for (m, d) in mega.stages.iter().zip(&blocking.stages) {
        assert!(
            (m.forward.get() - d.forward.get()).abs() < 1e-12,
            "stage {}",
            m.index
        );
        assert!(m.p2p.get() <= d.p2p.get() + 1e-12, "stage {}", m.index);
        if d.p2p.get() > 0.01 {
            assert!(m.p2p.get() < d.p2p.get() - 1e-4, "stage {}", m.index);
            hidden += 1;
        }
    }
    assert!(hidden >= 8, "{hidden} stages hid their sends");
    assert!(mega.iteration_time_s < blocking.iteration_time_s);
    assert!(mega_sim.iteration_time_s < blocking_sim.iteration_time_s);
    assert!(sends_beside_compute(&mp, &mega_sim, Pass::Backward));
    assert!(!sends_beside_compute(&mp, &mega_sim, Pass::Forward));
    for pass in [Pass::Forward, Pass::Backward] {
        assert!(!sends_beside_compute(&dp, &blocking_sim, pass));
    }
}

#[test]
fn every_stage_gathers_its_parameters_at_the_start_of_the_step() {
    let model = catalog_model("gpt3-13b").unwrap();
    let cluster = catalog_cluster("32x8xa100-sxm4-80gb@100Gbps").unwrap();
    let base = "tp=8,pp=8,dp=4,mbs=1,gbs=256,sp=on,tp_overlap=on,zero=1";
    let run = |spec: &str| shared::estimate_and_simulate(&model, &cluster, 2048, spec);
    let (p1, e1, s1) = run(base);
    let (pv, ev, sv) = run(&format!("{base},v=2"));
    assert!(!p1.aligns_param_gather() && pv.aligns_param_gather());
    // The first bucket's gather of each stage: at the start under interleaving, when the
    // first micro-batch arrives under 1F1B.
    let first_gathers = |plan: &Plan, sim: &Simulation| -> Vec<f64> {
        (0..plan.pipeline_depth())
            .map(|stage| {
                (sim.spans.iter())
                    .filter(|s| {
                        matches!(s.label, Label::ParamGather { stage: st, layer: Some(_) } if st == stage)
                    })
                    .map(|s| s.start_s)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect()
    };
    let aligned = first_gathers(&pv, &sv);
    assert!(aligned.iter().all(|&t| t < 1e-6), "{aligned:?}");
    let staggered = first_gathers(&p1, &s1);
    assert!(staggered[1..].iter().all(|&t| t > 1e-3), "{staggered:?}");
    // Each device's first chunk's buckets go one after the other from the start of the step,
    // none waiting for the forward.
    for stage in 0..pv.pipeline_depth() {
        let mut gathers: Vec<(f64, f64)> = (sv.spans.iter())
            .filter(|s| matches!(s.label, Label::ParamGather { stage: st, layer: Some(_) } if st == stage))
            .map(|s| (s.start_s, s.end_s))
            .collect();
        gathers.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(gathers.len() >= 2, "stage {stage}: {gathers:?}");
        for w in gathers.windows(2) {
            assert!((w[1].0 - w[0].1).abs() < 1e-9, "stage {stage}: {gathers:?}");
        }
    }
    for (e, s) in [(&e1, &s1), (&ev, &sv)] {
        shared::assert_simulation_agrees(e, s, 0.05);
    }
    assert!(ev.iteration_time_s < e1.iteration_time_s);
    assert!(sv.iteration_time_s < s1.iteration_time_s);
}

/// The interleaved schedule's sends on a node's network: each device alternates one chunk's
/// forward and one chunk's backward, so another device's sends meet one of this device's at
/// the points of the chunk cycle where they leave, and one of its v chunks at a time
/// (`SendTiming`). Priced as meeting every send of every other device, the estimate was 25% and
/// 2.8 times the simulation on these two plans.
#[test]
fn interleaved_sends_meet_the_other_devices_as_the_schedule_times_them() {
    let (model, cluster) = setup();
    let (_, e, s) = run(
        &model,
        &cluster,
        "tp=1,pp=16,mbs=1,gbs=64,engine=megatron,v=2",
    );
    shared::assert_simulation_agrees(&e, &s, 0.05);
    // Five chunks a device; each stage's 16 GPUs (TP 4 × DP 4) on two nodes at 25 Gb/s.
    let model = catalog_model("gpt3-13b").unwrap();
    let cluster = catalog_cluster("16x8xa100-sxm4-80gb@25Gbps").unwrap();
    let (_, e5, s5) = shared::estimate_and_simulate(
        &model,
        &cluster,
        2048,
        "tp=4,pp=8,dp=4,mbs=1,gbs=128,zero=1,engine=megatron,v=5",
    );
    shared::assert_simulation_agrees(&e5, &s5, 0.05);
}
