//! A torchtitan 0.3 job as hetplan's model and plan, from its config module.
//!
//! torchtitan 0.3 takes its job as Python (`--module M --config F`: a function returning
//! `Trainer.Config`), which hetplan does not execute. It reads what such a module states
//! literally: keyword arguments with literal values (`tensor_parallel_degree=2`,
//! `pipeline_parallel_schedule="1F1B"`, `local_batch_size=8`, ...; the last one written wins,
//! as the innermost call would), `activation_checkpoint=FullAC.Config()` (or `SelectiveAC`),
//! and top-level constants of the model's shape as `hetplan export --to torchtitan` writes them
//! (`DIM`, `N_LAYERS`, `N_HEADS`, `N_KV_HEADS`, `FFN_HIDDEN_DIM`, `VOCAB_SIZE`,
//! `TIED_EMBEDDINGS`). A module that builds its model otherwise (`model_registry("8B")`) needs
//! the model from the caller; one whose values are computed is refused where they are read.
//! The layer split comes from the export's `ranks.json` (torchtitan's own default split is not
//! ported). Keys and defaults are torchtitan 0.3.0's (`config/configs.py`: `TrainingConfig`,
//! `ParallelismConfig`; `trainer.py` for the batch arithmetic).

use crate::cluster::{Cluster, GpuId};
use crate::error::InputError;
use crate::export::ranks::NodeLaunch;
use crate::model::{AttnImpl, MlpKind, Model, NormKind, PositionKind, TransformerConfig};
use crate::plan::{
    Compile, Engine, LayerRange, Offload, Plan, Precision, Recompute, Schedule, Stage,
};
use std::collections::BTreeMap;

/// A literal value and where it starts.
#[derive(Clone, Debug, PartialEq)]
struct Lit {
    text: String,
    offset: usize,
}

/// What a torchtitan config module states literally.
#[derive(Clone, Debug)]
pub struct TorchtitanJob {
    consts: BTreeMap<String, Lit>,
    /// Each keyword argument's last value in the module.
    kwargs: BTreeMap<String, Lit>,
    /// Every keyword argument in the order written, for those read inside one call
    /// ([`TorchtitanJob::kwarg_in_call`]).
    every_kwarg: Vec<(String, Lit)>,
    src: String,
    /// `src` with its comments, docstrings and the contents of its strings blanked
    /// ([`code_only`]): where its calls and their brackets are.
    structure: String,
}

/// `src` with its comments and triple-quoted strings (docstrings) blanked byte for byte,
/// newlines kept, so that an offset into it is the same offset into `src`: what a config
/// module's docstring or comment says (`Float8LinearConverter(...)` in an example, a
/// `key=value` in prose) is not code. Single- and double-quoted strings are values: kept, or
/// with `strings` their contents blanked too (their quotes kept), which leaves the brackets
/// and names of the code alone, for finding calls and their arguments.
fn code_only(src: &str, strings: bool) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    // The open one-line string: its delimiter and where its contents start.
    let mut quote: Option<(u8, usize)> = None;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(_) if c == b'\\' => i += 2,
            Some((q, from)) if c == q || c == b'\n' => {
                if strings {
                    blank(&mut out, from, i);
                }
                quote = None;
                i += 1;
            }
            Some(_) => i += 1,
            None if b[i..].starts_with(b"\"\"\"") || b[i..].starts_with(b"'''") => {
                let delim = &b[i..i + 3];
                // Its end: the first delimiter not escaped (`\\` escapes itself); the rest of
                // the file when there is none.
                let mut j = i + 3;
                let mut end = b.len();
                while j < b.len() {
                    if b[j] == b'\\' {
                        j += 2;
                    } else if b[j..].starts_with(delim) {
                        end = j + 3;
                        break;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, end);
                i = end;
            }
            None if c == b'#' => {
                let end = (i..b.len()).find(|&j| b[j] == b'\n').unwrap_or(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            None => {
                if c == b'"' || c == b'\'' {
                    quote = Some((c, i + 1));
                }
                i += 1;
            }
        }
    }
    if let (true, Some((_, from))) = (strings, quote) {
        blank(&mut out, from, b.len());
    }
    // Every blanked run starts and ends at an ASCII byte or the end: the bytes are still UTF-8.
    String::from_utf8(out).expect("whole characters are blanked or kept")
}

