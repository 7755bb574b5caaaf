use super::*;
use serde_json::json;

fn sample(layer: LayerKey, tp: u32, mbs: u64, fwd: f64) -> LayerSample {
    LayerSample {
        layer,
        tp,
        ep: 1,
        mbs,
        forward: Seconds(fwd),
        backward: Seconds(2.0 * fwd),
        optimizer: Some(Seconds(1e-4)),
        activation_memory: Some(Bytes(1e6 * mbs as f64)),
        peak_memory: None,
        total_memory: None,
        params: Some(12_596_224),
    }
}

fn small_db() -> ProfileDb {
    let mut layers = Vec::new();
    for (mbs, f) in [(1, 0.010), (2, 0.018), (4, 0.031), (8, 0.060)] {
        layers.push(sample(LayerKey::Index(1), 1, mbs, f));
        layers.push(sample(
            LayerKey::Kind(LayerKind::Transformer),
            1,
            mbs,
            0.5 * f,
        ));
    }
    layers.push(sample(LayerKey::Index(1), 2, 4, 0.017));
    ProfileDb {
        format_version: 1,
        profiles: vec![ModelProfile {
            gpu: "a100-sxm4-40gb".into(),
            model: "opt-350m".into(),
            seq_len: Some(2048),
            precision: Some(Precision::Fp32),
            source: "test".into(),
            layers,
            collectives: vec![
                CollectiveSample {
                    op: CollectiveOp::AllReduce,
                    group_size: 8,
                    link: LinkKind::IntraNode,
                    message: Bytes(1048576.0),
                    bandwidth: BytesPerSec(50e9),
                },
                CollectiveSample {
                    op: CollectiveOp::AllReduce,
                    group_size: 8,
                    link: LinkKind::IntraNode,
                    message: Bytes(4.0 * 1048576.0),
                    bandwidth: BytesPerSec(150e9),
                },
            ],
        }],
    }
}

const CUBIC: Interpolation = Interpolation::MonotoneCubic;
const METIS: Interpolation = Interpolation::MetisPowersOfTwo;

#[test]
fn round_trips_through_json() {
    let db = small_db();
    let text = db.to_json();
    let back = ProfileDb::parse(&text).unwrap();
    assert_eq!(back, db);
    assert_eq!(back.to_json(), text);
    // Kinds are written as strings, indices as numbers, absent options not at all.
    assert!(text.contains("\"layer\": \"transformer\""));
    assert!(text.contains("\"layer\": 1"));
    assert!(!text.contains("total_memory"));
    assert!(text.contains("\"op\": \"all-reduce\""));
    assert!(text.contains("\"link\": \"intra-node\""));
}

#[test]
fn other_versions_are_rejected_first() {
    let src = "{\n  \"profiles\": [ {\"what\": 1} ],\n  \"format_version\": 2\n}";
    let e = ProfileDb::parse(src).unwrap_err();
    assert!(e.message.contains("format_version 2"), "{e}");
    assert!(e.message.contains("format_version 1"), "{e}");
    assert_eq!(e.line, Some(3));
    let e = ProfileDb::parse("{\"profiles\": []}").unwrap_err();
    assert!(e.message.contains("missing `format_version`"), "{e}");
    assert!(ProfileDb::parse("{\"format_version\": 1}")
        .unwrap()
        .profiles
        .is_empty());
}

#[test]
fn field_errors_carry_line_and_column() {
    let src = r#"{
  "format_version": 1,
  "profiles": [ { "gpu": "a100", "model": "m", "layers": [
    { "layer": 0, "tp": 0, "mbs": 1, "forward": 0.1, "backward": 0.2 } ] } ]
}"#;
    let e = ProfileDb::parse(src).unwrap_err();
    assert_eq!(e.line, Some(4));
    assert!(e.message.contains("at least 1"), "{e}");

    let src = src
        .replace("\"tp\": 0", "\"tp\": 1")
        .replace("\"layer\": 0", "\"layer\": \"block\"");
    let e = ProfileDb::parse(&src).unwrap_err();
    assert_eq!(e.line, Some(4));
    assert!(e.message.contains("unknown layer kind `block`"), "{e}");

    let src = src.replace("\"block\"", "0").replace("0.2", "-0.2");
    let e = ProfileDb::parse(&src).unwrap_err();
    assert!(e.message.contains("not negative"), "{e}");

    let src = src
        .replace("-0.2", "0.2")
        .replace("\"backward\"", "\"bwd\"");
    let e = ProfileDb::parse(&src).unwrap_err();
    assert!(e.message.contains("bwd"), "{e}");
}

