//! The AVX-512 VNNI tile kernels of Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 (one `vpdpbusd` per group
//! of 16 rows), the activation rows' quantizer, and the fifth-bit shuffle at 512 bits.

use crate::kernels::blocks::BlockType;
use crate::kernels::tile_layout::prefetch;
use crate::kernels::tiles::{block_words, tile_bytes, BLOCK_WORDS, QK, ROWS};
use std::arch::x86_64::*;

/// The kernel body: `$widen(tile)` gives the tile's 8 vectors of unsigned values, `$off`
/// the activation word with the matching `-offset·Σy`.
macro_rules! group_kernel {
    ($name:ident, $t:expr, $off:expr, $mins:expr, |$tile:ident| $widen:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
        pub unsafe fn $name<const C: usize>(
            w: &[u8],
            cols: *const u32,
            stride: usize,
            out: &mut [f32],
        ) {
            let tb = tile_bytes($t);
            let blocks = stride / BLOCK_WORDS;
            assert!(w.len() >= blocks * tb && out.len() >= C * ROWS);
            let mut acc = [_mm512_setzero_ps(); C];
            for b in 0..blocks {
                let $tile = w.as_ptr().add(b * tb);
                prefetch($tile, tb);
                let dw = _mm512_cvtph_ps(_mm256_loadu_si256($tile as *const __m256i));
                let mw = match $mins {
                    true => _mm512_cvtph_ps(_mm256_loadu_si256($tile.add(32) as *const __m256i)),
                    false => _mm512_setzero_ps(),
                };
                let q: [__m512i; 8] = $widen;
                for c in 0..C {
                    let y = cols.add(c * stride + b * BLOCK_WORDS);
                    let word = |i: usize| _mm512_set1_epi32(*y.add(i) as i32);
                    let s = if C < 4 {
                        // Two chains, so that one row's eight dependent products overlap
                        // (with more rows, the rows' chains overlap one another).
                        let mut s0 = word($off);
                        let mut s1 = _mm512_setzero_si512();
                        for g in (0..8).step_by(2) {
                            s0 = _mm512_dpbusd_epi32(s0, q[g], word(g));
                            s1 = _mm512_dpbusd_epi32(s1, q[g + 1], word(g + 1));
                        }
                        _mm512_add_epi32(s0, s1)
                    } else {
                        let mut s = word($off);
                        for (g, q) in q.iter().enumerate() {
                            s = _mm512_dpbusd_epi32(s, *q, word(g));
                        }
                        s
                    };
                    let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32::from_bits(*y.add(8))));
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[c]);
                    if $mins {
                        let dy_sum = _mm512_set1_ps(f32::from_bits(*y.add(12)));
                        acc[c] = _mm512_fmadd_ps(mw, dy_sum, acc[c]);
                    }
                }
            }
            for c in 0..C {
                _mm512_storeu_ps(out.as_mut_ptr().add(c * ROWS), acc[c]);
            }
        }
    };
}

/// The 4 vectors of nibbles at `tile + 32`, widened to 8: low nibbles (groups 0-3), then
/// high nibbles (groups 4-7).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn nibbles(tile: *const u8, at: usize) -> [__m512i; 8] {
    let m4 = _mm512_set1_epi8(0x0F);
    let mut q = [_mm512_setzero_si512(); 8];
    for j in 0..4 {
        let v = _mm512_loadu_si512(tile.add(at + 64 * j) as *const _);
        q[j] = _mm512_and_si512(v, m4);
        q[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    q
}

/// One row of activations quantized and packed: per 32 values, the scale `max|x| / 127`
/// through f16, values rounded to nearest even, and the block sum's corrections.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn quantize_row(x: &[f32], out: &mut [u32]) {
    for (xs, o) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BLOCK_WORDS)) {
        let a = _mm512_loadu_ps(xs.as_ptr());
        let b = _mm512_loadu_ps(xs.as_ptr().add(16));
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        let scale = amax / 127.0;
        let inv = _mm512_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
        let qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv));
        let qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inv));
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
        let values = o.as_mut_ptr() as *mut __m128i;
        _mm_storeu_si128(values, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128(values.add(1), _mm512_cvtepi32_epi8(qb));
        block_words(o, scale, sum);
    }
}

/// Nibbles at `at`, fifth bits after them.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn five_bits(tile: *const u8, at: usize) -> [__m512i; 8] {
    let mut q = nibbles(tile, at);
    let bits = _mm512_loadu_si512(tile.add(at + 256) as *const _);
    for (g, q) in q.iter_mut().enumerate() {
        *q = _mm512_or_si512(*q, bit_to_4(bits, g, 0x10));
    }
    q
}

// Word 13 of a packed activation block is zero: Q4_1 and Q5_1 need no offset.
group_kernel!(q8_0, BlockType::Q8_0, 11, false, |tile| {
    let mut q = [_mm512_setzero_si512(); 8];
    for (g, q) in q.iter_mut().enumerate() {
        *q = _mm512_loadu_si512(tile.add(32 + 64 * g) as *const _);
    }
    q
});
group_kernel!(q4_0, BlockType::Q4_0, 9, false, |tile| nibbles(tile, 32));
group_kernel!(q5_0, BlockType::Q5_0, 10, false, |tile| five_bits(tile, 32));
group_kernel!(q4_1, BlockType::Q4_1, 13, true, |tile| nibbles(tile, 64));
group_kernel!(q5_1, BlockType::Q5_1, 13, true, |tile| five_bits(tile, 64));

/// Bit `i` of each byte of `bits` moved to bit 4, the bits of `keep` kept, as the AVX2
/// kernels do ([`super::avx2::bit_to_4`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(in crate::kernels) fn bit_to_4(bits: __m512i, i: usize, keep: i8) -> __m512i {
    let at_4 = match i {
        0 => _mm512_slli_epi16::<4>(bits),
        1 => _mm512_slli_epi16::<3>(bits),
        2 => _mm512_slli_epi16::<2>(bits),
        3 => _mm512_slli_epi16::<1>(bits),
        4 => bits,
        5 => _mm512_srli_epi16::<1>(bits),
        6 => _mm512_srli_epi16::<2>(bits),
        _ => _mm512_srli_epi16::<3>(bits),
    };
    _mm512_and_si512(at_4, _mm512_set1_epi8(keep))
}
