//! Prefills of quantized models may take other kernels than decoding: blocked many-row kernels
//! (AVX-512 VNNI), rows kernels (AVX2, exactly decoding's sums), or weights widened to f32 for
//! gemm (the portable level). All must agree with the one-row kernels that decoding uses. (Own
//! test binary: it changes global settings.)

mod common;

use candle_core::Device;
use hearth_engine::gguf::GgufFile;
use hearth_engine::kernels::{cpu, set_many_rows_kernels, CpuLevel};
use hearth_engine::linear::set_dequantize_from_rows;
use hearth_engine::Qwen;
use std::sync::Arc;

/// The settings these tests change are process-wide; the tests take turns.
static SETTINGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The real GGUF's model (on the CPU) and tokenizer.
fn load(path: &std::path::Path) -> (Qwen, hearth_engine::Tokenizer) {
    let file = Arc::new(GgufFile::open(path).unwrap());
    let cfg = file.config().unwrap();
    let model = Qwen::load(&cfg, &file.weights(&Device::Cpu)).unwrap();
    (model, file.tokenizer().unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

#[test]
fn prefill_paths_agree_with_token_by_token_decoding() {
    let _turn = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = common::real_gguf() else {
        return;
    };
    let (model, tok) = load(&path);
    let prompt = tok
        .encode("<|im_start|>user\nWrite a haiku about the sea, then explain its imagery line by line.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let prefill = || -> Vec<f32> {
        model
            .forward(&prompt, &mut model.new_cache())
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    // One token at a time: every product has one row (the decoding kernels).
    let mut cache = model.new_cache();
    let mut stepwise: Vec<f32> = vec![];
    for &t in &prompt {
        stepwise = model.forward(&[t], &mut cache).unwrap().to_vec1().unwrap();
    }
    let scale = stepwise.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let top = |v: &[f32]| hearth_engine::sampling::argmax(v);

    // Many-row kernels (where the CPU has them): the same integer arithmetic summed in
    // another order (exact to f32 rounding per product: the unit tests in kernels::quant_matmul). Over 24
    // layers, an activation that lands on the other side of an 8-bit rounding step changes
    // the next layer's input by a quantization step, so the logits drift by up to a few
    // percent of their scale (measured: the one-row kernels in a batched prefill drift as far).
    set_many_rows_kernels(true);
    set_dequantize_from_rows(usize::MAX);
    let blocked = prefill();
    let d = max_diff(&blocked, &stepwise);
    assert!(
        d < 0.05 * scale,
        "many-row prefill vs decoding: {d} (scale {scale})"
    );
    assert_eq!(top(&blocked), top(&stepwise));

    // Weights widened to f32 (the portable level's prompts; AVX2 and AVX-512 keep the blocks):
    // activations are not quantized, so they differ by up to a few percent of the scale.
    set_many_rows_kernels(false);
    set_dequantize_from_rows(1);
    cpu::force(CpuLevel::Portable).unwrap();
    let wide = prefill();
    cpu::force(cpu::detected()).unwrap();
    let d = max_diff(&wide, &stepwise);
    assert!(
        d < 0.05 * scale,
        "f32 prefill vs decoding: {d} (scale {scale})"
    );
    assert_eq!(top(&wide), top(&stepwise));
    eprintln!(
        "prefill vs decoding, max |diff|: many-row {:.5}, f32 {d:.4} (scale {scale:.2})",
        max_diff(&blocked, &stepwise)
    );
    set_many_rows_kernels(true);
    set_dequantize_from_rows(16);
}

/// Where the CPU has rows kernels for every block type of the file (AVX2: one weight row
/// against a few activation rows, each row summed exactly as decoding sums it) and attention
/// sums each query in one order, a prefill gives the logits of token-by-token decoding bit for
/// bit, whatever its length: a conversation's greedy tokens do not depend on how much of it
/// was in the KV cache.
#[test]
fn prefills_with_rows_kernels_equal_decoding_bit_for_bit() {
    let _turn = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = common::real_gguf() else {
        return;
    };
    if cpu::active() != CpuLevel::Avx2 {
        eprintln!(
            "rows kernels for every block type: the AVX2 level; this one runs {}",
            cpu::active()
        );
        return;
    }
    let (model, tok) = load(&path);
    let prompt = tok
        .encode("<|im_start|>system\nYou are a helpful assistant who answers briefly and checks every fact twice.<|im_end|>\n<|im_start|>user\nName three rivers of Europe, the countries they cross, and one fact about each.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let n = prompt.len();
    assert!(n > 33, "{n}");
    let logits = |t: candle_core::Tensor| -> Vec<f32> { t.to_vec1().unwrap() };
    let mut cache = model.new_cache();
    let mut stepwise = vec![];
    for &t in &prompt {
        stepwise.push(logits(model.forward(&[t], &mut cache).unwrap()));
    }
    // The whole prompt in one prefill (more than one 32-query attention block).
    let whole = logits(model.forward(&prompt, &mut model.new_cache()).unwrap());
    // 6 tokens cached, then the rest prefilled on top (a resumed conversation).
    let mut cache = model.new_cache();
    let early = logits(model.forward(&prompt[..6], &mut cache).unwrap());
    let resumed = logits(model.forward(&prompt[6..], &mut cache).unwrap());
    assert_eq!(early, stepwise[5], "6-token prefill vs decoding");
    assert_eq!(whole, stepwise[n - 1], "{n}-token prefill vs decoding");
    assert_eq!(
        resumed,
        stepwise[n - 1],
        "{} tokens on a cached 6 vs decoding",
        n - 6
    );
}
