//! Prefills of quantized models take other kernels than decoding: blocked many-row kernels
//! (AVX-512 VNNI), or, where a CPU has none, weights widened to f32 for gemm. Both must agree
//! with the one-row kernels that decoding uses. (Own test binary: it changes global settings.)

mod common;

use candle_core::Device;
use hearth_engine::cpu_quant::set_many_rows_kernels;
use hearth_engine::gguf::GgufFile;
use hearth_engine::linear::set_dequantize_from_rows;
use hearth_engine::Qwen;
use std::sync::Arc;

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

#[test]
fn prefill_paths_agree_with_token_by_token_decoding() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let cfg = file.config().unwrap();
    let model = Qwen::load(&cfg, &file.weights(&Device::Cpu)).unwrap();
    let tok = file.tokenizer().unwrap();
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
    // another order (exact to f32 rounding per product: the unit tests in cpu_quant). Over 24
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

    // Weights widened to f32 (CPUs without the many-row kernels): activations are not
    // quantized, so they differ by up to a few percent of the scale.
    set_many_rows_kernels(false);
    set_dequantize_from_rows(1);
    let wide = prefill();
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
