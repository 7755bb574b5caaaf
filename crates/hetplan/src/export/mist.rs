//! Mist (Dazz993/Mist, EuroSys'25): its executor runs a pipeline whose stages each have their
//! own micro-batch size, DP and TP degrees, ZeRO-like sharding, offloading ratios and number of
//! checkpointed blocks. The export writes the Hydra config Mist's executor reads
//! (`hetplan_mist.yaml`), a `launch.sh` that starts it with `torchrun` on every node, and a
//! README.
//!
//! Read from the repository's `main` (commit d69e530):
//! - `mist/config.py`: `StrategyConfig` (`layer_partitions`, `device_assignment` as
//!   `[num_nodes, num_gpus_per_node]` per stage, `gradient_checkpointing` per stage,
//!   `gradient_accumulation_steps`, `stage_strategies` of ten numbers `[batch_size, dp_size,
//!   tp_size, wre_enabled, gre_enabled, ore_enabled, wo_ratio, go_ratio, oo_ratio, ac_ratio]`,
//!   `pre_post_strategy`, `pre_post_strategy_array`); `verify_with_other_config`: the blocks sum
//!   to `model.num_hidden_layers`, `batch_size · dp_size · gradient_accumulation_steps` is the
//!   global batch in every stage, `dp_size · tp_size` is the stage's devices, and the pre/post
//!   array fits the first and the last stage. `HardwareConfig`: `num_nodes · num_gpus_per_node`
//!   must be `WORLD_SIZE`; the fitted `gpu_gpu_comm_params` (32 numbers), `cpu_gpu_comm_params`,
//!   `gpu_cpu_comm_params` (2 each) and `interference_model_params` (28) are required (only the
//!   tuner in `mist/analyzer/` uses them). `ModelConfig`: the model keys.
//! - `mist/parallel_state.py`: `_map_stage_idx_to_ranks` gives a stage that fills whole nodes
//!   the next spare nodes and packs a stage on part of a node into the first node with room;
//!   global rank = node · `num_gpus_per_node` + local rank; replica `d` of a stage is its ranks
//!   `[d·tp, (d+1)·tp)` (TP fastest).
//! - `benchmark/mist/exec/benchmark_one_case.py`: `@hydra.main(config_path="../configs",
//!   config_name="config.yaml")`; `pre_post_strategy` must be `preset`: the embedding and the
//!   head run with one array. `mist/model_provider.py`: the model class from the name's prefix
//!   (`gpt2`, `llama`, ...). `mist/utils/common.py`: `str_to_torch_dtype`.
//! - `benchmark/mist/configs/test-small-base.yaml`: a complete config of the same keys; the
//!   README's launch: `torchrun --nproc-per-node N benchmark_one_case.py --config-path DIR
//!   --config-name NAME`.

use super::ranks::{NodeLaunch, RankLayout};
use super::{Export, ExportError, ExportFile, Job, Target};
use crate::cluster::{Cluster, GpuId};
use crate::model::transformer::{MlpKind, NormKind, PositionKind};
use crate::model::{LayerKind, Model};
use crate::plan::{Plan, Precision, Recompute, Schedule, Stage};

/// The name prefix that picks Mist's model class (`get_model_cls`), or why there is none.
fn family(model: &Model) -> Result<&'static str, Vec<String>> {
    let Some(cfg) = &model.transformer else {
        return Err(vec![format!(
            "Mist builds its own transformers (mist/model/); {} is a layer list without one",
            model.name
        )]);
    };
    let mut why = super::quirk_reasons(cfg, "Mist", &[]);
    if cfg.moe.is_some() {
        why.push("hetplan exports dense models to Mist; the model is a mixture of experts".into());
    }
    if cfg.parallel_attn || cfg.shared_norm {
        why.push(
            "hetplan exports Mist's GPT-2 and LLaMA blocks, attention then MLP; the model runs \
             them in parallel"
                .into(),
        );
    }
    if cfg.position == PositionKind::Alibi {
        why.push(
            "Mist's position_embedding_type is rotary or absolute (mist/model/enums.py); the \
             model uses ALiBi"
                .into(),
        );
    }
    let f = match (cfg.norm, cfg.mlp) {
        (NormKind::LayerNorm, MlpKind::Gelu) => "gpt2",
        (NormKind::RmsNorm, MlpKind::SwiGlu) => "llama",
        (n, m) => {
            why.push(format!(
                "hetplan exports Mist's GPT-2 (LayerNorm, GeLU MLP) and LLaMA (RMSNorm, SwiGLU) \
                 models; the model has {n:?} and {m:?}"
            ));
            ""
        }
    };
    if why.is_empty() {
        Ok(f)
    } else {
        Err(why)
    }
}

