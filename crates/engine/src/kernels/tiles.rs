//! Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 weights with 16 rows interleaved: the tiles' layout and the
//! activation rows' packing (the kernels and their choice: `x86/tiles/`, `tile_kernels`;
//! the K-quants' tiles are in `super::tiles_q4k` and `super::tiles_q6k`).
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
use crate::device::huge_pages::WeightBytes;

pub(crate) const QK: usize = 32;
/// Words per block of a packed activation row: 8 of values, the scale, `-8Σ`, `-16Σ`, `-128Σ`
/// (the integer correction for Q4_0's, Q5_0's and Q8_0's unsigned weights), `d·Σ` (f32, for
/// Q4_1's and Q5_1's minimums), 3 of padding (a block per cache line).
pub const BLOCK_WORDS: usize = 16;

/// Whether weights of type `t` can be interleaved here: the rows come in whole tiles and the
/// `level` has tile kernels here (AVX2 or AVX-512 VNNI; every block type has them there).
pub fn supported(level: CpuLevel, t: BlockType, rows: usize) -> bool {
    let has_kernel = match t {
        BlockType::Q4_0
        | BlockType::Q5_0
        | BlockType::Q8_0
        | BlockType::Q4_1
        | BlockType::Q5_1
        | BlockType::Q4K
        | BlockType::Q5K
        | BlockType::Q6K => level.min(cpu::detected()) >= CpuLevel::Avx2,
    };
    rows.is_multiple_of(ROWS) && has_kernel
}

pub(crate) fn tile_bytes(t: BlockType) -> usize {
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
    /// The tiles' bytes (on huge pages where the OS gives them).
    pub data: WeightBytes,
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

/// One group of 16 rows of `k` values, GGUF blocks in `data`, as tiles into `out` (same size;
/// every byte of it is written).
pub fn interleave_group(t: BlockType, data: &[u8], k: usize, out: &mut [u8]) {
    let (bb, nb, tb) = (t.block_bytes(), k / t.block_values(), tile_bytes(t));
    assert!(data.len() == ROWS * nb * bb && out.len() == data.len());
    match t {
        BlockType::Q4K => return super::tiles_q4k::interleave_group(data, k, out, false),
        BlockType::Q5K => return super::tiles_q4k::interleave_group(data, k, out, true),
        BlockType::Q6K => return super::tiles_q6k::interleave_group(data, k, out),
        _ => {}
    }
    let (va, (qs, qh)) = (values_at(t), block_parts(t));
    // Q8_0's values are stored unsigned (`+128`, a flip of each byte's top bit).
    let (groups, flip) = match t {
        BlockType::Q8_0 => (8, 0x8080_8080),
        _ => (4, 0),
    };
    // Whole 4-byte words and one bit transpose per block: loading moves every weight byte
    // through here, and a byte (or bit) at a time it took as long as reading the file.
    for (b, tile) in out.chunks_exact_mut(tb).enumerate() {
        let (head, values) = tile.split_at_mut(va);
        for r in 0..ROWS {
            let at = (r * nb + b) * bb;
            let block = &data[at..at + bb];
            // Scales, then (Q4_1, Q5_1) minimums.
            head[2 * r..2 * r + 2].copy_from_slice(&block[..2]);
            if va == 64 {
                head[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
            }
            for (g, four) in block[qs..qs + 4 * groups].chunks_exact(4).enumerate() {
                let word = u32::from_le_bytes([four[0], four[1], four[2], four[3]]) ^ flip;
                values[64 * g + 4 * r..64 * g + 4 * r + 4].copy_from_slice(&word.to_le_bytes());
            }
            if let Some(qh) = qh {
                let bits =
                    u32::from_le_bytes([block[qh], block[qh + 1], block[qh + 2], block[qh + 3]]);
                values[256 + 4 * r..256 + 4 * r + 4].copy_from_slice(&slice_fifth_bits(bits));
            }
        }
    }
}

/// A block's 32 fifth bits sliced as a tile keeps them: bit `g` of byte `t` is bit `4g + t`.
fn slice_fifth_bits(bits: u32) -> [u8; 4] {
    std::array::from_fn(|t| {
        // Bits 0, 4, …, 28 of `x` gathered into bits 0..8 in three halving steps.
        let x = (bits >> t) & 0x1111_1111;
        let x = (x | x >> 3) & 0x0303_0303;
        let x = (x | x >> 6) & 0x000f_000f;
        ((x | x >> 12) & 0xff) as u8
    })
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

/// Words 8–12 of a packed activation block from its scale and its values' sum, as [`pack`]
/// writes them: the scale through f16, the integer corrections, `d·Σ` through f16.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn block_words(o: &mut [u32], scale: f32, sum: i32) {
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
