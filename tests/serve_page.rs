//! The chat page of `hearth serve` at `/`, driven in headless Chromium by Selenium
//! (tests/page_browser.py): a streamed answer with its thinking folded, the model's name and
//! tokens/s, a tool call shown; the screenshot's path is printed.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

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
    let mut server = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--model"])
        .arg(common::tiny("qwen3.5"))
        .args(["--template", template, "--device", "cpu", "--port", "0"])
        .args(["--alias", "tiny", "-q"])
        .env("HF_HUB_OFFLINE", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let stderr = server.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        match lines.next() {
            Some(line) => {
                if let Some(a) = line?.split("listening on http://").nth(1) {
                    break Ok(a.trim().to_string());
                }
            }
            None => break Err("the server exited before listening"),
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page.png");
    let result = addr.map_err(|e| e.to_string()).and_then(|addr| {
        Command::new(&python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/page_browser.py"
            ))
            .arg(format!("http://{addr}"))
            .arg(&screenshot)
            .output()
            .map_err(|e| e.to_string())
    });
    let _ = server.kill();
    let _ = server.wait();
    let out = result?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("checks passed"), "{stdout}");
    assert!(std::fs::metadata(&screenshot)?.len() > 10_000);
    eprintln!("{stdout}");
    Ok(())
}
