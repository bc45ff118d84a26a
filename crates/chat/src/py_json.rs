//! JSON as Python's `json.dumps` writes it, which is what Hugging Face's `tojson` template
//! filter calls: `", "` and `": "` separators, key order kept, non-ASCII as is, and no HTML
//! escaping (minijinja's own `tojson` writes `<` as `\u003c`, which no Qwen model was trained on).

use serde_json::Value;
use std::fmt::Write;

/// Options of Python's `json.dumps`.
#[derive(Debug, Clone)]
pub struct PyJson {
    /// Spaces per nesting level; `None` writes everything on one line.
    pub indent: Option<usize>,
    /// Separator between items (`", "`).
    pub item_sep: String,
    /// Separator between a key and its value (`": "`).
    pub key_sep: String,
    /// Escape non-ASCII characters as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Write object keys in sorted order.
    pub sort_keys: bool,
}

impl Default for PyJson {
    fn default() -> Self {
        Self {
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            ensure_ascii: false,
            sort_keys: false,
        }
    }
}

impl PyJson {
    /// Python's defaults: `(", ", ": ")` without indent, `(",", ": ")` with one.
    pub fn with_indent(indent: Option<usize>) -> Self {
        Self {
            indent,
            item_sep: if indent.is_some() { "," } else { ", " }.into(),
            ..Self::default()
        }
    }

    /// `v` as `json.dumps` writes it with these options.
    pub fn dumps(&self, v: &Value) -> String {
        let mut out = String::new();
        self.write(&mut out, v, 0);
        out
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(n) = self.indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * depth));
        }
    }

    fn write(&self, out: &mut String, v: &Value, depth: usize) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&py_number(n)),
            Value::String(s) => self.string(out, s),
            Value::Array(a) if a.is_empty() => out.push_str("[]"),
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(out, depth + 1);
                    self.write(out, x, depth + 1);
                }
                self.newline(out, depth);
                out.push(']');
            }
            Value::Object(o) if o.is_empty() => out.push_str("{}"),
            Value::Object(o) => {
                let mut entries: Vec<(&String, &Value)> = o.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (k, x)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(out, depth + 1);
                    self.string(out, k);
                    out.push_str(&self.key_sep);
                    self.write(out, x, depth + 1);
                }
                self.newline(out, depth);
                out.push('}');
            }
        }
    }

    fn string(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && !c.is_ascii() => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's float repr writes exponents as `e+20` / `e-07`.
fn py_number(n: &serde_json::Number) -> String {
    let s = n.to_string();
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp.trim_start_matches('+')),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_like_python_json_dumps() {
        let v = json!({"b": 1, "a": [1, 2.5, null, true], "s": "<tag> & 'q' \"x\" é 😀\n"});
        assert_eq!(
            PyJson::default().dumps(&v),
            r#"{"b": 1, "a": [1, 2.5, null, true], "s": "<tag> & 'q' \"x\" é 😀\n"}"#
        );
        let ascii = PyJson {
            ensure_ascii: true,
            sort_keys: true,
            ..PyJson::default()
        };
        assert_eq!(
            ascii.dumps(&json!({"z": "é😀", "a": {}})),
            r#"{"a": {}, "z": "\u00e9\ud83d\ude00"}"#
        );
        assert_eq!(
            PyJson::with_indent(Some(2)).dumps(&json!({"a": [1]})),
            "{\n  \"a\": [\n    1\n  ]\n}"
        );
        assert_eq!(PyJson::default().dumps(&json!(1e-7)), "1e-07");
        assert_eq!(PyJson::default().dumps(&json!(1.0)), "1.0");
    }
}
