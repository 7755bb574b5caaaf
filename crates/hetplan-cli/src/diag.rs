//! Errors of the command-line tool and how they are shown.
//!
//! Every bad input (a file that cannot be read, a parse error, an unknown name, an invalid plan)
//! ends with exit code 2; anything else that fails, with 1. Diagnostics go to stderr, rendered
//! with miette: `file:line:column`, the offending field, what was expected, the hint, and the
//! source line with the spot marked when the text is at hand.

use crate::jsonpos::JsonSpans;
use hetplan::error::line_col;
use hetplan::plan::validate::PlanError;
use hetplan::InputError;
use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError,
    MietteSpanContents, SourceCode, SourceSpan, SpanContents,
};
use std::fmt;
use std::io::IsTerminal;

/// Exit code of bad input.
pub const EXIT_INPUT: i32 = 2;
/// Exit code of any other failure.
pub const EXIT_FAILURE: i32 = 1;

/// The text an error points into: a file, or a command-line argument (`--plan`, `--model`).
#[derive(Clone, Debug)]
pub struct Origin {
    /// How it is named in messages: the path as given, or `--plan`.
    pub name: String,
    pub text: String,
    /// The text is JSON: fields without a position can be found in it.
    pub json: bool,
}

impl Origin {
    pub fn file(path: &str, text: String) -> Origin {
        let json = path.to_ascii_lowercase().ends_with(".json")
            || text.trim_start().starts_with('{')
            || text.trim_start().starts_with('[');
        Origin {
            name: path.to_string(),
            text,
            json,
        }
    }
    pub fn arg(flag: &str, text: &str) -> Origin {
        Origin {
            name: flag.to_string(),
            text: text.to_string(),
            json: false,
        }
    }
}

#[derive(Debug)]
pub enum CliError {
    /// A file that could not be read (or written).
    Read { path: String, reason: String },
    /// A located input error.
    Input {
        origin: Option<Box<Origin>>,
        error: Box<InputError>,
    },
    /// A plan that does not fit the model or the cluster: every problem.
    Plan {
        origin: Option<Box<Origin>>,
        problems: Vec<PlanError>,
        model: String,
        cluster: String,
    },
    /// A bad combination of arguments.
    Usage(String),
    /// Something asked of a valid input that cannot be done (an engine that cannot run the
    /// plan): every reason, and what to do instead.
    Refused {
        reasons: Vec<String>,
        help: Option<String>,
    },
    /// Anything else.
    Failure(String),
    /// A child process (the Python profiler) failed with this status and said why itself.
    Exit(i32),
}

pub type Result<T> = std::result::Result<T, CliError>;

impl CliError {
    pub fn input(origin: Option<Origin>, error: InputError) -> CliError {
        CliError::Input {
            origin: origin.map(Box::new),
            error: Box::new(error),
        }
    }

    pub fn read(path: &str, e: &std::io::Error) -> CliError {
        CliError::Read {
            path: path.to_string(),
            reason: io_reason(e),
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Failure(_) => EXIT_FAILURE,
            CliError::Exit(code) => *code,
            _ => EXIT_INPUT,
        }
    }

    /// Writes the error to stderr.
    pub fn report(&self) {
        let handler = handler();
        let mut out = String::new();
        for d in self.diagnostics() {
            let mut s = String::new();
            if handler.render_report(&mut s, &d).is_err() {
                s = format!("error: {}\n", d.message);
            }
            out.push_str(&s);
        }
        if let CliError::Plan { problems, .. } = self {
            if problems.len() > 1 {
                out.push_str(&format!(
                    "error: the plan has {} problems\n",
                    problems.len()
                ));
            }
        }
        eprint!("{out}");
    }

