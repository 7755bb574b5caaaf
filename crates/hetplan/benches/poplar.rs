//! Poplar's search time (Algorithm 1's probes through hetplan's models, Algorithm 2, the
//! expressible plans and their estimates) on the paper's three clusters (Table 1, the
//! `poplar-cluster-{a,b,c}` scenarios) at every ZeRO stage, and on a 256-GPU, three-type
//! cluster: 16 nodes of 8 A100-80GB, 8 of 8 V100-32GB and 8 of 8 T4, 100 Gbps between nodes,
//! training GPT-3 1.3B at 2048 tokens with 2048 samples (4M tokens, Llama's batch per the
//! paper's appendix). The paper reports no planning time for its offline phase ("relatively
//! minimal", §Time Overhead); its online profiling runs the model (Table 2: 11–174 s), ours asks
//! the cost model.
//!
//! Run: `cargo bench -p hetplan --bench poplar`. Each row is the median of 5 runs. Numbers in
//! the module's report were taken on a 2-core Intel Xeon VM shared with other builds (release
//! profile, one thread: the planner is single-threaded).

mod common;

use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::planners::poplar::Poplar;
use hetplan::planners::{Limits, NoClock, NoProgress, PlanOptions, Planner, Problem, Search};
use hetplan::scenario::scenario;
use hetplan::{Cluster, Model};
use std::time::Instant;

fn row(label: &str, model: &Model, cluster: &Cluster, gbs: u64, seq: u64) {
    let problem = Problem {
        model,
        cluster,
        global_batch: gbs,
        seq_len: seq,
        compute: &Analytic,
        options: PlanOptions::default(),
    };
    for zero in 0..=3u8 {
        let planner = Poplar {
            start_zero: zero,
            ..Poplar::default()
        };
        let mut walls = Vec::new();
        let mut result = None;
        for _ in 0..5 {
            let mut search = Search::new(Limits::default(), &NoClock, &NoProgress);
            let t = Instant::now();
            let o = planner.plan(&problem, &mut search);
            walls.push(t.elapsed().as_secs_f64());
            result = Some(o);
        }
        walls.sort_by(f64::total_cmp);
        let wall = walls[walls.len() / 2];
        match result.expect("five runs") {
            Ok(o) => println!(
                "{:<18} {:>5} {:>5} {:>6} {:>9} {:>10.2} {:>11.3} {:>9.3}  m={} sizes {}",
                label,
                cluster.num_gpus(),
                zero,
                o.plan.stages[0].zero,
                o.explored,
                wall * 1e3,
                o.ranked.first().map_or(f64::NAN, |r| r.planner_cost_s),
                o.estimate.iteration_time_s,
                o.plan.micro_batches,
                runs(&o.plan.stages[0].micro_batch_sizes)
            ),
            Err(e) => println!(
                "{:<18} {:>5} {:>5} {:>6} {:>9} {:>10.2}  {e}",
                label,
                cluster.num_gpus(),
                zero,
                "-",
                "-",
                wall * 1e3
            ),
        }
    }
}

/// `22×4 10×4`: sizes as runs.
fn runs(sizes: &[u64]) -> String {
    let mut out: Vec<(u64, usize)> = Vec::new();
    for &s in sizes {
        match out.last_mut() {
            Some((v, c)) if *v == s => *c += 1,
            _ => out.push((s, 1)),
        }
    }
    out.iter()
        .map(|(v, c)| format!("{v}×{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    println!(
        "{:<18} {:>5} {:>5} {:>6} {:>9} {:>10} {:>11} {:>9}  plan",
        "problem", "GPUs", "start", "ZeRO", "explored", "wall (ms)", "Poplar (s)", "est (s)"
    );
    for name in ["poplar-cluster-a", "poplar-cluster-b", "poplar-cluster-c"] {
        let s = scenario(name).expect("built-in scenario");
        row(name, &s.model, &s.cluster, s.global_batch, s.seq_len);
    }
    let model = catalog_model("gpt3-1.3b").expect("catalog model");
    row(
        "256 GPUs, 1.3B",
        &model,
        &common::three_types_256(),
        2048,
        2048,
    );
}
