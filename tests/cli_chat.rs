//! `hearth chat`, `hearth template` and `hearth models` end to end on the tiny fixture.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

fn hearth(args: &[&str], stdin: &str) -> (bool, String, String) {
    hearth_bytes(args, stdin.as_bytes())
}

fn hearth_bytes(args: &[&str], stdin: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A child that fails before reading its input (a bad flag) closes the pipe: what it
    // printed and its status say what happened.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn chat_over_piped_stdin_keeps_history_and_obeys_commands() {
    let model = common::tiny("qwen2");
    let m = model.to_str().unwrap();
    let args = [
        "chat",
        "--model",
        m,
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
    ];
    let (ok, out, err) = hearth(
        &args,
        "Hello\n/system Be brief.\nHow are you?\n/think on\n/reset\n/system\nHello\n/bogus\n",
    );
    assert!(ok, "{err}");
    let answers: Vec<&str> = out.lines().collect();
    assert_eq!(answers.len(), 3, "one line per answer: {out:?}");
    // After /reset and removing the system message, the first question gets the same
    // (greedy) answer as at the start.
    assert_eq!(answers[0], answers[2]);
    assert!(
        err.contains("[system message set]")
            && err.contains("[system message removed]")
            && err.contains("[history cleared]"),
        "{err}"
    );
    assert!(
        err.contains("does not think") && err.contains("unknown command /bogus"),
        "{err}"
    );
}

/// An undecodable line and a message longer than the context are errors for those lines,
/// named by number; the lines after them are still answered, and the exit status says that
/// some failed.
#[test]
fn chat_survives_a_bad_line() {
    let model = common::tiny("qwen2");
    let args = [
        "chat",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
    ];
    let mut input = b"Hello\n".to_vec();
    input.extend_from_slice(b"caf\xe9 \xff\n");
    input.extend_from_slice(format!("{}\n", "word ".repeat(600)).as_bytes());
    input.extend_from_slice(b"How are you?\n");
    let (ok, out, err) = hearth_bytes(&args, &input);
    assert!(!ok, "a failed line fails the session's exit status: {err}");
    assert_eq!(
        out.lines().count(),
        2,
        "lines 1 and 4 answered: {out:?}\n{err}"
    );
    assert!(
        err.contains("line 2: not valid UTF-8") && err.contains("column 4"),
        "{err}"
    );
    assert!(
        err.contains("line 3: the message is") && err.contains("512 positions"),
        "{err}"
    );
    assert!(err.contains("2 input line(s) failed (line 2, 3)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A conversation longer than the context drops its oldest turns, says so, and answers
/// every message.
#[test]
fn chat_trims_history_that_outgrows_the_context() {
    let model = common::tiny("qwen2");
    let args = [
        "chat",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "16",
        "--system",
        "Be brief.",
    ];
    // Each message is about a third of the fixture's 512 positions.
    let message = "word ".repeat(70);
    let input = format!("{message}\n").repeat(5);
    let (ok, out, err) = hearth(&args, &input);
    assert!(ok, "{err}");
    assert_eq!(
        out.lines().count(),
        5,
        "every message answered: {out:?}\n{err}"
    );
    assert!(err.contains("[history trimmed: dropped the"), "{err}");
}

#[test]
fn chat_rejects_bad_flags() {
    let model = common::tiny("qwen2");
    let (ok, _, err) = hearth(
        &[
            "chat",
            "--model",
            model.to_str().unwrap(),
            "--think",
            "maybe",
        ],
        "",
    );
    assert!(!ok && err.contains("--think"), "{err}");
}

#[test]
fn template_prints_exactly_the_prompt() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("conv.json");
    std::fs::write(
        &input,
        r#"{"messages": [{"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
             "function": {"name": "calculator", "arguments": "{\"expression\": \"2+2\"}"}}]},
            {"role": "tool", "content": "4"}]}"#,
    )
    .unwrap();
    let model = common::tiny("qwen2");
    let (ok, out, err) = hearth(
        &[
            "template",
            "--model",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
        ],
        "",
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("<|im_start|>system\nYou are Qwen"), "{out}");
    // Qwen2.5's template applies tojson to the arguments as given: a string stays a string.
    assert!(
        out.contains(r#""arguments": "{\"expression\": \"2+2\"}"}"#),
        "{out}"
    );
    assert!(
        out.ends_with("<|im_start|>assistant\n"),
        "no added newline: {out:?}"
    );

    // A meta-template instead of the model's own.
    let (ok, out, _) = hearth(
        &[
            "template",
            "--model",
            model.to_str().unwrap(),
            "--template",
            "internlm2",
            "--input",
            input.to_str().unwrap(),
        ],
        "",
    );
    assert!(ok);
    assert!(
        out.starts_with(
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
        ),
        "{out}"
    );

    std::fs::write(
        &input,
        r#"{"messages": [{"role": "wizard", "content": "hi"}]}"#,
    )
    .unwrap();
    let (ok, _, err) = hearth(
        &[
            "template",
            "--model",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
        ],
        "",
    );
    assert!(!ok && err.contains("wizard"), "{err}");
}

