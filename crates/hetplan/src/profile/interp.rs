//! Curves of measured times over micro-batch size, and the two ways of reading them between and
//! beyond the measured points (see [`Interpolation`]).
//!
//! * **Monotone cubic** (Fritsch & Carlson 1980, "Monotone piecewise cubic interpolation", SIAM
//!   J. Numer. Anal. 17(2); the PCHIP slopes of Moler's *Numerical Computing with MATLAB* §3.4 and
//!   SciPy's `PchipInterpolator`). Poplar (seed 004, "Optimal Batch Size Searching" and its
//!   appendix) fits a cubic spline through throughput measured at a few batch sizes; we fit the
//!   *time* itself with the monotone variant, which never overshoots: where the measured times
//!   grow with the batch, the interpolated ones grow too, so a larger micro-batch never looks
//!   faster than a smaller one because of spline ringing.
//! * **Metis powers of two** (seed 000, §4.3): an unprofiled size is the sum of profiled ones,
//!   `t(7) = t(4) + t(2) + t(1)`.
//!
//! Outside the measured range (both modes, see [`Curve::eval`]): above the largest point, linear
//! extrapolation from the two largest points, never below the largest point's time; below the
//! smallest point, proportional scaling from it, never below the straight line through the two
//! smallest points and never above the smallest point's time. A curve with one point scales
//! proportionally. The optimizer step does not depend on the micro-batch size: inside the range
//! it is interpolated like the rest (the measured values differ only by noise), outside it is
//! the nearest measured value.

use super::{Interpolation, ProfiledTime, Provenance};
use crate::units::Seconds;

/// At most this many pieces are listed in a Metis composition's provenance (`from`); the
/// times count every piece.
pub(crate) const MAX_FROM: usize = 64;

/// One measured point of one layer at one TP degree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    pub mbs: u64,
    pub forward: f64,
    pub backward: f64,
    pub optimizer: Option<f64>,
}

/// One quantity over micro-batch size, with its monotone cubic slopes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Series {
    x: Vec<f64>,
    y: Vec<f64>,
    d: Vec<f64>,
}

fn sign(v: f64) -> i8 {
    if v > 0.0 {
        1
    } else if v < 0.0 {
        -1
    } else {
        0
    }
}

/// Three-point end slope, shape-preserving (Moler §3.4; SciPy `_edge_case`).
fn end_slope(h0: f64, h1: f64, m0: f64, m1: f64) -> f64 {
    let d = ((2.0 * h0 + h1) * m0 - h0 * m1) / (h0 + h1);
    if sign(d) != sign(m0) {
        0.0
    } else if sign(m0) != sign(m1) && d.abs() > 3.0 * m0.abs() {
        3.0 * m0
    } else {
        d
    }
}

impl Series {
    /// `x` strictly increasing, same length as `y`, at least one point.
    pub fn new(x: Vec<f64>, y: Vec<f64>) -> Series {
        let d = pchip_slopes(&x, &y);
        Series { x, y, d }
    }

    /// The value at `x`, which must lie in `[x[0], x[n-1]]`.
    pub fn within(&self, x: f64) -> f64 {
        let n = self.x.len();
        if n == 1 {
            return self.y[0];
        }
        // Segment k with x[k] <= x <= x[k+1].
        let k = match self.x.partition_point(|&xi| xi <= x) {
            0 => 0,
            p => (p - 1).min(n - 2),
        };
        let h = self.x[k + 1] - self.x[k];
        let t = (x - self.x[k]) / h;
        let t2 = t * t;
        let t3 = t2 * t;
        let h00 = 2.0 * t3 - 3.0 * t2 + 1.0;
        let h10 = t3 - 2.0 * t2 + t;
        let h01 = -2.0 * t3 + 3.0 * t2;
        let h11 = t3 - t2;
        h00 * self.y[k] + h10 * h * self.d[k] + h01 * self.y[k + 1] + h11 * h * self.d[k + 1]
    }

    /// A time at any `x > 0`: interpolated inside, extrapolated outside (rules in the module doc).
    pub fn time(&self, x: f64) -> f64 {
        let n = self.x.len();
        let (x0, y0) = (self.x[0], self.y[0]);
        if n == 1 {
            return y0 * x / x0;
        }
        if x < x0 {
            let proportional = y0 * x / x0;
            let line = y0 + (self.y[1] - y0) / (self.x[1] - x0) * (x - x0);
            return proportional.max(line).min(y0).max(0.0);
        }
        let (xl, yl) = (self.x[n - 1], self.y[n - 1]);
        if x > xl {
            let (xp, yp) = (self.x[n - 2], self.y[n - 2]);
            let line = yl + (yl - yp) / (xl - xp) * (x - xl);
            return line.max(yl);
        }
        self.within(x)
    }

