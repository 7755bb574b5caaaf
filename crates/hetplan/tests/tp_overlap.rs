//! Tensor-parallel communication overlap (`Plan::tp_comm_overlap`; Megatron's
//! `--tp-comm-overlap`, torchtitan's async TP): validation, what it hides in the estimate, the
//! simulator's flows beside compute, the engines that run it, and the exports.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::constants::{tp_overlap_split, tp_overlap_tail_share};
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::export::Job;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::runtime::Runtime;
use hetplan::plan::validate::{validate, PlanError};
use hetplan::plan::{Engine, ValidPlan};
use hetplan::sim::{simulate, Label, SimOptions};
use hetplan::{Cluster, Model, Plan};

fn llama() -> Model {
    catalog_model("llama3-8b").unwrap()
}

fn h100() -> Cluster {
    catalog_cluster("2x8xh100-sxm5-80gb@400Gbps").unwrap()
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

fn est(model: &Model, cluster: &Cluster, p: &Plan) -> Estimate {
    let w = Workload {
        model,
        cluster,
        seq_len: 8192,
    };
    estimate(w, &w.validate(p).unwrap(), &Analytic)
}

#[test]
fn it_needs_sequence_parallelism_wherever_tp_runs() {
    let (model, cluster) = (llama(), h100());
    let mut p = plan(
        "tp=8,pp=2,mbs=1,gbs=16,sp=on,tp_overlap=on",
        &model,
        &cluster,
    );
    assert!(p.tp_comm_overlap);
    validate(&p, &model, &cluster).unwrap();
    p.stages[1].sequence_parallel = false;
    let errs = validate(&p, &model, &cluster).unwrap_err();
    let e = errs
        .iter()
        .find(|e| {
            matches!(
                e,
                PlanError::TpOverlapWithoutSequenceParallel { stage: 1, tp: 8 }
            )
        })
        .unwrap_or_else(|| panic!("{errs:?}"));
    assert!(e.hint().unwrap().contains("sequence_parallel"));
    // The chunks move through peers' mapped memory: a TP group across nodes cannot overlap.
    let one_per_node = catalog_cluster("2x1xh100-sxm5-80gb@400Gbps").unwrap();
    let mut p = plan("tp=2,pp=1,mbs=1,gbs=16,sp=on", &model, &one_per_node);
    p.tp_comm_overlap = true;
    // The inline form refuses it at once, with the reason.
    let e = parse_inline_plan(
        "tp=2,pp=1,mbs=1,gbs=16,sp=on,tp_overlap=on",
        &model,
        &one_per_node,
    )
    .unwrap_err();
    assert!(e.message.contains("spans nodes"), "{}", e.message);
    assert!(!p.stages[0].can_overlap_tp());
    let errs = validate(&p, &model, &one_per_node).unwrap_err();
    assert!(
        errs.iter().any(|e| matches!(
            e,
            PlanError::TpOverlapAcrossNodes {
                stage: 0,
                replica: 0
            }
        )),
        "{errs:?}"
    );
    // Without TP there is nothing to overlap, and nothing to refuse.
    let p = plan("tp=1,pp=2,mbs=1,gbs=16,tp_overlap=on", &model, &cluster);
    validate(&p, &model, &cluster).unwrap();
}

#[test]
fn it_hides_what_the_engine_decomposes_and_the_simulator_agrees() {
    let (model, cluster) = (llama(), h100());
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 8192,
    };
    let mut hidden = Vec::new();
    for engine in ["megatron", "fsdp"] {
        let spec = format!("tp=8,pp=2,mbs=1,gbs=32,sp=on,zero=1,ckpt=full,engine={engine}");
        let off = plan(&spec, &model, &cluster);
        let on = plan(&format!("{spec},tp_overlap=on"), &model, &cluster);
        let (e_off, e_on) = (est(&model, &cluster, &off), est(&model, &cluster, &on));
        let (t_off, t_on) = (e_off.iteration_time_s, e_on.iteration_time_s);
        let (tp_off, tp_on) = (e_off.stages[0].tp_comm.get(), e_on.stages[0].tp_comm.get());
        assert!(tp_off > 0.0 && t_on < t_off, "{engine}: {t_on} vs {t_off}");
        // What stays exposed: at least the share that flows after the compute.
        let (_, after) = tp_overlap_split(on.engine, 8);
        assert!(
            tp_on >= after * tp_off * 0.99,
            "{engine}: {tp_on} of {tp_off}"
        );
        hidden.push(1.0 - t_on / t_off);
        // The simulator runs the decomposed share beside the compute and agrees.
        for (p, e) in [(&off, &e_off), (&on, &e_on)] {
            let valid = w.validate(p).unwrap();
            let sim = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
            assert!(sim
                .spans
                .iter()
                .any(|s| matches!(s.label, Label::TpAllReduce { .. })));
            let diff = sim.iteration_time_s / e.iteration_time_s - 1.0;
            assert!(
                diff.abs() < 0.05,
                "{engine} {}: {diff:+.3}",
                p.tp_comm_overlap
            );
        }
    }
    // Transformer Engine decomposes every collective, torch's async TP a share of them.
    assert!(hidden[0] > hidden[1] && hidden[1] > 0.0, "{hidden:?}");
    assert!(tp_overlap_tail_share(8) < 0.1);
    let (beside, after) = tp_overlap_split(Engine::Deepspeed, 8);
    assert_eq!((beside, after), (0.0, 1.0));
}

