//! `hearth chat --tools … --session NAME`: each line is a turn of the tool loop, the turns are
//! saved, `/reset` forgets them; with the real model a calculator call and its result show as
//! they happen.

mod common;

use hearth_agent::SessionStore;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn chat(
    model: &Path,
    args: &[&str],
    input: impl AsRef<[u8]>,
) -> Result<Output, Box<dyn std::error::Error + Send + Sync>> {
    let model = model.to_str().ok_or("model path is not UTF-8")?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "--model", model, "--device", "cpu"])
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.as_ref())?;
    Ok(child.wait_with_output()?)
}

fn turns(
    db: &Path,
    session: &str,
) -> Result<(u64, usize), Box<dyn std::error::Error + Send + Sync>> {
    let saved = SessionStore::open(db)?
        .load(session)?
        .ok_or("no session saved")?;
    let memory = saved
        .state
        .get("memory")
        .and_then(|m| m.as_array())
        .ok_or("no memory")?;
    Ok((saved.turns, memory.len()))
}

/// The agent's chat reads its lines as the plain chat does (one read loop): a line that is not
/// UTF-8 is that line's error, the others are answered, and the exit status names it.
#[test]
fn a_bad_line_fails_alone_in_the_agents_chat() -> TestResult {
    let model = common::tiny("qwen2");
    let args = ["--max-tokens", "4", "--tools", "calculator"];
    let out = chat(&model, &args, b"first\ncaf\xe9 \xff\nsecond\n")?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("line 2: not valid UTF-8") && err.contains("column 4"),
        "{err}"
    );
    assert!(err.contains("1 input line(s) failed (line 2)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    Ok(())
}

#[test]
fn a_chat_session_is_saved_turn_by_turn_and_reset() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    let db_s = db.to_str().ok_or("db path")?;
    let model = common::tiny("qwen2");
    let args = [
        "--max-tokens",
        "4",
        "--tools",
        "calculator",
        "--session",
        "c",
        "--db",
        db_s,
    ];
    let out = chat(&model, &args, "first\nsecond\n")?;
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    assert_eq!(turns(&db, "c")?, (2, 4));
    // The next process continues, then /reset empties the session.
    chat(&model, &args, "third\n")?;
    assert_eq!(turns(&db, "c")?, (3, 6));
    chat(&model, &args, "/reset\n")?;
    assert_eq!(turns(&db, "c")?.1, 0);
    Ok(())
}

#[test]
fn the_real_model_calls_the_calculator_in_a_chat() -> TestResult {
    let Some(model) = common::real_gguf() else {
        return Ok(());
    };
    let out = chat(
        &model,
        &["--max-tokens", "128", "--tools", "calculator"],
        "What is 1234 * 5678? Use the calculator.\n",
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("→ calculator("), "{stderr}");
    assert!(stderr.contains("← calculator: 7006652"), "{stderr}");
    assert!(stdout.contains("7006652"), "{stdout}");
    Ok(())
}
