//! Qwen3.5's multi-token-prediction head (`mtp.*`; the dense model's and the MoE model's, whose
//! head routes to experts): its logits against the head computed from
//! transformers' parts (golden by crates/engine/tests/fixtures/mtp_golden.py), from safetensors
//! and from the GGUF llama.cpp's converter makes of them (its `nextn` block), its state kept
//! step by step as a from-scratch run of the head computes it, and `--speculative mtp` giving
//! the tokens of plain decoding, alone and several at once.

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use hearth_engine::speculative::mtp::{self, MtpJob, MtpState};
use hearth_engine::{
    DeviceSpec, Engine, GenerateRequest, LoadOptions, Qwen, QwenConfig, SamplingParams,
    SchedulerOptions, Speculation, Weights,
};

fn load(family: &str) -> Qwen {
    let dir = tiny(family);
    let cfg = QwenConfig::from_file(&dir.join("config.json")).unwrap();
    let files = hearth_engine::load::source::local_dir(&dir).unwrap();
    let w = Weights::open(&files.weights, DType::F32, &Device::Cpu).unwrap();
    Qwen::load(&cfg, &w).unwrap()
}

fn floats(v: &serde_json::Value, k: &str) -> Vec<f32> {
    v[k].as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn id(v: &serde_json::Value, k: &str) -> u32 {
    v[k].as_u64().unwrap() as u32
}

fn load_gguf(name: &str) -> Qwen {
    let path = fixtures().join(format!("gguf/tiny-{name}.gguf"));
    let file = std::sync::Arc::new(hearth_engine::load::gguf::GgufFile::open(&path).unwrap());
    Qwen::load(&file.config().unwrap(), &file.weights(&Device::Cpu)).unwrap()
}

#[test]
fn the_head_matches_the_reference() {
    assert!(!load("qwen3.5").has_mtp());
    assert!(!load_gguf("qwen3.5-f32").has_mtp());
    for family in ["qwen3.5", "qwen3.5-moe"] {
        let mtp = format!("{family}-mtp");
        head_matches_the_reference(&load(&mtp), &mtp, "safetensors");
        head_matches_the_reference(&load_gguf(&format!("{mtp}-f32")), &mtp, "gguf");
    }
}

fn head_matches_the_reference(model: &Qwen, name: &str, format: &str) {
    let what = format!("{name}, {format}");
    let path = fixtures().join(format!("golden/tiny-{name}.json"));
    let g: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let prompt: Vec<u32> = g["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert!(model.has_mtp(), "{what}");
    let mut cache = model.new_cache();
    let (logits, hidden) = model.forward_hidden(&prompt, &mut cache).unwrap();
    let next = logits.argmax(0).unwrap().to_scalar::<u32>().unwrap();
    assert_eq!(next, id(&g, "next"), "{what}");
    assert_eq!(hidden.dims(), &[prompt.len(), 64], "{what}");

    // Row p: the hidden state at p and the token at p + 1, the model's choice last.
    let mut head = model.new_mtp_cache();
    let tokens: Vec<u32> = prompt[1..].iter().copied().chain([next]).collect();
    let (logits, out) = model
        .mtp_rows(&hidden, &tokens, &[tokens.len()], &mut [&mut head])
        .unwrap();
    let got: Vec<f32> = logits.get(0).unwrap().to_vec1().unwrap();
    let diff = max_abs_diff(&got, &floats(&g, "mtp_logits"));
    assert!(diff < 1e-4, "{what}: head logits differ by {diff}");
    let draft = logits.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0];
    assert_eq!(draft, id(&g, "draft"));
    assert_eq!(head.len(), prompt.len());

    // Chained: the head's own hidden state and its draft.
    let (logits, _) = model
        .mtp_rows(&out, &[draft], &[1], &mut [&mut head])
        .unwrap();
    let got: Vec<f32> = logits.get(0).unwrap().to_vec1().unwrap();
    let diff = max_abs_diff(&got, &floats(&g, "mtp_logits_chained"));
    assert!(diff < 1e-4, "{what}: chained head logits differ by {diff}");
    assert_eq!(
        logits.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0],
        id(&g, "draft_chained")
    );

    // Rows of two sequences in one pass: each as alone.
    let mut a = model.new_mtp_cache();
    let mut b = model.new_mtp_cache();
    let n = tokens.len();
    let both = Tensor::cat(&[&hidden, &hidden.narrow(0, 0, 10).unwrap()], 0).unwrap();
    let rows: Vec<u32> = tokens.iter().chain(&tokens[..10]).copied().collect();
    let (logits, _) = model
        .mtp_rows(&both, &rows, &[n, 10], &mut [&mut a, &mut b])
        .unwrap();
    let first: Vec<f32> = logits.get(0).unwrap().to_vec1().unwrap();
    assert!(max_abs_diff(&first, &floats(&g, "mtp_logits")) < 1e-4);
    let mut c = model.new_mtp_cache();
    let (alone, _) = model
        .mtp_rows(
            &hidden.narrow(0, 0, 10).unwrap(),
            &tokens[..10],
            &[10],
            &mut [&mut c],
        )
        .unwrap();
    let second: Vec<f32> = logits.get(1).unwrap().to_vec1().unwrap();
    let alone: Vec<f32> = alone.get(0).unwrap().to_vec1().unwrap();
    assert!(max_abs_diff(&second, &alone) < 1e-5);

    // Bad rows are refused, not run.
    let e = model
        .mtp_rows(&hidden, &tokens[1..], &[n - 1], &mut [&mut c])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tokens"), "{e}");
}

