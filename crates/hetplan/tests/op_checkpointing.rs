//! Op-level selective checkpointing (`Recompute::Ops`, inline `ckpt=ops`, JSON `"ops"`):
//! torchtitan's policy, which keeps the attention core's output and every other matrix
//! product's and recomputes the rest of each block. What a Llama block keeps and recomputes,
//! the memory and time it comes to between no checkpointing and full, that only PyTorch's own
//! engine runs it, and that torchtitan's `SelectiveAC` is read and written as it; and that
//! full checkpointing, as every engine runs it, recomputes the transformer layers and not the
//! embedding or the head. Their agreement with measured memory is in `tests/published.rs`.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::compute::{ComputeTimes, LayerShape};
use hetplan::cost::{estimate, memory, Analytic, Estimate};
use hetplan::model::catalog::catalog_model;
use hetplan::model::{LayerKind, OpKind};
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::validate::{validate, PlanError};
use hetplan::plan::{Engine, Precision, Recompute, Stage};
use hetplan::{Cluster, Model, Plan};

const SEQ: u64 = 8192;

fn setup() -> (Model, Cluster) {
    (
        catalog_model("llama3-8b").unwrap(),
        catalog_cluster("1x8xh100-sxm5-80gb").unwrap(),
    )
}

fn plan(spec: &str, model: &Model, cluster: &Cluster) -> Plan {
    parse_inline_plan(spec, model, cluster).unwrap()
}

/// The first stage of the plan `spec`, holding the model's first transformer block alone, and
/// that block's index.
fn first_block_alone(model: &Model, cluster: &Cluster, spec: &str) -> (Stage, usize) {
    let mut st = plan(spec, model, cluster).stages[0].clone();
    let b = (model.layers.iter())
        .position(|l| l.kind == LayerKind::Transformer)
        .unwrap();
    st.layers = hetplan::plan::LayerRange {
        start: b,
        end: b + 1,
    };
    (st, b)
}

fn est(model: &Model, cluster: &Cluster, p: &Plan) -> Estimate {
    let w = hetplan::cost::Workload {
        model,
        cluster,
        seq_len: SEQ,
    };
    estimate(w, &w.validate(p).unwrap(), &Analytic)
}

#[test]
fn a_llama_block_keeps_every_other_product_and_the_attention_output() {
    let (model, _) = setup();
    let block = (model.layers.iter())
        .find(|l| l.kind == LayerKind::Transformer)
        .unwrap();
    let ck: Vec<_> = block.op_checkpointing().unwrap().collect();
    assert_eq!(ck.len(), block.ops.len());
    let of = |name: &str| {
        let i = block.ops.iter().position(|o| o.name == name).unwrap();
        ck[i]
    };
    // Products in forward order: QKV (1, fused as hetplan and its export run it) kept, the
    // output projection (2) recomputed, w1 (3) kept, w3 (4) recomputed, w2 (5) kept.
    let qkv = of("qkv");
    assert_eq!(
        (qkv.recomputed, qkv.kept_bytes_per_token),
        (0.0, 2.0 * 6144.0)
    );
    assert!(qkv.kept_sharded && !qkv.unread);
    let proj = of("proj");
    assert_eq!((proj.recomputed, proj.kept_bytes_per_token), (1.0, 0.0));
    let fc1 = of("fc1");
    assert_eq!(
        (fc1.recomputed, fc1.kept_bytes_per_token),
        (0.5, 2.0 * 14336.0)
    );
    // w2's output feeds only the residual add, whose backward does not read it.
    let fc2 = of("fc2");
    assert_eq!(
        (fc2.recomputed, fc2.kept_bytes_per_token),
        (0.0, 2.0 * 4096.0)
    );
    assert!(fc2.unread && !fc2.kept_sharded);
    // The attention kernel's output and its FP32 log-sum-exp per head, never recomputed.
    let attn = of("attention");
    assert_eq!(
        (attn.recomputed, attn.kept_bytes_per_token),
        (0.0, 2.0 * 4096.0 + 4.0 * 32.0)
    );
    // Norms, the rotary embedding, SwiGLU and the residual adds run again.
    for (op, c) in block.ops.iter().zip(&ck) {
        if matches!(op.kind, OpKind::Elementwise { .. }) {
            assert_eq!(
                (c.recomputed, c.kept_bytes_per_token),
                (1.0, 0.0),
                "{}",
                op.name
            );
        }
    }
    // torchtitan checkpoints its blocks only.
    assert!(model.layers[0].op_checkpointing().is_none());
    assert!(model.layers.last().unwrap().op_checkpointing().is_none());
}

#[test]
fn a_mixture_of_experts_recomputes_its_experts_and_router() {
    let model = catalog_model("mixtral-8x7b").unwrap();
    let block = (model.layers.iter())
        .find(|l| l.kind == LayerKind::Transformer)
        .unwrap();
    for (op, c) in block.ops.iter().zip(block.op_checkpointing().unwrap()) {
        if op.is_expert() || op.name == "router" {
            assert_eq!(
                (c.recomputed, c.kept_bytes_per_token),
                (1.0, 0.0),
                "{}",
                op.name
            );
        }
    }
}

