//! The published runs of `data/published/` (docs/validation.md §8): every row becomes the
//! problem it ran, and hetplan's estimate stays within today's accuracy per GPU generation,
//! precision and source (bounds just above the medians measured when they were set, so a
//! change that makes any group worse fails here), the simulator agrees with the estimate, and
//! the out-of-memory verdict holds where it holds today.

use hetplan::calibration::published::{
    check, median_p90, parse, Checked, MemoryQuantity, Outcome, BUILTIN,
};

fn cases() -> (Vec<(String, Checked)>, Vec<String>) {
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    for (source, text) in BUILTIN {
        for (i, o) in parse(source, text).unwrap().into_iter().enumerate() {
            match o {
                // The simulator on every third row (debug builds are slow).
                Outcome::Case(c) => out.push((source.to_string(), check(&c, i % 3 == 0).unwrap())),
                Outcome::Skipped { id, reason, .. } => skipped.push(format!("{id}: {reason}")),
            }
        }
    }
    (out, skipped)
}

fn group<'a>(all: &'a [(String, Checked)], source: &str, gpu: &str, fp8: bool) -> Vec<&'a Checked> {
    all.iter()
        .filter(|(s, c)| s == source && c.gpu.starts_with(gpu) && c.precision.is_fp8() == fp8)
        .map(|(_, c)| c)
        .collect()
}

#[test]
fn every_row_is_a_problem_or_says_why_not() {
    let (all, skipped) = cases();
    assert_eq!(all.len(), 43 + 9 + 56 + 8, "{skipped:?}");
    // The Selene rows of Megatron's 2021 table publish neither heads nor layout.
    assert_eq!(skipped.len(), 10, "{skipped:?}");
    assert!(skipped
        .iter()
        .all(|s| s.starts_with("megatron_lm_readme-0")));
    // The generator of problems is varied: engines, precisions, GPUs, layouts.
    let specs: Vec<&str> = all.iter().map(|(_, c)| c.spec.as_str()).collect();
    for needle in [
        "engine=fsdp",
        "engine=megatron",
        "engine=deepspeed",
        "precision=fp8",
        "precision=fp16",
        "cp=8",
        "pp=16",
        "v=2",
        "zero=3",
        "zero=1",
        "ep=32,etp=1",
        "capacity=1",
        "v=12",
    ] {
        assert!(
            specs.iter().any(|s| s.contains(needle)),
            "no row with {needle}"
        );
    }
    for gpu in ["a100", "h100", "h200"] {
        assert!(all.iter().any(|(_, c)| c.gpu.starts_with(gpu)), "no {gpu}");
    }
    // Both memory quantities are read, and each row says what it assumed.
    let q = |m: MemoryQuantity| {
        all.iter()
            .any(|(_, c)| c.measured_memory.map(|x| x.quantity) == Some(m))
    };
    assert!(q(MemoryQuantity::TorchReserved) && q(MemoryQuantity::NvidiaSmi));
    assert!(all.iter().any(|(_, c)| c
        .assumptions
        .iter()
        .any(|a| a.contains("500 W") || a.contains("capped"))
        || c.assumptions.iter().any(|a| a.contains("HBM2e"))));
}