/// The head's drafts after `context` (the model's tokens, the pending one last), computed from
/// nothing: every position's hidden state from a fresh pass, the head over all of them, then
/// chained.
fn drafts_from_scratch(model: &Qwen, context: &[u32], n: usize) -> Vec<u32> {
    let held = &context[..context.len() - 1];
    let mut cache = model.new_cache();
    let (_, hidden) = model.forward_hidden(held, &mut cache).unwrap();
    let mut head = model.new_mtp_cache();
    let (mut logits, mut out) = model
        .mtp_rows(&hidden, &context[1..], &[held.len()], &mut [&mut head])
        .unwrap();
    let mut drafts = vec![];
    loop {
        let d = logits.argmax(1).unwrap().to_vec1::<u32>().unwrap()[0];
        drafts.push(d);
        if drafts.len() == n {
            return drafts;
        }
        (logits, out) = model.mtp_rows(&out, &[d], &[1], &mut [&mut head]).unwrap();
    }
}

/// Prefill in chunks, then decoding steps that verify the head's drafts and keep a few rows of
/// each: the state's drafts are those of the head run from nothing over the same context.
#[test]
fn the_state_follows_the_sequence_through_cuts() {
    let model = load("qwen3.5-mtp");
    let vocab = 1024;
    let prompt: Vec<u32> = (0..40).map(|i| (i * 29 + 5) % 1000).collect();
    let mut cache = model.new_cache();
    let mut state = MtpState::new(model.new_mtp_cache());
    // Two prompt chunks.
    let mut logits = None;
    for chunk in prompt.chunks(25) {
        let from = cache.len();
        let (l, h) = model.forward_hidden(chunk, &mut cache).unwrap();
        state.push(from, h).unwrap();
        logits = Some(l);
        // The rows whose next token the prompt holds run as the chunk's come in (the last
        // row waits for the model's choice), drafting nothing.
        let mut jobs = [MtpJob {
            state: &mut state,
            context: prompt[..(cache.len() + 1).min(prompt.len())].to_vec(),
            max: 0,
        }];
        assert!(mtp::draft(&model, &mut jobs, vocab).unwrap()[0].is_empty());
    }
    let mut tokens = prompt.clone();
    let mut pending = logits
        .unwrap()
        .argmax(0)
        .unwrap()
        .to_scalar::<u32>()
        .unwrap();
    // Steps keeping 1, 3, 2, 1, 4 rows of drafts of 3 (the rows past them rejected).
    for keep in [1usize, 3, 2, 1, 4] {
        let context: Vec<u32> = tokens.iter().copied().chain([pending]).collect();
        let mut jobs = [MtpJob {
            state: &mut state,
            context: context.clone(),
            max: 3,
        }];
        let draft = mtp::draft(&model, &mut jobs, vocab).unwrap().remove(0);
        assert_eq!(
            draft,
            drafts_from_scratch(&model, &context, 3),
            "keeping {keep}"
        );
        // Verify: the pending token and the draft in one pass; keep `keep` rows.
        let rows: Vec<u32> = [pending].into_iter().chain(draft.iter().copied()).collect();
        let from = cache.len();
        // The recurrent state keeps each row's, so the cache cuts back to any of them.
        cache.verify_next();
        let (l, h) = model
            .forward_rows_hidden(&rows, &[rows.len()], &mut [&mut cache])
            .unwrap();
        assert_eq!(cache.truncate(from + keep), from + keep);
        state.push(from, h.narrow(0, 0, keep).unwrap()).unwrap();
        tokens.extend_from_slice(&rows[..keep]);
        pending = l
            .get(keep - 1)
            .unwrap()
            .argmax(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap();
    }
    // Positions 30..40 of the prompt, then the pending token 7, drafted from `state`.
    let (_, h) = model
        .forward_hidden(&prompt, &mut model.new_cache())
        .unwrap();
    let context: Vec<u32> = prompt.iter().copied().chain([7]).collect();
    let from_30 = |mut state: MtpState| -> Vec<u32> {
        state.push(30, h.narrow(0, 30, 10).unwrap()).unwrap();
        let mut jobs = [MtpJob {
            state: &mut state,
            context: context.clone(),
            max: 2,
        }];
        mtp::draft(&model, &mut jobs, vocab).unwrap().remove(0)
    };
    // A copy of its first 30 positions (a prompt seeded from this one's cached prefix) goes
    // on as the head run from nothing does.
    let copy = state
        .copy_prefix(30, model.new_mtp_cache())
        .unwrap()
        .unwrap();
    assert_eq!(from_30(copy), drafts_from_scratch(&model, &context, 2));
    // A gap (a sequence seeded from a shared prefix whose head state is gone): the state
    // starts over where its rows start, and drafts from there.
    assert_eq!(from_30(MtpState::new(model.new_mtp_cache())).len(), 2);
}

fn engine(family: &str, speculation: Speculation) -> Result<Engine, String> {
    engine_with(family, speculation, None)
}

fn engine_with(
    family: &str,
    speculation: Speculation,
    kv_cache_mb: Option<usize>,
) -> Result<Engine, String> {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        scheduler: SchedulerOptions {
            max_seqs: Some(4),
            speculation: Some(speculation),
            prefill_chunk: Some(16),
            kv_cache_mb,
            ..Default::default()
        },
        // f32 caches: the budget test's sizes are theirs.
        cache_types: hearth_engine::CacheTypes {
            k: Some(hearth_engine::CacheType::F32),
            v: Some(hearth_engine::CacheType::F32),
        },
        ..Default::default()
    };
    Engine::load(tiny(family).to_str().unwrap(), &opts).map_err(|e| e.to_string())
}

