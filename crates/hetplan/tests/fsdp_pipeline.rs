//! FSDP under pipeline parallelism (torchtitan) keeps parameters gathered after the forward and
//! reduces unsharded gradients once per step: its ZeRO-3 stages are priced as ZeRO-1, by the
//! estimate and the simulator alike (`Plan::as_engine_runs`).

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{simulate, SimOptions};

#[test]
fn zero3_under_an_fsdp_pipeline_is_priced_as_zero1() {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("2x8xh100-sxm5-80gb@400Gbps").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 8192,
    };
    let run = |spec: &str| {
        let p = parse_inline_plan(spec, &model, &cluster).unwrap();
        let v = w.validate(&p).unwrap();
        let e = estimate(w, &v, &Analytic);
        let s = simulate(w, &v, &Analytic, &SimOptions::default()).unwrap();
        (p, e, s.iteration_time_s)
    };
    let base = "tp=2,pp=2,mbs=1,gbs=32,ckpt=full,sp=on,engine=fsdp";
    let (p3, e3, s3) = run(&format!("{base},zero=3"));
    let (_, e1, s1) = run(&format!("{base},zero=1"));
    // The plan still says what the user wrote (and exports as FSDP).
    assert!(p3.stages.iter().all(|s| s.zero == 3));
    assert!(p3.as_engine_runs().is_some());
    assert_eq!(e3.iteration_time_s, e1.iteration_time_s);
    assert_eq!(e3.peak_memory_bytes, e1.peak_memory_bytes);
    assert_eq!(s3, s1);
    assert!(
        e3.notes.iter().any(|n| n.contains("costed as ZeRO-1")),
        "{:?}",
        e3.notes
    );
    // Without a pipeline, or on another engine, ZeRO-3 is ZeRO-3.
    for spec in [
        "tp=2,pp=1,mbs=1,gbs=32,ckpt=full,sp=on,engine=fsdp,zero=3",
        "tp=2,pp=2,mbs=1,gbs=32,ckpt=full,sp=on,engine=deepspeed,zero=3",
    ] {
        let (p, e, _) = run(spec);
        assert!(p.as_engine_runs().is_none(), "{spec}");
        assert!(!e.notes.iter().any(|n| n.contains("costed as ZeRO-1")));
    }
    let (_, e3_flat, _) = run("tp=2,pp=1,mbs=1,gbs=32,ckpt=full,sp=on,engine=fsdp,zero=3");
    let (_, e1_flat, _) = run("tp=2,pp=1,mbs=1,gbs=32,ckpt=full,sp=on,engine=fsdp,zero=1");
    assert!(e3_flat.peak_memory_bytes < e1_flat.peak_memory_bytes);
}
