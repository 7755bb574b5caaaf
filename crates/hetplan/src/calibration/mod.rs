//! Checking the cost model against published end-to-end measurements.
//!
//! The data format is the CSV of `data/calibration/` (header lines start with `#`; columns
//! `gpu,model,seq,gpus,mfu,hfu,mbs,grad_accum,gbs,tok_s_gpu,ckpt,nparams`). Each row is turned
//! into the plan the measurement ran — PyTorch FSDP full sharding (ZeRO-3) over all GPUs, 8 per
//! node (a last node holds the remainder when `gpus` is not a multiple of 8), micro-batch `mbs`,
//! `grad_accum` micro-batches, full checkpointing when `ckpt` — checked with
//! `plan::validate::validate`, and estimated with the analytic model.

pub mod published;
pub mod sailor;

use crate::cluster::spec::uniform_cluster;
use crate::cluster::{Cluster, GpuId};
use crate::cost::{self, Analytic, Workload};
use crate::error::InputError;
use crate::model::catalog::catalog_model;
use crate::model::LIMITS;
use crate::names;
use crate::names::did_you_mean;
use crate::parse::{self, Num, MAX_BATCH};
use crate::plan::{
    CollectiveDtypes, Engine, LayerRange, Plan, Precision, Recompute, Schedule, Stage,
};
use crate::units::BytesPerSec;
use serde::Serialize;

/// The calibration data shipped with hetplan (llm-foundry's MPT benchmarks on A100-80GB).
pub const BUILTIN_CSV: &str = include_str!("../../../../data/calibration/a100_80gb_fsdp_mpt.csv");

/// One measured row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub gpu: String,
    pub model: String,
    pub seq: u64,
    pub gpus: u32,
    pub mbs: u64,
    pub grad_accum: u64,
    pub gbs: u64,
    pub tokens_per_s_per_gpu: f64,
    pub ckpt: bool,
    /// `amp_bf16` (Composer FSDP `DEFAULT`: fp32 parameter all-gathers, bf16 gradient
    /// reduce-scatters) or `bf16` (`PURE`); empty when the data has no such column (`bf16`).
    pub precision: String,
    /// Network bandwidth of each node (optional column `inter_node`, e.g. `3200 Gbps`; default
    /// 1600 Gbps, the calibration data's RoCE fabric).
    pub inter_node: BytesPerSec,
    /// 1-based line in the CSV.
    pub line: usize,
}

/// A row with its estimate.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub row: Row,
    pub estimated_tokens_per_s_per_gpu: f64,
    /// (estimate − measured) / measured.
    pub error: f64,
    pub estimated_mfu: f64,
    pub fits: bool,
    /// Estimated peak memory over capacity.
    pub memory_fraction: f64,
}

/// Summary of a check.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub rows: Vec<Checked>,
    pub median_abs_error: f64,
    pub worst_abs_error: f64,
}

/// Largest GPU count of a row: the cluster, the plan and the cost report list every GPU.
pub const MAX_GPUS: u64 = 100_000;