#[test]
fn aliases_become_canonical_and_duplicates_are_rejected() {
    let src = r#"{ "format_version": 1, "profiles": [ { "gpu": "A100_40GB", "model": "m",
        "layers": [ { "layer": 0, "tp": 1, "mbs": 1, "forward": 0.1, "backward": 0.2 },
                    { "layer": 0, "tp": 1, "mbs": 1, "forward": 0.3, "backward": 0.2 } ] } ] }"#;
    let e = ProfileDb::parse(src).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("profiles[0].layers[1]"));
    let ok = src.replacen(
        "\"mbs\": 1, \"forward\": 0.3",
        "\"mbs\": 2, \"forward\": 0.3",
        1,
    );
    let db = ProfileDb::parse(&ok).unwrap();
    assert_eq!(db.profiles[0].gpu, "a100-sxm4-40gb");
}

#[test]
fn lookup_prefers_the_index_then_the_kind() {
    let db = small_db();
    let t = db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            1,
            LayerKind::Transformer,
            1,
            4,
            CUBIC,
        )
        .unwrap();
    assert_eq!(t.forward, Seconds(0.031));
    assert_eq!(t.backward, Seconds(0.062));
    assert_eq!(t.optimizer, Some(Seconds(1e-4)));
    assert_eq!(t.how, Provenance::Measured);
    // Layer 2 has no sample of its own: the transformer kind's.
    let t = db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            2,
            LayerKind::Transformer,
            1,
            4,
            CUBIC,
        )
        .unwrap();
    assert_eq!(t.forward, Seconds(0.5 * 0.031));
    // Not the head, at no TP degree measured, on no GPU measured.
    assert!(db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            25,
            LayerKind::Head,
            1,
            4,
            CUBIC
        )
        .is_none());
    assert!(db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            2,
            LayerKind::Transformer,
            4,
            4,
            CUBIC
        )
        .is_none());
    assert!(db
        .layer_time("h100", "opt-350m", 1, LayerKind::Transformer, 1, 4, CUBIC)
        .is_none());
    assert!(db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-1.3b",
            1,
            LayerKind::Transformer,
            1,
            4,
            CUBIC
        )
        .is_none());
    // Names: case and separators, and catalog aliases of the GPU.
    for gpu in ["A100_SXM4_40GB", "a100-40", "A100"] {
        let t = db.layer_time(gpu, "OPT_350M", 1, LayerKind::Transformer, 1, 4, CUBIC);
        assert_eq!(t.map(|t| t.forward), Some(Seconds(0.031)), "{gpu}");
    }
    // tp 2 has a single point: proportional.
    let t = db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            1,
            LayerKind::Transformer,
            2,
            8,
            CUBIC,
        )
        .unwrap();
    assert!((t.forward.get() - 0.034).abs() < 1e-12);
    assert_eq!(t.how, Provenance::Extrapolated { from: vec![4] });
}

#[test]
fn interpolation_is_exact_at_points_and_monotone_between() {
    let db = small_db();
    let get = |mbs, how| {
        db.layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            1,
            LayerKind::Transformer,
            1,
            mbs,
            how,
        )
        .unwrap()
    };
    for (mbs, f) in [(1, 0.010), (2, 0.018), (4, 0.031), (8, 0.060)] {
        assert_eq!(get(mbs, CUBIC).forward, Seconds(f));
        assert_eq!(get(mbs, METIS).forward, Seconds(f));
    }
    let mut prev = 0.0;
    for mbs in 1..=8 {
        let t = get(mbs, CUBIC);
        assert!(t.forward.get() >= prev);
        prev = t.forward.get();
    }
    let t = get(6, CUBIC);
    assert_eq!(t.how, Provenance::Interpolated { from: vec![4, 8] });
    assert!(t.forward.get() > 0.031 && t.forward.get() < 0.060);
}

