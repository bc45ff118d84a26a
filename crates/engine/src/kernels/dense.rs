//! `y = x · Wᵀ` on the CPU for few rows of `x` (decode and short prefills), with the weight in
//! f32, bf16 or f16 and the activations in f32.
//!
//! Why not candle's matmul: at batch 1 the product is a matrix-vector product bound by memory
//! bandwidth, and candle has no bf16 CPU matmul — it converts the whole weight to f32 on every
//! call. Here each thread streams its own block of weight rows once, widening bf16 to f32 in
//! registers, and the dot products are compiled for AVX-512 and AVX2, run at the level
//! [`super::cpu`] chose (plain Rust elsewhere).

use half::{bf16, f16};

/// A weight matrix `[n, k]`, row-major, borrowed from a tensor's storage.
#[derive(Clone, Copy)]
pub enum WeightRows<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

pub(crate) trait Elem: Copy + Send + Sync {
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
pub(crate) struct Outputs<'a> {
    pub(crate) dst: &'a SharedOut,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) first: usize,
    pub(crate) rows: usize,
}

impl Outputs<'_> {
    /// The output of weight row `first + r` for activation row `i`.
    #[inline(always)]
    pub(crate) fn set(&self, r: usize, i: usize, v: f32) {
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

pub(crate) type BlockFn = fn(&[f32], usize, usize, WeightRows<'_>, &Outputs<'_>);

// Inlined into each target-feature wrapper below, so that it is compiled for those features.
#[inline(always)]
pub(crate) fn block_portable(x: &[f32], m: usize, k: usize, w: WeightRows<'_>, out: &Outputs<'_>) {
    match w {
        WeightRows::F32(w) => block(x, m, k, w, out),
        WeightRows::Bf16(w) => block(x, m, k, w, out),
        WeightRows::F16(w) => block(x, m, k, w, out),
    }
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
