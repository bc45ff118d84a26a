//! Streaming through composite agents, and lagent's MessageLogger on a tool loop.

use futures::StreamExt;
use hearth_agent::hooks::MessageLogger;
use hearth_agent::message::AgentStatusCode;
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::tools::registry;
use hearth_agent::{
    Agent, AgentList, AgentMap, AgentMessage, LlmAgent, ScriptedLlm, Sequential, ToolAgent,
};
use std::sync::{Arc, Mutex};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn bot(name: &str, answer: &str) -> Box<dyn Agent> {
    Box::new(LlmAgent::new(
        name,
        Arc::new(ScriptedLlm::new([answer])),
        None,
    ))
}

async fn collect(
    agent: &dyn Agent,
    input: AgentMessage,
) -> Result<Vec<AgentMessage>, hearth_agent::AgentError> {
    agent
        .call_stream(vec![input], "s")
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Each sender's messages in order: partial ones, then its end.
fn by_sender(msgs: &[AgentMessage]) -> Vec<(String, AgentStatusCode)> {
    let mut out: Vec<(String, AgentStatusCode)> = vec![];
    for m in msgs {
        if out
            .last()
            .is_some_and(|(s, st)| *s == m.sender && *st == m.stream_state)
        {
            continue;
        }
        out.push((m.sender.clone(), m.stream_state));
    }
    out
}

#[tokio::test]
async fn a_pipeline_streams_each_agent_and_feeds_the_next() -> TestResult {
    let writer = LlmAgent::new(
        "writer",
        Arc::new(ScriptedLlm::new(["a draft of the text"])),
        None,
    );
    let editor_llm = ScriptedLlm::new(["the edited text"]);
    let editor = LlmAgent::new("editor", Arc::new(editor_llm.clone()), None);
    let pipe = Sequential {
        name: "pipe".into(),
        agents: vec![
            ("writer".into(), Box::new(writer)),
            ("editor".into(), Box::new(editor)),
        ],
        exit_at: None,
    };
    let msgs = collect(&pipe, "write".into()).await?;
    use AgentStatusCode::{End, StreamIng};
    assert_eq!(
        by_sender(&msgs),
        [
            ("writer".into(), StreamIng),
            ("writer".into(), End),
            ("editor".into(), StreamIng),
            ("editor".into(), End)
        ]
    );
    assert_eq!(msgs.last().ok_or("empty")?.text(), "the edited text");
    // The editor read the writer's whole draft.
    let asked = &editor_llm.requests()[0].messages;
    assert_eq!(
        asked.last().ok_or("no message")?.text(),
        "a draft of the text"
    );
    Ok(())
}

#[tokio::test]
async fn a_pipeline_stream_stops_where_its_exit_test_says() -> TestResult {
    let pipe = Sequential {
        name: "pipe".into(),
        agents: vec![
            ("a".into(), bot("a", "STOP here")),
            ("b".into(), bot("b", "never")),
        ],
        exit_at: Some(Box::new(|m: &AgentMessage| m.text().starts_with("STOP"))),
    };
    let msgs = collect(&pipe, "go".into()).await?;
    assert!(msgs.iter().all(|m| m.sender == "a"));
    assert_eq!(msgs.last().ok_or("empty")?.text(), "STOP here");
    Ok(())
}

#[tokio::test]
async fn a_list_streams_every_agent_on_the_same_input_and_a_map_streams_the_one_named() -> TestResult
{
    let list = AgentList {
        name: "both".into(),
        agents: vec![bot("a", "first answer"), bot("b", "second answer")],
    };
    let msgs = collect(&list, "hi".into()).await?;
    let senders: Vec<String> = by_sender(&msgs).into_iter().map(|(s, _)| s).collect();
    assert_eq!(senders, ["a", "a", "b", "b"]);
    assert_eq!(msgs.last().ok_or("empty")?.text(), "second answer");

    let mut map = AgentMap {
        name: "router".into(),
        agents: Default::default(),
    };
    map.agents
        .insert("math".into(), bot("math", "four, as always"));
    map.agents.insert("poet".into(), bot("poet", "roses"));
    let mut ask = AgentMessage::user("2+2?");
    ask.receiver = Some("math".into());
    let msgs = collect(&map, ask).await?;
    assert!(msgs.len() > 2, "streamed in pieces");
    assert!(msgs.iter().all(|m| m.sender == "math"));
    let mut lost = AgentMessage::user("?");
    lost.receiver = Some("nobody".into());
    let err = collect(&map, lost)
        .await
        .err()
        .ok_or("an unknown receiver streamed")?;
    assert!(err.to_string().contains("nobody"), "{err}");
    let empty = AgentList {
        name: "none".into(),
        agents: vec![],
    };
    assert!(collect(&empty, "hi".into()).await.is_err());
    Ok(())
}

/// Collects what `tracing` writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_message_logger_logs_inputs_calls_results_and_the_answer() -> TestResult {
    let llm = ScriptedLlm::new([
        "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}\n</tool_call>",
        "It is 42.",
    ]);
    let agent = ToolAgent::new(Arc::new(llm), registry(&["calculator".into()], None)?);
    let _logging = agent.llm_agent.hooks.add(Arc::new(MessageLogger));
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let run = tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(agent.run("What is 6*7?", "s1", RunOptions::default(), None))
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
    })?;
    assert_eq!(run.answer, "It is 42.");
    let log = String::from_utf8(captured.0.lock().map_err(|_| "poisoned")?.clone())?;
    let lines: Vec<&str> = log.lines().collect();
    let find = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let order = [
        find("in: What is 6*7?"),
        find("call: {\"expression\":\"6*7\"}"),
        find("result: 42"),
        find("out: It is 42."),
    ];
    assert!(
        order.iter().all(Option::is_some),
        "missing lines in:\n{log}"
    );
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "out of order:\n{log}"
    );
    assert!(
        log.contains("session=\"s1\"") || log.contains("session=s1"),
        "{log}"
    );
    Ok(())
}