#[test]
fn metis_sums_powers_of_two() {
    let db = small_db();
    let t = db
        .layer_time(
            "a100-sxm4-40gb",
            "opt-350m",
            1,
            LayerKind::Transformer,
            1,
            6,
            METIS,
        )
        .unwrap();
    assert_eq!(t.forward, Seconds(0.031 + 0.018));
    assert_eq!(t.backward, Seconds(0.062 + 0.036));
    assert_eq!(t.how, Provenance::Interpolated { from: vec![4, 2] });
}

#[test]
fn the_index_answers_like_the_database() {
    let mut db = small_db();
    let mut other = small_db();
    other.profiles[0].gpu = "v100-sxm2-16gb".into();
    other.profiles[0].layers.truncate(3);
    db.merge(other);
    let idx = ProfileIndex::new(&db);
    for gpu in ["a100-sxm4-40gb", "A100-40", "v100", "t4"] {
        for layer in [0, 1, 2] {
            for tp in [1, 2, 4] {
                for mbs in [0, 1, 3, 5, 6, 8, 12, 40] {
                    for how in [CUBIC, METIS] {
                        let a = db.layer_time(
                            gpu,
                            "opt-350m",
                            layer,
                            LayerKind::Transformer,
                            tp,
                            mbs,
                            how,
                        );
                        let b = idx.layer_time(
                            gpu,
                            "opt-350m",
                            layer,
                            LayerKind::Transformer,
                            tp,
                            mbs,
                            how,
                        );
                        assert_eq!(a, b, "{gpu} {layer} {tp} {mbs} {how:?}");
                    }
                }
            }
        }
    }
    let m = idx.model("a100-sxm4-40gb", "opt-350m").unwrap();
    assert_eq!(m.tp_degrees(1, LayerKind::Transformer), vec![1, 2]);
    assert_eq!(m.tp_degrees(7, LayerKind::Transformer), vec![1]);
    // A set-up filter drops profiles of another precision.
    let idx = ProfileIndex::for_setup(&db, Some(2048), Some(Precision::Bf16));
    assert!(idx.model("a100-sxm4-40gb", "opt-350m").is_none());
}

/// FP32 and TF32 profiles price each other's plans only on GPUs without TF32, where PyTorch's
/// switch changes nothing.
#[test]
fn fp32_and_tf32_profiles_are_one_only_without_tf32() {
    for (gpu, shared) in [
        ("a100-sxm4-40gb", false),
        ("v100-sxm2-16gb", true),
        ("t4", true),
    ] {
        for (have, want) in [
            (Precision::Fp32, Precision::Tf32),
            (Precision::Tf32, Precision::Fp32),
        ] {
            let mut db = small_db();
            db.profiles[0].gpu = gpu.into();
            db.profiles[0].precision = Some(have);
            let idx = ProfileIndex::for_setup(&db, Some(2048), Some(want));
            assert_eq!(
                idx.model(gpu, "opt-350m").is_some(),
                shared,
                "{gpu}: a {have:?} profile for a {want:?} plan"
            );
            let idx = ProfileIndex::for_setup(&db, Some(2048), Some(have));
            assert!(idx.model(gpu, "opt-350m").is_some(), "{gpu} {have:?}");
        }
    }
}

#[test]
fn merge_replaces_and_adds_samples() {
    let mut db = small_db();
    let mut other = small_db();
    other.profiles[0].source = "rerun".into();
    other.profiles[0].layers = vec![
        sample(LayerKey::Index(1), 1, 4, 0.030),
        sample(LayerKey::Index(1), 1, 16, 0.12),
    ];
    other.profiles[0].collectives.clear();
    let mut third = small_db();
    third.profiles[0].seq_len = Some(4096);
    db.merge(other);
    db.merge(third);
    assert_eq!(db.profiles.len(), 2);
    let p = &db.profiles[0];
    assert_eq!(p.layers.len(), 10);
    assert_eq!(p.source, "test; rerun");
    assert_eq!(p.collectives.len(), 2);
    let s = p
        .layers
        .iter()
        .find(|s| s.layer == LayerKey::Index(1) && s.tp == 1 && s.mbs == 4);
    assert_eq!(s.unwrap().forward, Seconds(0.030));
    db.validate().unwrap();
}

