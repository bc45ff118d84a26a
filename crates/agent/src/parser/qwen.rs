//! Qwen's tool calls: `<tool_call>{"name": …, "arguments": …}</tool_call>` (one or several),
//! the XML form of Qwen3-Coder and Qwen3.5 (`<function=name><parameter=p>value</parameter>
//! </function>`, see `qwen_xml`), arguments sent as a JSON string, and what small models write
//! without tags — a bare JSON object, or one in a ```json fence, naming a tool they were offered.
//! Both parsers read both forms; they differ in how they write calls back and ask for them.

use super::qwen_xml::{self, FUNCTION, FUNCTION_END};
use super::{fenced_blocks, fenced_spans, partial_tag, tool_names, OutputParser, ParsedOutput};
use hearth_engine::ToolCall;
use serde_json::{Map, Value};

/// Calls written as JSON in `<tool_call>` tags (Qwen2.5, Qwen3).
#[derive(Debug, Clone, Default)]
pub struct QwenToolParser;

/// Calls written as XML in `<tool_call>` tags (Qwen3-Coder, Qwen3.5), values typed by each
/// tool's schema.
#[derive(Debug, Clone, Default)]
pub struct QwenXmlToolParser;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// `{"name": …, "arguments": …}` (or `parameters`) as a call; arguments given as a JSON
/// string are repaired into the object.
fn call_from_json(v: &Value) -> Result<ToolCall, String> {
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
        return qwen_xml::parse_function(body, specs);
    }
    let json = fenced_blocks(body).first().map(|(_, b)| *b).unwrap_or(body);
    let v: Value = serde_json::from_str(json.trim())
        .map_err(|e| format!("tool call is not valid JSON: {e}"))?;
    call_from_json(&v)
}

impl OutputParser for QwenToolParser {
    fn correction(&self, error: &str) -> String {
        format!(
            "Your tool call could not be read ({error}). Write it again as <tool_call>{{\"name\": …, \"arguments\": {{…}}}}</tool_call>, or answer directly."
        )
    }

    fn parse(&self, raw: &str, tools: &[String]) -> ParsedOutput {
        parse(raw, tools, &[])
    }

    fn parse_with_specs(&self, raw: &str, specs: &[Value]) -> ParsedOutput {
        parse(raw, &tool_names(specs), specs)
    }

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        let mut out = parsed.text.clone();
        for c in &parsed.tool_calls {
            if !out.is_empty() {
                out.push('\n');
            }
            let v = serde_json::json!({"name": c.function.name, "arguments": c.function.arguments});
            out.push_str(&format!("{OPEN}\n{v}\n{CLOSE}"));
        }
        out
    }

    fn visible_prefix(&self, text: &str) -> usize {
        visible_prefix(text)
    }
}

impl OutputParser for QwenXmlToolParser {
    fn correction(&self, error: &str) -> String {
        format!(
            "Your tool call could not be read ({error}). Write it again as <tool_call>\n<function=NAME>\n<parameter=NAME>\nVALUE\n</parameter>\n</function>\n</tool_call>, with every required parameter, or answer directly."
        )
    }

    fn parse(&self, raw: &str, tools: &[String]) -> ParsedOutput {
        parse(raw, tools, &[])
    }

    fn parse_with_specs(&self, raw: &str, specs: &[Value]) -> ParsedOutput {
        parse(raw, &tool_names(specs), specs)
    }

    /// As Qwen3-Coder's template writes an assistant turn with calls.
    fn format_response(&self, parsed: &ParsedOutput) -> String {
        let mut out = parsed.text.trim().to_string();
        if !out.is_empty() && !parsed.tool_calls.is_empty() {
            out.push('\n');
        }
        for c in &parsed.tool_calls {
            out.push_str(&format!(
                "\n{OPEN}\n{}\n{CLOSE}",
                qwen_xml::write_function(c)
            ));
        }
        out
    }

    fn visible_prefix(&self, text: &str) -> usize {
        visible_prefix(text)
    }
}

/// Reads `raw`: `tools` are the names offered, `specs` their schemas where known (they type
/// the XML form's values).
fn parse(raw: &str, tools: &[String], specs: &[Value]) -> ParsedOutput {
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
                Err(e) => return ParsedOutput::error(raw, e),
            }
            rest = after;
        }
        return ParsedOutput::calls(raw, text.trim().to_string(), calls);
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
            return ParsedOutput::calls(raw, text.to_string(), calls);
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
        return ParsedOutput::calls(raw, text.trim().to_string(), calls);
    }
    ParsedOutput::text(raw)
}

