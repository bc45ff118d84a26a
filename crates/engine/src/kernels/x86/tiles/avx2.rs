//! The AVX2 (with FMA and F16C) tile kernels of Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1: the same
//! integers and the same f32 operations per row as AVX-512's, so the same outputs bit for bit;
//! the activation rows' quantizer; the fifth-bit shuffle the K-quants' kernels share.

use crate::kernels::blocks::BlockType;
use crate::kernels::tile_layout::prefetch;
use crate::kernels::tiles::{block_words, tile_bytes, BLOCK_WORDS, QK, ROWS};
use std::arch::x86_64::*;

/// One row of activations quantized and packed as `super::avx512::quantize_row` does, in
/// 8-lane halves: the same scale, the same rounding to nearest even, the same words.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row(x: &[f32], out: &mut [u32]) {
    let magnitude = _mm256_set1_ps(-0.0);
    // `packs` interleaves its inputs' 128-bit lanes; these put the values back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (xs, o) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BLOCK_WORDS)) {
        let v = [0, 8, 16, 24].map(|i| _mm256_loadu_ps(xs.as_ptr().add(i)));
        let a = v.map(|v| _mm256_andnot_ps(magnitude, v));
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let scale = amax / 127.0;
        let inv = _mm256_set1_ps(if scale != 0.0 { 1.0 / scale } else { 0.0 });
        let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)));
        let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
        // |q| ≤ 127: the saturating packs change nothing.
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let bytes = _mm256_permutevar8x32_epi32(bytes, order);
        _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, bytes);
        block_words(o, scale, sum);
    }
}

/// The AVX-512 kernel body in two halves of 8 rows: each 64-byte group vector is two
/// 32-byte ones, and `vpdpbusd` is `maddubs` then `madd` (the unsigned weights are at most
/// 31 and the activations at most 127 in size, so the 16-bit pair sums cannot saturate).
/// `$load` gives group `$g`, half `$h` of the tile: its unsigned values, and for Q8_0
/// (`$signed`) their magnitudes and the signed values, whose signs move onto the
/// activations (at most 128 × 127 × 2, no saturation either). One activation row
/// (decoding) loads each group where it is used; more rows widen the tile once for all.
/// `$fold` groups' 16-bit pair sums are added before one `madd` widens them: a pair of
/// 4-bit weights is at most 2 × 15 × 128 in size, so 8 fit in 16 bits; 5-bit, 4; Q8_0's, 1
/// (the same integers either way, so the outputs stay bit for bit, with nearly half the
/// multiply instructions).
macro_rules! group_kernel {
    ($name:ident, $t:expr, $off:expr, $mins:expr, $signed:expr, $fold:expr,
     |$tile:ident, $g:ident, $h:ident| $load:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
        #[allow(clippy::modulo_one)] // Q8_0 folds one group: `% 1` on purpose
        pub unsafe fn $name<const C: usize>(
            w: &[u8],
            cols: *const u32,
            stride: usize,
            out: &mut [f32],
        ) {
            let tb = tile_bytes($t);
            let blocks = stride / BLOCK_WORDS;
            assert!(w.len() >= blocks * tb && out.len() >= C * ROWS);
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_ps(); 2]; C];
            let mut wide = [[(_mm256_setzero_si256(), _mm256_setzero_si256()); 8]; 2];
            for b in 0..blocks {
                let $tile = w.as_ptr().add(b * tb);
                prefetch($tile, tb);
                let half = |p: *const u8| _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
                let dw = [half($tile), half($tile.add(16))];
                let mw = match $mins {
                    true => [half($tile.add(32)), half($tile.add(48))],
                    false => [_mm256_setzero_ps(); 2],
                };
                if C > 1 {
                    for $h in 0..2 {
                        for $g in 0..8 {
                            wide[$h][$g] = $load;
                        }
                    }
                }
                for c in 0..C {
                    let y = cols.add(c * stride + b * BLOCK_WORDS);
                    let mut s = [_mm256_set1_epi32(*y.add($off) as i32); 2];
                    let mut folded = [_mm256_setzero_si256(); 2];
                    for $g in 0..8 {
                        let yg = _mm256_set1_epi32(*y.add($g) as i32);
                        for $h in 0..2 {
                            let (q, sign) = if C > 1 { wide[$h][$g] } else { $load };
                            let yg = match $signed {
                                true => _mm256_sign_epi8(yg, sign),
                                false => yg,
                            };
                            let pairs = _mm256_maddubs_epi16(q, yg);
                            folded[$h] = match $g % $fold {
                                0 => pairs,
                                _ => _mm256_add_epi16(folded[$h], pairs),
                            };
                            if $g % $fold == $fold - 1 {
                                let wide = _mm256_madd_epi16(folded[$h], ones);
                                s[$h] = _mm256_add_epi32(s[$h], wide);
                            }
                        }
                    }
                    let dy = _mm256_set1_ps(f32::from_bits(*y.add(8)));
                    for h in 0..2 {
                        let d = _mm256_mul_ps(dw[h], dy);
                        acc[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h]), d, acc[c][h]);
                        if $mins {
                            let dy_sum = _mm256_set1_ps(f32::from_bits(*y.add(12)));
                            acc[c][h] = _mm256_fmadd_ps(mw[h], dy_sum, acc[c][h]);
                        }
                    }
                }
            }
            for c in 0..C {
                for h in 0..2 {
                    _mm256_storeu_ps(out.as_mut_ptr().add(c * ROWS + 8 * h), acc[c][h]);
                }
            }
        }
    };
}