#[test]
fn the_estimate_stays_within_todays_accuracy_per_group() {
    let (all, _) = cases();
    // (source, GPU, FP8, bound on the median |error| of throughput). With TP communication
    // overlap priced (the README's `--tp-comm-overlap`, torchtitan's async TP) Megatron's
    // median fell from 22.5% to 14.0%; torchtitan's H100 medians rose (13.9% → 20.3% BF16,
    // 9.6% → 17.5% FP8) because its async-TP rows, priced as blocking before, had offset the
    // optimism every torchtitan row shares. The Hopper kernel rates measured on an H200
    // (attention per kernel, HBM, FP8 GEMMs), PyTorch's mixed-precision casts and FSDP2's
    // copies then moved Megatron to 12.3%, torchtitan H100 to 19.7% (BF16) and 17.8% (FP8),
    // H200 to 10.4%, A100 torchtitan to 10.7% (docs/validation.md §5 and §8). torchtitan's
    // rows without `torch.compile` priced eagerly (their norms, rotary embeddings and SwiGLU
    // as the separate kernels the code writes) took its H100 BF16 rows to 14.5%. Pricing its
    // selective checkpointing as the op-level policy it runs (`Recompute::Ops`: a third of
    // the products and the elementwise ops recomputed, where half the blocks recomputed whole
    // had charged about half a forward) made every such row faster by 2–6% — its memory
    // errors fell from +5…+20% to −2…−6% — and so more optimistic: A100 11.9%, H100 16.4%
    // (BF16) and 19.6% (FP8), H200 15.6% (docs/validation.md §8). Checkpointing only the
    // transformer layers, as every engine does (`Layer::checkpointable`: the output layer is
    // no longer recomputed on the last stage), made BLOOM's rows faster: 11.9% → 14.7%, and
    // torchtitan's FP8 rows 21.0%. A recomputation in PyTorch stops before each block's
    // closing down projection (`LayerShape::early_stop`, measured on an H200: what recomputing
    // adds within 3% where the whole forward had been charged 29–43% over; llm-foundry's
    // checkpointed A100 rows −8…−13% → −0…−6%): torchtitan's full-recompute rows, which had
    // looked accurate, now share the others' optimism — A100 12.6%, H100 18.1% (BF16) and
    // 22.6% (FP8), H200 16.1% — a uniform +6…+23% across checkpointing modes that one GPU
    // does not show (docs/validation.md §5, §8). Megatron's ZeRO-1 parameter gather ahead
    // of the forward priced layer by layer, as the simulator runs it (each gather paying the
    // ring's latencies over 48 nodes): its H100 rows 12.3% → 14.2%, the simulation's figure.
    // Unfused attention's batched products priced slow for heads not 16-byte wide (five BLOOM
    // rows, +45…+56% → +7…+20%): BLOOM 14.7% → 14.0%, its p90 44.7% → 28.6%. DeepSpeed's
    // gradient reduction after the backward, not beside it: BLOOM 14.0% → 13.6%.
    // torchtitan's April 2024 A100 tables run eagerly, as their configs did (the Triton
    // RMSNorm on 8B and 13B): A100 torchtitan 12.2% → 7.8%. The power cap's exponent
    // calibrated (`gpu::POWER_CLOCK_EXPONENT` 1/3 → 2/3: the capped H100 rows brought to the
    // uncapped A100 rows' optimism): torchtitan H100 18.0% → 7.6% (BF16), 21.0% → 11.1% (FP8).
    // FSDP's optimizer step priced with its host time (`FSDP_OPTIMIZER_HOST_S_PER_LAYER`):
    // A100 3.5%, H100 5.2% (BF16) and 10.0% (FP8), H200 15.6% → 4.6%. Every torchtitan row
    // reducing in FP32, as torchtitan does: A100 3.0%, H100 4.9% (BF16), 10.3% (FP8).
    let bounds = [
        ("bigscience_bloom_prequel", "a100", false, 0.14),
        ("torchtitan", "a100", false, 0.04),
        ("megatron_lm_readme", "h100", false, 0.15),
        ("torchtitan", "h100", false, 0.06),
        ("torchtitan", "h100", true, 0.11),
        ("torchtitan", "h200", true, 0.05),
    ];
    for (source, gpu, fp8, bound) in bounds {
        let rows = group(&all, source, gpu, fp8);
        let errs: Vec<f64> = rows.iter().filter_map(|c| c.time_error()).collect();
        assert!(!errs.is_empty(), "{source} {gpu} {fp8}: no rows");
        let (median, _) = median_p90(&errs).unwrap();
        assert!(
            median <= bound,
            "{source} {gpu} fp8={fp8}: median {median:.3} > {bound}"
        );
    }
}

/// torchtitan ran the same job with and without `torch.compile` (Table 1 and 3 of its December
/// 2024 benchmarks: 8 and 128 GPUs): the eager rows' norms, rotary embeddings and SwiGLU run as
/// the separate kernels their code writes, which hetplan counts byte by byte from that code,
/// fitting nothing. The estimated slow-down is the measured one within 3% (1.162× on both,
/// against 1.157× and 1.162×; 1.188× and 1.190× before FSDP's per-step host time was priced,
/// which both pay).
#[test]
fn eager_and_compiled_torchtitan_differ_as_measured() {
    let (all, _) = cases();
    let row = |id: &str| {
        all.iter()
            .map(|(_, c)| c)
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    };
    for (eager, compiled) in [
        ("torchtitan-001", "torchtitan-002"),
        ("torchtitan-004", "torchtitan-005"),
    ] {
        let (e, c) = (row(eager), row(compiled));
        assert!(
            e.spec.contains("compile=off") && !c.spec.contains("compile=off"),
            "{}",
            e.spec
        );
        let measured =
            c.measured_tokens_per_s_per_gpu.unwrap() / e.measured_tokens_per_s_per_gpu.unwrap();
        let estimated = c.estimated_tokens_per_s_per_gpu / e.estimated_tokens_per_s_per_gpu;
        assert!(measured > 1.1, "{eager}: {measured}");
        assert!(
            (estimated / measured - 1.0).abs() < 0.03,
            "{eager}/{compiled}: compiled runs {measured:.3}× faster, estimated {estimated:.3}×"
        );
    }
}

