//! `hetplan export`: a plan as a job an engine starts (issue 11).

use crate::diag::{io_reason, CliError, Result};
use crate::{emit, emit_json, load_inputs, with_compute, PlanInputs};
use hetplan::export::{self, ExportError, Job, Target};
use hetplan::units::Seconds;

/// `--to`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TargetArg {
    /// Megatron-LM (`pretrain_gpt.py`, Megatron-Core 0.13 or later).
    Megatron,
    /// DeepSpeed (`ds_config.json` and a `PipelineModule` with the plan's layer split).
    Deepspeed,
    /// torchtitan 0.3 (`python -m torchtitan.train` with a config module).
    Torchtitan,
    /// Sailor's Megatron-DeepSpeed (`dist_config.json`: TP 1, 2 or 4 per stage and replica).
    Sailor,
    /// Mist's executor (a per-stage strategy YAML for `benchmark_one_case.py`).
    Mist,
    /// FlashFlex / HexiScale (`llama_train.py`: pipelines of different shapes, LLaMA only).
    Flashflex,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Target {
        match t {
            TargetArg::Megatron => Target::Megatron,
            TargetArg::Deepspeed => Target::Deepspeed,
            TargetArg::Torchtitan => Target::Torchtitan,
            TargetArg::Sailor => Target::Sailor,
            TargetArg::Mist => Target::Mist,
            TargetArg::Flashflex => Target::Flashflex,
        }
    }
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub inputs: PlanInputs,
    /// The engine to run the plan on.
    #[arg(long, value_enum)]
    pub to: TargetArg,
    /// Write the files into this directory (created if needed). Without it they are printed
    /// to stdout, each after a `==> NAME <==` line.
    #[arg(long, value_name = "DIR")]
    pub out: Option<String>,
    /// When the engine cannot run the plan, how long hetplan may search for the best plan it
    /// can run (`none`: do not search).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub replan_time_limit: String,
    /// Print the export (files and rank layout) as JSON instead of the files.
    #[arg(long)]
    pub json: bool,
}

pub fn export(a: ExportArgs) -> Result<()> {
    let l = load_inputs(&a.inputs)?;
    let target: Target = a.to.into();
    let job = Job {
        model: &l.model,
        cluster: &l.cluster,
        plan: &l.plan,
        seq_len: l.seq_len,
    };
    let out = match export::export(target, job) {
        Ok(out) => out,
        Err(ExportError::Unsupported { target, reasons }) => {
            let help = replan_help(&a, &l, target)?;
            return Err(CliError::Refused {
                reasons: reasons
                    .into_iter()
                    .map(|r| format!("{} cannot run this plan: {r}", target.name()))
                    .collect(),
                help,
            });
        }
    };
    if a.json {
        return emit_json(&out);
    }
    match &a.out {
        None => {
            let mut s = String::new();
            for f in &out.files {
                s.push_str(&format!("==> {} <==\n{}", f.path, f.contents));
                if !f.contents.ends_with('\n') {
                    s.push('\n');
                }
            }
            emit(&s)
        }
        Some(dir) => {
            let dir = std::path::Path::new(dir);
            std::fs::create_dir_all(dir).map_err(|e| {
                CliError::Failure(format!(
                    "cannot create {}: {}",
                    dir.display(),
                    io_reason(&e)
                ))
            })?;
            for f in &out.files {
                let path = dir.join(&f.path);
                write_file(&path, &f.contents, f.executable)?;
                eprintln!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

fn write_file(path: &std::path::Path, contents: &str, executable: bool) -> Result<()> {
    let failed = |e: std::io::Error| {
        CliError::Failure(format!(
            "cannot write {}: {}",
            path.display(),
            io_reason(&e)
        ))
    };
    std::fs::write(path, contents).map_err(failed)?;
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    #[cfg(not(unix))]
    let _ = executable;
    Ok(())
}

/// The command that plans for the engine, with how much slower its plan is than the user's.
/// For a runtime hetplan's planner cannot be restricted to (Sailor, Mist, FlashFlex: no `--engine`), the
/// plain `hetplan plan` command, whose plan may be one the runtime runs.
fn replan_help(a: &ExportArgs, l: &crate::Loaded, target: Target) -> Result<Option<String>> {
    if !export::model_reasons(target, &l.model).is_empty() {
        return Ok(Some(format!(
            "no plan makes {} run {}: the model itself is the reason",
            target.name(),
            l.model.name
        )));
    }
    let i = &a.inputs;
    let engine = target
        .runtime()
        .map(|r| format!(" --engine {}", r.name()))
        .unwrap_or_default();
    let mut cmd = format!(
        "hetplan plan{engine} --model {} --cluster {} --gbs {} --seq-len {}",
        export::shell_quote(&i.model),
        export::shell_quote(&i.cluster),
        l.plan.global_batch,
        l.seq_len
    );
    if let Some(p) = &i.profile {
        cmd.push_str(&format!(" --profile {}", export::shell_quote(p)));
    }
    if l.plan.precision != hetplan::plan::Precision::default() {
        cmd.push_str(&format!(" --precision {}", l.plan.precision.name()));
    }
    let Some(runtime) = target.runtime() else {
        // No search restricted to this runtime: say so, and how to try another plan.
        return Ok(Some(format!(
            "hetplan cannot restrict its search to {} (no --engine {}); export another plan, \
             e.g. one from: {cmd}",
            target.name(),
            target.name()
        )));
    };
    if !target.precisions().contains(&l.plan.precision) {
        // The engine has no such precision: plan for it at its default (BF16) instead; the
        // times would not compare.
        let default = format!(" --precision {}", l.plan.precision.name());
        let bf16 = cmd.replace(&default, "");
        // FP8 that the engine runs by another recipe (torchtitan: rowwise only): that one.
        let other_fp8 = (target.precisions().iter())
            .find(|p| l.plan.precision.is_fp8() && p.is_fp8() && runtime.trains_in(**p));
        let (name, cmd) = match other_fp8 {
            Some(p) => (
                p.name().to_uppercase(),
                format!("{bf16} --precision {}", p.name()),
            ),
            None => ("BF16".to_string(), bf16),
        };
        return Ok(Some(format!(
            "{} does not train in {}; plan for it in {name}: {cmd}",
            runtime.name(),
            l.plan.precision.name().to_uppercase()
        )));
    }
    let t = a.replan_time_limit.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(Some(format!("plan for {}: {cmd}", runtime.name())));
    }
    let time: Seconds = t
        .parse()
        .map_err(|e| CliError::Usage(format!("--replan-time-limit {t}: {e}")))?;
    let found = with_compute(i, l, |_, compute, est, _| {
        let best = crate::planning::hetplan_best(
            &l.model,
            &l.cluster,
            &l.plan,
            l.seq_len,
            compute,
            Some(runtime),
            time,
        );
        (best, est.iteration_time_s)
    });
    Ok(Some(match found {
        (Some(best), mine) => format!(
            "hetplan's best plan that {} runs ({:.3} s per iteration, {:.2}× this plan's {:.3} \
             s, found in {}): {cmd}",
            runtime.name(),
            best.estimate.iteration_time_s,
            best.estimate.iteration_time_s / mine,
            mine,
            time
        ),
        (None, _) => format!(
            "no plan that {} runs fits, as far as hetplan searched in {time}; to search longer: \
             {cmd} --time-limit 2min",
            runtime.name()
        ),
    }))
}