/// Why Mist cannot train `model` under any plan.
pub fn model_reasons(model: &Model) -> Vec<String> {
    family(model).err().unwrap_or_default()
}

/// Every reason Mist cannot run `plan` of `model` (empty: it can).
pub fn reasons(model: &Model, plan: &Plan) -> Vec<String> {
    checked(model, plan).err().unwrap_or_default()
}

/// The rank layout and each stage's `device_assignment` (`[nodes, GPUs per node]`).
type Placed = (RankLayout, Vec<(u32, u32)>);

/// The transformer blocks of each stage (Mist's `layer_partitions`).
fn blocks(model: &Model, st: &Stage) -> u32 {
    (st.layers.iter())
        .filter(|&i| {
            model
                .layers
                .get(i)
                .is_some_and(|l| l.kind == LayerKind::Transformer)
        })
        .count() as u32
}

/// A stage's ten numbers: `[batch_size, dp_size, tp_size, wre, gre, ore, wo, go, oo, ac]`.
/// ZeRO-1 shards the optimizer state (ore), ZeRO-2 also the gradients (gre), ZeRO-3 also the
/// weights (wre); the ratios are the offloaded fractions.
fn stage_strategy(st: &Stage) -> [String; 10] {
    let flag = |on: bool| u8::from(on).to_string();
    let o = st.offload;
    [
        st.micro_batch_sizes
            .first()
            .copied()
            .unwrap_or(1)
            .to_string(),
        st.dp.to_string(),
        st.tp.to_string(),
        flag(st.zero >= 3),
        flag(st.zero >= 2),
        flag(st.zero >= 1),
        format!("{:?}", o.weights),
        format!("{:?}", o.gradients),
        format!("{:?}", o.optimizer),
        format!("{:?}", o.activations),
    ]
}

/// The checkpointed blocks of a stage (Mist's `gradient_checkpointing`).
fn checkpointed(model: &Model, st: &Stage) -> u32 {
    match st.recompute {
        Recompute::None | Recompute::Selective | Recompute::Ops => 0,
        Recompute::Full => blocks(model, st),
        Recompute::Layers(n) => n.min(blocks(model, st)),
    }
}

