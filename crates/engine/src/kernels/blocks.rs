//! GGUF's block formats and the 8-bit activation rows the quantized kernels multiply them with
//! (llama.cpp's Q8_0 and Q8_K).

use candle_core::quantized::GgmlDType;
use half::f16;

pub(crate) const QK: usize = 32;
/// How far ahead of the block being read the kernels ask for the weight's cache lines: the
/// hardware prefetcher alone leaves these loops waiting on memory.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH: usize = 4096;
pub(crate) const QK_K: usize = 256;
/// Words per block in [`pack_q8_k`]'s rows: 64 of values, 64 of offsets, the scale, sums, padding.
pub(crate) const K_WORDS: usize = 144;
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
    Q5K,
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
            GgmlDType::Q5K => Self::Q5K,
            _ => return None,
        })
    }

    /// Values per block.
    pub fn block_values(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 | Self::Q4_1 | Self::Q5_1 => QK,
            Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
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
            Self::Q5K => 176, // as Q4_K, then 32 bytes of fifth bits before the nibbles
        }
    }
}

/// One row of activations quantized to 8 bits: per block a scale, the values, and (Q8_K) the
/// sums of each 16 values, which the K-quants' minimums and offsets need.
pub struct Q8Row {
    pub d: Vec<f32>,
    pub qs: Vec<i8>,
    /// Q8_K: sums of each 16 values.
    pub bsums: Vec<i16>,
    /// Q8_0: sums of each block's 32 values.
    pub sums: Vec<i32>,
    /// Q8_0: each block's `d·Σ` rounded to f16, as llama.cpp's Q8_1 activations store it (what
    /// Q4_1's and Q5_1's minimums multiply).
    pub d_sums: Vec<f32>,
}

/// Rounds to the nearest integer, ties to even (as the SIMD conversions do), for `|v| < 2²²`:
/// adding 1.5·2²³ leaves no fraction bits. Plain adds, so the loop vectorises.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// Q8_0: per 32 values, scale = max|x| / 127 rounded through f16 (as it is stored in llama.cpp).
pub fn quantize_q8_0(x: &[f32]) -> Q8Row {
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
        d_sums: d
            .iter()
            .zip(&sums)
            .map(|(&d, &s)| f16::from_f32(d * s as f32).to_f32())
            .collect(),
        d,
        qs,
        bsums: Vec::new(),
        sums,
    }
}

/// Q8_K: per 256 values, the value of largest magnitude maps to -127, scale kept in f32; at the
/// active level, which every level gives bit for bit.
pub fn quantize_q8_k(x: &[f32]) -> Q8Row {
    quantize_q8_k_at(super::cpu::active(), x)
}

/// [`quantize_q8_k`] at `level` (capped at what this CPU runs).
pub(crate) fn quantize_q8_k_at(level: super::CpuLevel, x: &[f32]) -> Q8Row {
    #[cfg(target_arch = "x86_64")]
    let level = level.min(super::cpu::detected());
    let blocks = x.len() / QK_K;
    let mut d = vec![0f32; blocks];
    let mut qs = vec![0i8; x.len()];
    let mut bsums = vec![0i16; x.len() / 16];
    for (((xs, qs), bsums), d) in x
        .chunks_exact(QK_K)
        .zip(qs.chunks_exact_mut(QK_K))
        .zip(bsums.chunks_exact_mut(QK_K / 16))
        .zip(&mut d)
    {
        // SAFETY (each level's arm): its features were detected; `xs` and `qs` are a block long.
        match level {
            #[cfg(target_arch = "x86_64")]
            super::CpuLevel::Avx512 => unsafe {
                let Some(max) = super::avx512::largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                super::avx512::quantize_q8_k(xs, *d, qs)
            },
            #[cfg(target_arch = "x86_64")]
            super::CpuLevel::Avx2 => unsafe {
                let Some(max) = super::avx2::largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                super::avx2::quantize_q8_k(xs, *d, qs)
            },
            _ => {
                let Some(max) = largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                for (q, v) in qs.iter_mut().zip(xs) {
                    *q = (*d * v).round().clamp(-128.0, 127.0) as i8;
                }
            }
        }
        for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        // The scale from the inverse the values were rounded with, as llama.cpp derives it.
        *d = 1.0 / *d;
    }
    Q8Row {
        d,
        qs,
        bsums,
        sums: Vec::new(),
        d_sums: Vec::new(),
    }
}

