//! What the tests share: the fixtures, their goldens, and the real data (tokenizers, the
//! 0.5B GGUF, the `openai` client) where the fetch scripts put it. The root package's tests
//! include this file too.
#![allow(dead_code)]

use hearth_engine::{Engine, Event, EventStream, GenerateRequest, Tokenizer, Usage};
use std::path::PathBuf;

/// A stream's tokens and usage; an error event, or a stream that ends without its summary,
/// fails the test.
pub fn tokens_of(mut s: EventStream) -> (Vec<u32>, Usage) {
    let mut ids = vec![];
    loop {
        match s.blocking_next() {
            Some(Event::Token { id }) => ids.push(id),
            Some(Event::Finished(f)) => return (ids, f.usage),
            Some(Event::Error { message }) => panic!("{message}"),
            Some(_) => {}
            None => panic!("stream ended without a summary"),
        }
    }
}

/// Each request's answer, one request at a time.
pub fn one_by_one(e: &Engine, requests: Vec<GenerateRequest>) -> Vec<Vec<u32>> {
    requests
        .into_iter()
        .map(|r| tokens_of(e.generate(r).unwrap()).0)
        .collect()
}

/// Each request's answer and usage, every request given before any answer is read (so that
/// the scheduler batches them).
pub fn at_once(e: &Engine, requests: Vec<GenerateRequest>) -> Vec<(Vec<u32>, Usage)> {
    let streams: Vec<EventStream> = requests
        .into_iter()
        .map(|r| e.generate(r).unwrap())
        .collect();
    streams.into_iter().map(tokens_of).collect()
}

/// The engine crate's folder, from whichever package's tests include this file.
fn engine_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match manifest.join("crates/engine") {
        nested if nested.is_dir() => nested,
        _ => manifest,
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    engine_dir().join("../..")
}

pub fn fixtures() -> PathBuf {
    engine_dir().join("tests/fixtures")
}

pub fn tiny(family: &str) -> PathBuf {
    fixtures().join(format!("tiny-{family}"))
}

pub struct Golden {
    pub prompt_ids: Vec<u32>,
    pub logits_f32: Vec<f32>,
    pub greedy_f32: Vec<u32>,
    pub long_prompt_ids: Vec<u32>,
    pub long_logits_f32: Vec<f32>,
    pub logits_bf16_weights: Vec<f32>,
    pub long_logits_bf16_weights: Vec<f32>,
    pub logits_bf16_native: Vec<f32>,
}

