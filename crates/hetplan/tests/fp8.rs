//! FP8 training (`precision: "fp8"`): the blocks' matrix products at the FP8 peak with their
//! casts, BF16 elsewhere; Transformer Engine's weight copies in memory under Megatron; refused
//! on GPUs without FP8 tensor cores and by engines that do not run it.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, ComputeTimes, LayerShape, Workload};
use hetplan::export::{why_not, Target};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::PlanError;
use hetplan::plan::Precision;

fn shape(precision: Precision) -> LayerShape {
    LayerShape::plain(2, 8192, 1, precision)
}

/// The estimate of the inline `plan` of Llama 3 8B on one node of eight H100s.
fn llama3_8b_on_8_h100(seq_len: u64, plan: &str) -> hetplan::cost::Estimate {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len,
    };
    let p = parse_inline_plan(plan, &model, &cluster).unwrap();
    estimate(w, &w.validate(&p).unwrap(), &Analytic)
}

#[test]
fn fp8_speeds_up_the_blocks_matrix_products_only() {
    let model = catalog_model("llama3-8b").unwrap();
    let h100 = hetplan::gpu::lookup("h100-sxm5-80gb").unwrap();
    let t = |layer, p| Analytic.layer_time(&h100, &model, layer, shape(p));
    let (bf16, fp8) = (t(1, Precision::Bf16), t(1, Precision::Fp8));
    // A block: faster, but not twice (attention, norms and the casts stay), same FLOPs.
    let speedup = (bf16.forward + bf16.backward) / (fp8.forward + fp8.backward);
    assert!(speedup > 1.2 && speedup < 1.8, "{speedup}");
    assert_eq!(bf16.forward_flop, fp8.forward_flop);
    assert_eq!(bf16.attention_forward, fp8.attention_forward);
    // The embedding and the output layer stay BF16.
    let head = model.layers.len() - 1;
    for l in [0, head] {
        assert_eq!(t(l, Precision::Bf16), t(l, Precision::Fp8), "layer {l}");
    }
    // Widths that are not multiples of 16 stay BF16, as torchtitan's converter leaves them
    // (GPT-3 13B's d_model of 5,140: every product of a block has it on one side).
    let gpt3 = catalog_model("gpt3-13b").unwrap();
    let t = |p| Analytic.layer_time(&h100, &gpt3, 1, shape(p));
    for p in [Precision::Fp8, Precision::Fp8Rowwise] {
        assert_eq!(t(Precision::Bf16), t(p), "{p:?}");
    }
}

#[test]
fn fp8_plans_estimate_faster_and_keep_te_weight_copies_under_megatron() {
    let run = |plan: &str| llama3_8b_on_8_h100(4096, plan);
    let base = "tp=2,pp=2,dp=2,mbs=1,gbs=16,ckpt=full";
    let (bf16, fp8) = (run(base), run(&format!("{base},precision=fp8")));
    let speedup = bf16.iteration_time_s / fp8.iteration_time_s;
    assert!(speedup > 1.1 && speedup < 1.8, "{speedup}");
    // Megatron (Transformer Engine) keeps 2 bytes per parameter of the blocks' products.
    let extra = fp8.stages[0].memory.weights.get() - bf16.stages[0].memory.weights.get();
    let block_params = 218_103_808.0; // llama3-8b block: 4096·(4096 + 2·1024 + 4096) + 3·4096·14336
    let blocks = (fp8.stages[0].layers.end - fp8.stages[0].layers.start - 1) as f64;
    let expect = 2.0 * block_params * blocks / 2.0; // tp 2
    assert!(
        (extra - expect).abs() / expect < 1e-9,
        "{extra} vs {expect}"
    );
    // torchtitan/FSDP (torchao Float8) casts at each call and keeps none.
    let fsdp = "dp=8,mbs=1,gbs=16,zero=3,ckpt=full,engine=fsdp";
    let (a, b) = (run(fsdp), run(&format!("{fsdp},precision=fp8")));
    assert_eq!(a.stages[0].memory.weights, b.stages[0].memory.weights);
}

