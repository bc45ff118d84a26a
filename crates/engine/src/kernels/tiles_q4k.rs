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
use super::tile_layout::ROWS;

pub(crate) const SCALES: usize = 64;
pub(crate) const MINS: usize = 192;
pub(crate) const VALUES: usize = 256;
/// Where a Q5_K tile's fifth bits start (the end of a Q4_K tile).
pub(crate) const FIFTHS: usize = 2304;

/// A block's bytes (Q5_K with its fifth bits, else Q4_K), and where its nibbles start.
pub(crate) const fn block_layout(fifth: bool) -> (usize, usize) {
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