/// A golden file of `golden/` as JSON.
pub fn golden_json(name: &str) -> serde_json::Value {
    let path = fixtures().join("golden").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The token ids under `key`.
pub fn json_ids(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The numbers under `key`, as f32.
pub fn json_floats(v: &serde_json::Value, key: &str) -> Vec<f32> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

pub fn golden(family: &str) -> Golden {
    let v = golden_json(&format!("tiny-{family}.json"));
    let ids = |k: &str| json_ids(&v, k);
    let floats = |k: &str| json_floats(&v, k);
    Golden {
        prompt_ids: ids("prompt_ids"),
        logits_f32: floats("logits_f32"),
        greedy_f32: ids("greedy_f32"),
        long_prompt_ids: ids("long_prompt_ids"),
        long_logits_f32: floats("long_logits_f32"),
        logits_bf16_weights: floats("logits_bf16_weights"),
        long_logits_bf16_weights: floats("long_logits_bf16_weights"),
        logits_bf16_native: floats("logits_bf16_native"),
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Where the fetch scripts put data: `HEARTH_CACHE`, else `~/.cache/hearth`.
fn cache_dir() -> PathBuf {
    std::env::var_os("HEARTH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
        })
}

/// A test that cannot find its data skips, unless `HEARTH_REQUIRE_DATA` is set (as CI sets
/// it): then it fails, so that a green run proves the real-data tests ran.
fn missing(what: String) {
    if std::env::var_os("HEARTH_REQUIRE_DATA").is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{what} (HEARTH_REQUIRE_DATA is set: real-data tests must run)");
    }
    eprintln!("SKIPPED: {what}");
}

/// The real Qwen tokenizers: `HEARTH_TOKENIZERS`, else `../shared/tokenizers` beside the repo,
/// else where `scripts/fetch-tokenizers.sh` puts them (`$HEARTH_CACHE/tokenizers`).
pub fn real_tokenizers() -> Option<PathBuf> {
    let mut candidates = vec![];
    if let Some(dir) = std::env::var_os("HEARTH_TOKENIZERS") {
        candidates.push(PathBuf::from(dir));
    }
    candidates.push(repo().join("../shared/tokenizers"));
    candidates.push(cache_dir().join("tokenizers"));
    let found = candidates.iter().find(|d| {
        d.join("qwen2.5/tokenizer.json").is_file() && d.join("qwen3/tokenizer.json").is_file()
    });
    if found.is_none() {
        missing(format!(
            "the real Qwen tokenizers are in none of {candidates:?}; run scripts/fetch-tokenizers.sh"
        ));
    }
    found.cloned()
}

/// llama.cpp's vocabulary-only GGUF files of Qwen2 and Qwen3.5 with their tokenization cases:
/// `HEARTH_LLAMA_VOCAB`, else where `scripts/fetch-llama-vocab.sh` puts them
/// (`$HEARTH_CACHE/llama-vocab`).
#[allow(dead_code)]
pub fn llama_vocab() -> Option<PathBuf> {
    let dir = std::env::var_os("HEARTH_LLAMA_VOCAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("llama-vocab"));
    let found = ["qwen2", "qwen35"]
        .iter()
        .all(|v| dir.join(format!("ggml-vocab-{v}.gguf.out")).is_file());
    if !found {
        missing(format!(
            "llama.cpp's Qwen vocabularies are not in {}; run scripts/fetch-llama-vocab.sh",
            dir.display()
        ));
        return None;
    }
    Some(dir)
}

/// The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M: `HEARTH_TEST_GGUF`, else where
/// `scripts/fetch-test-models.sh` puts it (`$HEARTH_MODELS`, else `$HEARTH_CACHE/models`).
pub fn real_gguf() -> Option<PathBuf> {
    let path = std::env::var_os("HEARTH_TEST_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HEARTH_MODELS")
                .map(PathBuf::from)
                .unwrap_or_else(|| cache_dir().join("models"))
                .join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        });
    if path.is_file() {
        Some(path)
    } else {
        missing(format!(
            "{} is missing; run scripts/fetch-test-models.sh",
            path.display()
        ));
        None
    }
}

/// A Python with the official `openai` and `anthropic` clients: `HEARTH_API_PYTHON`, else
/// the virtual environment `scripts/fetch-api-clients.sh` makes (`$HEARTH_CACHE/venv-clients`).
pub fn api_python() -> Option<PathBuf> {
    python_with(
        "HEARTH_API_PYTHON",
        "venv-clients",
        "openai, anthropic",
        "scripts/fetch-api-clients.sh",
    )
}

/// The coding agents `scripts/fetch-coding-agents.sh` installs: `HEARTH_CODING_AGENTS`, else
/// `$HEARTH_CACHE/coding-agents` (its `node_modules/.bin` holds claude, codex, qwen, opencode).
pub fn coding_agents() -> Option<PathBuf> {
    let dir = std::env::var_os("HEARTH_CODING_AGENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("coding-agents"));
    let bin = dir.join("node_modules/.bin");
    match ["claude", "codex", "qwen", "opencode"]
        .iter()
        .find(|b| !bin.join(b).exists())
    {
        None => Some(dir),
        Some(b) => {
            missing(format!(
                "{} is missing; run scripts/fetch-coding-agents.sh",
                bin.join(b).display()
            ));
            None
        }
    }
}

/// A Python with Selenium, beside Debian's Chromium and ChromeDriver: `HEARTH_BROWSER_PYTHON`,
/// else the virtual environment `scripts/fetch-browser.sh` makes (`$HEARTH_CACHE/venv-browser`).
pub fn browser_python() -> Option<PathBuf> {
    let python = python_with(
        "HEARTH_BROWSER_PYTHON",
        "venv-browser",
        "selenium",
        "scripts/fetch-browser.sh",
    )?;
    let browser = ["/usr/bin/chromium", "/usr/bin/chromedriver"];
    if let Some(absent) = browser.iter().find(|p| !std::path::Path::new(p).exists()) {
        missing(format!("{absent} is missing; run scripts/fetch-browser.sh"));
        return None;
    }
    Some(python)
}

/// The MCP servers `scripts/fetch-mcp-servers.sh` installs: `HEARTH_MCP_SERVERS`, else
/// `$HEARTH_CACHE/mcp-servers` (`venv/bin/mcp-server-time`, `node_modules/.bin/…`).
pub fn mcp_servers() -> Option<PathBuf> {
    let dir = std::env::var_os("HEARTH_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("mcp-servers"));
    let wanted = [
        "venv/bin/mcp-server-time",
        "venv/bin/mcp-server-git",
        "node_modules/.bin/mcp-server-filesystem",
        "node_modules/.bin/mcp-server-memory",
        "node_modules/.bin/mcp-server-everything",
    ];
    match wanted.iter().find(|w| !dir.join(w).exists()) {
        None => Some(dir),
        Some(w) => {
            missing(format!(
                "{} is missing; run scripts/fetch-mcp-servers.sh",
                dir.join(w).display()
            ));
            None
        }
    }
}

/// `$var`, else `$HEARTH_CACHE/<venv>/bin/python`, if it can import `modules`.
fn python_with(var: &str, venv: &str, modules: &str, script: &str) -> Option<PathBuf> {
    let python = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join(venv).join("bin/python"));
    let works = std::process::Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        Some(python)
    } else {
        missing(format!(
            "{} cannot import {modules}; run {script}",
            python.display()
        ));
        None
    }
}

/// Prompt tokens and cached prompt tokens of each model answer in a `hearth agent --record`
/// file, in order.
pub fn recorded_prefill(
    record: &std::path::Path,
) -> Result<Vec<(u64, u64)>, Box<dyn std::error::Error + Send + Sync>> {
    let mut out = vec![];
    for line in std::fs::read_to_string(record)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["type"] == "model_response" {
            let n = |k: &str| v[k].as_u64().ok_or(format!("no {k} in {line}"));
            out.push((n("prompt_tokens")?, n("cached_prompt_tokens")?));
        }
    }
    Ok(out)
}

/// The real tokenizer of `family` (`qwen2.5`, `qwen3`) from `HEARTH_TOKENIZERS`, the shared
/// folder or the fetch script's cache; `None` (a skip) where it is missing, an error instead
/// when `HEARTH_REQUIRE_DATA` is set.
pub fn real_tokenizer(family: &str) -> Result<Option<Tokenizer>, Box<dyn std::error::Error>> {
    let dirs = [
        std::env::var_os("HEARTH_TOKENIZERS").map(PathBuf::from),
        Some(repo().join("../shared/tokenizers")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hearth/tokenizers")),
    ];
    let Some(path) = dirs
        .into_iter()
        .flatten()
        .map(|d| d.join(family).join("tokenizer.json"))
        .find(|p| p.is_file())
    else {
        if std::env::var_os("HEARTH_REQUIRE_DATA").is_some_and(|v| !v.is_empty() && v != "0") {
            return Err(format!(
                "the real {family} tokenizer is missing (HEARTH_REQUIRE_DATA is set)"
            )
            .into());
        }
        eprintln!("SKIPPED: the real {family} tokenizer is missing");
        return Ok(None);
    };
    Ok(Some(Tokenizer::from_file(&path)?))
}
