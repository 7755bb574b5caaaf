//! Mist's interference model (§5.2.2, Algorithm 1 "Batched Interference Estimation") for the
//! four streams of its overlap schedule: computation (C), GPU↔GPU collectives (G2G, NCCL),
//! host→device copies (C2G, H2D) and device→host copies (G2C, D2H).
//!
//! Every combination of two to four co-running streams has one slowdown factor per participant.
//! Algorithm 1 resolves the four-stream overlap first, then every three-stream combination, then
//! every pair: `Update` scales the remaining times of a combination's streams by their factors,
//! lets them run together for the shortest scaled time, and returns what is left of each at
//! solo speed. What is left after the pairs runs alone. For two streams this is exactly
//! `cost::overlap::co_run_with`, the two-stream form hetplan's estimate uses (tested), and the
//! compute/NCCL pair takes its default factors from `cost::constants` — one set of numbers.
//!
//! The factors are data: [`InterferenceParams::default`] documents the defaults and [`fit`]
//! refits them from measured co-run points (Mist fits them from benchmarks of sampled shapes).

use crate::cost::constants as k;

/// Stream indices, in Algorithm 1's order `X = [C, G2G, C2G, G2C]`.
pub const C: usize = 0;
pub const G2G: usize = 1;
pub const H2D: usize = 2;
pub const D2H: usize = 3;

/// Default slowdown of compute while a host copy runs beside it: copies use the copy engines,
/// not SMs, and only take HBM bandwidth. An estimate (Mist §3.2 reports compute slowing
/// further once CPU–GPU copies join an all-reduce, without a number per pair); refit with
/// [`fit`].
pub const COMPUTE_UNDER_COPY: f64 = 1.05;
/// Default slowdown of a host copy while compute runs: the copy engine is independent; only
/// HBM contention remains (an estimate, refit with [`fit`]).
pub const COPY_UNDER_COMPUTE: f64 = 1.02;
/// Default slowdown of NCCL and of a host copy running together: on PCIe machines (Mist's L4
/// platform, Table 3: GPUs talk over the PCIe switch) both cross the same root complex. An
/// estimate, refit with [`fit`].
pub const NCCL_COPY_CONTENTION: f64 = 1.20;
/// Default slowdown of the two copy directions together: PCIe is full duplex; DMA scheduling
/// costs a few percent (an estimate, refit with [`fit`]).
pub const DUPLEX_COPY: f64 = 1.05;

/// Slowdown factors of every combination: `factors[mask][j]` is stream `j`'s factor when the
/// streams of `mask` (bit j = stream j) run together. Entries of streams outside a mask and of
/// masks with fewer than two streams are unused (1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InterferenceParams {
    pub factors: [[f64; 4]; 16],
}

/// The pairwise default of stream `j` slowed by stream `o`.
fn pair_default(j: usize, o: usize) -> f64 {
    match (j, o) {
        (C, G2G) => k::COMPUTE_SLOWDOWN_UNDER_NCCL,
        (G2G, C) => k::NCCL_SLOWDOWN_UNDER_COMPUTE,
        (C, _) => COMPUTE_UNDER_COPY,
        (_, C) => COPY_UNDER_COMPUTE,
        (G2G, _) | (_, G2G) => NCCL_COPY_CONTENTION,
        _ => DUPLEX_COPY,
    }
}

impl Default for InterferenceParams {
    /// Pairs from the documented constants; a stream in a combination of three or four is
    /// slowed by the product of its pairwise factors *(silent: the paper fits every combination
    /// from data and gives no default)*.
    fn default() -> Self {
        let mut factors = [[1.0; 4]; 16];
        for (mask, f) in factors.iter_mut().enumerate() {
            if mask.count_ones() < 2 {
                continue;
            }
            for (j, fj) in f.iter_mut().enumerate() {
                if mask & (1 << j) == 0 {
                    continue;
                }
                *fj = (0..4)
                    .filter(|&o| o != j && mask & (1 << o) != 0)
                    .map(|o| pair_default(j, o))
                    .product();
            }
        }
        InterferenceParams { factors }
    }
}

/// The combinations of `n` of the four streams, in a fixed order (ascending masks).
fn masks_of(n: u32) -> impl Iterator<Item = usize> {
    (0usize..16).filter(move |m| m.count_ones() == n)
}

