//! Prints docs/validation.md §8: every published row of `data/published/` (torchtitan, the
//! Megatron-LM README, BigScience's BLOOM-176B sizing runs) beside hetplan's estimate and its
//! simulation of the same plan, then the median and 90th-percentile |error| per GPU generation,
//! precision and source.
//! `cargo run --release -p hetplan --example published_table [-- --no-sim]`

use hetplan::calibration::published::{check, median_p90, parse, Checked, MemoryQuantity, Outcome};
use std::collections::BTreeMap;

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:+.1}%", 100.0 * x))
}

fn main() {
    let simulate = !std::env::args().any(|a| a == "--no-sim");
    let mut groups: BTreeMap<String, Vec<Checked>> = BTreeMap::new();
    let mut skipped = Vec::new();
    println!(
        "| row | GPU | precision | plan | seq | measured tok/s/GPU | estimate | error | simulation | error | \
         measured memory | estimate | error | verdict |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (source, text) in hetplan::calibration::published::BUILTIN {
        for outcome in parse(source, text).unwrap_or_else(|e| panic!("{source}: {e}")) {
            let case = match outcome {
                Outcome::Case(c) => c,
                Outcome::Skipped { id, reason, .. } => {
                    skipped.push(format!("{id}: {reason}"));
                    continue;
                }
            };
            let c = check(&case, simulate).unwrap_or_else(|e| panic!("{}: {e:?}", case.id));
            let mem = c.measured_memory.map_or(
                if c.oom { "OOM".into() } else { "-".into() },
                |m| match m.quantity {
                    MemoryQuantity::TorchReserved => {
                        format!("{:.1} GiB reserved", m.bytes.as_gib())
                    }
                    MemoryQuantity::NvidiaSmi => format!("{:.0} GB smi", m.bytes.get() / 1e9),
                },
            );
            let est_mem = match c.measured_memory.map(|m| m.quantity) {
                Some(MemoryQuantity::NvidiaSmi) => {
                    format!("{:.1} GB", c.estimated_memory.get() / 1e9)
                }
                _ => format!("{:.1} GiB", c.estimated_memory.as_gib()),
            };
            // The verdicts that fail stand out in the docs' table.
            let verdict = match c.verdict() {
                v @ ("OOM, predicted to fit" | "ran, predicted OOM") => format!("**{v}**"),
                v => v.to_string(),
            };
            println!(
                "| {} | {} | {:?} | `{}` | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
                c.id,
                c.gpu,
                c.precision,
                c.spec,
                c.seq,
                c.measured_tokens_per_s_per_gpu
                    .map_or("-".into(), |m| format!("{m:.0}")),
                c.estimated_tokens_per_s_per_gpu,
                pct(c.time_error()),
                c.simulated_tokens_per_s_per_gpu
                    .map_or("-".into(), |m| format!("{m:.0}")),
                pct(c.sim_error()),
                mem,
                est_mem,
                pct(c.memory_error()),
                verdict,
            );
            let gen = c.gpu.split('-').next().unwrap_or("").to_string();
            let prec = if c.precision.is_fp8() {
                "fp8"
            } else {
                "16-bit"
            };
            let src = source.split('_').next().unwrap_or(source);
            groups
                .entry(format!("{gen} {prec} {src}"))
                .or_default()
                .push(c);
        }
    }
    println!("\n| GPU, precision, source | rows | time median \\|error\\| | p90 | mean error | simulation median | p90 | memory rows | memory median | OOM rows predicted |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let all: Vec<&Checked> = groups.values().flatten().collect();
    let summary = |name: &str, rows: &[&Checked]| {
        let t: Vec<f64> = rows.iter().filter_map(|c| c.time_error()).collect();
        let s: Vec<f64> = rows.iter().filter_map(|c| c.sim_error()).collect();
        let m: Vec<f64> = rows.iter().filter_map(|c| c.memory_error()).collect();
        let ooms = rows.iter().filter(|c| c.oom).count();
        let caught = rows.iter().filter(|c| c.oom && !c.fits).count();
        let f = |x: Option<(f64, f64)>, i: usize| {
            x.map_or("-".into(), |p| {
                format!("{:.1}%", 100.0 * if i == 0 { p.0 } else { p.1 })
            })
        };
        let mean = if t.is_empty() {
            0.0
        } else {
            t.iter().sum::<f64>() / t.len() as f64
        };
        println!(
            "| {name} | {} | {} | {} | {:+.1}% | {} | {} | {} | {} | {} |",
            t.len(),
            f(median_p90(&t), 0),
            f(median_p90(&t), 1),
            100.0 * mean,
            f(median_p90(&s), 0),
            f(median_p90(&s), 1),
            m.len(),
            f(median_p90(&m), 0),
            if ooms == 0 {
                "-".into()
            } else {
                format!("{caught} of {ooms}")
            },
        );
    };
    for (name, rows) in &groups {
        summary(name, &rows.iter().collect::<Vec<_>>());
    }
    summary("all", &all);
    println!("\nNot checked:");
    for s in skipped {
        println!("- {s}");
    }
}
