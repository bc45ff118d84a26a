//! A linear layer, `y = x · Wᵀ + b`, that keeps its weight as stored: dense in its dtype, or in
//! quantized GGUF blocks.
//!
//! Dense: on the CPU, activations are f32 and few-row products go to `crate::kernels::dense`,
//! which reads bf16/f16 weights directly; longer prefills use candle's gemm on an f32 view of
//! the weight. On GPUs candle's matmul runs in the model dtype. Quantized: on the CPU, Hearth's
//! block kernels ([`crate::kernels`]; Q4_0/Q5_0/Q8_0/Q4_1/Q5_1 and Q4_K/Q5_K/Q6_K rearranged at
//! load into 16-row tiles where the CPU runs AVX2 or AVX-512, [`crate::kernels::tiles`]),
//! everything else candle's `QMatMul`.
//!
//! Several matrices that read the same input (q, k and v; gate and up) are fused: dense ones
//! are concatenated into one matrix, quantized ones (often of different types) run in turn
//! and their outputs are concatenated.

use crate::kernels::dense::WeightRows;
use crate::kernels::dense_matmul::matmul_t_at;
use crate::kernels::tiles::{self, TileMatrix};
pub(crate) use crate::kernels::with_cpu_f32;
use crate::kernels::{BlockType, KernelContext, QuantMatrix};
use crate::load::weights::{tensor_bytes, Matrix};
use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Result, Storage, Tensor, D};
use std::sync::Arc;

/// Up to this many rows of activations, f32 weights take the row kernel; more go to gemm, whose
/// register blocking suits a long prompt better. Half-precision weights (bf16, f16) take the
/// row kernel at every length: gemm would widen or pack the whole weight on every call, and
/// was no faster, so their prompts sum exactly as decoding does (figures: docs/benchmarks.md,
/// "Kernel choices").
const ROW_KERNEL_MAX_ROWS: usize = 16;

/// A linear layer `x·Wᵀ + b` over dense, quantized or tiled weights, possibly several fused.
#[derive(Debug, Clone)]
pub struct Linear {
    parts: Vec<Part>,
    bias: Option<Tensor>,
}

#[derive(Debug, Clone)]
enum Part {
    /// `[out, in]`, contiguous.
    Dense(Tensor),
    Quantized(QMatMul, Arc<QTensor>),
    /// Q4_0/Q5_0/Q8_0/Q4_1/Q5_1 blocks in tiles of 16 rows, on CPUs with their kernels.
    Tiles(Arc<TileMatrix>),
}

