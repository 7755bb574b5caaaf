//! Importer for Sailor's profiles (Strati et al., "Sailor: Automating Distributed Training over
//! Dynamic, Heterogeneous, and Geo-distributed Clusters", SOSP '25; eth-easl/sailor, MIT).
//!
//! **`profiles_tmp.json`**: model → GPU → micro-batch size → TP degree → layer index →
//! `[forward s, backward s, optimizer step s]`, times in seconds measured with CUDA events on a
//! model of 2 blocks and copied to every block. Layer 0 is the embedding, 1..=L the blocks, L+1
//! the head with the loss; hetplan's models have the same order, so indices are kept.
//! Exceptions: Sailor's `LLAMA-3-8` has a separate final-norm layer (L+1) before the head (L+2);
//! hetplan puts the final norm in its head, so layers after the last block are added into the
//! head, which becomes L+1.
//!
//! The third number is **not** a per-layer time: it is one optimizer step of the whole profiling
//! model (embedding, 2 blocks, head), the same value on every layer; Sailor's simulator charges
//! it once per stage (`update_times[gpu][tp][stage[0]]`). Checked on the data: step ÷ parameters
//! of that 4-layer model is the same across models on one GPU (A100-40: 22.5 ps per parameter for
//! OPT-350 and GPT-Neo-2.7; V100-16: 37.2). So with `llm_info.json` the importer gives each
//! layer `step × params(layer) ÷ params(profiling model)`; without it, no optimizer time. A
//! recorded step of 0 (GPT-Neo-2.7 on A100-80) means "not measured" and is left out.
//!
//! **`llm_info.json`** (optional): model → TP → layer → `{params_floats, act_mem_bytes, …}` at
//! micro-batch 1, per GPU of the TP group, fp32: `params` = `params_floats`,
//! `activation_memory` = `act_mem_bytes × mbs`.
//!
//! GPU names (V100-16, A100-40, A100-80, GH-96, Titan-RTX, RTX-2080, RTX-3090) go through the GPU
//! catalog; one it does not know is kept lower-cased and named in `source`. Model names map to
//! hetplan's catalog names; sequence lengths come from Sailor's `training_config_*.json` (2048)
//! and its README (8192 for LLAMA-3-8). Precision: fp32 (Sailor's default).

use super::{canonical_gpu, same_name, tidy, LayerKey, LayerSample, ModelProfile, ProfileDb};
use crate::error::InputError;
use crate::model::LIMITS;
use crate::parse::MAX_BATCH;
use crate::plan::Precision;
use crate::units::{Bytes, Seconds};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A Sailor model: hetplan's name, sequence length of Sailor's runs, transformer blocks.
struct KnownModel {
    sailor: &'static str,
    hetplan: &'static str,
    seq_len: u64,
    blocks: usize,
}

const MODELS: &[KnownModel] = &[
    // training_config_opt_350.json: 24 layers, sequence 2048.
    KnownModel {
        sailor: "OPT-350",
        hetplan: "opt-350m",
        seq_len: 2048,
        blocks: 24,
    },
    // training_config_gpt_neo27.json: 32 layers, sequence 2048.
    KnownModel {
        sailor: "GPT-Neo-2.7",
        hetplan: "gpt-neo-2.7b",
        seq_len: 2048,
        blocks: 32,
    },
    // Sailor README: LLAMA-3-8 at sequence 8192; Llama 3 8B has 32 blocks.
    KnownModel {
        sailor: "LLAMA-3-8",
        hetplan: "llama-3-8b",
        seq_len: 8192,
        blocks: 32,
    },
    // No training config shipped; OPT-30B has 48 blocks and a 2048-token context
    // (Zhang et al. 2022, Table 1), the length of Sailor's other runs.
    KnownModel {
        sailor: "OPT-30",
        hetplan: "opt-30b",
        seq_len: 2048,
        blocks: 48,
    },
];

type RawProfiles = BTreeMap<
    String,
    BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f64>>>>>,
>;

#[derive(Deserialize)]
struct LayerInfo {
    #[serde(default)]
    params_floats: Option<f64>,
    #[serde(default)]
    act_mem_bytes: Option<f64>,
    #[serde(default)]
    act_mem_floats: Option<f64>,
}

impl LayerInfo {
    fn activation_bytes(&self) -> Option<f64> {
        // Sailor stores fp32 floats: 4 bytes each.
        self.act_mem_bytes.or(self.act_mem_floats.map(|f| 4.0 * f))
    }
}

type LlmInfo = BTreeMap<String, BTreeMap<String, BTreeMap<String, LayerInfo>>>;

/// A whole-number key (`"4"`) in `min..=max`.
fn number(key: &str, path: &str, what: &str, min: u64, max: u64) -> Result<u64, InputError> {
    crate::parse::whole(crate::parse::Num::Text(key), min, max).map_err(|e| {
        InputError::new(format!("`{key}` is not a {what}: {e}")).field(path.to_string())
    })
}

