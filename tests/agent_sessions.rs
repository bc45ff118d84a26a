//! `hearth agent --session NAME --db FILE` end to end on the tiny fixture: turns survive the
//! process, a killed turn leaves the earlier ones intact, a held session is refused, and bad
//! database files are clear errors that leave the file as it was.

mod common;

use hearth_agent::SessionStore;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn agent_cmd(db: &Path, session: &str, task: &str, max_tokens: &str) -> Result<Command, String> {
    let model = common::tiny("qwen2");
    let model = model.to_str().ok_or("model path is not UTF-8")?;
    let db = db.to_str().ok_or("db path is not UTF-8")?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.args([
        "agent",
        "--model",
        model,
        "--device",
        "cpu",
        "--max-tokens",
        max_tokens,
        // No tools: the prompt of a long session (summary, window) stays inside the fixture's
        // 512 positions.
        "--max-iterations",
        "1",
        "--tools",
        "",
        "--session",
        session,
        "--db",
        db,
        task,
    ])
    .env("HF_HUB_OFFLINE", "1");
    Ok(cmd)
}

fn run(
    db: &Path,
    session: &str,
    task: &str,
) -> Result<Output, Box<dyn std::error::Error + Send + Sync>> {
    Ok(agent_cmd(db, session, task, "4")?.output()?)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Memory texts of a saved session, and its turn count.
fn saved(
    db: &Path,
    session: &str,
) -> Result<(Vec<String>, u64), Box<dyn std::error::Error + Send + Sync>> {
    let store = SessionStore::open(db)?;
    let Some(s) = store.load(session)? else {
        return Ok((vec![], 0));
    };
    let memory = s
        .state
        .get("memory")
        .and_then(|m| m.as_array())
        .ok_or("no memory")?;
    let texts = memory
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    Ok((texts, s.turns))
}

#[test]
fn turns_continue_across_processes() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    // Twenty turns, each in its own process.
    let mut previous_prompt = 0;
    for i in 1..=20 {
        let record = tmp.path().join(format!("turn{i}.jsonl"));
        let out = agent_cmd(&db, "work", &format!("question {i}"), "4")?
            .arg("--record")
            .arg(&record)
            .output()?;
        // The tiny model may answer nothing useful; the turn is still remembered.
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        let requests = common::recorded_prefill(&record)?;
        let (prompt, cached) = *requests.first().ok_or("no model request recorded")?;
        if i > 1 {
            let said = format!("{} earlier turn(s)", i - 1);
            assert!(stderr(&out).contains(&said), "{}", stderr(&out));
            assert!(
                stderr(&out).contains("tokens of KV cache restored"),
                "turn {i}: {}",
                stderr(&out)
            );
        }
        // Until the history window slides (then a new summary starts each prompt, in one
        // process too), the last turn's prompt is a prefix of this one and comes back cached.
        if (2..=8).contains(&i) {
            assert!(
                cached >= previous_prompt,
                "turn {i}: {cached} of {prompt} prompt tokens cached, the previous prompt had {previous_prompt}"
            );
        }
        previous_prompt = prompt;
    }
    let (texts, turns) = saved(&db, "work")?;
    assert_eq!(turns, 20);
    assert_eq!(texts.len(), 40);
    let asked: Vec<&String> = texts.iter().step_by(2).collect();
    let expected: Vec<String> = (1..=20).map(|i| format!("question {i}")).collect();
    assert_eq!(
        asked,
        expected.iter().collect::<Vec<_>>(),
        "every turn, in order"
    );
    // Other sessions are separate.
    run(&db, "other", "hello")?;
    assert_eq!(saved(&db, "other")?.1, 1);
    assert_eq!(saved(&db, "work")?.1, 20);
    Ok(())
}

#[test]
fn a_killed_turn_is_absent_or_whole_and_the_session_goes_on() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    run(&db, "s", "one")?;
    // A turn of 60 tokens takes the tiny model some 60 ms (about 10 of them loading): kills
    // land before, during and after the turn's save.
    for delay_ms in [5u64, 20, 35, 50, 65, 90] {
        let (_, before) = saved(&db, "s")?;
        let mut child = agent_cmd(&db, "s", "interrupted", "60")?
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill()?; // SIGKILL
        child.wait()?;
        let (texts, turns) = saved(&db, "s")?;
        assert!(
            turns == before || turns == before + 1,
            "{turns} after {before}"
        );
        assert_eq!(texts.len() as u64, 2 * turns, "whole turns only: {texts:?}");
        let outcome = if turns == before { "absent" } else { "whole" };
        eprintln!("killed after {delay_ms} ms: the turn is {outcome}");
        assert_eq!(texts[0], "one");
    }
    // The dead process's claim is taken over.
    let (_, before) = saved(&db, "s")?;
    let out = run(&db, "s", "after")?;
    assert!(!stderr(&out).contains("in use"), "{}", stderr(&out));
    assert_eq!(saved(&db, "s")?.1, before + 1);
    Ok(())
}

#[test]
fn a_session_held_by_another_process_is_refused() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let db = tmp.path().join("agents.db");
    let store = SessionStore::open(&db)?;
    let claim = store.claim("busy")?;
    let out = run(&db, "busy", "hello")?;
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("agents.db")
            && err.contains(&format!("in use by process {}", std::process::id())),
        "{err}"
    );
    assert_eq!(saved(&db, "busy")?.1, 0, "nothing saved");
    drop(claim);
    let out = run(&db, "busy", "hello")?;
    assert!(!stderr(&out).contains("in use"), "{}", stderr(&out));
    assert_eq!(
        saved(&db, "busy")?.1,
        1,
        "released: the next process has it"
    );
    Ok(())
}

#[test]
fn bad_database_files_are_errors_naming_the_file() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let junk = tmp.path().join("junk.db");
    std::fs::write(
        &junk,
        "garbage bytes, not SQLite at all, long enough for a header....",
    )?;
    let newer = tmp.path().join("newer.db");
    make_newer(&newer)?;
    let ro = tmp.path().join("ro.db");
    SessionStore::open(&ro)?;
    let mut perms = std::fs::metadata(&ro)?.permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&ro, perms)?;
    for (file, why) in [
        (&junk, "not a Hearth session database"),
        (&newer, "schema version"),
        (&ro, "read-only"),
    ] {
        let before = std::fs::read(file)?;
        let out = run(file, "s", "hello")?;
        let err = stderr(&out);
        assert!(!out.status.success(), "{err}");
        let name = file.file_name().and_then(|n| n.to_str()).ok_or("name")?;
        assert!(err.contains(name) && err.contains(why), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(std::fs::read(file)?, before, "{name} was changed");
    }
    Ok(())
}

/// A database from a newer schema: a store file whose version was raised past this build's.
fn make_newer(path: &Path) -> TestResult {
    SessionStore::open(path)?;
    // SQLite keeps user_version as a big-endian u32 at byte 60 of the header.
    let mut bytes = std::fs::read(path)?;
    let v = (hearth_agent::persistence::store::SCHEMA_VERSION as u32 + 1).to_be_bytes();
    bytes
        .get_mut(60..64)
        .ok_or("short file")?
        .copy_from_slice(&v);
    std::fs::write(path, bytes)?;
    Ok(())
}
