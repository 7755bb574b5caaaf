//! Every planner stops at its time limit (issue 9, part 4: within 10%), on the 256-GPU and
//! 1,024-GPU three-type clusters (A100-80GB, V100-32GB and T4 nodes of 8, 100 Gbps), GPT-3 13B,
//! sequence 2048, global batch 512. Prints one row per planner and cluster: the limit, the wall
//! time `Planner::plan` took (its search and the fit check after it), the overshoot and why the
//! search stopped.
//!
//! Run: `cargo bench -p hetplan --bench time_limits` (`TIME_LIMIT_S` sets the limit, default
//! 10 s; `PLANNERS=metis,mist` runs only those). Single-threaded.

mod common;

use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::planners::{self, Limits, NoProgress, PlanOptions, Problem, Search};
use hetplan::units::Seconds;
use std::time::Instant;

fn main() {
    let limit: f64 = std::env::var("TIME_LIMIT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    let only: Option<Vec<String>> = std::env::var("PLANNERS")
        .ok()
        .map(|s| s.split(',').map(|n| n.trim().to_string()).collect());
    let model = catalog_model("gpt3-13b").expect("gpt3-13b is in the catalog");
    println!(
        "{:<17} {:>5} {:>8} {:>9} {:>10}  {:<12} answer",
        "planner", "GPUs", "limit s", "wall s", "overshoot", "stopped"
    );
    for k in [1, 4] {
        let cluster = common::three_types(k);
        let problem = Problem {
            model: &model,
            cluster: &cluster,
            global_batch: 512,
            seq_len: 2048,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        for planner in planners::all() {
            if only
                .as_ref()
                .is_some_and(|o| !o.iter().any(|n| n == planner.name()))
            {
                continue;
            }
            let clock = common::Wall(Instant::now());
            let mut search = Search::new(
                Limits {
                    max_nodes: None,
                    time: Some(Seconds(limit)),
                },
                &clock,
                &NoProgress,
            );
            let t = Instant::now();
            let out = planner.plan(&problem, &mut search);
            let wall = t.elapsed().as_secs_f64();
            let (stopped, answer) = match &out {
                Ok(o) => (
                    o.stop_reason.to_string(),
                    format!("{:.2} s/iteration", o.estimate.iteration_time_s),
                ),
                Err(e) => ("-".to_string(), e.to_string().chars().take(60).collect()),
            };
            println!(
                "{:<17} {:>5} {:>8.1} {:>9.2} {:>9.1}%  {:<12} {}",
                planner.name(),
                cluster.num_gpus(),
                limit,
                wall,
                (wall / limit - 1.0) * 100.0,
                stopped,
                answer
            );
        }
    }
}
