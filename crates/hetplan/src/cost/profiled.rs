//! Layer times from a profile database, the analytic model where it has no point.

use super::compute::{Analytic, ComputeTimes, LayerShape, LayerTime, TimeSource, WeightCasts};
use crate::gpu::GpuSpec;
use crate::model::Model;
use crate::plan::Precision;
use crate::profile::{Interpolation, ProfileIndex, Provenance};
use crate::units::{Bytes, Seconds};

/// Measured times where the profile has them, the analytic model elsewhere.
pub struct Profiled<'a> {
    pub index: &'a ProfileIndex,
    pub interpolation: Interpolation,
}

impl ComputeTimes for Profiled<'_> {
    /// As the analytic model's: a measured time at `cp = c` is the measurement at whole
    /// sequences scaled by the analytic ratio, which is at least `1/c`.
    fn context_parallelism_never_cheaper(&self) -> bool {
        Analytic.context_parallelism_never_cheaper()
    }

    fn collective_bandwidth(
        &self,
        gpu: &GpuSpec,
        op: crate::profile::CollectiveOp,
        group_size: u32,
        link: crate::profile::LinkKind,
        message: crate::units::Bytes,
    ) -> Option<crate::units::BytesPerSec> {
        (self.index).collective_bandwidth(&gpu.name, op, group_size, link, message)
    }

    fn layer_time(
        &self,
        gpu: &GpuSpec,
        model: &Model,
        layer: usize,
        shape: LayerShape,
    ) -> LayerTime {
        let analytic = Analytic.layer_time(gpu, model, layer, shape);
        let l = &model.layers[layer];
        // A mixture-of-experts layer is read at the stage's expert-parallel degree (the
        // profiler measures a GPU's share of the experts at each); its experts split at the TP
        // degree, as measured, or the analytic model prices it.
        let moe = l.ops.iter().any(|op| op.is_expert());
        if moe && shape.etp.is_some_and(|e| e != shape.tp) {
            return analytic;
        }
        let ep = if moe { shape.ep.max(1) } else { 1 };
        match self.index.layer_time_ep(
            &gpu.name,
            &model.name,
            layer,
            l.kind,
            shape.tp,
            ep,
            shape.mbs,
            self.interpolation,
        ) {
            Some(p) => {
                // The profiler runs its layers in the training precision itself, with PyTorch's
                // own norm kernels: PyTorch's mixed-precision casts and FSDP's copies beside
                // them, and the extra kernels of eagerly run model code (`Plan::compile` off),
                // are the engine's, added as the analytic model prices them. (Its SwiGLU is
                // already two kernels and its blocks have no rotary embedding: under `off` the
                // SwiGLU's extra bytes are counted twice, 4 B per element of the MLP's width.)
                // A measured head is taken as measured, padded vocabulary or not: the
                // unaligned-GEMM factor was measured on one GPU only.
                let bare_shape = LayerShape {
                    weight_casts: WeightCasts::None,
                    eager: false,
                    ..shape
                };
                let bare = Analytic.layer_time(gpu, model, layer, bare_shape);
                // Measured at whole sequences: with context parallelism each GPU holds 1/cp of
                // them, scaled by the analytic model's ratio.
                let (forward, backward) = if shape.cp > 1 {
                    let whole = Analytic.layer_time(
                        gpu,
                        model,
                        layer,
                        LayerShape {
                            cp: 1,
                            ..bare_shape
                        },
                    );
                    (
                        p.forward * ratio(bare.forward, whole.forward),
                        p.backward * ratio(bare.backward, whole.backward),
                    )
                } else {
                    (p.forward, p.backward)
                };
                // What a whole recomputation repeats: the measured kernels in the share the
                // analytic model gives them, and the engine's own work as it prices it (eager
                // kernels and autocast's casts again, not FSDP2's gather copies).
                let recompute = forward * ratio(bare.recompute_forward, bare.forward)
                    + (analytic.recompute_forward - bare.recompute_forward);
                let forward = forward + (analytic.forward - bare.forward);
                let backward = backward + (analytic.backward - bare.backward);
                LayerTime {
                    recompute_forward: recompute,
                    ..measured(analytic, forward, backward, shape, p.how)
                }
            }
            None => analytic,
        }
    }
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: Seconds, b: Seconds) -> f64 {
    if b.get() > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Measured forward and backward times, with the analytic model's split of the attention core
/// (and of what selective recomputation repeats) scaled to them.
fn measured(
    analytic: LayerTime,
    forward: Seconds,
    backward: Seconds,
    shape: LayerShape,
    how: Provenance,
) -> LayerTime {
    let (fwd_scale, bwd_scale) = (
        ratio(forward, analytic.forward),
        ratio(backward, analytic.backward),
    );
    LayerTime {
        forward,
        backward,
        selective_forward: analytic.selective_forward * fwd_scale,
        op_checkpoint_forward: analytic.op_checkpoint_forward * fwd_scale,
        recompute_forward: analytic.recompute_forward * fwd_scale,
        attention_forward: analytic.attention_forward * fwd_scale,
        attention_backward: analytic.attention_backward * bwd_scale,
        // The profiler's MoE block loops over its experts on the host too: the measured times
        // hold such a loop, taken as long as the engine's.
        host_expert_loop: Seconds(
            (analytic.host_expert_loop.get()).min((forward + backward).get()),
        ),
        forward_flop: analytic.forward_flop,
        backward_flop: analytic.backward_flop,
        includes_tp_comm: shape.tp > 1,
        source: match how {
            Provenance::Measured => TimeSource::Measured,
            Provenance::Interpolated { .. } => TimeSource::Interpolated,
            Provenance::Extrapolated { .. } => TimeSource::Extrapolated,
        },
    }
}

/// One measured layer sample beside what the analytic model predicts for the same layer,
/// shape, GPU type and precision (`hetplan profile compare`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SampleCheck {
    pub gpu: String,
    pub seq_len: u64,
    pub precision: Precision,
    /// The sample's key as the database writes it: a layer index, or a kind.
    pub layer: String,
    /// The model layer the analytic side is computed for (the first of its kind for a kind).
    pub layer_index: usize,
    pub tp: u32,
    /// Expert-parallel degree of a mixture-of-experts sample (1 for dense layers).
    pub ep: u32,
    pub mbs: u64,
    pub measured_forward: Seconds,
    pub model_forward: Seconds,
    pub measured_backward: Seconds,
    pub model_backward: Seconds,
    /// Bytes kept for backward, where the profile measured them.
    pub measured_activations: Option<Bytes>,
    /// `memory::layer_saved_bytes` for the layer (no recomputation, no sequence parallelism;
    /// Megatron's loss buffer).
    pub model_activations: Bytes,
    /// Peak allocated over forward and backward, where measured (no model counterpart: it
    /// includes the kernels' workspaces).
    pub measured_peak: Option<Bytes>,
}

