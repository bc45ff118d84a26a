//! The CPU attention kernel alone at depth, on Qwen2.5-0.5B's heads (14 query heads over 2 kv
//! heads of 64) and Qwen2.5-1.5B's (12 over 2 of 128): a decoding step (one query) and a
//! prompt chunk of 512 after 4096 and 16384 cached positions, in an f32 and an f16 cache, at
//! every level this CPU runs (at AVX-512 also with bf16 products, where the CPU has AVX-512
//! BF16); milliseconds per layer and the multiply-adds' rate.
//! `RAYON_NUM_THREADS` sets the threads.
//!
//!     cargo bench -p hearth-engine --bench attention [decode|prefill]

use half::f16;
use hearth_engine::kernels::cpu;
use hearth_engine::kernels::ops::attention::{attend_at, Cached, Heads, Piece, Products, Stored};
use std::time::Instant;

fn main() {
    if cfg!(debug_assertions) {
        eprintln!("attention: built with debug assertions; run it in release");
    }
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let shapes = [
        (
            "0.5B",
            Heads {
                q: 14,
                kv: 2,
                dim: 64,
            },
        ),
        (
            "1.5B",
            Heads {
                q: 12,
                kv: 2,
                dim: 128,
            },
        ),
    ];
    println!("| heads | level | cache | test | ms | GFMA/s |");
    println!("|---|---|---|---|---|---|");
    for (name, heads) in shapes {
        for depth in [4096usize, 16384] {
            for (test, len) in [("decode", 1usize), ("prefill", 512)] {
                if !only.is_empty() && !only.iter().any(|o| o == test) {
                    continue;
                }
                let cap = depth + len;
                let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 370.0;
                let width = heads.q * heads.dim;
                let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
                let k: Vec<f32> = (0..heads.kv * cap * heads.dim)
                    .map(|i| value(i, 7))
                    .collect();
                let v: Vec<f32> = (0..heads.kv * cap * heads.dim)
                    .map(|i| value(i, 11))
                    .collect();
                let k16: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
                let v16: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
                let stride = cap * heads.dim;
                // Multiply-adds: scores and weighted values over the keys each query sees.
                let fma = 2.0
                    * heads.q as f64
                    * heads.dim as f64
                    * (0..len).map(|t| (depth + t + 1) as f64).sum::<f64>();
                for level in cpu::runnable() {
                    if level == cpu::CpuLevel::Portable && cpu::runnable().len() > 1 {
                        continue; // libm's fmaf per value: not a level anyone runs for speed
                    }
                    for products in [Products::F32, Products::Bf16] {
                        if products == Products::Bf16 && !products.bf16_here(level, heads.dim) {
                            continue;
                        }
                        for (cache, kc, vc) in [
                            ("f32", Stored::F32(&k), Stored::F32(&v)),
                            ("f16", Stored::F16(&k16), Stored::F16(&v16)),
                        ] {
                            let piece = |data| Piece {
                                start: 0,
                                len: depth + len,
                                data,
                                head_stride: stride,
                            };
                            let (kp, vp) = ([piece(kc)], [piece(vc)]);
                            let run = || {
                                attend_at(
                                    level,
                                    products,
                                    &q,
                                    width,
                                    len,
                                    depth,
                                    Cached { pieces: &kp },
                                    Cached { pieces: &vp },
                                    heads,
                                )
                            };
                            run();
                            let reps = if len == 1 { 50 } else { 3 };
                            let best = (0..reps)
                                .map(|_| {
                                    let t = Instant::now();
                                    std::hint::black_box(run());
                                    t.elapsed().as_secs_f64()
                                })
                                .fold(f64::INFINITY, f64::min);
                            println!(
                            "| {name} | {level}{} | {cache} | {test} {len} @ d{depth} | {:.3} | {:.1} |",
                            if products == Products::Bf16 { " bf16" } else { "" },
                            best * 1e3,
                            fma / best / 1e9
                        );
                        }
                    }
                }
            }
        }
    }
}
