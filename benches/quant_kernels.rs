//! Q5_0 matrix-vector products: candle's QMatMul against Hearth's kernel, side by side, on
//! Qwen2.5-0.5B's shapes (the block type of most matrices in its Q4_K_M file).
//!
//!     cargo bench --bench quant_kernels

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    for (n, k) in [(4864usize, 896usize), (896, 896), (9728, 896)] {
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        let q = Arc::new(QTensor::quantize(&w, GgmlDType::Q5_0).unwrap());
        let mm = QMatMul::from_arc(q.clone()).unwrap();
        let x = Tensor::randn(0f32, 1.0, (1, k), &Device::Cpu).unwrap();
        let xv: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let data = q.data().unwrap().into_owned();
        let reps = 50;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(mm.forward(&x).unwrap());
        }
        let candle = t.elapsed().as_secs_f64() / reps as f64;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(hearth_engine::cpu_q5_0::matmul_t(&xv, 1, k, &data, n));
        }
        let hearth = t.elapsed().as_secs_f64() / reps as f64;
        let bytes = data.len() as f64;
        println!(
            "Q5_0 [{n} x {k}], 1 row: candle {:.3} ms ({:.1} GB/s), hearth {:.3} ms ({:.1} GB/s): {:.2}x",
            candle * 1e3,
            bytes / candle / 1e9,
            hearth * 1e3,
            bytes / hearth / 1e9,
            candle / hearth
        );
    }
}