/// The layout and each stage's `device_assignment` when Mist runs the plan; every reason
/// otherwise.
fn checked(model: &Model, plan: &Plan) -> Result<Placed, Vec<String>> {
    let mut why = model_reasons(model);
    let Some(first) = plan.stages.first() else {
        return Err(vec!["the plan has no stages".into()]);
    };
    let pp = plan.pipeline_depth().max(1);
    match plan.schedule {
        Schedule::Interleaved { .. } => why.push(
            "Mist's layer_partitions give each stage one run of blocks; the plan interleaves \
             virtual stages"
                .into(),
        ),
        Schedule::Gpipe if pp > 1 => why.push(
            "Mist's strategy has no schedule; its executor runs its own pipeline schedule, not \
             the plan's GPipe"
                .into(),
        ),
        _ => {}
    }
    let stages = &plan.stages[..pp.min(plan.stages.len())];
    for (g, st) in stages.iter().enumerate() {
        if !st.replica_tp.is_empty() && st.replica_tp.iter().any(|&t| t != st.tp) {
            why.push(format!(
                "stage {g}'s replicas have TP {:?}; Mist's stage strategy has one tp_size",
                st.replica_tp
            ));
        }
        let m = st.micro_batch_sizes.first().copied().unwrap_or(1);
        if st.micro_batch_sizes.iter().any(|&b| b != m) {
            why.push(format!(
                "stage {g}'s replicas have micro-batches {:?}; Mist's stage strategy has one \
                 batch_size",
                st.micro_batch_sizes
            ));
        }
        if !st.replica_samples.is_empty() {
            why.push(format!(
                "stage {g}'s replicas run different numbers of micro-batches; Mist has one \
                 gradient_accumulation_steps"
            ));
        } else if m * st.dp as u64 * plan.micro_batches != plan.global_batch {
            why.push(format!(
                "stage {g}: Mist needs batch_size × dp_size × gradient_accumulation_steps = \
                 global batch: {m} × {} × {} ≠ {}",
                st.dp, plan.micro_batches, plan.global_batch
            ));
        }
        if let Recompute::Selective | Recompute::Ops = st.recompute {
            why.push(format!(
                "stage {g} recomputes part of each block ({:?}); Mist checkpoints whole blocks \
                 (gradient_checkpointing counts them)",
                st.recompute
            ));
        }
        if st.sequence_parallel {
            why.push(format!(
                "stage {g} uses sequence parallelism; Mist's stage strategy has no entry for it"
            ));
        }
    }
    let last = &stages[stages.len() - 1];
    if stage_strategy(first) != stage_strategy(last) {
        why.push(format!(
            "Mist runs the embedding and the head with one pre_post_strategy_array \
             (benchmark_one_case.py); the plan's first stage runs {:?} and its last {:?}",
            stage_strategy(first),
            stage_strategy(last)
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

/// Mist's rank layout (`_map_stage_idx_to_ranks`): the device mesh is every node the plan uses
/// times the GPUs it uses on each; stages take ranks in Mist's order, and each of Mist's node
/// indices must be one cluster node.
fn layout(plan: &Plan) -> Result<Placed, Vec<String>> {
    let pp = plan.pipeline_depth().max(1);
    let mut why = Vec::new();
    let mut seen: Vec<GpuId> = Vec::new();
    // Each stage's GPUs in rank order: replicas grouped by node, TP fastest.
    let mut orders: Vec<Vec<GpuId>> = Vec::new();
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
        let mut reps: Vec<usize> = (0..st.dp as usize).collect();
        reps.sort_by_key(|&r| st.replica(r)[0].node);
        let order: Vec<GpuId> = reps.iter().flat_map(|&r| st.replica(r).to_vec()).collect();
        for &d in &order {
            if seen.contains(&d) {
                why.push(format!(
                    "GPU {d} is in two pipeline stages; Mist runs one rank, one stage, per GPU"
                ));
            }
            seen.push(d);
        }
        orders.push(order);
    }
    if !why.is_empty() {
        return Err(why);
    }
    // GPUs used per node: the mesh's num_gpus_per_node.
    let mut per_node: Vec<(u32, u32)> = Vec::new();
    for d in &seen {
        match per_node.iter_mut().find(|(n, _)| *n == d.node) {
            Some(e) => e.1 += 1,
            None => per_node.push((d.node, 1)),
        }
    }
    let gpn = per_node[0].1;
    if per_node.iter().any(|&(_, c)| c != gpn) {
        let counts: Vec<String> = per_node.iter().map(|(n, c)| format!("n{n}: {c}")).collect();
        return Err(vec![format!(
            "Mist's device mesh is num_nodes × num_gpus_per_node (HardwareConfig checks it \
             against WORLD_SIZE); the plan uses different numbers of GPUs on its nodes ({})",
            counts.join(", ")
        )]);
    }
    let num_nodes = per_node.len() as u32;
    // device_assignment of each stage.
    let mut assignment = Vec::new();
    for (g, order) in orders.iter().enumerate() {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for d in order {
            match runs.last_mut() {
                Some(r) if r.0 == d.node => r.1 += 1,
                _ => runs.push((d.node, 1)),
            }
        }
        let mut nodes: Vec<u32> = runs.iter().map(|r| r.0).collect();
        nodes.sort_unstable();
        nodes.dedup();
        if nodes.len() != runs.len() {
            why.push(format!(
                "stage {g}'s replicas cannot be ordered node by node (a TP group spans nodes \
                 between others); Mist gives a stage consecutive ranks"
            ));
        } else if runs.len() == 1 {
            assignment.push((1, runs[0].1));
        } else if runs.iter().all(|r| r.1 == gpn) {
            assignment.push((runs.len() as u32, gpn));
        } else {
            let parts: Vec<String> = runs.iter().map(|(n, c)| format!("{c} on n{n}")).collect();
            why.push(format!(
                "stage {g} has {} GPUs; Mist's device_assignment gives a stage whole nodes or \
                 part of one node",
                parts.join(", ")
            ));
        }
    }
    if !why.is_empty() {
        return Err(why);
    }
    // _map_stage_idx_to_ranks.
    let mut spare: Vec<u32> = (0..num_nodes).collect();
    let mut fragmented: Vec<(u32, u32)> = Vec::new(); // (Mist node, GPUs used), insertion order
    let mut mist_node: Vec<Option<u32>> = vec![None; num_nodes as usize]; // → cluster node
    let mut slots: Vec<Vec<Option<u32>>> = vec![vec![None; gpn as usize]; num_nodes as usize];
    let mut stages_on: Vec<Vec<usize>> = vec![Vec::new(); num_nodes as usize];
    for (g, (&(n, m), order)) in assignment.iter().zip(&orders).enumerate() {
        let start = if m == gpn {
            if spare.len() < n as usize {
                why.push(format!(
                    "stage {g}: Mist has no {n} spare whole nodes left for it"
                ));
                break;
            }
            let first = spare[0];
            spare.drain(..n as usize);
            first * gpn
        } else if let Some(f) = fragmented.iter_mut().find(|f| f.1 + m <= gpn) {
            let s = f.0 * gpn + f.1;
            f.1 += m;
            s
        } else if !spare.is_empty() {
            let node = spare.remove(0);
            fragmented.push((node, m));
            node * gpn
        } else {
            why.push(format!(
                "stage {g}: Mist has no node with {m} free GPUs left for it"
            ));
            break;
        };
        for (i, d) in order.iter().enumerate() {
            let rank = start + i as u32;
            let (j, slot) = ((rank / gpn) as usize, (rank % gpn) as usize);
            match mist_node[j] {
                None if mist_node.contains(&Some(d.node)) => {
                    why.push(format!(
                        "stage {g}: Mist puts its rank {rank} on the node that holds another \
                         node's GPUs; the plan's GPU {d} is on n{}",
                        d.node
                    ));
                }
                Some(c) if c != d.node => why.push(format!(
                    "stage {g}: Mist puts its rank {rank} on the node of n{c}'s GPUs; the plan \
                     puts it on n{}",
                    d.node
                )),
                _ => {
                    mist_node[j] = Some(d.node);
                    slots[j][slot] = Some(d.local);
                    if !stages_on[j].contains(&g) {
                        stages_on[j].push(g);
                    }
                }
            }
        }
    }
    if !why.is_empty() {
        why.dedup();
        return Err(why);
    }
    let mut nodes = Vec::new();
    let mut ranks = Vec::new();
    for j in 0..num_nodes as usize {
        let node = mist_node[j].expect("every node of the mesh holds a stage");
        let gpus: Vec<u32> = slots[j]
            .iter()
            .map(|s| s.expect("every slot is filled"))
            .collect();
        ranks.extend(gpus.iter().map(|&local| GpuId { node, local }));
        nodes.push(NodeLaunch {
            node,
            node_rank: j as u32,
            first_rank: j as u32 * gpn,
            gpus,
            stages: stages_on[j].clone(),
        });
    }
    Ok((RankLayout { nodes, ranks }, assignment))
}

fn dtype(p: Precision) -> &'static str {
    match p {
        Precision::Bf16 => "bfloat16",
        Precision::Fp16 => "float16",
        // FP8 is refused before export (`Target::precisions`).
        Precision::Fp32 | Precision::Tf32 | Precision::Fp8 | Precision::Fp8Rowwise => "float32",
    }
}

fn list<T: ToString>(v: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = v.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// `hetplan_mist.yaml`: the keys of Mist's `test-small-base.yaml`, from the model and the plan.
fn config(job: Job<'_>, layout: &RankLayout, assignment: &[(u32, u32)]) -> String {
    let (model, plan, cluster) = (job.model, job.plan, job.cluster);
    let cfg = model.transformer.as_ref().expect("checked: a transformer");
    let fam = family(model).expect("checked: a family");
    let pp = plan.pipeline_depth().max(1);
    let stages = &plan.stages[..pp];
    let gpn = layout.nodes[0].gpus.len();
    let (memory, nvlink) = mesh_gpus(cluster, layout);
    let mut s = format!(
        "# Mist strategy written by `hetplan export --to mist` (hetplan {}) for {} on {}.\n\
         # Run Mist's executor with it: see README.md.\n",
        env!("CARGO_PKG_VERSION"),
        model.name,
        cluster.name
    );
    s.push_str("print_config: true\nignore_warnings: true\nseed: null\nname: null\n");
    s.push_str(&format!(
        "training:\n  max_sequence_length: {}\n  vocab_size: {}\n  global_batch_size: {}\n  \
         params_dtype: {}\n  exec_dtype: {}\n  optimizer_dtype: float32\n  autocast_enabled: \
         false\n  optimizer_name: adamw\n",
        job.seq_len,
        cfg.vocab,
        plan.global_batch,
        dtype(plan.precision),
        dtype(plan.precision)
    ));
    s.push_str(&format!(
        "hardware:\n  gpu_type: null\n  num_nodes: {}\n  num_gpus_per_node: {gpn}\n  \
         # Fitted by Mist's profiling (its tuner uses them, its executor does not): copy them \
         from\n  # benchmark/mist/configs/experiment/template-<gpu>.yaml or pass them as \
         overrides (README.md).\n  gpu_gpu_comm_params: ???\n  cpu_gpu_comm_params: ???\n  \
         gpu_cpu_comm_params: ???\n  interference_model_params: ???\n  nvlink: {nvlink}\n  \
         memory_capacity: {memory}\n",
        layout.nodes.len()
    ));
    let partitions: Vec<u32> = stages.iter().map(|st| blocks(model, st)).collect();
    let ckpt: Vec<u32> = stages.iter().map(|st| checkpointed(model, st)).collect();
    s.push_str(&format!(
        "strategy:\n  enabled: true\n  layer_partitions: {}\n  device_assignment: {}\n  \
         gradient_checkpointing: {}\n  gradient_accumulation_steps: {}\n  stage_strategies:\n",
        list(partitions),
        list(assignment.iter().map(|(n, m)| format!("[{n}, {m}]"))),
        list(ckpt),
        plan.micro_batches
    ));
    for st in stages {
        s.push_str(&format!("  - {}\n", list(stage_strategy(st))));
    }
    s.push_str(&format!(
        "  pre_post_strategy: preset\n  pre_post_strategy_array: {}\n",
        list(stage_strategy(&stages[0]))
    ));
    s.push_str(
        "tuning:\n  enabled: false\n  zero_2_and_3_enabled: true\n  \
         activation_checkpointing_tuning_enabled: true\n  state_offloading_enabled: true\n  \
         activation_offloading_enabled: true\n  tuning_granularity: uniform-device-pp-mip\n  \
         sample_size: 30\n  pre_post_strategy: dp\n  pre_post_strategy_array: null\n\
         overlap: true\nuse_memory_buffer: true\nnccl_timeout: 120\nprofile: false\n\
         tiny_bench: true\nmemory_debug: false\nenable_advanced_opt_in_first_block: true\n\
         disable_tp_tuning: true\n",
    );
    let b = |x: bool| if x { "true" } else { "false" };
    let (norm, act, mlp) = match fam {
        "llama" => ("rmsnorm", "swiglu", "gated_mlp"),
        _ => ("layernorm", "gelu_fast", "mlp"),
    };
    let (pos, rot) = match cfg.position {
        PositionKind::Rotary => ("rotary", "1.0"),
        _ => ("absolute", "0.0"),
    };
    s.push_str(&format!(
        "model:\n  name: {fam}-{}\n  hidden_size: {}\n  intermediate_size: {}\n  \
         num_hidden_layers: {}\n  num_attention_heads: {}\n  num_heads_kv: {}\n  vocab_size: {}\n  \
         num_tokentypes: 0\n  position_embedding_type: {pos}\n  padding_idx: null\n  \
         rotary_emb_fraction: {rot}\n  rotary_emb_base: 10000.0\n  rotary_emb_interleaved: false\n  \
         tie_word_embeddings: {}\n  add_encoder: true\n  add_decoder: false\n  \
         encoder_attn_mask_type: {}\n  add_pooler: false\n  num_experts: null\n  \
         parallel_block: false\n  parallel_block_tied_norm: false\n  prenorm: true\n  \
         normalization: {norm}\n  activation_function: {act}\n  mlp_type: {mlp}\n  \
         qkv_proj_bias: {}\n  out_proj_bias: {}\n  mlp_fc1_bias: {}\n  mlp_fc2_bias: {}\n  \
         hidden_dropout: 0.0\n  attention_dropout: 0.0\n  scale_attn_weights: true\n  \
         use_flash_attn: true\n  bias_dropout_fusion: false\n  fp32_residual_connection: false\n  \
         fp16_lm_cross_entropy: true\n",
        sanitize(&model.name),
        cfg.hidden,
        cfg.ffn,
        cfg.layers,
        cfg.heads,
        cfg.kv_heads,
        cfg.vocab,
        b(cfg.tied_embeddings),
        if cfg.causal { "causal" } else { "padding" },
        b(cfg.attn_bias),
        b(cfg.attn_bias),
        b(cfg.mlp_bias),
        b(cfg.mlp_bias),
    ));
    s
}

/// The model's name as a YAML-safe word.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The smallest memory (GB) of the mesh's GPUs and whether all their nodes have NVLink.
fn mesh_gpus(cluster: &Cluster, layout: &RankLayout) -> (u32, bool) {
    let specs: Vec<&crate::gpu::GpuSpec> = (layout.nodes.iter())
        .map(|n| &cluster.gpu_types[cluster.nodes[n.node as usize].gpu_type.0])
        .collect();
    (
        specs
            .iter()
            .map(|g| g.datasheet_memory_gb)
            .min()
            .unwrap_or(0),
        specs.iter().all(|g| g.nvlink_bandwidth.is_some()),
    )
}

/// The export of `job` for Mist, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let (layout, assignment) =
        checked(job.model, job.plan).map_err(|reasons| ExportError::Unsupported {
            target: Target::Mist,
            reasons,
        })?;
    let pre = "# Mist's executor (benchmark/mist/exec of Dazz993/Mist; its Docker image puts the \
               repository at /workspace).\nMIST_EXEC=${MIST_EXEC:-/workspace/benchmark/mist/exec}\n\
               JOB_DIR=$(cd \"$(dirname \"$0\")\" && pwd)\n";
    let command = "\"$MIST_EXEC/benchmark_one_case.py\" --config-path \"$JOB_DIR\" --config-name \
                   hetplan_mist \"$@\"";
    let files = vec![
        ExportFile {
            path: "hetplan_mist.yaml".into(),
            contents: config(job, &layout, &assignment),
            executable: false,
        },
        ExportFile {
            path: "launch.sh".into(),
            contents: super::launch_script(
                job,
                &layout,
                "Mist",
                "Extra words are Hydra overrides (hardware.gpu_gpu_comm_params=[...])",
                Some((pre, command)),
                29500,
            ),
            executable: true,
        },
        ExportFile {
            path: "README.md".into(),
            contents: readme(job, &layout, &assignment),
            executable: false,
        },
    ];
    Ok(Export {
        target: Target::Mist,
        files,
        layout,
    })
}

fn readme(job: Job<'_>, layout: &RankLayout, assignment: &[(u32, u32)]) -> String {
    let plan: &Plan = job.plan;
    let pp = plan.pipeline_depth().max(1);
    let mut s = super::readme_head(job, "Mist", Target::Mist);
    s.push_str(&format!(
        "{} stages, global batch {} in {} gradient accumulation steps, sequence {}.\n\n\
         ## Files\n\n\
         - `hetplan_mist.yaml`: the config Mist's executor \
         (`benchmark/mist/exec/benchmark_one_case.py`) reads with Hydra: the model, the \
         training dtypes, the device mesh and the strategy. Per stage: `layer_partitions` \
         (transformer blocks; the embedding and the head run on the first and the last stage \
         with `pre_post_strategy_array`), `device_assignment` (`[nodes, GPUs per node]`), \
         `gradient_checkpointing` (checkpointed blocks) and `stage_strategies` (`[micro-batch, \
         DP, TP, shard weights, shard gradients, shard optimizer state, offloaded weights, \
         gradients, optimizer state, activations]`: hetplan's ZeRO-3/2/1 and offload \
         fractions).\n\
         - `launch.sh`: run it on every node with `NODE_RANK` (below) and `MASTER_ADDR` (the \
         address of node rank 0) set; it starts `torchrun` with the node's GPUs in \
         `CUDA_VISIBLE_DEVICES` and `benchmark_one_case.py --config-path <this directory> \
         --config-name hetplan_mist`, as Mist's README runs tuned configs (set `MIST_EXEC` to \
         your checkout's `benchmark/mist/exec`; Mist's image has it under `/workspace`).\n\n\
         `hardware.gpu_gpu_comm_params`, `cpu_gpu_comm_params`, `gpu_cpu_comm_params` and \
         `interference_model_params` are left `???`: Mist fits them to a cluster by profiling \
         and its config classes require them, though only its tuner reads them. Copy them from \
         Mist's `benchmark/mist/configs/experiment/template-<gpu>.yaml` for your GPUs, or give \
         them to `launch.sh` as Hydra overrides (`hardware.cpu_gpu_comm_params=[a,b]` ...).\n",
        pp, plan.global_batch, plan.micro_batches, job.seq_len
    ));
    s.push_str(&format!(
        "\n## Where each stage runs\n\n\
         Mist numbers ranks node by node on a mesh of {} nodes × {} GPUs \
         (`mist/parallel_state.py`, `_map_stage_idx_to_ranks`): a stage that fills whole nodes \
         takes the next spare ones, a stage on part of a node the first node with room; a \
         stage's replica `d` is its ranks `[d·TP, (d+1)·TP)`. Stages' device assignments: {}. \
         torchrun numbers ranks node by node in `--node_rank` order, local rank `i` on the \
         `i`-th GPU of `CUDA_VISIBLE_DEVICES`. So the node ranks and GPU lists below put every \
         stage on the GPUs the plan gave it: start each cluster node with its node rank.\n\n",
        layout.nodes.len(),
        layout.nodes[0].gpus.len(),
        list(assignment.iter().map(|(n, m)| format!("[{n}, {m}]")))
    ));
    s.push_str(&super::node_table(job.cluster, layout));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::catalog_model;

    fn cluster() -> Cluster {
        crate::cluster::spec::parse_cluster_toml(
            "name = \"mixed\"\n\
             [[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 2\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n\
             [[node_group]]\ngpu = \"v100-sxm2-32gb\"\ngpus_per_node = 2\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n",
        )
        .unwrap()
    }

    /// Three stages: one V100, both A100s at TP 2 with ZeRO-1 and checkpointing, the other
    /// V100.
    const PER_STAGE: &str = r#"{
      "global_batch": 16, "micro_batches": 8, "schedule": {"kind": "1f1b"},
      "stages": [
        {"layers": {"start": 0, "end": 3}, "devices": [{"node": 1, "local": 0}],
         "tp": 1, "dp": 1, "micro_batch_sizes": [2]},
        {"layers": {"start": 3, "end": 11}, "devices": [{"node": 0, "local": 0}, {"node": 0, "local": 1}],
         "tp": 2, "dp": 1, "micro_batch_sizes": [2], "zero": 1, "recompute": 3},
        {"layers": {"start": 11, "end": 14}, "devices": [{"node": 1, "local": 1}],
         "tp": 1, "dp": 1, "micro_batch_sizes": [2]}
      ]
    }"#;

    fn job_of(plan: &str) -> (Model, Cluster, crate::plan::ValidPlan) {
        let model = catalog_model("gpt3-125m").unwrap();
        let cluster = cluster();
        let plan: Plan = serde_json::from_str(plan).unwrap();
        let plan = crate::plan::ValidPlan::new(plan, &model, &cluster).unwrap();
        (model, cluster, plan)
    }

    #[test]
    fn per_stage_knobs_become_mist_stage_strategies() {
        let (model, cluster, plan) = job_of(PER_STAGE);
        let e = export(Job {
            model: &model,
            cluster: &cluster,
            plan: &plan,
            seq_len: 2048,
        })
        .unwrap();
        let y = &e
            .files
            .iter()
            .find(|f| f.path == "hetplan_mist.yaml")
            .unwrap()
            .contents;
        assert!(y.contains("layer_partitions: [2, 8, 2]"), "{y}");
        assert!(
            y.contains("device_assignment: [[1, 1], [1, 2], [1, 1]]"),
            "{y}"
        );
        assert!(y.contains("gradient_checkpointing: [0, 3, 0]"), "{y}");
        assert!(
            y.contains("  - [2, 1, 2, 0, 0, 1, 0.0, 0.0, 0.0, 0.0]"),
            "{y}"
        );
        assert!(
            y.contains("pre_post_strategy_array: [2, 1, 1, 0, 0, 0,"),
            "{y}"
        );
        assert!(y.contains("name: gpt2-"), "{y}");
        // Mist packs stages 0 and 2 on its node 0 (ranks 0 and 1): the V100 node launches
        // first, stage 0's GPU then stage 2's; the A100 node holds ranks 2, 3.
        let l = &e.layout;
        assert_eq!((l.nodes[0].node, l.nodes[0].gpus.clone()), (1, vec![0, 1]));
        assert_eq!((l.nodes[1].node, l.nodes[1].first_rank), (0, 2));
        assert_eq!(l.nodes[0].stages, vec![0, 2]);
    }

    #[test]
    fn what_mist_cannot_express_is_every_reason() {
        let (model, _, plan) = job_of(PER_STAGE);
        let mut p = plan.into_plan();
        // Stage 1: replicas at TP 1 with different micro-batches, selective recompute; the
        // last stage no longer matches the first (one pre/post strategy).
        p.stages[1].tp = 1;
        p.stages[1].dp = 2;
        p.stages[1].micro_batch_sizes = vec![1, 3];
        p.stages[1].recompute = Recompute::Selective;
        p.stages[2].zero = 1;
        let why = reasons(&model, &p);
        for needle in [
            "one batch_size",
            "part of each block",
            "pre_post_strategy_array",
        ] {
            assert!(why.iter().any(|w| w.contains(needle)), "{needle}: {why:?}");
        }
        // Per-replica TP degrees.
        let (_, _, plan) = job_of(PER_STAGE);
        let mut p = plan.into_plan();
        p.stages[1].replica_tp = vec![1, 1];
        p.stages[1].dp = 2;
        p.stages[1].tp = 1;
        p.stages[1].replica_tp = vec![1, 2];
        let why = reasons(&model, &p);
        assert!(why.iter().any(|w| w.contains("one tp_size")), "{why:?}");
    }

    #[test]
    fn nodes_with_different_gpu_counts_do_not_make_a_mesh() {
        let (model, _, plan) = job_of(PER_STAGE);
        let mut p = plan.into_plan();
        p.stages.truncate(2);
        p.stages[1].layers.end = 14;
        let why = reasons(&model, &p);
        assert!(
            why.iter()
                .any(|w| w.contains("num_nodes × num_gpus_per_node")),
            "{why:?}"
        );
    }
}
