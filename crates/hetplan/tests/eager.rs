//! How much of the model's PyTorch code runs under `torch.compile` (`Plan::compile`, inline
//! `compile=on|blocks|off`): eager code's cost and where it falls, the compiled loss's memory,
//! that only PyTorch's own engine takes anything but `on`, and that the torchtitan export and
//! import carry it. Its agreement with torchtitan's measured runs is in `tests/published.rs`.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::export::Job;
use hetplan::import::torchtitan::TorchtitanJob;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::runtime::Runtime;
use hetplan::plan::validate::{validate, PlanError};
use hetplan::plan::{Compile, ValidPlan};
use hetplan::sim::{simulate, SimOptions};
use hetplan::{Cluster, Model, Plan};

fn cluster() -> Cluster {
    catalog_cluster("1x8xh100-sxm5-80gb").unwrap()
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

fn workload<'a>(model: &'a Model, cluster: &'a Cluster) -> Workload<'a> {
    Workload {
        model,
        cluster,
        seq_len: 4096,
    }
}

fn est(model: &Model, cluster: &Cluster, p: &Plan) -> Estimate {
    let w = workload(model, cluster);
    estimate(w, &w.validate(p).unwrap(), &Analytic)
}

const FSDP: &str = "dp=8,mbs=1,gbs=16,zero=3,engine=fsdp";

#[test]
fn eager_llama_costs_its_norms_rope_swiglu_and_loss() {
    let (model, cluster) = (catalog_model("llama3-8b").unwrap(), cluster());
    let compiled = plan(FSDP, &model, &cluster);
    let eager = plan(&format!("{FSDP},compile=off"), &model, &cluster);
    assert_eq!(
        (compiled.compile, eager.compile),
        (Compile::On, Compile::Off)
    );
    let (c, e) = (
        est(&model, &cluster, &compiled),
        est(&model, &cluster, &eager),
    );
    let slower = e.iteration_time_s / c.iteration_time_s;
    // Per token and block, ~400 KB more forward traffic (norms 2 × 32 B × 4,096, SwiGLU
    // 4 B × 14,336, RoPE 16 B × 5,120), thrice with backward: a tenth or so of an H100 step.
    assert!(
        (1.05..1.25).contains(&slower),
        "eager/compiled = {slower:.3}"
    );
    // Eager code keeps more for backward, which hetplan does not model; its loss is eager too:
    // the FP32 log-softmax kept (4 B per logit against the compiled loss's 2) and two FP32
    // buffers in its backward (8 B against 2).
    let blocks = est(
        &model,
        &cluster,
        &plan(&format!("{FSDP},compile=blocks"), &model, &cluster),
    );
    assert_eq!(e.peak_memory_bytes, blocks.peak_memory_bytes);
    assert_eq!(blocks.iteration_time_s, c.iteration_time_s);
    // With the caching allocator's overhead on every allocated byte (`ALLOCATOR_OVERHEAD`).
    let logits = 4096.0 * 128_256.0 * (1.0 + hetplan::cost::constants::ALLOCATOR_OVERHEAD);
    let more = blocks.peak_memory_bytes - c.peak_memory_bytes;
    assert!(
        (more / logits - 8.0).abs() < 0.01,
        "the eager loss holds {:.2} B per logit more",
        more / logits
    );
    // The simulator takes the same per-layer costs.
    let w = workload(&model, &cluster);
    let sim = |p: &Plan| {
        simulate(
            w,
            &w.validate(p).unwrap(),
            &Analytic,
            &SimOptions::default(),
        )
        .unwrap()
        .iteration_time_s
    };
    let sim_slower = sim(&eager) / sim(&compiled);
    assert!(
        (sim_slower / slower - 1.0).abs() < 0.02,
        "simulated {sim_slower:.3}, estimated {slower:.3}"
    );
}

#[test]
fn a_model_of_single_kernel_ops_runs_eagerly_as_fast() {
    // GPT-2's blocks: nn.LayerNorm, F.gelu, learned positions — one kernel each, eager or not.
    let (model, cluster) = (catalog_model("gpt3-1.3b").unwrap(), cluster());
    let compiled = est(&model, &cluster, &plan(FSDP, &model, &cluster));
    let eager = est(
        &model,
        &cluster,
        &plan(&format!("{FSDP},compile=off"), &model, &cluster),
    );
    assert_eq!(eager.iteration_time_s, compiled.iteration_time_s);
}

#[test]
fn only_the_fsdp_engine_runs_model_code_eagerly() {
    let (model, cluster) = (catalog_model("llama3-8b").unwrap(), cluster());
    // Inline, the error points at the key.
    let e = parse_inline_plan("tp=2,dp=4,mbs=1,gbs=16,compile=off", &model, &cluster).unwrap_err();
    assert_eq!(
        (e.field.as_deref(), e.column),
        (Some("compile"), Some(32)),
        "{e:?}"
    );
    assert!(e.hint.unwrap().contains("engine=fsdp"));
    let mut p = plan("tp=2,dp=4,mbs=1,gbs=16", &model, &cluster);
    p.compile = Compile::Off;
    let errs = validate(&p, &model, &cluster).unwrap_err();
    let e = errs
        .iter()
        .find(|e| {
            matches!(
                e,
                PlanError::CompileOutsideFsdp {
                    engine: "megatron",
                    compile: "off"
                }
            )
        })
        .unwrap_or_else(|| panic!("{errs:?}"));
    assert_eq!(e.path(), "compile");
    assert!(e.hint().unwrap().contains("engine to fsdp"));
    // Megatron's conform runs it fused; DeepSpeed refuses to say it can run it as is.
    let m = Runtime::Megatron.conform(&p).unwrap();
    assert_eq!(m.compile, Compile::On);
    validate(&m, &model, &cluster).unwrap();
    assert!(Runtime::Deepspeed
        .why_not(&p)
        .iter()
        .any(|w| w.contains("eagerly")));
}

#[test]
fn torchtitan_async_tp_needs_the_model_compiled() {
    let (model, cluster) = (catalog_model("llama3-8b").unwrap(), cluster());
    let spec = "tp=8,dp=1,mbs=1,gbs=8,sp=on,tp_overlap=on,engine=fsdp";
    let e = parse_inline_plan(&format!("{spec},compile=off"), &model, &cluster).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("compile"), "{e:?}");
    let mut p = plan(spec, &model, &cluster);
    validate(&p, &model, &cluster).unwrap();
    p.compile = Compile::Off;
    let errs = validate(&p, &model, &cluster).unwrap_err();
    let e = errs
        .iter()
        .find(|e| matches!(e, PlanError::TpOverlapEager))
        .unwrap_or_else(|| panic!("{errs:?}"));
    assert!(e.hint().unwrap().contains("tp_comm_overlap off"));
    // Compiled blocks run it; conformed, an eager plan keeps its eager code and loses the
    // overlap.
    p.compile = Compile::Blocks;
    validate(&p, &model, &cluster).unwrap();
    assert!(Runtime::Torchtitan.why_not(&p).is_empty());
    p.compile = Compile::Off;
    let c = Runtime::Torchtitan.conform(&p).unwrap();
    assert!(c.compile == Compile::Off && !c.tp_comm_overlap);
    validate(&c, &model, &cluster).unwrap();
    assert!(
        Runtime::Torchtitan.why_not(&c).is_empty(),
        "{:?}",
        Runtime::Torchtitan.why_not(&c)
    );
}