impl Linear {
    /// A layer of one dense `weight` (`[out, in]`) and an optional bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let weight = weight.contiguous()?;
        dense_on_huge_pages(&weight)?;
        Ok(Self {
            parts: vec![Part::Dense(weight)],
            bias,
        })
    }

    /// One layer computing the outputs of every matrix in `mats`, in order.
    pub fn fused(mats: Vec<Matrix>, bias: Option<Tensor>) -> Result<Self> {
        let dense: Vec<&Tensor> = mats
            .iter()
            .filter_map(|m| match m {
                Matrix::Dense(t) => Some(t),
                Matrix::Quantized(_) | Matrix::Tiles(_) => None,
            })
            .collect();
        if dense.len() == mats.len() {
            return Self::new(Tensor::cat(&dense, 0)?, bias);
        }
        // Tiles need every part's first row at a multiple of 16.
        let tiles_fit = mats.iter().all(|m| match m {
            Matrix::Dense(t) => t.dim(0).is_ok_and(|r| r % tiles::ROWS == 0),
            Matrix::Quantized(q) => q.shape().dims()[0] % tiles::ROWS == 0,
            Matrix::Tiles(t) => t.rows % tiles::ROWS == 0,
        });
        let parts = mats
            .into_iter()
            .map(|m| match m {
                Matrix::Dense(t) => {
                    let t = t.contiguous()?;
                    dense_on_huge_pages(&t)?;
                    Ok(Part::Dense(t))
                }
                Matrix::Tiles(t) if tiles_fit => Ok(Part::Tiles(t)),
                Matrix::Tiles(t) => {
                    let q = Arc::new(tiles_to_qtensor(&t)?);
                    Ok(Part::Quantized(QMatMul::from_arc(q.clone())?, q))
                }
                Matrix::Quantized(q) => {
                    if q.device().is_cpu() {
                        crate::device::huge_pages::back_with_huge_pages(&q.data()?);
                    }
                    Ok(Part::Quantized(QMatMul::from_arc(q.clone())?, q))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { parts, bias })
    }
}

impl Linear {
    /// The layer over the first `n` rows of its weight alone (outputs `0..n`), with the same
    /// kernels: a draft model's LM head over the likeliest ids. `None` where the layer has
    /// several parts or a bias.
    pub fn row_prefix(&self, n: usize) -> Result<Option<Linear>> {
        let ([part], None) = (self.parts.as_slice(), &self.bias) else {
            return Ok(None);
        };
        let q = match part {
            Part::Dense(t) => {
                let rows = t.dim(0)?.min(n);
                let prefix = Linear::new(t.narrow(0, 0, rows)?, None)?;
                return Ok(Some(prefix));
            }
            Part::Quantized(_, q) => q.clone(),
            Part::Tiles(t) => Arc::new(tiles_to_qtensor(t)?),
        };
        let (rows, cols) = q.shape().dims2()?;
        let n = n.min(rows);
        let data = q.data()?;
        let row_bytes = data.len() / rows.max(1);
        let prefix = qtensor_from_ggml(
            q.dtype(),
            &data[..n * row_bytes],
            vec![n, cols],
            &q.device(),
        )?;
        let prefix = Linear::fused(vec![Matrix::Quantized(Arc::new(prefix))], None)?;
        Ok(Some(prefix))
    }

    /// Rows `ids` of its weight, f32 `[ids.len(), in]` (one part, no bias; else `None`).
    pub fn weight_rows(&self, ids: &Tensor) -> Result<Option<Tensor>> {
        let ([part], None) = (self.parts.as_slice(), &self.bias) else {
            return Ok(None);
        };
        Ok(Some(match part {
            Part::Dense(t) => t.index_select(ids, 0)?.to_dtype(DType::F32)?,
            Part::Quantized(_, q) => q.embedding(ids)?.to_dtype(DType::F32)?,
            Part::Tiles(t) => tiles_to_qtensor(t)?.embedding(ids)?.to_dtype(DType::F32)?,
        }))
    }

    /// Bytes of the weight and bias as held in memory: what one product reads.
    pub fn bytes(&self) -> usize {
        let parts: usize = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Dense(t) => tensor_bytes(t),
                Part::Quantized(_, q) => q.storage_size_in_bytes(),
                Part::Tiles(t) => t.data.len(),
            })
            .sum();
        parts + self.bias.as_ref().map_or(0, tensor_bytes)
    }
}

impl Linear {
    /// `x · Wᵀ` for `m` rows of f32 on the CPU, straight from and into slices, with the
    /// kernels and sums [`Linear::forward`] takes for the same rows on the CPU (so the same
    /// results, bit for bit): for callers that run many small products side by side, the
    /// experts of a mixture-of-experts layer. `None` where this layer takes candle's ops: a
    /// bias, a GPU, a type without Hearth's kernels, an f32 weight whose prompt goes to gemm.
    pub(crate) fn cpu_product(
        &self,
        x: &[f32],
        m: usize,
        kc: &KernelContext,
    ) -> Result<Option<Vec<f32>>> {
        if self.bias.is_some() || m == 0 || !x.len().is_multiple_of(m) {
            return Ok(None);
        }
        let k = x.len() / m;
        if let [Part::Dense(w)] = self.parts.as_slice() {
            if w.dims2()?.1 != k {
                return Ok(None);
            }
            return with_dense_rows(w, m, kc.rows_are_sequences, |rows, n| {
                matmul_t_at(kc.level, x, m, k, rows, n)
            });
        }
        with_quant_mats(&self.parts, k, |mats| quant_product(x, m, k, mats, kc))
    }
}

/// Tiles back in GGUF order, as candle's quantized tensor (for the paths only candle has).
fn tiles_to_qtensor(t: &TileMatrix) -> Result<QTensor> {
    let dtype = match t.kind {
        BlockType::Q4_0 => GgmlDType::Q4_0,
        BlockType::Q5_0 => GgmlDType::Q5_0,
        BlockType::Q8_0 => GgmlDType::Q8_0,
        BlockType::Q4_1 => GgmlDType::Q4_1,
        BlockType::Q5_1 => GgmlDType::Q5_1,
        BlockType::Q4K => GgmlDType::Q4K,
        BlockType::Q5K => GgmlDType::Q5K,
        BlockType::Q6K => GgmlDType::Q6K,
    };
    qtensor_from_ggml(dtype, &t.to_blocks(), vec![t.rows, t.cols], &Device::Cpu)
}

