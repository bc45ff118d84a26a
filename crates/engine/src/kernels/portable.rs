//! Plain-Rust dot products of weight rows with quantized activation rows: the reference every
//! SIMD path is tested against, and the path of CPUs without one.
//!
//! Each block type unpacks a weight block into signed bytes once ([`Block::unpack`]) and then
//! scales its exact integer sums with one activation row ([`Block::sum`]). The one-row kernels
//! and the rows kernels (a block unpacked once for many activation rows, what prompts take)
//! call the same two functions in the same order, so a prompt's row sums are decoding's, bit
//! for bit.

use super::blocks::*;

/// One weight block unpacked: its values as signed bytes, its integer sub-block scales and
/// minimums, and its f16 scales as f32.
pub(crate) struct Unpacked {
    v: [i8; QK_K],
    scales: [i32; 16],
    mins: [i32; 8],
    d: f32,
    m: f32,
}

impl Unpacked {
    /// The block's values as unpacked (Q6_K's with its offset of 32 taken off).
    pub(crate) fn values(&self) -> &[i8; QK_K] {
        &self.v
    }

    pub(crate) fn new() -> Self {
        Self {
            v: [0; QK_K],
            scales: [0; 16],
            mins: [0; 8],
            d: 0.0,
            m: 0.0,
        }
    }
}

/// `Σ a·b` over byte slices of equal length, a multiple of 16: exact, so every
/// implementation gives the same integer.
pub(crate) trait IntDot {
    /// # Safety
    /// The CPU has the features the implementation is compiled for.
    unsafe fn dot(a: &[i8], b: &[i8]) -> i32;
}

/// Plain Rust (vectorised by the compiler for the build target).
pub(crate) struct Plain;
impl IntDot for Plain {
    #[inline(always)]
    unsafe fn dot(a: &[i8], b: &[i8]) -> i32 {
        a.iter().zip(b).map(|(&a, &b)| a as i32 * b as i32).sum()
    }
}

/// A GGUF block type as the portable kernels read it.
pub(crate) trait Block {
    const BYTES: usize;
    fn unpack(blk: &[u8], u: &mut Unpacked);
    /// Block `b`'s share of the dot product with `x`; by default `value = d·q` with 32 values
    /// per block (Q4_0, Q5_0, Q8_0).
    ///
    /// # Safety
    /// As [`IntDot::dot`] for `D`.
    #[inline(always)]
    unsafe fn sum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
        D::dot(&u.v[..QK], &x.qs[b * QK..(b + 1) * QK]) as f32 * u.d * x.d[b]
    }
}

/// Q4_1/Q5_1: `value = d·q + m` with unsigned q, so a block gives `d·dy·Σq·y + m·dy·Σy`,
/// `dy·Σy` rounded to f16 as llama.cpp's Q8_1 activations store it ([`Q8Row::d_sums`]).
#[inline(always)]
unsafe fn with_minimum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
    let s = D::dot(&u.v[..QK], &x.qs[b * QK..(b + 1) * QK]);
    x.d[b] * s as f32 * u.d + u.m * x.d_sums[b]
}

pub(crate) struct Q4_0;
impl Block for Q4_0 {
    const BYTES: usize = 18;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        u.d = f16_at(blk, 0);
        for j in 0..16 {
            u.v[j] = (blk[2 + j] & 0x0F) as i8 - 8;
            u.v[j + 16] = (blk[2 + j] >> 4) as i8 - 8;
        }
    }
}

pub(crate) struct Q5_0;
impl Block for Q5_0 {
    const BYTES: usize = 22;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        u.d = f16_at(blk, 0);
        let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
        for j in 0..16 {
            let lo = (blk[6 + j] & 0x0F) | (((qh >> j) & 1) as u8) << 4;
            let hi = (blk[6 + j] >> 4) | (((qh >> (j + 16)) & 1) as u8) << 4;
            u.v[j] = lo as i8 - 16;
            u.v[j + 16] = hi as i8 - 16;
        }
    }
}

pub(crate) struct Q8_0;
impl Block for Q8_0 {
    const BYTES: usize = 34;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        u.d = f16_at(blk, 0);
        for (v, &q) in u.v[..QK].iter_mut().zip(&blk[2..]) {
            *v = q as i8;
        }
    }
}

pub(crate) struct Q4_1;
impl Block for Q4_1 {
    const BYTES: usize = 20;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        (u.d, u.m) = (f16_at(blk, 0), f16_at(blk, 2));
        for j in 0..16 {
            u.v[j] = (blk[4 + j] & 0x0F) as i8;
            u.v[j + 16] = (blk[4 + j] >> 4) as i8;
        }
    }
    #[inline(always)]
    unsafe fn sum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
        with_minimum::<D>(u, x, b)
    }
}

pub(crate) struct Q5_1;
impl Block for Q5_1 {
    const BYTES: usize = 24;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        (u.d, u.m) = (f16_at(blk, 0), f16_at(blk, 2));
        let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
        for j in 0..16 {
            u.v[j] = ((blk[8 + j] & 0x0F) | (((qh >> j) & 1) as u8) << 4) as i8;
            u.v[j + 16] = ((blk[8 + j] >> 4) | (((qh >> (j + 16)) & 1) as u8) << 4) as i8;
        }
    }
    #[inline(always)]
    unsafe fn sum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
        with_minimum::<D>(u, x, b)
    }
}

