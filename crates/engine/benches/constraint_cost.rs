//! What constrained decoding costs on the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF
//! (151 936 tokens): the time to compute and apply one grammar mask (p50, p99, max, over every
//! step of valid answers), and greedy decode tok/s with and without a JSON-schema constraint.
//!
//! `cargo bench -p hearth-engine --bench constraint_cost` (release, as `hearth` is built: a
//! dev build checks every pointer read and masks cost about 20 % more); the model is
//! `HEARTH_TEST_GGUF`, else `~/.cache/hearth/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf`.
//! Prints one JSON object; `HEARTH_MASK_STEPS=1` also prints every step's mask time (µs) on
//! stderr.

use hearth_engine::ToolChoice;
use hearth_engine::{
    ChatMessage, ChatRequest, Constraint, DeviceSpec, Engine, Event, LoadOptions, SamplingParams,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn gguf() -> PathBuf {
    std::env::var_os("HEARTH_TEST_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/hearth/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        })
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "minItems": 6, "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "price": {"type": "number"},
                    "category": {"enum": ["fruit", "vegetable", "dairy", "bakery", "other"]}
                },
                "required": ["name", "price", "category"],
                "additionalProperties": false
            }}
        },
        "required": ["items"],
        "additionalProperties": false
    })
}

/// Microseconds to make the guide for `c`, and of `Guide::mask` at every token of `text`.
/// With `HEARTH_MASK_STEPS` set, the steps over 0.5 ms are printed with the text before them.
fn mask_times(e: &Engine, c: &Constraint, text: &str, vocab: usize) -> Result<(f64, Vec<f64>)> {
    let g = e.grammars()?;
    let t = Instant::now();
    let mut guide = g.guide(c)?;
    let made = t.elapsed().as_secs_f64() * 1e6;
    let mut logits = vec![0f32; vocab];
    let mut times = vec![];
    let ids = e.tokenizer().encode(text)?;
    for (i, &id) in ids.iter().enumerate() {
        logits.iter_mut().for_each(|l| *l = 0.0);
        let t = Instant::now();
        guide.mask(&mut logits)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if std::env::var_os("HEARTH_MASK_STEPS").is_some() && times[i] > 500.0 {
            let before = e.tokenizer().decode(&ids[i.saturating_sub(4)..i])?;
            eprintln!(
                "  {:.0} µs after {before:?} ({})",
                times[i],
                guide.last_step_stats()
            );
        }
        if !guide.allows(id)? {
            return Err(format!("token {id} of {text:?} refused").into());
        }
        guide.consume(id)?;
    }
    Ok((made, times))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// Decode tok/s and tokens of one greedy chat answer.
fn decode(e: &Engine, constraint: Option<Constraint>) -> Result<(f64, usize, String)> {
    let mut s = e.chat(ChatRequest {
        messages: vec![ChatMessage::user(
            "List six grocery items as JSON: an object with `items`, each with name, price and category.",
        )],
        max_tokens: 96,
        sampling: Some(SamplingParams::greedy()),
        constraint,
        ..Default::default()
    })?;
    let mut text = String::new();
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text: t } => text.push_str(&t),
            Event::Finished(sum) => {
                return Ok((sum.timings.decode_tok_s, sum.usage.completion_tokens, text))
            }
            Event::Error { message } => return Err(message.into()),
            _ => {}
        }
    }
    Err("no Finished event".into())
}

fn main() -> Result<()> {
    let path = gguf();
    if !path.is_file() {
        eprintln!(
            "SKIPPED: {} is missing; run scripts/fetch-test-models.sh",
            path.display()
        );
        return Ok(());
    }
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        ..Default::default()
    };
    let e = Engine::load(&path.to_string_lossy(), &opts)?;
    let t = Instant::now();
    let vocab = e.grammars()?.vocab_size();
    let trie_s = t.elapsed().as_secs_f64();

    // Masks along valid answers: a schema's document and a tool call; then other answers
    // under the same constraints, as the next request of an agent brings (compiled
    // constraints are kept, and their lexer states with them).
    let tools = vec![
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"]}}}),
    ];
    let mut tool_grammar_us = vec![];
    let mut tool_grammar = None;
    for _ in 0..2 {
        let t = Instant::now();
        tool_grammar = e.grammars()?.tool_calls(&tools, &ToolChoice::Auto)?;
        tool_grammar_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let tool_grammar = tool_grammar.ok_or("no grammar")?;
    let answers = |names: [&str; 6], city: &str| {
        let doc = json!({"items": names.iter().enumerate().map(|(i, n)| json!({
            "name": n, "price": 1.25 * i as f64 + 0.5, "category": if i % 2 == 0 { "fruit" } else { "dairy" }
        })).collect::<Vec<_>>()})
        .to_string();
        let call = format!("I will look it up.\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\", \"unit\": \"c\"}}}}\n</tool_call>");
        (doc, call)
    };
    let mut passes = vec![];
    for (names, city) in [
        (
            [
                "item number 0",
                "item number 1",
                "item number 2",
                "item number 3",
                "item number 4",
                "item number 5",
            ],
            "San Francisco",
        ),
        (
            [
                "apples",
                "whole milk",
                "sourdough loaf",
                "cheddar cheese",
                "green beans",
                "oat yogurt 500g",
            ],
            "Reykjavik",
        ),
    ] {
        let (doc, call) = answers(names, city);
        let (schema_us, mut times) =
            mask_times(&e, &Constraint::JsonSchema(schema()), &doc, vocab)?;
        let (tools_us, call_times) = mask_times(&e, &tool_grammar, &call, vocab)?;
        times.extend(call_times);
        if std::env::var_os("HEARTH_MASK_STEPS").is_some() {
            eprintln!("{:?}", times.iter().map(|t| *t as u64).collect::<Vec<_>>());
        }
        times.sort_by(f64::total_cmp);
        passes.push(json!({
            "steps": times.len(),
            "p50": percentile(&times, 0.5),
            "p99": percentile(&times, 0.99),
            "max": times.last(),
            "guide_us": {"schema": schema_us, "tool_calls": tools_us},
        }));
    }

    // Decode speed, best of three each (the machine may be shared).
    let mut free = vec![];
    let mut held = vec![];
    let mut sample = String::new();
    for _ in 0..3 {
        free.push(decode(&e, None)?);
        // Both stop at max_tokens (the same number of decode steps); the JSON is then cut.
        let r = decode(&e, Some(Constraint::JsonSchema(schema())))?;
        sample = r.2.clone();
        held.push(r);
    }
    let best = |v: &[(f64, usize, String)]| v.iter().map(|r| r.0).fold(0.0, f64::max);
    let report = json!({
        "model": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "vocab": vocab,
        "trie_and_factory_s": trie_s,
        "mask_us": {"first_request": passes[0], "same_constraints_again": passes[1]},
        "tool_grammar_us": {"first_request": tool_grammar_us[0], "same_tools_again": tool_grammar_us[1]},
        "decode_tok_s": {
            "unconstrained": best(&free),
            "json_schema": best(&held),
            "ratio": best(&held) / best(&free),
            "tokens": [free[0].1, held[0].1],
        },
        "constrained_answer": sample,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
