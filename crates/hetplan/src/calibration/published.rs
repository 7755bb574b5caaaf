//! Published training runs in the shared calibration schema: one CSV per source, one row per
//! run, with the model's shape, the GPUs, the parallel layout as published, and what was
//! measured (tokens/s per GPU, TFLOP/s per GPU or seconds per iteration; peak memory as the
//! source's tool reported it). `data/published/` holds torchtitan's benchmarks, the Megatron-LM
//! README's scaling tables, BigScience's BLOOM-176B sizing runs and NeMo Megatron-Bridge's
//! H100 performance summary in it.
//!
//! Each row becomes the problem it ran ([`Case`]: model, cluster, plan, sequence length) with
//! every value the source does not print filled by a stated assumption ([`Case::assumptions`]),
//! and [`check`] sets hetplan's estimate and its simulation beside the measurement. A row whose
//! layout is not published is kept, with the reason it cannot be checked
//! ([`Outcome::Skipped`]). Throughputs are compared as tokens/s per GPU: a source that
//! publishes TFLOP/s is converted back with that source's own FLOP count per token, never
//! hetplan's.

use crate::cluster::spec::uniform_cluster;
use crate::cluster::Cluster;
use crate::cost::{self, Analytic, Workload};
use crate::error::InputError;
use crate::gpu::Arch;
use crate::model::hf::parse_hf_config;
use crate::model::Model;
use crate::plan::inline::parse_inline_plan;
use crate::plan::{Plan, Precision};
use crate::sim::{self, SimOptions};
use crate::units::{Bytes, BytesPerSec};
use serde::Serialize;

/// The published files shipped with hetplan (copies of `../shared/calibration/`'s), by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "torchtitan",
        include_str!("../../../../data/published/torchtitan.csv"),
    ),
    (
        "megatron_lm_readme",
        include_str!("../../../../data/published/megatron_lm_readme.csv"),
    ),
    (
        "bigscience_bloom_prequel",
        include_str!("../../../../data/published/bigscience_bloom_prequel.csv"),
    ),
    (
        "nemo_megatron_bridge",
        include_str!("../../../../data/published/nemo_megatron_bridge.csv"),
    ),
];

/// Models whose shape the schema's columns cannot say (routed experts, top-k, sliding windows),
/// by the HuggingFace id a row's `shape_from` names: the `config.json` published with each
/// (`data/published/configs/`; parameter counts as the model cards give them).
const HF_CONFIGS: &[(&str, &str)] = &[
    (
        "Qwen/Qwen3-30B-A3B",
        include_str!("../../../../data/published/configs/qwen3-30b-a3b.json"),
    ),
    (
        "Qwen/Qwen3-235B-A22B",
        include_str!("../../../../data/published/configs/qwen3-235b-a22b.json"),
    ),
    (
        "openai/gpt-oss-120b",
        include_str!("../../../../data/published/configs/gpt-oss-120b.json"),
    ),
];

/// What a source's memory figure measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryQuantity {
    /// PyTorch's caching allocator, peak reserved (`torch.cuda.max_memory_reserved`): what the
    /// allocator holds, without the CUDA context.
    TorchReserved,
    /// An `nvidia-smi` reading: the process's whole footprint, CUDA context included.
    NvidiaSmi,
}

/// A measured peak memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeasuredMemory {
    pub bytes: Bytes,
    pub quantity: MemoryQuantity,
}

/// One published row made into a problem.
#[derive(Clone, Debug)]
pub struct Case {
    /// The row's `row_id`.
    pub id: String,
    /// 1-based line in its CSV.
    pub line: usize,
    /// The GPU generation, for grouping.
    pub arch: Arch,
    pub gpu: String,
    pub precision: Precision,
    pub model: Model,
    pub cluster: Cluster,
    pub plan: Plan,
    /// The inline form of the plan (what `hetplan estimate --plan` takes).
    pub spec: String,
    pub seq: u64,
    /// Measured tokens/s per GPU (converted from the source's metric where it publishes
    /// another), `None` for rows that ran out of memory.
    pub measured_tokens_per_s_per_gpu: Option<f64>,
    pub measured_memory: Option<MeasuredMemory>,
    /// The run ran out of memory.
    pub oom: bool,
    /// Every value of the problem the source does not print, and how it was chosen.
    pub assumptions: Vec<String>,
}

