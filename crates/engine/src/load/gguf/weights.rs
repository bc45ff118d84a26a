//! A GGUF file's tensors as a model's weights, by Hugging Face names: read straight into the
//! buffers the model keeps (on huge pages), quantized blocks kept or laid out in tiles.

use super::names::{gguf_tensor, mtp_tensor};
use super::{tensor_bytes, GgufFile};
use crate::device::huge_pages::WeightBytes;
use crate::error::{EngineError, Result};
use crate::kernels::tiles::{self, TileMatrix};
use crate::kernels::{BlockType, KernelContext};
use crate::load::weights::{Matrix, WeightSource};
use candle_core::quantized::gguf_file::TensorInfo;
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

/// Where a tensor (or one expert's slice of one) lies in the file.
struct Located {
    name: String,
    dtype: GgmlDType,
    dims: Vec<usize>,
    start: u64,
    /// Read as bytes and rebuilt in `dims`: one expert of a 3-D tensor, or a shape the file
    /// writes with other leading ones.
    slice: bool,
}

/// The GGUF file as a [`WeightSource`], by Hugging Face tensor names.
pub struct GgufWeights {
    file: Arc<GgufFile>,
    /// Where the multi-token-prediction head's tensors (`mtp.*`) are.
    mtp_block: Option<usize>,
    device: Device,
    kernels: KernelContext,
}

impl GgufWeights {
    /// The model built from these weights runs its products as `kernels` says; its matrices
    /// are laid out for that level (tiles where it has tile kernels).
    pub fn with_kernels(mut self, kernels: KernelContext) -> Self {
        self.kernels = kernels;
        self
    }
}

impl GgufFile {
    /// The file's tensors as weights on `device`.
    pub fn weights(self: &Arc<Self>, device: &Device) -> GgufWeights {
        GgufWeights {
            mtp_block: self.mtp_block(),
            file: self.clone(),
            device: device.clone(),
            kernels: KernelContext::default_level(),
        }
    }
}

impl GgufWeights {
    /// The name the file uses: `qwen35` files call the norm before the feed-forward block
    /// `post_attention_norm` where the others say `ffn_norm`.
    fn present(&self, (name, expert): (String, Option<usize>)) -> (String, Option<usize>) {
        let (name, expert) = match (name.strip_prefix("mtp."), self.mtp_block) {
            (Some(rest), Some(block)) => mtp_tensor(rest, block),
            _ => (name, expert),
        };
        let infos = &self.file.content.tensor_infos;
        if infos.contains_key(&name) {
            return (name, expert);
        }
        match name.strip_suffix(".ffn_norm.weight") {
            Some(block) if infos.contains_key(&format!("{block}.post_attention_norm.weight")) => {
                (format!("{block}.post_attention_norm.weight"), expert)
            }
            _ => (name, expert),
        }
    }

    /// The file's tensor `hf` (or the slice of one expert) with its expected shape checked,
    /// and where its data starts.
    fn info(&self, hf: &str, shape: &[usize]) -> Result<Located> {
        let (name, expert) = self.present(gguf_tensor(hf));
        let info = self.file.content.tensor_infos.get(&name).ok_or_else(|| {
            EngineError::MissingTensor {
                name: name.clone(),
                files: self.file.path.display().to_string(),
            }
        })?;
        let dims = info.shape.dims();
        let mismatch = |expected: Vec<usize>| EngineError::ShapeMismatch {
            name: name.clone(),
            expected,
            found: dims.to_vec(),
        };
        // Checked when the file was opened; an overflow here is still an error, not a wrap.
        let overflow = || self.file.err(format!("tensor `{name}`: offset overflows"));
        let mut start = self
            .file
            .content
            .tensor_data_offset
            .checked_add(info.offset)
            .ok_or_else(overflow)?;
        match expert {
            None if !same_shape(dims, shape) => return Err(mismatch(shape.to_vec())),
            None => {}
            Some(e) => {
                if dims.len() != 3 || dims[1..] != *shape {
                    let mut expected = vec![dims.first().copied().unwrap_or(0)];
                    expected.extend(shape);
                    return Err(mismatch(expected));
                }
                if e >= dims[0] {
                    return Err(self.file.err(format!(
                        "tensor `{name}` holds {} experts; the model needs expert {e}",
                        dims[0]
                    )));
                }
                let one = TensorInfo {
                    ggml_dtype: info.ggml_dtype,
                    shape: shape.into(),
                    offset: 0,
                };
                let bytes = tensor_bytes(&one)
                    .map_err(|m| self.file.err(format!("tensor `{name}`: {m}")))?;
                start = (e as u64)
                    .checked_mul(bytes)
                    .and_then(|o| start.checked_add(o))
                    .ok_or_else(overflow)?;
            }
        }
        Ok(Located {
            name,
            dtype: info.ggml_dtype,
            dims: shape.to_vec(),
            start,
            slice: expert.is_some() || dims != shape,
        })
    }