    fn diagnostics(&self) -> Vec<Diag> {
        match self {
            CliError::Read { path, reason } => {
                vec![Diag::plain(format!("cannot read {path}: {reason}"))]
            }
            CliError::Usage(m) | CliError::Failure(m) => vec![Diag::plain(m.clone())],
            CliError::Exit(_) => Vec::new(),
            CliError::Input { origin, error } => vec![input_diag(origin.as_deref(), error)],
            CliError::Refused { reasons, help } => {
                let mut d: Vec<Diag> = reasons.iter().map(|r| Diag::plain(r.clone())).collect();
                if let Some(last) = d.last_mut() {
                    last.help = help.clone();
                }
                d
            }
            CliError::Plan {
                origin,
                problems,
                model,
                cluster,
            } => {
                let n = problems.len();
                problems
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let mut e = InputError::new(format!(
                            "invalid plan for `{model}` on `{cluster}`{}: {}",
                            if n > 1 {
                                format!(" ({} of {n})", i + 1)
                            } else {
                                String::new()
                            },
                            p
                        ))
                        .hint(p.hint());
                        e.field = Some(p.path());
                        input_diag(origin.as_deref(), &e)
                    })
                    .collect()
            }
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in self.diagnostics() {
            writeln!(f, "{}", d.message)?;
            if let Some(h) = &d.help {
                writeln!(f, "  help: {h}")?;
            }
        }
        Ok(())
    }
}

/// `No such file or directory`, without the `(os error 2)`.
pub fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn handler() -> GraphicalReportHandler {
    let tty = std::io::stderr().is_terminal();
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| v != "0");
    let theme = match (tty, no_color) {
        (true, false) => GraphicalTheme::unicode(),
        (true, true) => GraphicalTheme::unicode_nocolor(),
        _ => GraphicalTheme::none(),
    };
    let width = if tty {
        terminal_width().unwrap_or(100)
    } else {
        110
    };
    GraphicalReportHandler::new_themed(theme)
        .with_links(false)
        .with_width(width)
        .with_wrap_lines(tty)
        .with_context_lines(1)
}

fn terminal_width() -> Option<usize> {
    std::env::var("COLUMNS").ok()?.parse().ok()
}

/// One rendered diagnostic.
#[derive(Debug)]
struct Diag {
    message: String,
    help: Option<String>,
    source: Option<Snippet>,
    label: Option<(usize, usize, String)>,
}

impl Diag {
    fn plain(message: String) -> Diag {
        Diag {
            message: clip_middle(&message, MAX_MESSAGE),
            help: None,
            source: None,
            label: None,
        }
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diag {}

impl Diagnostic for Diag {
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h.clone()) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let (start, len, text) = self.label.as_ref()?;
        self.source.as_ref()?;
        Some(Box::new(std::iter::once(LabeledSpan::new(
            Some(text.clone()),
            *start,
            *len,
        ))))
    }
}

/// Byte offset of 1-based (line, column), columns counting characters.
pub fn offset_of(text: &str, line: usize, column: usize) -> Option<usize> {
    let mut start = 0usize;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let col = column.max(1) - 1;
            let within = l
                .char_indices()
                .nth(col)
                .map(|(b, _)| b)
                .unwrap_or(l.trim_end_matches(['\n', '\r']).len());
            return Some(start + within);
        }
        start += l.len();
    }
    if line == text.split_inclusive('\n').count() + 1 {
        return Some(text.len());
    }
    None
}

/// Length of the token at `offset`: a quoted string, a `[...]`/`{...}` value is marked by its
/// first character only, anything else up to a separator.
fn token_len(text: &str, offset: usize) -> usize {
    let rest = &text[offset.min(text.len())..];
    let mut chars = rest.char_indices();
    match chars.next() {
        None => 0,
        Some((_, q @ ('"' | '\''))) => {
            let mut escaped = false;
            for (i, c) in chars {
                if c == '\n' {
                    return i;
                }
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    return i + c.len_utf8();
                }
            }
            rest.len()
        }
        Some((_, c)) if "[{".contains(c) => 1,
        Some(_) => rest
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || ",]}=;".contains(*c))
            .map(|(i, _)| i.max(1))
            .unwrap_or(rest.len()),
    }
}

