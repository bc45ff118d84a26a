//! `y = x · Wᵀ` for GGUF-quantized weights on the CPU, for decoding and prompts: the block
//! types of llama.cpp's common files (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K). Weights stay in GGUF
//! order here, or come in the 16-row tiles of [`crate::interleaved`] (Q4_0, Q5_0, Q8_0 on
//! CPUs with AVX-512 VNNI), whose kernels this module's parallel pass calls.
//!
//! Why not candle's `QMatMul`: its Q5_0 dot product is scalar code (llama.cpp's Q4_K_M files
//! store most of Qwen2.5-0.5B's matrices as Q5_0, because 896 is not a multiple of 256), and
//! it runs on a thread pool of its own whose workers spin between calls, taking the cores
//! from this crate's rayon pool. Here every type runs on rayon, each thread streaming its own
//! block of weight rows once.
//!
//! The arithmetic is llama.cpp's: activations are quantized to 8 bits per row (Q8_0 blocks of
//! 32 for the 32-blocks, Q8_K blocks of 256 with 16-value sums for the K-quants), each block
//! product is an exact integer, scaled and summed in f32. With AVX2 the block products are
//! byte dot products (`maddubs`) accumulated in eight f32 lanes, as llama.cpp's x86 code does;
//! elsewhere a plain loop computes the same integers.

use candle_core::quantized::GgmlDType;
use half::f16;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

const QK: usize = 32;
/// How far ahead of the block being read the kernels ask for the weight's cache lines: the
/// hardware prefetcher alone leaves these loops waiting on memory.
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 4096;
const QK_K: usize = 256;
/// Words per block in [`pack_q8_k`]'s rows: 64 of values, 64 of offsets, the scale, sums, padding.
const K_WORDS: usize = 144;
/// Activation rows per pass of a task's weight rows.
const COLUMN_BLOCK: usize = 16;

/// The weight block types with kernels here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    Q4_0,
    Q5_0,
    Q8_0,
    Q4K,
    Q6K,
    Q4_1,
    Q5_1,
}

impl BlockType {
    pub fn of(dtype: GgmlDType) -> Option<Self> {
        Some(match dtype {
            GgmlDType::Q4_0 => Self::Q4_0,
            GgmlDType::Q5_0 => Self::Q5_0,
            GgmlDType::Q8_0 => Self::Q8_0,
            GgmlDType::Q4K => Self::Q4K,
            GgmlDType::Q6K => Self::Q6K,
            GgmlDType::Q4_1 => Self::Q4_1,
            GgmlDType::Q5_1 => Self::Q5_1,
            _ => return None,
        })
    }

    /// Values per block.
    pub fn block_values(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 | Self::Q4_1 | Self::Q5_1 => QK,
            Self::Q4K | Self::Q6K => QK_K,
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18, // f16 scale, 16 bytes of nibbles
            Self::Q5_0 => 22, // f16 scale, 4 bytes of fifth bits, 16 bytes of nibbles
            Self::Q8_0 => 34, // f16 scale, 32 bytes
            Self::Q4K => 144, // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles
            Self::Q6K => 210, // 128 bytes low nibbles, 64 of high bits, 16 i8 scales, f16 d
            Self::Q4_1 => 20, // f16 scale, f16 minimum, 16 bytes of nibbles
            Self::Q5_1 => 24, // f16 scale, f16 minimum, 4 bytes of fifth bits, 16 of nibbles
        }
    }
}

/// One row of activations quantized to 8 bits: per block a scale, the values, and (Q8_K) the
/// sums of each 16 values, which the K-quants' minimums and offsets need.
pub struct Q8Row {
    pub(crate) d: Vec<f32>,
    pub(crate) qs: Vec<i8>,
    /// Q8_K: sums of each 16 values.
    bsums: Vec<i16>,
    /// Q8_0: sums of each block's 32 values.
    pub(crate) sums: Vec<i32>,
}

/// Rounds to the nearest integer, ties to even (as the SIMD conversions do), for `|v| < 2²²`:
/// adding 1.5·2²³ leaves no fraction bits. Plain adds, so the loop vectorises.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// Q8_0: per 32 values, scale = max|x| / 127 rounded through f16 (as it is stored in llama.cpp).
pub(crate) fn quantize_q8_0(x: &[f32]) -> Q8Row {
    let blocks = x.len() / QK;
    let mut d = Vec::with_capacity(blocks);
    let mut sums: Vec<i32> = Vec::with_capacity(blocks);
    let mut qs = vec![0i8; x.len()];
    for (xs, qs) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for (q, v) in qs.iter_mut().zip(xs) {
            *q = round_even(v * inv) as i8;
        }
        d.push(f16::from_f32(scale).to_f32());
        sums.push(qs.iter().map(|&v| v as i32).sum());
    }
    Q8Row {
        d,
        qs,
        bsums: Vec::new(),
        sums,
    }
}

/// Q8_K: per 256 values, the value of largest magnitude maps to -127, scale kept in f32.
fn quantize_q8_k(x: &[f32]) -> Q8Row {
    let blocks = x.len() / QK_K;
    let mut d = Vec::with_capacity(blocks);
    let mut qs = vec![0i8; x.len()];
    let mut bsums = vec![0i16; x.len() / 16];
    for ((xs, qs), bsums) in x
        .chunks_exact(QK_K)
        .zip(qs.chunks_exact_mut(QK_K))
        .zip(bsums.chunks_exact_mut(QK_K / 16))
    {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xs {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            d.push(0.0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, v) in qs.iter_mut().zip(xs) {
            *q = (iscale * v).round().clamp(-128.0, 127.0) as i8;
        }
        for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        d.push(1.0 / iscale);
    }
    Q8Row {
        d,
        qs,
        bsums,
        sums: Vec::new(),
    }
}

/// Q8_K rows packed for the many-row K-quant kernels: row after row, per block [`K_WORDS`]
/// words: the 256 values, then per 64 values 16 i32 lanes holding `-32 ×` each 16-value sum
/// in lane 4j (Q6_K's offset, folded into the integer sums), the scale (f32 bits), the eight
/// 32-value sums (i16, Q4_K's minimums), padding. Returns the buffer and the words per row.
fn pack_q8_k(rows: &[Q8Row]) -> (Vec<u32>, usize) {
    let stride = rows.first().map_or(0, |r| r.d.len() * K_WORDS);
    let mut packed = Vec::with_capacity(stride * rows.len());
    for row in rows {
        let (d, qs, bsums) = (&row.d, &row.qs, &row.bsums);
        for b in 0..d.len() {
            let values = &qs[b * QK_K..(b + 1) * QK_K];
            packed.extend(
                values
                    .chunks_exact(4)
                    .map(|v| u32::from_le_bytes([v[0] as u8, v[1] as u8, v[2] as u8, v[3] as u8])),
            );
            let sums16 = &bsums[b * 16..(b + 1) * 16];
            let mut offsets = [0u32; 64];
            for (g, &sum) in sums16.iter().enumerate() {
                offsets[g * 4] = (-32 * sum as i32) as u32;
            }
            packed.extend(offsets);
            packed.push(d[b].to_bits());
            packed.extend((0..4).map(|i| {
                let lo = (sums16[4 * i] + sums16[4 * i + 1]) as u16 as u32;
                let hi = (sums16[4 * i + 2] + sums16[4 * i + 3]) as u16 as u32;
                lo | hi << 16
            }));
            packed.extend([0u32; K_WORDS - 133]);
        }
    }
    (packed, stride)
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and minimum of sub-block `j` (of 8) of a Q4_K/Q5_K block.
#[inline(always)]
fn scale_min_k4(j: usize, s: &[u8]) -> (i32, i32) {
    if j < 4 {
        ((s[j] & 63) as i32, (s[j + 4] & 63) as i32)
    } else {
        (
            ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4)) as i32,
            ((s[j + 4] >> 4) | ((s[j] >> 6) << 4)) as i32,
        )
    }
}

