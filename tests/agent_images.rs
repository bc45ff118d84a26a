//! Images through the agent layer: a message holding an image ([`hearth_agent::image`])
//! reaches the local engine's vision tower and a remote server as an image part, and gives
//! transformers' greedy answer either way; a model without vision reads a note instead;
//! `hearth agent --image` takes a file.

mod common;

use hearth_agent::image;
use hearth_agent::llm::{complete, LlmRequest, OpenAiLlm};
use hearth_agent::ChatMessage;
use hearth_agent::LocalLlm;
use hearth_engine::{DTypeSpec, DeviceSpec, Engine, LoadOptions, SamplingParams};
use serde_json::Value;
use std::sync::Arc;

type TestResult = Result<(), Box<dyn std::error::Error>>;

use common::vision_dir;

/// The golden prompt's message (its image, then its text), transformers' greedy answer, its
/// length and the prompt's tokens.
fn golden() -> Result<(ChatMessage, String, usize, usize), Box<dyn std::error::Error>> {
    let g = common::vision_golden()?;
    let text = image::inline_file(&vision_dir().join("image1.png"))? + "What is this?";
    let ids = g.prompt["input_ids"].as_array().map_or(0, Vec::len);
    Ok((ChatMessage::user(text), g.text, g.greedy.len(), ids))
}

fn request(message: ChatMessage, max_tokens: usize) -> LlmRequest {
    LlmRequest {
        messages: vec![message],
        max_tokens: Some(max_tokens),
        sampling: Some(SamplingParams::greedy()),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_image_in_a_message_reaches_the_model_locally_and_remotely() -> TestResult {
    let (message, want, n, ids) = golden()?;
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let engine = Arc::new(Engine::load(vision_dir().to_str().ok_or("path")?, &opts)?);
    let local = LocalLlm::new(engine);
    let out = complete(&local, request(message.clone(), n)).await?;
    assert_eq!(
        out.prompt_tokens, ids,
        "the image's tokens are in the prompt"
    );
    assert_eq!(format!("{}{}", out.reasoning, out.text).trim(), want.trim());

    // The same message to `hearth serve` through the OpenAI-compatible client: an image part.
    let served = common::Served::on_cpu(&vision_dir(), &[])?;
    let remote = OpenAiLlm::new(&format!("http://{}/v1", served.addr), "")?
        .discover_model()
        .await?;
    let out = complete(&remote, request(message.clone(), n)).await?;
    assert_eq!(out.prompt_tokens, ids);
    assert_eq!(format!("{}{}", out.reasoning, out.text).trim(), want.trim());

    // A model without vision reads a note: the agent goes on.
    let text_only = Engine::load(common::tiny("qwen2").to_str().ok_or("path")?, &opts)?;
    let tokens_of_note = text_only.tokenizer().encode(image::TEXT_ONLY_NOTE)?.len();
    let out = complete(&LocalLlm::new(Arc::new(text_only)), request(message, 2)).await?;
    assert!(out.prompt_tokens >= tokens_of_note, "{out:?}");
    Ok(())
}

/// `hearth agent --image`: the image's 37 tokens (its 35, between vision start and end) in
/// the model's prompt, as the run's record shows; a file that is no image is refused by flag.
#[test]
fn hearth_agent_takes_an_image_file() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prompt_tokens = |images: &[&std::path::Path]| -> Result<u64, Box<dyn std::error::Error>> {
        let record = tmp.path().join("run.jsonl");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"));
        cmd.args(["agent", "--model", vision_dir().to_str().ok_or("path")?])
            .args([
                "--device",
                "cpu",
                "--max-tokens",
                "2",
                "--max-iterations",
                "1",
                "--tools",
                "",
            ])
            .arg("--record")
            .arg(&record)
            .env("HF_HUB_OFFLINE", "1");
        for i in images {
            cmd.arg("--image").arg(i);
        }
        let _ = std::fs::remove_file(&record);
        // (A random model's two tokens are no answer: the run ends with an error after it.)
        let out = cmd.arg("What is this?").output()?;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let lines = std::fs::read_to_string(&record).unwrap_or_default();
        let response = lines
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["type"] == "model_response")
            .ok_or(err)?;
        Ok(response["prompt_tokens"]
            .as_u64()
            .ok_or("no prompt_tokens")?)
    };
    let png = vision_dir().join("image1.png");
    assert_eq!(prompt_tokens(&[&png])? - prompt_tokens(&[])?, 37);
    let err = prompt_tokens(&[&vision_dir().join("config.json")])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("--image") && err.contains("config.json"),
        "{err}"
    );
    Ok(())
}
