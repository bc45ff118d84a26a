//! `y = x · Wᵀ` for GGUF-quantized weights on the CPU, for decoding and prompts: the block
//! types of llama.cpp's common files (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K). Weights stay in GGUF
//! order here, or come in the 16-row tiles of [`super::tiles`] (Q4_0, Q5_0, Q8_0, Q4_1, Q5_1
//! on CPUs with AVX2 or AVX-512 VNNI), whose kernels this module's parallel pass calls.
//!
//! Why not candle's `QMatMul`: its Q5_0 dot product is scalar code (llama.cpp's Q4_K_M files
//! store most of Qwen2.5-0.5B's matrices as Q5_0, because 896 is not a multiple of 256), and
//! it runs on a thread pool of its own whose workers spin between calls, taking the cores
//! from this crate's rayon pool. Here every type runs on rayon, each thread streaming its own
//! block of weight rows once.
//!
//! The arithmetic is llama.cpp's: activations are quantized to 8 bits per row (Q8_0 blocks of
//! 32 for the 32-blocks, Q8_K blocks of 256 with 16-value sums for the K-quants), each block
//! product is an exact integer, scaled and summed in f32. With AVX2 the block products are
//! byte dot products (`maddubs`) accumulated in eight f32 lanes, as llama.cpp's x86 code does;
//! elsewhere a plain loop computes the same integers.

use super::blocks::*;
use super::cpu::{self, CpuLevel};
use super::portable;
use super::quantize::quantize_q8_k_at;
use super::tile_kernels;
#[cfg(target_arch = "x86_64")]
use super::tile_layout::in_groups;
use super::tiles::{self, TileMatrix};
#[cfg(target_arch = "x86_64")]
use super::x86::{avx2, avx512};
use rayon::prelude::*;

/// Activation rows per pass of a task's weight rows.
const COLUMN_BLOCK: usize = 16;

/// The dot product of one weight row with one activation row.
pub(crate) type DotFn = fn(&[u8], &Q8Row) -> f32;

/// `rows` consecutive weight rows (`w`) against several activation rows: `out[c * rows + r]`
/// for activation row `c` and weight row `r`, each equal to the type's [`DotFn`] at the same
/// level for that pair alone, bit for bit.
pub(crate) type RowsFn = fn(w: &[u8], rows: usize, xs: &[Q8Row], out: &mut [f32]);

/// One weight row against every activation row (`out[c]` for `xs[c]`).
/// `cols`: the packed activation rows (one every `stride` words, see [`pack_q8_k`]), at least
/// `out.len()` of them.
pub(crate) type ManyFn = fn(w: &[u8], cols: &[u32], stride: usize, out: &mut [f32]);

/// Every block type's kernel (`$f::<Type>`) at a level written as the portable one's
/// arithmetic, as a `$ty` ([`DotFn`] or [`RowsFn`]).
macro_rules! per_type {
    ($t:expr, $ty:ty, |$($arg:ident),*| $f:ident) => {{
        use super::portable::{Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0};
        let f: $ty = match $t {
            BlockType::Q4_0 => |$($arg),*| unsafe { $f::<Q4_0>($($arg),*) },
            BlockType::Q5_0 => |$($arg),*| unsafe { $f::<Q5_0>($($arg),*) },
            BlockType::Q8_0 => |$($arg),*| unsafe { $f::<Q8_0>($($arg),*) },
            BlockType::Q4K => |$($arg),*| unsafe { $f::<Q4K>($($arg),*) },
            BlockType::Q5K => |$($arg),*| unsafe { $f::<Q5K>($($arg),*) },
            BlockType::Q6K => |$($arg),*| unsafe { $f::<Q6K>($($arg),*) },
            BlockType::Q4_1 => |$($arg),*| unsafe { $f::<Q4_1>($($arg),*) },
            BlockType::Q5_1 => |$($arg),*| unsafe { $f::<Q5_1>($($arg),*) },
        };
        f
    }};
}

