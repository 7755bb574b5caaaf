//! Expert parallelism (issue 12): the plan's `ep`, its validation, what it does to memory,
//! compute and communication in the estimate, the simulator's all-to-alls, and hetplan's
//! planner choosing it where it pays.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, memory, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::model::hf::parse_hf_config;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::{validate, PlanError};
use hetplan::planners::{self, Limits, PlanOptions, Problem, Search};
use hetplan::sim::{simulate, Label, SimOptions};
use hetplan::{Cluster, Model, Plan};

fn qwen3_moe() -> Model {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/hf/qwen3-30b-a3b.json"
    ))
    .unwrap();
    parse_hf_config(&src, "qwen3-30b-a3b").unwrap()
}

fn mixed() -> Cluster {
    catalog_cluster("2x8xh100-sxm5-80gb@400Gbps+2x8xa100-sxm4-80gb@200Gbps").unwrap()
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

#[test]
fn validation_names_what_expert_parallelism_needs() {
    let (model, cluster) = (qwen3_moe(), mixed());
    let ok = plan("tp=1,pp=4,dp=8,mbs=1,gbs=64,ep=8", &model, &cluster);
    assert!(ok.stages.iter().all(|s| s.ep == 8));
    validate(&ok, &model, &cluster).unwrap();
    let errs = |f: &dyn Fn(&mut Plan)| {
        let mut p = ok.clone();
        f(&mut p);
        validate(&p, &model, &cluster).unwrap_err()
    };
    let e = errs(&|p| p.stages[0].ep = 3);
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertParallelDivides { .. })));
    assert_eq!(e[0].path(), "stages[0].ep");
    // 128 experts: 16 divides them, but not dp = 8.
    let e = errs(&|p| p.stages[1].ep = 16);
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertParallelDivides { .. })));
    let e = errs(&|p| p.stages[2].micro_batch_sizes[3] = 2);
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertParallelReplicas { .. })));
    // A dense model has no experts to split; Mixtral's 8 do not split 16 ways.
    let dense = catalog_model("llama3-8b").unwrap();
    let mut p = plan("tp=1,pp=4,dp=8,mbs=1,gbs=64", &dense, &cluster);
    p.stages[0].ep = 2;
    let e = validate(&p, &dense, &cluster).unwrap_err();
    assert!(matches!(
        e[0],
        PlanError::ExpertParallelWithoutExperts { .. }
    ));
    assert!(e[0].hint().unwrap().contains("ep to 1"));
    let mixtral = catalog_model("mixtral-8x7b").unwrap();
    let mut p = plan("tp=1,pp=2,dp=16,mbs=1,gbs=64", &mixtral, &cluster);
    p.stages[0].ep = 16;
    let e = validate(&p, &mixtral, &cluster).unwrap_err();
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertParallelExperts { experts: 8, .. })));
    // The inline form says so before building anything.
    let e = parse_inline_plan("tp=1,pp=4,dp=8,gbs=64,ep=3", &model, &cluster).unwrap_err();
    assert!(e.message.contains("ep=3 must divide dp=8"), "{e}");
    let e = parse_inline_plan("pp=4,dp=8,gbs=64,ep=2", &dense, &cluster).unwrap_err();
    assert!(e.message.contains("no mixture-of-experts layer"), "{e}");
}

#[test]
fn expert_states_shrink_by_the_expert_parallel_degree() {
    let (model, cluster) = (qwen3_moe(), mixed());
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let peak = |spec: &str| {
        let p = plan(spec, &model, &cluster);
        let e = estimate(w, &w.validate(&p).unwrap(), &Analytic);
        e.per_gpu
            .iter()
            .find(|g| g.stage == 1 && g.replica == 0)
            .unwrap()
            .peak_memory_bytes
    };
    let (without, with) = (
        peak("tp=1,pp=4,dp=8,mbs=1,gbs=64"),
        peak("tp=1,pp=4,dp=8,mbs=1,gbs=64,ep=4"),
    );
    // Stage 1's experts: 3/4 of their weights, gradients and optimizer states leave each GPU
    // (no ZeRO), allocated plus the allocator's share.
    let p = plan("tp=1,pp=4,dp=8,mbs=1,gbs=64", &model, &cluster);
    let (_, expert) = memory::stage_params_split(&model, p.stages[1].layers.iter(), 1);
    let (wb, gb, ob) = memory::state_bytes(p.engine, p.precision);
    let freed = expert * 0.75 * (wb + gb + ob);
    let saved = without - with;
    assert!(
        saved > freed && saved < freed * 1.2,
        "saved {saved:.3e} B, expert states {freed:.3e} B"
    );
    // ZeRO-1 shards the experts' optimizer states over the dp / ep replicas that hold them:
    // per GPU the same as without expert parallelism.
    let (_, _, o1) =
        memory::sharded_states_ep(0.0, expert / 4.0, memory::plan_state_bytes(&p), 1, 8.0, 4.0);
    let (_, _, o0) =
        memory::sharded_states_ep(0.0, expert, memory::plan_state_bytes(&p), 1, 8.0, 1.0);
    assert!((o1 - o0).abs() / o0 < 1e-12);
}

