//! InternLM2's action protocol against lagent (golden from `fixtures/internlm_golden.py`):
//! the same answers read as the same actions, the same histories rendered as the same prompt.

use hearth_agent::aggregator::{Aggregator, InternLmAggregator, TOOL_RESULT};
use hearth_agent::parser::internlm::{self, InternLmParser};
use hearth_agent::parser::{OutputParser, ParseStatus};
use hearth_agent::AgentMessage;
use hearth_engine::chat::MetaTemplate;
use serde_json::{json, Value};
use std::path::Path;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn golden() -> Result<Value, Box<dyn std::error::Error>> {
    let text = include_str!("fixtures/internlm-golden.json");
    Ok(serde_json::from_str(text)?)
}

/// The parser as lagent 0.2.4 names the code action's tool.
fn parser(g: &Value, interpreter: bool) -> InternLmParser {
    InternLmParser {
        interpreter_tool: g["interpreter_tool"].as_str().unwrap_or_default().into(),
        code_parameter: "command".into(),
        interpreter: interpreter.then(|| internlm::INTERPRETER_CN.to_string()),
        ..InternLmParser::default()
    }
}

#[test]
fn the_instructions_are_lagents() -> TestResult {
    let g = golden()?;
    assert_eq!(g["constants"]["META_CN"], internlm::META_CN);
    assert_eq!(g["constants"]["PLUGIN_CN"], internlm::PLUGIN_CN);
    assert_eq!(g["constants"]["INTERPRETER_CN"], internlm::INTERPRETER_CN);
    Ok(())
}

#[test]
fn answers_read_as_lagent_reads_them() -> TestResult {
    let g = golden()?;
    let p = parser(&g, true);
    let cases = g["parse"].as_array().ok_or("no parse cases")?;
    assert!(cases.len() >= 10);
    for case in cases {
        let text = case["text"].as_str().ok_or("text")?;
        let out = p.parse(text, &[]);
        if case["error"] == true {
            assert_eq!(out.status, ParseStatus::ParsingError, "{text:?}");
            continue;
        }
        match case["tool_type"].as_str() {
            None => {
                assert_eq!(out.status, ParseStatus::NoTool, "{text:?}");
                assert_eq!(out.text, case["thought"].as_str().ok_or("thought")?.trim());
            }
            Some(kind) => {
                assert_eq!(out.status, ParseStatus::ValidTool, "{text:?}");
                assert_eq!(out.text, case["thought"], "thought of {text:?}");
                let call = &out.tool_calls[0];
                assert_eq!(p.tool_type(call).as_deref(), Some(kind), "{text:?}");
                assert_eq!(call.function.name, case["action"]["name"], "{text:?}");
                let params = match &case["action"]["parameters"] {
                    Value::Null => json!({}),
                    v => v.clone(),
                };
                assert_eq!(call.function.arguments, params, "{text:?}");
            }
        }
    }
    Ok(())
}

#[test]
fn histories_render_as_lagent_renders_them() -> TestResult {
    let g = golden()?;
    let template = MetaTemplate::from_toml(
        include_str!("../../engine/templates/internlm2.toml"),
        Path::new("internlm2.toml"),
    )?;
    for case in g["render"].as_array().ok_or("no render cases")? {
        let p = parser(&g, case["interpreter"] == true);
        let mut memory = vec![];
        for turn in case["turns"].as_array().ok_or("turns")? {
            if let Some(text) = turn["user"].as_str() {
                memory.push(AgentMessage::user(text));
            } else if let Some(text) = turn["model"].as_str() {
                let mut m = AgentMessage::new("bot", text);
                m.formatted = Some(serde_json::to_value(p.parse(text, &[]))?);
                memory.push(m);
            } else {
                let sender = turn["sender"].as_str().ok_or("sender")?;
                let mut m = AgentMessage::new(sender, turn["result"].as_str().ok_or("result")?);
                m.kind = Some(TOOL_RESULT.into());
                memory.push(m);
            }
        }
        let tools = case["tools"].as_array().ok_or("tools")?;
        let messages = InternLmAggregator::default().aggregate(
            &memory,
            "bot",
            Some(&p),
            case["system"].as_str(),
            tools,
        );
        let prompt = template.render(&messages, true)?;
        assert_eq!(
            prompt,
            case["prompt"].as_str().ok_or("prompt")?,
            "{}",
            case["name"]
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_tool_loop_runs_internlm_actions() -> TestResult {
    use hearth_agent::run::tool_agent::RunOptions;
    use hearth_agent::tools::registry;
    use hearth_agent::{ScriptedLlm, StopReason, ToolAgent};
    use std::sync::Arc;

    let llm = ScriptedLlm::new([
        // The stop word ends the action: the engine hands back the text before it.
        "Let me add.<|action_start|><|plugin|>\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1234 * 5678\"}}",
        "1234 * 5678 = 7006652.",
    ]);
    let tools = registry(&["calculator".into()], None)?;
    let mut agent = ToolAgent::new(Arc::new(llm.clone()), tools);
    agent.llm_agent.parser = Some(Box::new(InternLmParser::plugin()));
    agent.llm_agent.aggregator = Box::new(InternLmAggregator::default());
    let run = agent
        .run("What is 1234 * 5678?", "s", RunOptions::default(), None)
        .await?;
    assert_eq!(run.stop_reason, StopReason::Answer);
    assert_eq!(run.answer, "1234 * 5678 = 7006652.");
    assert_eq!(run.tool_calls[0].content, "7006652");

    let first = &llm.requests()[0];
    assert!(
        first.tools.is_empty(),
        "the plugin message lists the tools, not the template"
    );
    assert!(first
        .stop
        .as_ref()
        .is_some_and(|s| s.iter().any(|w| w == internlm::ACTION_END)));
    let second = &llm.requests()[1];
    let roles: Vec<(&str, Option<&str>)> = second
        .messages
        .iter()
        .map(|m| (m.role.as_str(), m.extra.get("name").and_then(Value::as_str)))
        .collect();
    assert_eq!(
        roles,
        [
            ("system", None),
            ("system", Some("plugin")),
            ("user", None),
            ("assistant", None),
            ("environment", Some("plugin"))
        ]
    );
    assert!(second.messages[1].text().contains("\"calculator\""));
    assert_eq!(
        second.messages[3].text(),
        "Let me add.<|action_start|><|plugin|>\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"1234 * 5678\"}}<|action_end|>\n"
    );
    assert_eq!(second.messages[4].text(), "7006652");
    Ok(())
}
