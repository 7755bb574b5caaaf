//! Golden exports on the seed papers' set-ups (issue 11): for every built-in scenario, the
//! Megatron heuristic's plan (deterministic, every engine's shape) exported to every engine —
//! the lines of each export that carry the plan, or every reason the engine refuses it — and
//! every file of two exports in full. A change of what hetplan writes shows here as a diff;
//! re-accept intended ones with `INSTA_UPDATE=always cargo test -p hetplan --test
//! export_golden` and review them.

use hetplan::cost::Analytic;
use hetplan::export::{self, ExportError, Job, Target};
use hetplan::plan::ValidPlan;
use hetplan::planners::{self, PlanOptions, Problem, Search};
use hetplan::scenario::{scenario, scenario_names, Scenario};

/// The Megatron heuristic's plan for a scenario (none when it finds none that fits).
fn megatron_plan(s: &Scenario) -> Option<ValidPlan> {
    let problem = Problem {
        model: &s.model,
        cluster: &s.cluster,
        global_batch: s.global_batch,
        seq_len: s.seq_len,
        compute: &Analytic,
        options: PlanOptions::default(),
    };
    let planner = planners::by_name("megatron").ok()?;
    let out = planner.plan(&problem, &mut Search::unbounded()).ok()?;
    ValidPlan::new(out.plan, &s.model, &s.cluster).ok()
}

/// The lines of an export that carry the plan (not the boilerplate).
fn digest(target: Target, e: &export::Export) -> String {
    let file = |name: &str| {
        e.files
            .iter()
            .find(|f| f.path == name)
            .map(|f| f.contents.clone())
            .unwrap_or_default()
    };
    match target {
        Target::Megatron => {
            let args: Vec<String> = serde_json::from_str(&file("megatron_args.json")).unwrap();
            let keep = [
                "--tensor-model-parallel-size",
                "--pipeline-model-parallel-size",
                "--pipeline-model-parallel-layout",
                "--micro-batch-size",
                "--global-batch-size",
                "--recompute-granularity",
                "--recompute-method",
                "--recompute-num-layers",
                "--use-distributed-optimizer",
                "--use-megatron-fsdp",
                "--data-parallel-sharding-strategy",
                "--sequence-parallel",
                "--optimizer-offload-fraction",
                "--bf16",
                "--fp16",
            ];
            let mut out = Vec::new();
            for (i, a) in args.iter().enumerate() {
                if keep.contains(&a.as_str()) {
                    match args.get(i + 1) {
                        Some(v) if !v.starts_with("--") => out.push(format!("{a} {v}")),
                        _ => out.push(a.clone()),
                    }
                }
            }
            out.join(" ")
        }
        Target::Deepspeed => {
            let c: serde_json::Value = serde_json::from_str(&file("ds_config.json")).unwrap();
            let parts = file("hetplan_pipeline.py")
                .lines()
                .find(|l| l.starts_with("PARTS = "))
                .map(|l| format!(" {l}"))
                .unwrap_or_default();
            format!("{c}{parts}")
        }
        Target::Sailor => {
            let d: serde_json::Value = serde_json::from_str(&file("dist_config.json")).unwrap();
            let c: serde_json::Value = serde_json::from_str(&file("ds_config.json")).unwrap();
            format!("{d} {c}")
        }
        Target::Flashflex => file("launch.sh")
            .lines()
            .filter(|l| {
                l.contains("--hetero_configs") || l.trim_start().starts_with("llama_train.py")
            })
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" "),
        Target::Mist => file("hetplan_mist.yaml")
            .lines()
            .filter(|l| {
                [
                    "layer_partitions",
                    "device_assignment",
                    "gradient_checkpointing",
                    "gradient_accumulation_steps",
                    "  - [",
                ]
                .iter()
                .any(|k| l.starts_with(&format!("  {k}")) || l.starts_with(k))
            })
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" "),
        Target::Torchtitan => {
            let job = file("hetplan_job.py");
            job.lines()
                .filter(|l| {
                    [
                        "degree",
                        "module_fqns",
                        "schedule",
                        "batch_size",
                        "microbatch",
                    ]
                    .iter()
                    .any(|k| l.contains(k))
                })
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

#[test]
fn every_scenario_exports_to_every_engine_or_says_why_not() {
    let mut table = String::new();
    let mut exported = 0;
    for name in scenario_names() {
        let s = scenario(name).unwrap();
        table.push_str(&format!("## {name}\n"));
        let Some(plan) = megatron_plan(&s) else {
            table.push_str("no plan from the Megatron heuristic\n\n");
            continue;
        };
        table.push_str(&format!("plan: {}\n", plan.summary()));
        for target in Target::ALL {
            let job = Job {
                model: &s.model,
                cluster: &s.cluster,
                plan: &plan,
                seq_len: s.seq_len,
            };
            match export::export(target, job) {
                Ok(e) => {
                    exported += 1;
                    // Every GPU of the plan is one rank, once.
                    let mut gpus = plan.devices();
                    gpus.sort_unstable_by_key(|g| (g.node, g.local));
                    gpus.dedup();
                    assert_eq!(e.layout.world_size(), gpus.len(), "{name} {target:?}");
                    assert!(
                        export::why_not(target, &s.model, &plan, s.seq_len).is_empty(),
                        "{name} {target:?}: exported, yet why_not has reasons"
                    );
                    table.push_str(&format!("{}: {}\n", target.name(), digest(target, &e)));
                }
                Err(ExportError::Unsupported { reasons, .. }) => {
                    assert!(
                        !reasons.is_empty(),
                        "{name} {target:?}: refused without a reason"
                    );
                    table.push_str(&format!(
                        "{}: refused: {}\n",
                        target.name(),
                        reasons.join("; ")
                    ));
                }
            }
        }
        table.push('\n');
    }
    assert!(exported > 0, "{exported} exports");
    insta::assert_snapshot!("scenario_exports", table);
}

#[test]
fn full_exports_of_a_scenario_per_engine() {
    for (name, target) in [
        ("mist-a100-8-gpt3", Target::Megatron),
        ("metis-p100-t4-4-moe", Target::Deepspeed),
    ] {
        let s = scenario(name).unwrap();
        let plan = megatron_plan(&s).expect("the heuristic plans it");
        let e = export::export(
            target,
            Job {
                model: &s.model,
                cluster: &s.cluster,
                plan: &plan,
                seq_len: s.seq_len,
            },
        )
        .unwrap_or_else(|e| panic!("{name} {target:?}: {e}"));
        let mut all = String::new();
        for f in &e.files {
            all.push_str(&format!("==> {} <==\n{}\n", f.path, f.contents));
        }
        insta::assert_snapshot!(format!("{}_{}", name.replace('-', "_"), target.name()), all);
    }
}