/// Parses the CSV. Every cell is checked where it is read: whole numbers within bounds
/// (`seq` ≤ `model::LIMITS.seq`, `gpus` ≤ [`MAX_GPUS`], `mbs` and `grad_accum` ≤
/// `parse::MAX_BATCH`), `gbs` = `mbs`·`grad_accum`·`gpus`, a positive finite `tok_s_gpu`,
/// known GPU and model names; errors carry the line and column of the cell.
pub fn parse_csv(src: &str) -> Result<Vec<Row>, InputError> {
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let cells = split_cells(line);
        let Some(h) = &header else {
            // The first line that is not a comment: the header, where a missing column is
            // reported.
            let names: Vec<String> = cells.iter().map(|(c, _)| c.to_string()).collect();
            if let Some(name) = REQUIRED.iter().find(|r| !names.iter().any(|c| c == *r)) {
                return Err(
                    InputError::new(format!("the header has no column `{name}`"))
                        .at(line_no, 1)
                        .field(*name)
                        .hint(Some(format!(
                            "the header needs the columns {}",
                            REQUIRED.join(",")
                        ))),
                );
            }
            header = Some(names);
            continue;
        };
        let cell = Cells {
            header: h,
            cells: &cells,
            line: line_no,
        };
        let seq = cell.whole("seq", 1, LIMITS.seq)?;
        let gpus = cell.whole("gpus", 1, MAX_GPUS)? as u32;
        let mbs = cell.whole("mbs", 1, MAX_BATCH)?;
        let grad_accum = cell.whole("grad_accum", 1, MAX_BATCH)?;
        let gbs = cell.whole("gbs", 1, u64::MAX)?;
        let (gpu_text, gpu_col) = cell.get("gpu")?;
        crate::gpu::lookup(gpu_text).map_err(|e| {
            InputError::new(format!("unknown GPU `{gpu_text}`"))
                .at(line_no, gpu_col)
                .field("gpu")
                .hint(did_you_mean(e.hint))
        })?;
        let (model, model_col) = cell.get("model")?;
        catalog_model(&format!("mpt-{model}")).map_err(|_| {
            let sizes: Vec<&str> = crate::model::catalog::catalog_names()
                .into_iter()
                .filter_map(|c| c.name.strip_prefix("mpt-"))
                .collect();
            InputError::new(format!(
                "unknown MPT model `{model}`; the built-in ones are {}",
                sizes.join(", ")
            ))
            .at(line_no, model_col)
            .field("model")
            .hint(did_you_mean(names::nearest(model, sizes.iter().copied())))
        })?;
        let (tok, tok_col) = cell.get("tok_s_gpu")?;
        let tokens_per_s_per_gpu = match tok.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => v,
            _ => {
                return Err(InputError::new(format!(
                    "expected a positive number of tokens per second, found `{tok}`"
                ))
                .at(line_no, tok_col)
                .field("tok_s_gpu"))
            }
        };
        let (ckpt_text, ckpt_col) = cell.get("ckpt")?;
        let ckpt = match ckpt_text {
            "True" | "true" | "1" => true,
            "False" | "false" | "0" => false,
            other => {
                return Err(
                    InputError::new(format!("expected True or False, found `{other}`"))
                        .at(line_no, ckpt_col)
                        .field("ckpt"),
                )
            }
        };
        let inter_node = if h.iter().any(|c| c == "inter_node") {
            let (v, col) = cell.get("inter_node")?;
            v.parse::<BytesPerSec>().map_err(|e| {
                InputError::new(e.to_string())
                    .at(line_no, col)
                    .field("inter_node")
            })?
        } else {
            BytesPerSec::gbps(1600.0)
        };
        let precision = if h.iter().any(|c| c == "precision") {
            let (v, col) = cell.get("precision")?;
            if !PRECISIONS.contains(&v) {
                return Err(
                    InputError::new(format!("expected `amp_bf16` or `bf16`, found `{v}`"))
                        .at(line_no, col)
                        .field("precision")
                        .hint(did_you_mean(names::nearest(v, PRECISIONS.iter().copied()))),
                );
            }
            v.to_string()
        } else {
            String::new()
        };
        let row = Row {
            gpu: gpu_text.to_string(),
            model: model.to_string(),
            seq,
            gpus,
            mbs,
            grad_accum,
            gbs,
            tokens_per_s_per_gpu,
            ckpt,
            precision,
            inter_node,
            line: line_no,
        };
        if let Some((field, message)) = row_problem(&row) {
            let col = cell.get(field).map_or(1, |(_, c)| c);
            return Err(InputError::new(message).at(line_no, col).field(field));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The columns every calibration CSV has (`inter_node` and `precision` are optional).
const REQUIRED: &[&str] = &[
    "gpu",
    "model",
    "seq",
    "gpus",
    "mbs",
    "grad_accum",
    "gbs",
    "tok_s_gpu",
    "ckpt",
];

/// The `precision` values (see [`Row::precision`]); empty: `bf16`.
const PRECISIONS: &[&str] = &["amp_bf16", "bf16", ""];

/// The cells of a line with the 1-based column (in characters) where each starts, trimmed.
fn split_cells(line: &str) -> Vec<(&str, usize)> {
    let mut out = Vec::new();
    let mut col = 1;
    for raw in line.split(',') {
        let lead = raw.chars().take_while(|c| c.is_whitespace()).count();
        out.push((raw.trim(), col + lead));
        col += raw.chars().count() + 1;
    }
    out
}

/// One data row's cells, by header name.
struct Cells<'a> {
    header: &'a [String],
    cells: &'a [(&'a str, usize)],
    line: usize,
}

