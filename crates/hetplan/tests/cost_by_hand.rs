//! The cost model against numbers worked out by hand (issue 2 §10).

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::model::layerlist::parse_layer_list;
use hetplan::model::TransformerConfig;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::ValidPlan;
use hetplan::{Cluster, Model};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
// Constants of the model that the expectations below are written with (cost/constants.rs).
const A100_PEAK: f64 = 312e12;
const GEMM_EFF: f64 = 0.75;
const OVERHEAD: f64 = 4e-6;
const A100_HBM: f64 = 2039e9;
const HBM_EFF: f64 = 0.8;
const NVLINK: f64 = 300e9;
const P2P_EFF: f64 = 0.85;
const LATENCY_INTRA: f64 = 5e-6;

fn two_layers() -> Model {
    parse_layer_list(
        r#"
name = "two"
[[layer]]
name = "l"
count = 2
params = 1000000
forward_flops = 1e12
activation_bytes = "1 MiB"
output_bytes = "1 MiB"
"#,
        false,
    )
    .unwrap()
}

fn run(model: &Model, cluster: &Cluster, spec: &str) -> Estimate {
    let plan = parse_inline_plan(spec, model, cluster).unwrap();
    let plan = ValidPlan::new(plan, model, cluster).unwrap();
    estimate(
        Workload {
            model,
            cluster,
            seq_len: 1,
        },
        &plan,
        &Analytic,
    )
}

/// Two pipeline stages of one layer each on two GPUs of one node, 4 micro-batches of 1 sample.
/// tᵢ = fwd + bwd + one 1 MiB send; d = the Adam step over 10⁶ parameters.
/// T = (m − 1)·max t + Σ t + max(d₀, d₁ − t₀) = 3t + 2t + d.
#[test]
fn two_stage_1f1b_pipeline() {
    let model = two_layers();
    let cluster = catalog_cluster("1x2xa100-80gb").unwrap();
    let e = run(&model, &cluster, "pp=2,dp=1,mbs=1,gbs=4");
    let fwd = 1e12 / (A100_PEAK * GEMM_EFF) + OVERHEAD;
    let send = 1048576.0 / (NVLINK * P2P_EFF) + LATENCY_INTRA;
    let t = 3.0 * fwd + send;
    let d = 1e6 * 30.0 / (A100_HBM * HBM_EFF);
    let expect = 3.0 * t + 2.0 * t + d;
    assert!(
        (e.iteration_time_s - expect).abs() < 1e-9,
        "{} vs {expect}",
        e.iteration_time_s
    );
    // Bubble: 1 − Σ m·tᵢ / (S·T).
    let bubble = 1.0 - 2.0 * 4.0 * t / (2.0 * expect);
    assert!((e.bubble_fraction - bubble).abs() < 1e-9);
}

/// ZeRO shards the mixed-precision Adam state per parameter over the DP group: stage 1 the 12
/// optimizer bytes, stage 2 also the gradient bytes, stage 3 also the weights. The gradients
/// are 2 B under FSDP and DeepSpeed, 4 B under Megatron, which accumulates BF16 gradients in
/// FP32 (megatron/training/arguments.py).
#[test]
fn zero_stages_shard_model_states() {
    let model = two_layers();
    let cluster = catalog_cluster("1x4xa100-80gb").unwrap();
    let p = 2e6; // two layers of 10⁶ parameters, one stage
    for (engine, gb) in [("fsdp", 2.0), ("deepspeed", 2.0), ("megatron", 4.0)] {
        for (zero, (w, g, o)) in [
            (0, (2.0 * p, gb * p, 12.0 * p)),
            (1, (2.0 * p, gb * p, 3.0 * p)),
            (2, (2.0 * p, gb / 4.0 * p, 3.0 * p)),
            (3, (0.5 * p, gb / 4.0 * p, 3.0 * p)),
        ] {
            let spec = format!("dp=4,mbs=1,gbs=4,zero={zero},engine={engine}");
            let e = run(&model, &cluster, &spec);
            let m = &e.stages[0].memory;
            assert_eq!(m.weights.get(), w, "{spec} weights");
            assert_eq!(m.gradients.get(), g, "{spec} gradients");
            assert_eq!(m.optimizer.get(), o, "{spec} optimizer");
        }
    }
}

/// Activation memory of a GPT block at tp = 2 without sequence parallelism and no dropout,
/// flash attention: 32·h bytes per token, of which 8·h replicated (norm inputs, two
/// column-GEMM inputs) and 24·h split (Korthikanti et al. 2022 §4.2 without masks).
/// 1F1B stage 0 of 2 holds min(2, m) = 2 micro-batches.
#[test]
fn activation_memory_of_a_block_under_tp() {
    let cfg = TransformerConfig::gpt("t", 2, 1024, 16, 2048);
    let model = cfg.build();
    let cluster = catalog_cluster("1x4xa100-80gb").unwrap();
    // Stage 0 holds the embedding and block 0; the layer split gives it layers 0..2.
    let plan = parse_inline_plan("tp=2,pp=2,dp=1,mbs=1,gbs=4", &model, &cluster).unwrap();
    assert_eq!(plan.stages[0].layers.end, 2);
    let plan = ValidPlan::new(plan, &model, &cluster).unwrap();
    let e = estimate(
        Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 2048,
        },
        &plan,
        &Analytic,
    );
    let h = 1024.0;
    let tokens = 2048.0;
    let per_mb = tokens * (8.0 * h + 24.0 * h / 2.0);
    let got = e.stages[0].memory.activations.get();
    assert!(
        (got - 2.0 * per_mb).abs() < 1.0,
        "{got} vs {}",
        2.0 * per_mb
    );
}

/// More stages hold fewer micro-batches: the last 1F1B stage holds one.
#[test]
fn last_stage_holds_one_micro_batch() {
    let model = two_layers();
    let cluster = catalog_cluster("1x2xa100-80gb").unwrap();
    let e = run(&model, &cluster, "pp=2,dp=1,mbs=1,gbs=8");
    // Layer-list activations: 1 MiB per sample and layer; stage 0 holds 2, stage 1 holds 1.
    assert_eq!(e.stages[0].memory.activations.get(), 2.0 * 1048576.0);
    assert_eq!(e.stages[1].memory.activations.get(), 1048576.0);
    // The runtime reserve and allocator overhead come on top (1 GiB + 7%), with NCCL's
    // buffers: on two A100s (NVLink, the link NCCL's figures were measured on) Megatron's
    // pipeline group, its model-parallel group (TP × PP = 2) and the job's default group,
    // three pairs of 544 MB.
    let m = &e.stages[1].memory;
    let allocated = m.weights.get()
        + m.gradients.get()
        + m.optimizer.get()
        + m.activations.get()
        + m.temporary.get();
    let runtime = GIB + 3.0 * 544e6;
    assert!(
        (m.runtime.get() - runtime).abs() < 1.0,
        "{}",
        m.runtime.get()
    );
    assert!((m.total.get() - (allocated * 1.07 + runtime)).abs() < 1.0);
}
