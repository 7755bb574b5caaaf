//! Sailor (eth-easl/sailor, SOSP'25): its Megatron-DeepSpeed fork runs pipelines whose stages,
//! and the replicas of one stage, have different TP degrees. The export writes
//! `dist_config.json` (every replica's global ranks), `ds_config.json`, a `launch.sh` that starts
//! `pretrain_gpt.py` with `torchrun` on every node, and a README.
//!
//! Read from the repository's `main` (commit cf2c8e3):
//! - `third_party/Megatron-DeepSpeed/megatron/core/parallel_state.py`,
//!   `initialize_model_parallel_from_file`: the file is `[stage][replica][global ranks]`; its
//!   length must be `--pipeline-model-parallel-size`; a replica's TP degree is its rank count and
//!   must be 1, 2 or 4 ("Only TP in {1,2,4} is allowed!"); the data-parallel size is the replica
//!   count of stage 0 and pipeline group `i` takes replica `i` of every stage, so every stage
//!   needs the same number of replicas; sequence parallelism is off.
//! - `deepspeed/topology.py` (`PipeHeterogeneousTopology`, copied over DeepSpeed 0.16.5 by the
//!   `Dockerfile`): reads the same file for the pipe/data/model coordinates.
//! - `third_party/Megatron-DeepSpeed/megatron/arguments.py`: `--distributed-config-file`,
//!   `--layers-per-stage` (a JSON list, `json.loads` in `megatron/training.py:get_model`),
//!   `--max-tensor-model-parallel-size` (vocabulary padding), `--model-name`, `--gpu-type`,
//!   `--results-dir`, `--num-transformer-layers-original` (required); one `--micro-batch-size`;
//!   `--tensor-model-parallel-size` is read per process (`core/tensor_parallel/random.py`,
//!   `initialize.py`), so every process of one node (one torchrun) runs one TP degree.
//! - `megatron/model/opt_model.py`, `llama_model.py` (`layers_per_stage[0] += 2 # for the
//!   embedding` ...): `--layers-per-stage` counts the embedding as one layer of the first stage
//!   and the head as one of the last, as Sailor's planner does
//!   (`sailor/Controller/local/local_controller.py`: `num_layers_per_stage = [len(x) ...]` of
//!   plans such as `sailor/Planner/simulations/validation/mit/N4/plan_config_N4_D1.json`, 26
//!   layers for OPT-350M's 24 blocks). `pretrain_gpt.py` passes the split to OPT, LLAMA and
//!   GPT-Neo.
//! - `deepspeed/pipe_engine.py:90`: ZeRO-2/3 are refused beside the pipeline engine.
//! - `sailor/Worker/elastic_worker_agent.py`: `ds_config.json`'s `train_batch_size`,
//!   `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps` (global batch ÷ (DP ×
//!   micro-batch), `local_controller.py`); `ae_scripts/clariden_scripts/run_opt.slurm`: the
//!   launch, `torchrun ... pretrain_gpt.py` on every node with `--deepspeed --deepspeed_config`.
//!
//! Global ranks are free in `dist_config.json`, so no rank order constrains the placement:
//! hetplan numbers the nodes in the order the plan first uses them and writes each replica's
//! ranks as torchrun will number that node's processes.

use super::ranks::{NodeLaunch, RankLayout};
use super::{Export, ExportError, ExportFile, Job, Target};
use crate::cluster::GpuId;
use crate::model::transformer::{MlpKind, NormKind, PositionKind};
use crate::model::{LayerKind, Model};
use crate::plan::{Plan, Precision, Recompute, Schedule};
use serde_json::json;

/// The TP degrees `initialize_model_parallel_from_file` accepts.
pub const TP_DEGREES: [u32; 3] = [1, 2, 4];