/// Plain-Rust dot products of one weight row with one quantized activation row.
mod portable {
    use super::*;

    pub fn q4_0(w: &[u8], x: &Q8Row) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(18).enumerate() {
            let xq = &x.qs[b * QK..(b + 1) * QK];
            let mut s = 0i32;
            for j in 0..16 {
                s += ((blk[2 + j] & 0x0F) as i32 - 8) * xq[j] as i32
                    + ((blk[2 + j] >> 4) as i32 - 8) * xq[j + 16] as i32;
            }
            sumf += s as f32 * f16_at(blk, 0) * x.d[b];
        }
        sumf
    }

    pub fn q5_0(w: &[u8], x: &Q8Row) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(22).enumerate() {
            let xq = &x.qs[b * QK..(b + 1) * QK];
            let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            let mut s = 0i32;
            for j in 0..16 {
                let lo = (blk[6 + j] & 0x0F) as i32 | ((((qh >> j) & 1) as i32) << 4);
                let hi = (blk[6 + j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
                s += (lo - 16) * xq[j] as i32 + (hi - 16) * xq[j + 16] as i32;
            }
            sumf += s as f32 * f16_at(blk, 0) * x.d[b];
        }
        sumf
    }

    /// Q4_1/Q5_1: `value = d·q + m` with unsigned q, so a block gives `d·dy·Σq·y + m·dy·Σy`,
    /// `dy·Σy` rounded to f16 as llama.cpp's Q8_1 activations store it.
    fn with_minimum(w: &[u8], x: &Q8Row, bytes: usize, q: impl Fn(&[u8], usize) -> i32) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(bytes).enumerate() {
            let xq = &x.qs[b * QK..(b + 1) * QK];
            let s: i32 = (0..QK).map(|i| q(blk, i) * xq[i] as i32).sum();
            let dy_sum = f16::from_f32(x.d[b] * x.sums[b] as f32).to_f32();
            sumf += x.d[b] * s as f32 * f16_at(blk, 0) + f16_at(blk, 2) * dy_sum;
        }
        sumf
    }

    pub fn q4_1(w: &[u8], x: &Q8Row) -> f32 {
        with_minimum(w, x, 20, |blk, i| {
            (blk[4 + i % 16] >> (4 * (i / 16)) & 0x0F) as i32
        })
    }

    pub fn q5_1(w: &[u8], x: &Q8Row) -> f32 {
        with_minimum(w, x, 24, |blk, i| {
            let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
            (blk[8 + i % 16] >> (4 * (i / 16)) & 0x0F) as i32 | ((qh >> i & 1) as i32) << 4
        })
    }

    pub fn q8_0(w: &[u8], x: &Q8Row) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(34).enumerate() {
            let xq = &x.qs[b * QK..(b + 1) * QK];
            let s: i32 = blk[2..]
                .iter()
                .zip(xq)
                .map(|(&q, &y)| q as i8 as i32 * y as i32)
                .sum();
            sumf += s as f32 * f16_at(blk, 0) * x.d[b];
        }
        sumf
    }

    pub fn q4k(w: &[u8], x: &Q8Row) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(144).enumerate() {
            let (d, dmin) = (f16_at(blk, 0) * x.d[b], f16_at(blk, 2) * x.d[b]);
            let (scales, qs) = (&blk[4..16], &blk[16..144]);
            let xq = &x.qs[b * QK_K..(b + 1) * QK_K];
            let bsums = &x.bsums[b * 16..(b + 1) * 16];
            let (mut sum_q, mut sum_m) = (0i32, 0i32);
            // Four chunks of 64 values: the low nibbles of 32 bytes, then their high nibbles.
            for c in 0..4 {
                let q = &qs[c * 32..(c + 1) * 32];
                for (half, shift) in [(0usize, 0u32), (1, 4)] {
                    let j = 2 * c + half;
                    let (sc, m) = scale_min_k4(j, scales);
                    let y = &xq[j * 32..(j + 1) * 32];
                    let dot: i32 = q
                        .iter()
                        .zip(y)
                        .map(|(&v, &y)| ((v >> shift) & 0x0F) as i32 * y as i32)
                        .sum();
                    sum_q += sc * dot;
                    sum_m += m * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
                }
            }
            sumf += d * sum_q as f32 - dmin * sum_m as f32;
        }
        sumf
    }

    pub fn q6k(w: &[u8], x: &Q8Row) -> f32 {
        let mut sumf = 0f32;
        for (b, blk) in w.chunks_exact(210).enumerate() {
            let (ql, qh) = (&blk[0..128], &blk[128..192]);
            let scales = &blk[192..208];
            let d = f16_at(blk, 208) * x.d[b];
            let xq = &x.qs[b * QK_K..(b + 1) * QK_K];
            let mut sum = 0i32;
            // Two halves of 128 values, each from 64 bytes of low nibbles and 32 of high bits.
            for h in 0..2 {
                let (ql, qh) = (&ql[h * 64..(h + 1) * 64], &qh[h * 32..(h + 1) * 32]);
                let mut vals = [0i32; 128];
                for l in 0..32 {
                    vals[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                    vals[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    vals[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    vals[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                }
                for g in 0..8 {
                    let y = &xq[h * 128 + g * 16..h * 128 + (g + 1) * 16];
                    let dot: i32 = vals[g * 16..(g + 1) * 16]
                        .iter()
                        .zip(y)
                        .map(|(&v, &y)| v * y as i32)
                        .sum();
                    sum += scales[h * 8 + g] as i8 as i32 * dot;
                }
            }
            sumf += d * sum as f32;
        }
        sumf
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_at(p: *const u8) -> f32 {
        // SAFETY: callers pass a pointer to two readable bytes.
        let bits = unsafe { std::ptr::read_unaligned(p as *const u16) };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// Asks for the cache lines of the block `PREFETCH` bytes ahead of the `bytes` at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn prefetch(p: *const u8, bytes: usize) {
        let mut at = 0;
        while at < bytes {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + at) as *const i8);
            at += 64;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Eight i32 sums of four products each of signed bytes `w` and `y`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_i8(w: __m256i, y: __m256i) -> __m256i {
        // maddubs multiplies unsigned by signed bytes: move w's sign onto y.
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }

    /// Sums blocks of 32 signed weights, `$weights` giving the bytes of the block at `$blk`
    /// (a macro so that it is inlined into each type's function with its target features).
    macro_rules! blocks32 {
        ($w:expr, $bytes:expr, $x:expr, |$blk:ident| $weights:expr) => {{
            let (w, x): (&[u8], &Q8Row) = ($w, $x);
            let mut acc = _mm256_setzero_ps();
            let (wp, yp) = (w.as_ptr(), x.qs.as_ptr());
            for b in 0..x.d.len() {
                let $blk = wp.add(b * $bytes);
                _mm_prefetch::<_MM_HINT_T0>($blk.wrapping_add(PREFETCH) as *const i8);
                let d = _mm256_set1_ps(f16_at($blk) * *x.d.get_unchecked(b));
                let s = dot_i8($weights, load(yp.add(b * QK) as *const u8));
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
            }
            hsum(acc)
        }};
    }

    /// The 32 nibbles of a 16-byte run, low nibbles first, as bytes 0..16.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let q = _mm_loadu_si128(p as *const __m128i);
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
            _mm256_set1_epi8(0x0F),
        )
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q4_0(w: &[u8], x: &Q8Row) -> f32 {
        blocks32!(w, 18, x, |blk| _mm256_sub_epi8(
            nibbles(blk.add(2)),
            _mm256_set1_epi8(8)
        ))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q5_0(w: &[u8], x: &Q8Row) -> f32 {
        blocks32!(w, 22, x, |blk| q5_0_weights(blk))
    }

    /// The 32 signed values of the Q5_0 block at `blk`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q5_0_weights(blk: *const u8) -> __m256i {
        // Byte j is 0xFF where bit j of qh (the fifth bit of value j) is set.
        let qh = std::ptr::read_unaligned(blk.add(2) as *const u32);
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
        // value - 16: where the fifth bit is clear, set the top nibble (0xF0 | v = v - 16).
        _mm256_or_si256(
            nibbles(blk.add(6)),
            _mm256_andnot_si256(bits, _mm256_set1_epi8(0xF0u8 as i8)),
        )
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q8_0(w: &[u8], x: &Q8Row) -> f32 {
        blocks32!(w, 34, x, |blk| load(blk.add(2)))
    }

    /// [`blocks32!`] for one weight row against several activation rows (`out[c]` for
    /// `xs[c]`): each block's weights are unpacked once for up to four of them, and each row's
    /// sum takes exactly the operations `blocks32!` takes for it alone — the same value, bit
    /// for bit, batched or not.
    macro_rules! blocks32_rows {
        ($name:ident, $bytes:expr, |$blk:ident| $weights:expr) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            pub unsafe fn $name(w: &[u8], xs: &[Q8Row], out: &mut [f32]) {
                // A constant number of rows per pass, so that their sums stay in registers.
                #[inline]
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn pass<const N: usize>(wp: *const u8, xs: &[Q8Row], out: &mut [f32]) {
                    let mut acc = [_mm256_setzero_ps(); N];
                    for b in 0..xs[0].d.len() {
                        let $blk = wp.add(b * $bytes);
                        _mm_prefetch::<_MM_HINT_T0>($blk.wrapping_add(PREFETCH) as *const i8);
                        let wq = $weights;
                        let scale = f16_at($blk);
                        // dot_i8's first operand, the same for every row.
                        let unsigned = _mm256_sign_epi8(wq, wq);
                        for c in 0..N {
                            let x = xs.get_unchecked(c);
                            let d = _mm256_set1_ps(scale * *x.d.get_unchecked(b));
                            let y = load(x.qs.as_ptr().add(b * QK) as *const u8);
                            let pairs = _mm256_maddubs_epi16(unsigned, _mm256_sign_epi8(y, wq));
                            let s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
                            acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[c]);
                        }
                    }
                    for c in 0..N {
                        out[c] = hsum(acc[c]);
                    }
                }
                let wp = w.as_ptr();
                let mut c = 0;
                while c < xs.len() {
                    let n = (xs.len() - c).min(4);
                    let (x, o) = (&xs[c..c + n], &mut out[c..c + n]);
                    match n {
                        1 => pass::<1>(wp, x, o),
                        2 => pass::<2>(wp, x, o),
                        3 => pass::<3>(wp, x, o),
                        _ => pass::<4>(wp, x, o),
                    }
                    c += n;
                }
            }
        };
    }

    blocks32_rows!(q4_0_rows, 18, |blk| _mm256_sub_epi8(
        nibbles(blk.add(2)),
        _mm256_set1_epi8(8)
    ));
    blocks32_rows!(q5_0_rows, 22, |blk| q5_0_weights(blk));
    blocks32_rows!(q8_0_rows, 34, |blk| load(blk.add(2)));

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q4k(w: &[u8], x: &Q8Row) -> f32 {
        const KMASK1: u32 = 0x3f3f3f3f;
        const KMASK2: u32 = 0x0f0f0f0f;
        const KMASK3: u32 = 0x03030303;
        let m4 = _mm256_set1_epi8(0x0F);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for b in 0..x.d.len() {
            let blk = w.as_ptr().add(b * 144);
            prefetch(blk, 144);
            let yd = *x.d.get_unchecked(b);
            let d = yd * f16_at(blk);
            let dmin = -yd * f16_at(blk.add(2));
            // Unpack the 12 bytes of 6-bit scales and minimums into 8 + 8 bytes.
            let mut u = [0u32; 4];
            std::ptr::copy_nonoverlapping(blk.add(4), u.as_mut_ptr() as *mut u8, 12);
            u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
            let mins_lo = u[1] & KMASK1;
            u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
            u[2] = mins_lo;
            u[0] &= KMASK1;
            let mins_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
                u[3] as i32,
                u[2] as i32,
                u[1] as i32,
                u[0] as i32,
            ));
            // The minimums times the activations' 32-value sums.
            let bsums = _mm256_loadu_si256(x.bsums.as_ptr().add(b * 16) as *const __m256i);
            let sums32 = _mm_hadd_epi16(
                _mm256_castsi256_si128(bsums),
                _mm256_extracti128_si256(bsums, 1),
            );
            let prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_scales, 1), sums32);
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);

            let sc = _mm256_castsi256_si128(mins_scales);
            let scales = _mm256_set_m128i(sc, sc);
            let (mut q4, mut q8) = (blk.add(16), x.qs.as_ptr().add(b * QK_K) as *const u8);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4i8 {
                // Sub-block scales 2j and 2j+1, each broadcast to every 16-bit lane.
                let lo = 4 * j;
                let scale_l = _mm256_shuffle_epi8(
                    scales,
                    _mm256_set1_epi16(i16::from_le_bytes([lo as u8, lo as u8 + 1])),
                );
                let scale_h = _mm256_shuffle_epi8(
                    scales,
                    _mm256_set1_epi16(i16::from_le_bytes([lo as u8 + 2, lo as u8 + 3])),
                );
                let bits = load(q4);
                q4 = q4.add(32);
                let q4l = _mm256_and_si256(bits, m4);
                let q4h = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                let p_l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, load(q8)));
                let p_h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, load(q8.add(32))));
                q8 = q8.add(64);
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_l, p_h));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum(acc) + _mm_cvtss_f32(acc_m)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q6k(w: &[u8], x: &Q8Row) -> f32 {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(3);
        let m32s = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for b in 0..x.d.len() {
            let blk = w.as_ptr().add(b * 210);
            prefetch(blk, 210);
            let d = *x.d.get_unchecked(b) * f16_at(blk.add(208));
            let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
            let (mut q4, mut qh, mut q8) =
                (blk, blk.add(128), x.qs.as_ptr().add(b * QK_K) as *const u8);
            let mut sumi = _mm256_setzero_si256();
            for half in 0..2i8 {
                let bits1 = load(q4);
                let bits2 = load(q4.add(32));
                let high = load(qh);
                q4 = q4.add(64);
                qh = qh.add(32);
                let h0 = _mm256_slli_epi16(_mm256_and_si256(high, m2), 4);
                let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), m2), 4);
                let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), m2), 4);
                let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), m2), 4);
                let q = [
                    _mm256_or_si256(_mm256_and_si256(bits1, m4), h0),
                    _mm256_or_si256(_mm256_and_si256(bits2, m4), h1),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4), h2),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4), h3),
                ];
                for (i, q) in q.into_iter().enumerate() {
                    let y = load(q8);
                    q8 = q8.add(32);
                    // (q - 32)·y = q·y - 32·y, since maddubs needs the unsigned operand.
                    let p =
                        _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(m32s, y));
                    // Scales 2s and 2s+1 of this 32-value run, each for 8 16-bit lanes.
                    let s = (half * 8 + 2 * i as i8) as u8;
                    let pick =
                        _mm_set_epi64x(i64::from_le_bytes([s + 1; 8]), i64::from_le_bytes([s; 8]));
                    let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum(acc)
    }
}

