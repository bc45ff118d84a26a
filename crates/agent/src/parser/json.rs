//! JSON answers checked against a schema.

use super::{fenced_blocks, OutputParser, ParsedOutput};
use crate::schema;
use serde_json::Value;

/// An answer that must be one JSON value (bare or fenced) valid against `schema`; the value
/// goes in [`ParsedOutput::data`].
#[derive(Debug, Clone)]
pub struct JsonParser {
    /// The JSON schema the answer must follow.
    pub schema: Value,
}

impl OutputParser for JsonParser {
    fn parse(&self, raw: &str, _tools: &[String]) -> ParsedOutput {
        let candidate = fenced_blocks(raw)
            .first()
            .map(|(_, b)| *b)
            .unwrap_or(raw)
            .trim();
        let value: Value = match serde_json::from_str(candidate) {
            Ok(v) => v,
            Err(e) => return ParsedOutput::error(raw, format!("not JSON: {e}")),
        };
        if let Err(e) = schema::validate(&value, &self.schema) {
            return ParsedOutput::error(raw, e);
        }
        let mut out = ParsedOutput::text(raw);
        out.data = Some(value);
        out
    }

    fn format_instruction(&self, _tools: &[Value]) -> Option<String> {
        Some(format!(
            "Answer with one JSON value that follows this JSON schema, and nothing else:\n{}",
            self.schema
        ))
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::parser::ParseStatus;
    use serde_json::json;

    #[test]
    fn checks_against_the_schema() -> TestResult {
        let p = JsonParser {
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        };
        let out = p.parse("```json\n{\"city\": \"Paris\"}\n```", &[]);
        assert_eq!(out.data, Some(json!({"city": "Paris"})));
        let out = p.parse("{\"town\": \"Paris\"}", &[]);
        assert_eq!(out.status, ParseStatus::ParsingError);
        assert!(out.error.ok_or("no error")?.contains("city"));
        assert_eq!(p.parse("Paris", &[]).status, ParseStatus::ParsingError);
        Ok(())
    }
}
