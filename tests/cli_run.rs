//! `hearth run` end to end on the tiny fixture.

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

/// `hearth parity` of `model` against `golden` on the CPU: (success, stdout, stderr).
fn parity(
    model: &std::path::Path,
    golden: &std::path::Path,
    dtype: &str,
) -> (bool, String, String) {
    hearth(&[
        "parity",
        "--model",
        model.to_str().unwrap(),
        "--golden",
        golden.to_str().unwrap(),
        "--device",
        "cpu",
        "--dtype",
        dtype,
    ])
}

#[test]
fn run_streams_a_completion_and_timings() {
    let model = common::tiny("qwen2");
    let (ok, stdout, stderr) = hearth(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "12",
        "Hello, world!",
    ]);
    assert!(ok, "{stderr}");
    assert!(!stdout.trim().is_empty());
    assert!(
        stderr.contains("12 generated") && stderr.contains("decode"),
        "{stderr}"
    );
    // Greedy is deterministic.
    let (_, again, _) = hearth(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "12",
        "Hello, world!",
    ]);
    assert_eq!(stdout, again);
}

#[test]
fn run_rejects_bad_arguments_clearly() {
    let model = common::tiny("qwen2");
    let m = model.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--model", m, "--max-tokens", "0", "hi"],
            "--max-tokens",
        ),
        (
            &["run", "--model", m, "--temperature", "-0.5", "hi"],
            "--temperature",
        ),
        (&["run", "--model", m, ""], "empty prompt"),
        (&["run", "--model", m, " \n\t "], "only whitespace"),
        (&["run", "--model", m, "--device", "tpu", "hi"], "--device"),
        (&["run", "--model", m, "--dtype", "int3", "hi"], "--dtype"),
        (&["run", "--model", "/no/such/dir", "hi"], "--model"),
        (
            &["run", "--model", "Qwen/NotCached-0B", "hi"],
            "not in the Hugging Face cache",
        ),
    ];
    for (args, needle) in cases {
        let (ok, _, stderr) = hearth(args);
        assert!(!ok, "{args:?} should fail");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_without_the_feature_says_how_to_rebuild() {
    let model = common::tiny("qwen2");
    let (ok, _, stderr) = hearth(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cuda",
        "hi",
    ]);
    assert!(!ok);
    assert!(stderr.contains("--features cuda"), "{stderr}");
}

#[test]
fn prompt_longer_than_the_model_is_refused() {
    let model = common::tiny("qwen2");
    let long = "word ".repeat(600);
    let (ok, _, stderr) = hearth(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        &long,
    ]);
    assert!(!ok);
    assert!(stderr.contains("max_position_embeddings"), "{stderr}");
}

/// `hearth parity` (what benches/gpu-check.sh runs on a GPU) passes on the CPU in f32 and bf16
/// against the transformers goldens, and fails, naming the golden, against another model's.
#[test]
fn parity_passes_against_the_goldens_and_fails_against_the_wrong_one() {
    let model = common::tiny("qwen2");
    let golden = common::fixtures().join("golden/tiny-qwen2.json");
    for dtype in ["f32", "bf16"] {
        let (ok, stdout, stderr) = parity(&model, &golden, dtype);
        assert!(ok, "{dtype}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["pass"], true, "{stdout}");
        assert_eq!(report["dtype"], dtype);
    }
    let wrong = common::fixtures().join("golden/tiny-qwen3.json");
    let (ok, _, stderr) = parity(&model, &wrong, "f32");
    assert!(!ok && stderr.contains("tiny-qwen3.json"), "{stderr}");
}

/// transformers' own bf16 run of the tiny Qwen3.5-MoE parts from its f32 run (a router's near
/// tie flips): `hearth parity` in bf16 then checks against the f32 logits, and passes.
#[test]
fn parity_in_bf16_checks_against_f32_where_the_reference_bf16_parts() {
    let model = common::fixtures().join("tiny-qwen3.5-moe");
    let golden = common::fixtures().join("golden/tiny-qwen3.5-moe.json");
    let (ok, stdout, stderr) = parity(&model, &golden, "bf16");
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["pass"], true, "{stdout}");
    assert_eq!(report["checks"][0]["name"], "logits_vs_f32", "{stdout}");
}