/// What became of a row.
#[derive(Clone, Debug)]
pub enum Outcome {
    Case(Box<Case>),
    /// The row cannot be checked: why.
    Skipped {
        id: String,
        line: usize,
        reason: String,
    },
}

/// One CSV line's cells with the 1-based column where each starts; double-quoted cells may
/// hold commas, `""` is a quote.
fn cells(line: &str) -> Vec<(String, usize)> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let (mut start, mut col) = (1, 0);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        col += 1;
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
                col += 1;
            }
            ('"', _) => quoted = !quoted,
            (',', false) => {
                out.push((std::mem::take(&mut cur).trim().to_string(), start));
                start = col + 1;
            }
            _ => cur.push(c),
        }
    }
    out.push((cur.trim().to_string(), start));
    out
}

/// A row's cells by header name.
struct Row<'a> {
    header: &'a [String],
    cells: Vec<(String, usize)>,
    line: usize,
}

impl Row<'_> {
    fn get(&self, name: &str) -> Result<(&str, usize), InputError> {
        let idx = self.header.iter().position(|c| c == name).ok_or_else(|| {
            InputError::new(format!("the header has no column `{name}`"))
                .at(self.line, 1)
                .field(name)
        })?;
        self.cells
            .get(idx)
            .map(|(v, c)| (v.as_str(), *c))
            .ok_or_else(|| {
                InputError::new(format!(
                    "the row has {} cells, none for `{name}`",
                    self.cells.len()
                ))
                .at(self.line, 1)
                .field(name)
            })
    }

    fn text(&self, name: &str) -> Result<&str, InputError> {
        self.get(name).map(|(v, _)| v)
    }

    /// A cell of a column the schema does not require: `None` without the column.
    fn text_opt(&self, name: &str) -> Option<&str> {
        self.get(name).ok().map(|(v, _)| v)
    }

    /// A whole number in 1..=`parse::MAX_BATCH` (so that no product of two overflows), or
    /// `None` when the cell is empty.
    fn whole_opt(&self, name: &str) -> Result<Option<u64>, InputError> {
        let (v, col) = self.get(name)?;
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<u64>() {
            Ok(n) if (1..=crate::parse::MAX_BATCH).contains(&n) => Ok(Some(n)),
            _ => Err(InputError::new(format!(
                "expected a whole number in 1..={}, found `{v}`",
                crate::parse::MAX_BATCH
            ))
            .at(self.line, col)
            .field(name)),
        }
    }

    fn whole(&self, name: &str) -> Result<u64, InputError> {
        self.whole_opt(name)?.ok_or_else(|| {
            let col = self.get(name).map_or(1, |(_, c)| c);
            InputError::new(format!("`{name}` is empty; this row needs it"))
                .at(self.line, col)
                .field(name)
        })
    }

    /// A positive number, or `None` when the cell is empty.
    fn number_opt(&self, name: &str) -> Result<Option<f64>, InputError> {
        let (v, col) = self.get(name)?;
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
            _ => Err(
                InputError::new(format!("expected a positive number, found `{v}`"))
                    .at(self.line, col)
                    .field(name),
            ),
        }
    }
}

/// The columns every row is read from (others, such as `cp`, `vpp` or `step_time_s`, may be
/// empty but must be present too: see `../shared/calibration/README.md`).
const REQUIRED: &[&str] = &[
    "row_id",
    "gpu",
    "gpus",
    "nodes",
    "gpus_per_node",
    "interconnect",
    "arch",
    "n_layers",
    "hidden",
    "ffn_hidden",
    "n_heads",
    "n_kv_heads",
    "vocab",
    "seq_len",
    "global_batch",
    "micro_batch",
    "tp",
    "pp",
    "dp",
    "cp",
    "pp_schedule",
    "zero_fsdp",
    "act_ckpt",
    "precision",
    "fp8",
    "engine",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "step_time_s",
    "peak_mem",
    "peak_mem_unit",
];

/// The model families of the data.
enum Family {
    /// Llama 2/3: RMSNorm, SwiGLU, rotary positions, untied head.
    Llama,
    /// Megatron's GPT: LayerNorm, GeLU MLP, learned positions, tied head.
    Gpt,
    /// BLOOM: ALiBi, GeLU MLP, tied head.
    Bloom,
}

