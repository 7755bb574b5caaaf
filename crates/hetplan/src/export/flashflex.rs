//! FlashFlex, also called HexiScale (Relaxed-System-Lab/FlashFlex, Apache-2.0): several
//! pipelines of different shapes train one LLaMA model by data parallelism across them. The
//! export writes a `launch.sh` that starts `llama_train.py` with `torchrun` on every node with
//! the plan as FlashFlex's flags, and a README.
//!
//! Read from the repository's default branch (commit 5ee1726):
//! - `llama/arguments.py:48-53`: `--pp_layouts`, `--hetero_configs`, `--layer_partitions`, each
//!   a string that `hexiscale/process_args.py:19-22` `eval`s to a Python list:
//!   `--hetero_configs` `[[GPUs of each stage] per pipeline]` (a stage is one TP group, so the
//!   count is its TP degree), `--layer_partitions` `[[transformer layers of each stage] per
//!   pipeline]`, `--pp_layouts` `[[[global ranks of each stage] per pipeline]`.
//!   `:55` `--default_dp_type` `ddp|zero2|zero3` (one type for every layer,
//!   `llama/modules/hybrid_parallel_model_dist.py:265-267`; without it, ZeRO-2 where the
//!   pipelines agree on the TP degree of a layer and DDP where they differ, `:250-260`).
//!   `:61` `--total-layer-num`; `:64` `--checkpoint-layers` (every transformer layer, `:272-274`
//!   of `hybrid_parallel_model_dist.py`), `:67` `--checkpoint-all` (embedding, norm, head);
//!   `:39` `--mixed_precision fp32|fp16|bf16`; `:11` `--model_size llama-7b|13b|30b|70b`;
//!   `:83` `--global_bsz_size` and `:86` `--chunks`, one integer per pipeline (`nargs='+'`):
//!   its samples per iteration and its micro-batches; `:111` `--pipeline-type` `Gpipe` or
//!   `1F1B` (`llama_train.py:158-166`).
//! - `hexiscale/process_args.py:26`: `args.seq_length = 4096` overrides any sequence length;
//!   `:42-49`: every TP degree divides the heads, the ranks sum to the world size, every
//!   pipeline's partition sums to `--total-layer-num`; `:72-79`: each stage's `pp_layouts`
//!   ranks are sorted, so a TP group's ranks are in rank order.
//! - `hexiscale/gen_hetero_groups.py:284-339` (`gen_layouts`): without `--pp_layouts`, ranks are
//!   consecutive pipeline by pipeline, stage by stage; `:461-485`: stage `s` of a pipeline
//!   runs its `layer_partitions` slice, the embedding added to the first stage and the final
//!   norm and head to the last; `:173-197` (`gen_layer_dp_rank_group`): a layer's gradients are
//!   synchronised between the pipelines' TP groups, the smaller TP degrees' ranks repeated
//!   `max // tp` times (so every degree divides the largest).
//! - `hexiscale/utils.py:12-40` (`chunk_batch`): a pipeline's batch is split by `Tensor.chunk`
//!   into `--chunks` micro-batches.
//! - `llama_train.py:19-41`: the data loader gives rank `r` the batch size of the last pipeline
//!   (in list order) whose first rank (`pp_layouts[i][0][0]`) is `<= r`, so each pipeline's
//!   ranks must follow its first rank before the next pipeline's; `:62`: local rank `i` runs on
//!   `cuda:i`. `llama/sudo_dataset.py`: the tokens are random (a benchmark, not a data set).
//! - `llama/llama_config_utils.py:10-20, 36-64`: the model is built from
//!   `llama/llama-config/<size>/params.json` (hidden 4096/5120/6656/8192 with 32/40/52/64
//!   heads, no KV-head count: multi-head attention), vocabulary 32000, RMSNorm, SwiGLU,
//!   rotary, no biases; `--total-layer-num` sets the layer count (`process_args.py:28-29`).
//! - `scripts/train.sh`: the launch, `torchrun $DISTRIBUTED_ARGS llama_train.py --model_size
//!   ... --mixed_precision fp16 --use-flash-attn --total-layer-num ... --hetero_configs ...
//!   --layer_partitions ... --chunks ... --global_bsz_size ... --accum-iter 1 --run-iter ...
//!   --fp16` (`--fp16`, `--bf16`, `--use-flash-attn`: Megatron's flags,
//!   `third_party/megatron/arguments.py:762, 899, 901`).
//!
//! hetplan's plan maps to FlashFlex exactly when replica `i` of every stage forms pipeline `i`:
//! every stage has the same number of replicas, replica `i` has one micro-batch size in every
//! stage, all pipelines share the plan's layer split. The export always writes `--pp_layouts`
//! with the ranks torchrun gives: nodes in the order pipeline 0, 1, ... first use them.

