//! The engine's step scheduler on the tiny f32 fixtures: batching leaves greedy tokens exactly
//! as they are alone, the KV pool stays under its budget, prefixes are shared, and bad settings
//! or cancelled requests never stall the worker.

mod common;

use common::*;
use hearth_engine::{
    load_model, CacheType, CacheTypes, DTypeSpec, DeviceSpec, Engine, Event, EventStream,
    FinishReason, GenerateRequest, KvCache, LoadOptions, SamplingParams, SchedulerOptions,
    Speculation, Summary,
};
use std::time::{Duration, Instant};

/// The tiny models with f32 KV caches: the budgets below count their bytes.
fn options(scheduler: SchedulerOptions) -> LoadOptions {
    LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        scheduler,
        cache_types: f32_caches(),
        ..Default::default()
    }
}

fn f32_caches() -> CacheTypes {
    CacheTypes {
        k: Some(CacheType::F32),
        v: Some(CacheType::F32),
    }
}

fn engine(family: &str, scheduler: SchedulerOptions) -> Engine {
    Engine::load(tiny(family).to_str().unwrap(), &options(scheduler)).unwrap()
}

fn request(prompt: Vec<u32>, n: usize, session: Option<&str>) -> GenerateRequest {
    GenerateRequest {
        stop_token_ids: Some(vec![]),
        session: session.map(str::to_owned),
        ..GenerateRequest::new(prompt, n)
    }
}

fn collect(mut s: EventStream) -> (Vec<u32>, Summary) {
    let mut ids = vec![];
    loop {
        match s.blocking_next() {
            Some(Event::Token { id }) => ids.push(id),
            Some(Event::Finished(summary)) => return (ids, summary),
            Some(Event::Error { message }) => panic!("{message}"),
            Some(_) => {}
            None => panic!("stream ended without a summary"),
        }
    }
}

/// Prompts of different lengths whose first tokens differ (no two share a prefix).
fn prompts() -> Vec<Vec<u32>> {
    [3usize, 9, 17, 30, 41, 5, 64, 12]
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            (0..len)
                .map(|j| ((i * 97 + j * 31 + 7) % 1000) as u32)
                .collect()
        })
        .collect()
}

#[test]
fn batched_decoding_gives_the_logits_of_one_by_one_decoding() {
    // (The mixture-of-experts model too: a step's tokens share each expert's matmul. The mixed
    // fixture, experts 48 wide, differs by ~1e-6 batched: its expert matmuls are not yet
    // row-invariant, though its greedy tokens are.)
    for family in ["qwen2", "qwen3", "qwen3-moe"] {
        let model = load_model(tiny(family).to_str().unwrap(), &options(Default::default()))
            .unwrap()
            .model;
        let prompts = prompts();
        // Each sequence prefilled on its own, then one batched step against one step each.
        let prefilled = |p: &Vec<u32>| -> KvCache {
            let mut c = model.new_cache();
            model.forward(p, &mut c).unwrap();
            c
        };
        let mut batch_caches: Vec<KvCache> = prompts.iter().map(prefilled).collect();
        let mut alone_caches: Vec<KvCache> = prompts.iter().map(prefilled).collect();
        let next: Vec<u32> = (0..prompts.len() as u32).map(|i| 100 + i).collect();
        for step in 0..3 {
            let mut refs: Vec<&mut KvCache> = batch_caches.iter_mut().collect();
            let batched: Vec<Vec<f32>> = model
                .forward_batch(&next, &mut refs)
                .unwrap()
                .to_vec2()
                .unwrap();
            for (i, cache) in alone_caches.iter_mut().enumerate() {
                let alone: Vec<f32> = model.forward(&[next[i]], cache).unwrap().to_vec1().unwrap();
                assert_eq!(batched[i], alone, "{family}: step {step}, sequence {i}");
            }
        }
        for (b, a) in batch_caches.iter().zip(&alone_caches) {
            assert_eq!(b.len(), a.len());
        }
    }
}

#[test]
fn batching_does_not_change_greedy_tokens() {
    let families = [
        "qwen2",
        "qwen3",
        "qwen3-moe",
        "qwen3-moe-mixed",
        "qwen3.5",
        "qwen3.5-moe",
    ];
    for family in families {
        // Small prefill chunks: long prompts come in over several steps while others decode.
        let settings = SchedulerOptions {
            max_seqs: Some(5),
            prefill_chunk: Some(8),
            ..Default::default()
        };
        let alone_engine = engine(family, settings.clone());
        let alone: Vec<Vec<u32>> = prompts()
            .into_iter()
            .map(|p| collect(alone_engine.generate(request(p, 24, None)).unwrap()).0)
            .collect();
        // Every request at once (three wait for a place), then one joining mid-way.
        let e = engine(family, settings);
        let mut streams: Vec<EventStream> = prompts()
            .into_iter()
            .take(7)
            .map(|p| e.generate(request(p, 24, None)).unwrap())
            .collect();
        let first = collect(streams.remove(0)).0;
        let late = e.generate(request(prompts()[7].clone(), 24, None)).unwrap();
        let mut together = vec![first];
        together.extend(streams.into_iter().map(|s| collect(s).0));
        together.push(collect(late).0);
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a.len(), 24);
            assert_eq!(a, t, "{family}: request {i} alone vs batched");
        }
    }
}

