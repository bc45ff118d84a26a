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
    let model_s = model.to_str().ok_or("model path")?;
    for live in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
        cmd.arg("replay");
        if live {
            cmd.args(["--live", "--model", model_s, "--device", "cpu"]);
        }
        let out = cmd.arg(file_s).output()?;
        assert!(
            out.status.success(),
            "live={live}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