/// Q5_0 and Q8_0 with AVX-512 (F, BW, VL, VNNI): two blocks per 512-bit vector, one
/// `vpdpbusd` (unsigned × signed bytes into i32) per pair instead of the sign trick and two
/// multiply-adds. Weights are taken unsigned (Q5_0 + 16, Q8_0 + 128) and that offset times the
/// activations' block sums is subtracted at the end; Q5_0's fifth bits come straight from a
/// mask register.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// `Σ d_w·d_x·dot(u, y)` over a row of blocks minus `offset·Σ d_w·d_x·Σy`, where
    /// `$pair(blk0, blk1)` gives two blocks' unsigned weights as 64 bytes and `$one(blk)` one
    /// block's as 32 (a macro, so each type's function inlines it with its target features).
    macro_rules! row_dot {
        ($w:expr, $x:expr, $bytes:expr, $offset:expr, |$b0:ident, $b1:ident| $pair:expr, |$b:ident| $one:expr) => {{
            let (w, x): (&[u8], &Q8Row) = ($w, $x);
            let (wp, yp) = (w.as_ptr(), x.qs.as_ptr());
            let nb = x.d.len();
            let mut acc = _mm512_setzero_ps();
            let mut sums = 0f32;
            for p in 0..nb / 2 {
                let b = 2 * p;
                let $b0 = wp.add(b * $bytes);
                let $b1 = $b0.add($bytes);
                _mm_prefetch::<_MM_HINT_T0>($b0.wrapping_add(PREFETCH) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>($b1.wrapping_add(PREFETCH + $bytes - 1) as *const i8);
                let d0 = scale($b0) * *x.d.get_unchecked(b);
                let d1 = scale($b1) * *x.d.get_unchecked(b + 1);
                let y = _mm512_loadu_si512(yp.add(b * QK) as *const _);
                let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), $pair, y);
                let d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
                acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
                sums +=
                    d0 * *x.sums.get_unchecked(b) as f32 + d1 * *x.sums.get_unchecked(b + 1) as f32;
            }
            let mut tail = 0f32;
            if nb % 2 == 1 {
                let b = nb - 1;
                let $b = wp.add(b * $bytes);
                let d = scale($b) * *x.d.get_unchecked(b);
                let y = _mm256_loadu_si256(yp.add(b * QK) as *const __m256i);
                let s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), $one, y);
                let v = _mm256_cvtepi32_ps(s);
                let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
                let v = _mm_add_ss(v, _mm_movehdup_ps(v));
                tail = d * _mm_cvtss_f32(v);
                sums += d * *x.sums.get_unchecked(b) as f32;
            }
            _mm512_reduce_add_ps(acc) + tail - $offset * sums
        }};
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn scale(p: *const u8) -> f32 {
        let bits = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// Q5_0's 32 values, unsigned (0..32): 16 bytes of nibbles at `p + 6`, fifth bits at `p + 2`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q5_0_one(p: *const u8) -> __m256i {
        let qs = _mm_loadu_si128(p.add(6) as *const __m128i);
        let nibbles = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        );
        let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
        _mm256_or_si256(nibbles, _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10)))
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn q4_0(w: &[u8], x: &Q8Row) -> f32 {
        row_dot!(w, x, 18, 8.0, |b0, b1| nibble_pair(b0, b1, 2), |b| {
            let qs = _mm_loadu_si128(b.add(2) as *const __m128i);
            _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
                _mm256_set1_epi8(0x0F),
            )
        })
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn q5_0(w: &[u8], x: &Q8Row) -> f32 {
        row_dot!(w, x, 22, 16.0, |b0, b1| q5_0_pair(b0, b1), |b| q5_0_one(b))
    }

    /// Two Q4_0/Q5_0 blocks' nibbles (16 bytes each at `b + at`) as 64 bytes, low nibbles first.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn nibble_pair(b0: *const u8, b1: *const u8, at: usize) -> __m512i {
        // 64-bit lanes 0-1 and 4-5 keep the nibble bytes, 2-3 and 6-7 shift the high ones down.
        let shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
        let qs0 = _mm_loadu_si128(b0.add(at) as *const __m128i);
        let qs1 = _mm_loadu_si128(b1.add(at) as *const __m128i);
        let z = _mm512_inserti32x4(_mm512_castsi128_si512(qs0), qs0, 1);
        let z = _mm512_inserti32x4(_mm512_inserti32x4(z, qs1, 2), qs1, 3);
        _mm512_and_si512(_mm512_srlv_epi64(z, shifts), _mm512_set1_epi8(0x0F))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q5_0_pair(b0: *const u8, b1: *const u8) -> __m512i {
        let qh = std::ptr::read_unaligned(b0.add(2) as *const u32) as u64
            | (std::ptr::read_unaligned(b1.add(2) as *const u32) as u64) << 32;
        _mm512_or_si512(
            nibble_pair(b0, b1, 6),
            _mm512_maskz_mov_epi8(qh, _mm512_set1_epi8(0x10)),
        )
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    unsafe fn q8_0_pair(b0: *const u8, b1: *const u8) -> __m512i {
        let lo = _mm256_loadu_si256(b0.add(2) as *const __m256i);
        let hi = _mm256_loadu_si256(b1.add(2) as *const __m256i);
        _mm512_xor_si512(
            _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
            _mm512_set1_epi8(-128),
        )
    }

    /// Q6_K, one weight row against `C` activation rows. Each 256-value block is widened once
    /// into four vectors of 64 unsigned 6-bit values and four vectors of f32 scales
    /// (`d × scale` of each 16 values, over the 4 lanes that sum them); per activation row, the
    /// integer sums start from `-32 × Σy` (the values' offset) and are scaled in f32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[allow(clippy::needless_range_loop)] // `c` indexes the accumulators, columns and outputs together
    pub unsafe fn q6k_rows<const C: usize>(
        w: &[u8],
        cols: *const u32,
        stride: usize,
        out: &mut [f32],
    ) {
        let m4 = _mm512_set1_epi8(0x0F);
        let m2 = _mm512_set1_epi8(3);
        // 16-bit shift counts: the low 256 bits take the high bits at shift a, the upper at b.
        let counts = |a: i16, b: i16| {
            _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set1_epi16(a)),
                _mm256_set1_epi16(b),
                1,
            )
        };
        let (first, second) = (counts(0, 2), counts(4, 6));
        let blocks = stride / K_WORDS;
        let mut acc = [_mm512_setzero_ps(); C];
        for b in 0..blocks {
            let blk = w.as_ptr().add(b * 210);
            let dw = scale(blk.add(208));
            let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
            let mut q = [_mm512_setzero_si512(); 4];
            let mut sc = [_mm512_setzero_ps(); 4];
            for h in 0..2 {
                let low = _mm512_loadu_si512(blk.add(h * 64) as *const _);
                let high = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    blk.add(128 + h * 32) as *const __m256i
                ));
                let top =
                    |c| _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, c), m2), 4);
                q[2 * h] = _mm512_or_si512(_mm512_and_si512(low, m4), top(first));
                q[2 * h + 1] =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), m4), top(second));
            }
            for (z, sc) in sc.iter_mut().enumerate() {
                // Scales 4z..4z+4, each over 4 i32 lanes.
                let g = (4 * z) as u8;
                let pick = _mm_set_epi32(
                    i32::from_le_bytes([g + 3; 4]),
                    i32::from_le_bytes([g + 2; 4]),
                    i32::from_le_bytes([g + 1; 4]),
                    i32::from_le_bytes([g; 4]),
                );
                let lanes = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(scales, pick));
                *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(lanes), _mm512_set1_ps(dw));
            }
            for c in 0..C {
                let at = cols.add(c * stride + b * K_WORDS);
                let mut block = _mm512_setzero_ps();
                for z in 0..4 {
                    let y = _mm512_loadu_si512(at.add(z * 16) as *const _);
                    let offset = _mm512_loadu_si512(at.add(64 + z * 16) as *const _);
                    let s = _mm512_dpbusd_epi32(offset, q[z], y);
                    block = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc[z], block);
                }
                let dx = _mm512_set1_ps(f32::from_bits(*at.add(128)));
                acc[c] = _mm512_fmadd_ps(block, dx, acc[c]);
            }
        }
        for c in 0..C {
            *out.get_unchecked_mut(c) = _mm512_reduce_add_ps(acc[c]);
        }
    }

    /// Q4_K, one weight row against `C` activation rows: each block widened once into four
    /// vectors of 64 nibbles and their f32 scales (`d × scale` per 32 values); the minimums
    /// (`dmin × min × Σy` per 32 values) are one 16-bit multiply-add per activation row.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    #[allow(clippy::needless_range_loop)] // `c` indexes the accumulators, columns and outputs together
    pub unsafe fn q4k_rows<const C: usize>(
        w: &[u8],
        cols: *const u32,
        stride: usize,
        out: &mut [f32],
    ) {
        let m4 = _mm512_set1_epi8(0x0F);
        let halves = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let blocks = stride / K_WORDS;
        let mut acc = [_mm512_setzero_ps(); C];
        for b in 0..blocks {
            let blk = w.as_ptr().add(b * 144);
            let (d, dmin) = (scale(blk), scale(blk.add(2)));
            let packed = std::slice::from_raw_parts(blk.add(4), 12);
            let mut mins = [0i16; 8];
            let mut sc = [_mm512_setzero_ps(); 4];
            let mut q = [_mm512_setzero_si512(); 4];
            for z in 0..4 {
                let (s0, m0) = scale_min_k4(2 * z, packed);
                let (s1, m1) = scale_min_k4(2 * z + 1, packed);
                mins[2 * z] = m0 as i16;
                mins[2 * z + 1] = m1 as i16;
                sc[z] = _mm512_mask_blend_ps(
                    0xFF00,
                    _mm512_set1_ps(d * s0 as f32),
                    _mm512_set1_ps(d * s1 as f32),
                );
                let bytes = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    blk.add(16 + 32 * z) as *const __m256i
                ));
                q[z] = _mm512_and_si512(_mm512_srlv_epi64(bytes, halves), m4);
            }
            let mins = _mm_loadu_si128(mins.as_ptr() as *const __m128i);
            let neg_dmin = _mm_set1_ps(-dmin);
            for c in 0..C {
                let at = cols.add(c * stride + b * K_WORDS);
                let mut block = _mm512_setzero_ps();
                for z in 0..4 {
                    let y = _mm512_loadu_si512(at.add(z * 16) as *const _);
                    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[z], y);
                    block = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc[z], block);
                }
                let sums = _mm_loadu_si128(at.add(129) as *const __m128i);
                let m = _mm_mul_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mins, sums)), neg_dmin);
                block = _mm512_add_ps(block, _mm512_zextps128_ps512(m));
                let dx = _mm512_set1_ps(f32::from_bits(*at.add(128)));
                acc[c] = _mm512_fmadd_ps(block, dx, acc[c]);
            }
        }
        for c in 0..C {
            *out.get_unchecked_mut(c) = _mm512_reduce_add_ps(acc[c]);
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn q8_0(w: &[u8], x: &Q8Row) -> f32 {
        row_dot!(w, x, 34, 128.0, |b0, b1| q8_0_pair(b0, b1), |b| {
            _mm256_xor_si256(
                _mm256_loadu_si256(b.add(2) as *const __m256i),
                _mm256_set1_epi8(-128),
            )
        })
    }
}

