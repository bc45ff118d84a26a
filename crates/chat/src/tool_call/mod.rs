//! Tool calls as the model writes them: which calls it may make ([`ToolChoice`]), the format
//! its chat template shows them in ([`ToolFormat`]: JSON or XML, both in `<tool_call>` tags),
//! and reading them back out of an answer ([`read_calls`]), writing them as the model would
//! ([`write_calls`]) and how much of a streamed answer is surely not a call
//! ([`visible_prefix`]). The grammar that makes calls valid by construction
//! (`constraint::tool_call`), the agent's parsers and the server all use this one module.

mod choice;
mod format;
mod json;
pub mod stream;
pub mod xml;

pub use choice::ToolChoice;
pub use format::ToolFormat;
pub use json::{read_calls, visible_prefix};

use crate::ToolCall;
use serde_json::Value;

/// The tags around one call, in both formats.
pub const OPEN: &str = "<tool_call>";
/// The closing tag of a call (see [`OPEN`]).
pub const CLOSE: &str = "</tool_call>";

/// What an answer holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// No call: the answer is text.
    Text,
    /// Calls, and the text outside them (trimmed).
    Calls {
        /// Text outside the calls.
        text: String,
        /// The calls, in order.
        calls: Vec<ToolCall>,
    },
    /// A call that cannot be read: why.
    Broken(String),
}

/// `text` and `calls` written as a model of `format` writes them (for history and few-shot).
pub fn write_calls(format: ToolFormat, text: &str, calls: &[ToolCall]) -> String {
    match format {
        ToolFormat::Json => {
            let mut out = text.to_string();
            for c in calls {
                if !out.is_empty() {
                    out.push('\n');
                }
                let v =
                    serde_json::json!({"name": c.function.name, "arguments": c.function.arguments});
                out.push_str(&format!("{OPEN}\n{v}\n{CLOSE}"));
            }
            out
        }
        // As Qwen3-Coder's template writes an assistant turn with calls.
        ToolFormat::Xml => {
            let mut out = text.trim().to_string();
            if !out.is_empty() && !calls.is_empty() {
                out.push('\n');
            }
            for c in calls {
                out.push_str(&format!("\n{OPEN}\n{}\n{CLOSE}", xml::write_function(c)));
            }
            out
        }
    }
}

/// The names of the tools in `specs` (OpenAI's format, or bare).
pub fn tool_names(specs: &[Value]) -> Vec<String> {
    specs
        .iter()
        .filter_map(|t| t.get("function").unwrap_or(t).get("name"))
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// The longest suffix of `text` that is a proper prefix of `tag` (its length in bytes).
pub fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// The JSON in fenced code blocks (```json … ``` or ``` … ```), in order.
pub fn fenced_blocks(text: &str) -> Vec<(&str, &str)> {
    fenced_spans(text)
        .into_iter()
        .map(|(_, lang, body)| (lang, body))
        .collect()
}

/// Fenced code blocks, in order: where each lies in `text` (opening fence to closing fence,
/// both included), its language and its body.
pub fn fenced_spans(text: &str) -> Vec<(std::ops::Range<usize>, &str, &str)> {
    let mut out = vec![];
    let mut from = 0;
    while let Some(start) = text[from..].find("```").map(|i| from + i) {
        let after = &text[start + 3..];
        let (lang, body_start) = match after.find('\n') {
            Some(nl) => (after[..nl].trim(), nl + 1),
            None => break,
        };
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        from = start + 3 + body_start + end + 3;
        out.push((start..from, lang, &body[..end]));
    }
    out
}