/// FLOPs per token as Megatron-Core r0.8.0 counts them for its logged TFLOP/s
/// (`num_floating_point_operations` in megatron/training/training.py), for its GPT rows:
/// 12·L·h²·((1 + g/a + s/h) + f/h + V/(2·L·h)), forward and backward, causal attention counted
/// whole, no recomputation. Megatron's formula also scales the attention term by a·d/h and the
/// MLP's by 3/2 when it is gated; both are 1 here (heads of h/a, GeLU MLPs), so they are left out.
fn megatron_2024_flops_per_token(l: f64, h: f64, f: f64, a: f64, g: f64, s: f64, v: f64) -> f64 {
    12.0 * l * h * h * ((1.0 + g / a + s / h) + f / h + v / (2.0 * l * h))
}

/// Every row of one published CSV made into a [`Case`] (or [`Outcome::Skipped`] with the
/// reason). `source` names the file in errors and picks the source's conventions
/// (`torchtitan`, `megatron_lm_readme`, `bigscience_bloom_prequel`, `nemo_megatron_bridge`).
pub fn parse(source: &str, src: &str) -> Result<Vec<Outcome>, InputError> {
    let mut header: Option<Vec<String>> = None;
    let mut out = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let Some(h) = &header else {
            let names: Vec<String> = cells(line).into_iter().map(|(c, _)| c).collect();
            if let Some(missing) = REQUIRED.iter().find(|r| !names.iter().any(|n| n == *r)) {
                return Err(InputError::new(format!(
                    "{source}: the header has no column `{missing}`"
                ))
                .at(i + 1, 1)
                .field(*missing)
                .hint(Some(format!(
                    "the shared schema's columns include {}",
                    REQUIRED.join(",")
                ))));
            }
            header = Some(names);
            continue;
        };
        let row = Row {
            header: h,
            cells: cells(line),
            line: i + 1,
        };
        out.push(case(source, &row)?);
    }
    if header.is_none() {
        return Err(InputError::new(format!("{source}: no header line")).at(1, 1));
    }
    Ok(out)
}

