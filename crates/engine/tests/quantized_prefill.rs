//! A prefill of a quantized model takes other kernels than decoding: rows kernels (a weight
//! block unpacked once for several activation rows; portable and AVX2), 16-row tiles (AVX2 and
//! AVX-512 VNNI) and many-row kernels (AVX-512 VNNI). Each adds every activation row's block products in the
//! order the one-row kernel does, and attention sums each query in one order, so a prefill of
//! any length gives token-by-token decoding's logits bit for bit, at every CPU level: a
//! conversation's greedy tokens do not depend on how much of it was in the KV cache.

mod common;

use candle_core::Device;
use hearth_engine::kernels::ops::attention::Products;
use hearth_engine::kernels::{cpu, CpuLevel, KernelContext, KernelOptions};
use hearth_engine::load::gguf::GgufFile;
use hearth_engine::Qwen;
use std::sync::Arc;

/// The real GGUF's model (on the CPU, at `level` with its tiles, the many-row kernels on or
/// off) and tokenizer.
fn load(
    path: &std::path::Path,
    level: CpuLevel,
    many_row_kernels: bool,
) -> (Qwen, hearth_engine::Tokenizer) {
    let file = Arc::new(GgufFile::open(path).unwrap());
    let cfg = file.config().unwrap();
    // f32 attention: the levels' products compared here are the weights' (bf16 attention,
    // where the CPU has it, is compared with f32 in `real_model.rs`).
    let kernels = KernelOptions {
        many_row_kernels,
        attention: Products::F32,
        ..Default::default()
    };
    let kernels = KernelContext::new(level, kernels);
    let model = Qwen::load(&cfg, &file.weights(&Device::Cpu).with_kernels(kernels)).unwrap();
    (model, file.tokenizer().unwrap())
}

#[test]
fn prefills_equal_decoding_bit_for_bit_at_every_level() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let levels = cpu::runnable();
    println!("levels on this CPU: {levels:?}");
    for level in levels {
        // AVX-512 VNNI runs its Q4_K/Q6_K many-row kernels, and the AVX2 ones without them.
        let many = match level {
            CpuLevel::Avx512 => vec![true, false],
            _ => vec![true],
        };
        for many in many {
            let (model, tok) = load(&path, level, many);
            // Q4_K_M: Q5_0, Q4_K, Q6_K and Q8_0 matrices.
            let prompt = tok
                .encode("<|im_start|>system\nYou are a helpful assistant who answers briefly and checks every fact twice.<|im_end|>\n<|im_start|>user\nName three rivers of Europe, the countries they cross, and one fact about each.<|im_end|>\n<|im_start|>assistant\n")
                .unwrap();
            let n = prompt.len();
            assert!(n > 33, "{n}");
            let what = format!("{level}, many-row kernels {many}");
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
            assert_eq!(early, stepwise[5], "{what}: 6-token prefill vs decoding");
            assert_eq!(
                whole,
                stepwise[n - 1],
                "{what}: {n}-token prefill vs decoding"
            );
            assert_eq!(
                resumed,
                stepwise[n - 1],
                "{what}: {} tokens on a cached 6 vs decoding",
                n - 6
            );
        }
    }
}

/// The level is each model's own: a portable model and one at the best level this CPU runs,
/// both loaded in one process and run at once on two threads, each give what they give alone.
#[test]
fn two_models_at_two_levels_run_side_by_side() {
    let Some(path) = common::real_gguf() else {
        return;
    };
    let (low, high) = (CpuLevel::Portable, cpu::detected());
    let (a, tok) = load(&path, low, true);
    let (b, _) = load(&path, high, true);
    assert_eq!((a.kernels().level, b.kernels().level), (low, high));
    let prompt = tok
        .encode("<|im_start|>user\nName a river.<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    let logits = |m: &Qwen| -> Vec<f32> {
        let mut cache = m.new_cache();
        let mut last = vec![];
        for chunk in prompt.chunks(5) {
            last = m.forward(chunk, &mut cache).unwrap().to_vec1().unwrap();
        }
        last
    };
    let (alone_a, alone_b) = (logits(&a), logits(&b));
    for _ in 0..2 {
        let (together_a, together_b) = std::thread::scope(|s| {
            let other = s.spawn(|| logits(&a));
            let mine = logits(&b);
            (other.join().unwrap(), mine)
        });
        assert_eq!(together_a, alone_a, "{low} beside {high}");
        assert_eq!(together_b, alone_b, "{high} beside {low}");
    }
    // The same model either way: the portable kernels sum in another order (AVX2's and
    // AVX-512's tiles in the same), to the same choice.
    let top = |l: &[f32]| {
        l.iter()
            .enumerate()
            .max_by(|x, y| x.1.total_cmp(y.1))
            .map(|(i, _)| i)
    };
    assert_eq!(top(&alone_a), top(&alone_b));
    let scale = alone_b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = alone_a
        .iter()
        .zip(&alone_b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    // (3.3 % on the 0.5B Q4_K_M: a rounding of an 8-bit activation that flips in one layer
    // moves the next; an f16 KV cache moves them as far.)
    assert!(diff <= 0.05 * scale, "{diff} of {scale}");
}
