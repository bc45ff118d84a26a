//! 64-bit ARM with the dot-product extension: the portable kernels' arithmetic (the same block
//! unpacking, the same f32 expressions in the same order), with each block's integer sums
//! taken by `sdot` (four 4-byte dot products per instruction) instead of the compiler's
//! widening multiplies. Integer sums are exact, so every result equals the portable level's
//! bit for bit, and the kernel tests compare them so.

use crate::kernels::blocks::Q8Row;
use crate::kernels::portable::{self, Block, IntDot};
use std::arch::aarch64::*;
use std::arch::asm;

/// `acc + Σ` of each lane's four byte products (`sdot`; its intrinsic is not stable Rust yet).
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

pub(crate) struct Sdot;
impl IntDot for Sdot {
    #[inline(always)]
    unsafe fn dot(a: &[i8], b: &[i8]) -> i32 {
        debug_assert!(a.len() == b.len() && a.len() % 16 == 0);
        let mut acc = vdupq_n_s32(0);
        for (a, b) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
            acc = sdot(acc, vld1q_s8(a.as_ptr()), vld1q_s8(b.as_ptr()));
        }
        vaddvq_s32(acc)
    }
}

/// [`portable::dot_row`] with `sdot`.
///
/// # Safety
/// The CPU has NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn dot_row<B: Block>(w: &[u8], x: &Q8Row) -> f32 {
    portable::dot_row::<B, Sdot>(w, x)
}

/// [`portable::rows`] with `sdot`.
///
/// # Safety
/// The CPU has NEON and the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn rows<B: Block>(w: &[u8], rows: usize, xs: &[Q8Row], out: &mut [f32]) {
    portable::rows::<B, Sdot>(w, rows, xs, out)
}