/// The dot product of one weight row with one activation row.
type DotFn = fn(&[u8], &Q8Row) -> f32;

/// One weight row against several activation rows (`out[c]` for `xs[c]`), each result equal
/// to the type's best [`DotFn`] for that row alone.
type RowsFn = fn(w: &[u8], xs: &[Q8Row], out: &mut [f32]);

/// The rows kernel of `t` where this CPU's best dot product has one.
fn best_rows(t: BlockType) -> Option<RowsFn> {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() && !has_avx512_vnni() {
        // SAFETY: as for the dot products in `kernels`: AVX2, FMA and F16C were detected, and
        // `run` checks that rows hold whole blocks of this type.
        return match t {
            BlockType::Q4_0 => Some(|w, xs, o| unsafe { avx2::q4_0_rows(w, xs, o) }),
            BlockType::Q5_0 => Some(|w, xs, o| unsafe { avx2::q5_0_rows(w, xs, o) }),
            BlockType::Q8_0 => Some(|w, xs, o| unsafe { avx2::q8_0_rows(w, xs, o) }),
            _ => None,
        };
    }
    let _ = t;
    None
}

/// One weight row against every activation row (`out[c]` for `xs[c]`).
/// `cols`: the packed activation rows (one every `stride` words, see [`pack_q8_k`]), at least
/// `out.len()` of them.
type ManyFn = fn(w: &[u8], cols: &[u32], stride: usize, out: &mut [f32]);