/// Sailor's model class for `model` (`--model-name`), or why it has none.
fn model_name(model: &Model) -> Result<&'static str, Vec<String>> {
    let Some(cfg) = &model.transformer else {
        return Err(vec![format!(
            "Sailor's Megatron-DeepSpeed builds OPT, LLaMA and GPT-Neo transformers \
             (pretrain_gpt.py); {} is a layer list without one",
            model.name
        )]);
    };
    let mut why = super::quirk_reasons(cfg, "Sailor", &[]);
    if cfg.moe.is_some() {
        why.push(
            "Sailor's layer split is for dense models; the model is a mixture of experts".into(),
        );
    }
    if cfg.parallel_attn || cfg.shared_norm {
        why.push(
            "Sailor's OPT and LLaMA blocks run attention then the MLP; the model runs them in \
             parallel"
                .into(),
        );
    }
    let name = match (cfg.norm, cfg.mlp, cfg.position) {
        (NormKind::LayerNorm, MlpKind::Gelu, PositionKind::Learned) => "OPT",
        (NormKind::RmsNorm, MlpKind::SwiGlu, PositionKind::Rotary) => "LLAMA",
        _ => {
            why.push(format!(
                "Sailor's models with a layer split are OPT (LayerNorm, two-GEMM MLP, learned \
                 positions) and LLaMA (RMSNorm, SwiGLU, rotary); the model has {:?}, {:?}, {:?}",
                cfg.norm, cfg.mlp, cfg.position
            ));
            ""
        }
    };
    if why.is_empty() {
        Ok(name)
    } else {
        Err(why)
    }
}

/// Why Sailor cannot train `model` under any plan.
pub fn model_reasons(model: &Model) -> Vec<String> {
    model_name(model).err().unwrap_or_default()
}

/// Every reason Sailor cannot run `plan` of `model` (empty: it can).
pub fn reasons(model: &Model, plan: &Plan) -> Vec<String> {
    checked(model, plan).err().unwrap_or_default()
}

/// The rank layout when Sailor runs the plan; every reason otherwise.
fn checked(model: &Model, plan: &Plan) -> Result<RankLayout, Vec<String>> {
    let mut why = model_reasons(model);
    let Some(first) = plan.stages.first() else {
        return Err(vec!["the plan has no stages".into()]);
    };
    let pp = plan.pipeline_depth().max(1);
    match plan.schedule {
        Schedule::Interleaved { .. } => why.push(
            "Sailor runs DeepSpeed's pipeline engine: 1F1B without virtual stages; the plan \
             interleaves"
                .into(),
        ),
        Schedule::Gpipe if pp > 1 => why.push(
            "Sailor runs DeepSpeed's pipeline engine, 1F1B only (TrainSchedule); the plan uses \
             GPipe"
                .into(),
        ),
        _ => {}
    }
    let stages = &plan.stages[..pp.min(plan.stages.len())];
    let dps: Vec<u32> = stages.iter().map(|s| s.dp).collect();
    if dps.iter().any(|&d| d != first.dp) {
        why.push(format!(
            "Sailor builds pipeline i from replica i of every stage \
             (initialize_model_parallel_from_file): every stage needs the same number of \
             replicas; the plan's stages have {dps:?}"
        ));
    }
    for (g, st) in stages.iter().enumerate() {
        let tps: Vec<u32> = (0..st.dp as usize).map(|r| st.tp_of(r)).collect();
        if let Some(t) = tps.iter().find(|t| !TP_DEGREES.contains(t)) {
            why.push(format!(
                "stage {g} has a replica at TP {t}; Sailor allows TP 1, 2 or 4 per replica \
                 (\"Only TP in {{1,2,4}} is allowed!\")"
            ));
        }
        if !st.replica_samples.is_empty() {
            why.push(format!(
                "stage {g}'s replicas run different numbers of micro-batches; Sailor runs \
                 gradient_accumulation_steps of one size everywhere"
            ));
        }
        if st.sequence_parallel {
            why.push(format!(
                "stage {g} uses sequence parallelism, which Sailor's dist_config turns off"
            ));
        }
        if !st.offload.is_none() {
            why.push(format!(
                "stage {g} offloads {}; Sailor offloads nothing",
                st.offload
            ));
        }
        match st.recompute {
            Recompute::Selective | Recompute::Layers(_) | Recompute::Ops => why.push(format!(
                "stage {g} checkpoints {:?}; Sailor's Megatron-DeepSpeed checkpoints every layer \
                 of every stage (--checkpoint-activations) or none",
                st.recompute
            )),
            _ => {}
        }
        if st.zero > 1 {
            why.push(format!(
                "stage {g} uses ZeRO-{}; DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3 \
                 (deepspeed/pipe_engine.py:90)",
                st.zero
            ));
        }
    }
    let mbs: Vec<u64> = (stages.iter())
        .flat_map(|s| s.micro_batch_sizes.iter().copied())
        .collect();
    let m = mbs.first().copied().unwrap_or(1);
    if mbs.iter().any(|&b| b != m) {
        let mut d = mbs.clone();
        d.sort_unstable();
        d.dedup();
        why.push(format!(
            "Sailor takes one --micro-batch-size for every replica; the plan's are {d:?}"
        ));
    }
    let same = |f: &dyn Fn(&crate::plan::Stage) -> String| stages.iter().all(|s| f(s) == f(first));
    if !same(&|s| s.zero.to_string()) {
        why.push("Sailor's ds_config.json has one ZeRO stage; the plan's stages differ".into());
    }
    if !same(&|s| format!("{:?}", s.recompute)) {
        why.push(
            "Sailor checkpoints activations in every stage or none; the plan's stages differ"
                .into(),
        );
    }
    if m * first.dp as u64 * plan.micro_batches != plan.global_batch {
        why.push(format!(
            "Sailor's gradient accumulation steps are global batch ÷ (DP × micro-batch): {} ≠ {} \
             × {} × {}",
            plan.global_batch, m, first.dp, plan.micro_batches
        ));
    }
    match layout(plan) {
        Ok(l) if why.is_empty() => Ok(l),
        Ok(_) => Err(why),
        Err(mut w) => {
            why.append(&mut w);
            Err(why)
        }
    }
}

