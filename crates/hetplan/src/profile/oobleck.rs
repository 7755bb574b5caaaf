//! Importer for Oobleck's profile cache (Jang et al., "Oobleck: Resilient Distributed Training of
//! Large Models Using Pipeline Templates", SOSP '23; github.com/SymbioticLab/Oobleck,
//! `oobleck/planning/profiler.py` as of its 2023 layout).
//!
//! Oobleck caches, per model, in `/tmp/oobleck/profiles/{model}-{tag}/`:
//!
//! * `mb{N}.json`: for micro-batch size N, a list over layers of
//!   `{"forward": ms, "backward": ms, "mem_required": [weight bytes, activation bytes]}`.
//!   Times are milliseconds (`(time_ns() difference) / 1e6`); Oobleck times the forward pass
//!   only and writes `backward = 3 × forward` (an estimate, kept as recorded and stated in
//!   `source`); memory is bytes (`torch.cuda.memory_allocated` differences).
//! * `allreduce_in_node.json`: a list over layers of `{"GPUs": ms}`, an all-reduce of the
//!   layer's parameters in fp32 among 1, 2, 4, … GPUs of one node.
//! * `allreduce_across_nodes.json`: the same keyed by number of nodes.
//!
//! The files carry neither the GPU type (Oobleck assumes one) nor TP (it has none): the caller
//! names the GPU and the model, and every sample has `tp` 1. Activation bytes become
//! `activation_memory`. Each all-reduce becomes a collective sample with the layer's weight bytes
//! as message and `message ÷ time` as bandwidth (groups of 1 and layers without parameters are
//! skipped; of equal message sizes the first layer's is kept).

use super::{
    canonical_gpu, tidy, CollectiveOp, CollectiveSample, LayerKey, LayerSample, LinkKind,
    ModelProfile, ProfileDb,
};
use crate::error::InputError;
use crate::parse::MAX_BATCH;
use crate::units::{Bytes, BytesPerSec, Seconds};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Per layer: group size → all-reduce time, ms.
type AllReduceTimes = Vec<BTreeMap<String, f64>>;

#[derive(Deserialize)]
struct OobleckLayer {
    forward: f64,
    backward: f64,
    #[serde(default)]
    mem_required: Option<(f64, f64)>,
}

fn parse<T: serde::de::DeserializeOwned>(
    file: &str,
    src: &str,
    expected: &str,
) -> Result<T, InputError> {
    serde_json::from_str(src).map_err(|e| {
        let mut err = InputError::from_json(&e);
        err.message = format!("{file}: {}", err.message);
        err.hint(Some(expected.to_string()))
    })
}

fn check(v: f64, file: &str, field: String) -> Result<f64, InputError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(InputError::new(format!("{file}: {v} must be finite and not negative")).field(field))
    }
}

