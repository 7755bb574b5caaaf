//! hetplan's estimate against whole training steps measured on an NVIDIA H200
//! (`data/measured/h200-sxm-141gb/steps.jsonl`, written by `tools/gpu_check/steps.py` with
//! `python -m hetplan.step`'s recipe: plain PyTorch, BF16 autocast over FP32 weights, fused
//! AdamW, no checkpointing, one GPU). The measurements are fixed; the model moves. This holds
//! the model to them: the step time within today's error, the memory (the device's, as
//! nvidia-smi counts it: the allocator's peak reservation and the CUDA context) within 5%
//! median, and the out-of-memory verdict wherever a step ran out of memory
//! (docs/validation.md §5).

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, ComputeTimes, Estimate, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;

const STEPS: &str = include_str!("../../../data/measured/h200-sxm-141gb/steps.jsonl");
const FSDP: &str = include_str!("../../../data/measured/h200-sxm-141gb/fsdp_step.jsonl");

struct Row {
    model: String,
    seq: u64,
    mbs: u64,
    optimizer: String,
    /// None: out of memory.
    step_s: Option<f64>,
    device_bytes: Option<f64>,
}

fn rows() -> Vec<Row> {
    json_lines(STEPS)
        .into_iter()
        .map(|v| {
            let m = &v["measured"];
            let oom = m["out_of_memory"].as_bool().unwrap_or(false);
            let device = match (
                m["peak_reserved_bytes"].as_f64(),
                m["context_bytes"].as_f64(),
            ) {
                (Some(r), Some(c)) if !oom => Some(r + c),
                _ => None,
            };
            Row {
                model: v["model"].as_str().unwrap().to_string(),
                seq: v["seq_len"].as_u64().unwrap(),
                mbs: v["mbs"].as_u64().unwrap(),
                optimizer: v["optimizer"].as_str().unwrap().to_string(),
                step_s: if oom { None } else { m["step_s"].as_f64() },
                device_bytes: device,
            }
        })
        .collect()
}

/// The JSON objects of a JSON-lines file, blank lines skipped.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    (text.lines())
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// hetplan's estimate of the one-GPU step the measurements ran: `dp=1`, engine `fsdp` (PyTorch's
/// mixed precision), BF16, one micro-batch of `mbs`, ZeRO `zero`, the loss eager
/// (`compile=blocks`: the scripts call `F.cross_entropy` uncompiled; their blocks' norm is
/// `nn.RMSNorm`, one kernel, their SwiGLU two kernels and they have no rotary embedding, which
/// fused blocks price nearest: 4 B per MLP element under, a 4 B rope over).
fn one_gpu_step(
    model: &str,
    seq: u64,
    mbs: u64,
    zero: u32,
    compute: &dyn ComputeTimes,
) -> Estimate {
    let cluster = catalog_cluster("1x1xh200-sxm-141gb").unwrap();
    let model = catalog_model(model).unwrap();
    let w = Workload {
        model: &model,
        cluster: &cluster,
        seq_len: seq,
    };
    let spec =
        format!("dp=1,mbs={mbs},gbs={mbs},zero={zero},engine=fsdp,precision=bf16,compile=blocks");
    let plan = parse_inline_plan(&spec, &model, &cluster).unwrap();
    estimate(w, &w.validate(&plan).unwrap(), compute)
}

