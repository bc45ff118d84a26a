//! lagent's `ActionExecutor` as an agent of its own: given a message that holds a parsed
//! action (an agent's answer read by its output parser, or `{"name", "parameters"}`), it runs
//! the tools and answers with their results, so a `Sequential` of a model agent and an
//! executor is a tool loop built by hand. As in lagent, a call of the finishing action ends
//! with its response, a turn without an action gets the no-action reminder, and a call of no
//! known tool the invalid-action one.

use crate::agent::Agent;
use crate::aggregator::TOOL_RESULT;
use crate::error::Result;
use crate::hooks::{Hook, Hooks};
use crate::message::{ActionStatusCode, ActionValidCode, AgentMessage};
use crate::parser::ParsedOutput;
use crate::run::tool_agent::ToolExecutor;
use crate::tool::{ToolRegistry, ToolResult};
use crate::tool_context::ToolContext;
use async_trait::async_trait;
use hearth_chat::ToolCall;
use serde_json::{json, Value};
use std::sync::Arc;

/// lagent's `NoAction` message.
pub const NO_ACTION: &str = "Please follow the format";
/// lagent's `InvalidAction` message.
pub const INVALID_ACTION: &str = "The action is invalid, please check the action name.";

/// Runs the action a message holds (see the module docs).
pub struct ActionExecutor {
    /// Sender name of its results (`ActionExecutor`).
    pub name: String,
    /// The tools it runs.
    pub tools: ToolRegistry,
    /// The finishing action's name (`FinishAction`): a call of it answers with its
    /// `response` argument.
    pub finish_action: String,
    /// Said when the message holds no action.
    pub no_action: String,
    /// Said when it calls no known tool.
    pub invalid_action: String,
    /// Run around each call (`before_action` / `after_action`).
    pub hooks: Hooks,
}

impl ActionExecutor {
    /// An executor of `tools` with lagent's defaults.
    pub fn new(tools: ToolRegistry) -> Self {
        Self {
            name: "ActionExecutor".into(),
            tools,
            finish_action: "FinishAction".into(),
            no_action: NO_ACTION.into(),
            invalid_action: INVALID_ACTION.into(),
            hooks: Hooks::new(),
        }
    }

    /// The calls `message` holds: its parsed tool calls, or its content as one
    /// `{"name", "parameters"}` call.
    fn calls(message: &AgentMessage) -> Vec<ToolCall> {
        if let Some(parsed) = message
            .formatted
            .clone()
            .and_then(|f| serde_json::from_value::<ParsedOutput>(f).ok())
        {
            return parsed.tool_calls;
        }
        match (&message.content["name"], &message.content["parameters"]) {
            (Value::String(name), params) => {
                let params = if params.is_null() {
                    json!({})
                } else {
                    params.clone()
                };
                vec![ToolCall::new(name.clone(), params)]
            }
            _ => vec![],
        }
    }

    fn answer(
        &self,
        text: String,
        status: ActionStatusCode,
        valid: ActionValidCode,
    ) -> AgentMessage {
        let mut m = AgentMessage::new(self.name.clone(), text);
        m.kind = Some(TOOL_RESULT.into());
        m.extra_info = Some(json!({ "state": status, "valid": valid }));
        m
    }
}

