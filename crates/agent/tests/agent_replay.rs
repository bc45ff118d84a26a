//! Recording a run and replaying it: the recorded answers and tool results give the same
//! steps; a changed agent or a model that answers otherwise is reported at the first step
//! that differs.

use hearth_agent::persistence::record::{Entry, Recorder, Recording, RunHeader};
use hearth_agent::persistence::replay::{recorded_tools, replay, ReplayLlm};
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::tools::registry;
use hearth_agent::{AgentMessage, ScriptedLlm, StopReason, ToolAgent};
use std::path::Path;
use std::sync::Arc;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn calc_call(expr: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"calculator\", \"arguments\": {{\"expression\": \"{expr}\"}}}}\n</tool_call>")
}

/// Records a two-step run (a calculator call, then the answer) on a session with history.
async fn record(path: &Path) -> TestResult {
    let llm = ScriptedLlm::new([calc_call("6*7"), "It is 42.".to_string()]);
    let tools = registry(&["calculator".into(), "time".into()], None)?;
    let mut agent = ToolAgent::new(Arc::new(llm), tools);
    agent
        .llm_agent
        .memory
        .add("s", AgentMessage::user("earlier question"));
    agent
        .llm_agent
        .memory
        .add("s", AgentMessage::new("assistant", "earlier answer"));
    let rec = Recorder::create(path)?;
    rec.attach(&mut agent);
    rec.write(Entry::Run(Box::new(RunHeader::of(
        &agent,
        "What is 6*7?",
        "s",
    ))));
    let run = agent
        .run("What is 6*7?", "s", RunOptions::default(), None)
        .await?;
    rec.write(Entry::End { run });
    rec.check()?;
    Ok(())
}

#[tokio::test]
async fn a_recorded_run_replays_step_for_step() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("run.jsonl");
    record(&path).await?;
    let recording = Recording::read(&path)?;
    let kinds: Vec<String> = recording.entries.iter().map(Entry::describe).collect();
    assert_eq!(
        kinds,
        [
            "model request 1",
            "model response 1",
            "tool call calculator",
            "tool result calculator",
            "model request 2",
            "model response 2",
            "end of run"
        ]
    );
    // The history from before the run is in the header and reached the first request.
    let Entry::ModelRequest { messages, .. } = &recording.entries[0] else {
        return Err("first entry is not a request".into());
    };
    assert!(messages.iter().any(|m| m.text() == "earlier answer"));

    let out = replay(
        &recording,
        Arc::new(ReplayLlm::new(&recording)),
        recorded_tools(&recording),
    )
    .await?;
    if let Some(d) = &out.divergence {
        return Err(format!("the replay diverged: {d}").into());
    }
    assert_eq!(out.run.answer, "It is 42.");
    assert_eq!(out.run.stop_reason, StopReason::Answer);
    assert_eq!(out.run.tool_calls[0].content, "42");
    Ok(())
}

#[tokio::test]
async fn the_first_difference_is_reported() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("run.jsonl");
    record(&path).await?;
    let recording = Recording::read(&path)?;

    // A model that calls the tool with other arguments diverges at its first answer.
    let live = ScriptedLlm::new([calc_call("6*8"), "It is 48.".to_string()]);
    let tools = registry(&["calculator".into(), "time".into()], None)?;
    let out = replay(&recording, Arc::new(live), tools).await?;
    let d = out.divergence.ok_or("no divergence found")?;
    assert_eq!(d.index, 1);
    assert_eq!(d.recorded, "model response 1");
    assert_eq!(d.path, "text");
    let shown = d.to_string();
    assert!(shown.contains("6*7") && shown.contains("6*8"), "{shown}");

    // An agent changed since the recording diverges at its first request.
    let mut changed = recording.clone();
    changed.header.agent.persona = "You are terse.".into();
    let out = replay(
        &changed,
        Arc::new(ReplayLlm::new(&changed)),
        recorded_tools(&changed),
    )
    .await?;
    let d = out.divergence.ok_or("no divergence found")?;
    assert_eq!((d.index, d.path.as_str()), (0, "messages[0].content"));
    Ok(())
}

#[tokio::test]
async fn a_recording_cut_mid_line_is_refused() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("run.jsonl");
    record(&path).await?;
    let text = std::fs::read_to_string(&path)?;
    let cut = &text[..text.len() - 20];
    let cut_path = tmp.path().join("cut.jsonl");
    std::fs::write(&cut_path, cut)?;
    let err = Recording::read(&cut_path)
        .err()
        .ok_or("read a cut file")?
        .to_string();
    let lines = cut.lines().count();
    assert!(
        err.contains("cut.jsonl") && err.contains(&format!("line {lines} is cut off")),
        "{err}"
    );
    Ok(())
}
