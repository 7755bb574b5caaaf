//! The error every input parser returns: where (line and column when the parser knows them),
//! which field, what was expected, and a hint. The CLI adds the file name and renders it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct InputError {
    /// 1-based line and column in the source text, when known.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted path of the offending field, e.g. `node_group[1].gpu`.
    pub field: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
    /// A suggestion, e.g. the nearest known name.
    pub hint: Option<String>,
}

impl InputError {
    pub fn new(message: impl Into<String>) -> Self {
        InputError {
            line: None,
            column: None,
            field: None,
            message: message.into(),
            hint: None,
        }
    }
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
    /// Sets line and column from a byte offset into `src`.
    pub fn at_offset(mut self, src: &str, offset: usize) -> Self {
        let (l, c) = line_col(src, offset);
        self.line = Some(l);
        self.column = Some(c);
        self
    }
    pub fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }
    /// From a serde_json error (which knows line and column).
    pub fn from_json(e: &serde_json::Error) -> Self {
        let mut err = InputError::new(strip_json_position(&e.to_string()));
        if e.line() > 0 {
            err = err.at(e.line(), e.column());
        }
        err
    }
    /// From a toml error (which knows a byte span).
    pub fn from_toml(src: &str, e: &toml::de::Error) -> Self {
        let err = InputError::new(e.message().to_string());
        match e.span() {
            Some(span) => err.at_offset(src, span.start),
            None => err,
        }
    }
}

/// serde_json appends " at line L column C" to its messages; we report the position separately.
fn strip_json_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// 1-based (line, column) of a byte offset; columns count characters.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, "{l}:{c}: ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "`{field}`: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_lines_and_columns() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        assert_eq!(line_col(src, 9), (2, 4));
    }

    #[test]
    fn json_errors_carry_their_position() {
        let e = serde_json::from_str::<serde_json::Value>("{\n  \"a\": ,\n}").unwrap_err();
        let ie = InputError::from_json(&e);
        assert_eq!(ie.line, Some(2));
        assert!(!ie.message.contains("at line"));
    }
}
