//! Megatron-LM: `pretrain_gpt.py` arguments for the model and the plan, one `torchrun` per node,
//! and a README.
//!
//! Flags were read from Megatron-LM d98e8a6 (core 0.19, `megatron/training/arguments.py`; the
//! model-shape flags are generated from `TransformerConfig`'s fields by
//! `ArgumentGroupFactory`, `--num-query-groups` from `num_query_groups`):
//! - shape: `--num-layers --hidden-size --ffn-hidden-size --num-attention-heads
//!   [--group-query-attention --num-query-groups] [--kv-channels] --seq-length
//!   --max-position-embeddings --position-embedding-type {learned_absolute,rope}
//!   --normalization {LayerNorm,RMSNorm} [--swiglu] [--untie-embeddings-and-output-weights]
//!   [--disable-bias-linear] [--add-qkv-bias] [--qk-layernorm] [--multi-latent-attention
//!   [--q-lora-rank] --kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim --v-head-dim]
//!   [--window-size L,0
//!   [--window-attn-skip-freq [1,0,...]]] --attention-backend {flash,unfused}`, MoE
//!   `--num-experts --moe-router-topk --moe-ffn-hidden-size [--moe-layer-freq [0,1,...]]
//!   [--moe-shared-expert-intermediate-size]`;
//! - parallelism: `--tensor-model-parallel-size --pipeline-model-parallel-size
//!   [--expert-model-parallel-size] [--expert-tensor-parallel-size] [--moe-expert-capacity-factor] [--context-parallel-size [--cp-comm-type a2a]]
//!   --pipeline-model-parallel-layout` (core 0.13+: `E` embedding, `t` decoder layer, `L` loss,
//!   `|` between stages, stage `i = vpp_rank·PP + pp_rank`; it sets the virtual pipeline size,
//!   so `--num-virtual-stages-per-pipeline-rank` must not be given beside it),
//!   `--sequence-parallel [--tp-comm-overlap]`;
//! - batches: `--micro-batch-size --global-batch-size` (micro-batches = GBS / (MBS·DP));
//! - memory: `--recompute-granularity {selective,full} --recompute-method {uniform,block}
//!   --recompute-num-layers N` (block: the first N layers of each stage, as hetplan's "k
//!   layers"), ZeRO-1 `--use-distributed-optimizer`, ZeRO-2/3 without pipelining
//!   `--use-megatron-fsdp --data-parallel-sharding-strategy {optim_grads,optim_grads_params}`,
//!   `--overlap-grad-reduce --overlap-param-gather` (what hetplan's Megatron estimate assumes),
//!   `--optimizer-cpu-offload --optimizer-offload-fraction F --use-precision-aware-optimizer`;
//! - precision `--bf16` / `--fp16` (FP8: `--bf16 --fp8-format hybrid [--fp8-param-gather]`),
//!   the gradients' type where the plan's is not the flag's default (`collective_dtypes`:
//!   `--grad-reduce-in-bf16`, `--accumulate-allreduce-grads-in-fp32`); data `--mock-data --tokenizer-type NullTokenizer
//!   --vocab-size V` (as `examples/llama/train_llama3_8b_h100_fp8.sh` runs without a dataset).

use super::ranks::{self, RankLayout};
use super::{shell_quote, Export, ExportError, ExportFile, Job, Target};
use crate::model::{AttnImpl, Departure, LayerKind, MlpKind, Model, NormKind, PositionKind};
use crate::plan::runtime::Runtime;
use crate::plan::{Plan, Precision, Recompute};

