//! Where the data-parallel gradient reduction runs (`Engine::overlaps_grad_reduce`): beside the
//! last backward (Megatron's `--overlap-grad-reduce`, FSDP's hooks, DeepSpeed's ZeRO-3), or
//! after it on the compute stream (DeepSpeed below ZeRO-3: its pipeline engine's `ReduceGrads`,
//! `overlap_comm` off by default) — in the estimate and in the simulator alike.

mod shared;

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::Estimate;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::Engine;
use hetplan::sim::{Label, Pass, Simulation};
use hetplan::{Cluster, Model};

fn setup() -> (Model, Cluster) {
    // Two GPUs a node on a slow network: the data-parallel groups cross nodes.
    (
        catalog_model("llama3-8b").unwrap(),
        catalog_cluster("4x2xh100-sxm5-80gb@100Gbps").unwrap(),
    )
}

fn run(model: &Model, cluster: &Cluster, spec: &str) -> (Estimate, Simulation) {
    let (_, e, s) = shared::estimate_and_simulate(model, cluster, 4096, spec);
    (e, s)
}

#[test]
fn which_engines_reduce_beside_the_backward() {
    for zero in 0..=3 {
        assert!(Engine::Megatron.overlaps_grad_reduce(zero));
        assert!(Engine::Fsdp.overlaps_grad_reduce(zero));
        assert_eq!(Engine::Deepspeed.overlaps_grad_reduce(zero), zero == 3);
    }
}

#[test]
fn deepspeed_reduces_after_the_last_backward() {
    let (model, cluster) = setup();
    let spec = "tp=1,pp=2,mbs=1,gbs=8,zero=1,ckpt=full";
    let (mega, mega_sim) = run(&model, &cluster, &format!("{spec},engine=megatron"));
    let (ds, ds_sim) = run(&model, &cluster, &format!("{spec},engine=deepspeed"));
    for (e, s) in [(&mega, &mega_sim), (&ds, &ds_sim)] {
        shared::assert_simulation_agrees(e, s, 0.05);
    }
    for (m, d) in mega.stages.iter().zip(&ds.stages) {
        // (Megatron reduces FP32 gradients, DeepSpeed 16-bit ones: the bytes differ.)
        assert!(d.dp_sync.get() > 0.1, "stage {}: {d:?}", d.index);
        // Megatron hides part of its reduction behind the last backward (and its parameter
        // gather behind the first forward); DeepSpeed leaves all of it exposed.
        assert!(m.dp_sync_exposed.get() < 0.95 * m.dp_sync.get(), "{m:?}");
        assert!(
            d.dp_sync_exposed.get() >= d.dp_sync.get() * (1.0 - 1e-9),
            "{d:?}"
        );
    }
    // In the simulation, no DeepSpeed bucket starts before its stage's last backward is done.
    for si in 0..ds.stages.len() {
        let last_backward = |sim: &Simulation| {
            (sim.spans.iter())
                .filter(|s| {
                    matches!(s.label, Label::Compute { stage, pass: Pass::Backward, .. } if stage == si)
                })
                .map(|s| s.end_s)
                .fold(0.0, f64::max)
        };
        let first = |sim: &Simulation| {
            (sim.spans.iter())
                .filter(|s| matches!(s.label, Label::GradSync { stage, .. } if stage == si))
                .map(|s| s.start_s)
                .fold(f64::INFINITY, f64::min)
        };
        assert!(
            first(&ds_sim) >= last_backward(&ds_sim) - 1e-9,
            "stage {si}"
        );
        // Megatron's first bucket goes while the backward still runs.
        let mega_last = last_backward(&mega_sim);
        assert!(first(&mega_sim) < mega_last, "stage {si}");
    }
}

#[test]
fn deepspeeds_zero2_reduce_scatters_hold_the_backward_up() {
    let (model, cluster) = setup();
    let spec = "tp=1,pp=1,mbs=1,gbs=16,zero=2,ckpt=full";
    let (fsdp, fsdp_sim) = run(&model, &cluster, &format!("{spec},engine=fsdp"));
    let (ds, ds_sim) = run(&model, &cluster, &format!("{spec},engine=deepspeed"));
    for (e, s) in [(&fsdp, &fsdp_sim), (&ds, &ds_sim)] {
        shared::assert_simulation_agrees(e, s, 0.05);
    }
    let (f, d) = (&fsdp.stages[0], &ds.stages[0]);
    assert!(
        d.exposed_per_micro_batch.get() > f.exposed_per_micro_batch.get() + 0.05,
        "{} vs {}",
        d.exposed_per_micro_batch.get(),
        f.exposed_per_micro_batch.get()
    );
    assert!(ds.iteration_time_s > fsdp.iteration_time_s);
    assert!(ds_sim.iteration_time_s > fsdp_sim.iteration_time_s);
    // In the simulation each DeepSpeed layer's backward waits for the reduce-scatter of the
    // layer before it (in backward order); FSDP's run beside the next layer's backward.
    let waits = |sim: &Simulation| {
        let mut pairs = 0;
        let mut waited = 0;
        for s in &sim.spans {
            let Label::ZeroScatter { mb, layer, .. } = s.label else {
                continue;
            };
            for c in &sim.spans {
                if matches!(c.label, Label::Compute { pass: Pass::Backward, mb: m, layer: Some(l), .. }
                    if m == mb && l + 1 == layer)
                {
                    pairs += 1;
                    if c.start_s >= s.end_s - 1e-9 {
                        waited += 1;
                    }
                }
            }
        }
        (pairs, waited)
    };
    let (pairs, waited) = waits(&ds_sim);
    assert!(pairs > 10 && waited == pairs, "{waited} of {pairs}");
    let (pairs, waited) = waits(&fsdp_sim);
    assert!(pairs > 10 && waited < pairs, "{waited} of {pairs}");
}

#[test]
fn deepspeeds_chained_reduce_scatters_pay_every_latency_in_the_estimate_too() {
    // 64 ranks one to a node and short sequences: each layer's reduce-scatter waits for its
    // ring's 63 message latencies, one layer after the other, which the simulator runs and the
    // estimate must count (one latency per layer, not one per pass).
    let model = catalog_model("gpt3-1.3b").unwrap();
    let cluster = catalog_cluster("64x1xa100-sxm4-80gb@400Gbps").unwrap();
    let spec = "tp=1,pp=1,dp=64,mbs=1,gbs=256,zero=2,engine=deepspeed";
    let (_, e, s) = shared::estimate_and_simulate(&model, &cluster, 512, spec);
    shared::assert_simulation_agrees(&e, &s, 0.01);
}
