//! The Qwen forward pass against Hugging Face transformers (goldens by crates/engine/tests/fixtures/generate.py).

mod common;

use candle_core::{DType, Device};
use common::*;
use hearth_engine::{KvCache, Qwen, QwenConfig, Weights};

/// Every tiny checkpoint: Qwen2, Qwen3, Qwen3-MoE with every layer routed and with a dense
/// layer between routed ones, and the Qwen3.5 hybrids (Gated DeltaNet and gated attention):
/// `…ForCausalLM` with tied embeddings, `…ForConditionalGeneration` beside a vision tower, and
/// the MoE one with its shared expert.
const FAMILIES: [&str; 7] = [
    "qwen2",
    "qwen3",
    "qwen3-moe",
    "qwen3-moe-mixed",
    "qwen3.5",
    "qwen3.5-vl",
    "qwen3.5-moe",
];

/// The hybrid ones.
const HYBRIDS: [&str; 3] = ["qwen3.5", "qwen3.5-vl", "qwen3.5-moe"];

fn load(family: &str, dtype: DType) -> Qwen {
    let dir = tiny(family);
    let cfg = QwenConfig::from_file(&dir.join("config.json")).unwrap();
    let files = hearth_engine::load::source::local_dir(&dir).unwrap();
    let w = Weights::open(&files.weights, dtype, &Device::Cpu).unwrap();
    Qwen::load(&cfg, &w).unwrap()
}

fn logits(model: &Qwen, ids: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache();
    model.forward(ids, &mut cache).unwrap().to_vec1().unwrap()
}

fn greedy(model: &Qwen, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = model.new_cache();
    let mut l = model.forward(prompt, &mut cache).unwrap();
    let mut out = vec![];
    for _ in 0..n {
        let next = l.argmax(0).unwrap().to_scalar::<u32>().unwrap();
        out.push(next);
        l = model.forward(&[next], &mut cache).unwrap();
    }
    out
}

#[test]
fn f32_logits_match_transformers() {
    for family in FAMILIES {
        let g = golden(family);
        let m = load(family, DType::F32);
        let d = max_abs_diff(&logits(&m, &g.prompt_ids), &g.logits_f32);
        assert!(d <= 1e-4, "{family}: max abs diff {d}");
        let d = max_abs_diff(&logits(&m, &g.long_prompt_ids), &g.long_logits_f32);
        assert!(d <= 1e-4, "{family} (300-token prompt): max abs diff {d}");
    }
}

#[test]
fn greedy_tokens_match_transformers() {
    for family in FAMILIES {
        let g = golden(family);
        let m = load(family, DType::F32);
        assert_eq!(greedy(&m, &g.prompt_ids, 32), g.greedy_f32, "{family}");
    }
}

/// bf16 weights: against transformers running the same bf16-rounded weights in f32 (what the
/// CPU path computes), the math must agree as in f32. Against transformers computing in bf16,
/// every activation is rounded to 8 bits of mantissa (relative error 2^-9 ≈ 0.4 %) at each of
/// the ~10 ops per layer, so the logits (of magnitude ~5 here) may differ by a few hundredths:
/// the bound is 5 % of the largest logit.
#[test]
fn bf16_logits_match_transformers() {
    for family in FAMILIES {
        let g = golden(family);
        let m = load(family, DType::BF16);
        let got = logits(&m, &g.prompt_ids);
        let d = max_abs_diff(&got, &g.logits_bf16_weights);
        assert!(d <= 1e-4, "{family}: bf16 weights, f32 compute: {d}");
        let d = max_abs_diff(&logits(&m, &g.long_prompt_ids), &g.long_logits_bf16_weights);
        assert!(d <= 1e-4, "{family}: bf16 weights, 300 tokens: {d}");
        let scale = g
            .logits_bf16_native
            .iter()
            .fold(0f32, |a, &x| a.max(x.abs()));
        // Where transformers' own bf16 run parts from its f32 one (the tiny Qwen3.5-MoE: a
        // router's near tie flips in bf16, 2.1 of 3.8), it is no reference for the rounding.
        if max_abs_diff(&g.logits_f32, &g.logits_bf16_native) > 0.05 * scale {
            assert_eq!(
                family, "qwen3.5-moe",
                "transformers' bf16 parts from its f32"
            );
            continue;
        }
        let d = max_abs_diff(&got, &g.logits_bf16_native);
        assert!(
            d <= 0.05 * scale,
            "{family}: vs native bf16: {d} (scale {scale})"
        );
    }
}

