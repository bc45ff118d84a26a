//! Keys and values in llama.cpp's q8_0 and q4_0 blocks: rows of the KV cache quantized as they
//! are written, as llama.cpp's reference quantizers do (the same bytes for the same floats).

use super::cache_type::{CacheType, QK};
use half::f16;

/// Appends `x` (whole blocks of [`QK`]) to `out` in `ty`'s blocks.
pub fn quantize_row(ty: CacheType, x: &[f32], out: &mut Vec<u8>) {
    for block in x.chunks(QK) {
        match ty {
            CacheType::Q4_0 => q4_0(block, out),
            _ => q8_0(block, out),
        }
    }
}

/// An f16 scale `amax / 127` and each value over it, rounded half away from zero.
fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// An f16 scale `max / -8` (the value of largest magnitude, with its sign) and each value over
/// it plus 8, in four bits: value `j` in the low half of byte `j`, value `j + 16` in the high.
fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let max = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
    let half = x.len() / 2;
    out.extend((0..half).map(|j| q(x[j]) | (q(x[j + half]) << 4)));
}

/// The values of `blocks` (whole blocks of `ty`) into `out`: scale × value, exact in f32.
pub fn dequantize(ty: CacheType, blocks: &[u8], out: &mut [f32]) {
    match ty {
        CacheType::Q4_0 => {
            for (b, o) in blocks.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                let (lo, hi) = o.split_at_mut(QK / 2);
                for ((q, l), h) in b[2..].iter().zip(lo).zip(hi) {
                    *l = ((q & 15) as i32 - 8) as f32 * d;
                    *h = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        _ => {
            for (b, o) in blocks.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                for (q, o) in b[2..].iter().zip(o) {
                    *o = (*q as i8) as f32 * d;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trips stay within half a step of each block's scale (q4_0: a step, as the value
    /// opposite the block's extreme can go one step past the 15 levels), zeros stay zeros.
    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 29) as f32 - 14.0) / 3.0)
            .collect();
        for (ty, steps, bound) in [(CacheType::Q8_0, 127.0, 0.5), (CacheType::Q4_0, 8.0, 1.0)] {
            let mut q = vec![];
            quantize_row(ty, &x, &mut q);
            assert_eq!(q.len(), ty.row_bytes(64));
            let mut back = vec![0f32; 64];
            dequantize(ty, &q, &mut back);
            for (block, out) in x.chunks(QK).zip(back.chunks(QK)) {
                let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
                let step = amax / steps;
                for (a, b) in block.iter().zip(out) {
                    assert!((a - b).abs() <= step * bound + 1e-3, "{ty:?}: {a} → {b}");
                }
            }
            let mut z = vec![];
            quantize_row(ty, &[0.0; 32], &mut z);
            let mut back = [1f32; 32];
            dequantize(ty, &z, &mut back);
            assert!(back.iter().all(|&v| v == 0.0), "{ty:?}");
        }
    }

    /// The bytes llama.cpp's `quantize_row_q8_0_ref` and `quantize_row_q4_0_ref` give.
    #[test]
    fn blocks_are_llama_cpp_s() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
        let mut q8 = vec![];
        quantize_row(CacheType::Q8_0, &x, &mut q8);
        // amax 21: d = 21/127, q = round(x · 127/21).
        assert_eq!(
            f16::from_le_bytes([q8[0], q8[1]]),
            f16::from_f32(21.0 / 127.0)
        );
        assert_eq!((q8[2] as i8, q8[12] as i8, q8[33] as i8), (-60, 0, 127));
        let mut q4 = vec![];
        quantize_row(CacheType::Q4_0, &x, &mut q4);
        // max 21 (positive): d = -21/8; x = -10 → (int)(-10 · -8/21 + 8.5) = 12.
        assert_eq!(
            f16::from_le_bytes([q4[0], q4[1]]),
            f16::from_f32(-21.0 / 8.0)
        );
        assert_eq!(q4[2] & 15, 12);
        // x[16] = 6 → (int)(6 · -8/21 + 8.5) = 6; x[31] = 21 → 0.
        assert_eq!((q4[2] >> 4, q4[17] >> 4), (6, 0));
    }
}