#[test]
fn verified_rows_give_the_logits_of_one_by_one_decoding() {
    // A speculative step: several sequences, each with its pending token and a draft of its
    // own length, in one pass; every row as decoding that sequence's tokens one at a time.
    for family in ["qwen2", "qwen3", "qwen3-moe", "qwen3.5"] {
        let model = load_model(tiny(family).to_str().unwrap(), &options(Default::default()))
            .unwrap()
            .model;
        let prompts = prompts();
        let prefilled = |p: &Vec<u32>| -> KvCache {
            let mut c = model.new_cache();
            model.forward(p, &mut c).unwrap();
            c
        };
        let mut rows_caches: Vec<KvCache> = prompts.iter().map(prefilled).collect();
        let mut alone_caches: Vec<KvCache> = prompts.iter().map(prefilled).collect();
        let lens: Vec<usize> = (0..prompts.len()).map(|i| 1 + (i * 5) % 7).collect();
        let tokens: Vec<u32> = (0..lens.iter().sum::<usize>() as u32)
            .map(|t| 200 + t)
            .collect();
        let mut refs: Vec<&mut KvCache> = rows_caches.iter_mut().collect();
        let rows: Vec<Vec<f32>> = model
            .forward_rows(&tokens, &lens, &mut refs)
            .unwrap()
            .to_vec2()
            .unwrap();
        let mut r = 0;
        for (i, cache) in alone_caches.iter_mut().enumerate() {
            for _ in 0..lens[i] {
                let alone: Vec<f32> = model
                    .forward(&[tokens[r]], cache)
                    .unwrap()
                    .to_vec1()
                    .unwrap();
                assert_eq!(rows[r], alone, "{family}: sequence {i}, row {r}");
                r += 1;
            }
            assert_eq!(rows_caches[i].len(), cache.len(), "{family}: sequence {i}");
        }
        // A verifying pass cut back to its first rows goes on as if only they had run: keys
        // and values, and a hybrid's recurrent state (kept after each verified row).
        let mut verified = prefilled(&prompts[3]);
        let mut decoded = prefilled(&prompts[3]);
        verified.verify_next();
        let draft = [301, 302, 303, 304, 305];
        model
            .forward_rows(&draft, &[draft.len()], &mut [&mut verified])
            .unwrap();
        let kept = prompts[3].len() + 2;
        assert_eq!(verified.truncate(kept), kept, "{family}");
        for &t in &draft[..2] {
            model.forward(&[t], &mut decoded).unwrap();
        }
        for t in [400, 401, 402] {
            let a: Vec<f32> = model
                .forward(&[t], &mut verified)
                .unwrap()
                .to_vec1()
                .unwrap();
            let b: Vec<f32> = model
                .forward(&[t], &mut decoded)
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(a, b, "{family}: token {t} after a cut-back verification");
        }
    }
}

/// Prompts that repeat a motif of their own, so that prompt lookup drafts tokens.
fn repetitive_prompts() -> Vec<Vec<u32>> {
    (0..6usize)
        .map(|i| {
            let motif: Vec<u32> = (0..5 + i)
                .map(|j| ((i * 131 + j * 37 + 11) % 1000) as u32)
                .collect();
            motif.iter().cycle().take(24 + 7 * i).copied().collect()
        })
        .collect()
}

#[test]
fn speculation_gives_the_tokens_of_decoding() {
    let settings = |speculation| SchedulerOptions {
        max_seqs: Some(6),
        prefill_chunk: Some(16),
        speculation: Some(speculation),
        ..Default::default()
    };
    let sampled = SamplingParams {
        temperature: 0.9,
        top_k: Some(40),
        seed: 11,
        ..Default::default()
    };
    for family in ["qwen2", "qwen3", "qwen3-moe", "qwen3.5", "qwen3.5-moe"] {
        let (mut drafted, mut accepted) = (0, 0);
        let off = engine(family, settings(Speculation::Off));
        let on = engine(family, settings(Speculation::Ngram));
        // A prompt that holds an answer the model gives, then the prompt it answered again:
        // prompt lookup drafts that answer (a model that does not loop drafts nothing else).
        let mut prompts = repetitive_prompts();
        let first = prompts[1].clone();
        let (answer, _) = collect(off.generate(request(first.clone(), 40, None)).unwrap());
        prompts.push([&first[..], &answer, &first].concat());
        for sampling in [SamplingParams::greedy(), sampled.clone()] {
            let req = |p: Vec<u32>| GenerateRequest {
                sampling: sampling.clone(),
                ..request(p, 40, None)
            };
            let plain: Vec<Vec<u32>> = prompts
                .iter()
                .map(|p| collect(off.generate(req(p.clone())).unwrap()).0)
                .collect();
            // Alone, then all seven at once (one waits for a place).
            for (i, p) in prompts.iter().cloned().enumerate() {
                let (ids, s) = collect(on.generate(req(p)).unwrap());
                assert_eq!(ids, plain[i], "{family}, {sampling:?}: request {i} alone");
                drafted += s.usage.draft_tokens;
                accepted += s.usage.accepted_draft_tokens;
            }
            let streams: Vec<EventStream> = prompts
                .iter()
                .map(|p| on.generate(req(p.clone())).unwrap())
                .collect();
            for (i, s) in streams.into_iter().enumerate() {
                let (ids, summary) = collect(s);
                assert_eq!(ids, plain[i], "{family}, {sampling:?}: request {i} batched");
                assert!(summary.usage.accepted_draft_tokens <= summary.usage.draft_tokens);
            }
        }
        println!("{family}: {accepted} of {drafted} drafted tokens accepted alone");
        assert!(accepted > 0, "{family}: {accepted} of {drafted}");
    }
}

