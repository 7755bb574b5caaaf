//! A Megatron-LM job as hetplan's model and plan: the command line (or launch script, or the
//! JSON argument list `hetplan export --to megatron` writes) read flag by flag.
//!
//! The flags and their defaults are Megatron-LM's (d98e8a6, `megatron/training/arguments.py`
//! and `TransformerConfig`): `--ffn-hidden-size` defaults to 4h (with `--swiglu`,
//! `int(4h·2/3 / 64)·64`), `--num-query-groups` to the head count, `--kv-channels` to h /
//! heads, dropout to 0.1, biases on, embeddings tied, `--position-embedding-type
//! learned_absolute`, `--normalization LayerNorm`, `--global-batch-size` to micro-batch × DP,
//! `--optimizer-offload-fraction` to 1. The layer split is `--pipeline-model-parallel-layout`,
//! else `--decoder-first/last-pipeline-num-layers` with the middle stages even, else even;
//! `--num-virtual-stages-per-pipeline-rank` or `--num-layers-per-virtual-pipeline-stage`
//! interleave. Ranks are Megatron's order (TP fastest, then DP, then PP) over the GPUs in
//! `torchrun`'s order: the export's `ranks.json` when given, else node by node, each node's
//! GPUs in index order. `--expert-model-parallel-size` sets every MoE stage's `ep`;
//! `--context-parallel-size` every stage's `cp` (Megatron's order puts CP ranks between TP and
//! DP, so a CP group is `cp` consecutive replicas, and DP counts groups). Flags that change what
//! runs but that hetplan does not model (FP8, hybrid layers, encoders) are refused; the rest
//! (data, optimizer, logging) are listed as ignored. `--expert-tensor-parallel-size` sets every
//! MoE stage's `etp`.

use super::shell::{words, Word};
use crate::cluster::{Cluster, GpuId};
use crate::error::InputError;
use crate::export::ranks::NodeLaunch;
use crate::model::{
    AttnImpl, MlpKind, Model, MoeConfig, NormKind, PositionKind, TransformerConfig,
};
use crate::plan::{
    CollectiveDtypes, Engine, LayerRange, Offload, Plan, Precision, Recompute, Schedule, Stage,
};
use std::collections::BTreeMap;

/// Flags that take no value (`store_true`) among those hetplan reads or may meet.
const SWITCHES: &[&str] = &[
    "group-query-attention",
    "swiglu",
    "untie-embeddings-and-output-weights",
    "disable-bias-linear",
    "add-qkv-bias",
    "sequence-parallel",
    "tp-comm-overlap",
    "use-distributed-optimizer",
    "use-megatron-fsdp",
    "overlap-grad-reduce",
    "overlap-param-gather",
    "optimizer-cpu-offload",
    "use-precision-aware-optimizer",
    "bf16",
    "fp16",
    "mock-data",
    "use-mcore-models",
    "use-flash-attn",
    "apply-layernorm-1p",
    "no-masked-softmax-fusion",
    "no-bias-gelu-fusion",
    "no-bias-dropout-fusion",
    "no-gradient-accumulation-fusion",
    "cross-entropy-loss-fusion",
    "calculate-per-token-loss",
    "manual-gc",
    "grad-reduce-in-bf16",
    "accumulate-allreduce-grads-in-fp32",
    "fp8-param-gather",
    "first-last-layers-bf16",
    "no-fp8-wgrad",
    "use-torch-fsdp2",
    "no-create-attention-mask-in-dataloader",
    "use-rotary-position-embeddings",
];

/// Flags that change what runs in ways hetplan does not model yet: (flag, what it is).
const UNMODELLED: &[(&str, &str)] = &[
    ("fp4-format", "FP4 training"),
    (
        "first-last-layers-bf16",
        "BF16 first and last blocks under FP8",
    ),
    ("no-fp8-wgrad", "weight gradients outside FP8"),
    ("hybrid-layer-pattern", "hybrid (Mamba) layers"),
    ("encoder-num-layers", "encoder layers"),
    ("use-torch-fsdp2", "PyTorch FSDP2 inside Megatron"),
];

/// One flag as given: its value (none for a switch) and where the flag starts.
#[derive(Clone, Debug)]
struct Flag {
    value: Option<Word>,
    offset: usize,
}

/// A Megatron job read from its arguments: the model it builds and what it runs.
#[derive(Clone, Debug)]
pub struct MegatronJob {
    pub model: Model,
    pub seq_len: u64,
    /// `torchrun --nnodes N --nproc_per_node M` with both numbers given: N·M.
    pub world_size: Option<u64>,
    /// Flags read but without effect on the plan (data, optimizer, logging, ...).
    pub ignored: Vec<String>,
    /// The script leaves PyTorch's TF32 switch (`export::TF32_SWITCH`) at `1` for the job
    /// (`shell::exported`; `c10::utils::check_env` takes `1` and `0`): FP32 products run in
    /// TF32, what hetplan's export of a `tf32` plan sets; Megatron has no flag for it.
    tf32_override: bool,
    /// The training precision and the collectives' element types the flags set
    /// ([`MegatronJob::precision`]).
    precision: Precision,
    collective_dtypes: CollectiveDtypes,
    flags: BTreeMap<String, Flag>,
    src: String,
}

/// The gradients' type flags, which Megatron-FSDP does not read (it takes
/// `--megatron-fsdp-main-grads-dtype`, which hetplan does not): with `--use-megatron-fsdp`
/// they are listed as ignored.
const GRADIENT_FLAGS: &[&str] = &["grad-reduce-in-bf16", "accumulate-allreduce-grads-in-fp32"];

