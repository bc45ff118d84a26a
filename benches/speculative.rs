//! Decode speed with and without speculative decoding (prompt lookup), greedy, one request at
//! a time: an agent-edit workload (a ~1k-token source file in the prompt, "rename X to Y and
//! return the file") and a plain chat workload. Both runs give the same tokens (checked).
//!
//!     cargo bench --bench speculative -- "$(scripts/fetch-test-models.sh)" [more models]
//!
//! Writes benches/results/<date>-speculative-<model file>.json.

use hearth_engine::{
    ChatMessage, ChatRequest, DeviceSpec, Engine, Event, LoadOptions, SamplingParams,
    SchedulerOptions, Speculation,
};

const SOURCE: &str = include_str!("data/edit-source.py");

struct Run {
    tokens: Vec<u32>,
    decode_s: f64,
    drafted: usize,
    accepted: usize,
}

fn answer(e: &Engine, prompt: &str, max_tokens: usize) -> Run {
    let mut s = e
        .chat(ChatRequest {
            messages: vec![ChatMessage::user(prompt)],
            max_tokens,
            sampling: Some(SamplingParams::greedy()),
            ..Default::default()
        })
        .expect("chat");
    let mut tokens = vec![];
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token { id } => tokens.push(id),
            Event::Finished(f) => {
                return Run {
                    tokens,
                    decode_s: f.timings.decode_s,
                    drafted: f.usage.draft_tokens,
                    accepted: f.usage.accepted_draft_tokens,
                }
            }
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    panic!("no summary")
}

fn workloads() -> Vec<(&'static str, String, usize)> {
    let edit = |what: &str| {
        format!("{what} Return the whole file, nothing else.\n\n```python\n{SOURCE}```")
    };
    vec![
        (
            "edit",
            edit("Rename the function `module_of` to `module_path`."),
            1024,
        ),
        (
            "edit",
            edit("Rename the variable `targets` to `references`."),
            1024,
        ),
        (
            "chat",
            "Explain in a paragraph how a hash map handles collisions.".into(),
            160,
        ),
        (
            "chat",
            "Write a short story about a lighthouse keeper, in about 120 words.".into(),
            160,
        ),
        (
            "chat",
            "What are the differences between TCP and UDP? Answer briefly.".into(),
            160,
        ),
    ]
}

fn stem(model: &str) -> String {
    let name = std::path::Path::new(model.trim_end_matches('/'))
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| model.replace('/', "-"));
    name.trim_end_matches(".gguf").to_string()
}

fn load(model: &str, speculation: Speculation) -> Engine {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        scheduler: SchedulerOptions {
            speculation: Some(speculation),
            ..Default::default()
        },
        ..Default::default()
    };
    Engine::load(model, &opts).expect("model")
}

fn main() {
    let models: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    assert!(!models.is_empty(), "usage: speculative <model.gguf>…");
    let threads = rayon::current_num_threads();
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    for model in &models {
        let off = load(model, Speculation::Off);
        let on = load(model, Speculation::Ngram);
        // Set at load (HEARTH_CPU forces a lower one).
        let level = hearth_engine::kernels::cpu::active();
        answer(&off, "Hello", 8);
        answer(&on, "Hello", 8);
        println!("{model} ({level}, {threads} threads)");
        println!("workload | tokens | plain tok/s | ngram tok/s | speedup | accepted/drafted");
        let mut rows = vec![];
        let mut sums: std::collections::BTreeMap<&str, (f64, f64, usize, usize, usize)> =
            Default::default();
        for (kind, prompt, max) in workloads() {
            let a = answer(&off, &prompt, max);
            let b = answer(&on, &prompt, max);
            assert_eq!(a.tokens, b.tokens, "{kind}: speculation changed the tokens");
            let n = a.tokens.len().saturating_sub(1) as f64;
            let (ra, rb) = (n / a.decode_s, n / b.decode_s);
            println!(
                "{kind:>8} | {:>6} | {ra:>11.1} | {rb:>11.1} | {:>6.2}× | {}/{}",
                a.tokens.len(),
                rb / ra,
                b.accepted,
                b.drafted
            );
            let s = sums.entry(kind).or_default();
            s.0 += a.decode_s;
            s.1 += b.decode_s;
            s.2 += a.tokens.len().saturating_sub(1);
            s.3 += b.accepted;
            s.4 += b.drafted;
            rows.push(serde_json::json!({
                "workload": kind, "tokens": a.tokens.len(),
                "plain_tok_s": ra, "ngram_tok_s": rb, "speedup": rb / ra,
                "drafted": b.drafted, "accepted": b.accepted,
            }));
        }
        let mut totals = serde_json::Map::new();
        for (kind, (ta, tb, n, acc, dr)) in &sums {
            let (ra, rb) = (*n as f64 / ta, *n as f64 / tb);
            println!(
                "{kind:>8} all: plain {ra:.1} tok/s, ngram {rb:.1} tok/s, {:.2}×, acceptance {:.0} %",
                rb / ra,
                100.0 * *acc as f64 / (*dr).max(1) as f64
            );
            totals.insert(
                kind.to_string(),
                serde_json::json!({"plain_tok_s": ra, "ngram_tok_s": rb, "speedup": rb / ra, "acceptance": *acc as f64 / (*dr).max(1) as f64}),
            );
        }
        let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "benches/results/{date}-speculative-{}-{level}.json",
            stem(model)
        ));
        let doc = serde_json::json!({
            "command": format!("cargo bench --bench speculative -- {model}"),
            "cpu_level": level.to_string(),
            "threads": threads,
            "totals": totals,
            "runs": rows,
        });
        std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap()).expect("write results");
        println!("wrote {}", out.display());
    }
}