#[test]
fn collective_bandwidth_is_interpolated_in_log_size() {
    let db = small_db();
    let bw = |m: f64| {
        db.collective_bandwidth(
            "a100",
            CollectiveOp::AllReduce,
            8,
            LinkKind::IntraNode,
            Bytes(m),
        )
        .unwrap()
        .get()
    };
    assert_eq!(bw(1048576.0), 50e9);
    assert!((bw(2.0 * 1048576.0) - 100e9).abs() < 1.0);
    assert_eq!(bw(1e3), 50e9);
    assert_eq!(bw(1e12), 150e9);
    assert!(db
        .collective_bandwidth(
            "a100",
            CollectiveOp::AllGather,
            8,
            LinkKind::IntraNode,
            Bytes(1e6)
        )
        .is_none());
}

#[test]
fn interpolation_names_parse() {
    assert_eq!("pchip".parse::<Interpolation>().unwrap(), CUBIC);
    assert_eq!(
        "Metis_Powers_Of_Two".parse::<Interpolation>().unwrap(),
        METIS
    );
    assert!("linear".parse::<Interpolation>().is_err());
}

// ---------------------------------------------------------------------------------------------
// Sailor.

/// A model of embedding, 2 blocks and head on two GPUs, shaped like profiles_tmp.json.
fn sailor_excerpt() -> String {
    json!({
        "TINY": {
            "A100-40": {
                "1": { "1": { "0": [0.0004, 3e-06, 0.003], "1": [0.0028, 0.0059, 0.003],
                              "2": [0.0028, 0.0059, 0.003], "3": [0.0045, 0.0040, 0.003] },
                       "2": { "0": [0.0008, 4e-06, 0.0015], "1": [0.0019, 0.0034, 0.0015],
                              "2": [0.0019, 0.0034, 0.0015], "3": [0.0026, 0.0023, 0.0015] } },
                "4": { "1": { "0": [0.0005, 3e-06, 0.003], "1": [0.0086, 0.0227, 0.003],
                              "2": [0.0086, 0.0227, 0.003], "3": [0.0161, 0.0149, 0.003] } }
            },
            "Quantum-9000": {
                "1": { "1": { "0": [0.001, 0.0, 0.0], "1": [0.01, 0.02, 0.0],
                              "2": [0.01, 0.02, 0.0], "3": [0.02, 0.02, 0.0] } }
            }
        }
    })
    .to_string()
}

fn llm_info_excerpt() -> String {
    let layer =
        |p: u64, a: u64| json!({"params_floats": p, "act_mem_bytes": a, "act_mem_floats": a / 4});
    json!({
        "TINY": {
            "1": { "0": layer(500, 40), "1": layer(250, 400), "2": layer(250, 400), "3": layer(0, 80) },
            "2": { "0": layer(250, 40), "1": layer(125, 200), "2": layer(125, 200), "3": layer(0, 40) }
        }
    })
    .to_string()
}

#[test]
fn sailor_excerpt_imports() {
    let db = import_sailor(&sailor_excerpt(), Some(&llm_info_excerpt())).unwrap();
    assert_eq!(db.profiles.len(), 2);
    let a100 = &db.profiles[0];
    assert_eq!(a100.gpu, "a100-sxm4-40gb");
    assert_eq!(a100.model, "tiny");
    assert_eq!(a100.precision, Some(Precision::Fp32));
    assert_eq!(a100.layers.len(), 4 * 3);
    let s = a100
        .layers
        .iter()
        .find(|s| s.layer == LayerKey::Index(1) && s.tp == 1 && s.mbs == 4)
        .unwrap();
    assert_eq!(s.forward, Seconds(0.0086));
    assert_eq!(s.backward, Seconds(0.0227));
    assert_eq!(s.params, Some(250));
    assert_eq!(s.activation_memory, Some(Bytes(1600.0)));
    // The step (3 ms) is split by parameters over the 1000 of the profiling model.
    assert!((s.optimizer.unwrap().get() - 0.003 * 0.25).abs() < 1e-15);
    let total: f64 = a100
        .layers
        .iter()
        .filter(|s| s.tp == 1 && s.mbs == 1)
        .map(|s| s.optimizer.unwrap().get())
        .sum();
    assert!((total - 0.003).abs() < 1e-15);
    // An unknown GPU is kept, lower-cased, and said so; zero steps are no steps.
    let q = &db.profiles[1];
    assert_eq!(q.gpu, "quantum-9000");
    assert!(q.source.contains("Quantum-9000"));
    assert!(q.layers.iter().all(|s| s.optimizer.is_none()));
    // Without llm_info.json: no optimizer, params or memory.
    let db = import_sailor(&sailor_excerpt(), None).unwrap();
    assert!(db.profiles[0]
        .layers
        .iter()
        .all(|s| s.optimizer.is_none() && s.params.is_none()));
    // The result is a valid database that round-trips.
    let back = ProfileDb::parse(&db.to_json()).unwrap();
    assert_eq!(back, db);
}

