//! `hearth serve` with the real Qwen2.5-Coder GGUF, driven by the official Python clients:
//! `openai` on chat completions (tests/openai_client.py) and on responses
//! (tests/openai_responses_client.py), `anthropic` on messages (tests/anthropic_client.py):
//! answers, streaming, tool calls and errors as those clients read them.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn the_official_clients_work_against_hearth_serve() -> Result<(), Box<dyn std::error::Error>> {
    let (Some(model), Some(python)) = (common::real_gguf(), common::api_python()) else {
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
    let scripts = [
        ("openai_client.py", "/v1"),
        ("openai_responses_client.py", "/v1"),
        ("anthropic_client.py", ""),
    ];
    let results = addr.map_err(|e| e.to_string()).map(|addr| {
        scripts.map(|(script, path)| {
            Command::new(&python)
                .arg(format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR")))
                .arg(format!("http://{addr}{path}"))
                .arg("test-key")
                .output()
                .map_err(|e| e.to_string())
        })
    });
    let _ = server.kill();
    let _ = server.wait();
    for ((script, _), out) in scripts.iter().zip(results?) {
        let out = out?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{script}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("checks passed"), "{script}: {stdout}");
        eprintln!("{stdout}");
    }
    Ok(())
}
