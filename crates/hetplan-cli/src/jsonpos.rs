//! Where a value sits in a JSON text: maps dotted paths (`stages[1].devices[2]`) to byte spans,
//! so that errors found after parsing (plan validation, profile checks) can point at the text.
//!
//! Only used on text that serde_json already accepted; on anything else it gives up quietly.

use std::collections::BTreeMap;

/// Byte spans of every value (and of every object key) in a JSON document, by dotted path.
#[derive(Debug, Default)]
pub struct JsonSpans {
    values: BTreeMap<String, (usize, usize)>,
    keys: BTreeMap<String, (usize, usize)>,
}

impl JsonSpans {
    /// Scans `src`; `None` when it is not well-formed JSON.
    pub fn new(src: &str) -> Option<JsonSpans> {
        let mut s = Scanner {
            b: src.as_bytes(),
            i: 0,
            out: JsonSpans::default(),
        };
        s.ws();
        s.value(String::new())?;
        Some(s.out)
    }

    /// Span of the value at `path` (`""` is the whole document).
    pub fn value(&self, path: &str) -> Option<(usize, usize)> {
        self.values.get(path).copied()
    }

    /// Span of the key of the object member at `path` (with its quotes).
    pub fn key(&self, path: &str) -> Option<(usize, usize)> {
        self.keys.get(path).copied()
    }

    /// The key when there is one (an object member), else the value; for an unknown path the
    /// nearest enclosing one that exists.
    pub fn locate(&self, path: &str) -> Option<(usize, usize)> {
        let mut p = path.to_string();
        loop {
            if let Some(span) = self.key(&p).or_else(|| self.value(&p)) {
                return Some(span);
            }
            if p.is_empty() {
                return None;
            }
            p = parent(&p);
        }
    }
}

/// `a.b[2]` → `a.b`, `a.b` → `a`, `a` → ``.
fn parent(path: &str) -> String {
    match path.rfind(['.', '[']) {
        Some(i) => path[..i].to_string(),
        None => String::new(),
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    out: JsonSpans,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn value(&mut self, path: String) -> Option<()> {
        let start = self.i;
        match self.peek()? {
            b'{' => self.object(&path)?,
            b'[' => self.array(&path)?,
            b'"' => {
                self.string()?;
            }
            _ => {
                while self.i < self.b.len()
                    && !matches!(
                        self.b[self.i],
                        b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    self.i += 1;
                }
                if self.i == start {
                    return None;
                }
            }
        }
        self.out.values.insert(path, (start, self.i));
        Some(())
    }

    /// A string starting at the current `"`; returns its raw contents (escapes kept).
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        self.i += 1;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    let raw = std::str::from_utf8(&self.b[start + 1..self.i - 1]).ok()?;
                    return Some(raw.to_string());
                }
                _ => self.i += 1,
            }
        }
        None
    }

    fn object(&mut self, path: &str) -> Option<()> {
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            if self.peek()? != b'"' {
                return None;
            }
            let kstart = self.i;
            let key = self.string()?;
            let child = if path.is_empty() {
                key
            } else {
                format!("{path}.{key}")
            };
            self.out.keys.insert(child.clone(), (kstart, self.i));
            self.ws();
            if self.peek()? != b':' {
                return None;
            }
            self.i += 1;
            self.ws();
            self.value(child)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, path: &str) -> Option<()> {
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        let mut n = 0usize;
        loop {
            self.ws();
            self.value(format!("{path}[{n}]"))?;
            n += 1;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_values_and_keys() {
        let src = "{\n  \"a\": [1, {\"b\": \"x\\\"y\"}],\n  \"c\": {}\n}";
        let s = JsonSpans::new(src).unwrap();
        let (a, b) = s.value("a[1].b").unwrap();
        assert_eq!(&src[a..b], "\"x\\\"y\"");
        let (a, b) = s.key("c").unwrap();
        assert_eq!(&src[a..b], "\"c\"");
        let (a, b) = s.value("a[0]").unwrap();
        assert_eq!(&src[a..b], "1");
        // Unknown paths fall back to the nearest enclosing one.
        let (a, b) = s.locate("a[1].zzz").unwrap();
        assert_eq!(&src[a..b], "{\"b\": \"x\\\"y\"}");
    }

    #[test]
    fn gives_up_on_garbage() {
        assert!(JsonSpans::new("{\"a\": ").is_none());
    }
}