#[test]
fn the_simulator_runs_the_all_to_alls_the_estimate_prices() {
    let cluster = mixed();
    for (model, spec) in [
        (qwen3_moe(), "tp=1,pp=2,dp=16,mbs=1,gbs=64,zero=1,ep=8"),
        (qwen3_moe(), "tp=2,pp=4,dp=4,mbs=1,gbs=64,zero=1,sp=on,ep=4"),
        (
            catalog_model("mixtral-8x7b").unwrap(),
            "tp=1,pp=4,dp=8,mbs=1,gbs=64,zero=1,ep=8",
        ),
    ] {
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 4096,
        };
        let p = plan(spec, &model, &cluster);
        let valid = w.validate(&p).unwrap();
        let est = estimate(w, &valid, &Analytic);
        assert!(est.stages.iter().all(|s| s.ep_comm.get() > 0.0), "{spec}");
        let sim = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
        let a2a = sim
            .spans
            .iter()
            .filter(|s| matches!(s.label, Label::EpAllToAll { .. }))
            .count();
        assert!(a2a > 0, "{spec}: no all-to-all in the simulation");
        let diff = sim.iteration_time_s / est.iteration_time_s - 1.0;
        assert!(
            diff.abs() < 0.05,
            "{spec}: simulated {diff:+.3} against the estimate"
        );
    }
}

#[test]
fn an_expert_parallel_stage_waits_for_its_group_and_its_busiest_expert() {
    // Expert parallelism moves no FLOPs, but the busiest rank's experts (the load factor) and
    // the all-to-alls make a Mixtral micro-batch's work slower where memory is not what binds.
    // Megatron's host issues each local expert's products after a synchronisation
    // (`MOE_HOST_S_PER_LOCAL_EXPERT`, a third of it in the forward): four times fewer local
    // experts win that back, and more.
    let (model, cluster) = (catalog_model("mixtral-8x7b").unwrap(), mixed());
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let t = |spec: &str| {
        let p = plan(spec, &model, &cluster);
        estimate(w, &w.validate(&p).unwrap(), &Analytic)
    };
    let (a, b) = (
        t("tp=2,pp=4,dp=4,mbs=1,gbs=64,zero=1"),
        t("tp=2,pp=4,dp=4,mbs=1,gbs=64,zero=1,ep=4"),
    );
    let moe_blocks = (a.stages[0].layers.iter())
        .filter(|&l| model.layers[l].ops.iter().any(|o| o.is_expert()))
        .count() as f64;
    assert!(moe_blocks >= 8.0, "{moe_blocks}");
    let host = |local_experts: f64| {
        hetplan::cost::constants::MOE_HOST_S_PER_LOCAL_EXPERT / 3.0 * local_experts * moe_blocks
    };
    let (fa, fb) = (a.stages[0].forward.get(), b.stages[0].forward.get());
    assert!(fb - host(2.0) > fa - host(8.0), "{fa} {fb}");
    assert!(fb < fa, "{fa} {fb}");
    assert!(b.peak_memory_bytes < a.peak_memory_bytes);
}

#[test]
fn the_busiest_experts_load_leaves_the_hosts_loop_alone() {
    // Without a capacity factor the busiest expert rank does `MOE_EP_LOAD_FACTOR` times the
    // even share of the expert work: the layer's GPU time grows by f, the same for every engine
    // (torchtitan's shows it), but Megatron's host loop over the local experts is no GPU work.
    let (model, cluster) = (catalog_model("mixtral-8x7b").unwrap(), mixed());
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let forward = |spec: &str| {
        let p = plan(spec, &model, &cluster);
        let l = (p.stages[0].layers.iter())
            .position(|l| model.layers[l].ops.iter().any(|o| o.is_expert()))
            .unwrap();
        hetplan::cost::layer_costs(w, &p, &Analytic, 0, 0)[l].forward
    };
    let base = "tp=2,pp=4,dp=4,mbs=1,gbs=64,zero=1,ep=4";
    let (gd, g1) = (
        forward(&format!("{base},engine=fsdp")),
        forward(&format!("{base},engine=fsdp,capacity=1")),
    );
    let f = gd / g1;
    assert!(f > 1.05 && f < 1.25, "{f}");
    let (md, m1) = (forward(base), forward(&format!("{base},capacity=1")));
    // Two local experts (8 over EP 4), a third of their host time in the forward.
    let h = hetplan::cost::constants::MOE_HOST_S_PER_LOCAL_EXPERT * 2.0 / 3.0;
    let want = (m1 - h) * f + h;
    assert!((md - want).abs() < 1e-9 * want, "{md} against {want}");
    assert!(md < m1 * f - 0.5 * h * (f - 1.0));
}

