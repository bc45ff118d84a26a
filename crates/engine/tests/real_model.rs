//! The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M end to end (scripts/fetch-test-models.sh, or
//! HEARTH_TEST_GGUF): chat through its own template, and greedy tokens against llama.cpp.

mod common;

use hearth_engine::{
    ChatMessage, ChatRequest, DeviceSpec, Engine, Event, GenerateRequest, LoadOptions,
    SamplingParams,
};
use std::path::Path;

fn engine(path: &Path) -> Engine {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        ..Default::default()
    };
    Engine::load(path.to_str().unwrap(), &opts).unwrap()
}

#[test]
fn answers_the_capital_of_france() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let e = engine(&path);
    assert_eq!(e.info().chat_template.as_deref(), Some("model"));
    let mut s = e
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("What is the capital of France?")],
            max_tokens: 24,
            sampling: Some(SamplingParams::greedy()),
            ..Default::default()
        })
        .unwrap();
    let mut text = String::new();
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text: t } => text.push_str(&t),
            Event::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
    assert!(text.contains("Paris"), "{text:?}");
    assert!(!text.contains("<|im_end|>"), "stop token leaked: {text:?}");
}

/// Golden by crates/engine/tests/fixtures/gguf_golden.py: llama.cpp (llama-cpp-python 0.3.16), greedy, on an
/// AVX2 machine. Both quantize activations to 8 bits and take the same exact integer block
/// products, but sum them in different orders (llama.cpp's x86 row dot products in eight f32
/// lanes; Hearth's 16-row tiles one chain per row), so a near-tie may go either way. Fed
/// llama.cpp's tokens, Hearth must pick each one itself or hold it within 0.5 % of the logit
/// scale of its own choice (at most two such steps), and its free-running greedy tokens must
/// equal llama.cpp's up to that step.
#[test]
fn greedy_tokens_match_llama_cpp() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            common::fixtures().join("golden/qwen2.5-coder-0.5b-q4_k_m-llamacpp.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let ids = |k: &str| -> Vec<u32> {
        golden[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let (prompt, want) = (ids("prompt_ids"), ids("greedy"));

    // Teacher-forced: llama.cpp's tokens, Hearth's logits at each step.
    let file = std::sync::Arc::new(hearth_engine::load::gguf::GgufFile::open(&path).unwrap());
    let model = hearth_engine::Qwen::load(
        &file.config().unwrap(),
        &file.weights(&candle_core::Device::Cpu),
    )
    .unwrap();
    let mut cache = model.new_cache();
    let mut logits: Vec<f32> = model
        .forward(&prompt, &mut cache)
        .unwrap()
        .to_vec1()
        .unwrap();
    let mut near_ties = vec![];
    for (i, &t) in want.iter().enumerate() {
        let top = hearth_engine::sampling::argmax(&logits);
        if top != t {
            let scale = logits.iter().fold(0f32, |a, v| a.max(v.abs()));
            let margin = logits[top as usize] - logits[t as usize];
            assert!(
                margin <= 0.005 * scale,
                "step {i}: llama.cpp's {t} is {margin} below Hearth's {top} (scale {scale})"
            );
            near_ties.push((i, margin / scale));
        }
        logits = model.forward(&[t], &mut cache).unwrap().to_vec1().unwrap();
    }
    eprintln!("steps where llama.cpp's token is a near-tie for Hearth: {near_ties:?}");
    assert!(near_ties.len() <= 2, "{near_ties:?}");

    // Free-running through the engine: the same tokens up to the first near-tie.
    let e = engine(&path);
    // Hearth's tokenizer (built from the GGUF) agrees with llama.cpp's on the prompt.
    assert_eq!(
        e.tokenizer()
            .encode(golden["prompt"].as_str().unwrap())
            .unwrap(),
        prompt
    );
    let mut s = e
        .generate(GenerateRequest {
            stop_token_ids: Some(vec![]),
            ..GenerateRequest::new(prompt, want.len())
        })
        .unwrap();
    let mut got = vec![];
    while let Some(ev) = s.blocking_next() {
        if let Event::Token { id } = ev {
            got.push(id);
        }
    }
    let same = near_ties.first().map_or(want.len(), |t| t.0);
    assert_eq!(
        got[..same],
        want[..same],
        "{:?}",
        e.tokenizer().decode(&got)
    );
    if near_ties.is_empty() {
        assert_eq!(
            e.tokenizer().decode(&got).unwrap(),
            golden["text"].as_str().unwrap()
        );
    }
}
