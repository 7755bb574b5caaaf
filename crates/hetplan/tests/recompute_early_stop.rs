//! A recomputation that stops once it has what backward reads — PyTorch's non-reentrant
//! checkpoint by default, torch.compile's partitioner always — does not run a block's closing
//! product again: `Layer::unread_by_backward` says which ops those are, engine `fsdp`'s full
//! and op-level recomputation leave them out, Megatron's and DeepSpeed's (which rerun the whole
//! forward) do not. Measured on an H200 in `measured_h200.rs` (docs/validation.md §5).

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cluster::Cluster;
use hetplan::cost::{layer_costs, Analytic, ComputeTimes, LayerCost, LayerShape, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::model::hf::parse_hf_config;
use hetplan::model::{Layer, LayerKind, Model};
use hetplan::plan::inline::parse_inline_plan;

const SEQ: u64 = 4096;

fn unread(layer: &Layer) -> Vec<&str> {
    layer
        .ops
        .iter()
        .zip(layer.unread_by_backward())
        .filter(|(_, u)| *u)
        .map(|(o, _)| o.name.as_str())
        .collect()
}

fn costs(model: &Model, cluster: &Cluster, spec: &str) -> Vec<LayerCost> {
    let w = Workload {
        model,
        cluster,
        seq_len: SEQ,
    };
    let p = parse_inline_plan(spec, model, cluster).unwrap();
    layer_costs(w, &w.validate(&p).unwrap(), &Analytic, 0, 0)
}

#[test]
fn a_sequential_block_leaves_its_down_projection_and_closing_add_unread() {
    let llama = catalog_model("llama3-8b").unwrap();
    for layer in &llama.layers {
        match layer.kind {
            LayerKind::Transformer => {
                assert_eq!(unread(layer), ["fc2", "mlp_residual"]);
                assert!(
                    layer.closing_product_skipped(true) && layer.closing_product_skipped(false)
                );
            }
            // The embedding and the head are never recomputed; everything they run is read.
            _ => {
                assert!(unread(layer).is_empty(), "{}", layer.name);
                assert!(!layer.closing_product_skipped(true));
            }
        }
    }
    // A product's bias goes with it.
    let gpt = catalog_model("gpt3-1.3b").unwrap();
    assert_eq!(unread(&gpt.layers[1]), ["fc2", "fc2_bias", "mlp_residual"]);
}

#[test]
fn a_parallel_block_leaves_its_attention_projection_unread_too() {
    // Falcon adds the attention's and the MLP's outputs into one closing sum.
    let falcon = catalog_model("falcon-7b").unwrap();
    let b = &falcon.layers[1];
    assert_eq!(unread(b), ["proj", "fc2", "mlp_residual"]);
    // The compiler leaves the projection out of a recomputation; eager code, which reruns
    // the forward in order until every saved tensor is back, runs it before the MLP saves
    // its inputs.
    assert_eq!(skipped(b, false), ["proj", "fc2", "mlp_residual"]);
    assert_eq!(skipped(b, true), ["fc2", "mlp_residual"]);
    assert!(b.closing_product_skipped(true) && b.closing_product_skipped(false));
}

fn skipped(layer: &Layer, eager: bool) -> Vec<&str> {
    (layer.ops.iter().zip(layer.skipped_by_early_stop(eager)))
        .filter(|(_, s)| *s)
        .map(|(o, _)| o.name.as_str())
        .collect()
}

/// A residual dropout saves a mask its forward draws from the product's output: eager code
/// must run the product to get it back, the compiler regenerates it from the seed.
#[test]
fn a_residual_dropout_keeps_eager_code_from_stopping_early() {
    let gpt = catalog_model("gpt3-1.3b").unwrap();
    let mut b = gpt.layers[1].clone();
    let residual = b.ops.last_mut().unwrap();
    assert_eq!(residual.name, "mlp_residual");
    residual.saved_bytes_per_token = 2048.0;
    assert!(skipped(&b, true).is_empty());
    assert!(!b.closing_product_skipped(true));
    assert_eq!(skipped(&b, false), ["fc2", "fc2_bias", "mlp_residual"]);
    assert!(b.closing_product_skipped(false));
    // Behind a post-norm the add alone is the tail: with a dropout eager code runs it too.
    let src = r#"{"model_type": "gemma2", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "sliding_window": 128, "hidden_activation": "gelu_pytorch_tanh"}"#;
    let mut g = parse_hf_config(src, "gemma2-tiny").unwrap().layers[1].clone();
    assert_eq!(skipped(&g, true), ["mlp_residual"]);
    g.ops.last_mut().unwrap().saved_bytes_per_token = 256.0;
    assert!(skipped(&g, true).is_empty());
    assert_eq!(skipped(&g, false), ["mlp_residual"]);
}

#[test]
fn what_a_norm_or_the_experts_weighting_reads_is_read() {
    // Gemma 2's post-norms read the products before them: only the add is unread.
    let src = r#"{"model_type": "gemma2", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
        "sliding_window": 128, "hidden_activation": "gelu_pytorch_tanh"}"#;
    let gemma = parse_hf_config(src, "gemma2-tiny").unwrap();
    assert_eq!(unread(&gemma.layers[1]), ["mlp_residual"]);
    assert!(!gemma.layers[1].closing_product_skipped(false));
    // The router's weights' gradient reads the experts' outputs.
    let mixtral = catalog_model("mixtral-8x7b").unwrap();
    assert_eq!(unread(&mixtral.layers[1]), ["mlp_residual"]);
    assert!(!mixtral.layers[1].closing_product_skipped(false));
}

