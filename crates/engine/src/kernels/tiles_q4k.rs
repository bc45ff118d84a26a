//! Q4_K and Q5_K weights with 16 rows interleaved, and their AVX-512 VNNI and AVX2 kernels.
//!
//! In GGUF order a Q4_K block's eight 6-bit scales and minimums are packed in 12 bytes, and a
//! one-row kernel spends on unpacking them about what it spends on the block's 256
//! multiply-adds. A tile holds block `b` of 16 consecutive rows, with the scales unpacked per
//! sub-block across the rows, in the same 2304 bytes:
//! - bytes 0..32: the 16 f16 `d`; 32..64: the 16 f16 `dmin`;
//! - 64..192: byte `64 + 16s + r` is row `r`'s scale of sub-block `s` (6 bits), its top two
//!   bits the top two bits of the row's minimum of sub-block `s`;
//! - 192..256: byte `192 + 16p + r` holds the low 4 bits of row `r`'s minimums `2p` (low
//!   nibble) and `2p + 1` (high nibble);
//! - 256..2304: 32 vectors of 64 bytes, vector `8j + g` = bytes `32j + 4g..32j + 4g + 4` of
//!   every row's nibbles: the low nibbles are values `4g..4g + 4` of sub-block `2j`, the high
//!   ones the same values of sub-block `2j + 1`.
//!
//! A Q5_K tile (2816 bytes, 16 blocks of 176) is a Q4_K tile followed by 8 vectors of fifth
//! bits: vector `g` = bytes `4g..4g + 4` of every row's 32 bytes of fifth bits, so bit `2j` of
//! byte `4r + t` belongs to the low nibble of byte `4r + t` of value vector `8j + g`, bit `2j + 1`
//! to its high nibble.
//!
//! Per row the kernels compute `S = Σ_s scale_s · Σ q·y` and `M = Σ_s min_s · Σy` over the
//! block's eight sub-blocks as exact integers (at most 8·63·32·31·128 in size), then `d·dy·S −
//! dmin·dy·M` in the same f32 operations at every level, so AVX2 and AVX-512 agree bit for bit.
//! The activations are Q8_K rows packed by [`super::blocks::pack_q8_k`].

use super::blocks::scale_min_k4;
#[cfg(target_arch = "x86_64")]
use super::blocks::K_WORDS;
#[cfg(target_arch = "x86_64")]
use super::tile_layout::prefetch_part;
use super::tile_layout::ROWS;

const SCALES: usize = 64;
const MINS: usize = 192;
const VALUES: usize = 256;
/// Where a Q5_K tile's fifth bits start (the end of a Q4_K tile).
const FIFTHS: usize = 2304;

/// A block's bytes (Q5_K with its fifth bits, else Q4_K), and where its nibbles start.
const fn block_layout(fifth: bool) -> (usize, usize) {
    if fifth {
        (176, 48)
    } else {
        (144, 16)
    }
}

/// One group of 16 rows of `k` values, Q4_K blocks (Q5_K where `fifth`) in `data`, as tiles
/// into `out`.
pub(super) fn interleave_group(data: &[u8], k: usize, out: &mut [u8], fifth: bool) {
    let nb = k / 256;
    let (bb, qs) = block_layout(fifth);
    for (b, tile) in out.chunks_exact_mut(ROWS * bb).enumerate() {
        for r in 0..ROWS {
            let at = (r * nb + b) * bb;
            let block = &data[at..at + bb];
            tile[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            tile[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
            let unpacked: [(i32, i32); 8] = std::array::from_fn(|s| scale_min_k4(s, &block[4..16]));
            for (s, &(scale, min)) in unpacked.iter().enumerate() {
                tile[SCALES + 16 * s + r] = (scale | (min >> 4) << 6) as u8;
            }
            for p in 0..4 {
                let (lo, hi) = (unpacked[2 * p].1, unpacked[2 * p + 1].1);
                tile[MINS + 16 * p + r] = (lo & 15 | (hi & 15) << 4) as u8;
            }
            for (g, four) in block[qs..].chunks_exact(4).enumerate() {
                let at = VALUES + 64 * g + 4 * r;
                tile[at..at + 4].copy_from_slice(four);
            }
            if fifth {
                for (g, four) in block[16..48].chunks_exact(4).enumerate() {
                    let at = FIFTHS + 64 * g + 4 * r;
                    tile[at..at + 4].copy_from_slice(four);
                }
            }
        }
    }
}

/// The inverse of [`interleave_group`] for one tile: the 16 rows' blocks `b` into `out`
/// (GGUF order, `nb` blocks per row).
pub(super) fn deinterleave_tile(tile: &[u8], b: usize, nb: usize, out: &mut [u8], fifth: bool) {
    let (bb, qs) = block_layout(fifth);
    for r in 0..ROWS {
        let at = (r * nb + b) * bb;
        let block = &mut out[at..at + bb];
        block[..2].copy_from_slice(&tile[2 * r..2 * r + 2]);
        block[2..4].copy_from_slice(&tile[32 + 2 * r..32 + 2 * r + 2]);
        let mut scales = [0u8; 8];
        let mut mins = [0u8; 8];
        for s in 0..8 {
            let byte = tile[SCALES + 16 * s + r];
            let nibbles = tile[MINS + 16 * (s / 2) + r] >> (4 * (s % 2)) & 15;
            scales[s] = byte & 63;
            mins[s] = nibbles | (byte >> 6) << 4;
        }
        // llama.cpp's packing: sub-blocks 0-3 whole in bytes 0-7, 4-7 as nibbles in bytes 8-11
        // with their top bits in the top bits of bytes 0-7.
        let packed = &mut block[4..16];
        for j in 0..4 {
            packed[j] = scales[j] | (scales[j + 4] >> 4) << 6;
            packed[j + 4] = mins[j] | (mins[j + 4] >> 4) << 6;
            packed[j + 8] = (scales[j + 4] & 15) | (mins[j + 4] & 15) << 4;
        }
        for i in 0..128 {
            block[qs + i] = tile[VALUES + 64 * (i / 4) + 4 * r + i % 4];
        }
        if fifth {
            for i in 0..32 {
                block[16 + i] = tile[FIFTHS + 64 * (i / 4) + 4 * r + i % 4];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::*;
    use crate::kernels::tile_layout::avx2::bit_to_4;
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
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::*;
    use crate::kernels::tile_layout::avx512::bit_to_4;
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
                let rows =
                    _mm256_set_m128i(_mm_unpackhi_epi8(even, odd), _mm_unpacklo_epi8(even, odd));
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
}
