//! Context parallelism (issue 12): the plan's `cp`, its validation and sample accounting, what
//! it does to compute, memory and communication in the estimate, the simulator's ring, the
//! lower bound, the engines, and hetplan's planner choosing it for long sequences.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::runtime::Runtime;
use hetplan::plan::validate::{validate, PlanError};
use hetplan::planners::{self, Limits, PlanOptions, Problem, Search};
use hetplan::sim::{simulate, Label, SimOptions};
use hetplan::{Cluster, Model, Plan};

fn llama() -> Model {
    catalog_model("llama3-8b").unwrap()
}

fn mixed() -> Cluster {
    catalog_cluster("1x8xh100-sxm5-80gb@400Gbps+1x8xa100-sxm4-80gb@200Gbps").unwrap()
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

fn est(model: &Model, cluster: &Cluster, seq: u64, spec: &str) -> Estimate {
    let w = Workload {
        model,
        cluster,
        seq_len: seq,
    };
    estimate(
        w,
        &w.validate(&plan(spec, model, cluster)).unwrap(),
        &Analytic,
    )
}

#[test]
fn validation_names_what_context_parallelism_needs() {
    let (model, cluster) = (llama(), mixed());
    // Megatron's meaning of dp: 4 groups of 2 CP replicas per stage, 4 samples per micro-batch.
    let ok = plan("tp=1,pp=2,dp=4,cp=2,mbs=1,gbs=16", &model, &cluster);
    assert!(ok.stages.iter().all(|s| s.cp == 2 && s.dp == 8));
    assert_eq!(ok.micro_batches, 4);
    assert_eq!(ok.stages[0].samples_per_micro_batch(), 4);
    assert_eq!(ok.stages[0].cp_group(5), 4..6);
    validate(&ok, &model, &cluster).unwrap();
    let errs = |f: &dyn Fn(&mut Plan)| {
        let mut p = ok.clone();
        f(&mut p);
        validate(&p, &model, &cluster).unwrap_err()
    };
    let e = errs(&|p| p.stages[0].cp = 3);
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ContextParallelDivides { stage: 0, .. })));
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::ContextParallelStages { stage: 1, .. })));
    assert!(e.iter().any(|e| e.path() == "stages[0].cp"));
    // One replica of a group with another micro-batch size: the group's samples disagree.
    let e = errs(&|p| p.stages[1].micro_batch_sizes[2] = 2);
    assert!(
        e.iter()
            .any(|e| matches!(e, PlanError::ContextParallelReplicas { stage: 1, .. })),
        "{e:?}"
    );
    let e = errs(&|p| p.stages.iter_mut().for_each(|s| s.cp = 0));
    assert!(matches!(e[0], PlanError::ZeroDegree { which: "cp", .. }));
    // The batch counts shared samples once: without cp the same plan carries twice as many.
    let e = errs(&|p| p.stages.iter_mut().for_each(|s| s.cp = 1));
    assert!(e
        .iter()
        .any(|e| matches!(e, PlanError::BatchMismatch { samples: 8, .. })));
    // The inline form places tp·cp·pp GPUs per data-parallel rank.
    let e = parse_inline_plan("pp=2,cp=3,gbs=16", &model, &cluster).unwrap_err();
    assert!(e.message.contains("tp·cp·pp"), "{e}");
    // Ulysses hands each GPU 1/cp of its TP rank's heads: GPT-3 1.3B's 24 do not split 16 ways.
    let gpt = catalog_model("gpt3-1.3b").unwrap();
    let ring = plan("tp=2,cp=8,dp=1,mbs=1,gbs=4", &gpt, &cluster);
    validate(&ring, &gpt, &cluster).unwrap();
    let mut a2a = ring.clone();
    a2a.cp_comm = hetplan::plan::CpComm::AllToAll;
    let e = validate(&a2a, &gpt, &cluster).unwrap_err();
    assert!(
        matches!(e[0], PlanError::ContextParallelHeads { heads: 24, .. }),
        "{e:?}"
    );
    assert!(e[0].hint().unwrap().contains("ring"));
    let e = parse_inline_plan("tp=2,cp=8,dp=1,gbs=4,cp_comm=a2a", &gpt, &cluster).unwrap_err();
    assert!(e.message.contains("tp × cp = 16"), "{e}");
    let e = parse_inline_plan("cp=2,gbs=8,cp_comm=ulysses", &model, &cluster).unwrap_err();
    assert!(e.message.contains("ring"), "{e}");
}

