//! Blocking kernel launches (`Plan::launch_blocking`, inline `launch_blocking=on`,
//! `CUDA_LAUNCH_BLOCKING=1`): each op hetplan prices also pays the host's round trip
//! (`constants::BLOCKING_LAUNCH_S`), in the estimate and the simulation alike, time only; the
//! inline form and plan JSON carry it, and the exports' `launch.sh` runs so. Its fit on BigScience's runs is in `tests/published.rs`.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::constants::BLOCKING_LAUNCH_S;
use hetplan::cost::{estimate, layer_costs, Analytic, Estimate, Workload};
use hetplan::export::{export, Job, Target};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::ValidPlan;
use hetplan::sim::{simulate, SimOptions};
use hetplan::{Cluster, Model, Plan};

const SPEC: &str = "tp=2,pp=2,dp=2,mbs=2,gbs=32,zero=1,ckpt=full,engine=deepspeed,precision=fp16";

fn setup() -> (Model, Cluster) {
    (
        catalog_model("gpt3-1.3b").unwrap(),
        catalog_cluster("1x8xa100-sxm4-80gb").unwrap(),
    )
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

fn workload<'a>(model: &'a Model, cluster: &'a Cluster) -> Workload<'a> {
    Workload {
        model,
        cluster,
        seq_len: 2048,
    }
}

fn est(model: &Model, cluster: &Cluster, p: &Plan) -> Estimate {
    let w = workload(model, cluster);
    estimate(w, &w.validate(p).unwrap(), &Analytic)
}

#[test]
fn each_priced_op_pays_the_hosts_round_trip() {
    let (model, cluster) = setup();
    let asynchronous = plan(SPEC, &model, &cluster);
    let blocking = plan(&format!("{SPEC},launch_blocking=on"), &model, &cluster);
    assert!(!asynchronous.launch_blocking && blocking.launch_blocking);
    let w = workload(&model, &cluster);
    let (a, b) = (
        w.validate(&asynchronous).unwrap(),
        w.validate(&blocking).unwrap(),
    );
    // Layer by layer, the difference is a whole number of round trips in forward, backward and
    // the recomputation, and every layer's forward pays at least one.
    for si in 0..2 {
        let (ca, cb) = (
            layer_costs(w, &a, &Analytic, si, 0),
            layer_costs(w, &b, &Analytic, si, 0),
        );
        assert_eq!(ca.len(), cb.len());
        for (x, y) in ca.iter().zip(&cb) {
            assert!(y.forward - x.forward >= 0.999 * BLOCKING_LAUNCH_S);
            for (slow, fast) in [
                (y.forward, x.forward),
                (y.backward, x.backward),
                (y.recompute, x.recompute),
            ] {
                let ops = (slow - fast) / BLOCKING_LAUNCH_S;
                assert!(ops >= -1e-6, "{ops}");
                assert!((ops - ops.round()).abs() < 1e-6, "{ops}");
            }
        }
    }
    // The iteration is slower, memory does not move.
    let (ea, eb) = (est(&model, &cluster, &a), est(&model, &cluster, &b));
    assert!(eb.iteration_time_s > 1.05 * ea.iteration_time_s);
    assert_eq!(ea.peak_memory_bytes, eb.peak_memory_bytes);
    // The simulator runs the same layer costs: it agrees with the estimate as closely with
    // blocking launches as without.
    let opts = SimOptions::default();
    let (sa, sb) = (
        simulate(w, &a, &Analytic, &opts).unwrap(),
        simulate(w, &b, &Analytic, &opts).unwrap(),
    );
    let gap = |e: &Estimate, s: f64| (s / e.iteration_time_s - 1.0).abs();
    assert!(gap(&eb, sb.iteration_time_s) < 0.05);
    assert!(gap(&eb, sb.iteration_time_s) <= gap(&ea, sa.iteration_time_s) + 0.02);
}

#[test]
fn the_inline_form_and_plan_json_carry_it() {
    let (model, cluster) = setup();
    for (text, on) in [("on", true), ("off", false), ("1", true), ("false", false)] {
        let p = plan(&format!("{SPEC},launch_blocking={text}"), &model, &cluster);
        assert_eq!(p.launch_blocking, on);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json.contains("launch_blocking"), on, "{json}");
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, p);
    }
    let err =
        parse_inline_plan(&format!("{SPEC},launch_blocking=maybe"), &model, &cluster).unwrap_err();
    assert!(err.message.contains("launch_blocking"), "{}", err.message);
}

#[test]
fn exports_run_with_blocking_launches_when_priced_so() {
    let (model, cluster) = setup();
    for (target, on) in [
        (Target::Megatron, true),
        (Target::Deepspeed, true),
        (Target::Deepspeed, false),
    ] {
        let spec = format!("dp=8,mbs=2,gbs=64,engine=deepspeed,launch_blocking={on}");
        let spec = if target == Target::Megatron {
            spec.replace("deepspeed", "megatron")
        } else {
            spec
        };
        let valid = ValidPlan::new(plan(&spec, &model, &cluster), &model, &cluster).unwrap();
        let job = Job {
            model: &model,
            cluster: &cluster,
            plan: &valid,
            seq_len: 2048,
        };
        let out = export(target, job).unwrap();
        let launch = out.files.iter().find(|f| f.path == "launch.sh").unwrap();
        let torchrun = launch.contents.find("exec torchrun").unwrap();
        match launch.contents.find("export CUDA_LAUNCH_BLOCKING=1") {
            Some(at) => assert!(on && at < torchrun, "{spec}"),
            None => assert!(!on, "{spec}"),
        }
    }
}