/// Runs a `C`-row kernel over packed activation rows (`stride` words apart), `width` outputs
/// per row: in groups of 16 where `sixteen` (the weight block is widened once per group), then
/// of 8, then one smaller group (the kernels keep registers per row, so `C` is a constant).
#[cfg(target_arch = "x86_64")]
macro_rules! in_groups {
    ($module:ident :: $kernel:ident, $w:expr, $cols:expr, $stride:expr, $out:expr,
     width: $width:expr, sixteen: $sixteen:expr) => {{
        let (w, cols, stride, out): (&[u8], &[u32], usize, &mut [f32]) = ($w, $cols, $stride, $out);
        let width: usize = $width;
        let n = out.len() / width;
        assert!(cols.len() >= n * stride);
        let base = cols.as_ptr();
        let mut c0 = 0;
        while $sixteen && c0 + 16 <= n {
            let o = &mut out[c0 * width..(c0 + 16) * width];
            $module::$kernel::<16>(w, base.add(c0 * stride), stride, o);
            c0 += 16;
        }
        while c0 < n {
            let len = (n - c0).min(8);
            let (at, o) = (
                base.add(c0 * stride),
                &mut out[c0 * width..(c0 + len) * width],
            );
            match len {
                8 => $module::$kernel::<8>(w, at, stride, o),
                7 => $module::$kernel::<7>(w, at, stride, o),
                6 => $module::$kernel::<6>(w, at, stride, o),
                5 => $module::$kernel::<5>(w, at, stride, o),
                4 => $module::$kernel::<4>(w, at, stride, o),
                3 => $module::$kernel::<3>(w, at, stride, o),
                2 => $module::$kernel::<2>(w, at, stride, o),
                _ => $module::$kernel::<1>(w, at, stride, o),
            }
            c0 += len;
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use in_groups;

/// The many-row kernel for `t` with rows of `k` values in GGUF order, where this CPU has one
/// (AVX-512 VNNI; Q4_K, Q6_K).
fn many_rows_kernel(t: BlockType, k: usize) -> Option<ManyFn> {
    if !k.is_multiple_of(2 * QK) || !has_avx512_vnni() || !MANY_ROWS.load(Ordering::Relaxed) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    match t {
        // SAFETY: AVX-512 F/BW/VL/VNNI were detected; rows hold whole blocks, and `cols`
        // holds `out.len()` rows of `pack_q8_k` (checked in `in_groups!`).
        BlockType::Q6K => {
            return Some(|w, c, s, o| unsafe {
                in_groups!(avx512::q6k_rows, w, c, s, o, width: 1, sixteen: true)
            })
        }
        BlockType::Q4K => {
            return Some(|w, c, s, o| unsafe {
                in_groups!(avx512::q4k_rows, w, c, s, o, width: 1, sixteen: true)
            })
        }
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = t;
    // Q4_0, Q5_0 and Q8_0 have theirs in the interleaved layout (`crate::interleaved`).
    None
}

static MANY_ROWS: AtomicBool = AtomicBool::new(true);

/// Turns the many-row kernels off (tests of the paths other CPUs take) or back on.
pub fn set_many_rows_kernels(on: bool) {
    MANY_ROWS.store(on, Ordering::Relaxed);
}

/// Whether many rows of `x` through a `t` matrix with rows of `k` have a blocked kernel here
/// (otherwise long prefills are better served by widening the weight to f32 for gemm).
pub fn has_many_rows_kernel(t: BlockType, k: usize) -> bool {
    many_rows_kernel(t, k).is_some()
}

/// Whether `t` has a rows kernel here (one weight row against a few activation rows at once).
pub fn has_rows_kernel(t: BlockType) -> bool {
    best_rows(t).is_some()
}

fn portable_dot(t: BlockType) -> DotFn {
    match t {
        BlockType::Q4_0 => portable::q4_0,
        BlockType::Q5_0 => portable::q5_0,
        BlockType::Q8_0 => portable::q8_0,
        BlockType::Q4K => portable::q4k,
        BlockType::Q6K => portable::q6k,
        BlockType::Q4_1 => portable::q4_1,
        BlockType::Q5_1 => portable::q5_1,
    }
}

/// The kernels quantized weights run with on this CPU, for the load log.
pub fn kernel_path() -> &'static str {
    if has_avx512_vnni() {
        "avx512-vnni tiles"
    } else if has_avx2() {
        "avx2"
    } else {
        "portable"
    }
}

pub(crate) fn has_avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| {
            has_avx2()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVX2.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Every kernel for `t` that this CPU can run, slowest first.
fn kernels(t: BlockType) -> Vec<(&'static str, DotFn)> {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut found: Vec<(&'static str, DotFn)> = vec![("portable", portable_dot(t))];
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time; `run` checks that rows hold
        // whole blocks and the activations were quantized for this type, so every pointer
        // read stays inside a block (prefetches may point past it; they never fault).
        // Q4_1 and Q5_1 have none: on AVX-512 VNNI CPUs they run in tiles.
        let avx2: Option<DotFn> = match t {
            BlockType::Q4_0 => Some(|w, x| unsafe { avx2::q4_0(w, x) }),
            BlockType::Q5_0 => Some(|w, x| unsafe { avx2::q5_0(w, x) }),
            BlockType::Q8_0 => Some(|w, x| unsafe { avx2::q8_0(w, x) }),
            BlockType::Q4K => Some(|w, x| unsafe { avx2::q4k(w, x) }),
            BlockType::Q6K => Some(|w, x| unsafe { avx2::q6k(w, x) }),
            BlockType::Q4_1 | BlockType::Q5_1 => None,
        };
        found.extend(avx2.map(|f| ("avx2", f)));
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx512_vnni() {
        // SAFETY: as above, with AVX-512 F/BW/VL/VNNI detected too.
        match t {
            BlockType::Q4_0 => found.push(("avx512", |w, x| unsafe { avx512::q4_0(w, x) })),
            BlockType::Q5_0 => found.push(("avx512", |w, x| unsafe { avx512::q5_0(w, x) })),
            BlockType::Q8_0 => found.push(("avx512", |w, x| unsafe { avx512::q8_0(w, x) })),
            _ => {}
        }
    }
    found
}

fn best_dot(t: BlockType) -> DotFn {
    static BEST: std::sync::OnceLock<[DotFn; 7]> = std::sync::OnceLock::new();
    let best = BEST.get_or_init(|| {
        let pick = |t| kernels(t).last().map(|k| k.1).unwrap_or(portable_dot(t));
        [
            pick(BlockType::Q4_0),
            pick(BlockType::Q5_0),
            pick(BlockType::Q8_0),
            pick(BlockType::Q4K),
            pick(BlockType::Q6K),
            pick(BlockType::Q4_1),
            pick(BlockType::Q5_1),
        ]
    });
    best[t as usize]
}

/// One quantized weight matrix: `rows` rows of `k / block_values` blocks of type `kind`, in
/// GGUF order or, where `interleaved`, in tiles of 16 rows (see [`crate::interleaved`]).
#[derive(Clone, Copy)]
pub struct QuantMatrix<'a> {
    pub kind: BlockType,
    pub data: &'a [u8],
    pub rows: usize,
    pub interleaved: bool,
}

/// How one matrix's rows are computed.
#[derive(Clone, Copy)]
enum Kernel<'a> {
    /// GGUF order: a dot product per output, or a many-row kernel over packed activations.
    Rows(DotFn, Option<(ManyFn, &'a [u32], usize)>, Option<RowsFn>),
    /// Tiles of 16 rows against packed activations (`interleaved::pack`).
    Tiles(crate::interleaved::GroupFn, &'a [u32], usize),
}

/// Quantizes every row of `x` (in parallel for prompts).
fn quantize_rows(x: &[f32], k: usize, f: fn(&[f32]) -> Q8Row) -> Vec<Q8Row> {
    if x.len() / k >= 8 {
        x.par_chunks_exact(k).map(f).collect()
    } else {
        x.chunks_exact(k).map(f).collect()
    }
}

fn run(
    dot: impl Fn(BlockType) -> DotFn,
    many: impl Fn(BlockType) -> Option<ManyFn>,
    rows: impl Fn(BlockType) -> Option<RowsFn>,
    x: &[f32],
    m: usize,
    k: usize,
    mats: &[QuantMatrix<'_>],
) -> Vec<f32> {
    use crate::interleaved;
    assert_eq!(x.len(), m * k);
    for w in mats {
        let t = w.kind;
        assert!(
            k.is_multiple_of(t.block_values()),
            "{t:?} weight with rows of {k}"
        );
        assert_eq!(
            w.data.len(),
            w.rows * k / t.block_values() * t.block_bytes(),
            "{t:?} weight of {} rows of {k}",
            w.rows
        );
    }
    let is_k = |w: &QuantMatrix| matches!(w.kind, BlockType::Q4K | BlockType::Q6K);
    let tiles: Vec<Option<interleaved::GroupFn>> = mats
        .iter()
        .map(|w| match w.interleaved {
            true => Some(interleaved::kernel(w.kind).expect("interleaved without a kernel")),
            false => None,
        })
        .collect();
    // Tiles must not straddle two tasks, nor a matrix boundary.
    let granule = if tiles.iter().any(Option::is_some) {
        let mut start = 0;
        for w in mats {
            assert!(start % interleaved::ROWS == 0, "tiles after {start} rows");
            start += w.rows;
        }
        interleaved::ROWS
    } else {
        1
    };
    let quantized = |wanted: bool, f: fn(&[f32]) -> Q8Row| match wanted {
        true => quantize_rows(x, k, f),
        false => Vec::new(),
    };
    let q8_0 = quantized(
        mats.iter().any(|w| !is_k(w) && !w.interleaved),
        quantize_q8_0,
    );
    let q8_k = quantized(mats.iter().any(is_k), quantize_q8_k);
    // The many-row and tile kernels read every activation row at a fixed stride from one
    // buffer, so that one pointer serves all rows of a group (registers are their limit).
    let many: Vec<Option<ManyFn>> = mats
        .iter()
        .map(|w| {
            if m > 1 && !w.interleaved {
                many(w.kind)
            } else {
                None
            }
        })
        .collect();
    let q8_k_packed = match mats.iter().zip(&many).any(|(w, f)| f.is_some() && is_k(w)) {
        true => pack_q8_k(&q8_k),
        false => (Vec::new(), 0),
    };
    let tiles_packed = match granule > 1 {
        true => interleaved::quantize(x, k),
        false => (Vec::new(), 0),
    };
    // Per matrix: its first output row, bytes per row, kernel and activations.
    let mut parts = Vec::with_capacity(mats.len());
    let mut start = 0;
    for ((w, many), tiles) in mats.iter().zip(many).zip(tiles) {
        let row_bytes = k / w.kind.block_values() * w.kind.block_bytes();
        let kernel = match tiles {
            Some(f) => Kernel::Tiles(f, &tiles_packed.0, tiles_packed.1),
            None => {
                let many = many.map(|f| (f, q8_k_packed.0.as_slice(), q8_k_packed.1));
                Kernel::Rows(dot(w.kind), many, rows(w.kind))
            }
        };
        let xs = if is_k(w) { &q8_k } else { &q8_0 };
        parts.push((start, row_bytes, kernel, xs.as_slice(), w.data));
        start += w.rows;
    }
    // Tasks of whole tiles, taken in turn by whichever thread is free; each writes its rows'
    // outputs straight into `[m, n]` (a tile's 16 outputs per activation row are contiguous).
    let n = start;
    let rows_per_task = (n / (rayon::current_num_threads() * 8))
        .clamp(8, 256)
        .next_multiple_of(granule);
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let dst = crate::cpu_matmul::SharedOut(out.as_mut_ptr());
    let tasks = n.div_ceil(rows_per_task);
    (0..tasks).into_par_iter().with_max_len(1).for_each_init(
        Vec::new,
        |scratch: &mut Vec<f32>, task| {
            let first = task * rows_per_task;
            let rows = rows_per_task.min(n - first);
            // Activation rows in blocks that stay in L1/L2 while this task's weight rows pass
            // over them (a long prompt's activations would not).
            for c0 in (0..m).step_by(COLUMN_BLOCK) {
                let c1 = (c0 + COLUMN_BLOCK).min(m);
                let mut r = 0;
                while r < rows {
                    let row_index = first + r;
                    let p = parts.partition_point(|part| part.0 <= row_index) - 1;
                    let (row0, row_bytes, kernel, xs, data) = parts[p];
                    let at = (row_index - row0) * row_bytes;
                    let (width, written) = match kernel {
                        Kernel::Rows(dot, many, rows) => {
                            let row = &data[at..at + row_bytes];
                            scratch.resize(c1 - c0, 0f32);
                            match (many, rows) {
                                (Some((many, cols, stride)), _) => {
                                    many(row, &cols[c0 * stride..], stride, scratch)
                                }
                                (None, Some(rows)) => rows(row, &xs[c0..c1], scratch),
                                (None, None) => {
                                    for (x, o) in xs[c0..c1].iter().zip(scratch.iter_mut()) {
                                        *o = dot(row, x);
                                    }
                                }
                            }
                            (1, &scratch[..])
                        }
                        Kernel::Tiles(group, cols, stride) => {
                            let g = interleaved::ROWS;
                            scratch.resize(g * (c1 - c0), 0f32);
                            group(
                                &data[at..at + g * row_bytes],
                                &cols[c0 * stride..],
                                stride,
                                scratch,
                            );
                            (g, &scratch[..])
                        }
                    };
                    for (c, outs) in written.chunks_exact(width).enumerate() {
                        let to = (c0 + c) * n + row_index;
                        // SAFETY: `to + width <= m * n`, and tasks own disjoint row ranges
                        // `first..first + rows` of every output row, so no two writes alias.
                        unsafe { std::ptr::copy_nonoverlapping(outs.as_ptr(), dst.at(to), width) };
                    }
                    r += width;
                }
            }
        },
    );
    // SAFETY: the tasks cover rows `0..n`, each writing all `m` of its outputs.
    unsafe { out.set_len(m * n) };
    out
}

/// `x`: `[m, k]` f32; `mats`: matrices reading the same `x`. Returns `[m, Σ rows]`, each
/// matrix's outputs after the previous one's (a fused projection), in one parallel pass.
/// `k` must be a multiple of every matrix's block value count.
pub fn matmul_t(x: &[f32], m: usize, k: usize, mats: &[QuantMatrix<'_>]) -> Vec<f32> {
    matmul_t_with(x, m, k, mats, true)
}

/// [`matmul_t`], with the many-row kernels allowed or not: without them every row of `x` takes
/// the one-row kernel's exact sums (rows that are separate sequences of a batch).
pub(crate) fn matmul_t_with(
    x: &[f32],
    m: usize,
    k: usize,
    mats: &[QuantMatrix<'_>],
    many_rows: bool,
) -> Vec<f32> {
    let many = |t| many_rows.then(|| many_rows_kernel(t, k)).flatten();
    run(best_dot, many, best_rows, x, m, k, mats)
}

/// Asserts that `got` equals `want` to `bound` of `want`'s largest magnitude (the kernels sum
/// the same exact integer block products in different orders).
#[cfg(test)]
pub(crate) fn assert_close(got: &[f32], want: &[f32], bound: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    for (i, (g, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - e).abs() <= bound * scale,
            "{what} [{i}]: {g} vs {e} (scale {scale})"
        );
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use candle_core::quantized::{QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    const TYPES: [(GgmlDType, BlockType); 7] = [
        (GgmlDType::Q4_0, BlockType::Q4_0),
        (GgmlDType::Q5_0, BlockType::Q5_0),
        (GgmlDType::Q8_0, BlockType::Q8_0),
        (GgmlDType::Q4K, BlockType::Q4K),
        (GgmlDType::Q6K, BlockType::Q6K),
        (GgmlDType::Q4_1, BlockType::Q4_1),
        (GgmlDType::Q5_1, BlockType::Q5_1),
    ];

    /// Against candle's block dot products (the GGML reference arithmetic): the same integers,
    /// summed in another order, so equal to f32 rounding.
    #[test]
    fn every_block_type_matches_candle_in_every_code_path() -> TestResult {
        // 288 values: an odd number of 32-blocks (the paired kernels' tail), which candle's
        // Q5_0 refuses; there the portable kernel, checked against candle above, is the reference.
        for (m, k, n) in [(3, 512, 37), (2, 288, 11)] {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0 + ((i % 7) as f32 - 3.0) * 0.01)
                .collect();
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0)
                .collect();
            let wt = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu)?;
            for (dtype, t) in TYPES {
                if k % t.block_values() != 0 {
                    continue;
                }
                let q = std::sync::Arc::new(QTensor::quantize(&wt, dtype)?);
                let data = q.data()?;
                let mat = QuantMatrix {
                    kind: t,
                    data: &data,
                    rows: n,
                    interleaved: false,
                };
                for mm in [1, m] {
                    let want: Vec<f32> = if k == 512 {
                        QMatMul::from_arc(q.clone())?
                            .forward(&xt.narrow(0, 0, mm)?)?
                            .flatten_all()?
                            .to_vec1()?
                    } else {
                        run(
                            portable_dot,
                            |_| None,
                            |_| None,
                            &x[..mm * k],
                            mm,
                            k,
                            &[mat],
                        )
                    };
                    // Candle rounds Q4_1's and Q5_1's activation sums in f16 in another order
                    // than llama.cpp (whose order Hearth follows).
                    let bound = match t {
                        BlockType::Q4_1 | BlockType::Q5_1 if k == 512 => 2e-3,
                        _ => 1e-5,
                    };
                    for (path, kernel) in kernels(t) {
                        println!("{t:?}: {path} kernel, k={k}, m={mm}");
                        let got = run(|_| kernel, |_| None, |_| None, &x[..mm * k], mm, k, &[mat]);
                        assert_close(&got, &want, bound, &format!("{t:?} {path} k={k} m={mm}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The rows kernels (a batch's decoding rows) give each row exactly what the one-row dot
    /// product gives it: batching must not change a sequence's tokens.
    #[test]
    fn rows_kernels_equal_the_one_row_kernel_bit_for_bit() -> TestResult {
        let (k, n) = (288, 7);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 29 % 89) as f32 - 44.0) / 40.0)
            .collect();
        let wt = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
        let mut checked = 0;
        for (dtype, t) in TYPES {
            let Some(rows) = best_rows(t) else {
                continue;
            };
            let q = QTensor::quantize(&wt, dtype)?;
            let data = q.data()?;
            let mat = QuantMatrix {
                kind: t,
                data: &data,
                rows: n,
                interleaved: false,
            };
            for m in [1, 3, 4, 9] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0 + (i % 5) as f32 * 0.013)
                    .collect();
                let alone = run(best_dot, |_| None, |_| None, &x, m, k, &[mat]);
                let batched = run(best_dot, |_| None, |_| Some(rows), &x, m, k, &[mat]);
                assert_eq!(alone, batched, "{t:?} m={m}");
            }
            checked += 1;
        }
        // Which CPUs have rows kernels: AVX2 without AVX-512 VNNI (there tiles batch rows).
        println!("rows kernels checked for {checked} block types on this CPU");
        Ok(())
    }

    /// The many-row kernels (prefill) against the one-row dot products, for row counts that
    /// make full groups of 16 and 8 and a remainder.
    #[test]
    fn many_row_kernels_match_the_one_row_kernels() -> TestResult {
        let found: Vec<BlockType> = TYPES
            .iter()
            .map(|&(_, t)| t)
            .filter(|&t| many_rows_kernel(t, 256).is_some())
            .collect();
        // AVX-512 VNNI CPUs have them for the K-quants; elsewhere there is nothing to compare.
        println!("many-row kernels on this CPU: {found:?}");
        let (k, n) = (256, 13);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 29 % 89) as f32 - 44.0) / 40.0)
            .collect();
        let wt = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
        for (dtype, t) in TYPES {
            let Some(many) = many_rows_kernel(t, k) else {
                continue;
            };
            let q = QTensor::quantize(&wt, dtype)?;
            let data = q.data()?;
            let mat = QuantMatrix {
                kind: t,
                data: &data,
                rows: n,
                interleaved: false,
            };
            for m in [2, 8, 11, 35] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 11 % 37) as f32 - 18.0) / 5.0)
                    .collect();
                let one = run(best_dot, |_| None, |_| None, &x, m, k, &[mat]);
                let got = run(best_dot, |_| Some(many), |_| None, &x, m, k, &[mat]);
                assert_close(&got, &one, 1e-5, &format!("{t:?} m={m}"));
            }
        }
        Ok(())
    }

    /// Matrices of several types fused into one pass give each matrix's own outputs, side by
    /// side, for every row of `x`.
    #[test]
    fn fused_matrices_equal_their_separate_products() -> TestResult {
        let (m, k) = (2, 256);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let shapes = [
            (GgmlDType::Q5_0, 19usize),
            (GgmlDType::Q6K, 8),
            (GgmlDType::Q8_0, 5),
        ];
        let mut quantized: Vec<(BlockType, Vec<u8>, usize)> = vec![];
        for (dtype, n) in shapes {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7 % 23) as f32 - 11.0) / 13.0)
                .collect();
            let t = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
            let q = QTensor::quantize(&t, dtype)?;
            let kind = BlockType::of(dtype).ok_or("no kernel for the type")?;
            quantized.push((kind, q.data()?.into_owned(), n));
        }
        let mats: Vec<QuantMatrix> = quantized
            .iter()
            .map(|(kind, data, rows)| QuantMatrix {
                kind: *kind,
                data,
                rows: *rows,
                interleaved: false,
            })
            .collect();
        let fused = matmul_t(&x, m, k, &mats);
        let total: usize = mats.iter().map(|w| w.rows).sum();
        assert_eq!(fused.len(), m * total);
        let mut col = 0;
        for w in &mats {
            let alone = matmul_t(&x, m, k, &[*w]);
            for i in 0..m {
                for j in 0..w.rows {
                    assert_eq!(
                        fused[i * total + col + j],
                        alone[i * w.rows + j],
                        "{:?} row {i} col {j}",
                        w.kind
                    );
                }
            }
            col += w.rows;
        }
        Ok(())
    }
}