/// A node, its GPUs in local-rank order, the TP degrees and the stages on it.
type NodeUse = (u32, Vec<u32>, Vec<u32>, Vec<usize>);

/// Nodes in the order the plan first uses them (stage, replica, TP rank), each node's GPUs in
/// that order; every node's processes run one TP degree.
fn layout(plan: &Plan) -> Result<RankLayout, Vec<String>> {
    let pp = plan.pipeline_depth().max(1);
    let mut why = Vec::new();
    let mut nodes: Vec<NodeUse> = Vec::new();
    let mut seen: Vec<GpuId> = Vec::new();
    for (g, st) in plan.stages.iter().enumerate().take(pp) {
        let need: usize = (0..st.dp as usize).map(|r| st.tp_of(r) as usize).sum();
        if st.dp == 0 || st.tp == 0 || need != st.devices.len() {
            why.push(format!(
                "stage {g} has {} GPUs for {} replicas of TP {}",
                st.devices.len(),
                st.dp,
                st.tp
            ));
            continue;
        }
        for r in 0..st.dp as usize {
            for &d in st.replica(r) {
                if seen.contains(&d) {
                    why.push(format!(
                        "GPU {d} is in two pipeline stages; Sailor runs one rank, one stage, per GPU"
                    ));
                    continue;
                }
                seen.push(d);
                let i = match nodes.iter().position(|n| n.0 == d.node) {
                    Some(i) => i,
                    None => {
                        nodes.push((d.node, Vec::new(), Vec::new(), Vec::new()));
                        nodes.len() - 1
                    }
                };
                let n = &mut nodes[i];
                n.1.push(d.local);
                if !n.2.contains(&st.tp_of(r)) {
                    n.2.push(st.tp_of(r));
                }
                if !n.3.contains(&g) {
                    n.3.push(g);
                }
            }
        }
    }
    for (node, _, tps, _) in &nodes {
        if tps.len() > 1 {
            why.push(format!(
                "node n{node} holds replicas at TP {tps:?}; Sailor's Megatron-DeepSpeed reads \
                 --tensor-model-parallel-size per process and torchrun gives every process of a \
                 node the same arguments"
            ));
        }
    }
    if !why.is_empty() {
        return Err(why);
    }
    let mut first_rank = 0u32;
    let mut launches = Vec::new();
    let mut ranks = Vec::new();
    for (k, (node, gpus, _, stages)) in nodes.into_iter().enumerate() {
        ranks.extend(gpus.iter().map(|&local| GpuId { node, local }));
        let n = gpus.len() as u32;
        launches.push(NodeLaunch {
            node,
            node_rank: k as u32,
            first_rank,
            gpus,
            stages,
        });
        first_rank += n;
    }
    Ok(RankLayout {
        nodes: launches,
        ranks,
    })
}