/// The element types of the data-parallel collectives (`collective_dtypes`) Megatron-LM's
/// flags can set, and why not the others. Gradients: its `main_grad` buffers are FP32 with
/// `--accumulate-allreduce-grads-in-fp32`, which `--bf16` turns on unless
/// `--grad-reduce-in-bf16` is given, and the parameters' type otherwise (arguments.py,
/// `validate_args`; distributed/distributed_data_parallel.py); under Megatron-FSDP (ZeRO-2/3)
/// `--megatron-fsdp-main-grads-dtype` sets them (FP32, BF16 or FP16; `auto`, the parameters').
/// Parameters: gathered in the training precision, or in FP8 with `--fp8-param-gather`
/// (validated with the plan).
fn collective_dtype_reasons(plan: &Plan) -> Vec<String> {
    use Precision::{Bf16, Fp16, Fp32, Fp8};
    let mut why = Vec::new();
    if let Some(g) = plan.collective_dtypes.gradients {
        let (allowed, flags): (&[Precision], &str) = match plan.precision {
            _ if plan.runs_megatron_fsdp() => (
                &[Fp32, Bf16, Fp16],
                "FP32, BF16 or FP16 (--megatron-fsdp-main-grads-dtype)",
            ),
            Bf16 | Fp8 => (&[Fp32, Bf16], "FP32 or, with --grad-reduce-in-bf16, BF16"),
            Fp16 => (
                &[Fp16, Fp32],
                "FP16 or, with --accumulate-allreduce-grads-in-fp32, FP32",
            ),
            _ => (&[Fp32], "FP32"),
        };
        if !allowed.contains(&g) {
            why.push(format!(
                "Megatron reduces {} training's gradients in {flags}; the plan reduces them in \
                 {} (collective_dtypes.gradients)",
                plan.precision.name().to_uppercase(),
                g.name().to_uppercase()
            ));
        }
    }
    if let Some(p) = plan.collective_dtypes.params {
        // FP8 parameters in FP8 training are `--fp8-param-gather`, passed below.
        if p != plan.precision {
            why.push(format!(
                "Megatron gathers parameters in the training precision, or in FP8 with \
                 --fp8-param-gather; the plan gathers them in {} (collective_dtypes.params)",
                p.name().to_uppercase()
            ));
        }
    }
    why
}

/// Every reason Megatron cannot run `plan` of `model` at `seq_len` (empty: it can).
pub fn reasons(model: &Model, plan: &Plan, seq_len: u64) -> Vec<String> {
    checked(model, plan, seq_len).err().unwrap_or_default()
}

/// The model's flags and the rank layout when Megatron runs the plan; every reason otherwise.
fn checked(
    model: &Model,
    plan: &Plan,
    seq_len: u64,
) -> Result<(Vec<String>, RankLayout), Vec<String>> {
    let mut why = Runtime::Megatron.why_not(plan);
    // `--expert-model-parallel-size` is global: every stage with experts takes it.
    let ep = plan.stages.iter().map(|s| s.ep).max().unwrap_or(1);
    if ep > 1 {
        for (i, s) in plan.stages.iter().enumerate() {
            let moe = s.layers.iter().any(|l| model.layers[l].experts().is_some());
            if moe && s.ep != ep {
                why.push(format!(
                    "Megatron splits every MoE layer's experts {ep} ways \
                     (--expert-model-parallel-size); stage {i} has MoE layers at ep = {}",
                    s.ep
                ));
            }
        }
    }
    let args = model_args(model, seq_len).map_err(|mut w| why.append(&mut w));
    let layout = ranks::stage_major(plan).map_err(|mut w| why.append(&mut w));
    if let Some(first) = plan.stages.first() {
        let mbs = first.micro_batch_sizes.first().copied().unwrap_or(1);
        // Megatron's DP counts context-parallel groups.
        let cp = first.cp.max(1);
        let dp = first.dp / cp;
        let per_step = mbs * dp as u64;
        if per_step == 0 || per_step * plan.micro_batches != plan.global_batch {
            why.push(format!(
                "Megatron runs global batch / (micro-batch size × DP) micro-batches: {} / ({} × \
                 {}) is not the plan's {}",
                plan.global_batch, mbs, dp, plan.micro_batches
            ));
        }
        // megatron/training/arguments.py: seq-length a multiple of 2 × context-parallel-size
        // (each rank takes two chunks, one from each end, to balance causal attention).
        if cp > 1 && !seq_len.is_multiple_of(2 * cp as u64) {
            why.push(format!(
                "Megatron splits each sequence into 2 × {cp} chunks \
                 (--context-parallel-size {cp}); the sequence length {seq_len} is not a multiple \
                 of {}",
                2 * cp
            ));
        }
    }
    why.extend(collective_dtype_reasons(plan));
    match (args, layout) {
        (Ok(a), Ok(l)) if why.is_empty() => Ok((a, l)),
        _ => Err(why),
    }
}