#[test]
fn hetplan_chooses_expert_parallelism_where_it_pays() {
    // Qwen3-30B-A3B's 128 small experts on 32 H100 and 32 A100 joined by 50 Gbps: more GPUs
    // than a pipeline of its 48 layers keeps busy, so replicas, and every replica holding every
    // expert reduces every expert's gradients over the network (in FP32, Megatron's); split over
    // four replicas they are a quarter, and so are the local experts whose products Megatron's
    // host issues one by one (`MOE_HOST_S_PER_LOCAL_EXPERT`): 6.69 s against 13.39 s (3.33 s
    // against 3.64 s before the host's loop was priced). On 32 of these GPUs at 25 Gbps it was
    // 5.74 s against 6.30 s until the uniform starts split their layers by speed: a pipeline of
    // 2-GPU stages over every GPU, with no replicas to reduce over, took 5.73 s without expert
    // parallelism, and the search with it ended there too.
    let (with, without) =
        with_and_without_ep("4x8xh100-sxm5-80gb@50Gbps+4x8xa100-sxm4-80gb@50Gbps");
    assert!(without.plan.stages.iter().all(|s| s.ep == 1));
    assert!(
        with.plan.stages.iter().any(|s| s.ep > 1),
        "{}",
        with.plan.summary()
    );
    assert!(
        with.estimate.iteration_time_s < 0.97 * without.estimate.iteration_time_s,
        "with EP {:.3} s, without {:.3} s",
        with.estimate.iteration_time_s,
        without.estimate.iteration_time_s
    );
    assert!(with.notes.iter().any(|n| n.contains("expert parallelism")));
    eprintln!(
        "with EP {:.3} s ({}), without {:.3} s ({})",
        with.estimate.iteration_time_s,
        with.plan.summary(),
        without.estimate.iteration_time_s,
        without.plan.summary()
    );
}

#[test]
fn allowing_expert_parallelism_never_makes_hetplans_answer_slower() {
    // The space with expert parallelism holds the space without. At 50 Gbps the search that
    // took expert-parallel moves as soon as they helped ended at 5.34 s where the one without
    // them ended at 5.12 s; it now takes them at a local optimum of the other moves.
    let (with, without) =
        with_and_without_ep("2x8xh100-sxm5-80gb@50Gbps+2x8xa100-sxm4-80gb@50Gbps");
    assert!(
        with.estimate.iteration_time_s <= without.estimate.iteration_time_s * (1.0 + 1e-9),
        "with EP {:.3} s, without {:.3} s",
        with.estimate.iteration_time_s,
        without.estimate.iteration_time_s
    );
}

/// hetplan's answers for Qwen3-30B-A3B on `cluster` (a catalog form), with expert parallelism
/// allowed (up to 64) and without, under a node limit: (with, without).
fn with_and_without_ep(cluster: &str) -> (planners::Outcome, planners::Outcome) {
    let model = qwen3_moe();
    let cluster = catalog_cluster(cluster).unwrap();
    let run = |max_ep: u32| {
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 256,
            seq_len: 4096,
            compute: &Analytic,
            options: PlanOptions {
                max_ep,
                ..PlanOptions::default()
            },
        };
        let limits = Limits {
            max_nodes: Some(100_000),
            time: None,
        };
        let mut search = Search::new(limits, &planners::NoClock, &planners::NoProgress);
        planners::by_name("hetplan")
            .unwrap()
            .plan(&problem, &mut search)
            .unwrap()
    };
    (run(64), run(1))
}

