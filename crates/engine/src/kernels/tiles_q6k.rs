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

use super::portable::{Block, Unpacked, Q6K};
use super::tile_layout::ROWS;

pub(crate) const TILE: usize = ROWS * 210;
pub(crate) const SCALES: usize = 32;
pub(crate) const LOW: usize = 288;
pub(crate) const HIGH: usize = 2336;
/// Where the activations' 16-value sums start in a packed block.
#[cfg(target_arch = "x86_64")]
pub(crate) const SUMS16: usize = 136;

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