#[async_trait]
impl Agent for ActionExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        self.hooks.snapshot()
    }

    /// Runs the calls of the last message; one result message for all of them (its content
    /// the result's text, or with several calls a list of `{name, content, state}`).
    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage> {
        let calls = history.last().map(Self::calls).unwrap_or_default();
        if calls.is_empty() {
            let text = self.no_action.clone();
            return Ok(self.answer(text, ActionStatusCode::ApiError, ActionValidCode::Absent));
        }
        if let Some(finish) = calls.iter().find(|c| c.function.name == self.finish_action) {
            let response = match &finish.function.arguments["response"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            return Ok(self.answer(response, ActionStatusCode::Success, ActionValidCode::Finish));
        }
        let context = ToolContext {
            session: session.to_string(),
            agent: self.name.clone(),
            ..ToolContext::default()
        };
        let hooks = self.hooks.snapshot();
        // With the tools of its sources (MCP servers) as they are now.
        let registry = self.tools.resolved();
        // The known tools' calls run as the tool loop runs a round (ids, hooks, together);
        // the others are invalid actions, in their places.
        let known: Vec<ToolCall> = calls
            .iter()
            .filter(|c| registry.get(&c.function.name).is_some())
            .cloned()
            .collect();
        let (_, ran) =
            ToolExecutor::execute(&registry, known, 1, (&context, &hooks), &|_| {}).await;
        let mut ran = ran.into_iter();
        let results: Vec<(String, Option<ToolResult>)> = calls
            .into_iter()
            .map(|c| match registry.get(&c.function.name) {
                Some(_) => (c.function.name, ran.next()),
                None => (c.function.name, None),
            })
            .collect();
        if let [(_, one)] = results.as_slice() {
            return Ok(match one {
                None => self.answer(
                    self.invalid_action.clone(),
                    ActionStatusCode::ApiError,
                    ActionValidCode::Invalid,
                ),
                Some(r) => {
                    let mut m = self.answer(r.for_model(), r.status, ActionValidCode::Open);
                    if let Some(info) = m.extra_info.as_mut() {
                        info["id"] = json!(r.id);
                        info["tool"] = json!(r.name);
                    }
                    m
                }
            });
        }
        let list: Vec<Value> = results
            .iter()
            .map(|(name, r)| match r {
                None => json!({"name": name, "content": self.invalid_action, "state": ActionStatusCode::ApiError}),
                Some(r) => json!({"name": name, "content": r.for_model(), "state": r.status}),
            })
            .collect();
        let all_ok = results
            .iter()
            .all(|(_, r)| r.as_ref().is_some_and(ToolResult::ok));
        let status = if all_ok {
            ActionStatusCode::Success
        } else {
            ActionStatusCode::ApiError
        };
        let mut m = self.answer(String::new(), status, ActionValidCode::Open);
        m.content = Value::Array(list);
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{LlmAgent, Sequential};
    use crate::llm::ScriptedLlm;
    use crate::parser::QwenToolParser;
    use crate::tools::registry;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    fn executor() -> std::result::Result<ActionExecutor, Box<dyn std::error::Error + Send + Sync>> {
        Ok(ActionExecutor::new(registry(&["calculator".into()], None)?))
    }

    fn valid(m: &AgentMessage) -> Value {
        m.extra_info
            .as_ref()
            .map_or(Value::Null, |i| i["valid"].clone())
    }

    #[tokio::test]
    async fn a_parsed_call_runs_and_its_result_comes_back() -> TestResult {
        let mut agent = LlmAgent::new(
            "bot",
            Arc::new(ScriptedLlm::new([
                "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}</tool_call>",
            ])),
            None,
        );
        agent.parser = Some(Box::new(QwenToolParser));
        let pipe = Sequential {
            name: "loop".into(),
            agents: vec![
                ("model".into(), Box::new(agent)),
                ("tools".into(), Box::new(executor()?)),
            ],
            exit_at: None,
        };
        let out = pipe.call(vec!["6*7?".into()], "s").await?;
        assert_eq!(out.sender, "ActionExecutor");
        assert_eq!(out.text(), "42");
        assert_eq!(out.kind.as_deref(), Some(TOOL_RESULT));
        assert_eq!(valid(&out), json!(0));
        Ok(())
    }

    #[tokio::test]
    async fn finish_no_action_and_invalid_action_answer_as_lagent() -> TestResult {
        let ex = executor()?;
        let finish = AgentMessage::new(
            "bot",
            json!({"name": "FinishAction", "parameters": {"response": "done"}}),
        );
        let out = ex.call(vec![finish], "s").await?;
        assert_eq!((out.text(), valid(&out)), ("done".to_string(), json!(1)));

        let out = ex
            .call(vec![AgentMessage::new("bot", "just talk")], "s")
            .await?;
        assert_eq!(
            (out.text(), valid(&out)),
            (NO_ACTION.to_string(), json!(-3))
        );

        let unknown = AgentMessage::new("bot", json!({"name": "teleport", "parameters": {}}));
        let out = ex.call(vec![unknown], "s").await?;
        assert_eq!(
            (out.text(), valid(&out)),
            (INVALID_ACTION.to_string(), json!(-2))
        );
        Ok(())
    }

    #[tokio::test]
    async fn several_calls_answer_with_a_list() -> TestResult {
        let parsed = ParsedOutput::calls(
            "",
            String::new(),
            vec![
                ToolCall::new("calculator", json!({"expression": "1+1"})),
                ToolCall::new("calculator", json!({"expression": "nope("})),
                ToolCall::new("teleport", json!({})),
            ],
        );
        let mut m = AgentMessage::new("bot", "");
        m.formatted = Some(serde_json::to_value(parsed)?);
        let out = executor()?.call(vec![m], "s").await?;
        let list = out.content.as_array().ok_or("not a list")?;
        assert_eq!(list.len(), 3);
        assert_eq!(list[0]["content"], "2");
        assert_eq!(list[2]["content"], INVALID_ACTION);
        assert_eq!(out.extra_info.ok_or("no info")?["state"], json!(-1002));
        Ok(())
    }
}