/// Group `g` (low nibbles for 0-3, high for 4-7), half `h` of the nibbles at `tile + at`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(tile: *const u8, at: usize, g: usize, h: usize) -> (__m256i, __m256i) {
    let v = _mm256_loadu_si256(tile.add(at + 64 * (g % 4) + 32 * h) as *const __m256i);
    let v = if g < 4 { v } else { _mm256_srli_epi16(v, 4) };
    (_mm256_and_si256(v, _mm256_set1_epi8(0x0F)), v)
}

/// Nibbles at `at`, fifth bits after them (bit `g` of byte `4r+t`: rows 0-7 in the first
/// 32 bytes, rows 8-15 in the next 32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bits(tile: *const u8, at: usize, g: usize, h: usize) -> (__m256i, __m256i) {
    let (q, v) = nibbles(tile, at, g, h);
    let bits = _mm256_loadu_si256(tile.add(at + 256 + 32 * h) as *const __m256i);
    (_mm256_or_si256(q, bit_to_4(bits, g, 0x10)), v)
}

/// Q8_0's bytes (stored `+128`): magnitudes and signed values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bytes(tile: *const u8, g: usize, h: usize) -> (__m256i, __m256i) {
    let v = _mm256_loadu_si256(tile.add(32 + 64 * g + 32 * h) as *const __m256i);
    let w = _mm256_xor_si256(v, _mm256_set1_epi8(-128));
    (_mm256_sign_epi8(w, w), w)
}

// Word 15 of a packed activation block is zero: signed Q8_0 needs no offset.
group_kernel!(q8_0, BlockType::Q8_0, 15, false, true, 1, |tile, g, h| {
    bytes(tile, g, h)
});
group_kernel!(q4_0, BlockType::Q4_0, 9, false, false, 8, |tile, g, h| {
    nibbles(tile, 32, g, h)
});
group_kernel!(q5_0, BlockType::Q5_0, 10, false, false, 4, |tile, g, h| {
    five_bits(tile, 32, g, h)
});
group_kernel!(q4_1, BlockType::Q4_1, 13, true, false, 8, |tile, g, h| {
    nibbles(tile, 64, g, h)
});
group_kernel!(q5_1, BlockType::Q5_1, 13, true, false, 4, |tile, g, h| {
    five_bits(tile, 64, g, h)
});

/// The nibble-and-high-bits shuffle the tiles of Q5_0, Q5_K and Q6_K share: bit `i` of each byte of `bits` moved to bit 4, the bits of `keep` (at and above bit 4)
/// kept: a fifth bit (`keep` 0x10) or a pair of top bits (0x30) beside its nibble. 16-bit
/// shifts: what crosses into a neighbouring byte lands outside `keep`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::kernels) fn bit_to_4(bits: __m256i, i: usize, keep: i8) -> __m256i {
    let at_4 = match i {
        0 => _mm256_slli_epi16::<4>(bits),
        1 => _mm256_slli_epi16::<3>(bits),
        2 => _mm256_slli_epi16::<2>(bits),
        3 => _mm256_slli_epi16::<1>(bits),
        4 => bits,
        5 => _mm256_srli_epi16::<1>(bits),
        6 => _mm256_srli_epi16::<2>(bits),
        _ => _mm256_srli_epi16::<3>(bits),
    };
    _mm256_and_si256(at_4, _mm256_set1_epi8(keep))
}
