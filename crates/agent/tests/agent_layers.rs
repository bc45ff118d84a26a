//! ToolAgent built from the crate's layers: with the ReAct parser its prompt carries the
//! parser's format instruction, stops before `Observation:`, shows tool results as
//! observations and renders on the internlm2 meta-template; the parser words the correction
//! for an unreadable action.

use hearth_agent::parser::ReActParser;
use hearth_agent::run::tool_agent::RunOptions;
use hearth_agent::tools::registry;
use hearth_agent::{ScriptedLlm, StopReason, ToolAgent};
use hearth_engine::chat::MetaTemplate;
use hearth_engine::load::card::meta_template_source;
use std::path::Path;
use std::sync::Arc;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn react_agent(script: &[&str]) -> Result<(ToolAgent, ScriptedLlm), String> {
    let llm = ScriptedLlm::new(script.iter().copied());
    let tools = registry(&["calculator".into()], None)?;
    let mut agent = ToolAgent::new(Arc::new(llm.clone()), tools);
    agent.llm_agent.parser = Some(Box::new(ReActParser));
    Ok((agent, llm))
}

#[tokio::test]
async fn a_react_agent_runs_on_the_internlm2_meta_template() -> TestResult {
    let (agent, llm) = react_agent(&[
        "Thought: I should multiply.\nAction: calculator\nAction Input: {\"expression\": \"1234 * 5678\"}",
        "Thought: I know the final answer\nFinal Answer: 7006652",
    ])?;
    let run = agent
        .run("What is 1234 * 5678?", "s", RunOptions::default(), None)
        .await?;
    assert_eq!(run.stop_reason, StopReason::Answer);
    assert_eq!(run.answer, "7006652");
    assert_eq!(run.tool_calls.len(), 1);
    assert_eq!(run.tool_calls[0].content, "7006652");

    let reqs = llm.requests();
    let first = &reqs[0];
    // The format's own instruction lists the tools, so the template is not given them.
    let system = first.messages[0].text();
    assert!(
        system.contains("Action Input:") && system.contains("calculator"),
        "{system}"
    );
    assert!(first.tools.is_empty());
    assert!(first
        .stop
        .as_ref()
        .is_some_and(|s| s.iter().any(|w| w == "Observation:")));
    // The second prompt: the model's own ReAct text, then the result as an observation.
    let second = &reqs[1];
    let n = second.messages.len();
    assert_eq!(second.messages[n - 2].role, "assistant");
    assert!(second.messages[n - 2]
        .text()
        .starts_with("Thought: I should multiply."));
    assert_eq!(second.messages[n - 1].role, "user");
    assert_eq!(second.messages[n - 1].text(), "Observation: 7006652");

    let source = meta_template_source("internlm2").ok_or("no internlm2 meta-template")?;
    let template = MetaTemplate::from_toml(source, Path::new("internlm2.toml"))?;
    let prompt = template.render(&second.messages, true)?;
    assert!(prompt.starts_with("<|im_start|>system\n"), "{prompt}");
    assert!(
        prompt
            .contains("<|im_start|>user\nObservation: 7006652<|im_end|>\n<|im_start|>assistant\n"),
        "{prompt}"
    );
    Ok(())
}

#[tokio::test]
async fn the_parser_words_the_correction() -> TestResult {
    let (agent, llm) = react_agent(&["Thought: hmm\nAction:\n", "Final Answer: I cannot tell."])?;
    let run = agent
        .run("Anything?", "s", RunOptions::default(), None)
        .await?;
    assert_eq!(run.answer, "I cannot tell.");
    let last = llm.requests()[1]
        .messages
        .last()
        .map(|m| m.text().to_string())
        .ok_or("no messages")?;
    assert!(last.contains("Your action could not be read"), "{last}");
    assert!(
        !last.contains("<tool_call>"),
        "no Qwen wording in a ReAct run: {last}"
    );
    Ok(())
}
