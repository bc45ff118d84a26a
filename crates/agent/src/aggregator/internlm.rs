//! lagent's `InternLMToolAggregator`: InternLM2's history, where the model's own turns carry
//! their actions in its protocol and whatever is not the model's or a user's (tool results,
//! other agents) comes back in the `environment` role, named for the kind of tool that was
//! called last.

use super::{Aggregator, SYSTEM_NOTE};
use crate::message::AgentMessage;
use crate::parser::internlm::{write_action, InternLmParser};
use crate::parser::{OutputParser, ParseStatus, ParsedOutput};
use hearth_chat::ChatMessage;
use serde_json::Value;

/// InternLM2's history (lagent's `InternLMToolAggregator`).
#[derive(Debug, Clone)]
pub struct InternLmAggregator {
    /// The role of results (`environment`).
    pub environment_role: String,
    /// Written before each result.
    pub environment_begin: String,
    /// Written after each result.
    pub environment_end: String,
    /// Senders whose messages are user turns (`user`); any other sender's are results.
    pub user_names: Vec<String>,
    /// Example exchanges put before the history, in lagent's roles: `user`, `assistant`,
    /// `system`, `environment`, and `thought` (or `language`) followed by a `tool` step
    /// whose `name` is the tool type and whose content is the action as written.
    pub few_shot: Vec<Vec<ChatMessage>>,
}

impl Default for InternLmAggregator {
    fn default() -> Self {
        Self {
            environment_role: "environment".into(),
            environment_begin: String::new(),
            environment_end: String::new(),
            user_names: vec!["user".into()],
            few_shot: vec![],
        }
    }
}

fn named(mut m: ChatMessage, name: Option<&str>) -> ChatMessage {
    if let Some(n) = name {
        m.extra.insert("name".into(), n.into());
    }
    m
}

fn name_of(m: &ChatMessage) -> Option<&str> {
    m.extra.get("name").and_then(Value::as_str)
}

impl InternLmAggregator {
    fn environment(&self, text: &str, name: Option<&str>) -> ChatMessage {
        // Few-shot results already wrapped are not wrapped twice (as lagent).
        let mut content = text.to_string();
        if !content.starts_with(&self.environment_begin) {
            content.insert_str(0, &self.environment_begin);
        }
        if !content.ends_with(&self.environment_end) {
            content.push_str(&self.environment_end);
        }
        named(ChatMessage::new(&self.environment_role, content), name)
    }

    fn shot(&self, shot: &[ChatMessage], out: &mut Vec<ChatMessage>) {
        let mut i = 0;
        while i < shot.len() {
            let m = &shot[i];
            match m.role.as_str() {
                "user" | "assistant" | "system" => out.push(m.clone()),
                "thought" | "language" => match shot.get(i + 1).filter(|n| n.role == "tool") {
                    Some(tool) => {
                        let kind = name_of(tool).unwrap_or(crate::parser::internlm::PLUGIN);
                        let text = write_action(m.text(), kind, tool.text());
                        out.push(ChatMessage::assistant(text));
                        i += 1;
                    }
                    None => out.push(ChatMessage::assistant(m.text())),
                },
                r if r == self.environment_role => {
                    out.push(self.environment(m.text(), name_of(m)));
                }
                // An unknown role in an example goes in as written; the template decides.
                _ => out.push(m.clone()),
            }
            i += 1;
        }
    }
}

impl Aggregator for InternLmAggregator {
    fn aggregate(
        &self,
        memory: &[AgentMessage],
        name: &str,
        parser: Option<&dyn OutputParser>,
        system: Option<&str>,
        tools: &[Value],
    ) -> Vec<ChatMessage> {
        let fallback = InternLmParser::default();
        let parser = parser.unwrap_or(&fallback);
        let mut out = vec![];
        if let Some(s) = system.filter(|s| !s.is_empty()) {
            out.push(ChatMessage::system(s));
        }
        out.extend(parser.instruction_messages(tools));
        for shot in &self.few_shot {
            self.shot(shot, &mut out);
        }
        let mut tool_type: Option<String> = None;
        for m in memory {
            if m.kind.as_deref() == Some(SYSTEM_NOTE) {
                out.push(ChatMessage::system(m.text()));
            } else if m.sender == name {
                let parsed = m
                    .formatted
                    .clone()
                    .and_then(|f| serde_json::from_value::<ParsedOutput>(f).ok());
                match parsed {
                    Some(p) if p.status == ParseStatus::ParsingError => continue,
                    Some(p) => {
                        tool_type = p.tool_calls.first().and_then(|c| parser.tool_type(c));
                        out.push(parser.assistant_turn(&p));
                    }
                    None => out.push(ChatMessage::assistant(m.text())),
                }
            } else if self.user_names.contains(&m.sender) {
                out.push(ChatMessage::user(m.text()));
            } else {
                out.push(self.environment(&m.text(), tool_type.as_deref()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::TOOL_RESULT;

    #[test]
    fn results_go_to_the_environment_named_for_the_last_tool_type() {
        let p = InternLmParser::plugin();
        let raw = "Computing.<|action_start|><|plugin|>\n{\"name\": \"calc\", \"parameters\": {\"x\": 1}}<|action_end|>\n";
        let mut call = AgentMessage::new("bot", raw);
        call.formatted = serde_json::to_value(p.parse(raw, &[])).ok();
        let mut result = AgentMessage::new("calc", "2");
        result.kind = Some(TOOL_RESULT.into());
        let mut broken = AgentMessage::new("bot", "<|action_start|><|plugin|>\n{");
        broken.formatted = serde_json::to_value(p.parse("<|action_start|><|plugin|>\n{", &[])).ok();
        let mem = vec![AgentMessage::user("1+1?"), broken, call, result];
        let out = InternLmAggregator::default().aggregate(&mem, "bot", Some(&p), None, &[]);
        let roles: Vec<(&str, Option<&str>)> =
            out.iter().map(|m| (m.role.as_str(), name_of(m))).collect();
        assert_eq!(
            roles,
            [
                ("user", None),
                ("assistant", None),
                ("environment", Some("plugin"))
            ]
        );
        assert_eq!(out[1].text(), raw);
        assert_eq!(out[2].text(), "2");
    }

    #[test]
    fn few_shot_thoughts_and_tools_become_one_assistant_turn() {
        let mut tool = ChatMessage::new("tool", "print(1)");
        tool.extra.insert("name".into(), "interpreter".into());
        let agg = InternLmAggregator {
            environment_begin: "<r>".into(),
            environment_end: "</r>".into(),
            few_shot: vec![vec![
                ChatMessage::user("run it"),
                ChatMessage::new("thought", "Running."),
                tool,
                named(ChatMessage::new("environment", "<r>1"), Some("interpreter")),
                ChatMessage::new("thought", "It printed 1."),
            ]],
            ..InternLmAggregator::default()
        };
        // No instruction text: only the example.
        let p = InternLmParser {
            interpreter: Some(String::new()),
            ..InternLmParser::interpreter()
        };
        let out = agg.aggregate(&[], "bot", Some(&p), None, &[]);
        let texts: Vec<&str> = out.iter().map(|m| m.text()).collect();
        assert_eq!(
            texts,
            [
                "run it",
                "Running.<|action_start|><|interpreter|>\nprint(1)<|action_end|>\n",
                "<r>1</r>",
                "It printed 1."
            ]
        );
    }
}
