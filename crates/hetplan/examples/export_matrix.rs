//! Prints docs/running.md's export matrix (issue 11, "done when"): every planner's plan on every
//! seed-paper set-up, exported to every engine — how many export, and why the others cannot.
//! Every refusal must carry at least one reason, and an export must agree with
//! `export::why_not`; the program panics otherwise.
//!
//! `cargo run --release -p hetplan --example export_matrix [-- SECONDS]` (default 1 s per
//! planner and scenario; search times vary with the machine, plans with the time they got).

#[path = "../benches/common/mod.rs"]
mod common;

use hetplan::cost::Analytic;
use hetplan::export::{self, ExportError, Job, Target};
use hetplan::plan::ValidPlan;
use hetplan::planners::{self, Limits, NoProgress, PlanOptions, Problem, Search};
use hetplan::scenario::{scenario, scenario_names};
use hetplan::units::Seconds;
use std::collections::BTreeMap;
use std::time::Instant;

/// A reason without its numbers, so that the same rule counts once.
fn rule(reason: &str) -> String {
    let cut = reason.find(['(', ';', ':']).unwrap_or(reason.len());
    let s: String = reason[..cut]
        .chars()
        .map(|c| if c.is_ascii_digit() { 'N' } else { c })
        .collect();
    s.trim().to_string()
}

fn main() {
    let limit: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    // (planner, engine) → (plans, exported); engine → rule → count.
    let mut counts: BTreeMap<(String, &str), (u32, u32)> = BTreeMap::new();
    let mut rules: BTreeMap<&str, BTreeMap<String, u32>> = BTreeMap::new();
    let mut no_plan: BTreeMap<String, u32> = BTreeMap::new();
    let names = scenario_names();
    for name in &names {
        let s = scenario(name).expect("built-in scenarios parse");
        let problem = Problem {
            model: &s.model,
            cluster: &s.cluster,
            global_batch: s.global_batch,
            seq_len: s.seq_len,
            compute: &Analytic,
            options: PlanOptions::default(),
        };
        for planner in planners::all() {
            if planner.name() == "oracle" {
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
            let Ok(out) = planner.plan(&problem, &mut search) else {
                *no_plan.entry(planner.name().to_string()).or_default() += 1;
                continue;
            };
            let Ok(plan) = ValidPlan::new(out.plan, &s.model, &s.cluster) else {
                panic!("{name}: {} answered an invalid plan", planner.name());
            };
            for target in Target::ALL {
                let c = counts
                    .entry((planner.name().to_string(), target.name()))
                    .or_default();
                c.0 += 1;
                let job = Job {
                    model: &s.model,
                    cluster: &s.cluster,
                    plan: &plan,
                    seq_len: s.seq_len,
                };
                match export::export(target, job) {
                    Ok(_) => {
                        assert!(export::why_not(target, &s.model, &plan, s.seq_len).is_empty());
                        c.1 += 1;
                    }
                    Err(ExportError::Unsupported { reasons, .. }) => {
                        assert!(!reasons.is_empty(), "{name}: refused without a reason");
                        let mut seen: Vec<String> = reasons.iter().map(|r| rule(r)).collect();
                        seen.sort();
                        seen.dedup();
                        for r in seen {
                            *rules
                                .entry(target.name())
                                .or_default()
                                .entry(r)
                                .or_default() += 1;
                        }
                    }
                }
            }
        }
        eprintln!("{name} done");
    }
    println!(
        "{} scenarios, each planner {limit} s; plans that export to each engine (of the plans the planner answered):\n",
        names.len()
    );
    let engines: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
    println!("| planner | plans | {} |", engines.join(" | "));
    println!("|---|---:|{}", "---:|".repeat(engines.len()));
    let mut planners_seen: Vec<String> = counts.keys().map(|(p, _)| p.clone()).collect();
    planners_seen.dedup();
    for p in &planners_seen {
        let plans = counts[&(p.clone(), engines[0])].0;
        let cells: Vec<String> = engines
            .iter()
            .map(|e| counts[&(p.clone(), *e)].1.to_string())
            .collect();
        println!("| {p} | {plans} | {} |", cells.join(" | "));
    }
    if !no_plan.is_empty() {
        let list: Vec<String> = no_plan.iter().map(|(p, n)| format!("{p} {n}")).collect();
        println!("\nNo plan in the time (scenarios): {}.", list.join(", "));
    }
    for e in &engines {
        let Some(r) = rules.get(e) else { continue };
        let mut v: Vec<(&String, &u32)> = r.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        println!("\nWhy plans do not export to {e} (plans refused for each rule, a plan may count under several):\n");
        for (rule, n) in v.iter().take(8) {
            println!("- {n}: {rule}");
        }
    }
}
