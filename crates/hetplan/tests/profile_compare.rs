//! `cost::profiled::compare_with_model`: each measured layer sample beside the analytic
//! model's prediction for the same layer, shape, GPU and precision.

use hetplan::cost::profiled::{compare_with_model, CompareError};
use hetplan::cost::{Analytic, ComputeTimes, LayerShape};
use hetplan::gpu::lookup;
use hetplan::model::catalog::catalog_model;
use hetplan::plan::Precision;
use hetplan::profile::ProfileDb;

fn db(model: &str, gpu: &str, layers: &str) -> ProfileDb {
    ProfileDb::parse(&format!(
        r#"{{"format_version": 1, "profiles": [{{"gpu": "{gpu}", "model": "{model}",
            "seq_len": 1024, "precision": "bf16", "source": "test", "layers": [{layers}]}}]}}"#
    ))
    .unwrap()
}

#[test]
fn each_sample_stands_beside_the_models_prediction_for_its_layer_and_shape() {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let gpu = lookup("a100-sxm4-80gb").unwrap();
    let shape = |tp, mbs| LayerShape::plain(mbs, 1024, tp, Precision::Bf16);
    // The block at tp 2, mbs 4, measured exactly twice as slow as the model says, with
    // measured activations; the head by its index, as fast as the model.
    let block = Analytic.layer_time(&gpu, &model, 1, shape(2, 4));
    let head = model.layers.len() - 1;
    let h = Analytic.layer_time(&gpu, &model, head, shape(1, 2));
    let layers = format!(
        r#"{{"layer": "transformer", "tp": 2, "mbs": 4, "forward": {}, "backward": {},
             "activation_memory": 1e8, "peak_memory": 2e8}},
           {{"layer": {head}, "tp": 1, "mbs": 2, "forward": {}, "backward": {}}}"#,
        2.0 * block.forward.get(),
        2.0 * block.backward.get(),
        h.forward.get(),
        h.backward.get(),
    );
    let checks = compare_with_model(&db("gpt3-1.3b", "a100-80gb", &layers), &model).unwrap();
    assert_eq!(checks.len(), 2);
    let (b, hd) = (&checks[0], &checks[1]);
    assert_eq!(
        (b.layer.as_str(), b.layer_index, b.tp, b.mbs),
        ("transformer", 1, 2, 4)
    );
    assert_eq!(b.gpu, "a100-sxm4-80gb");
    assert!((b.time_error() + 0.5).abs() < 1e-9, "{}", b.time_error());
    assert!(b.model_activations.get() > 0.0);
    let act = b.activation_error().unwrap();
    assert!((act - (b.model_activations.get() / 1e8 - 1.0)).abs() < 1e-12);
    assert_eq!(b.measured_peak.map(|p| p.get()), Some(2e8));
    assert_eq!(hd.layer_index, head);
    assert!(hd.time_error().abs() < 1e-9);
    assert_eq!(hd.activation_error(), None);
    // Half the micro-batch, half the model's activations: tokens scale them.
    let half = r#"{"layer": "transformer", "tp": 2, "mbs": 2, "forward": 1, "backward": 1}"#;
    let c2 = compare_with_model(&db("gpt3-1.3b", "a100-80gb", half), &model).unwrap();
    let ratio = c2[0].model_activations.get() / b.model_activations.get();
    assert!((ratio - 0.5).abs() < 1e-9, "{ratio}");
}

#[test]
fn what_cannot_be_compared_says_why() {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let sample = r#"{"layer": "transformer", "tp": 1, "mbs": 1, "forward": 1, "backward": 1}"#;
    let other = compare_with_model(&db("llama3-8b", "a100-80gb", sample), &model).unwrap_err();
    assert!(matches!(&other, CompareError::NoProfileOfModel { found, .. } if found == "llama3-8b"));
    let unknown = compare_with_model(&db("gpt3-1.3b", "my-gpu", sample), &model).unwrap_err();
    assert!(matches!(unknown, CompareError::UnknownGpu { .. }));
    let far = r#"{"layer": 999, "tp": 1, "mbs": 1, "forward": 1, "backward": 1}"#;
    let beyond = compare_with_model(&db("gpt3-1.3b", "a100-80gb", far), &model).unwrap_err();
    assert!(matches!(
        beyond,
        CompareError::LayerOutOfRange { layer: 999, .. }
    ));
}
