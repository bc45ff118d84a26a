//! The AVX-512 VNNI tile kernels of Q4_K and Q5_K.

use crate::kernels::blocks::K_WORDS;
use crate::kernels::tile_layout::{prefetch_part, ROWS};
use crate::kernels::tiles_q4k::{block_layout, FIFTHS, SCALES, VALUES};
use crate::kernels::x86::tiles::avx512::bit_to_4;
use std::arch::x86_64::*;

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q4k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    k4::<C, false>(w, cols, stride, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q5k<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    k4::<C, true>(w, cols, stride, out)
}

/// The tile kernel: 16 rows per vector; each sub-block's `vpdpbusd` sums are multiplied by
/// the rows' scales in 32 bits (the same integers AVX2 forms in 16-bit pairs).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
unsafe fn k4<const C: usize, const FIFTH: bool>(
    w: &[u8],
    cols: *const u32,
    stride: usize,
    out: &mut [f32],
) {
    let tile_bytes = ROWS * block_layout(FIFTH).0;
    let blocks = stride / K_WORDS;
    assert!(w.len() >= blocks * tile_bytes && out.len() >= C * ROWS);
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); C];
    let mut wide = [[_mm512_setzero_si512(); 2]; 8];
    for b in 0..blocks {
        let tile = w.as_ptr().add(b * tile_bytes);
        let mut s = [_mm512_setzero_si512(); C];
        for j in 0..4 {
            prefetch_part(tile, tile_bytes, j, 4);
            let nibbles = |g: usize| {
                let v = _mm512_loadu_si512(tile.add(VALUES + 64 * (8 * j + g)) as _);
                let q = [
                    _mm512_and_si512(v, m4),
                    _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                ];
                if !FIFTH {
                    return q;
                }
                let bits = _mm512_loadu_si512(tile.add(FIFTHS + 64 * g) as _);
                [
                    _mm512_or_si512(q[0], bit_to_4(bits, 2 * j, 0x10)),
                    _mm512_or_si512(q[1], bit_to_4(bits, 2 * j + 1, 0x10)),
                ]
            };
            if C > 1 {
                for g in 0..8 {
                    wide[g] = nibbles(g);
                }
            }
            let scale = |s: usize| {
                let bytes = _mm_loadu_si128(tile.add(SCALES + 16 * s) as *const __m128i);
                _mm512_and_si512(_mm512_cvtepu8_epi32(bytes), _mm512_set1_epi32(63))
            };
            let scales = [scale(2 * j), scale(2 * j + 1)];
            for c in 0..C {
                let y = cols.add(c * stride + b * K_WORDS + 16 * j);
                let mut dots = [_mm512_setzero_si512(); 2];
                for g in 0..8 {
                    let q = if C > 1 { wide[g] } else { nibbles(g) };
                    for e in 0..2 {
                        let ys = _mm512_set1_epi32(*y.add(8 * e + g) as i32);
                        dots[e] = _mm512_dpbusd_epi32(dots[e], q[e], ys);
                    }
                }
                for e in 0..2 {
                    s[c] = _mm512_add_epi32(s[c], _mm512_mullo_epi32(dots[e], scales[e]));
                }
            }
        }
        let mut mins = [_mm512_setzero_si512(); 4];
        for (p, mins) in mins.iter_mut().enumerate() {
            let (even, odd) = super::avx2::min_bytes(tile, p);
            let rows = _mm256_set_m128i(_mm_unpackhi_epi8(even, odd), _mm_unpacklo_epi8(even, odd));
            *mins = _mm512_cvtepu8_epi16(rows);
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile as *const __m256i));
        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(tile.add(32) as *const __m256i));
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let dy = _mm512_set1_ps(f32::from_bits(*at.add(128)));
            let mut m = _mm512_setzero_si512();
            for (p, mins) in mins.iter().enumerate() {
                let sums = _mm512_set1_epi32(*at.add(129 + p) as i32);
                m = _mm512_add_epi32(m, _mm512_madd_epi16(*mins, sums));
            }
            let scaled = _mm512_cvtepi32_ps(s[c]);
            acc[c] = _mm512_fmadd_ps(scaled, _mm512_mul_ps(d, dy), acc[c]);
            let m = _mm512_cvtepi32_ps(m);
            acc[c] = _mm512_fnmadd_ps(m, _mm512_mul_ps(dmin, dy), acc[c]);
        }
    }
    for c in 0..C {
        _mm512_storeu_ps(out.as_mut_ptr().add(c * ROWS), acc[c]);
    }
}
