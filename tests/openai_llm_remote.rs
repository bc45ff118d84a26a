//! `OpenAiLlm` against an OpenAI-compatible server started outside the test, at
//! `HEARTH_OPENAI_URL` (`scripts/llama-server-check.sh` starts llama.cpp's llama-server with
//! the real test GGUF and runs this): a plain answer, and a native tool call that reaches the
//! agent as a call its Qwen parser reads.

use hearth_agent::llm::{complete, LlmRequest, OpenAiLlm};
use hearth_agent::parser::{OutputParser, ParseStatus, QwenToolParser};
use hearth_engine::{ChatMessage, SamplingParams};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn llm() -> Result<OpenAiLlm, Box<dyn std::error::Error>> {
    let url = std::env::var("HEARTH_OPENAI_URL").map_err(|_| "set HEARTH_OPENAI_URL")?;
    Ok(OpenAiLlm::new(&url, "")?.discover_model().await?)
}

#[tokio::test]
#[ignore = "needs a server at HEARTH_OPENAI_URL (scripts/llama-server-check.sh)"]
async fn a_plain_answer_streams_with_usage() -> TestResult {
    let llm = llm().await?;
    let out = complete(
        &llm,
        LlmRequest {
            messages: vec![ChatMessage::new(
                "user",
                "What is the capital of France? One word.",
            )],
            max_tokens: Some(16),
            sampling: Some(SamplingParams::default()),
            ..Default::default()
        },
    )
    .await?;
    assert!(out.text.contains("Paris"), "{out:?}");
    assert!(
        out.completion_tokens > 0 && out.prompt_tokens > 0,
        "{out:?}"
    );
    assert_eq!(out.finish, "stop");
    eprintln!("{}: {:?}", llm.model(), out.text);
    Ok(())
}

#[tokio::test]
#[ignore = "needs a server at HEARTH_OPENAI_URL (scripts/llama-server-check.sh)"]
async fn a_native_tool_call_reaches_the_agent_parser() -> TestResult {
    let llm = llm().await?;
    let weather = json!({"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
    let out = complete(
        &llm,
        LlmRequest {
            messages: vec![ChatMessage::new(
                "user",
                "What is the weather in Paris right now?",
            )],
            tools: vec![weather],
            max_tokens: Some(64),
            sampling: Some(SamplingParams::default()),
            ..Default::default()
        },
    )
    .await?;
    let parsed = QwenToolParser.parse(&out.text, &["get_weather".to_string()]);
    assert_eq!(parsed.status, ParseStatus::ValidTool, "{out:?}");
    assert_eq!(parsed.tool_calls[0].function.name, "get_weather");
    assert!(parsed.tool_calls[0].function.arguments["city"]
        .as_str()
        .is_some_and(|c| c.contains("Paris")));
    eprintln!("{}: {:?}", llm.model(), parsed.tool_calls);
    Ok(())
}
