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
            Some(p) => LayerTime {
                forward: p.forward,
                backward: p.backward,
                // Keep the analytic split of what selective recomputation repeats, scaled.
                selective_forward: if analytic.forward.get() > 0.0 {
                    analytic.selective_forward * (p.forward / analytic.forward)
                } else {
                    Seconds::ZERO
                },
                forward_flop: analytic.forward_flop,
                backward_flop: analytic.backward_flop,
                includes_tp_comm: shape.tp > 1,
                source: match p.how {
                    Provenance::Measured => TimeSource::Measured,
                    Provenance::Interpolated { .. } => TimeSource::Interpolated,
                    Provenance::Extrapolated { .. } => TimeSource::Extrapolated,
                },
            },
            None => analytic,
        }
    }
}