#[test]
fn one_gpu_steps_on_an_h200_time_memory_and_the_verdict() {
    let rows = rows();
    // The data is what the test says it is: steps that ran and steps that did not.
    assert!(rows.len() >= 10, "{} rows", rows.len());
    let (mut time_err, mut mem_err) = (Vec::new(), Vec::new());
    let mut ooms = 0;
    for r in &rows {
        // The estimate prices fused AdamW (torchtitan's), which keeps no temporaries.
        if r.optimizer != "fused" {
            continue;
        }
        let e = one_gpu_step(&r.model, r.seq, r.mbs, 0, &Analytic);
        let what = format!("{} seq {} mbs {}", r.model, r.seq, r.mbs);
        match (r.step_s, r.device_bytes) {
            (Some(t), Some(b)) => {
                time_err.push(e.iteration_time_s / t - 1.0);
                mem_err.push(e.peak_memory_bytes / b - 1.0);
            }
            _ => {
                ooms += 1;
                assert!(!e.fits, "{what} ran out of memory; hetplan says it fits");
            }
        }
    }
    assert!(ooms >= 1 && time_err.len() >= 6);
    let t = median(time_err.iter().map(|e| e.abs()).collect());
    let m = median(mem_err.iter().map(|e| e.abs()).collect());
    // Today's values (docs/validation.md §5): the time within 10% median (7.3%) and 12.5% on
    // every step (11.8%: GPT-3 1.3B, whose unaligned 50,257-entry head runs 5-7x slower, now
    // priced so; 27.7% before); the memory within 5% median (2.4%) and 10% on every step (6.9%).
    assert!(t <= 0.10, "median |time error| {t:.3}: {time_err:?}");
    let worst_time = time_err.iter().fold(0.0f64, |a, e| a.max(e.abs()));
    assert!(
        worst_time <= 0.125,
        "largest |time error| {worst_time:.3}: {time_err:?}"
    );
    assert!(m <= 0.05, "median |memory error| {m:.3}: {mem_err:?}");
    let worst = mem_err.iter().fold(0.0f64, |a, e| a.max(e.abs()));
    assert!(
        worst <= 0.10,
        "largest |memory error| {worst:.3}: {mem_err:?}"
    );
}

/// The same Llama-2 7B step as autocast and as FSDP2 over one rank, blocks compiled as
/// torchtitan compiles them (`fsdp_step.jsonl`): the estimate of the matching plan, ZeRO-0
/// and ZeRO-3 on engine `fsdp`, within 10% of each, and FSDP2's own copies priced.
#[test]
fn fsdp2_against_autocast_on_one_h200() {
    let est = |zero: u32| one_gpu_step("llama2-7b", 2048, 1, zero, &Analytic).iteration_time_s;
    let measured = |variant: &str| -> f64 {
        let times: Vec<f64> = json_lines(FSDP)
            .into_iter()
            .filter(|v| v["variant"] == variant)
            .map(|v| v["step_s"].as_f64().unwrap())
            .collect();
        assert!(!times.is_empty(), "no {variant} row");
        median(times)
    };
    let (amp, fsdp) = (est(0), est(3));
    for (what, e, m) in [
        ("autocast", amp, measured("amp-compile")),
        ("FSDP2", fsdp, measured("fsdp2-compile")),
    ] {
        assert!(
            (e / m - 1.0).abs() <= 0.10,
            "{what}: estimate {e:.4} s, measured {m:.4} s"
        );
    }
    // FSDP2's copy-out and its casts of the reduce-scatter's input are charged beside the
    // autocast plan's: 14 B per weight more at one rank, 22 ms of Llama-2 7B's 6.7 billion.
    assert!(fsdp - amp > 0.015 && fsdp - amp < 0.03, "{amp} {fsdp}");
}

/// With the layers measured on the same GPU (`profile-llama2-7b.json`, eager PyTorch as the
/// steps ran), the estimate of the Llama-2 7B steps keeps the engine's costs the profile does
/// not hold — the optimizer step, and PyTorch's mixed-precision casts, which the profiler's
/// BF16 layers never make — and lands within 10% of each measured step.
#[test]
fn profiled_estimates_of_the_measured_steps() {
    use hetplan::cost::Profiled;
    use hetplan::profile::{ProfileDb, ProfileIndex};
    let db = ProfileDb::parse(include_str!(
        "../../../data/measured/h200-sxm-141gb/profile-llama2-7b.json"
    ))
    .unwrap();
    let index = ProfileIndex::new(&db);
    let profiled = Profiled {
        index: &index,
        interpolation: Default::default(),
    };
    let mut checked = 0;
    for r in rows() {
        let (true, Some(t)) = (
            r.model == "llama2-7b" && r.seq == 2048 && r.optimizer == "fused",
            r.step_s,
        ) else {
            continue;
        };
        let with = one_gpu_step("llama2-7b", 2048, r.mbs, 0, &profiled).iteration_time_s;
        let analytic = one_gpu_step("llama2-7b", 2048, r.mbs, 0, &Analytic).iteration_time_s;
        assert!(with != analytic, "mbs {}: the profile was not used", r.mbs);
        assert!(
            (with / t - 1.0).abs() <= 0.10,
            "mbs {}: profiled estimate {with:.4} s, measured {t:.4} s",
            r.mbs
        );
        checked += 1;
    }
    assert!(checked >= 2, "{checked} steps checked");
}