impl<'a> Cells<'a> {
    /// The cell of column `name` and its column number.
    fn get(&self, name: &str) -> Result<(&'a str, usize), InputError> {
        let idx = self.header.iter().position(|c| c == name).ok_or_else(|| {
            InputError::new(format!("the header has no column `{name}`")).field(name)
        })?;
        self.cells.get(idx).copied().ok_or_else(|| {
            let end = self
                .cells
                .last()
                .map_or(1, |(c, col)| col + c.chars().count());
            InputError::new(format!(
                "the row has {} cells, no value for `{name}` (column {} of the header)",
                self.cells.len(),
                idx + 1
            ))
            .at(self.line, end)
            .field(name)
        })
    }

    /// A whole number in `min..=max` (integral floats such as `8.0` accepted).
    fn whole(&self, name: &str, min: u64, max: u64) -> Result<u64, InputError> {
        let (v, col) = self.get(name)?;
        parse::whole(Num::Text(v), min, max).map_err(|e| {
            InputError::new(e.to_string())
                .at(self.line, col)
                .field(name)
        })
    }
}

/// What is wrong with a row's values, if anything: (column, message). Bounds as
/// [`parse_csv`] checks them, and `gbs` = `mbs`·`grad_accum`·`gpus`. For rows built by hand.
fn row_problem(row: &Row) -> Option<(&'static str, String)> {
    let bounded = [
        ("seq", row.seq, LIMITS.seq),
        ("gpus", row.gpus as u64, MAX_GPUS),
        ("mbs", row.mbs, MAX_BATCH),
        ("grad_accum", row.grad_accum, MAX_BATCH),
    ];
    for (field, v, max) in bounded {
        if v < 1 || v > max {
            return Some((field, format!("must lie in 1..={max}, found {v}")));
        }
    }
    if !(row.tokens_per_s_per_gpu.is_finite() && row.tokens_per_s_per_gpu > 0.0) {
        return Some((
            "tok_s_gpu",
            format!(
                "expected a positive number of tokens per second, found {}",
                row.tokens_per_s_per_gpu
            ),
        ));
    }
    if !(row.inter_node.is_finite() && row.inter_node.get() > 0.0) {
        return Some(("inter_node", "must be a positive bandwidth".to_string()));
    }
    let samples = (row.mbs as u128) * (row.grad_accum as u128) * (row.gpus as u128);
    if samples != row.gbs as u128 {
        return Some((
            "gbs",
            format!(
                "must equal mbs·grad_accum·gpus = {}·{}·{} = {samples}, found {}",
                row.mbs, row.grad_accum, row.gpus, row.gbs
            ),
        ));
    }
    None
}

/// The cluster of the measurements: nodes of 8 GPUs (llm-foundry's benchmark set-up as the
/// data's header states it), the last one holding the remainder when `gpus` is not a multiple
/// of 8 (`gpus = 12`: a node of 8 and a node of 4), joined by `inter_node`.
fn cluster_for(row: &Row, inter_node: BytesPerSec) -> Result<Cluster, InputError> {
    let gpu = crate::gpu::lookup(&row.gpu).map_err(|e| {
        InputError::new(format!("unknown GPU `{}`", row.gpu))
            .at(row.line, 1)
            .field("gpu")
            .hint(did_you_mean(e.hint))
    })?;
    if row.gpus == 0 {
        return Err(InputError::new("`gpus` = 0: a run needs at least one GPU")
            .at(row.line, 1)
            .field("gpus"));
    }
    let (full, rest) = (row.gpus / GPUS_PER_NODE, row.gpus % GPUS_PER_NODE);
    let mut cluster = if full == 0 {
        uniform_cluster(&gpu, 1, rest, inter_node)
    } else {
        uniform_cluster(&gpu, full, GPUS_PER_NODE, inter_node)
    };
    if full > 0 && rest > 0 {
        let mut node = cluster.nodes[0].clone();
        node.num_gpus = rest;
        cluster.nodes.push(node);
        cluster.name = format!("{}+1x{rest}x{}", cluster.name, gpu.name);
    }
    Ok(cluster)
}

/// GPUs per node in the calibration data (llm-foundry's benchmark nodes).
const GPUS_PER_NODE: u32 = 8;