    /// A quantity that does not depend on `x` (the optimizer step): interpolated inside, the
    /// nearest measured value outside.
    pub fn level(&self, x: f64) -> f64 {
        let n = self.x.len();
        if x <= self.x[0] {
            self.y[0]
        } else if x >= self.x[n - 1] {
            self.y[n - 1]
        } else {
            self.within(x)
        }
    }
}

/// Fritsch–Carlson slopes: weighted harmonic mean of the neighbouring secants where they agree in
/// sign, zero at local extrema, shape-preserving three-point formula at the ends.
fn pchip_slopes(x: &[f64], y: &[f64]) -> Vec<f64> {
    let n = x.len();
    if n < 2 {
        return vec![0.0; n];
    }
    let h: Vec<f64> = x.windows(2).map(|w| w[1] - w[0]).collect();
    let m: Vec<f64> = (0..n - 1).map(|k| (y[k + 1] - y[k]) / h[k]).collect();
    if n == 2 {
        return vec![m[0], m[0]];
    }
    let mut d = vec![0.0; n];
    for k in 1..n - 1 {
        if sign(m[k - 1]) * sign(m[k]) > 0 {
            let w1 = 2.0 * h[k] + h[k - 1];
            let w2 = h[k] + 2.0 * h[k - 1];
            d[k] = (w1 + w2) / (w1 / m[k - 1] + w2 / m[k]);
        }
    }
    d[0] = end_slope(h[0], h[1], m[0], m[1]);
    d[n - 1] = end_slope(h[n - 2], h[n - 3], m[n - 2], m[n - 3]);
    d
}

/// Forward, backward and optimizer times of one layer at one TP degree over micro-batch size.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Curve {
    mbs: Vec<u64>,
    forward: Series,
    backward: Series,
    /// Over the points that have an optimizer time (may be fewer).
    optimizer: Option<Series>,
    /// The raw points, for the power-of-two composition.
    points: Vec<Point>,
}

impl Curve {
    /// Sorts by micro-batch size; of two points at the same size the first one given is kept.
    /// `None` without points or with a zero micro-batch size.
    pub fn new(mut points: Vec<Point>) -> Option<Curve> {
        points.sort_by_key(|p| p.mbs); // stable: the first of equal sizes stays first
        points.dedup_by_key(|p| p.mbs);
        if points.is_empty() || points[0].mbs == 0 {
            return None;
        }
        let x: Vec<f64> = points.iter().map(|p| p.mbs as f64).collect();
        let forward = Series::new(x.clone(), points.iter().map(|p| p.forward).collect());
        let backward = Series::new(x, points.iter().map(|p| p.backward).collect());
        let (ox, oy): (Vec<f64>, Vec<f64>) = points
            .iter()
            .filter_map(|p| p.optimizer.map(|o| (p.mbs as f64, o)))
            .unzip();
        let optimizer = (!ox.is_empty()).then(|| Series::new(ox, oy));
        Some(Curve {
            mbs: points.iter().map(|p| p.mbs).collect(),
            forward,
            backward,
            optimizer,
            points,
        })
    }

    /// The times at `mbs`. A micro-batch of 0 runs nothing: zero times, `Measured`.
    pub fn eval(&self, mbs: u64, how: Interpolation) -> ProfiledTime {
        if mbs == 0 {
            return ProfiledTime {
                forward: Seconds::ZERO,
                backward: Seconds::ZERO,
                optimizer: None,
                how: Provenance::Measured,
            };
        }
        if let Ok(i) = self.mbs.binary_search(&mbs) {
            let p = self.points[i];
            return ProfiledTime {
                forward: Seconds(p.forward),
                backward: Seconds(p.backward),
                optimizer: self.optimizer_at(mbs),
                how: Provenance::Measured,
            };
        }
        match how {
            Interpolation::MonotoneCubic => self.cubic(mbs),
            Interpolation::MetisPowersOfTwo => self.compose(mbs),
        }
    }

    fn optimizer_at(&self, mbs: u64) -> Option<Seconds> {
        self.optimizer
            .as_ref()
            .map(|s| Seconds(s.level(mbs as f64)))
    }

