//! Aggregators turn an agent's memory into the chat messages the model reads.

mod internlm;

pub use internlm::InternLmAggregator;

use crate::message::AgentMessage;
use crate::parser::{OutputParser, ParseStatus, ParsedOutput};
use hearth_chat::ChatMessage;
use serde_json::Value;

/// Builds the chat messages of one model call from an agent's memory.
pub trait Aggregator: Send + Sync {
    /// `name` is the agent's own sender name; `system` its instruction.
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        tools: &[Value],
    ) -> Vec<ChatMessage>;
}

/// The agent's own messages → assistant, everyone else's → user; consecutive user messages
/// are joined into one turn.
#[derive(Debug, Clone, Default)]
pub struct DefaultAggregator;

fn push_user(out: &mut Vec<ChatMessage>, text: String) {
    match out.last_mut() {
        Some(last) if last.role == "user" => {
            let joined = format!("{}\n{}", last.text(), text);
            last.content = Some(joined);
        }
        _ => out.push(ChatMessage::user(text)),
    }
}

impl Aggregator for DefaultAggregator {
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        _parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        _tools: &[Value],
    ) -> Vec<ChatMessage> {
        let mut out = vec![];
        if let Some(s) = system {
            out.push(ChatMessage::system(s));
        }
        for m in memory {
            if m.sender == name {
                out.push(ChatMessage::assistant(m.text()));
            } else {
                push_user(&mut out, m.text());
            }
        }
        out
    }
}

/// System instruction, then example exchanges, then the history.
#[derive(Debug, Clone, Default)]
pub struct FewShotAggregator {
    /// (user, assistant) pairs.
    pub examples: Vec<(String, String)>,
}

impl Aggregator for FewShotAggregator {
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        tools: &[Value],
    ) -> Vec<ChatMessage> {
        let mut out = vec![];
        if let Some(s) = system {
            out.push(ChatMessage::system(s));
        }
        for (u, a) in &self.examples {
            out.push(ChatMessage::user(u.clone()));
            out.push(ChatMessage::assistant(a.clone()));
        }
        let history = DefaultAggregator.aggregate(memory, name, parser, None, tools);
        out.extend(history);
        out
    }
}

/// Messages around what another aggregator makes of the memory (lagent's system instruction
/// given as several messages, and few-shot exchanges with tool turns): `system` first, then
/// `inner`'s own system messages, then `examples` (assistant turns may carry tool calls, and
/// tool results follow them, as the chat template renders them), then the history.
pub struct Preamble {
    /// System messages before everything (a `name` in `extra` is kept: InternLM's
    /// `system name=<|plugin|>`).
    pub system: Vec<ChatMessage>,
    /// Example exchanges between the system messages and the history.
    pub examples: Vec<ChatMessage>,
    /// Makes the rest.
    pub inner: Box<dyn Aggregator>,
}

impl Aggregator for Preamble {
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        tools: &[Value],
    ) -> Vec<ChatMessage> {
        let rest = self.inner.aggregate(memory, name, parser, system, tools);
        let split = rest.iter().take_while(|m| m.role == "system").count();
        let mut out = self.system.clone();
        out.extend_from_slice(&rest[..split]);
        out.extend(self.examples.iter().cloned());
        out.extend_from_slice(&rest[split..]);
        out
    }
}

/// For tool-using agents: the parser's format instruction joins the system message; the
/// agent's turns carry their tool calls; turns that failed to parse are skipped; tool results
/// go back in the model's tool role.
#[derive(Debug, Clone, Default)]
pub struct ToolAggregator;

/// The `kind` of messages holding a tool's result.
pub const TOOL_RESULT: &str = "tool_result";

/// The `kind` of messages that go to the model as system messages where they stand (a
/// summary of older turns, knowledge for the next message).
pub const SYSTEM_NOTE: &str = "system_note";