#[test]
fn models_lists_the_cards() {
    let (ok, out, _) = hearth(&["models"], "");
    assert!(ok);
    for name in [
        "qwen2.5-0.5b-instruct",
        "qwen2.5-7b-instruct",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "qwen3-8b",
    ] {
        assert!(out.contains(name), "{name} missing from {out}");
    }
}

#[test]
fn a_card_name_resolves_to_its_hub_repo() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["run", "--model", "qwen2.5-0.5b-instruct", "--offline", "hi"])
        .env("HF_HUB_CACHE", tmp.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("Qwen/Qwen2.5-0.5B-Instruct") && err.contains("not in the Hugging Face cache"),
        "{err}"
    );
}

/// `hearth chat --image` and `/image` on the tiny Qwen3.5 with a vision tower: the first
/// message with the image gives transformers' greedy answer (the golden's); a second turn
/// keeps the image in the history; a model without vision refuses the flag by its file.
#[test]
fn chat_takes_images_by_flag_and_command() {
    let dir = common::vision_dir();
    let image = dir.join("image1.png");
    let want = common::vision_golden().unwrap().text;
    let args = [
        "chat",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "--image",
        image.to_str().unwrap(),
    ];
    let (ok, out, err) = hearth(&args, "What is this?\nAnd now?\n");
    assert!(ok, "{err}");
    // The model thinks: its reasoning goes to stderr when stdout is not a terminal.
    assert!(
        format!("{err}{out}").contains(want.trim()),
        "{want:?} in {err} / {out}"
    );
    let with_command = format!("/image {}\nWhat is this?\n", image.display());
    let (ok, out2, err2) = hearth(&args[..9], &with_command);
    assert!(ok, "{err2}");
    assert!(
        err2.contains("[image attached to the next message]"),
        "{err2}"
    );
    assert!(format!("{err2}{out2}").contains(want.trim()), "{err2}");

    let text = common::tiny("qwen2");
    let (ok, _, err) = hearth(
        &[
            "chat",
            "--model",
            text.to_str().unwrap(),
            "--device",
            "cpu",
            "--image",
            image.to_str().unwrap(),
        ],
        "Hi\n",
    );
    assert!(
        !ok && err.contains("image1.png") && err.contains("text only"),
        "{err}"
    );
}

/// `hearth chat --tools` takes images too: `--image` for the first message, `/image FILE` for
/// the next; a file that is no image is an error on its line (and the exit status says so).
#[test]
fn an_agent_chat_takes_images() {
    let dir = common::vision_dir();
    let (png, json) = (dir.join("image1.png"), dir.join("config.json"));
    let stdin = format!(
        "What is this?\n/image {}\n/image {}\nAnd this?\n",
        json.display(),
        png.display()
    );
    let (ok, _out, err) = hearth(
        &[
            "chat",
            "--model",
            dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--tools",
            "",
            "--max-tokens",
            "2",
            "--image",
            png.to_str().unwrap(),
        ],
        &stdin,
    );
    assert!(!ok, "line 2 failed: {err}");
    assert!(
        err.contains("error: line 2") && err.contains("config.json"),
        "{err}"
    );
    assert!(
        err.contains("[image attached to the next message]"),
        "{err}"
    );
    assert_eq!(err.matches("[stop:").count(), 2, "both messages ran: {err}");
}
