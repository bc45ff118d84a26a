//! The engine's generation API: worker thread, event stream, sessions, cancellation.

mod common;

use common::*;
use hearth_engine::{
    DTypeSpec, DeviceSpec, Engine, Event, FinishReason, GenerateRequest, LoadOptions,
    SamplingParams, Summary,
};

fn engine(family: &str) -> Engine {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    Engine::load(tiny(family).to_str().unwrap(), &opts).unwrap()
}

fn collect(mut s: hearth_engine::EventStream) -> (Vec<u32>, String, Summary) {
    let (mut ids, mut text, mut summary) = (vec![], String::new(), None);
    while let Some(e) = s.blocking_next() {
        match e {
            Event::Token { id } => ids.push(id),
            Event::Text { text: t } => text.push_str(&t),
            Event::Reasoning { .. } => panic!("plain generation reports no reasoning"),
            Event::Finished(s) => summary = Some(s),
            Event::Error { message } => panic!("{message}"),
        }
    }
    (ids, text, summary.expect("a Finished event"))
}

fn greedy_request(prompt: Vec<u32>, n: usize) -> GenerateRequest {
    GenerateRequest {
        stop_token_ids: Some(vec![]),
        ..GenerateRequest::new(prompt, n)
    }
}

#[test]
fn streams_the_greedy_tokens_of_transformers() {
    for family in ["qwen2", "qwen3"] {
        let g = golden(family);
        let e = engine(family);
        let (ids, text, summary) = collect(
            e.generate(greedy_request(g.prompt_ids.clone(), 32))
                .unwrap(),
        );
        assert_eq!(ids, g.greedy_f32, "{family}");
        assert_eq!(
            text,
            e.tokenizer().decode(&ids).unwrap(),
            "streamed text = decoded ids"
        );
        assert_eq!(summary.reason, FinishReason::MaxTokens);
        assert_eq!(summary.usage.prompt_tokens, g.prompt_ids.len());
        assert_eq!(summary.usage.completion_tokens, 32);
        assert!(summary.timings.decode_tok_s > 0.0 && summary.timings.prefill_tok_s > 0.0);
    }
}

#[tokio::test]
async fn async_stream_and_stop_tokens() {
    let g = golden("qwen2");
    let e = engine("qwen2");
    // Stop on the 5th greedy token: four tokens come out, and the stop id is reported.
    let stop = g.greedy_f32[4];
    let first = g.greedy_f32.iter().position(|&t| t == stop).unwrap();
    let req = GenerateRequest {
        stop_token_ids: Some(vec![stop]),
        ..GenerateRequest::new(g.prompt_ids.clone(), 32)
    };
    let mut s = e.generate(req).unwrap();
    let mut ids = vec![];
    let mut reason = None;
    while let Some(ev) = s.next().await {
        match ev {
            Event::Token { id } => ids.push(id),
            Event::Finished(sum) => reason = Some(sum.reason),
            _ => {}
        }
    }
    assert_eq!(ids, g.greedy_f32[..first].to_vec());
    assert_eq!(reason, Some(FinishReason::StopToken { id: stop }));
}

