//! Estimate against simulation on 50 interleaved plans (docs/validation.md §3, docs/cost-model.md
//! §3): Llama-2 7B at 4,096 tokens, two replicas of each stage, 2–8 A100s a node on 10–400 Gbps,
//! TP 1–2, PP 4–8, 2 or 4 chunks a device, Megatron and FSDP. Prints each plan and
//! `estimate ÷ simulation − 1`, then their median |·|, worst and mean.
//! `cargo run --release -p hetplan --example interleaved_sweep`

use hetplan::calibration::published::median_p90;
use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{estimate, Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{simulate, SimOptions};

fn main() {
    let model = catalog_model("llama2-7b").expect("catalog model");
    let mut errors = Vec::new();
    println!("| cluster | plan | estimate (s) | simulation (s) | estimate ÷ simulation − 1 |");
    println!("|---|---|---:|---:|---:|");
    for (gpn, bw) in [(2, 10), (4, 25), (8, 100), (8, 400), (4, 100)] {
        for (tp, pp, v) in [(1, 4, 2), (1, 8, 2), (2, 4, 4), (1, 8, 4), (2, 8, 2)] {
            for engine in ["megatron", "fsdp"] {
                let gpus = tp * pp * 2;
                let nodes = (gpus / gpn).max(1);
                if nodes * gpn != gpus {
                    continue;
                }
                let cl = format!("{nodes}x{gpn}xa100-sxm4-80gb@{bw}Gbps");
                let spec = format!(
                    "tp={tp},pp={pp},dp=2,mbs=1,gbs={},engine={engine},schedule=interleaved,v={v}",
                    8 * pp
                );
                let cluster = catalog_cluster(&cl).expect("catalog cluster");
                let plan = parse_inline_plan(&spec, &model, &cluster).expect("plan");
                let w = Workload {
                    model: &model,
                    cluster: &cluster,
                    seq_len: 4096,
                };
                let valid = w.validate(&plan).expect("valid plan");
                let e = estimate(w, &valid, &Analytic).iteration_time_s;
                let s = simulate(w, &valid, &Analytic, &SimOptions::default())
                    .expect("simulation")
                    .iteration_time_s;
                let err = e / s - 1.0;
                errors.push(err);
                println!(
                    "| {cl} | `{spec}` | {e:.3} | {s:.3} | {:+.1}% |",
                    100.0 * err
                );
            }
        }
    }
    let n = errors.len();
    // The median as every published table of the project takes it.
    let (median, _) = median_p90(&errors).expect("50 plans");
    let worst = errors
        .iter()
        .copied()
        .fold(0.0f64, |a, e| if e.abs() > a.abs() { e } else { a });
    println!(
        "\n{n} plans: median |error| {:.1}%, worst {:+.1}%, mean {:+.1}%",
        100.0 * median,
        100.0 * worst,
        100.0 * errors.iter().sum::<f64>() / n as f64
    );
}