/// Algorithm 1's `Update` on one configuration: `x` remaining solo times, `t` elapsed.
fn update(x: &mut [f64; 4], t: &mut f64, mask: usize, f: &[f64; 4]) {
    // The combination applies when every stream of the mask still has work.
    if (0..4).any(|j| mask & (1 << j) != 0 && x[j] <= 0.0) {
        return;
    }
    let overlap = (0..4)
        .filter(|j| mask & (1 << j) != 0)
        .map(|j| x[j] * f[j])
        .fold(f64::INFINITY, f64::min);
    for j in 0..4 {
        if mask & (1 << j) != 0 {
            x[j] = ((x[j] * f[j] - overlap) / f[j]).max(0.0);
        }
    }
    *t += overlap;
}

/// Algorithm 1's combinations in its order: the four streams, then the three-stream masks,
/// then the pairs, each group by ascending mask (what `masks_of(4)`, `masks_of(3)`,
/// `masks_of(2)` give).
const ORDER: [usize; 11] = [
    0b1111, 0b0111, 0b1011, 0b1101, 0b1110, 0b0011, 0b0101, 0b0110, 0b1001, 0b1010, 0b1100,
];

/// `PredINTF(C, G2G, C2G, G2C)`: the wall time of the four streams' solo times `solo`
/// (seconds) running together.
///
/// The same arithmetic as applying [`update`] to every combination in turn (tested against
/// [`pred_intf_reference`]), with the streams that still have work kept in a bit set: a
/// combination with an idle stream is a no-op in `update`, so it is skipped without a look,
/// and with fewer than two busy streams nothing is left to overlap. This is the search's
/// innermost call (four per costed configuration).
#[inline]
pub fn pred_intf(solo: [f64; 4], params: &InterferenceParams) -> f64 {
    let mut x = solo.map(|v| v.max(0.0));
    let mut t = 0.0;
    let mut busy = 0usize;
    for (j, v) in x.iter().enumerate() {
        if *v > 0.0 {
            busy |= 1 << j;
        }
    }
    if busy.count_ones() >= 2 {
        for &mask in &ORDER {
            if mask & !busy != 0 {
                continue;
            }
            let f = &params.factors[mask];
            let mut overlap = f64::INFINITY;
            for j in 0..4 {
                if mask & (1 << j) != 0 {
                    overlap = overlap.min(x[j] * f[j]);
                }
            }
            for j in 0..4 {
                if mask & (1 << j) != 0 {
                    x[j] = ((x[j] * f[j] - overlap) / f[j]).max(0.0);
                    if x[j] <= 0.0 {
                        busy &= !(1 << j);
                    }
                }
            }
            t += overlap;
            if busy.count_ones() < 2 {
                break;
            }
        }
    }
    t + x.iter().sum::<f64>()
}

/// Algorithm 1 as written: `Update` on every four-, three- and two-stream combination, then
/// the remainder alone. [`pred_intf`] is this, faster; kept to test that they agree bit for bit.
pub fn pred_intf_reference(solo: [f64; 4], params: &InterferenceParams) -> f64 {
    let mut x = solo.map(|v| v.max(0.0));
    let mut t = 0.0;
    for n in (2..=4).rev() {
        for mask in masks_of(n) {
            update(&mut x, &mut t, mask, &params.factors[mask]);
        }
    }
    t + x.iter().sum::<f64>()
}

/// One measured co-run: the streams' solo times and the measured wall time together.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoRun {
    pub solo: [f64; 4],
    pub measured: f64,
}

/// Factors are searched in `[1, MAX_FACTOR]`: a stream at a third of its solo speed is
/// already beyond any slowdown Mist reports (§3.2: 7.7% for a GEMM beside an all-reduce).
const MAX_FACTOR: f64 = 3.0;