#[test]
fn sailor_final_norm_is_folded_into_the_head() {
    // LLAMA-3-8 has 32 blocks and, in Sailor, a final-norm layer 33 before the head 34.
    let mut layers = serde_json::Map::new();
    for i in 0..35 {
        let v = match i {
            0 => json!([0.0003, 2e-06, 0.009]),
            33 => json!([0.0004, 0.001, 0.009]),
            34 => json!([0.016, 0.036, 0.009]),
            _ => json!([0.045, 0.095, 0.009]),
        };
        layers.insert(i.to_string(), v);
    }
    let src = json!({"LLAMA-3-8": {"GH-96": {"1": {"1": layers}}}}).to_string();
    let db = import_sailor(&src, None).unwrap();
    let p = &db.profiles[0];
    assert_eq!(p.model, "llama-3-8b");
    assert_eq!(p.seq_len, Some(8192));
    assert_eq!(p.layers.len(), 34);
    let head = p.layers.last().unwrap();
    assert_eq!(head.layer, LayerKey::Index(33));
    assert!((head.forward.get() - 0.0164).abs() < 1e-12);
    assert!(p.source.contains("layer 33"));
}

#[test]
fn sailor_errors_name_the_entry() {
    let e = import_sailor(r#"{"OPT-350": {"A100-40": {"x": {}}}}"#, None).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("OPT-350.A100-40.x"));
    let e = import_sailor(
        r#"{"OPT-350": {"A100-40": {"1": {"1": {"0": [0.1]}}}}}"#,
        None,
    )
    .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("OPT-350.A100-40.1.1.0"));
    let e = import_sailor("{\n \"OPT-350\": [1, 2]\n}", None).unwrap_err();
    assert_eq!(e.line, Some(2));
}

/// The real files, from the repository's copy of Sailor's data (`data/sailor`, see its
/// README). A missing file is a failure, not a skip: this test is the only check of the
/// importer on the whole of Sailor's output.
#[test]
fn sailor_real_profiles_import() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/sailor");
    let read = |f: &str| {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .unwrap_or_else(|e| panic!("{dir}/{f}: {e} (the repository's Sailor data)"))
    };
    let (profiles, info) = (read("profiles_tmp.json"), read("llm_info.json"));
    let db = import_sailor(&profiles, Some(&info)).unwrap();
    let gpus: std::collections::BTreeSet<&str> =
        db.profiles.iter().map(|p| p.gpu.as_str()).collect();
    let models: std::collections::BTreeSet<&str> =
        db.profiles.iter().map(|p| p.model.as_str()).collect();
    assert_eq!(gpus.len(), 7, "{gpus:?}");
    assert_eq!(
        models.into_iter().collect::<Vec<_>>(),
        ["gpt-neo-2.7b", "llama-3-8b", "opt-30b", "opt-350m"]
    );
    assert_eq!(db.profiles.len(), 16);
    db.validate().unwrap();
    assert_eq!(ProfileDb::parse(&db.to_json()).unwrap(), db);
    // OPT-350 on A100-40, tp 1, mbs 2, block 1: [0.004599, 0.011627, step].
    let t = db
        .layer_time(
            "a100-40",
            "opt-350m",
            1,
            LayerKind::Transformer,
            1,
            2,
            CUBIC,
        )
        .unwrap();
    assert_eq!(
        (t.forward, t.backward),
        (Seconds(0.004599), Seconds(0.011627))
    );
    assert_eq!(t.how, Provenance::Measured);
    // Blocks and the head of every OPT-350 profile have 26 layers in hetplan order.
    for p in db.profiles.iter().filter(|p| p.model == "opt-350m") {
        assert!(p
            .layers
            .iter()
            .all(|s| matches!(s.layer, LayerKey::Index(i) if i < 26)));
    }
    // The per-layer optimizer shares of a step add up to the step of the profiling model times
    // the whole model's parameters over the profiling model's: more than the step itself.
    let idx = ProfileIndex::new(&db);
    let m = idx.model("a100-sxm4-40gb", "opt-350m").unwrap();
    let step: f64 = (0..26)
        .map(|l| {
            m.layer_time(l, LayerKind::Transformer, 1, 1, CUBIC)
                .unwrap()
                .optimizer
                .unwrap()
                .get()
        })
        .sum();
    assert!(step > 0.002938 && step < 0.002938 * 4.0, "{step}");
}

