//! The dense products' bodies ([`crate::kernels::dense`]) at AVX2 and AVX-512.

use crate::kernels::cpu::{self, CpuLevel};
use crate::kernels::dense::{block_portable, BlockFn, Elem, Outputs, WeightRows};
use crate::kernels::x86::avx2::hsum;
use std::arch::x86_64::*;

/// How far ahead of the weights being read the kernels ask for cache lines.
const PREFETCH: usize = 4096;

/// Several activation rows (prompts): products in register blocks of `R` weight rows × up
/// to `J` activation rows (the level's [`Shape`]; constants, so that no product is computed
/// twice), so that
/// each load serves several multiply-adds; a missing weight row of a block repeats the last
/// one and its sums are dropped. Each output is one chain of multiply-adds in the same
/// order whatever the grouping: one activation row alone gets exactly what it gets among
/// others.
macro_rules! block_simd {
    ($name:ident, $t:ty, $widen:ident, $features:literal, $lanes:expr, $vec:ty,
     $zero:ident, $load:ident, $fmadd:ident, $reduce:ident, $shape:expr) => {
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name(x: &[f32], m: usize, k: usize, w: &[$t], out: &Outputs<'_>) {
            const SHAPE: Shape = $shape;
            #[inline]
            #[target_feature(enable = $features)]
            unsafe fn group<const R: usize, const J: usize>(
                x: &[f32],
                k: usize,
                w: &[$t],
                (r, c): (usize, usize),
                out: &Outputs<'_>,
            ) {
                let (first, rows) = (out.first, out.rows);
                let body = k - k % $lanes;
                let wr: [usize; R] = std::array::from_fn(|h| first + (r + h).min(rows - 1));
                let mut acc = [[$zero(); J]; R];
                for i in (0..body).step_by($lanes) {
                    if i % (64 / std::mem::size_of::<$t>()) == 0 {
                        // The hardware prefetcher alone leaves decoding waiting on memory.
                        for &row in &wr {
                            let at = w.as_ptr().add(row * k + i) as *const i8;
                            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH));
                        }
                    }
                    let wv: [$vec; R] =
                        std::array::from_fn(|h| $widen(w.as_ptr().add(wr[h] * k + i)));
                    for j in 0..J {
                        let xv = $load(x.as_ptr().add((c + j) * k + i));
                        for h in 0..R {
                            acc[h][j] = $fmadd(xv, wv[h], acc[h][j]);
                        }
                    }
                }
                for h in 0..(rows - r).min(R) {
                    for j in 0..J {
                        let (wrow, xrow) = (&w[wr[h] * k..][..k], &x[(c + j) * k..][..k]);
                        let tail: f32 = (body..k).map(|i| xrow[i] * wrow[i].widen()).sum();
                        out.set(r + h, c + j, $reduce(acc[h][j]) + tail);
                    }
                }
            }
            let rows = out.rows;
            assert!(x.len() >= m * k && w.len() >= (out.first + rows) * k);
            if m == 1 {
                for r in (0..rows).step_by(SHAPE.decode_rows) {
                    group::<{ SHAPE.decode_rows }, 1>(x, k, w, (r, 0), out);
                }
                return;
            }
            // `J` activation rows stay in L1 while the task's weight rows (in L2 after the
            // first group) stream past them: each step brings `R` weight vectors from L2
            // rather than `J` activation vectors (F16 pp32 +15 %, pp512 +7 % on a 2-core
            // Zen 3).
            const R: usize = SHAPE.rows;
            const J: usize = SHAPE.activations;
            // The match below has an arm for every group narrower than `J`.
            const { assert!(J >= 3 && J <= 6) };
            for c in (0..m).step_by(J) {
                for r in (0..rows).step_by(R) {
                    match m - c {
                        1 => group::<R, 1>(x, k, w, (r, c), out),
                        2 => group::<R, 2>(x, k, w, (r, c), out),
                        3 => group::<R, 3>(x, k, w, (r, c), out),
                        4 if J > 4 => group::<R, 4>(x, k, w, (r, c), out),
                        5 if J > 5 => group::<R, 5>(x, k, w, (r, c), out),
                        _ => group::<R, J>(x, k, w, (r, c), out),
                    }
                }
            }
        }
    };
}