/// Checks `llm_info.json`'s numbers: parameter counts whole, not negative and at most
/// `model::LIMITS.layer_params`; activation sizes finite and not negative.
fn check_llm_info(llm: &LlmInfo) -> Result<(), InputError> {
    for (model, by_tp) in llm {
        for (tp, layers) in by_tp {
            for (layer, info) in layers {
                let path = |k: &str| format!("llm_info.{model}.{tp}.{layer}.{k}");
                if let Some(p) = info.params_floats {
                    if !(p >= 0.0 && p.fract() == 0.0 && p <= LIMITS.layer_params as f64) {
                        return Err(InputError::new(format!(
                            "{} parameters: expected a whole number from 0 to {}",
                            crate::parse::show_f64(p),
                            LIMITS.layer_params
                        ))
                        .field(path("params_floats")));
                    }
                }
                for (k, v) in [
                    ("act_mem_bytes", info.act_mem_bytes),
                    ("act_mem_floats", info.act_mem_floats),
                ] {
                    if let Some(v) = v {
                        if !(v.is_finite() && v >= 0.0) {
                            return Err(InputError::new(format!(
                                "{} must be finite and not negative",
                                crate::parse::show_f64(v)
                            ))
                            .field(path(k)));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Reads Sailor's `profiles_tmp.json` (and, optionally, `llm_info.json`) into a database.
pub fn import_sailor(
    profiles_json: &str,
    llm_info_json: Option<&str>,
) -> Result<ProfileDb, InputError> {
    let raw: RawProfiles =
        serde_json::from_str(profiles_json).map_err(|e| InputError::from_json(&e).hint(Some(
            "expected Sailor's profiles_tmp.json: model → GPU → mbs → tp → layer → [fwd s, bwd s, step s]".into(),
        )))?;
    let llm: LlmInfo = match llm_info_json {
        Some(src) => serde_json::from_str(src).map_err(|e| {
            InputError::from_json(&e).field("llm_info").hint(Some(
                "expected Sailor's llm_info.json: model → tp → layer → {params_floats, act_mem_bytes, …}"
                    .into(),
            ))
        })?,
        None => LlmInfo::new(),
    };
    check_llm_info(&llm)?;
    let mut db = ProfileDb::new();
    for (model_name, gpus) in &raw {
        let known = MODELS.iter().find(|m| same_name(m.sailor, model_name));
        let info = llm
            .iter()
            .find(|(k, _)| same_name(k, model_name))
            .map(|(_, v)| v);
        for (gpu_name, by_mbs) in gpus {
            if model_name.trim().is_empty() || gpu_name.trim().is_empty() {
                return Err(InputError::new("empty model or GPU name")
                    .field(format!("{model_name}.{gpu_name}")));
            }
            db.profiles.push(import_one(
                model_name,
                known,
                info,
                llm_info_json.is_some(),
                gpu_name,
                by_mbs,
            )?);
        }
    }
    // What `to_json` writes must read back.
    db.validate()?;
    Ok(db)
}

#[allow(clippy::type_complexity)]
fn import_one(
    model_name: &str,
    known: Option<&KnownModel>,
    info: Option<&BTreeMap<String, BTreeMap<String, LayerInfo>>>,
    have_llm_info: bool,
    gpu_name: &str,
    by_mbs: &BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f64>>>>,
) -> Result<ModelProfile, InputError> {
    let (gpu, in_catalog) = canonical_gpu(gpu_name);
    let gpu = if in_catalog {
        gpu
    } else {
        gpu_name.trim().to_ascii_lowercase()
    };
    let mut layers = Vec::new();
    let mut folded: Option<(usize, usize, usize)> = None;
    let mut zero_steps = false;
    let mut tps_without_info: Vec<u32> = Vec::new();
    for (mbs_key, by_tp) in by_mbs {
        let path = format!("{model_name}.{gpu_name}.{mbs_key}");
        let mbs = number(mbs_key, &path, "micro-batch size", 1, MAX_BATCH)?;
        for (tp_key, by_layer) in by_tp {
            let path = format!("{path}.{tp_key}");
            let tp = number(tp_key, &path, "TP degree", 1, u32::MAX as u64)? as u32;
            // Rows in layer order, indices checked to run 0..n.
            let mut rows: Vec<(usize, &Vec<f64>)> = Vec::with_capacity(by_layer.len());
            for (layer_key, v) in by_layer {
                let path = format!("{path}.{layer_key}");
                // Indices run 0..n (checked below): bounded by the number of entries.
                let i = number(layer_key, &path, "layer index", 0, by_layer.len() as u64)? as usize;
                if !(2..=3).contains(&v.len()) || v.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    return Err(InputError::new(format!(
                        "expected [forward s, backward s, optimizer step s] (finite, not negative), found {v:?}"
                    ))
                    .field(path));
                }
                rows.push((i, v));
            }
            rows.sort_by_key(|r| r.0);
            if let Some(gap) = rows.iter().enumerate().find(|(k, r)| r.0 != *k) {
                return Err(InputError::new(format!(
                    "layer indices must run 0, 1, 2, … without gaps; layer {} is missing",
                    gap.0
                ))
                .field(path));
            }
            let n = rows.len();
            if n == 0 {
                continue;
            }
            let blocks = known.map(|m| m.blocks).unwrap_or(n.saturating_sub(2));
            // Output layer j ← Sailor layers members[j].
            let mut members: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
            if n >= blocks + 3 {
                members.truncate(blocks + 1);
                members.push((blocks + 1..n).collect());
                folded = Some((blocks + 1, n - 2, blocks + 1));
            }
            let layer_info = info.and_then(|t| t.get(tp_key));
            if layer_info.is_none() && have_llm_info && !tps_without_info.contains(&tp) {
                tps_without_info.push(tp);
            }
            let params =
                |i: usize| -> Option<f64> { layer_info?.get(&i.to_string())?.params_floats };
            // Parameters of the profiling model: embedding, 2 blocks, and what follows the blocks.
            let profiled_params: Option<f64> = if n >= 4 && blocks >= 2 {
                [0, 1, 2]
                    .into_iter()
                    .chain(blocks + 1..n)
                    .map(params)
                    .sum::<Option<f64>>()
                    .filter(|p| *p > 0.0)
            } else {
                None
            };
            for (j, m) in members.iter().enumerate() {
                let fwd: f64 = m.iter().map(|&i| rows[i].1[0]).sum();
                let bwd: f64 = m.iter().map(|&i| rows[i].1[1]).sum();
                let p: Option<f64> = m.iter().map(|&i| params(i)).sum();
                let act: Option<f64> = m
                    .iter()
                    .map(|&i| layer_info?.get(&i.to_string())?.activation_bytes())
                    .sum();
                let optimizer: Option<f64> = m
                    .iter()
                    .map(|&i| {
                        let step = *rows[i].1.get(2)?;
                        if step == 0.0 {
                            zero_steps = true;
                            return None;
                        }
                        Some(step * params(i)? / profiled_params?)
                    })
                    .sum();
                // Sums and products of finite values can still overflow.
                let finite = |v: f64, what: &str| -> Result<f64, InputError> {
                    if v.is_finite() {
                        Ok(v)
                    } else {
                        Err(InputError::new(format!(
                            "the {what} of layer {j} at micro-batch size {mbs} overflows"
                        ))
                        .field(path.clone()))
                    }
                };
                layers.push(LayerSample {
                    layer: LayerKey::Index(j),
                    tp,
                    ep: 1,
                    mbs,
                    forward: Seconds(tidy(finite(fwd, "forward time")?)),
                    backward: Seconds(tidy(finite(bwd, "backward time")?)),
                    optimizer: optimizer
                        .map(|o| finite(o, "optimizer time").map(|o| Seconds(tidy(o))))
                        .transpose()?,
                    activation_memory: act
                        .map(|a| {
                            finite(a * mbs as f64, "activation memory").map(|a| Bytes(tidy(a)))
                        })
                        .transpose()?,
                    peak_memory: None,
                    total_memory: None,
                    // Whole and at most LIMITS.layer_params each (check_llm_info), so at most
                    // a few times that summed: exact in u64.
                    params: p.map(|p| p.round() as u64),
                });
            }
        }
    }

    let mut source = format!(
        "Sailor (eth-easl/sailor) profiles_tmp.json, {model_name} on {gpu_name}: per-layer forward \
         and backward times measured with CUDA events on a 2-block model and copied to every \
         block; fp32"
    );
    if !in_catalog {
        source.push_str(&format!(
            "; GPU `{gpu_name}` is not in the hetplan GPU catalog, kept as `{gpu}`"
        ));
    }
    if known.is_none() {
        source.push_str(&format!(
            "; model `{model_name}` is not one the importer knows: name lower-cased, sequence length unknown"
        ));
    }
    if let Some((a, b, head)) = folded {
        let span = if a == b {
            format!("layer {a}")
        } else {
            format!("layers {a}..={b}")
        };
        source.push_str(&format!(
            "; Sailor's {span} (final norm, after the last block) added into its head, which becomes layer {head}"
        ));
    }
    if have_llm_info {
        source.push_str(
            "; optimizer: Sailor's whole step of the profiling model (embedding, 2 blocks, head) \
             split over layers by parameters from llm_info.json; params and activation memory \
             (act_mem_bytes × mbs) from llm_info.json, per GPU of the TP group",
        );
        if !tps_without_info.is_empty() {
            tps_without_info.sort_unstable();
            source.push_str(&format!(
                "; llm_info.json has no tp {tps_without_info:?}: no optimizer, params or activation memory there"
            ));
        }
    } else {
        source.push_str(
            "; no optimizer time: Sailor records one whole step of the profiling model, which \
             needs llm_info.json to split over layers",
        );
    }
    if zero_steps {
        source.push_str("; optimizer steps recorded as 0 (not measured) left out");
    }

    let mut profile = ModelProfile {
        gpu,
        model: known
            .map(|m| m.hetplan.to_string())
            .unwrap_or_else(|| model_name.trim().to_ascii_lowercase()),
        seq_len: known.map(|m| m.seq_len),
        precision: Some(Precision::Fp32),
        source,
        layers,
        collectives: Vec::new(),
    };
    profile.sort();
    Ok(profile)
}