// ---------------------------------------------------------------------------------------------
// Metis.

/// Shaped like SamsungLabs/Metis profile_data_samples/DeviceType.A100_tp1_bs1.json.
fn metis_file(layer_ms: &[f64], memory: &[f64], optimizer_ms: f64) -> String {
    json!({
        "model": {
            "model_name": "GPT3",
            "num_layers": layer_ms.len(),
            "parameters": {
                "total_parameters_bytes": 600,
                "parameters_per_layer_bytes": [200, 100, 100, 200]
            }
        },
        "execution_time": {
            "total_time_ms": 336.2,
            "forward_backward_time_ms": 292.8,
            "batch_generator_time_ms": 0.91,
            "layernorm_grads_all_reduce_time_ms": 0.02,
            "embedding_grads_all_reduce_time_ms": 0.04,
            "optimizer_time_ms": optimizer_ms,
            "layer_compute_total_ms": layer_ms
        },
        "execution_memory": { "total_memory": 53120, "layer_memory_total_mb": memory }
    })
    .to_string()
}

#[test]
fn metis_sample_imports() {
    let files = vec![
        (
            "profile/DeviceType.A100_tp1_bs1.json".to_string(),
            metis_file(
                &[0.3, 29.5, 29.5, 0.4],
                &[7820.0, 4146.0, 4146.0, 12132.0],
                39.3,
            ),
        ),
        (
            "DeviceType.A100_tp1_bs2.json".to_string(),
            metis_file(&[0.6, 58.8, 58.8, 0.7], &[7820.0, 4146.0, 4146.0], 39.6),
        ),
        (
            "DeviceType.A100_tp1_bs4.json".to_string(),
            metis_file(
                &[1.2, 117.0, 117.0, 1.3],
                &[7820.0, 4146.0, 4146.0, 12132.0],
                39.6,
            ),
        ),
        (
            "DeviceType.Z9_tp2_bs1.json".to_string(),
            metis_file(&[1.0, 90.0, 90.0, 1.0], &[], 80.0),
        ),
    ];
    let db = import_metis(&files).unwrap();
    assert_eq!(db.profiles.len(), 2);
    let a100 = db
        .profiles
        .iter()
        .find(|p| p.gpu == "a100-sxm4-80gb")
        .unwrap();
    assert_eq!(a100.model, "GPT3");
    assert_eq!(a100.layers.len(), 12);
    let s = &a100
        .layers
        .iter()
        .find(|s| s.layer == LayerKey::Index(1) && s.mbs == 1)
        .unwrap();
    assert!((s.forward.get() - 0.0295 / 3.0).abs() < 1e-15);
    assert!((s.backward.get() - 0.0295 * 2.0 / 3.0).abs() < 1e-15);
    assert!((s.optimizer.unwrap().get() - 0.0393 / 6.0).abs() < 1e-15);
    assert_eq!(s.total_memory, Some(Bytes(4146.0 * 1048576.0)));
    // bs2's memory list is one short: left out, with a note.
    assert!(a100
        .layers
        .iter()
        .filter(|s| s.mbs == 2)
        .all(|s| s.total_memory.is_none()));
    assert!(a100.source.contains("3 entries for 4 layers"));
    let z9 = db.profiles.iter().find(|p| p.gpu == "z9").unwrap();
    assert!(z9.source.contains("not in the hetplan GPU catalog"));
    // Metis composition over the imported sizes: t(3) = t(2) + t(1).
    let t = db
        .layer_time(
            "a100-sxm4-80gb",
            "gpt3",
            1,
            LayerKind::Transformer,
            1,
            3,
            METIS,
        )
        .unwrap();
    assert!((t.forward.get() - (0.0588 + 0.0295) / 3.0).abs() < 1e-15);
    assert_eq!(ProfileDb::parse(&db.to_json()).unwrap(), db);
}

