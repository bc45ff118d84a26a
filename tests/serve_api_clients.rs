//! `hearth serve` with the real Qwen2.5-Coder GGUF, driven by the official Python clients:
//! `openai` on chat completions (tests/openai_client.py) and on responses
//! (tests/openai_responses_client.py), `anthropic` on messages (tests/anthropic_client.py):
//! answers, streaming, tool calls and errors as those clients read them; and images sent by
//! both to the tiny vision model (tests/vision_clients.py).

mod common;

use std::process::Command;

#[test]
fn the_official_clients_work_against_hearth_serve() -> Result<(), Box<dyn std::error::Error>> {
    let (Some(model), Some(python)) = (common::real_gguf(), common::api_python()) else {
        return Ok(());
    };
    let server = common::Served::on_cpu(&model, &["--api-key", "test-key", "-q"])?;
    let addr = &server.addr;
    let scripts = [
        ("openai_client.py", "/v1"),
        ("openai_responses_client.py", "/v1"),
        ("anthropic_client.py", ""),
    ];
    let results = scripts.map(|(script, path)| {
        Command::new(&python)
            .arg(format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR")))
            .arg(format!("http://{addr}{path}"))
            .arg("test-key")
            .output()
            .map_err(|e| e.to_string())
    });
    drop(server);
    for ((script, _), out) in scripts.iter().zip(results) {
        let out = out?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{script}:\n{stdout}\n{stderr}");
        assert!(stdout.contains("checks passed"), "{script}: {stdout}");
        eprintln!("{stdout}");
    }
    Ok(())
}

/// The same clients send an image to the tiny Qwen3.5 with a vision tower
/// (tests/vision_clients.py).
#[test]
fn the_official_clients_send_images() -> Result<(), Box<dyn std::error::Error>> {
    let Some(python) = common::api_python() else {
        return Ok(());
    };
    let dir = common::fixtures().join("tiny-qwen3.5-vision");
    let server = common::Served::on_cpu(&dir, &["--alias", "tiny", "-q"])?;
    let out = Command::new(&python)
        .arg(format!(
            "{}/tests/vision_clients.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(format!("http://{}", server.addr))
        .arg(dir.join("image1.png"))
        .output()?;
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("image checks passed"), "{stdout}");
    eprintln!("{stdout}");
    Ok(())
}