use super::ranks::{NodeLaunch, RankLayout};
use super::{Export, ExportError, ExportFile, Job, Target};
use crate::cluster::GpuId;
use crate::model::transformer::{MlpKind, NormKind, PositionKind};
use crate::model::{LayerKind, Model};
use crate::plan::{Plan, Precision, Recompute, Schedule};

/// The sequence length `update_args` forces (`hexiscale/process_args.py:26`).
pub const SEQ_LEN: u64 = 4096;

/// FlashFlex's model sizes: `--model_size`, hidden size, heads (`llama/llama-config/*/params.json`).
const SIZES: [(&str, u64, u64); 4] = [
    ("llama-7b", 4096, 32),
    ("llama-13b", 5120, 40),
    ("llama-30b", 6656, 52),
    ("llama-70b", 8192, 64),
];

/// LLaMA's FFN width for `hidden` (`multiple_of` 256 in `params.json`).
fn llama_ffn(hidden: u64) -> u64 {
    (8 * hidden / 3).div_ceil(256) * 256
}

/// FlashFlex's `--model_size` for `model`, or why it has none.
fn model_size(model: &Model) -> Result<&'static str, Vec<String>> {
    let Some(cfg) = &model.transformer else {
        return Err(vec![format!(
            "FlashFlex trains LLaMA only (llama_train.py, --model_size); {} is a layer list \
             without a transformer",
            model.name
        )]);
    };
    let mut why = super::quirk_reasons(cfg, "FlashFlex", &[]);
    if cfg.moe.is_some() {
        why.push("FlashFlex trains dense LLaMA; the model is a mixture of experts".into());
    }
    if cfg.parallel_attn || cfg.shared_norm {
        why.push(
            "FlashFlex's LLaMA block runs attention then the MLP; the model runs them in parallel"
                .into(),
        );
    }
    if (cfg.norm, cfg.mlp, cfg.position)
        != (NormKind::RmsNorm, MlpKind::SwiGlu, PositionKind::Rotary)
    {
        why.push(format!(
            "FlashFlex trains LLaMA (RMSNorm, SwiGLU, rotary; llama_config_utils.py); the model \
             has {:?}, {:?}, {:?}",
            cfg.norm, cfg.mlp, cfg.position
        ));
    }
    if cfg.kv_heads != cfg.heads {
        why.push(format!(
            "FlashFlex's LLaMA configs have multi-head attention (params.json has no KV-head \
             count); the model has {} KV heads for {} heads",
            cfg.kv_heads, cfg.heads
        ));
    }
    let size = SIZES.iter().find(|s| s.1 == cfg.hidden && s.2 == cfg.heads);
    if size.is_none() {
        why.push(format!(
            "FlashFlex's --model_size is llama-7b, -13b, -30b or -70b (hidden 4096, 5120, 6656, \
             8192 with 32, 40, 52, 64 heads); the model has hidden {} with {} heads",
            cfg.hidden, cfg.heads
        ));
    }
    if cfg.ffn != llama_ffn(cfg.hidden) {
        why.push(format!(
            "FlashFlex's LLaMA has LLaMA's FFN width for hidden {} ({}); the model's is {}",
            cfg.hidden,
            llama_ffn(cfg.hidden),
            cfg.ffn
        ));
    }
    if cfg.vocab != 32000 {
        why.push(format!(
            "FlashFlex's LLaMA has a vocabulary of 32000; the model's is {}",
            cfg.vocab
        ));
    }
    if cfg.tied_embeddings || cfg.attn_bias || cfg.mlp_bias {
        why.push("FlashFlex's LLaMA has untied embeddings and no biases; the model differs".into());
    }
    match size {
        Some(s) if why.is_empty() => Ok(s.0),
        _ => Err(why),
    }
}

/// Why FlashFlex cannot train `model` under any plan.
pub fn model_reasons(model: &Model) -> Vec<String> {
    model_size(model).err().unwrap_or_default()
}