/// The row's problem.
fn case(source: &str, r: &Row) -> Result<Outcome, InputError> {
    let id = r.text("row_id")?.to_string();
    let skipped = |reason: String| {
        Ok(Outcome::Skipped {
            id: id.clone(),
            line: r.line,
            reason,
        })
    };
    let mut assumptions = Vec::new();
    let (gpu_text, gpu_col) = r.get("gpu")?;
    let (gpu_name, arch) = if gpu_text.starts_with("H100") {
        ("h100-sxm5-80gb", Arch::Hopper)
    } else if gpu_text.starts_with("H200") {
        ("h200-sxm-141gb", Arch::Hopper)
    } else if gpu_text.starts_with("A100") {
        ("a100-sxm4-80gb", Arch::Ampere)
    } else if gpu_text.starts_with("B200") {
        ("b200-sxm-180gb", Arch::Blackwell)
    } else {
        return Err(InputError::new(format!("unknown GPU `{gpu_text}`"))
            .at(r.line, gpu_col)
            .field("gpu")
            .hint(Some("the data holds A100, H100, H200 and B200 rows".into())));
    };
    let mut gpu = crate::gpu::lookup(gpu_name).expect("a catalog name");
    // Meta's Grand Teton H100s carry 96 GB of HBM2e (torchtitan's benchmark header). CUDA shows
    // an 80 GB H100 as 81,079 MiB of 81,920 (see `gpu::catalog`); the same 841 MiB reserve on
    // 96 GiB is DERIVED, no deviceQuery of this part was found.
    // Its HBM2e runs at 2.41 TB/s, as measured on a 94 GiB HBM2e H100 (Ujeniya et al. 2026,
    // arXiv:2604.11391, §3), against the 80 GB HBM3 part's 3.35.
    if gpu_text.contains("96GB") {
        gpu.memory = Bytes::mib(96.0 * 1024.0 - 841.0);
        gpu.datasheet_memory_gb = 96;
        assumptions.push("96 GB H100: 97,463 MiB usable (the 80 GB part's reserve)".into());
    }
    if gpu_text.contains("HBM2e") {
        gpu.hbm_bandwidth = BytesPerSec::gb_s(2410.0);
        assumptions.push("H100 HBM2e: 2.41 TB/s".into());
    }
    // torchtitan's H100s run at 500 W (its benchmark header); "lower TDP" is the same fleet.
    if gpu_text.contains("500W") || gpu_text.contains("lower TDP") {
        if gpu_text.contains("lower TDP") {
            assumptions.push("'lower TDP' read as the fleet's 500 W".into());
        }
        gpu = crate::gpu::power_capped(&gpu, 500.0).expect("500 W is within an H100's 700 W");
    }
    let gpus = r.whole("gpus")?;
    if gpus > super::MAX_GPUS {
        let col = r.get("gpus")?.1;
        return Err(
            InputError::new(format!("{gpus} GPUs: at most {} per row", super::MAX_GPUS))
                .at(r.line, col)
                .field("gpus"),
        );
    }
    let gpn = r.whole_opt("gpus_per_node")?.unwrap_or(8);
    let nodes = r.whole_opt("nodes")?.unwrap_or(gpus.div_ceil(gpn));
    if nodes * gpn != gpus {
        let col = r.get("nodes")?.1;
        return Err(InputError::new(format!(
            "nodes × gpus_per_node = {nodes} × {gpn} is not gpus = {gpus}"
        ))
        .at(r.line, col)
        .field("nodes"));
    }
    let interconnect = r.text("interconnect")?;
    let inter_node = if interconnect.contains("400 Gb/s per GPU") {
        BytesPerSec::gbps(400.0 * gpn as f64)
    } else if interconnect.contains("Omni-Path") {
        // Jean Zay: 4 Omni-Path links of 100 Gb/s per node (tr11 README).
        BytesPerSec::gbps(400.0)
    } else {
        // DGX H100/A100 SuperPODs and most 8-GPU training nodes: one 400 (H100) or 200 (A100)
        // Gb/s NIC per GPU (NVIDIA DGX H100 and DGX A100 user guides).
        let per_gpu = if arch == Arch::Ampere { 200.0 } else { 400.0 };
        assumptions.push(format!(
            "network not stated: {per_gpu} Gb/s per GPU (a DGX's one NIC per GPU)"
        ));
        BytesPerSec::gbps(per_gpu * gpn as f64)
    };
    let cluster = uniform_cluster(&gpu, nodes as u32, gpn as u32, inter_node);

    // The model.
    let layers = r.whole("n_layers")?;
    let hidden = r.whole("hidden")?;
    let heads = r.whole_opt("n_heads")?;
    let vocab = r.whole("vocab")?;
    let seq = r.whole("seq_len")?;
    let arch_text = r.text("arch")?;
    let family = if source.contains("bloom") || arch_text.contains("ALiBi") {
        Family::Bloom
    } else if arch_text.contains("GPT") {
        Family::Gpt
    } else {
        Family::Llama
    };
    let Some(heads) = heads else {
        return skipped("attention heads not published".into());
    };
    let ffn = r.whole_opt("ffn_hidden")?.unwrap_or(4 * hidden);
    let kv_heads = r.whole_opt("n_kv_heads")?.unwrap_or(heads);
    let shape_from = r.text_opt("shape_from").unwrap_or("");
    let hf = HF_CONFIGS
        .iter()
        .find(|(name, _)| shape_from.contains(name));
    let config = match (hf, family) {
        (Some((_, config)), _) => config.to_string(),
        (None, Family::Llama) => format!(
            r#"{{"model_type": "llama", "num_hidden_layers": {layers}, "hidden_size": {hidden},
            "intermediate_size": {ffn}, "num_attention_heads": {heads}, "num_key_value_heads":
            {kv_heads}, "vocab_size": {vocab}, "max_position_embeddings": {seq},
            "tie_word_embeddings": false}}"#
        ),
        (None, Family::Gpt) => format!(
            r#"{{"model_type": "gpt2", "n_layer": {layers}, "n_embd": {hidden}, "n_inner": {ffn},
            "n_head": {heads}, "vocab_size": {vocab}, "n_positions": {seq}}}"#
        ),
        // The data says '250k'; BLOOM's tokenizer has 250,680 entries, padded to 250,880
        // (bigscience/bloom config.json). Attention is Megatron's unfused core (`baddbmm` and
        // its fused scale-mask-softmax kernel, megatron/model/transformer.py of the fork):
        // these runs predate FlashAttention (Dao et al., May 2022), so `eager`.
        (None, Family::Bloom) => {
            assumptions.push("attention unfused (Megatron's softmax kernel, 2022)".into());
            format!(
                r#"{{"model_type": "bloom", "n_layer": {layers}, "hidden_size": {hidden},
                "n_head": {heads}, "vocab_size": 250880, "attn_implementation": "eager"}}"#
            )
        }
    };
    let mut model = parse_hf_config(&config, &id).map_err(|e| {
        InputError::new(format!("the row's model shape is not valid: {}", e.message)).at(r.line, 1)
    })?;
    // A configuration named by `shape_from` must be the shape the row prints.
    if hf.is_some() {
        let blocks = (model.layers.iter())
            .filter(|l| l.kind == crate::model::LayerKind::Transformer)
            .count() as u64;
        if blocks != layers {
            let col = r.get("n_layers")?.1;
            return Err(InputError::new(format!(
                "the row says {layers} layers, its `shape_from` configuration has {blocks}"
            ))
            .at(r.line, col)
            .field("n_layers"));
        }
    }

    // The layout.
    let tp = r.whole_opt("tp")?;
    let pp = r.whole_opt("pp")?;
    let dp = r.whole_opt("dp")?;
    let (Some(tp), Some(pp), Some(dp)) = (tp, pp, dp) else {
        return skipped("parallel layout (tp, pp, dp) not published".into());
    };
    let cp = r.whole_opt("cp")?.unwrap_or(1);
    let gbs = r.whole("global_batch")?;
    let engine_text = r.text("engine")?;
    let engine = if engine_text.contains("torchtitan") {
        "fsdp"
    } else if engine_text.contains("DeepSpeed") {
        "deepspeed"
    } else {
        "megatron"
    };
    let zero_text = r.text("zero_fsdp")?;
    // FSDP under a pipeline runs as ZeRO-1 (`Plan::as_engine_runs`), which the cost model
    // and the simulator apply themselves.
    let zero = if zero_text.contains("FSDP") {
        3
    } else if zero_text.contains("ZeRO") {
        1
    } else {
        assumptions
            .push("distributed optimizer (ZeRO-1): the README's --overlap-param-gather".into());
        1
    };
    // Micro-batches: as published, else torchtitan's pipeline default (as many as stages), else 1.
    let replicas_batch = gbs / (dp * cp).max(1);
    let mbs = match r.whole_opt("micro_batch")? {
        Some(m) => m,
        None if pp > 1 && engine == "fsdp" => {
            assumptions.push(format!(
                "micro-batches not printed: {pp}, torchtitan's default (one per stage)"
            ));
            (replicas_batch / pp).max(1)
        }
        None => {
            assumptions.push("micro-batch size not printed: 1".into());
            1
        }
    };
    let ckpt_text = r.text("act_ckpt")?;
    let ckpt = if ckpt_text.starts_with("full") {
        "full".to_string()
    } else if ckpt_text.starts_with("selective layer") && engine == "fsdp" {
        // torchtitan's `selective_ac_option = "2"`: every second block recomputed whole.
        format!("{}", (layers / 2 / pp).max(1))
    } else if ckpt_text.starts_with("selective") && engine == "fsdp" {
        // torchtitan's op-level policy (`Recompute::Ops`): the `op` option, which its train
        // configs of the time set (train_configs/llama3_8b.toml at 9dec370).
        if !ckpt_text.contains("op") {
            assumptions.push("torchtitan's selective checkpointing: its configs' `op`".into());
        }
        "ops".into()
    } else if ckpt_text.starts_with("selective") {
        "selective".into()
    } else if let Some(modules) = ckpt_text.strip_prefix("modules ") {
        // Megatron's `recompute_modules` (layernorm, moe_act, ...): small parts of a block that
        // hetplan's checkpointing options do not name. Estimated without them: the time of
        // their recomputation is left out, their memory kept.
        assumptions.push(format!("recomputation of {modules} not modelled: none"));
        "none".into()
    } else if ckpt_text == "no" || ckpt_text.starts_with("none") {
        "none".into()
    } else {
        assumptions.push("activation checkpointing not stated: none".into());
        "none".into()
    };
    let precision_text = r.text("precision")?;
    let fp8 = r.text("fp8")?.starts_with("yes");
    // torchtitan's async-TP tables name the float8 recipe in the row's quantization column.
    let rowwise = r
        .text("table")?
        .to_ascii_lowercase()
        .contains("float8 rowwise");
    let precision = if fp8 && rowwise {
        Precision::Fp8Rowwise
    } else if fp8 {
        Precision::Fp8
    } else if precision_text.starts_with("fp16") || precision_text.starts_with("half") {
        Precision::Fp16
    } else {
        if precision_text.starts_with("not stated") {
            assumptions.push("precision not stated: bf16 (the MFU's peak)".into());
        }
        Precision::Bf16
    };
    let precision_name = precision.name();
    let sp = tp > 1 && engine != "deepspeed";
    // TP communication overlap: the Megatron README's benchmark configuration lists
    // `--tp-comm-overlap`; torchtitan's tables name their async-TP rows; Megatron-Bridge's rows
    // say what their recipe sets in their notes.
    let table = r.text("table")?.to_ascii_lowercase();
    let notes = r.text_opt("notes").unwrap_or("").to_ascii_lowercase();
    let tp_overlap = sp
        && if engine_text.contains("r0.8") {
            assumptions.push("the README's --tp-comm-overlap".into());
            true
        } else {
            table.contains("asynctp")
                || table.contains("async tp")
                || notes.contains("tp communication overlap on")
        };
    let schedule = r.text("pp_schedule")?;
    let interleave = match r.whole_opt("vpp")? {
        Some(v) if v > 1 => format!(",v={v}"),
        Some(_) => String::new(),
        None if schedule.starts_with("Interleaved") => {
            assumptions.push("interleaved schedule: 2 chunks per stage (not printed)".into());
            ",v=2".into()
        }
        _ => String::new(),
    };
    // torchtitan's rows that say they ran without `torch.compile` (its default then) run the
    // model's code eagerly. The others say they were compiled (async TP is compiled too), or
    // say nothing, and then compiled is an assumption. torchtitan compiles the loss with the
    // model since April 2025 (its commit bbb1b616e; `train.py` of its December 2024
    // benchmarks, 9dec370, has `torch.compile(loss_fn)` commented out): the blocks alone
    // before 2025.
    // Expert parallelism, its expert tensor-parallel degree where the notes give it, and
    // routing forced to balance (Megatron's `moe_router_force_load_balancing`: no expert rank
    // takes more than its even share, a capacity factor of 1 that drops nothing).
    let ep = r.whole_opt("ep")?.unwrap_or(1);
    let mut moe = String::new();
    if ep > 1 {
        moe = format!(",ep={ep}");
        // "ETP n" among the notes' `;`-separated items.
        let etp = (notes.split(';'))
            .find_map(|item| item.trim().strip_prefix("etp ")?.parse::<u64>().ok());
        if let Some(etp) = etp.filter(|&e| e != tp) {
            moe.push_str(&format!(",etp={etp}"));
        }
    }
    if notes.contains("force-balanced") {
        // Priced as a capacity factor of 1: no expert rank takes more than its even share.
        // The same cost, not the same run (a capacity factor drops tokens, forced balance
        // routes them evenly): the plan is for the estimate, not for export.
        assumptions.push("forced balance priced as capacity 1 (no rank above its share)".into());
        moe.push_str(",capacity=1");
    }
    let source_ref = r.text_opt("source_ref").unwrap_or("");
    // torchtitan's docs/performance.md prints no compile setting. Its A100 tables were
    // measured with the train configs of the commits that added them (395a526, 18 April
    // 2024, Llama 2; 1ea476e, 24 April, Llama 3, whose README lists `torch.compile` support
    // among its "coming soon" features): `compile = false` for every model, and
    // `norm_type = "fused_rmsnorm"` (a Triton kernel) for 8B and 13B, "rmsnorm" for 70B. Its
    // 405B row without optimizations ran the config #554 (9515a14) then changed, turning on
    // compile with Float8 and async TP: `compile = false`, "rmsnorm".
    let april_2024_config = engine == "fsdp"
        && source_ref.contains("docs/performance.md")
        && (table.contains("64 a100") || table.contains("optimizations 'none'"));
    let fused_norm = april_2024_config && {
        let name = r.text("model")?;
        name.ends_with(" 8B") || name.ends_with(" 13B")
    };
    if fused_norm {
        assumptions.push("eager, with its configs' fused RMSNorm (April 2024)".into());
        if let Some(mut c) = model.transformer.clone() {
            c.fused_norm = true;
            model = c.build();
        }
    } else if april_2024_config {
        assumptions.push("eager, as its configs of the time ran".into());
    }
    let compile = if engine != "fsdp" {
        ""
    } else if notes.contains("no torch.compile") || april_2024_config {
        ",compile=off"
    } else {
        if !notes.contains("compile") && !table.contains("compile") && !tp_overlap {
            assumptions.push("torch.compile not stated: compiled".into());
        }
        // The year in the benchmark's file name (`_2025-06_`, `_202506_`), not in a hash.
        if source_ref.contains("_2025") {
            ""
        } else {
            ",compile=blocks"
        }
    };
    let spec = format!(
        "tp={tp},pp={pp},dp={dp},cp={cp},mbs={mbs},gbs={gbs},zero={zero},ckpt={ckpt},\
         sp={},tp_overlap={},engine={engine},precision={precision_name}{interleave}{moe}{compile}",
        if sp { "on" } else { "off" },
        if tp_overlap { "on" } else { "off" },
    );
    let mut plan = match parse_inline_plan(&spec, &model, &cluster) {
        Ok(p) => p,
        Err(e) => return skipped(format!("plan `{spec}` is not valid: {}", e.message)),
    };
    if precision_text.contains("fp32 grad") {
        // DeepSpeed's BF16_Optimizer accumulates gradients in FP32 (the data's header).
        plan.collective_dtypes.gradients = Some(Precision::Fp32);
    }
    if fp8 && precision_text.contains("fp8_param_gather") {
        // Megatron's --fp8-param-gather: the blocks' weights kept and gathered in FP8.
        plan.collective_dtypes.params = Some(Precision::Fp8);
    }
    if precision_text.contains("bf16 grad") {
        // Megatron-Bridge's recipes keep and reduce gradients in BF16 (`grad_reduce_in_fp32 =
        // False`), where Megatron-LM's arguments force FP32 (`plan::default_gradient_dtype`).
        plan.collective_dtypes.gradients = Some(Precision::Bf16);
    }
    if engine == "fsdp" {
        // torchtitan reduce-scatters gradients in FP32 (`mixed_precision_reduce`, whose only
        // value is "float32", config/configs.py; `reduce_dtype=torch.float32` written into
        // parallelize_llama.py in April 2024, 395a526 and 1ea476e).
        // Under PP the FSDP2 of these runs (torch of late 2024) also accumulated gradients
        // whose sync was off in that reduce dtype (`FSDPParam.to_accumulated_grad_if_needed`;
        // today's torch keeps them in the parameters' dtype).
        plan.collective_dtypes.gradients = Some(Precision::Fp32);
        if pp > 1 {
            assumptions.push("FSDP under PP: unsharded gradients accumulated in FP32".into());
        }
    }

    // What was measured.
    let tokens_per_step = (gbs * seq) as f64;
    let measured_tokens_per_s_per_gpu = if let Some(t) = r.number_opt("tokens_per_s_per_gpu")? {
        Some(t)
    } else if let Some(s) = r.number_opt("step_time_s")? {
        Some(tokens_per_step / s / gpus as f64)
    } else if let Some(tf) = r.number_opt("tflops_per_gpu")? {
        if !engine_text.contains("r0.8") {
            return skipped("TFLOP/s counted by a formula hetplan does not reproduce".into());
        }
        let per_token = megatron_2024_flops_per_token(
            layers as f64,
            hidden as f64,
            ffn as f64,
            heads as f64,
            kv_heads as f64,
            seq as f64,
            vocab as f64,
        );
        Some(tf * 1e12 / per_token)
    } else {
        None
    };
    let (mem_text, mem_col) = r.get("peak_mem_unit")?;
    let oom = mem_text == "OOM";
    let measured_memory = match r.number_opt("peak_mem")? {
        Some(v) if mem_text.starts_with("GiB") => Some(MeasuredMemory {
            bytes: Bytes::gib(v),
            quantity: MemoryQuantity::TorchReserved,
        }),
        Some(v) if mem_text.contains("nvidia-smi") => Some(MeasuredMemory {
            bytes: Bytes::new(v * 1e9),
            quantity: MemoryQuantity::NvidiaSmi,
        }),
        Some(_) => {
            return Err(InputError::new(format!(
                "unknown memory unit `{mem_text}`; expected `GiB (...)` or `GB (nvidia-smi ...)`"
            ))
            .at(r.line, mem_col)
            .field("peak_mem_unit"))
        }
        None => None,
    };
    if measured_tokens_per_s_per_gpu.is_none() && !oom {
        return skipped("no throughput, time or TFLOP/s".into());
    }
    Ok(Outcome::Case(Box::new(Case {
        id,
        line: r.line,
        arch,
        gpu: gpu_name.to_string(),
        precision,
        model,
        cluster,
        plan,
        spec,
        seq,
        measured_tokens_per_s_per_gpu,
        measured_memory,
        oom,
        assumptions,
    })))
}

