//! Quantized matrix products on the CPU, each block type of Qwen2.5-0.5B's GGUF files on its
//! shapes, at every kernel level this CPU runs (`portable`, `avx2`, `avx512`) beside candle's
//! `QMatMul`: one activation row (decoding) in GB/s of weights read, and 32 rows (a short
//! prompt) in multiply-adds per second; where the default level has tile kernels (AVX2, AVX-512
//! VNNI) also in 16-row tiles (`hearth_engine::kernels::tiles`), there also one layer's rows
//! read from the caches (what the kernel itself computes per second, whatever the memory), and
//! a decoding step of 1, 2, 4, 8 and 16 rows against that layer (batched sequences, verified
//! drafts). `HEARTH_CPU` picks the tiles' level, `RAYON_NUM_THREADS` the threads.
//!
//!     cargo bench --bench quant_kernels [Q5_0 Q8_0 …]
//!
//! Release builds only: in a build with debug assertions every pointer read is checked and
//! the kernels run at half speed or less. Some server CPUs' last-level caches hold hundreds of
//! MiB (`lscpu`): there "1 row" reads from the cache, not memory, on repeated calls.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use hearth_engine::device::huge_pages::back_with_huge_pages;
use hearth_engine::kernels::quant_matmul::matmul_t_at;
use hearth_engine::kernels::tiles as interleaved;
use hearth_engine::kernels::{cpu, matmul_t, BlockType, QuantMatrix};
use std::sync::Arc;
use std::time::Instant;

/// Seconds per call of `f`, the best of `reps` after one warm-up call.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    if cfg!(debug_assertions) {
        eprintln!(
            "quant_kernels: built with debug assertions; run it in release (no --profile dev)"
        );
        std::process::exit(2);
    }
    // Block types named on the command line (`Q5_0 Q8_0`), else all of them.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    // Each matrix is as tall as 24 layers' worth of its kind, so that it is read from memory as
    // in a real decode step (the whole model does not fit in the caches), not from L2.
    let cases = [
        (GgmlDType::Q5_0, 24 * 4864usize, 896usize),
        (GgmlDType::Q8_0, 151936, 896),
        (GgmlDType::Q4_0, 24 * 4864, 896),
        (GgmlDType::Q6K, 24 * 896, 4864),
        (GgmlDType::Q4K, 24 * 896, 4864),
        (GgmlDType::Q5K, 24 * 896, 4864),
        (GgmlDType::Q4_1, 24 * 4864, 896),
        (GgmlDType::Q5_1, 24 * 4864, 896),
    ];
    println!("CPU levels: {:?}", cpu::runnable());
    for (dtype, n, k) in cases {
        if !only.is_empty() && !only.contains(&format!("{dtype:?}")) {
            continue;
        }
        let Some(kind) = BlockType::of(dtype) else {
            continue;
        };
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        let q = Arc::new(QTensor::quantize(&w, dtype).unwrap());
        let mm = QMatMul::from_arc(q.clone()).unwrap();
        let x = Tensor::randn(0f32, 1.0, (1, k), &Device::Cpu).unwrap();
        let xv: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let data = q.data().unwrap().into_owned();
        // Both on huge pages, as the engine keeps its weights (see hearth_engine::huge_pages).
        back_with_huge_pages(&q.data().unwrap());
        back_with_huge_pages(&data);
        let reps = 10;
        let mat = [QuantMatrix {
            kind,
            data: &data,
            rows: n,
            interleaved: false,
        }];
        let bytes = data.len() as f64;
        let candle = time(reps, || {
            std::hint::black_box(mm.forward(&x).unwrap());
        });
        println!(
            "{dtype:?} [{n} x {k}], 1 row: candle {:.3} ms ({:.1} GB/s)",
            candle * 1e3,
            bytes / candle / 1e9
        );
        // A short prompt against one layer's worth of rows (which then stay in the caches).
        let m = 32;
        let xs: Vec<f32> = (0..m * k)
            .map(|i| xv[i % k] * (1.0 + (i / k) as f32 * 1e-3))
            .collect();
        let rows = (n / 24).next_multiple_of(16);
        let part = [QuantMatrix {
            rows,
            data: &data[..data.len() / n * rows],
            ..mat[0]
        }];
        for level in cpu::runnable() {
            let one = time(reps, || {
                std::hint::black_box(matmul_t_at(level, &xv, 1, k, &mat, true));
            });
            let prompt = time(reps, || {
                std::hint::black_box(matmul_t_at(level, &xs, m, k, &part, true));
            });
            let cached = time(50 * reps, || {
                std::hint::black_box(matmul_t_at(level, &xv, 1, k, &part, true));
            });
            println!(
                "    {:<8} 1 row {:.3} ms ({:.1} GB/s, {:.2}x candle); in cache {:.1} GB/s; {m} rows of [{rows} x {k}] {:.1} GMAC/s",
                level.name(),
                one * 1e3,
                bytes / one / 1e9,
                candle / one,
                part[0].data.len() as f64 / cached / 1e9,
                (m * rows * k) as f64 / prompt / 1e9
            );
        }
        let hearth = time(reps, || {
            std::hint::black_box(matmul_t(&xv, 1, k, &mat));
        });
        if !interleaved::supported(cpu::default_level(), kind, n) {
            continue;
        }
        let tiles = interleaved::interleave(kind, &data, n, k);
        back_with_huge_pages(&tiles);
        let mat = [QuantMatrix {
            kind,
            data: &tiles,
            rows: n,
            interleaved: true,
        }];
        let tiled = time(reps, || {
            std::hint::black_box(matmul_t(&xv, 1, k, &mat));
        });
        let m = 128;
        let xs: Vec<f32> = (0..m * k)
            .map(|i| xv[i % k] * (1.0 + (i / k) as f32 * 1e-3))
            .collect();
        // One layer's worth of rows: the tiles stay in the caches while the prompt passes.
        let rows = 4864.min(n);
        let part = [QuantMatrix {
            rows,
            data: &tiles[..tiles.len() / n * rows],
            ..mat[0]
        }];
        let prompt = time(reps, || {
            std::hint::black_box(matmul_t(&xs, m, k, &part));
        });
        let cached = time(50 * reps, || {
            std::hint::black_box(matmul_t(&xv, 1, k, &part));
        });
        // A decoding step's rows (batched sequences, drafted tokens) against the cached layer.
        let step: Vec<String> = [1, 2, 4, 8, 16]
            .iter()
            .map(|&m| {
                let t = time(10 * reps, || {
                    std::hint::black_box(matmul_t(&xs[..m * k], m, k, &part));
                });
                format!("{m}: {:.1}", (m * rows * k) as f64 / t / 1e9)
            })
            .collect();
        println!("    in tiles, step rows (GMAC/s): {}", step.join(", "));
        println!(
            "    in tiles: 1 row {:.3} ms ({:.1} GB/s, {:.2}x GGUF order); 1 row of [{rows} x {k}] in cache {:.1} us ({:.1} GB/s); {m} rows {:.1} GMAC/s",
            tiled * 1e3,
            bytes / tiled / 1e9,
            hearth / tiled,
            cached * 1e6,
            part[0].data.len() as f64 / cached / 1e9,
            (m * rows * k) as f64 / prompt / 1e9
        );
    }
}