#[test]
fn speculating_with_the_head_gives_the_tokens_of_decoding() {
    for family in ["qwen3.5-mtp", "qwen3.5-moe-mtp"] {
        head_speculation_is_exact(family);
    }
    // A model without the head is refused, by name.
    let e = engine("qwen3.5", Speculation::Mtp).err().unwrap();
    assert!(
        e.contains("speculative") && e.contains("multi-token-prediction"),
        "{e}"
    );
}

/// Four sequences under a 1 MiB budget (each needs about 0.5 MiB by its end): the heads'
/// caches are counted before they grow, so the budget holds with preemption, and the answers
/// are decoding's.
#[test]
fn the_heads_caches_stay_under_the_kv_budget() {
    let off = engine("qwen3.5-mtp", Speculation::Off).unwrap();
    let on = engine_with("qwen3.5-mtp", Speculation::Mtp, Some(1)).unwrap();
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|k| {
            (0..40 + 9 * k)
                .map(|i| (i * 37 + 11 * k + 1) % 1000)
                .collect()
        })
        .collect();
    let request = |p: &Vec<u32>| GenerateRequest {
        stop_token_ids: Some(vec![]),
        ..GenerateRequest::new(p.clone(), 200)
    };
    let want = one_by_one(&off, prompts.iter().map(request).collect());
    for (i, (got, _)) in at_once(&on, prompts.iter().map(request).collect())
        .into_iter()
        .enumerate()
    {
        assert_eq!(got, want[i], "prompt {i} of 4 at once");
    }
    let stats = on.stats().unwrap();
    assert!(stats.preemptions + stats.evictions > 0, "{stats:?}");
    assert!(stats.peak_kv_bytes <= stats.kv_budget_bytes, "{stats:?}");
}

fn head_speculation_is_exact(family: &str) {
    let off = engine(family, Speculation::Off).unwrap();
    let on = engine(family, Speculation::Mtp).unwrap();
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|k| {
            (0..20 + 7 * k)
                .map(|i| (i * 31 + 17 * k + 3) % 1000)
                .collect()
        })
        .collect();
    let sampled = SamplingParams {
        temperature: 0.8,
        seed: 7,
        ..Default::default()
    };
    for sampling in [SamplingParams::greedy(), sampled] {
        let request = |p: &Vec<u32>| GenerateRequest {
            sampling: sampling.clone(),
            stop_token_ids: Some(vec![]),
            ..GenerateRequest::new(p.clone(), 48)
        };
        let want = one_by_one(&off, prompts.iter().map(request).collect());
        let (got, usage) = tokens_of(on.generate(request(&prompts[0])).unwrap());
        assert_eq!(got, want[0], "{family}, {sampling:?}: alone");
        assert!(usage.draft_tokens > 0, "{family}: nothing drafted");
        // A prompt that starts with that answer's tokens: seeded from its cache, the head's
        // state with it.
        let longer: Vec<u32> = prompts[0]
            .iter()
            .chain(&got)
            .copied()
            .chain([5, 6])
            .collect();
        let (a, _) = tokens_of(off.generate(request(&longer)).unwrap());
        let (b, usage) = tokens_of(on.generate(request(&longer)).unwrap());
        assert_eq!(b, a, "{family}, {sampling:?}: a seeded prompt");
        assert!(usage.cached_prompt_tokens >= 16, "{family}: {usage:?}");
        // Four at once, prompts of different lengths prefilled in chunks beside decoding.
        let answers = at_once(&on, prompts.iter().map(request).collect());
        for (i, (got, _)) in answers.into_iter().enumerate() {
            assert_eq!(
                got, want[i],
                "{family}, {sampling:?}: prompt {i} of 4 at once"
            );
        }
    }
}