#[test]
fn engines_take_one_expert_parallel_degree_or_none() {
    use hetplan::plan::runtime::Runtime;
    let (model, cluster) = (qwen3_moe(), mixed());
    let mut p = plan("tp=2,pp=2,dp=8,mbs=1,gbs=64,ep=4", &model, &cluster);
    p.stages[1].ep = 2;
    validate(&p, &model, &cluster).unwrap();
    let why = Runtime::Megatron.why_not(&p);
    assert!(
        why.iter().any(|w| w.contains("one expert-parallel degree")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|w| w.contains("sequence parallelism")),
        "{why:?}"
    );
    let m = Runtime::Megatron.conform(&p).unwrap();
    assert!(m.stages.iter().all(|s| s.ep == 2 && s.sequence_parallel));
    assert!(
        Runtime::Megatron.why_not(&m).is_empty(),
        "{:?}",
        Runtime::Megatron.why_not(&m)
    );
    validate(&m, &model, &cluster).unwrap();
    let why = Runtime::Deepspeed.why_not(&p);
    assert!(
        why.iter().any(|w| w.contains("Megatron and torchtitan")),
        "{why:?}"
    );
    let d = Runtime::Deepspeed.conform(&p).unwrap();
    assert!(d.stages.iter().all(|s| s.ep == 1));
}

#[test]
fn a_capacity_factor_caps_the_busiest_experts_load() {
    // Token dropping at capacity 1.0: no rank takes more than its even share, so the EP plan
    // sheds the load factor (1.25) it carries when routing is dropless; the simulator agrees.
    let (model, cluster) = (catalog_model("mixtral-8x7b").unwrap(), mixed());
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let run = |spec: &str| {
        let p = plan(spec, &model, &cluster);
        let valid = w.validate(&p).unwrap();
        let est = estimate(w, &valid, &Analytic);
        let sim = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
        (est.iteration_time_s, sim.iteration_time_s)
    };
    let base = "tp=1,pp=4,dp=8,mbs=1,gbs=64,zero=1,ep=8";
    let (dropless, _) = run(base);
    let (dropping, sim) = run(&format!("{base},capacity=1.0"));
    assert!(dropping < 0.95 * dropless, "{dropping} vs {dropless}");
    assert!((sim / dropping - 1.0).abs() < 0.05);
    // A capacity above the load factor changes nothing.
    let (loose, _) = run(&format!("{base},capacity=2.0"));
    assert_eq!(loose, dropless);
    let e = parse_inline_plan(&format!("{base},capacity=0"), &model, &cluster).unwrap_err();
    assert!(e.message.contains("positive"), "{e}");
    let mut p = plan(base, &model, &cluster);
    p.moe_capacity_factor = Some(-1.0);
    let e = validate(&p, &model, &cluster).unwrap_err();
    assert_eq!(e[0].path(), "moe_capacity_factor");
}

/// Expert tensor parallelism below TP (Megatron's MoE parallel folding): the experts split over
/// `etp` GPUs, expert ranks of `etp` consecutive GPUs, `ep` of them exchanging tokens. Validation
/// says what it needs; the experts' memory per GPU follows `ep · etp / tp`; the FLOPs do not
/// change; the simulator runs the folded all-to-alls as the estimate prices them.
#[test]
fn expert_tensor_parallelism_folds_the_tp_ranks_into_expert_ranks() {
    let (model, cluster) = (qwen3_moe(), mixed());
    // 8 replicas of TP 2: 16 expert ranks with etp 1, so ep 16 fits where replicas allow 8.
    let folded = plan(
        "tp=2,pp=2,dp=8,mbs=1,gbs=32,sp=on,ep=16,etp=1",
        &model,
        &cluster,
    );
    assert!(folded.stages.iter().all(|s| s.etp == Some(1) && s.ep == 16));
    validate(&folded, &model, &cluster).unwrap();
    let st = &folded.stages[0];
    // TP rank 1 of replica 3 is GPU 7 of the stage: expert rank 7 of the first group of 16.
    let peers = st.expert_peers(3, 1);
    assert_eq!(peers.len(), 16);
    assert_eq!(peers[7], st.replica(3)[1]);
    assert_eq!(st.expert_replicas(3), 0..8);
    let errs = |f: &dyn Fn(&mut Plan)| {
        let mut p = folded.clone();
        f(&mut p);
        validate(&p, &model, &cluster).unwrap_err()
    };
    let e = errs(&|p| p.stages[0].sequence_parallel = false);
    assert!(
        matches!(&e[0], PlanError::ExpertTensorParallel { reason, .. } if reason.contains("sequence parallelism")),
        "{e:?}"
    );
    assert_eq!(e[0].path(), "stages[0].etp");
    let e = errs(&|p| p.stages[1].etp = Some(3));
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertTensorParallel { etp: 3, .. })));
    // Without the folding, 16 does not divide the 8 replicas.
    let e = errs(&|p| p.stages[1].etp = None);
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ExpertParallelDivides { .. })));

    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 4096,
    };
    let run = |spec: &str| {
        let p = plan(spec, &model, &cluster);
        let valid = w.validate(&p).unwrap();
        (estimate(w, &valid, &Analytic), valid)
    };
    let expert_bytes = |e: &hetplan::cost::Estimate| e.stages[0].memory.weights.get();
    let (plain, _) = run("tp=2,pp=2,dp=8,mbs=1,gbs=32,sp=on,ep=4");
    let (same_share, _) = run("tp=2,pp=2,dp=8,mbs=1,gbs=32,sp=on,ep=8,etp=1");
    let (half_share, valid) = run("tp=2,pp=2,dp=8,mbs=1,gbs=32,sp=on,ep=16,etp=1");
    // ep 4 at etp 2 and ep 8 at etp 1 leave each GPU a quarter of its TP rank's experts.
    let r = expert_bytes(&same_share) / expert_bytes(&plain);
    assert!((r - 1.0).abs() < 1e-9, "{r}");
    assert!(expert_bytes(&half_share) < 0.75 * expert_bytes(&plain));
    // The same FLOPs, in other GEMM shapes: MFU × time is the model's FLOPs over the peak.
    let flops = |e: &hetplan::cost::Estimate| e.mfu * e.iteration_time_s;
    assert!((flops(&plain) / flops(&half_share) - 1.0).abs() < 1e-9);
    let sim = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
    let diff = sim.iteration_time_s / half_share.iteration_time_s - 1.0;
    assert!(
        diff.abs() < 0.05,
        "simulated {diff:+.3} against the estimate"
    );
    assert!(sim
        .spans
        .iter()
        .any(|s| matches!(s.label, Label::EpAllToAll { .. })));
}

