//! Newtypes for physical quantities, so that no bare `f64` with an implied unit crosses a module
//! boundary, and the parsers for quantities written with their unit (`"80 GiB"`, `"600 GB/s"`,
//! `"100 Gbps"`, `"312 TFLOP/s"`, `"10 us"`).
//!
//! Conventions: bandwidths are **per direction** (a full-duplex 100 Gbps NIC moves 100 Gbps each
//! way; NVIDIA's "600 GB/s" for A100 NVLink is the sum of both directions, 300 GB/s each way).
//! Decimal prefixes (kB, MB, GB, TB, Gbps) are powers of 1000, binary ones (KiB, MiB, GiB, TiB)
//! powers of 1024.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

macro_rules! quantity {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub f64);

        impl $name {
            pub const ZERO: $name = $name(0.0);
            /// The raw value in the base unit (bytes, seconds, FLOP, ...).
            pub fn get(self) -> f64 {
                self.0
            }
            pub fn max(self, other: $name) -> $name {
                $name(self.0.max(other.0))
            }
            pub fn min(self, other: $name) -> $name {
                $name(self.0.min(other.0))
            }
            /// Exactly zero (for leaving a field out of serialized output).
            pub fn is_zero(&self) -> bool {
                self.0 == 0.0
            }
            pub fn is_finite(self) -> bool {
                self.0.is_finite()
            }
        }
        impl Add for $name {
            type Output = $name;
            fn add(self, o: $name) -> $name {
                $name(self.0 + o.0)
            }
        }
        impl AddAssign for $name {
            fn add_assign(&mut self, o: $name) {
                self.0 += o.0;
            }
        }
        impl Sub for $name {
            type Output = $name;
            fn sub(self, o: $name) -> $name {
                $name(self.0 - o.0)
            }
        }
        impl Mul<f64> for $name {
            type Output = $name;
            fn mul(self, k: f64) -> $name {
                $name(self.0 * k)
            }
        }
        impl Div<f64> for $name {
            type Output = $name;
            fn div(self, k: f64) -> $name {
                $name(self.0 / k)
            }
        }
        /// The ratio of two quantities of the same unit is a plain number.
        impl Div for $name {
            type Output = f64;
            fn div(self, o: $name) -> f64 {
                self.0 / o.0
            }
        }
        impl std::iter::Sum for $name {
            fn sum<I: Iterator<Item = $name>>(it: I) -> $name {
                $name(it.map(|x| x.0).sum())
            }
        }
    };
}

quantity!(
    /// A number of bytes (fractional values arise from offload ratios and averages).
    Bytes
);
quantity!(
    /// A duration in seconds.
    Seconds
);
quantity!(
    /// A number of floating-point operations.
    Flop
);
quantity!(
    /// A rate of floating-point operations per second.
    FlopPerSec
);
quantity!(
    /// A bandwidth in bytes per second, per direction.
    BytesPerSec
);

impl Bytes {
    pub const fn new(b: f64) -> Bytes {
        Bytes(b)
    }
    pub fn gib(x: f64) -> Bytes {
        Bytes(x * GIB)
    }
    /// `x` mebibytes (2²⁰ bytes): the unit nvidia-smi and CUDA's deviceQuery print.
    pub fn mib(x: f64) -> Bytes {
        Bytes(x * 1048576.0)
    }
    pub fn as_gib(self) -> f64 {
        self.0 / GIB
    }
}
impl Seconds {
    pub fn ms(x: f64) -> Seconds {
        Seconds(x * 1e-3)
    }
    pub fn us(x: f64) -> Seconds {
        Seconds(x * 1e-6)
    }
}
impl FlopPerSec {
    pub fn tflops(x: f64) -> FlopPerSec {
        FlopPerSec(x * 1e12)
    }
}
impl BytesPerSec {
    /// Gigabytes (10^9 bytes) per second.
    pub fn gb_s(x: f64) -> BytesPerSec {
        BytesPerSec(x * 1e9)
    }
    /// Gigabits (10^9 bits) per second, as network links are quoted.
    pub fn gbps(x: f64) -> BytesPerSec {
        BytesPerSec(x * 1e9 / 8.0)
    }
}