#[test]
fn fp8_is_refused_on_gpus_without_it_and_by_engines_that_do_not_run_it() {
    let model = catalog_model("llama3-8b").unwrap();
    let mixed = catalog_cluster("1x8xh100-sxm5-80gb@400Gbps+1x8xa100-sxm4-80gb@200Gbps").unwrap();
    let err =
        parse_inline_plan("pp=2,dp=8,mbs=1,gbs=16,precision=fp8", &model, &mixed).unwrap_err();
    assert!(
        err.message
            .contains("stage 1 runs on a100-sxm4-80gb (Ampere), which has no FP8"),
        "{err:?}"
    );
    // The same plan from JSON: the typed error, at the stage's devices.
    let mut p = parse_inline_plan("pp=2,dp=8,mbs=1,gbs=16", &model, &mixed).unwrap();
    p.precision = Precision::Fp8;
    let errs = hetplan::plan::validate::validate(&p, &model, &mixed).unwrap_err();
    let e = errs
        .iter()
        .find(|e| matches!(e, PlanError::Fp8Unsupported { stage: 1, .. }))
        .unwrap_or_else(|| panic!("{errs:?}"));
    assert_eq!(e.path(), "stages[1].devices");
    assert!(e.hint().unwrap().contains("bf16"));
    let h100 = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let p = parse_inline_plan("tp=2,pp=2,dp=2,mbs=1,gbs=16,precision=fp8", &model, &h100).unwrap();
    assert!(why_not(Target::Megatron, &model, &p, 4096).is_empty());
    for t in [Target::Deepspeed, Target::Torchtitan] {
        let why = why_not(t, &model, &p, 4096);
        assert!(
            why.iter().any(|r| r.contains("the plan is FP8")),
            "{t:?}: {why:?}"
        );
    }
}

