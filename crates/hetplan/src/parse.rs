//! Small checked readers shared by the input parsers, so that every format applies the same
//! rules: [`whole`] for whole numbers (bounded, never through an unchecked `as` cast), and
//! [`did_you_mean`] for the nearest-name hint.
//!
//! Each parser still locates its own errors (TOML spans, JSON paths, CSV cells, inline-plan
//! offsets); these helpers only decide what is acceptable and say why not.

use std::fmt;

/// Largest batch quantity hetplan accepts: global batch, micro-batch size, micro-batch count,
/// gradient-accumulation steps, profiled micro-batch sizes. A typo guard far above any real run
/// (10⁹ samples), which keeps every product of these with one another, with sequence lengths
/// (`model::LIMITS.seq`) and with GPU counts inside `u64` and far from `f64` overflow.
pub const MAX_BATCH: u64 = 1_000_000_000;

/// A number as a format hands it over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num<'a> {
    /// An integer literal (TOML, JSON); `i128` holds both `i64` and `u64`.
    Int(i128),
    /// A float literal (JSON writes large integers as `1.5e9`; accepted when integral).
    Float(f64),
    /// Text (CSV cells, inline `key=value` values): an integer, or an integral float literal;
    /// `_` digit separators are allowed.
    Text(&'a str),
}

/// Why a value is not an acceptable whole number. The messages are phrased to follow a field
/// name: "`gpus` must be at least 1, found 0".
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WholeError {
    #[error("expected a whole number, found `{0}`")]
    NotANumber(String),
    #[error("expected a whole number, found {0}")]
    NotWhole(String),
    #[error("must be at least {min}, found {found}")]
    TooSmall { min: u64, found: String },
    #[error("must be at most {max}, found {found}")]
    TooLarge { max: u64, found: String },
}

/// A float for a message: integral values without a decimal expansion of hundreds of digits.
pub fn show_f64(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.0}")
    } else if v.is_finite() && (v.abs() >= 1e16 || (v != 0.0 && v.abs() < 1e-4)) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

impl fmt::Display for Num<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(v) => f.write_str(&show_f64(*v)),
            Num::Text(t) => f.write_str(t.trim()),
        }
    }
}

/// A whole number in `min..=max`. Fractional, negative, NaN, infinite and out-of-range values
/// are errors, whatever the format wrote them as.
pub fn whole(n: Num, min: u64, max: u64) -> Result<u64, WholeError> {
    let value: i128 = match n {
        Num::Int(i) => i,
        Num::Float(v) => float_to_int(v)?,
        Num::Text(t) => {
            let s = t.trim().replace('_', "");
            match s.parse::<i128>() {
                Ok(i) => i,
                Err(_) => match s.parse::<f64>() {
                    Ok(v) => float_to_int(v).map_err(|_| WholeError::NotWhole(t.trim().into()))?,
                    Err(_) => return Err(WholeError::NotANumber(t.trim().to_string())),
                },
            }
        }
    };
    if value < min as i128 {
        return Err(WholeError::TooSmall {
            min,
            found: n.to_string(),
        });
    }
    if value > max as i128 {
        return Err(WholeError::TooLarge {
            max,
            found: n.to_string(),
        });
    }
    Ok(value as u64)
}

/// An integral finite float as an integer, clamped into `i128` (the bounds check follows).
fn float_to_int(v: f64) -> Result<i128, WholeError> {
    if !v.is_finite() || v.fract() != 0.0 {
        return Err(WholeError::NotWhole(show_f64(v)));
    }
    // Saturating by definition for out-of-range floats; in range it is exact for integers.
    Ok(v.clamp(-1e30, 1e30) as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_in_every_spelling() {
        assert_eq!(whole(Num::Int(8), 1, 10), Ok(8));
        assert_eq!(whole(Num::Float(4.0), 1, 10), Ok(4));
        assert_eq!(whole(Num::Text(" 1_000 "), 1, 10_000), Ok(1000));
        assert_eq!(whole(Num::Text("2e3"), 1, 10_000), Ok(2000));
        assert_eq!(whole(Num::Text("8.0"), 1, 10), Ok(8));
    }

    #[test]
    fn bad_numbers_are_errors_not_casts() {
        assert!(matches!(
            whole(Num::Int(0), 1, 10),
            Err(WholeError::TooSmall { .. })
        ));
        assert!(matches!(
            whole(Num::Int(-3), 0, 10),
            Err(WholeError::TooSmall { .. })
        ));
        assert!(matches!(
            whole(Num::Int(u64::MAX as i128), 1, 10),
            Err(WholeError::TooLarge { .. })
        ));
        for t in ["NaN", "inf", "-inf", "1.5", "1e-3"] {
            assert!(
                matches!(whole(Num::Text(t), 1, 10), Err(WholeError::NotWhole(_))),
                "{t}"
            );
        }
        assert!(matches!(
            whole(Num::Text("eight"), 1, 10),
            Err(WholeError::NotANumber(_))
        ));
        assert!(matches!(
            whole(Num::Float(f64::NAN), 1, 10),
            Err(WholeError::NotWhole(_))
        ));
        let e = whole(Num::Float(1e308), 1, 10).unwrap_err();
        assert_eq!(e.to_string(), "must be at most 10, found 1e308");
        let e = whole(
            Num::Text("99999999999999999999999999999999999999999"),
            1,
            10,
        );
        assert!(matches!(e, Err(WholeError::TooLarge { .. })), "{e:?}");
    }
}
