//! Several parsers in order: the first that finds a tool call wins.

use super::{OutputParser, ParseStatus, ParsedOutput};
use serde_json::Value;

/// Several parsers tried in order; the first that reads a tool call wins.
pub struct MixedParser {
    /// The parsers, in order.
    pub parsers: Vec<Box<dyn OutputParser>>,
}

impl MixedParser {
    /// The first reading that finds a call, else the first parser's reading.
    fn first_call(
        &self,
        raw: &str,
        read: impl Fn(&dyn OutputParser) -> ParsedOutput,
    ) -> ParsedOutput {
        let mut first = None;
        for p in &self.parsers {
            let out = read(p.as_ref());
            if out.status == ParseStatus::ValidTool {
                return out;
            }
            first.get_or_insert(out);
        }
        first.unwrap_or_else(|| ParsedOutput::text(raw))
    }
}

impl OutputParser for MixedParser {
    fn parse(&self, raw: &str, tools: &[String]) -> ParsedOutput {
        self.first_call(raw, |p| p.parse(raw, tools))
    }

    fn parse_with_specs(&self, raw: &str, specs: &[Value]) -> ParsedOutput {
        self.first_call(raw, |p| p.parse_with_specs(raw, specs))
    }

    fn format_instruction(&self, tools: &[Value]) -> Option<String> {
        let parts: Vec<String> = self
            .parsers
            .iter()
            .filter_map(|p| p.format_instruction(tools))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    fn visible_prefix(&self, text: &str) -> usize {
        self.parsers
            .iter()
            .map(|p| p.visible_prefix(text))
            .min()
            .unwrap_or(text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{CodeBlockParser, QwenToolParser};

    #[test]
    fn first_match_wins() {
        let p = MixedParser {
            parsers: vec![
                Box::new(QwenToolParser),
                Box::new(CodeBlockParser::default()),
            ],
        };
        let out = p.parse("```python\nprint(1)\n```", &[]);
        assert_eq!(out.tool_calls[0].function.name, "python");
        let out = p.parse(
            "<tool_call>{\"name\": \"calculator\", \"arguments\": {}}</tool_call>",
            &[],
        );
        assert_eq!(out.tool_calls[0].function.name, "calculator");
        assert_eq!(p.parse("plain", &[]).status, ParseStatus::NoTool);
    }
}
