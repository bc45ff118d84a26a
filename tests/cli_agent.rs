//! `hearth agent` end to end on the tiny fixture: the exit status says whether it answered.

mod common;

use std::process::Command;

fn hearth(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A task the model cannot even read (longer than its context) ends the run with stop reason
/// `error`: the run is still printed as JSON on stdout, alone, and the exit status is non-zero.
#[test]
fn an_agent_that_fails_exits_non_zero_after_printing_its_run() {
    let model = common::tiny("qwen2");
    let task = "word ".repeat(600);
    let (ok, stdout, stderr) = hearth(&[
        "agent",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--max-tokens",
        "4",
        "--json",
        &task,
    ]);
    assert!(!ok, "should fail: {stdout}{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not only the run ({e}): {stdout:?}"));
    assert_eq!(run["stop_reason"], "error", "{stdout}");
    assert!(stderr.contains("the agent failed"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A run that answers exits 0, and `--json` keeps stdout to the one object: logs and the run's
/// progress go to stderr.
#[test]
fn agent_json_stdout_is_only_the_run() {
    let model = common::tiny("qwen2");
    let (ok, stdout, stderr) = hearth(&[
        "agent",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--max-tokens",
        "8",
        "--max-iterations",
        "2",
        // One small tool keeps the system prompt inside the fixture's 512 positions.
        "--tools",
        "time",
        "--json",
        "What is 2+2?",
    ]);
    let run: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not only the run ({e}): {stdout:?}\n{stderr}"));
    assert_eq!(run["stop_reason"], "answer", "{stdout}");
    assert!(
        !run["answer"].as_str().unwrap().trim().is_empty(),
        "{stdout}"
    );
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("loaded"),
        "the load log belongs on stderr: {stderr}"
    );
    assert!(
        stderr.contains("[stop: Answer, 1 iterations"),
        "the run's progress belongs on stderr: {stderr}"
    );
}
