//! `hearth serve` with the real Qwen2.5-Coder GGUF, driven by the official `openai` Python
//! client (tests/openai_client.py): answers, streaming, tool calls and errors as that
//! client reads them.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn the_official_openai_client_works_against_hearth_serve() -> Result<(), Box<dyn std::error::Error>>
{
    let (Some(model), Some(python)) = (common::real_gguf(), common::openai_python()) else {
        return Ok(());
    };
    let mut server = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--model"])
        .arg(&model)
        .args([
            "--device",
            "cpu",
            "--port",
            "0",
            "--api-key",
            "test-key",
            "-q",
        ])
        .env("HF_HUB_OFFLINE", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let stderr = server.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        match lines.next() {
            Some(line) => {
                let line = line?;
                if let Some(a) = line.split("listening on http://").nth(1) {
                    break Ok(a.trim().to_string());
                }
            }
            None => break Err("the server exited before listening"),
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let result = addr.map_err(|e| e.to_string()).and_then(|addr| {
        Command::new(&python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/openai_client.py"
            ))
            .arg(format!("http://{addr}/v1"))
            .arg("test-key")
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
    eprintln!("{stdout}");
    Ok(())
}
