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

/// `--mcp` offers an MCP server's tools: the real 0.5B model calls mcp-server-time's
/// `get_current_time` for the time in Tokyo and answers with what it returned.
#[test]
fn an_agent_calls_an_mcp_servers_tool() {
    let (Some(model), Some(servers)) = (common::real_gguf(), common::mcp_servers()) else {
        return;
    };
    let time = format!(
        "{} --local-timezone UTC",
        servers.join("venv/bin/mcp-server-time").display()
    );
    let (ok, stdout, stderr) = hearth(&[
        "agent",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--tools",
        "calculator",
        "--mcp",
        &time,
        "--approve",
        "auto",
        "--max-tokens",
        "128",
        "--max-iterations",
        "3",
        "--json",
        "What time is it now in Tokyo? Use the get_current_time tool.",
    ]);
    let run: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not the run ({e}): {stdout}{stderr}"));
    let calls = run["tool_calls"].as_array().cloned().unwrap_or_default();
    let first = calls.first().unwrap_or_else(|| panic!("no call: {stdout}"));
    assert_eq!(first["name"], "get_current_time", "{stdout}");
    assert_eq!(first["arguments"]["timezone"], "Asia/Tokyo", "{stdout}");
    assert!(
        first["content"]
            .as_str()
            .unwrap_or_default()
            .contains("+09:00"),
        "{stdout}"
    );
    assert!(
        ok || run["stop_reason"] == "max_iterations",
        "{stdout}{stderr}"
    );
}

/// `--approve deny` leaves the tools offered but runs no call, and the model is told so; a
/// server that cannot start, and a bad `--mcp-config`, stop the run before the model loads,
/// naming the server or the file's field.
#[test]
fn mcp_calls_can_be_denied_and_bad_servers_are_named() {
    let model = common::tiny("qwen2");
    let fault = format!(
        "python3 {}/tests/mcp_fault_server.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let base = [
        "agent",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--max-tokens",
        "8",
        "--max-iterations",
        "1",
    ];
    let (ok, _, stderr) = hearth(&[&base[..], &["--mcp", "/no/such/server", "hi"]].concat());
    assert!(!ok && stderr.contains("/no/such/server"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("servers.json");
    std::fs::write(&config, r#"{"mcpServers": {"x": {"command": ["a"]}}}"#).unwrap();
    let (ok, _, stderr) =
        hearth(&[&base[..], &["--mcp-config", config.to_str().unwrap(), "hi"]].concat());
    assert!(
        !ok && stderr.contains("servers.json") && stderr.contains("mcpServers.x.command"),
        "{stderr}"
    );
    // Denied: the server starts, its tools are listed in the log, no call runs.
    let (_, stdout, stderr) = hearth(
        &[
            &base[..],
            &["--mcp", &fault, "--approve", "deny", "--json", "hi"],
        ]
        .concat(),
    );
    assert!(
        stderr.contains("MCP server mcp_fault_server: echo"),
        "{stderr}"
    );
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    for call in run["tool_calls"].as_array().cloned().unwrap_or_default() {
        assert!(
            call["content"]
                .as_str()
                .unwrap_or_default()
                .contains("not allowed"),
            "{call}"
        );
    }
}

/// `--llm-config` is read before the model loads: a bad file is an error that names it and
/// the field; a good one adds its fallbacks behind the local model, which answers. And
/// `--log-messages` logs the run's messages to stderr.
#[test]
fn a_fallback_config_file_is_checked_and_messages_can_be_logged() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[fallback]]\nurl = \"http://127.0.0.1:9/v1\"\nmodle = \"x\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = hearth(&[
        "agent",
        "--model",
        "/nonexistent/model",
        "--llm-config",
        bad.to_str().unwrap(),
        "hi",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("bad.toml") && stderr.contains("modle"),
        "{stderr}"
    );

    let good = dir.path().join("fallbacks.toml");
    std::fs::write(
        &good,
        "backoff_secs = 5\n[[fallback]]\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\ntimeout_secs = 2\n",
    )
    .unwrap();
    let model = common::tiny("qwen2");
    let (ok, stdout, stderr) = hearth(&[
        "agent",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--max-tokens",
        "4",
        "--tools",
        "",
        "--llm-config",
        good.to_str().unwrap(),
        "--log-messages",
        "--json",
        "Say hi.",
    ]);
    assert!(ok, "{stdout}{stderr}");
    let run: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_ne!(
        run["backend"], "http://127.0.0.1:9/v1",
        "the local model answered: {stdout}"
    );
    assert!(stderr.contains("in: Say hi."), "{stderr}");
    assert!(stderr.contains("out: "), "{stderr}");
}
