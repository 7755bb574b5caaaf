//! Name normalisation and "did you mean" hints shared by every catalog lookup.

/// Lower-case, with `_` and ` ` folded into `-`, so that "V100_16GB", "v100 16gb" and
/// "v100-16gb" compare equal.
pub fn normalize(name: &str) -> String {
    name.trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' || c == ' ' { '-' } else { c })
        .collect()
}

/// The candidate closest to `name` (normalised Jaro-Winkler similarity), if any is close enough to
/// be worth suggesting.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let n = normalize(name);
    let mut best: Option<(f64, &str)> = None;
    for c in candidates {
        let score = strsim::jaro_winkler(&n, &normalize(c));
        // Ties keep the first candidate: catalogs are ordered, so hints are deterministic.
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, c));
        }
    }
    best.filter(|(s, _)| *s >= 0.7).map(|(_, c)| c.to_string())
}

/// The hint for a near miss: "did you mean `x`?".
pub fn did_you_mean(near: Option<String>) -> Option<String> {
    near.map(|n| format!("did you mean `{n}`?"))
}

/// `"; did you mean `x`?"` or nothing.
pub fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!("; did you mean `{h}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_separators_and_case() {
        assert_eq!(normalize(" V100_16GB "), "v100-16gb");
    }

    #[test]
    fn suggests_the_nearest_name() {
        let c = ["a100-sxm4-80gb", "v100-sxm2-16gb", "t4"];
        assert_eq!(
            nearest("v100-sxm-16gb", c).as_deref(),
            Some("v100-sxm2-16gb")
        );
        assert_eq!(nearest("zzzzzzzzzzzz", c), None);
    }
}