/// A case beside hetplan's estimate and simulation.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub id: String,
    pub gpu: String,
    pub precision: Precision,
    pub spec: String,
    pub seq: u64,
    pub measured_tokens_per_s_per_gpu: Option<f64>,
    pub estimated_tokens_per_s_per_gpu: f64,
    /// `None` when the simulation refused (too many tasks) or failed.
    pub simulated_tokens_per_s_per_gpu: Option<f64>,
    pub measured_memory: Option<MeasuredMemory>,
    /// hetplan's figure for the measured quantity, the largest over the plan's GPUs.
    pub estimated_memory: Bytes,
    pub oom: bool,
    pub fits: bool,
    pub assumptions: Vec<String>,
}

impl Checked {
    /// The out-of-memory verdict against what happened.
    pub fn verdict(&self) -> &'static str {
        match (self.oom, self.fits) {
            (true, false) => "OOM, predicted",
            (true, true) => "OOM, predicted to fit",
            (false, true) => "ran, fits",
            (false, false) => "ran, predicted OOM",
        }
    }

    /// Estimated over measured throughput − 1 (positive: hetplan is optimistic).
    pub fn time_error(&self) -> Option<f64> {
        self.measured_tokens_per_s_per_gpu
            .map(|m| self.estimated_tokens_per_s_per_gpu / m - 1.0)
    }

    /// Simulated over measured throughput − 1.
    pub fn sim_error(&self) -> Option<f64> {
        Some(self.simulated_tokens_per_s_per_gpu? / self.measured_tokens_per_s_per_gpu? - 1.0)
    }

    /// Estimated over measured memory − 1.
    pub fn memory_error(&self) -> Option<f64> {
        self.measured_memory
            .map(|m| self.estimated_memory.get() / m.bytes.get() - 1.0)
    }
}