#[test]
fn a_draft_model_gives_the_tokens_of_decoding() {
    // A model drafting for itself has every greedy draft accepted; other models of the same
    // tokenizer (a hybrid among them, whose draft cache resumes at its checkpoints) draft
    // what they draft, and the answers stay decoding's.
    let sampled = SamplingParams {
        temperature: 0.9,
        top_k: Some(40),
        seed: 3,
        ..Default::default()
    };
    let pairs = [
        ("qwen2", "qwen2"),
        ("qwen3-moe", "qwen3-moe"),
        ("qwen2", "qwen3"),
        ("qwen3.5", "qwen2"),
        ("qwen2", "qwen3.5"),
    ];
    for (main, draft) in pairs {
        let scheduler = |speculation| SchedulerOptions {
            max_seqs: Some(6),
            prefill_chunk: Some(16),
            speculation: Some(speculation),
            ..Default::default()
        };
        let off = engine(main, scheduler(Speculation::Off));
        let on = Engine::load(
            tiny(main).to_str().unwrap(),
            &LoadOptions {
                draft_model: Some(tiny(draft).to_str().unwrap().to_string()),
                ..options(scheduler(Speculation::Draft))
            },
        )
        .unwrap();
        let auto = Engine::load(
            tiny(main).to_str().unwrap(),
            &LoadOptions {
                draft_model: Some(tiny(draft).to_str().unwrap().to_string()),
                ..options(scheduler(Speculation::Auto))
            },
        )
        .unwrap();
        for sampling in [SamplingParams::greedy(), sampled.clone()] {
            let req = |p: Vec<u32>| GenerateRequest {
                sampling: sampling.clone(),
                ..request(p, 30, None)
            };
            let plain: Vec<Vec<u32>> = prompts()
                .into_iter()
                .map(|p| collect(off.generate(req(p)).unwrap()).0)
                .collect();
            let what = format!("{main} drafted by {draft}, {sampling:?}");
            for (i, p) in prompts().into_iter().enumerate().take(3) {
                let (ids, s) = collect(on.generate(req(p)).unwrap());
                assert_eq!(ids, plain[i], "{what}: request {i} alone");
                let u = &s.usage;
                assert!(u.draft_tokens > 0, "{what}: request {i} drafted nothing");
                if main == draft && sampling.temperature == 0.0 {
                    assert_eq!(
                        u.accepted_draft_tokens, u.draft_tokens,
                        "{what}: request {i}"
                    );
                }
            }
            // Batched, by the draft model alone and with prompt lookup first (auto).
            for e in [&on, &auto] {
                let streams: Vec<EventStream> = prompts()
                    .into_iter()
                    .map(|p| e.generate(req(p)).unwrap())
                    .collect();
                for (i, s) in streams.into_iter().enumerate() {
                    assert_eq!(collect(s).0, plain[i], "{what}: request {i} batched");
                }
            }
        }
        let stats = on.stats().unwrap();
        assert!(stats.peak_kv_bytes <= stats.kv_budget_bytes, "{stats:?}");
    }
    // `draft` without a draft model, and a draft model that is not one, are refused by name.
    let e = Engine::load(
        tiny("qwen2").to_str().unwrap(),
        &options(SchedulerOptions {
            speculation: Some(Speculation::Draft),
            ..Default::default()
        }),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("speculative") && e.contains("draft model"),
        "{e}"
    );
    let e = Engine::load(
        tiny("qwen2").to_str().unwrap(),
        &LoadOptions {
            draft_model: Some("/no/such/model".into()),
            ..options(Default::default())
        },
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("draft_model") && e.contains("/no/such/model"),
        "{e}"
    );
}

#[test]
fn a_draft_model_runs_the_prompt_with_it_and_drafts_from_the_first_step() {
    // A 200-token prompt in chunks of 8: the draft model runs each chunk beside the served
    // model, so the first decoding step drafts. Caught up a chunk a step, the first 25 steps
    // would draft nothing, and at most 14 of 40 tokens could be drafted. The model drafting
    // for itself: every draft is kept.
    let scheduler = SchedulerOptions {
        prefill_chunk: Some(8),
        speculation: Some(Speculation::Draft),
        ..Default::default()
    };
    let spec = tiny("qwen2").to_str().unwrap().to_string();
    let e = Engine::load(
        &spec,
        &LoadOptions {
            draft_model: Some(spec.clone()),
            ..options(scheduler)
        },
    )
    .unwrap();
    let prompt: Vec<u32> = (0..200).map(|i| (i * 41 + 9) % 1000).collect();
    let (ids, s) = collect(e.generate(request(prompt.clone(), 40, None)).unwrap());
    let u = &s.usage;
    assert_eq!(ids.len(), 40);
    assert_eq!(u.accepted_draft_tokens, u.draft_tokens, "{u:?}");
    assert!(u.draft_tokens >= 20, "{u:?}");
    // A prompt that starts with that one: the served model's cache of the shared tokens is
    // reused, and the draft model's with it (else it would run them a chunk a step, and
    // draft at most 14 tokens again).
    let mut longer: Vec<u32> = prompt.clone();
    longer.extend((0..20).map(|i| (i * 7 + 3) % 1000));
    let (ids, s) = collect(e.generate(request(longer, 40, None)).unwrap());
    let u = &s.usage;
    assert!(u.cached_prompt_tokens >= 200, "{u:?}");
    assert_eq!(ids.len(), 40);
    assert!(u.draft_tokens >= 20, "{u:?}");
}

#[test]
fn a_session_after_speculation_resumes_as_after_decoding() {
    // The cache a speculative answer leaves holds exactly the tokens decoding would have run.
    let prompt: Vec<u32> = repetitive_prompts().remove(2);
    let mut kept = vec![];
    for speculation in [Speculation::Off, Speculation::Ngram] {
        let e = engine(
            "qwen2",
            SchedulerOptions {
                speculation: Some(speculation),
                ..Default::default()
            },
        );
        let (ids, _) = collect(e.generate(request(prompt.clone(), 30, Some("s"))).unwrap());
        let mut next = prompt.clone();
        next.extend(&ids);
        next.extend([7, 8, 9]);
        let (more, s) = collect(e.generate(request(next, 12, Some("s"))).unwrap());
        kept.push((ids, more, s.usage.cached_prompt_tokens));
    }
    assert_eq!(kept[0], kept[1]);
    assert_eq!(kept[0].2, prompt.len() + 29);
}

