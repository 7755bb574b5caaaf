//! How fast hetplan's planner answers, and how good the answer is, from 64 to 4,096 GPUs
//! (issue 10's speed targets): per cluster size, when the first plan that fits was known, when
//! the final answer's quality was reached (the last improvement), when the search ended and
//! why, the answer's estimate and its certified gap to the lower bound, and the process's peak
//! resident memory so far (VmHWM, Linux).
//!
//! Clusters: the three-type fleet of `benches/common` (A100-80GB, V100-32GB and T4 nodes of 8,
//! 100 Gbps; 2:1:1) at 64, 256, 1,024 and 4,096 GPUs; GPT-3 13B, sequence 2048, global batch
//! 512 (64 and 256 GPUs) or 2,048 (1,024 and 4,096 GPUs, so that every GPU can get a sample).
//! Rows (GPUs, time limit): 64 at 1 s and at 10 s, 256 and 1,024 at 10 s, 4,096 at 60 s
//! (`LIMIT_SCALE` multiplies the limits; `SIZES=64,1024` runs only those sizes).
//!
//! Run: `cargo bench -p hetplan --bench speed`. Uses rayon's default thread count (every core).

mod common;

use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::planners::{self, Limits, PlanOptions, Planner, Problem, Progress, Search};
use hetplan::units::Seconds;
use std::sync::Mutex;
use std::time::Instant;

/// Records when the best answer improved.
struct Record {
    start: Instant,
    points: Mutex<Vec<(f64, f64)>>,
}

impl Progress for Record {
    fn report(&self, _: u64, best: Option<Seconds>) {
        if let Some(b) = best {
            let mut p = self.points.lock().unwrap();
            if p.last().is_none_or(|&(_, last)| b.get() < last) {
                p.push((self.start.elapsed().as_secs_f64(), b.get()));
            }
        }
    }
}

/// The process's peak resident set so far, in MiB (Linux `VmHWM`), if known.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let scale: f64 = std::env::var("LIMIT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let sizes: Option<Vec<u32>> = std::env::var("SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect());
    let rows: Vec<(u32, f64)> = [
        (64, 1.0),
        (64, 10.0),
        (256, 10.0),
        (1024, 10.0),
        (4096, 60.0),
    ]
    .into_iter()
    .filter(|(g, _)| sizes.as_ref().is_none_or(|s| s.contains(g)))
    .collect();
    let model = catalog_model("gpt3-13b").expect("gpt3-13b is in the catalog");
    println!(
        "threads: {} (rayon); model gpt3-13b, seq 2048; three-type fleet (A100-80GB : V100-32GB : T4 = 2:1:1, nodes of 8, 100 Gbps)\n",
        rayon::current_num_threads()
    );
    println!(
        "| GPUs | gbs | limit (s) | first plan (s) | last gain (s) | ended (s) | stopped | estimate (s) | gap | peak RSS (MiB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|");
    for (gpus, limit) in rows {
        let cluster = common::three_types_n(gpus);
        let gbs = if gpus >= 1024 { 2048 } else { 512 };
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: gbs,
            seq_len: 2048,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        let limit = limit * scale;
        let record = Record {
            start: Instant::now(),
            points: Mutex::new(Vec::new()),
        };
        let clock = common::Wall(record.start);
        let mut search = Search::new(
            Limits {
                max_nodes: None,
                time: Some(Seconds(limit)),
            },
            &clock,
            &record,
        );
        eprintln!("{gpus} GPUs: hetplan, {limit} s");
        let out = planners::hetplan::Hetplan.plan(&problem, &mut search);
        let ended = record.start.elapsed().as_secs_f64();
        let points = record.points.into_inner().unwrap();
        let bound = planners::bound::lower_bound(&problem);
        let rss = peak_rss_mib().map_or("—".into(), |m| format!("{m:.0}"));
        match out {
            Ok(o) => {
                let t = o.estimate.iteration_time_s;
                let first = points.first().map_or(f64::NAN, |p| p.0);
                // The last improvement that mattered: the first time within 0.1% of the answer.
                let last = points
                    .iter()
                    .find(|p| p.1 <= t * 1.001)
                    .map_or(ended, |p| p.0);
                println!(
                    "| {gpus} | {gbs} | {limit:.0} | {first:.3} | {last:.3} | {ended:.3} | {} | {t:.3} | {:.1}% | {rss} |",
                    o.stop_reason,
                    bound.gap(Seconds(t)) * 100.0
                );
            }
            Err(e) => println!(
                "| {gpus} | {gbs} | {limit:.0} | — | — | {ended:.3} | {e} | — | — | {rss} |"
            ),
        }
    }
}