fn input_diag(origin: Option<&Origin>, e: &InputError) -> Diag {
    // Where: the error's own line and column, else the field found in a JSON text.
    let mut at: Option<(usize, usize, usize)> = None; // (offset, line, column)
    let mut span_end: Option<usize> = None;
    if let Some(o) = origin {
        if let (Some(l), Some(c)) = (e.line, e.column) {
            at = offset_of(&o.text, l, c).map(|off| (off, l, c));
            if at.is_none() {
                // A position beyond the text: still name it.
                at = Some((o.text.len(), l, c));
            }
        } else if let (Some(field), true) = (&e.field, o.json) {
            if let Some((start, end)) =
                JsonSpans::new(&o.text).and_then(|s| s.locate_value_first(field))
            {
                let (l, c) = line_col(&o.text, start);
                at = Some((start, l, c));
                span_end = Some(end);
            }
        }
    }
    let mut message = String::new();
    match (origin, at) {
        (Some(o), Some((_, l, c))) => message.push_str(&format!("{}:{l}:{c}: ", o.name)),
        (Some(o), None) => message.push_str(&format!("{}: ", o.name)),
        (None, _) => {
            if let (Some(l), Some(c)) = (e.line, e.column) {
                message.push_str(&format!("{l}:{c}: "));
            }
        }
    }
    if let Some(f) = &e.field {
        message.push_str(&format!("`{f}`: "));
    }
    message.push_str(&e.message);
    let help = e.hint.clone().map(|h| clip_middle(&h, MAX_MESSAGE));
    let message = clip_middle(&message, MAX_MESSAGE);
    let (source, label) = match (origin, at) {
        (Some(o), Some((off, _, _))) if !o.text.is_empty() => {
            let off = floor_char_boundary(&o.text, off.min(o.text.len()));
            // The whole value when it is known and on one line, else the token there.
            let len = match span_end {
                Some(end) if end > off && !o.text[off..end].contains('\n') => end - off,
                _ => token_len(&o.text, off),
            };
            let label = e
                .field
                .clone()
                .map_or_else(|| "here".to_string(), |f| format!("`{f}`"));
            let (snippet, start, len) = Snippet::around(&o.name, &o.text, off, len);
            (Some(snippet), Some((start, len, label)))
        }
        _ => (None, None),
    };
    Diag {
        message,
        help,
        source,
        label,
    }
}

/// Messages and hints longer than this many characters are cut in the middle: a 50 MB
/// argument or field value must not be echoed whole, but a planner's explanation of why nothing
/// fits (several hundred characters) must be.
const MAX_MESSAGE: usize = 1000;

/// At most this many characters of a source line are shown, around the error's column.
const WINDOW_BEFORE: usize = 60;
const WINDOW_AFTER: usize = 100;
const ELLIPSIS: &str = "…";

/// `text` with its middle replaced by "… (N characters left out) …" when longer than `max`.
fn clip_middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(n - max / 2).collect();
    format!(
        "{head}{ELLIPSIS} ({} characters left out) {ELLIPSIS}{tail}",
        n - max
    )
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The source an error is shown in: the error's line and one line either side, each cut to a
/// window of characters around the error's column (marked `…` where cut), so that neither a
/// 50 MB one-line file nor a column past what the renderer handles reaches miette. Line
/// numbers and the column in the header stay those of the whole text.
#[derive(Debug)]
struct Snippet {
    name: String,
    text: String,
    /// 0-based line number of the snippet's first line in the whole text.
    first_line: usize,
    /// 0-based index, in the snippet, of the error's line.
    error_line: usize,
    /// Byte column in the whole text minus byte column in the snippet, on the error's line.
    column_shift: isize,
}

