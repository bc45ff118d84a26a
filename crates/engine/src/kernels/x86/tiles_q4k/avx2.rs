//! The AVX2 tile kernels of Q4_K and Q5_K.

use crate::kernels::blocks::K_WORDS;
use crate::kernels::tile_layout::{prefetch_part, ROWS};
use crate::kernels::tiles_q4k::{block_layout, FIFTHS, MINS, SCALES, VALUES};
use crate::kernels::x86::tiles::avx2::bit_to_4;
use std::arch::x86_64::*;

/// Each row's scale of sub-block `s` in both 16-bit halves of its 32-bit lane, rows `8h..8h
/// + 8`: multiplying pairs of 16-bit sums by it (`madd`) widens and scales them at once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_pairs(tile: *const u8, s: usize, h: usize) -> __m256i {
    let bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(tile.add(SCALES + 16 * s) as _));
    let r = 8 * h as i8;
    let lane = |i: i8| i32::from_le_bytes([(r + i) as u8, 0x80, (r + i) as u8, 0x80]);
    let pick = _mm256_setr_epi32(
        lane(0),
        lane(1),
        lane(2),
        lane(3),
        lane(4),
        lane(5),
        lane(6),
        lane(7),
    );
    _mm256_and_si256(_mm256_shuffle_epi8(bytes, pick), _mm256_set1_epi16(63))
}

/// Minimums `2p` and `2p + 1` of the 16 rows as bytes: (even, odd).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn min_bytes(tile: *const u8, p: usize) -> (__m128i, __m128i) {
    let load = |at: usize| _mm_loadu_si128(tile.add(at) as *const __m128i);
    let (low, even, odd) = (
        load(MINS + 16 * p),
        load(SCALES + 32 * p),
        load(SCALES + 32 * p + 16),
    );
    let (m4, top) = (_mm_set1_epi8(15), _mm_set1_epi8(0x30));
    // Bits 6-7 of a scale byte to bits 4-5 (what a 16-bit shift brings in is masked off).
    let high = |v: __m128i| _mm_and_si128(_mm_srli_epi16(v, 2), top);
    (
        _mm_or_si128(_mm_and_si128(low, m4), high(even)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(low, 4), m4), high(odd)),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q4k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    k4::<C, false>(w, cols, stride, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q5k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    k4::<C, true>(w, cols, stride, out)
}

/// The tile kernel: per row `C` activation rows, two halves of 8 weight rows. One
/// activation row (decoding) loads each vector where it is used; more rows widen each
/// sub-block pair once for all. A group's `maddubs` pair sums (at most 2·15·128, or
/// 2·31·128 with fifth bits) are added over the sub-block's 8 groups (4 with fifth bits) in
/// 16 bits before one `madd` by the scales widens them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
unsafe fn k4<const C: usize, const FIFTH: bool>(
    w: &[u8],
    cols: *const u32,
    stride: usize,
    out: &mut [f32],
) {
    let tile_bytes = ROWS * block_layout(FIFTH).0;
    let fold = if FIFTH { 4 } else { 8 };
    let blocks = stride / K_WORDS;
    assert!(w.len() >= blocks * tile_bytes && out.len() >= C * ROWS);
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); 2]; C];
    let mut wide = [[[_mm256_setzero_si256(); 2]; 8]; 2];
    for b in 0..blocks {
        let tile = w.as_ptr().add(b * tile_bytes);
        let mut s = [[_mm256_setzero_si256(); 2]; C];
        for j in 0..4 {
            prefetch_part(tile, tile_bytes, j, 4);
            let nibbles = |g: usize, h: usize| {
                let v = _mm256_loadu_si256(tile.add(VALUES + 64 * (8 * j + g) + 32 * h) as _);
                let q = [
                    _mm256_and_si256(v, m4),
                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                ];
                if !FIFTH {
                    return q;
                }
                let bits = _mm256_loadu_si256(tile.add(FIFTHS + 64 * g + 32 * h) as _);
                [
                    _mm256_or_si256(q[0], bit_to_4(bits, 2 * j, 0x10)),
                    _mm256_or_si256(q[1], bit_to_4(bits, 2 * j + 1, 0x10)),
                ]
            };
            if C > 1 {
                for h in 0..2 {
                    for g in 0..8 {
                        wide[h][g] = nibbles(g, h);
                    }
                }
            }
            let scales = [
                [scale_pairs(tile, 2 * j, 0), scale_pairs(tile, 2 * j, 1)],
                [
                    scale_pairs(tile, 2 * j + 1, 0),
                    scale_pairs(tile, 2 * j + 1, 1),
                ],
            ];
            for c in 0..C {
                let y = cols.add(c * stride + b * K_WORDS + 16 * j);
                let mut folded = [[_mm256_setzero_si256(); 2]; 2];
                for g in 0..8 {
                    let ys = [
                        _mm256_set1_epi32(*y.add(g) as i32),
                        _mm256_set1_epi32(*y.add(8 + g) as i32),
                    ];
                    for h in 0..2 {
                        let q = if C > 1 { wide[h][g] } else { nibbles(g, h) };
                        for e in 0..2 {
                            let pairs = _mm256_maddubs_epi16(q[e], ys[e]);
                            folded[e][h] = _mm256_add_epi16(folded[e][h], pairs);
                        }
                    }
                    if g % fold == fold - 1 {
                        for e in 0..2 {
                            for h in 0..2 {
                                let scaled = _mm256_madd_epi16(folded[e][h], scales[e][h]);
                                s[c][h] = _mm256_add_epi32(s[c][h], scaled);
                                folded[e][h] = _mm256_setzero_si256();
                            }
                        }
                    }
                }
            }
        }
        // Minimums as (2p, 2p + 1) 16-bit pairs per row, against the activations' sums of
        // sub-blocks 2p and 2p + 1 (one word).
        let mut mins = [[_mm256_setzero_si256(); 4]; 2];
        for p in 0..4 {
            let (even, odd) = min_bytes(tile, p);
            mins[0][p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(even, odd));
            mins[1][p] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(even, odd));
        }
        let half = |p: *const u8| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
        let d = [half(tile), half(tile.add(16))];
        let dmin = [half(tile.add(32)), half(tile.add(48))];
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let dy = _mm256_set1_ps(f32::from_bits(*at.add(128)));
            for h in 0..2 {
                let mut m = _mm256_setzero_si256();
                for p in 0..4 {
                    let sums = _mm256_set1_epi32(*at.add(129 + p) as i32);
                    m = _mm256_add_epi32(m, _mm256_madd_epi16(mins[h][p], sums));
                }
                let scaled = _mm256_cvtepi32_ps(s[c][h]);
                acc[c][h] = _mm256_fmadd_ps(scaled, _mm256_mul_ps(d[h], dy), acc[c][h]);
                let m = _mm256_cvtepi32_ps(m);
                acc[c][h] = _mm256_fnmadd_ps(m, _mm256_mul_ps(dmin[h], dy), acc[c][h]);
            }
        }
    }
    for c in 0..C {
        for h in 0..2 {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * ROWS + 8 * h), acc[c][h]);
        }
    }
}