/// A GGUF model card uses the file `scripts/fetch-test-models.sh` fetched (in `HEARTH_MODELS`)
/// instead of the hub: here a file that is no GGUF, so the error names it.
#[test]
fn a_gguf_card_loads_the_fetched_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    std::fs::write(&file, b"not a gguf file").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["run", "--model", "qwen2.5-coder-0.5b-instruct-q4_k_m", "hi"])
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", dir.path().join("hub"))
        .env("HEARTH_MODELS", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(file.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains("Hugging Face cache"), "{stderr}");
}

/// `-q` leaves warnings and errors only; log lines to a pipe carry no colour codes.
#[test]
fn quiet_drops_info_lines_and_pipes_get_no_colour() {
    let model = common::tiny("qwen2");
    let m = model.to_str().unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["run", "--model", m, "--device", "cpu", "--max-tokens", "2"])
            .args(extra)
            .arg("hi")
            .env("HF_HUB_OFFLINE", "1")
            .env_remove("HEARTH_LOG")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let normal = run(&[]);
    assert!(
        normal.contains("INFO") && normal.contains("loaded"),
        "{normal}"
    );
    assert!(!normal.contains("\x1b["), "{normal:?}");
    let quiet = run(&["-q"]);
    assert!(!quiet.contains("INFO"), "{quiet}");
    let verbose = run(&["-vv"]);
    assert!(verbose.contains("loaded"), "{verbose}");
}

/// `HEARTH_CPU` forces the CPU kernels' level: a name it does not know, or a level this CPU
/// lacks, is an error naming the variable (never an illegal instruction); every level the CPU
/// runs answers with the real model.
#[test]
fn hearth_cpu_forces_a_kernel_level_or_says_why_not() {
    use hearth_engine::kernels::{cpu, CpuLevel};
    let tiny = common::tiny("qwen2");
    let run = |level: &str, model: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args([
                "run",
                "--model",
                model,
                "--device",
                "cpu",
                "--temperature",
                "0",
            ])
            .args(["--max-tokens", "6", "The capital of France is"])
            .env("HF_HUB_OFFLINE", "1")
            .env("HEARTH_CPU", level)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, stderr) = run("sse9", tiny.to_str().unwrap());
    assert!(!ok);
    assert!(
        stderr.contains("HEARTH_CPU") && stderr.contains("\"sse9\"") && stderr.contains("avx2"),
        "{stderr}"
    );
    // Levels this CPU lacks (on x86-64 `neon`, on ARM `avx2`): refused, naming the features.
    for level in CpuLevel::ALL {
        if cpu::runnable().contains(&level) {
            continue;
        }
        let (ok, _, stderr) = run(level.name(), tiny.to_str().unwrap());
        assert!(!ok, "{level}");
        assert!(
            stderr.contains("HEARTH_CPU") && stderr.contains("lacks"),
            "{level}: {stderr}"
        );
    }
    let Some(gguf) = common::real_gguf() else {
        return;
    };
    // Each level sums the same integer block products in its own order; over 24 layers that
    // may flip a later near-tie, so each level is held to the answer, not to the others' text.
    for level in cpu::runnable() {
        let (ok, text, stderr) = run(level.name(), gguf.to_str().unwrap());
        assert!(ok, "{level}: {stderr}");
        assert!(text.trim_start().starts_with("Paris"), "{level}: {text:?}");
    }
}