/// Every reason FlashFlex cannot run `plan` of `model` at `seq_len` (empty: it can).
pub fn reasons(model: &Model, plan: &Plan, seq_len: u64) -> Vec<String> {
    checked(model, plan, seq_len).err().unwrap_or_default()
}

/// The DP type (`--default_dp_type`) of a ZeRO stage.
fn dp_type(zero: u8) -> Option<&'static str> {
    match zero {
        0 => Some("ddp"),
        2 => Some("zero2"),
        3 => Some("zero3"),
        _ => None,
    }
}

/// The rank layout when FlashFlex runs the plan; every reason otherwise.
fn checked(model: &Model, plan: &Plan, seq_len: u64) -> Result<RankLayout, Vec<String>> {
    let mut why = model_reasons(model);
    let Some(first) = plan.stages.first() else {
        return Err(vec!["the plan has no stages".into()]);
    };
    if seq_len != SEQ_LEN {
        why.push(format!(
            "FlashFlex trains at sequence {SEQ_LEN} whatever it is given \
             (hexiscale/process_args.py:26); the job's sequence is {seq_len}"
        ));
    }
    if let Schedule::Interleaved { .. } = plan.schedule {
        why.push(
            "FlashFlex's schedules are Gpipe and 1F1B (--pipeline-type, llama_train.py:158); \
             the plan interleaves"
                .into(),
        );
    }
    let dps: Vec<u32> = plan.stages.iter().map(|s| s.dp).collect();
    if dps.iter().any(|&d| d != first.dp) {
        why.push(format!(
            "FlashFlex's data parallelism is across whole pipelines (--hetero_configs): every \
             stage needs the same number of replicas, replica i of each stage forming pipeline \
             i; the plan's stages have {dps:?}"
        ));
    }
    let heads = model.transformer.as_ref().map_or(0, |c| c.heads);
    for (g, st) in plan.stages.iter().enumerate() {
        for r in 0..st.dp as usize {
            let t = st.tp_of(r) as u64;
            if heads > 0 && !heads.is_multiple_of(t) {
                why.push(format!(
                    "stage {g} replica {r} has TP {t}, which does not divide the {heads} heads \
                     (process_args.py:44)"
                ));
            }
        }
        if st.sequence_parallel {
            why.push(format!(
                "stage {g} uses sequence parallelism; FlashFlex's --seq-parallel is one switch \
                 that none of its scripts uses, and the export leaves it off"
            ));
        }
        if !st.offload.is_none() {
            why.push(format!(
                "stage {g} offloads {}; FlashFlex offloads nothing",
                st.offload
            ));
        }
        if let Recompute::Selective | Recompute::Layers(_) | Recompute::Ops = st.recompute {
            why.push(format!(
                "stage {g} checkpoints {:?}; FlashFlex checkpoints every transformer layer of \
                 every stage (--checkpoint-layers) or none",
                st.recompute
            ));
        }
        if dp_type(st.zero).is_none() {
            why.push(format!(
                "stage {g} uses ZeRO-{}; FlashFlex's DP types are ddp, zero2 and zero3 \
                 (--default_dp_type)",
                st.zero
            ));
        }
        if st.zero > 0 && !st.replica_tp.is_empty() && st.replica_tp.iter().any(|&t| t != st.tp) {
            why.push(format!(
                "stage {g} shards with ZeRO-{} across replicas of different TP degrees; \
                 FlashFlex applies only DDP where the pipelines' TP degrees differ \
                 (hybrid_parallel_model_dist.py:256-258)",
                st.zero
            ));
        }
        for r in 0..st.dp as usize {
            if let Some(&n) = st.replica_samples.get(r) {
                let m = st.micro_batch_sizes.get(r).copied().unwrap_or(1).max(1);
                if !n.is_multiple_of(m) {
                    why.push(format!(
                        "stage {g} replica {r} runs {n} samples in micro-batches of {m}; \
                         FlashFlex splits a pipeline's batch evenly into --chunks pieces \
                         (Tensor.chunk, hexiscale/utils.py:23)"
                    ));
                }
            }
        }
    }
    let same =
        |f: &dyn Fn(&crate::plan::Stage) -> String| plan.stages.iter().all(|s| f(s) == f(first));
    if !same(&|s| s.zero.to_string()) {
        why.push(
            "FlashFlex takes one --default_dp_type for every layer; the plan's stages use \
             different ZeRO stages"
                .into(),
        );
    }
    if !same(&|s| format!("{:?}", s.recompute)) {
        why.push(
            "FlashFlex checkpoints every layer or none (--checkpoint-layers); the plan's stages \
             differ"
                .into(),
        );
    }
    if why.is_empty() {
        // Pipeline i's micro-batch size and count are the same in every stage.
        for r in 0..first.dp as usize {
            let steps: Vec<(u64, u64)> = (plan.stages.iter())
                .map(|s| {
                    let (n, _) = s.replica_steps(r, plan.micro_batches);
                    (s.micro_batch_sizes[r], n)
                })
                .collect();
            if steps.iter().any(|&x| x != steps[0]) {
                why.push(format!(
                    "replica {r} of each stage forms FlashFlex pipeline {r}, which has one \
                     micro-batch size and count (--global_bsz_size, --chunks); the plan's \
                     (size, count) per stage are {steps:?}"
                ));
            }
        }
        let total: u64 = batches(plan).iter().map(|b| b.0).sum();
        if why.is_empty() && total != plan.global_batch {
            why.push(format!(
                "the pipelines' batches sum to {total}, not the plan's global batch {}",
                plan.global_batch
            ));
        }
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

/// Per pipeline: `--global_bsz_size` (its samples per iteration) and `--chunks`.
fn batches(plan: &Plan) -> Vec<(u64, u64)> {
    let st = &plan.stages[0];
    (0..st.dp as usize)
        .map(|r| {
            let (n, _) = st.replica_steps(r, plan.micro_batches);
            (st.micro_batch_sizes[r] * n, n)
        })
        .collect()
}

/// Every pipeline's GPUs: `[pipeline][stage][TP rank]`.
fn pipelines(plan: &Plan) -> Vec<Vec<Vec<GpuId>>> {
    (0..plan.stages[0].dp as usize)
        .map(|r| plan.stages.iter().map(|s| s.replica(r).to_vec()).collect())
        .collect()
}

/// Nodes in the order pipeline 0, 1, ... first use them, each node's GPUs in that order.
fn layout(plan: &Plan) -> Result<RankLayout, Vec<String>> {
    let mut why = Vec::new();
    for (g, st) in plan.stages.iter().enumerate() {
        let need: usize = (0..st.dp as usize).map(|r| st.tp_of(r) as usize).sum();
        if st.dp == 0 || st.tp == 0 || need != st.devices.len() {
            why.push(format!(
                "stage {g} has {} GPUs for {} replicas of TP {}",
                st.devices.len(),
                st.dp,
                st.tp
            ));
        }
    }
    if !why.is_empty() || plan.stages.iter().any(|s| s.dp != plan.stages[0].dp) {
        return Err(why);
    }
    let pipes = pipelines(plan);
    let mut nodes: Vec<(u32, Vec<u32>, Vec<usize>)> = Vec::new();
    let mut seen: Vec<GpuId> = Vec::new();
    for pipe in &pipes {
        for (g, stage) in pipe.iter().enumerate() {
            for &d in stage {
                if seen.contains(&d) {
                    why.push(format!(
                        "GPU {d} runs two stages or replicas; FlashFlex runs one rank per GPU"
                    ));
                    continue;
                }
                seen.push(d);
                let i = match nodes.iter().position(|n| n.0 == d.node) {
                    Some(i) => i,
                    None => {
                        nodes.push((d.node, Vec::new(), Vec::new()));
                        nodes.len() - 1
                    }
                };
                nodes[i].1.push(d.local);
                if !nodes[i].2.contains(&g) {
                    nodes[i].2.push(g);
                }
            }
        }
    }
    if !why.is_empty() {
        return Err(why);
    }
    let mut first_rank = 0u32;
    let mut launches = Vec::new();
    let mut ranks = Vec::new();
    for (k, (node, gpus, stages)) in nodes.into_iter().enumerate() {
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
    let layout = RankLayout {
        nodes: launches,
        ranks,
    };
    let pp = pp_layouts(&pipes, &layout);
    for (i, pipe) in pp.iter().enumerate() {
        for (g, stage) in pipe.iter().enumerate() {
            if stage.windows(2).any(|w| w[0] > w[1]) {
                why.push(format!(
                    "pipeline {i} stage {g}'s GPUs get ranks {stage:?}; FlashFlex sorts a TP \
                     group's ranks (process_args.py:78), which would reorder its TP ranks"
                ));
            }
        }
    }
    // llama_train.py:33-36: rank r takes the batch of the last pipeline whose head is <= r.
    let heads: Vec<usize> = pp
        .iter()
        .map(|p| p[0].iter().copied().min().unwrap_or(0))
        .collect();
    for (i, pipe) in pp.iter().enumerate() {
        for &r in pipe.iter().flatten() {
            let got = (0..heads.len()).rfind(|&j| heads[j] <= r);
            if got != Some(i) {
                why.push(format!(
                    "rank {r} of pipeline {i} would read pipeline {}'s batches: FlashFlex's data \
                     loader gives a rank the last pipeline whose first rank is not above it \
                     (llama_train.py:33-36), and the plan's pipelines interleave on its nodes",
                    got.map_or("none".to_string(), |j| j.to_string())
                ));
                break;
            }
        }
    }
    if why.is_empty() {
        Ok(layout)
    } else {
        Err(why)
    }
}

/// `--pp_layouts`: every stage's global ranks, pipeline by pipeline.
fn pp_layouts(pipes: &[Vec<Vec<GpuId>>], layout: &RankLayout) -> Vec<Vec<Vec<usize>>> {
    let rank_of = |d: &GpuId| {
        (layout.ranks.iter())
            .position(|r| r == d)
            .expect("every GPU has a rank")
    };
    (pipes.iter())
        .map(|p| p.iter().map(|s| s.iter().map(rank_of).collect()).collect())
        .collect()
}

/// Each stage's transformer blocks (FlashFlex adds the embedding and the head itself).
fn layer_partition(model: &Model, plan: &Plan) -> Vec<usize> {
    (plan.stages.iter())
        .map(|st| {
            (st.layers.iter())
                .filter(|&i| {
                    (model.layers.get(i)).is_some_and(|l| l.kind == LayerKind::Transformer)
                })
                .count()
        })
        .collect()
}

/// A Python list literal of `v` (what `eval` reads).
fn py<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("JSON values serialise")
}

/// The arguments of `llama_train.py`.
pub fn args(model: &Model, plan: &Plan, layout: &RankLayout) -> Vec<String> {
    let pipes = pipelines(plan);
    let hetero: Vec<Vec<usize>> = pipes
        .iter()
        .map(|p| p.iter().map(|s| s.len()).collect())
        .collect();
    let parts = layer_partition(model, plan);
    let layers: Vec<Vec<usize>> = vec![parts.clone(); pipes.len()];
    let b = batches(plan);
    let st = &plan.stages[0];
    let mut a: Vec<String> = Vec::new();
    fn push(a: &mut Vec<String>, k: &str, v: String) {
        a.push(k.to_string());
        a.push(v);
    }
    push(
        &mut a,
        "--model_size",
        model_size(model).unwrap_or("llama-7b").into(),
    );
    let (mp, flag) = match plan.precision {
        Precision::Bf16 => ("bf16", Some("--bf16")),
        Precision::Fp16 => ("fp16", Some("--fp16")),
        // FP8 is refused before export (`Target::precisions`).
        Precision::Fp32 | Precision::Tf32 | Precision::Fp8 | Precision::Fp8Rowwise => {
            ("fp32", None)
        }
    };
    push(&mut a, "--mixed_precision", mp.into());
    push(
        &mut a,
        "--total-layer-num",
        parts.iter().sum::<usize>().to_string(),
    );
    push(&mut a, "--hetero_configs", py(&hetero));
    push(&mut a, "--layer_partitions", py(&layers));
    push(&mut a, "--pp_layouts", py(&pp_layouts(&pipes, layout)));
    a.push("--global_bsz_size".into());
    a.extend(b.iter().map(|x| x.0.to_string()));
    a.push("--chunks".into());
    a.extend(b.iter().map(|x| x.1.to_string()));
    push(
        &mut a,
        "--default_dp_type",
        dp_type(st.zero).unwrap_or("ddp").into(),
    );
    push(
        &mut a,
        "--pipeline-type",
        match plan.schedule {
            Schedule::OneFOneB => "1F1B",
            _ => "Gpipe",
        }
        .into(),
    );
    if st.recompute == Recompute::Full {
        a.push("--checkpoint-layers".into());
    }
    push(&mut a, "--accum-iter", "1".into());
    if let Some(f) = flag {
        a.push(f.into());
    }
    a.push("--use-flash-attn".into());
    a
}

/// The export of `job` for FlashFlex, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let plan: &Plan = job.plan;
    let layout =
        checked(job.model, plan, job.seq_len).map_err(|reasons| ExportError::Unsupported {
            target: Target::Flashflex,
            reasons,
        })?;
    let args = args(job.model, plan, &layout);
    let files = vec![
        ExportFile {
            path: "launch.sh".into(),
            contents: launch(job, &layout, &args),
            executable: true,
        },
        ExportFile {
            path: "README.md".into(),
            contents: readme(job, &layout, &args),
            executable: false,
        },
    ];
    Ok(Export {
        target: Target::Flashflex,
        files,
        layout,
    })
}

fn launch(job: Job<'_>, layout: &RankLayout, args: &[String]) -> String {
    let pre = "# FlashFlex's checkout (Relaxed-System-Lab/FlashFlex): llama_train.py reads \
               ./llama/llama-config, so it runs from there (default: this directory).\n\
               cd \"${FLASHFLEX:-.}\"\n";
    let words: Vec<String> = args.iter().map(|a| super::shell_quote(a)).collect();
    let command = format!(
        "llama_train.py \\\n  {} \\\n  --run-iter \"${{RUN_ITER:-20}}\" \"$@\"",
        words.join(" ")
    );
    super::launch_script(
        job,
        layout,
        "FlashFlex",
        "Extra arguments of llama_train.py follow (--profile, --learning_rate ...); RUN_ITER \
         sets --run-iter",
        Some((pre, &command)),
        9996,
    )
}

fn readme(job: Job<'_>, layout: &RankLayout, args: &[String]) -> String {
    let plan: &Plan = job.plan;
    let pipes = pipelines(plan);
    let pp = pp_layouts(&pipes, layout);
    let b = batches(plan);
    let mut s = super::readme_head(job, "FlashFlex", Target::Flashflex);
    s.push_str(&format!(
        "{} pipelines of {} stages (replica i of every stage is pipeline i); global batch {}; \
         sequence {}.\n\n## Files\n\n\
         - `launch.sh`: run it on every node with `NODE_RANK` (below), `MASTER_ADDR` (the \
         address of node rank 0) and `FLASHFLEX` (unless run from there: your checkout of Relaxed-System-Lab/FlashFlex, \
         built as its `Dockerfile` says) set. It starts `torchrun` with the node's GPUs in \
         `CUDA_VISIBLE_DEVICES` and `llama_train.py`, as `scripts/train.sh` does.\n\n\
         The arguments every node passes:\n\n    {}\n\n\
         `--hetero_configs` is each pipeline's GPUs per stage (a stage is one TP group), \
         `--layer_partitions` each stage's transformer layers (FlashFlex adds the embedding to \
         the first stage and the norm and head to the last), `--pp_layouts` each stage's global \
         ranks, `--global_bsz_size` and `--chunks` each pipeline's samples and micro-batches per \
         iteration. FlashFlex trains on random tokens (`llama/sudo_dataset.py`) for `--run-iter` \
         iterations: it is a benchmark of the plan, not a training run on your data.\n\n\
         ## Pipelines\n\n",
        pipes.len(),
        plan.stages.len(),
        plan.global_batch,
        job.seq_len,
        args.iter()
            .map(|a| super::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    for (i, (p, ranks)) in pipes.iter().zip(&pp).enumerate() {
        let stages: Vec<String> = (p.iter().zip(ranks))
            .map(|(gpus, rs)| {
                let g: Vec<String> = gpus.iter().map(|d| d.to_string()).collect();
                let r: Vec<String> = rs.iter().map(|k| k.to_string()).collect();
                format!(
                    "TP {} on {} (ranks {})",
                    gpus.len(),
                    g.join(", "),
                    r.join(", ")
                )
            })
            .collect();
        s.push_str(&format!(
            "- pipeline {i}: {} samples in {} micro-batches; {}\n",
            b[i].0,
            b[i].1,
            stages.join("; ")
        ));
    }
    s.push_str(
        "\n## Where each rank runs\n\n\
         torchrun numbers ranks node by node in `--node_rank` order, local rank `i` on the \
         `i`-th GPU of `CUDA_VISIBLE_DEVICES` (`llama_train.py` sets `cuda:<local rank>`); \
         `--pp_layouts` names every stage's ranks in that numbering. hetplan numbers the nodes \
         in the order pipeline 0, 1, ... first use them, so each pipeline's ranks follow its \
         first rank, as FlashFlex's data loader needs. Start each cluster node with its node \
         rank:\n\n",
    );
    s.push_str(&super::node_table(job.cluster, layout));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::catalog_model;

    /// One node of two A100s, one of four V100s.
    fn cluster() -> crate::cluster::Cluster {
        crate::cluster::spec::parse_cluster_toml(
            "name = \"mixed\"\n\
             [[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 2\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n\
             [[node_group]]\ngpu = \"v100-sxm2-32gb\"\ngpus_per_node = 4\nnodes = 1\ninter_node_bandwidth = \"100 Gbps\"\n",
        )
        .unwrap()
    }

    /// Pipeline 0: the two A100s at TP 1; pipeline 1: the V100s at TP 2.
    pub(crate) const TWO_PIPELINES: &str = r#"{
      "global_batch": 16, "micro_batches": 4, "schedule": {"kind": "1f1b"},
      "stages": [
        {"layers": {"start": 0, "end": 17},
         "devices": [{"node": 0, "local": 0}, {"node": 1, "local": 0}, {"node": 1, "local": 1}],
         "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2], "recompute": "full"},
        {"layers": {"start": 17, "end": 34},
         "devices": [{"node": 0, "local": 1}, {"node": 1, "local": 2}, {"node": 1, "local": 3}],
         "tp": 2, "replica_tp": [1, 2], "dp": 2, "micro_batch_sizes": [2, 2], "recompute": "full"}
      ]
    }"#;

    fn job_of(plan: &str) -> (Model, crate::cluster::Cluster, crate::plan::ValidPlan) {
        let model = catalog_model("llama2-7b").unwrap();
        let cluster = cluster();
        let plan: Plan = serde_json::from_str(plan).unwrap();
        let plan = crate::plan::ValidPlan::new(plan, &model, &cluster).unwrap();
        (model, cluster, plan)
    }

    #[test]
    fn two_pipelines_of_different_tp_export() {
        let (model, cluster, plan) = job_of(TWO_PIPELINES);
        let job = Job {
            model: &model,
            cluster: &cluster,
            plan: &plan,
            seq_len: SEQ_LEN,
        };
        let e = export(job).unwrap();
        let launch = &e
            .files
            .iter()
            .find(|f| f.path == "launch.sh")
            .unwrap()
            .contents;
        for needle in [
            "--model_size llama-7b",
            "--hetero_configs '[[1,1],[2,2]]'",
            "--layer_partitions '[[16,16],[16,16]]'",
            "--pp_layouts '[[[0],[1]],[[2,3],[4,5]]]'",
            "--global_bsz_size 8 8 --chunks 4 4",
            "--default_dp_type ddp",
            "--pipeline-type 1F1B",
            "--checkpoint-layers",
            "--total-layer-num 32",
        ] {
            assert!(launch.contains(needle), "{needle}: {launch}");
        }
        assert_eq!(e.layout.world_size(), 6);
        let mut all = e.layout.ranks.clone();
        all.sort();
        assert_eq!(all, plan.devices(), "every GPU once");
        assert!(reasons(&model, &plan, SEQ_LEN).is_empty());
    }

    #[test]
    fn what_flashflex_cannot_express_is_every_reason() {
        let (model, _, plan) = job_of(TWO_PIPELINES);
        let mut p = plan.into_plan();
        p.stages[0].zero = 1;
        p.stages[1].recompute = Recompute::Selective;
        p.stages[1].dp = 3;
        p.stages[0].micro_batch_sizes = vec![1, 2];
        p.schedule = Schedule::Interleaved { virtual_stages: 2 };
        let why = reasons(&model, &p, 2048);
        for needle in [
            "sequence 4096",
            "interleaves",
            "same number of replicas",
            "ZeRO-1",
            "checkpoints",
            "one --default_dp_type",
        ] {
            assert!(why.iter().any(|w| w.contains(needle)), "{needle}: {why:?}");
        }
        // Not LLaMA: every reason is the model's.
        let gpt = catalog_model("gpt3-125m").unwrap();
        assert!(!model_reasons(&gpt).is_empty());
        // Per-pipeline micro-batch sizes differ between stages.
        let (_, _, plan) = job_of(TWO_PIPELINES);
        let mut p = plan.into_plan();
        p.stages[0].micro_batch_sizes = vec![1, 3];
        let why = reasons(&model, &p, SEQ_LEN);
        assert!(
            why.iter().any(|w| w.contains("micro-batch size and count")),
            "{why:?}"
        );
    }
}
