//! `hearth agent` end to end with the real Qwen2.5-Coder-0.5B-Instruct GGUF
//! (scripts/fetch-test-models.sh, or HEARTH_TEST_GGUF).

mod common;

use std::process::Command;

#[test]
fn the_calculator_answers_1234_times_5678() {
    let Some(model) = common::real_gguf() else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "agent",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--tools",
            "calculator",
        ])
        .args([
            "--max-tokens",
            "128",
            "--json",
            "What is 1234 * 5678? Use the calculator.",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let calls = run["tool_calls"].as_array().unwrap();
    let first = &calls[0];
    assert_eq!(first["name"], "calculator");
    assert_eq!(first["content"], "7006652", "{run:#}");
    assert_eq!(run["stop_reason"], "answer", "{run:#}");
    assert!(
        run["answer"].as_str().unwrap().contains("7006652"),
        "{run:#}"
    );
    assert!(run["iterations"].as_u64().unwrap() >= 2);
}
