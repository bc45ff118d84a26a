//! Code interpreter: fenced code blocks become calls to the `python` tool.

use super::{fenced_blocks, OutputParser, ParsedOutput};
use hearth_chat::ToolCall;
use serde_json::json;

/// Fenced Python code blocks (`python`, `py` or untagged) as calls to a code tool.
#[derive(Debug, Clone)]
pub struct CodeBlockParser {
    /// The tool the code goes to (default `python`).
    pub tool: String,
}

impl Default for CodeBlockParser {
    fn default() -> Self {
        Self {
            tool: "python".into(),
        }
    }
}

impl OutputParser for CodeBlockParser {
    fn parse(&self, raw: &str, _tools: &[String]) -> ParsedOutput {
        let calls: Vec<ToolCall> = fenced_blocks(raw)
            .into_iter()
            .filter(|(lang, _)| matches!(*lang, "python" | "py" | ""))
            .map(|(_, code)| ToolCall::new(self.tool.clone(), json!({"code": code})))
            .collect();
        if calls.is_empty() {
            return ParsedOutput::text(raw);
        }
        let text = raw
            .split("```")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        ParsedOutput::calls(raw, text, calls)
    }

    fn format_instruction(&self, _tools: &[serde_json::Value]) -> Option<String> {
        Some("To compute something, write a Python program in a ```python code block; use print() for results. You will see its output.".into())
    }

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        let mut out = parsed.text.clone();
        for c in &parsed.tool_calls {
            out.push_str(&format!(
                "\n```python\n{}```",
                c.function.arguments["code"].as_str().unwrap_or_default()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::ParseStatus;

    #[test]
    fn code_blocks_are_python_calls() {
        let out =
            CodeBlockParser::default().parse("Compute it:\n```python\nprint(2**10)\n```\n", &[]);
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(
            out.tool_calls[0].function.arguments["code"],
            "print(2**10)\n"
        );
        assert_eq!(out.text, "Compute it:");
        assert_eq!(
            CodeBlockParser::default().parse("No code.", &[]).status,
            ParseStatus::NoTool
        );
    }
}
