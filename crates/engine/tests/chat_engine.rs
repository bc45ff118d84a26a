//! The engine's chat API over a scripted model: stop strings across token boundaries,
//! reasoning told apart from the answer, per-call overrides.

mod common;

use candle_core::{Device, Tensor};
use hearth_engine::chat::{ChatFormat, JinjaTemplate};
use hearth_engine::{
    ChatMessage, ChatRequest, Engine, Event, FinishReason, KvCache, LanguageModel, ModelInfo,
    Result, SamplingParams, Tokenizer,
};
use std::sync::Mutex;
use std::time::Duration;

const VOCAB: usize = 1024;
const EOS: u32 = 1023;

/// Answers every prompt with the same tokens, then EOS.
struct Scripted {
    script: Vec<u32>,
    /// The prompt's length: the answer's `i`-th token follows position `prompt + i`.
    step: Mutex<usize>,
}

impl LanguageModel for Scripted {
    fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let mut prompt = self.step.lock().unwrap();
        if cache.is_empty() {
            *prompt = tokens.len();
        }
        cache.advance(tokens.len());
        // By position, not by call: a speculative step's rejected rows are cut from the cache.
        let next = self
            .script
            .get(cache.len() - *prompt)
            .copied()
            .unwrap_or(EOS);
        let mut logits = vec![0f32; VOCAB];
        logits[next as usize] = 10.0;
        Ok(Tensor::from_vec(logits, VOCAB, &Device::Cpu)?)
    }
    fn new_cache(&self) -> KvCache {
        KvCache::new(1, 512)
    }
    fn max_positions(&self) -> usize {
        512
    }
}

fn engine(answer: &str, template: &str, thinks: bool) -> (Engine, Vec<u32>) {
    let tok = Tokenizer::from_file(&common::tiny("qwen2").join("tokenizer.json")).unwrap();
    let script = tok.encode(answer).unwrap();
    let info = ModelInfo {
        origin: "scripted".into(),
        family: "qwen2".into(),
        parameters: 0,
        dtype: "f32".into(),
        device: "cpu".into(),
        max_positions: 512,
        stop_token_ids: vec![EOS],
        stop_strings: vec![],
        sampling: SamplingParams::greedy(),
        chat_template: Some("model".into()),
        thinks,
        tool_format: Default::default(),
        load_s: 0.0,
        fingerprint: "test".into(),
        images: None,
    };
    let chat = ChatFormat::Jinja(JinjaTemplate::new(template, Default::default(), "test").unwrap());
    let model = Scripted {
        script: script.clone(),
        step: Mutex::new(0),
    };
    (
        Engine::serve(Box::new(model), tok, info, Some(chat), Duration::ZERO),
        script,
    )
}

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n";

struct Answer {
    text: String,
    reasoning: String,
    /// The text of each token event's step, to see where pieces came out.
    tokens: usize,
    reason: FinishReason,
}

fn ask(e: &Engine, stop: Option<Vec<&str>>) -> Answer {
    let mut s = e
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("question")],
            max_tokens: 64,
            stop: stop.map(|v| v.into_iter().map(String::from).collect()),
            ..Default::default()
        })
        .unwrap();
    let mut a = Answer {
        text: String::new(),
        reasoning: String::new(),
        tokens: 0,
        reason: FinishReason::MaxTokens,
    };
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text } => a.text.push_str(&text),
            Event::Reasoning { text } => a.reasoning.push_str(&text),
            Event::Token { .. } => a.tokens += 1,
            Event::Finished(sum) => a.reason = sum.reason,
            Event::Error { message } => panic!("{message}"),
        }
    }
    a
}

/// How many tokens of `script` the first occurrence of `needle` in its text spans.
fn tokens_spanned(tok: &Tokenizer, script: &[u32], needle: &str) -> usize {
    let text = tok.decode(script).unwrap();
    let start = text.find(needle).unwrap();
    let end = start + needle.len();
    let mut spanned = 0;
    let mut pos = 0;
    for i in 0..script.len() {
        let len = tok.decode(&script[..=i]).unwrap().len();
        if len > start && pos < end {
            spanned += 1;
        }
        pos = len;
    }
    spanned
}

#[test]
fn stop_string_straddling_tokens_is_never_emitted() {
    let answer = "Thought: add them\nAction: calc\nObservation: 42\nmore text";
    let (e, script) = engine(answer, CHATML, false);
    let tok = e.tokenizer().clone();
    for stop in ["Observation:", "n: 4"] {
        let spanned = tokens_spanned(&tok, &script, stop);
        assert!(spanned >= 2, "{stop:?} spans {spanned} tokens");
        let a = ask(&e, Some(vec![stop]));
        let cut = answer.find(stop).unwrap();
        assert_eq!(
            a.text,
            &answer[..cut],
            "stop {stop:?} over {spanned} tokens"
        );
        assert_eq!(a.reason, FinishReason::StopString { text: stop.into() });
    }
    // At least one of the cases spans three tokens or more.
    assert!(tokens_spanned(&tok, &script, "Observation:") >= 3);
}

#[test]
fn a_partial_match_releases_the_held_text() {
    let answer = "Observe the Obs erver";
    let (e, _) = engine(answer, CHATML, false);
    let a = ask(&e, Some(vec!["Observer"]));
    assert_eq!(a.text, answer, "nothing lost");
    assert_eq!(a.reason, FinishReason::StopToken { id: EOS });
    // Without a per-call override the engine's stop strings (none here) apply.
    assert_eq!(ask(&e, None).text, answer);
}

#[test]
fn empty_stop_string_is_refused() {
    let (e, _) = engine("x", CHATML, false);
    let err = e
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("q")],
            max_tokens: 4,
            stop: Some(vec![String::new()]),
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn reasoning_is_told_apart_from_the_answer() {
    let (e, _) = engine(
        "<think>\nThe capital of France.\n</think>\n\nParis.",
        CHATML,
        true,
    );
    let a = ask(&e, None);
    assert_eq!(a.reasoning.trim(), "The capital of France.");
    assert_eq!(a.text, "Paris.");
    assert!(a.tokens > 5);
    // A model that does not think streams the same text as answer.
    let (e, _) = engine("<think>\nx\n</think>\n\nParis.", CHATML, false);
    assert_eq!(ask(&e, None).text, "<think>\nx\n</think>\n\nParis.");
}

#[test]
fn template_errors_carry_the_templates_message() {
    let (e, _) = engine(
        "x",
        "{{ raise_exception('System role not supported') }}",
        false,
    );
    let err = e
        .chat(ChatRequest {
            messages: vec![ChatMessage::user("q")],
            max_tokens: 4,
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("System role not supported"), "{err}");
}
