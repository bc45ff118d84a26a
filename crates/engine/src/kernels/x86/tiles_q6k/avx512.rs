//! The AVX-512 VNNI tile kernel of Q6_K.

use crate::kernels::blocks::K_WORDS;
use crate::kernels::tile_layout::{prefetch_part_ahead, ROWS};
use crate::kernels::tiles_q6k::{HIGH, LOW, SCALES, SUMS16, TILE};
use std::arch::x86_64::*;

/// The top two bits of group `16i + k` (from its high-bit vector `bits`) at bits 4-5.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn top_bits(bits: __m512i, i: usize) -> __m512i {
    crate::kernels::x86::tiles::avx512::bit_to_4(bits, 2 * i, 0x30)
}

/// The tile kernel: 16 rows per vector; each sub-block's `vpdpbusd` sums are multiplied by
/// the rows' scales in 32 bits (the same integers AVX2 forms in 16-bit pairs).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
pub unsafe fn q6k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    let blocks = stride / K_WORDS;
    assert!(w.len() >= blocks * TILE && out.len() >= C * ROWS);
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); C];
    let mut wide = [[_mm512_setzero_si512(); 2]; 4];
    for b in 0..blocks {
        let tile = w.as_ptr().add(b * TILE);
        let mut s = [_mm512_setzero_si512(); C];
        for sb in 0..8 {
            prefetch_part_ahead(tile, 2 * TILE, TILE, sb, 8);
            let values = |g: usize| {
                let k = 4 * sb + g;
                let v = _mm512_loadu_si512(tile.add(LOW + 64 * k) as _);
                let bits = _mm512_loadu_si512(tile.add(HIGH + 64 * (k % 16)) as _);
                let low = _mm512_and_si512(v, m4);
                let high = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                [
                    _mm512_or_si512(low, top_bits(bits, k / 16)),
                    _mm512_or_si512(high, top_bits(bits, 2 + k / 16)),
                ]
            };
            if C > 1 {
                for g in 0..4 {
                    wide[g] = values(g);
                }
            }
            let scale = |s: usize| {
                let bytes = _mm_loadu_si128(tile.add(SCALES + 16 * s) as *const __m128i);
                _mm512_cvtepi8_epi32(bytes)
            };
            let scales = [scale(sb), scale(sb + 8)];
            for c in 0..C {
                let y = cols.add(c * stride + b * K_WORDS + 4 * sb);
                let mut dots = [_mm512_setzero_si512(); 2];
                for g in 0..4 {
                    let q = if C > 1 { wide[g] } else { values(g) };
                    for e in 0..2 {
                        let ys = _mm512_set1_epi32(*y.add(32 * e + g) as i32);
                        dots[e] = _mm512_dpbusd_epi32(dots[e], q[e], ys);
                    }
                }
                for e in 0..2 {
                    s[c] = _mm512_add_epi32(s[c], _mm512_mullo_epi32(dots[e], scales[e]));
                }
            }
        }
        let mut pairs = [_mm512_setzero_si512(); 8];
        for (p, pairs) in pairs.iter_mut().enumerate() {
            let (rows_lo, rows_hi) = super::avx2::scale_pairs_of_rows(tile, p);
            *pairs = _mm512_cvtepi8_epi16(_mm256_set_m128i(rows_hi, rows_lo));
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile as *const __m256i));
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let dy = _mm512_set1_ps(f32::from_bits(*at.add(128)));
            let mut offset = _mm512_setzero_si512();
            for (p, pairs) in pairs.iter().enumerate() {
                let sums = _mm512_set1_epi32(*at.add(SUMS16 + p) as i32);
                offset = _mm512_add_epi32(offset, _mm512_madd_epi16(*pairs, sums));
            }
            let t = _mm512_sub_epi32(s[c], _mm512_slli_epi32::<5>(offset));
            let scale = _mm512_mul_ps(d, dy);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[c]);
        }
    }
    for c in 0..C {
        _mm512_storeu_ps(out.as_mut_ptr().add(c * ROWS), acc[c]);
    }
}
