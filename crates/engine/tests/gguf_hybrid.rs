//! Qwen3.5 from GGUF: the tiny hybrid checkpoints converted by llama.cpp's own
//! `convert_hf_to_gguf.py` (fixtures/gguf_hybrid.sh; `qwen35`, `qwen35moe`, f32 and Q8_0),
//! whose norms are stored as 1 + w, A_log as -exp(A_log) and value heads reordered tiled,
//! against the transformers goldens and Hearth on safetensors.

mod common;

use candle_core::Device;
use common::*;
use hearth_engine::load::gguf::GgufFile;
use hearth_engine::{Qwen, QwenConfig};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    fixtures().join(format!("gguf/tiny-{name}.gguf"))
}

fn load(name: &str) -> hearth_engine::Result<Qwen> {
    let file = Arc::new(GgufFile::open(&fixture(name))?);
    let cfg = file.config()?;
    Qwen::load(&cfg, &file.weights(&Device::Cpu))
}

fn last_logits(m: &Qwen, ids: &[u32]) -> hearth_engine::Result<Vec<f32>> {
    Ok(m.forward(ids, &mut m.new_cache())?.to_vec1()?)
}

fn greedy(m: &Qwen, prompt: &[u32], n: usize) -> hearth_engine::Result<Vec<u32>> {
    let mut cache = m.new_cache();
    let mut l = m.forward(prompt, &mut cache)?;
    let mut out = vec![];
    for _ in 0..n {
        let next = l.argmax(0)?.to_scalar::<u32>()?;
        out.push(next);
        l = m.forward(&[next], &mut cache)?;
    }
    Ok(out)
}

#[test]
fn the_converters_config_is_the_checkpoints() -> hearth_engine::Result<()> {
    for family in ["qwen3.5", "qwen3.5-vl", "qwen3.5-moe"] {
        let from_gguf = GgufFile::open(&fixture(&format!("{family}-f32")))?.config()?;
        let from_json = QwenConfig::from_file(&tiny(family).join("config.json"))?;
        let (mut a, b) = (
            from_gguf.linear_attention.clone(),
            from_json.linear_attention.clone(),
        );
        // The converter reorders value heads tiled; the checkpoint keeps them grouped.
        assert_eq!(a.as_ref().map(|l| l.tiled_value_heads), Some(true));
        if let Some(l) = &mut a {
            l.tiled_value_heads = false;
        }
        assert_eq!(a, b, "{family}");
        assert_eq!(from_gguf.moe, from_json.moe, "{family}");
        assert_eq!(
            (
                from_gguf.family,
                from_gguf.head_dim,
                from_gguf.rotary_dim,
                from_gguf.tie_word_embeddings
            ),
            (
                from_json.family,
                from_json.head_dim,
                from_json.rotary_dim,
                from_json.tie_word_embeddings
            ),
            "{family}"
        );
        assert!(!from_gguf.norm_weights_offset && from_json.norm_weights_offset);
    }
    Ok(())
}

#[test]
fn f32_gguf_matches_transformers() -> hearth_engine::Result<()> {
    for family in ["qwen3.5", "qwen3.5-vl", "qwen3.5-moe"] {
        let g = golden(family);
        let m = load(&format!("{family}-f32"))?;
        let d = max_abs_diff(&last_logits(&m, &g.prompt_ids)?, &g.logits_f32);
        assert!(d <= 1e-4, "{family}: vs transformers {d}");
        let d = max_abs_diff(&last_logits(&m, &g.long_prompt_ids)?, &g.long_logits_f32);
        assert!(d <= 1e-4, "{family}: vs transformers, 300 tokens {d}");
        assert_eq!(greedy(&m, &g.prompt_ids, 32)?, g.greedy_f32, "{family}");
    }
    Ok(())
}

/// Q8_0: against transformers running the GGUF's own dequantized weights
/// (fixtures/gguf_hybrid_golden.py), so what is left is the 8-bit rounding of activations in
/// the products (llama.cpp's scheme, 0.29 of 3.9 on this chaotic tiny model, about what the
/// weights' own rounding moves the f32 logits: 0.23); and decoding continues the prompt's rows
/// exactly.
#[test]
fn q8_0_gguf_matches_transformers_on_its_weights() -> hearth_engine::Result<()> {
    let g = golden("qwen3.5");
    let path = fixtures().join("golden/tiny-qwen3.5-q8_0.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| hearth_engine::EngineError::io(&path, e))?;
    let want: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| hearth_engine::EngineError::invalid("golden", e.to_string()))?;
    let want: Vec<f32> = want["logits"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_f64())
                .map(|v| v as f32)
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(want.len(), g.logits_f32.len());
    let m = load("qwen3.5-q8_0")?;
    let got = last_logits(&m, &g.prompt_ids)?;
    let scale = want.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let d = max_abs_diff(&got, &want);
    assert!(
        d <= 0.1 * scale,
        "q8_0 vs transformers on its weights: {d} (scale {scale})"
    );
    assert_eq!(
        hearth_engine::sampling::argmax(&got),
        hearth_engine::sampling::argmax(&want)
    );
    let all = m.forward_all(&g.prompt_ids, &mut m.new_cache())?;
    let mut cache = m.new_cache();
    for (i, &t) in g.prompt_ids.iter().enumerate() {
        let row: Vec<f32> = m.forward(&[t], &mut cache)?.to_vec1()?;
        assert_eq!(row, all.get(i)?.to_vec1::<f32>()?, "row {i}");
    }
    Ok(())
}