/// A level's register block: `rows` weight rows × `activations` activation rows for
/// prompts and batches, `decode_rows` weight rows for one activation row.
struct Shape {
    rows: usize,
    activations: usize,
    decode_rows: usize,
}

/// 16 weights from `p`, as f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn wide_f32(p: *const f32) -> __m512 {
    _mm512_loadu_ps(p)
}

/// bf16 is the top half of an f32: widen to 32 bits and shift.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn wide_bf16(p: *const half::bf16) -> __m512 {
    let bits = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i));
    _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn wide_f16(p: *const half::f16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// One instruction set's kernels (a module with `run`, the [`BlockFn`] body): the block
/// and dot products of each weight type, named by the vector type and operations, and the
/// weight rows of its register block.
macro_rules! level {
    ($module:ident, $features:literal, $lanes:expr, $vec:ty, $zero:ident, $load:ident,
     $fmadd:ident, $reduce:ident, $wf32:ident, $wbf16:ident, $wf16:ident,
     $shape:expr) => {
        mod $module {
            use super::*;
            block_simd!(
                block_f32, f32, $wf32, $features, $lanes, $vec, $zero, $load, $fmadd, $reduce,
                $shape
            );
            block_simd!(
                block_bf16,
                half::bf16,
                $wbf16,
                $features,
                $lanes,
                $vec,
                $zero,
                $load,
                $fmadd,
                $reduce,
                $shape
            );
            block_simd!(
                block_f16,
                half::f16,
                $wf16,
                $features,
                $lanes,
                $vec,
                $zero,
                $load,
                $fmadd,
                $reduce,
                $shape
            );

            #[target_feature(enable = $features)]
            pub(super) unsafe fn run(
                x: &[f32],
                m: usize,
                k: usize,
                w: WeightRows<'_>,
                out: &Outputs<'_>,
            ) {
                // Decoding too: one activation row gets exactly the sums it gets in a
                // batch or a prompt (a chain of multiply-adds per weight row of a block
                // keeps the units busy enough for the memory bandwidth).
                match w {
                    WeightRows::F32(w) => block_f32(x, m, k, w, out),
                    WeightRows::Bf16(w) => block_bf16(x, m, k, w, out),
                    WeightRows::F16(w) => block_f16(x, m, k, w, out),
                }
            }
        }
    };
}

level!(
    avx512,
    "avx512f,avx512bw,avx2,fma,f16c",
    16,
    __m512,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_fmadd_ps,
    _mm512_reduce_add_ps,
    wide_f32,
    wide_bf16,
    wide_f16,
    // 24 accumulators, 4 weight vectors and an activation vector of the 32 registers: the
    // conversions and loads amortised over 24 multiply-adds (F16 pp512 +30 % over 2 × 4).
    // Decoding is bound by memory and reads two rows at a time faster.
    Shape {
        rows: 4,
        activations: 6,
        decode_rows: 2
    }
);
level!(
    avx2,
    "avx2,fma,f16c",
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_fmadd_ps,
    hsum,
    wide8_f32,
    wide8_bf16,
    wide8_f16,
    // 12 accumulators, 3 weight vectors and an activation vector: the 16 registers.
    Shape {
        rows: 3,
        activations: 4,
        decode_rows: 3
    }
);

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wide8_f32(p: *const f32) -> __m256 {
    _mm256_loadu_ps(p)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wide8_bf16(p: *const half::bf16) -> __m256 {
    let bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
    _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wide8_f16(p: *const half::f16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

pub fn at(level: CpuLevel) -> BlockFn {
    // SAFETY: capped at the detected level, whose features include these.
    match level.min(cpu::detected()) {
        CpuLevel::Avx512 => |x, m, k, w, o| unsafe { avx512::run(x, m, k, w, o) },
        CpuLevel::Avx2 | CpuLevel::AvxVnni => |x, m, k, w, o| unsafe { avx2::run(x, m, k, w, o) },
        CpuLevel::Portable | CpuLevel::Neon => block_portable,
    }
}
