//! The coding agents people run on a local model — Claude Code, Codex CLI, Qwen Code and
//! OpenCode, as npm ships them (scripts/fetch-coding-agents.sh) — started by
//! `hearth launch AGENT --url …` against `hearth serve` on the real Qwen2.5-Coder 0.5B, each
//! headless on a small file-writing task, behind a logging pass-through proxy
//! (scripts/agent-proxy.py). Each run must show: every request the agent sent answered 2xx
//! and read to its end, and the agent exiting 0; Claude Code, Codex and OpenCode also at least one tool call the
//! agent ran whose result went back to the model. Under Qwen Code's 17K-token prompt the 0.5B
//! answers in prose: its run must show its tools offered and the answer read. The 0.5B need
//! not finish the task (benches/coding-agents.py counts how often a model does).

mod common;

use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TASK: &str = "Create a file named hello.py that prints hello world";

/// How long one agent's run may take (its first prompt alone is 7-19K tokens).
const RUN_LIMIT: Duration = Duration::from_secs(900);

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// scripts/agent-proxy.py in front of `upstream`: its port, and the process.
fn proxy(upstream: &str, log: &Path) -> Result<(u16, Killed), Box<dyn std::error::Error>> {
    let port = upstream.rsplit(':').next().ok_or("upstream port")?;
    let mut child = Command::new("python3")
        .arg(format!(
            "{}/scripts/agent-proxy.py",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(["0", port])
        .arg(log)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("proxy stdout")?;
    let child = Killed(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    Ok((line.trim().parse()?, child))
}

/// What an agent's run left: its exit, output and the requests it sent.
struct Run {
    success: bool,
    output: String,
    requests: Vec<Value>,
}

fn run_agent(
    agents: &Path,
    upstream: &str,
    agent: &str,
    args: &[&str],
) -> Result<Run, Box<dyn std::error::Error>> {
    // The agent works in a folder of its own inside a temporary one: what a small model
    // writes beside it (`../hello.py`) goes away with it too.
    let scratch = tempfile::tempdir()?;
    let work = scratch.path().join("project");
    std::fs::create_dir(&work)?;
    let home = tempfile::tempdir()?;
    let log = home.path().join("requests.jsonl");
    let (port, _proxy) = proxy(upstream, &log)?;
    if agent == "opencode" {
        // `opencode run` refuses what would need asking; the test grants it, as
        // `--dangerously-skip-permissions` does for Claude Code.
        std::fs::write(
            work.join("opencode.json"),
            r#"{"permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"}}"#,
        )?;
    }
    let out_path = home.path().join("agent.out");
    let out = std::fs::File::create(&out_path)?;
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["launch", agent, "--url"])
            .arg(format!("http://127.0.0.1:{port}"))
            .args(["--model", "qwen2.5-coder", "--"])
            .args(args)
            .current_dir(&work)
            // OpenCode takes its folder from PWD, not from where it was started.
            .env("PWD", &work)
            // The agents' settings, sessions and logs stay in a home of their own.
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_DATA_HOME", home.path().join(".local/share"))
            .env("XDG_STATE_HOME", home.path().join(".local/state"))
            .env("HEARTH_CODING_AGENTS", agents)
            // Claude Code as root skips permissions only in a sandbox; this is one.
            .env("IS_SANDBOX", "1")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()?,
    );
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > RUN_LIMIT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    let requests = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    eprintln!(
        "{agent}: {:?} in {:.0} s",
        status,
        start.elapsed().as_secs_f64()
    );
    Ok(Run {
        success: status.is_some_and(|s| s.success()),
        output,
        requests,
    })
}

/// Whether a request carries a tool's result back to the model, in its API's shape.
fn sends_a_tool_result(request: &Value) -> bool {
    let body = &request["body"];
    let items = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    items("messages").iter().any(|m| {
        m["role"] == "tool"
            || m["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    }) || items("input").iter().any(|i| {
        matches!(
            i["type"].as_str(),
            Some("function_call_output" | "custom_tool_call_output")
        )
    })
}

/// Prompt and cached tokens of a request's answer, in any of the three APIs' usage shapes.
fn tokens(usage: &Value) -> Option<(u64, u64)> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    if let Some(read) = usage.get("cache_read_input_tokens") {
        return Some((n(&usage["input_tokens"]) + n(read), n(read)));
    }
    if usage.get("input_tokens").is_some() {
        let cached = &usage["input_tokens_details"]["cached_tokens"];
        return Some((n(&usage["input_tokens"]), n(cached)));
    }
    let prompt = usage.get("prompt_tokens")?;
    Some((
        n(prompt),
        n(&usage["prompt_tokens_details"]["cached_tokens"]),
    ))
}

/// One line per agent: each turn's prompt tokens, cached tokens and time to first token.
fn report(agent: &str, run: &Run) {
    let turns: Vec<String> = run
        .requests
        .iter()
        .filter(|r| r["method"] == "POST")
        .map(|r| {
            let (prompt, cached) = tokens(&r["usage"]).unwrap_or((0, 0));
            let ttft = r["ttft"].as_f64().or(r["seconds"].as_f64()).unwrap_or(0.0);
            format!("{prompt}/{cached} {ttft:.1}s")
        })
        .collect();
    eprintln!(
        "{agent}: turns (prompt/cached tokens, time to first token): {}",
        turns.join(", ")
    );
}

fn check(agent: &str, run: &Run) {
    let generating: Vec<&Value> = run
        .requests
        .iter()
        .filter(|r| r["method"] == "POST")
        .collect();
    assert!(
        !generating.is_empty(),
        "{agent} sent no request:\n{}",
        run.output
    );
    for r in &run.requests {
        let status = r["status"].as_u64().unwrap_or(0);
        assert!(
            (200..300).contains(&status),
            "{agent}: {} {} answered {status}: {}",
            r["method"],
            r["path"],
            r["answer"]
        );
        // An agent that leaves an answer before its end has given up on it (a stream with
        // no event for minutes).
        assert!(
            r["aborted"] != true,
            "{agent} left an answer to {} before its end",
            r["path"]
        );
    }
    // Claude Code ends a headless run that reaches `--max-turns` with exit 1 and says so: the
    // loop ran as far as the test lets it (the 0.5B writes its file again and again).
    let capped = agent == "claude" && run.output.contains("Reached max turns");
    assert!(
        run.success || capped,
        "{agent} did not exit 0:\n{}",
        run.output
    );
    if agent == "qwen" {
        let offered = generating[0]["body"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty());
        assert!(offered, "qwen offered no tools");
        let answered = generating[0]["usage"]["completion_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0);
        assert!(
            answered && run.output.lines().count() > 1,
            "qwen showed no answer:\n{}",
            run.output
        );
        return;
    }
    assert!(
        generating.iter().any(|r| sends_a_tool_result(r)),
        "{agent} ran no tool call and sent back no result ({} requests):\n{}",
        generating.len(),
        run.output
    );
}

#[test]
fn the_coding_agents_work_against_hearth_serve() -> TestResult {
    let (Some(model), Some(agents)) = (common::real_gguf(), common::coding_agents()) else {
        return Ok(());
    };
    // Answers capped at 512 tokens: the agents ask for 8-32K, which a 0.5B that loops spends
    // many minutes on at this depth.
    let server = common::Served::on_cpu(&model, &["--max-tokens", "512", "-q"])?;
    let agents: PathBuf = agents;
    let runs: [(&str, Vec<&str>); 4] = [
        (
            "claude",
            vec![
                "-p",
                TASK,
                "--dangerously-skip-permissions",
                "--max-turns",
                "3",
            ],
        ),
        (
            "codex",
            vec![
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                TASK,
            ],
        ),
        (
            "qwen",
            vec!["-p", TASK, "--yolo", "--max-session-turns", "3"],
        ),
        ("opencode", vec!["run", TASK]),
    ];
    let only = std::env::var("HEARTH_AGENTS").unwrap_or_default();
    let mut failures = vec![];
    for (agent, args) in runs {
        if !only.is_empty() && !only.split(',').any(|a| a == agent) {
            continue;
        }
        let run = run_agent(&agents, &server.addr, agent, &args)?;
        report(agent, &run);
        let checked = std::panic::catch_unwind(|| check(agent, &run));
        if checked.is_err() {
            failures.push(agent);
        }
    }
    assert!(failures.is_empty(), "failed: {failures:?}");
    Ok(())
}