#[test]
fn metis_errors_name_the_file() {
    let e = import_metis(&[("A100_tp1_bs1.json".into(), "{}".into())]).unwrap_err();
    assert!(e.message.contains("A100_tp1_bs1.json"), "{e}");
    let e = import_metis(&[(
        "DeviceType.A100_tp1_bs1.json".into(),
        "{\n\"model\": 3}".into(),
    )])
    .unwrap_err();
    assert!(e.message.starts_with("DeviceType.A100_tp1_bs1.json"), "{e}");
    assert_eq!(e.line, Some(2));
    let f = metis_file(&[1.0], &[], 1.0);
    let e = import_metis(&[
        ("DeviceType.T4_tp1_bs1.json".into(), f.clone()),
        ("x/DeviceType.T4_tp1_bs1.json".into(), f),
    ])
    .unwrap_err();
    assert!(e.message.contains("both profile"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Oobleck.

#[test]
fn oobleck_cache_imports() {
    let layer =
        |f: f64, w: f64, a: f64| json!({"forward": f, "backward": 3.0 * f, "mem_required": [w, a]});
    let files = vec![
        (
            "mb1.json".to_string(),
            json!([layer(0.5, 4e8, 1e6), layer(10.0, 5e7, 3e8)]).to_string(),
        ),
        (
            "mb2.json".to_string(),
            json!([layer(0.9, 4e8, 2e6), layer(19.0, 5e7, 6e8)]).to_string(),
        ),
        (
            "allreduce_in_node.json".to_string(),
            json!([{"1": 0.01, "2": 4.0, "4": 6.0}, {"1": 0.01, "2": 0.5, "4": 0.75}]).to_string(),
        ),
    ];
    let db = import_oobleck("V100", "gpt2-xl", &files).unwrap();
    let p = &db.profiles[0];
    assert_eq!(p.gpu, "v100-sxm2-16gb");
    assert_eq!(p.layers.len(), 4);
    let s = p
        .layers
        .iter()
        .find(|s| s.layer == LayerKey::Index(1) && s.mbs == 2)
        .unwrap();
    assert!((s.forward.get() - 0.019).abs() < 1e-15);
    assert!((s.backward.get() - 0.057).abs() < 1e-15);
    assert_eq!(s.activation_memory, Some(Bytes(6e8)));
    assert_eq!(p.collectives.len(), 4);
    let bw = db
        .collective_bandwidth(
            "v100",
            CollectiveOp::AllReduce,
            2,
            LinkKind::IntraNode,
            Bytes(4e8),
        )
        .unwrap();
    assert!((bw.get() - 1e11).abs() < 1.0);
    assert!(import_oobleck("V100", "m", &[("layers.json".into(), "[]".into())]).is_err());
    assert_eq!(ProfileDb::parse(&db.to_json()).unwrap(), db);
}

// ---------------------------------------------------------------------------------------------
// Robustness: importers write only databases that read back; sizes are bounded.

/// Regression: an empty model name and an infinite bandwidth were written as `""` and `null`,
/// which `ProfileDb::parse` rejects.
#[test]
fn oobleck_imports_only_what_reads_back() {
    let mb1 = (
        "mb1.json".to_string(),
        json!([{"forward": 1.0, "backward": 3.0, "mem_required": [1e300, 1.0]}]).to_string(),
    );
    assert!(import_oobleck("V100", "m", std::slice::from_ref(&mb1)).is_ok());
    for (gpu, model) in [("V100", ""), ("V100", "  "), ("", "m")] {
        let e = import_oobleck(gpu, model, std::slice::from_ref(&mb1)).unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
    }
    let allreduce = (
        "allreduce_in_node.json".to_string(),
        json!([{"2": 1e-300}]).to_string(),
    );
    let e = import_oobleck("V100", "m", &[mb1.clone(), allreduce]).unwrap_err();
    assert!(e.message.contains("infinite"), "{e}");
    assert_eq!(e.field.as_deref(), Some("[0].2"));
    let huge = ("mb99999999999.json".to_string(), mb1.1.clone());
    assert!(import_oobleck("V100", "m", &[huge]).is_err());
}

/// Regression: a negative `act_mem_bytes` was accepted at import and rejected on re-parse.
#[test]
fn sailor_imports_only_what_reads_back() {
    let bad = |k: &str, v: f64| {
        let mut info: serde_json::Value = serde_json::from_str(&llm_info_excerpt()).unwrap();
        info["TINY"]["1"]["1"][k] = json!(v);
        import_sailor(&sailor_excerpt(), Some(&info.to_string())).unwrap_err()
    };
    let e = bad("act_mem_bytes", -1.0);
    assert_eq!(e.field.as_deref(), Some("llm_info.TINY.1.1.act_mem_bytes"));
    let e = bad("params_floats", -5.0);
    assert_eq!(e.field.as_deref(), Some("llm_info.TINY.1.1.params_floats"));
    bad("params_floats", 1e300);
    bad("params_floats", 2.5);
    bad("act_mem_floats", -1.0);
    // Micro-batch sizes beyond the limit, empty names.
    let src = sailor_excerpt().replace("\"4\":{", "\"99999999999\":{");
    assert!(src.contains("99999999999"));
    assert!(import_sailor(&src, None).is_err());
    let src = sailor_excerpt().replace("\"Quantum-9000\"", "\"\"");
    assert!(import_sailor(&src, None).is_err());
    // Activation bytes × mbs that overflow.
    let mut info: serde_json::Value = serde_json::from_str(&llm_info_excerpt()).unwrap();
    info["TINY"]["1"]["1"]["act_mem_bytes"] = json!(1e308);
    let e = import_sailor(&sailor_excerpt(), Some(&info.to_string())).unwrap_err();
    assert!(e.message.contains("overflows"), "{e}");
    let db = import_sailor(&sailor_excerpt(), Some(&llm_info_excerpt())).unwrap();
    assert_eq!(ProfileDb::parse(&db.to_json()).unwrap(), db);
}

#[test]
fn metis_imports_only_what_reads_back() {
    let file = |name: &str, memory_mb: f64| {
        (
            name.to_string(),
            json!({"model": {"model_name": "gpt"},
                   "execution_time": {"layer_compute_total_ms": [1.0, 2.0]},
                   "execution_memory": {"layer_memory_total_mb": [memory_mb, 1.0]}})
            .to_string(),
        )
    };
    let db = import_metis(&[file("DeviceType.A100_tp1_bs2.json", 1.0)]).unwrap();
    assert_eq!(ProfileDb::parse(&db.to_json()).unwrap(), db);
    assert!(import_metis(&[file("DeviceType.A100_tp1_bs99999999999.json", 1.0)]).is_err());
    let e = import_metis(&[file("DeviceType.A100_tp1_bs2.json", 1e305)]).unwrap_err();
    assert!(e.message.contains("finite"), "{e}");
}

#[test]
fn validate_checks_what_the_field_parsers_check() {
    let mut db = small_db();
    assert_eq!(db.validate(), Ok(()));
    db.profiles[0].layers[0].forward = Seconds(f64::INFINITY);
    let e = db.validate().unwrap_err();
    assert_eq!(e.field.as_deref(), Some("profiles[0].layers[0].forward"));
    let mut db = small_db();
    db.profiles[0].layers[0].activation_memory = Some(Bytes(-1.0));
    assert!(db.validate().is_err());
    let mut db = small_db();
    db.profiles[0].layers[0].mbs = u64::MAX;
    assert!(db.validate().is_err());
    // And on read: a micro-batch size beyond the limit.
    let src = small_db()
        .to_json()
        .replacen("\"mbs\": 1,", "\"mbs\": 18446744073709551615,", 1);
    assert!(src.contains("18446744073709551615"));
    let e = ProfileDb::parse(&src).unwrap_err();
    assert!(e.message.contains("micro-batch size"), "{e}");
    assert!(e.line.is_some());
}
