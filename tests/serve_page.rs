//! The chat page of `hearth serve` at `/`, driven in headless Chromium by Selenium
//! (tests/page_browser.py): a streamed answer with its thinking folded, the model's name and
//! tokens/s, a tool call shown, an image picked and sent; the screenshot's path is printed.

mod common;

use std::process::Command;

#[test]
fn the_chat_page_streams_answers_in_a_browser() -> Result<(), Box<dyn std::error::Error>> {
    let Some(python) = common::browser_python() else {
        return Ok(());
    };
    // Qwen3.5's own template, so that the answer opens with thinking.
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/engine/tests/fixtures/templates/Qwen3.5-4B.jinja"
    );
    let tiny = common::tiny("qwen3.5");
    let server = common::Served::start(&[
        "--model",
        tiny.to_str().ok_or("model path")?,
        "--template",
        template,
        "--device",
        "cpu",
        "--alias",
        "tiny",
        "-q",
    ])?;
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page.png");
    let out = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/page_browser.py"
        ))
        .arg(format!("http://{}", server.addr))
        .arg(&screenshot)
        .output();
    drop(server);
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("checks passed"), "{stdout}");
    assert!(std::fs::metadata(&screenshot)?.len() > 10_000);
    eprintln!("{stdout}");
    Ok(())
}

/// An image picked on the chat page goes with the typed prompt to a model with vision
/// (the tiny Qwen3.5 with a tower) and the answer comes back.
#[test]
fn the_chat_page_sends_a_picked_image() -> Result<(), Box<dyn std::error::Error>> {
    let Some(python) = common::browser_python() else {
        return Ok(());
    };
    let dir = common::fixtures().join("tiny-qwen3.5-vision");
    let server = common::Served::start(&[
        "--model",
        dir.to_str().ok_or("model path")?,
        "--device",
        "cpu",
        "--alias",
        "tiny",
        "-q",
    ])?;
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page-image.png");
    let out = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/page_browser.py"
        ))
        .arg(format!("http://{}", server.addr))
        .arg(&screenshot)
        .arg(dir.join("image1.png"))
        .output();
    drop(server);
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("checks passed"), "{stdout}");
    eprintln!("{stdout}");
    Ok(())
}