impl Div<FlopPerSec> for Flop {
    type Output = Seconds;
    fn div(self, r: FlopPerSec) -> Seconds {
        Seconds(self.0 / r.0)
    }
}
impl Div<BytesPerSec> for Bytes {
    type Output = Seconds;
    fn div(self, r: BytesPerSec) -> Seconds {
        Seconds(self.0 / r.0)
    }
}
impl Div<Seconds> for Flop {
    type Output = FlopPerSec;
    fn div(self, t: Seconds) -> FlopPerSec {
        FlopPerSec(self.0 / t.0)
    }
}
impl Mul<Seconds> for BytesPerSec {
    type Output = Bytes;
    fn mul(self, t: Seconds) -> Bytes {
        Bytes(self.0 * t.0)
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnitError {
    #[error("`{text}` has no unit; write {expected}")]
    MissingUnit {
        text: String,
        expected: &'static str,
    },
    #[error("unknown unit `{unit}` in `{text}`; write {expected}")]
    UnknownUnit {
        text: String,
        unit: String,
        expected: &'static str,
    },
    #[error("`{text}` does not start with a number; write {expected}")]
    BadNumber {
        text: String,
        expected: &'static str,
    },
    #[error("`{text}` must be positive and finite")]
    NotPositive { text: String },
    /// The number times its unit overflows a 64-bit float (`"1e308 TB"`).
    #[error("`{text}` is out of range: the value in base units overflows")]
    OutOfRange { text: String },
}

pub const BYTES_EXPECTED: &str = "a size with its unit, e.g. \"80 GiB\", \"40 GB\" or \"512 MiB\"";
pub const BANDWIDTH_EXPECTED: &str =
    "a bandwidth with its unit, e.g. \"300 GB/s\", \"100 Gbps\" or \"25 GB/s\"";
pub const FLOPS_EXPECTED: &str = "a rate with its unit, e.g. \"312 TFLOP/s\" or \"19.5 TFLOPS\"";
pub const SECONDS_EXPECTED: &str =
    "a duration with its unit, e.g. \"10 us\", \"2 ms\" or \"1.5 s\"";

/// Splits `"80 GiB"` into `(80.0, "GiB")`.
fn split_number<'a>(text: &'a str, expected: &'static str) -> Result<(f64, &'a str), UnitError> {
    let t = text.trim();
    let end = t
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == 'E' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(t.len());
    // `e` could start a unit ("EB"): back off if what follows is not a digit.
    let (mut num, mut rest) = t.split_at(end);
    if num.ends_with(['e', 'E']) {
        num = &num[..num.len() - 1];
        rest = &t[num.len()..];
    }
    let value: f64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| UnitError::BadNumber {
            text: text.to_string(),
            expected,
        })?;
    if !(value.is_finite() && value > 0.0) {
        return Err(UnitError::NotPositive {
            text: text.to_string(),
        });
    }
    let unit = rest.trim();
    if unit.is_empty() {
        return Err(UnitError::MissingUnit {
            text: text.to_string(),
            expected,
        });
    }
    Ok((value, unit))
}

/// `value × multiplier`, which must stay finite (and positive: a tiny value times a small unit
/// can underflow to zero).
fn scaled(text: &str, value: f64, multiplier: f64) -> Result<f64, UnitError> {
    let v = value * multiplier;
    if !v.is_finite() {
        Err(UnitError::OutOfRange {
            text: text.to_string(),
        })
    } else if v <= 0.0 {
        Err(UnitError::NotPositive {
            text: text.to_string(),
        })
    } else {
        Ok(v)
    }
}

fn unknown(text: &str, unit: &str, expected: &'static str) -> UnitError {
    UnitError::UnknownUnit {
        text: text.to_string(),
        unit: unit.to_string(),
        expected,
    }
}

fn byte_multiplier(unit: &str) -> Option<f64> {
    Some(match unit {
        "B" => 1.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => GIB,
        "TiB" => GIB * 1024.0,
        _ => return None,
    })
}

impl std::str::FromStr for Bytes {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Bytes, UnitError> {
        let (v, unit) = split_number(text, BYTES_EXPECTED)?;
        let m = byte_multiplier(unit).ok_or_else(|| unknown(text, unit, BYTES_EXPECTED))?;
        scaled(text, v, m).map(Bytes)
    }
}

impl std::str::FromStr for BytesPerSec {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<BytesPerSec, UnitError> {
        let (v, unit) = split_number(text, BANDWIDTH_EXPECTED)?;
        let bits = |m: f64| Some(m / 8.0);
        let m = match unit {
            "bps" | "bit/s" => bits(1.0),
            "Kbps" | "kbps" | "Kbit/s" | "kbit/s" => bits(1e3),
            "Mbps" | "Mbit/s" => bits(1e6),
            "Gbps" | "Gbit/s" | "Gb/s" => bits(1e9),
            "Tbps" | "Tbit/s" | "Tb/s" => bits(1e12),
            _ => unit
                .strip_suffix("/s")
                .or_else(|| unit.strip_suffix("ps"))
                .and_then(byte_multiplier),
        }
        .ok_or_else(|| unknown(text, unit, BANDWIDTH_EXPECTED))?;
        scaled(text, v, m).map(BytesPerSec)
    }
}

impl std::str::FromStr for FlopPerSec {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<FlopPerSec, UnitError> {
        let (v, unit) = split_number(text, FLOPS_EXPECTED)?;
        let prefix = unit
            .strip_suffix("FLOP/s")
            .or_else(|| unit.strip_suffix("FLOPS"))
            .or_else(|| unit.strip_suffix("flop/s"))
            .ok_or_else(|| unknown(text, unit, FLOPS_EXPECTED))?;
        let m = match prefix {
            "" => 1.0,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            _ => return Err(unknown(text, unit, FLOPS_EXPECTED)),
        };
        scaled(text, v, m).map(FlopPerSec)
    }
}

