//! Time to first token over a 10-turn chat, with the session's KV cache kept between turns
//! (only the new tokens are prefilled) and without (everything is prefilled every turn).
//!
//!     cargo bench --bench session_reuse -- "$(scripts/fetch-test-models.sh)"
//!
//! Writes benches/results/<date>-session-reuse-<model file>.json.

use hearth_engine::{
    ChatMessage, ChatRequest, DeviceSpec, Engine, Event, LoadOptions, SamplingParams,
};
use std::time::Instant;

const TURNS: usize = 10;

fn turn(e: &Engine, history: &[ChatMessage], session: Option<&str>) -> (f64, String, usize, usize) {
    let start = Instant::now();
    let mut s = e
        .chat(ChatRequest {
            messages: history.to_vec(),
            max_tokens: 12,
            sampling: Some(SamplingParams::greedy()),
            session: session.map(str::to_owned),
            ..Default::default()
        })
        .expect("chat");
    let (mut ttft, mut text, mut prompt, mut cached) = (None, String::new(), 0, 0);
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token { .. } if ttft.is_none() => ttft = Some(start.elapsed().as_secs_f64()),
            Event::Text { text: t } => text.push_str(&t),
            Event::Finished(f) => {
                prompt = f.usage.prompt_tokens;
                cached = f.usage.cached_prompt_tokens;
            }
            _ => {}
        }
    }
    (ttft.unwrap_or(f64::NAN), text, prompt, cached)
}

fn conversation(e: &Engine, session: Option<&str>) -> Vec<(f64, usize, usize)> {
    let mut history = vec![ChatMessage::system(
        "You are a concise assistant. Answer in one short sentence.",
    )];
    (1..=TURNS)
        .map(|k| {
            history.push(ChatMessage::user(format!(
                "Give me fact number {k} about the ocean, please, briefly."
            )));
            let (ttft, answer, prompt, cached) = turn(e, &history, session);
            history.push(ChatMessage::assistant(answer));
            (ttft, prompt, cached)
        })
        .collect()
}

/// The model's file or directory name, without `.gguf`.
fn stem(model: &str) -> String {
    let name = std::path::Path::new(model.trim_end_matches('/'))
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| model.replace('/', "-"));
    name.trim_end_matches(".gguf").to_string()
}

fn main() {
    let model = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .expect("usage: session_reuse <model>");
    let e = Engine::load(
        &model,
        &LoadOptions {
            device: DeviceSpec::Cpu,
            ..Default::default()
        },
    )
    .expect("model");
    let threads = rayon::current_num_threads();
    conversation(&e, Some("warmup"));
    let reuse = conversation(&e, Some("bench"));
    let fresh = conversation(&e, None);
    println!("turn | prompt tokens | TTFT reuse (cached) | TTFT re-prefill");
    for k in 0..TURNS {
        println!(
            "{:>4} | {:>13} | {:>8.3}s ({:>4}) | {:>8.3}s",
            k + 1,
            reuse[k].1,
            reuse[k].0,
            reuse[k].2,
            fresh[k].0
        );
    }
    let ratio = |v: &[(f64, usize, usize)]| v[TURNS - 1].0 / v[0].0;
    println!(
        "TTFT turn {TURNS} / turn 1: reuse {:.2}, re-prefill {:.2}",
        ratio(&reuse),
        ratio(&fresh)
    );
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "benches/results/{date}-session-reuse-{}.json",
        stem(&model)
    ));
    let rows: Vec<serde_json::Value> = (0..TURNS)
        .map(|k| serde_json::json!({"turn": k + 1, "prompt_tokens": reuse[k].1, "cached_tokens": reuse[k].2, "ttft_reuse_s": reuse[k].0, "ttft_reprefill_s": fresh[k].0}))
        .collect();
    let doc = serde_json::json!({
        "command": format!("cargo bench --bench session_reuse -- {model}"),
        "threads": threads,
        "ttft_ratio_turn10_over_turn1": {"reuse": ratio(&reuse), "reprefill": ratio(&fresh)},
        "turns": rows,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap()).expect("write results");
    println!("wrote {}", out.display());
}
