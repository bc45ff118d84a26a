//! Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 weights with 16 rows interleaved, and their AVX-512 VNNI
//! and AVX2 kernels (the K-quants' tiles are in `super::tiles_q4k` and `super::tiles_q6k`).
//!
//! In GGUF order a row's blocks follow one another, so a kernel computes one output at a time
//! and ends every row with a horizontal sum; each 32-value block's scale costs as much work as
//! its 32 multiply-adds. Interleaved at load (as llama.cpp repacks these types), block `b` of
//! 16 consecutive rows forms one tile: the 16 scales, then the values in 4-byte groups, group
//! `g` of all 16 rows in one 64-byte vector. One `vpdpbusd` against the broadcast 4 activation
//! bytes of group `g` then does 64 multiply-adds for 16 outputs at once, a block's scale is one
//! vector multiply for 16 rows, and 16 outputs are one store. Decoding streams the tiles in
//! address order; prefills reuse each tile, once widened, for up to 8 activation rows.
//!
//! A tile has the bytes of its 16 blocks, so the weight keeps its size:
//! - Q8_0, 544 bytes: 16 f16 scales; 8 vectors, vector `g` = bytes `4g..4g+4` of every row's
//!   values, stored `+128` (unsigned, as `vpdpbusd` wants its first operand).
//! - Q4_0, 288 bytes: 16 scales; 4 vectors, vector `j` = bytes `4j..4j+4` of every row's
//!   nibbles: the low nibbles are values `4j..4j+4`, the high ones `16+4j..16+4j+4`.
//! - Q5_0, 352 bytes: as Q4_0, then the fifth bits bit-sliced in 64 bytes: bit `g` of byte
//!   `4r+t` is the fifth bit of row `r`'s value `4g+t`, so that one shift and one mask put
//!   group `g`'s fifth bits beside its nibbles (bytes `4r+t` of the group's vector).
//! - Q4_1, 320 bytes, and Q5_1, 384 bytes: as Q4_0 and Q5_0 with the 16 f16 minimums after the
//!   scales (`value = d·q + m`, q unsigned, so no offset; the minimums meet `Σy`).

use super::blocks::{BlockType, Q8Row};
use super::cpu::{self, CpuLevel};
pub use super::tile_layout::ROWS;
#[cfg(target_arch = "x86_64")]
use super::tile_layout::{in_groups, prefetch};

const QK: usize = 32;
/// Words per block of a packed activation row: 8 of values, the scale, `-8Σ`, `-16Σ`, `-128Σ`
/// (the integer correction for Q4_0's, Q5_0's and Q8_0's unsigned weights), `d·Σ` (f32, for
/// Q4_1's and Q5_1's minimums), 3 of padding (a block per cache line).
pub const BLOCK_WORDS: usize = 16;

/// Whether weights of type `t` can be interleaved here: the rows come in whole tiles and the
/// active level has tile kernels (AVX2 or AVX-512 VNNI; every block type has them there).
pub fn supported(t: BlockType, rows: usize) -> bool {
    let has_kernel = match t {
        BlockType::Q4_0
        | BlockType::Q5_0
        | BlockType::Q8_0
        | BlockType::Q4_1
        | BlockType::Q5_1
        | BlockType::Q4K
        | BlockType::Q5K
        | BlockType::Q6K => cpu::active() >= CpuLevel::Avx2,
    };
    rows.is_multiple_of(ROWS) && has_kernel
}

fn tile_bytes(t: BlockType) -> usize {
    ROWS * t.block_bytes()
}

/// Where a tile's values start: after the scales, and the minimums of Q4_1/Q5_1.
const fn values_at(t: BlockType) -> usize {
    match t {
        BlockType::Q4_1 | BlockType::Q5_1 => 64,
        _ => 32,
    }
}

/// A GGUF block's layout: where its nibbles (or Q8_0's bytes) and fifth bits are.
const fn block_parts(t: BlockType) -> (usize, Option<usize>) {
    match t {
        BlockType::Q4_0 => (2, None),
        BlockType::Q5_0 => (6, Some(2)),
        BlockType::Q4_1 => (4, None),
        BlockType::Q5_1 => (8, Some(4)),
        _ => (2, None),
    }
}