/// The export of `job` for Megatron-LM, or every reason it cannot run there.
pub fn export(job: Job<'_>) -> Result<Export, ExportError> {
    let plan: &Plan = job.plan;
    let (model_args, layout) =
        checked(job.model, plan, job.seq_len).map_err(|reasons| ExportError::Unsupported {
            target: Target::Megatron,
            reasons,
        })?;
    let mut notes = Vec::new();
    if let Some(cfg) = &job.model.transformer {
        if cfg.attn_bias && !cfg.mlp_bias {
            notes.push(
                "the model has biases on its attention projections only; Megatron's \
                 `--add-qkv-bias` gives the QKV projection one, not the output projection"
                    .to_string(),
            );
        }
    }
    let mut args = model_args;
    args.extend(plan_args(job.model, plan));
    args.extend(
        [
            "--mock-data",
            "--tokenizer-type",
            "NullTokenizer",
            "--vocab-size",
        ]
        .map(String::from),
    );
    args.push(vocab(job.model).to_string());
    args.extend(
        [
            "--train-iters",
            "100",
            "--lr",
            "3.0e-4",
            "--lr-decay-style",
            "constant",
            "--log-interval",
            "1",
        ]
        .map(String::from),
    );
    let files = vec![
        ExportFile {
            path: "megatron_args.json".into(),
            contents: serde_json::to_string_pretty(&args).expect("strings serialise") + "\n",
            executable: false,
        },
        super::ranks_file(plan, &layout),
        ExportFile {
            path: "launch.sh".into(),
            contents: launch_script(job, &args, &layout),
            executable: true,
        },
        ExportFile {
            path: "README.md".into(),
            contents: readme(job, &layout, &notes),
            executable: false,
        },
    ];
    Ok(Export {
        target: Target::Megatron,
        files,
        layout,
    })
}

/// The vocabulary the model was built with.
fn vocab(model: &Model) -> u64 {
    model.transformer.as_ref().map_or(0, |c| c.vocab)
}