/// `unsafe` only to fit [`per_type!`]: plain Rust needs no CPU feature.
unsafe fn portable_dot_row<B: portable::Block>(w: &[u8], x: &Q8Row) -> f32 {
    portable::dot_row::<B, portable::Plain>(w, x)
}

unsafe fn portable_rows<B: portable::Block>(w: &[u8], r: usize, xs: &[Q8Row], o: &mut [f32]) {
    portable::rows::<B, portable::Plain>(w, r, xs, o)
}

fn portable_dot(t: BlockType) -> DotFn {
    per_type!(t, DotFn, |w, x| portable_dot_row)
}

/// The dot product `t` takes at `level` (the best one at or below it), and the level it is
/// compiled for.
pub(crate) fn dot_at(level: CpuLevel, t: BlockType) -> (CpuLevel, DotFn) {
    // Never above what the CPU runs: the SAFETY of every call below rests on this.
    #[cfg(target_arch = "x86_64")]
    {
        let level = level.min(cpu::detected());
        if level >= CpuLevel::Avx512 {
            // SAFETY: AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C were detected; `run` checks that
            // rows hold whole blocks and the activations were quantized for this type, so every
            // read stays inside a block (prefetches may point past it; they never fault).
            let f: Option<DotFn> = match t {
                BlockType::Q4_0 => Some(|w, x| unsafe { avx512::q4_0(w, x) }),
                BlockType::Q5_0 => Some(|w, x| unsafe { avx512::q5_0(w, x) }),
                BlockType::Q8_0 => Some(|w, x| unsafe { avx512::q8_0(w, x) }),
                _ => None,
            };
            if let Some(f) = f {
                return (CpuLevel::Avx512, f);
            }
        }
        if level >= CpuLevel::Avx2 {
            // SAFETY: as above, with AVX2, FMA and F16C detected.
            let f: DotFn = match t {
                BlockType::Q4_0 => |w, x| unsafe { avx2::q4_0(w, x) },
                BlockType::Q5_0 => |w, x| unsafe { avx2::q5_0(w, x) },
                BlockType::Q8_0 => |w, x| unsafe { avx2::q8_0(w, x) },
                BlockType::Q4_1 => |w, x| unsafe { avx2::q4_1(w, x) },
                BlockType::Q5_1 => |w, x| unsafe { avx2::q5_1(w, x) },
                BlockType::Q4K => |w, x| unsafe { avx2::q4k(w, x) },
                BlockType::Q5K => |w, x| unsafe { avx2::q5k(w, x) },
                BlockType::Q6K => |w, x| unsafe { avx2::q6k(w, x) },
            };
            return (CpuLevel::Avx2, f);
        }
    }
    #[cfg(target_arch = "aarch64")]
    if level.min(cpu::detected()) >= CpuLevel::Neon {
        use super::arm::neon::dot_row;
        // SAFETY: NEON and the dot-product extension were detected.
        return (CpuLevel::Neon, per_type!(t, DotFn, |w, x| dot_row));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = level;
    (CpuLevel::Portable, portable_dot(t))
}

/// The rows kernel `t` takes at `level`: the one matching its dot product there, bit for bit
/// (none where that dot product is an AVX-512 one: those types come in tiles there).
pub(crate) fn rows_at(level: CpuLevel, t: BlockType) -> Option<RowsFn> {
    match dot_at(level, t).0 {
        CpuLevel::Portable => Some(per_type!(t, RowsFn, |w, r, xs, o| portable_rows)),
        #[cfg(target_arch = "aarch64")]
        CpuLevel::Neon => {
            use super::arm::neon::rows;
            // SAFETY: `dot_at` returned a NEON kernel: NEON and dotprod were detected.
            Some(per_type!(t, RowsFn, |w, r, xs, o| rows))
        }
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx2 => {
            // SAFETY: `dot_at` returned an AVX2 kernel, so AVX2, FMA and F16C were detected;
            // `run` checks that rows hold whole blocks of this type and passes whole rows.
            let f: RowsFn = match t {
                BlockType::Q4_0 => |w, r, xs, o| unsafe { avx2::q4_0_rows(w, r, xs, o) },
                BlockType::Q5_0 => |w, r, xs, o| unsafe { avx2::q5_0_rows(w, r, xs, o) },
                BlockType::Q8_0 => |w, r, xs, o| unsafe { avx2::q8_0_rows(w, r, xs, o) },
                BlockType::Q4_1 => |w, r, xs, o| unsafe { avx2::q4_1_rows(w, r, xs, o) },
                BlockType::Q5_1 => |w, r, xs, o| unsafe { avx2::q5_1_rows(w, r, xs, o) },
                BlockType::Q4K => |w, r, xs, o| unsafe { avx2::q4k_rows(w, r, xs, o) },
                BlockType::Q5K => |w, r, xs, o| unsafe { avx2::q5k_rows(w, r, xs, o) },
                BlockType::Q6K => |w, r, xs, o| unsafe { avx2::q6k_rows(w, r, xs, o) },
            };
            Some(f)
        }
        _ => None,
    }
}

/// The many-row kernel `t` takes at `level` with rows of `k` values in GGUF order (AVX-512
/// VNNI: Q4_K, Q6_K; Q4_0, Q5_0 and Q8_0 have theirs in [`super::tiles`]).
pub(crate) fn many_at(level: CpuLevel, t: BlockType, k: usize) -> Option<ManyFn> {
    let level = level.min(cpu::detected());
    if !k.is_multiple_of(2 * QK) || level < CpuLevel::Avx512 {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    match t {
        // SAFETY: AVX-512 F/BW/VL/VNNI were detected; rows hold whole blocks, and `cols`
        // holds `out.len()` rows of `pack_q8_k` (checked in `in_groups!`).
        BlockType::Q6K => {
            return Some(|w, c, s, o| unsafe {
                in_groups!(avx512::q6k_rows, w, c, s, o, width: 1, sixteen: true, most: 8)
            })
        }
        BlockType::Q4K => {
            return Some(|w, c, s, o| unsafe {
                in_groups!(avx512::q4k_rows, w, c, s, o, width: 1, sixteen: true, most: 8)
            })
        }
        _ => {}
    }
    let _ = t;
    None
}

/// The kernels quantized weights run with at `level`, for the load log.
pub fn kernel_path(level: CpuLevel) -> &'static str {
    match level {
        CpuLevel::Avx512 => "avx512 (VNNI, 16-row tiles)",
        CpuLevel::Avx2 => "avx2 (16-row tiles for Q4_0, Q5_0, Q8_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K)",
        CpuLevel::AvxVnni => "avxvnni (AVX2's 16-row tiles, Q8_0's with vpdpbusd)",
        CpuLevel::Neon => "neon (dotprod)",
        CpuLevel::Portable => "portable",
    }
}

/// One quantized weight matrix: `rows` rows of `k / block_values` blocks of type `kind`, in
/// GGUF order or, where `interleaved`, in tiles of 16 rows (see [`super::tiles`]).
#[derive(Clone, Copy)]
pub struct QuantMatrix<'a> {
    /// The block type.
    pub kind: BlockType,
    /// The blocks, row after row (or tile after tile).
    pub data: &'a [u8],
    /// Number of rows.
    pub rows: usize,
    /// Whether the rows are interleaved into tiles of 16.
    pub interleaved: bool,
}

