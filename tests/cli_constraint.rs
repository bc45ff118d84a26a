//! `hearth run --json-schema FILE` and `--grammar FILE` on the tiny random model, whose free
//! text is garbage: output that parses shows the constraint held.

mod common;

use std::process::Command;

fn hearth(args: &[&str]) -> Result<(bool, String, String), std::io::Error> {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn run(flag: &str, file: &std::path::Path) -> Result<(bool, String, String), std::io::Error> {
    let model = common::tiny("qwen2");
    hearth(&[
        "run",
        "--model",
        &model.to_string_lossy(),
        "--device",
        "cpu",
        "--temperature",
        "1",
        "--max-tokens",
        "200",
        flag,
        &file.to_string_lossy(),
        "Answer:",
    ])
}

#[test]
fn run_holds_its_output_to_a_schema_or_a_grammar() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"ok": {"type": "boolean"},
            "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["ok", "n"],
            "additionalProperties": false}"#,
    )?;
    let (ok, stdout, stderr) = run("--json-schema", &schema)?;
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim())?;
    assert!(
        v["ok"].is_boolean() && v["n"].as_f64().is_some_and(|n| (0.0..=9.0).contains(&n)),
        "{v}"
    );
    assert!(stderr.contains("StopToken"), "{stderr}");

    let lark = dir.path().join("answer.lark");
    std::fs::write(&lark, "start: \"yes\" | \"no\"\n")?;
    let (ok, stdout, stderr) = run("--grammar", &lark)?;
    assert!(ok, "{stderr}");
    assert!(["yes", "no"].contains(&stdout.trim()), "{stdout:?}");

    let regex = dir.path().join("code.regex");
    std::fs::write(&regex, "[A-Z]{2}[0-9]{3}\n")?;
    let (ok, stdout, stderr) = run("--grammar", &regex)?;
    assert!(ok, "{stderr}");
    let code = stdout.trim();
    assert!(
        code.len() == 5 && code[..2].bytes().all(|b| b.is_ascii_uppercase()),
        "{code:?}"
    );
    assert!(code[2..].bytes().all(|b| b.is_ascii_digit()), "{code:?}");
    Ok(())
}

#[test]
fn run_refuses_a_bad_schema_naming_its_file() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad-schema.json");
    std::fs::write(&bad, r#"{"type": "frobnicate"}"#)?;
    let (ok, _, stderr) = run("--json-schema", &bad)?;
    assert!(!ok);
    assert!(
        stderr.contains("bad-schema.json") && stderr.contains("frobnicate"),
        "{stderr}"
    );
    let not_json = dir.path().join("not-json.json");
    std::fs::write(&not_json, "{type: object")?;
    let (ok, _, stderr) = run("--json-schema", &not_json)?;
    assert!(!ok);
    assert!(
        stderr.contains("not-json.json") && stderr.contains("not JSON"),
        "{stderr}"
    );
    let (ok, _, stderr) = run("--grammar", &dir.path().join("missing.lark"))?;
    assert!(!ok);
    assert!(stderr.contains("missing.lark"), "{stderr}");
    Ok(())
}