impl MegatronJob {
    /// Reads a command line, a launch script, or a JSON list of arguments.
    pub fn parse(src: &str, name: &str) -> Result<MegatronJob, InputError> {
        let json = src.trim_start().starts_with('[');
        let ws = if json {
            let list: Vec<String> =
                serde_json::from_str(src).map_err(|e| InputError::from_json(&e))?;
            // Offsets into the JSON text, so that errors point at the argument.
            let mut at = 0;
            list.into_iter()
                .map(|text| {
                    let quoted = serde_json::to_string(&text).unwrap_or_default();
                    let offset = src[at..].find(&quoted).map_or(at, |i| at + i);
                    at = offset + quoted.len().min(src.len() - offset);
                    Word { text, offset }
                })
                .collect()
        } else {
            words(src)?
        };
        // A JSON list is the program's arguments: no environment.
        let tf32_override = !json
            && super::shell::exported(src, &ws, crate::export::TF32_SWITCH).as_deref() == Some("1");
        let mut flags: BTreeMap<String, Flag> = BTreeMap::new();
        let mut i = 0;
        while i < ws.len() {
            let w = &ws[i];
            i += 1;
            let Some(body) = w.text.strip_prefix("--") else {
                continue;
            };
            if body.is_empty() {
                continue;
            }
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (
                    n.to_string(),
                    Some(Word {
                        text: v.to_string(),
                        offset: w.offset + 3 + n.len(),
                    }),
                ),
                None if SWITCHES.contains(&body) => (body.to_string(), None),
                None => match ws.get(i) {
                    Some(v) if !v.text.starts_with("--") => {
                        i += 1;
                        (body.to_string(), Some(v.clone()))
                    }
                    _ => (body.to_string(), None),
                },
            };
            // torchrun's `--nproc_per_node` and Megatron's flags share the command line; the
            // last occurrence wins, as in argparse.
            flags.insert(
                name.replace('_', "-"),
                Flag {
                    value,
                    offset: w.offset,
                },
            );
        }
        let mut job = MegatronJob {
            model: Model {
                name: String::new(),
                layers: Vec::new(),
                transformer: None,
                default_seq_len: 0,
                per_sample: false,
            },
            seq_len: 0,
            world_size: None,
            ignored: Vec::new(),
            tf32_override,
            precision: Precision::Fp32,
            collective_dtypes: CollectiveDtypes::default(),
            flags,
            src: src.to_string(),
        };
        for (flag, what) in UNMODELLED {
            if let Some(f) = job.flags.get(*flag) {
                let trivial = f.value.as_ref().is_some_and(|v| v.text == "1");
                if !trivial {
                    return Err(job
                        .error_at(
                            f.offset,
                            format!("--{flag}: hetplan does not model {what} yet"),
                        )
                        .hint(Some(format!(
                            "plan without it (remove --{flag}), or compare by hand"
                        ))));
                }
            }
        }
        (job.precision, job.collective_dtypes) = job.precision()?;
        let cfg = job.transformer(name)?;
        cfg.check_limits().map_err(|e| {
            e.hint(Some(
                "a flag of the model's shape (--hidden-size, --num-layers, ...) is out of range"
                    .into(),
            ))
        })?;
        job.seq_len = job
            .int("seq-length")?
            .ok_or_else(|| job.missing("seq-length"))?;
        if job.seq_len > crate::model::LIMITS.seq {
            let at = job.flags.get("seq-length").map_or(0, |f| f.offset);
            return Err(job.error_at(
                at,
                format!(
                    "--seq-length {} is beyond the {} hetplan accepts",
                    job.seq_len,
                    crate::model::LIMITS.seq
                ),
            ));
        }
        job.model = cfg.build();
        job.model.default_seq_len = job.seq_len;
        let nnodes = job.int("nnodes").ok().flatten();
        let nproc = job.int("nproc-per-node").ok().flatten();
        job.world_size = nnodes.zip(nproc).and_then(|(a, b)| a.checked_mul(b));
        let read: &[&str] = &[
            "num-layers",
            "hidden-size",
            "ffn-hidden-size",
            "num-attention-heads",
            "group-query-attention",
            "num-query-groups",
            "kv-channels",
            "seq-length",
            "max-position-embeddings",
            "position-embedding-type",
            "normalization",
            "swiglu",
            "untie-embeddings-and-output-weights",
            "disable-bias-linear",
            "add-qkv-bias",
            "attention-dropout",
            "hidden-dropout",
            "attention-backend",
            "vocab-size",
            "padded-vocab-size",
            "num-experts",
            "moe-router-topk",
            "moe-ffn-hidden-size",
            "moe-shared-expert-intermediate-size",
            "moe-expert-capacity-factor",
            "tensor-model-parallel-size",
            "pipeline-model-parallel-size",
            "pipeline-model-parallel-layout",
            "decoder-first-pipeline-num-layers",
            "decoder-last-pipeline-num-layers",
            "num-virtual-stages-per-pipeline-rank",
            "num-layers-per-virtual-pipeline-stage",
            "micro-batch-size",
            "global-batch-size",
            "recompute-granularity",
            "recompute-method",
            "recompute-num-layers",
            "use-distributed-optimizer",
            "use-megatron-fsdp",
            "data-parallel-sharding-strategy",
            "sequence-parallel",
            "tp-comm-overlap",
            "expert-model-parallel-size",
            "context-parallel-size",
            "cp-comm-type",
            "expert-tensor-parallel-size",
            "optimizer-cpu-offload",
            "optimizer-offload-fraction",
            "bf16",
            "fp16",
            "fp8-format",
            "fp8-recipe",
            "fp8-param-gather",
            "megatron-fsdp-main-grads-dtype",
            "nnodes",
            "nproc-per-node",
            // What hetplan's Megatron estimate assumes (gradient reduction and parameter
            // gathering overlap the backward and forward passes).
            "overlap-grad-reduce",
            "overlap-param-gather",
        ];
        let reads_gradients = !job.has("use-megatron-fsdp");
        job.ignored = job
            .flags
            .keys()
            .filter(|k| !read.contains(&k.as_str()))
            .filter(|k| !(reads_gradients && GRADIENT_FLAGS.contains(&k.as_str())))
            .map(|k| format!("--{k}"))
            .collect();
        Ok(job)
    }

    /// The training precision and the collectives' element types: `--bf16` / `--fp16` (else
    /// FP32, or TF32 under the script's switch); Transformer Engine's FP8 (`--fp8-format`, with
    /// `--bf16`, one scale per tensor: the `delayed` and `tensorwise` recipes) and its FP8
    /// weights (`--fp8-param-gather`); BF16 gradients (`--grad-reduce-in-bf16`) or FP32 ones
    /// under FP16 (`--accumulate-allreduce-grads-in-fp32`, which `--bf16` implies: arguments.py).
    /// What hetplan's export writes for a plan, read back.
    fn precision(&self) -> Result<(Precision, CollectiveDtypes), InputError> {
        let at = |flag: &str| self.flags.get(flag).map_or(0, |f| f.offset);
        let formats = ["hybrid", "e4m3"];
        if self.has("fp8-format") && self.value("fp8-format").is_none() {
            return Err(self
                .error_at(at("fp8-format"), "--fp8-format: expected a format".into())
                .hint(Some(format!("one of: {}", formats.join(", ")))));
        }
        let precision = if self.choice("fp8-format", &formats)?.is_some() {
            if !self.has("bf16") {
                return Err(self
                    .error_at(
                        at("fp8-format"),
                        "--fp8-format without --bf16: hetplan models FP8 training as \
                         Transformer Engine's FP8 products with BF16 elsewhere"
                            .into(),
                    )
                    .hint(Some("add --bf16, as Megatron's FP8 examples do".into())));
            }
            let recipes = ["delayed", "tensorwise", "blockwise", "mxfp8", "custom"];
            match self.choice("fp8-recipe", &recipes)?.as_deref() {
                None | Some("delayed" | "tensorwise") => Precision::Fp8,
                Some(r) => {
                    return Err(self
                        .error_at(
                            at("fp8-recipe"),
                            format!(
                                "--fp8-recipe {r}: hetplan models FP8 with one scale per tensor \
                                 (the `delayed` and `tensorwise` recipes)"
                            ),
                        )
                        .hint(Some(
                            "plan with --fp8-recipe tensorwise, or compare by hand".into(),
                        )))
                }
            }
        } else if self.has("bf16") {
            Precision::Bf16
        } else if self.has("fp16") {
            Precision::Fp16
        } else if self.tf32_override {
            Precision::Tf32
        } else {
            Precision::Fp32
        };
        let mut dtypes = CollectiveDtypes::default();
        if self.has("fp8-param-gather") {
            if precision != Precision::Fp8 {
                return Err(self
                    .error_at(
                        at("fp8-param-gather"),
                        "--fp8-param-gather keeps the weights in FP8: it needs FP8 training".into(),
                    )
                    .hint(Some("add --fp8-format hybrid --bf16, or remove it".into())));
            }
            if !self.has("use-distributed-optimizer") && !self.has("use-megatron-fsdp") {
                return Err(self
                    .error_at(
                        at("fp8-param-gather"),
                        "--fp8-param-gather gathers the weights in FP8: it needs the \
                         distributed optimizer or Megatron-FSDP"
                            .into(),
                    )
                    .hint(Some("add --use-distributed-optimizer".into())));
            }
            dtypes.params = Some(Precision::Fp8);
        }
        if self.has("use-megatron-fsdp") {
            // Its own flag; `auto` (the default) is the parameters' type (BF16 for FP8 ones),
            // which is not the default hetplan prices for Megatron: named where it differs.
            let types = ["fp32", "bf16", "fp16", "auto"];
            let g = match self
                .choice("megatron-fsdp-main-grads-dtype", &types)?
                .as_deref()
            {
                Some("fp32") => Precision::Fp32,
                Some("bf16") => Precision::Bf16,
                Some("fp16") => Precision::Fp16,
                _ => match precision {
                    Precision::Fp8 | Precision::Fp8Rowwise => Precision::Bf16,
                    Precision::Tf32 => Precision::Fp32,
                    p => p,
                },
            };
            let default = crate::plan::default_gradient_dtype(Engine::Megatron, precision);
            let same = g == default || (g == Precision::Fp32 && default == Precision::Tf32);
            dtypes.gradients = (!same).then_some(g);
        } else if self.has("grad-reduce-in-bf16") {
            if !matches!(precision, Precision::Bf16 | Precision::Fp8) {
                return Err(self
                    .error_at(
                        at("grad-reduce-in-bf16"),
                        "--grad-reduce-in-bf16 without --bf16: hetplan reads BF16 gradients of \
                         BF16 or FP8 training"
                            .into(),
                    )
                    .hint(Some("add --bf16, or remove it".into())));
            }
            dtypes.gradients = Some(Precision::Bf16);
        } else if self.has("accumulate-allreduce-grads-in-fp32") && precision == Precision::Fp16 {
            dtypes.gradients = Some(Precision::Fp32);
        }
        Ok((precision, dtypes))
    }

    fn error_at(&self, offset: usize, message: String) -> InputError {
        InputError::new(message).at_offset(&self.src, offset)
    }

    fn missing(&self, flag: &str) -> InputError {
        InputError::new(format!(
            "--{flag} is missing: hetplan needs it to know the job"
        ))
        .hint(Some(format!("add --{flag} to the arguments")))
    }

    fn has(&self, flag: &str) -> bool {
        self.flags.contains_key(flag)
    }

    fn value(&self, flag: &str) -> Option<&Word> {
        self.flags.get(flag).and_then(|f| f.value.as_ref())
    }

    fn parsed<T: std::str::FromStr>(
        &self,
        flag: &str,
        kind: &str,
    ) -> Result<Option<T>, InputError> {
        let Some(f) = self.flags.get(flag) else {
            return Ok(None);
        };
        let Some(v) = &f.value else {
            return Err(self
                .error_at(f.offset, format!("--{flag} needs a value ({kind})"))
                .hint(Some(format!("write --{flag} followed by {kind}"))));
        };
        v.text.parse::<T>().map(Some).map_err(|_| {
            let unknown = v.text.starts_with('$');
            self.error_at(
                v.offset,
                format!("--{flag}: expected {kind}, found `{}`", v.text),
            )
            .hint(Some(if unknown {
                "hetplan does not expand shell variables: write the value itself".into()
            } else {
                format!("write {kind}")
            }))
        })
    }

    fn int(&self, flag: &str) -> Result<Option<u64>, InputError> {
        self.parsed::<u64>(flag, "a whole number")
    }

    fn float(&self, flag: &str) -> Result<Option<f64>, InputError> {
        self.parsed::<f64>(flag, "a number")
    }

    fn choice(&self, flag: &str, allowed: &[&str]) -> Result<Option<String>, InputError> {
        let Some(v) = self.value(flag) else {
            return Ok(None);
        };
        if allowed.contains(&v.text.as_str()) {
            Ok(Some(v.text.clone()))
        } else {
            Err(self
                .error_at(
                    v.offset,
                    format!("--{flag}: `{}` is not one hetplan knows", v.text),
                )
                .hint(Some(format!("one of: {}", allowed.join(", ")))))
        }
    }

    /// The model's shape.
    fn transformer(&self, name: &str) -> Result<TransformerConfig, InputError> {
        let req =
            |f: &str| -> Result<u64, InputError> { self.int(f)?.ok_or_else(|| self.missing(f)) };
        let layers = req("num-layers")?;
        let hidden = req("hidden-size")?;
        let heads = req("num-attention-heads")?;
        let swiglu = self.has("swiglu");
        let ffn = match self.int("ffn-hidden-size")? {
            Some(f) => f,
            // arguments.py: `int((4 * h * 2 / 3) / 64) * 64` with SwiGLU, 4h otherwise.
            None if swiglu => (hidden.saturating_mul(8) / 3) / 64 * 64,
            None => hidden.saturating_mul(4),
        };
        let kv_heads = if self.has("group-query-attention") {
            self.int("num-query-groups")?.unwrap_or(heads)
        } else {
            heads
        };
        let head_dim = self
            .int("kv-channels")?
            .unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let vocab = match (self.int("vocab-size")?, self.int("padded-vocab-size")?) {
            (_, Some(v)) | (Some(v), None) => v,
            (None, None) => {
                return Err(self.missing("vocab-size").hint(Some(
                    "Megatron takes the vocabulary from the tokenizer; give hetplan its size \
                     with --vocab-size"
                        .into(),
                )))
            }
        };
        let position = match self
            .choice(
                "position-embedding-type",
                &["learned_absolute", "rope", "yarn", "mrope", "none"],
            )?
            .as_deref()
        {
            None | Some("learned_absolute") => PositionKind::Learned,
            _ => PositionKind::Rotary,
        };
        let norm = match self
            .choice("normalization", &["LayerNorm", "RMSNorm"])?
            .as_deref()
        {
            Some("RMSNorm") => NormKind::RmsNorm,
            _ => NormKind::LayerNorm,
        };
        let bias = !self.has("disable-bias-linear");
        let dropout = self.float("attention-dropout")?.unwrap_or(0.1) > 0.0
            || self.float("hidden-dropout")?.unwrap_or(0.1) > 0.0;
        let attn_impl = match self
            .choice(
                "attention-backend",
                &["flash", "fused", "unfused", "local", "auto"],
            )?
            .as_deref()
        {
            Some("unfused") | Some("local") => AttnImpl::Torch,
            _ => AttnImpl::Flash,
        };
        let seq = self.int("seq-length")?.unwrap_or(0);
        let moe = match self.int("num-experts")? {
            None | Some(0) => None,
            Some(experts) => Some(MoeConfig {
                experts,
                top_k: self.int("moe-router-topk")?.unwrap_or(2),
                expert_ffn: self.int("moe-ffn-hidden-size")?.unwrap_or(ffn),
                shared_ffn: self.int("moe-shared-expert-intermediate-size")?,
            }),
        };
        Ok(TransformerConfig {
            name: name.to_string(),
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            ffn,
            mlp: if swiglu {
                MlpKind::SwiGlu
            } else {
                MlpKind::Gelu
            },
            norm,
            position,
            vocab,
            max_seq_len: self.int("max-position-embeddings")?.unwrap_or(seq),
            attn_bias: bias || self.has("add-qkv-bias"),
            mlp_bias: bias,
            norm_bias: norm == NormKind::LayerNorm,
            tied_embeddings: !self.has("untie-embeddings-and-output-weights"),
            parallel_attn: false,
            shared_norm: false,
            causal: true,
            attn_impl,
            fused_loss: false,
            fused_norm: false,
            dropout,
            moe,
            quirks: Default::default(),
        })
    }

    /// The plan the job runs on `cluster`: its ranks on `ranks` (the export's `ranks.json`, in
    /// node-rank order) or on the cluster's GPUs in order.
    pub fn plan(
        &self,
        cluster: &Cluster,
        ranks: Option<&[NodeLaunch]>,
    ) -> Result<Plan, InputError> {
        let tp = self
            .int("tensor-model-parallel-size")?
            .unwrap_or(1)
            .clamp(1, 1 << 20);
        let pp = self
            .int("pipeline-model-parallel-size")?
            .unwrap_or(1)
            .clamp(1, 1 << 20);
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
            None => {
                let all = cluster.gpus();
                let n = self
                    .world_size
                    .map_or(all.len(), |w| (w as usize).min(all.len()));
                all[..n].to_vec()
            }
        };
        for g in &gpus {
            if g.node as usize >= cluster.nodes.len()
                || g.local >= cluster.nodes[g.node as usize].num_gpus
            {
                return Err(InputError::new(format!(
                    "the ranks name GPU {g}, which the cluster does not have"
                ))
                .hint(Some(
                    "import with the cluster the job was exported for".into(),
                )));
            }
        }
        let cp = self
            .int("context-parallel-size")?
            .unwrap_or(1)
            .clamp(1, 1 << 20);
        let world = gpus.len() as u64;
        if world == 0 || !world.is_multiple_of(tp * pp * cp) {
            let at = (self.flags.get("tensor-model-parallel-size"))
                .or(self.flags.get("pipeline-model-parallel-size"))
                .or(self.flags.get("context-parallel-size"))
                .map_or(0, |f| f.offset);
            let what = if cp > 1 {
                format!("TP × PP × CP = {tp} × {pp} × {cp}")
            } else {
                format!("TP × PP = {tp} × {pp}")
            };
            return Err(self
                .error_at(at, format!("{world} GPUs are not a multiple of {what}"))
                .hint(Some(
                    "give the job's world size with torchrun's --nnodes and --nproc_per_node, or \
                 import with the cluster it runs on"
                        .into(),
                )));
        }
        // Megatron's data-parallel size: groups of `cp` replicas.
        let dp = world / (tp * pp * cp);
        let replicas = dp * cp;
        let mbs = self
            .int("micro-batch-size")?
            .ok_or_else(|| self.missing("micro-batch-size"))?;
        let per_step = mbs.checked_mul(dp).unwrap_or(0);
        let gbs = self.int("global-batch-size")?.unwrap_or(per_step);
        if per_step == 0 || gbs == 0 || !gbs.is_multiple_of(per_step) {
            let at = self.flags.get("global-batch-size").map_or(0, |f| f.offset);
            return Err(self
                .error_at(
                    at,
                    format!(
                        "the global batch {gbs} is not a multiple of micro-batch × DP = {mbs} × \
                         {dp}"
                    ),
                )
                .hint(Some(format!(
                    "DP is the {world} GPUs over TP × PP × CP = {}",
                    tp * pp * cp
                ))));
        }
        let chunks = self.chunks(pp as usize)?;
        let v = chunks.len() / pp as usize;
        let zero = if self.has("use-megatron-fsdp") {
            match self
                .choice(
                    "data-parallel-sharding-strategy",
                    &["no_shard", "optim", "optim_grads", "optim_grads_params"],
                )?
                .as_deref()
            {
                Some("no_shard") => 0,
                Some("optim") => 1,
                Some("optim_grads") => 2,
                _ => 3,
            }
        } else if self.has("use-distributed-optimizer") {
            1
        } else {
            0
        };
        let recompute = match self
            .choice("recompute-granularity", &["full", "selective"])?
            .as_deref()
        {
            None => Recompute::None,
            Some("selective") => Recompute::Selective,
            _ => {
                let k = self.int("recompute-num-layers")?.unwrap_or(1);
                match self
                    .choice("recompute-method", &["uniform", "block"])?
                    .as_deref()
                {
                    // block: the first k layers of each stage.
                    Some("block") => Recompute::Layers(k.min(u64::from(u32::MAX)) as u32),
                    // uniform: every layer, checkpointed in groups of k.
                    _ => Recompute::Full,
                }
            }
        };
        let offload = if self.has("optimizer-cpu-offload") {
            Offload {
                optimizer: self.float("optimizer-offload-fraction")?.unwrap_or(1.0),
                ..Default::default()
            }
        } else {
            Offload::default()
        };
        // `--expert-model-parallel-size`: expert-parallel groups of that many DP ranks.
        let ep = self.int("expert-model-parallel-size")?.unwrap_or(1);
        if ep > 1 {
            let at = self
                .flags
                .get("expert-model-parallel-size")
                .map_or(0, |f| f.offset);
            let experts = self.model.layers.iter().find_map(|l| l.experts());
            let problem = match experts {
                None => Some((
                    "the model has no experts (--num-experts)".to_string(),
                    "drop --expert-model-parallel-size, or give --num-experts".to_string(),
                )),
                Some((e, _)) if !e.is_multiple_of(ep) => Some((
                    format!("it does not divide the {e} experts"),
                    "a divisor of --num-experts".to_string(),
                )),
                _ if !replicas.is_multiple_of(ep) => Some((
                    format!("it does not divide the data-parallel size {replicas}"),
                    format!("a divisor of {replicas} (GPUs / (TP × PP))"),
                )),
                _ => None,
            };
            if let Some((why, hint)) = problem {
                return Err(self
                    .error_at(at, format!("--expert-model-parallel-size {ep}: {why}"))
                    .hint(Some(hint)));
            }
        }
        // `--cp-comm-type` (TransformerConfig.cp_comm_type): p2p is the ring, a2a Ulysses;
        // all_gather and the hierarchical a2a+p2p are not modelled.
        let cp_comm = match self
            .choice("cp-comm-type", &["p2p", "a2a", "all_gather", "a2a+p2p"])?
            .as_deref()
        {
            None | Some("p2p") => crate::plan::CpComm::Ring,
            Some("a2a") => crate::plan::CpComm::AllToAll,
            Some(other) => {
                let at = self.flags.get("cp-comm-type").map_or(0, |f| f.offset);
                return Err(self
                    .error_at(
                        at,
                        format!("--cp-comm-type {other}: hetplan models p2p (the ring) and a2a"),
                    )
                    .hint(Some("use p2p or a2a".into())));
            }
        };
        // `--expert-tensor-parallel-size` (MoE parallel folding): every MoE stage's etp, none
        // where it is the TP degree (Megatron's default).
        let etp = self
            .int("expert-tensor-parallel-size")?
            .map(|e| e.clamp(1, 1 << 20) as u32)
            .filter(|&e| e as u64 != tp);
        let per_stage = (tp * replicas) as usize;
        let stages = chunks
            .iter()
            .enumerate()
            .map(|(i, &layers)| {
                let p = i % pp as usize;
                let len = layers.len() as u32;
                let moe = layers
                    .iter()
                    .any(|l| self.model.layers[l].experts().is_some());
                Stage {
                    ep: if moe {
                        ep.min(u64::from(u32::MAX)) as u32
                    } else {
                        1
                    },
                    layers,
                    devices: gpus[p * per_stage..(p + 1) * per_stage].to_vec(),
                    tp: tp as u32,
                    replica_tp: Vec::new(),
                    dp: replicas as u32,
                    micro_batch_sizes: vec![mbs; replicas as usize],
                    zero,
                    recompute: match recompute {
                        Recompute::Layers(k) if k >= len => Recompute::Full,
                        r => r,
                    },
                    offload,
                    sequence_parallel: self.has("sequence-parallel") && tp > 1,
                    replica_samples: Vec::new(),
                    cp: cp as u32,
                    etp: etp.filter(|_| moe),
                }
            })
            .collect();
        Ok(Plan {
            global_batch: gbs,
            micro_batches: gbs / per_step,
            schedule: if v > 1 {
                Schedule::Interleaved {
                    virtual_stages: v as u32,
                }
            } else {
                Schedule::OneFOneB
            },
            engine: Engine::Megatron,
            precision: self.precision,
            collective_dtypes: self.collective_dtypes,
            // megatron-core: a negative capacity factor means none (dropless).
            moe_capacity_factor: self
                .float("moe-expert-capacity-factor")?
                .filter(|c| *c >= 0.0),
            cp_comm,
            // arguments.py asserts --sequence-parallel with it, and turns sequence parallelism
            // off (so the assertion fails) without TP.
            tp_comm_overlap: self.has("tp-comm-overlap") && tp > 1 && self.has("sequence-parallel"),
            compile: Default::default(),
            stages,
            made_for: Some(crate::plan::MadeFor::of(&self.model, cluster)),
        })
    }

    /// The model chunks in Megatron's order (chunk `i` on pipeline rank `i mod pp`), as layer
    /// ranges of hetplan's model (embedding, blocks, head).
    fn chunks(&self, pp: usize) -> Result<Vec<LayerRange>, InputError> {
        let blocks = self.model.layers.len().saturating_sub(2);
        let ranges = |counts: &[usize]| -> Vec<LayerRange> {
            // Decoder layers per chunk; the embedding joins the first, the head the last.
            let mut out = Vec::with_capacity(counts.len());
            let mut start = 0;
            for (i, &c) in counts.iter().enumerate() {
                let mut end = start + c;
                if i == 0 {
                    end += 1;
                }
                if i + 1 == counts.len() {
                    end += 1;
                }
                out.push(LayerRange { start, end });
                start = end;
            }
            out
        };
        if let Some(w) = self.value("pipeline-model-parallel-layout") {
            return self.layout(w, pp, blocks);
        }
        let v = match (
            self.int("num-virtual-stages-per-pipeline-rank")?,
            self.int("num-layers-per-virtual-pipeline-stage")?,
        ) {
            (Some(v), _) => v as usize,
            (None, Some(per)) if per > 0 => blocks / pp / per as usize,
            _ => 1,
        }
        .max(1);
        let n = pp.saturating_mul(v);
        if n > blocks.max(1) {
            return Err(InputError::new(format!(
                "{n} pipeline chunks (PP × virtual stages) for {blocks} decoder layers"
            ))
            .hint(Some("every chunk needs at least one layer".into())));
        }
        let first = self
            .int("decoder-first-pipeline-num-layers")?
            .map(|x| x as usize);
        let last = self
            .int("decoder-last-pipeline-num-layers")?
            .map(|x| x as usize);
        let (first, last) = if n == 1 { (None, None) } else { (first, last) };
        let fixed = first.unwrap_or(0) + last.unwrap_or(0);
        let middle = n - usize::from(first.is_some()) - usize::from(last.is_some());
        let even = blocks.checked_sub(fixed).filter(|rest| {
            if middle == 0 {
                *rest == 0
            } else {
                rest.is_multiple_of(middle)
            }
        });
        let Some(rest) = even else {
            return Err(InputError::new(format!(
                "{blocks} decoder layers do not split evenly over {n} pipeline chunks{}",
                if fixed > 0 {
                    " besides the first and last stage's"
                } else {
                    ""
                }
            ))
            .hint(Some(
                "Megatron refuses this too; use --pipeline-model-parallel-layout for an uneven \
                 split"
                    .into(),
            )));
        };
        let counts: Vec<usize> = (0..n)
            .map(|i| match (i, first, last) {
                (0, Some(f), _) => f,
                (i, _, Some(l)) if i == n - 1 => l,
                _ => rest / middle.max(1),
            })
            .collect();
        Ok(ranges(&counts))
    }

    /// `--pipeline-model-parallel-layout`: `E`, `t`, `L`, `|`, `x*n` and `(...)*n` as Megatron
    /// unrolls them (`PipelineParallelLayerLayout.parse_str_to_list`).
    fn layout(&self, w: &Word, pp: usize, blocks: usize) -> Result<Vec<LayerRange>, InputError> {
        let err = |m: String| {
            self.error_at(w.offset, format!("--pipeline-model-parallel-layout: {m}"))
                .hint(Some(
                    "write stages of E, t and L separated by |, e.g. Et*5|t*6L".into(),
                ))
        };
        let unrolled = unroll(&w.text.replace(',', "")).map_err(|m| err(m.to_string()))?;
        let chunks: Vec<&str> = unrolled.split('|').collect();
        if !chunks.len().is_multiple_of(pp) {
            return Err(err(format!(
                "{} stages are not a multiple of the pipeline size {pp}",
                chunks.len()
            )));
        }
        let mut out = Vec::with_capacity(chunks.len());
        let mut start = 0;
        let mut seen_t = 0;
        for (i, c) in chunks.iter().enumerate() {
            let mut len = 0;
            for ch in c.chars() {
                match ch {
                    't' => {
                        seen_t += 1;
                        len += 1
                    }
                    'E' if i == 0 && len == 0 => len += 1,
                    'L' if i + 1 == chunks.len() => len += 1,
                    'E' | 'L' => {
                        return Err(err(format!(
                            "`{ch}` must open the first stage (E) or close the last (L)"
                        )))
                    }
                    other => return Err(err(format!("`{other}` is not a layer hetplan knows"))),
                }
            }
            if len == 0 {
                return Err(err(format!(
                    "stage {i} has no layers; hetplan's stages are never empty"
                )));
            }
            out.push(LayerRange {
                start,
                end: start + len,
            });
            start += len;
        }
        if seen_t != blocks || start != blocks + 2 {
            return Err(err(format!(
                "it has {seen_t} decoder layers and {} in all; the model has {blocks} and {}",
                start,
                blocks + 2
            )));
        }
        Ok(out)
    }
}