impl std::str::FromStr for Seconds {
    type Err = UnitError;
    fn from_str(text: &str) -> Result<Seconds, UnitError> {
        let (v, unit) = split_number(text, SECONDS_EXPECTED)?;
        let m = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "min" | "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(unknown(text, unit, SECONDS_EXPECTED)),
        };
        scaled(text, v, m).map(Seconds)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b.abs() >= GIB {
            write!(f, "{:.2} GiB", b / GIB)
        } else if b.abs() >= 1024.0 * 1024.0 {
            write!(f, "{:.1} MiB", b / (1024.0 * 1024.0))
        } else if b.abs() >= 1024.0 {
            write!(f, "{:.1} KiB", b / 1024.0)
        } else {
            write!(f, "{b:.0} B")
        }
    }
}
impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.abs() >= 1.0 {
            write!(f, "{s:.3} s")
        } else if s.abs() >= 1e-3 {
            write!(f, "{:.2} ms", s * 1e3)
        } else {
            write!(f, "{:.1} us", s * 1e6)
        }
    }
}
impl fmt::Display for BytesPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} GB/s", self.0 / 1e9)
    }
}
impl fmt::Display for FlopPerSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} TFLOP/s", self.0 / 1e12)
    }
}
impl fmt::Display for Flop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3e} FLOP", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!("80 GiB".parse::<Bytes>().unwrap(), Bytes(80.0 * GIB));
        assert_eq!("40GB".parse::<Bytes>().unwrap(), Bytes(40e9));
        assert_eq!("1.5 MiB".parse::<Bytes>().unwrap(), Bytes(1.5 * 1048576.0));
    }

    #[test]
    fn parses_bandwidths_bits_and_bytes() {
        assert_eq!(
            "100 Gbps".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(12.5e9)
        );
        assert_eq!(
            "300 GB/s".parse::<BytesPerSec>().unwrap(),
            BytesPerSec(300e9)
        );
        assert_eq!("16 Gbps".parse::<BytesPerSec>().unwrap(), BytesPerSec(2e9));
    }

    #[test]
    fn parses_rates_and_durations() {
        assert_eq!(
            "312 TFLOP/s".parse::<FlopPerSec>().unwrap(),
            FlopPerSec(312e12)
        );
        assert!(("10 us".parse::<Seconds>().unwrap().0 - 10e-6).abs() < 1e-18);
        assert!(("2 ms".parse::<Seconds>().unwrap().0 - 2e-3).abs() < 1e-15);
    }

    #[test]
    fn bare_numbers_are_rejected_with_the_unit_to_write() {
        let e = "80".parse::<Bytes>().unwrap_err();
        assert!(matches!(e, UnitError::MissingUnit { .. }));
        assert!(e.to_string().contains("GiB"));
        let e = "100".parse::<BytesPerSec>().unwrap_err();
        assert!(e.to_string().contains("Gbps"));
    }

    #[test]
    fn unknown_units_and_garbage_are_rejected() {
        assert!(matches!(
            "80 GiG".parse::<Bytes>().unwrap_err(),
            UnitError::UnknownUnit { .. }
        ));
        assert!(matches!(
            "fast".parse::<BytesPerSec>().unwrap_err(),
            UnitError::BadNumber { .. }
        ));
        assert!(matches!(
            "-3 GB".parse::<Bytes>().unwrap_err(),
            UnitError::BadNumber { .. }
        ));
        assert!(matches!(
            "0 GB".parse::<Bytes>().unwrap_err(),
            UnitError::NotPositive { .. }
        ));
    }

    #[test]
    fn overflowing_values_are_rejected() {
        // Regression: these parsed to infinity.
        for t in ["1e308 TB/s", "1e308 Tbps"] {
            assert!(
                matches!(t.parse::<BytesPerSec>(), Err(UnitError::OutOfRange { .. })),
                "{t}"
            );
        }
        assert!(matches!(
            "1e308 TB".parse::<Bytes>(),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!(matches!(
            "1e308 PFLOP/s".parse::<FlopPerSec>(),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!(matches!(
            "1e308 h".parse::<Seconds>(),
            Err(UnitError::OutOfRange { .. })
        ));
        assert!("1e400 B".parse::<Bytes>().is_err());
        assert!("1e300 B".parse::<Bytes>().unwrap().is_finite());
    }

    #[test]
    fn unit_arithmetic() {
        let t = Flop(312e12) / FlopPerSec(312e12);
        assert_eq!(t, Seconds(1.0));
        let t = Bytes(1e9) / BytesPerSec(1e9);
        assert_eq!(t, Seconds(1.0));
        assert_eq!(Bytes(4.0) / Bytes(2.0), 2.0);
    }
}