impl Aggregator for ToolAggregator {
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        tools: &[Value],
    ) -> Vec<ChatMessage> {
        let mut out = vec![];
        let instruction = parser.and_then(|p| p.format_instruction(tools));
        let system = match (system, instruction) {
            (Some(s), Some(i)) => Some(format!("{s}\n\n{i}")),
            (Some(s), None) => Some(s.to_string()),
            (None, i) => i,
        };
        if let Some(s) = system {
            out.push(ChatMessage::system(s));
        }
        for m in memory {
            if m.kind.as_deref() == Some(SYSTEM_NOTE) {
                out.push(ChatMessage::system(m.text()));
            } else if m.kind.as_deref() == Some(TOOL_RESULT) {
                // Formats without a tool role (ReAct) write results as they read them.
                if let Some(text) = parser.and_then(|p| p.observation(&m.text())) {
                    push_user(&mut out, text);
                    continue;
                }
                let mut t = ChatMessage::tool(m.text());
                if let Some(id) = m
                    .extra_info
                    .as_ref()
                    .and_then(|e| e.get("id"))
                    .filter(|v| !v.is_null())
                {
                    t.extra.insert("tool_call_id".into(), id.clone());
                }
                out.push(t);
            } else if m.sender == name {
                let parsed = m
                    .formatted
                    .clone()
                    .and_then(|f| serde_json::from_value::<ParsedOutput>(f).ok());
                match parsed {
                    Some(p) if p.status == ParseStatus::ParsingError => continue,
                    Some(p) if !p.tool_calls.is_empty() => out.push(match parser {
                        Some(parser) => parser.assistant_turn(&p),
                        None => ChatMessage::assistant(p.text.clone())
                            .with_tool_calls(p.tool_calls.clone()),
                    }),
                    _ => out.push(ChatMessage::assistant(m.text())),
                }
            } else {
                push_user(&mut out, m.text());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::parser::QwenToolParser;
    use hearth_chat::ToolCall;
    use serde_json::json;

    fn bot(text: &str, formatted: Option<ParsedOutput>) -> AgentMessage {
        let mut m = AgentMessage::new("bot", text);
        m.formatted = formatted.and_then(|f| serde_json::to_value(f).ok());
        m
    }

    #[test]
    fn default_joins_users_and_maps_the_agent_to_assistant() -> TestResult {
        let mem = vec![
            AgentMessage::user("a"),
            AgentMessage::new("critic", "b"),
            bot("c", None),
            AgentMessage::user("d"),
        ];
        let out = DefaultAggregator.aggregate(&mem, "bot", None, Some("sys"), &[]);
        let roles: Vec<(&str, &str)> = out.iter().map(|m| (m.role.as_str(), m.text())).collect();
        assert_eq!(
            roles,
            [
                ("system", "sys"),
                ("user", "a\nb"),
                ("assistant", "c"),
                ("user", "d")
            ]
        );
        Ok(())
    }

    #[test]
    fn few_shot_puts_examples_before_history() -> TestResult {
        let agg = FewShotAggregator {
            examples: vec![("2+2?".into(), "4".into())],
        };
        let out = agg.aggregate(
            &[AgentMessage::user("3+3?")],
            "bot",
            None,
            Some("math"),
            &[],
        );
        let texts: Vec<&str> = out.iter().map(|m| m.text()).collect();
        assert_eq!(texts, ["math", "2+2?", "4", "3+3?"]);
        Ok(())
    }

    #[test]
    fn a_preamble_puts_system_messages_first_and_examples_before_the_history() -> TestResult {
        let mut plugin = ChatMessage::system("tools: calculator");
        plugin.extra.insert("name".into(), json!("plugin"));
        let call = ToolCall::new("calculator", json!({"expression": "2+2"}));
        let agg = Preamble {
            system: vec![ChatMessage::system("Be exact."), plugin],
            examples: vec![
                ChatMessage::user("2+2?"),
                ChatMessage::assistant(String::new()).with_tool_calls(vec![call]),
                ChatMessage::tool("4"),
                ChatMessage::assistant("4"),
            ],
            inner: Box::new(ToolAggregator),
        };
        let out = agg.aggregate(
            &[AgentMessage::user("3+3?")],
            "bot",
            None,
            Some("You add."),
            &[],
        );
        let texts: Vec<(&str, &str)> = out.iter().map(|m| (m.role.as_str(), m.text())).collect();
        assert_eq!(
            texts,
            [
                ("system", "Be exact."),
                ("system", "tools: calculator"),
                ("system", "You add."),
                ("user", "2+2?"),
                ("assistant", ""),
                ("tool", "4"),
                ("assistant", "4"),
                ("user", "3+3?")
            ]
        );
        assert_eq!(out[1].extra["name"], json!("plugin"));
        assert_eq!(out[4].tool_calls[0].function.name, "calculator");
        Ok(())
    }

    #[test]
    fn tool_aggregator_skips_parse_errors_and_uses_the_tool_role() -> TestResult {
        let p = QwenToolParser;
        let call = p.parse("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}</tool_call>", &[]);
        let mut result = AgentMessage::new("calculator", "2");
        result.kind = Some(TOOL_RESULT.into());
        result.extra_info = Some(json!({"id": "call_1"}));
        let mem = vec![
            AgentMessage::user("1+1?"),
            bot("<tool_call>{bad", Some(p.parse("<tool_call>{bad", &[]))),
            bot("raw", Some(call)),
            result,
            bot("2", Some(p.parse("2", &[]))),
        ];
        let out = ToolAggregator.aggregate(&mem, "bot", Some(&p), Some("You add."), &[]);
        let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
        assert_eq!(out[2].tool_calls[0].function.name, "calculator");
        assert_eq!(out[3].extra["tool_call_id"], json!("call_1"));
        Ok(())
    }
}