/// A dense CPU weight's bytes onto huge pages (see [`crate::huge_pages`]).
fn dense_on_huge_pages(w: &Tensor) -> Result<()> {
    let (storage, _) = w.storage_and_layout();
    if let Storage::Cpu(s) = &*storage {
        let bytes: &[u8] = match w.dtype() {
            DType::F32 => bytemuck::cast_slice(s.as_slice::<f32>()?),
            DType::BF16 => bytemuck::cast_slice(s.as_slice::<half::bf16>()?),
            DType::F16 => bytemuck::cast_slice(s.as_slice::<half::f16>()?),
            _ => return Ok(()),
        };
        crate::device::huge_pages::back_with_huge_pages(bytes);
    }
    Ok(())
}

impl Part {
    fn forward(&self, x: &Tensor, kc: &KernelContext) -> Result<Tensor> {
        match self {
            Part::Quantized(_, q)
                if x.device().is_cpu()
                    && !kc.rows_are_sequences
                    && x.elem_count() / x.dim(D::Minus1)? >= kc.options.dequantize_from_rows
                    && !with_block_kernels(q, x)? =>
            {
                let w = q.dequantize(x.device())?.to_dtype(x.dtype())?;
                x.broadcast_matmul(&w.t()?)
            }
            Part::Quantized(q, w) if with_block_kernels(w, x)? => {
                match quantized_rows(std::slice::from_ref(self), x, kc)? {
                    Some(y) => Ok(y),
                    None => q.forward(x),
                }
            }
            Part::Quantized(q, _) => q.forward(x),
            // Tiles exist only on the CPU; other activation dtypes go through f32.
            Part::Tiles(t) => {
                let x32 = x.to_dtype(DType::F32)?;
                match quantized_rows(std::slice::from_ref(self), &x32, kc)? {
                    Some(y) => y.to_dtype(x.dtype()),
                    None => QMatMul::from_qtensor(tiles_to_qtensor(t)?)?.forward(x),
                }
            }
            Part::Dense(w) => match cpu_rows(w, x, kc)? {
                Some(y) => Ok(y),
                None if w.dtype() == x.dtype() => x.broadcast_matmul(&w.t()?),
                None => x.broadcast_matmul(&w.to_dtype(x.dtype())?.t()?),
            },
        }
    }
}

/// Whether `w` has Hearth's kernels: then prompts of every length keep its blocks, and each
/// output sums exactly as decoding sums it (rows kernels, tiles and many-row kernels add each
/// activation row's block products in the one-row kernel's order). Widening the weight to f32
/// for gemm was no faster (docs/benchmarks.md, "Kernel choices"), takes four times the
/// weight's memory on every call, and would sum differently from decoding, so a
/// conversation's greedy tokens would depend on what was in the KV cache.
fn with_block_kernels(w: &QTensor, x: &Tensor) -> Result<bool> {
    Ok(x.device().is_cpu() && BlockType::of(w.dtype()).is_some())
}

/// Few rows through quantized matrices on the CPU, all in one pass with Hearth's kernels
/// ([`crate::kernels::quant_matmul`]), or `None` where some part has none (candle's then run).
fn quantized_rows(parts: &[Part], x: &Tensor, kc: &KernelContext) -> Result<Option<Tensor>> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let k = x.dim(D::Minus1)?;
    let m = x.elem_count() / k;
    let product = with_quant_mats(parts, k, |mats| {
        let n = mats.iter().map(|w| w.rows).sum();
        with_cpu_rows(x, n, |xv| quant_product(xv, m, k, mats, kc))
    })?;
    Ok(product.transpose()?.flatten())
}

