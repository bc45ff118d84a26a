//! Qwen3-MoE from GGUF: the tiny fixture converted by llama.cpp's own `convert_hf_to_gguf.py`
//! (crates/engine/tests/fixtures/gguf_convert.py; f32 and Q8_0), whose experts lie in 3-D tensors
//! (`ffn_{gate,up,down}_exps`), against the transformers goldens and Hearth on safetensors.

mod common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::QTensor;
use candle_core::{DType, Device};
use common::*;
use hearth_engine::kernels::ops::attention::Products;
use hearth_engine::kernels::{cpu, KernelContext, KernelOptions};
use hearth_engine::load::gguf::GgufFile;
use hearth_engine::{Qwen, QwenConfig, Weights};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(kind: &str) -> PathBuf {
    fixtures().join(format!("gguf/tiny-qwen3-moe-{kind}.gguf"))
}

/// The file's model with f32 attention, as llama.cpp's goldens were computed (bf16 products
/// would round where llama.cpp does not).
fn load(path: &Path) -> hearth_engine::Result<Qwen> {
    let file = Arc::new(GgufFile::open(path)?);
    let cfg = file.config()?;
    let kernels = KernelContext::new(
        cpu::default_level(),
        KernelOptions {
            attention: Products::F32,
            ..Default::default()
        },
    );
    Qwen::load(&cfg, &file.weights(&Device::Cpu).with_kernels(kernels))
}

fn last_logits(m: &Qwen, ids: &[u32]) -> Vec<f32> {
    m.forward(ids, &mut m.new_cache())
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn greedy(m: &Qwen, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = m.new_cache();
    let mut l = m.forward(prompt, &mut cache).unwrap();
    let mut out = vec![];
    for _ in 0..n {
        let next = l.argmax(0).unwrap().to_scalar::<u32>().unwrap();
        out.push(next);
        l = m.forward(&[next], &mut cache).unwrap();
    }
    out
}

#[test]
fn the_converters_config_is_the_checkpoints() {
    let file = GgufFile::open(&fixture("f32")).unwrap();
    let from_gguf = file.config().unwrap();
    let dir = tiny("qwen3-moe");
    let from_json = QwenConfig::from_file(&dir.join("config.json")).unwrap();
    let (a, b) = (from_gguf.moe.unwrap(), from_json.moe.unwrap());
    assert_eq!(a, b);
    assert_eq!(
        (
            from_gguf.family,
            from_gguf.head_dim,
            from_gguf.num_hidden_layers
        ),
        (
            from_json.family,
            from_json.head_dim,
            from_json.num_hidden_layers
        )
    );
}

#[test]
fn f32_gguf_matches_transformers_and_safetensors() {
    let g = golden("qwen3-moe");
    let m = load(&fixture("f32")).unwrap();
    let got = last_logits(&m, &g.prompt_ids);
    let d = max_abs_diff(&got, &g.logits_f32);
    assert!(d <= 1e-4, "vs transformers: {d}");
    let d = max_abs_diff(&last_logits(&m, &g.long_prompt_ids), &g.long_logits_f32);
    assert!(d <= 1e-4, "vs transformers, 300 tokens: {d}");
    assert_eq!(greedy(&m, &g.prompt_ids, 32), g.greedy_f32);

    let dir = tiny("qwen3-moe");
    let cfg = QwenConfig::from_file(&dir.join("config.json")).unwrap();
    let files = hearth_engine::load::source::local_dir(&dir).unwrap();
    let w = Weights::open(&files.weights, DType::F32, &Device::Cpu).unwrap();
    let st = Qwen::load(&cfg, &w).unwrap();
    let d = max_abs_diff(&got, &last_logits(&st, &g.prompt_ids));
    assert!(d <= 1e-5, "vs safetensors: {d}");
}

/// Q8_0 rounds each weight to 8 bits per block of 32 and the activations likewise: the logits
/// move by a few per cent of their scale; the best token stays the best.
#[test]
fn q8_0_gguf_stays_close_to_transformers() {
    let g = golden("qwen3-moe");
    let scale = g.logits_f32.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let m = load(&fixture("q8_0")).unwrap();
    let got = last_logits(&m, &g.prompt_ids);
    let d = max_abs_diff(&got, &g.logits_f32);
    assert!(d <= 0.05 * scale, "{d} (scale {scale})");
    assert_eq!(hearth_engine::sampling::argmax(&got), g.greedy_f32[0]);
}

/// A decoding step reads the router and the chosen experts only.
#[test]
fn a_decoded_token_reads_only_its_experts() {
    let file = GgufFile::open(&fixture("f32")).unwrap();
    let m = load(&fixture("f32")).unwrap();
    // Each layer holds 8 experts of 3 × 32 × 64 f32 values and routes a token to 2.
    let unread = 2 * (8 - 2) * 3 * 32 * 64 * 4;
    // The embedding table is not tied: one row of it is read.
    let embed = 1024 * 64 * 4;
    assert_eq!(
        m.weight_bytes_per_token(),
        file.weight_bytes() - unread - embed + 64 * 4
    );
}

/// The tiny fixture rewritten with `edit` applied to its metadata.
fn rewritten(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>)) -> PathBuf {
    let src = fixture("f32");
    let mut f = std::fs::File::open(&src).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let mut meta: Vec<(String, Value)> = content.metadata.clone().into_iter().collect();
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut meta);
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .map(|n| (n.clone(), content.tensor(&mut f, n, &Device::Cpu).unwrap()))
        .collect();
    let out = dir.join("edited.gguf");
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    gguf_file::write(
        &mut std::fs::File::create(&out).unwrap(),
        &meta_refs,
        &tensor_refs,
    )
    .unwrap();
    out
}

