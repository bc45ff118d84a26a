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
    /// 32 4-bit values and an f16 scale.
    Q4_0,
    /// 32 5-bit values and an f16 scale.
    Q5_0,
    /// 32 8-bit values and an f16 scale.
    Q8_0,
    /// K-quant: 256 4-bit values in 8 sub-blocks, 6-bit scales and minimums.
    Q4K,
    /// K-quant: 256 6-bit values in 16 sub-blocks, 8-bit scales.
    Q6K,
    /// 32 4-bit values, an f16 scale and an f16 minimum.
    Q4_1,
    /// 32 5-bit values, an f16 scale and an f16 minimum.
    Q5_1,
    /// K-quant: as [`BlockType::Q4K`] with a fifth bit per value.
    Q5K,
}

impl BlockType {
    /// The block type of a GGUF tensor type, if it has kernels here.
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

    /// Bytes per block.
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
    /// Per block: the scale.
    pub d: Vec<f32>,
    /// The values, 8 bits each.
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