#[test]
fn each_gpu_computes_and_keeps_its_share_of_the_sequence() {
    let (model, cluster) = (llama(), mixed());
    let seq = 32_768;
    // The same samples per iteration on the same 16 GPUs: half the tokens per GPU per
    // micro-batch, twice the micro-batches.
    let a = est(
        &model,
        &cluster,
        seq,
        "tp=1,pp=2,dp=8,mbs=1,gbs=16,zero=1,ckpt=full",
    );
    let b = est(
        &model,
        &cluster,
        seq,
        "tp=1,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=1,ckpt=full",
    );
    let fwd = |e: &Estimate| e.stages[0].forward.get();
    let ratio = fwd(&b) / fwd(&a);
    // Linear layers halve exactly; attention halves in FLOPs, in smaller (slower) blocks.
    assert!(ratio > 0.5 && ratio < 0.56, "forward ratio {ratio}");
    let act = |e: &Estimate| e.stages[0].memory.activations.get();
    let r = act(&b) / act(&a);
    assert!((r - 0.5).abs() < 0.02, "activations ratio {r}");
    // The model FLOPs of the iteration are the same.
    assert!(
        (a.mfu * a.iteration_time_s - b.mfu * b.iteration_time_s).abs() < 1e-9 * a.iteration_time_s
    );
    // Inside a node the ring hides behind attention; across a slow network it does not.
    assert!(b.stages[0].cp_comm.get() < 1e-3 * b.iteration_time_s);
    let slow = catalog_cluster("2x4xa100-sxm4-80gb@25Gbps").unwrap();
    let c = est(
        &model,
        &slow,
        seq,
        "tp=1,pp=1,dp=1,cp=8,mbs=1,gbs=4,zero=3,ckpt=full",
    );
    assert!(c.stages[0].cp_comm.get() > 0.0, "{:?}", c.stages[0]);
}

#[test]
fn the_simulator_runs_the_ring_the_estimate_prices() {
    let model = llama();
    for (cluster, spec, seq) in [
        (
            mixed(),
            "tp=1,pp=2,dp=4,cp=2,mbs=1,gbs=16,zero=1,ckpt=full",
            32_768,
        ),
        (
            mixed(),
            "tp=2,pp=2,dp=1,cp=4,mbs=1,gbs=4,zero=1,sp=on,ckpt=full",
            65_536,
        ),
        (
            catalog_cluster("2x4xa100-sxm4-80gb@25Gbps").unwrap(),
            "tp=1,pp=1,dp=1,cp=8,mbs=1,gbs=4,zero=3,ckpt=full",
            32_768,
        ),
        // Ulysses: all-to-alls inside nodes, and around two nodes on 25 Gbps.
        (
            mixed(),
            "tp=1,pp=2,dp=2,cp=4,cp_comm=a2a,mbs=1,gbs=8,zero=1,ckpt=full",
            32_768,
        ),
        (
            catalog_cluster("2x4xa100-sxm4-80gb@25Gbps").unwrap(),
            "tp=1,pp=1,dp=1,cp=8,cp_comm=a2a,mbs=1,gbs=4,zero=3,ckpt=full",
            32_768,
        ),
    ] {
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: seq,
        };
        let p = plan(spec, &model, &cluster);
        let valid = w.validate(&p).unwrap();
        let e = estimate(w, &valid, &Analytic);
        let sim = simulate(w, &valid, &Analytic, &SimOptions::default()).unwrap();
        let transfers = (sim.spans.iter())
            .filter(|s| matches!(s.label, Label::CpComm { .. }))
            .count();
        assert!(transfers > 0, "{spec}: no CP transfer in the simulation");
        assert!(e.stages[0].cp_comm.get() >= 0.0);
        let diff = sim.iteration_time_s / e.iteration_time_s - 1.0;
        assert!(
            diff.abs() < 0.05,
            "{spec}: simulated {diff:+.3} against the estimate"
        );
    }
}