#[test]
fn sessions_reuse_the_common_prefix() {
    let g = golden("qwen3");
    let e = engine("qwen3");
    let (first, _, s1) = collect(
        e.generate(GenerateRequest {
            session: Some("a".into()),
            ..greedy_request(g.prompt_ids.clone(), 4)
        })
        .unwrap(),
    );
    assert_eq!(s1.usage.cached_prompt_tokens, 0);
    // Next turn: the previous prompt and answer, plus more.
    let mut next = g.prompt_ids.clone();
    next.extend(&first);
    next.extend([40, 41, 42]);
    let (reused, _, s2) = collect(
        e.generate(GenerateRequest {
            session: Some("a".into()),
            ..greedy_request(next.clone(), 8)
        })
        .unwrap(),
    );
    // Everything but the last answer token (never run through the model) was cached.
    assert_eq!(
        s2.usage.cached_prompt_tokens,
        g.prompt_ids.len() + first.len() - 1
    );
    // Against an engine that holds no cache (this one would share the session's prefix).
    let (fresh, _, s3) = collect(engine("qwen3").generate(greedy_request(next, 8)).unwrap());
    assert_eq!(s3.usage.cached_prompt_tokens, 0);
    assert_eq!(reused, fresh, "reusing the cache changes nothing");
    // A changed prefix falls back to what still matches.
    let mut edited = g.prompt_ids.clone();
    edited[3] = 77;
    let (_, _, s4) = collect(
        e.generate(GenerateRequest {
            session: Some("a".into()),
            ..greedy_request(edited, 2)
        })
        .unwrap(),
    );
    assert_eq!(s4.usage.cached_prompt_tokens, 3);
    e.drop_session("a").unwrap();
    e.drop_session("never-seen").unwrap();
}

#[test]
fn dropping_the_stream_cancels_and_the_engine_goes_on() {
    let g = golden("qwen2");
    let e = engine("qwen2");
    let mut s = e
        .generate(greedy_request(g.prompt_ids.clone(), 400))
        .unwrap();
    assert!(matches!(s.blocking_next(), Some(Event::Token { .. })));
    drop(s);
    let (ids, _, _) = collect(e.generate(greedy_request(g.prompt_ids.clone(), 3)).unwrap());
    assert_eq!(ids, g.greedy_f32[..3].to_vec());
}

#[test]
fn seeded_sampling_is_reproducible() {
    let g = golden("qwen2");
    let e = engine("qwen2");
    let run = |seed| {
        let req = GenerateRequest {
            sampling: SamplingParams {
                temperature: 1.0,
                top_p: Some(0.95),
                seed,
                ..Default::default()
            },
            ..greedy_request(g.prompt_ids.clone(), 24)
        };
        collect(e.generate(req).unwrap()).0
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn bad_requests_fail_before_any_work() {
    let e = engine("qwen2");
    let err = |r| {
        e.generate(r)
            .err()
            .map(|x| x.to_string())
            .unwrap_or_default()
    };
    assert!(err(GenerateRequest::new(vec![], 4)).contains("empty prompt"));
    assert!(err(GenerateRequest::new(vec![1], 0)).contains("max_tokens"));
    assert!(err(GenerateRequest::new(vec![1; 600], 4)).contains("max_position_embeddings"));
    let hot = GenerateRequest {
        sampling: SamplingParams {
            temperature: -1.0,
            ..Default::default()
        },
        ..GenerateRequest::new(vec![1], 4)
    };
    assert!(err(hot).contains("temperature"));
    assert!(e.complete("", 4, SamplingParams::default()).is_err());
}

#[test]
fn model_info_reads_the_configs() {
    let e = engine("qwen2");
    let info = e.info();
    assert_eq!(info.family, "qwen2");
    assert_eq!(info.max_positions, 512);
    // generation_config's [im_end, endoftext], then <|im_start|> (a new turn).
    assert_eq!(info.stop_token_ids, vec![1023, 1021, 1022]);
    assert_eq!(info.sampling.temperature, 0.7);
    assert_eq!(info.sampling.top_k, Some(20));
    assert_eq!(info.parameters, 139_840);
}

/// A progress callback in the load options hears every layer, ending at all of them.
#[test]
fn load_reports_progress_per_layer() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let log = seen.clone();
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        progress: Some(hearth_engine::LoadProgress(std::sync::Arc::new(
            move |done, total| log.lock().unwrap().push((done, total)),
        ))),
        ..Default::default()
    };
    let loaded = hearth_engine::load_model(tiny("qwen2").to_str().unwrap(), &opts).unwrap();
    let n = loaded.config.num_hidden_layers;
    let want: Vec<(usize, usize)> = (0..=n).map(|i| (i, n)).collect();
    assert_eq!(*seen.lock().unwrap(), want);
}
