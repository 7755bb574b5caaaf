//! A DeepSpeed job as hetplan's plan: its `ds_config.json`, how many pipeline stages its
//! `PipelineModule` has and how it splits the layers. The config does not describe the model,
//! so the model comes from the caller.
//!
//! Read from DeepSpeed 0.19.8:
//! - `runtime/config.py` (`_configure_train_batch_size`): of `train_batch_size`,
//!   `train_micro_batch_size_per_gpu` and `gradient_accumulation_steps`, any two give the third
//!   (`train_batch_size = micro × steps × DP`); only the batch: one step; only the micro-batch:
//!   one step. With a pipeline the accumulation steps are the micro-batches of one step.
//! - `runtime/zero/config.py`, `offload_config.py`: `zero_optimization.stage` (default 0),
//!   `offload_optimizer.device` (`cpu`, `nvme`; `none` is off) with `ratio` (default 1),
//!   `offload_param.device`.
//! - `runtime/pipe/module.py`, `runtime/utils.py`: `partition_method="parameters"` (the
//!   default) balances the layers' parameter counts with a dynamic programme that minimises
//!   the spread between the heaviest and the lightest stage (`partition_balanced`), `"uniform"`
//!   gives the first `n mod stages` stages one layer more (`partition_uniform`); a
//!   `hetplan export` names its boundaries (`PARTS`).
//! - `runtime/pipe/topology.py`: ranks pipe-major, then data (no tensor parallelism without
//!   Megatron-DeepSpeed's model code).

use crate::cluster::{Cluster, GpuId};
use crate::error::InputError;
use crate::export::ranks::NodeLaunch;
use crate::model::Model;
use crate::plan::{Engine, LayerRange, Offload, Plan, Precision, Recompute, Schedule, Stage};
use serde_json::Value;

/// How the job's `PipelineModule` splits the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// Stage boundaries: stage `s` runs layers `parts[s]..parts[s+1]`.
    Parts(Vec<usize>),
    /// `partition_method="parameters"` over this many stages.
    Parameters(usize),
    /// `partition_method="uniform"` over this many stages.
    Uniform(usize),
}

/// A parsed `ds_config.json`.
#[derive(Clone, Debug)]
pub struct DeepspeedJob {
    config: Value,
    src: String,
}

impl DeepspeedJob {
    pub fn parse(src: &str) -> Result<DeepspeedJob, InputError> {
        let config: Value = serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
        if !config.is_object() {
            return Err(InputError::new("a DeepSpeed config is a JSON object").at(1, 1));
        }
        Ok(DeepspeedJob {
            config,
            src: src.to_string(),
        })
    }

    /// The error at `key`'s place in the text (its first occurrence), when found.
    fn at(&self, key: &str, message: String) -> InputError {
        let e = InputError::new(message).field(key);
        match self.src.find(&format!("\"{key}\"")) {
            Some(i) => e.at_offset(&self.src, i),
            None => e,
        }
    }

