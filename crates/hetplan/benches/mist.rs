//! Mist's search time (tuning time, Mist §6.5 and Fig. 16: minutes for GPT-3 22B on 32 GPUs in
//! the authors' Python) on the paper's scenarios (`scenarios/mist-*.toml`) and on a 256-GPU
//! cluster of three GPU types. Prints a table.
//!
//! Run: `cargo bench -p hetplan --bench mist` (`MIST_BUDGET_S` sets the time budget per row,
//! default 60 s; a row that reaches it reports `time limit` and the best plan found so far).
//! Single-threaded: the search uses one core. Numbers (before and after the exact speed-ups)
//! are in the module docs of `planners::mist`, taken on the development machine (2 shared
//! cores of an x86-64 VM, 1 core used).
//!
//! A second table solves single inter-stage MILPs (Eq. 2) of GPT-3 13B on the three-type
//! fleet at 4,096 GPUs (global batch 2,048) under Mist's node limit ([`MILP_NODE_ENTRIES`])
//! and then without it (30 s time limit): binaries, nodes, wall time, Eq. 2's value, whether
//! it is proven optimal, and the process's peak resident memory after the solve (Linux
//! `VmHWM`; rows with the limit run first). `MIST_MILP=0` skips it.
//!
//! The 256-GPU row: 16 nodes of 8 A100-80GB (NVLink), 8 of 8 V100-32GB (NVLink) and 8 of 8 T4
//! (PCIe), 100 Gbps between nodes; GPT-3 13B, sequence 2048, global batch 512 (Table 4's
//! largest batch).

mod common;

use hetplan::cost::Analytic;
use hetplan::model::catalog::catalog_model;
use hetplan::planners::mist::{milp, milp_node_limit, Mist, MILP_NODE_ENTRIES};
use hetplan::planners::{Limits, NoProgress, PlanOptions, Planner, Problem, Search};
use hetplan::scenario::{scenario, scenario_names};
use hetplan::units::Seconds;
use hetplan::{Cluster, Model};
use std::time::Instant;

fn row(name: &str, model: &Model, cluster: &Cluster, batch: u64, seq: u64, budget: f64) {
    let problem = Problem {
        model,
        cluster,
        global_batch: batch,
        seq_len: seq,
        compute: &Analytic,
        options: PlanOptions::default(),
    };
    let clock = common::Wall(Instant::now());
    let mut search = Search::new(
        Limits {
            max_nodes: None,
            time: Some(Seconds(budget)),
        },
        &clock,
        &NoProgress,
    );
    let t = Instant::now();
    let o = Mist::default().plan(&problem, &mut search);
    let wall = t.elapsed().as_secs_f64();
    match o {
        Ok(o) => println!(
            "{:<22} {:>5} {:>10} {:>11} {:>10.0} {:>9.3} {:>9.3}  {}",
            name,
            cluster.num_gpus(),
            o.explored,
            o.stop_reason.to_string(),
            wall * 1e3,
            o.ranked.first().map_or(f64::NAN, |r| r.planner_cost_s),
            o.estimate.iteration_time_s,
            o.plan.summary()
        ),
        Err(e) => println!(
            "{:<22} {:>5} {:>10} {:>11} {:>10.0}  {e}",
            name,
            cluster.num_gpus(),
            "-",
            "-",
            wall * 1e3
        ),
    }
}

fn main() {
    let budget: f64 = std::env::var("MIST_BUDGET_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    println!(
        "{:<22} {:>5} {:>10} {:>11} {:>10} {:>9} {:>9}  plan",
        "scenario", "GPUs", "nodes", "stop", "wall (ms)", "Eq.2 (s)", "est (s)"
    );
    for name in scenario_names()
        .into_iter()
        .filter(|n| n.starts_with("mist-"))
    {
        let sc = scenario(name).unwrap();
        row(
            name,
            &sc.model,
            &sc.cluster,
            sc.global_batch,
            sc.seq_len,
            budget,
        );
    }
    let model = catalog_model("gpt3-13b").unwrap();
    row(
        "a100+v100+t4 gpt3-13b",
        &model,
        &common::three_types_256(),
        512,
        2048,
        budget,
    );
    if std::env::var("MIST_MILP").is_ok_and(|v| v == "0") {
        return;
    }
    milp_rows(&model);
}

/// The process's peak resident set so far, in MiB (Linux `VmHWM`), if known.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn milp_rows(model: &Model) {
    let cluster = common::three_types_n(4096);
    let problem = Problem {
        model,
        cluster: &cluster,
        global_batch: 2048,
        seq_len: 2048,
        compute: &Analytic,
        options: PlanOptions::default(),
    };
    println!("\nEq. 2 at 4,096 GPUs (gpt3-13b, gbs 2048), one MILP per row");
    println!(
        "{:>3} {:>5} {:>9} {:>12} {:>7} {:>9} {:>10} {:>7} {:>10}",
        "S", "G", "binaries", "node limit", "nodes", "wall (s)", "Eq.2 (s)", "proven", "peak MiB"
    );
    let cases = [(4, 2048), (4, 256), (4, 32), (8, 2048), (8, 256), (8, 32)];
    let mut sets = Vec::new();
    for (s, g) in cases {
        let mut search = Search::unbounded();
        if let Some(sc) = Mist::default().stage_candidates(&problem, s, g, &mut search) {
            sets.push((s, g, sc));
        }
    }
    for limited in [true, false] {
        for (s, g, sc) in &sets {
            let binaries: usize = sc.cands.iter().map(Vec::len).sum();
            let limits = milp::MilpLimits {
                nodes: limited.then(|| milp_node_limit(MILP_NODE_ENTRIES, binaries)),
                time: Some(Seconds(30.0)),
            };
            let t = Instant::now();
            let r = milp::solve(&sc.cands, *g, model.layers.len(), &sc.caps, limits);
            let wall = t.elapsed().as_secs_f64();
            let rss = peak_rss_mib().map_or("-".into(), |m| format!("{m:.0}"));
            let limit = limits.nodes.map_or("none".into(), |n| n.to_string());
            match r {
                Some(r) => println!(
                    "{s:>3} {g:>5} {binaries:>9} {limit:>12} {:>7} {wall:>9.2} {:>10.3} {:>7} {rss:>10}",
                    r.nodes, r.value, r.proven_optimal
                ),
                None => println!(
                    "{s:>3} {g:>5} {binaries:>9} {limit:>12} {:>7} {wall:>9.2} {:>10} {:>7} {rss:>10}",
                    "-", "none", "-"
                ),
            }
        }
    }
}