/// The FSDP plan of a row.
pub fn plan_for(row: &Row, cluster: &Cluster, layers: usize) -> Plan {
    let devices: Vec<GpuId> = cluster.gpus();
    let replicas = (row.gpus as usize).min(devices.len());
    Plan {
        // Saturating: `check` has bounded the row (`row_problem`); a hand-made row that
        // overflows fails `validate` instead.
        global_batch: row
            .mbs
            .saturating_mul(row.grad_accum)
            .saturating_mul(row.gpus as u64),
        micro_batches: row.grad_accum,
        schedule: Schedule::OneFOneB,
        engine: Engine::Fsdp,
        precision: Precision::Bf16,
        moe_capacity_factor: None,
        cp_comm: Default::default(),
        tp_comm_overlap: false,
        compile: Default::default(),
        collective_dtypes: if row.precision == "amp_bf16" {
            CollectiveDtypes {
                params: Some(Precision::Fp32),
                gradients: Some(Precision::Bf16),
            }
        } else {
            CollectiveDtypes::default()
        },
        made_for: None,
        stages: vec![Stage {
            etp: None,
            ep: 1,
            cp: 1,
            layers: LayerRange {
                start: 0,
                end: layers,
            },
            devices,
            tp: 1,
            dp: row.gpus,
            // One per replica; never more than the cluster has GPUs (a mismatch fails validate).
            micro_batch_sizes: vec![row.mbs; replicas],
            zero: 3,
            recompute: if row.ckpt {
                Recompute::Full
            } else {
                Recompute::None
            },
            offload: Default::default(),
            sequence_parallel: false,
            replica_samples: Vec::new(),
            replica_tp: Vec::new(),
        }],
    }
}