/// Q4_K (`FIFTH` false) and Q5_K (true): four chunks of 64 values, the low nibbles of 32
/// bytes then their high nibbles, each sub-block of 32 with a 6-bit scale and minimum; Q5_K's
/// fifth bit of value `l` of sub-block `j` is bit `j` of `qh[l]`.
pub(crate) struct K4<const FIFTH: bool>;
pub(crate) type Q4K = K4<false>;
pub(crate) type Q5K = K4<true>;

impl<const FIFTH: bool> Block for K4<FIFTH> {
    const BYTES: usize = if FIFTH { 176 } else { 144 };
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        (u.d, u.m) = (f16_at(blk, 0), f16_at(blk, 2));
        let scales = &blk[4..16];
        let (qh, qs) = match FIFTH {
            true => (&blk[16..48], &blk[48..176]),
            false => (&blk[0..0], &blk[16..144]),
        };
        for j in 0..8 {
            (u.scales[j], u.mins[j]) = scale_min_k4(j, scales);
            let (q, shift) = (&qs[(j / 2) * 32..(j / 2 + 1) * 32], 4 * (j % 2));
            for l in 0..32 {
                let high = if FIFTH { ((qh[l] >> j) & 1) << 4 } else { 0 };
                u.v[j * 32 + l] = (((q[l] >> shift) & 0x0F) | high) as i8;
            }
        }
    }

    #[inline(always)]
    unsafe fn sum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
        let (d, dmin) = (u.d * x.d[b], u.m * x.d[b]);
        let xq = &x.qs[b * QK_K..(b + 1) * QK_K];
        let bsums = &x.bsums[b * 16..(b + 1) * 16];
        let (mut sum_q, mut sum_m) = (0i32, 0i32);
        for j in 0..8 {
            sum_q += u.scales[j] * D::dot(&u.v[j * 32..(j + 1) * 32], &xq[j * 32..(j + 1) * 32]);
            sum_m += u.mins[j] * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
        }
        d * sum_q as f32 - dmin * sum_m as f32
    }
}

/// Q6_K: two halves of 128 values, each from 64 bytes of low nibbles and 32 of high bits;
/// an i8 scale per 16 values.
pub(crate) struct Q6K;
impl Block for Q6K {
    const BYTES: usize = 210;
    #[inline(always)]
    fn unpack(blk: &[u8], u: &mut Unpacked) {
        u.d = f16_at(blk, 208);
        for (s, &b) in u.scales.iter_mut().zip(&blk[192..208]) {
            *s = b as i8 as i32;
        }
        for h in 0..2 {
            let (ql, qh) = (
                &blk[h * 64..(h + 1) * 64],
                &blk[128 + h * 32..128 + (h + 1) * 32],
            );
            let v = &mut u.v[h * 128..(h + 1) * 128];
            for l in 0..32 {
                v[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
                v[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                v[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                v[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
    }
    #[inline(always)]
    unsafe fn sum<D: IntDot>(u: &Unpacked, x: &Q8Row, b: usize) -> f32 {
        let xq = &x.qs[b * QK_K..(b + 1) * QK_K];
        let sum: i32 = (0..16)
            .map(|g| u.scales[g] * D::dot(&u.v[g * 16..(g + 1) * 16], &xq[g * 16..(g + 1) * 16]))
            .sum();
        u.d * x.d[b] * sum as f32
    }
}

/// One weight row (whole blocks of `B`) against one activation row.
///
/// # Safety
/// As [`IntDot::dot`] for `D`.
#[inline(always)]
pub(crate) unsafe fn dot_row<B: Block, D: IntDot>(w: &[u8], x: &Q8Row) -> f32 {
    let mut u = Unpacked::new();
    let mut sumf = 0f32;
    for (b, blk) in w.chunks_exact(B::BYTES).enumerate() {
        B::unpack(blk, &mut u);
        sumf += B::sum::<D>(&u, x, b);
    }
    sumf
}

/// Activation rows per pass over a weight row (their sums stay in registers or L1).
const COLUMNS: usize = 16;

/// `rows` weight rows against every row of `xs`: `out[c * rows + r]`, each equal to
/// [`dot_row`] for that pair, bit for bit (the same block sums added in the same order).
///
/// # Safety
/// As [`IntDot::dot`] for `D`.
#[inline(always)]
pub(crate) unsafe fn rows<B: Block, D: IntDot>(
    w: &[u8],
    rows: usize,
    xs: &[Q8Row],
    out: &mut [f32],
) {
    let row_bytes = w.len() / rows.max(1);
    let mut u = Unpacked::new();
    for r in 0..rows {
        let row = &w[r * row_bytes..(r + 1) * row_bytes];
        for c0 in (0..xs.len()).step_by(COLUMNS) {
            let group = &xs[c0..(c0 + COLUMNS).min(xs.len())];
            let mut acc = [0f32; COLUMNS];
            for (b, blk) in row.chunks_exact(B::BYTES).enumerate() {
                B::unpack(blk, &mut u);
                for (a, x) in acc.iter_mut().zip(group) {
                    *a += B::sum::<D>(&u, x, b);
                }
            }
            for (c, a) in acc.iter().take(group.len()).enumerate() {
                out[(c0 + c) * rows + r] = *a;
            }
        }
    }
}