/// `dist_config.json`: for every stage, for every replica, its global ranks in TP order.
fn dist_config(plan: &Plan, layout: &RankLayout) -> Vec<Vec<Vec<usize>>> {
    let rank_of = |d: GpuId| {
        layout
            .ranks
            .iter()
            .position(|&r| r == d)
            .expect("every GPU has a rank")
    };
    (plan.stages.iter().take(plan.pipeline_depth().max(1)))
        .map(|st| {
            (0..st.dp as usize)
                .map(|r| st.replica(r).iter().map(|&d| rank_of(d)).collect())
                .collect()
        })
        .collect()
}

/// `--layers-per-stage`: each stage's transformer blocks, plus the embedding in the first and
/// the head in the last (Sailor's layer numbering).
pub fn layers_per_stage(model: &Model, plan: &Plan) -> Vec<usize> {
    let pp = plan.pipeline_depth().max(1);
    (plan.stages.iter().take(pp).enumerate())
        .map(|(g, st)| {
            let blocks = (st.layers.iter())
                .filter(|&i| {
                    model
                        .layers
                        .get(i)
                        .is_some_and(|l| l.kind == LayerKind::Transformer)
                })
                .count();
            blocks + usize::from(g == 0) + usize::from(g + 1 == pp)
        })
        .collect()
}

/// `ds_config.json`: the batch arithmetic, ZeRO and precision (keys of DeepSpeed's config, as
/// `elastic_worker_agent.py` and `run_opt.slurm` write them).
fn ds_config(plan: &Plan) -> serde_json::Value {
    let st = &plan.stages[0];
    let mbs = st.micro_batch_sizes.first().copied().unwrap_or(1);
    let mut c = json!({
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": plan.micro_batches,
        "zero_optimization": { "stage": st.zero },
        "steps_per_print": 1,
    });
    match plan.precision {
        Precision::Bf16 => c["bf16"] = json!({ "enabled": true }),
        Precision::Fp16 => c["fp16"] = json!({ "enabled": true }),
        // Refused before export (`Target::precisions`).
        Precision::Fp32 | Precision::Tf32 | Precision::Fp8 | Precision::Fp8Rowwise => {}
    }
    c
}

/// The arguments of `pretrain_gpt.py` every node passes (not the per-node TP and GPU type).
pub fn args(model: &Model, plan: &Plan, seq_len: u64) -> Vec<String> {
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mut a: Vec<String> = Vec::new();
    let mut push = |k: &str, v: String| {
        a.push(k.to_string());
        a.push(v);
    };
    let name = model_name(model).unwrap_or("OPT");
    push("--model-name", name.into());
    if let Some(cfg) = &model.transformer {
        push("--num-layers", cfg.layers.to_string());
        push("--num-transformer-layers-original", cfg.layers.to_string());
        push("--hidden-size", cfg.hidden.to_string());
        push("--ffn-hidden-size", cfg.ffn.to_string());
        push("--num-attention-heads", cfg.heads.to_string());
        if name == "LLAMA" && cfg.kv_heads != cfg.heads {
            push("--num-key-value-heads", cfg.kv_heads.to_string());
        }
        push(
            "--max-position-embeddings",
            cfg.max_seq_len.max(seq_len).to_string(),
        );
    }
    push("--seq-length", seq_len.to_string());
    push("--pipeline-model-parallel-size", pp.to_string());
    let max_tp = (plan.stages.iter().take(pp))
        .flat_map(|s| (0..s.dp as usize).map(|r| s.tp_of(r)))
        .max()
        .unwrap_or(1);
    push("--max-tensor-model-parallel-size", max_tp.to_string());
    push("--distributed-config-file", "dist_config.json".into());
    let lps: Vec<String> = layers_per_stage(model, plan)
        .iter()
        .map(|n| n.to_string())
        .collect();
    push("--layers-per-stage", format!("[{}]", lps.join(",")));
    push(
        "--micro-batch-size",
        st.micro_batch_sizes
            .first()
            .copied()
            .unwrap_or(1)
            .to_string(),
    );
    push("--global-batch-size", plan.global_batch.to_string());
    push("--zero-stage", st.zero.to_string());
    match plan.precision {
        Precision::Bf16 => a.push("--bf16".into()),
        Precision::Fp16 => a.push("--fp16".into()),
        // FP8 is refused before export (`Target::precisions`).
        Precision::Fp32 | Precision::Tf32 | Precision::Fp8 | Precision::Fp8Rowwise => {}
    }
    if st.recompute == Recompute::Full {
        a.extend([
            "--checkpoint-activations".into(),
            "--checkpoint-num-layers".into(),
            "1".into(),
        ]);
    }
    a.extend([
        "--deepspeed".into(),
        "--deepspeed_config".into(),
        "ds_config.json".into(),
    ]);
    a
}