/// A Q4_0/Q5_0/Q8_0 weight matrix `[rows, cols]` in tiles, as the model keeps it.
pub struct TileMatrix {
    /// The block type.
    pub kind: BlockType,
    /// Rows of the matrix.
    pub rows: usize,
    /// Columns of the matrix.
    pub cols: usize,
    /// The tiles' bytes.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for TileMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TileMatrix({:?}, [{}, {}])",
            self.kind, self.rows, self.cols
        )
    }
}

impl TileMatrix {
    /// The matrix in GGUF order again (for the paths only candle has).
    pub fn to_blocks(&self) -> Vec<u8> {
        deinterleave(self.kind, &self.data, self.cols)
    }
}

/// Rearranges `rows` rows of `k` values in GGUF blocks (`data`) into tiles. `rows` must be a
/// multiple of [`ROWS`] and `t` one of the tile types.
pub fn interleave(t: BlockType, data: &[u8], rows: usize, k: usize) -> Vec<u8> {
    let nb = k / t.block_values();
    assert_eq!(
        data.len(),
        rows * nb * t.block_bytes(),
        "{t:?} weight of {rows} rows of {k}"
    );
    let mut out = vec![0u8; data.len()];
    let group = ROWS * nb * t.block_bytes();
    for (src, dst) in data.chunks_exact(group).zip(out.chunks_exact_mut(group)) {
        interleave_group(t, src, k, dst);
    }
    out
}

