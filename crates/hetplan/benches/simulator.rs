//! Simulator speed: prints a table of wall-clock times per scenario (best of a few runs).
//! Run: `cargo bench -p hetplan --bench simulator`.

use hetplan::cluster::spec::catalog_cluster;
use hetplan::cost::{Analytic, Workload};
use hetplan::model::catalog::catalog_model;
use hetplan::plan::inline::parse_inline_plan;
use hetplan::sim::{simulate, SimOptions};
use std::time::Instant;

fn main() {
    let cases = [
        (
            "gpt3-175b",
            "128x8xa100-80gb@1600Gbps",
            "tp=8,pp=16,dp=8,mbs=1,m=128",
            2048u64,
        ),
        (
            "gpt3-175b",
            "128x8xa100-80gb@1600Gbps",
            "tp=8,pp=16,dp=8,mbs=1,m=128,zero=1,ckpt=selective,sp=on",
            2048,
        ),
        (
            "gpt3-13b",
            "a100-80gb-8x8",
            "tp=4,pp=4,dp=4,mbs=1,m=32",
            2048,
        ),
        ("gpt3-6.7b", "a100-80gb-8x8", "dp=64,mbs=2,m=4,zero=3", 2048),
        ("gpt3-1.3b", "t4-v100", "pp=2,dp=5,mbs=1,m=16", 1024),
    ];
    println!(
        "{:<10} {:<26} {:<54} {:>6} {:>9} {:>9} {:>10} {:>12}",
        "model", "cluster", "plan", "GPUs", "tasks", "events", "sim (s)", "wall (ms)"
    );
    for (m, c, p, seq) in cases {
        let model = catalog_model(m).unwrap();
        let cluster = catalog_cluster(c).unwrap();
        let plan = parse_inline_plan(p, &model, &cluster).unwrap();
        let w = Workload {
            model: &model,
            cluster: &cluster,
            seq_len: seq,
        };
        let mut best = f64::INFINITY;
        let mut last = None;
        for _ in 0..3 {
            let t = Instant::now();
            let s = simulate(
                w,
                &w.validate(&plan).unwrap(),
                &Analytic,
                &SimOptions::default(),
            )
            .unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            last = Some(s);
        }
        let s = last.unwrap();
        println!(
            "{:<10} {:<26} {:<54} {:>6} {:>9} {:>9} {:>10.3} {:>12.1}",
            m,
            c,
            p,
            plan.devices().len(),
            s.tasks,
            s.events,
            s.iteration_time_s,
            best * 1e3
        );
    }
}