/// The export of `job` for Sailor, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let plan: &Plan = job.plan;
    let layout = checked(job.model, plan).map_err(|reasons| ExportError::Unsupported {
        target: Target::Sailor,
        reasons,
    })?;
    let dist = dist_config(plan, &layout);
    let args = args(job.model, plan, job.seq_len);
    let files = vec![
        ExportFile {
            path: "dist_config.json".into(),
            contents: serde_json::to_string(&dist).expect("JSON values serialise") + "\n",
            executable: false,
        },
        ExportFile {
            path: "ds_config.json".into(),
            contents: serde_json::to_string_pretty(&ds_config(plan))
                .expect("JSON values serialise")
                + "\n",
            executable: false,
        },
        ExportFile {
            path: "launch.sh".into(),
            contents: launch(job, plan, &layout, &args),
            executable: true,
        },
        ExportFile {
            path: "README.md".into(),
            contents: readme(job, &layout, &dist, &args),
            executable: false,
        },
    ];
    Ok(Export {
        target: Target::Sailor,
        files,
        layout,
    })
}

/// The TP degree of the replicas on each node rank.
fn node_tp(plan: &Plan, layout: &RankLayout) -> Vec<u32> {
    (layout.nodes.iter())
        .map(|n| {
            (plan.stages.iter())
                .flat_map(|s| (0..s.dp as usize).map(move |r| (s.replica(r), s.tp_of(r))))
                .find(|(gpus, _)| gpus.iter().any(|d| d.node == n.node))
                .map_or(1, |(_, t)| t)
        })
        .collect()
}

fn launch(job: Job<'_>, plan: &Plan, layout: &RankLayout, args: &[String]) -> String {
    let tps = node_tp(plan, layout);
    let mut pre = String::from(
        "# Sailor's Megatron-DeepSpeed (third_party/Megatron-DeepSpeed of eth-easl/sailor; its \
         Docker image puts it at /root/sailor).\nSAILOR_MEGATRON=${SAILOR_MEGATRON:-/root/sailor/third_party/Megatron-DeepSpeed}\n\
         # Each node's TP degree (--tensor-model-parallel-size) and GPU type (--gpu-type).\n\
         case \"${NODE_RANK:-}\" in\n",
    );
    for (n, tp) in layout.nodes.iter().zip(&tps) {
        pre.push_str(&format!(
            "  {}) TP={}; GPU_TYPE={} ;;\n",
            n.node_rank,
            tp,
            super::shell_quote(super::gpu_type_of(job.cluster, n.node))
        ));
    }
    pre.push_str("esac\n");
    let words: Vec<String> = args.iter().map(|a| super::shell_quote(a)).collect();
    let command = format!(
        "\"$SAILOR_MEGATRON/pretrain_gpt.py\" \\\n  --tensor-model-parallel-size \"$TP\" --gpu-type \
         \"$GPU_TYPE\" --results-dir \"${{RESULTS_DIR:-results}}\" \\\n  {} \\\n  \"$@\"",
        words.join(" ")
    );
    super::launch_script(
        job,
        layout,
        "Sailor",
        "Run it in the export directory (dist_config.json and ds_config.json are read from \
         there), followed by the data arguments of pretrain_gpt.py (--data-path, --vocab-file, \
         --merge-file, --train-iters ...)",
        Some((&pre, &command)),
        1234,
    )
}

