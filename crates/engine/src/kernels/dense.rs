//! `y = x · Wᵀ` on the CPU for few rows of `x` (decode and short prefills), with the weight in
//! f32, bf16 or f16 and the activations in f32.
//!
//! Why not candle's matmul: at batch 1 the product is a matrix-vector product bound by memory
//! bandwidth, and candle has no bf16 CPU matmul — it converts the whole weight to f32 on every
//! call. Here each thread streams its own block of weight rows once, widening bf16 to f32 in
//! registers, and the dot products are compiled for AVX-512 and AVX2, run at the level
//! [`super::cpu`] chose (plain Rust elsewhere).

use super::cpu::{self, CpuLevel};
use half::{bf16, f16};
use rayon::prelude::*;

/// A weight matrix `[n, k]`, row-major, borrowed from a tensor's storage.
#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

trait Elem: Copy + Send + Sync {
    fn widen(self) -> f32;
}

impl Elem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Elem for bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        // bf16 is the top half of an f32; a shift is exact and vectorises.
        f32::from_bits((self.to_bits() as u32) << 16)
    }
}

impl Elem for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        // Integer and float arithmetic that vectorises (`half`'s conversion is a call per
        // value): the magnitude's bits moved into f32 position, scaled by 2^112 to rebias the
        // exponent, which is exact for normal and subnormal values alike. Infinities and NaNs,
        // which weights do not hold, come out as large finite numbers.
        let h = self.to_bits() as u32;
        let magnitude = f32::from_bits((h & 0x7fff) << 13) * f32::from_bits(0x7780_0000);
        f32::from_bits(magnitude.to_bits() | ((h & 0x8000) << 16))
    }
}

const LANES: usize = 32;

#[inline(always)]
fn dot<W: Elem>(x: &[f32], w: &[W]) -> f32 {
    let k = x.len();
    let mut acc = [0f32; LANES];
    let body = k - k % LANES;
    for (xc, wc) in x[..body]
        .chunks_exact(LANES)
        .zip(w[..body].chunks_exact(LANES))
    {
        for l in 0..LANES {
            acc[l] += xc[l] * wc[l].widen();
        }
    }
    let mut sum = 0f32;
    for i in body..k {
        sum += x[i] * w[i].widen();
    }
    sum + acc.iter().sum::<f32>()
}

/// One task's outputs: weight rows `first..first + rows` of a `[m, n]` result, written in
/// place (a prompt's outputs are megabytes: a transposed copy per task would cost a pass).
struct Outputs<'a> {
    dst: &'a SharedOut,
    m: usize,
    n: usize,
    first: usize,
    rows: usize,
}

impl Outputs<'_> {
    /// The output of weight row `first + r` for activation row `i`.
    #[inline(always)]
    fn set(&self, r: usize, i: usize, v: f32) {
        assert!(r < self.rows && i < self.m);
        // SAFETY: `dst` holds `m * n` values and `first + rows <= n` (see `par_rows`), and
        // tasks own disjoint row ranges, so no two writes alias.
        unsafe { self.dst.at(i * self.n + self.first + r).write(v) }
    }
}

/// The task's outputs for the `m` activation rows in `x`.
#[inline(always)]
fn block<W: Elem>(x: &[f32], m: usize, k: usize, w: &[W], out: &Outputs<'_>) {
    let mut wide = Vec::new();
    for r in 0..out.rows {
        let row = &w[(out.first + r) * k..(out.first + r + 1) * k];
        if m == 1 {
            out.set(r, 0, dot(x, row));
        } else {
            // Widen the row once and reuse it for every activation row.
            wide.clear();
            wide.extend(row.iter().map(|v| v.widen()));
            for i in 0..m {
                out.set(r, i, dot(&x[i * k..(i + 1) * k], &wide[..]));
            }
        }
    }
}

type BlockFn = fn(&[f32], usize, usize, WeightRows<'_>, &Outputs<'_>);

// Inlined into each target-feature wrapper below, so that it is compiled for those features.
#[inline(always)]
fn block_portable(x: &[f32], m: usize, k: usize, w: WeightRows<'_>, out: &Outputs<'_>) {
    match w {
        WeightRows::F32(w) => block(x, m, k, w, out),
        WeightRows::Bf16(w) => block(x, m, k, w, out),
        WeightRows::F16(w) => block(x, m, k, w, out),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
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
        // SAFETY: `cpu::active()` never exceeds the detected level, whose features include
        // these.
        match level.min(cpu::detected()) {
            CpuLevel::Avx512 => |x, m, k, w, o| unsafe { avx512::run(x, m, k, w, o) },
            CpuLevel::Avx2 | CpuLevel::AvxVnni => {
                |x, m, k, w, o| unsafe { avx2::run(x, m, k, w, o) }
            }
            CpuLevel::Portable | CpuLevel::Neon => block_portable,
        }
    }
}