fn set(meta: &mut [(String, Value)], key: &str, value: Value) {
    let slot = meta.iter_mut().find(|(k, _)| k == key).unwrap();
    slot.1 = value;
}

#[test]
fn experts_that_do_not_fit_the_metadata_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    for (key, value, tensor, shape) in [
        // More experts than the tensors hold: the router, loaded first, is named.
        (
            "qwen3moe.expert_count",
            9,
            "blk.0.ffn_gate_inp.weight",
            "[9, 64]",
        ),
        // Experts of another width.
        (
            "qwen3moe.expert_feed_forward_length",
            48,
            "blk.0.ffn_gate_exps.weight",
            "48",
        ),
    ] {
        let path = rewritten(tmp.path(), |m| set(m, key, Value::U32(value)));
        let err = load(&path).err().unwrap().to_string();
        assert!(err.contains(tensor) && err.contains(shape), "{key}: {err}");
    }
    // More experts per token than there are.
    let path = rewritten(tmp.path(), |m| {
        set(m, "qwen3moe.expert_used_count", Value::U32(12))
    });
    let err = GgufFile::open(&path)
        .unwrap()
        .config()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("qwen3moe.expert_used_count"), "{err}");
}

/// The golden file `gguf_moe_golden.sh` writes beside the K-quant fixture.
#[derive(serde::Deserialize)]
struct LlamaCppGolden {
    model_bytes: u64,
    prompt_ids: Vec<u32>,
    greedy: Vec<u32>,
    /// Per step, llama.cpp's eight largest logits, `(id, logit)`, largest first.
    top: Vec<Vec<(u32, f32)>>,
}

/// A mixture-of-experts file quantized Q4_K_M by llama.cpp's own `llama-quantize`, every expert
/// in K-quants (Q4_K, Q6_K; rows of 256), teacher-forced on llama.cpp's greedy tokens (llama.cpp
/// run with an f32 KV cache, as Hearth keeps it): Hearth's logits of llama.cpp's eight best
/// tokens are llama.cpp's to 1e-4 of their scale, step after step, until a rounding-level
/// difference (summation order) tips a router's near tie and a token takes another expert;
/// after that within `BOUND`. Hearth picks llama.cpp's token wherever llama.cpp's two best are
/// further apart than that. Decoding one token at a time gives the prompt's rows exactly.
#[test]
fn k_quant_experts_match_llama_cpp() {
    const BOUND: f32 = 0.02;
    let path = fixtures().join("gguf/tiny-qwen3-moe-q4_k_m.gguf");
    let golden = fixtures().join("golden/tiny-qwen3-moe-q4_k_m-llamacpp.json");
    let g: LlamaCppGolden =
        serde_json::from_str(&std::fs::read_to_string(golden).unwrap()).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(size, g.model_bytes, "the golden is of another file");
    // The types it proves: the experts in K-quants.
    let content = gguf_file::Content::read(&mut std::fs::File::open(&path).unwrap()).unwrap();
    let types: std::collections::BTreeSet<String> = content
        .tensor_infos
        .iter()
        .filter(|(name, _)| name.contains("_exps"))
        .map(|(_, info)| format!("{:?}", info.ggml_dtype))
        .collect();
    assert!(types.contains("Q4K"), "{types:?}");
    assert!(
        types.iter().all(|t| t.starts_with('Q') && t.ends_with('K')),
        "{types:?}"
    );

    let m = load(&path).unwrap();
    let mut teacher = g.prompt_ids.clone();
    teacher.extend(&g.greedy[..g.greedy.len() - 1]);
    let all = m.forward_all(&teacher, &mut m.new_cache()).unwrap();
    let vocab = all.dim(1).unwrap();
    let all = all.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let mut cache = m.new_cache();
    let mut step = m.forward(&g.prompt_ids, &mut cache).unwrap();
    let (mut same, mut picked, mut worst) = (0, 0, 0f32);
    for (i, (&want, top)) in g.greedy.iter().zip(&g.top).enumerate() {
        let row = &all[(g.prompt_ids.len() - 1 + i) * vocab..][..vocab];
        assert_eq!(
            step.to_vec1::<f32>().unwrap(),
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
        if diff <= 1e-4 && same == i {
            same += 1;
        }
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
        step = m.forward(&[want], &mut cache).unwrap();
    }
    let n = g.greedy.len();
    println!(
        "{picked} of {n} steps pick llama.cpp's token; the first {same} within 1e-4, all within {:.2} %",
        100.0 * worst
    );
    assert!(
        same * 4 >= n * 3,
        "only the first {same} of {n} steps within 1e-4"
    );
}
