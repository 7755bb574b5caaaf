//! `hetplan export` end to end: from `plan` to the files that start the job, the launch script
//! run with a stand-in `torchrun` to see where every rank lands, and refusals with every reason.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command runs");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn hetplan(dir: &Path, args: &[&str]) -> Output {
    run(Command::new(env!("CARGO_BIN_EXE_hetplan"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS"))
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hetplan-export-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const CLUSTER: &str = "1x2xa100-80gb@100Gbps+1x2xv100-32gb@100Gbps";

/// Runs `job/launch.sh` for every node rank its README lists, with a stand-in `torchrun` that
/// prints the visible GPUs, `--nnodes`, `--node_rank`, `--nproc_per_node` and the rest of its
/// arguments; returns (cluster node, local GPU) in global-rank order, and each node rank's
/// further arguments and `PYTHONPATH`.
/// (cluster node, local GPU) of every rank; per node rank, torchrun's further arguments and
/// `PYTHONPATH`.
type Launched = (Vec<(u64, u64)>, Vec<(String, String)>);

fn launch(dir: &Path, job: &Path) -> Launched {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("torchrun"),
        "#!/usr/bin/env bash\necho \"$CUDA_VISIBLE_DEVICES $2 $4 $6\"\nshift 6\necho \"$*\"\n\
         echo \"${PYTHONPATH:-}\"\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("torchrun"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let readme = std::fs::read_to_string(job.join("README.md")).unwrap();
    let nnodes = readme
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| node"))
        .count();
    assert!(nnodes > 0, "{readme}");
    let mut ranks: Vec<(u64, u64)> = Vec::new(); // (node, local GPU) in global-rank order
    let mut rest = Vec::new();
    for k in 0..nnodes {
        let o = run(Command::new("bash")
            .arg(job.join("launch.sh"))
            .arg("--extra")
            .current_dir(job)
            .env("NODE_RANK", k.to_string())
            .env("MASTER_ADDR", "localhost")
            .env_remove("PYTHONPATH")
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ));
        assert_eq!(o.code, 0, "{}", o.stderr);
        let mut lines = o.stdout.lines();
        let words: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let (gpus, n, rank, nproc) = (words[0], words[1], words[2], words[3]);
        assert_eq!(
            (n, rank),
            (nnodes.to_string().as_str(), k.to_string().as_str())
        );
        rest.push((
            lines.next().unwrap_or_default().to_string(),
            lines.next().unwrap_or_default().to_string(),
        ));
        let gpus: Vec<u64> = gpus.split(',').map(|g| g.parse().unwrap()).collect();
        assert_eq!(gpus.len().to_string(), nproc);
        // The README's row for this node rank names the cluster node.
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {k} | n")))
            .unwrap_or_else(|| panic!("row {k}:\n{readme}"));
        let node: u64 = row.split('|').nth(2).unwrap().trim()[1..].parse().unwrap();
        ranks.extend(gpus.into_iter().map(|g| (node, g)));
    }
    (ranks, rest)
}

/// Megatron's and torchtitan's order: stage-major, replica, TP rank fastest.
fn assert_stage_major(stages: &[serde_json::Value], ranks: &[(u64, u64)]) {
    let mut r = 0;
    for st in stages {
        let devs = st["devices"].as_array().unwrap();
        let tp = st["tp"].as_u64().unwrap() as usize;
        let mut replicas: Vec<Vec<(u64, u64)>> = devs
            .chunks(tp)
            .map(|c| {
                c.iter()
                    .map(|d| (d["node"].as_u64().unwrap(), d["local"].as_u64().unwrap()))
                    .collect()
            })
            .collect();
        let mut got: Vec<Vec<(u64, u64)>> = ranks[r..r + devs.len()]
            .chunks(tp)
            .map(|c| c.to_vec())
            .collect();
        // Replicas may come in any order; each TP group is one replica of the plan.
        replicas.sort();
        got.sort();
        assert_eq!(got, replicas, "stage {st}");
        r += devs.len();
    }
    assert_eq!(r, ranks.len(), "every rank is one of the plan's GPUs");
}

fn launched_ranks(dir: &Path, job: &Path) -> Vec<(u64, u64)> {
    launch(dir, job).0
}

#[test]
fn a_megatron_plan_exports_and_every_rank_lands_on_its_gpu() {
    let dir = scratch("megatron");
    // From `plan --engine megatron` to files.
    let o = hetplan(
        &dir,
        &[
            "plan",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--gbs",
            "16",
            "--engine",
            "megatron",
            "--time-limit",
            "none",
            "-o",
            "searched.json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--plan",
            "searched.json",
            "--to",
            "megatron",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("==> launch.sh <=="), "{}", o.stdout);
    // A pipeline whose first stage is on the second node: node ranks follow the stages.
    let plan = r#"{
  "global_batch": 16, "micro_batches": 8, "schedule": {"kind": "1f1b"},
  "stages": [
    {"layers": {"start": 0, "end": 6}, "devices": [{"node": 1, "local": 1}, {"node": 1, "local": 0}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 0, "recompute": "selective"},
    {"layers": {"start": 6, "end": 14}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 0, "recompute": "selective"}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    let plan: serde_json::Value = serde_json::from_str(plan).unwrap();
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--plan",
            "plan.json",
            "--to",
            "megatron",
            "--out",
            "job",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = dir.join("job");
    for f in ["launch.sh", "megatron_args.json", "README.md"] {
        assert!(job.join(f).is_file(), "{f} written");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(job.join("launch.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "launch.sh is executable");
    }
    let args: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(job.join("megatron_args.json")).unwrap())
            .unwrap();
    let value = |flag: &str| {
        let i = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{flag}"));
        args[i + 1].clone()
    };
    let stages = plan["stages"].as_array().unwrap();
    assert_eq!(value("--num-layers"), "12");
    assert_eq!(value("--pipeline-model-parallel-size"), "2");
    assert_eq!(value("--recompute-granularity"), "selective");
    assert_eq!(
        value("--tensor-model-parallel-size"),
        stages[0]["tp"].to_string()
    );
    assert_eq!(value("--global-batch-size"), "16");
    assert_eq!(value("--pipeline-model-parallel-layout"), "Et*5|t*7L");

    // Where the plan puts each stage's GPUs, and where launch.sh puts each rank.
    let ranks = launched_ranks(&dir, &job);
    assert_stage_major(stages, &ranks);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plan_megatron_cannot_run_gives_every_reason_and_the_plan_it_can() {
    let dir = scratch("refused");
    // Two stages at different TP degrees with different micro-batch sizes.
    let plan = r#"{
  "global_batch": 8, "micro_batches": 4, "schedule": {"kind": "gpipe"},
  "stages": [
    {"layers": {"start": 0, "end": 7}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 0, "recompute": "none"},
    {"layers": {"start": 7, "end": 14}, "devices": [{"node": 1, "local": 0}, {"node": 1, "local": 1}],
     "tp": 1, "dp": 2, "micro_batch_sizes": [1, 1], "zero": 0, "recompute": "full"}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--plan",
            "plan.json",
            "--to",
            "megatron",
            "--out",
            "job",
            "--replan-time-limit",
            "2s",
        ],
    );
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(
        !dir.join("job").exists(),
        "no files for a plan the engine cannot run"
    );
    for reason in [
        "one TP degree in every stage",
        "one data-parallel degree",
        "one micro-batch size",
        "no GPipe schedule",
        "checkpoints every stage alike",
    ] {
        assert!(o.stderr.contains(reason), "{reason}:\n{}", o.stderr);
    }
    assert!(
        o.stderr
            .contains("hetplan plan --engine megatron --model gpt3-125m"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("× this plan's"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A LLaMA-shaped model from its config.json (8 blocks: hetplan's layers are 10).
const TINY_LLAMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/tiny-llama/config.json"
);

#[test]
fn a_torchtitan_plan_exports_and_every_rank_lands_on_its_gpu() {
    let dir = scratch("torchtitan");
    // From `plan --engine torchtitan` to files.
    let o = hetplan(
        &dir,
        &[
            "plan",
            "--model",
            TINY_LLAMA,
            "--cluster",
            CLUSTER,
            "--gbs",
            "16",
            "--engine",
            "torchtitan",
            "--time-limit",
            "none",
            "-o",
            "searched.json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            TINY_LLAMA,
            "--cluster",
            CLUSTER,
            "--plan",
            "searched.json",
            "--to",
            "torchtitan",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("==> hetplan_job.py <=="), "{}", o.stdout);
    // An uneven pipeline whose first stage is on the second node, its TP pair in reverse.
    let plan = r#"{
  "global_batch": 16, "micro_batches": 8, "schedule": {"kind": "1f1b"}, "engine": "fsdp",
  "stages": [
    {"layers": {"start": 0, "end": 4}, "devices": [{"node": 1, "local": 1}, {"node": 1, "local": 0}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 0, "recompute": "ops"},
    {"layers": {"start": 4, "end": 10}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 0, "recompute": "ops"}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    let plan: serde_json::Value = serde_json::from_str(plan).unwrap();
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            TINY_LLAMA,
            "--cluster",
            CLUSTER,
            "--plan",
            "plan.json",
            "--to",
            "torchtitan",
            "--out",
            "job",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = dir.join("job");
    for f in ["launch.sh", "hetplan_job.py", "README.md"] {
        assert!(job.join(f).is_file(), "{f} written");
    }
    let module = std::fs::read_to_string(job.join("hetplan_job.py")).unwrap();
    for line in [
        "N_LAYERS = 8\n",
        "DIM = 1024\n",
        "N_KV_HEADS = 4\n",
        "FFN_HIDDEN_DIM = 2816\n",
        "    [\"tok_embeddings\"] + _layers(0, 3),\n",
        "    _layers(3, 8) + [\"norm\", \"lm_head\"],\n",
        "tensor_parallel_degree=2,",
        "pipeline_parallel_degree=2,",
        "pipeline_parallel_schedule=\"1F1B\",",
        "pipeline_parallel_microbatch_size=2,",
        "local_batch_size=16,",
        "global_batch_size=16,",
        "data_parallel_replicate_degree=1,",
        "activation_checkpoint=SelectiveAC.Config(),",
    ] {
        assert!(module.contains(line), "{line}:\n{module}");
    }

    let stages = plan["stages"].as_array().unwrap();
    let (ranks, rest) = launch(&dir, &job);
    assert_stage_major(stages, &ranks);
    assert_eq!(
        ranks[..2],
        [(1, 1), (1, 0)],
        "TP ranks keep the plan's order"
    );
    let here = job.canonicalize().unwrap();
    for (args, pythonpath) in rest {
        assert!(
            args.ends_with("-m torchtitan.train --module hetplan_job --config hetplan_job --extra"),
            "{args}"
        );
        assert_eq!(
            Path::new(&pythonpath).canonicalize().unwrap(),
            here,
            "the job module's directory is on PYTHONPATH"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gpt3_model_torchtitan_cannot_train_is_refused_with_every_reason() {
    let dir = scratch("torchtitan-refused");
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--plan",
            "tp=2,pp=2,mbs=2,gbs=16",
            "--to",
            "torchtitan",
            "--out",
            "job",
        ],
    );
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.is_empty(), "{}", o.stdout);
    assert!(
        !dir.join("job").exists(),
        "no files for a model torchtitan cannot train"
    );
    for reason in [
        "torchtitan cannot run this plan: torchtitan's Llama 3 model normalises with RMSNorm",
        "SwiGLU",
        "rotary positions only",
        "no biases",
        "Weight tying is not supported with Pipeline Parallel",
    ] {
        assert!(o.stderr.contains(reason), "{reason}:\n{}", o.stderr);
    }
    // No re-planning helps: it says so instead of searching.
    assert!(
        o.stderr
            .contains("no plan makes torchtitan run gpt3-125m: the model itself is the reason"),
        "{}",
        o.stderr
    );
    // A plan torchtitan cannot run (k-layer checkpointing) of a model it can: the reason and
    // the plan it can run.
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            TINY_LLAMA,
            "--cluster",
            CLUSTER,
            "--plan",
            "tp=2,pp=2,mbs=2,gbs=16,ckpt=2",
            "--to",
            "torchtitan",
            "--replan-time-limit",
            "2s",
        ],
    );
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("cannot checkpoint as Layers(2)"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr
            .contains("hetplan plan --engine torchtitan --model"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("× this plan's"), "{}", o.stderr);
    // FP16, which torchtitan does not train in: plan in BF16 instead.
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            TINY_LLAMA,
            "--cluster",
            CLUSTER,
            "--plan",
            "tp=2,pp=2,mbs=2,gbs=16,precision=fp16",
            "--to",
            "torchtitan",
        ],
    );
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("the plan is FP16"), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("torchtitan does not train in FP16; plan for it in BF16: hetplan plan"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("--precision fp16"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan's stages with each stage's replicas (TP groups) sorted: an export lists ranks in the
/// engine's order, so replicas may come back in another order; nothing else may change.
fn canonical(mut plan: serde_json::Value) -> serde_json::Value {
    plan.as_object_mut().unwrap().remove("made_for");
    for st in plan["stages"].as_array_mut().unwrap() {
        let tp = st["tp"].as_u64().unwrap() as usize;
        let mut groups: Vec<Vec<serde_json::Value>> = st["devices"]
            .as_array()
            .unwrap()
            .chunks(tp)
            .map(|c| c.to_vec())
            .collect();
        groups.sort_by_key(|g| g.iter().map(|d| d.to_string()).collect::<Vec<_>>());
        st["devices"] = serde_json::Value::Array(groups.concat());
    }
    plan
}

/// A plan exported to `engine` in `dir/job`, and `job/file` imported back (with `import`'s
/// `extra` arguments): the imported plan must be the plan. Returns the plan's estimate (JSON)
/// and `import`'s output.
#[allow(clippy::too_many_arguments)]
fn round_trip(
    dir: &Path,
    model: &str,
    cluster: &str,
    plan: &str,
    engine: &str,
    job: &str,
    file: &str,
    extra: &[&str],
) -> (serde_json::Value, Output) {
    let o = hetplan(
        dir,
        &[
            "export",
            "--model",
            model,
            "--cluster",
            cluster,
            "--plan",
            plan,
            "--to",
            engine,
            "--out",
            job,
        ],
    );
    assert_eq!(o.code, 0, "{plan}: {}", o.stderr);
    let o = hetplan(
        dir,
        &[
            "estimate",
            "--model",
            model,
            "--cluster",
            cluster,
            "--plan",
            plan,
            "--json",
        ],
    );
    assert_eq!(o.code, 0, "{plan}: {}", o.stderr);
    let original: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let imported = format!("{job}-imported.json");
    let source = format!("{job}/{file}");
    let mut args = vec![
        "import",
        "--from",
        engine,
        &source,
        "--cluster",
        cluster,
        "--time-limit",
        "none",
        "-o",
        &imported,
    ];
    args.extend_from_slice(extra);
    let out = hetplan(dir, &args);
    assert_eq!(out.code, 0, "{plan}: {}", out.stderr);
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(&imported)).unwrap()).unwrap();
    let mut expected = original["plan"].clone();
    if engine == "torchtitan" && expected.get("collective_dtypes").is_none() {
        // torchtitan reduce-scatters in FP32 whatever the plan left to the engine
        // (`mixed_precision_reduce`): what it runs, and so what comes back.
        expected["collective_dtypes"] = serde_json::json!({"gradients": "fp32"});
    }
    assert_eq!(
        canonical(back),
        canonical(expected),
        "{model} {plan} through {engine}"
    );
    (original, out)
}

#[test]
fn a_megatron_export_imports_back_to_the_same_plan() {
    let dir = scratch("roundtrip");
    let cluster = "2x4xa100-80gb@100Gbps+2x4xv100-32gb@100Gbps";
    let o = hetplan(
        &dir,
        &[
            "plan",
            "--model",
            "llama2-7b",
            "--cluster",
            cluster,
            "--gbs",
            "64",
            "--engine",
            "megatron",
            "--time-limit",
            "3s",
            "-o",
            "planned.json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let cases: &[(&str, &str)] = &[
        ("llama2-7b", "planned.json"),
        (
            "llama2-7b",
            "tp=2,pp=4,mbs=1,gbs=64,zero=1,ckpt=2,sp=on,schedule=interleaved,v=2",
        ),
        (
            "gpt3-1.3b",
            "tp=1,pp=2,mbs=2,gbs=64,ckpt=selective,offload_opt=0.5,precision=fp16",
        ),
        ("gpt3-1.3b", "tp=2,pp=1,mbs=4,gbs=64,zero=3"),
        // Expert parallelism: `--expert-model-parallel-size` back to every MoE stage's ep.
        (
            "mixtral-8x7b",
            "tp=2,pp=2,mbs=1,gbs=64,zero=1,sp=on,ep=2,capacity=1.25",
        ),
        // Expert tensor parallelism: `--expert-tensor-parallel-size` back to every MoE stage.
        (
            "mixtral-8x7b",
            "tp=2,pp=2,mbs=1,gbs=64,zero=1,sp=on,ep=4,etp=1",
        ),
        // Context parallelism: `--context-parallel-size` back to every stage's cp.
        ("llama2-7b", "tp=2,pp=2,cp=2,mbs=1,gbs=64,zero=1,sp=on"),
        (
            "llama2-7b",
            "tp=2,pp=2,cp=2,cp_comm=a2a,mbs=1,gbs=64,zero=1,sp=on",
        ),
    ];
    for (i, (model, plan)) in cases.iter().enumerate() {
        let job = format!("job{i}");
        let (est, _) = round_trip(
            &dir,
            model,
            cluster,
            plan,
            "megatron",
            &job,
            "megatron_args.json",
            &[],
        );
        // The job file is a model for `estimate`, with the same time as the catalog model.
        let o = hetplan(
            &dir,
            &[
                "estimate",
                "--model",
                &format!("{job}/launch.sh"),
                "--cluster",
                cluster,
                "--plan",
                &format!("{job}-imported.json"),
                "--json",
            ],
        );
        assert_eq!(o.code, 0, "{plan}: {}", o.stderr);
        let again: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        let (a, b) = (
            est["iteration_time_s"].as_f64().unwrap(),
            again["iteration_time_s"].as_f64().unwrap(),
        );
        assert!((a - b).abs() <= 1e-9 * a, "{model} {plan}: {a} then {b}");
    }
    // FP8 with the weights kept and gathered in FP8 and BF16 gradients, on H100s: `--bf16
    // --fp8-format hybrid --fp8-param-gather --grad-reduce-in-bf16` and back.
    let h100 = "2x4xh100-sxm5-80gb@400Gbps";
    let o = hetplan(
        &dir,
        &[
            "estimate",
            "--model",
            "llama2-7b",
            "--cluster",
            h100,
            "--plan",
            "tp=2,pp=2,mbs=1,gbs=64,zero=1,sp=on,precision=fp8",
            "--json",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut fp8: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let mut fp8 = fp8["plan"].take();
    fp8["collective_dtypes"] = serde_json::json!({"params": "fp8", "gradients": "bf16"});
    std::fs::write(dir.join("fp8.json"), fp8.to_string()).unwrap();
    round_trip(
        &dir,
        "llama2-7b",
        h100,
        "fp8.json",
        "megatron",
        "job-fp8",
        "megatron_args.json",
        &[],
    );
    let args = std::fs::read_to_string(dir.join("job-fp8/megatron_args.json")).unwrap();
    for flag in [
        "--fp8-format",
        "--fp8-param-gather",
        "--grad-reduce-in-bf16",
    ] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn import_points_at_what_it_cannot_read() {
    let dir = scratch("import-errors");
    std::fs::write(
        dir.join("train.sh"),
        "torchrun pretrain_gpt.py \\\n  --num-layers 4 --hidden-size 256 \\\n  \
         --num-attention-heads $HEADS --seq-length 512\n",
    )
    .unwrap();
    let o = hetplan(
        &dir,
        &[
            "import",
            "--from",
            "megatron",
            "train.sh",
            "--cluster",
            "1x8xa100-80gb",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("train.sh:3:25"), "{}", o.stderr);
    assert!(o.stderr.contains("shell variables"), "{}", o.stderr);
    let o = hetplan(
        &dir,
        &[
            "import",
            "--from",
            "megatron",
            "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 \
             --micro-batch-size 1 --vocab-size 100 --fp8-format hybrid",
            "--cluster",
            "1x8xa100-80gb",
            "--time-limit",
            "none",
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("--fp8-format without --bf16"),
        "{}",
        o.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_deepspeed_export_imports_back_to_the_same_plan() {
    let dir = scratch("ds-roundtrip");
    let cluster = "1x2xa100-80gb@100Gbps+1x2xv100-32gb@100Gbps";
    let staged = r#"{"global_batch": 8, "micro_batches": 4, "schedule": {"kind": "1f1b"},
      "precision": "fp32", "engine": "deepspeed", "stages": [
      {"layers": {"start": 0, "end": 5}, "devices": [{"node": 1, "local": 1}, {"node": 1, "local": 0}],
       "tp": 1, "dp": 2, "micro_batch_sizes": [1, 1], "zero": 1, "recompute": "full"},
      {"layers": {"start": 5, "end": 14}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
       "tp": 1, "dp": 2, "micro_batch_sizes": [1, 1], "zero": 1, "recompute": "full"}]}"#;
    std::fs::write(dir.join("staged.json"), staged).unwrap();
    for (i, plan) in [
        "staged.json",
        "pp=1,dp=4,mbs=2,gbs=64,zero=3,offload_opt=0.5,offload_w=1,engine=deepspeed",
    ]
    .iter()
    .enumerate()
    {
        let extra = ["--model", "gpt3-125m"];
        let job = format!("job{i}");
        round_trip(
            &dir,
            "gpt3-125m",
            cluster,
            plan,
            "deepspeed",
            &job,
            "ds_config.json",
            &extra,
        );
    }
    // Without --model: a usage error that says why.
    let o = hetplan(
        &dir,
        &[
            "import",
            "--from",
            "deepspeed",
            "job0/ds_config.json",
            "--cluster",
            cluster,
        ],
    );
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("needs --model"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every (node, GPU) of a plan's stages, sorted.
fn plan_gpus(plan: &serde_json::Value) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["devices"].as_array().unwrap().clone())
        .map(|d| (d["node"].as_u64().unwrap(), d["local"].as_u64().unwrap()))
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn a_sailor_plan_with_mixed_tp_replicas_exports_and_every_rank_lands_on_its_gpu() {
    let dir = scratch("sailor");
    let cluster = "1x2xa100-80gb@100Gbps+1x4xv100-32gb@100Gbps";
    // Each stage: an A100 replica at TP 1 and a V100 replica at TP 2. Megatron refuses it.
    let text = r#"{
  "global_batch": 16, "micro_batches": 4, "schedule": {"kind": "1f1b"},
  "stages": [
    {"layers": {"start": 0, "end": 6},
     "devices": [{"node": 0, "local": 1}, {"node": 1, "local": 2}, {"node": 1, "local": 3}],
     "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2]},
    {"layers": {"start": 6, "end": 14},
     "devices": [{"node": 1, "local": 0}, {"node": 1, "local": 1}, {"node": 0, "local": 0}],
     "tp": 2, "replica_tp": [2, 1], "dp": 2, "micro_batch_sizes": [2, 2]}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), text).unwrap();
    let plan: serde_json::Value = serde_json::from_str(text).unwrap();
    let args = |to: &str| {
        vec![
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            cluster,
            "--plan",
            "plan.json",
            "--to",
            to,
            "--out",
            to,
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
    };
    let a = args("megatron");
    let o = hetplan(&dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.code, 2, "megatron refuses mixed TP degrees: {}", o.stderr);
    let a = args("sailor");
    let o = hetplan(&dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = dir.join("sailor");
    let dist: Vec<Vec<Vec<usize>>> =
        serde_json::from_str(&std::fs::read_to_string(job.join("dist_config.json")).unwrap())
            .unwrap();
    let ds: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(job.join("ds_config.json")).unwrap())
            .unwrap();
    assert_eq!(ds["train_batch_size"], 16);
    // launch.sh under a stand-in torchrun: global rank → (node, GPU).
    let (ranks, rest) = launch(&dir, &job);
    assert_eq!(ranks.len(), 6);
    let mut launched = ranks.clone();
    launched.sort_unstable();
    assert_eq!(
        launched,
        plan_gpus(&plan),
        "every GPU of the plan runs exactly one rank"
    );
    // dist_config.json names each replica's GPUs, in TP order, by the ranks torchrun gives.
    for (g, st) in plan["stages"].as_array().unwrap().iter().enumerate() {
        let devs: Vec<(u64, u64)> = st["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["node"].as_u64().unwrap(), d["local"].as_u64().unwrap()))
            .collect();
        let got: Vec<(u64, u64)> = dist[g].iter().flatten().map(|&r| ranks[r]).collect();
        assert_eq!(got, devs, "stage {g}");
        let tps: Vec<usize> = dist[g].iter().map(Vec::len).collect();
        let want: Vec<usize> = st["replica_tp"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(tps, want, "stage {g}'s TP degrees");
    }
    // Each node's processes get its replicas' TP degree (the A100 node n0 runs TP 1, the
    // V100 node n1 TP 2); the split counts the embedding and the head as layers.
    let mut runs: Vec<u64> = ranks.iter().map(|r| r.0).collect();
    runs.dedup();
    assert_eq!(runs.len(), rest.len());
    for ((words, _), node) in rest.iter().zip(runs) {
        assert!(words.contains("--layers-per-stage [6,8]"), "{words}");
        let tp = if node == 0 { 1 } else { 2 };
        assert!(
            words.contains(&format!("--tensor-model-parallel-size {tp}")),
            "node n{node}: {words}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_mist_plan_with_per_stage_tp_exports_and_every_rank_lands_on_its_gpu() {
    let dir = scratch("mist");
    // Stage 0 and 2 on the V100 node, stage 1 on both A100s at TP 2, ZeRO-1, 4 blocks
    // checkpointed: Mist's ranks put the V100 node first.
    let text = r#"{
  "global_batch": 16, "micro_batches": 8, "schedule": {"kind": "1f1b"},
  "stages": [
    {"layers": {"start": 0, "end": 4}, "devices": [{"node": 1, "local": 1}],
     "tp": 1, "dp": 1, "micro_batch_sizes": [2]},
    {"layers": {"start": 4, "end": 10}, "devices": [{"node": 0, "local": 1}, {"node": 0, "local": 0}],
     "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 1, "recompute": 4},
    {"layers": {"start": 10, "end": 14}, "devices": [{"node": 1, "local": 0}],
     "tp": 1, "dp": 1, "micro_batch_sizes": [2]}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), text).unwrap();
    let plan: serde_json::Value = serde_json::from_str(text).unwrap();
    let o = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-125m",
            "--cluster",
            CLUSTER,
            "--plan",
            "plan.json",
            "--to",
            "mist",
            "--out",
            "job",
        ],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = dir.join("job");
    let yaml = std::fs::read_to_string(job.join("hetplan_mist.yaml")).unwrap();
    // The YAML parses (PyYAML when there is one) with the strategy's shapes.
    let python_yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if python_yaml {
        let check = "import sys, yaml, json\n\
             c = yaml.safe_load(open(sys.argv[1]))\n\
             s = c['strategy']\n\
             n = len(s['layer_partitions'])\n\
             assert n == len(s['device_assignment']) == len(s['gradient_checkpointing']) == len(s['stage_strategies'])\n\
             assert all(len(x) == 10 for x in s['stage_strategies']) and len(s['pre_post_strategy_array']) == 10\n\
             assert sum(s['layer_partitions']) == c['model']['num_hidden_layers']\n\
             g = c['training']['global_batch_size']\n\
             assert all(x[0] * x[1] * s['gradient_accumulation_steps'] == g for x in s['stage_strategies'])\n\
             assert all(x[1] * x[2] == a[0] * a[1] for x, a in zip(s['stage_strategies'], s['device_assignment']))\n\
             h = c['hardware']\n\
             assert sum(a[0] * a[1] for a in s['device_assignment']) == h['num_nodes'] * h['num_gpus_per_node']\n\
             print(json.dumps(s))\n";
        let o = run(Command::new("python3")
            .args(["-c", check])
            .arg(job.join("hetplan_mist.yaml")));
        assert_eq!(o.code, 0, "{}\n{yaml}", o.stderr);
        let s: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
        assert_eq!(s["layer_partitions"], serde_json::json!([3, 6, 3]));
        assert_eq!(s["gradient_checkpointing"], serde_json::json!([0, 4, 0]));
        assert_eq!(s["stage_strategies"][1][2], 2);
    } else {
        // A structural check: the top-level sections and the per-stage lists.
        for key in [
            "\ntraining:",
            "\nhardware:",
            "\nstrategy:",
            "\ntuning:",
            "\nmodel:",
        ] {
            assert!(yaml.contains(key), "{key}\n{yaml}");
        }
        assert!(yaml.contains("  layer_partitions: [3, 6, 3]\n"), "{yaml}");
        assert!(
            yaml.contains("  gradient_checkpointing: [0, 4, 0]\n"),
            "{yaml}"
        );
    }
    let ranks = launched_ranks(&dir, &job);
    let mut launched = ranks.clone();
    launched.sort_unstable();
    assert_eq!(
        launched,
        plan_gpus(&plan),
        "every GPU of the plan runs exactly one rank"
    );
    // Mist's ranks: stage 0 rank 0, stage 2 rank 1 (packed on Mist's node 0), stage 1 ranks
    // 2 and 3 in TP order.
    assert_eq!(ranks, vec![(1, 1), (1, 0), (0, 1), (0, 0)]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn research_runtimes_refuse_what_they_cannot_express_and_suggest_a_plain_plan() {
    let dir = scratch("research-refused");
    // Per-replica micro-batch sizes: neither Sailor nor Mist has them.
    let plan = r#"{
  "global_batch": 12, "micro_batches": 4, "schedule": {"kind": "1f1b"},
  "stages": [
    {"layers": {"start": 0, "end": 14}, "devices": [{"node": 0, "local": 0}, {"node": 1, "local": 0}],
     "tp": 1, "dp": 2, "micro_batch_sizes": [2, 1]}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    for (to, needle) in [
        ("sailor", "one --micro-batch-size"),
        ("mist", "one batch_size"),
    ] {
        let o = hetplan(
            &dir,
            &[
                "export",
                "--model",
                "gpt3-125m",
                "--cluster",
                CLUSTER,
                "--plan",
                "plan.json",
                "--to",
                to,
            ],
        );
        assert_eq!(o.code, 2, "{to}: {}", o.stderr);
        assert!(o.stderr.contains(needle), "{to}: {}", o.stderr);
        assert!(
            o.stderr.contains(&format!("no --engine {to}"))
                && o.stderr.contains("hetplan plan --model"),
            "{to}: {}",
            o.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torchtitan_export_imports_back_to_the_same_plan() {
    let dir = scratch("tt-roundtrip");
    let cluster = "2x2xa100-80gb@100Gbps";
    for (i, plan) in [
        "pp=2,dp=1,tp=2,mbs=1,gbs=16,ckpt=full,sp=on,schedule=interleaved,v=2,engine=fsdp",
        "pp=1,dp=4,mbs=2,gbs=64,zero=3,ckpt=ops,engine=fsdp",
        "pp=2,dp=2,mbs=1,gbs=32,schedule=gpipe,precision=fp32,engine=fsdp",
    ]
    .iter()
    .enumerate()
    {
        let job = format!("job{i}");
        let (original, o) = round_trip(
            &dir,
            TINY_LLAMA,
            cluster,
            plan,
            "torchtitan",
            &job,
            "hetplan_job.py",
            &["--json"],
        );
        // The model came from the module's shape constants: the same time as the config.json's
        // for the plan imported (which reduces in FP32, as torchtitan does: slower than the
        // plan exported where its data parallelism reduces anything).
        let out: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        let imported = format!("{job}-imported.json");
        let e = hetplan(
            &dir,
            &[
                "estimate",
                "--model",
                TINY_LLAMA,
                "--cluster",
                cluster,
                "--plan",
                &imported,
                "--json",
            ],
        );
        assert_eq!(e.code, 0, "{plan}: {}", e.stderr);
        let e: serde_json::Value = serde_json::from_str(&e.stdout).unwrap();
        let (a, b) = (
            e["iteration_time_s"].as_f64().unwrap(),
            out["iteration_time_s"].as_f64().unwrap(),
        );
        assert!((a - b).abs() <= 1e-9 * a, "{plan}: {a} then {b}");
        assert!(original["iteration_time_s"].as_f64().unwrap() <= a * (1.0 + 1e-9));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_flashflex_plan_of_two_pipelines_exports_and_every_rank_lands_on_its_gpu() {
    let dir = scratch("flashflex");
    let cluster = "1x2xa100-80gb@100Gbps+1x4xv100-32gb@100Gbps";
    // Pipeline 0 on the A100s at TP 1, pipeline 1 on the V100s at TP 2.
    let text = r#"{
  "global_batch": 16, "micro_batches": 4, "schedule": {"kind": "gpipe"},
  "stages": [
    {"layers": {"start": 0, "end": 17},
     "devices": [{"node": 0, "local": 1}, {"node": 1, "local": 2}, {"node": 1, "local": 3}],
     "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2]},
    {"layers": {"start": 17, "end": 34},
     "devices": [{"node": 0, "local": 0}, {"node": 1, "local": 0}, {"node": 1, "local": 1}],
     "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2]}
  ]
}"#;
    std::fs::write(dir.join("plan.json"), text).unwrap();
    let plan: serde_json::Value = serde_json::from_str(text).unwrap();
    let base = [
        "export",
        "--model",
        "llama2-7b",
        "--cluster",
        cluster,
        "--plan",
        "plan.json",
        "--to",
        "flashflex",
    ];
    let mut a = base.to_vec();
    a.extend(["--seq-len", "4096", "--out", "flashflex"]);
    let o = hetplan(&dir, &a);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let job = dir.join("flashflex");
    let (ranks, rest) = launch(&dir, &job);
    let mut launched = ranks.clone();
    launched.sort_unstable();
    assert_eq!(
        launched,
        plan_gpus(&plan),
        "every GPU of the plan runs exactly one rank"
    );
    // --pp_layouts names each stage's GPUs by the ranks torchrun gives.
    let args = rest[0].0.clone();
    let pp = args
        .split("--pp_layouts ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("{args}"));
    let pp: Vec<Vec<Vec<usize>>> = serde_json::from_str(pp.trim_matches('\'')).unwrap();
    for (g, st) in plan["stages"].as_array().unwrap().iter().enumerate() {
        let devs: Vec<(u64, u64)> = st["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["node"].as_u64().unwrap(), d["local"].as_u64().unwrap()))
            .collect();
        let replica =
            |i: usize| -> Vec<(u64, u64)> { pp[i][g].iter().map(|&r| ranks[r]).collect() };
        assert_eq!(replica(0), devs[..1].to_vec(), "stage {g}: {args}");
        assert_eq!(replica(1), devs[1..].to_vec(), "stage {g}: {args}");
    }
    assert!(args.contains("--hetero_configs [[1,1],[2,2]]"), "{args}");
    assert!(
        args.contains("--global_bsz_size 8 8 --chunks 4 4"),
        "{args}"
    );
    // At another sequence length, and with GPT-3: every reason, exit 2.
    let mut a = base.to_vec();
    a.extend(["--seq-len", "2048"]);
    let o = hetplan(&dir, &a);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("sequence 4096"), "{}", o.stderr);
    std::fs::write(
        dir.join("plan.json"),
        text.replacen(
            "\"micro_batch_sizes\": [2, 2]}",
            "\"micro_batch_sizes\": [2, 2], \"zero\": 1}",
            1,
        ),
    )
    .unwrap();
    let mut a = base.to_vec();
    a.extend(["--seq-len", "4096"]);
    let o = hetplan(&dir, &a);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("ZeRO-1"), "{}", o.stderr);
    assert!(o.stderr.contains("one --default_dp_type"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