/// torchtitan's A100 tables (April 2024) and its 405B row without optimizations ran the train
/// configs of their time: eagerly, with the Triton RMSNorm where the config names it (8B and
/// 13B) and PyTorch's where it does not (70B, 405B). The fused norm is a kernel of its own
/// when everything else runs eagerly: the same plan estimated with PyTorch's norm is slower.
#[test]
fn torchtitans_april_2024_rows_run_their_configs() {
    let mut cases = Vec::new();
    for (source, text) in BUILTIN.iter().filter(|(s, _)| *s == "torchtitan") {
        for o in parse(source, text).unwrap() {
            if let Outcome::Case(c) = o {
                cases.push(*c);
            }
        }
    }
    let row = |id: &str| cases.iter().find(|c| c.id == id).unwrap();
    let fused = |id: &str| row(id).model.transformer.as_ref().unwrap().fused_norm;
    for id in [
        "torchtitan-033",
        "torchtitan-036",
        "torchtitan-038",
        "torchtitan-043",
    ] {
        assert!(
            row(id).spec.contains("compile=off"),
            "{id}: {}",
            row(id).spec
        );
    }
    for id in [
        "torchtitan-036",
        "torchtitan-037",
        "torchtitan-039",
        "torchtitan-041",
    ] {
        assert!(fused(id), "{id}");
    }
    for id in [
        "torchtitan-033",
        "torchtitan-038",
        "torchtitan-042",
        "torchtitan-002",
    ] {
        assert!(!fused(id), "{id}");
    }
    // Rows that state their compile setting, or that ran later, keep it.
    assert!(!row("torchtitan-034").spec.contains("compile=off"));
    assert!(row("torchtitan-002").spec.contains("compile=blocks"));

    let c = row("torchtitan-037");
    let time = |model: &hetplan::model::Model| {
        let w = hetplan::cost::Workload {
            model,
            cluster: &c.cluster,
            seq_len: c.seq,
        };
        let plan = w.validate(&c.plan).unwrap();
        hetplan::cost::estimate(w, &plan, &hetplan::cost::Analytic).iteration_time_s
    };
    let mut torch_norm = c.model.transformer.clone().unwrap();
    torch_norm.fused_norm = false;
    let ratio = time(&torch_norm.build()) / time(&c.model);
    assert!(
        ratio > 1.02 && ratio < 1.10,
        "PyTorch's RMSNorm costs {ratio:.3}×"
    );
}

/// torchtitan compiles the loss with the model since April 2025, not in its December 2024
/// benchmarks (`compile=blocks`): the H200 rows of June 2025 keep no FP32 copy of the logits
/// (their memory was +54% while priced as the eager loss), the December rows do.
#[test]
fn torchtitan_memory_follows_what_it_compiled() {
    let (all, _) = cases();
    let tt = |gpu: &str| -> Vec<&Checked> {
        all.iter()
            .filter(|(s, c)| s == "torchtitan" && c.gpu.starts_with(gpu))
            .map(|(_, c)| c)
            .filter(|c| c.memory_error().is_some())
            .collect()
    };
    let h200 = tt("h200");
    assert_eq!(h200.len(), 2);
    for c in &h200 {
        assert!(!c.spec.contains("compile="), "{}", c.spec);
        let e = c.memory_error().unwrap();
        // −3.6% and −5.8% with the op-level checkpointing it ran (+20% and +19% priced as
        // half the blocks recomputed).
        assert!(e.abs() < 0.07, "{}: memory {e:+.3}", c.id);
    }
    let h100 = tt("h100");
    assert!(
        h100.iter().all(|c| c.spec.contains("compile=")),
        "December 2024"
    );
    let errs: Vec<f64> = h100.iter().filter_map(|c| c.memory_error()).collect();
    let (median, _) = median_p90(&errs).unwrap();
    // 2.7%: 13.9% before the op-level checkpointing of rows 001–006, 7.9% before the
    // full-recompute rows kept their head's activations (`Layer::checkpointable`), 3.6%
    // before every row's gradients were reduced in FP32 as torchtitan reduces them.
    assert!(median <= 0.03, "H100 memory median {median:.3}");
}