/// Every plan hetplan's planner answers, ranks or offers per engine is in the problem's
/// precision (or, per engine, in what that engine's exporter trains in): the uniform
/// context-parallel starting points once came from an inline spec in BF16 and won the
/// DeepSpeed and torchtitan rows of an FP8 problem.
#[test]
fn the_planner_keeps_the_problems_precision() {
    use hetplan::plan::runtime::planning_engine;
    use hetplan::plan::Engine;
    use hetplan::planners::{self, Limits, Outcome, PlanOptions, PlannerError, Problem, Search};
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    // hetplan's planner on 64 samples of 2,048 tokens in `precision`, its plans' engine `engine`.
    let plan = |precision: Precision, engine: Engine| -> Result<Outcome, PlannerError> {
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 64,
            seq_len: 2048,
            compute: &Analytic,
            options: PlanOptions {
                precision,
                engine,
                ..PlanOptions::default()
            },
        };
        let limits = Limits {
            max_nodes: Some(20_000),
            time: None,
        };
        let mut search = Search::new(limits, &planners::NoClock, &planners::NoProgress);
        planners::by_name("hetplan")
            .unwrap()
            .plan(&problem, &mut search)
    };
    for precision in [Precision::Fp8, Precision::Fp8Rowwise, Precision::Fp16] {
        let out = plan(precision, planning_engine(None, precision)).unwrap();
        assert_eq!(out.plan.precision, precision);
        assert!(out.ranked.iter().all(|r| r.plan.precision == precision));
        for e in &out.per_engine {
            if let Some(p) = &e.plan {
                assert_eq!(p.precision, precision, "{:?}", e.engine);
            }
        }
    }
    // Rowwise FP8 asked of Megatron-behaving plans: said at once, not a search that finds
    // nothing.
    match plan(Precision::Fp8Rowwise, Engine::Megatron) {
        Err(PlannerError::Infeasible(m)) => assert!(m.contains("engine fsdp"), "{m}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
}

#[test]
fn planning_in_fp8_says_at_once_what_cannot_run_it() {
    use hetplan::plan::runtime::Runtime;
    use hetplan::planners::{self, Limits, PlanOptions, PlannerError, Problem, Search};
    let model = catalog_model("llama3-8b").unwrap();
    let run = |cluster: &str, runtime: Option<Runtime>| {
        let cluster = catalog_cluster(cluster).unwrap();
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 16,
            seq_len: 2048,
            compute: &Analytic,
            options: PlanOptions {
                precision: Precision::Fp8,
                runtime,
                ..PlanOptions::default()
            },
        };
        let limits = Limits {
            max_nodes: Some(2_000),
            time: None,
        };
        let mut search = Search::new(limits, &planners::NoClock, &planners::NoProgress);
        planners::by_name("hetplan")
            .unwrap()
            .plan(&problem, &mut search)
    };
    match run("1x8xa100-sxm4-80gb", None) {
        Err(PlannerError::Infeasible(m)) => assert!(m.contains("FP8 tensor cores"), "{m}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
    match run("1x8xh100-sxm5-80gb", Some(Runtime::Deepspeed)) {
        Err(PlannerError::Infeasible(m)) => assert!(m.contains("does not train in FP8"), "{m}"),
        other => panic!("{:?}", other.map(|o| o.plan.summary())),
    }
    // A mixed cluster plans on its FP8 GPUs.
    let out = run(
        "1x8xh100-sxm5-80gb@400Gbps+1x8xa100-sxm4-80gb@200Gbps",
        None,
    )
    .unwrap();
    assert!(
        out.plan.devices().iter().all(|g| g.node == 0),
        "{}",
        out.plan.summary()
    );
}

/// torchao's rowwise recipe (`precision=fp8-rowwise`): between BF16 and per-tensor FP8, as two
/// published measurements of one job put it (Llama 3 8B on 8 H100, FSDP2, per-op selective
/// checkpointing, compiled, one 8k-token sample per GPU: 1.100× BF16 in torchao's float8
/// README, 1.113–1.115× in torchtitan's commit 7a04053); the same memory as per-tensor FP8
/// under FSDP; run by torchtitan and FSDP, not by Megatron's Transformer Engine or DeepSpeed.
#[test]
fn rowwise_fp8_runs_between_bf16_and_per_tensor_fp8_as_measured() {
    use hetplan::plan::runtime::Runtime;
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let base = "dp=8,mbs=1,gbs=8,zero=3,ckpt=ops,engine=fsdp,compile=on";
    let run = |precision: &str| llama3_8b_on_8_h100(8192, &format!("{base},precision={precision}"));
    let (bf16, tensorwise, rowwise) = (run("bf16"), run("fp8"), run("fp8-rowwise"));
    let speedup = bf16.iteration_time_s / rowwise.iteration_time_s;
    assert!(
        (1.10..=1.12).contains(&speedup),
        "rowwise over BF16: {speedup}"
    );
    assert!(tensorwise.iteration_time_s < rowwise.iteration_time_s);
    // A block's FLOPs are the same; its products run slower and cast more.
    let h100 = hetplan::gpu::lookup("h100-sxm5-80gb").unwrap();
    let t = |p| Analytic.layer_time(&h100, &model, 1, shape(p));
    let (a, b) = (t(Precision::Fp8), t(Precision::Fp8Rowwise));
    assert_eq!(a.forward_flop, b.forward_flop);
    assert!(b.forward > a.forward && b.backward > a.backward);
    assert_eq!(
        tensorwise.stages[0].memory.total,
        rowwise.stages[0].memory.total
    );
    // Who runs it, and the plan's name for it.
    for (rt, runs) in [
        (Runtime::Torchtitan, true),
        (Runtime::Fsdp, true),
        (Runtime::Megatron, false),
        (Runtime::Deepspeed, false),
    ] {
        assert_eq!(rt.trains_in(Precision::Fp8Rowwise), runs, "{rt:?}");
    }
    let p = parse_inline_plan(&format!("{base},precision=fp8-rowwise"), &model, &cluster).unwrap();
    assert_eq!(p.precision, Precision::Fp8Rowwise);
    assert_eq!(Precision::Fp8Rowwise.name(), "fp8-rowwise");
    let why = Runtime::Megatron.why_not(&p);
    assert!(why.iter().any(|r| r.contains("rowwise")), "{why:?}");
    // Megatron's exporter refuses it, saying why; so does plan validation under an engine
    // whose FP8 is Transformer Engine's, while the inline form without an engine takes fsdp.
    let why = why_not(Target::Megatron, &model, &p, 8192);
    assert!(why.iter().any(|r| r.contains("FP8-ROWWISE")), "{why:?}");
    let err = parse_inline_plan(
        "dp=8,mbs=1,gbs=8,engine=megatron,precision=fp8-rowwise",
        &model,
        &cluster,
    )
    .unwrap_err();
    assert!(err.message.contains("rowwise"), "{err:?}");
    assert_eq!(
        err.hint.as_deref(),
        Some("engine=fsdp (torchtitan, PyTorch FSDP), or precision=fp8 (per-tensor scales)")
    );
    let p = parse_inline_plan("dp=8,mbs=1,gbs=8,precision=fp8-rowwise", &model, &cluster).unwrap();
    assert_eq!(p.engine, hetplan::plan::Engine::Fsdp);
    assert_eq!(
        hetplan::plan::runtime::planning_engine(None, Precision::Fp8Rowwise),
        hetplan::plan::Engine::Fsdp
    );
}

/// torchtitan runs FP8 by torchao's rowwise recipe only (0.3.0's `Float8LinearConverter`): the
/// export converts the blocks' linears with it and keeps the output layer BF16, as hetplan
/// priced them, and the importer reads it back; a recipe or converter hetplan does not price is
/// a located error. (`tests/engines/check_torchtitan.py` checks the conversion with torchtitan
/// and torchao themselves.)
#[test]
fn torchtitan_exports_and_imports_rowwise_fp8() {
    use hetplan::export::Job;
    use hetplan::import::torchtitan::TorchtitanJob;
    use hetplan::plan::ValidPlan;
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let spec = "dp=8,mbs=1,gbs=16,zero=3,ckpt=ops,engine=fsdp";
    let export = |precision: &str| {
        let p =
            parse_inline_plan(&format!("{spec},precision={precision}"), &model, &cluster).unwrap();
        let valid = ValidPlan::new(p, &model, &cluster).unwrap();
        let job = Job {
            model: &model,
            cluster: &cluster,
            plan: &valid,
            seq_len: 8192,
        };
        hetplan::export::torchtitan::export(job).map(|out| {
            (out.files.into_iter())
                .find(|f| f.path.ends_with(".py"))
                .expect("the config module")
                .contents
        })
    };
    let module = export("fp8-rowwise").unwrap();
    for needed in [
        "Float8LinearConverter.Config(",
        "recipe_name=\"rowwise\"",
        "filter_fqns=[\"lm_head\"]",
        "FP8_RECIPE = \"rowwise\"",
    ] {
        assert!(module.contains(needed), "{needed}: {module}");
    }
    // The importer on a module: its plan's precision, or its error.
    let import = |src: &str| {
        TorchtitanJob::parse(src)
            .unwrap()
            .plan(&model, &cluster, None)
            .map(|(p, _)| p.precision)
    };
    assert_eq!(import(&module).unwrap(), Precision::Fp8Rowwise);
    // BF16 has no converter; per-tensor FP8 is not torchtitan's any more: refused, with why.
    let bf16 = export("bf16").unwrap();
    assert!(!bf16.contains("Float8") && bf16.contains("FP8_RECIPE = None"));
    assert_eq!(import(&bf16).unwrap(), Precision::Bf16);
    match export("fp8") {
        Err(e) => assert!(e.to_string().contains("rowwise"), "{e}"),
        Ok(_) => panic!("per-tensor FP8 exported to torchtitan"),
    }
    // What the importer does not price, each refused at its line: the recipe that keeps the
    // weight gradient in BF16, MX and NVFP4 converters, emulation (software per-tensor FP8,
    // for tests).
    for (edited, says) in [
        (
            module.replace(
                "recipe_name=\"rowwise\"",
                "recipe_name=\"rowwise_with_gw_hp\"",
            ),
            "rowwise_with_gw_hp",
        ),
        (
            module.replace("Float8LinearConverter", "MXFP8LinearConverter"),
            "MXFP8LinearConverter",
        ),
        (
            module.replace(
                "recipe_name=\"rowwise\",",
                "recipe_name=\"rowwise\",\n            emulate=True,",
            ),
            "emulate",
        ),
    ] {
        let e = import(&edited).unwrap_err();
        assert!(e.message.contains(says) && e.line.is_some(), "{e:?}");
    }
    // A module that imports the converter without converting anything trains in BF16.
    let imported =
        format!("from torchtitan.components.quantization import Float8LinearConverter\n{bf16}");
    assert_eq!(import(&imported).unwrap(), Precision::Bf16);
}

/// Megatron's `--fp8-param-gather` (`collective_dtypes.params: fp8`): the blocks' weights are
/// kept in FP8 only — the 2 B per parameter of FP8 copies beside the 16-bit weights are gone —
/// and gathered at 1 B; the export says so; any other engine, precision or a stage without the
/// distributed optimizer is refused with the field and a hint.
#[test]
fn fp8_param_gather_keeps_the_weights_in_fp8_only() {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("2x8xh100-sxm5-80gb@3200Gbps").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let spec = "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=1,engine=megatron,precision=fp8";
    let plain = parse_inline_plan(spec, &model, &cluster).unwrap();
    let mut fp8_params = plain.clone();
    fp8_params.collective_dtypes.params = Some(Precision::Fp8);
    assert!(fp8_params.fp8_params() && !plain.fp8_params());
    assert_eq!(fp8_params.collective_element_bytes().0, 1.0);
    assert_eq!(plain.collective_element_bytes().0, 2.0);
    let e = |p| estimate(w, &w.validate(p).unwrap(), &Analytic);
    let (a, b) = (e(&plain), e(&fp8_params));
    for (x, y) in a.stages.iter().zip(&b.stages) {
        // The FP8 copies: 2 B of the blocks' product weights beside their 16-bit 2 B, less
        // where a stage holds the embedding or the head (16-bit only).
        let (before, after) = (x.memory.weights.get(), y.memory.weights.get());
        let saved = before - after;
        assert!(
            saved > 0.3 * before && saved <= 0.5 * before,
            "{saved} of {before}"
        );
        assert_eq!(x.memory.activations, y.memory.activations);
        // Half the bytes to gather.
        assert!(y.dp_sync.get() < x.dp_sync.get(), "stage {}", x.index);
    }
    let job = hetplan::export::Job {
        model: &model,
        cluster: &cluster,
        plan: &w.validate(&fp8_params).unwrap(),
        seq_len: 4096,
    };
    let files = hetplan::export::megatron::export(job).unwrap().files;
    assert!(files
        .iter()
        .any(|f| f.contents.contains("--fp8-param-gather")));
    let job = hetplan::export::Job {
        plan: &w.validate(&plain).unwrap(),
        ..job
    };
    let files = hetplan::export::megatron::export(job).unwrap().files;
    assert!(!files
        .iter()
        .any(|f| f.contents.contains("--fp8-param-gather")));
    for bad in [
        "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=1,engine=megatron,precision=bf16",
        "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=0,engine=megatron,precision=fp8",
        "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=1,engine=deepspeed,precision=fp8",
    ] {
        let mut p = parse_inline_plan(bad, &model, &cluster).unwrap();
        p.collective_dtypes.params = Some(Precision::Fp8);
        let errs = hetplan::plan::validate::validate(&p, &model, &cluster).unwrap_err();
        let e = (errs.iter())
            .find(|e| matches!(e, PlanError::Fp8ParamGather { .. }))
            .unwrap_or_else(|| panic!("{bad}: {errs:?}"));
        assert_eq!(e.path(), "collective_dtypes.params");
        assert!(e.hint().unwrap().contains("megatron"), "{bad}");
    }
}

/// The gradients' element type (`collective_dtypes.gradients`) reaches Megatron's flags:
/// BF16 training reduces in FP32 unless `--grad-reduce-in-bf16` (what NeMo's recipes set),
/// FP16 training in FP16 unless `--accumulate-allreduce-grads-in-fp32`; a type Megatron has no
/// flag for is a reason not to export, with the field, rather than a run reducing in another
/// type than the estimate priced.
#[test]
fn megatron_exports_the_gradients_type_the_plan_reduces_in() {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("2x8xh100-sxm5-80gb@3200Gbps").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    // The export's files, one after the other, or why Megatron cannot run the plan.
    let exported = |p: &hetplan::Plan| {
        let job = hetplan::export::Job {
            model: &model,
            cluster: &cluster,
            plan: &w.validate(p).unwrap(),
            seq_len: 4096,
        };
        hetplan::export::megatron::export(job)
            .map(|e| {
                (e.files.iter())
                    .map(|f| f.contents.clone())
                    .collect::<String>()
            })
            .map_err(|e| e.to_string())
    };
    let args = |precision: &str, gradients: Option<Precision>| {
        let spec =
            format!("tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=1,engine=megatron,precision={precision}");
        let mut p = parse_inline_plan(&spec, &model, &cluster).unwrap();
        p.collective_dtypes.gradients = gradients;
        exported(&p)
    };
    let bf16 = "--grad-reduce-in-bf16";
    let fp32 = "--accumulate-allreduce-grads-in-fp32";
    for (precision, gradients, flag) in [
        ("bf16", None, None),
        ("bf16", Some(Precision::Fp32), None),
        ("bf16", Some(Precision::Bf16), Some(bf16)),
        ("fp8", Some(Precision::Bf16), Some(bf16)),
        ("fp16", None, None),
        ("fp16", Some(Precision::Fp32), Some(fp32)),
    ] {
        let text = args(precision, gradients).unwrap();
        for f in [bf16, fp32] {
            assert_eq!(
                text.contains(f),
                flag == Some(f),
                "{precision} {gradients:?} {f}"
            );
        }
    }
    // BF16 gradients are priced as such: half the bytes of FP32 to reduce.
    let spec = "tp=2,pp=2,dp=4,mbs=1,gbs=32,zero=1,engine=megatron,precision=bf16";
    let mut p = parse_inline_plan(spec, &model, &cluster).unwrap();
    assert_eq!(p.gradient_dtype(), Precision::Fp32);
    p.collective_dtypes.gradients = Some(Precision::Bf16);
    assert_eq!(p.gradient_dtype(), Precision::Bf16);
    for (precision, gradients) in [
        ("bf16", Precision::Fp16),
        ("fp32", Precision::Bf16),
        ("fp16", Precision::Bf16),
    ] {
        let e = args(precision, Some(gradients)).unwrap_err();
        assert!(e.contains("collective_dtypes.gradients"), "{e}");
    }
    // Megatron-FSDP (ZeRO-3) reduces in the parameters' type unless its own flag says
    // otherwise (`--megatron-fsdp-main-grads-dtype auto`), and the other two flags do not
    // reach it: the export always names the type hetplan priced.
    let spec = "tp=2,dp=8,mbs=1,gbs=32,zero=3,engine=megatron,precision=bf16";
    let mut p = parse_inline_plan(spec, &model, &cluster).unwrap();
    assert!(p.runs_megatron_fsdp());
    assert_eq!(p.gradient_dtype(), Precision::Fp32);
    let text = exported(&p).unwrap();
    assert!(
        text.contains("--megatron-fsdp-main-grads-dtype fp32"),
        "{text}"
    );
    assert!(!text.contains(bf16) && !text.contains(fp32), "{text}");
    for (g, name) in [(Precision::Fp32, "fp32"), (Precision::Bf16, "bf16")] {
        p.collective_dtypes.gradients = Some(g);
        assert_eq!(p.gradient_dtype(), g);
        let text = exported(&p).unwrap();
        assert!(
            text.contains(&format!("--megatron-fsdp-main-grads-dtype {name}")),
            "{text}"
        );
    }
    p.collective_dtypes.gradients = Some(Precision::Fp8);
    let why = why_not(Target::Megatron, &model, &p, 4096);
    assert!(
        why.iter()
            .any(|w| w.contains("--megatron-fsdp-main-grads-dtype")),
        "{why:?}"
    );
}
