//! hetplan's exports checked by the engines' own code (issue 11): megatron-core parses the
//! pipeline layout and validates the `TransformerConfig` of every Megatron export
//! (`tests/engines/check_megatron.py`); DeepSpeed reads every `ds_config.json` and runs every
//! layer split in its real `PipelineModule`, one gloo process per stage
//! (`tests/engines/check_deepspeed.py`); torchtitan parses every torchtitan export's config
//! module, builds its model on the meta device and checks the layer split and the degrees
//! against the launch (`tests/engines/check_torchtitan.py`).
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

/// The engines' interpreter; without one, `None` and the test says on stderr that it checked
/// nothing — unless `HETPLAN_REQUIRE_ENGINES` says there must be one.
fn engines_or_skip(test: &str) -> Option<PathBuf> {
    let python = engines_python();
    if python.is_none() {
        assert!(
            std::env::var_os("HETPLAN_REQUIRE_ENGINES").is_none(),
            "HETPLAN_REQUIRE_ENGINES is set but no interpreter with the engines was found \
             (HETPLAN_ENGINES_PYTHON or .venv-engines/bin/python; .ci/run makes it)"
        );
        eprintln!(
            "{test}: no interpreter with the engines (HETPLAN_ENGINES_PYTHON or \
             .venv-engines/bin/python; .ci/run makes it): not checked"
        );
    }
    python
}

