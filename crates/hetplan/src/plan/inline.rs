//! The inline plan form `tp=8,pp=8,dp=1,mbs=1,gbs=64,zero=1,ckpt=selective,sp=on`, for uniform
//! plans (every stage the same shape), as Megatron-LM's command-line flags describe them.
//!
//! Keys (comma-separated `key=value`, each at most once):
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `tp` | tensor-parallel degree | 1 |
//! | `pp` | pipeline stages (GPU stages; with interleaving, each holds `v` chunks) | 1 |
//! | `dp` | data-parallel replicas (groups of `cp` replicas with context parallelism) | fill the cluster: gpus / (tp·cp·pp) |
//! | `mbs` | micro-batch size of each replica | 1 |
//! | `gbs` | global batch (samples per iteration) | `m`·`mbs`·`dp` |
//! | `m` | micro-batches per iteration | `gbs` / (`mbs`·`dp`) |
//! | `zero` | ZeRO stage 0–3 | 0 |
//! | `ckpt` | activation checkpointing: `none`, `selective`, `full` or a number of layers per stage | `none` |
//! | `sp` | sequence parallelism `on`/`off` | `off` |
//! | `tp_overlap` | tensor-parallel collectives pipelined with their GEMMs `on`/`off` (Megatron's `--tp-comm-overlap`, torchtitan's async TP; needs `sp=on` with `tp` > 1) | `off` |
//! | `compile` | how much of the model's PyTorch code runs under `torch.compile` (engine `fsdp` only): `on`, the blocks and the loss (torchtitan's default components); `blocks`, the loss eager (torchtitan before April 2025); `off`, eagerly, each norm, rotary embedding and gated activation the separate kernels its code writes. Megatron and DeepSpeed run their own fused kernels (`on`) | `on` |
//! | `cp_comm` | how a context-parallel group runs attention: `ring` (Megatron's `p2p`: keys and values around a ring, overlapped) or `a2a` (Ulysses: all-to-alls trade sequence chunks for heads) | `ring` |
//! | `capacity` | MoE token dropping: no expert takes more than this many times its even share of the tokens (Megatron's `--moe-expert-capacity-factor`) | dropless |
//! | `ep` | expert parallelism: each MoE layer's experts split over `ep` DP replicas (stages without MoE layers keep 1) | 1 |
//! | `etp` | expert tensor parallelism: MoE layers' experts split over `etp` GPUs instead of `tp` (Megatron's `--expert-tensor-parallel-size`; needs `sp=on` below `tp`; stages without MoE layers keep `tp`) | `tp` |
//! | `cp` | context parallelism: each sample's sequence split over `cp` GPUs (or TP groups), ring attention between them; `dp` counts groups of `cp`, as Megatron's data-parallel size does, so a stage has `dp·cp` replicas | 1 |
//! | `schedule` | `gpipe`, `1f1b` or `interleaved` | `1f1b` (`interleaved` when `v` is given) |
//! | `v` | virtual stages (model chunks) per GPU, interleaved only | required with `interleaved` |
//! | `engine` | `megatron`, `deepspeed` or `fsdp` | `megatron` (`fsdp` with `precision=fp8-rowwise`) |
//! | `precision` | `bf16`, `fp16`, `fp32`, `tf32` (FP32 with TF32 products on Ampere and later), `fp8` (per-tensor scales) or `fp8-rowwise` (torchao's rowwise recipe; engine `fsdp`) | `bf16` |
//! | `offload_w`, `offload_g`, `offload_opt`, `offload_act` | fractions 0–1 of weights, gradients, optimizer states, activations kept in host memory | 0 |
//!
//! One of `gbs` and `m` is required; given both, they must agree. `mbs`, `gbs` and `m` (and so
//! `m`·`mbs`·`dp`) are at most 10⁹ (`parse::MAX_BATCH`).
//!
//! **Placement** follows Megatron-LM's rank order: tensor-parallel ranks innermost, then data
//! parallel, then pipeline stages outermost, GPUs taken in cluster order (node-major). Rank
//! `r = (s·dp + d)·tp + t` is TP rank `t` of replica `d` of stage `s`. TP groups are kept inside
//! one node where possible: each node first yields as many whole groups of `tp` consecutive GPUs
//! as it holds, in cluster order; only when these are too few are further groups formed from the
//! GPUs left over (node remainders, in cluster order), which then span nodes. The first `pp·dp`
//! groups are used; on a uniform cluster whose node size is a multiple of `tp` this is exactly
//! Megatron's placement. Using fewer GPUs than the cluster has requires `dp` to be given.
//!
//! **Layers** (embedding and head included, as `Model::layers` lists them) are split over the
//! `pp·v` chunks in order. When the model starts with an embedding and/or ends with a head and
//! its other layers divide evenly by the chunk count, the split is Megatron's: every chunk gets
//! the same number of transformer blocks, the embedding joins the first chunk and the head the
//! last. Otherwise (where Megatron would refuse) the split is as even as possible over all
//! layers, counting embedding and head as one layer each, and the earlier chunks get the extra
//! layers. With interleaving chunk `j` runs on the GPUs of stage `j mod pp`.

use super::validate::{tp_fits_kv_heads, validate, PlanError};
use super::{
    Compile, CpComm, Engine, LayerRange, Offload, Plan, Precision, Recompute, Schedule, Stage,
};
use crate::cluster::{Cluster, GpuId};
use crate::error::InputError;
use crate::model::{LayerKind, Model};
use crate::names;
use crate::names::did_you_mean;
use crate::parse::{self, Num, WholeError, MAX_BATCH};
use std::collections::BTreeMap;

/// The keys of the inline form.
pub const KEYS: &[&str] = &[
    "tp",
    "pp",
    "dp",
    "mbs",
    "gbs",
    "m",
    "zero",
    "ckpt",
    "sp",
    "tp_overlap",
    "compile",
    "ep",
    "etp",
    "cp",
    "cp_comm",
    "capacity",
    "schedule",
    "v",
    "engine",
    "precision",
    "offload_w",
    "offload_g",
    "offload_opt",
    "offload_act",
];

