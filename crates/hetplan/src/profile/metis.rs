//! Importer for Metis's profile files (Um et al., "Metis: Fast Automatic Distributed Training on
//! Heterogeneous GPUs", USENIX ATC '24; github.com/SamsungLabs/Metis, README "Profile Data Guide",
//! `data_loader.py`, `model/cost_estimator.py`, samples in `profile_data_samples/`).
//!
//! One JSON file per (device type, TP degree, batch size), named `DeviceType.{device}_tp{tp}_bs{bs}.json`
//! (Metis's loader: device = the word after `DeviceType.` up to the first `_`; `tp(\d+)`,
//! `bs(\d+)`). The batch size is the micro-batch size (Metis profiles with micro, mini and
//! global batch equal). Fields read, with their units per the README and the code:
//!
//! | field | unit | becomes |
//! | --- | --- | --- |
//! | `model.model_name` | — | `model` (as written) |
//! | `execution_time.layer_compute_total_ms[i]` | ms, forward + backward of layer i | `forward` = ⅓, `backward` = ⅔ of it, in s |
//! | `execution_time.optimizer_time_ms` | ms, one step of the whole model on this GPU at this TP | `optimizer`, split over layers by `parameters_per_layer_bytes` (evenly without them), in s |
//! | `model.parameters.parameters_per_layer_bytes[i]` | bytes | the optimizer split only (the element size is not recorded, so no parameter count) |
//! | `execution_memory.layer_memory_total_mb[i]` | MB of 2²⁰ bytes (Metis compares it with the GPU memory in GB × 1024), weights + gradients + optimizer states + activations | `total_memory`, in bytes |
//!
//! Not imported: `forward_backward_time_ms − Σ layer times` (Metis's `fb_sync`),
//! `batch_generator_time_ms`, the LayerNorm/embedding gradient all-reduce times, `total_time_ms`
//! and the total memory (stage-level quantities, not per layer). Metis's loader doubles
//! `optimizer_time_ms` and its heterogeneous cost model divides it by TP and splits it evenly
//! over layers; we keep the measured value and split by parameter bytes. Metis records forward +
//! backward as one number; the 1 : 2 split is the usual FLOP ratio of a backward pass
//! (gradients of inputs and of weights), stated in `source`. A `layer_memory_total_mb` whose
//! length differs from the layer count (Metis's own samples have 9 entries for 10 layers) cannot
//! be matched to layers and is left out, with a note.
//!
//! Device names are Metis's `DeviceType` enum (A100, V100, P100, T4). `A100` is the 80 GB part:
//! Metis's example cluster file gives it 80 GB and its A100 samples use 53 120 MB, more than the
//! 40 GB model holds. Other names go through the GPU catalog; one it does not know is kept
//! lower-cased and named in `source`.

use super::{canonical_gpu, tidy, LayerKey, LayerSample, ModelProfile, ProfileDb};
use crate::error::InputError;
use crate::parse::MAX_BATCH;
use crate::units::{Bytes, Seconds};
use serde::Deserialize;
use std::collections::BTreeMap;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Deserialize)]
struct MetisFile {
    model: MetisModel,
    execution_time: MetisTime,
    #[serde(default)]
    execution_memory: Option<MetisMemory>,
}

#[derive(Deserialize)]
struct MetisModel {
    model_name: String,
    #[serde(default)]
    parameters: Option<MetisParameters>,
}

#[derive(Deserialize)]
struct MetisParameters {
    #[serde(default)]
    parameters_per_layer_bytes: Vec<f64>,
}

#[derive(Deserialize)]
struct MetisTime {
    layer_compute_total_ms: Vec<f64>,
    #[serde(default)]
    optimizer_time_ms: Option<f64>,
}

#[derive(Deserialize)]
struct MetisMemory {
    #[serde(default)]
    layer_memory_total_mb: Vec<f64>,
}

