//! The chat page of `hearth serve` at `/`, driven in headless Chromium by Selenium
//! (tests/page_browser.py): a streamed answer with its thinking folded, the model's name and
//! tokens/s, a tool call shown, an image picked and sent; the screenshot's path is printed.

mod common;

use std::path::Path;
use std::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// tests/page_browser.py against `hearth serve --model MODEL … ARGS` (served as `tiny`), with
/// `image` to pick on the page where given; checks it passed and its screenshot was saved.
fn drive_the_page(model: &Path, args: &[&str], shot: &str, image: Option<&Path>) -> TestResult {
    let Some(python) = common::browser_python() else {
        return Ok(());
    };
    let model = model.to_str().ok_or("model path")?;
    let base = ["--model", model, "--device", "cpu", "--alias", "tiny", "-q"];
    let server = common::Served::start(&[&base[..], args].concat())?;
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shot);
    let mut driver = Command::new(&python);
    driver
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/page_browser.py"
        ))
        .arg(format!("http://{}", server.addr))
        .arg(&screenshot);
    if let Some(image) = image {
        driver.arg(image);
    }
    let out = driver.output();
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

#[test]
fn the_chat_page_streams_answers_in_a_browser() -> TestResult {
    // Qwen3.5's own template, so that the answer opens with thinking.
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/engine/tests/fixtures/templates/Qwen3.5-4B.jinja"
    );
    let args = ["--template", template];
    drive_the_page(&common::tiny("qwen3.5"), &args, "chat-page.png", None)
}

/// An image picked on the chat page goes with the typed prompt to a model with vision
/// (the tiny Qwen3.5 with a tower) and the answer comes back.
#[test]
fn the_chat_page_sends_a_picked_image() -> TestResult {
    let dir = common::fixtures().join("tiny-qwen3.5-vision");
    let image = dir.join("image1.png");
    drive_the_page(&dir, &[], "chat-page-image.png", Some(&image))
}
