//! Plain-Rust dot products of one weight row with one quantized activation row: the reference
//! every SIMD path is tested against, and the path of CPUs without one.

use super::blocks::*;

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
/// `dy·Σy` rounded to f16 as llama.cpp's Q8_1 activations store it ([`Q8Row::d_sums`]).
fn with_minimum(w: &[u8], x: &Q8Row, bytes: usize, q: impl Fn(&[u8], usize) -> i32) -> f32 {
    let mut sumf = 0f32;
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let xq = &x.qs[b * QK..(b + 1) * QK];
        let s: i32 = (0..QK).map(|i| q(blk, i) * xq[i] as i32).sum();
        sumf += x.d[b] * s as f32 * f16_at(blk, 0) + f16_at(blk, 2) * x.d_sums[b];
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

/// Q4_K and Q5_K: four chunks of 64 values, the low nibbles of 32 bytes then their high
/// nibbles, each sub-block of 32 with a 6-bit scale and minimum; Q5_K's fifth bit of value
/// `l` of sub-block `j` is bit `j` of `qh[l]`.
fn k4(w: &[u8], x: &Q8Row, bytes: usize, fifth: bool) -> f32 {
    let mut sumf = 0f32;
    for (b, blk) in w.chunks_exact(bytes).enumerate() {
        let (d, dmin) = (f16_at(blk, 0) * x.d[b], f16_at(blk, 2) * x.d[b]);
        let scales = &blk[4..16];
        let (qh, qs) = match fifth {
            true => (&blk[16..48], &blk[48..176]),
            false => (&blk[0..0], &blk[16..144]),
        };
        let xq = &x.qs[b * QK_K..(b + 1) * QK_K];
        let bsums = &x.bsums[b * 16..(b + 1) * 16];
        let (mut sum_q, mut sum_m) = (0i32, 0i32);
        for c in 0..4 {
            let q = &qs[c * 32..(c + 1) * 32];
            for (half, shift) in [(0usize, 0u32), (1, 4)] {
                let j = 2 * c + half;
                let (sc, m) = scale_min_k4(j, scales);
                let y = &xq[j * 32..(j + 1) * 32];
                let dot: i32 = (0..32)
                    .map(|l| {
                        let high = if fifth { ((qh[l] >> j) & 1) << 4 } else { 0 };
                        (((q[l] >> shift) & 0x0F) | high) as i32 * y[l] as i32
                    })
                    .sum();
                sum_q += sc * dot;
                sum_m += m * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
            }
        }
        sumf += d * sum_q as f32 - dmin * sum_m as f32;
    }
    sumf
}

pub fn q4k(w: &[u8], x: &Q8Row) -> f32 {
    k4(w, x, 144, false)
}

pub fn q5k(w: &[u8], x: &Q8Row) -> f32 {
    k4(w, x, 176, true)
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