/// GPT-2's 50,257-entry head leaves cuBLAS its unaligned kernels (`alignment.json`: 5-7x
/// slower than the same head padded to 50,304): priced so where the engine runs the vocabulary
/// as it is, not where Megatron pads it.
#[test]
fn an_unaligned_head_is_slow_unless_the_engine_pads_the_vocabulary() {
    use hetplan::cost::LayerShape;
    let gpt = catalog_model("gpt3-1.3b").unwrap();
    let h200 = hetplan::gpu::lookup("h200-sxm-141gb").unwrap();
    let head = gpt.layers.len() - 1;
    let shape = |pads_vocabulary| LayerShape {
        pads_vocabulary,
        ..LayerShape::plain(8, 2048, 1, hetplan::plan::Precision::Bf16)
    };
    let t = |pads| {
        let l = Analytic.layer_time(&h200, &gpt, head, shape(pads));
        (l.forward + l.backward).get()
    };
    let (plain, padded) = (t(false), t(true));
    // The head's three products, 3.4 TFLOP at 16,384 tokens, dominate the layer.
    assert!(plain / padded > 3.0, "{plain} vs {padded}");
    // A block's widths are all aligned: padding changes nothing there.
    let block = |pads| {
        let l = Analytic.layer_time(&h200, &gpt, 1, shape(pads));
        (l.forward + l.backward).get()
    };
    assert_eq!(block(false), block(true));
}

const CHECKPOINTED: &str =
    include_str!("../../../data/measured/h200-sxm-141gb/ac_step_flash.jsonl");
const SPLIT_MLP: &str = include_str!("../../../data/measured/h200-sxm-141gb/ac_step_split.jsonl");

/// `model` (Llama-3 8B's or 70B's published shape) cut to its first `blocks` decoder blocks, as
/// `tools/gpu_check/ac_step.py --blocks` builds it.
fn cut_llama3(model: &str, blocks: u64) -> hetplan::model::Model {
    let (hidden, ffn, heads) = match model {
        "llama3-8b" => (4096, 14336, 32),
        "llama3-70b" => (8192, 28672, 64),
        other => panic!("no shape for {other}"),
    };
    let src = format!(
        r#"{{"model_type": "llama", "hidden_size": {hidden}, "intermediate_size": {ffn},
        "num_attention_heads": {heads}, "num_key_value_heads": 8,
        "num_hidden_layers": {blocks}, "vocab_size": 128256, "max_position_embeddings": 8192,
        "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false}}"#
    );
    hetplan::model::hf::parse_hf_config(&src, model).unwrap()
}