fn readme(job: Job<'_>, layout: &RankLayout, dist: &[Vec<Vec<usize>>], args: &[String]) -> String {
    let plan: &Plan = job.plan;
    let st = &plan.stages[0];
    let mut s = super::readme_head(job, "Sailor", Target::Sailor);
    s.push_str(&format!(
        "PP {}, DP {} replicas per stage; micro-batch {}, global batch {} ({} gradient \
         accumulation steps); sequence {}.\n\n## Files\n\n\
         - `dist_config.json`: `[stage][replica][global ranks]`, read by Sailor's \
         `initialize_model_parallel_from_file` (megatron/core/parallel_state.py) and DeepSpeed's \
         `PipeHeterogeneousTopology` (Sailor's deepspeed/topology.py). A replica's TP degree is \
         its number of ranks.\n\
         - `ds_config.json`: DeepSpeed's batch sizes, ZeRO stage and precision.\n\
         - `launch.sh`: run it on every node, in this directory, with `NODE_RANK` (below) and \
         `MASTER_ADDR` (the address of node rank 0) set, followed by the data arguments \
         (`--data-path`, `--vocab-file`, `--merge-file`, `--train-iters`, as Sailor's \
         `ae_scripts/clariden_scripts/run_opt.slurm`). It starts `torchrun` with the node's GPUs \
         in `CUDA_VISIBLE_DEVICES` and Sailor's `pretrain_gpt.py` (set `SAILOR_MEGATRON` to \
         your checkout's `third_party/Megatron-DeepSpeed`; Sailor's image has it at \
         `/root/sailor`), as `run_opt.slurm` does, with the node's TP degree.\n\n\
         The arguments every node passes:\n\n    {}\n\n\
         `--layers-per-stage` counts each stage's transformer blocks, the embedding as a layer \
         of the first stage and the head as one of the last, as Sailor's planner numbers \
         layers. `--model-name` picks Sailor's model class (`OPT`, \
         megatron/model/opt_model.py, for LayerNorm, two-GEMM MLP and learned positions; \
         `LLAMA` for RMSNorm, SwiGLU and rotary), built at the model's shape.\n",
        plan.pipeline_depth().max(1),
        st.dp,
        st.micro_batch_sizes.first().copied().unwrap_or(1),
        plan.global_batch,
        plan.micro_batches,
        job.seq_len,
        args.iter()
            .map(|a| super::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    s.push_str(
        "\n## Where each rank runs\n\n\
         torchrun numbers ranks node by node in `--node_rank` order, local rank `i` on the \
         `i`-th GPU of `CUDA_VISIBLE_DEVICES`; `dist_config.json` names every replica's ranks \
         in that numbering, so any node order works. hetplan numbers the nodes in the order the \
         plan first uses them. Start each cluster node with its node rank:\n\n",
    );
    s.push_str(&super::node_table(job.cluster, layout));
    s.push_str("\nThe replicas in `dist_config.json`:\n\n");
    for (g, stage) in dist.iter().enumerate() {
        for (r, ranks) in stage.iter().enumerate() {
            let gpus: Vec<String> = ranks.iter().map(|&k| layout.ranks[k].to_string()).collect();
            let rs: Vec<String> = ranks.iter().map(|k| k.to_string()).collect();
            s.push_str(&format!(
                "- stage {g}, replica {r} (TP {}): ranks {} on {}\n",
                ranks.len(),
                rs.join(", "),
                gpus.join(", ")
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::catalog_model;

    /// Two nodes of A100s and one of V100s.
    fn cluster() -> crate::cluster::Cluster {
        crate::cluster::spec::parse_cluster_toml(
            "name = \"mixed\"\n\
             [[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 2\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n\
             [[node_group]]\ngpu = \"v100-sxm2-32gb\"\ngpus_per_node = 4\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n",
        )
        .unwrap()
    }

    /// Each stage: an A100 replica at TP 1 and a V100 replica at TP 2 (Sailor's OPT plans).
    pub(crate) const MIXED: &str = r#"{
      "global_batch": 16, "micro_batches": 4, "schedule": {"kind": "1f1b"},
      "stages": [
        {"layers": {"start": 0, "end": 7},
         "devices": [{"node": 0, "local": 0}, {"node": 1, "local": 0}, {"node": 1, "local": 1}],
         "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2]},
        {"layers": {"start": 7, "end": 14},
         "devices": [{"node": 0, "local": 1}, {"node": 1, "local": 2}, {"node": 1, "local": 3}],
         "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2]}
      ]
    }"#;

    fn job_of(plan: &str) -> (Model, crate::cluster::Cluster, crate::plan::ValidPlan) {
        let model = catalog_model("gpt3-125m").unwrap();
        let cluster = cluster();
        let plan: Plan = serde_json::from_str(plan).unwrap();
        let plan = crate::plan::ValidPlan::new(plan, &model, &cluster).unwrap();
        (model, cluster, plan)
    }

    #[test]
    fn mixed_tp_replicas_export_to_sailor_and_not_to_megatron() {
        let (model, cluster, plan) = job_of(MIXED);
        let job = Job {
            model: &model,
            cluster: &cluster,
            plan: &plan,
            seq_len: 2048,
        };
        let e = export(job).unwrap();
        let f = |p: &str| {
            e.files
                .iter()
                .find(|f| f.path == p)
                .unwrap()
                .contents
                .clone()
        };
        let dist: Vec<Vec<Vec<usize>>> = serde_json::from_str(&f("dist_config.json")).unwrap();
        // Node 0 (A100) first: ranks 0, 1; node 1 (V100) ranks 2..5.
        assert_eq!(
            dist,
            vec![vec![vec![0], vec![2, 3]], vec![vec![1], vec![4, 5]]]
        );
        let mut all: Vec<usize> = dist.iter().flatten().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..6).collect::<Vec<_>>(), "every GPU once");
        let launch = f("launch.sh");
        assert!(launch.contains("0) TP=1;"), "{launch}");
        assert!(launch.contains("1) TP=2;"), "{launch}");
        assert!(launch.contains("--layers-per-stage '[7,7]'"), "{launch}");
        let ds: serde_json::Value = serde_json::from_str(&f("ds_config.json")).unwrap();
        assert_eq!(ds["train_batch_size"], 16);
        assert_eq!(ds["gradient_accumulation_steps"], 4);
        assert_eq!(ds["train_micro_batch_size_per_gpu"], 2);
        // Megatron refuses the same plan.
        let Err(ExportError::Unsupported { reasons, .. }) = super::super::megatron::export(job)
        else {
            panic!("Megatron exported a plan with mixed TP degrees")
        };
        assert!(!reasons.is_empty());
    }

    #[test]
    fn what_sailor_cannot_express_is_every_reason() {
        let (model, _, plan) = job_of(MIXED);
        let mut p = plan.into_plan();
        // TP 3 is not in {1,2,4}; another micro-batch size; ZeRO-3; selective recompute;
        // one more replica in stage 1 than in stage 0.
        p.stages[0].replica_tp = vec![1, 3];
        p.stages[0].micro_batch_sizes = vec![1, 2];
        p.stages[1].zero = 3;
        p.stages[1].recompute = Recompute::Selective;
        p.stages[1].dp = 3;
        let why = reasons(&model, &p);
        for needle in [
            "TP 1, 2 or 4",
            "one --micro-batch-size",
            "ZeRO-3",
            "checkpoints",
            "same number of replicas",
        ] {
            assert!(why.iter().any(|w| w.contains(needle)), "{needle}: {why:?}");
        }
    }

    #[test]
    fn a_node_with_two_tp_degrees_is_named() {
        let (model, _, plan) = job_of(MIXED);
        let mut p = plan.into_plan();
        // Stage 1's TP-1 replica moves to the V100 node, beside TP-2 replicas.
        p.stages[1].devices = vec![
            GpuId { node: 1, local: 2 },
            GpuId { node: 0, local: 1 },
            GpuId { node: 1, local: 3 },
        ];
        p.stages[1].replica_tp = vec![1, 2];
        let why = reasons(&model, &p);
        assert!(
            why.iter()
                .any(|w| w.contains("node n1 holds replicas at TP")),
            "{why:?}"
        );
    }
}
