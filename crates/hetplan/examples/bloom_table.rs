//! Prints docs/validation.md §7's table: BigScience's BLOOM-176B sizing runs (A100 80GB,
//! Megatron-DeepSpeed, ZeRO-1, full checkpointing; `data/published/bigscience_bloom_prequel.csv`,
//! 56 rows, their header says how each figure was measured) beside hetplan's analytic
//! estimate: iteration time, the peak memory nvidia-smi showed against hetplan's device total
//! (allocated + allocator cache + runtime reserve), and the out-of-memory verdict.
//! `cargo run --release -p hetplan --example bloom_table`

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::hf::parse_hf_config;
use hetplan::plan::inline::parse_inline_plan;
use std::collections::BTreeMap;

/// One CSV line's fields (double-quoted fields may hold commas; `""` is a quote).
fn fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/published/bigscience_bloom_prequel.csv"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let header = fields(lines.next().expect("a header"));
    println!(
        "| row | model | tp·pp·dp, mbs | precision | measured s | estimated s | error | \
         nvidia-smi GB | estimated GB | error | verdict |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|");
    let (mut time_err, mut mem_err) = (Vec::new(), Vec::new());
    let (mut oom_rows, mut oom_caught) = (0, 0);
    for line in lines {
        let f: BTreeMap<&str, String> = header
            .iter()
            .map(String::as_str)
            .zip(fields(line))
            .collect();
        let int = |k: &str| {
            f[k].trim()
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{k}: {}", f[k]))
        };
        let config = format!(
            r#"{{"model_type": "bloom", "n_layer": {}, "hidden_size": {}, "n_head": {}, "vocab_size": 250880}}"#,
            int("n_layers"),
            int("hidden"),
            int("n_heads")
        );
        let model = parse_hf_config(&config, "bloom").expect("a BLOOM config");
        let cluster = catalog_cluster(&format!("{}x8xa100-sxm4-80gb@400Gbps", int("nodes")))
            .expect("the cluster");
        // fp16 before the 'Rebalancing layers' section, bf16 after (the header).
        let precision = if f["precision"].starts_with("bf16") {
            "bf16"
        } else {
            "fp16"
        };
        let spec = format!(
            "tp={},pp={},dp={},mbs={},gbs={},zero=1,ckpt=full,engine=deepspeed,precision={precision}",
            int("tp"),
            int("pp"),
            int("dp"),
            int("micro_batch"),
            int("global_batch")
        );
        let mut plan = parse_inline_plan(&spec, &model, &cluster).expect("the row's plan");
        // After "Rebalancing layers": DeepSpeed's BF16_Optimizer, whose gradient accumulation
        // buffer is FP32 (`data_types.grad_accum_dtype: fp32`), 4 B per parameter.
        if f["precision"].contains("fp32 grad") {
            plan.collective_dtypes.gradients = Some(hetplan::plan::Precision::Fp32);
        }
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: 2048,
        };
        let e = estimate(w, &w.validate(&plan).expect("valid"), &Analytic);
        let gb = (e.stages.iter())
            .map(|s| s.memory.total.get())
            .fold(0.0, f64::max)
            / 1e9;
        let oom = f["peak_mem_unit"] == "OOM";
        let measured_s = f["step_time_s"].trim().parse::<f64>().ok();
        let measured_gb = f["peak_mem"].trim().parse::<f64>().ok();
        let pct = |est: f64, m: Option<f64>| match m {
            Some(m) => format!("{:+.1}%", 100.0 * (est / m - 1.0)),
            None => "-".into(),
        };
        if let Some(m) = measured_s {
            time_err.push(e.iteration_time_s / m - 1.0);
        }
        if let Some(m) = measured_gb {
            mem_err.push(gb / m - 1.0);
        }
        if oom {
            oom_rows += 1;
            oom_caught += usize::from(!e.fits);
        }
        let verdict = match (oom, e.fits) {
            (true, false) => "OOM, predicted",
            (true, true) => "**OOM, predicted to fit**",
            (false, true) => "ran, fits",
            (false, false) => "ran, predicted OOM",
        };
        println!(
            "| {} | {}L {}h | {}·{}·{}, {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} |",
            f["row_id"].trim_start_matches("bigscience_bloom_prequel-"),
            int("n_layers"),
            int("hidden"),
            int("tp"),
            int("pp"),
            int("dp"),
            int("micro_batch"),
            f["precision"].split(' ').next().unwrap_or(""),
            measured_s.map_or("-".into(), |m| format!("{m:.1}")),
            e.iteration_time_s,
            pct(e.iteration_time_s, measured_s),
            measured_gb.map_or(if oom { "OOM".into() } else { "-".into() }, |m| format!(
                "{m:.0}"
            )),
            gb,
            pct(gb, measured_gb),
            verdict,
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    println!(
        "\n{} rows with a time: median error {:+.1}%, median |error| {:.1}%; {} with a memory: \
         median error {:+.1}%, median |error| {:.1}%; {} of {} out-of-memory rows predicted.",
        time_err.len(),
        100.0 * median(&mut time_err.clone()),
        100.0 * median(&mut abs(&time_err)),
        mem_err.len(),
        100.0 * median(&mut mem_err.clone()),
        100.0 * median(&mut abs(&mem_err)),
        oom_caught,
        oom_rows
    );
}