#[test]
fn the_simulator_agrees_with_the_estimate_on_published_plans() {
    let (all, _) = cases();
    let diffs: Vec<f64> = all
        .iter()
        .filter_map(|(_, c)| {
            Some(c.simulated_tokens_per_s_per_gpu? / c.estimated_tokens_per_s_per_gpu - 1.0)
        })
        .collect();
    assert!(diffs.len() >= 30, "{}", diffs.len());
    let (median, p90) = median_p90(&diffs).unwrap();
    assert!(
        median <= 0.02 && p90 <= 0.08,
        "median {median:.3}, p90 {p90:.3}"
    );
}

/// BLOOM's head-count comparisons: the same model and layout with heads whose width is not a
/// multiple of 8 16-bit elements ran 25–30% slower (unfused attention's batched products leave
/// cuBLAS's tensor-core kernels; `constants::UNALIGNED_BATCHED_GEMM_RELATIVE_EFFICIENCY`,
/// fitted on the two pairs). Each narrow-headed row is estimated within 3 points of its twin,
/// and the rows not used to fit it (heads of 150 and 450) within 25%, as the TP-8 rows with
/// aligned heads; they were +45…+56% with every head width priced alike.
#[test]
fn unaligned_heads_cost_what_blooms_head_comparisons_measured() {
    let (all, _) = cases();
    let err = |id: &str| {
        let c = (all.iter().map(|(_, c)| c))
            .find(|c| c.id == format!("bigscience_bloom_prequel-{id}"))
            .unwrap();
        c.time_error().unwrap()
    };
    for (aligned, narrow) in [("034", "036"), ("068", "070")] {
        let (a, n) = (err(aligned), err(narrow));
        assert!(
            (a - n).abs() < 0.03,
            "{aligned} {a:+.3} against {narrow} {n:+.3}"
        );
    }
    for id in ["002", "004", "006"] {
        let e = err(id);
        assert!(e.abs() < 0.25, "{id}: {e:+.3}");
    }
}

/// BLOOM's nvidia-smi readings: 4.2% (median) with NCCL's communicators counted (nvidia-smi
/// sees their buffers), 11.4% before, 14.8% before the embedding's and the head's activations
/// were kept (every engine checkpoints only its transformer layers).
#[test]
fn bloom_memory_stays_within_todays_accuracy() {
    let (all, _) = cases();
    let errs: Vec<f64> = group(&all, "bigscience_bloom_prequel", "a100", false)
        .iter()
        .filter_map(|c| c.memory_error())
        .collect();
    assert!(errs.len() >= 30, "{}", errs.len());
    let (median, _) = median_p90(&errs).unwrap();
    assert!(median <= 0.05, "BLOOM memory median {median:.3}");
    // Without data parallelism DeepSpeed's fp16 ZeRO-1 step holds its partition's gradients in
    // 16 bits and in FP32 (6 B a parameter) with the activations freed: rows 002 and 004 peak
    // there (−19.7% and −20.6% priced at the last backward), row 006 (dp 2) less. With NCCL's
    // buffers 002 is +3.0%, 004 +8.0% (one node: its three groups, TP, model-parallel and the
    // default, hold the same eight GPUs).
    for (id, within) in [("002", 0.05), ("004", 0.09)] {
        let c = (all.iter().map(|(_, c)| c))
            .find(|c| c.id == format!("bigscience_bloom_prequel-{id}"))
            .unwrap();
        let e = c.memory_error().unwrap();
        assert!(e.abs() < within, "{id}: memory {e:+.3}");
    }
}

#[test]
fn out_of_memory_rows_are_predicted_where_they_are_today() {
    let (all, _) = cases();
    let ooms: Vec<&Checked> = all.iter().map(|(_, c)| c).filter(|c| c.oom).collect();
    assert_eq!(ooms.len(), 4);
    // 054, 062 and (since NCCL's buffers are counted) 098 are caught; 112 is not
    // (docs/validation.md §7).
    for c in &ooms {
        let caught = !c.fits;
        let expected = ["054", "062", "098"].iter().any(|r| c.id.ends_with(r));
        assert_eq!(caught, expected, "{}", c.id);
    }
    // No run that ran is predicted out of memory.
    assert!(all.iter().all(|(_, c)| c.oom || c.fits));
}

