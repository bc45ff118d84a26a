//! Reading Qwen's tool calls out of an answer: `<tool_call>{"name": …, "arguments": …}</tool_call>`
//! (one or several), the XML form of Qwen3-Coder and Qwen3.5 in the same tags (see `xml`),
//! arguments sent as a JSON string, and what small models write without tags — a bare JSON
//! object, or one in a ```json fence, naming a tool they were offered.

use super::xml::{self, FUNCTION, FUNCTION_END};
use super::{fenced_blocks, fenced_spans, partial_tag, Reading, CLOSE, OPEN};
use crate::ToolCall;
use serde_json::{Map, Value};

/// `{"name": …, "arguments": …}` (or `parameters`) as a call; arguments given as a JSON
/// string are repaired into the object.
pub(crate) fn call_from_json(v: &Value) -> Result<ToolCall, String> {
    let obj = v.as_object().ok_or("a tool call must be a JSON object")?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or("the tool call has no \"name\"")?;
    let args = match obj.get("arguments").or_else(|| obj.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("arguments of `{name}` are not JSON: {e}"))?,
        Some(v) => v.clone(),
    };
    if !args.is_object() {
        return Err(format!("arguments of `{name}` must be a JSON object"));
    }
    Ok(ToolCall::new(name, args))
}

fn parse_block(body: &str, specs: &[Value]) -> Result<ToolCall, String> {
    let body = body.trim();
    if body.starts_with(FUNCTION) {
        return xml::parse_function(body, specs);
    }
    let json = fenced_blocks(body).first().map(|(_, b)| *b).unwrap_or(body);
    let v: Value = serde_json::from_str(json.trim())
        .map_err(|e| format!("tool call is not valid JSON: {e}"))?;
    call_from_json(&v)
}

/// Reads `raw`: `tools` are the names offered, `specs` their schemas where known (they type
/// the XML form's values).
pub fn read_calls(raw: &str, tools: &[String], specs: &[Value]) -> Reading {
    if raw.contains(OPEN) || raw.contains(FUNCTION) {
        let mut calls = vec![];
        let mut text = String::new();
        let mut rest = raw;
        loop {
            let next = [
                rest.find(OPEN).map(|i| (i, true)),
                rest.find(FUNCTION).map(|i| (i, false)),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some((at, tagged)) = next else {
                text.push_str(rest);
                break;
            };
            text.push_str(&rest[..at]);
            let (body, after) = if tagged {
                let inner = &rest[at + OPEN.len()..];
                match inner.find(CLOSE) {
                    Some(end) => (&inner[..end], &inner[end + CLOSE.len()..]),
                    None => (inner, ""), // cut off by max tokens: try what is there
                }
            } else {
                let inner = &rest[at..];
                match inner.find(FUNCTION_END) {
                    Some(end) => (
                        &inner[..end + FUNCTION_END.len()],
                        &inner[end + FUNCTION_END.len()..],
                    ),
                    None => (inner, ""),
                }
            };
            match parse_block(body, specs) {
                Ok(c) => calls.push(c),
                Err(e) => return Reading::Broken(e),
            }
            rest = after;
        }
        return Reading::Calls {
            text: text.trim().to_string(),
            calls,
        };
    }
    // No tags: a bare or fenced JSON object naming an offered tool is a call too.
    let known = |c: &ToolCall| tools.iter().any(|t| t == &c.function.name);
    let trimmed = raw.trim();
    if trimmed.starts_with('{') {
        // One object, or several one after another (a cut-off last one is dropped); text
        // after them is kept as the answer's text.
        let mut objects = serde_json::Deserializer::from_str(trimmed).into_iter::<Value>();
        let (mut calls, mut end) = (vec![], 0);
        while let Some(Ok(v)) = objects.next() {
            let Ok(c) = call_from_json(&v) else { break };
            calls.push(c);
            end = objects.byte_offset();
        }
        if !calls.is_empty() && calls.iter().all(known) {
            // (What starts like another object is one cut off by the token limit.)
            let after = trimmed[end..].trim();
            let text = if after.starts_with('{') { "" } else { after };
            return Reading::Calls {
                text: text.to_string(),
                calls,
            };
        }
    }
    // Every ```json (or bare ```) block that is a call of an offered tool; the text around
    // them, other blocks included, stays the answer's text.
    let (mut calls, mut text, mut from) = (vec![], String::new(), 0);
    for (span, lang, body) in fenced_spans(raw) {
        let call = matches!(lang, "" | "json")
            .then(|| serde_json::from_str::<Value>(body.trim()).ok())
            .flatten()
            .and_then(|v| call_from_json(&v).ok())
            .filter(known);
        if let Some(c) = call {
            text.push_str(&raw[from..span.start]);
            calls.push(c);
            from = span.end;
        }
    }
    if !calls.is_empty() {
        text.push_str(&raw[from..]);
        return Reading::Calls {
            text: text.trim().to_string(),
            calls,
        };
    }
    Reading::Text
}

/// How much of a streamed answer is safe to show: not a call, nor what may open one.
pub fn visible_prefix(text: &str) -> usize {
    for tag in [OPEN, FUNCTION] {
        if let Some(i) = text.find(tag) {
            return i;
        }
    }
    let t = text.trim_start();
    // (A start that may still become a fence is held too: shown text cannot be taken back.)
    if t.starts_with('{') || t.starts_with("```") || "```".starts_with(t) {
        return 0; // may be a bare or fenced JSON call: wait for the whole answer
    }
    text.len() - partial_tag(text, OPEN).max(partial_tag(text, FUNCTION))
}