    fn cubic(&self, mbs: u64) -> ProfiledTime {
        let x = mbs as f64;
        let n = self.mbs.len();
        let how = if n == 1 {
            Provenance::Extrapolated {
                from: vec![self.mbs[0]],
            }
        } else if mbs < self.mbs[0] {
            Provenance::Extrapolated {
                from: vec![self.mbs[0], self.mbs[1]],
            }
        } else if mbs > self.mbs[n - 1] {
            Provenance::Extrapolated {
                from: vec![self.mbs[n - 2], self.mbs[n - 1]],
            }
        } else {
            let k = self.mbs.partition_point(|&m| m < mbs);
            Provenance::Interpolated {
                from: vec![self.mbs[k - 1], self.mbs[k]],
            }
        };
        ProfiledTime {
            forward: Seconds(self.forward.time(x)),
            backward: Seconds(self.backward.time(x)),
            optimizer: self.optimizer_at(mbs),
            how,
        }
    }

    /// Metis §4.3: greedy sum of measured sizes, largest first (the binary decomposition when
    /// every power of two up to the largest is measured). A size beyond the largest repeats it;
    /// a remainder smaller than the smallest measured size scales it proportionally.
    ///
    /// O(number of points) whatever `mbs`: each size is taken `q = remaining / size` times at
    /// once. `from` lists the pieces, each size repeated as often as it is taken, up to
    /// [`MAX_FROM`] entries in all.
    fn compose(&self, mbs: u64) -> ProfiledTime {
        let mut remaining = mbs;
        let (mut fwd, mut bwd) = (0.0, 0.0);
        let mut from = Vec::new();
        for p in self.points.iter().rev() {
            let q = remaining / p.mbs;
            if q == 0 {
                continue;
            }
            remaining -= q * p.mbs;
            if q <= MAX_FROM as u64 {
                // Summed one piece at a time: the same floating-point result as before.
                for _ in 0..q {
                    fwd += p.forward;
                    bwd += p.backward;
                }
            } else {
                fwd += q as f64 * p.forward;
                bwd += q as f64 * p.backward;
            }
            let room = MAX_FROM.saturating_sub(from.len());
            from.extend(std::iter::repeat_n(p.mbs, (q as usize).min(room)));
        }
        let smallest = self.points[0];
        if remaining > 0 {
            let r = remaining as f64 / smallest.mbs as f64;
            fwd += smallest.forward * r;
            bwd += smallest.backward * r;
            if from.len() < MAX_FROM {
                from.push(smallest.mbs);
            }
        }
        let beyond = mbs > *self.mbs.last().expect("curve has points");
        let how = if remaining > 0 || beyond {
            Provenance::Extrapolated { from: from.clone() }
        } else {
            Provenance::Interpolated { from: from.clone() }
        };
        // The step is one per iteration whatever the batch: the largest piece's value.
        let optimizer = from.first().and_then(|&m| self.optimizer_at(m));
        ProfiledTime {
            forward: Seconds(fwd),
            backward: Seconds(bwd),
            optimizer,
            how,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(mbs: u64, f: f64) -> Point {
        Point {
            mbs,
            forward: f,
            backward: 2.0 * f,
            optimizer: Some(0.5),
        }
    }

    #[test]
    fn exact_at_measured_points() {
        let c = Curve::new(vec![pt(4, 3.0), pt(1, 1.0), pt(2, 1.5), pt(8, 7.0)]).unwrap();
        for (m, f) in [(1, 1.0), (2, 1.5), (4, 3.0), (8, 7.0)] {
            for how in [
                Interpolation::MonotoneCubic,
                Interpolation::MetisPowersOfTwo,
            ] {
                let t = c.eval(m, how);
                assert_eq!(t.forward, Seconds(f));
                assert_eq!(t.backward, Seconds(2.0 * f));
                assert_eq!(t.how, Provenance::Measured);
            }
        }
        // The spline itself passes through the points.
        let s = Series::new(vec![1.0, 2.0, 4.0, 8.0], vec![1.0, 1.5, 3.0, 7.0]);
        for (x, y) in [(1.0, 1.0), (2.0, 1.5), (4.0, 3.0), (8.0, 7.0)] {
            assert!((s.within(x) - y).abs() < 1e-12);
        }
    }

    #[test]
    fn monotone_data_is_never_overshot() {
        // A step-like curve on which an ordinary cubic spline rings.
        let xs = vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
        let ys = vec![1.0, 1.01, 1.02, 4.0, 4.01, 8.0];
        let s = Series::new(xs.clone(), ys.clone());
        let mut prev = s.within(1.0);
        let mut x = 1.0;
        while x <= 32.0 {
            let v = s.within(x);
            assert!(v + 1e-12 >= prev, "not monotone at {x}: {v} < {prev}");
            let k = xs.partition_point(|&xi| xi <= x).clamp(1, xs.len() - 1) - 1;
            assert!(
                v >= ys[k] - 1e-12 && v <= ys[k + 1] + 1e-12,
                "overshoot at {x}: {v}"
            );
            prev = v;
            x += 0.03125;
        }
        // A local maximum in the data is not exceeded either.
        let s = Series::new(vec![1.0, 2.0, 3.0], vec![0.0, 1.0, 0.0]);
        for i in 0..=200 {
            let v = s.within(1.0 + i as f64 / 100.0);
            assert!((-1e-12..=1.0 + 1e-12).contains(&v));
        }
    }

    #[test]
    fn interpolated_between_and_extrapolated_outside() {
        let c = Curve::new(vec![pt(2, 2.0), pt(4, 3.0), pt(8, 5.0)]).unwrap();
        let t = c.eval(6, Interpolation::MonotoneCubic);
        assert_eq!(t.how, Provenance::Interpolated { from: vec![4, 8] });
        assert!(t.forward.get() > 3.0 && t.forward.get() < 5.0);
        // Above: line through (4, 3) and (8, 5).
        let t = c.eval(16, Interpolation::MonotoneCubic);
        assert_eq!(t.how, Provenance::Extrapolated { from: vec![4, 8] });
        assert!((t.forward.get() - 9.0).abs() < 1e-12);
        assert_eq!(t.optimizer, Some(Seconds(0.5)));
        // Below: proportional would be 1.0, the line through (2, 2) and (4, 3) gives 1.5.
        let t = c.eval(1, Interpolation::MonotoneCubic);
        assert_eq!(t.how, Provenance::Extrapolated { from: vec![2, 4] });
        assert!((t.forward.get() - 1.5).abs() < 1e-12);
        // A single point scales proportionally.
        let c = Curve::new(vec![pt(4, 2.0)]).unwrap();
        let t = c.eval(6, Interpolation::MonotoneCubic);
        assert!((t.forward.get() - 3.0).abs() < 1e-12);
        assert_eq!(t.how, Provenance::Extrapolated { from: vec![4] });
    }

    #[test]
    fn metis_composes_powers_of_two() {
        let c = Curve::new(vec![pt(1, 1.0), pt(2, 1.8), pt(4, 3.1), pt(8, 6.0)]).unwrap();
        let t = c.eval(6, Interpolation::MetisPowersOfTwo);
        assert_eq!(t.forward, Seconds(3.1 + 1.8));
        assert_eq!(t.backward, Seconds(2.0 * 3.1 + 2.0 * 1.8));
        assert_eq!(t.how, Provenance::Interpolated { from: vec![4, 2] });
        let t = c.eval(7, Interpolation::MetisPowersOfTwo);
        assert_eq!(t.forward, Seconds(3.1 + 1.8 + 1.0));
        // Beyond the largest size: repeats it.
        let t = c.eval(20, Interpolation::MetisPowersOfTwo);
        assert_eq!(t.forward, Seconds(6.0 + 6.0 + 3.1));
        assert_eq!(
            t.how,
            Provenance::Extrapolated {
                from: vec![8, 8, 4]
            }
        );
    }

    /// Regression: the composition took one loop step (and one `from` entry) per piece, so a
    /// micro-batch of 10⁷ built a 10⁷-entry list.
    #[test]
    fn metis_composition_is_independent_of_the_size() {
        let c = Curve::new(vec![pt(1, 1.0), pt(2, 1.8), pt(4, 3.1), pt(8, 6.0)]).unwrap();
        let t = c.eval(10_000_007, Interpolation::MetisPowersOfTwo);
        // 1 250 000 pieces of 8, then 4 + 2 + 1.
        assert!((t.forward.get() - (1_250_000.0 * 6.0 + 3.1 + 1.8 + 1.0)).abs() < 1e-6);
        let Provenance::Extrapolated { from } = &t.how else {
            panic!("{:?}", t.how)
        };
        assert_eq!(from.len(), MAX_FROM);
        assert!(from.iter().all(|&m| m == 8));
        assert_eq!(t.optimizer, Some(Seconds(0.5)));
        let t = c.eval(u64::MAX, Interpolation::MetisPowersOfTwo);
        assert!(t.forward.get().is_finite() && t.forward.get() > 0.0);
        // Below the smallest size: proportional.
        let c = Curve::new(vec![pt(4, 2.0)]).unwrap();
        let t = c.eval(2, Interpolation::MonotoneCubic);
        assert_eq!(t.forward, Seconds(1.0));
        let t = c.eval(3, Interpolation::MetisPowersOfTwo);
        assert_eq!(t.forward, Seconds(1.5));
        assert_eq!(t.how, Provenance::Extrapolated { from: vec![4] });
    }
}