impl SampleCheck {
    /// Model over measured forward + backward time, minus one.
    pub fn time_error(&self) -> f64 {
        let m = (self.measured_forward + self.measured_backward).get();
        let p = (self.model_forward + self.model_backward).get();
        if m > 0.0 {
            p / m - 1.0
        } else {
            0.0
        }
    }

    /// Model over measured activation bytes, minus one, where measured.
    pub fn activation_error(&self) -> Option<f64> {
        let m = self.measured_activations?.get();
        (m > 0.0).then(|| self.model_activations.get() / m - 1.0)
    }
}

/// Why a profile cannot be compared with the model.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompareError {
    #[error("the database has no profile of model {model} (it has {found})")]
    NoProfileOfModel { model: String, found: String },
    #[error("GPU {gpu} of profile {profile} is not in hetplan's catalog, so the model has nothing to predict it with")]
    UnknownGpu { profile: usize, gpu: String },
    #[error(
        "profile {profile}, sample {sample}: layer {layer} is beyond the model's {layers} layers"
    )]
    LayerOutOfRange {
        profile: usize,
        sample: usize,
        layer: usize,
        layers: usize,
    },
    #[error("profile {profile}, sample {sample}: the model has no {kind} layer")]
    NoLayerOfKind {
        profile: usize,
        sample: usize,
        kind: String,
    },
}

/// Every layer sample of `db`'s profiles of `model` beside the analytic model's prediction:
/// the profile's sequence length (the model's default where it names none) and precision
/// (BF16 where it names none), the sample's TP degree and micro-batch size. Profiles of other
/// models are left out; none of `model` is an error.
pub fn compare_with_model(
    db: &crate::profile::ProfileDb,
    model: &Model,
) -> Result<Vec<SampleCheck>, CompareError> {
    use crate::profile::LayerKey;
    let mut out = Vec::new();
    let mut any = false;
    for (pi, p) in db.profiles.iter().enumerate() {
        if !crate::profile::same_name(&p.model, &model.name) {
            continue;
        }
        any = true;
        let gpu = crate::gpu::lookup(&p.gpu).map_err(|_| CompareError::UnknownGpu {
            profile: pi,
            gpu: p.gpu.clone(),
        })?;
        let seq = p.seq_len.unwrap_or(model.default_seq_len);
        let precision = p.precision.unwrap_or(Precision::Bf16);
        for (si, s) in p.layers.iter().enumerate() {
            let index =
                match s.layer {
                    LayerKey::Index(i) if i < model.layers.len() => i,
                    LayerKey::Index(i) => {
                        return Err(CompareError::LayerOutOfRange {
                            profile: pi,
                            sample: si,
                            layer: i,
                            layers: model.layers.len(),
                        })
                    }
                    LayerKey::Kind(k) => (model.layers.iter().position(|l| l.kind == k))
                        .ok_or_else(|| CompareError::NoLayerOfKind {
                            profile: pi,
                            sample: si,
                            kind: crate::model::layerlist::layer_kind_name(k).to_string(),
                        })?,
                };
            let shape = LayerShape {
                ep: s.ep,
                ..LayerShape::plain(s.mbs, seq, s.tp, precision)
            };
            let predicted = Analytic.layer_time(&gpu, model, index, shape);
            let tokens = s.mbs as f64 * model.tokens_per_sample(seq) as f64;
            let saved = super::memory::layer_saved_bytes(
                &model.layers[index],
                tokens,
                seq,
                s.tp,
                false,
                false,
                precision,
                // The profiler's head runs PyTorch's loss eagerly.
                false,
                false,
            );
            out.push(SampleCheck {
                gpu: gpu.name.clone(),
                seq_len: seq,
                precision,
                layer: match s.layer {
                    LayerKey::Index(i) => i.to_string(),
                    LayerKey::Kind(k) => crate::model::layerlist::layer_kind_name(k).to_string(),
                },
                layer_index: index,
                tp: s.tp,
                ep: s.ep,
                mbs: s.mbs,
                measured_forward: s.forward,
                model_forward: predicted.forward,
                measured_backward: s.backward,
                model_backward: predicted.backward,
                measured_activations: s.activation_memory,
                model_activations: Bytes(saved),
                measured_peak: s.peak_memory,
            });
        }
    }
    if !any {
        let mut found: Vec<&str> = db.profiles.iter().map(|p| p.model.as_str()).collect();
        found.sort_unstable();
        found.dedup();
        return Err(CompareError::NoProfileOfModel {
            model: model.name.clone(),
            found: if found.is_empty() {
                "no profiles".into()
            } else {
                found.join(", ")
            },
        });
    }
    Ok(out)
}
