//! lagent's `ToolParser` with its settings: the action is what stands between a `begin` and
//! an `end` marker after the thought (lagent's README example: `begin="```python\n"`,
//! `end="\n```\n"` for code), of one `tool_type`; validated as a JSON call, or passed as
//! text to one tool.

use super::{OutputParser, ParsedOutput};
use hearth_chat::{PyJson, ToolCall};
use serde_json::{json, Map, Value};

/// What the text between the markers is.
#[derive(Debug, Clone, PartialEq)]
pub enum TaggedAction {
    /// A JSON object `{"name": …, "parameters": {…}}` naming the tool (lagent's JSON
    /// validation); anything else is a parse error.
    Json,
    /// Text for `tool`, passed as its argument `argument` (code for an interpreter).
    Text {
        /// The tool called.
        tool: String,
        /// Its argument that takes the text.
        argument: String,
    },
}

/// Actions between two markers (lagent's `ToolParser`).
#[derive(Debug, Clone)]
pub struct TaggedToolParser {
    /// The kind of tool its actions call (lagent's `tool_type`), under which results are
    /// sent back.
    pub tool_type: String,
    /// Opens an action (`<tool>\n` by default).
    pub begin: String,
    /// Closes it (`</tool>\n`); a missing end (the model stopped on it) is fine.
    pub end: String,
    /// How the action is read.
    pub action: TaggedAction,
    /// The instruction for the system prompt, if any.
    pub instruction: Option<String>,
}

/// An action written as `{"name": …, "parameters": {…}}` (lagent's JSON validation: an
/// object and nothing around it; `arguments` is read too), as a call.
pub(super) fn json_action(action: &str) -> Result<ToolCall, String> {
    let action = action.trim();
    if !(action.starts_with('{') && action.ends_with('}')) {
        return Err("the action is not a JSON object".into());
    }
    let value: Value = serde_json::from_str(action).map_err(|e| format!("the action: {e}"))?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or("the action has no `name`")?;
    let params = match value.get("parameters").or_else(|| value.get("arguments")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err("the action's `parameters` is not an object".into()),
    };
    Ok(ToolCall::new(name, params))
}

/// How much of streamed `text` may be shown while an action could begin at `marker`: up to
/// the marker, or up to what could be its start at the end.
pub(super) fn shown_before(text: &str, marker: &str) -> usize {
    if marker.is_empty() {
        return text.len();
    }
    if let Some(i) = text.find(marker) {
        return i;
    }
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n)
                && marker.is_char_boundary(n)
                && text.ends_with(&marker[..n])
        })
        .map_or(text.len(), |n| text.len() - n)
}

impl TaggedToolParser {
    /// JSON calls between lagent's default markers, `<tool>\n` and `</tool>\n`.
    pub fn new(tool_type: impl Into<String>) -> Self {
        Self {
            tool_type: tool_type.into(),
            begin: "<tool>\n".into(),
            end: "</tool>\n".into(),
            action: TaggedAction::Json,
            instruction: None,
        }
    }

    /// Sets the markers.
    pub fn with_markers(mut self, begin: impl Into<String>, end: impl Into<String>) -> Self {
        self.begin = begin.into();
        self.end = end.into();
        self
    }

    /// The action's text goes to `tool` as its `argument`.
    pub fn with_text_for(mut self, tool: impl Into<String>, argument: impl Into<String>) -> Self {
        self.action = TaggedAction::Text {
            tool: tool.into(),
            argument: argument.into(),
        };
        self
    }

    /// Sets the instruction.
    pub fn with_instruction(mut self, text: impl Into<String>) -> Self {
        self.instruction = Some(text.into());
        self
    }

    /// The end marker without the whitespace around it: what a model that stopped early
    /// or wrote no newline still writes.
    fn end_marker(&self) -> &str {
        match self.end.trim() {
            "" => &self.end,
            t => t,
        }
    }
}

impl OutputParser for TaggedToolParser {
    fn parse(&self, raw: &str, _tools: &[String]) -> ParsedOutput {
        let Some((thought, rest)) = raw
            .split_once(&self.begin)
            .filter(|_| !self.begin.is_empty())
        else {
            return ParsedOutput::text(raw);
        };
        let action = match self.end_marker() {
            "" => rest,
            end => rest.split(end).next().unwrap_or_default(),
        };
        let call = match &self.action {
            TaggedAction::Text { tool, argument } => {
                let text = action.strip_suffix('\n').unwrap_or(action);
                ToolCall::new(tool.clone(), json!({ argument.clone(): text }))
            }
            TaggedAction::Json => match json_action(action) {
                Ok(call) => call,
                Err(e) => return ParsedOutput::error(raw, e),
            },
        };
        ParsedOutput::calls(raw, thought.to_string(), vec![call])
    }

    fn format_instruction(&self, _tools: &[Value]) -> Option<String> {
        self.instruction.clone()
    }

    fn tool_type(&self, _call: &ToolCall) -> Option<String> {
        Some(self.tool_type.clone())
    }

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        let Some(call) = parsed.tool_calls.first() else {
            return parsed.text.clone();
        };
        let action = match &self.action {
            TaggedAction::Text { argument, .. } => match &call.function.arguments[argument] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            },
            TaggedAction::Json => PyJson::default()
                .dumps(&json!({"name": call.function.name, "parameters": call.function.arguments})),
        };
        format!("{}{}{action}{}", parsed.text, self.begin, self.end)
    }

    fn visible_prefix(&self, text: &str) -> usize {
        shown_before(text, &self.begin)
    }

    fn correction(&self, error: &str) -> String {
        format!(
            "Your action could not be read ({error}). Write it again between {:?} and {:?}, or answer directly.",
            self.begin, self.end
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::ParseStatus;

    #[test]
    fn lagents_readme_code_parser() {
        // ToolParser(tool_type='code interpreter', begin='```python\n', end='\n```\n')
        let p = TaggedToolParser::new("code interpreter")
            .with_markers("```python\n", "\n```\n")
            .with_text_for("python", "code");
        let raw = "Let me compute.\n```python\nprint(2 ** 10)\n```\n";
        let out = p.parse(raw, &[]);
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.text, "Let me compute.\n");
        assert_eq!(out.tool_calls[0].function.name, "python");
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"code": "print(2 ** 10)"})
        );
        assert_eq!(p.format_response(&out), raw);
        assert_eq!(
            p.tool_type(&out.tool_calls[0]).as_deref(),
            Some("code interpreter")
        );
        assert_eq!(
            p.parse("No code needed: 1024.", &[]).status,
            ParseStatus::NoTool
        );
        assert_eq!(
            p.visible_prefix("Let me compute.\n```py"),
            "Let me compute.\n".len()
        );
    }

    #[test]
    fn json_actions_are_validated() {
        let p = TaggedToolParser::new("plugin");
        let ok = p.parse("<tool>\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1+1\"}}</tool>\n", &[]);
        assert_eq!(
            ok.tool_calls[0].function.arguments,
            json!({"expression": "1+1"})
        );
        assert_eq!(
            p.format_response(&ok),
            "<tool>\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1+1\"}}</tool>\n"
        );
        for bad in [
            "<tool>\nnot json</tool>",
            "<tool>\n{\"parameters\": {}}</tool>",
            "<tool>\n{\"name\": \"x\"",
        ] {
            assert_eq!(p.parse(bad, &[]).status, ParseStatus::ParsingError, "{bad}");
        }
    }
}