#[test]
fn sequences_that_outgrow_the_budget_are_preempted_and_go_on() {
    // A tiny model's cache of 20 + 400 positions takes 210 KiB (it grows to the length it
    // expects): six such answers need 1.23 MiB, the budget is 1 MiB. The newest are preempted, run their tokens again later
    // and go on: every answer whole, each the one it gives alone. (Without speculation: how
    // many drafted tokens a step takes follows measured step times, and answers that run
    // ahead of the others finish before the caches outgrow the budget together.)
    let settings = SchedulerOptions {
        kv_cache_mb: Some(1),
        max_seqs: Some(6),
        speculation: Some(Speculation::Off),
        ..Default::default()
    };
    let prompt =
        |i: usize| -> Vec<u32> { (0..20).map(|j| ((i * 29 + j * 13) % 1000) as u32).collect() };
    let alone_engine = engine("qwen2", settings.clone());
    let alone: Vec<Vec<u32>> = (0..6)
        .map(|i| {
            collect(
                alone_engine
                    .generate(request(prompt(i), 400, None))
                    .unwrap(),
            )
            .0
        })
        .collect();
    let e = engine("qwen2", settings);
    let streams: Vec<EventStream> = (0..6)
        .map(|i| e.generate(request(prompt(i), 400, None)).unwrap())
        .collect();
    for (i, s) in streams.into_iter().enumerate() {
        let (ids, summary) = collect(s);
        assert_eq!(ids.len(), 400, "request {i}");
        assert_eq!(summary.usage.prompt_tokens, 20, "request {i}");
        assert_eq!(ids, alone[i], "request {i}: preempted vs alone");
    }
    let stats = e.stats().unwrap();
    assert!(stats.preemptions > 0, "{stats:?}");
    assert!(stats.peak_kv_bytes <= stats.kv_budget_bytes, "{stats:?}");
    assert_eq!((stats.running, stats.waiting), (0, 0), "{stats:?}");
}

#[test]
fn a_hundred_sessions_stay_under_the_kv_budget_and_all_answer() {
    // 1 MiB holds a running sequence's 28 positions (14 KiB: its buffers take the length it
    // expects to reach) and about 73 idle caches of 27 rows (13.5 KiB) each.
    let e = engine(
        "qwen2",
        SchedulerOptions {
            kv_cache_mb: Some(1),
            ..Default::default()
        },
    );
    let prompt =
        |i: usize| -> Vec<u32> { (0..20).map(|j| ((i * 13 + j * 7) % 1000) as u32).collect() };
    for i in 0..100 {
        let (ids, s) = collect(
            e.generate(request(prompt(i), 8, Some(&format!("s{i}"))))
                .unwrap(),
        );
        assert_eq!(ids.len(), 8, "session {i}");
        assert_eq!(s.usage.cached_prompt_tokens, 0, "session {i}");
    }
    let stats = e.stats().unwrap();
    assert!(stats.peak_kv_bytes <= stats.kv_budget_bytes, "{stats:?}");
    assert!(stats.evictions >= 25, "{stats:?}");
    assert!((70..=75).contains(&stats.idle_caches), "{stats:?}");
    // The newest session is still cached; the oldest was evicted and prefills again.
    let mut next = prompt(99);
    next.extend([1, 2, 3]);
    let (_, s) = collect(e.generate(request(next, 2, Some("s99"))).unwrap());
    assert_eq!(s.usage.cached_prompt_tokens, 20);
    let mut old = prompt(0);
    old.extend([1, 2, 3]);
    let (_, s) = collect(e.generate(request(old, 2, Some("s0"))).unwrap());
    assert_eq!(s.usage.cached_prompt_tokens, 0);
    assert!(e.stats().unwrap().peak_kv_bytes <= stats.kv_budget_bytes);
}

/// A request whose prompt starts with a running sequence's shares those rows with it (they
/// become a segment both hold): each gives the tokens it gives alone.
#[test]
fn a_running_sequence_shares_its_prefix_and_both_answer_as_alone() {
    let e = engine("qwen2", Default::default());
    let system: Vec<u32> = (0..60).map(|j| (j * 23 + 9) % 1000).collect();
    let with = |tail: &[u32]| -> Vec<u32> { system.iter().chain(tail).copied().collect() };
    let mut a = e.generate(request(with(&[900, 901]), 300, None)).unwrap();
    // A decodes: its prompt is in its cache.
    let mut a_ids = vec![];
    while a_ids.is_empty() {
        match a.blocking_next() {
            Some(Event::Token { id }) => a_ids.push(id),
            Some(Event::Error { message }) => panic!("{message}"),
            Some(_) => {}
            None => panic!("stream ended"),
        }
    }
    let (b_ids, b) = collect(
        e.generate(request(with(&[902, 903, 904]), 20, None))
            .unwrap(),
    );
    let (rest, _) = collect(a);
    a_ids.extend(rest);
    assert!(b.usage.cached_prompt_tokens >= 60, "{:?}", b.usage);
    let alone = |prompt: Vec<u32>, n: usize| {
        collect(
            engine("qwen2", Default::default())
                .generate(request(prompt, n, None))
                .unwrap(),
        )
        .0
    };
    assert_eq!(b_ids, alone(with(&[902, 903, 904]), 20));
    assert_eq!(a_ids, alone(with(&[900, 901]), 300));
}