fn kernel(level: CpuLevel) -> BlockFn {
    #[cfg(target_arch = "x86_64")]
    {
        x86::at(level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        block_portable
    }
}

/// `x` is `[m, k]`, `w` is `[n, k]`; returns `[m, n]`.
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: WeightRows<'_>, n: usize) -> Vec<f32> {
    debug_assert_eq!(x.len(), m * k);
    matmul_t_at(cpu::active(), x, m, k, w, n)
}

/// [`matmul_t`] at `level` (capped to what this CPU runs).
pub fn matmul_t_at(
    level: CpuLevel,
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    n: usize,
) -> Vec<f32> {
    debug_assert_eq!(x.len(), m * k);
    let kernel = kernel(level);
    par_rows(n, m, |out| kernel(x, m, k, w, out))
}

/// Runs `block` over tasks of the `n` weight rows in parallel, each writing its rows' outputs
/// of the `[m, n]` result, and returns the result.
fn par_rows(n: usize, m: usize, block: impl Fn(&Outputs<'_>) + Sync) -> Vec<f32> {
    // Enough rows per task to amortise scheduling, few enough to balance the threads.
    let rows_per_task = (n / (rayon::current_num_threads() * 8)).clamp(8, 256);
    // Not zeroed first: the tasks write every element (a prompt's outputs are megabytes).
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let dst = SharedOut(out.as_mut_ptr());
    // One task at a time to whichever thread is free: a thread slowed by the rest of the
    // machine does not hold the others up at the end of each product.
    (0..n.div_ceil(rows_per_task))
        .into_par_iter()
        .with_max_len(1)
        .for_each(|t| {
            let first = t * rows_per_task;
            let rows = rows_per_task.min(n - first);
            block(&Outputs {
                dst: &dst,
                m,
                n,
                first,
                rows,
            });
        });
    // SAFETY: the tasks cover rows `0..n`, each writing all `m` of its outputs.
    unsafe { out.set_len(m * n) };
    out
}

/// An output buffer written by several tasks at disjoint indices.
pub(crate) struct SharedOut(pub(crate) *mut f32);
// SAFETY: used only for writes at indices that the tasks partition between them.
unsafe impl Sync for SharedOut {}
impl SharedOut {
    /// A method (not the field) so that closures capture the whole `Sync` wrapper.
    pub(crate) fn at(&self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn matches_a_plain_product_for_each_weight_type_at_every_level() {
        let (m, k, n) = (3, 77, 301); // odd sizes exercise the tails
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
            .collect();
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let x_at = |mm: usize| -> Vec<f32> { (0..mm * k).map(|i| x[i % (m * k)]).collect() };
        for (name, rows) in [
            ("f32", WeightRows::F32(&w)),
            ("bf16", WeightRows::Bf16(&wb)),
            ("f16", WeightRows::F16(&wh)),
        ] {
            for level in super::cpu::runnable() {
                // Every width of a register block's last group at both levels' shapes.
                for mm in [1, 2, m, 4, 5, 6, 7, 13] {
                    let x = &x_at(mm);
                    let want = reference(x, mm, k, &w, n);
                    let got = matmul_t_at(level, x, mm, k, rows, n);
                    for (g, e) in got.iter().zip(&want) {
                        assert!(
                            (g - e).abs() < 1e-4,
                            "{name} at {level}, m={mm}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// A prompt's rows, in register blocks of several activation rows and a tail, each get
    /// exactly what the row gets alone (decoding), at every level.
    #[test]
    fn each_row_of_a_prompt_sums_as_decoding_does() {
        // 7 to 12 rows: every tail after blocks of four or six; five weight rows: a tail after
        // blocks of two, three or four.
        for m in 7..=12 {
            prompt_rows_sum_as_decoding(m);
        }
    }

    fn prompt_rows_sum_as_decoding(m: usize) {
        let (k, n) = (4096, 5);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0 + (i % 3) as f32 * 0.001)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0 + (i % 7) as f32 * 0.003)
            .collect();
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        for (name, rows) in [
            ("f32", WeightRows::F32(&w)),
            ("bf16", WeightRows::Bf16(&wb)),
            ("f16", WeightRows::F16(&wh)),
        ] {
            for level in super::cpu::runnable() {
                let all = matmul_t_at(level, &x, m, k, rows, n);
                for (i, row) in x.chunks_exact(k).enumerate() {
                    let alone = matmul_t_at(level, row, 1, k, rows, n);
                    assert_eq!(
                        &all[i * n..(i + 1) * n],
                        &alone[..],
                        "{name} at {level}, row {i} of {m}"
                    );
                }
            }
        }
    }
}
