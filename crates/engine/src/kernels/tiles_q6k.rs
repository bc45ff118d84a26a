//! Q6_K weights with 16 rows interleaved, and their AVX-512 VNNI and AVX2 kernels.
//!
//! A Q6_K block's 6-bit values are split over two arrays in an order made for one row at a
//! time (four runs of 32 values from each 64 bytes of low nibbles and 32 of high bit pairs).
//! A tile holds block `b` of 16 consecutive rows in the same 3360 bytes, so that each 4-value
//! group of all 16 rows is one 64-byte vector once its two parts are joined:
//! - bytes 0..32: the 16 f16 `d`;
//! - 32..288: byte `32 + 16s + r` is row `r`'s scale of sub-block `s` (16 values, i8);
//! - 288..2336: 32 vectors of 64 bytes, vector `k` = the low 4 bits of values `4k..4k + 4`
//!   (low nibbles) and `128 + 4k..128 + 4k + 4` (high nibbles) of every row, byte `4r + t`
//!   holding value `t` of the group;
//! - 2336..3360: 16 vectors, vector `k` holds the top 2 bits of groups `k`, `16 + k`, `32 + k`
//!   and `48 + k` (bits 0-1, 2-3, 4-5, 6-7 of byte `4r + t`).
//!
//! Per row the kernels compute `T = Σ_s scale_s · Σ q·y − 32 · Σ_s scale_s · Σy` over the
//! sixteen sub-blocks (q unsigned, 0..63) as exact integers, then `d·dy·T`, in the same f32
//! operations at every level. The activations are Q8_K rows packed by
//! [`super::blocks::pack_q8_k`] (words 136..144: the 16-value sums in pairs).

#[cfg(target_arch = "x86_64")]
use super::blocks::K_WORDS;
use super::portable::{Block, Unpacked, Q6K};
#[cfg(target_arch = "x86_64")]
use super::tile_layout::prefetch_part;
use super::tile_layout::ROWS;

const TILE: usize = ROWS * 210;
const SCALES: usize = 32;
const LOW: usize = 288;
const HIGH: usize = 2336;
/// Where the activations' 16-value sums start in a packed block.
#[cfg(target_arch = "x86_64")]
const SUMS16: usize = 136;

/// One group of 16 rows of `k` values, Q6_K blocks in `data`, as tiles into `out`.
pub(super) fn interleave_group(data: &[u8], k: usize, out: &mut [u8]) {
    let nb = k / 256;
    let mut unpacked = Unpacked::new();
    for (b, tile) in out.chunks_exact_mut(TILE).enumerate() {
        for r in 0..ROWS {
            let at = (r * nb + b) * 210;
            let block = &data[at..at + 210];
            tile[2 * r..2 * r + 2].copy_from_slice(&block[208..210]);
            for s in 0..16 {
                tile[SCALES + 16 * s + r] = block[192 + s];
            }
            // The values unsigned (0..63), as the portable kernel unpacks them.
            Q6K::unpack(block, &mut unpacked);
            let q = unpacked.values().map(|v| (v + 32) as u8);
            for k in 0..32 {
                for t in 0..4 {
                    let (lo, hi) = (q[4 * k + t], q[128 + 4 * k + t]);
                    tile[LOW + 64 * k + 4 * r + t] = lo & 15 | (hi & 15) << 4;
                }
            }
            for k in 0..16 {
                for t in 0..4 {
                    let top = |i: usize| (q[4 * (k + 16 * i) + t] >> 4) << (2 * i);
                    tile[HIGH + 64 * k + 4 * r + t] = top(0) | top(1) | top(2) | top(3);
                }
            }
        }
    }
}

/// The inverse of [`interleave_group`] for one tile: the 16 rows' blocks `b` into `out`
/// (GGUF order, `nb` blocks per row).
pub(super) fn deinterleave_tile(tile: &[u8], b: usize, nb: usize, out: &mut [u8]) {
    for r in 0..ROWS {
        let at = (r * nb + b) * 210;
        let block = &mut out[at..at + 210];
        block.fill(0);
        block[208..210].copy_from_slice(&tile[2 * r..2 * r + 2]);
        for s in 0..16 {
            block[192 + s] = tile[SCALES + 16 * s + r];
        }
        for v in 0..256 {
            let (group, t) = (v / 4, v % 4);
            let low = tile[LOW + 64 * (group % 32) + 4 * r + t] >> (4 * (group / 32)) & 15;
            let high = tile[HIGH + 64 * (group % 16) + 4 * r + t] >> (2 * (group / 16)) & 3;
            let (n, l) = (v / 128, v % 128);
            let (quadrant, l) = (l / 32, l % 32);
            block[64 * n + l + 32 * (quadrant % 2)] |= low << (4 * (quadrant / 2));
            block[128 + 32 * n + l] |= high << (2 * quadrant);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// The top two bits of group `16i + k` (from its high-bit vector `bits`) at bits 4-5.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn top_bits(bits: __m256i, i: usize) -> __m256i {
        crate::kernels::tile_layout::avx2::bit_to_4(bits, 2 * i, 0x30)
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
                prefetch_part(tile, TILE, sb, 8);
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
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// The top two bits of group `16i + k` (from its high-bit vector `bits`) at bits 4-5.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    fn top_bits(bits: __m512i, i: usize) -> __m512i {
        crate::kernels::tile_layout::avx512::bit_to_4(bits, 2 * i, 0x30)
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
                prefetch_part(tile, TILE, sb, 8);
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
}