#[test]
fn megatron_and_torchtitan_run_it_the_others_do_not() {
    let (model, cluster) = (llama(), h100());
    // One stage: FSDP runs no pipeline.
    let p = plan(
        "tp=8,pp=1,mbs=1,gbs=16,sp=on,tp_overlap=on",
        &model,
        &cluster,
    );
    for rt in [Runtime::Megatron, Runtime::Torchtitan] {
        assert!(rt.why_not(&p).is_empty(), "{rt:?}: {:?}", rt.why_not(&p));
        assert!(rt.conform(&p).unwrap().tp_comm_overlap);
    }
    for rt in [Runtime::Deepspeed, Runtime::Fsdp] {
        let why = rt.why_not(&p);
        assert!(
            why.iter().any(|w| w.contains("communication overlap")),
            "{rt:?}: {why:?}"
        );
        let c = rt.conform(&p).unwrap();
        assert!(!c.tp_comm_overlap);
        validate(&c, &model, &cluster).unwrap();
    }
}

/// Every file of the export of `spec` for `engine`, concatenated.
fn exported(engine: &str, spec: &str) -> String {
    let (model, cluster) = (llama(), h100());
    let p = plan(spec, &model, &cluster);
    let valid = validate_plan(&p, &model, &cluster);
    let job = Job {
        model: &model,
        cluster: &cluster,
        plan: &valid,
        seq_len: 8192,
    };
    let out = match engine {
        "megatron" => hetplan::export::megatron::export(job),
        _ => hetplan::export::torchtitan::export(job),
    }
    .unwrap();
    out.files.iter().map(|f| f.contents.as_str()).collect()
}

fn validate_plan(p: &Plan, model: &Model, cluster: &Cluster) -> ValidPlan {
    ValidPlan::new(p.clone(), model, cluster).unwrap()
}

#[test]
fn the_exports_switch_it_on() {
    let on = "tp=8,pp=2,mbs=1,gbs=16,sp=on,tp_overlap=on";
    let off = "tp=8,pp=2,mbs=1,gbs=16,sp=on";
    assert!(exported("megatron", on).contains("--tp-comm-overlap"));
    assert!(!exported("megatron", off).contains("--tp-comm-overlap"));
    let async_tp = "compile=CompileConfig(enable=True, enable_async_tensor_parallel=True)";
    assert!(exported("torchtitan", on).contains(async_tp));
    assert!(!exported("torchtitan", off).contains("enable_async_tensor_parallel"));
}
