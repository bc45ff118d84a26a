//! ReAct: `Thought:` / `Action:` / `Action Input:` lines, and `Final Answer:`.

use super::{OutputParser, ParsedOutput};
use hearth_chat::{ChatMessage, ToolCall};
use serde_json::{json, Value};

/// ReAct's `Thought:` / `Action:` / `Action Input:` lines, ended by `Final Answer:`.
#[derive(Debug, Clone, Default)]
pub struct ReActParser;

fn after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.rfind(key).map(|i| &text[i + key.len()..])
}

impl OutputParser for ReActParser {
    fn parse(&self, raw: &str, _tools: &[String]) -> ParsedOutput {
        if let Some(answer) = after(raw, "Final Answer:") {
            let mut out = ParsedOutput::text(raw);
            out.text = answer.trim().to_string();
            return out;
        }
        let Some(action) = after(raw, "Action:") else {
            return ParsedOutput::text(raw);
        };
        let name = action.lines().next().unwrap_or_default().trim().to_string();
        if name.is_empty() {
            return ParsedOutput::error(raw, "`Action:` names no tool");
        }
        let input = after(raw, "Action Input:")
            .map(|s| s.split("Observation:").next().unwrap_or(s).trim())
            .unwrap_or("");
        let args = match serde_json::from_str::<Value>(input) {
            Ok(v @ Value::Object(_)) => v,
            Ok(other) => json!({"input": other}),
            Err(_) if input.is_empty() => json!({}),
            Err(_) => json!({"input": input}),
        };
        let thought = raw.split("Action:").next().unwrap_or_default();
        let thought = thought
            .trim()
            .trim_start_matches("Thought:")
            .trim()
            .to_string();
        ParsedOutput::calls(raw, thought, vec![ToolCall::new(name, args)])
    }

    fn format_instruction(&self, tools: &[Value]) -> Option<String> {
        let list: Vec<String> = tools
            .iter()
            .map(|t| {
                let f = t.get("function").unwrap_or(t);
                format!(
                    "{}: {} Arguments: {}",
                    f["name"].as_str().unwrap_or("?"),
                    f["description"].as_str().unwrap_or(""),
                    f["parameters"]
                )
            })
            .collect();
        let names: Vec<&str> = tools
            .iter()
            .filter_map(|t| t.get("function").unwrap_or(t)["name"].as_str())
            .collect();
        Some(format!(
            "You can use these tools:\n{}\n\nUse this format:\nThought: what to do next\nAction: one of [{}]\nAction Input: the arguments as a JSON object\nObservation: the result (given to you)\n... (repeat Thought/Action/Action Input/Observation as needed)\nThought: I know the final answer\nFinal Answer: the answer",
            list.join("\n"),
            names.join(", ")
        ))
    }

    fn format_response(&self, parsed: &ParsedOutput) -> String {
        match parsed.tool_calls.first() {
            Some(c) => format!(
                "Thought: {}\nAction: {}\nAction Input: {}",
                parsed.text, c.function.name, c.function.arguments
            ),
            None => format!(
                "Thought: I know the final answer\nFinal Answer: {}",
                parsed.text
            ),
        }
    }

    fn stop_words(&self) -> Vec<String> {
        vec!["Observation:".into()]
    }

    fn correction(&self, error: &str) -> String {
        format!(
            "Your action could not be read ({error}). Write it again as\nAction: the tool's name\nAction Input: the arguments as a JSON object\nor give the Final Answer."
        )
    }

    /// The model's own words: no chat template renders ReAct calls.
    fn assistant_turn(&self, parsed: &ParsedOutput) -> ChatMessage {
        ChatMessage::assistant(parsed.raw.trim())
    }

    fn observation(&self, result: &str) -> Option<String> {
        Some(format!("Observation: {result}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::ParseStatus;

    #[test]
    fn actions_and_final_answers() {
        let p = ReActParser;
        let out = p.parse(
            "Thought: multiply\nAction: calculator\nAction Input: {\"expression\": \"6*7\"}",
            &[],
        );
        assert_eq!(out.status, ParseStatus::ValidTool);
        assert_eq!(out.text, "multiply");
        assert_eq!(out.tool_calls[0].function.arguments["expression"], "6*7");
        let out = p.parse("Thought: done\nFinal Answer: 42", &[]);
        assert_eq!((out.status, out.text.as_str()), (ParseStatus::NoTool, "42"));
        let out = p.parse("Action: search\nAction Input: rust candle", &[]);
        assert_eq!(
            out.tool_calls[0].function.arguments,
            json!({"input": "rust candle"})
        );
        assert_eq!(p.parse("Action:\n", &[]).status, ParseStatus::ParsingError);
        assert!(p.format_response(&out).starts_with("Thought: "));
    }
}
