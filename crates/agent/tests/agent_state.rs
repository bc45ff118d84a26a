//! ToolAgent's state: memory and summary in the state dict, restored into a fresh agent,
//! forgotten by reset (which also releases the engine's KV session); hooks around the turn
//! and around each tool call, removable by their handles.

use hearth_agent::hooks::Hook;
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::tools::registry;
use hearth_agent::{Agent, AgentMessage, ScriptedLlm, ToolAgent, ToolCall, ToolResult};
use serde_json::json;
use std::sync::{Arc, Mutex};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn calc_call(expr: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"calculator\", \"arguments\": {{\"expression\": \"{expr}\"}}}}\n</tool_call>")
}

fn agent(script: Vec<String>) -> Result<(ToolAgent, ScriptedLlm), String> {
    let llm = ScriptedLlm::new(script);
    let tools = registry(&["calculator".into()], None)?;
    Ok((ToolAgent::new(Arc::new(llm.clone()), tools), llm))
}

#[tokio::test]
async fn state_dict_round_trips_memory_and_summary() -> TestResult {
    // A window of 2 messages: the third turn summarises the first.
    let (mut a, llm) = agent(vec![
        "one".into(),
        "two".into(),
        "SUMMARY: asked one".into(),
        "three".into(),
    ])?;
    a.history_window = 2;
    for t in ["first", "second", "third"] {
        a.run(t, "s", RunOptions::default(), None).await?;
    }
    let state = a.state_dict("s");
    let keys: Vec<&String> = state.keys().collect();
    assert_eq!(keys, ["memory", "summary"]);
    assert_eq!(state["memory"].as_array().ok_or("memory")?.len(), 6);
    assert_eq!(
        state["summary"],
        json!({"covers": 2, "text": "SUMMARY: asked one"})
    );

    // A fresh agent restored from it uses the summary instead of making it again (a window
    // of 4 over 6 messages needs the summary of the oldest 2, which the state holds).
    let (mut b, fresh) = agent(vec!["four".into()])?;
    b.history_window = 4;
    b.load_state_dict("s", &state)?;
    assert_eq!(b.state_dict("s"), state);
    b.run("fourth", "s", RunOptions::default(), None).await?;
    let req = &fresh.requests()[0];
    let texts: Vec<&str> = req.messages.iter().map(|m| m.text()).collect();
    assert!(
        texts.iter().any(|t| t.contains("SUMMARY: asked one")),
        "the restored summary reached the prompt: {texts:?}"
    );
    assert_eq!(fresh.requests().len(), 1, "no second summary call");
    assert!(llm.requests().len() == 4);

    // Reset forgets memory and summary, and releases the KV session of that conversation.
    b.reset("s", true);
    let after = b.state_dict("s");
    assert_eq!(after["memory"], json!([]));
    assert_eq!(after["summary"], json!(null));
    assert!(
        fresh.ended_sessions().iter().any(|s| s == "assistant:s"),
        "{:?}",
        fresh.ended_sessions()
    );
    Ok(())
}

#[tokio::test]
async fn a_bad_state_is_an_error_and_changes_nothing() -> TestResult {
    let (a, _) = agent(vec![])?;
    a.llm_agent.memory.add("s", AgentMessage::user("kept"));
    let mut bad = serde_json::Map::new();
    bad.insert("memory".into(), json!([]));
    bad.insert("summary".into(), json!({"covers": "two"}));
    let err = a
        .load_state_dict("s", &bad)
        .err()
        .ok_or("loaded")?
        .to_string();
    assert!(err.contains("summary"), "{err}");
    assert_eq!(a.llm_agent.memory.get("s").len(), 1, "memory untouched");
    Ok(())
}

/// Records every hook call, and doubles each calculator expression before it runs.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    fn log(&self, s: String) {
        if let Ok(mut l) = self.0.lock() {
            l.push(s);
        }
    }
    fn seen(&self) -> Vec<String> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Hook for Recorder {
    fn before_agent(&self, _a: &str, inputs: Vec<AgentMessage>, _s: &str) -> Vec<AgentMessage> {
        let first = inputs.first().map(AgentMessage::text).unwrap_or_default();
        self.log(format!("before_agent {first}"));
        inputs
    }
    fn after_agent(&self, _a: &str, out: AgentMessage, _s: &str) -> AgentMessage {
        self.log(format!("after_agent {}", out.text()));
        AgentMessage::new(out.sender.clone(), format!("{} (checked)", out.text()))
    }
    fn before_action(&self, _a: &str, mut call: ToolCall, _s: &str) -> ToolCall {
        self.log(format!("before_action {}", call.function.name));
        let e = call.function.arguments["expression"]
            .as_str()
            .unwrap_or("0");
        call.function.arguments = json!({"expression": format!("2*({e})")});
        call
    }
    fn after_action(&self, _a: &str, result: ToolResult, _s: &str) -> ToolResult {
        self.log(format!("after_action {}", result.content));
        result
    }
}

#[tokio::test]
async fn hooks_wrap_the_turn_and_each_action_until_removed() -> TestResult {
    let (a, llm) = agent(vec![calc_call("3+4"), "14".into(), "plain".into()])?;
    let rec = Arc::new(Recorder::default());
    let handle = a.llm_agent.hooks.add(rec.clone());
    let run = a
        .run("3+4 doubled?", "s", RunOptions::default(), None)
        .await?;
    assert_eq!(
        rec.seen(),
        [
            "before_agent 3+4 doubled?",
            "before_action calculator",
            "after_action 14",
            "after_agent 14",
        ]
    );
    assert_eq!(run.tool_calls[0].content, "14", "the hook's call ran");
    assert_eq!(
        run.answer, "14 (checked)",
        "after_agent replaced the answer"
    );
    assert_eq!(
        llm.requests()[1].messages.last().map(|m| m.text()),
        Some("14")
    );
    assert!(handle.remove());
    a.run("again", "s", RunOptions::default(), None).await?;
    assert_eq!(rec.seen().len(), 4, "a removed hook is not called");
    Ok(())
}