/// Flags of the model's shape, or why Megatron's GPT model cannot be this model.
pub fn model_args(model: &Model, seq_len: u64) -> Result<Vec<String>, Vec<String>> {
    let Some(cfg) = &model.transformer else {
        return Err(vec![format!(
            "Megatron's GPT model is a transformer; {} is a layer list without one",
            model.name
        )]);
    };
    // `--window-size` with `--window-attn-skip-freq`, and `--qk-layernorm`.
    let mut why = super::quirk_reasons(
        cfg,
        "Megatron-LM",
        &[
            Departure::SlidingWindow,
            Departure::QkNorm,
            Departure::LatentAttention,
        ],
    );
    if cfg.parallel_attn {
        why.push(
            "Megatron's GPT layer runs attention then MLP; the model runs them in parallel \
             (GPT-J/Falcon style)"
                .to_string(),
        );
    }
    if cfg.position == PositionKind::Alibi {
        why.push(
            "Megatron has no ALiBi (--position-embedding-type: learned_absolute, rope, yarn, \
             mrope, relative, none)"
                .to_string(),
        );
    }
    if !cfg.causal {
        why.push("pretrain_gpt.py trains causal models; the model is bidirectional".to_string());
    }
    if !why.is_empty() {
        return Err(why);
    }
    let mut a: Vec<String> = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        a.push(format!("--{name}"));
        if let Some(v) = value {
            a.push(v);
        }
    };
    flag("num-layers", Some(cfg.layers.to_string()));
    flag("hidden-size", Some(cfg.hidden.to_string()));
    flag("ffn-hidden-size", Some(cfg.ffn.to_string()));
    flag("num-attention-heads", Some(cfg.heads.to_string()));
    if cfg.kv_heads != cfg.heads {
        flag("group-query-attention", None);
        flag("num-query-groups", Some(cfg.kv_heads.to_string()));
    }
    match cfg.quirks.mla {
        // Latent attention: its own head widths (megatron-core's MLATransformerConfig; its
        // q_lora_rank None is a plain query projection).
        Some(m) => {
            flag("multi-latent-attention", None);
            if let Some(r) = m.q_lora_rank {
                flag("q-lora-rank", Some(r.to_string()));
            }
            flag("kv-lora-rank", Some(m.kv_lora_rank.to_string()));
            flag("qk-head-dim", Some(m.qk_nope_head_dim.to_string()));
            flag("qk-pos-emb-head-dim", Some(m.qk_rope_head_dim.to_string()));
            flag("v-head-dim", Some(m.v_head_dim.to_string()));
        }
        None if cfg.head_dim * cfg.heads != cfg.hidden => {
            flag("kv-channels", Some(cfg.head_dim.to_string()));
        }
        None => {}
    }
    flag("seq-length", Some(seq_len.to_string()));
    flag(
        "max-position-embeddings",
        Some(seq_len.max(cfg.max_seq_len).to_string()),
    );
    flag(
        "position-embedding-type",
        Some(
            match cfg.position {
                PositionKind::Learned => "learned_absolute",
                PositionKind::Rotary | PositionKind::Alibi => "rope",
            }
            .into(),
        ),
    );
    flag(
        "normalization",
        Some(
            match cfg.norm {
                NormKind::LayerNorm => "LayerNorm",
                NormKind::RmsNorm => "RMSNorm",
            }
            .into(),
        ),
    );
    if cfg.mlp == MlpKind::SwiGlu {
        flag("swiglu", None);
    }
    if !cfg.tied_embeddings {
        flag("untie-embeddings-and-output-weights", None);
    }
    if !cfg.mlp_bias {
        flag("disable-bias-linear", None);
        if cfg.attn_bias {
            flag("add-qkv-bias", None);
        }
    }
    if !cfg.dropout {
        flag("attention-dropout", Some("0.0".into()));
        flag("hidden-dropout", Some("0.0".into()));
    }
    flag(
        "attention-backend",
        Some(
            match cfg.attn_impl {
                AttnImpl::Flash | AttnImpl::Triton => "flash",
                AttnImpl::Torch => "unfused",
            }
            .into(),
        ),
    );
    if let Some(w) = cfg.quirks.window {
        // megatron-core's window_size is (left, right) as flash-attention takes it: a query
        // sees itself and the w − 1 tokens before it, as transformers' `sliding_window` w.
        flag("window-size", Some(format!("{},0", w.saturating_sub(1))));
        if !cfg.quirks.local_layers.is_empty() {
            // A list pattern: 1 slides, 0 attends globally.
            let pattern: Vec<&str> = cfg
                .quirks
                .local_layers
                .iter()
                .map(|&l| if l { "1" } else { "0" })
                .collect();
            flag(
                "window-attn-skip-freq",
                Some(format!("[{}]", pattern.join(","))),
            );
        }
    }
    if cfg.quirks.qk_norm.is_some() {
        flag("qk-layernorm", None);
    }
    if let Some(moe) = &cfg.moe {
        flag("num-experts", Some(moe.experts.to_string()));
        flag("moe-router-topk", Some(moe.top_k.to_string()));
        flag("moe-ffn-hidden-size", Some(moe.expert_ffn.to_string()));
        if cfg.quirks.dense_layers.iter().any(|&d| d) {
            // A list pattern (`moe_freq_type`): 1 a MoE block, 0 a dense one of
            // --ffn-hidden-size.
            let pattern: Vec<&str> = (0..cfg.layers)
                .map(|i| if cfg.is_dense_block(i) { "0" } else { "1" })
                .collect();
            flag("moe-layer-freq", Some(format!("[{}]", pattern.join(","))));
        }
        if let Some(s) = moe.shared_ffn {
            flag("moe-shared-expert-intermediate-size", Some(s.to_string()));
        }
    }
    Ok(a)
}