#[test]
fn f16_runs_close_to_f32() {
    let g = golden("qwen2");
    let m = load("qwen2", DType::F16);
    let scale = g.logits_f32.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let d = max_abs_diff(&logits(&m, &g.prompt_ids), &g.logits_f32);
    assert!(d <= 0.01 * scale, "f16 vs f32: {d}");
}

#[test]
fn prefill_then_decode_equals_full_recompute() {
    for family in FAMILIES {
        let g = golden(family);
        let m = load(family, DType::F32);
        let mut all = g.prompt_ids.clone();
        all.extend(&g.greedy_f32[..8]);
        // Through the cache: prompt, then one token at a time.
        let mut cache = m.new_cache();
        let mut last = m.forward(&g.prompt_ids, &mut cache).unwrap();
        for &t in &g.greedy_f32[..8] {
            last = m.forward(&[t], &mut cache).unwrap();
        }
        assert_eq!(cache.len(), all.len());
        let full = logits(&m, &all);
        let d = max_abs_diff(&last.to_vec1::<f32>().unwrap(), &full);
        // f32 weights: a prompt's products take gemm, a decoded token's the row kernel.
        assert!(d <= 5e-5, "{family}: cached vs recomputed {d}");
        // Every position of a full run equals the cached run's per-step logits.
        let per_pos = m.forward_all(&all, &mut m.new_cache()).unwrap();
        let row: Vec<f32> = per_pos.get(all.len() - 1).unwrap().to_vec1().unwrap();
        assert!(max_abs_diff(&row, &full) <= 5e-5);
    }
}

#[test]
fn truncated_cache_continues_like_a_fresh_run() {
    for family in FAMILIES {
        let g = golden(family);
        let m = load(family, DType::F32);
        let mut cache: KvCache = m.new_cache();
        // Fill with a different continuation, then cut back to a shared prefix of 10 (where a
        // hybrid's recurrent state is asked to keep a checkpoint).
        let mut other = g.prompt_ids[..10].to_vec();
        other.extend([5, 6, 7, 8, 9, 10, 11]);
        cache.mark_checkpoints(&[10]);
        m.forward(&other, &mut cache).unwrap();
        assert_eq!(cache.truncate(10), 10, "{family}");
        assert_eq!(cache.len(), 10);
        let l = m
            .forward(&g.prompt_ids[10..], &mut cache)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let d = max_abs_diff(&l, &logits(&m, &g.prompt_ids));
        assert!(d <= 5e-5, "{family}: {d}");
        let d = max_abs_diff(&l, &g.logits_f32);
        assert!(d <= 1e-4, "{family}: vs transformers {d}");
    }
}

#[test]
fn prefill_in_chunks_equals_one_prefill() {
    for family in ["qwen3", "qwen3.5", "qwen3.5-moe"] {
        let g = golden(family);
        let m = load(family, DType::F32);
        let mut cache = m.new_cache();
        let mut last = None;
        for chunk in g.long_prompt_ids.chunks(64) {
            last = Some(m.forward(chunk, &mut cache).unwrap());
        }
        let d = max_abs_diff(&last.unwrap().to_vec1::<f32>().unwrap(), &g.long_logits_f32);
        assert!(d <= 1e-4, "{family}: {d}");
    }
}

/// A recurrent state cannot be cut back: without a checkpoint at the cut, a hybrid's cache
/// starts over (and says so by the length it keeps); at its end or at a prefill's end it keeps.
#[test]
fn a_hybrid_cache_cuts_back_only_to_checkpoints() {
    for family in HYBRIDS {
        let g = golden(family);
        let m = load(family, DType::F32);
        let mut cache = m.new_cache();
        m.forward(&g.prompt_ids[..12], &mut cache).unwrap();
        m.forward(&g.prompt_ids[12..13], &mut cache).unwrap();
        m.forward(&g.prompt_ids[13..14], &mut cache).unwrap();
        assert_eq!(cache.resumable(14), 14);
        assert_eq!(
            cache.resumable(13),
            12,
            "{family}: a decoded token keeps no checkpoint"
        );
        assert_eq!(cache.resumable(11), 0);
        assert_eq!(cache.truncate(13), 12);
        let l = m.forward(&g.prompt_ids[12..], &mut cache).unwrap();
        let d = max_abs_diff(&l.to_vec1::<f32>().unwrap(), &g.logits_f32);
        assert!(
            d <= 1e-4,
            "{family}: resumed at the checkpoint, vs transformers {d}"
        );
        assert_eq!(cache.truncate(5), 0);
        assert!(cache.bytes() > 0);
    }
}

