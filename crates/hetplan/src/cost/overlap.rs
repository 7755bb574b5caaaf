//! Compute and communication running at the same time: the interference model of Mist
//! (Zhu et al., EuroSys '25, §5.2.2 and Algorithm 1) for two streams.
//!
//! Each stream, while the other runs, progresses at 1/factor of its solo speed. Scaling both
//! by their factors, the overlapped wall time is the shorter scaled duration; what is left of the
//! longer stream then runs alone at full speed.

use super::constants as k;

/// Wall time of `compute` seconds of kernels overlapped with `comm` seconds of NCCL transfers
/// (each measured alone).
pub fn co_run(compute: f64, comm: f64) -> f64 {
    co_run_with(
        compute,
        comm,
        k::COMPUTE_SLOWDOWN_UNDER_NCCL,
        k::NCCL_SLOWDOWN_UNDER_COMPUTE,
    )
}

/// [`co_run`] with explicit slowdown factors (≥ 1): Mist's `Update` for one pair of streams.
pub fn co_run_with(compute: f64, comm: f64, f_compute: f64, f_comm: f64) -> f64 {
    if compute <= 0.0 || comm <= 0.0 {
        return compute.max(0.0) + comm.max(0.0);
    }
    let (c, g) = (compute * f_compute, comm * f_comm);
    let both = c.min(g);
    both + (c - both) / f_compute + (g - both) / f_comm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_interference_is_a_max() {
        assert_eq!(co_run_with(10.0, 3.0, 1.0, 1.0), 10.0);
        assert_eq!(co_run_with(2.0, 3.0, 1.0, 1.0), 3.0);
    }

    #[test]
    fn slowdowns_worked_by_hand() {
        // compute 10 s, comm 3 s, factors 1.1 and 1.3: both run for 3.9 s, in which compute
        // does 3.9/1.1 = 3.545 s of its work; the remaining 6.455 s run alone: 10.355 s.
        let t = co_run_with(10.0, 3.0, 1.1, 1.3);
        assert!((t - (3.9 + (11.0 - 3.9) / 1.1)).abs() < 1e-12);
        assert!(t > 10.0 && t < 13.0);
        // Nothing to overlap: the sum.
        assert_eq!(co_run_with(0.0, 3.0, 1.1, 1.3), 3.0);
    }
}