#[test]
fn it_keeps_less_than_no_checkpointing_and_recomputes_less_than_full() {
    let (model, cluster) = setup();
    let at = |ckpt: &str| {
        est(
            &model,
            &cluster,
            &plan(
                &format!("dp=8,mbs=2,gbs=16,zero=3,ckpt={ckpt},engine=fsdp"),
                &model,
                &cluster,
            ),
        )
    };
    let (none, ops, full) = (at("none"), at("ops"), at("full"));
    assert!(none.peak_memory_bytes > ops.peak_memory_bytes);
    assert!(ops.peak_memory_bytes > full.peak_memory_bytes);
    assert!(none.iteration_time_s < ops.iteration_time_s);
    assert!(ops.iteration_time_s < full.iteration_time_s);
    // A third of the products (the output projection and w3: 75.5M of 218M weights a block)
    // and the elementwise ops: well under half the cost of recomputing everything.
    let extra = (ops.iteration_time_s - none.iteration_time_s)
        / (full.iteration_time_s - none.iteration_time_s);
    assert!((0.2..0.5).contains(&extra), "{extra:.3}");
}

#[test]
fn a_blocks_activations_are_its_input_and_what_the_policy_keeps() {
    let (model, cluster) = setup();
    let (st, b) = first_block_alone(
        &model,
        &cluster,
        "dp=8,mbs=1,gbs=8,zero=3,ckpt=ops,engine=fsdp",
    );
    let tokens = SEQ as f64;
    let kept = |eager: bool| {
        memory::micro_batch_activations(&model, &st, 1, 1, SEQ, Precision::Bf16, eager, true, false)
            .0
    };
    // Input 4,096, QKV 6,144, attention output 4,096 (+ 32 FP32), w1 14,336, at 2 B; eager
    // code keeps w2's output too (4,096).
    let compiled = tokens * (2.0 * (4096.0 + 6144.0 + 4096.0 + 14336.0) + 4.0 * 32.0);
    assert!(
        (kept(false) / compiled - 1.0).abs() < 1e-12,
        "{}",
        kept(false)
    );
    let eager = compiled + tokens * 2.0 * 4096.0;
    assert!((kept(true) / eager - 1.0).abs() < 1e-12, "{}", kept(true));
    // The recomputed forward is between none of the block's and all of it.
    let gpu = &cluster.gpu_types[0];
    let shape = LayerShape {
        op_checkpointing: true,
        ..LayerShape::plain(1, SEQ, 1, Precision::Bf16)
    };
    let lt = Analytic.layer_time(gpu, &model, b, shape);
    // Priced only where a stage checkpoints op by op.
    let plain = Analytic.layer_time(
        gpu,
        &model,
        b,
        LayerShape::plain(1, SEQ, 1, Precision::Bf16),
    );
    assert_eq!(plain.op_checkpoint_forward.get(), 0.0);
    assert_eq!(plain.forward, lt.forward);
    let share = lt.op_checkpoint_forward.get() / lt.forward.get();
    assert!((0.2..0.5).contains(&share), "{share:.3}");
}