/// A fresh directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hetplan-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A port for torchrun's store to listen on, free when picked, from below the kernel's
/// ephemeral range: ports there are handed out only to explicit binds, never to the outgoing
/// connections and `bind(0)` listeners that gloo and the other engine tests open by the
/// hundred, so nothing else takes it before torchrun listens. Where the range is unknown (not
/// Linux) or starts at 10,000 or below, any port the kernel hands out; the launch test
/// relaunches once on EADDRINUSE either way.
fn listen_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(0);
    let (low, span) = (10_000u16, ephemeral_low.saturating_sub(10_000));
    // A start that differs between test processes and between calls of one.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    for i in 0..u32::from(span) {
        let port = low + ((salt.wrapping_add(i * 7_919)) % u32::from(span)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// How a child of [`wait_all`] ended.
struct Ended {
    /// It exited successfully.
    ok: bool,
    /// [`wait_all`] stopped it because another child had failed.
    stopped: bool,
    stdout: String,
    stderr: String,
}

/// Waits for every child, reading their pipes meanwhile; once one fails the others are
/// stopped rather than left to wait out their rendezvous timeout (ten minutes and more):
/// SIGTERM first, which torchrun passes on to its workers (they run in sessions of their own,
/// which killing torchrun alone would orphan), SIGKILL ten seconds later. A pipe that an
/// orphan still holds open is read for ten seconds after its child ended, then left.
fn wait_all(mut children: Vec<std::process::Child>) -> Vec<Ended> {
    use std::io::Read;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        rx
    };
    let pipes: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let out = c.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>);
            let err = c.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>);
            (read(out), read(err))
        })
        .collect();
    let mut status = vec![None; children.len()];
    let mut stopped = vec![false; children.len()];
    let mut terminated: Option<Instant> = None;
    while status.iter().any(Option::is_none) {
        for (c, s) in children.iter_mut().zip(status.iter_mut()) {
            if s.is_none() {
                *s = c.try_wait().expect("a child's status");
            }
        }
        let failed = status.iter().flatten().any(|s| !s.success());
        let running = status.iter().map(Option::is_none);
        for ((c, stop), alive) in children.iter_mut().zip(stopped.iter_mut()).zip(running) {
            if !alive || !failed {
                continue;
            }
            match terminated {
                None => {
                    let _ = Command::new("kill")
                        .args(["-TERM", &c.id().to_string()])
                        .status();
                    *stop = true;
                }
                Some(at) if at.elapsed() > Duration::from_secs(10) => {
                    let _ = c.kill();
                }
                Some(_) => {}
            }
        }
        if failed && terminated.is_none() {
            terminated = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let grace = Duration::from_secs(10);
    status
        .into_iter()
        .zip(stopped)
        .zip(pipes)
        .map(|((s, stopped), (out, err))| Ended {
            ok: s.is_some_and(|s| s.success()),
            stopped,
            stdout: out.recv_timeout(grace).unwrap_or_default(),
            stderr: err.recv_timeout(grace).unwrap_or_default(),
        })
        .collect()
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

/// `hetplan export ... --to engine --out out` in `dir`, which must succeed.
fn export_ok(dir: &Path, model: &str, cluster: &str, plan: &str, engine: &str, out: &str) {
    let (code, err) = hetplan(
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
            out,
        ],
    );
    assert_eq!(code, 0, "{model} {plan} to {engine}: {err}");
}

/// Exports, in `dir`, every inline `(model, cluster, plan)` and the plan hetplan finds for
/// the engine (2 s) on every `(model, cluster, global batch)`; `model` maps the names to
/// `--model` arguments. Returns the export directories.
fn exports_for(
    dir: &Path,
    engine: &str,
    inline: &[(&str, &str, &str)],
    planned: &[(&str, &str, &str)],
    model: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut exports = Vec::new();
    for (i, (m, cluster, plan)) in inline.iter().enumerate() {
        let out = format!("inline-{i}");
        export_ok(dir, &model(m), cluster, plan, engine, &out);
        exports.push(out);
    }
    for (i, (m, cluster, gbs)) in planned.iter().enumerate() {
        let plan = format!("planned-{i}.json");
        let (code, err) = hetplan(
            dir,
            &[
                "plan",
                "--model",
                &model(m),
                "--cluster",
                cluster,
                "--gbs",
                gbs,
                "--engine",
                engine,
                "--time-limit",
                "2s",
                "-o",
                &plan,
            ],
        );
        assert_eq!(code, 0, "{m} for {engine}: {err}");
        let out = format!("planned-{i}");
        export_ok(dir, &model(m), cluster, &plan, engine, &out);
        exports.push(out);
    }
    exports
}

/// The engine's checker accepts every export (one `ok` line each) and refuses `broken`.
fn assert_checked(python: &Path, checker: &str, dir: &Path, exports: &[String]) {
    let out = run_checker(python, checker, dir, exports);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{checker} refused an export:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        exports.len(),
        "{stdout}"
    );
    let out = run_checker(python, checker, dir, &["broken".to_string()]);
    assert!(
        !out.status.success(),
        "{checker} passed a broken export: {}",
        String::from_utf8_lossy(&out.stdout)
    );
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

#[test]
fn megatron_core_accepts_every_export() {
    let Some(python) = engines_or_skip("megatron_core_accepts_every_export") else {
        return;
    };
    let dir = scratch("engines-megatron");
    // Plans hetplan finds for Megatron on heterogeneous clusters beside the inline ones.
    let planned = [
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
    ];
    let mut exports = exports_for(&dir, "megatron", INLINE, &planned, str::to_string);
    // HuggingFace configs with what Megatron takes beyond the plain decoder: QK-norm (Qwen3),
    // a sliding window on every layer (Mistral) and on every other one (GPT-Neo), dense blocks
    // in a MoE model with expert parallelism (Qwen3-MoE), latent attention (DeepSeek-V3), and
    // context parallelism.
    let hf = [
        ("qwen3-0.6b", "1x8xa100-80gb", "tp=2,pp=2,mbs=1,gbs=16"),
        // Context parallelism (`--context-parallel-size`) beside TP and PP.
        (
            "qwen3-0.6b",
            "2x8xa100-80gb",
            "tp=2,pp=2,cp=2,mbs=1,gbs=16,sp=on",
        ),
        // ... and by all-to-all (Ulysses, `--cp-comm-type a2a`).
        (
            "qwen3-0.6b",
            "2x8xa100-80gb",
            "tp=2,pp=2,cp=2,cp_comm=a2a,mbs=1,gbs=16,sp=on",
        ),
        ("mistral-7b-v0.1", "2x8xa100-80gb", "tp=4,pp=2,mbs=1,gbs=32"),
        // FP8 (`--bf16 --fp8-format hybrid`: Transformer Engine's linears).
        (
            "qwen3-0.6b",
            "1x8xh100-80gb",
            "tp=2,pp=2,mbs=1,gbs=16,precision=fp8",
        ),
        ("gpt-neo-1.3b", "1x8xa100-80gb", "tp=2,pp=2,mbs=2,gbs=32"),
        // TP communication overlap (`--tp-comm-overlap`, with the sequence parallelism
        // arguments.py asserts for it).
        (
            "qwen3-0.6b",
            "1x8xh100-80gb",
            "tp=2,pp=2,mbs=1,gbs=16,sp=on,tp_overlap=on",
        ),
        // MoE with dense first blocks (`--moe-layer-freq`) and expert parallelism.
        (
            "qwen3-30b-a3b-dense2",
            "2x8xa100-80gb",
            "tp=1,pp=2,mbs=1,gbs=32,ep=4,capacity=1.25",
        ),
        // ... with the experts folded over the TP ranks (`--expert-tensor-parallel-size 1`).
        (
            "qwen3-30b-a3b-dense2",
            "2x8xa100-80gb",
            "tp=2,pp=2,mbs=1,gbs=32,sp=on,ep=8,etp=1",
        ),
        // Latent attention, shared experts, dense first blocks (DeepSeek-V3's shape).
        (
            "deepseek-v3",
            "2x8xa100-80gb",
            "tp=1,pp=2,mbs=1,gbs=16,ep=8",
        ),
    ];
    let hf_dir = root().join("crates/hetplan/tests/data/hf");
    std::fs::create_dir_all(dir.join("hf")).unwrap();
    let hf_exports = exports_for(&dir.join("hf"), "megatron", &hf, &[], |m| {
        hf_dir.join(format!("{m}.json")).display().to_string()
    });
    exports.extend(hf_exports.into_iter().map(|e| format!("hf/{e}")));
    // A broken copy the checker must refuse: one decoder layer too many.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    let args = std::fs::read_to_string(dir.join("inline-0/megatron_args.json")).unwrap();
    std::fs::write(
        broken.join("megatron_args.json"),
        args.replacen("\"24\"", "\"25\"", 1),
    )
    .unwrap();
    assert_checked(&python, "check_megatron.py", &dir, &exports);
    let _ = std::fs::remove_dir_all(&dir);
}

/// DeepSpeed exports: pipelines with ZeRO-1 and checkpointing, ZeRO-3 with offloading, and what
/// hetplan plans for DeepSpeed on a heterogeneous cluster.
#[test]
fn deepspeed_accepts_every_export() {
    let Some(python) = engines_or_skip("deepspeed_accepts_every_export") else {
        return;
    };
    let dir = scratch("engines-ds");
    let inline = [
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
    let planned = [(
        "gpt3-1.3b",
        "1x4xa100-80gb@100Gbps+2x2xv100-32gb@25Gbps",
        "64",
    )];
    let exports = exports_for(&dir, "deepspeed", &inline, &planned, str::to_string);
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
    assert_checked(&python, "check_deepspeed.py", &dir, &exports);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Plans that exercise every torchtitan key hetplan writes: interleaving with sequence
/// parallelism and op-level selective checkpointing, FSDP2 (ZeRO-3) with CPU offload, GPipe with full
/// checkpointing in FP32, an uneven 1F1B split of a model read from its config.json, a model
/// run eagerly.
const TORCHTITAN_INLINE: &[(&str, &str, &str)] = &[
    (
        "llama3-8b",
        "2x8xa100-80gb",
        "tp=2,pp=4,mbs=1,gbs=64,ckpt=ops,sp=on,tp_overlap=on,schedule=interleaved,v=2,engine=fsdp",
    ),
    (
        "llama2-7b",
        "1x8xa100-80gb",
        "tp=1,pp=1,dp=8,mbs=2,gbs=64,zero=3,offload_w=1,offload_g=1,offload_opt=1",
    ),
    (
        "llama3-8b",
        "2x8xa100-80gb",
        "tp=4,pp=2,mbs=2,gbs=64,ckpt=full,schedule=gpipe,precision=fp32",
    ),
    (
        "TINY_LLAMA",
        "1x4xa100-80gb@100Gbps+1x4xv100-32gb@100Gbps",
        "tp=2,pp=2,mbs=2,gbs=32",
    ),
    // Eager (no CompileConfig): every export above is compiled.
    (
        "llama2-7b",
        "1x8xa100-80gb",
        "dp=8,mbs=1,gbs=16,zero=3,engine=fsdp,compile=off",
    ),
    // FP8 by torchao's rowwise recipe, with TP and FSDP.
    (
        "llama3-8b",
        "2x8xh100-80gb",
        "tp=2,dp=8,mbs=1,gbs=16,zero=3,ckpt=ops,sp=on,engine=fsdp,precision=fp8-rowwise",
    ),
];

#[test]
fn torchtitan_accepts_every_export() {
    let Some(python) = engines_or_skip("torchtitan_accepts_every_export") else {
        return;
    };
    let tiny = root().join("crates/hetplan-cli/tests/fixtures/tiny-llama/config.json");
    let tiny = tiny.to_str().unwrap().to_string();
    let model = |m: &str| {
        if m == "TINY_LLAMA" {
            tiny.clone()
        } else {
            m.to_string()
        }
    };
    let dir = scratch("engines-tt");
    // Plans hetplan finds for torchtitan on heterogeneous clusters beside the inline ones.
    let planned = [
        (
            "TINY_LLAMA",
            "1x4xa100-80gb@100Gbps+1x4xv100-32gb@100Gbps",
            "64",
        ),
        (
            "llama3-8b",
            "2x8xh100-80gb@400Gbps+2x8xa100-40gb@200Gbps",
            "256",
        ),
    ];
    let exports = exports_for(&dir, "torchtitan", TORCHTITAN_INLINE, &planned, model);
    // The FP8 recipe the checker expects is the one of the plan exported.
    for (i, (_, _, spec)) in TORCHTITAN_INLINE.iter().enumerate() {
        let module =
            std::fs::read_to_string(dir.join(format!("inline-{i}/hetplan_job.py"))).unwrap();
        let recipe = if spec.contains("precision=fp8-rowwise") {
            "FP8_RECIPE = \"rowwise\"\n"
        } else {
            "FP8_RECIPE = None\n"
        };
        assert!(module.contains(recipe), "inline-{i} ({spec}): no {recipe}");
    }
    // A broken copy the checker must refuse: one block more than the parts name.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    let module = std::fs::read_to_string(dir.join("inline-0/hetplan_job.py")).unwrap();
    assert!(module.contains("N_LAYERS = 32\n"));
    std::fs::write(
        broken.join("hetplan_job.py"),
        module.replacen("N_LAYERS = 32\n", "N_LAYERS = 33\n", 1),
    )
    .unwrap();
    std::fs::copy(dir.join("inline-0/launch.sh"), broken.join("launch.sh")).unwrap();
    assert_checked(&python, "check_torchtitan.py", &dir, &exports);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real run: the export's own `launch.sh`, started once per node rank on this machine (two
/// torchrun agents on localhost, gloo), trains a tiny model with DeepSpeed's pipeline engine on
/// the plan's split, ZeRO-1 and data parallelism (`tests/engines/run_deepspeed.py`): every rank
/// must hold its stage's layers and all must agree on finite losses.
#[test]
fn deepspeed_trains_an_exported_plan_through_its_own_launch() {
    let Some(python) = engines_or_skip("deepspeed_trains_an_exported_plan_through_its_own_launch")
    else {
        return;
    };
    let dir = scratch("engines-ds-run");
    // Stage 0 on the second node, so that node ranks differ from node indices. In TF32: FP32
    // training whose launch also exports PyTorch's TF32 switch (no effect on the CPU).
    let plan = r#"{"global_batch": 8, "micro_batches": 4, "schedule": {"kind": "1f1b"},
      "precision": "tf32", "engine": "deepspeed", "stages": [
      {"layers": {"start": 0, "end": 5}, "devices": [{"node": 1, "local": 1}, {"node": 1, "local": 0}],
       "tp": 1, "dp": 2, "micro_batch_sizes": [1, 1], "zero": 1, "recompute": "none"},
      {"layers": {"start": 5, "end": 14}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
       "tp": 1, "dp": 2, "micro_batch_sizes": [1, 1], "zero": 1, "recompute": "none"}]}"#;
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    let cluster = "1x2xa100-80gb@100Gbps+1x2xv100-32gb@100Gbps";
    export_ok(&dir, "gpt3-125m", cluster, "plan.json", "deepspeed", "job");
    let job = dir.join("job");
    let script = std::fs::read_to_string(job.join("launch.sh")).unwrap();
    assert!(
        script.contains("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"),
        "{script}"
    );
    let bin = python.parent().map(Path::to_path_buf).unwrap_or_default();
    let runner = root().join("tests/engines/run_deepspeed.py");
    // One launch of both nodes on a fresh port: their stdout, or the failing node's stderr.
    let launch = || -> Result<String, String> {
        let port = listen_port();
        let start = |rank: u32| {
            Command::new("bash")
                .arg(job.join("launch.sh"))
                .arg(&runner)
                .arg("--under-torchrun")
                .arg(&job)
                .current_dir(&job)
                .env("NODE_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env(
                    "PATH",
                    format!(
                        "{}:{}",
                        bin.display(),
                        std::env::var("PATH").unwrap_or_default()
                    ),
                )
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("bash runs")
        };
        let ended = wait_all(vec![start(0), start(1)]);
        // The node that failed first, not one stopped after it; every node's stderr (a
        // flake's marker may be in either).
        let failed = (ended.iter().enumerate())
            .find(|(_, e)| !e.ok && !e.stopped)
            .or_else(|| ended.iter().enumerate().find(|(_, e)| !e.ok))
            .map(|(rank, _)| {
                let all: Vec<String> = (ended.iter().enumerate())
                    .map(|(r, e)| format!("node rank {r} stderr:\n{}", e.stderr))
                    .collect();
                format!("node rank {rank} failed first\n{}", all.join("\n"))
            });
        let results: String = ended.iter().map(|e| e.stdout.as_str()).collect();
        failed.map_or(Ok(results), Err)
    };
    // CPU gloo can abort a rank at teardown ("terminate called without an active
    // exception"), a flake of the test machine's backend, not of the export; and another
    // process can take the port between its pick and torchrun's listen: one more launch.
    let flake = |e: &str| {
        e.contains("terminate called without an active exception")
            || e.contains("EADDRINUSE")
            || e.contains("address already in use")
    };
    let results = match launch() {
        Err(e) if flake(&e) => launch(),
        r => r,
    }
    .unwrap_or_else(|e| panic!("{e}"));
    // The ranks of a node share its stdout: two lines can land on one ("...]]RESULT [3, ...").
    let results = results.replace("RESULT [", "\nRESULT [");
    assert_eq!(
        results.lines().filter(|l| l.starts_with("RESULT ")).count(),
        4,
        "{results}"
    );
    let mut judge = Command::new(&python)
        .arg(&runner)
        .arg("--judge")
        .arg(&job)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        judge
            .stdin
            .take()
            .unwrap()
            .write_all(results.as_bytes())
            .unwrap();
    }
    let out = judge.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