/// Reads an Oobleck profile directory, given as (file name, contents) pairs, as the profile of
/// `model` on `gpu`.
pub fn import_oobleck(
    gpu: &str,
    model: &str,
    files: &[(String, String)],
) -> Result<ProfileDb, InputError> {
    for (what, name) in [("GPU", gpu), ("model", model)] {
        if name.trim().is_empty() {
            return Err(InputError::new(format!(
                "the {what} name is empty; name the {what} the Oobleck profiles are of"
            ))
            .field(what.to_ascii_lowercase()));
        }
    }
    let mut by_mbs: BTreeMap<u64, (String, Vec<OobleckLayer>)> = BTreeMap::new();
    let mut allreduce: Vec<(LinkKind, String, AllReduceTimes)> = Vec::new();
    for (path, contents) in files {
        let file = path.rsplit(['/', '\\']).next().unwrap_or(path).to_string();
        let link = match file.as_str() {
            "allreduce_in_node.json" => Some(LinkKind::IntraNode),
            "allreduce_across_nodes.json" => Some(LinkKind::InterNode),
            _ => None,
        };
        if let Some(link) = link {
            let v = parse(
                &file,
                contents,
                "a list over layers of {\"group size\": ms}",
            )?;
            allreduce.push((link, file, v));
            continue;
        }
        let mbs = file
            .strip_prefix("mb")
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| (1..=MAX_BATCH).contains(n))
            .ok_or_else(|| {
                InputError::new(format!("`{file}` is not an Oobleck profile file")).hint(Some(
                    "Oobleck's profile directory holds mb{N}.json, allreduce_in_node.json and allreduce_across_nodes.json".into(),
                ))
            })?;
        let layers: Vec<OobleckLayer> = parse(
            &file,
            contents,
            "a list over layers of {\"forward\": ms, \"backward\": ms, \"mem_required\": [bytes, bytes]}",
        )?;
        if let Some((first, _)) = by_mbs.insert(mbs, (file.clone(), layers)) {
            return Err(InputError::new(format!(
                "{file} and {first} both give micro-batch size {mbs}"
            )));
        }
    }
    if by_mbs.is_empty() {
        return Err(InputError::new(
            "no mb{N}.json file among the Oobleck profile files",
        ));
    }

    let (gpu_name, in_catalog) = canonical_gpu(gpu);
    let mut layers = Vec::new();
    for (&mbs, (file, rows)) in &by_mbs {
        for (i, r) in rows.iter().enumerate() {
            let fwd = check(r.forward, file, format!("[{i}].forward"))?;
            let bwd = check(r.backward, file, format!("[{i}].backward"))?;
            let act = match r.mem_required {
                Some((_, a)) => Some(Bytes(tidy(check(
                    a,
                    file,
                    format!("[{i}].mem_required[1]"),
                )?))),
                None => None,
            };
            layers.push(LayerSample {
                layer: LayerKey::Index(i),
                tp: 1,
                ep: 1,
                mbs,
                forward: Seconds(tidy(fwd * 1e-3)),
                backward: Seconds(tidy(bwd * 1e-3)),
                optimizer: None,
                activation_memory: act,
                peak_memory: None,
                total_memory: None,
                params: None,
            });
        }
    }

    // Weight bytes of each layer, from the smallest micro-batch's file (they do not depend on it).
    let weights: Vec<Option<f64>> = by_mbs
        .values()
        .next()
        .map(|(_, rows)| rows.iter().map(|r| r.mem_required.map(|m| m.0)).collect())
        .unwrap_or_default();
    let mut collectives: Vec<CollectiveSample> = Vec::new();
    for (link, file, per_layer) in &allreduce {
        for (i, groups) in per_layer.iter().enumerate() {
            let Some(Some(bytes)) = weights.get(i).copied() else {
                continue;
            };
            for (k, &ms) in groups {
                let Ok(group) = k.trim().parse::<u32>() else {
                    return Err(InputError::new(format!(
                        "{file}: group size `{k}` is not an integer"
                    ))
                    .field(format!("[{i}]")));
                };
                let ms = check(ms, file, format!("[{i}].{k}"))?;
                let bytes = check(bytes, file, format!("[{i}].mem_required[0]"))?;
                if group < 2 || bytes <= 0.0 || ms <= 0.0 {
                    continue;
                }
                let bandwidth = tidy(bytes / (ms * 1e-3));
                if !bandwidth.is_finite() {
                    return Err(InputError::new(format!(
                        "{file}: an all-reduce of {bytes} bytes in {ms} ms is an infinite bandwidth"
                    ))
                    .field(format!("[{i}].{k}")));
                }
                // Stored as written (15 significant digits), so that the database reads back equal.
                let message = Bytes(tidy(bytes));
                let dup = collectives
                    .iter()
                    .any(|c| c.link == *link && c.group_size == group && c.message == message);
                if !dup {
                    collectives.push(CollectiveSample {
                        op: CollectiveOp::AllReduce,
                        group_size: group,
                        link: *link,
                        message,
                        bandwidth: BytesPerSec(bandwidth),
                    });
                }
            }
        }
    }

    let sizes: Vec<String> = by_mbs.keys().map(|m| m.to_string()).collect();
    let mut source = format!(
        "Oobleck (SymbioticLab/Oobleck) profile cache of {model}, mb{{{}}}.json: forward ms timed \
         without gradients, backward as recorded (Oobleck writes 3 × forward, an estimate); \
         activation bytes from mem_required; tp 1",
        sizes.join(",")
    );
    if !allreduce.is_empty() {
        source.push_str(
            "; all-reduce bandwidth = weight bytes ÷ time from allreduce_in_node.json / allreduce_across_nodes.json (group size = key)",
        );
    }
    if !in_catalog {
        source.push_str(&format!("; GPU `{gpu}` is not in the hetplan GPU catalog"));
    }
    let mut profile = ModelProfile {
        gpu: if in_catalog {
            gpu_name
        } else {
            gpu.trim().to_ascii_lowercase()
        },
        model: model.trim().to_string(),
        seq_len: None,
        precision: None,
        source,
        layers,
        collectives,
    };
    profile.sort();
    let mut db = ProfileDb::new();
    db.profiles.push(profile);
    // What `to_json` writes must read back.
    db.validate()?;
    Ok(db)
}