/// Activation checkpointing as torchtitan runs it, on one H200 (`ac_step_flash.jsonl`: FSDP2
/// over one rank, FlashAttention-2, 8,192 tokens, one sequence): Llama-3 8B cut to 8 blocks and
/// Llama-3 70B's shape cut to 2, each block left alone, under the op-level policy or recomputed
/// whole, eager and compiled. Every step within 8% of the estimate (the script's eager blocks
/// are priced as `compile=blocks`, as `one_gpu_step` says why: +2…−7% today), the memory
/// within 9% (the 8B rows +1…−6%; the 70B-shape rows −7…−8%: PyTorch's allocator reserved 22–24
/// GiB beyond their peak allocation, among 1–4 GB FP32 weight and logit tensors, where hetplan
/// allows 6.4 GiB, and hetplan counts 12 GiB more allocated than their peak), and what
/// a whole recomputation adds to the compiled step within 10% of what it added: 50.0 and
/// 37.9 ms against 48.6 and 38.6 estimated. Priced as the blocks' whole forward — what
/// Megatron's checkpoint function reruns, not PyTorch's, which stops before the closing down
/// projection — it was 64.7 and 54.2 ms, 29% and 43% over.
#[test]
fn checkpointed_steps_on_an_h200() {
    let rows: Vec<serde_json::Value> = json_lines(CHECKPOINTED);
    assert_eq!(rows.len(), 10);
    let cluster = catalog_cluster("1x1xh200-sxm-141gb").unwrap();
    let estimate_of = |r: &serde_json::Value, ac: &str| {
        let model = cut_llama3(r["model"].as_str().unwrap(), r["blocks"].as_u64().unwrap());
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: r["seq_len"].as_u64().unwrap(),
        };
        let spec =
            format!("dp=1,mbs=1,gbs=1,zero=3,engine=fsdp,precision=bf16,compile=blocks,ckpt={ac}");
        let plan = parse_inline_plan(&spec, &model, &cluster).unwrap();
        estimate(w, &w.validate(&plan).unwrap(), &Analytic)
    };
    let measured = |model: &str, compile: &str, ac: &str| {
        rows.iter()
            .find(|r| r["model"] == model && r["compile"] == compile && r["ac"] == ac)
            .map(|r| r["step_s"].as_f64().unwrap())
    };
    for r in &rows {
        let ac = r["ac"].as_str().unwrap();
        let e = estimate_of(r, ac);
        let what = format!("{} {} {ac}", r["model"], r["compile"]);
        let t = r["step_s"].as_f64().unwrap();
        let time_err = e.iteration_time_s / t - 1.0;
        let device =
            r["peak_reserved_bytes"].as_f64().unwrap() + r["context_bytes"].as_f64().unwrap();
        let mem_err = e.peak_memory_bytes / device - 1.0;
        assert!(
            time_err.abs() <= 0.08,
            "{what}: estimate {:.4} s, measured {t:.4} s",
            e.iteration_time_s
        );
        assert!(mem_err.abs() <= 0.09, "{what}: memory {mem_err:+.3}");
    }
    // The op-level policy on blocks whose MLP runs `w1` and `w3` apart, as torchtitan's does
    // and as hetplan counts the products (`ac_step_split.jsonl`): what it adds to the
    // compiled step, 16.4 ms measured against 17.5 estimated (the output projection, `w3` and
    // the elementwise ops; the down projection is kept), within 10%, and both steps within 8%.
    let split: Vec<serde_json::Value> = json_lines(SPLIT_MLP);
    assert_eq!(split.len(), 4);
    let step = |ac: &str, compile: &str| {
        let r = (split.iter())
            .find(|r| r["ac"] == ac && r["compile"] == compile && r["mlp"] == "split")
            .unwrap();
        (
            r["step_s"].as_f64().unwrap(),
            estimate_of(r, ac).iteration_time_s,
        )
    };
    let ((none, e_none), (ops, e_ops)) = (step("none", "blocks"), step("ops", "blocks"));
    for (what, m, e) in [("none", none, e_none), ("ops", ops, e_ops)] {
        assert!(
            (e / m - 1.0).abs() <= 0.08,
            "split MLP, {what}: {e:.4} s against {m:.4} s"
        );
    }
    assert!(
        ((e_ops - e_none) / (ops - none) - 1.0).abs() <= 0.10,
        "the op-level policy adds {:.4} s, measured {:.4} s",
        e_ops - e_none,
        ops - none
    );
    for model in ["llama3-8b", "llama3-70b"] {
        let (Some(none), Some(full)) = (
            measured(model, "blocks", "none"),
            measured(model, "blocks", "full"),
        ) else {
            panic!("{model}: no compiled rows")
        };
        let r = rows.iter().find(|r| r["model"] == model).unwrap();
        let added =
            estimate_of(r, "full").iteration_time_s - estimate_of(r, "none").iteration_time_s;
        assert!(
            (added / (full - none) - 1.0).abs() <= 0.10,
            "{model}: recomputing adds {added:.4} s, measured {:.4} s",
            full - none
        );
    }
}