/// The given `key=value` pairs, with each value's byte offset in the spec.
struct Spec<'a> {
    src: &'a str,
    values: BTreeMap<&'static str, (&'a str, usize)>,
}

impl<'a> Spec<'a> {
    fn parse(src: &'a str) -> Result<Spec<'a>, InputError> {
        let mut values = BTreeMap::new();
        let mut offset = 0;
        for piece in src.split(',') {
            let start = offset;
            offset += piece.len() + 1;
            if piece.trim().is_empty() {
                continue;
            }
            let lead = piece.len() - piece.trim_start().len();
            let at = start + lead;
            let Some((k, v)) = piece.split_once('=') else {
                return Err(InputError::new(format!(
                    "`{}` is not of the form key=value",
                    piece.trim()
                ))
                .hint(Some("e.g. tp=8,pp=4,gbs=512".to_string()))
                .at_offset(src, at));
            };
            let key_text = k.trim();
            let Some(&key) = KEYS
                .iter()
                .find(|&&known| known.eq_ignore_ascii_case(key_text))
            else {
                let hint = did_you_mean(names::nearest(key_text, KEYS.iter().copied()))
                    .unwrap_or_else(|| format!("known keys: {}", KEYS.join(", ")));
                return Err(InputError::new(format!("unknown key `{key_text}`"))
                    .field(key_text)
                    .hint(Some(hint))
                    .at_offset(src, at));
            };
            if values.contains_key(key) {
                return Err(InputError::new(format!("`{key}` is given twice"))
                    .field(key)
                    .at_offset(src, at));
            }
            let v_lead = v.len() - v.trim_start().len();
            let v_at = start + k.len() + 1 + v_lead;
            values.insert(key, (v.trim(), v_at));
        }
        Ok(Spec { src, values })
    }

    fn given(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// An error about `key`, located at its value when it was given.
    fn err(&self, key: &str, message: impl Into<String>, hint: Option<String>) -> InputError {
        let e = InputError::new(message).field(key).hint(hint);
        match self.values.get(key) {
            Some(&(_, at)) => e.at_offset(self.src, at),
            None => e,
        }
    }

    /// Parses `key`'s value with `f`, which returns the error message and hint.
    fn get<T>(
        &self,
        key: &str,
        f: impl FnOnce(&str) -> Result<T, (String, Option<String>)>,
    ) -> Result<Option<T>, InputError> {
        match self.values.get(key) {
            None => Ok(None),
            Some(&(v, _)) => f(v).map(Some).map_err(|(m, h)| self.err(key, m, h)),
        }
    }

    /// A whole number in `min..=max`.
    fn int(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, InputError> {
        self.get(key, |v| {
            parse::whole(Num::Text(v), min, max).map_err(|e| match e {
                WholeError::NotANumber(_) | WholeError::NotWhole(_) => (
                    format!("{key}=`{v}`: expected a whole number"),
                    Some(format!("e.g. {key}={}", min.max(1))),
                ),
                WholeError::TooSmall { .. } => (format!("{key}={v}: must be at least {min}"), None),
                WholeError::TooLarge { .. } => (
                    format!("{key}={v} is more than the {max} hetplan accepts"),
                    Some(format!("{key} at most {max}")),
                ),
            })
        })
    }

    /// A whole number that fits a `u32` (degrees and counts bounded by the cluster or model).
    fn int32(&self, key: &str, min: u64) -> Result<Option<u32>, InputError> {
        Ok(self.int(key, min, u32::MAX as u64)?.map(|n| n as u32))
    }

    /// One of `choices` (name, value), case-insensitively.
    fn choice<T: Copy>(&self, key: &str, choices: &[(&str, T)]) -> Result<Option<T>, InputError> {
        self.get(key, |v| {
            let lower = v.to_ascii_lowercase();
            match choices.iter().find(|(name, _)| *name == lower) {
                Some(&(_, t)) => Ok(t),
                None => {
                    let options: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                    let hint = did_you_mean(names::nearest(v, options.iter().copied()))
                        .unwrap_or_else(|| format!("one of {}", options.join(", ")));
                    let expected = options.join(", ");
                    Err((
                        format!("{key}=`{v}`: expected one of {expected}"),
                        Some(hint),
                    ))
                }
            }
        })
    }

    /// A positive, finite number, if given.
    fn positive(&self, key: &str) -> Result<Option<f64>, InputError> {
        self.get(key, |v| match v.parse::<f64>() {
            Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
            _ => Err((
                format!("{key}=`{v}`: expected a positive number"),
                Some(format!("e.g. {key}=1.25")),
            )),
        })
    }

    fn ratio(&self, key: &str) -> Result<f64, InputError> {
        Ok(self
            .get(key, |v| match v.parse::<f64>() {
                Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
                _ => Err((
                    format!("{key}=`{v}`: expected a fraction between 0 and 1"),
                    Some(format!("e.g. {key}=0.5")),
                )),
            })?
            .unwrap_or(0.0))
    }
}

/// Reads the inline form (see the module documentation) into a complete plan for `model` on
/// `cluster`. The result passes [`validate`]; errors name the offending key in `field`, carry
/// its column in the spec, and say what would work in `hint`.
pub fn parse_inline_plan(spec: &str, model: &Model, cluster: &Cluster) -> Result<Plan, InputError> {
    let s = Spec::parse(spec)?;
    let gpus = cluster.num_gpus() as u64;

    let tp = s.int32("tp", 1)?.unwrap_or(1);
    let pp = s.int32("pp", 1)?.unwrap_or(1);
    let (tp64, pp64) = (tp as u64, pp as u64);

    // Schedule and virtual stages.
    let schedule_choice = s.choice(
        "schedule",
        &[
            ("gpipe", 0u8),
            ("1f1b", 1),
            ("interleaved", 2),
            ("interleaved-1f1b", 2),
        ],
    )?;
    let v = s.int32("v", 1)?;
    let schedule = match (schedule_choice, v) {
        (Some(0), Some(_)) | (Some(1), Some(_)) => {
            return Err(s.err(
                "v",
                "virtual stages apply to the interleaved schedule only",
                Some("add schedule=interleaved, or drop v".to_string()),
            ))
        }
        (Some(0), None) => Schedule::Gpipe,
        (Some(1), None) | (None, None) => Schedule::OneFOneB,
        (_, Some(v)) => Schedule::Interleaved { virtual_stages: v },
        (Some(_), None) => {
            return Err(s.err(
                "v",
                "the interleaved schedule needs the number of virtual stages per GPU",
                Some("add v=2 (or more)".to_string()),
            ))
        }
    };
    let v = v.unwrap_or(1);

    // Context parallelism: `cp` replicas share each sample (Megatron's
    // --context-parallel-size), so `dp` counts groups of them, as Megatron's data-parallel size
    // does, and each stage has dp·cp replicas.
    let cp = s.int32("cp", 1)?.unwrap_or(1);
    let cp64 = cp as u64;
    let tpc = tp64.saturating_mul(cp64);
    let (tpn, tps) = if cp > 1 {
        ("tp·cp", format!("{tp}·{cp}"))
    } else {
        ("tp", tp.to_string())
    };
    // Data parallelism: given, or filling the cluster.
    let dp = match s.int32("dp", 1)? {
        Some(dp) => {
            let need = (tpc * pp64).saturating_mul(dp as u64);
            if need > gpus {
                let most = gpus / (tpc * pp64);
                return Err(s.err(
                    "dp",
                    format!(
                        "{tpn}·pp·dp = {tps}·{pp}·{dp} = {need} GPUs, but the cluster has {gpus}"
                    ),
                    Some(if most > 0 {
                        format!("dp at most {most}")
                    } else {
                        "reduce tp or pp".to_string()
                    }),
                ));
            }
            dp
        }
        None => {
            if tpc * pp64 > gpus {
                let key = if tpc > gpus { "tp" } else { "pp" };
                return Err(s.err(
                    key,
                    format!(
                        "{tpn}·pp = {tps}·{pp} = {} GPUs, but the cluster has {gpus}",
                        tpc * pp64
                    ),
                    Some(format!("{tpn}·pp at most {gpus}")),
                ));
            }
            if !gpus.is_multiple_of(tpc * pp64) {
                let fit = gpus / (tpc * pp64);
                return Err(s.err(
                    "dp",
                    format!(
                        "the cluster's {gpus} GPUs do not divide into groups of {tpn}·pp = {}",
                        tpc * pp64
                    ),
                    Some(format!(
                        "give dp explicitly to use a subset, e.g. dp={fit} uses {} GPUs",
                        fit * tpc * pp64
                    )),
                ));
            }
            (gpus / (tpc * pp64)) as u32
        }
    };
    let dp64 = dp as u64;

    // The model: pipeline chunks against layers, tensor parallelism against heads.
    let num_layers = model.layers.len();
    let chunks = pp as usize * v as usize;
    if chunks > num_layers {
        let (key, hint) = if v > 1 {
            ("v", format!("pp·v at most {num_layers}"))
        } else {
            ("pp", format!("pp at most {num_layers}"))
        };
        return Err(s.err(
            key,
            format!("pp·v = {pp}·{v} = {chunks} pipeline chunks, but the model has only {num_layers} layers"),
            Some(hint),
        ));
    }
    if let Some(t) = &model.transformer {
        let heads_ok = t.heads % tp64 == 0;
        if !heads_ok || !tp_fits_kv_heads(tp64, t.kv_heads) {
            let valid: Vec<String> = (1..=t.heads.min(gpus.max(1)))
                .filter(|&x| t.heads % x == 0 && tp_fits_kv_heads(x, t.kv_heads))
                .map(|x| x.to_string())
                .collect();
            let message = if heads_ok {
                format!(
                    "tp={tp}: the model's {} KV heads neither split evenly over {tp} ranks nor divide {tp}",
                    t.kv_heads
                )
            } else {
                format!(
                    "tp={tp} does not divide the model's {} attention heads",
                    t.heads
                )
            };
            return Err(s.err(
                "tp",
                message,
                Some(format!("tp one of {}", valid.join(", "))),
            ));
        }
    }

    // Batch arithmetic: mbs, gbs and m at most MAX_BATCH, so that no product below overflows
    // (mbs·dp ≤ 10⁹·2³², and the cost model's samples × tokens stay far inside u64).
    let mbs = s.int("mbs", 1, MAX_BATCH)?.unwrap_or(1);
    let per_micro_batch = mbs * dp64;
    let gbs = s.int("gbs", 1, MAX_BATCH)?;
    let m = s.int("m", 1, MAX_BATCH)?;
    let (global_batch, micro_batches) = match (gbs, m) {
        (None, None) => return Err(s.err(
            "gbs",
            "the global batch is required: give gbs (samples per iteration) or m (micro-batches)",
            Some(format!(
                "e.g. gbs={} for {} micro-batches of mbs·dp = {mbs}·{dp}",
                8u64.saturating_mul(per_micro_batch),
                8
            )),
        )),
        (Some(g), m_given) => {
            if g % per_micro_batch != 0 {
                let lower = g / per_micro_batch * per_micro_batch;
                let upper = lower.saturating_add(per_micro_batch);
                let hint = match (lower > 0, upper <= MAX_BATCH) {
                    (true, true) => format!("gbs={lower} or gbs={upper}"),
                    (true, false) => format!("gbs={lower}"),
                    (false, true) => format!("gbs={upper}"),
                    (false, false) => "reduce mbs or dp".to_string(),
                };
                return Err(s.err(
                    "gbs",
                    format!("gbs={g} is not a multiple of mbs·dp = {mbs}·{dp} = {per_micro_batch}"),
                    Some(hint),
                ));
            }
            let derived = g / per_micro_batch;
            if let Some(m) = m_given {
                if m != derived {
                    return Err(s.err(
                        "m",
                        format!("m={m} disagrees with gbs/(mbs·dp) = {g}/({mbs}·{dp}) = {derived}"),
                        Some(format!("m={derived}, or drop m")),
                    ));
                }
            }
            (g, derived)
        }
        (None, Some(m)) => match m.checked_mul(per_micro_batch) {
            Some(g) if g <= MAX_BATCH => (g, m),
            _ => {
                return Err(s.err(
                    "m",
                    format!(
                        "m·mbs·dp = {m}·{mbs}·{dp} samples per iteration, more than the \
                         {MAX_BATCH} hetplan accepts"
                    ),
                    Some(format!(
                        "m at most {}",
                        (MAX_BATCH / per_micro_batch).max(1)
                    )),
                ))
            }
        },
    };
    if matches!(schedule, Schedule::Interleaved { .. }) && micro_batches % pp64 != 0 {
        let key = if s.given("m") { "m" } else { "gbs" };
        let up = micro_batches.div_ceil(pp64).saturating_mul(pp64);
        return Err(s.err(
            key,
            format!(
                "the interleaved schedule needs the micro-batch count to be a multiple of pp={pp}, \
                 but it is {micro_batches}"
            ),
            Some(format!(
                "m={up} (gbs={})",
                up.saturating_mul(per_micro_batch)
            )),
        ));
    }

    // Per-stage settings.
    let zero = s.int("zero", 0, u32::MAX as u64)?.unwrap_or(0);
    let ep = s.int("ep", 1, u32::MAX as u64)?.unwrap_or(1) as u32;
    let replicas = dp.saturating_mul(cp);
    // Expert tensor parallelism below TP folds the TP ranks into the expert ranks
    // (validation checks the rest).
    let etp = s.int32("etp", 1)?.filter(|&e| e != tp);
    if ep > 1 && etp.is_none() {
        if !replicas.is_multiple_of(ep) {
            let what = if cp > 1 { "dp·cp" } else { "dp" };
            return Err(s.err(
                "ep",
                format!(
                    "ep={ep} must divide {what}={replicas}: expert-parallel groups are DP replicas"
                ),
                Some(format!("ep at most {replicas}, a divisor of it")),
            ));
        }
        if !model.layers.iter().any(|l| l.experts().is_some()) {
            return Err(s.err(
                "ep",
                format!(
                    "ep={ep}, but {} has no mixture-of-experts layer",
                    model.name
                ),
                Some("leave ep out (1)".into()),
            ));
        }
    }
    if zero > 3 {
        return Err(s.err(
            "zero",
            format!("zero={zero}: the ZeRO stages are 0, 1, 2 and 3"),
            None,
        ));
    }
    let recompute = s
        .get("ckpt", |v| {
            v.to_ascii_lowercase().parse::<Recompute>().map_err(|m| {
                (
                    m,
                    Some("ckpt=none, ckpt=selective, ckpt=ops, ckpt=full or ckpt=2".to_string()),
                )
            })
        })?
        .unwrap_or_default();
    let on_off = [
        ("on", true),
        ("off", false),
        ("true", true),
        ("false", false),
        ("1", true),
        ("0", false),
    ];
    let sequence_parallel = s.choice("sp", &on_off)?.unwrap_or(false);
    let tp_comm_overlap = s.choice("tp_overlap", &on_off)?.unwrap_or(false);
    let compile = s
        .choice(
            "compile",
            &[
                ("on", Compile::On),
                ("blocks", Compile::Blocks),
                ("off", Compile::Off),
            ],
        )?
        .unwrap_or_default();
    let engine = s.choice(
        "engine",
        &[
            ("megatron", Engine::Megatron),
            ("deepspeed", Engine::Deepspeed),
            ("fsdp", Engine::Fsdp),
        ],
    )?;
    let precisions = Precision::ALL.map(|p| (p.name(), p));
    let precision = s.choice("precision", &precisions)?.unwrap_or_default();
    // Unsaid, the engine a search would give the plan (PyTorch's for torchao's rowwise FP8).
    let engine = engine.unwrap_or_else(|| super::runtime::planning_engine(None, precision));
    let offload = Offload {
        weights: s.ratio("offload_w")?,
        gradients: s.ratio("offload_g")?,
        optimizer: s.ratio("offload_opt")?,
        activations: s.ratio("offload_act")?,
    };

    let ranges = split_layers(model, chunks);
    if let Recompute::Layers(n) = recompute {
        let fewest = ranges.iter().map(|r| r.len()).min().unwrap_or(0);
        if n as usize > fewest {
            return Err(s.err(
                "ckpt",
                format!("ckpt={n}: the smallest pipeline chunk has only {fewest} layers"),
                Some(format!("ckpt at most {fewest}, or ckpt=full")),
            ));
        }
    }

    let groups = tp_groups(cluster, tp as usize, pp as usize * replicas as usize);
    let stage_devices: Vec<Vec<GpuId>> = groups
        .chunks(replicas as usize)
        .map(|replicas| replicas.concat())
        .collect();
    let stages = ranges
        .into_iter()
        .enumerate()
        .map(|(j, layers)| Stage {
            // Stages without MoE layers keep ep = 1.
            // Stages with MoE layers take etp; the others keep tp.
            etp: etp.filter(|_| layers.iter().any(|l| model.layers[l].experts().is_some())),
            ep: if layers.iter().any(|l| model.layers[l].experts().is_some()) {
                ep
            } else {
                1
            },
            layers,
            devices: stage_devices[j % pp as usize].clone(),
            tp,
            dp: replicas,
            micro_batch_sizes: vec![mbs; replicas as usize],
            zero: zero as u8,
            recompute,
            offload,
            sequence_parallel,
            replica_samples: Vec::new(),
            replica_tp: Vec::new(),
            cp,
        })
        .collect();

    let plan = Plan {
        global_batch,
        micro_batches,
        schedule,
        engine,
        precision,
        collective_dtypes: Default::default(),
        moe_capacity_factor: s.positive("capacity")?,
        tp_comm_overlap,
        compile,
        cp_comm: s
            .choice(
                "cp_comm",
                &[
                    ("ring", CpComm::Ring),
                    ("p2p", CpComm::Ring),
                    ("a2a", CpComm::AllToAll),
                    ("all-to-all", CpComm::AllToAll),
                ],
            )?
            .unwrap_or_default(),
        made_for: None,
        stages,
    };
    // Everything above should have ruled these out; report rather than hand on a bad plan,
    // pointing at the key the first problem is most about.
    if let Err(errs) = validate(&plan, model, cluster) {
        let all: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let key = errs.first().map_or("gbs", key_of);
        // The JSON plan's hints name its fields; where an inline key says the same, its own.
        let hint = match errs.first() {
            Some(PlanError::Fp8Unsupported { .. }) => {
                Some("train in BF16 (precision=bf16), or on a cluster of FP8 GPUs".to_string())
            }
            Some(PlanError::CompileOutsideFsdp { .. }) => Some(
                "engine=fsdp (torchtitan, PyTorch FSDP), or leave out compile= (on)".to_string(),
            ),
            Some(PlanError::RowwiseOutsideFsdp { .. }) => Some(
                "engine=fsdp (torchtitan, PyTorch FSDP), or precision=fp8 (per-tensor scales)"
                    .to_string(),
            ),
            Some(PlanError::OpCheckpointOutsideFsdp { .. }) => Some(
                "engine=fsdp (torchtitan), or ckpt=selective (the attention core) or ckpt=full"
                    .to_string(),
            ),
            _ => None,
        };
        return Err(s.err(
            key,
            format!(
                "the inline plan `{}` is not valid: {}",
                spec.trim(),
                all.join("; ")
            ),
            hint,
        ));
    }
    Ok(plan)
}

/// The inline key a validation error is most about.
fn key_of(e: &PlanError) -> &'static str {
    match e {
        PlanError::ZeroMicroBatches | PlanError::MicroBatchesNotDivisibleByDepth { .. } => "m",
        PlanError::ZeroVirtualStages | PlanError::StagesNotDivisibleByVirtual { .. } => "v",
        PlanError::ZeroDegree { which, .. } if *which == "tp" => "tp",
        PlanError::TpHeads { .. } | PlanError::TpKvHeads { .. } => "tp",
        PlanError::MicroBatchSizesCount { .. } | PlanError::ZeroMicroBatchSize { .. } => "mbs",
        PlanError::BatchMismatch { .. } => "gbs",
        PlanError::ExpertTensorParallel { .. } => "etp",
        PlanError::ContextParallelDivides { .. }
        | PlanError::ContextParallelStages { .. }
        | PlanError::ContextParallelReplicas { .. }
        | PlanError::ContextParallelModel { .. }
        | PlanError::ContextParallelHeads { .. } => "cp",
        PlanError::ZeroStage { .. } => "zero",
        PlanError::RecomputeLayers { .. } | PlanError::OpCheckpointOutsideFsdp { .. } => "ckpt",
        PlanError::Fp8Unsupported { .. } => "precision",
        PlanError::CompileOutsideFsdp { .. } | PlanError::TpOverlapEager => "compile",
        PlanError::RowwiseOutsideFsdp { .. } => "engine",
        PlanError::Fp8ParamGather { .. } => "precision",
        PlanError::OffloadRatio { which, .. } => match *which {
            "weights" => "offload_w",
            "gradients" => "offload_g",
            "optimizer" => "offload_opt",
            _ => "offload_act",
        },
        PlanError::NoStages
        | PlanError::EmptyStage { .. }
        | PlanError::LayersOutOfRange { .. }
        | PlanError::LayerGap { .. }
        | PlanError::LayerOverlap { .. }
        | PlanError::LayersUncovered { .. } => "pp",
        // Device placement (counts, repeats, sharing, unknown GPUs) and anything newer.
        _ => "dp",
    }
}

/// `count` TP groups of `tp` GPUs: whole groups inside nodes first (cluster order), then groups
/// from the node remainders (cluster order). The caller ensures `count·tp ≤ gpus`.
fn tp_groups(cluster: &Cluster, tp: usize, count: usize) -> Vec<Vec<GpuId>> {
    let mut groups = Vec::new();
    let mut leftover = Vec::new();
    for (i, node) in cluster.nodes.iter().enumerate() {
        let ids: Vec<GpuId> = (0..node.num_gpus)
            .map(|l| GpuId {
                node: i as u32,
                local: l,
            })
            .collect();
        let whole = ids.len() / tp * tp;
        groups.extend(ids[..whole].chunks(tp).map(|c| c.to_vec()));
        leftover.extend_from_slice(&ids[whole..]);
    }
    groups.truncate(count);
    let missing = count - groups.len();
    groups.extend(leftover.chunks(tp).take(missing).map(|c| c.to_vec()));
    groups
}

/// Splits the model's layers into `chunks` consecutive ranges (see the module documentation).
/// `1 ≤ chunks ≤ layers`.
pub fn split_layers(model: &Model, chunks: usize) -> Vec<LayerRange> {
    let n = model.layers.len();
    let emb =
        usize::from(n >= 2 && model.layers.first().map(|l| l.kind) == Some(LayerKind::Embedding));
    let head = usize::from(n >= 2 && model.layers.last().map(|l| l.kind) == Some(LayerKind::Head));
    let inner = n - emb - head;
    if (emb + head) > 0 && inner >= chunks && inner.is_multiple_of(chunks) {
        // Megatron: equal blocks per chunk, embedding on the first, head on the last.
        let per = inner / chunks;
        return (0..chunks)
            .map(|i| LayerRange {
                start: if i == 0 { 0 } else { emb + i * per },
                end: if i + 1 == chunks {
                    n
                } else {
                    emb + (i + 1) * per
                },
            })
            .collect();
    }
    let (base, extra) = (n / chunks, n % chunks);
    let mut start = 0;
    (0..chunks)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = LayerRange {
                start,
                end: start + len,
            };
            start += len;
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TransformerConfig;
    use crate::plan::validate::test_support::{cluster, gpt, gpt3};

    const ISSUE_EXAMPLE: &str = "tp=8,pp=8,dp=1,mbs=1,gbs=64,zero=1,ckpt=selective,sp=on";

    fn g(node: u32, local: u32) -> GpuId {
        GpuId { node, local }
    }

    fn err(spec: &str, model: &Model, c: &Cluster) -> InputError {
        parse_inline_plan(spec, model, c).unwrap_err()
    }

    #[test]
    fn the_issue_example_on_64_gpus() {
        let c = cluster(&[8; 8]);
        let m = gpt3();
        let p = parse_inline_plan(ISSUE_EXAMPLE, &m, &c).unwrap();
        assert_eq!(p.stages.len(), 8);
        assert_eq!((p.global_batch, p.micro_batches), (64, 64));
        assert_eq!(p.schedule, Schedule::OneFOneB);
        for (i, s) in p.stages.iter().enumerate() {
            assert_eq!((s.tp, s.dp), (8, 1));
            assert_eq!(s.devices.len(), 8);
            // The TP group is node i, whole.
            assert!(s.devices.iter().all(|d| d.node == i as u32), "{s:?}");
            assert_eq!(
                s.devices,
                (0..8).map(|l| g(i as u32, l)).collect::<Vec<_>>()
            );
            assert_eq!(s.micro_batch_sizes, vec![1]);
            assert_eq!(s.zero, 1);
            assert_eq!(s.recompute, Recompute::Selective);
            assert!(s.sequence_parallel);
        }
        // Megatron split of 96 blocks: 12 per stage, embedding first, head last.
        assert_eq!(p.stages[0].layers, LayerRange { start: 0, end: 13 });
        assert_eq!(p.stages[1].layers, LayerRange { start: 13, end: 25 });
        assert_eq!(p.stages[7].layers, LayerRange { start: 85, end: 98 });
        assert_eq!(validate(&p, &m, &c), Ok(()));
    }

    #[test]
    fn every_precision_by_its_name() {
        let c = cluster(&[8; 1]);
        for p in Precision::ALL {
            assert_eq!(Precision::from_name(p.name()), Some(p));
            let spec = format!("dp=8,gbs=8,precision={}", p.name());
            match parse_inline_plan(&spec, &gpt(8), &c) {
                Ok(plan) => assert_eq!(plan.precision, p),
                // Read, then refused on these A100s.
                Err(e) => assert!(p.is_fp8() && e.message.contains("no FP8"), "{e:?}"),
            }
        }
        assert_eq!(Precision::from_name("fp4"), None);
        let err = parse_inline_plan("dp=8,gbs=8,precision=fp4", &gpt(8), &c).unwrap_err();
        assert!(err.message.contains("precision"), "{}", err.message);
    }

    #[test]
    fn megatron_rank_order_tp_then_dp_then_pp() {
        let c = cluster(&[8; 4]);
        let p = parse_inline_plan("tp=2,pp=2,gbs=64", &gpt(8), &c).unwrap();
        // dp fills the cluster: 32 / 4 = 8.
        assert_eq!(p.stages[0].dp, 8);
        assert_eq!(p.micro_batches, 8);
        assert_eq!(
            &p.stages[0].devices[..4],
            &[g(0, 0), g(0, 1), g(0, 2), g(0, 3)]
        );
        assert_eq!(p.stages[0].devices[15], g(1, 7));
        assert_eq!(p.stages[1].devices[0], g(2, 0));
        assert_eq!(validate(&p, &gpt(8), &c), Ok(()));
    }

    #[test]
    fn a_valid_uniform_plan_passes_validate() {
        let c = cluster(&[8; 8]);
        let m = gpt(22); // 24 layers
        for spec in [
            "tp=4,pp=4,dp=4,mbs=2,gbs=256,zero=2,ckpt=full,sp=off,engine=deepspeed,precision=fp16",
            "tp=2,pp=4,m=8,mbs=4,schedule=interleaved,v=3,offload_opt=0.5,offload_act=0.25",
            "tp=1,pp=3,dp=21,gbs=42,schedule=gpipe,ckpt=2",
            "pp=2, tp=16, m=4",
        ] {
            let p = parse_inline_plan(spec, &m, &c).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(validate(&p, &m, &c), Ok(()), "{spec}");
        }
        let p = parse_inline_plan(
            "tp=2,pp=4,m=8,mbs=4,schedule=interleaved,v=3,offload_opt=0.5",
            &m,
            &c,
        )
        .unwrap();
        assert_eq!(p.stages.len(), 12);
        assert_eq!(p.schedule, Schedule::Interleaved { virtual_stages: 3 });
        assert_eq!(p.stages[5].devices, p.stages[1].devices);
        assert_eq!(p.stages[0].layers, LayerRange { start: 0, end: 2 });
        assert_eq!(p.global_batch, 8 * 4 * 8);
        assert_eq!(p.stages[3].offload.optimizer, 0.5);
    }

    #[test]
    fn v_implies_interleaving() {
        let c = cluster(&[8]);
        let p = parse_inline_plan("pp=2,v=2,m=4", &gpt(6), &c).unwrap();
        assert_eq!(p.schedule, Schedule::Interleaved { virtual_stages: 2 });
        assert_eq!(p.stages.len(), 4);
        let e = err("pp=2,schedule=interleaved,m=4", &gpt(6), &c);
        assert_eq!(e.field.as_deref(), Some("v"));
        let e = err("pp=2,schedule=gpipe,v=2,m=4", &gpt(6), &c);
        assert_eq!(e.field.as_deref(), Some("v"));
        assert!(e.hint.unwrap().contains("schedule=interleaved"));
    }

    #[test]
    fn uneven_splits_give_earlier_chunks_the_extra_layers() {
        // 12 blocks + 2 = 14 layers over 4 stages: 12 % 4 == 0, Megatron split 4/3/3/4.
        let r = split_layers(&gpt(12), 4);
        let lens: Vec<usize> = r.iter().map(|r| r.len()).collect();
        assert_eq!(lens, vec![4, 3, 3, 4]);
        // 10 blocks + 2 = 12 layers over 4 stages: 10 % 4 != 0, even split 3/3/3/3.
        let lens: Vec<usize> = split_layers(&gpt(10), 4).iter().map(|r| r.len()).collect();
        assert_eq!(lens, vec![3, 3, 3, 3]);
        // 11 blocks + 2 = 13 over 4: 4/3/3/3.
        let lens: Vec<usize> = split_layers(&gpt(11), 4).iter().map(|r| r.len()).collect();
        assert_eq!(lens, vec![4, 3, 3, 3]);
        // As many chunks as layers.
        assert!(split_layers(&gpt(2), 4).iter().all(|r| r.len() == 1));
        assert_eq!(
            split_layers(&gpt(2), 1),
            vec![LayerRange { start: 0, end: 4 }]
        );
    }

    #[test]
    fn tp_groups_stay_inside_nodes_when_possible() {
        // Nodes of 6, 6 and 4 GPUs, tp = 4: whole groups n0g0-3, n1g0-3, n2g0-3 first.
        let c = cluster(&[6, 6, 4]);
        let p = parse_inline_plan("tp=4,pp=1,dp=3,m=1", &gpt(4), &c).unwrap();
        let d = &p.stages[0].devices;
        for r in 0..3 {
            let node = d[r * 4].node;
            assert!(d[r * 4..r * 4 + 4].iter().all(|x| x.node == node), "{d:?}");
        }
        assert_eq!(d[8], g(2, 0));
        // A fourth group has to span nodes 0 and 1 (their remainders).
        let p = parse_inline_plan("tp=4,dp=4,m=1", &gpt(4), &c).unwrap();
        assert_eq!(
            &p.stages[0].devices[12..],
            &[g(0, 4), g(0, 5), g(1, 4), g(1, 5)]
        );
        // A small node before a big one is skipped when a subset suffices.
        let c = cluster(&[4, 8]);
        let p = parse_inline_plan("tp=8,dp=1,gbs=8", &gpt(4), &c).unwrap();
        assert!(p.stages[0].devices.iter().all(|x| x.node == 1));
        // TP larger than a node spans nodes.
        let c = cluster(&[8, 8]);
        let p = parse_inline_plan("tp=16,gbs=8", &gpt(4), &c).unwrap();
        assert_eq!(p.stages[0].devices.len(), 16);
    }

    #[test]
    fn unknown_key_hints_the_nearest() {
        let c = cluster(&[8]);
        let e = err("tp=2,gbs=8,zer0=1", &gpt(4), &c);
        assert_eq!(e.field.as_deref(), Some("zer0"));
        assert_eq!(e.hint.as_deref(), Some("did you mean `zero`?"));
        assert_eq!((e.line, e.column), (Some(1), Some(12)));
        let e = err("gbs=8,offload_optim=0.5", &gpt(4), &c);
        assert_eq!(e.hint.as_deref(), Some("did you mean `offload_opt`?"));
        let e = err("gbs=8,tp", &gpt(4), &c);
        assert!(e.message.contains("key=value"), "{e}");
        let e = err("gbs=8,tp=2,TP=2", &gpt(4), &c);
        assert!(e.message.contains("twice"), "{e}");
    }

    #[test]
    fn bad_values() {
        let c = cluster(&[8]);
        let m = gpt(4);
        for (spec, field) in [
            ("tp=two,gbs=8", "tp"),
            ("tp=0,gbs=8", "tp"),
            ("gbs=8,zero=4", "zero"),
            ("gbs=8,ckpt=some", "ckpt"),
            ("gbs=8,sp=maybe", "sp"),
            ("gbs=8,schedule=pipedream", "schedule"),
            ("gbs=8,engine=megatorn", "engine"),
            ("gbs=8,precision=int8", "precision"),
            ("gbs=8,offload_w=1.5", "offload_w"),
            ("gbs=8,mbs=0", "mbs"),
            ("gbs=8,v=0", "v"),
            ("m=0", "m"),
        ] {
            let e = err(spec, &m, &c);
            assert_eq!(e.field.as_deref(), Some(field), "{spec}: {e}");
            assert!(e.column.is_some(), "{spec}");
        }
        let e = err("gbs=8,engine=megatorn", &m, &c);
        assert_eq!(e.hint.as_deref(), Some("did you mean `megatron`?"));
        // Checkpointing more layers than a chunk has (6 layers over 2 stages: 3 each).
        let e = err("pp=2,gbs=8,ckpt=4", &m, &c);
        assert_eq!(e.field.as_deref(), Some("ckpt"));
        assert!(e.message.contains("only 3 layers"), "{e}");
    }

    #[test]
    fn gpu_counts() {
        let c = cluster(&[8; 8]);
        let m = gpt(30);
        let e = err("tp=8,pp=8,dp=2,gbs=64", &m, &c);
        assert_eq!(e.field.as_deref(), Some("dp"));
        assert!(
            e.message.contains("128 GPUs, but the cluster has 64"),
            "{e}"
        );
        assert_eq!(e.hint.as_deref(), Some("dp at most 1"));
        let e = err("tp=16,pp=8,gbs=64", &m, &c);
        assert_eq!(e.field.as_deref(), Some("pp"));
        // 64 GPUs do not divide into groups of 8·3 = 24 unless dp is given.
        let e = err("tp=8,pp=3,gbs=64", &m, &c);
        assert_eq!(e.field.as_deref(), Some("dp"));
        assert!(e.hint.as_deref().unwrap().contains("dp=2"), "{e}");
        let p = parse_inline_plan("tp=8,pp=3,dp=2,gbs=64", &m, &c).unwrap();
        assert_eq!(p.devices().len(), 48);
    }

    #[test]
    fn batch_arithmetic() {
        let c = cluster(&[8; 2]);
        let m = gpt(4);
        // dp fills 16 GPUs: mbs·dp = 2·16 = 32.
        let e = err("mbs=2,gbs=100", &m, &c);
        assert_eq!(e.field.as_deref(), Some("gbs"));
        assert!(e.message.contains("mbs·dp = 2·16 = 32"), "{e}");
        assert_eq!(e.hint.as_deref(), Some("gbs=96 or gbs=128"));
        let e = err("mbs=2,gbs=96,m=4", &m, &c);
        assert_eq!(e.field.as_deref(), Some("m"));
        assert!(e.message.contains("= 3"), "{e}");
        let p = parse_inline_plan("mbs=2,gbs=96,m=3", &m, &c).unwrap();
        assert_eq!(p.micro_batches, 3);
        let p = parse_inline_plan("mbs=2,m=3", &m, &c).unwrap();
        assert_eq!(p.global_batch, 96);
        let e = err("mbs=2", &m, &c);
        assert_eq!(e.field.as_deref(), Some("gbs"));
        // Interleaving needs m to be a multiple of pp.
        let e = err("pp=2,v=2,m=3", &m, &c);
        assert_eq!(e.field.as_deref(), Some("m"));
        assert!(e.hint.unwrap().starts_with("m=4"));
    }

    /// Regressions: these overflowed (`lower + per_micro_batch`, `div_ceil(pp)·pp`) or passed
    /// with a micro-batch size that overflowed the cost model later.
    #[test]
    fn batch_sizes_beyond_the_limits_are_errors() {
        let one = cluster(&[1]);
        let c = cluster(&[8]);
        let m = gpt(4);
        for (spec, cl, field) in [
            ("gbs=18446744073709551615,mbs=2", &one, "gbs"),
            ("gbs=18446744073709551616", &one, "gbs"),
            (
                "pp=2,schedule=interleaved,v=1,m=18446744073709551615",
                &c,
                "m",
            ),
            ("mbs=18014398509481984,m=1", &one, "mbs"),
            ("mbs=1000000000,m=1000000000", &one, "m"),
            ("mbs=-1,m=1", &one, "mbs"),
            ("mbs=NaN,m=1", &one, "mbs"),
            ("mbs=1e308,m=1", &one, "mbs"),
            ("mbs=2.5,m=1", &one, "mbs"),
            ("gbs=8,tp=99999999999", &one, "tp"),
            ("gbs=8,zero=99999999999", &one, "zero"),
            ("gbs=8,offload_w=NaN", &one, "offload_w"),
        ] {
            let e = err(spec, &m, cl);
            assert_eq!(e.field.as_deref(), Some(field), "{spec}: {e}");
            assert!(e.column.is_some(), "{spec}");
        }
        let e = err("gbs=18446744073709551615,mbs=2", &m, &one);
        assert!(e.message.contains("1000000000"), "{e}");
        // At the limit: fine.
        let p = parse_inline_plan("mbs=1000000000,m=1", &m, &one).unwrap();
        assert_eq!(p.global_batch, 1_000_000_000);
        // A remainder whose upper neighbour is beyond the limit: only the lower one is hinted.
        let e = err("mbs=600000000,gbs=1000000000", &m, &one);
        assert_eq!(e.hint.as_deref(), Some("gbs=600000000"));
    }

    #[test]
    fn validation_errors_name_the_most_relevant_key() {
        assert_eq!(key_of(&PlanError::ZeroMicroBatches), "m");
        assert_eq!(
            key_of(&PlanError::BatchMismatch {
                stage: 0,
                samples: 1,
                micro_batches: 1,
                global_batch: 2
            }),
            "gbs"
        );
        assert_eq!(
            key_of(&PlanError::OffloadRatio {
                stage: 0,
                which: "optimizer",
                value: 2.0
            }),
            "offload_opt"
        );
        assert_eq!(
            key_of(&PlanError::ZeroDegree {
                stage: 0,
                which: "tp"
            }),
            "tp"
        );
        assert_eq!(
            key_of(&PlanError::LayersUncovered {
                from: 1,
                to: 2,
                last_stage: 0
            }),
            "pp"
        );
    }

    #[test]
    fn tp_against_heads() {
        let c = cluster(&[8; 2]);
        // 16 heads.
        let e = err("tp=3,dp=1,gbs=8", &gpt(4), &c);
        assert_eq!(e.field.as_deref(), Some("tp"));
        assert!(e.message.contains("16 attention heads"), "{e}");
        assert_eq!(e.hint.as_deref(), Some("tp one of 1, 2, 4, 8, 16"));
        // 48 heads, 12 KV heads: tp = 16 divides the heads, but not the KV heads nor they it.
        let mut cfg = TransformerConfig::llama("l", 4, 3072, 48, 12, 8192, 32000, 4096);
        cfg.head_dim = 64;
        let m = cfg.build();
        let e = err("tp=16,gbs=8", &m, &c);
        assert!(e.message.contains("12 KV heads"), "{e}");
        assert_eq!(e.hint.as_deref(), Some("tp one of 1, 2, 3, 4, 6, 12"));
        // 32 heads, 4 KV heads: tp = 8 replicates the KV heads.
        let m = TransformerConfig::llama("l", 4, 4096, 32, 4, 11008, 32000, 4096).build();
        assert!(parse_inline_plan("tp=8,gbs=8", &m, &c).is_ok());
        // 32 heads, 12 KV heads (contrived): tp = 8 divides the heads but not the KV heads.
        let m = TransformerConfig::llama("l", 4, 4096, 32, 12, 11008, 32000, 4096).build();
        let e = err("tp=8,gbs=8", &m, &c);
        assert!(e.message.contains("12 KV heads"), "{e}");
    }

    #[test]
    fn pp_more_than_layers() {
        let c = cluster(&[8; 2]);
        let e = err("pp=8,gbs=8", &gpt(4), &c);
        assert_eq!(e.field.as_deref(), Some("pp"));
        assert!(e.message.contains("only 6 layers"), "{e}");
        let e = err("pp=4,v=2,m=4", &gpt(4), &c);
        assert_eq!(e.field.as_deref(), Some("v"));
    }
}