    fn uint(&self, v: &Value, key: &str) -> Result<Option<u64>, InputError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x.as_u64().filter(|&n| n > 0).map(Some).ok_or_else(|| {
                self.at(
                    key,
                    format!("`{key}` must be a whole number of at least 1, found {x}"),
                )
            }),
        }
    }

    /// The plan the job runs with `model` on `cluster`: the ranks on `ranks` (an export's
    /// `ranks.json`, in node-rank order) or on the cluster's GPUs in order.
    pub fn plan(
        &self,
        model: &Model,
        cluster: &Cluster,
        split: &Split,
        ranks: Option<&[NodeLaunch]>,
        recompute: Recompute,
    ) -> Result<Plan, InputError> {
        let c = &self.config;
        let gpus: Vec<GpuId> = match ranks {
            Some(nodes) => nodes
                .iter()
                .flat_map(|n| {
                    n.gpus.iter().map(move |&g| GpuId {
                        node: n.node,
                        local: g,
                    })
                })
                .collect(),
            None => cluster.gpus(),
        };
        let n_layers = model.layers.len();
        let parts = match split {
            Split::Parts(p) => p.clone(),
            Split::Uniform(s) => uniform(n_layers, *s),
            Split::Parameters(s) => balanced(
                &model
                    .layers
                    .iter()
                    .map(|l| l.params() as f64)
                    .collect::<Vec<_>>(),
                *s,
            ),
        };
        let pp = parts.len().saturating_sub(1);
        if pp == 0
            || parts.first() != Some(&0)
            || parts.last() != Some(&n_layers)
            || parts.windows(2).any(|w| w[1] <= w[0])
        {
            return Err(InputError::new(format!(
                "the stage boundaries {parts:?} do not split the model's {n_layers} layers into \
                 non-empty stages"
            ))
            .hint(Some("give fewer pipeline stages than layers".into())));
        }
        let world = gpus.len();
        if world == 0 || !world.is_multiple_of(pp) {
            return Err(InputError::new(format!(
                "{world} GPUs are not a multiple of the {pp} pipeline stages"
            ))
            .hint(Some(
                "import with the cluster the job runs on, or its ranks.json".into(),
            )));
        }
        let dp = (world / pp) as u64;
        let gbs = self.uint(c, "train_batch_size")?;
        let mbs = self.uint(c, "train_micro_batch_size_per_gpu")?;
        let gas = self.uint(c, "gradient_accumulation_steps")?;
        let mul = |a: u64, b: u64| a.saturating_mul(b);
        let (gbs, mbs, gas) = match (gbs, mbs, gas) {
            (Some(g), Some(m), Some(a)) => (g, m, a),
            (Some(g), Some(m), None) => (g, m, g / mul(m, dp).max(1)),
            (Some(g), None, Some(a)) => (g, g / mul(a, dp).max(1), a),
            (None, Some(m), Some(a)) => (mul(mul(m, a), dp), m, a),
            (Some(g), None, None) => (g, g / dp, 1),
            (None, Some(m), None) => (mul(m, dp), m, 1),
            (None, None, _) => {
                return Err(self
                    .at(
                        "train_batch_size",
                        "the config names neither `train_batch_size` nor \
                     `train_micro_batch_size_per_gpu`"
                            .into(),
                    )
                    .hint(Some("DeepSpeed needs one of them; so does hetplan".into())))
            }
        };
        let product = mbs.checked_mul(gas).and_then(|x| x.checked_mul(dp));
        if mbs == 0 || gas == 0 || product != Some(gbs) {
            return Err(self
                .at(
                    "train_batch_size",
                    format!(
                        "train_batch_size {gbs} is not micro-batch {mbs} × accumulation steps \
                         {gas} × DP {dp}"
                    ),
                )
                .hint(Some(format!(
                    "DP is the {world} GPUs over {pp} pipeline stages; DeepSpeed refuses this \
                     config too"
                ))));
        }
        let zero_cfg = c.get("zero_optimization");
        let zero = match zero_cfg.and_then(|z| z.get("stage")) {
            None => 0,
            Some(v) => match v.as_u64() {
                Some(s @ 0..=3) => s as u8,
                _ => {
                    return Err(self.at(
                        "stage",
                        format!("`zero_optimization.stage` must be 0 to 3, found {v}"),
                    ))
                }
            },
        };
        let on = |section: &str| -> Option<&Value> {
            zero_cfg.and_then(|z| z.get(section)).filter(|o| {
                o.get("device")
                    .and_then(Value::as_str)
                    .is_some_and(|d| d != "none")
            })
        };
        let offload = Offload {
            optimizer: on("offload_optimizer").map_or(0.0, |o| {
                o.get("ratio").and_then(Value::as_f64).unwrap_or(1.0)
            }),
            weights: if on("offload_param").is_some() {
                1.0
            } else {
                0.0
            },
            ..Default::default()
        };
        let enabled = |k: &str| {
            c.get(k)
                .and_then(|v| v.get("enabled"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let precision = if enabled("bf16") {
            Precision::Bf16
        } else if enabled("fp16") {
            Precision::Fp16
        } else {
            Precision::Fp32
        };
        let per_stage = dp as usize;
        let stages = (0..pp)
            .map(|s| Stage {
                etp: None,
                ep: 1,
                cp: 1,
                layers: LayerRange {
                    start: parts[s],
                    end: parts[s + 1],
                },
                devices: gpus[s * per_stage..(s + 1) * per_stage].to_vec(),
                tp: 1,
                replica_tp: Vec::new(),
                dp: dp as u32,
                micro_batch_sizes: vec![mbs; per_stage],
                zero,
                recompute,
                offload,
                sequence_parallel: false,
                replica_samples: Vec::new(),
            })
            .collect();
        Ok(Plan {
            global_batch: gbs,
            micro_batches: gas,
            schedule: Schedule::OneFOneB,
            engine: Engine::Deepspeed,
            precision,
            collective_dtypes: Default::default(),
            moe_capacity_factor: None,
            cp_comm: Default::default(),
            tp_comm_overlap: false,
            compile: Default::default(),
            stages,
            made_for: Some(crate::plan::MadeFor::of(model, cluster)),
        })
    }
}

/// `partition_uniform`: the first `n mod parts` stages one item more.
pub fn uniform(n: usize, parts: usize) -> Vec<usize> {
    if parts == 0 {
        return vec![0];
    }
    if n <= parts {
        return (0..=parts).map(|p| p.min(n)).collect();
    }
    let (chunk, extra) = (n / parts, n % parts);
    (0..=parts).map(|p| p * chunk + p.min(extra)).collect()
}

/// `partition_balanced`: boundaries minimising the spread (heaviest − lightest stage), by
/// dynamic programming over prefixes; among equal spreads the last split point found wins, as
/// DeepSpeed's `>=` comparison has it.
pub fn balanced(weights: &[f64], parts: usize) -> Vec<usize> {
    let n = weights.len();
    if n <= parts {
        return uniform(n, parts);
    }
    let mut prefix = vec![0.0; n + 1];
    for (i, w) in weights.iter().enumerate() {
        prefix[i + 1] = prefix[i] + w;
    }
    let inf = f64::INFINITY;
    // (max, min, cost) of the best split of the first i items into j parts, and its last cut.
    let mut best = vec![vec![(inf, inf, inf); parts + 1]; n + 1];
    let mut cut = vec![vec![0usize; parts + 1]; n + 1];
    best[0][0] = (0.0, inf, 0.0);
    for i in 1..=n {
        for j in 1..=i.min(parts) {
            for k in 0..i {
                let (pmax, pmin, _) = best[k][j - 1];
                let part = prefix[i] - prefix[k];
                let hi = pmax.max(part);
                let lo = pmin.min(part);
                let cost = hi - lo;
                if best[i][j].2 >= cost {
                    best[i][j] = (hi, lo, cost);
                    cut[i][j] = k;
                }
            }
        }
    }
    let mut out = vec![n];
    for j in (1..=parts).rev() {
        let last = *out.last().unwrap_or(&0);
        out.push(cut[last][j]);
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_follow_deepspeed() {
        // partition_uniform(10, 4) = [0, 3, 6, 8, 10]; (2, 4) = [0, 1, 2, 2, 2].
        assert_eq!(uniform(10, 4), vec![0, 3, 6, 8, 10]);
        assert_eq!(uniform(2, 4), vec![0, 1, 2, 2, 2]);
        // A heavy first and last layer (embedding, head) between light blocks.
        let w = [10.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0];
        let p = balanced(&w, 2);
        assert_eq!(p, vec![0, 4, 8]);
        let p = balanced(&[1.0; 6], 3);
        assert_eq!(p, vec![0, 2, 4, 6]);
    }

    #[test]
    fn batch_arithmetic_is_deepspeeds() {
        let model = crate::model::catalog::catalog_model("gpt3-125m").unwrap();
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 1\n",
        )
        .unwrap();
        let job = DeepspeedJob::parse(
            r#"{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},
                "bf16": {"enabled": true}}"#,
        )
        .unwrap();
        let plan = job
            .plan(&model, &cluster, &Split::Uniform(2), None, Recompute::None)
            .unwrap();
        assert_eq!(
            (plan.stages.len(), plan.stages[0].dp, plan.micro_batches),
            (2, 2, 8)
        );
        assert_eq!(plan.stages[0].offload.optimizer, 1.0);
        assert!(crate::plan::ValidPlan::new(plan, &model, &cluster).is_ok());
        let bad = DeepspeedJob::parse(
            r#"{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 2,
                "gradient_accumulation_steps": 4}"#,
        )
        .unwrap();
        let e = bad
            .plan(&model, &cluster, &Split::Uniform(2), None, Recompute::None)
            .unwrap_err();
        assert_eq!(e.line, Some(1), "{e:?}");
        assert!(e.message.contains("not micro-batch 2"), "{}", e.message);
    }
}