#[test]
fn a_new_session_copies_the_prefix_another_holds() {
    let e = engine("qwen2", Default::default());
    let system: Vec<u32> = (0..40).map(|j| (j * 11 + 5) % 1000).collect();
    let with = |tail: &[u32]| -> Vec<u32> { system.iter().chain(tail).copied().collect() };
    let (_, a) = collect(
        e.generate(request(with(&[900, 901]), 4, Some("agent-a")))
            .unwrap(),
    );
    assert_eq!(a.usage.cached_prompt_tokens, 0);
    let (ids_b, b) = collect(
        e.generate(request(with(&[902, 903, 904]), 6, Some("agent-b")))
            .unwrap(),
    );
    assert_eq!(b.usage.cached_prompt_tokens, 40);
    // The copied rows are the rows it would have computed: the same tokens as on an engine
    // that never saw agent-a.
    let fresh = engine("qwen2", Default::default());
    let (ids_alone, s) = collect(
        fresh
            .generate(request(with(&[902, 903, 904]), 6, None))
            .unwrap(),
    );
    assert_eq!(s.usage.cached_prompt_tokens, 0);
    assert_eq!(ids_b, ids_alone);
    // Fewer than 16 shared tokens: nothing is copied.
    let (_, c) = collect(
        e.generate(request(
            system[..10].iter().chain(&[5, 6]).copied().collect(),
            2,
            Some("agent-c"),
        ))
        .unwrap(),
    );
    assert_eq!(c.usage.cached_prompt_tokens, 0);
}

/// A coding agent's conversation without sessions: each turn's prompt is the last one, most
/// of its answer (re-rendered, so the cached answer's last tokens differ) and a new message.
/// The turns share the first one's rows instead of copying them: ten turns hold about one
/// conversation, not ten, and give the tokens of an engine that computed everything.
#[test]
fn a_conversation_holds_its_prefix_once() {
    let e = engine("qwen2", Default::default());
    let mut prompt: Vec<u32> = (0..200).map(|j| (j * 37 + 11) % 1000).collect();
    let mut cached = vec![];
    let mut last = vec![];
    let mut first_turn_bytes = 0;
    for turn in 0..10u32 {
        let (ids, s) = collect(e.generate(request(prompt.clone(), 6, None)).unwrap());
        cached.push(s.usage.cached_prompt_tokens);
        if turn == 0 {
            first_turn_bytes = e.stats().unwrap().kv_bytes;
        }
        last = ids.clone();
        if turn < 9 {
            prompt.extend(&ids[..4]);
            prompt.extend([900 + turn, 901, 902, 903, 904, 905, 906, 907]);
        }
    }
    // Every turn after the first ran only what follows the last prompt's shared rows.
    let shared_before = |t: usize| 200 + 12 * (t - 1) + 4;
    for (t, &c) in cached.iter().enumerate().skip(1) {
        assert!(
            c >= shared_before(t).min(200 + 12 * (t - 1)),
            "turn {t}: {cached:?}"
        );
    }
    let stats = e.stats().unwrap();
    // One conversation of 314 positions is 1.6 × the first turn's 206; ten copies would be
    // over ten times.
    assert!(
        stats.kv_bytes < 2 * first_turn_bytes,
        "{stats:?}, first turn {first_turn_bytes}"
    );
    assert!(stats.idle_caches >= 2, "{stats:?}");
    let fresh = engine("qwen2", Default::default());
    let (alone, _) = collect(fresh.generate(request(prompt, 6, None)).unwrap());
    assert_eq!(last, alone);
}

/// A cache in q8_0 blocks shares a prefix as exactly as a float one (the tokens of an engine
/// that computed it all), is saved and restored with its blocks, and heads that are not whole
/// blocks refuse it by option name.
#[test]
fn a_q8_0_cache_shares_prefixes_and_is_refused_where_it_cannot_go() {
    let q8 = |family: &str| {
        Engine::load(
            tiny(family).to_str().unwrap(),
            &LoadOptions {
                cache_types: CacheTypes {
                    k: Some(CacheType::Q8_0),
                    v: Some(CacheType::Q8_0),
                },
                ..options(Default::default())
            },
        )
    };
    let e = q8("qwen3").unwrap();
    let system: Vec<u32> = (0..40).map(|j| (j * 11 + 5) % 1000).collect();
    let with = |tail: &[u32]| -> Vec<u32> { system.iter().chain(tail).copied().collect() };
    collect(
        e.generate(request(with(&[900, 901]), 4, Some("a")))
            .unwrap(),
    );
    let (ids, s) = collect(e.generate(request(with(&[902, 903]), 6, None)).unwrap());
    assert_eq!(s.usage.cached_prompt_tokens, 40);
    let (alone, _) = collect(
        q8("qwen3")
            .unwrap()
            .generate(request(with(&[902, 903]), 6, None))
            .unwrap(),
    );
    assert_eq!(ids, alone);
    // Saved and restored into another engine, the session's next turn runs only its new
    // tokens and answers as the first engine does.
    let bytes = e.session_cache("a").unwrap().expect("a cache for `a`");
    let other = q8("qwen3").unwrap();
    assert_eq!(other.restore_session_cache("a", &bytes).unwrap(), 45);
    let mut next: Vec<u32> = with(&[900, 901]);
    next.extend([5, 6, 7]);
    let (there, s) = collect(other.generate(request(next.clone(), 4, Some("a"))).unwrap());
    assert!(s.usage.cached_prompt_tokens >= 42, "{:?}", s.usage);
    let (here, _) = collect(e.generate(request(next, 4, Some("a"))).unwrap());
    assert_eq!(there, here);
    let err = q8("qwen2")
        .err()
        .expect("head_dim 16 takes no q8_0")
        .to_string();
    assert!(err.contains("cache_type_k") && err.contains("16"), "{err}");
}