/// Device, TP degree and batch size from a Metis profile file name (a path is allowed).
fn parse_name(path: &str) -> Result<(String, u32, u64), InputError> {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let bad = || {
        InputError::new(format!(
            "`{name}` is not a Metis profile file name"
        ))
        .hint(Some("Metis names its files `DeviceType.{device}_tp{tp}_bs{batch}.json`, e.g. `DeviceType.A100_tp1_bs2.json`".into()))
    };
    let rest = name.strip_prefix("DeviceType.").ok_or_else(bad)?;
    let (device, params) = rest.split_once('_').ok_or_else(bad)?;
    if device.is_empty() || !device.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(bad());
    }
    let number_after = |tag: &str| -> Option<u64> {
        let i = params.find(tag)?;
        let digits: String = params[i + tag.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok().filter(|v| *v > 0)
    };
    let tp = number_after("tp")
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(bad)?;
    let bs = number_after("bs")
        .filter(|v| *v <= MAX_BATCH)
        .ok_or_else(bad)?;
    Ok((device.to_string(), tp, bs))
}

/// Metis's device name → hetplan GPU name, and whether the catalog knows it.
fn device_gpu(device: &str) -> (String, bool) {
    if device.eq_ignore_ascii_case("a100") {
        if let (name, true) = canonical_gpu("a100-sxm4-80gb") {
            return (name, true);
        }
    }
    match canonical_gpu(device) {
        (name, true) => (name, true),
        _ => (device.to_ascii_lowercase(), false),
    }
}

fn check(v: f64, file: &str, field: &str) -> Result<f64, InputError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(
            InputError::new(format!("{file}: {v} must be finite and not negative"))
                .field(field.to_string()),
        )
    }
}