/// `x · Wᵀ` over quantized matrices at the context's level, with the kernels it allows.
fn quant_product(
    x: &[f32],
    m: usize,
    k: usize,
    mats: &[QuantMatrix<'_>],
    kc: &KernelContext,
) -> Vec<f32> {
    let many = kc.options.many_row_kernels;
    crate::kernels::quant_matmul::matmul_t_at(kc.level, x, m, k, mats, many)
}

/// `f` on every part as a matrix of Hearth's quantized kernels for rows of `k` values, or
/// `None` where some part is not one (dense, or a type without kernels).
fn with_quant_mats<R>(
    parts: &[Part],
    k: usize,
    f: impl FnOnce(&[QuantMatrix<'_>]) -> R,
) -> Result<Option<R>> {
    // Per part: its tiles, or its GGUF blocks (borrowed from candle's CPU storage).
    let mut found = Vec::with_capacity(parts.len());
    for part in parts {
        let w = match part {
            Part::Tiles(t) if t.cols == k => {
                found.push(Err(t));
                continue;
            }
            Part::Quantized(_, w) if w.device().is_cpu() => w,
            _ => return Ok(None),
        };
        let Some(kind) = BlockType::of(w.dtype()) else {
            return Ok(None);
        };
        let (rows, cols) = w.shape().dims2()?;
        if cols != k || !k.is_multiple_of(kind.block_values()) {
            return Ok(None);
        }
        found.push(Ok((kind, w.data()?, rows)));
    }
    let mats: Vec<QuantMatrix<'_>> = found
        .iter()
        .map(|f| match f {
            Err(tiles) => tiles.matrix(),
            Ok((kind, data, rows)) => QuantMatrix {
                kind: *kind,
                data,
                rows: *rows,
                interleaved: false,
            },
        })
        .collect();
    Ok(Some(f(&mats)))
}

fn cpu_rows(weight: &Tensor, x: &Tensor, kc: &KernelContext) -> Result<Option<Tensor>> {
    if !x.device().is_cpu() || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let k = weight.dim(1)?;
    let m = x.elem_count() / k;
    let product = with_dense_rows(weight, m, kc.rows_are_sequences, |rows, n| {
        with_cpu_rows(x, n, |xv| matmul_t_at(kc.level, xv, m, k, rows, n))
    })?;
    Ok(product.transpose()?.flatten())
}

/// `f` on a dense CPU weight's rows and their count, where `m` activation rows take the row
/// kernel (see [`ROW_KERNEL_MAX_ROWS`]; `sequences`: every row is a sequence of its own).
fn with_dense_rows<R>(
    weight: &Tensor,
    m: usize,
    sequences: bool,
    f: impl FnOnce(WeightRows<'_>, usize) -> R,
) -> Result<Option<R>> {
    let n = weight.dim(0)?;
    let max_rows = match weight.dtype() {
        DType::F16 | DType::BF16 => usize::MAX,
        _ => ROW_KERNEL_MAX_ROWS,
    };
    if !weight.device().is_cpu() || (m > max_rows && !sequences) {
        return Ok(None);
    }
    let (ws, wl) = weight.storage_and_layout();
    let (Storage::Cpu(ws), Some((w0, w1))) = (&*ws, wl.contiguous_offsets()) else {
        return Ok(None);
    };
    let rows = match weight.dtype() {
        DType::F32 => WeightRows::F32(&ws.as_slice::<f32>()?[w0..w1]),
        DType::BF16 => WeightRows::Bf16(&ws.as_slice::<half::bf16>()?[w0..w1]),
        DType::F16 => WeightRows::F16(&ws.as_slice::<half::f16>()?[w0..w1]),
        _ => return Ok(None),
    };
    Ok(Some(f(rows, n)))
}

/// Runs `product` on the rows of `x` (f32, on the CPU) as one slice and shapes its result like
/// `x` with a last dimension of `n`; `None` where `x`'s storage is not on the CPU.
fn with_cpu_rows(
    x: &Tensor,
    n: usize,
    product: impl FnOnce(&[f32]) -> Vec<f32>,
) -> Result<Option<Tensor>> {
    let x = x.contiguous()?;
    let (xs, xl) = x.storage_and_layout();
    let (Storage::Cpu(xs), Some((x0, x1))) = (&*xs, xl.contiguous_offsets()) else {
        return Ok(None);
    };
    let out = product(&xs.as_slice::<f32>()?[x0..x1]);
    let mut shape = x.dims().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Ok(Some(Tensor::from_vec(out, shape, &Device::Cpu)?))
}

impl Linear {
    /// `x · Wᵀ + b`, with the kernels `kc` picks on the CPU. From `dequantize_from_rows` rows on
    /// (prompt prefills), a quantized matrix of a type Hearth has no kernel for (candle's then
    /// run: Q2_K, Q3_K, …) is widened to f32 and multiplied with gemm, several times faster
    /// than candle's one dot product per row (docs/benchmarks.md, "Kernel choices"). The eight
    /// types with kernels here never are: their prompts sum exactly as decoding does (see
    /// `with_block_kernels`).
    pub fn forward(&self, x: &Tensor, kc: &KernelContext) -> Result<Tensor> {
        let fused = quantized_rows(&self.parts, x, kc)?;
        let y = match (fused, self.parts.as_slice()) {
            (Some(y), _) => y,
            (None, [one]) => one.forward(x, kc)?,
            (None, parts) => {
                let outs = parts
                    .iter()
                    .map(|p| p.forward(x, kc))
                    .collect::<Result<Vec<_>>>()?;
                Tensor::cat(&outs, D::Minus1)?
            }
        };
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}
