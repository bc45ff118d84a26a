//! Images through `hearth serve` on the tiny Qwen3.5 with a vision tower: OpenAI chat
//! completions (`image_url` data URIs), Anthropic Messages (`image` blocks) and Responses
//! (`input_image`) give the answer transformers gives for the same prompt; a model without
//! vision, a bad image and an image URL get 400s that name the part.

mod common;

use base64::Engine as _;
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

use common::vision_dir;

async fn post(addr: &str, path: &str, body: Value) -> Result<(u16, Value), reqwest::Error> {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(&body)
        .send()
        .await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await?))
}

/// A 400 that names the request's image part and says `why`.
fn refused_at_the_part((status, e): (u16, Value), why: &str) {
    assert_eq!(status, 400, "{e}");
    assert_eq!(
        e["error"]["param"],
        json!("messages[0].content[1].image_url"),
        "{e}"
    );
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(why), "{why}: {e}");
}

fn png_b64() -> Result<String, std::io::Error> {
    let png = std::fs::read(vision_dir().join("image1.png"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(png))
}

#[tokio::test]
async fn every_api_takes_an_image_and_answers_as_transformers() -> TestResult {
    let dir = vision_dir();
    let served = common::Served::start(&[
        "--model",
        dir.to_str().ok_or("path")?,
        "--device",
        "cpu",
        "--alias",
        "tiny",
    ])?;
    let addr = served.addr.clone();
    let golden = common::vision_golden()?;
    let (prompt, want) = (&golden.prompt, &golden.text);
    let b64 = png_b64()?;
    let uri = format!("data:image/png;base64,{b64}");

    let (status, chat) = post(
        &addr,
        "/v1/chat/completions",
        json!({"model": "tiny", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user",
            "content": [{"type": "image_url", "image_url": {"url": uri}},
                        {"type": "text", "text": "What is this?"}]}]}),
    )
    .await?;
    assert_eq!(status, 200, "{chat}");
    // The prompt transformers' processor makes: 35 image tokens among 57.
    let ids = prompt["input_ids"].as_array().map_or(0, |a| a.len());
    assert_eq!(chat["usage"]["prompt_tokens"], json!(ids), "{chat}");
    let m = &chat["choices"][0]["message"];
    let text = format!(
        "{}{}",
        m["reasoning_content"].as_str().unwrap_or_default(),
        m["content"].as_str().unwrap_or_default()
    );
    assert_eq!(text.trim(), want.trim(), "{chat}");
    // The next turn of the conversation, the same screenshot in it: the cache of the first
    // is reused through the image (known by its pixels).
    let (status, next) = post(
        &addr,
        "/v1/chat/completions",
        json!({"model": "tiny", "max_tokens": 4, "temperature": 0, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                         {"type": "text", "text": "What is this?"}]},
            {"role": "assistant", "content": m["content"]},
            {"role": "user", "content": "And now?"}]}),
    )
    .await?;
    assert_eq!(status, 200, "{next}");
    let image_end = 4 + 35;
    let cached = next["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(cached > image_end, "{next}");

    let (status, msg) = post(
        &addr,
        "/v1/messages",
        json!({"model": "tiny", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user",
            "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
                        {"type": "text", "text": "What is this?"}]}]}),
    )
    .await?;
    assert_eq!(status, 200, "{msg}");
    // Anthropic counts the cached prompt apart: the same image, so most of it was.
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let (fresh, cached) = (
        n(&msg["usage"]["input_tokens"]),
        n(&msg["usage"]["cache_read_input_tokens"]),
    );
    assert_eq!(
        Some(fresh + cached),
        chat["usage"]["prompt_tokens"].as_u64(),
        "{msg}"
    );
    assert!(cached > image_end, "{msg}");

    let (status, resp) = post(
        &addr,
        "/v1/responses",
        json!({"model": "tiny", "max_output_tokens": 8, "temperature": 0, "input": [{"role": "user",
            "content": [{"type": "input_image", "image_url": uri},
                        {"type": "input_text", "text": "What is this?"}]}]}),
    )
    .await?;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(
        resp["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    let cached = n(&resp["usage"]["input_tokens_details"]["cached_tokens"]);
    assert!(cached > image_end, "{resp}");

    // Bad images: each a 400 naming its part.
    let part = |url: &str| {
        json!({"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": url}}]}]})
    };
    for (url, why) in [
        ("https://example.com/cat.png".to_string(), "data URI"),
        ("data:image/png;base64,AAAA".to_string(), "image"),
        (
            format!("data:image/png;base64,{}", &b64[..(b64.len() / 2) & !3]),
            "decode",
        ),
        ("data:image/png;base64,!!".to_string(), "base64"),
    ] {
        refused_at_the_part(post(&addr, "/v1/chat/completions", part(&url)).await?, why);
    }
    drop(served);

    // A model without vision refuses an image by its part.
    let text_only = common::Served::start(&[
        "--model",
        common::tiny("qwen2").to_str().ok_or("path")?,
        "--device",
        "cpu",
    ])?;
    refused_at_the_part(
        post(&text_only.addr, "/v1/chat/completions", part(&uri)).await?,
        "text only",
    );
    // A tool's screenshot (Claude Code reads an image file) is a note for a text model, not a
    // refusal that would stop the agent.
    let screenshot = json!({"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": "Look at shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "shot.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]}]}]});
    let (status, v) = post(&text_only.addr, "/v1/messages", screenshot).await?;
    assert_eq!(status, 200, "{v}");
    Ok(())
}
