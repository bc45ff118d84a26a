//! The shop assistant example (examples/shop_assistant.rs) across process restarts: each
//! request is a new process; the conversation continues from the SQLite session; a process
//! that dies mid-run leaves the last committed session intact.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    // target/debug/deps/<this test> → target/debug/examples/shop_assistant (cargo test builds it)
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join("shop_assistant")
}

fn run(db: &Path, args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = Command::new(example())
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, stderr)
}

#[test]
fn a_conversation_survives_restarts_and_crashes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("shop.db");
    let (ok, r, err) = run(&db, &["recommend"]);
    assert!(ok, "{err}");
    assert_eq!(r["response_message"], "What is your budget in dollars?");
    let (_, r, _) = run(&db, &["--resume", "answer", "100"]);
    assert_eq!(r["response_message"], "Which colour do you like?");
    // Dies mid-run: the answer it was given is lost, the session is not.
    let (ok, _, _) = run(&db, &["--resume", "crash"]);
    assert!(!ok);
    let (_, r, _) = run(&db, &["--resume", "answer", "blue"]);
    assert_eq!(r["response_type"], "done");
    assert_eq!(r["response_message"], "I recommend the blue linen shirt.");
    // Other routes: rules + the (scripted) LLM router, and the fashion subgraph.
    let (_, r, _) = run(&db, &["search", "scarf"]);
    assert_eq!(r["response_data"][0]["name"], "red wool scarf");
    let (_, r, _) = run(&db, &["ask", "Do you ship to Japan?"]);
    assert_eq!(r["response_type"], "answer");
    let (_, r, _) = run(&db, &["trends"]);
    let kinds: Vec<&str> = r["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[..3], ["NODE", "SUBGRAPH", "NODE"]);
}

#[test]
fn a_corrupt_session_file_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("broken.db");
    std::fs::write(
        &db,
        "definitely not sqlite, but long enough to have a header page .......",
    )
    .unwrap();
    let before = std::fs::read(&db).unwrap();
    let (ok, _, err) = run(&db, &["recommend"]);
    assert!(!ok);
    assert!(
        err.contains("broken.db") && err.contains("not a Hearth session database"),
        "{err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

/// The same graph with Hearth's engine in process (the real model, when fetched).
#[test]
fn the_example_runs_on_the_real_engine() {
    let Some(model) = common::real_gguf() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("shop.db");
    let (ok, r, err) = run(
        &db,
        &[
            "--model",
            model.to_str().unwrap(),
            "ask",
            "Do you sell scarves?",
        ],
    );
    assert!(ok, "{err}");
    // The LLM router chose a node among the rule candidates, and that node answered.
    let decision = &r["trace"][0]["decision"];
    assert_eq!(decision["llm_used"], true, "{r:#}");
    assert!(
        ["llm_decision", "fallback"].contains(&decision["decision_type"].as_str().unwrap()),
        "{r:#}"
    );
    assert!(
        ["answer", "results", "question"].contains(&r["response_type"].as_str().unwrap()),
        "{r:#}"
    );
}
