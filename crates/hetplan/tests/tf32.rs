//! FP32 training with TF32 matrix products (`precision=tf32`, issue 14): the TF32 rates of the
//! catalog, what they change in an estimate (time where the GPU has TF32, nothing else), and
//! that the exports train in FP32 with PyTorch's TF32 switch set in their launch. Its agreement
//! with Sailor's per-layer measurements is in docs/validation.md §2.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Estimate, Workload};
use hetplan::export::{export, Job, Target};
use hetplan::gpu::{lookup, tf32_peak};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::plan::{Precision, ValidPlan};
use hetplan::{Cluster, Model};

fn est(model: &Model, cluster: &Cluster, spec: &str) -> Estimate {
    let w = Workload {
        model,
        cluster,
        seq_len: 2048,
    };
    let plan = parse_inline_plan(spec, model, cluster).unwrap();
    estimate(w, &w.validate(&plan).unwrap(), &Analytic)
}

/// The TF32 peaks the vendors publish (dense, TFLOP/s), against the catalog's.
#[test]
fn tf32_rates_are_the_datasheets() {
    for (gpu, tflops) in [
        ("a100-sxm4-80gb", 156.0),
        ("h100-sxm5-80gb", 494.7),
        ("rtx-3090", 35.6),
        ("rtx-4090", 82.6),
        ("l4", 60.0),
        ("rtx-a6000", 77.4),
    ] {
        let spec = lookup(gpu).unwrap();
        let got = tf32_peak(&spec).unwrap().get() / 1e12;
        assert!(
            (got / tflops - 1.0).abs() < 0.02,
            "{gpu}: {got:.1} TFLOP/s, the datasheet {tflops}"
        );
    }
    for gpu in ["v100-sxm2-32gb", "t4", "titan-rtx", "rtx-2080"] {
        assert!(tf32_peak(&lookup(gpu).unwrap()).is_none(), "{gpu}");
    }
}

/// On an A100 TF32 speeds the step and leaves the memory as FP32's; on Volta and Turing,
/// which have no TF32, the estimate is FP32's to the byte and the nanosecond.
#[test]
fn tf32_is_faster_where_the_gpu_has_it_and_fp32_elsewhere() {
    let model = catalog_model("gpt3-1.3b").unwrap();
    let spec = "dp=8,mbs=2,gbs=64,zero=1";
    let a100 = catalog_cluster("1x8xa100-sxm4-80gb").unwrap();
    let (fp32, tf32) = (
        est(&model, &a100, &format!("{spec},precision=fp32")),
        est(&model, &a100, &format!("{spec},precision=tf32")),
    );
    let faster = fp32.iteration_time_s / tf32.iteration_time_s;
    // The products are most of a 1.3B step: several times faster, less than the 8× of the
    // peaks (the FP32 elementwise work, attention's memory traffic and the optimizer stay).
    assert!((2.0..8.0).contains(&faster), "fp32/tf32 = {faster:.2}");
    assert_eq!(fp32.peak_memory_bytes, tf32.peak_memory_bytes);
    // MFU against the TF32 peak, not the FP32 one.
    assert!(tf32.mfu < 1.0 && tf32.mfu > 0.0, "{}", tf32.mfu);
    for cluster in ["1x8xv100-sxm2-32gb", "2x4xt4"] {
        let c = catalog_cluster(cluster).unwrap();
        let (a, b) = (
            est(&model, &c, &format!("{spec},precision=fp32")),
            est(&model, &c, &format!("{spec},precision=tf32")),
        );
        assert_eq!(a.iteration_time_s, b.iteration_time_s, "{cluster}");
        assert_eq!(a.peak_memory_bytes, b.peak_memory_bytes, "{cluster}");
    }
}

/// No engine has a TF32 setting: every export trains in FP32, its launch setting PyTorch's
/// cuBLAS switch for every process torchrun starts; an FP32 export does not set it.
#[test]
fn exports_train_in_fp32_with_tf32_allowed_in_the_launch() {
    // A Llama: torchtitan builds only its own architectures.
    let model = catalog_model("llama3-8b").unwrap();
    let cluster = catalog_cluster("1x8xa100-sxm4-80gb").unwrap();
    let switch = "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1";
    for (target, engine) in [
        (Target::Megatron, "megatron"),
        (Target::Deepspeed, "deepspeed"),
        (Target::Torchtitan, "fsdp"),
    ] {
        for precision in [Precision::Tf32, Precision::Fp32] {
            let spec = format!(
                "dp=8,mbs=2,gbs=64,precision={},engine={engine}",
                precision.name()
            );
            let plan = parse_inline_plan(&spec, &model, &cluster).unwrap();
            assert_eq!(plan.precision, precision);
            let valid = ValidPlan::new(plan, &model, &cluster).unwrap();
            let job = Job {
                model: &model,
                cluster: &cluster,
                plan: &valid,
                seq_len: 2048,
            };
            let out = export(target, job).unwrap();
            let launch = out.files.iter().find(|f| f.path == "launch.sh").unwrap();
            let torchrun = launch.contents.find("exec torchrun").unwrap();
            match launch.contents.find(switch) {
                Some(at) => assert!(precision == Precision::Tf32 && at < torchrun, "{spec}"),
                None => assert_eq!(precision, Precision::Fp32, "{spec}"),
            }
            // FP32 otherwise, as the FP32 export: no 16-bit setting anywhere.
            for f in &out.files {
                assert!(
                    !f.contents.contains("--bf16") && !f.contents.contains("\"bf16\""),
                    "{spec}: {}",
                    f.path
                );
            }
        }
    }
}

/// AMD's MI300X is priced as FP32 (ROCm's PyTorch ignores `allow_tf32` without hipBLASLt's
/// own switch), and TF32 is never priced below the FP32 rate (the RTX 3090's are about equal).
#[test]
fn tf32_never_prices_below_fp32_nor_where_pytorch_does_not_reach_it() {
    use hetplan::cost::compute::matmul_peak;
    let mi300x = lookup("mi300x").unwrap();
    assert!(tf32_peak(&mi300x).is_none());
    for gpu in [
        "rtx-3090",
        "rtx-4090",
        "a10g",
        "a100-sxm4-80gb",
        "v100-sxm2-32gb",
        "mi300x",
    ] {
        let g = lookup(gpu).unwrap();
        assert!(
            matmul_peak(&g, Precision::Tf32).get() >= matmul_peak(&g, Precision::Fp32).get(),
            "{gpu}"
        );
    }
}