/// How much of a streamed answer is safe to show: not a call, nor what may open one.
fn visible_prefix(text: &str) -> usize {
    for tag in [OPEN, FUNCTION] {
        if let Some(i) = text.find(tag) {
            return i;
        }
    }
    let t = text.trim_start();
    if t.starts_with('{') || t.starts_with("```") || t.is_empty() {
        return 0; // may be a bare or fenced JSON call: wait for the whole answer
    }
    text.len() - partial_tag(text, OPEN).max(partial_tag(text, FUNCTION))
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::parser::ParseStatus;
    use serde_json::json;

    fn tools() -> Vec<String> {
        vec!["calculator".into(), "get_weather".into()]
    }

    #[test]
    fn tagged_calls_one_or_several() -> TestResult {
        let p = QwenToolParser;
        let out = p.parse(
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": \\\"2+2\\\"}\"}\n</tool_call>",
            &tools(),
        );
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.text, "Let me check.");
        assert_eq!(out.tool_calls.len(), 2);
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(
            out.tool_calls[1].function.arguments,
            json!({"expression": "2+2"}),
            "string arguments repaired"
        );
        Ok(())
    }

    #[test]
    fn function_parameter_form() -> TestResult {
        let out = QwenToolParser.parse(
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            &tools(),
        );
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.tool_calls[0].function.name, "get_weather");
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"city": "Paris", "days": 3})
        );
        Ok(())
    }

    #[test]
    fn what_small_models_write_without_tags() -> TestResult {
        let bare = "{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1234 * 5678\"}}";
        let out = QwenToolParser.parse(bare, &tools());
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(
            out.tool_calls[0].function.arguments["expression"],
            "1234 * 5678"
        );
        let fenced = format!("Sure:\n```json\n{bare}\n```");
        let out = QwenToolParser.parse(&fenced, &tools());
        assert_eq!(
            (out.status, out.text.as_str()),
            (ParseStatus::ValidTool, "Sure:")
        );
        // Several objects, one per line, the last cut off by the token limit.
        let lines = format!("{bare}\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}\n{{\"name\": \"calcu");
        let out = QwenToolParser.parse(&lines, &tools());
        assert_eq!(out.tool_calls.len(), 2);
        assert_eq!(out.text, "");
        // Text after the calls is the answer's text, not dropped.
        let out = QwenToolParser.parse(&format!("{bare}\nDone."), &tools());
        assert_eq!((out.tool_calls.len(), out.text.as_str()), (1, "Done."));
        // Every fenced call, and the text around them (other blocks included).
        let weather = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
        let two = format!("First:\n```json\n{bare}\n```\nthen:\n```\n{weather}\n```\n```python\nx = 1\n```\nDone.");
        let out = QwenToolParser.parse(&two, &tools());
        let names: Vec<_> = out
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["calculator", "get_weather"]);
        assert_eq!(out.text, "First:\n\nthen:\n\n```python\nx = 1\n```\nDone.");
        // A JSON object naming no offered tool is just an answer.
        let other = "{\"name\": \"Alice\", \"age\": 30}";
        assert_eq!(
            QwenToolParser.parse(other, &tools()).status,
            ParseStatus::NoTool
        );
        Ok(())
    }

    #[test]
    fn malformed_calls_keep_the_raw_text() -> TestResult {
        let raw = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": }\n</tool_call>";
        let out = QwenToolParser.parse(raw, &tools());
        assert_eq!(out.status, ParseStatus::ParsingError);
        assert_eq!(out.raw, raw);
        assert!(out.error.ok_or("no error")?.contains("not valid JSON"));
        let out = QwenToolParser.parse("<tool_call>{\"arguments\": {}}</tool_call>", &tools());
        assert!(out.error.ok_or("no error")?.contains("no \"name\""));
        assert_eq!(
            QwenToolParser.parse("The answer is 4.", &tools()).status,
            ParseStatus::NoTool
        );
        Ok(())
    }

    #[test]
    fn streaming_holds_back_what_may_become_a_call() -> TestResult {
        let p = QwenToolParser;
        assert_eq!(p.visible_prefix("The answer <tool"), "The answer ".len());
        assert_eq!(
            p.visible_prefix("Checking.\n<tool_call>\n{\"na"),
            "Checking.\n".len()
        );
        assert_eq!(p.visible_prefix("{\"name\": \"calc"), 0);
        assert_eq!(
            p.visible_prefix("Paris is the capital."),
            "Paris is the capital.".len()
        );
        Ok(())
    }
}
