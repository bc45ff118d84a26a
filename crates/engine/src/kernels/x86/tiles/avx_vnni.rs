//! AVX-512 VNNI's Q8_0 kernel on 256-bit vectors, for CPUs with AVX-VNNI and no AVX-512: each
//! 64-byte group vector is two halves of 8 rows, each a `vpdpbusd` (the same integers and the
//! same f32 operations per row, so the same outputs bit for bit). Where AVX2 needs a sign, a
//! `maddubs`, a `madd` and an add per group and half (Q8_0's 16-bit pair sums cannot be
//! folded), this is one instruction, and measured well ahead of AVX2's. The 4- and 5-bit
//! types measured no faster with it than with AVX2's folded `maddubs`, so they keep AVX2's
//! kernels (figures: docs/benchmarks.md, "Kernel choices").

use crate::kernels::blocks::BlockType;
use crate::kernels::tile_layout::prefetch;
use crate::kernels::tiles::{tile_bytes, BLOCK_WORDS, ROWS};
use std::arch::x86_64::*;

/// Q8_0 tiles against packed activation rows, one half tile (8 rows' unsigned bytes, 8
/// vectors) at a time, kept in registers while every activation row passes. Word 11 of an
/// activation block holds `-128·Σy` for the bytes' `+128`; each row's sum runs in two
/// chains, so that its dependent products overlap.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn q8_0<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    let tb = tile_bytes(BlockType::Q8_0);
    let blocks = stride / BLOCK_WORDS;
    assert!(w.len() >= blocks * tb && out.len() >= C * ROWS);
    let mut acc = [[_mm256_setzero_ps(); 2]; C];
    for b in 0..blocks {
        let tile = w.as_ptr().add(b * tb);
        prefetch(tile, tb);
        for h in 0..2 {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(tile.add(16 * h) as *const __m128i));
            let q = [0, 1, 2, 3, 4, 5, 6, 7]
                .map(|g| _mm256_loadu_si256(tile.add(32 + 64 * g + 32 * h) as *const __m256i));
            for (c, acc) in acc.iter_mut().enumerate() {
                let y = cols.add(c * stride + b * BLOCK_WORDS);
                let word = |i: usize| _mm256_set1_epi32(*y.add(i) as i32);
                let (mut even, mut odd) = (word(11), _mm256_setzero_si256());
                for g in (0..8).step_by(2) {
                    even = _mm256_dpbusd_avx_epi32(even, q[g], word(g));
                    odd = _mm256_dpbusd_avx_epi32(odd, q[g + 1], word(g + 1));
                }
                let sum = _mm256_cvtepi32_ps(_mm256_add_epi32(even, odd));
                let d = _mm256_mul_ps(dw, _mm256_set1_ps(f32::from_bits(*y.add(8))));
                acc[h] = _mm256_fmadd_ps(sum, d, acc[h]);
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr().add(c * ROWS), acc[0]);
        _mm256_storeu_ps(out.as_mut_ptr().add(c * ROWS + 8), acc[1]);
    }
}