    /// A quantized matrix read straight into 16-row tiles, where this CPU has their kernels
    /// (`None` otherwise): a few groups of rows at a time, so loading needs no second copy of
    /// the matrix.
    fn tiles(&self, hf: &str, shape: &[usize]) -> Result<Option<TileMatrix>> {
        let Located {
            name, dtype, start, ..
        } = self.info(hf, shape)?;
        let Some(kind) = BlockType::of(dtype) else {
            return Ok(None);
        };
        let [rows, cols] = *shape else {
            return Ok(None);
        };
        if !self.device.is_cpu()
            || cols % kind.block_values() != 0
            || !tiles::supported(self.kernels.level, kind, rows)
        {
            return Ok(None);
        }
        let mut reader = self.file.reader()?;
        read_tiles(&mut *reader, start, kind, rows, cols)
            .map(Some)
            .map_err(|e| self.file.tensor_err(&name, &e))
    }

    /// An F16, BF16 or F32 tensor read on the CPU straight into the buffer the dense tensor
    /// keeps (through a quantized tensor the buffer was copied once more, and loading peaked at
    /// the model plus its largest tensor); `None` for block types.
    fn dense_cpu(&self, hf: &str, shape: &[usize]) -> Result<Option<Tensor>> {
        let Located {
            name,
            dtype,
            start,
            dims,
            ..
        } = self.info(hf, shape)?;
        let elems = dims.iter().product();
        let mut reader = self.file.reader()?;
        let tensor = match dtype {
            GgmlDType::F16 => read_dense::<half::f16>(&mut *reader, start, elems, shape),
            GgmlDType::BF16 => read_dense::<half::bf16>(&mut *reader, start, elems, shape),
            GgmlDType::F32 => read_dense::<f32>(&mut *reader, start, elems, shape),
            _ => return Ok(None),
        };
        tensor
            .map(Some)
            .map_err(|e| self.file.tensor_err(&name, &e))
    }

    fn qtensor(&self, hf: &str, shape: &[usize]) -> Result<candle_core::quantized::QTensor> {
        let t = self.info(hf, shape)?;
        let mut reader = self.file.reader()?;
        let loaded = match (&self.device, t.slice) {
            (Device::Cpu, _) => read_cpu(&mut *reader, t.start, t.dtype, &t.dims),
            // One expert of a 3-D tensor: its blocks, then onto the device.
            (_, true) => read_cpu(&mut *reader, t.start, t.dtype, &t.dims).and_then(|q| {
                let bytes = q.data()?;
                candle_core::quantized::ggml_file::qtensor_from_ggml(
                    t.dtype,
                    &bytes,
                    t.dims.clone(),
                    &self.device,
                )
            }),
            (_, false) => self
                .file
                .content
                .tensor(&mut *reader, &t.name, &self.device),
        };
        let name = t.name;
        loaded.map_err(|e| self.file.tensor_err(&name, &e))
    }
}

/// One shape up to leading ones: converters write a `[1, n]` weight as `[n]` or as `[1, n]`
/// (ggml pads every shape with ones), and both hold the same values in the same order.
fn same_shape(file: &[usize], wanted: &[usize]) -> bool {
    let strip = |d: &[usize]| d.iter().position(|&n| n != 1).map_or(0, |i| d.len() - i);
    let (f, w) = (strip(file), strip(wanted));
    file[file.len() - f..] == wanted[wanted.len() - w..]
}