/// `hearth bench --roofline`: each decode rate as a share of the measured read bandwidth,
/// from the bytes of weights one token reads — for the tiny tied-embedding model in f32, every
/// parameter (the table is also the LM head) plus one embedding row.
#[test]
fn bench_reports_the_decode_roofline() {
    let model = common::tiny("qwen2");
    let (ok, stdout, stderr) = hearth(&[
        "bench",
        "--model",
        model.to_str().unwrap(),
        "--device",
        "cpu",
        "--dtype",
        "f32",
        "-p",
        "8",
        "-n",
        "4",
        "-t",
        "1",
        "-r",
        "1",
        "--roofline",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let records: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let [pp, tg] = records.as_array().unwrap().as_slice() else {
        panic!("{stdout}")
    };
    assert!(pp.get("roofline").is_none(), "{pp}");
    let params = tg["params"].as_u64().unwrap();
    assert_eq!(
        tg["weight_bytes_per_token"].as_u64(),
        Some((params + 64) * 4)
    );
    assert!(tg["read_bandwidth_gb_s"].as_f64().unwrap() > 0.0, "{tg}");
    let share = tg["roofline"].as_f64().unwrap();
    let expected = tg["avg_ts"].as_f64().unwrap() * ((params + 64) * 4) as f64
        / (tg["read_bandwidth_gb_s"].as_f64().unwrap() * 1e9);
    assert!((share - expected).abs() <= 1e-9 * expected, "{tg}");
    let (ok, _, stderr) = hearth(&[
        "bench",
        "--model",
        model.to_str().unwrap(),
        "--concurrency",
        "2",
        "--roofline",
    ]);
    assert!(!ok && stderr.contains("--roofline"), "{stderr}");
}

/// Qwen3.5 from the command line: the checkpoint passes `hearth parity` against its
/// transformers golden, and llama.cpp's GGUF of it runs greedy, the same twice.
#[test]
fn a_hybrid_checkpoint_passes_parity_and_its_gguf_runs() {
    let model = common::tiny("qwen3.5");
    let golden = common::fixtures().join("golden/tiny-qwen3.5.json");
    let (ok, stdout, stderr) = parity(&model, &golden, "f32");
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["pass"], true, "{stdout}");
    let gguf = common::fixtures().join("gguf/tiny-qwen3.5-q8_0.gguf");
    let args = [
        "run",
        "--model",
        gguf.to_str().unwrap(),
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "Hello, world!",
    ];
    let (ok, first, stderr) = hearth(&args);
    assert!(ok && stderr.contains(" generated"), "{stderr}");
    assert_eq!(first, hearth(&args).1);
}

/// `hearth run --image`: the image stands where the prompt says `<__media__>` (the golden's
/// chat prompt, rendered) and the completion is transformers' greedy answer; a count of
/// markers that does not fit the images, and a model without vision, are refused by flag;
/// a pixel limit below the image's size refuses it by file.
#[test]
fn run_takes_images_where_the_prompt_marks_them() {
    let dir = common::vision_dir();
    let image = dir.join("image1.png");
    let golden = common::vision_golden().unwrap();
    let (prompt, greedy, want) = (&golden.prompt, &golden.greedy, &golden.text);
    let text = prompt["template_text"]
        .as_str()
        .unwrap()
        .replace("<|vision_start|><|image_pad|><|vision_end|>", "<__media__>");
    let (m, img) = (dir.to_str().unwrap(), image.to_str().unwrap());
    let n = greedy.len().to_string();
    let args = [
        "run",
        "--model",
        m,
        "--device",
        "cpu",
        "--temperature",
        "0",
        "--max-tokens",
        &n,
        "--image",
        img,
    ];
    let (ok, out, err) = hearth(&[&args[..], &[text.as_str()]].concat());
    assert!(ok, "{err}");
    assert_eq!(out.trim_end_matches('\n'), want, "{err}");
    let ids = prompt["input_ids"].as_array().map_or(0, |a| a.len());
    assert!(err.contains(&format!("[{ids} prompt tokens")), "{err}");

    let two = format!("{text}<__media__>");
    let (ok, _, err) = hearth(&[&args[..], &[two.as_str()]].concat());
    assert!(
        !ok && err.contains("--image") && err.contains("2 places"),
        "{err}"
    );
    let (ok, _, err) = hearth(&[&args[..], &["--max-image-pixels", "100", "hi"]].concat());
    assert!(
        !ok && err.contains("image1.png") && err.contains("100 pixels"),
        "{err}"
    );
    let text_only = common::tiny("qwen2");
    let (ok, _, err) = hearth(&[
        "run",
        "--model",
        text_only.to_str().unwrap(),
        "--device",
        "cpu",
        "--image",
        img,
        "hi",
    ]);
    assert!(!ok && err.contains("text only"), "{err}");
}

/// `--attention-precision` takes bf16 or f32; anything else is refused naming the flag, before
/// any model loads.
#[test]
fn attention_precision_is_bf16_or_f32() {
    let tiny = common::tiny("qwen2");
    let run = |precision: &str| {
        hearth(&[
            "run",
            "--model",
            tiny.to_str().unwrap(),
            "--device",
            "cpu",
            "--temperature",
            "0",
            "--max-tokens",
            "4",
            "--attention-precision",
            precision,
            "The capital of France is",
        ])
    };
    let (ok, _, stderr) = run("f16");
    assert!(!ok);
    assert!(
        stderr.contains("--attention-precision") && stderr.contains("`f16`"),
        "{stderr}"
    );
    let (f32_ok, f32_text, stderr) = run("f32");
    assert!(f32_ok, "{stderr}");
    let (bf16_ok, bf16_text, stderr) = run("bf16");
    assert!(bf16_ok, "{stderr}");
    assert!(!f32_text.is_empty() && !bf16_text.is_empty());
}
