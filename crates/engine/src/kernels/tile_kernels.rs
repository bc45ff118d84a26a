//! Which tile kernel and which activation quantizer run at a level: AVX-512 VNNI's, AVX-VNNI's
//! (Q8_0) or AVX2's bodies from `x86/tiles*/` over [`super::tiles`]' layout.

use super::blocks::BlockType;
#[cfg(target_arch = "x86_64")]
use super::cpu;
use super::cpu::CpuLevel;
#[cfg(target_arch = "x86_64")]
use super::tile_layout::in_groups;
#[cfg(target_arch = "x86_64")]
use super::tiles::ROWS;
use super::tiles::{pack, BLOCK_WORDS, QK};
#[cfg(target_arch = "x86_64")]
use super::x86::tiles::{avx2, avx512, avx_vnni};

/// The rows of `x` (`[m, k]`) quantized to Q8_0 (as [`super::blocks::quantize_q8_0`] does)
/// and packed for the kernels, in one pass, at `level` (capped at what this CPU runs: a forced
/// AVX2 level runs no AVX-512 instruction here either). Returns the buffer and the words per
/// row.
pub(crate) fn quantize_at(level: CpuLevel, x: &[f32], k: usize) -> (Vec<u32>, usize) {
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

/// One tile row group against packed activation rows: `out[c * 16 + r]` for activation row `c`
/// and weight row `r` of the group. `w`: the group's tiles; `cols`: `out.len() / 16` packed
/// rows, `stride` words apart.
pub(crate) type GroupFn = fn(w: &[u8], cols: &[u32], stride: usize, out: &mut [f32]);

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
                use super::x86::tiles_q4k::$module as k_tiles;
                in_groups!(k_tiles::q4k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q5K => |w, c, s, o| unsafe {
                use super::x86::tiles_q4k::$module as k_tiles;
                in_groups!(k_tiles::q5k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
            BlockType::Q6K => |w, c, s, o| unsafe {
                use super::x86::tiles_q6k::$module as k_tiles;
                in_groups!(k_tiles::q6k, w, c, s, o, width: ROWS, sixteen: false, most: $most)
            },
        };
        Some(f)
    }};
}

/// The kernel for `t` at `level` (on CPUs where [`super::tiles::supported`]): AVX-512 VNNI's
/// at that level, else AVX2's (also below it: tiles laid out at one level keep a kernel at a
/// lower one), which computes the same integers and the same f32 operations per row, so the
/// same outputs bit for bit.
pub(crate) fn kernel_at(level: CpuLevel, t: BlockType) -> Option<GroupFn> {
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

#[cfg(test)]
mod tests {
    use crate::kernels::blocks::Q8Row;
    use crate::kernels::tiles::{deinterleave, interleave};
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::kernels::cpu;
    use crate::kernels::quant_matmul::{
        assert_close, matmul_t_at, QuantMatrix, TEST_TYPES as TYPES,
    };
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

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
                    .map(|x| super::super::quantize::quantize_q8_k_at(cpu::default_level(), x))
                    .collect();
                super::super::blocks::pack_q8_k(&rows)
            }
            _ => quantize_at(cpu::default_level(), x, k),
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
