//! `hearth agent --record` and `hearth replay` end to end on the tiny fixture: a recording
//! replays step for step, with the recorded answers and live on the same model; an edited
//! recording is reported at its first difference; a cut recording and another model are
//! clear errors naming the file.

mod common;

use std::path::Path;
use std::process::{Command, Output};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn hearth(args: &[&str]) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn path_str(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

fn record(file: &Path) -> TestResult {
    let model = common::tiny("qwen2");
    let out = hearth(&[
        "agent",
        "--model",
        path_str(&model)?,
        "--device",
        "cpu",
        "--max-tokens",
        "6",
        "--max-iterations",
        "2",
        "--tools",
        "time",
        "--record",
        path_str(file)?,
        "What time is it?",
    ])?;
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

#[test]
fn a_recording_replays_with_recorded_answers_and_live() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("run.jsonl");
    record(&file)?;
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines[0]["type"], "run");
    assert_eq!(lines[1]["type"], "model_request");
    assert!(lines[2]["duration_ms"].is_u64(), "{}", lines[2]);
    assert_eq!(lines.last().ok_or("empty")?["type"], "end");

    let out = hearth(&["replay", path_str(&file)?])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("same"), "{}", text(&out.stdout));

    let model = common::tiny("qwen2");
    let out = hearth(&[
        "replay",
        "--live",
        path_str(&file)?,
        "--model",
        path_str(&model)?,
        "--device",
        "cpu",
    ])?;
    assert!(
        out.status.success(),
        "greedy is reproducible: {}",
        text(&out.stderr)
    );
    Ok(())
}

#[test]
fn an_edited_recording_is_reported_at_the_first_difference() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("run.jsonl");
    record(&file)?;
    // The recorded answer no longer matches what the run comes to.
    let edited: Vec<String> = std::fs::read_to_string(&file)?
        .lines()
        .map(|l| -> Result<String, serde_json::Error> {
            let mut v: serde_json::Value = serde_json::from_str(l)?;
            if v["type"] == "end" {
                v["run"]["answer"] = "something else".into();
            }
            serde_json::to_string(&v)
        })
        .collect::<Result<_, _>>()?;
    let n = edited.len();
    std::fs::write(&file, edited.join("\n") + "\n")?;
    let out = hearth(&["replay", path_str(&file)?])?;
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("step {} (end of run)", n - 1)) && err.contains("run.answer"),
        "{err}"
    );
    assert!(err.contains("something else"), "{err}");
    Ok(())
}

#[test]
fn cut_recordings_and_other_models_are_errors_naming_the_file() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("run.jsonl");
    record(&file)?;
    let whole = std::fs::read_to_string(&file)?;
    let cut = tmp.path().join("cut.jsonl");
    std::fs::write(&cut, &whole[..whole.len() - 10])?;
    let out = hearth(&["replay", path_str(&cut)?])?;
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cut.jsonl") && err.contains("cut off"),
        "{err}"
    );

    let other = common::tiny("qwen3");
    let out = hearth(&[
        "replay",
        "--live",
        path_str(&file)?,
        "--model",
        path_str(&other)?,
        "--device",
        "cpu",
    ])?;
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("run.jsonl") && err.contains("recorded with model"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&file)?,
        whole,
        "the recording is never written"
    );
    Ok(())
}