/// The torchtitan export compiles what hetplan priced compiled and leaves eager what it priced
/// eager; the importer reads it back.
#[test]
fn the_torchtitan_export_and_import_carry_it() {
    let (model, cluster) = (catalog_model("llama3-8b").unwrap(), cluster());
    for (compile, config) in [
        (Compile::On, Some("compile=CompileConfig(enable=True)")),
        (
            Compile::Blocks,
            Some("compile=CompileConfig(enable=True, components=[\"model\"])"),
        ),
        (Compile::Off, None),
    ] {
        let spec = format!("{FSDP},compile={}", compile.name());
        let p = plan(&spec, &model, &cluster);
        let valid = ValidPlan::new(p, &model, &cluster).unwrap();
        let job = Job {
            model: &model,
            cluster: &cluster,
            plan: &valid,
            seq_len: 4096,
        };
        let out = hetplan::export::torchtitan::export(job).unwrap();
        let module = out
            .files
            .iter()
            .find(|f| f.path.ends_with(".py") && f.contents.contains("Trainer.Config("))
            .expect("the config module");
        match config {
            Some(c) => assert!(module.contents.contains(c), "{spec}: {}", module.contents),
            None => assert!(!module.contents.contains("CompileConfig("), "{spec}"),
        }
        let back = TorchtitanJob::parse(&module.contents).unwrap();
        let (imported, _) = back.plan(&model, &cluster, None).unwrap();
        assert_eq!(imported.compile, compile, "{spec}");
    }
    // Another config's `enable=True` is not the compiler's; a compiled loss alone leaves the
    // model's code eager.
    for module in [
        "x = T(local_batch_size=2, checkpoint=CheckpointConfig(enable=True))\n",
        "x = T(local_batch_size=2, compile=CompileConfig(enable=True, components=[\"loss\"]))\n",
    ] {
        let (p, _) = TorchtitanJob::parse(module)
            .unwrap()
            .plan(&model, &cluster, None)
            .unwrap();
        assert_eq!(p.compile, Compile::Off, "{module}");
    }
}