/// The first of the values of largest magnitude (NaNs skipped), or `None` where all are zero.
fn largest(xs: &[f32]) -> Option<f32> {
    let amax = xs
        .iter()
        .fold(0f32, |m, v| if m < v.abs() { v.abs() } else { m });
    if amax == 0.0 {
        return None;
    }
    xs.iter().copied().find(|v| v.abs() == amax)
}

/// Q8_K rows packed for the K-quant tile and many-row kernels: row after row, per block
/// [`K_WORDS`] words: the 256 values, then per 64 values 16 i32 lanes holding `-32 ×` each 16-value sum
/// in lane 4j (Q6_K's offset, folded into the integer sums), the scale (f32 bits), the eight
/// 32-value sums (i16 pairs, Q4_K's minimums), 3 words of padding, the sixteen 16-value sums
/// (i16 pairs, Q6_K's offset in tiles). Returns the buffer and the words per row.
pub(crate) fn pack_q8_k(rows: &[Q8Row]) -> (Vec<u32>, usize) {
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
            packed.extend([0u32; 3]);
            packed.extend(
                sums16
                    .chunks_exact(2)
                    .map(|p| p[0] as u16 as u32 | (p[1] as u16 as u32) << 16),
            );
        }
    }
    (packed, stride)
}

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The 6-bit scale and minimum of sub-block `j` (of 8) of a Q4_K/Q5_K block.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (i32, i32) {
    if j < 4 {
        ((s[j] & 63) as i32, (s[j + 4] & 63) as i32)
    } else {
        (
            ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4)) as i32,
            ((s[j + 4] >> 4) | ((s[j] >> 6) << 4)) as i32,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q8_K rows are the portable loop's at every level this CPU runs, bit for bit: values half
    /// way between integers (away from zero, as `f32::round`), the first of two values of one
    /// magnitude, zero, NaN, infinite and subnormal blocks.
    #[test]
    fn q8_k_quantizes_the_same_at_every_level() {
        let mut x: Vec<f32> = (0..8 * QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        x[..QK_K].fill(0.0);
        let ties = &mut x[QK_K..2 * QK_K];
        let halves = [2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5];
        for (i, v) in ties.iter_mut().enumerate() {
            *v = halves[i % halves.len()];
        }
        ties[7] = -127.0; // the scale becomes exactly 1
        x[2 * QK_K + 3] = -60.0; // the first of the two: the scale's sign
        x[2 * QK_K + 10] = 60.0;
        x[3 * QK_K + 5] = f32::NAN;
        x[3 * QK_K + 6] = f32::NAN;
        x[4 * QK_K + 9] = f32::INFINITY;
        x[5 * QK_K..6 * QK_K].fill(1e-42);
        x[5 * QK_K + 100] = -3e-42;
        x[6 * QK_K..7 * QK_K].fill(f32::NAN);
        let want = quantize_q8_k_at(super::super::CpuLevel::Portable, &x);
        assert_eq!(want.qs[QK_K..QK_K + 8], [3, -3, 1, -1, 2, -2, 127, -127]);
        assert!(want.d[2] > 0.0, "the scale of -60 first is positive");
        assert!(want.qs[3 * QK_K + 5] == 0 && want.d[6] == 0.0);
        for level in super::super::cpu::runnable() {
            let got = quantize_q8_k_at(level, &x);
            let bits = |r: &Q8Row| r.d.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "scales at {level}");
            let differ = got.qs.iter().zip(&want.qs).position(|(g, w)| g != w);
            assert_eq!(differ, None, "the first value that differs at {level}");
            assert_eq!(got.bsums, want.bsums, "sums at {level}");
        }
    }
}