#[test]
fn only_pytorchs_engine_checkpoints_op_by_op() {
    let (model, cluster) = setup();
    for (name, engine) in [
        ("megatron", Engine::Megatron),
        ("deepspeed", Engine::Deepspeed),
    ] {
        let spec = format!("dp=8,mbs=1,gbs=8,zero=1,ckpt=ops,engine={name}");
        let err = parse_inline_plan(&spec, &model, &cluster).unwrap_err();
        assert!(err.to_string().contains("ckpt"), "{err}");
        let mut p = plan("dp=8,mbs=1,gbs=8,zero=1,ckpt=full", &model, &cluster);
        p.engine = engine;
        p.stages[0].recompute = Recompute::Ops;
        let errs = validate(&p, &model, &cluster).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| matches!(e, PlanError::OpCheckpointOutsideFsdp { stage: 0, .. })),
            "{errs:?}"
        );
    }
    // Written and read as `ops`.
    let p = plan(
        "dp=8,mbs=1,gbs=8,zero=3,ckpt=ops,engine=fsdp",
        &model,
        &cluster,
    );
    assert_eq!(p.stages[0].recompute, Recompute::Ops);
    let json = serde_json::to_string(&p).unwrap();
    assert!(json.contains(r#""recompute":"ops""#), "{json}");
    let back: Plan = serde_json::from_str(&json).unwrap();
    assert_eq!(back.stages[0].recompute, Recompute::Ops);
}

#[test]
fn full_checkpointing_recomputes_the_blocks_not_the_embedding_or_the_head() {
    let (model, cluster) = setup();
    let p = plan(
        "dp=8,mbs=1,gbs=8,zero=3,ckpt=full,engine=fsdp",
        &model,
        &cluster,
    );
    let st = &p.stages[0];
    let whole: Vec<bool> = memory::fully_recomputed(&model, st).collect();
    assert_eq!(whole.len(), model.layers.len());
    assert!(!whole[0] && !whole[whole.len() - 1]);
    assert!(whole[1..whole.len() - 1].iter().all(|&w| w));
    // A count of layers counts blocks: the embedding is not one of them.
    let mut two = st.clone();
    two.recompute = Recompute::Layers(2);
    let whole: Vec<bool> = memory::fully_recomputed(&model, &two).collect();
    assert_eq!(whole.iter().filter(|&&w| w).count(), 2);
    assert!(whole[1] && whole[2] && !whole[3]);
    // The head keeps what it keeps under full checkpointing: its activations are those of no
    // checkpointing at all.
    let mut head = st.clone();
    let last = model.layers.len() - 1;
    head.layers = hetplan::plan::LayerRange {
        start: last,
        end: last + 1,
    };
    let kept = |s: &hetplan::plan::Stage| {
        memory::micro_batch_activations(&model, s, 1, 1, SEQ, Precision::Bf16, false, false, false)
            .0
    };
    let mut bare = head.clone();
    bare.recompute = Recompute::None;
    assert_eq!(kept(&head), kept(&bare));
    assert!(kept(&head) > 0.0);
}

#[test]
fn with_tensor_parallelism_the_recompute_gathers_again_but_does_not_reduce_again() {
    let (model, cluster) = setup();
    let w = hetplan::cost::Workload {
        model: &model,
        cluster: &cluster,
        seq_len: SEQ,
    };
    let costs = |ckpt: &str| {
        let p = plan(
            &format!("tp=2,dp=4,mbs=1,gbs=8,zero=3,sp=on,ckpt={ckpt},engine=fsdp"),
            &model,
            &cluster,
        );
        hetplan::cost::layer_costs(w, &w.validate(&p).unwrap(), &Analytic, 0, 0)
    };
    let (none, ops, full) = (costs("none"), costs("ops"), costs("full"));
    for (l, layer) in model.layers.iter().enumerate() {
        let (n, o, f) = (&none[l], &ops[l], &full[l]);
        if layer.kind != LayerKind::Transformer {
            // Neither kind of checkpointing touches the embedding or the head.
            assert_eq!((o.recompute, f.recompute), (0.0, 0.0), "layer {l}");
            continue;
        }
        // A block's two forward collectives: full recomputation runs both again, the op-level
        // policy the all-gathers only (one all-reduce's worth).
        assert_eq!(n.tp_allreduces_forward, 2);
        assert_eq!(f.tp_allreduces_backward, n.tp_allreduces_backward + 2);
        assert_eq!(o.tp_allreduces_backward, n.tp_allreduces_backward + 1);
        assert!(o.tp_recompute > 0.0 && (o.tp_recompute - f.tp_recompute / 2.0).abs() < 1e-12);
        assert!(0.0 < o.recompute && o.recompute < f.recompute);
    }
}

/// Under TP with sequence parallelism the policy also keeps every reduce-scatter's output
/// (`_c10d_functional.reduce_scatter_tensor` is in its save list): compiled, the attention
/// projection's, which the second norm's backward reads through the residual sum (the down
/// projection's only the closing add reads); eager code keeps both, and `w2`'s own output,
/// kept by the policy, as the partial sums over the whole sequence that its reduce-scatter
/// reads — which sequence parallelism does not split.
#[test]
fn with_sequence_parallelism_the_reduce_scatters_outputs_are_kept_too() {
    let (model, cluster) = setup();
    let spec = "tp=8,dp=1,mbs=1,gbs=1,zero=3,sp=on,ckpt=ops,engine=fsdp";
    let (st, _) = first_block_alone(&model, &cluster, spec);
    let tokens = SEQ as f64;
    let kept = |eager: bool| {
        memory::micro_batch_activations(&model, &st, 1, 8, SEQ, Precision::Bf16, eager, true, false)
            .0
    };
    // What one GPU keeps without TP, split eight ways, and the attention projection's
    // reduce-scattered output (4,096 wide, 2 B, an eighth of the tokens).
    let alone = tokens * (2.0 * (4096.0 + 6144.0 + 4096.0 + 14336.0) + 4.0 * 32.0);
    let compiled = alone / 8.0 + tokens * 2.0 * 4096.0 / 8.0;
    assert!(
        (kept(false) / compiled - 1.0).abs() < 1e-12,
        "{} against {compiled}",
        kept(false)
    );
    // Eager: also `w2`'s partial sums, every token, and its reduce-scattered output.
    let eager = compiled + tokens * 2.0 * 4096.0 + tokens * 2.0 * 4096.0 / 8.0;
    assert!(
        (kept(true) / eager - 1.0).abs() < 1e-12,
        "{} against {eager}",
        kept(true)
    );
}