/// Identifier characters.
fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl TorchtitanJob {
    pub fn parse(src: &str) -> Result<TorchtitanJob, InputError> {
        let mut consts = BTreeMap::new();
        let mut every_kwarg = Vec::new();
        let mut line_start = 0;
        // Comments and docstrings carry no values.
        let masked = code_only(src, false);
        for code in masked.split_inclusive('\n') {
            let trimmed = code.trim_start();
            let indent = code.len() - trimmed.len();
            // `NAME = literal` at the top level.
            if indent == 0 {
                if let Some((name, value)) = code.split_once('=') {
                    let name = name.trim();
                    if !name.is_empty() && name.chars().all(ident) && !value.starts_with('=') {
                        let v = value.trim().trim_end_matches(',');
                        let offset = line_start + code.len() - value.trim_start().len();
                        consts.insert(
                            name.to_string(),
                            Lit {
                                text: v.to_string(),
                                offset,
                            },
                        );
                    }
                }
            }
            // `key=value` keyword arguments inside calls.
            let bytes: Vec<char> = code.chars().collect();
            let mut i = 0;
            let mut byte = line_start;
            let mut quote: Option<char> = None;
            while i < bytes.len() {
                let c = bytes[i];
                match quote {
                    Some(q) if c == q => quote = None,
                    Some(_) => {}
                    None if c == '"' || c == '\'' => quote = Some(c),
                    None if c == '='
                        && bytes.get(i + 1) != Some(&'=')
                        && i > 0
                        && !matches!(bytes[i - 1], '=' | '!' | '<' | '>' | ' ') =>
                    {
                        let mut k = i;
                        while k > 0 && ident(bytes[k - 1]) {
                            k -= 1;
                        }
                        let key: String = bytes[k..i].iter().collect();
                        let mut j = i + 1;
                        let mut depth = 0i32;
                        let mut q2: Option<char> = None;
                        while j < bytes.len() {
                            let d = bytes[j];
                            match q2 {
                                Some(q) if d == q => q2 = None,
                                Some(_) => {}
                                None if d == '"' || d == '\'' => q2 = Some(d),
                                None if d == '(' || d == '[' => depth += 1,
                                None if (d == ')' || d == ']') && depth == 0 => break,
                                None if d == ')' || d == ']' => depth -= 1,
                                None if d == ',' && depth == 0 => break,
                                None => {}
                            }
                            j += 1;
                        }
                        let value: String = bytes[i + 1..j].iter().collect();
                        if !key.is_empty() && !key.starts_with(|c: char| c.is_ascii_digit()) {
                            let at =
                                byte + bytes[i..=i].iter().map(|c| c.len_utf8()).sum::<usize>();
                            every_kwarg.push((
                                key,
                                Lit {
                                    text: value.trim().to_string(),
                                    offset: at,
                                },
                            ));
                        }
                    }
                    None => {}
                }
                byte += c.len_utf8();
                i += 1;
            }
            line_start += code.len();
        }
        let kwargs: BTreeMap<String, Lit> = every_kwarg.iter().cloned().collect();
        if !kwargs.contains_key("tensor_parallel_degree")
            && !kwargs.contains_key("pipeline_parallel_degree")
            && !kwargs.contains_key("local_batch_size")
        {
            return Err(InputError::new(
                "not a torchtitan config module: it states no ParallelismConfig or TrainingConfig \
                 values (tensor_parallel_degree=, pipeline_parallel_degree=, local_batch_size=)",
            )
            .at(1, 1)
            .hint(Some(
                "give the module whose function returns the Trainer.Config (`--config`)".into(),
            )));
        }
        Ok(TorchtitanJob {
            consts,
            kwargs,
            every_kwarg,
            src: src.to_string(),
            structure: code_only(src, true),
        })
    }

    fn error(&self, lit: &Lit, message: String) -> InputError {
        InputError::new(message).at_offset(&self.src, lit.offset)
    }

    /// A whole-number keyword or constant; `default` when absent.
    fn int(&self, map: &BTreeMap<String, Lit>, key: &str, default: i64) -> Result<i64, InputError> {
        match map.get(key) {
            None => Ok(default),
            Some(l) => l.text.replace('_', "").parse::<i64>().map_err(|_| {
                self.error(
                    l,
                    format!("{key}: expected a whole number, found `{}`", l.text),
                )
                .hint(Some(
                    "hetplan reads literal values only; write the number itself".into(),
                ))
            }),
        }
    }

    /// Where the module's code calls `name` or its `Config` (`name(` or `name.Config(`;
    /// comments, docstrings, strings, imports and mere mentions left out): byte offsets, in
    /// order.
    fn calls_of(&self, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        let mut start = 0;
        for code in self.structure.split_inclusive('\n') {
            for (at, _) in code.match_indices(name) {
                let before = code[..at].chars().next_back();
                let after = code[at + name.len()..].trim_start();
                if before.is_none_or(|c| !ident(c))
                    && (after.starts_with('(') || after.starts_with(".Config("))
                {
                    out.push(start + at);
                }
            }
            start += code.len();
        }
        out
    }

    /// The first of [`Self::calls_of`].
    fn call_of(&self, name: &str) -> Option<usize> {
        self.calls_of(name).first().copied()
    }

    /// The keyword argument `key` of the call at `at` (a [`Self::calls_of`] offset: its
    /// argument list is the first bracket after it to its match), if written there — not one
    /// of a call nested among its arguments.
    fn kwarg_in_call(&self, at: usize, key: &str) -> Option<&Lit> {
        // Strings are blank there: every bracket is the code's.
        let code = self.structure.as_bytes();
        let open = (at..code.len()).find(|&i| code[i] == b'(')?;
        let mut depth = 0i32;
        let mut close = code.len();
        // Brackets nested in the list: a keyword there is another call's.
        let mut nested: Vec<(usize, usize)> = Vec::new();
        let mut nested_from = 0;
        for (i, &c) in code.iter().enumerate().skip(open) {
            match c {
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    if depth == 2 {
                        nested_from = i;
                    }
                }
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 1 {
                        nested.push((nested_from, i));
                    }
                    if depth == 0 {
                        close = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        (self.every_kwarg.iter().rev())
            .find(|(k, l)| {
                k == key
                    && l.offset > open
                    && l.offset < close
                    && !nested.iter().any(|&(a, b)| l.offset > a && l.offset < b)
            })
            .map(|(_, l)| l)
    }

    fn string(&self, key: &str) -> Option<String> {
        self.kwargs
            .get(key)
            .map(|l| l.text.trim_matches(|c| c == '"' || c == '\'').to_string())
    }

    /// What runs under `torch.compile`: `compile=CompileConfig(enable=True, ...)` compiles
    /// its `components` (`["model", "loss"]` by default); `enable` is False by default
    /// (config/configs.py).
    fn compile(&self) -> Compile {
        let Some(l) = self.kwargs.get("compile") else {
            return Compile::Off;
        };
        let text: String = l.text.chars().filter(|c| !c.is_whitespace()).collect();
        let enabled = text.starts_with("CompileConfig(")
            && text.split(['(', ',', ')']).any(|arg| arg == "enable=True");
        let components = text
            .split_once("components=[")
            .map(|(_, rest)| rest.split(']').next().unwrap_or(""));
        match components {
            _ if !enabled => Compile::Off,
            Some(c) if !c.contains("model") => Compile::Off,
            Some(c) if !c.contains("\"loss\"") && !c.contains("'loss'") => Compile::Blocks,
            _ => Compile::On,
        }
    }

    fn flag(&self, key: &str, default: bool) -> bool {
        self.kwargs.get(key).map_or(default, |l| l.text == "True")
    }

    /// The model the module builds from hetplan's shape constants, if it states them.
    pub fn model(&self, name: &str) -> Result<Option<Model>, InputError> {
        let c = &self.consts;
        if !c.contains_key("DIM") || !c.contains_key("N_LAYERS") {
            return Ok(None);
        }
        let get = |k: &str| -> Result<u64, InputError> {
            let v = self.int(c, k, -1)?;
            u64::try_from(v).map_err(|_| {
                InputError::new(format!("the module states no whole {k} of at least 0"))
            })
        };
        let hidden = get("DIM")?;
        let heads = get("N_HEADS")?;
        let cfg = TransformerConfig {
            name: name.to_string(),
            hidden,
            layers: get("N_LAYERS")?,
            heads,
            kv_heads: get("N_KV_HEADS")?,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            ffn: get("FFN_HIDDEN_DIM")?,
            mlp: MlpKind::SwiGlu,
            norm: NormKind::RmsNorm,
            position: PositionKind::Rotary,
            vocab: get("VOCAB_SIZE")?,
            max_seq_len: self.int(c, "ROPE_MAX_SEQ_LEN", 2048)?.max(1) as u64,
            attn_bias: false,
            mlp_bias: false,
            norm_bias: false,
            tied_embeddings: c.get("TIED_EMBEDDINGS").is_some_and(|l| l.text == "True"),
            parallel_attn: false,
            shared_norm: false,
            causal: true,
            attn_impl: AttnImpl::Flash,
            fused_loss: false,
            fused_norm: false,
            dropout: false,
            moe: None,
            quirks: Default::default(),
        };
        cfg.check_limits()?;
        Ok(Some(cfg.build()))
    }

    /// The plan the module runs for `model` on `cluster`: ranks and layer split from an
    /// export's `ranks.json` (`nodes`, `parts`), else the cluster's GPUs in order and one stage.
    pub fn plan(
        &self,
        model: &Model,
        cluster: &Cluster,
        ranks: Option<(&[NodeLaunch], &[usize])>,
    ) -> Result<(Plan, u64), InputError> {
        let k = &self.kwargs;
        let int = |key: &str, d: i64| self.int(k, key, d);
        for key in ["context_parallel_degree", "expert_parallel_degree"] {
            if int(key, 1)? > 1 {
                let l = &k[key];
                return Err(self.error(l, format!("{key}: hetplan does not model it yet")));
            }
        }
        let gpus: Vec<GpuId> = match ranks {
            Some((nodes, _)) => nodes
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
        let world = gpus.len() as i64;
        let positive = |key: &str, v: i64| -> Result<u64, InputError> {
            u64::try_from(v)
                .ok()
                .filter(|x| (1..=1 << 20).contains(x))
                .ok_or_else(|| {
                    let e =
                        InputError::new(format!("{key} = {v} is not a degree hetplan can plan"));
                    match k.get(key) {
                        Some(l) => e.at_offset(&self.src, l.offset),
                        None => e,
                    }
                })
        };
        let tp = positive("tensor_parallel_degree", int("tensor_parallel_degree", 1)?)?;
        let pp = positive(
            "pipeline_parallel_degree",
            int("pipeline_parallel_degree", 1)?,
        )?;
        let rep = positive(
            "data_parallel_replicate_degree",
            int("data_parallel_replicate_degree", 1)?,
        )?;
        let shard_raw = int("data_parallel_shard_degree", -1)?;
        let rest = world / (tp * pp * rep) as i64;
        let shard = positive(
            "data_parallel_shard_degree",
            if shard_raw == -1 { rest } else { shard_raw },
        )?;
        let dp = rep * shard;
        let ranks_needed = dp.checked_mul(tp).and_then(|x| x.checked_mul(pp));
        if ranks_needed != u64::try_from(world).ok() {
            return Err(InputError::new(format!(
                "the degrees make DP {dp} × TP {tp} × PP {pp} ranks; the job runs on {world} GPUs"
            ))
            .hint(Some(
                "import with the cluster (or ranks.json) the job runs on".into(),
            )));
        }
        let seq = positive("seq_len", int("seq_len", 2048)?)?;
        let local = positive("local_batch_size", int("local_batch_size", 8)?)?;
        let gbs_raw = int("global_batch_size", -1)?;
        let gbs = if gbs_raw == -1 {
            local * dp
        } else {
            positive("global_batch_size", gbs_raw)?
        };
        let (mbs, m) = if pp > 1 {
            let mbs = positive(
                "pipeline_parallel_microbatch_size",
                int("pipeline_parallel_microbatch_size", 1)?,
            )?;
            if !local.is_multiple_of(mbs) || !gbs.is_multiple_of(local * dp) {
                return Err(InputError::new(format!(
                    "local_batch_size {local} does not split into micro-batches of {mbs}, or the \
                     global batch {gbs} into steps of {local} × DP {dp}"
                )));
            }
            (mbs, (local / mbs) * (gbs / (local * dp)))
        } else {
            if !gbs.is_multiple_of(local * dp) {
                return Err(InputError::new(format!(
                    "the global batch {gbs} is not a multiple of local_batch_size {local} × DP {dp}"
                )));
            }
            (local, gbs / (local * dp))
        };
        let parts: Vec<usize> =
            match ranks {
                Some((_, parts)) if parts.len() > 1 => parts.to_vec(),
                _ if pp == 1 => vec![0, model.layers.len()],
                _ => return Err(InputError::new(
                    "a pipelined torchtitan job's layer split is code (module_fqns_per_model_part \
                     or torchtitan's default split); hetplan reads it from the export's \
                     ranks.json",
                )
                .hint(Some("pass --ranks with the export's ranks.json".into()))),
            };
        let chunks = parts.len() - 1;
        if !chunks.is_multiple_of(pp as usize) || parts.last() != Some(&model.layers.len()) {
            return Err(InputError::new(format!(
                "the split {parts:?} does not fit {pp} pipeline ranks and {} layers",
                model.layers.len()
            )));
        }
        let v = chunks / pp as usize;
        let schedule = match (pp, self.string("pipeline_parallel_schedule").as_deref()) {
            (1, _) => Schedule::OneFOneB,
            (_, Some("GPipe")) => Schedule::Gpipe,
            (_, Some("Interleaved1F1B")) if v > 1 => Schedule::Interleaved {
                virtual_stages: v as u32,
            },
            (_, None | Some("1F1B")) if v == 1 => Schedule::OneFOneB,
            (_, s) => {
                return Err(InputError::new(format!(
                    "pipeline_parallel_schedule {s:?} with {v} stages per rank: hetplan models \
                     1F1B, Interleaved1F1B and GPipe"
                )))
            }
        };
        let recompute = match self
            .kwargs
            .get("activation_checkpoint")
            .map(|l| l.text.as_str())
        {
            Some(t) if t.starts_with("FullAC") => Recompute::Full,
            // Its policy keeps the attention core's and every other product's outputs.
            Some(t) if t.starts_with("SelectiveAC") => Recompute::Ops,
            _ => Recompute::None,
        };
        let offload = if self.flag("enable_cpu_offload", false) {
            Offload {
                weights: 1.0,
                gradients: 1.0,
                optimizer: 1.0,
                activations: 0.0,
            }
        } else {
            Offload::default()
        };
        let precision = match self.string("mixed_precision_param").as_deref() {
            Some("float32") => Precision::Fp32,
            _ => Precision::Bf16,
        };
        // The model's linears converted (`model_registry(..., converters=[...])` or a
        // converter's `convert`): torchao's rowwise Float8 recipe is FP8 as hetplan prices it.
        let unpriced = ["MXFP8LinearConverter", "NVFP4LinearConverter"]
            .into_iter()
            .find_map(|c| self.call_of(c).map(|at| (c, at)));
        let precision = if let Some((other, at)) = unpriced {
            return Err(InputError::new(format!(
                "the module converts the model's linears with {other}; hetplan models BF16, \
                 FP32 and torchao's rowwise FP8 (Float8LinearConverter) in torchtitan"
            ))
            .at_offset(&self.src, at));
        } else if self.call_of("Float8LinearConverter").is_some() {
            // Each converter's own arguments, every converter's: another call's `emulate=` or
            // `recipe_name=` is not theirs.
            for call in self.calls_of("Float8LinearConverter") {
                if let Some(lit) = self
                    .kwarg_in_call(call, "emulate")
                    .filter(|l| l.text == "True")
                {
                    return Err(self
                        .error(
                            lit,
                            "Float8 emulation (emulate=True) runs torchao's per-tensor recipe \
                             in software, for tests; hetplan prices FP8 on FP8 tensor cores"
                                .into(),
                        )
                        .hint(Some("leave emulate out to train on the GPU's FP8".into())));
                }
                let Some(lit) = self.kwarg_in_call(call, "recipe_name") else {
                    continue;
                };
                let r = lit.text.trim_matches(|c| c == '"' || c == '\'');
                if r != "rowwise" {
                    return Err(self
                        .error(
                            lit,
                            format!(
                                "Float8 recipe {r:?}: hetplan models torchao's \"rowwise\" \
                                 recipe (rowwise_with_gw_hp keeps the weight gradient's \
                                 product in BF16, which it does not price)"
                            ),
                        )
                        .hint(Some("use recipe_name=\"rowwise\"".into())));
                }
            }
            Precision::Fp8Rowwise
        } else {
            precision
        };
        let per_stage = (dp * tp) as usize;
        let stages = (0..chunks)
            .map(|i| {
                let p = i % pp as usize;
                Stage {
                    etp: None,
                    ep: 1,
                    cp: 1,
                    layers: LayerRange {
                        start: parts[i],
                        end: parts[i + 1],
                    },
                    devices: gpus[p * per_stage..(p + 1) * per_stage].to_vec(),
                    tp: tp as u32,
                    replica_tp: Vec::new(),
                    dp: dp as u32,
                    micro_batch_sizes: vec![mbs; dp as usize],
                    zero: if shard > 1 { 3 } else { 0 },
                    recompute,
                    offload,
                    sequence_parallel: tp > 1 && self.flag("enable_sequence_parallel", true),
                    replica_samples: Vec::new(),
                }
            })
            .collect();
        Ok((
            Plan {
                global_batch: gbs,
                micro_batches: m,
                schedule,
                engine: Engine::Fsdp,
                precision,
                collective_dtypes: crate::plan::CollectiveDtypes {
                    gradients: crate::plan::runtime::Runtime::Torchtitan.gradient_dtype(),
                    ..Default::default()
                },
                moe_capacity_factor: None,
                cp_comm: Default::default(),
                // CompileConfig's `__post_init__` refuses it without `enable`.
                tp_comm_overlap: tp > 1
                    && self.flag("enable_sequence_parallel", true)
                    && self.flag("enable_async_tensor_parallel", false),
                compile: self.compile(),
                stages,
                made_for: Some(crate::plan::MadeFor::of(model, cluster)),
            },
            seq,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_keywords_and_constants_are_read() {
        let src = "DIM = 256\nN_LAYERS = 2\nN_HEADS = 4\nN_KV_HEADS = 2\nFFN_HIDDEN_DIM = 512\n\
                   VOCAB_SIZE = 1000\nTIED_EMBEDDINGS = False\n\ndef f():\n    return T(\n        \
                   training=TrainingConfig(local_batch_size=4, global_batch_size=16, seq_len=128),\n        \
                   parallelism=ParallelismConfig(data_parallel_replicate_degree=2, \
                   tensor_parallel_degree=2, pipeline_parallel_degree=1),  # a comment=1\n        \
                   activation_checkpoint=FullAC.Config(),\n    )\n";
        let job = TorchtitanJob::parse(src).unwrap();
        let model = job.model("m").unwrap().unwrap();
        assert_eq!(model.layers.len(), 4);
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 1\n",
        )
        .unwrap();
        let (plan, seq) = job.plan(&model, &cluster, None).unwrap();
        assert_eq!(seq, 128);
        assert_eq!(
            (plan.stages[0].tp, plan.stages[0].dp, plan.micro_batches),
            (2, 2, 2)
        );
        assert_eq!(plan.stages[0].recompute, Recompute::Full);
        assert!(crate::plan::ValidPlan::new(plan, &model, &cluster).is_ok());
        assert!(!job.kwargs.contains_key("a comment"));
    }

    #[test]
    fn converters_are_found_where_they_are_called() {
        let job = TorchtitanJob::parse(
            "from q import Float8LinearConverter  # Float8LinearConverter(\n\
             m = other.Float8LinearConverterX(1)\n\
             m = Float8LinearConverter (x)\n\
             x = T(local_batch_size=2)\n",
        )
        .unwrap();
        let at = job.call_of("Float8LinearConverter").unwrap();
        assert_eq!(&job.src[at..at + 23], "Float8LinearConverter (");
        assert!(job.call_of("MXFP8LinearConverter").is_none());
    }

    #[test]
    fn docstrings_and_comments_are_not_code() {
        let src = "\"\"\"A job.\n\n    Float8LinearConverter(recipe_name=\"tensorwise\")\n\
                   tensor_parallel_degree=4 is what we used before.\n\"\"\"\n\
                   NAME = \"a#b\"  # NAME = 3\n\
                   x = T(local_batch_size=2, tag='''x=1''')\n";
        let job = TorchtitanJob::parse(src).unwrap();
        assert!(job.call_of("Float8LinearConverter").is_none());
        // Nor is what a string says.
        let quoted =
            TorchtitanJob::parse("print('Float8LinearConverter(')\nx = T(local_batch_size=2)\n")
                .unwrap();
        assert!(quoted.call_of("Float8LinearConverter").is_none());
        assert!(!job.kwargs.contains_key("tensor_parallel_degree"));
        assert!(!job.kwargs.contains_key("recipe_name"));
        assert_eq!(job.consts["NAME"].text, "\"a#b\"");
        assert_eq!(job.kwargs["local_batch_size"].text, "2");
        assert!(!job.kwargs.contains_key("x"));
        // Offsets into the blanked code are offsets into the module.
        let at = job.kwargs["local_batch_size"].offset;
        assert_eq!(&src[at..at + 1], "2");
    }

    #[test]
    fn the_converters_arguments_are_its_own() {
        let job = TorchtitanJob::parse(
            "a = Other.Config(emulate=True, recipe_name=\"tensorwise\")\n\
             c = Float8LinearConverter.Config(\n    recipe_name=\"rowwise\",\n    \
             filter_fqns=[\"lm_head\"],\n)\n\
             x = T(local_batch_size=2)\n",
        )
        .unwrap();
        let at = job.call_of("Float8LinearConverter").unwrap();
        assert!(job.kwarg_in_call(at, "emulate").is_none());
        assert_eq!(
            job.kwarg_in_call(at, "recipe_name").unwrap().text,
            "\"rowwise\""
        );
        assert_eq!(
            job.kwarg_in_call(at, "filter_fqns").unwrap().text,
            "[\"lm_head\"]"
        );
        // A keyword of a call among its arguments is that call's.
        let job = TorchtitanJob::parse(
            "c = Float8LinearConverter.Config(x=f(emulate=True), tag=\"a\\\"(\")\n\
             x = T(local_batch_size=2)\n",
        )
        .unwrap();
        let at = job.call_of("Float8LinearConverter").unwrap();
        assert!(job.kwarg_in_call(at, "emulate").is_none());
        assert!(job.kwarg_in_call(at, "x").is_some());
        // Every converter's arguments are read, the second one's too.
        let job = TorchtitanJob::parse(
            "a = Float8LinearConverter.Config()\n\
             b = Float8LinearConverter.Config(emulate=True)\n\
             x = T(local_batch_size=2)\n",
        )
        .unwrap();
        assert_eq!(job.calls_of("Float8LinearConverter").len(), 2);
        assert!(job
            .kwarg_in_call(job.calls_of("Float8LinearConverter")[1], "emulate")
            .is_some());
    }

    #[test]
    fn a_docstring_ends_at_its_first_unescaped_delimiter() {
        // `\\` escapes itself: the docstring ends at the quotes after it.
        let src = "\"\"\"ends with a backslash \\\\\"\"\"\nx = T(local_batch_size=2)\n\
                   \"\"\"Float8LinearConverter(emulate=True)\"\"\"\n";
        let job = TorchtitanJob::parse(src).unwrap();
        assert_eq!(job.kwargs["local_batch_size"].text, "2");
        assert!(job.call_of("Float8LinearConverter").is_none());
        // Unterminated, it runs to the end of the file.
        let job = TorchtitanJob::parse("x = T(local_batch_size=2)\n\"\"\"open\nemulate=True\n");
        assert!(!job.unwrap().kwargs.contains_key("emulate"));
    }

    #[test]
    fn computed_values_are_located_errors() {
        let job = TorchtitanJob::parse("x = T(tensor_parallel_degree=N * 2)\n").unwrap();
        let model = crate::model::catalog::catalog_model("gpt3-125m").unwrap();
        let cluster = crate::cluster::spec::parse_cluster_toml(
            "name = \"t\"\n[[node_group]]\ngpu = \"a100-sxm4-80gb\"\ngpus_per_node = 4\nnodes = 1\n",
        )
        .unwrap();
        let e = job.plan(&model, &cluster, None).unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(30)), "{e:?}");
        assert!(TorchtitanJob::parse("print(1)").is_err());
    }
}