/// Reads a tensor's blocks from the file straight into the buffer the model keeps (candle's
/// reader goes through a second, temporary copy, which raised the peak memory of loading by
/// the largest tensor), with that buffer on huge pages from its first touch.
fn read_cpu(
    reader: &mut (impl Read + Seek),
    start: u64,
    dtype: GgmlDType,
    dims: &[usize],
) -> candle_core::Result<QTensor> {
    use candle_core::quantized::k_quants::*;
    let Some(elems) = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) else {
        candle_core::bail!("shape {dims:?} has more elements than fit in memory");
    };
    if !elems.is_multiple_of(dtype.block_size()) {
        candle_core::bail!(
            "{elems} elements do not fill whole {dtype:?} blocks of {}",
            dtype.block_size()
        );
    }
    let blocks = elems / dtype.block_size();
    let Some(bytes) = blocks.checked_mul(dtype.type_size()) else {
        candle_core::bail!("shape {dims:?} needs more bytes than fit in memory");
    };
    seek_to_tensor(reader, start, bytes)?;
    let storage = match dtype {
        GgmlDType::F32 => read_blocks::<f32>(reader, blocks)?,
        GgmlDType::F16 => read_blocks::<half::f16>(reader, blocks)?,
        GgmlDType::BF16 => read_blocks::<half::bf16>(reader, blocks)?,
        GgmlDType::Q4_0 => read_blocks::<BlockQ4_0>(reader, blocks)?,
        GgmlDType::Q4_1 => read_blocks::<BlockQ4_1>(reader, blocks)?,
        GgmlDType::Q5_0 => read_blocks::<BlockQ5_0>(reader, blocks)?,
        GgmlDType::Q5_1 => read_blocks::<BlockQ5_1>(reader, blocks)?,
        GgmlDType::Q8_0 => read_blocks::<BlockQ8_0>(reader, blocks)?,
        GgmlDType::Q8_1 => read_blocks::<BlockQ8_1>(reader, blocks)?,
        GgmlDType::Q2K => read_blocks::<BlockQ2K>(reader, blocks)?,
        GgmlDType::Q3K => read_blocks::<BlockQ3K>(reader, blocks)?,
        GgmlDType::Q4K => read_blocks::<BlockQ4K>(reader, blocks)?,
        GgmlDType::Q5K => read_blocks::<BlockQ5K>(reader, blocks)?,
        GgmlDType::Q6K => read_blocks::<BlockQ6K>(reader, blocks)?,
        GgmlDType::Q8K => read_blocks::<BlockQ8K>(reader, blocks)?,
    };
    QTensor::new(storage, dims)
}

/// Positions `reader` at a tensor's `bytes` from `start`, or says the file is too short.
fn seek_to_tensor(
    reader: &mut (impl Read + Seek),
    start: u64,
    bytes: usize,
) -> candle_core::Result<()> {
    let file_len = reader.seek(SeekFrom::End(0))?;
    let end = start.saturating_add(bytes as u64);
    if end > file_len {
        candle_core::bail!("needs bytes {start}..{end} but the file has {file_len} (truncated?)");
    }
    reader.seek(SeekFrom::Start(start))?;
    Ok(())
}

/// `rows` rows of `cols` values of a tile type, from `start`, into tiles on huge pages (a
/// mapping of their own, huge from the first write: nothing is copied onto them later).
fn read_tiles(
    reader: &mut (impl Read + Seek),
    start: u64,
    kind: BlockType,
    rows: usize,
    cols: usize,
) -> candle_core::Result<TileMatrix> {
    let bytes = rows
        .checked_mul(cols / kind.block_values())
        .and_then(|blocks| blocks.checked_mul(kind.block_bytes()))
        .filter(|_| rows > 0 && cols.is_multiple_of(kind.block_values()));
    let Some(bytes) = bytes else {
        candle_core::bail!("{rows}×{cols} {kind:?} does not fit in memory as whole blocks");
    };
    seek_to_tensor(reader, start, bytes)?;
    let mut data = WeightBytes::zeroed(bytes);
    // Groups of 16 rows read a few MiB at a time and interleaved in parallel (rearranging the
    // K-quants' bytes took as long as reading them).
    let group = bytes / rows * tiles::ROWS;
    let batch = group * (4usize << 20).div_ceil(group);
    let mut blocks = vec![0u8; batch.min(bytes)];
    for tiles in data.chunks_mut(batch) {
        let blocks = &mut blocks[..tiles.len()];
        reader.read_exact(blocks)?;
        blocks
            .par_chunks_exact(group)
            .zip(tiles.par_chunks_exact_mut(group))
            .for_each(|(blocks, tiles)| tiles::interleave_group(kind, blocks, cols, tiles));
    }
    Ok(TileMatrix {
        kind,
        rows,
        cols,
        data,
    })
}

