//! Qwen's tool calls as an [`OutputParser`]: JSON in `<tool_call>` tags (Qwen2.5, Qwen3) or
//! the XML form of Qwen3-Coder and Qwen3.5. The reading itself is the engine's
//! (`hearth_chat::tool_call`), shared with the server: both parsers read both forms
//! (and what small models write without tags); they differ in how they write calls back and
//! ask for them.

use super::{tool_names, OutputParser, ParsedOutput};
use hearth_chat::tool_call::{self, Reading};
use hearth_chat::ToolFormat;
use serde_json::Value;

/// Calls written as JSON in `<tool_call>` tags (Qwen2.5, Qwen3).
#[derive(Debug, Clone, Default)]
pub struct QwenToolParser;

/// Calls written as XML in `<tool_call>` tags (Qwen3-Coder, Qwen3.5), values typed by each
/// tool's schema.
#[derive(Debug, Clone, Default)]
pub struct QwenXmlToolParser;

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
        tool_call::write_calls(ToolFormat::Json, &parsed.text, &parsed.tool_calls)
    }

    fn visible_prefix(&self, text: &str) -> usize {
        tool_call::visible_prefix(text)
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

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        tool_call::write_calls(ToolFormat::Xml, &parsed.text, &parsed.tool_calls)
    }

    fn visible_prefix(&self, text: &str) -> usize {
        tool_call::visible_prefix(text)
    }
}

/// Reads `raw`: `tools` are the names offered, `specs` their schemas where known (they type
/// the XML form's values).
fn parse(raw: &str, tools: &[String], specs: &[Value]) -> ParsedOutput {
    match tool_call::read_calls(raw, tools, specs) {
        Reading::Text => ParsedOutput::text(raw),
        Reading::Calls { text, calls } => ParsedOutput::calls(raw, text, calls),
        Reading::Broken(e) => ParsedOutput::error(raw, e),
    }
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
        // The start of a fence is held until it is one or is not.
        assert_eq!(p.visible_prefix("``"), 0);
        assert_eq!(p.visible_prefix("`x"), 2);
        assert_eq!(
            p.visible_prefix("Paris is the capital."),
            "Paris is the capital.".len()
        );
        Ok(())
    }
}