#[test]
fn a_released_session_leaves_its_cache_for_the_next_turn() {
    let e = engine("qwen2", Default::default());
    let turn1: Vec<u32> = (0..30).map(|j| (j * 17 + 3) % 1000).collect();
    let (ids, _) = collect(e.generate(request(turn1.clone(), 5, Some("chat"))).unwrap());
    e.release_session("chat").unwrap();
    // The next turn: the first turn, the answer (all but the last token ran), and more.
    let mut turn2 = turn1.clone();
    turn2.extend(&ids[..4]);
    turn2.extend([7, 8, 9]);
    let (_, s) = collect(e.generate(request(turn2, 3, Some("chat"))).unwrap());
    assert_eq!(s.usage.cached_prompt_tokens, 34);
    // A dropped session keeps nothing.
    e.drop_session("chat").unwrap();
    let (_, s) = collect(e.generate(request(turn1, 2, Some("chat"))).unwrap());
    assert_eq!(s.usage.cached_prompt_tokens, 0);
}

#[test]
fn a_saved_session_cache_restores_in_another_engine() {
    for family in ["qwen2", "qwen3.5"] {
        saved_session_restores(family);
    }
}

fn saved_session_restores(family: &str) {
    let a = engine(family, SchedulerOptions::default());
    let prompt: Vec<u32> = (0..40).map(|j| (j * 13 + 5) % 900).collect();
    let (first, _) = collect(a.generate(request(prompt.clone(), 6, Some("s"))).unwrap());
    a.release_session("s").unwrap();
    let bytes = a
        .session_cache("s")
        .unwrap()
        .expect("a cache is kept for the session");
    assert!(a.session_cache("never").unwrap().is_none());
    // The next turn: everything so far, then new tokens.
    let mut next = prompt.clone();
    next.extend(&first);
    next.extend([7, 8, 9]);
    let (want, in_process) = collect(a.generate(request(next.clone(), 8, Some("s"))).unwrap());

    let b = engine(family, SchedulerOptions::default());
    let restored = b.restore_session_cache("s", &bytes).unwrap();
    assert_eq!(
        restored,
        prompt.len() + first.len() - 1,
        "every position that was run"
    );
    let (got, resumed) = collect(b.generate(request(next, 8, Some("s"))).unwrap());
    assert_eq!(
        got, want,
        "{family}: greedy tokens as in the process that ran the first turn"
    );
    assert_eq!(
        resumed.usage.cached_prompt_tokens,
        in_process.usage.cached_prompt_tokens
    );
    assert_eq!(resumed.usage.cached_prompt_tokens, restored);

    // Another model's cache, or damaged bytes, are refused with the reason.
    let other = engine(
        if family == "qwen3" { "qwen2" } else { "qwen3" },
        SchedulerOptions::default(),
    );
    let err = other
        .restore_session_cache("s", &bytes)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("session cache") && err.contains("another model"),
        "{err}"
    );
    let err = b
        .restore_session_cache("t", &bytes[..bytes.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("cut short"), "{err}");
}

#[test]
fn bad_settings_are_refused_by_name() {
    let load = |s: SchedulerOptions| {
        Engine::load(tiny("qwen2").to_str().unwrap(), &options(s))
            .err()
            .expect("refused")
            .to_string()
    };
    let e = load(SchedulerOptions {
        max_seqs: Some(0),
        ..Default::default()
    });
    assert!(e.contains("max_seqs"), "{e}");
    let e = load(SchedulerOptions {
        kv_cache_mb: Some(0),
        ..Default::default()
    });
    assert!(e.contains("kv_cache_mb"), "{e}");
}

#[test]
fn cancelling_mid_prefill_leaves_the_others_running() {
    let e = engine(
        "qwen2",
        SchedulerOptions {
            prefill_chunk: Some(4),
            ..Default::default()
        },
    );
    let long: Vec<u32> = (0..400).map(|j| (j * 7 + 1) % 1000).collect();
    let other = e.generate(request(vec![5, 6, 7], 40, None)).unwrap();
    // Dropped while its 100 chunks of 4 tokens are still coming in.
    drop(e.generate(request(long, 50, None)).unwrap());
    let (ids, s) = collect(other);
    assert_eq!(ids.len(), 40);
    assert_eq!(s.reason, FinishReason::MaxTokens);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = e.stats().unwrap();
        if stats.running == 0 && stats.waiting == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancelled request still runs: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And the worker still answers.
    assert_eq!(
        collect(e.generate(request(vec![1, 2], 3, None)).unwrap())
            .0
            .len(),
        3
    );
}

#[test]
fn a_full_queue_is_refused_and_the_context_limit_is_its_own_finish_reason() {
    let e = engine(
        "qwen2",
        SchedulerOptions {
            max_waiting: Some(1),
            ..Default::default()
        },
    );
    // 500 of the model's 512 positions: it runs out of context before max_tokens.
    let prompt: Vec<u32> = (0..500).map(|j| (j * 3 + 2) % 1000).collect();
    let running = e.generate(request(prompt, 100, None)).unwrap();
    let err = e
        .generate(request(vec![1, 2, 3], 4, None))
        .err()
        .expect("queue full");
    assert!(err.to_string().contains("queue is full"), "{err}");
    let (ids, s) = collect(running);
    assert_eq!(s.reason, FinishReason::ContextFull);
    assert_eq!(
        ids.len(),
        13,
        "the last token sampled at position 511 is streamed"
    );
    // Its place is free again.
    assert_eq!(
        collect(e.generate(request(vec![1, 2, 3], 4, None)).unwrap())
            .0
            .len(),
        4
    );
}

/// Logits that are all NaN from the second decoding step on.
struct Broken;

