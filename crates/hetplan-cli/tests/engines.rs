//! hetplan's exports checked by the engines' own code (issue 11): megatron-core parses the
//! pipeline layout and validates the `TransformerConfig` of every Megatron export
//! (`tests/engines/check_megatron.py`); DeepSpeed reads every `ds_config.json` and runs every
//! layer split in its real `PipelineModule`, one gloo process per stage
//! (`tests/engines/check_deepspeed.py`).
//!
//! The engines are Python packages that pull in PyTorch. The interpreter that has them is
//! `HETPLAN_ENGINES_PYTHON`, or `.venv-engines/bin/python` at the repository root, which
//! `.ci/run` creates. Without either the test says so on stderr and checks nothing, unless
//! `HETPLAN_REQUIRE_ENGINES` is set (as `.ci/run` sets it): then a missing interpreter fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn engines_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HETPLAN_ENGINES_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = root().join(".venv-engines/bin/python");
    venv.exists().then_some(venv)
}

fn hetplan(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hetplan"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("hetplan runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Plans that exercise every Megatron flag hetplan writes: GQA and SwiGLU, MoE, interleaving,
/// recompute (selective, full, k layers), the distributed optimizer, Megatron-FSDP, optimizer
/// offload, sequence parallelism, FP16, untied embeddings.
const INLINE: &[(&str, &str, &str)] = &[
    ("gpt3-1.3b", "dgx-a100-80gb", "tp=2,pp=2,mbs=4,gbs=64"),
    (
        "llama3-8b",
        "2x8xa100-80gb",
        "tp=4,pp=4,mbs=1,gbs=64,zero=1,ckpt=full,sp=on,schedule=interleaved,v=2",
    ),
    (
        "mixtral-8x7b",
        "2x8xa100-80gb",
        "tp=2,pp=8,mbs=1,gbs=64,zero=1,ckpt=selective,offload_opt=0.5",
    ),
    (
        "llama2-7b",
        "1x8xa100-80gb",
        "tp=1,pp=1,dp=8,mbs=2,gbs=64,zero=3",
    ),
    (
        "gpt3-13b",
        "2x8xv100-32gb",
        "tp=8,pp=2,mbs=1,gbs=32,ckpt=4,precision=fp16",
    ),
];

#[test]
fn megatron_core_accepts_every_export() {
    let Some(python) = engines_python() else {
        assert!(
            std::env::var_os("HETPLAN_REQUIRE_ENGINES").is_none(),
            "HETPLAN_REQUIRE_ENGINES is set but no interpreter with the engines was found \
             (HETPLAN_ENGINES_PYTHON or .venv-engines/bin/python; .ci/run makes it)"
        );
        eprintln!(
            "megatron_core_accepts_every_export: no interpreter with megatron-core \
             (HETPLAN_ENGINES_PYTHON or .venv-engines/bin/python; .ci/run makes it): not checked"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("hetplan-engines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut exports: Vec<String> = Vec::new();
    for (i, (model, cluster, plan)) in INLINE.iter().enumerate() {
        let out = format!("inline-{i}");
        let (code, err) = hetplan(
            &dir,
            &[
                "export",
                "--model",
                model,
                "--cluster",
                cluster,
                "--plan",
                plan,
                "--to",
                "megatron",
                "--out",
                &out,
            ],
        );
        assert_eq!(code, 0, "{model} {plan}: {err}");
        exports.push(out);
    }
    // Plans hetplan finds for Megatron on heterogeneous clusters.
    for (i, (model, cluster, gbs)) in [
        (
            "gpt3-1.3b",
            "1x4xa100-80gb@100Gbps+1x4xv100-32gb@100Gbps",
            "64",
        ),
        (
            "llama3-8b",
            "2x8xh100-80gb@400Gbps+2x8xa100-40gb@200Gbps",
            "256",
        ),
    ]
    .iter()
    .enumerate()
    {
        let plan = format!("planned-{i}.json");
        let (code, err) = hetplan(
            &dir,
            &[
                "plan",
                "--model",
                model,
                "--cluster",
                cluster,
                "--gbs",
                gbs,
                "--engine",
                "megatron",
                "--time-limit",
                "2s",
                "-o",
                &plan,
            ],
        );
        assert_eq!(code, 0, "{model}: {err}");
        let out = format!("planned-{i}");
        let (code, err) = hetplan(
            &dir,
            &[
                "export",
                "--model",
                model,
                "--cluster",
                cluster,
                "--plan",
                &plan,
                "--to",
                "megatron",
                "--out",
                &out,
            ],
        );
        assert_eq!(code, 0, "{model}: {err}");
        exports.push(out);
    }
    // A broken copy the checker must refuse: one decoder layer too many.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    let args = std::fs::read_to_string(dir.join("inline-0/megatron_args.json")).unwrap();
    std::fs::write(
        broken.join("megatron_args.json"),
        args.replacen("\"24\"", "\"25\"", 1),
    )
    .unwrap();

    let out = run_checker(&python, "check_megatron.py", &dir, &exports);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "megatron-core refused an export:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        exports.len()
    );
    let out = run_checker(&python, "check_megatron.py", &dir, &["broken".to_string()]);
    assert!(
        !out.status.success(),
        "the checker passed a broken export: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `checker` on `dirs` (relative to `cwd`) with the engines' interpreter, its directory
/// first on PATH (DeepSpeed builds an op with the environment's ninja).
fn run_checker(python: &Path, checker: &str, cwd: &Path, dirs: &[String]) -> std::process::Output {
    let bin = python.parent().map(Path::to_path_buf).unwrap_or_default();
    Command::new(python)
        .arg(root().join("tests/engines").join(checker))
        .args(dirs)
        .current_dir(cwd)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .expect("the engines' interpreter runs")
}

/// DeepSpeed exports: pipelines with ZeRO-1 and checkpointing, ZeRO-3 with offloading, and what
/// hetplan plans for DeepSpeed on a heterogeneous cluster.
#[test]
fn deepspeed_accepts_every_export() {
    let Some(python) = engines_python() else {
        assert!(
            std::env::var_os("HETPLAN_REQUIRE_ENGINES").is_none(),
            "HETPLAN_REQUIRE_ENGINES is set but no interpreter with the engines was found"
        );
        eprintln!("deepspeed_accepts_every_export: no interpreter with deepspeed: not checked");
        return;
    };
    let dir = std::env::temp_dir().join(format!("hetplan-ds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut exports: Vec<String> = Vec::new();
    let inline: &[(&str, &str, &str)] = &[
        (
            "gpt3-1.3b",
            "2x4xa100-80gb@100Gbps",
            "pp=2,dp=4,mbs=2,gbs=64,zero=1,ckpt=full,engine=deepspeed",
        ),
        (
            "gpt3-1.3b",
            "2x4xa100-80gb@100Gbps",
            "pp=1,dp=8,mbs=2,gbs=64,zero=3,offload_opt=0.5,offload_w=1,engine=deepspeed",
        ),
        (
            "llama3-8b",
            "1x8xa100-80gb",
            "pp=4,dp=2,mbs=1,gbs=32,zero=0,precision=fp16,engine=deepspeed",
        ),
    ];
    for (i, (model, cluster, plan)) in inline.iter().enumerate() {
        let out = format!("inline-{i}");
        let (code, err) = hetplan(
            &dir,
            &[
                "export",
                "--model",
                model,
                "--cluster",
                cluster,
                "--plan",
                plan,
                "--to",
                "deepspeed",
                "--out",
                &out,
            ],
        );
        assert_eq!(code, 0, "{model} {plan}: {err}");
        exports.push(out);
    }
    let cluster = "1x4xa100-80gb@100Gbps+2x2xv100-32gb@25Gbps";
    let (code, err) = hetplan(
        &dir,
        &[
            "plan",
            "--model",
            "gpt3-1.3b",
            "--cluster",
            cluster,
            "--gbs",
            "64",
            "--engine",
            "deepspeed",
            "--time-limit",
            "2s",
            "-o",
            "planned.json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, err) = hetplan(
        &dir,
        &[
            "export",
            "--model",
            "gpt3-1.3b",
            "--cluster",
            cluster,
            "--plan",
            "planned.json",
            "--to",
            "deepspeed",
            "--out",
            "planned",
        ],
    );
    assert_eq!(code, 0, "{err}");
    exports.push("planned".into());
    // A broken copy: a stage boundary moved in the split but not in ranks.json.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["ds_config.json", "ranks.json", "hetplan_pipeline.py"] {
        std::fs::copy(dir.join("inline-0").join(f), broken.join(f)).unwrap();
    }
    let py = std::fs::read_to_string(broken.join("hetplan_pipeline.py")).unwrap();
    assert!(py.contains("PARTS = [0, 13, 26]"), "{py}");
    std::fs::write(
        broken.join("hetplan_pipeline.py"),
        py.replace("PARTS = [0, 13, 26]", "PARTS = [0, 12, 26]"),
    )
    .unwrap();

    let out = run_checker(&python, "check_deepspeed.py", &dir, &exports);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "DeepSpeed refused an export:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        exports.len()
    );
    let out = run_checker(&python, "check_deepspeed.py", &dir, &["broken".to_string()]);
    assert!(
        !out.status.success(),
        "the checker passed a broken export: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
