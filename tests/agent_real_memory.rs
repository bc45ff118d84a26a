//! The real Qwen2.5-Coder-0.5B-Instruct GGUF (scripts/fetch-test-models.sh, or HEARTH_TEST_GGUF)
//! with agent memory and knowledge: a fact given in one process is used in the next
//! (`--session`), a fact only a folder of files holds is used (`--knowledge`), and a recorded
//! run replays live, step for step, on the same model. Memory and knowledge are tested without
//! tools: offered a clock, this small model calls it whatever the question.

mod common;

use std::path::Path;
use std::process::{Command, Output};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn agent(
    model: &Path,
    extra: &[&str],
    task: &str,
) -> Result<Output, Box<dyn std::error::Error + Send + Sync>> {
    let model = model.to_str().ok_or("model path is not UTF-8")?;
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["agent", "--model", model, "--device", "cpu", "--json"])
        .args(extra)
        .arg(task)
        .output()?;
    Ok(out)
}

fn answer(out: &Output) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(run["answer"].as_str().ok_or("no answer")?.to_string())
}

#[test]
fn a_session_remembers_across_processes() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    let db = db.to_str().ok_or("db path")?;
    let session = [
        "--max-tokens",
        "64",
        "--tools",
        "",
        "--session",
        "ada",
        "--db",
        db,
    ];
    answer(&agent(
        &model,
        &session,
        "My name is Adalbertine. Please remember it.",
    )?)?;
    let said = answer(&agent(&model, &session, "What is my name?")?)?;
    assert!(said.contains("Adalbertine"), "{said}");
    // Without the session the name is unknown (the model may also say nothing at all).
    let fresh = agent(
        &model,
        &["--max-tokens", "64", "--tools", ""],
        "What is my name?",
    )?;
    let run: serde_json::Value = serde_json::from_slice(&fresh.stdout)?;
    let said = run["answer"].as_str().unwrap_or_default();
    assert!(!said.contains("Adalbertine"), "{said}");
    Ok(())
}

#[test]
fn knowledge_from_a_folder_answers_what_only_it_knows() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("notes");
    std::fs::create_dir(&dir)?;
    std::fs::write(
        dir.join("lab.txt"),
        "The door code of the Hearth lab is 4721-K.\n\nVisitors sign in at the front desk.",
    )?;
    std::fs::write(
        dir.join("menu.txt"),
        "The canteen serves soup on Mondays and fish on Fridays.",
    )?;
    let dir = dir.to_str().ok_or("dir path")?;
    let said = answer(&agent(
        &model,
        &["--max-tokens", "64", "--tools", "", "--knowledge", dir],
        "What is the door code of the Hearth lab?",
    )?)?;
    assert!(said.contains("4721"), "{said}");
    Ok(())
}