/// Estimates every row (8 GPUs per node, the row's network bandwidth). Rows are checked
/// again (they may be built by hand, or edited after [`parse_csv`]); errors carry the row's
/// line.
pub fn check(rows: &[Row]) -> Result<Report, InputError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let at_row = |e: InputError| InputError {
            line: Some(row.line),
            column: Some(1),
            ..e
        };
        if let Some((field, message)) = row_problem(row) {
            return Err(at_row(InputError::new(message).field(field)));
        }
        let base = catalog_model(&format!("mpt-{}", row.model)).map_err(at_row)?;
        // llm-foundry sets max_seq_len to the benchmark's sequence length (learned positions).
        let model = match &base.transformer {
            Some(cfg) => {
                let mut c = cfg.clone();
                c.max_seq_len = row.seq;
                c.check_limits().map_err(|e| at_row(e.field("seq")))?;
                c.build()
            }
            None => base,
        };
        let cluster = cluster_for(row, row.inter_node)?;
        let plan = plan_for(row, &cluster, model.layers.len());
        let plan = crate::plan::ValidPlan::new(plan, &model, &cluster).map_err(|errs| {
            let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            at_row(InputError::new(format!(
                "the FSDP plan of this row is not valid: {}",
                all.join("; ")
            )))
        })?;
        let est = cost::estimate(
            Workload {
                model: &model,
                cluster: &cluster,
                seq_len: row.seq,
            },
            &plan,
            &Analytic,
        );
        let e = est.tokens_per_s_per_gpu;
        out.push(Checked {
            row: row.clone(),
            estimated_tokens_per_s_per_gpu: e,
            error: (e - row.tokens_per_s_per_gpu) / row.tokens_per_s_per_gpu,
            estimated_mfu: est.mfu,
            fits: est.fits,
            memory_fraction: est
                .per_gpu
                .iter()
                .map(|g| g.peak_memory_bytes / g.capacity_bytes)
                .fold(0.0, f64::max),
        });
    }
    let mut abs: Vec<f64> = out.iter().map(|c| c.error.abs()).collect();
    abs.sort_by(|a, b| a.total_cmp(b));
    let median = if abs.is_empty() {
        0.0
    } else if abs.len() % 2 == 1 {
        abs[abs.len() / 2]
    } else {
        (abs[abs.len() / 2 - 1] + abs[abs.len() / 2]) / 2.0
    };
    Ok(Report {
        rows: out,
        median_abs_error: median,
        worst_abs_error: abs.last().copied().unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The held-out tables (`data/validation/`), never used to set a constant.
    const HELD_OUT: &[(&str, &str)] = &[
        (
            "llm_foundry_a100_80gb_extra.csv",
            include_str!("../../../../data/validation/llm_foundry_a100_80gb_extra.csv"),
        ),
        (
            "llm_foundry_a100_40gb.csv",
            include_str!("../../../../data/validation/llm_foundry_a100_40gb.csv"),
        ),
        (
            "llm_foundry_h100_80gb.csv",
            include_str!("../../../../data/validation/llm_foundry_h100_80gb.csv"),
        ),
    ];

    /// Generalisation to other GPUs and sizes, on data no constant was set from. Bounds sit just
    /// above today's medians (docs/validation.md) so that a regression fails. The H100 rows
    /// were +6…+20% whether checkpointed or not once a recomputation stopped before each
    /// block's closing product (`LayerShape::early_stop`): 10.8%, from 9.5% when the
    /// checkpointed ones were charged a whole forward. FSDP's per-step host time, set on
    /// torchtitan's rows (`FSDP_OPTIMIZER_HOST_S_PER_LAYER`), then brought the three sets
    /// (A100-80GB, A100-40GB, H100) to 2.9%, 3.4% and 6.3%, from 5.4%, 4.0% and 10.7%.
    #[test]
    fn held_out_accuracy() {
        for ((name, src), bound) in HELD_OUT.iter().zip([0.035, 0.04, 0.07]) {
            let r = check(&parse_csv(src).unwrap()).unwrap();
            assert!(
                r.median_abs_error <= bound,
                "{name}: median {:.3}",
                r.median_abs_error
            );
        }
    }

    #[test]
    fn builtin_data_parses() {
        let rows = parse_csv(BUILTIN_CSV).unwrap();
        assert_eq!(rows.len(), 39);
        assert_eq!(rows[0].model, "70b");
        assert!(rows[0].ckpt);
    }

    const HEADER: &str = "# comment\n# another\ngpu,model,seq,gpus,mfu,hfu,mbs,grad_accum,gbs,tok_s_gpu,ckpt,nparams,precision\n";

    /// A one-row CSV (line 4) from a valid row with `cells` replaced, by column name.
    fn csv(cells: &[(&str, &str)]) -> String {
        let names = [
            "gpu",
            "model",
            "seq",
            "gpus",
            "mfu",
            "hfu",
            "mbs",
            "grad_accum",
            "gbs",
            "tok_s_gpu",
            "ckpt",
            "nparams",
            "precision",
        ];
        let mut row = [
            "a100_80gb",
            "7b",
            "2048",
            "8",
            "50",
            "60",
            "2",
            "4",
            "64",
            "3000",
            "True",
            "1",
            "bf16",
        ];
        for (k, v) in cells {
            row[names.iter().position(|n| n == k).unwrap()] = v;
        }
        format!("{HEADER}{}\n", row.join(","))
    }

    fn csv_err(cells: &[(&str, &str)]) -> InputError {
        parse_csv(&csv(cells)).unwrap_err()
    }

    /// Regressions: `gpus=0` divided by zero, `mbs=0` estimated a zero-batch plan, NaN and
    /// negative values went through `as` casts, and `gbs` was never checked.
    #[test]
    fn bad_cells_are_located_errors() {
        assert_eq!(parse_csv(&csv(&[])).unwrap().len(), 1);
        for (cells, field) in [
            (&[("gpus", "0"), ("gbs", "0")][..], "gpus"),
            (&[("mbs", "0"), ("gbs", "0")][..], "mbs"),
            (&[("gpus", "NaN")][..], "gpus"),
            (&[("gpus", "-8")][..], "gpus"),
            (&[("gpus", "8.5")][..], "gpus"),
            (&[("gpus", "1e300")][..], "gpus"),
            (&[("seq", "18446744073709551616")][..], "seq"),
            (&[("seq", "inf")][..], "seq"),
            (&[("grad_accum", "")][..], "grad_accum"),
            (
                &[("mbs", "1000000000"), ("grad_accum", "1000000000")][..],
                "gbs",
            ),
            (&[("gbs", "65")][..], "gbs"),
            (&[("tok_s_gpu", "0")][..], "tok_s_gpu"),
            (&[("tok_s_gpu", "NaN")][..], "tok_s_gpu"),
            (&[("ckpt", "maybe")][..], "ckpt"),
            (&[("precision", "fp8")][..], "precision"),
            (&[("gpu", "a100_80gbb")][..], "gpu"),
            (&[("model", "7c")][..], "model"),
        ] {
            let e = csv_err(cells);
            assert_eq!(e.field.as_deref(), Some(field), "{cells:?}: {e}");
            assert_eq!(e.line, Some(4), "{cells:?}: {e}");
        }
        // The column is the cell's: gbs is the 9th cell.
        let e = csv_err(&[("gbs", "65")]);
        let col = csv(&[("gbs", "65")])
            .lines()
            .nth(3)
            .unwrap()
            .find(",65,")
            .unwrap()
            + 2;
        assert_eq!(e.column, Some(col));
        assert!(e.message.contains("2·4·8 = 64"), "{e}");
        let e = csv_err(&[("gpu", "a100_80gbb")]);
        assert!(e.hint.unwrap().starts_with("did you mean"));
        // A short row names the missing cell.
        let e = parse_csv(&format!("{HEADER}a100_80gb,7b,2048\n")).unwrap_err();
        assert_eq!((e.field.as_deref(), e.line), (Some("gpus"), Some(4)));
    }

    /// Regression: a missing header column was reported at 1:1 even after comment lines.
    #[test]
    fn a_missing_column_is_reported_on_the_header_line() {
        let src = csv(&[]).replace(",grad_accum,", ",accum,");
        let e = parse_csv(&src).unwrap_err();
        assert_eq!(e.line, Some(3));
        assert_eq!(e.field.as_deref(), Some("grad_accum"));
    }

    /// Regression: `gpus = 12` built a 2×8 cluster while the plan listed 16 devices with
    /// dp = 12. Now one node of 8 and one of 4, and the plan uses exactly the 12.
    #[test]
    fn gpus_not_a_multiple_of_8_use_a_remainder_node() {
        let rows = parse_csv(&csv(&[("gpus", "12"), ("gbs", "96")])).unwrap();
        let c = cluster_for(&rows[0], rows[0].inter_node).unwrap();
        let sizes: Vec<u32> = c.nodes.iter().map(|n| n.num_gpus).collect();
        assert_eq!(sizes, vec![8, 4]);
        let model = catalog_model("mpt-7b").unwrap();
        let plan = plan_for(&rows[0], &c, model.layers.len());
        assert_eq!(plan.devices().len(), 12);
        assert_eq!(plan.stages[0].dp, 12);
        assert_eq!(crate::plan::validate::validate(&plan, &model, &c), Ok(()));
        let r = check(&rows).unwrap();
        assert!(r.rows[0].estimated_tokens_per_s_per_gpu > 0.0);
        // Fewer than a node, and exactly one node, as before.
        for (g, want) in [
            (4, vec![4]),
            (8, vec![8]),
            (16, vec![8, 8]),
            (17, vec![8, 8, 1]),
        ] {
            let mut row = rows[0].clone();
            row.gpus = g;
            let c = cluster_for(&row, row.inter_node).unwrap();
            let sizes: Vec<u32> = c.nodes.iter().map(|n| n.num_gpus).collect();
            assert_eq!(sizes, want, "{g}");
        }
    }

    /// Rows built by hand are checked again by `check`: errors, not panics.
    #[test]
    fn check_rejects_bad_rows_built_by_hand() {
        let good = parse_csv(&csv(&[])).unwrap().remove(0);
        for f in [
            (|r: &mut Row| r.gpus = 0) as fn(&mut Row),
            |r| r.mbs = 0,
            |r| r.mbs = u64::MAX,
            |r| r.seq = u64::MAX,
            |r| r.gbs = 7,
            |r| r.tokens_per_s_per_gpu = f64::NAN,
            |r| r.gpus = u32::MAX,
            |r| r.gpu = "nope".into(),
            |r| r.model = "nope".into(),
        ] {
            let mut row = good.clone();
            f(&mut row);
            let e = check(&[row]).unwrap_err();
            assert_eq!(e.line, Some(4), "{e}");
        }
    }

    /// Rows the model knowingly misses, with the reason (docs/validation.md): MPT-30B at
    /// sequence 8192 runs at 0.70× the tokens/s of the same model at 4096 while its FLOPs per
    /// token grow by only 8%; no mechanism in the model (or that we know of) explains it.
    const KNOWN_OUTLIERS: &[(&str, u64)] = &[("30b", 8192)];

    /// The accuracy gate of issue 2: median |error| ≤ 10% over all rows, and no row beyond 25%
    /// except the documented outliers, which must stay below 35%.
    #[test]
    fn calibration_gate() {
        let rows = parse_csv(BUILTIN_CSV).unwrap();
        let r = check(&rows).unwrap();
        assert!(
            r.median_abs_error <= 0.10,
            "median {:.3}",
            r.median_abs_error
        );
        for c in &r.rows {
            let outlier = KNOWN_OUTLIERS.contains(&(c.row.model.as_str(), c.row.seq));
            let limit = if outlier { 0.35 } else { 0.25 };
            assert!(
                c.error.abs() <= limit,
                "{} seq {}: error {:.3}",
                c.row.model,
                c.row.seq,
                c.error
            );
        }
        assert!(
            r.rows.iter().all(|c| c.fits),
            "every measured run fit in memory"
        );
    }
}