impl TileMatrix {
    /// The tiles as a matrix the drivers multiply.
    pub fn matrix(&self) -> QuantMatrix<'_> {
        QuantMatrix {
            kind: self.kind,
            data: &self.data,
            rows: self.rows,
            interleaved: true,
        }
    }
}

/// How one matrix's rows are computed.
#[derive(Clone, Copy)]
enum Kernel<'a> {
    /// GGUF order: a dot product per output, or a many-row kernel over packed activations.
    Rows(DotFn, Option<(ManyFn, &'a [u32], usize)>, Option<RowsFn>),
    /// Tiles of 16 rows against packed activations (`tiles::pack`; `pack_q8_k` for K-quants).
    Tiles(tile_kernels::GroupFn, &'a [u32], usize),
}

/// Quantizes every row of `x` (in parallel for prompts).
fn quantize_rows(x: &[f32], k: usize, f: &(dyn Fn(&[f32]) -> Q8Row + Sync)) -> Vec<Q8Row> {
    if x.len() / k >= 8 {
        x.par_chunks_exact(k).map(f).collect()
    } else {
        x.chunks_exact(k).map(f).collect()
    }
}

/// `level` picks the activations' quantizers and the tile kernels; `dot`, `many` and `rows`
/// the kernels of matrices in GGUF order (tests pass each alone).
#[allow(clippy::too_many_arguments)]
fn run(
    level: CpuLevel,
    dot: impl Fn(BlockType) -> DotFn,
    many: impl Fn(BlockType) -> Option<ManyFn>,
    rows: impl Fn(BlockType) -> Option<RowsFn>,
    x: &[f32],
    m: usize,
    k: usize,
    mats: &[QuantMatrix<'_>],
) -> Vec<f32> {
    assert_eq!(x.len(), m * k);
    for w in mats {
        let t = w.kind;
        assert!(
            k.is_multiple_of(t.block_values()),
            "{t:?} weight with rows of {k}"
        );
        assert_eq!(
            w.data.len(),
            w.rows * k / t.block_values() * t.block_bytes(),
            "{t:?} weight of {} rows of {k}",
            w.rows
        );
    }
    let is_k = |w: &QuantMatrix| w.kind.block_values() == QK_K;
    let tiles: Vec<Option<tile_kernels::GroupFn>> = mats
        .iter()
        .map(|w| match w.interleaved {
            true => {
                Some(tile_kernels::kernel_at(level, w.kind).expect("interleaved without a kernel"))
            }
            false => None,
        })
        .collect();
    // Tiles must not straddle two tasks, nor a matrix boundary.
    let granule = if tiles.iter().any(Option::is_some) {
        let mut start = 0;
        for w in mats {
            assert!(start % tiles::ROWS == 0, "tiles after {start} rows");
            start += w.rows;
        }
        tiles::ROWS
    } else {
        1
    };
    let quantized = |wanted: bool, f: &(dyn Fn(&[f32]) -> Q8Row + Sync)| match wanted {
        true => quantize_rows(x, k, f),
        false => Vec::new(),
    };
    let q8_0 = quantized(
        mats.iter().any(|w| !is_k(w) && !w.interleaved),
        &quantize_q8_0,
    );
    let q8_k = quantized(mats.iter().any(is_k), &|x| quantize_q8_k_at(level, x));
    // The many-row and tile kernels read every activation row at a fixed stride from one
    // buffer, so that one pointer serves all rows of a group (registers are their limit).
    let many: Vec<Option<ManyFn>> = mats
        .iter()
        .map(|w| {
            // Decoding's one row too: a row's sums must not depend on the rows beside it.
            if !w.interleaved {
                many(w.kind)
            } else {
                None
            }
        })
        .collect();
    let q8_k_packed = match mats
        .iter()
        .zip(&many)
        .any(|(w, f)| is_k(w) && (f.is_some() || w.interleaved))
    {
        true => pack_q8_k(&q8_k),
        false => (Vec::new(), 0),
    };
    let tiles_packed = match mats.iter().any(|w| w.interleaved && !is_k(w)) {
        true => tile_kernels::quantize_at(level, x, k),
        false => (Vec::new(), 0),
    };
    // Per matrix: its first output row, bytes per row, kernel and activations.
    let mut parts = Vec::with_capacity(mats.len());
    let mut start = 0;
    for ((w, many), tiles) in mats.iter().zip(many).zip(tiles) {
        let row_bytes = k / w.kind.block_values() * w.kind.block_bytes();
        let kernel = match tiles {
            Some(f) if is_k(w) => Kernel::Tiles(f, &q8_k_packed.0, q8_k_packed.1),
            Some(f) => Kernel::Tiles(f, &tiles_packed.0, tiles_packed.1),
            None => {
                let many = many.map(|f| (f, q8_k_packed.0.as_slice(), q8_k_packed.1));
                Kernel::Rows(dot(w.kind), many, rows(w.kind))
            }
        };
        let xs = if is_k(w) { &q8_k } else { &q8_0 };
        parts.push((start, row_bytes, kernel, xs.as_slice(), w.data));
        start += w.rows;
    }
    // Tasks of whole tiles, taken in turn by whichever thread is free; each writes its rows'
    // outputs straight into `[m, n]` (a tile's 16 outputs per activation row are contiguous).
    let n = start;
    let rows_per_task = (n / (rayon::current_num_threads() * 8))
        .clamp(8, 256)
        .next_multiple_of(granule);
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let dst = super::dense::SharedOut(out.as_mut_ptr());
    let tasks = n.div_ceil(rows_per_task);
    (0..tasks).into_par_iter().with_max_len(1).for_each_init(
        Vec::new,
        |scratch: &mut Vec<f32>, task| {
            let first = task * rows_per_task;
            let rows = rows_per_task.min(n - first);
            // Activation rows in blocks that stay in L1/L2 while this task's weight rows pass
            // over them (a long prompt's activations would not).
            for c0 in (0..m).step_by(COLUMN_BLOCK) {
                let c1 = (c0 + COLUMN_BLOCK).min(m);
                let mut r = 0;
                while r < rows {
                    let row_index = first + r;
                    let p = parts.partition_point(|part| part.0 <= row_index) - 1;
                    let (row0, row_bytes, kernel, xs, data) = parts[p];
                    let at = (row_index - row0) * row_bytes;
                    let (width, written) = match kernel {
                        // Every row left in this task and this matrix in one call: the
                        // kernel's setup is paid once, not per row.
                        Kernel::Rows(_, None, Some(kernel)) => {
                            let part_end = parts.get(p + 1).map_or(n, |next| next.0);
                            let len = (rows - r).min(part_end - row_index);
                            scratch.resize(len * (c1 - c0), 0f32);
                            kernel(&data[at..at + len * row_bytes], len, &xs[c0..c1], scratch);
                            (len, &scratch[..])
                        }
                        Kernel::Rows(dot, many, _) => {
                            let row = &data[at..at + row_bytes];
                            scratch.resize(c1 - c0, 0f32);
                            match many {
                                Some((many, cols, stride)) => {
                                    many(row, &cols[c0 * stride..], stride, scratch)
                                }
                                None => {
                                    for (x, o) in xs[c0..c1].iter().zip(scratch.iter_mut()) {
                                        *o = dot(row, x);
                                    }
                                }
                            }
                            (1, &scratch[..])
                        }
                        Kernel::Tiles(group, cols, stride) => {
                            let g = tiles::ROWS;
                            scratch.resize(g * (c1 - c0), 0f32);
                            group(
                                &data[at..at + g * row_bytes],
                                &cols[c0 * stride..],
                                stride,
                                scratch,
                            );
                            (g, &scratch[..])
                        }
                    };
                    for (c, outs) in written.chunks_exact(width).enumerate() {
                        let to = (c0 + c) * n + row_index;
                        // SAFETY: `to + width <= m * n`, and tasks own disjoint row ranges
                        // `first..first + rows` of every output row, so no two writes alias.
                        unsafe { std::ptr::copy_nonoverlapping(outs.as_ptr(), dst.at(to), width) };
                    }
                    r += width;
                }
            }
        },
    );
    // SAFETY: the tasks cover rows `0..n`, each writing all `m` of its outputs.
    unsafe { out.set_len(m * n) };
    out
}

/// `x`: `[m, k]` f32; `mats`: matrices reading the same `x`. Returns `[m, Σ rows]`, each
/// matrix's outputs after the previous one's (a fused projection), in one parallel pass.
/// `k` must be a multiple of every matrix's block value count.
pub fn matmul_t(x: &[f32], m: usize, k: usize, mats: &[QuantMatrix<'_>]) -> Vec<f32> {
    matmul_t_at(cpu::default_level(), x, m, k, mats, true)
}

/// [`matmul_t`] at `level` (capped to what this CPU runs), with the many-row kernels allowed
/// or not (AVX-512 VNNI's Q4_K/Q6_K): tests and benchmarks of each path.
pub fn matmul_t_at(
    level: CpuLevel,
    x: &[f32],
    m: usize,
    k: usize,
    mats: &[QuantMatrix<'_>],
    many_rows: bool,
) -> Vec<f32> {
    let many = |t| many_rows.then(|| many_at(level, t, k)).flatten();
    run(
        level,
        |t| dot_at(level, t).1,
        many,
        |t| rows_at(level, t),
        x,
        m,
        k,
        mats,
    )
}

/// Every block type with tile and row kernels, beside candle's name for it (for tests).
#[cfg(test)]
pub(crate) const TEST_TYPES: [(candle_core::quantized::GgmlDType, BlockType); 8] = {
    use candle_core::quantized::GgmlDType;
    [
        (GgmlDType::Q4_0, BlockType::Q4_0),
        (GgmlDType::Q5_0, BlockType::Q5_0),
        (GgmlDType::Q8_0, BlockType::Q8_0),
        (GgmlDType::Q4K, BlockType::Q4K),
        (GgmlDType::Q5K, BlockType::Q5K),
        (GgmlDType::Q6K, BlockType::Q6K),
        (GgmlDType::Q4_1, BlockType::Q4_1),
        (GgmlDType::Q5_1, BlockType::Q5_1),
    ]
};

/// Asserts that `got` equals `want` to `bound` of `want`'s largest magnitude (the kernels sum
/// the same exact integer block products in different orders).
#[cfg(test)]
pub(crate) fn assert_close(got: &[f32], want: &[f32], bound: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    for (i, (g, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - e).abs() <= bound * scale,
            "{what} [{i}]: {g} vs {e} (scale {scale})"
        );
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    use super::TEST_TYPES as TYPES;

    /// `w` quantized to `dtype`: its GGUF blocks.
    fn gguf_blocks(w: &Tensor, dtype: GgmlDType) -> Result<Vec<u8>, candle_core::Error> {
        Ok(QTensor::quantize(w, dtype)?.data()?.into_owned())
    }

    fn in_gguf_order(kind: BlockType, data: &[u8], rows: usize) -> QuantMatrix<'_> {
        QuantMatrix {
            kind,
            data,
            rows,
            interleaved: false,
        }
    }

    fn weights(n: usize, k: usize) -> Vec<f32> {
        (0..n * k)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0 + ((i % 7) as f32 - 3.0) * 0.01)
            .collect()
    }

    /// Every level this CPU runs against candle's block dot products (the GGML reference
    /// arithmetic): the same integers, summed in another order, so equal to f32 rounding.
    #[test]
    fn every_block_type_matches_candle_at_every_level() -> TestResult {
        println!("levels on this CPU: {:?}", cpu::runnable());
        // 288 values: an odd number of 32-blocks (the paired kernels' tail), which candle's
        // Q5_0 refuses; there the portable kernel, checked against candle above, is the reference.
        for (m, k, n) in [(3, 512, 37), (2, 288, 11), (6, 768, 9)] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0)
                .collect();
            let wt = Tensor::from_vec(weights(n, k), (n, k), &Device::Cpu)?;
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu)?;
            for (dtype, t) in TYPES {
                if k % t.block_values() != 0 {
                    continue;
                }
                let q = std::sync::Arc::new(QTensor::quantize(&wt, dtype)?);
                let data = q.data()?;
                let mat = in_gguf_order(t, &data, n);
                for mm in [1, m] {
                    let want: Vec<f32> = if k != 288 {
                        QMatMul::from_arc(q.clone())?
                            .forward(&xt.narrow(0, 0, mm)?)?
                            .flatten_all()?
                            .to_vec1()?
                    } else {
                        run(
                            CpuLevel::Portable,
                            portable_dot,
                            |_| None,
                            |_| None,
                            &x[..mm * k],
                            mm,
                            k,
                            &[mat],
                        )
                    };
                    // Candle rounds Q4_1's and Q5_1's activation sums in f16 in another order
                    // than llama.cpp (whose order Hearth follows).
                    let bound = match t {
                        BlockType::Q4_1 | BlockType::Q5_1 if k != 288 => 2e-3,
                        _ => 1e-5,
                    };
                    for level in cpu::runnable() {
                        let (ran, _) = dot_at(level, t);
                        let what = format!("{t:?} at {level} ({ran} dot) k={k} m={mm}");
                        // Each path alone, then with its rows and many-row kernels.
                        let dot = dot_at(level, t).1;
                        let got = run(
                            level,
                            |_| dot,
                            |_| None,
                            |_| None,
                            &x[..mm * k],
                            mm,
                            k,
                            &[mat],
                        );
                        assert_close(&got, &want, bound, &what);
                        if ran == CpuLevel::Neon {
                            // The portable arithmetic with `sdot`: the same results exactly.
                            let one = |t| dot_at(CpuLevel::Portable, t).1;
                            let plain =
                                run(level, one, |_| None, |_| None, &x[..mm * k], mm, k, &[mat]);
                            assert_eq!(got, plain, "{what}");
                        }
                        let got = matmul_t_at(level, &x[..mm * k], mm, k, &[mat], true);
                        assert_close(&got, &want, bound, &format!("{what}, batched"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The rows kernels (a batch's decoding rows, short prompts) give each row exactly what the
    /// one-row dot product gives it: batching must not change a sequence's tokens.
    #[test]
    fn rows_kernels_equal_the_one_row_kernel_bit_for_bit() -> TestResult {
        let mut checked = vec![];
        for (k, n) in [(288, 7), (512, 5)] {
            let wt = Tensor::from_vec(weights(n, k), (n, k), &Device::Cpu)?;
            for level in cpu::runnable() {
                for (dtype, t) in TYPES {
                    let Some(rows) = rows_at(level, t) else {
                        continue;
                    };
                    if k % t.block_values() != 0 {
                        continue;
                    }
                    let dot = dot_at(level, t).1;
                    let data = gguf_blocks(&wt, dtype)?;
                    let mat = in_gguf_order(t, &data, n);
                    for m in [1, 3, 4, 9, 21] {
                        let x: Vec<f32> = (0..m * k)
                            .map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0 + (i % 5) as f32 * 0.013)
                            .collect();
                        let alone = run(level, |_| dot, |_| None, |_| None, &x, m, k, &[mat]);
                        let batched =
                            run(level, |_| dot, |_| None, |_| Some(rows), &x, m, k, &[mat]);
                        assert_eq!(alone, batched, "{t:?} at {level}, m={m}");
                    }
                    checked.push((level, t));
                }
            }
        }
        // Portable and AVX2 have rows kernels for every type (AVX-512 for the types it runs
        // with AVX2's dot product).
        println!("rows kernels checked on this CPU: {checked:?}");
        let at = |l| checked.iter().filter(|c| c.0 == l).count();
        assert_eq!(at(CpuLevel::Portable), 2 * 8 - 3, "{checked:?}");
        if cpu::detected() >= CpuLevel::Avx2 {
            assert_eq!(at(CpuLevel::Avx2), 2 * 8 - 3, "{checked:?}");
        }
        Ok(())
    }

    /// The many-row kernels (prefill) against the one-row dot products, for row counts that
    /// make full groups of 16 and 8 and a remainder.
    #[test]
    fn many_row_kernels_match_the_one_row_kernels() -> TestResult {
        let (k, n) = (256, 13);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 29 % 89) as f32 - 44.0) / 40.0)
            .collect();
        let wt = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
        for level in cpu::runnable() {
            for (dtype, t) in TYPES {
                let Some(many) = many_at(level, t, k) else {
                    continue;
                };
                println!("many-row kernel: {t:?} at {level}");
                let dot = dot_at(level, t).1;
                let data = gguf_blocks(&wt, dtype)?;
                let mat = in_gguf_order(t, &data, n);
                for m in [2, 8, 11, 35] {
                    let x: Vec<f32> = (0..m * k)
                        .map(|i| ((i * 11 % 37) as f32 - 18.0) / 5.0)
                        .collect();
                    let one = run(level, |_| dot, |_| None, |_| None, &x, m, k, &[mat]);
                    let got = run(level, |_| dot, |_| Some(many), |_| None, &x, m, k, &[mat]);
                    assert_close(&got, &one, 1e-5, &format!("{t:?} at {level}, m={m}"));
                }
            }
        }
        Ok(())
    }

    /// Matrices of several types fused into one pass give each matrix's own outputs, side by
    /// side, for every row of `x`.
    #[test]
    fn fused_matrices_equal_their_separate_products() -> TestResult {
        for (m, shapes) in [
            (
                2,
                &[
                    (GgmlDType::Q5_0, 19usize),
                    (GgmlDType::Q6K, 8),
                    (GgmlDType::Q8_0, 5),
                ][..],
            ),
            // Q4_K_M's attention: q in Q4_K, k and v in Q8_0, a prompt's rows.
            (
                10,
                &[
                    (GgmlDType::Q4K, 256),
                    (GgmlDType::Q8_0, 128),
                    (GgmlDType::Q8_0, 128),
                ][..],
            ),
        ] {
            fused_equals_separate(m, shapes)?;
        }
        Ok(())
    }

    fn fused_equals_separate(m: usize, shapes: &[(GgmlDType, usize)]) -> TestResult {
        let k = 256;
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let mut quantized: Vec<(BlockType, Vec<u8>, usize)> = vec![];
        for &(dtype, n) in shapes {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7 % 23) as f32 - 11.0) / 13.0)
                .collect();
            let t = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
            let q = QTensor::quantize(&t, dtype)?;
            let kind = BlockType::of(dtype).ok_or("no kernel for the type")?;
            quantized.push((kind, q.data()?.into_owned(), n));
        }
        let mats: Vec<QuantMatrix> = quantized
            .iter()
            .map(|(kind, data, rows)| QuantMatrix {
                kind: *kind,
                data,
                rows: *rows,
                interleaved: false,
            })
            .collect();
        let fused = matmul_t(&x, m, k, &mats);
        let total: usize = mats.iter().map(|w| w.rows).sum();
        assert_eq!(fused.len(), m * total);
        let mut col = 0;
        for w in &mats {
            let alone = matmul_t(&x, m, k, &[*w]);
            for i in 0..m {
                for j in 0..w.rows {
                    assert_eq!(
                        fused[i * total + col + j],
                        alone[i * w.rows + j],
                        "{:?} row {i} col {j}",
                        w.kind
                    );
                }
            }
            col += w.rows;
        }
        Ok(())
    }
}
