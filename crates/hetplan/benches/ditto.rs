//! Ditto's search time against its exhaustive baseline (§3) on the paper's Fig. 8 clusters
//! (Ex1–Ex5, GPT-2 XL; §7.2: Ditto in minutes, the exhaustive search 10 hours on Ex3 in the
//! authors' implementation) and on a 256-GPU, three-type cluster. Prints a table.
//! Run: `cargo bench -p hetplan --bench ditto` (`DITTO_BUDGET_S` sets the exhaustive search's
//! time budget per row, default 30 s; a row that reaches it says `time limit` and shows the best
//! plan found so far). The exhaustive search runs here without its 20 M-node cap.
//!
//! `DITTO_ROWS=ex1,ex2` runs only those rows (names: ex1..ex5, 256-gpu).
//!
//! Measured on a shared 2-core x86-64 Linux container (release build, one thread); wall times
//! vary with the machine's load, the explored-node counts do not. `DITTO_BUDGET_S=60`: Ex1
//! Ditto 0.11 s / 2.77 M nodes vs exhaustive 0.50 s / 19.5 M (+0.6% T); Ex2 0.15 s / 9.24 M vs
//! 45.3 s / 1.06 G (+4.1% T, 115× nodes, 310× wall); Ex3–Ex5: Ditto 0.16–0.26 s, the
//! exhaustive search finds no complete plan in 60 s; 256 GPUs: Ditto 0.18 s (greedy recovery,
//! folded coarser), the exhaustive search none before its 4 GiB memo cap (4.5 s). Table and discussion: the module docs
//! of `planners::ditto`.
//!
//! The 256-GPU cluster: 16 nodes × 8 a100-sxm4-80gb, 8 × 8 v100-sxm2-32gb, 8 × 8 t4, 100 Gbps
//! between nodes; LLaMA-2 70B (80 layers), global batch 1024, sequence 4096.

mod common;

use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::planners::ditto::{Ditto, DittoExhaustive};
use hetplan::planners::{Clock, Limits, NoProgress, Outcome, PlanOptions, Planner, Problem};
use hetplan::planners::{PlannerError, Search};
use hetplan::units::Seconds;
use std::time::Instant;

fn run(
    planner: &dyn Planner,
    p: &Problem<'_>,
    budget: Option<f64>,
) -> (Result<Outcome, PlannerError>, f64) {
    let clock = common::Wall(Instant::now());
    let mut s = Search::new(
        Limits {
            max_nodes: None,
            time: budget.map(Seconds),
        },
        &clock,
        &NoProgress,
    );
    let out = planner.plan(p, &mut s);
    (out, clock.elapsed().get())
}

fn cell(r: &Result<Outcome, PlannerError>, secs: f64) -> String {
    match r {
        Ok(o) => format!(
            "{:>8.3}s {:>12} {:>11} {:>9.3}s {:>9.3}s",
            secs,
            o.explored,
            o.stop_reason.to_string(),
            o.ranked
                .iter()
                .find(|x| x.plan == o.plan)
                .map(|x| x.planner_cost_s)
                .unwrap_or(f64::NAN),
            o.estimate.iteration_time_s
        ),
        Err(e) => format!("{:>8.3}s  {}", secs, e),
    }
}

fn main() {
    let budget: f64 = std::env::var("DITTO_BUDGET_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30.0);
    println!(
        "{:<10} {:>5}  {:<58} | {:<58}",
        "cluster",
        "GPUs",
        "ditto: search, nodes, stop, Oobleck T, estimate",
        "ditto-exhaustive: same"
    );
    let mut rows: Vec<(String, hetplan::Model, hetplan::Cluster, u64, u64, bool)> = (1..=5)
        .map(|n| {
            let s = hetplan::scenario::scenario(&format!("ditto-ex{n}")).unwrap();
            (
                format!("ex{n}"),
                s.model,
                s.cluster,
                s.global_batch,
                s.seq_len,
                true,
            )
        })
        .collect();
    let big = common::three_types_256();
    rows.push((
        "256-gpu".into(),
        catalog_model("llama2-70b").unwrap(),
        big,
        1024,
        4096,
        true,
    ));
    let only: Option<Vec<String>> = std::env::var("DITTO_ROWS")
        .ok()
        .map(|s| s.split(',').map(|r| r.trim().to_string()).collect());
    for (name, model, cluster, gbs, seq, _) in &rows {
        if only.as_ref().is_some_and(|o| !o.contains(name)) {
            continue;
        }
        let p = Problem {
            model,
            cluster,
            global_batch: *gbs,
            seq_len: *seq,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        let (d, ds) = run(&Ditto::default(), &p, None);
        let ex = DittoExhaustive {
            max_nodes: u64::MAX,
            ..Default::default()
        };
        let (e, es) = run(&ex, &p, Some(budget));
        println!(
            "{:<10} {:>5}  {:<58} | {:<58}",
            name,
            cluster.num_gpus(),
            cell(&d, ds),
            cell(&e, es)
        );
        if let Ok(o) = &d {
            for n in &o.notes {
                println!("{:<18}ditto: {n}", "");
            }
        }
    }
}
