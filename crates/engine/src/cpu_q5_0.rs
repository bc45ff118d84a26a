//! `y = x · Wᵀ` for GGUF Q5_0 weights on the CPU, the block type llama.cpp's Q4_K_M files use
//! for most matrices whose width is not a multiple of 256 (Qwen2.5-0.5B's 896). candle's own
//! Q5_0 dot product is plain scalar code; this one uses AVX2 byte dot products (llama.cpp's
//! method) when the CPU has them, and runs rows in parallel. The arithmetic is the same as llama.cpp's
//! reference (activations quantized to Q8_0 blocks, integer block sums, one f32 sum per row in
//! block order), so results are bit-identical to candle's path.

use half::f16;

const QK: usize = 32;
/// f16 scale, 4 bytes of high bits, 16 bytes of nibbles.
pub const Q5_0_BLOCK_BYTES: usize = 22;

/// Activations as Q8_0 blocks: per 32 values a scale (rounded through f16) and i8 values.
struct Q8Row {
    d: Vec<f32>,
    qs: Vec<i8>,
}

fn quantize_q8_0(x: &[f32]) -> Q8Row {
    let blocks = x.len() / QK;
    let mut d = Vec::with_capacity(blocks);
    let mut qs = vec![0i8; x.len()];
    for b in 0..blocks {
        let xs = &x[b * QK..(b + 1) * QK];
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (q, v) in qs[b * QK..(b + 1) * QK].iter_mut().zip(xs) {
            *q = (v * inv).round() as i8;
        }
        d.push(f16::from_f32(scale).to_f32());
    }
    Q8Row { d, qs }
}

#[inline(always)]
fn block_sum(w: &[u8], xq: &[i8]) -> i32 {
    let qh = u32::from_le_bytes([w[2], w[3], w[4], w[5]]);
    let qs = &w[6..22];
    let mut sum = 0i32;
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) as i32 | ((((qh >> j) & 1) as i32) << 4);
        let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
        sum += (lo - 16) * xq[j] as i32 + (hi - 16) * xq[j + 16] as i32;
    }
    sum
}

/// Output rows `first..` (transposed, `[rows, m]`), with `sum` giving one block's integer sum.
#[inline(always)]
fn rows_with(
    w: &[u8],
    k: usize,
    xs: &[Q8Row],
    first: usize,
    out_t: &mut [f32],
    sum: impl Fn(&[u8], &[i8]) -> i32,
) {
    let m = xs.len();
    let row_bytes = k / QK * Q5_0_BLOCK_BYTES;
    for (r, out) in out_t.chunks_exact_mut(m).enumerate() {
        let row = &w[(first + r) * row_bytes..(first + r + 1) * row_bytes];
        for (x, o) in xs.iter().zip(out.iter_mut()) {
            let mut sumf = 0f32;
            for (b, blk) in row.chunks_exact(Q5_0_BLOCK_BYTES).enumerate() {
                let wd = f16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32();
                let s = sum(blk, &x.qs[b * QK..(b + 1) * QK]);
                sumf += s as f32 * wd * x.d[b];
            }
            *o = sumf;
        }
    }
}

fn rows(w: &[u8], k: usize, xs: &[Q8Row], first: usize, out_t: &mut [f32]) {
    rows_with(w, k, xs, first, out_t, block_sum)
}

type RowsFn = fn(&[u8], usize, &[Q8Row], usize, &mut [f32]);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// The integer sum of one block, as llama.cpp computes it with AVX2: nibbles and high
    /// bits widened to 32 signed bytes, then a byte dot product with the Q8_0 values.
    #[target_feature(enable = "avx2")]
    unsafe fn block_sum_avx2(w: &[u8], xq: &[i8]) -> i32 {
        // 32 bytes: low nibbles of qs (values 0..16), then high nibbles (16..32).
        let qs = _mm_loadu_si128(w.as_ptr().add(6) as *const __m128i);
        let nibbles = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        );
        // Byte j is 0xFF where bit j of qh is set.
        let qh = u32::from_le_bytes([w[2], w[3], w[4], w[5]]);
        let shuf = _mm256_set_epi64x(
            0x0303030303030303,
            0x0202020202020202,
            0x0101010101010101,
            0,
        );
        let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
        let bits = _mm256_cmpeq_epi8(
            _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
            _mm256_set1_epi64x(-1),
        );
        // value - 16: where the high bit is clear, set the top nibble (0xF0 | v = v - 16).
        let q = _mm256_or_si256(
            nibbles,
            _mm256_andnot_si256(bits, _mm256_set1_epi8(0xF0u8 as i8)),
        );
        let y = _mm256_loadu_si256(xq.as_ptr() as *const __m256i);
        let ax = _mm256_sign_epi8(q, q);
        let sy = _mm256_sign_epi8(y, q);
        let pairs = _mm256_maddubs_epi16(ax, sy);
        let quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(quads),
            _mm256_extracti128_si256(quads, 1),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn avx2_rows(w: &[u8], k: usize, xs: &[Q8Row], first: usize, out_t: &mut [f32]) {
        // SAFETY: this function runs only where AVX2 was detected.
        rows_with(w, k, xs, first, out_t, |blk, xq| unsafe {
            block_sum_avx2(blk, xq)
        })
    }

    pub fn best() -> RowsFn {
        if is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
        {
            // SAFETY: the features were detected at run time; every slice read is in bounds
            // (22-byte blocks, 32-value Q8 rows).
            |w, k, xs, f, o| unsafe { avx2_rows(w, k, xs, f, o) }
        } else {
            rows
        }
    }
}

fn kernel() -> RowsFn {
    static KERNEL: std::sync::OnceLock<RowsFn> = std::sync::OnceLock::new();
    *KERNEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            x86::best()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            rows
        }
    })
}

/// `x`: `[m, k]` f32; `w`: `n` rows of `k / 32` Q5_0 blocks. Returns `[m, n]`.
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: &[u8], n: usize) -> Vec<f32> {
    debug_assert_eq!(w.len(), n * k / QK * Q5_0_BLOCK_BYTES);
    let xs: Vec<Q8Row> = (0..m)
        .map(|i| quantize_q8_0(&x[i * k..(i + 1) * k]))
        .collect();
    let kernel = kernel();
    crate::cpu_matmul::par_rows(n, m, |first, out| kernel(w, k, &xs, first, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    #[test]
    fn bit_identical_to_candles_q5_0() {
        let (m, k, n) = (3, 128, 37);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
            .collect();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0)
            .collect();
        let wt = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
        let q = std::sync::Arc::new(QTensor::quantize(&wt, GgmlDType::Q5_0).unwrap());
        let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
        for mm in [1, m] {
            let want: Vec<f32> = QMatMul::from_arc(q.clone())
                .unwrap()
                .forward(&xt.narrow(0, 0, mm).unwrap())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let got = matmul_t(&x[..mm * k], mm, k, &q.data().unwrap(), n);
            assert_eq!(got, want, "m={mm}");
        }
    }
}