impl hearth_engine::LanguageModel for Broken {
    fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> hearth_engine::Result<candle_core::Tensor> {
        let bad = cache.len() >= 4;
        cache.advance(tokens.len());
        let mut logits = vec![0f32; 1024];
        logits[7] = if bad { f32::NAN } else { 1.0 };
        Ok(candle_core::Tensor::from_vec(
            logits,
            1024,
            &candle_core::Device::Cpu,
        )?)
    }
    fn new_cache(&self) -> KvCache {
        KvCache::new(1, 512)
    }
    fn max_positions(&self) -> usize {
        512
    }
}

#[test]
fn non_finite_logits_are_an_error_naming_the_model() {
    let tok = hearth_engine::Tokenizer::from_file(&tiny("qwen2").join("tokenizer.json")).unwrap();
    let info = hearth_engine::ModelInfo {
        origin: "broken.gguf".into(),
        family: "qwen2".into(),
        parameters: 0,
        dtype: "f32".into(),
        device: "cpu".into(),
        max_positions: 512,
        stop_token_ids: vec![],
        stop_strings: vec![],
        sampling: hearth_engine::SamplingParams::greedy(),
        chat_template: None,
        thinks: false,
        tool_format: Default::default(),
        load_s: 0.0,
        fingerprint: "test".into(),
        images: None,
    };
    let e = Engine::serve(Box::new(Broken), tok, info, None, Duration::ZERO);
    let mut s = e.generate(request(vec![1, 2, 3], 10, None)).unwrap();
    let mut tokens = 0;
    let message = loop {
        match s.blocking_next() {
            Some(Event::Token { .. }) => tokens += 1,
            Some(Event::Error { message }) => break message,
            Some(Event::Finished(_)) | None => panic!("NaN logits were sampled"),
            Some(_) => {}
        }
    };
    assert_eq!(tokens, 2, "the tokens before the NaN logits stream");
    assert!(
        message.contains("broken.gguf") && message.contains("NaN"),
        "{message}"
    );
}

/// `<|im_start|>` of the tiny fixtures' vocabulary.
const IM_START: u32 = 1022;
const IM_END: u32 = 1023;

/// A chat-shaped prompt: a system message, then `turns` (each its own message).
fn chat(system: &[u32], turns: &[&[u32]]) -> Vec<u32> {
    let mut p = vec![IM_START];
    p.extend(system);
    for t in turns {
        p.extend([IM_END, IM_START]);
        p.extend(*t);
    }
    p
}

/// A hybrid model's recurrent state resumes only where it was checkpointed: two agents with
/// one system prompt share it up to the second message's start, and the shared run gives the
/// tokens of a fresh one.
#[test]
fn a_hybrid_shares_a_system_prompt_at_the_message_start() {
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let e = engine(family, Default::default());
        let system: Vec<u32> = (0..40).map(|j| (j * 11 + 5) % 1000).collect();
        let a = chat(&system, &[&[900, 901, 902]]);
        let (_, sa) = collect(e.generate(request(a, 4, Some("agent-a"))).unwrap());
        assert_eq!(sa.usage.cached_prompt_tokens, 0);
        // Shares 43 tokens (through `<|im_start|>` and its first token, 900): the state was kept
        // after `<|im_start|>`, position 43.
        let b = chat(&system, &[&[900, 950, 951, 952]]);
        let (ids_b, sb) = collect(e.generate(request(b.clone(), 6, Some("agent-b"))).unwrap());
        assert_eq!(sb.usage.cached_prompt_tokens, 1 + 40 + 2, "{family}");
        let fresh = engine(family, Default::default());
        let (ids_alone, s) = collect(fresh.generate(request(b, 6, None)).unwrap());
        assert_eq!(s.usage.cached_prompt_tokens, 0);
        assert_eq!(ids_b, ids_alone, "{family}: shared prefix vs fresh");
    }
}

/// Many turns later, a new conversation with the same system prompt still resumes where it
/// ends: the marked checkpoints are thinned where they are closest, and the system prompt's
/// end is far from the others.
#[test]
fn a_hybrid_keeps_the_system_prompt_through_many_turns() {
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let e = engine(family, Default::default());
        let system: Vec<u32> = (0..40).map(|j| (j * 13 + 7) % 1000).collect();
        let mut prompt = chat(&system, &[&[900, 901, 902]]);
        for turn in 0..8u32 {
            let (ids, _) = collect(
                e.generate(request(prompt.clone(), 3, Some("chat")))
                    .unwrap(),
            );
            e.release_session("chat").unwrap();
            prompt.extend(&ids);
            prompt.extend([IM_END, IM_START, 910 + turn, 911, 912]);
        }
        let b = chat(&system, &[&[920, 921, 922, 923]]);
        let (ids_b, sb) = collect(e.generate(request(b.clone(), 6, Some("agent-b"))).unwrap());
        // The state after the second `<|im_start|>`.
        assert_eq!(sb.usage.cached_prompt_tokens, 1 + 40 + 2, "{family}");
        assert_as_fresh(family, Default::default(), b, &ids_b);
    }
}

/// Prefill steps of `n` tokens (a checkpoint at the end of each).
fn chunked(n: usize) -> SchedulerOptions {
    SchedulerOptions {
        prefill_chunk: Some(n),
        ..Default::default()
    }
}

/// An engine that computes all of `prompt` gives `ids`, as the one that resumed did.
fn assert_as_fresh(family: &str, options: SchedulerOptions, prompt: Vec<u32>, ids: &[u32]) {
    let fresh = engine(family, options);
    let (alone, _) = collect(fresh.generate(request(prompt, ids.len(), None)).unwrap());
    assert_eq!(alone, ids, "{family}: resumed vs fresh");
}