fn read_blocks<T: candle_core::quantized::k_quants::GgmlType + 'static>(
    reader: &mut impl Read,
    blocks: usize,
) -> candle_core::Result<QStorage> {
    Ok(QStorage::Cpu(Box::new(read_vec::<T>(reader, blocks)?)))
}

/// `elems` values of `T` from `start` as a CPU tensor of `shape`, read into the buffer it keeps.
fn read_dense<T: candle_core::quantized::k_quants::GgmlType + candle_core::WithDType>(
    reader: &mut (impl Read + Seek),
    start: u64,
    elems: usize,
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let Some(bytes) = elems.checked_mul(std::mem::size_of::<T>()) else {
        candle_core::bail!("{elems} values do not fit in memory");
    };
    seek_to_tensor(reader, start, bytes)?;
    Tensor::from_vec(read_vec::<T>(reader, elems)?, shape, &Device::Cpu)
}

/// `blocks` blocks of `T` from `reader`, in a buffer on huge pages from its first touch.
fn read_vec<T: candle_core::quantized::k_quants::GgmlType>(
    reader: &mut impl Read,
    blocks: usize,
) -> candle_core::Result<Vec<T>> {
    let mut data: Vec<T> = Vec::with_capacity(blocks);
    let bytes = blocks * std::mem::size_of::<T>();
    crate::device::huge_pages::prefer_huge_pages(data.as_ptr() as *const u8, bytes);
    data.resize(blocks, T::zeros());
    // SAFETY: GGML block types are plain `repr(C)` integers and floats without padding
    // (candle asserts their sizes), so any bytes are a valid value; the slice covers exactly
    // the initialised elements.
    let raw = unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, bytes) };
    reader.read_exact(raw)?;
    Ok(data)
}

impl WeightSource for GgufWeights {
    fn device(&self) -> &Device {
        &self.device
    }
    fn dtype(&self) -> DType {
        DType::F32
    }
    fn contains(&self, name: &str) -> bool {
        self.file
            .content
            .tensor_infos
            .contains_key(&self.present(gguf_tensor(name)).0)
    }
    fn tensor(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Ok(self
            .qtensor(name, shape)?
            .dequantize(&self.device)?
            .to_dtype(dtype)?)
    }
    fn kernels(&self) -> KernelContext {
        self.kernels
    }
    fn projection(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        match self.tiles(name, shape)? {
            Some(tiles) => Ok(Matrix::Tiles(Arc::new(tiles))),
            None => self.matrix(name, shape),
        }
    }
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        if self.device.is_cpu() {
            if let Some(dense) = self.dense_cpu(name, shape)? {
                return Ok(Matrix::Dense(dense));
            }
        }
        let q = self.qtensor(name, shape)?;
        // Unquantized matrices (F16, BF16, F32 files) run as dense weights in their own type:
        // the dense kernels read half-precision rows directly, candle's quantized path has no
        // fast half-precision product.
        let dense = match q.dtype() {
            GgmlDType::F16 => Some(DType::F16),
            GgmlDType::BF16 => Some(DType::BF16),
            GgmlDType::F32 => Some(DType::F32),
            _ => None,
        };
        match dense {
            Some(dtype) => Ok(Matrix::Dense(q.dequantize(&self.device)?.to_dtype(dtype)?)),
            None => Ok(Matrix::Quantized(Arc::new(q))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_up_to_leading_ones() {
        assert!(same_shape(&[2048], &[1, 2048]));
        assert!(same_shape(&[1, 2048], &[2048]));
        assert!(same_shape(&[1], &[1, 1]));
        assert!(!same_shape(&[2048, 1], &[2048]));
        assert!(!same_shape(&[2, 2048], &[1, 2048]));
    }
}
