//! Prints docs/planners.md's tables: every planner on the seed papers' set-ups, its plan
//! estimated and simulated, whether it fits, how long the search took and why it stopped.
//!
//! `cargo run --release -p hetplan --example planners_table [-- SECONDS [SCENARIO ...]]`
//! (default: 20 s per planner, the five set-ups of docs/planners.md). Search times are wall
//! clock and vary with the machine's load; estimates and simulations do not.

#[path = "../benches/common/mod.rs"]
mod common;

use hetplan::cost::{Analytic, Workload};
use hetplan::plan::ValidPlan;
use hetplan::planners::{self, Clock, Limits, NoProgress, PlanOptions, Problem, Search};
use hetplan::scenario::scenario;
use hetplan::sim::{simulate, SimOptions};
use hetplan::units::Seconds;
use std::time::Instant;

const DEFAULT: [&str; 5] = [
    "metis-t4-v100-8-gpt3",
    "amp-hetero-cluster",
    "ditto-ex1",
    "mist-fig2-l4",
    "poplar-cluster-c",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let limit: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let names: Vec<String> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        DEFAULT.iter().map(|s| s.to_string()).collect()
    };
    for name in names {
        let s = scenario(&name).unwrap_or_else(|e| panic!("{name}: {}", e.message));
        println!("### `{}` — {}\n", s.name, s.description);
        let problem = Problem {
            model: &s.model,
            cluster: &s.cluster,
            global_batch: s.global_batch,
            seq_len: s.seq_len,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        let bound = planners::bound::lower_bound(&problem);
        println!(
            "Lower bound: {:.3} s (no plan is faster by hetplan's estimate).\n",
            bound.iteration_time_s
        );
        println!("| planner | estimate (s) | gap | simulated (s) | fits | search (s) | stopped |");
        println!("|---|---:|---:|---:|:-:|---:|---|");
        let w = Workload {
            model: &s.model,
            cluster: &s.cluster,
            seq_len: s.seq_len,
        };
        for planner in planners::all() {
            let clock = common::Wall(Instant::now());
            let mut search = Search::new(
                Limits {
                    max_nodes: None,
                    time: Some(Seconds(limit)),
                },
                &clock,
                &NoProgress,
            );
            let out = planner.plan(&problem, &mut search);
            let secs = clock.elapsed().get();
            match out {
                Ok(o) => {
                    let sim = ValidPlan::check(&o.plan, &s.model, &s.cluster)
                        .ok()
                        .and_then(|v| simulate(w, &v, &Analytic, &SimOptions::default()).ok())
                        .map_or("—".to_string(), |r| format!("{:.3}", r.iteration_time_s));
                    println!(
                        "| {} | {:.3} | {:.1}% | {} | {} | {:.3} | {} |",
                        planner.name(),
                        o.estimate.iteration_time_s,
                        bound.gap(Seconds(o.estimate.iteration_time_s)) * 100.0,
                        sim,
                        if o.estimate.fits { "yes" } else { "**OOM**" },
                        secs,
                        o.stop_reason
                    );
                }
                Err(e) => {
                    let why: String = e.to_string().chars().take(90).collect();
                    println!(
                        "| {} | — | — | — | — | {:.3} | {} |",
                        planner.name(),
                        secs,
                        why.replace('|', "/")
                    );
                }
            }
        }
        println!();
    }
}