/// Reads Metis profile files, given as (file name, contents) pairs, into a database: one
/// profile per (device, model name).
pub fn import_metis(files: &[(String, String)]) -> Result<ProfileDb, InputError> {
    // (gpu, model) → (profile, device as written, notes)
    let mut out: BTreeMap<(String, String), (ModelProfile, String, Vec<String>)> = BTreeMap::new();
    let mut seen: BTreeMap<(String, String, u32, u64), String> = BTreeMap::new();
    for (path, contents) in files {
        let (device, tp, mbs) = parse_name(path)?;
        let file = path.rsplit(['/', '\\']).next().unwrap_or(path).to_string();
        let raw: MetisFile = serde_json::from_str(contents).map_err(|e| {
            let mut err = InputError::from_json(&e);
            err.message = format!("{file}: {}", err.message);
            err.hint(Some(
                "expected a Metis profile: {\"model\": {\"model_name\", …}, \"execution_time\": {\"layer_compute_total_ms\": […], …}, \"execution_memory\": {…}}".into(),
            ))
        })?;
        let (gpu, in_catalog) = device_gpu(&device);
        let model = raw.model.model_name.trim().to_string();
        if model.is_empty() {
            return Err(
                InputError::new(format!("{file}: empty model name")).field("model.model_name")
            );
        }
        if let Some(first) = seen.insert((gpu.clone(), model.clone(), tp, mbs), file.clone()) {
            return Err(InputError::new(format!(
                "{file} and {first} both profile {model} on {device} at tp {tp}, batch size {mbs}"
            ))
            .hint(Some("give one file per device, tp and batch size".into())));
        }

        let times = &raw.execution_time.layer_compute_total_ms;
        let n = times.len();
        if n == 0 {
            return Err(InputError::new(format!("{file}: no layer times"))
                .field("execution_time.layer_compute_total_ms"));
        }
        let (_, _, notes) = out.entry((gpu.clone(), model.clone())).or_insert_with(|| {
            let mut notes = Vec::new();
            if !in_catalog {
                notes.push(format!(
                    "device `{device}` is not in the hetplan GPU catalog, kept as `{gpu}`"
                ));
            }
            (
                ModelProfile {
                    gpu: gpu.clone(),
                    model: model.clone(),
                    seq_len: None,
                    precision: None,
                    source: String::new(),
                    layers: Vec::new(),
                    collectives: Vec::new(),
                },
                device.clone(),
                notes,
            )
        });

        let param_bytes: Option<&Vec<f64>> = raw
            .model
            .parameters
            .as_ref()
            .map(|p| &p.parameters_per_layer_bytes)
            .filter(|p| p.len() == n && p.iter().all(|b| b.is_finite() && *b >= 0.0))
            .filter(|p| p.iter().sum::<f64>() > 0.0);
        let optimizer = match raw.execution_time.optimizer_time_ms {
            Some(ms) => Some(check(ms, &file, "execution_time.optimizer_time_ms")? * 1e-3),
            None => None,
        };
        if optimizer.is_some() && param_bytes.is_none() {
            notes.push(format!(
                "{file}: no parameters_per_layer_bytes for all {n} layers, optimizer step split evenly"
            ));
        }
        let memory: Option<&Vec<f64>> = match &raw.execution_memory {
            Some(m) if m.layer_memory_total_mb.len() == n => Some(&m.layer_memory_total_mb),
            Some(m) if !m.layer_memory_total_mb.is_empty() => {
                notes.push(format!(
                    "{file}: layer_memory_total_mb has {} entries for {n} layers, memory left out",
                    m.layer_memory_total_mb.len()
                ));
                None
            }
            _ => None,
        };
        let total_bytes: f64 = param_bytes.map(|p| p.iter().sum()).unwrap_or(0.0);
        let (profile, _, _) = out
            .get_mut(&(gpu.clone(), model.clone()))
            .expect("inserted above");
        for (i, &ms) in times.iter().enumerate() {
            let total = check(
                ms,
                &file,
                &format!("execution_time.layer_compute_total_ms[{i}]"),
            )? * 1e-3;
            let share = match param_bytes {
                Some(p) => p[i] / total_bytes,
                None => 1.0 / n as f64,
            };
            let total_memory = match memory {
                Some(m) => {
                    let field = format!("execution_memory.layer_memory_total_mb[{i}]");
                    // MiB → bytes can overflow for a huge (finite) value.
                    let bytes = check(check(m[i], &file, &field)? * MIB, &file, &field)?;
                    Some(Bytes(tidy(bytes)))
                }
                None => None,
            };
            profile.layers.push(LayerSample {
                layer: LayerKey::Index(i),
                tp,
                ep: 1,
                mbs,
                forward: Seconds(tidy(total / 3.0)),
                backward: Seconds(tidy(total * 2.0 / 3.0)),
                optimizer: optimizer.map(|o| Seconds(tidy(o * share))),
                activation_memory: None,
                peak_memory: None,
                total_memory,
                params: None,
            });
        }
    }

    let mut db = ProfileDb::new();
    for ((_, model), (mut profile, device, notes)) in out {
        let mut points: Vec<(u32, u64)> = profile.layers.iter().map(|s| (s.tp, s.mbs)).collect();
        points.sort_unstable();
        points.dedup();
        let files: Vec<String> = points
            .iter()
            .map(|(tp, bs)| format!("tp{tp}_bs{bs}"))
            .collect();
        let mut source = format!(
            "Metis (SamsungLabs/Metis) profile files DeviceType.{device}_{{{}}}.json, {model}: \
             layer_compute_total_ms (forward + backward, ms) split forward : backward = 1 : 2; \
             optimizer_time_ms (whole step) split over layers by parameter bytes; \
             layer_memory_total_mb (MiB, weights + gradients + optimizer states + activations) \
             as total_memory",
            files.join(",")
        );
        for n in notes {
            source.push_str("; ");
            source.push_str(&n);
        }
        profile.source = source;
        profile.sort();
        db.profiles.push(profile);
    }
    // What `to_json` writes must read back (sums and unit conversions can overflow).
    db.validate()?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_metis_loader() {
        assert_eq!(
            parse_name("profile/DeviceType.A100_tp2_bs4.json").unwrap(),
            ("A100".to_string(), 2, 4)
        );
        assert!(parse_name("A100_tp2_bs4.json").is_err());
        assert!(parse_name("DeviceType.A100_tp2.json").is_err());
        assert!(parse_name("DeviceType.A100_tp0_bs1.json").is_err());
    }
}
