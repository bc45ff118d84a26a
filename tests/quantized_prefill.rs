//! Long prefills of quantized models widen the weights to f32 and use gemm; short ones (and
//! decoding) use the block dot products with 8-bit activations, as llama.cpp. The two agree
//! to a small fraction of the logits' scale. (Own test binary: it changes a global setting.)

mod common;

use candle_core::Device;
use hearth_engine::gguf::GgufFile;
use hearth_engine::linear::set_dequantize_from_rows;
use hearth_engine::Qwen;
use std::sync::Arc;

#[test]
fn f32_prefill_agrees_with_the_block_path() {
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
    let run = |rows: usize| -> Vec<f32> {
        set_dequantize_from_rows(rows);
        model
            .forward(&prompt, &mut model.new_cache())
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let (block, wide) = (run(usize::MAX), run(1));
    let scale = block.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let diff = block
        .iter()
        .zip(&wide)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < 0.05 * scale, "max diff {diff}, scale {scale}");
    let top = |v: &[f32]| hearth_engine::sampling::argmax(v);
    assert_eq!(top(&block), top(&wide));
    eprintln!("f32 vs block prefill: max |diff| {diff:.4} (logit scale {scale:.2})");
}