/// One group of 16 rows of `k` values, GGUF blocks in `data`, as tiles into `out` (same size).
pub fn interleave_group(t: BlockType, data: &[u8], k: usize, out: &mut [u8]) {
    let (bb, nb, tb) = (t.block_bytes(), k / t.block_values(), tile_bytes(t));
    assert!(data.len() == ROWS * nb * bb && out.len() == data.len());
    out.fill(0);
    match t {
        BlockType::Q4K => return super::tiles_q4k::interleave_group(data, k, out, false),
        BlockType::Q5K => return super::tiles_q4k::interleave_group(data, k, out, true),
        BlockType::Q6K => return super::tiles_q6k::interleave_group(data, k, out),
        _ => {}
    }
    let (va, (qs, qh)) = (values_at(t), block_parts(t));
    for (b, tile) in out.chunks_exact_mut(tb).enumerate() {
        for r in 0..ROWS {
            let at = (r * nb + b) * bb;
            let block = &data[at..at + bb];
            // Scales, then (Q4_1, Q5_1) minimums.
            tile[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            if va == 64 {
                tile[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
            }
            if t == BlockType::Q8_0 {
                for (i, v) in block[2..].iter().enumerate() {
                    tile[va + 64 * (i / 4) + 4 * r + i % 4] = v ^ 0x80;
                }
                continue;
            }
            for (i, v) in block[qs..qs + 16].iter().enumerate() {
                tile[va + 64 * (i / 4) + 4 * r + i % 4] = *v;
            }
            if let Some(qh) = qh {
                let qh =
                    u32::from_le_bytes([block[qh], block[qh + 1], block[qh + 2], block[qh + 3]]);
                for i in 0..QK {
                    if qh >> i & 1 == 1 {
                        tile[va + 256 + 4 * r + i % 4] |= 1 << (i / 4);
                    }
                }
            }
        }
    }
}

/// The inverse of [`interleave`]: GGUF blocks again (for the paths that need candle's layout).
pub fn deinterleave(t: BlockType, tiles: &[u8], k: usize) -> Vec<u8> {
    let (bb, nb, tb) = (t.block_bytes(), k / t.block_values(), tile_bytes(t));
    let (va, (qs, qh)) = (values_at(t), block_parts(t));
    let mut out = vec![0u8; tiles.len()];
    for (tile_index, tile) in tiles.chunks_exact(tb).enumerate() {
        let (group, b) = (tile_index / nb, tile_index % nb);
        let rows = group * ROWS * nb * bb..(group + 1) * ROWS * nb * bb;
        match t {
            BlockType::Q4K => {
                super::tiles_q4k::deinterleave_tile(tile, b, nb, &mut out[rows], false)
            }
            BlockType::Q5K => {
                super::tiles_q4k::deinterleave_tile(tile, b, nb, &mut out[rows], true)
            }
            BlockType::Q6K => super::tiles_q6k::deinterleave_tile(tile, b, nb, &mut out[rows]),
            _ => {}
        }
        if t.block_values() == 256 {
            continue;
        }
        for r in 0..ROWS {
            let at = ((group * ROWS + r) * nb + b) * bb;
            let block = &mut out[at..at + bb];
            block[..2].copy_from_slice(&tile[2 * r..2 * r + 2]);
            if va == 64 {
                block[2..4].copy_from_slice(&tile[32 + 2 * r..32 + 2 * r + 2]);
            }
            let byte = |i: usize| tile[va + 64 * (i / 4) + 4 * r + i % 4];
            if t == BlockType::Q8_0 {
                (0..QK).for_each(|i| block[2 + i] = byte(i) ^ 0x80);
                continue;
            }
            (0..16).for_each(|i| block[qs + i] = byte(i));
            if let Some(qh) = qh {
                let mut bits = 0u32;
                for i in 0..QK {
                    bits |= ((tile[va + 256 + 4 * r + i % 4] >> (i / 4)) as u32 & 1) << i;
                }
                block[qh..qh + 4].copy_from_slice(&bits.to_le_bytes());
            }
        }
    }
    out
}

/// The rows of `x` (`[m, k]`) quantized to Q8_0 (as [`super::blocks::quantize_q8_0`] does) and packed for the
/// kernels, in one pass. Returns the buffer and the words per row.
pub(crate) fn quantize(x: &[f32], k: usize) -> (Vec<u32>, usize) {
    quantize_at(cpu::active(), x, k)
}

/// [`quantize`] at `level` (capped at what this CPU runs): a forced AVX2 level runs no AVX-512
/// instruction here either.
fn quantize_at(level: CpuLevel, x: &[f32], k: usize) -> (Vec<u32>, usize) {
    use rayon::prelude::*;
    #[cfg(target_arch = "x86_64")]
    let level = level.min(cpu::detected());
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level; // one quantizer there
    let stride = k / QK * BLOCK_WORDS;
    let mut packed = vec![0u32; x.len() / k * stride];
    let row = |(x, out): (&[f32], &mut [u32])| {
        #[cfg(target_arch = "x86_64")]
        if level >= CpuLevel::Avx512 {
            // SAFETY: AVX-512 F/BW/VL were detected; `out` has a block's words per 32 values.
            return unsafe { avx512::quantize_row(x, out) };
        }
        #[cfg(target_arch = "x86_64")]
        if level >= CpuLevel::Avx2 {
            // SAFETY: AVX2 and F16C were detected; `out` has a block's words per 32 values.
            return unsafe { avx2::quantize_row(x, out) };
        }
        out.copy_from_slice(&pack(&[super::blocks::quantize_q8_0(x)]).0);
    };
    let rows = x
        .chunks_exact(k)
        .zip(packed.chunks_exact_mut(stride.max(1)));
    if x.len() / k >= 8 {
        x.par_chunks_exact(k)
            .zip(packed.par_chunks_exact_mut(stride.max(1)))
            .for_each(row);
    } else {
        rows.for_each(row);
    }
    (packed, stride)
}

/// Words 8–12 of a packed activation block from its scale and its values' sum, as [`pack`]
/// writes them: the scale through f16, the integer corrections, `d·Σ` through f16.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block_words(o: &mut [u32], scale: f32, sum: i32) {
    let d = half::f16::from_f32(scale).to_f32();
    o[8] = d.to_bits();
    o[9] = (-8 * sum) as u32;
    o[10] = (-16 * sum) as u32;
    o[11] = (-128 * sum) as u32;
    o[12] = half::f16::from_f32(d * sum as f32).to_f32().to_bits();
}

/// Q8_0 activation rows packed for the kernels: per block [`BLOCK_WORDS`] words, row after row.
/// Returns the buffer and the words per row.
pub(crate) fn pack(rows: &[Q8Row]) -> (Vec<u32>, usize) {
    let stride = rows.first().map_or(0, |r| r.d.len() * BLOCK_WORDS);
    let mut packed = Vec::with_capacity(stride * rows.len());
    for row in rows {
        for (b, (d, sum)) in row.d.iter().zip(&row.sums).enumerate() {
            let values = &row.qs[b * QK..(b + 1) * QK];
            packed.extend(
                values
                    .chunks_exact(4)
                    .map(|v| u32::from_le_bytes([v[0] as u8, v[1] as u8, v[2] as u8, v[3] as u8])),
            );
            packed.extend([
                d.to_bits(),
                (-8 * sum) as u32,
                (-16 * sum) as u32,
                (-128 * sum) as u32,
                row.d_sums[b].to_bits(),
                0,
                0,
                0,
            ]);
        }
    }
    (packed, stride)
}

/// One tile row group against packed activation rows: `out[c * 16 + r]` for activation row `c`
/// and weight row `r` of the group. `w`: the group's tiles; `cols`: `out.len() / 16` packed
/// rows, `stride` words apart.
pub(crate) type GroupFn = fn(w: &[u8], cols: &[u32], stride: usize, out: &mut [f32]);

/// The kernel for `t` (on CPUs where [`supported`]): AVX-512 VNNI's at that level, else
/// AVX2's (also below it: weights interleaved at load keep a kernel), which computes the same
/// integers and the same f32 operations per row, so the same outputs bit for bit.
pub(crate) fn kernel(t: BlockType) -> Option<GroupFn> {
    kernel_at(cpu::active(), t)
}

/// The tile kernel of `$module` (the K-quants' in `tiles_q4k::$module` and
/// `tiles_q6k::$module`) as a [`GroupFn`] for block type `$t`, in groups of at most `$most`
/// activation rows.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_kernel {
    ($module:ident, $t:expr, most: $most:expr) => {{
        let f: GroupFn = match $t {
            BlockType::Q4_0 => |w, c, s, o| unsafe {
                in_groups!($module::q4_0, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q5_0 => |w, c, s, o| unsafe {
                in_groups!($module::q5_0, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q8_0 => |w, c, s, o| unsafe {
                in_groups!($module::q8_0, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q4_1 => |w, c, s, o| unsafe {
                in_groups!($module::q4_1, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q5_1 => |w, c, s, o| unsafe {
                in_groups!($module::q5_1, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q4K => |w, c, s, o| unsafe {
                use super::tiles_q4k::$module as k_tiles;
                in_groups!(k_tiles::q4k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q5K => |w, c, s, o| unsafe {
                use super::tiles_q4k::$module as k_tiles;
                in_groups!(k_tiles::q5k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q6K => |w, c, s, o| unsafe {
                use super::tiles_q6k::$module as k_tiles;
                in_groups!(k_tiles::q6k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
        };
        Some(f)
    }};
}

/// [`kernel`] with `level` active. Tiles loaded at one level still run after the active level
/// drops (tests switch it): below AVX-512 the AVX2 kernels serve them, with the same outputs.
fn kernel_at(level: CpuLevel, t: BlockType) -> Option<GroupFn> {
    #[cfg(target_arch = "x86_64")]
    {
        let hardware = cpu::detected();
        // SAFETY (both): the kernels' features were detected; `in_groups` checks that `cols`
        // holds `out.len() / 16` rows, the kernels that `w` holds a tile per block of `stride`.
        if hardware >= CpuLevel::Avx512 && level >= CpuLevel::Avx512 {
            return tile_kernel!(avx512, t, most: 8);
        }
        if t == BlockType::Q8_0 && level >= CpuLevel::AvxVnni && cpu::runs(CpuLevel::AvxVnni) {
            let f: GroupFn = |w, c, s, o| unsafe {
                in_groups!(avx_vnni::q8_0, w, c, s, o, width: ROWS, sixteen: false, most: 8)
            };
            return Some(f);
        }
        if hardware >= CpuLevel::Avx2 {
            // Groups of 8 rows, though AVX2's 16 registers then spill the accumulators: a tile
            // widened once for 8 rows instead of twice for 4 made a step of 8 rows faster (Q5_0
            // 78.6 -> 89.3 GMAC/s, Q6_K 61.5 -> 83.8, Q4_K 102.3 -> 112.0, Q8_0 the same; one
            // thread, Xeon, alternated, best of three, `HEARTH_CPU=avx2 cargo bench --bench
            // quant_kernels`).
            return tile_kernel!(avx2, t, most: 8);
        }
    }
    let _ = (level, t);
    None
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::*;
    use crate::kernels::tile_layout::avx2::bit_to_4;
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
}

/// AVX-512 VNNI's Q8_0 kernel on 256-bit vectors, for CPUs with AVX-VNNI and no AVX-512: each
/// 64-byte group vector is two halves of 8 rows, each a `vpdpbusd` (the same integers and the
/// same f32 operations per row, so the same outputs bit for bit). Where AVX2 needs a sign, a
/// `maddubs`, a `madd` and an add per group and half (Q8_0's 16-bit pair sums cannot be
/// folded), this is one instruction, and measured well ahead of AVX2's. The 4- and 5-bit
/// types measured no faster with it than with AVX2's folded `maddubs`, so they keep AVX2's
/// kernels (figures: docs/benchmarks.md, "Kernel choices").
#[cfg(target_arch = "x86_64")]
pub(super) mod avx_vnni {
    use super::*;
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
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::*;
    use crate::kernels::tile_layout::avx512::bit_to_4;
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
                        true => {
                            _mm512_cvtph_ps(_mm256_loadu_si256($tile.add(32) as *const __m256i))
                        }
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
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::kernels::quant_matmul::{assert_close, matmul_t_at, QuantMatrix};
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    const TYPES: [(GgmlDType, BlockType); 8] = [
        (GgmlDType::Q4_0, BlockType::Q4_0),
        (GgmlDType::Q5_0, BlockType::Q5_0),
        (GgmlDType::Q8_0, BlockType::Q8_0),
        (GgmlDType::Q4_1, BlockType::Q4_1),
        (GgmlDType::Q5_1, BlockType::Q5_1),
        (GgmlDType::Q4K, BlockType::Q4K),
        (GgmlDType::Q5K, BlockType::Q5K),
        (GgmlDType::Q6K, BlockType::Q6K),
    ];

    fn quantized(dtype: GgmlDType, n: usize, k: usize) -> Result<Vec<u8>, candle_core::Error> {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 29 % 89) as f32 - 44.0) / 40.0 + ((i % 5) as f32 - 2.0) * 0.003)
            .collect();
        let q = QTensor::quantize(&Tensor::from_vec(w, (n, k), &Device::Cpu)?, dtype)?;
        Ok(q.data()?.into_owned())
    }

    /// 16 rows in GGUF order, the reference the tiles are checked against.
    fn gguf_order(kind: BlockType, data: &[u8]) -> QuantMatrix<'_> {
        QuantMatrix {
            kind,
            data,
            rows: 16,
            interleaved: false,
        }
    }

    /// The rows of `x` (`k` values each) through a tile kernel for `t`: 16 outputs per row.
    fn through_tiles(t: BlockType, group: GroupFn, tiles: &[u8], x: &[f32], k: usize) -> Vec<f32> {
        let (cols, stride) = match t {
            BlockType::Q4K | BlockType::Q5K | BlockType::Q6K => {
                let rows: Vec<Q8Row> = x
                    .chunks_exact(k)
                    .map(super::super::quantize::quantize_q8_k)
                    .collect();
                super::super::blocks::pack_q8_k(&rows)
            }
            _ => quantize(x, k),
        };
        let mut out = vec![0f32; x.len() / k * ROWS];
        group(tiles, &cols, stride, &mut out);
        out
    }

    /// The activations packed at every level this CPU runs are the portable packing's, word for
    /// word: half-way values round to even, a zero block and a block of one large value alike.
    #[test]
    fn activations_pack_the_same_at_every_level() {
        let k = 128;
        let mut x: Vec<f32> = (0..9 * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        x[..32].fill(0.0);
        x[32..64].fill(1e-3);
        x[64] = 3e4;
        // Exactly half-way after scaling: amax 127 makes the scale 1.
        x[96..128].copy_from_slice(&[127.0, 2.5, -2.5, 3.5, -0.5, 0.5, 1.5, -1.5].repeat(4));
        let portable = quantize_at(CpuLevel::Portable, &x, k);
        for level in cpu::runnable() {
            assert_eq!(quantize_at(level, &x, k), portable, "{level}");
        }
        // One row alone takes the sequential path: the same words.
        assert_eq!(
            quantize_at(cpu::detected(), &x[..k], k).0,
            portable.0[..k / QK * BLOCK_WORDS]
        );
    }

    #[test]
    fn interleaving_keeps_every_byte() -> TestResult {
        for (dtype, t) in TYPES {
            let (n, k) = (32, 3 * t.block_values());
            let data = quantized(dtype, n, k)?;
            let tiles = interleave(t, &data, n, k);
            assert_eq!(tiles.len(), data.len(), "{t:?}");
            assert_ne!(tiles, data, "{t:?}");
            assert_eq!(deinterleave(t, &tiles, k), data, "{t:?}");
        }
        Ok(())
    }

    /// The tile kernels against the one-row kernels on GGUF order (themselves tested against
    /// candle): the same integer block products, so equal to f32 rounding. Row counts make a
    /// full group of 8 activation rows and remainders; two matrices are fused.
    #[test]
    fn tile_kernels_match_the_row_kernels() -> TestResult {
        let mut checked = vec![];
        let mut by_level: Vec<(BlockType, usize, Vec<f32>)> = vec![];
        for level in cpu::runnable() {
            for (dtype, t) in TYPES {
                let k = 5 * t.block_values();
                let Some(group) = kernel_at(level, t).filter(|_| level >= CpuLevel::Avx2) else {
                    continue;
                };
                let b = quantized(dtype, 16, k)?;
                let tiles = interleave(t, &b, 16, k);
                let gguf = gguf_order(t, &b);
                for m in [1, 3, 8, 11] {
                    let x: Vec<f32> = (0..m * k)
                        .map(|i| ((i * 11 % 37) as f32 - 18.0) / 5.0)
                        .collect();
                    let want = matmul_t_at(CpuLevel::Portable, &x, m, k, &[gguf], true);
                    let got = through_tiles(t, group, &tiles, &x, k);
                    assert_close(&got, &want, 1e-5, &format!("{t:?} at {level}, m={m}"));
                    // Each activation row gets what it gets alone (decoding), bit for bit.
                    for (c, x) in x.chunks_exact(k).enumerate() {
                        let alone = through_tiles(t, group, &tiles, x, k);
                        assert_eq!(alone, got[c * ROWS..(c + 1) * ROWS], "{t:?} at {level}");
                    }
                    // AVX2's kernels compute what AVX-512's do, bit for bit.
                    match by_level.iter().find(|(bt, bm, _)| *bt == t && *bm == m) {
                        Some((_, _, first)) => assert_eq!(first, &got, "{t:?} m={m} at {level}"),
                        None => by_level.push((t, m, got)),
                    }
                }
                checked.push((level, t));
            }
        }
        println!("tile kernels checked: {checked:?}");
        if cpu::detected() >= CpuLevel::Avx2 {
            assert!(checked.len() >= 4, "{checked:?}");
        }
        Ok(())
    }

    /// Weights at their largest codes (every nibble and fifth bit set, Q8_0 at -128) against
    /// activations at ±127: the 16-bit sums the AVX2 kernels fold before widening stay in
    /// range, so every level gives the portable row kernel's result.
    #[test]
    fn the_largest_codes_do_not_overflow() -> TestResult {
        for (_, t) in TYPES {
            let k = 2 * t.block_values();
            let bb = t.block_bytes();
            let mut block = vec![0xFFu8; bb];
            block[..2].copy_from_slice(&0x3C00u16.to_le_bytes()); // d = 1
            match t {
                BlockType::Q4_1 | BlockType::Q5_1 => block[2..4].fill(0), // m = 0
                BlockType::Q8_0 => block[2..].fill(0x80),
                // dmin = 1/1024: scales and minimums 63, the minimums' part small beside
                // the values' (a large one would cancel them and leave only rounding).
                BlockType::Q4K | BlockType::Q5K => {
                    block[2..4].copy_from_slice(&0x1400u16.to_le_bytes())
                }
                // Every value 63 (31 after the offset), scales -128, d = 1 at the end.
                BlockType::Q6K => {
                    block[..2].fill(0xFF);
                    block[192..208].fill(0x80);
                    block[208..].copy_from_slice(&0x3C00u16.to_le_bytes());
                }
                _ => {}
            }
            let b = block.repeat(16 * k / t.block_values());
            let tiles = interleave(t, &b, 16, k);
            let gguf = gguf_order(t, &b);
            for sign in [1.0f32, -1.0] {
                let x = vec![sign * 0.5; k];
                let want = matmul_t_at(CpuLevel::Portable, &x, 1, k, &[gguf], true);
                for level in cpu::runnable().into_iter().filter(|l| *l >= CpuLevel::Avx2) {
                    let Some(group) = kernel_at(level, t) else {
                        continue;
                    };
                    let got = through_tiles(t, group, &tiles, &x, k);
                    assert_close(&got, &want, 1e-6, &format!("{t:?} at {level}, sign {sign}"));
                }
            }
        }
        Ok(())
    }
}