/// Estimates (and, unless `simulate` is false, simulates) a case; the plan's errors when it is
/// not valid for the case's model and cluster ([`parse`] only makes valid ones, but a `Case`
/// can be edited).
pub fn check(
    case: &Case,
    simulate: bool,
) -> Result<Checked, Vec<crate::plan::validate::PlanError>> {
    let w = Workload {
        model: &case.model,
        cluster: &case.cluster,
        seq_len: case.seq,
    };
    let plan = w.validate(&case.plan)?;
    let e = cost::estimate(w, &plan, &Analytic);
    let sim = simulate
        .then(|| sim::simulate(w, &plan, &Analytic, &SimOptions::default()).ok())
        .flatten();
    // What the runtime holds outside PyTorch's allocator (CUDA context, workspaces, NCCL's
    // buffers) is in hetplan's total and in an nvidia-smi reading; torch's reserved figure does
    // not see it.
    let torch_reserved =
        case.measured_memory.map(|m| m.quantity) == Some(MemoryQuantity::TorchReserved);
    let peak = (e.stages.iter())
        .map(|s| {
            s.memory.total.get()
                - if torch_reserved {
                    s.memory.runtime.get()
                } else {
                    0.0
                }
        })
        .fold(0.0, f64::max);
    Ok(Checked {
        id: case.id.clone(),
        gpu: case.gpu.clone(),
        precision: case.precision,
        spec: case.spec.clone(),
        seq: case.seq,
        measured_tokens_per_s_per_gpu: case.measured_tokens_per_s_per_gpu,
        estimated_tokens_per_s_per_gpu: e.tokens_per_s_per_gpu,
        simulated_tokens_per_s_per_gpu: sim.map(|s| s.tokens_per_s_per_gpu),
        measured_memory: case.measured_memory,
        estimated_memory: Bytes::new(peak),
        oom: case.oom,
        fits: e.fits,
        assumptions: case.assumptions.clone(),
    })
}

/// Median and 90th percentile of |x| (nearest rank), `None` for no values.
pub fn median_p90(xs: &[f64]) -> Option<(f64, f64)> {
    let mut a: Vec<f64> = xs.iter().map(|x| x.abs()).collect();
    if a.is_empty() {
        return None;
    }
    a.sort_by(f64::total_cmp);
    let at = |q: f64| a[((q * a.len() as f64).ceil() as usize).clamp(1, a.len()) - 1];
    Some((at(0.5), at(0.9)))
}
