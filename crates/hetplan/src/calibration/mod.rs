//! Checking the cost model against published end-to-end measurements.
//!
//! The data format is the CSV of `data/calibration/` (header lines start with `#`; columns
//! `gpu,model,seq,gpus,mfu,hfu,mbs,grad_accum,gbs,tok_s_gpu,ckpt,nparams`). Each row is turned
//! into the plan the measurement ran — PyTorch FSDP full sharding (ZeRO-3) over all GPUs, 8 per
//! node, micro-batch `mbs`, `grad_accum` micro-batches, full checkpointing when `ckpt` — and
//! estimated with the analytic model.

pub mod sailor;

use crate::cluster::spec::uniform_cluster;
use crate::cluster::{Cluster, GpuId};
use crate::cost::{self, Analytic, Workload};
use crate::error::InputError;
use crate::model::catalog::catalog_model;
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

/// Parses the CSV.
pub fn parse_csv(src: &str) -> Result<Vec<Row>, InputError> {
    let mut header: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let cells: Vec<&str> = t.split(',').map(|c| c.trim()).collect();
        let Some(h) = &header else {
            header = Some(cells.iter().map(|c| c.to_string()).collect());
            continue;
        };
        let col = |name: &str| -> Result<&str, InputError> {
            let idx = h.iter().position(|c| c == name).ok_or_else(|| {
                InputError::new(format!("the header has no column `{name}`")).at(1, 1)
            })?;
            cells.get(idx).copied().ok_or_else(|| {
                InputError::new(format!("row has no value for `{name}`")).at(line_no, 1)
            })
        };
        let num = |name: &str| -> Result<f64, InputError> {
            let v = col(name)?;
            v.parse::<f64>().map_err(|_| {
                InputError::new(format!("`{name}` = `{v}` is not a number"))
                    .at(line_no, 1)
                    .field(name)
            })
        };
        rows.push(Row {
            gpu: col("gpu")?.to_string(),
            model: col("model")?.to_string(),
            seq: num("seq")? as u64,
            gpus: num("gpus")? as u32,
            mbs: num("mbs")? as u64,
            grad_accum: num("grad_accum")? as u64,
            gbs: num("gbs")? as u64,
            tokens_per_s_per_gpu: num("tok_s_gpu")?,
            ckpt: matches!(col("ckpt")?, "True" | "true" | "1"),
            inter_node: if h.iter().any(|c| c == "inter_node") {
                let v = col("inter_node")?;
                v.parse::<BytesPerSec>().map_err(|e| {
                    InputError::new(e.to_string())
                        .at(line_no, 1)
                        .field("inter_node")
                })?
            } else {
                BytesPerSec::gbps(1600.0)
            },
            precision: if h.iter().any(|c| c == "precision") {
                col("precision")?.to_string()
            } else {
                String::new()
            },
            line: line_no,
        });
    }
    Ok(rows)
}

/// The cluster of the measurements: nodes of 8 GPUs (llm-foundry's benchmark set-up as the
/// data's header states it) joined by `inter_node`.
fn cluster_for(row: &Row, inter_node: BytesPerSec) -> Result<Cluster, InputError> {
    let gpu = crate::gpu::lookup(&row.gpu).map_err(|e| {
        InputError::new(e.to_string())
            .at(row.line, 1)
            .field("gpu")
            .hint(e.hint.clone())
    })?;
    let per_node = row.gpus.min(8);
    let nodes = row.gpus.div_ceil(per_node);
    Ok(uniform_cluster(&gpu, nodes, per_node, inter_node))
}

/// The FSDP plan of a row.
pub fn plan_for(row: &Row, cluster: &Cluster, layers: usize) -> Plan {
    let devices: Vec<GpuId> = cluster.gpus();
    Plan {
        global_batch: row.mbs * row.grad_accum * row.gpus as u64,
        micro_batches: row.grad_accum,
        schedule: Schedule::OneFOneB,
        engine: Engine::Fsdp,
        precision: Precision::Bf16,
        collective_dtypes: if row.precision == "amp_bf16" {
            CollectiveDtypes {
                params: Some(Precision::Fp32),
                gradients: Some(Precision::Bf16),
            }
        } else {
            CollectiveDtypes::default()
        },
        stages: vec![Stage {
            layers: LayerRange {
                start: 0,
                end: layers,
            },
            devices,
            tp: 1,
            dp: row.gpus,
            micro_batch_sizes: vec![row.mbs; row.gpus as usize],
            zero: 3,
            recompute: if row.ckpt {
                Recompute::Full
            } else {
                Recompute::None
            },
            offload: Default::default(),
            sequence_parallel: false,
        }],
    }
}

/// Estimates every row (8 GPUs per node, the row's network bandwidth).
pub fn check(rows: &[Row]) -> Result<Report, InputError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let base = catalog_model(&format!("mpt-{}", row.model)).map_err(|e| InputError {
            line: Some(row.line),
            column: Some(1),
            ..e
        })?;
        // llm-foundry sets max_seq_len to the benchmark's sequence length (learned positions).
        let model = match &base.transformer {
            Some(cfg) => {
                let mut c = cfg.clone();
                c.max_seq_len = row.seq;
                c.build()
            }
            None => base,
        };
        let cluster = cluster_for(row, row.inter_node)?;
        let plan = plan_for(row, &cluster, model.layers.len());
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

    fn print(r: &Report) {
        for c in &r.rows {
            eprintln!(
                "{:>5} {:>6} {:>3} mbs{:>4} ck{:>6} meas {:>8.0} est {:>8.0} err {:>6.1}% mem {:.2}",
                c.row.model,
                c.row.seq,
                c.row.gpus,
                c.row.mbs,
                c.row.ckpt,
                c.row.tokens_per_s_per_gpu,
                c.estimated_tokens_per_s_per_gpu,
                c.error * 100.0,
                c.memory_fraction
            );
        }
        eprintln!(
            "median {:.3} worst {:.3}",
            r.median_abs_error, r.worst_abs_error
        );
    }

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

    #[test]
    #[ignore = "prints tables; run with --ignored --nocapture"]
    fn print_all() {
        print(&check(&parse_csv(BUILTIN_CSV).unwrap()).unwrap());
        for (f, src) in HELD_OUT {
            eprintln!("== {f}");
            print(&check(&parse_csv(src).unwrap()).unwrap());
        }
    }

    /// Generalisation to other GPUs and sizes, on data no constant was set from. Bounds sit just
    /// above today's medians (docs/validation.md) so that a regression fails.
    #[test]
    fn held_out_accuracy() {
        for ((name, src), bound) in HELD_OUT.iter().zip([0.08, 0.08, 0.12]) {
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
