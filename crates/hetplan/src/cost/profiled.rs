//! Layer times from a profile database, the analytic model where it has no point.

use super::compute::{Analytic, ComputeTimes, LayerShape, LayerTime, TimeSource};
use crate::gpu::GpuSpec;
use crate::model::Model;
use crate::profile::{Interpolation, ProfileIndex, Provenance};
use crate::units::Seconds;

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
        match self.index.layer_time(
            &gpu.name,
            &model.name,
            layer,
            l.kind,
            shape.tp,
            shape.mbs,
            self.interpolation,
        ) {
            Some(p) => {
                // Measured at whole sequences: with context parallelism each GPU holds 1/cp of
                // them, scaled by the analytic model's ratio.
                let (forward, backward) = if shape.cp > 1 {
                    let whole =
                        Analytic.layer_time(gpu, model, layer, LayerShape { cp: 1, ..shape });
                    (
                        p.forward * ratio(analytic.forward, whole.forward),
                        p.backward * ratio(analytic.backward, whole.backward),
                    )
                } else {
                    (p.forward, p.backward)
                };
                measured(analytic, forward, backward, shape, p.how)
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
        attention_forward: analytic.attention_forward * fwd_scale,
        attention_backward: analytic.attention_backward * bwd_scale,
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