/// Refits the factors of every combination the points exercise, starting from `start`, by
/// coordinate descent on the squared error of [`pred_intf`] (golden-section search per factor,
/// a fixed number of rounds: deterministic). Mist fits its factors "data-driven" from sampled
/// co-running kernels (§5.2.2); this is that fit for its mathematical model. Returns the fitted
/// parameters and the root-mean-square error in seconds.
pub fn fit(points: &[CoRun], start: &InterferenceParams) -> (InterferenceParams, f64) {
    let sse = |p: &InterferenceParams| -> f64 {
        points
            .iter()
            .map(|c| (pred_intf(c.solo, p) - c.measured).powi(2))
            .sum()
    };
    // The (mask, stream) factors some point can reach: every stream of the mask busy at once.
    let mut free: Vec<(usize, usize)> = Vec::new();
    for mask in (0usize..16).filter(|m| m.count_ones() >= 2) {
        if points
            .iter()
            .any(|c| (0..4).all(|j| mask & (1 << j) == 0 || c.solo[j] > 0.0))
        {
            for j in (0..4).filter(|j| mask & (1 << j) != 0) {
                free.push((mask, j));
            }
        }
    }
    let mut p = *start;
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    for _round in 0..40 {
        for &(mask, j) in &free {
            let (mut lo, mut hi) = (1.0, MAX_FACTOR);
            let at = |v: f64, p: &InterferenceParams| {
                let mut q = *p;
                q.factors[mask][j] = v;
                sse(&q)
            };
            let mut a = hi - phi * (hi - lo);
            let mut b = lo + phi * (hi - lo);
            let (mut fa, mut fb) = (at(a, &p), at(b, &p));
            for _ in 0..60 {
                if fa <= fb {
                    hi = b;
                    b = a;
                    fb = fa;
                    a = hi - phi * (hi - lo);
                    fa = at(a, &p);
                } else {
                    lo = a;
                    a = b;
                    fa = fb;
                    b = lo + phi * (hi - lo);
                    fb = at(b, &p);
                }
            }
            let v = (lo + hi) / 2.0;
            if at(v, &p) <= sse(&p) {
                p.factors[mask][j] = v;
            }
        }
    }
    let rms = if points.is_empty() {
        0.0
    } else {
        (sse(&p) / points.len() as f64).sqrt()
    };
    (p, rms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::overlap;

    #[test]
    fn two_streams_are_the_estimates_co_run() {
        let p = InterferenceParams::default();
        for (c, g) in [(10.0, 3.0), (2.0, 3.0), (1.0, 1.0), (0.0, 2.0)] {
            let t = pred_intf([c, g, 0.0, 0.0], &p);
            assert!((t - overlap::co_run(c, g)).abs() < 1e-12, "{c} {g}: {t}");
        }
    }

    #[test]
    fn alone_is_the_sum_and_together_is_between_max_and_sum() {
        let p = InterferenceParams::default();
        assert_eq!(pred_intf([1.0, 0.0, 0.0, 0.0], &p), 1.0);
        let solo = [1.0, 0.5, 0.4, 0.3];
        let t = pred_intf(solo, &p);
        assert!(t > 1.0 && t < 2.2, "{t}");
        // No interference: the longest stream.
        let none = InterferenceParams {
            factors: [[1.0; 4]; 16],
        };
        assert!((pred_intf(solo, &none) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn fast_path_is_algorithm_1_bit_for_bit() {
        let mut fitted = InterferenceParams::default();
        fitted.factors[0b1111] = [1.3, 1.1, 1.7, 1.02];
        fitted.factors[0b0110] = [1.0, 2.5, 1.01, 1.0];
        let vals = [0.0, -1.0, 1e-9, 0.3, 0.5, 1.0, 2.0, 7.25, 1e3];
        let mut n = 0;
        for p in [InterferenceParams::default(), fitted] {
            for &a in &vals {
                for &b in &vals {
                    for &c in &vals {
                        for &d in &vals {
                            let s = [a, b, c, d];
                            let (x, y) = (pred_intf(s, &p), pred_intf_reference(s, &p));
                            assert_eq!(x.to_bits(), y.to_bits(), "{s:?}");
                            n += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(n, 2 * 9usize.pow(4));
    }

    #[test]
    fn fit_recovers_pair_factors() {
        let mut truth = InterferenceParams::default();
        truth.factors[0b0011] = [1.25, 1.4, 1.0, 1.0];
        truth.factors[0b1001] = [1.1, 1.0, 1.0, 1.3];
        let mut pts = Vec::new();
        for (c, o) in [(1.0, 0.3), (0.5, 2.0), (2.0, 1.0), (0.2, 0.9)] {
            for solo in [[c, o, 0.0, 0.0], [c, 0.0, 0.0, o]] {
                pts.push(CoRun {
                    solo,
                    measured: pred_intf(solo, &truth),
                });
            }
        }
        let (fitted, rms) = fit(&pts, &InterferenceParams::default());
        assert!(rms < 1e-6, "{rms}");
        for (m, j) in [(0b0011, 0), (0b0011, 1), (0b1001, 0), (0b1001, 3)] {
            assert!(
                (fitted.factors[m][j] - truth.factors[m][j]).abs() < 1e-3,
                "{m:b} {j}: {} vs {}",
                fitted.factors[m][j],
                truth.factors[m][j]
            );
        }
    }
}