#[test]
fn bad_rows_and_edited_cases_are_errors_not_panics() {
    // An edited case whose plan no longer suits its cluster: the plan's errors.
    let (_, text) = BUILTIN[0];
    let Some(Outcome::Case(mut case)) = parse("torchtitan", text).unwrap().into_iter().next()
    else {
        panic!("torchtitan's first row is a case");
    };
    case.plan.stages[0].tp = 3;
    assert!(check(&case, false).is_err());
    // A bad cell: the line and the column of the cell, and what was expected.
    let header = text.lines().find(|l| !l.starts_with('#')).unwrap();
    let row = text.lines().filter(|l| !l.starts_with('#')).nth(1).unwrap();
    let bad = row.replacen(",8192,16,2,", ",8192,sixteen,2,", 1);
    assert_ne!(bad, row, "the row has the cells the test edits");
    let e = parse("torchtitan", &format!("{header}\n{bad}\n")).unwrap_err();
    assert_eq!(e.line, Some(2), "{e:?}");
    assert!(e.message.contains("whole number in 1..="), "{}", e.message);
    assert_eq!(e.field.as_deref(), Some("global_batch"));
    let col = e.column.unwrap();
    assert!(bad[col - 1..].starts_with("sixteen"), "{e:?}");
}

/// NeMo's Megatron-Bridge H100 runs (docs/validation.md §8), held out: its dense FP8 rows
/// (Llama 3 70B, 405B with context parallelism) stay within their errors of today, and every
/// run fits — Transformer Engine keeps its FP8 products' inputs in FP8 for backward
/// (`memory::transformer_engine_fp8`) and the recipes keep the weights in FP8 only
/// (`--fp8-param-gather`, `Plan::fp8_params`); counted at 16 bits, the 70B rows were estimated
/// at 86.5 GiB of 79.2 and the 405B rows at 86.1. The mixture-of-experts rows are the first
/// published expert-parallel runs here; without the host's loop over the local experts
/// (`constants::MOE_HOST_S_PER_LOCAL_EXPERT`, calibrated on them) the estimate was +25% (4
/// local experts) to +193% (16) optimistic, with it each is within about 13% (GPT-OSS −13.0%)
/// and their median within 5%.
#[test]
fn megatron_bridge_runs_fit_and_stay_where_they_are() {
    let (all, _) = cases();
    let rows: Vec<&Checked> = (all.iter())
        .filter(|(s, _)| s == "nemo_megatron_bridge")
        .map(|(_, c)| c)
        .collect();
    assert_eq!(rows.len(), 8);
    // The models named by `shape_from` are their cards' (parameters in billions).
    let text = (BUILTIN.iter())
        .find(|(n, _)| *n == "nemo_megatron_bridge")
        .map(|(_, t)| *t)
        .unwrap();
    let mut checked = 0;
    for o in parse("nemo_megatron_bridge", text).unwrap() {
        let Outcome::Case(c) = o else { continue };
        let billions = c.model.params() as f64 / 1e9;
        let card = match &c.id[c.id.len() - 3..] {
            "001" => 116.8,
            "002" => 30.5,
            "003" | "004" => 235.1,
            _ => continue,
        };
        checked += 1;
        assert!((billions - card).abs() < 0.05, "{}: {billions}", c.id);
    }
    assert_eq!(checked, 4);
    // A configuration whose shape is not the row's is an error at the row's column.
    let line = text
        .lines()
        .find(|l| l.starts_with("nemo_megatron_bridge-002"))
        .unwrap();
    let bad = text.replace(line, &line.replacen(",48,2048,", ",47,2048,", 1));
    let e = parse("nemo_megatron_bridge", &bad).unwrap_err();
    assert!(
        e.message.contains("its `shape_from` configuration has 48"),
        "{e:?}"
    );
    assert_eq!(e.field.as_deref(), Some("n_layers"));
    let mut moe_errors = Vec::new();
    for c in &rows {
        assert!(c.fits, "{}: {:.1} GiB", c.id, c.estimated_memory.as_gib());
        let e = c.time_error().unwrap();
        let moe = c.spec.contains("ep=");
        let (lo, hi) = if moe { (-0.14, 0.06) } else { (0.0, 0.25) };
        assert!(lo <= e && e <= hi, "{}: {e:+.3}", c.id);
        if moe {
            moe_errors.push(e);
        }
    }
    let (median, _) = median_p90(&moe_errors).unwrap();
    assert!(median <= 0.05, "MoE median {median:.3}");
}