impl Snippet {
    /// The snippet around `text[off..off + len]`, and the label's start and length in it.
    fn around(name: &str, text: &str, off: usize, len: usize) -> (Snippet, usize, usize) {
        let line_start = text[..off].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[off..].find('\n').map_or(text.len(), |i| off + i);
        let line_no = text[..line_start].bytes().filter(|b| *b == b'\n').count();
        let line = &text[line_start..line_end];
        let col = off - line_start; // bytes
        let col_chars = line[..col].chars().count();
        let from = col_chars.saturating_sub(WINDOW_BEFORE);
        let (clipped, lead_bytes, marker) = clip_line(line, from);
        let mut out = String::new();
        let mut first_line = line_no;
        let mut error_line = 0;
        if line_no > 0 {
            let prev_start = text[..line_start - 1].rfind('\n').map_or(0, |i| i + 1);
            let prev = text[prev_start..line_start - 1].trim_end_matches('\r');
            out.push_str(&clip_line(prev, from).0);
            out.push('\n');
            first_line -= 1;
            error_line = 1;
        }
        let line_at = out.len();
        out.push_str(&clipped);
        if line_end < text.len() {
            let next_end = text[line_end + 1..]
                .find('\n')
                .map_or(text.len(), |i| line_end + 1 + i);
            out.push('\n');
            out.push_str(&clip_line(text[line_end + 1..next_end].trim_end_matches('\r'), from).0);
        }
        // The label, moved into the snippet and kept inside the error's clipped line.
        let start_in_line = marker + (col - lead_bytes);
        let room = clipped.len().saturating_sub(start_in_line);
        let len = len.min(room);
        let snippet = Snippet {
            name: name.to_string(),
            text: out,
            first_line,
            error_line,
            column_shift: lead_bytes as isize - marker as isize,
        };
        (snippet, line_at + start_in_line, len)
    }
}

/// `line` from its `from`-th character, at most `WINDOW_BEFORE + WINDOW_AFTER` characters,
/// with `…` where it was cut; also the byte offset in `line` where the kept part starts and
/// the byte length of the leading marker.
fn clip_line(line: &str, from: usize) -> (String, usize, usize) {
    let start = line.char_indices().nth(from).map_or(line.len(), |(i, _)| i);
    let start = if from == 0 { 0 } else { start };
    let rest = &line[start..];
    let keep = WINDOW_BEFORE + WINDOW_AFTER;
    let end = rest.char_indices().nth(keep).map_or(rest.len(), |(i, _)| i);
    let mut out = String::new();
    let marker = if start > 0 { ELLIPSIS.len() } else { 0 };
    if start > 0 {
        out.push_str(ELLIPSIS);
    }
    out.push_str(&rest[..end]);
    if end < rest.len() {
        out.push_str(ELLIPSIS);
    }
    (out, start, marker)
}

impl SourceCode for Snippet {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> std::result::Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner = self
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        let mut column = inner.column();
        if context_lines_before == 0 && inner.line() == self.error_line {
            column = (column as isize + self.column_shift).max(0) as usize;
        }
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            inner.line() + self.first_line,
            column,
            inner.line_count(),
        )))
    }
}

impl JsonSpans {
    /// For a field path: the value's span (what is wrong is usually the value), else the key's,
    /// else the nearest enclosing path's.
    pub fn locate_value_first(&self, path: &str) -> Option<(usize, usize)> {
        self.value(path).or_else(|| self.locate(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_lines_and_columns() {
        let t = "ab\ncdé\nf";
        assert_eq!(offset_of(t, 1, 1), Some(0));
        assert_eq!(offset_of(t, 2, 3), Some(5));
        assert_eq!(offset_of(t, 3, 1), Some(t.len() - 1));
        assert_eq!(offset_of(t, 9, 1), None);
    }

    #[test]
    fn long_lines_are_clipped_around_the_error() {
        let text = format!("a = 1\nname = \"{}\" , x = 3\nb = 2\n", "y".repeat(100_000));
        let off = text.find(" , x").unwrap() + 1;
        let (s, start, len) = Snippet::around("f", &text, off, 1);
        assert!(s.text.len() < 1000, "{}", s.text.len());
        assert_eq!(&s.text[start..start + len], ",");
        assert_eq!((s.first_line, s.error_line), (0, 1));
        assert!(s.text.lines().nth(1).unwrap().starts_with('…'));
        // Short lines are kept whole.
        let (s, start, _) = Snippet::around("f", "a = 1\nb = x\n", 10, 1);
        assert_eq!(s.text, "a = 1\nb = x\n");
        assert_eq!(start, 10);
        assert!(clip_middle(&"z".repeat(10_000), 100).chars().count() < 200);
    }

    #[test]
    fn tokens() {
        assert_eq!(token_len("x = \"a b\" # c", 4), 5);
        assert_eq!(token_len("tp=3,pp=2", 3), 1);
        assert_eq!(token_len("{ \"a\" }", 0), 1);
    }
}