/// The longest unrolled layout read: a few layers per layer hetplan accepts.
const MAX_LAYOUT: usize = 4 * crate::model::LIMITS.layers as usize;

/// Megatron's unrolling of `(ab|cd)*2` and `t*3`.
fn unroll(s: &str) -> Result<String, &'static str> {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let count = |i: &mut usize| -> Option<usize> {
        if chars.get(*i) != Some(&'*') {
            return None;
        }
        let start = *i + 1;
        let mut j = start;
        while j < chars.len() && chars[j].is_ascii_digit() {
            j += 1;
        }
        // `x*` without a count is no repetition: the `*` stays and is refused as a layer.
        let n = chars[start..j].iter().collect::<String>().parse().ok()?;
        *i = j;
        Some(n)
    };
    while i < chars.len() {
        if out.len() > MAX_LAYOUT {
            return Err("it unrolls to more layers than any model has");
        }
        if chars[i] == '(' {
            let close = chars[i..]
                .iter()
                .position(|&c| c == ')')
                .map(|p| p + i)
                .ok_or("a `(` is never closed")?;
            let inner: String = chars[i + 1..close].iter().collect();
            i = close + 1;
            let n = count(&mut i).ok_or("`(...)` must be followed by `*n`")?;
            if inner.len().saturating_mul(n) > MAX_LAYOUT {
                return Err("it unrolls to more layers than any model has");
            }
            out.push_str(&inner.repeat(n));
        } else {
            let c = chars[i];
            i += 1;
            match count(&mut i) {
                Some(n) if n > MAX_LAYOUT => {
                    return Err("it unrolls to more layers than any model has")
                }
                Some(n) => out.push_str(&c.to_string().repeat(n)),
                None => out.push(c),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One node of eight `gpu`s.
    fn node_of(gpu: &str) -> Cluster {
        crate::cluster::spec::parse_cluster_toml(&format!(
            "name = \"t\"\n[[node_group]]\ngpu = \"{gpu}\"\ngpus_per_node = 8\nnodes = 1\n"
        ))
        .unwrap()
    }

    /// The flags of a two-block job, `extra` after them.
    fn small_job(extra: &str) -> String {
        format!(
            "--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 \
             --max-position-embeddings 512 --vocab-size 1024 --micro-batch-size 1 \
             --global-batch-size 16 {extra}"
        )
    }

    #[test]
    fn layouts_unroll_as_megatron_does() {
        assert_eq!(unroll("Et*3|(tt|)*2L").unwrap(), "Ettt|tt|tt|L");
        assert_eq!(unroll("Et*|tL").unwrap(), "Et*|tL");
        assert!(unroll("(t|").is_err());
    }

    #[test]
    fn a_command_line_gives_model_and_plan() {
        let src = "torchrun --nnodes 2 --nproc_per_node 4 pretrain_gpt.py \\\n  --num-layers 4 \
                   --hidden-size 256 --num-attention-heads 8 --seq-length 512 \
                   --max-position-embeddings 512 --vocab-size 1000 --swiglu --normalization RMSNorm \
                   --position-embedding-type rope --disable-bias-linear \
                   --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
                   --pipeline-model-parallel-layout 'Et|t*3L' --micro-batch-size 2 \
                   --global-batch-size 16 --use-distributed-optimizer --recompute-granularity \
                   selective --bf16 --lr 1e-4";
        let job = MegatronJob::parse(src, "m").unwrap();
        assert_eq!(job.world_size, Some(8));
        assert_eq!(job.ignored, vec!["--lr".to_string()]);
        let cfg = job.model.transformer.clone().unwrap();
        assert_eq!(
            (cfg.ffn, cfg.mlp, cfg.norm),
            (682 / 64 * 64, MlpKind::SwiGlu, NormKind::RmsNorm)
        );
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 2\ninter_node_bandwidth = \"100 Gbps\"\n",
        )
        .unwrap();
        let plan = job.plan(&cluster, None).unwrap();
        assert_eq!(plan.stages.len(), 2);
        assert_eq!(plan.stages[0].layers, LayerRange { start: 0, end: 2 });
        assert_eq!(plan.stages[1].layers, LayerRange { start: 2, end: 6 });
        assert_eq!((plan.stages[0].dp, plan.micro_batches), (2, 4));
        assert_eq!(plan.stages[1].devices[0], GpuId { node: 1, local: 0 });
        assert_eq!(plan.stages[0].zero, 1);
        assert!(crate::plan::ValidPlan::new(plan, &job.model, &cluster).is_ok());
    }

    /// FP32 training with PyTorch's TF32 switch set in the script (as hetplan's export of a
    /// `tf32` plan writes it) reads as `tf32`; unset, set to 0 last, or under a 16-bit flag, not.
    #[test]
    fn the_tf32_switch_of_a_launch_script_is_read() {
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 8\nnodes = 1\n",
        )
        .unwrap();
        let args = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 \
                    --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
                    --vocab-size 1000 --micro-batch-size 1 --global-batch-size 16";
        for (script, want) in [
            (format!("{args}\n"), Precision::Fp32),
            (
                format!("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1\n{args}\n"),
                Precision::Tf32,
            ),
            (
                format!("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=\"1\" {args}\n"),
                Precision::Tf32,
            ),
            (
                format!(
                    "export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1\n\
                     export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0\n{args}\n"
                ),
                Precision::Fp32,
            ),
            (
                format!("# TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 is not set here\n{args}\n"),
                Precision::Fp32,
            ),
            (
                format!("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1\n{args} --bf16\n"),
                Precision::Bf16,
            ),
            (
                format!("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1;\necho \"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=$TORCH_ALLOW_TF32_CUBLAS_OVERRIDE\"\n{args}\n"),
                Precision::Tf32,
            ),
            (
                format!("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1\n{args}\n"),
                Precision::Fp32,
            ),
            (
                format!("export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1\nunset TORCH_ALLOW_TF32_CUBLAS_OVERRIDE\n{args}\n"),
                Precision::Fp32,
            ),
        ] {
            let job = MegatronJob::parse(&script, "m").unwrap();
            let plan = job.plan(&cluster, None).unwrap();
            assert_eq!(plan.precision, want, "{script}");
        }
        // A JSON list is the program's arguments, not its environment.
        let list = r#"["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "8",
            "--seq-length", "512", "--max-position-embeddings", "512", "--vocab-size", "1000",
            "--micro-batch-size", "1", "--global-batch-size", "16",
            "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"]"#;
        let plan = MegatronJob::parse(list, "m")
            .unwrap()
            .plan(&cluster, None)
            .unwrap();
        assert_eq!(plan.precision, Precision::Fp32);
    }

    #[test]
    fn bad_values_are_located() {
        let e = MegatronJob::parse("--num-layers $L --hidden-size 8", "m").unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(14)));
        assert!(e.hint.unwrap().contains("shell variables"));
        let e = MegatronJob::parse("--num-layers 2 --fp8-format hybrid", "m").unwrap_err();
        assert!(e.message.contains("without --bf16"), "{}", e.message);
    }

    /// What hetplan's Megatron export writes for a plan's precision and its collectives'
    /// types, read back; what hetplan does not model, refused at its flag.
    #[test]
    fn precision_and_collective_types_are_read() {
        use Precision::{Bf16, Fp16, Fp32, Fp8};
        let cluster = node_of("h100-sxm5-80gb");
        let args = small_job;
        for (extra, precision, params, gradients) in [
            ("--bf16", Bf16, None, None),
            ("--bf16 --grad-reduce-in-bf16", Bf16, None, Some(Bf16)),
            // `--bf16` implies it (arguments.py): the engine's default.
            (
                "--bf16 --accumulate-allreduce-grads-in-fp32",
                Bf16,
                None,
                None,
            ),
            ("--fp16", Fp16, None, None),
            (
                "--fp16 --accumulate-allreduce-grads-in-fp32",
                Fp16,
                None,
                Some(Fp32),
            ),
            ("--bf16 --fp8-format hybrid", Fp8, None, None),
            (
                "--bf16 --fp8-format e4m3 --fp8-recipe tensorwise --fp8-param-gather \
                 --grad-reduce-in-bf16 --use-distributed-optimizer",
                Fp8,
                Some(Fp8),
                Some(Bf16),
            ),
        ] {
            let job = MegatronJob::parse(&args(extra), "m").unwrap();
            assert!(job.ignored.is_empty(), "{extra}: {:?}", job.ignored);
            let plan = job.plan(&cluster, None).unwrap();
            let d = plan.collective_dtypes;
            assert_eq!(
                (plan.precision, d.params, d.gradients),
                (precision, params, gradients),
                "{extra}"
            );
            let valid = crate::plan::ValidPlan::new(plan, &job.model, &cluster);
            assert!(valid.is_ok(), "{extra}: {:?}", valid.err());
        }
        // Megatron-FSDP takes its gradients' type from a flag of its own: the others are
        // listed as ignored.
        let job = MegatronJob::parse(
            &args("--bf16 --use-megatron-fsdp --grad-reduce-in-bf16"),
            "m",
        )
        .unwrap();
        assert_eq!(job.ignored, vec!["--grad-reduce-in-bf16".to_string()]);
        // Its `auto`: the parameters' type, named since hetplan's Megatron default is FP32.
        assert_eq!(job.collective_dtypes.gradients, Some(Bf16));
        for (flag, gradients) in [("fp32", None), ("bf16", Some(Bf16)), ("auto", Some(Bf16))] {
            let job = MegatronJob::parse(
                &args(&format!(
                    "--bf16 --use-megatron-fsdp --megatron-fsdp-main-grads-dtype {flag}"
                )),
                "m",
            )
            .unwrap();
            assert!(job.ignored.is_empty(), "{:?}", job.ignored);
            assert_eq!(job.collective_dtypes.gradients, gradients, "{flag}");
        }
        for (extra, at, says) in [
            ("--fp8-format hybrid", "--fp8-format", "without --bf16"),
            (
                "--bf16 --fp8-format hybrid --fp8-recipe blockwise",
                "--fp8-recipe",
                "one scale per tensor",
            ),
            ("--bf16 --fp8-format e5m2", "e5m2", "not one hetplan knows"),
            (
                "--bf16 --fp8-param-gather",
                "--fp8-param-gather",
                "needs FP8",
            ),
            (
                "--bf16 --fp8-format hybrid --fp8-param-gather",
                "--fp8-param-gather",
                "distributed optimizer",
            ),
            (
                "--bf16 --fp8-format --fp8-param-gather",
                "--fp8-format",
                "expected a format",
            ),
            (
                "--bf16 --fp8-format hybrid --no-fp8-wgrad",
                "--no-fp8-wgrad",
                "outside FP8",
            ),
            (
                "--fp16 --grad-reduce-in-bf16",
                "--grad-reduce-in-bf16",
                "without --bf16",
            ),
        ] {
            let src = args(extra);
            let e = MegatronJob::parse(&src, "m").unwrap_err();
            assert!(e.message.contains(says), "{extra}: {}", e.message);
            assert!(e.hint.is_some(), "{extra}");
            let col = e.column.unwrap();
            assert!(src[col - 1..].starts_with(at), "{extra}: {e:?}");
        }
    }

    #[test]
    fn expert_parallelism_is_read_and_checked() {
        let cluster = node_of("a100-sxm4-80gb");
        let args = small_job;
        let job = MegatronJob::parse(
            &args("--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4"),
            "m",
        )
        .unwrap();
        let plan = job.plan(&cluster, None).unwrap();
        assert_eq!(plan.stages[0].ep, 4);
        assert!(crate::plan::ValidPlan::new(plan, &job.model, &cluster).is_ok());
        for (extra, says) in [
            ("--expert-model-parallel-size 2", "no experts"),
            (
                "--num-experts 6 --moe-router-topk 2 --expert-model-parallel-size 4",
                "does not divide the 6 experts",
            ),
            (
                "--num-experts 16 --moe-router-topk 2 --expert-model-parallel-size 16",
                "does not divide the data-parallel size 8",
            ),
        ] {
            let src = args(extra);
            let e = MegatronJob::parse(&src, "m")
                .unwrap()
                .plan(&cluster, None)
                .unwrap_err();
            assert!(e.message.contains(says), "{extra}: {e}");
            assert_eq!(e.line, Some(1));
        }
    }
}