/// `--pipeline-model-parallel-layout`: each stage's layers in plan order (`E`, `t*k`, `L`).
pub fn layout_string(model: &Model, plan: &Plan) -> String {
    plan.stages
        .iter()
        .map(|st| {
            let mut s = String::new();
            let mut run = 0usize;
            let flush = |s: &mut String, run: &mut usize| {
                match *run {
                    0 => {}
                    1 => s.push('t'),
                    k => s.push_str(&format!("t*{k}")),
                }
                *run = 0;
            };
            for l in st.layers.iter() {
                match model.layers[l].kind {
                    LayerKind::Transformer | LayerKind::Other => run += 1,
                    LayerKind::Embedding => {
                        flush(&mut s, &mut run);
                        s.push('E');
                    }
                    LayerKind::Head => {
                        flush(&mut s, &mut run);
                        s.push('L');
                    }
                }
            }
            flush(&mut s, &mut run);
            s
        })
        .collect::<Vec<_>>()
        .join("|")
}

/// Flags of the plan: parallelism, batches, memory options, precision.
fn plan_args(model: &Model, plan: &Plan) -> Vec<String> {
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mut a: Vec<String> = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        a.push(format!("--{name}"));
        if let Some(v) = value {
            a.push(v);
        }
    };
    flag("tensor-model-parallel-size", Some(st.tp.to_string()));
    flag("pipeline-model-parallel-size", Some(pp.to_string()));
    if plan.stages.len() > 1 {
        flag(
            "pipeline-model-parallel-layout",
            Some(layout_string(model, plan)),
        );
    }
    if st.sequence_parallel && st.tp > 1 {
        flag("sequence-parallel", None);
        // Transformer Engine's userbuffers: the all-gathers and reduce-scatters pipelined with
        // the GEMMs (ModelParallelConfig.tp_comm_overlap).
        if plan.tp_comm_overlap {
            flag("tp-comm-overlap", None);
        }
    }
    if let Some(c) = plan.moe_capacity_factor {
        flag("moe-expert-capacity-factor", Some(c.to_string()));
    }
    // One degree for the whole model (`Runtime::why_not` checks the stages agree); the expert
    // tensor-parallel size is Megatron's default, the TP degree, unless the plan sets one.
    let ep = plan.stages.iter().map(|s| s.ep).max().unwrap_or(1);
    if ep > 1 {
        flag("expert-model-parallel-size", Some(ep.to_string()));
    }
    if let Some(etp) = plan.stages.iter().find_map(|s| s.etp) {
        flag("expert-tensor-parallel-size", Some(etp.to_string()));
    }
    if st.cp > 1 {
        flag("context-parallel-size", Some(st.cp.to_string()));
        if plan.cp_comm != crate::plan::CpComm::Ring {
            flag("cp-comm-type", Some(plan.cp_comm.megatron_name().into()));
        }
    }
    flag(
        "micro-batch-size",
        Some(
            st.micro_batch_sizes
                .first()
                .copied()
                .unwrap_or(1)
                .to_string(),
        ),
    );
    flag("global-batch-size", Some(plan.global_batch.to_string()));
    match st.recompute {
        Recompute::None => {}
        Recompute::Selective => flag("recompute-granularity", Some("selective".into())),
        // `Ops` is refused by `Runtime::why_not` (no op-level policy in Megatron).
        Recompute::Full | Recompute::Ops => {
            flag("recompute-granularity", Some("full".into()));
            flag("recompute-method", Some("uniform".into()));
            flag("recompute-num-layers", Some("1".into()));
        }
        Recompute::Layers(k) => {
            flag("recompute-granularity", Some("full".into()));
            flag("recompute-method", Some("block".into()));
            flag("recompute-num-layers", Some(k.to_string()));
        }
    }
    match st.zero {
        1 => {
            flag("use-distributed-optimizer", None);
            flag("overlap-param-gather", None);
        }
        2 | 3 => {
            flag("use-megatron-fsdp", None);
            flag(
                "data-parallel-sharding-strategy",
                Some(
                    if st.zero == 2 {
                        "optim_grads"
                    } else {
                        "optim_grads_params"
                    }
                    .into(),
                ),
            );
        }
        _ => {}
    }
    if st.dp > 1 {
        flag("overlap-grad-reduce", None);
    }
    if st.offload.optimizer > 0.0 {
        flag("optimizer-cpu-offload", None);
        flag(
            "optimizer-offload-fraction",
            Some(format!("{}", st.offload.optimizer)),
        );
        flag("use-precision-aware-optimizer", None);
    }
    // The gradients' type where it is not the flag's default (`collective_dtype_reasons`);
    // under Megatron-FSDP always, by its own flag, whose default (`auto`: the parameters' type)
    // is not the type hetplan priced.
    match (plan.precision, plan.gradient_dtype()) {
        (_, g) if plan.runs_megatron_fsdp() => {
            let name = match g {
                Precision::Fp32 | Precision::Tf32 => "fp32",
                Precision::Bf16 => "bf16",
                Precision::Fp16 => "fp16",
                // Refused by `collective_dtype_reasons`.
                Precision::Fp8 | Precision::Fp8Rowwise => "auto",
            };
            flag("megatron-fsdp-main-grads-dtype", Some(name.into()));
        }
        (Precision::Bf16 | Precision::Fp8, Precision::Bf16) => flag("grad-reduce-in-bf16", None),
        (Precision::Fp16, Precision::Fp32) => flag("accumulate-allreduce-grads-in-fp32", None),
        _ => {}
    }
    match plan.precision {
        Precision::Bf16 => flag("bf16", None),
        Precision::Fp16 => flag("fp16", None),
        Precision::Fp32 | Precision::Tf32 => {}
        // Transformer Engine's FP8 linears in BF16 training: E4M3 forward, E5M2 gradients.
        Precision::Fp8 => {
            flag("bf16", None);
            flag("fp8-format", Some("hybrid".into()));
            if plan.fp8_params() {
                flag("fp8-param-gather", None);
            }
        }
        // torchao's recipe, not Transformer Engine's: refused before export
        // (`Target::precisions`).
        Precision::Fp8Rowwise => {}
    }
    a
}