/// Expert parallelism's load factor slows the busiest rank's expert work in every pass: a
/// recomputation repeats the slowed forward (Megatron's, whole).
#[test]
fn an_expert_parallel_recompute_repeats_the_loaded_forward() {
    let model = catalog_model("mixtral-8x7b").unwrap();
    let cluster = catalog_cluster("2x8xh100-sxm5-80gb").unwrap();
    let c = costs(
        &model,
        &cluster,
        "tp=2,dp=8,ep=2,mbs=1,gbs=8,zero=1,sp=on,ckpt=full,engine=megatron",
    );
    let mut checked = 0;
    for (l, layer) in model.layers.iter().enumerate() {
        if layer.experts().is_some() {
            assert!(
                (c[l].recompute / c[l].forward - 1.0).abs() < 1e-12,
                "layer {l}: {} against {}",
                c[l].recompute,
                c[l].forward
            );
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// The forward seconds of `layer`'s ops that backward never reads, on `shape`.
fn unread_forward(model: &Model, cluster: &Cluster, layer: &Layer, shape: LayerShape) -> f64 {
    let ops = (layer.ops.iter().zip(layer.unread_by_backward()))
        .filter(|(_, u)| *u)
        .map(|(o, _)| o.clone())
        .collect();
    let tail = Layer {
        ops,
        ..layer.clone()
    };
    Analytic
        .time(cluster.gpu(cluster.gpus()[0]), model, &tail, shape)
        .forward
        .get()
}

#[test]
fn pytorchs_recompute_leaves_the_closing_product_out_megatrons_does_not() {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let plan = "tp=1,dp=8,mbs=1,gbs=8,zero=1,ckpt=full";
    let fsdp = costs(&model, &cluster, &format!("{plan},engine=fsdp"));
    let megatron = costs(&model, &cluster, &format!("{plan},engine=megatron"));
    let shape = LayerShape {
        weight_casts: hetplan::cost::WeightCasts::Autocast,
        early_stop: true,
        ..LayerShape::plain(1, SEQ, 1, hetplan::plan::Precision::Bf16)
    };
    for (l, layer) in model.layers.iter().enumerate() {
        if layer.kind != LayerKind::Transformer {
            assert_eq!((fsdp[l].recompute, megatron[l].recompute), (0.0, 0.0));
            continue;
        }
        // Megatron's checkpoint function reruns the block's whole forward.
        assert_eq!(megatron[l].recompute, megatron[l].forward);
        // PyTorch's stops before the down projection and the closing add; the autocast casts
        // are all made again (ZeRO-1 keeps FP32 weights it casts at each use, and the down
        // projection's backward saves its cast weight), so what it leaves out is those two
        // ops' time without casts.
        let bare = LayerShape {
            weight_casts: hetplan::cost::WeightCasts::None,
            ..shape
        };
        let skipped = unread_forward(&model, &cluster, layer, bare);
        assert!(skipped > 0.1 * fsdp[l].forward, "{skipped}");
        let expected = fsdp[l].forward - skipped;
        assert!(
            (fsdp[l].recompute - expected).abs() < 1e-9 * expected,
            "layer {l}: {} against {expected}",
            fsdp[l].recompute
        );
    }
    // Under ZeRO-3 FSDP2 copies the gathered weights in forward; backward gathers them again
    // itself, and the recomputation runs on those: it repeats less than the forward less the
    // unread tail.
    let zero3 = costs(
        &model,
        &cluster,
        "tp=1,dp=8,mbs=1,gbs=8,zero=3,ckpt=full,engine=fsdp",
    );
    let shape3 = LayerShape {
        weight_casts: hetplan::cost::WeightCasts::FullShard { shard: 8 },
        ..shape
    };
    let b = &model.layers[1];
    let tail = unread_forward(&model, &cluster, b, shape3);
    assert!(zero3[1].recompute < zero3[1].forward - tail - 1e-6);
}

#[test]
fn without_sequence_parallelism_the_closing_all_reduce_is_not_redone() {
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xh100-sxm5-80gb").unwrap();
    let run = |engine: &str, sp: &str, ckpt: &str| {
        costs(
            &model,
            &cluster,
            &format!("tp=2,dp=4,mbs=1,gbs=8,zero=1,sp={sp},ckpt={ckpt},engine={engine}"),
        )[1]
    };
    let (none, full) = (run("fsdp", "off", "none"), run("fsdp", "off", "full"));
    // The all-reduce after the attention projection runs again, the one after the down
    // projection does not.
    assert_eq!(none.tp_allreduces_forward, 2);
    assert_eq!(full.tp_allreduces_backward, none.tp_allreduces_backward + 1);
    assert!((full.tp_recompute - full.tp_forward / 2.0).abs() < 1e-12);
    // Megatron reruns both.
    let (mn, mf) = (
        run("megatron", "off", "none"),
        run("megatron", "off", "full"),
    );
    assert_eq!(mf.tp_allreduces_backward, mn.tp_allreduces_backward + 2);
    assert_eq!(mf.tp_recompute, mf.tp_forward);
    // With sequence parallelism the closing collective is a reduce-scatter (half an
    // all-reduce) and both all-gathers run again: counted as the forward's two.
    let (sn, sf) = (run("fsdp", "on", "none"), run("fsdp", "on", "full"));
    assert_eq!(sf.tp_allreduces_backward, sn.tp_allreduces_backward + 2);
}

/// Op-level checkpointing's memory reads the same rule: the compiled code drops a kept output
/// only where backward never reads it. DeepSeek-V3's latent attention runs five products
/// before its output projection's sum with the residual, so the policy keeps that projection's
/// output (the fifth), which the second norm's backward reads through the sum: kept compiled
/// too. Its down projection (the eighth product, which the policy leaves to recompute) is read
/// by nothing, and a recomputation that stops early does not run it.
#[test]
fn a_kept_output_projection_is_read_its_down_projection_is_not() {
    let src = include_str!("data/hf/deepseek-v3.json");
    let model = parse_hf_config(src, "deepseek-v3").unwrap();
    let dense = &model.layers[1];
    assert!(
        dense.experts().is_none(),
        "DeepSeek-V3's first blocks are dense"
    );
    let ck: Vec<_> = dense.op_checkpointing().unwrap().collect();
    let of = |name: &str| {
        let i = dense.ops.iter().position(|o| o.name == name).unwrap();
        ck[i]
    };
    assert!(of("proj").kept_bytes_per_token > 0.0 && !of("proj").unread);
    assert!(of("fc2").unread);
}

/// A measured layer (a profile) repeats its measured forward in the share the analytic model
/// gives the recomputed ops, plus the engine's own work as priced: Megatron's recomputation is
/// the measured forward itself; under FSDP2's full sharding, the measured kernels less the down
/// projection's share, and none of the gather copies the forward is charged beside them.
#[test]
fn a_measured_layer_repeats_its_measured_kernels() {
    use hetplan::cost::Profiled;
    use hetplan::profile::{ProfileDb, ProfileIndex};
    let src = include_str!("../../../data/measured/h200-sxm-141gb/profile-llama3-8b-s8192.json");
    let db = ProfileDb::parse(src).unwrap();
    let index = ProfileIndex::new(&db);
    let profiled = Profiled {
        index: &index,
        interpolation: Default::default(),
    };
    // The block's measured forward at one sequence of 8,192 tokens.
    let v: serde_json::Value = serde_json::from_str(src).unwrap();
    let measured_fwd = v["profiles"][0]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["layer"] == "transformer" && s["mbs"] == 1)
        .unwrap()["forward"]
        .as_f64()
        .unwrap();
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x1xh200-sxm-141gb").unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: 8192,
    };
    let costs = |spec: &str| {
        let p = parse_inline_plan(spec, &model, &cluster).unwrap();
        layer_costs(w, &w.validate(&p).unwrap(), &profiled, 0, 0)
    };
    let megatron = costs("dp=1,mbs=1,gbs=1,zero=1,ckpt=full,engine=megatron");
    assert!((megatron[1].forward / measured_fwd - 1.0).abs() < 1e-9);
    assert_eq!(megatron[1].recompute, megatron[1].forward);
    let fsdp = costs("dp=1,mbs=1,gbs=1,zero=3,ckpt=full,engine=fsdp");
    let bare = Analytic.layer_time(
        cluster.gpu(cluster.gpus()[0]),
        &model,
        1,
        LayerShape {
            early_stop: true,
            ..LayerShape::plain(1, 8192, 1, hetplan::plan::Precision::Bf16)
        },
    );
    let expected = measured_fwd * (bare.recompute_forward / bare.forward);
    assert!(
        (fsdp[1].recompute / expected - 1.0).abs() < 1e-9,
        "{} against {expected}",
        fsdp[1].recompute
    );
    // The forward carries FSDP2's copies beside the kernels; the recomputation leaves them
    // and the down projection (about a fifth of the block's forward at 8,192 tokens) out.
    assert!(
        fsdp[1].forward > measured_fwd && fsdp[1].recompute < 0.9 * measured_fwd,
        "forward {}, recompute {}, measured {measured_fwd}",
        fsdp[1].forward,
        fsdp[1].recompute
    );
}
