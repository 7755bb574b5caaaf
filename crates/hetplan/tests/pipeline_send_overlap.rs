//! Megatron's interleaved schedule sends beside the compute (`overlap_p2p_comm`, on by default
//! there and only there: `Plan::overlaps_pipeline_sends`): a forward's activations while the
//! backward after it runs, a backward's gradients while the next forward does — in the estimate
//! and in the simulator alike. Every other schedule and engine waits for its sends.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{simulate, Label, SimOptions, Simulation};
use hetplan::{Cluster, Model, Plan};

fn setup() -> (Model, Cluster) {
    // Two GPUs a node on a slow network: half the pipeline's boundaries cross it.
    (
        catalog_model("llama2-7b").unwrap(),
        catalog_cluster("8x2xa100-sxm4-80gb@25Gbps").unwrap(),
    )
}

fn run(model: &Model, cluster: &Cluster, spec: &str) -> (Plan, Estimate, Simulation) {
    let w = Workload {
        model,
        cluster,
        seq_len: 4096,
    };
    let p = parse_inline_plan(spec, model, cluster).unwrap();
    let valid = w.validate(&p).unwrap();
    let e = estimate(w, &valid, &Analytic);
    let s = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
    (p, e, s)
}

/// Whether some pipeline send is in flight while the executor that sent it computes.
fn sends_beside_compute(plan: &Plan, sim: &Simulation) -> bool {
    let depth = plan.pipeline_depth();
    sim.spans.iter().any(|s| {
        let Label::Send {
            from_stage,
            from_replica,
            ..
        } = s.label
        else {
            return false;
        };
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
            // Some of it stays exposed where the sends outlast the compute beside them.
            assert!(m.p2p.get() < 0.9 * d.p2p.get(), "stage {}", m.index);
            hidden += 1;
        }
    }
    assert!(hidden >= 8, "{hidden} stages hid their sends");
    assert!(mega.iteration_time_s < blocking.iteration_time_s);
    assert!(mega_sim.iteration_time_s < blocking_sim.iteration_time_s);
    assert!(sends_beside_compute(&mp, &mega_sim));
    assert!(!sends_beside_compute(&dp, &blocking_sim));
}
