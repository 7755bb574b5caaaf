//! Parameter counts of every HuggingFace architecture hetplan reads, against the counts
//! `transformers` itself gives (issue 12). The configs and counts were written by
//! `tools/hf_reference/generate.py` (transformers on PyTorch's meta device; its version is in
//! `reference.json`); this test needs no Python.

use hetplan::model::hf::parse_hf_config;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The tolerance the issue sets: 0.01%.
const TOLERANCE: f64 = 1e-4;

fn data() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf"))
}

fn reference() -> serde_json::Map<String, Value> {
    let src = std::fs::read_to_string(data().join("reference.json")).expect("reference.json");
    let v: Value = serde_json::from_str(&src).expect("reference.json is JSON");
    v["models"].as_object().expect("a `models` object").clone()
}

#[test]
fn every_family_counts_its_parameters_as_transformers_does() {
    let models = reference();
    let mut failures = Vec::new();
    let mut worst = (0.0f64, String::new());
    for (name, r) in &models {
        let want = r["params"].as_u64().expect("params") as f64;
        let src = std::fs::read_to_string(data().join(format!("{name}.json"))).unwrap();
        match parse_hf_config(&src, name) {
            Ok(m) => {
                let got = m.params() as f64;
                let err = (got - want) / want;
                if err.abs() >= worst.0 {
                    worst = (err.abs(), name.clone());
                }
                if err.abs() > TOLERANCE {
                    failures.push(format!(
                        "{name} ({}): {got} against {want} ({:+.4}%)",
                        r["model_type"],
                        100.0 * err
                    ));
                }
            }
            Err(e) => failures.push(format!("{name}: rejected: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{} models; largest |error| {:.2e} ({})",
        models.len(),
        worst.0,
        worst.1
    );
}

#[test]
fn the_reference_covers_the_families_users_bring() {
    // The 39 decoder architectures of issue 12 (and the multimodal wrappers' language part):
    // a family dropped from the generator would otherwise pass unnoticed.
    let covered: BTreeSet<String> = reference()
        .values()
        .map(|r| r["model_type"].as_str().unwrap().to_string())
        .collect();
    for t in [
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "gpt2",
        "gpt_neox",
        "falcon",
        "mpt",
        "mistral3",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3_text",
        "gemma3",
        "phi",
        "phi3",
        "phimoe",
        "olmo",
        "olmo2",
        "olmoe",
        "deepseek_v3",
        "stablelm",
        "starcoder2",
        "gptj",
        "gpt_neo",
        "gpt_bigcode",
        "bloom",
        "opt",
        "codegen",
        "cohere",
        "granite",
        "dbrx",
        "persimmon",
        "nemotron",
        "gpt_oss",
        "smollm3",
        "glm4",
        "llava",
    ] {
        assert!(covered.contains(t), "no reference model of `{t}`");
    }
    assert!(reference().len() >= 45);
}

#[test]
fn sliding_window_layers_cost_only_their_window() {
    // Gemma 2 alternates 4096-token windows (even blocks) with global attention: at sequence
    // 8192 a local block's attention does fewer FLOPs than a global one, at 4096 the same.
    use hetplan::cost::compute::forward_model_flop;
    let src = std::fs::read_to_string(data().join("gemma-2-9b.json")).unwrap();
    let m = parse_hf_config(&src, "gemma-2-9b").unwrap();
    let t = m.transformer.as_ref().expect("a transformer shape");
    assert_eq!(t.window_of(0), Some(4096));
    assert_eq!(t.window_of(1), None);
    let flop = |layer: usize, seq: u64| forward_model_flop(&m, layer..layer + 1, 1.0, seq).all;
    // Layer 0 is the embedding; blocks 0 and 1 are layers 1 and 2.
    let (local, global) = (flop(1, 8192), flop(2, 8192));
    assert!(local < global, "{local} !< {global}");
    // The attention core per token: global 4·s·a·d (the model-FLOPs convention, no causal
    // half), local 8·k·a·d with k the keys a query sees on average, (w(w+1)/2 + (s−w)·w)/s.
    let (a, d, s, w) = (16.0, 256.0, 8192.0, 4096.0);
    let keys = (w * (w + 1.0) / 2.0 + (s - w) * w) / s;
    let want = 4.0 * s * a * d - 8.0 * keys * a * d;
    assert!(((global - local) - want).abs() / want < 1e-9);
    assert_eq!(flop(1, 4096), flop(2, 4096));
}

#[test]
fn engines_building_plain_decoders_refuse_what_they_would_leave_out() {
    use hetplan::export::{model_reasons, Target};
    let read = |name: &str| {
        let src = std::fs::read_to_string(data().join(format!("{name}.json"))).unwrap();
        parse_hf_config(&src, name).unwrap()
    };
    let llama = read("llama-3.1-8b");
    for t in [Target::Megatron, Target::Torchtitan] {
        assert!(model_reasons(t, &llama).is_empty(), "{t:?}");
    }
    let all = [Target::Megatron, Target::Torchtitan, Target::Mist];
    let not_megatron = [Target::Torchtitan, Target::Mist];
    for (name, what, refusing) in [
        (
            "gemma-2-9b",
            "norms on the attention and MLP outputs",
            &all[..],
        ),
        ("olmo-7b", "LayerNorms without weights", &all[..]),
        ("olmo-2-7b", "QK-norm with weights per head", &all[..]),
        // Megatron takes these (`--qk-layernorm`, `--window-size`; DeepSeek-V3's latent
        // attention, `--multi-latent-attention`, below).
        ("qwen3-8b", "QK-norm", &not_megatron[..]),
        (
            "mistral-7b-v0.1",
            "sliding-window attention",
            &not_megatron[..],
        ),
    ] {
        let m = read(name);
        for &t in refusing {
            let why = model_reasons(t, &m);
            assert!(
                why.iter().any(|w| w.contains(what)),
                "{name} {t:?}: {why:?}"
            );
        }
    }
    for name in ["qwen3-8b", "mistral-7b-v0.1", "deepseek-v3"] {
        let why = model_reasons(Target::Megatron, &read(name));
        assert!(why.is_empty(), "{name}: {why:?}");
    }
}

#[test]
fn moe_models_with_dense_layers_keep_one_shape() {
    // DeepSeek-V3's first three blocks and Qwen's `mlp_only_layers` are dense: the model stays
    // one transformer shape (what the engines' exports read), its dense blocks marked.
    let read = |name: &str, edit: &dyn Fn(String) -> String| {
        let src = std::fs::read_to_string(data().join(format!("{name}.json"))).unwrap();
        parse_hf_config(&edit(src), name).unwrap()
    };
    let ds = read("deepseek-v3", &|s| s);
    let t = ds.transformer.as_ref().expect("one shape");
    assert_eq!(
        (0..5).map(|i| t.is_dense_block(i)).collect::<Vec<_>>(),
        [true, true, true, false, false]
    );
    assert!(ds.layers[1].experts().is_none() && ds.layers[4].experts().is_some());
    // Qwen3-30B-A3B with its first two blocks dense, as `mlp_only_layers` says.
    let q = read("qwen3-30b-a3b", &|s| {
        s.replace("\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 1]")
    });
    let t = q.transformer.as_ref().unwrap();
    assert!(t.is_dense_block(1) && !t.is_dense_block(2));
    let all_moe = read("qwen3-30b-a3b", &|s| s);
    // Two blocks trade 128 experts of 768 (gated, 3 matrices) and a router for one MLP of 6144.
    let h = 2048.0;
    let per_block = 128.0 * 3.0 * h * 768.0 + h * 128.0 - 3.0 * h * 6144.0;
    assert_eq!(all_moe.params() as f64 - q.params() as f64, 2.0 * per_block);
    let why = hetplan::export::model_reasons(hetplan::export::Target::Megatron, &q);
    assert!(why.is_empty(), "{why:?}");
}