/// A profile's mixture-of-experts samples are read at the stage's expert-parallel degree
/// (`python -m hetplan.profile --ep`); dense layers of the same stage at EP 1; an expert TP
/// other than the TP degree was not measured, so the analytic model prices it.
#[test]
fn measured_moe_layers_are_read_at_the_stages_ep_degree() {
    use hetplan::cost::{Analytic, ComputeTimes, LayerShape, Profiled};
    use hetplan::plan::Precision;
    use hetplan::profile::{ProfileDb, ProfileIndex};
    let model = hetplan::model::catalog::catalog_model("mixtral-8x7b").unwrap();
    let gpu = hetplan::gpu::lookup("a100-sxm4-80gb").unwrap();
    let db = ProfileDb::parse(
        r#"{"format_version": 1, "profiles": [{"gpu": "a100-80gb", "model": "mixtral-8x7b",
            "layers": [
              {"layer": 0, "tp": 1, "mbs": 1, "forward": 0.001, "backward": 0.002},
              {"layer": "transformer", "tp": 1, "mbs": 1, "forward": 1.0, "backward": 2.0},
              {"layer": "transformer", "tp": 1, "ep": 4, "mbs": 1, "forward": 0.5, "backward": 1.0}
            ]}]}"#,
    )
    .unwrap();
    let index = ProfileIndex::new(&db);
    let profiled = Profiled {
        index: &index,
        interpolation: Default::default(),
    };
    let shape = |ep, etp| LayerShape {
        mbs: 1,
        seq: 4096,
        tp: 1,
        sequence_parallel: false,
        precision: Precision::Bf16,
        ep,
        etp,
        cp: 1,
        cp_all_to_all: false,
        native_attention: false,
        weight_casts: hetplan::cost::WeightCasts::None,
        eager: false,
        pads_vocabulary: false,
        op_checkpointing: false,
        early_stop: false,
        // A measured time stands as measured; the analytic fallback adds the host loop.
        host_expert_loop: true,
    };
    let fwd = |layer, ep, etp| {
        profiled
            .layer_time(&gpu, &model, layer, shape(ep, etp))
            .forward
            .get()
    };
    assert_eq!(fwd(1, 1, None), 1.0);
    assert_eq!(fwd(1, 4, None), 0.5);
    // The embedding has no experts: its EP 1 sample, whatever the stage's degree.
    assert_eq!(fwd(0, 4, None), 0.001);
    // Not measured at EP 2, nor at expert TP 2 under TP 1: the analytic model's times.
    let analytic = |ep, etp| {
        Analytic
            .layer_time(&gpu, &model, 1, shape(ep, etp))
            .forward
            .get()
    };
    assert_eq!(fwd(1, 2, None), analytic(2, None));
    assert_eq!(fwd(1, 4, Some(2)), analytic(4, Some(2)));
    // The database writes `ep` only where it is not 1.
    let json = db.to_json();
    assert_eq!(json.matches("\"ep\"").count(), 1, "{json}");
}
