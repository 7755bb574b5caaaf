//! Words of a shell command line or script, with where each starts: enough of POSIX shell
//! quoting to read a launch script (`torchrun ... pretrain_gpt.py --flag value \`), not a shell.
//!
//! Whitespace separates words; `#` at the start of a word comments out the rest of the line; a
//! backslash before a newline joins lines, before any other character takes it literally;
//! single quotes keep everything to the next single quote; double quotes keep everything but
//! `\"`, `\\`, `` \` ``, `\$` and backslash-newline. Nothing is expanded: `$NNODES` stays
//! `$NNODES`, so a caller can tell a value it cannot know.

use crate::error::InputError;

/// One word and the byte offset in the text where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    pub text: String,
    pub offset: usize,
}

/// The words of `src`, or where a quote is left open.
pub fn words(src: &str) -> Result<Vec<Word>, InputError> {
    let mut out = Vec::new();
    let mut chars = src.char_indices().peekable();
    let mut cur: Option<Word> = None;
    while let Some((i, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(w) = cur.take() {
                    out.push(w);
                }
            }
            '#' if cur.is_none() => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\\' => match chars.next() {
                Some((_, '\n')) | None => {}
                Some((_, c)) => word(&mut cur, i).text.push(c),
            },
            '\'' => {
                let w = word(&mut cur, i);
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == '\'' {
                        closed = true;
                        break;
                    }
                    w.text.push(c);
                }
                if !closed {
                    return Err(open_quote(src, i, '\''));
                }
            }
            '"' => {
                let w = word(&mut cur, i);
                let mut closed = false;
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.peek().map(|&(_, n)| n) {
                            Some('\n') => {
                                chars.next();
                            }
                            Some(n @ ('"' | '\\' | '`' | '$')) => {
                                chars.next();
                                w.text.push(n);
                            }
                            _ => w.text.push('\\'),
                        },
                        c => w.text.push(c),
                    }
                }
                if !closed {
                    return Err(open_quote(src, i, '"'));
                }
            }
            c => word(&mut cur, i).text.push(c),
        }
    }
    if let Some(w) = cur {
        out.push(w);
    }
    Ok(out)
}

/// The word being read, started at `offset` if none is.
fn word(cur: &mut Option<Word>, offset: usize) -> &mut Word {
    cur.get_or_insert_with(|| Word {
        text: String::new(),
        offset,
    })
}

fn open_quote(src: &str, offset: usize, q: char) -> InputError {
    InputError::new(format!("the quote {q} opened here is never closed"))
        .at_offset(src, offset)
        .hint(Some(format!("close it with {q}, or escape it as \\{q}")))
}

/// The value a script leaves in environment variable `name` for the job it launches: its last
/// `export NAME=…`, `NAME=… launcher` prefix on the launcher's line (torchrun, python, srun,
/// deepspeed, env, exec) or `unset NAME` (`None`), a trailing `;` read off. A plain assignment
/// is not exported, and an `echo` of one sets nothing: neither counts. `src` is the text the
/// words were read from.
pub fn exported(src: &str, ws: &[Word], name: &str) -> Option<String> {
    const LAUNCHERS: &[&str] = &[
        "torchrun",
        "python",
        "python3",
        "srun",
        "deepspeed",
        "env",
        "exec",
    ];
    let mut value = None;
    for (i, w) in ws.iter().enumerate() {
        let text = w.text.trim_end_matches(';');
        let prev = i.checked_sub(1).map(|j| ws[j].text.as_str());
        if prev == Some("unset") && text == name {
            value = None;
            continue;
        }
        let Some(v) = text.strip_prefix(name).and_then(|r| r.strip_prefix('=')) else {
            continue;
        };
        let prefix = ws.get(i + 1).is_some_and(|n| {
            LAUNCHERS.contains(&n.text.as_str())
                && !src
                    .get(w.offset..n.offset)
                    .is_some_and(|gap| gap.contains('\n'))
        });
        if prev == Some("export") || prefix {
            value = Some(v.to_string());
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<String> {
        words(src).unwrap().into_iter().map(|w| w.text).collect()
    }

    #[test]
    fn quoting_continuations_and_comments() {
        let src = "# a comment\ntorchrun --nnodes 2 \\\n  pretrain_gpt.py --layout 'Et*3|t*3L' \
                   --x \"a \\\"b\\\" $C\" a\\ b # tail\n";
        assert_eq!(
            texts(src),
            vec![
                "torchrun",
                "--nnodes",
                "2",
                "pretrain_gpt.py",
                "--layout",
                "Et*3|t*3L",
                "--x",
                "a \"b\" $C",
                "a b"
            ]
        );
        let w = words("  --num-layers 24").unwrap();
        assert_eq!((w[0].offset, w[1].offset), (2, 15));
    }

    #[test]
    fn an_open_quote_is_located() {
        let e = words("--a 1\n--b 'x").unwrap_err();
        assert_eq!((e.line, e.column), (Some(2), Some(5)));
    }
}