/// `launch.sh`: the arguments once, then the shared per-node launch.
fn launch_script(job: Job<'_>, args: &[String], layout: &RankLayout) -> String {
    let mut pre = String::from("MEGATRON_ARGS=(\n");
    let mut i = 0;
    while i < args.len() {
        let mut line = format!("  {}", shell_quote(&args[i]));
        while i + 1 < args.len() && !args[i + 1].starts_with("--") {
            i += 1;
            line.push(' ');
            line.push_str(&shell_quote(&args[i]));
        }
        pre.push_str(&line);
        pre.push('\n');
        i += 1;
    }
    pre.push_str(")\n");
    super::launch_script(
        job,
        layout,
        "Megatron-LM",
        "Run it from a Megatron-LM checkout (pretrain_gpt.py in the current directory); extra \
         arguments go to pretrain_gpt.py",
        Some((&pre, "pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" \"$@\"")),
        6000,
    )
}

/// README.md: what goes where.
fn readme(job: Job<'_>, layout: &RankLayout, notes: &[String]) -> String {
    let plan: &Plan = job.plan;
    let cluster = job.cluster;
    let st = &plan.stages[0];
    let pp = plan.pipeline_depth().max(1);
    let mut s = super::readme_head(job, "Megatron-LM", Target::Megatron);
    // Megatron's DP counts context-parallel groups; hetplan's replicas are dp × cp.
    let cp = st.cp.max(1);
    let dp = if cp > 1 {
        format!("CP {cp}, DP {}", st.dp / cp)
    } else {
        format!("DP {}", st.dp)
    };
    s.push_str(&format!(
        "TP {}, PP {}{}, {dp}; micro-batch {}, global batch {} ({} micro-batches); sequence {}.\n\n",
        st.tp,
        pp,
        super::virtual_stages(plan),
        st.micro_batch_sizes.first().copied().unwrap_or(1),
        plan.global_batch,
        plan.micro_batches,
        job.seq_len
    ));
    s.push_str(
        "## Files\n\n\
         - `launch.sh`: run it on every node with `NODE_RANK` (below) and `MASTER_ADDR` (the \
         address of node rank 0) set, from a Megatron-LM checkout; it starts `torchrun` with the \
         node's GPUs in `CUDA_VISIBLE_DEVICES` and `pretrain_gpt.py` with the arguments. Extra \
         arguments to `launch.sh` are passed on to `pretrain_gpt.py`.\n\
         - `megatron_args.json`: the same arguments as a JSON list.\n\
         - `ranks.json`: the degrees, the layer split and where every rank runs; `hetplan import \
         --from megatron megatron_args.json` reads it back.\n",
    );
    s.push_str(&super::placement_table(
        cluster,
        layout,
        if cp > 1 {
            "Megatron-Core orders ranks TP fastest, then CP (context parallelism), then DP, then \
             PP: pipeline stage `s` is global ranks `[s·TP·CP·DP, (s+1)·TP·CP·DP)`."
        } else {
            "Megatron-Core orders ranks TP fastest, then DP, then PP: pipeline stage `s` is \
             global ranks `[s·TP·DP, (s+1)·TP·DP)`."
        },
    ));
    s.push_str(
        "\n## Before a real run\n\n\
         - Data: the arguments train on Megatron's mock data with a null tokenizer of the \
         model's vocabulary. Replace `--mock-data --tokenizer-type NullTokenizer --vocab-size` \
         with your `--data-path`, `--tokenizer-type` and tokenizer model. Megatron pads the \
         vocabulary to a multiple of 128 × TP (`--make-vocab-size-divisible-by`), a few \
         embedding rows more than hetplan counted.\n\
         - Schedule: `--train-iters 100 --lr 3.0e-4 --lr-decay-style constant` are \
         placeholders; set your own.\n",
    );
    if plan.stages.len() > 1 {
        s.push_str(
            "- The layer split is `--pipeline-model-parallel-layout` (Megatron-Core 0.13 or \
             later): `E` the embedding, `t` a transformer layer, `L` the output layer and loss, \
             `|` between stages.\n",
        );
    }
    for n in notes {
        s.push_str(&format!("- Differs from the model: {n}.\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::catalog::catalog_model;

    #[test]
    fn layout_names_every_layer_once() {
        let model = catalog_model("gpt3-1.3b").unwrap();
        let n = model.layers.len();
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 1\n",
        )
        .unwrap();
        let plan =
            crate::plan::inline::parse_inline_plan("pp=4,mbs=1,gbs=8", &model, &cluster).unwrap();
        let s = layout_string(&model, &plan);
        assert_eq!(s.matches('|').count(), 3);
        assert!(s.starts_with('E') && s.ends_with('L'), "{s}");
        let unrolled: usize = s
            .split(['|', 'E', 'L'])
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.strip_prefix("t*")
                    .map_or(p.len(), |k| k.parse::<usize>().unwrap())
            })
            .sum();
        assert_eq!(unrolled, n - 2, "{s}");
    }
}