#[test]
fn a_recorded_tool_run_replays_live_on_the_same_model() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("run.jsonl");
    let file_s = file.to_str().ok_or("file path")?;
    let out = agent(
        &model,
        &[
            "--tools",
            "calculator",
            "--max-tokens",
            "128",
            "--record",
            file_s,
        ],
        "What is 1234 * 5678? Use the calculator.",
    )?;
    assert!(answer(&out)?.contains("7006652"));
    let text = std::fs::read_to_string(&file)?;
    assert!(
        text.lines().any(|l| l.contains("\"type\":\"tool_result\"")),
        "{text}"
    );
    for live in [false, true] {
        let out = replay(&model, file_s, live, &[])?;
        assert!(
            out.status.success(),
            "live={live}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Prompt tokens and cached prompt tokens of the first model answer in a recording.
fn first_prefill(record: &Path) -> Result<(u64, u64), Box<dyn std::error::Error + Send + Sync>> {
    let all = common::recorded_prefill(record)?;
    Ok(*all.first().ok_or("no model answer recorded")?)
}

/// `hearth replay` of `file`; with `live`, on `model` again, with `extra` flags.
fn replay(model: &Path, file: &str, live: bool, extra: &[&str]) -> std::io::Result<Output> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.arg("replay");
    if live {
        cmd.arg("--live")
            .arg("--model")
            .arg(model)
            .args(["--device", "cpu"]);
    }
    cmd.args(extra).arg(file).output()
}

/// A session resumed in a new process gets its KV cache back: each turn prefills only what
/// follows the last one, and the answers are those of the same conversation held in one
/// process (`hearth chat`). A cache from other kernels is refused with the reason.
#[test]
fn a_resumed_session_gets_its_kv_cache_back() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    let db_s = db.to_str().ok_or("db path")?;
    let turns = [
        "My favourite number is 17. Reply with one short sentence.",
        "Add 5 to my favourite number. Reply with the number only.",
        "What was my favourite number? Reply with the number only.",
    ];
    let mut answers = vec![];
    let mut previous_prompt = 0;
    let mut kernels = String::new();
    for (i, task) in turns.iter().enumerate() {
        let record = tmp.path().join(format!("turn{i}.jsonl"));
        let record_s = record.to_str().ok_or("record path")?;
        let out = agent(
            &model,
            &[
                "--max-tokens",
                "24",
                "--tools",
                "",
                "--session",
                "kv",
                "--db",
                db_s,
                "--record",
                record_s,
            ],
            task,
        )?;
        answers.push(answer(&out)?);
        let stderr = String::from_utf8_lossy(&out.stderr);
        kernels = stderr
            .lines()
            .find_map(|l| l.split("CPU kernels: ").nth(1))
            .unwrap_or_default()
            .to_string();
        let (prompt, cached) = first_prefill(&record)?;
        if i > 0 {
            assert!(stderr.contains("tokens of KV cache restored"), "{stderr}");
            assert!(
                cached >= previous_prompt,
                "turn {i}: {cached} of {prompt} prompt tokens cached; the previous prompt alone had {previous_prompt}"
            );
        }
        previous_prompt = prompt;
    }
    // The same conversation in one process.
    let chat_db = tmp.path().join("chat.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "--model", model.to_str().ok_or("model path")?])
        .args(["--device", "cpu", "--max-tokens", "24", "--tools", ""])
        .args(["--session", "kv", "--db", chat_db.to_str().ok_or("db")?])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        for t in turns {
            writeln!(stdin, "{t}")?;
        }
    }
    let out = child.wait_with_output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let one_process = String::from_utf8_lossy(&out.stdout);
    let expected: String = answers.iter().map(|a| format!("{a}\n")).collect();
    assert_eq!(
        one_process.trim(),
        expected.trim(),
        "answers differ from one process's"
    );

    // Other kernels compute other numbers: their process does not reuse this cache.
    if kernels.starts_with("portable") {
        return Ok(());
    }
    let record = tmp.path().join("portable.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["agent", "--model", model.to_str().ok_or("model path")?])
        .args([
            "--device",
            "cpu",
            "--json",
            "--max-tokens",
            "8",
            "--tools",
            "",
        ])
        .args(["--session", "kv", "--db", db_s, "--record"])
        .arg(&record)
        .arg("Say hi.")
        .env("HEARTH_CPU", "portable")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the saved KV cache is not used")
            && stderr.contains("kernels portable")
            && stderr.contains("computed in full"),
        "{stderr}"
    );
    assert_eq!(first_prefill(&record)?.1, 0);
    Ok(())
}

/// A run that read the clock replays live with the recorded tool results (only the model is
/// checked, and greedy decoding reproduces it); with the real clock it diverges at the tool's
/// result, and the replay says where.
#[test]
fn a_live_replay_can_take_the_recorded_tool_results() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("clock.jsonl");
    let file_s = file.to_str().ok_or("file path")?;
    let out = agent(
        &model,
        &["--tools", "time", "--max-tokens", "64", "--record", file_s],
        "What year is it now? Use the current time tool.",
    )?;
    answer(&out)?;
    let text = std::fs::read_to_string(&file)?;
    assert!(
        text.lines().any(|l| l.contains("\"type\":\"tool_result\"")),
        "the model did not read the clock: {text}"
    );
    // The clock moves on by at least a second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = replay(&model, file_s, true, &["--recorded-tools"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = replay(&model, file_s, true, &[])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("clock.jsonl") && err.contains("content"),
        "{err}"
    );
    Ok(())
}
