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

/// The golden file `gguf_hybrid_golden.sh` writes beside the K-quant fixture.
#[derive(serde::Deserialize)]
struct LlamaCppGolden {
    model_bytes: u64,
    prompt_ids: Vec<u32>,
    greedy: Vec<u32>,
    /// Per step, llama.cpp's eight largest logits, `(id, logit)`, largest first.
    top: Vec<Vec<(u32, f32)>>,
}

/// A Qwen3.5 file quantized Q4_K_M by llama.cpp's own `llama-quantize` (every matrix in K-quants:
/// rows of 256), teacher-forced on llama.cpp's greedy tokens (llama.cpp run with an f32 KV
/// cache): Hearth's logits of llama.cpp's eight best at every step within `BOUND` of their
/// scale, Hearth's choice llama.cpp's wherever its two best are further apart than that, and
/// decoding one token at a time gives the prompt's rows exactly.
///
/// Why 1 % and not the 1e-4 of the MoE fixture: on the F32 file the two agree to 2e-5 of the
/// scale, but the delta rule's sums run in another order than llama.cpp's, and once a product's
/// input is rounded to 8 bits a last-bit difference can move one value a whole step. On this
/// model such steps add up to 0.4–0.8 % (llama.cpp's own Q4_K_M run parts from its dequantized
/// weights by 10 %); each single matrix type in Q8_0, the rest F32, agrees to 4e-4.
#[test]
fn k_quants_match_llama_cpp() -> hearth_engine::Result<()> {
    const BOUND: f32 = 0.01;
    let path = fixture("qwen3.5-q4_k_m");
    let golden = fixtures().join("golden/tiny-qwen3.5-q4_k_m-llamacpp.json");
    let text =
        std::fs::read_to_string(&golden).map_err(|e| hearth_engine::EngineError::io(&golden, e))?;
    let g: LlamaCppGolden = serde_json::from_str(&text)
        .map_err(|e| hearth_engine::EngineError::invalid("golden", e.to_string()))?;
    let size = std::fs::metadata(&path)
        .map_err(|e| hearth_engine::EngineError::io(&path, e))?
        .len();
    assert_eq!(size, g.model_bytes, "the golden is of another file");
    let m = load("qwen3.5-q4_k_m")?;
    let mut teacher = g.prompt_ids.clone();
    teacher.extend(&g.greedy[..g.greedy.len() - 1]);
    let all = m.forward_all(&teacher, &mut m.new_cache())?;
    let vocab = all.dim(1)?;
    let all = all.flatten_all()?.to_vec1::<f32>()?;
    let mut cache = m.new_cache();
    let mut step = m.forward(&g.prompt_ids, &mut cache)?;
    let (mut picked, mut worst) = (0, 0f32);
    for (i, (&want, top)) in g.greedy.iter().zip(&g.top).enumerate() {
        let row = &all[(g.prompt_ids.len() - 1 + i) * vocab..][..vocab];
        assert_eq!(
            step.to_vec1::<f32>()?,
            row,
            "step {i}: decoding and the prompt differ"
        );
        let scale = top[0].1.abs();
        let diff = top
            .iter()
            .map(|&(id, l)| (row[id as usize] - l).abs())
            .fold(0f32, f32::max)
            / scale;
        worst = worst.max(diff);
        assert!(
            diff <= BOUND,
            "step {i}: logits {diff} of their scale apart"
        );
        let got = hearth_engine::sampling::argmax(row);
        if got == want {
            picked += 1;
        } else {
            let gap = (top[0].1 - top[1].1) / scale;
            assert!(
                gap <= 2.0 * BOUND,
                "step {i}: Hearth {got}, llama.cpp {want} ({gap} apart)"
            );
        }
        step = m.forward(&[want], &mut cache)?;
    }
    println!(
        "{picked} of {} steps pick llama.cpp's token; logits within {:.3} % of their scale",
        g.greedy.len(),
        100.0 * worst
    );
    Ok(())
}