/// Each row of a hybrid's prompt is computed as decoding computes it (the recurrence runs
/// token by token in both), and each row of a batched step as that sequence alone: bit for bit
/// (bf16 weights, whose products take the row kernel at every length).
#[test]
fn hybrid_rows_equal_decoding_and_batching_bit_for_bit() {
    for family in HYBRIDS {
        let g = golden(family);
        let m = load(family, DType::BF16);
        let ids = &g.prompt_ids;
        let all = m.forward_all(ids, &mut m.new_cache()).unwrap();
        let mut cache = m.new_cache();
        for (i, &t) in ids.iter().enumerate() {
            let row: Vec<f32> = m.forward(&[t], &mut cache).unwrap().to_vec1().unwrap();
            let want: Vec<f32> = all.get(i).unwrap().to_vec1().unwrap();
            assert_eq!(row, want, "{family}: row {i}");
        }
        // Three sequences at different lengths, one step together.
        let mut caches: Vec<KvCache> = (0..3).map(|_| m.new_cache()).collect();
        for (n, c) in caches.iter_mut().enumerate() {
            m.forward(&ids[..5 + 4 * n], c).unwrap();
        }
        let next: Vec<u32> = (0..3).map(|n| ids[5 + 4 * n]).collect();
        let mut alone = Vec::new();
        for (n, &t) in next.iter().enumerate() {
            let mut c = m.new_cache();
            m.forward(&ids[..5 + 4 * n], &mut c).unwrap();
            alone.push(m.forward(&[t], &mut c).unwrap().to_vec1::<f32>().unwrap());
        }
        let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let batch = m.forward_batch(&next, &mut refs).unwrap();
        for (n, want) in alone.iter().enumerate() {
            let row: Vec<f32> = batch.get(n).unwrap().to_vec1().unwrap();
            assert_eq!(&row, want, "{family}: batch row {n}");
        }
    }
}

#[test]
fn cache_rejects_positions_beyond_the_model() {
    let m = load("qwen2", DType::F32);
    let ids: Vec<u32> = (0..513).map(|i| (i % 1000) as u32).collect();
    let err = m.forward(&ids, &mut m.new_cache()).unwrap_err().to_string();
    assert!(err.contains("513") && err.contains("512"), "{err}");
    let err = m
        .forward(&[5000], &mut m.new_cache())
        .unwrap_err()
        .to_string();
    assert!(err.contains("5000"), "{err}");
}

/// YaRN RoPE scaling (factor 4 over an original context of 64) against transformers, read from
/// a config.json as Qwen documents it: a prompt inside the original context and one past it;
/// plain RoPE's logits are not those (goldens by fixtures/yarn_golden.py).
#[test]
fn yarn_logits_match_transformers() {
    let g = golden_json("tiny-qwen3-yarn.json");
    let floats = |k: &str| json_floats(&g, k);
    let ids = json_ids(&g, "prompt_ids");
    let dir = tiny("qwen3");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["rope_parameters"] = g["rope_parameters"].clone();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("config.json"), config.to_string()).unwrap();
    let cfg = QwenConfig::from_file(&tmp.path().join("config.json")).unwrap();
    assert_eq!(cfg.yarn, Some(hearth_engine::Yarn::new(4.0, 64)));
    let files = hearth_engine::load::source::local_dir(&dir).unwrap();
    let w = Weights::open(&files.weights, DType::F32, &Device::Cpu).unwrap();
    let m = Qwen::load(&cfg, &w).unwrap();
    let d = max_abs_diff(&logits(&m, &ids[..40]), &floats("logits_40"));
    assert!(d <= 1e-4, "inside the original context: max abs diff {d}");
    let long = logits(&m, &ids);
    let d = max_abs_diff(&long, &floats("logits_240"));
    assert!(d <= 1e-4, "past the original context: max abs diff {d}");
    let plain = max_abs_diff(&long, &floats("plain_logits_240"));
    assert!(
        plain > 1e-2,
        "YaRN's logits are plain RoPE's: max abs diff {plain}"
    );
}
