//! The AVX2 tile kernel of Q6_K.

use crate::kernels::blocks::K_WORDS;
use crate::kernels::tile_layout::{prefetch_part_ahead, ROWS};
use crate::kernels::tiles_q6k::{HIGH, LOW, SCALES, SUMS16, TILE};
use std::arch::x86_64::*;

/// The top two bits of group `16i + k` (from its high-bit vector `bits`) at bits 4-5.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn top_bits(bits: __m256i, i: usize) -> __m256i {
    crate::kernels::x86::tiles::avx2::bit_to_4(bits, 2 * i, 0x30)
}

/// Each row's (sign-extended) scale of sub-block `s` in both 16-bit halves of its 32-bit
/// lane, rows `8h..8h + 8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_pairs(tile: *const u8, s: usize, h: usize) -> __m256i {
    let bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(tile.add(SCALES + 16 * s) as _));
    let r = 8 * h as u8;
    let lane = |i: u8| i32::from_le_bytes([0x80, r + i, 0x80, r + i]);
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
    _mm256_srai_epi16(_mm256_shuffle_epi8(bytes, pick), 8)
}

/// Scales `2p` and `2p + 1` of the 16 rows as sign-extended 16-bit pairs, rows 0-7 and
/// 8-15.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scale_pairs_of_rows(tile: *const u8, p: usize) -> (__m128i, __m128i) {
    let even = _mm_loadu_si128(tile.add(SCALES + 32 * p) as *const __m128i);
    let odd = _mm_loadu_si128(tile.add(SCALES + 32 * p + 16) as *const __m128i);
    (_mm_unpacklo_epi8(even, odd), _mm_unpackhi_epi8(even, odd))
}

/// The tile kernel: per row `C` activation rows, two halves of 8 weight rows; per pair of
/// sub-blocks `sb` and `sb + 8`, four low-nibble vectors and their high bits. Two groups'
/// `maddubs` pair sums (each at most 2·63·127) are added in 16 bits before one `madd` by
/// the scales widens them.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
pub unsafe fn q6k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    let blocks = stride / K_WORDS;
    assert!(w.len() >= blocks * TILE && out.len() >= C * ROWS);
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); 2]; C];
    let mut wide = [[[_mm256_setzero_si256(); 2]; 4]; 2];
    for b in 0..blocks {
        let tile = w.as_ptr().add(b * TILE);
        let mut s = [[_mm256_setzero_si256(); 2]; C];
        for sb in 0..8 {
            prefetch_part_ahead(tile, 2 * TILE, TILE, sb, 8);
            // Groups 4sb + g (sub-block sb, low nibbles) and 32 + 4sb + g (sub-block sb + 8).
            let values = |g: usize, h: usize| {
                let k = 4 * sb + g;
                let v = _mm256_loadu_si256(tile.add(LOW + 64 * k + 32 * h) as _);
                let bits = _mm256_loadu_si256(tile.add(HIGH + 64 * (k % 16) + 32 * h) as _);
                let low = _mm256_and_si256(v, m4);
                let high = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                [
                    _mm256_or_si256(low, top_bits(bits, k / 16)),
                    _mm256_or_si256(high, top_bits(bits, 2 + k / 16)),
                ]
            };
            if C > 1 {
                for h in 0..2 {
                    for g in 0..4 {
                        wide[h][g] = values(g, h);
                    }
                }
            }
            let scales = [
                [scale_pairs(tile, sb, 0), scale_pairs(tile, sb, 1)],
                [scale_pairs(tile, sb + 8, 0), scale_pairs(tile, sb + 8, 1)],
            ];
            for c in 0..C {
                let y = cols.add(c * stride + b * K_WORDS + 4 * sb);
                for pair in 0..2 {
                    let mut folded = [[_mm256_setzero_si256(); 2]; 2];
                    for g in 2 * pair..2 * pair + 2 {
                        let ys = [
                            _mm256_set1_epi32(*y.add(g) as i32),
                            _mm256_set1_epi32(*y.add(32 + g) as i32),
                        ];
                        for h in 0..2 {
                            let q = if C > 1 { wide[h][g] } else { values(g, h) };
                            for e in 0..2 {
                                let pairs = _mm256_maddubs_epi16(q[e], ys[e]);
                                folded[e][h] = _mm256_add_epi16(folded[e][h], pairs);
                            }
                        }
                    }
                    for e in 0..2 {
                        for h in 0..2 {
                            let scaled = _mm256_madd_epi16(folded[e][h], scales[e][h]);
                            s[c][h] = _mm256_add_epi32(s[c][h], scaled);
                        }
                    }
                }
            }
        }
        // The values' offset of 32: 32 · Σ_s scale_s · Σy_s, from (2p, 2p + 1) pairs.
        let mut pairs = [[_mm256_setzero_si256(); 8]; 2];
        for p in 0..8 {
            let (rows_lo, rows_hi) = scale_pairs_of_rows(tile, p);
            pairs[0][p] = _mm256_cvtepi8_epi16(rows_lo);
            pairs[1][p] = _mm256_cvtepi8_epi16(rows_hi);
        }
        let d = [
            _mm256_cvtph_ps(_mm_loadu_si128(tile as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(tile.add(16) as *const __m128i)),
        ];
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let dy = _mm256_set1_ps(f32::from_bits(*at.add(128)));
            for h in 0..2 {
                let mut offset = _mm256_setzero_si256();
                for p in 0..8 {
                    let sums = _mm256_set1_epi32(*at.add(SUMS16 + p) as i32);
                    offset = _mm256_add_epi32(offset, _mm256_madd_epi16(pairs[h][p], sums));
                }
                let t = _mm256_sub_epi32(s[c][h], _mm256_slli_epi32::<5>(offset));
                let scale = _mm256_mul_ps(d[h], dy);
                acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), scale, acc[c][h]);
            }
        }
    }
    for c in 0..C {
        for h in 0..2 {
            _mm256_storeu_ps(out.as_mut_ptr().add(c * ROWS + 8 * h), acc[c][h]);
        }
    }
}