#[test]
fn the_bound_holds_for_context_parallel_plans() {
    let (model, cluster) = (llama(), mixed());
    for (seq, gbs, spec) in [
        (
            65_536,
            8,
            "tp=1,pp=2,dp=1,cp=8,mbs=1,gbs=8,zero=1,ckpt=full",
        ),
        (
            65_536,
            8,
            "tp=2,pp=1,dp=2,cp=4,mbs=1,gbs=8,zero=3,ckpt=full",
        ),
        (8_192, 32, "tp=1,pp=2,dp=4,cp=2,mbs=2,gbs=32,zero=1"),
    ] {
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: gbs,
            seq_len: seq,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        let bound = planners::bound::lower_bound(&problem);
        let e = est(&model, &cluster, seq, spec);
        assert!(
            bound.iteration_time_s <= e.iteration_time_s,
            "{spec}: bound {} above the plan's {}",
            bound.iteration_time_s,
            e.iteration_time_s
        );
    }
}

#[test]
fn hetplan_chooses_context_parallelism_for_long_sequences() {
    // Llama 3 8B at 256k tokens on 4 H100 and 4 A100, one GPU per node over 25 Gbps, 4
    // sequences per iteration: a whole sequence's activations do not fit one GPU even fully
    // checkpointed; tensor parallelism would all-reduce every layer's 2 GB over the network and
    // a pipeline deep enough to hold them idles in its bubble, while the ring's key and value
    // blocks hide behind attention. (In NVLink nodes of 4 or 8, TP 4 on the H100 alone, whose
    // cuDNN attention runs 3.3 times an A100's FlashAttention-2, beats context parallelism
    // over both types: docs/validation.md §5.)
    let model = llama();
    let cluster = catalog_cluster("4x1xh100-sxm5-80gb@25Gbps+4x1xa100-sxm4-80gb@25Gbps").unwrap();
    let run = |max_cp: u32| {
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 4,
            seq_len: 262_144,
            compute: &Analytic,
            options: PlanOptions {
                max_cp,
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
    let with = run(16).unwrap();
    assert!(with.plan.stages[0].cp > 1, "{}", with.plan.summary());
    assert!(with.estimate.fits);
    assert!(with.notes.iter().any(|n| n.contains("context parallelism")));
    match run(1) {
        Ok(without) => {
            assert!(without.plan.stages.iter().all(|s| s.cp == 1));
            assert!(
                with.estimate.iteration_time_s < 0.8 * without.estimate.iteration_time_s,
                "with CP {:.3} s, without {:.3} s",
                with.estimate.iteration_time_s,
                without.estimate.iteration_time_s
            );
            eprintln!(
                "with CP {:.3} s ({}), without {:.3} s ({})",
                with.estimate.iteration_time_s,
                with.plan.summary(),
                without.estimate.iteration_time_s,
                without.plan.summary()
            );
        }
        Err(e) => eprintln!("without CP: {e}"),
    }
}

#[test]
fn megatron_runs_context_parallelism_the_others_do_not() {
    let (model, cluster) = (llama(), mixed());
    let p = plan(
        "tp=2,pp=2,dp=2,cp=2,mbs=1,gbs=8,zero=1,sp=on",
        &model,
        &cluster,
    );
    assert!(
        Runtime::Megatron.why_not(&p).is_empty(),
        "{:?}",
        Runtime::Megatron.why_not(&p)
    );
    let why = hetplan::export::megatron::reasons(&model, &p, 8_190);
    assert!(why.iter().any(|w| w.contains("2 × 2 chunks")), "{why:?}");
    assert!(hetplan::export::megatron::reasons(&model, &p, 8_192).is_empty());
    for rt in [Runtime::Deepspeed, Runtime::Torchtitan, Runtime::Fsdp] {
        let why = rt.why_not(&p);
        assert!(
            why.iter().any(|w| w.contains("context parallelism")),
            "{rt:?}: {why:?}"
        );
    }
    // Without context parallelism each replica takes whole samples: half the micro-batches.
    let d = Runtime::Deepspeed.conform(&p).unwrap();
    assert!(d.stages.iter().all(|s| s.cp == 1));
    assert_eq!(d.micro_batches, p.micro_batches / 2);
    validate(&d, &model, &cluster).unwrap();
}

/// Over a grid of generated plans (three clusters, TP 1–2, PP 1–2, CP 1–4 by ring or
/// all-to-all, two sequence lengths, two memory settings): every one validates, the lower bound never exceeds its
/// estimate, and its activations per GPU are the CP-1 plan's over cp on the same replicas.
/// The grid is varied: rings inside nodes and across them, exposed and hidden.
#[test]
fn generated_context_parallel_plans_keep_the_bound_and_split_the_activations() {
    let model = llama();
    let clusters = [
        mixed(),
        catalog_cluster("2x4xa100-sxm4-80gb@25Gbps").unwrap(),
        catalog_cluster("4x2xa100-sxm4-40gb@100Gbps").unwrap(),
    ];
    let (mut cases, mut exposed, mut hidden) = (0, 0, 0);
    for (ci, cluster) in clusters.iter().enumerate() {
        let gpus = cluster.num_gpus() as u32;
        for (tp, pp, cp, seq, mem) in plan_grid() {
            let per = tp * pp * cp;
            if !gpus.is_multiple_of(per) {
                continue;
            }
            let dp = gpus / per;
            let gbs = 2 * dp as u64;
            let spec = format!("tp={tp},pp={pp},cp={cp},dp={dp},mbs=1,gbs={gbs},{mem}");
            let p = plan(&spec, &model, cluster);
            validate(&p, &model, cluster).unwrap();
            let e = est(&model, cluster, seq, &spec);
            let problem = Problem {
                model: &model,
                cluster,
                global_batch: gbs,
                seq_len: seq,
                compute: &Analytic,
                options: PlanOptions::default(),
            };
            let bound = planners::bound::lower_bound(&problem).iteration_time_s;
            assert!(
                bound <= e.iteration_time_s,
                "cluster {ci}, {spec} at {seq}: bound {bound} above {}",
                e.iteration_time_s
            );
            if cp > 1 {
                // The same replicas with whole sequences: cp times the samples per micro-batch.
                let whole = format!(
                    "tp={tp},pp={pp},dp={},mbs=1,gbs={},{mem}",
                    dp * cp,
                    gbs * cp as u64
                );
                let w = est(&model, cluster, seq, &whole);
                let r = e.stages[0].memory.activations.get() / w.stages[0].memory.activations.get();
                assert!(
                    (r * cp as f64 - 1.0).abs() < 0.02,
                    "cluster {ci}, {spec}: activations {r} of the whole"
                );
                if e.stages[0].cp_comm.get() > 0.0 {
                    exposed += 1;
                } else {
                    hidden += 1;
                }
            }
            cases += 1;
        }
    }
    assert!(cases >= 40, "{cases} cases");
    assert!(
        exposed >= 3 && hidden >= 3,
        "{exposed} exposed, {hidden} hidden rings"
    );
}

/// (tp, pp, cp, seq, memory options) of the generated plans.
fn plan_grid() -> Vec<(u32, u32, u32, u64, &'static str)> {
    let mut out = Vec::new();
    for tp in [1, 2] {
        for pp in [1, 2] {
            for cp in [1, 2, 4] {
                for seq in [8_192, 32_768] {
                    for mem in [
                        "zero=1,ckpt=full",
                        "zero=3,ckpt=selective",
                        "zero=1,ckpt=full,cp_comm=a2a",
                    ] {
                        out.push((tp, pp, cp, seq, mem));
                    }
                }
            }
        }
    }
    out
}

/// `Analytic::context_parallelism_never_cheaper` on generated shapes: over dense, MoE,
/// sliding-window, latent-attention and unfused-attention models, four GPU types and every
/// shape the planners take, `c` GPUs at `cp = c` together spend at least the GPU-time of one at
/// `cp = 1`, layer by layer, by ring or all-to-all. And the bound that relies on it equals the
/// one that tries every context-parallel shape.
#[test]
fn context_parallelism_never_lowers_the_gpu_time_of_a_sample() {
    use hetplan::cost::compute::{ComputeTimes, LayerShape, LayerTime};
    use hetplan::model::hf::parse_hf_config;
    let hf = |name: &str| {
        let path = format!("{}/tests/data/hf/{name}.json", env!("CARGO_MANIFEST_DIR"));
        parse_hf_config(&std::fs::read_to_string(path).unwrap(), name).unwrap()
    };
    let models = [
        llama(),
        catalog_model("gpt3-1.3b").unwrap(),
        catalog_model("bert-large").unwrap(),
        hf("mixtral-8x7b"),
        hf("gemma-2-9b"),
        hf("deepseek-v3"),
    ];
    let gpus = ["h100-sxm5-80gb", "a100-sxm4-80gb", "v100-sxm2-32gb", "t4"]
        .map(|g| hetplan::gpu::lookup(g).unwrap());
    let (mut checked, mut moe, mut a2a) = (0u64, 0u64, 0u64);
    for model in &models {
        for gpu in &gpus {
            for l in 0..model.layers.len().min(6) {
                let experts = model.layers[l].experts().map_or(1, |(e, _)| e as u32);
                for (mbs, tp, sp, seq) in [
                    (1, 1, false, 2_048),
                    (2, 2, true, 8_192),
                    (4, 4, false, 32_768),
                    (1, 8, true, 131_072),
                ] {
                    for ep in [1, 2.min(experts)] {
                        let shape = |cp: u32, cp_all_to_all: bool| LayerShape {
                            mbs,
                            seq,
                            tp,
                            sequence_parallel: sp,
                            precision: hetplan::plan::Precision::Bf16,
                            ep,
                            etp: None,
                            cp,
                            cp_all_to_all,
                            native_attention: false,
                            weight_casts: hetplan::cost::WeightCasts::None,
                            eager: false,
                            pads_vocabulary: false,
                            op_checkpointing: false,
                            early_stop: false,
                            // Megatron's host loop over the experts, where some are split.
                            host_expert_loop: ep > 1,
                        };
                        let total = |t: LayerTime| (t.forward + t.backward).get();
                        let whole = total(Analytic.layer_time(gpu, model, l, shape(1, false)));
                        for cp in [2, 4, 8] {
                            for all_to_all in [false, true] {
                                let t = total(Analytic.layer_time(
                                    gpu,
                                    model,
                                    l,
                                    shape(cp, all_to_all),
                                ));
                                assert!(
                                    cp as f64 * t >= whole * (1.0 - 1e-12),
                                    "{} layer {l} on {}: {cp} × {t} < {whole}",
                                    model.name,
                                    gpu.name
                                );
                                checked += 1;
                                moe += u64::from(ep > 1);
                                a2a += u64::from(all_to_all);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        checked > 2_000 && moe > 100 && a2a > 1_000,
        "{checked} {moe} {a2a}"
    );

    // The bound with the shortcut equals the bound that tries every context-parallel shape.
    struct Enumerate;
    impl ComputeTimes for Enumerate {
        fn layer_time(
            &self,
            gpu: &hetplan::gpu::GpuSpec,
            model: &Model,
            layer: usize,
            shape: LayerShape,
        ) -> LayerTime {
            Analytic.layer_time(gpu, model, layer, shape)
        }
    }
    let (model, cluster) = (llama(), mixed());
    for seq in [4_096, 65_536] {
        let bound = |compute: &dyn ComputeTimes| {
            let problem = Problem {
                model: &model,
                cluster: &cluster,
                global_batch: 16,
                seq_len: seq,
                compute,
                options: PlanOptions::default(),
            };
            planners::bound::lower_bound(&problem).iteration_time_s
        };
        let (short, every) = (bound(&Analytic), bound(&Enumerate));
        assert!((short - every).abs() <= 1e-9 * every, "{short} {every}");
    }
}
