//! Knowledge from a folder reaches the prompt: the passage that answers the message, and not
//! the others.

use hearth_agent::knowledge::FolderKnowledge;
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::{ScriptedLlm, ToolAgent, ToolRegistry};
use std::sync::Arc;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[tokio::test]
async fn the_relevant_passage_reaches_the_prompt() -> TestResult {
    let tmp = tempfile::tempdir()?;
    std::fs::write(
        tmp.path().join("lab.txt"),
        "The door code of the Hearth lab is 4721-K.",
    )?;
    std::fs::write(
        tmp.path().join("menu.txt"),
        "The canteen serves soup on Mondays.",
    )?;
    let llm = ScriptedLlm::new(["It is 4721-K."]);
    let mut agent = ToolAgent::new(Arc::new(llm.clone()), ToolRegistry::new());
    agent.knowledge = Some(Arc::new(FolderKnowledge::open(tmp.path())?));
    agent
        .run(
            "What is the door code of the lab?",
            "s",
            RunOptions::default(),
            None,
        )
        .await?;
    let prompt: Vec<String> = llm.requests()[0]
        .messages
        .iter()
        .map(|m| m.text().to_string())
        .collect();
    let joined = prompt.join("\n");
    assert!(
        joined.contains("(lab.txt) The door code of the Hearth lab is 4721-K."),
        "{joined}"
    );
    assert!(!joined.contains("canteen"), "{joined}");
    Ok(())
}