/// Agents that share a long system prompt share its recurrent-state checkpoints too (held,
/// not copied, and counted once), as they share its keys and values.
#[test]
fn hybrid_agents_hold_a_shared_system_prompt_once() {
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let e = engine(family, chunked(64));
        let system: Vec<u32> = (0..300).map(|j| (j * 29 + 3) % 1000).collect();
        collect(
            e.generate(request(chat(&system, &[&[900, 901]]), 2, None))
                .unwrap(),
        );
        let first = e.stats().unwrap().kv_bytes;
        for agent in 0..3u32 {
            let p = chat(&system, &[&[910 + agent, 911, 912]]);
            let (_, s) = collect(e.generate(request(p, 2, None)).unwrap());
            assert_eq!(s.usage.cached_prompt_tokens, 303, "{family}");
        }
        // Four agents: 1.4 × the first one's bytes (2.3 × with the checkpoints copied).
        let stats = e.stats().unwrap();
        assert!(
            stats.kv_bytes < 2 * first,
            "{family}: {stats:?}, first {first}"
        );
    }
}

/// A prompt that parts from a cached one inside a long message resumes at a block boundary
/// (the end of a prefill step) near where they part, not at the message's start.
#[test]
fn a_hybrid_resumes_inside_a_long_message() {
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let e = engine(family, chunked(64));
        let long: Vec<u32> = (0..400).map(|j| (j * 7 + 11) % 1000).collect();
        let a = chat(&long, &[]);
        collect(e.generate(request(a.clone(), 2, None)).unwrap());
        let mut b = a[..300].to_vec();
        b.extend([930, 931, 932]);
        let (ids_b, sb) = collect(e.generate(request(b.clone(), 6, None)).unwrap());
        let cached = sb.usage.cached_prompt_tokens;
        assert!(
            cached % 64 == 0 && cached > 300 - 2 * 64,
            "{family}: {cached}"
        );
        assert_as_fresh(family, chunked(64), b, &ids_b);
    }
}

/// Turn to turn: a next turn that repeats the answer resumes at the state's end; one whose
/// history differs from what was generated (a template that drops the thinking) resumes at
/// the end of the previous prompt. Both give the tokens of a fresh run.
#[test]
fn a_hybrid_resumes_the_next_turn_without_recomputing_the_history() {
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let e = engine(family, Default::default());
        let turn1 = chat(
            &(0..30).map(|j| (j * 17 + 3) % 1000).collect::<Vec<_>>(),
            &[&[5, 6]],
        );
        let (ids, _) = collect(e.generate(request(turn1.clone(), 5, Some("chat"))).unwrap());
        e.release_session("chat").unwrap();
        let mut turn2 = turn1.clone();
        turn2.extend(&ids[..4]);
        turn2.extend([IM_END, IM_START, 7, 8, 9]);
        let (got, s) = collect(e.generate(request(turn2.clone(), 6, Some("chat"))).unwrap());
        assert_eq!(s.usage.cached_prompt_tokens, turn1.len() + 4, "{family}");
        let fresh = engine(family, Default::default());
        assert_eq!(
            collect(fresh.generate(request(turn2, 6, None)).unwrap()).0,
            got
        );
        e.release_session("chat").unwrap();
        // The history written differently from what was generated.
        let mut turn2b = turn1.clone();
        turn2b.extend([700, 701, IM_END, IM_START, 7, 8, 9]);
        let (got, s) = collect(
            e.generate(request(turn2b.clone(), 6, Some("chat")))
                .unwrap(),
        );
        assert_eq!(s.usage.cached_prompt_tokens, turn1.len(), "{family}");
        assert_eq!(
            collect(fresh.generate(request(turn2b, 6, None)).unwrap()).0,
            got
        );
    }
}

#[test]
fn a_cut_draft_head_drafts_the_argmax_over_its_ids_and_the_contexts() {
    // The tiny vocabulary (1,024 ids) cut at 64, and id 1000 always allowed: each token
    // drafted after the first pass (which runs the whole prompt through the full head) is the
    // full model's argmax over ids 0..64, the context's ids and 1000.
    use hearth_engine::speculative::draft_model::{DraftCache, DraftJob, DraftModel};
    let mut from_context = 0;
    for family in ["qwen2", "qwen3.5"] {
        let load = || {
            load_model(tiny(family).to_str().unwrap(), &options(Default::default()))
                .unwrap()
                .model
        };
        let full = load();
        let cut = DraftModel::with_head(Box::new(load()), 1024, Some(64), &[1000]).unwrap();
        let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 300) % 1024).collect();
        let draft = |cache: &mut DraftCache, context: Vec<u32>, max: usize| {
            let mut job = [DraftJob {
                cache,
                context,
                max,
            }];
            cut.draft(&mut job, 512).unwrap().remove(0)
        };
        let mut cache = cut.new_cache();
        let first = draft(&mut cache, prompt.clone(), 1);
        assert_eq!(first.len(), 1, "{family}");
        // The first token accepted with one more, then a draft of 6 through the cut head.
        let mut context = prompt.clone();
        context.extend([first[0], 777]);
        let drafted = draft(&mut cache, context.clone(), 6);
        assert_eq!(drafted.len(), 6, "{family}");
        let allowed = |id: usize| id < 64 || id == 1000 || context.contains(&(id as u32));
        let mut seen = context.clone();
        for &t in &drafted {
            let mut c = full.new_cache();
            let logits: Vec<f32> = full.forward(&seen, &mut c).unwrap().to_vec1().unwrap();
            let want = (0..logits.len())
                .filter(|&i| allowed(i))
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            let top = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            assert_eq!(
                t as usize, want,
                "{family}: drafted after {seen:?} (full argmax {top})"
            );
            seen.push(t);
            from_context += usize::from(t >= 64);
        }
    }
    // Both sources of ids were drafted from: the cut head's and the context's.
    assert!(from_context > 0);
}
