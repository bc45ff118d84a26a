//! Where a model's weights come from. [`WeightSource`] hands out tensors by their Hugging Face
//! names, each checked against the shape the model expects; [`Weights`] is the safetensors
//! source (memory-mapped, looked up by name across shards), `crate::load::gguf` the GGUF one.

use crate::error::{EngineError, Result};
use crate::kernels::tiles::TileMatrix;
use crate::kernels::KernelContext;
use candle_core::quantized::QTensor;
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A weight matrix `[out, in]`: dense, still in its quantized blocks, or in the 16-row tiles
/// of the CPU kernels ([`crate::kernels::tiles`]).
#[derive(Debug, Clone)]
pub enum Matrix {
    /// A dense tensor in the model's dtype.
    Dense(Tensor),
    /// GGUF blocks, as candle's quantized tensor.
    Quantized(Arc<QTensor>),
    /// Blocks interleaved in 16-row tiles for the CPU kernels.
    Tiles(Arc<TileMatrix>),
}

impl Matrix {
    /// Bytes of the matrix as held in memory.
    pub fn bytes(&self) -> usize {
        match self {
            Self::Dense(t) => tensor_bytes(t),
            Self::Quantized(q) => q.storage_size_in_bytes(),
            Self::Tiles(t) => t.data.len(),
        }
    }
}

/// Tensors by Hugging Face name, checked against the shapes the model expects.
pub trait WeightSource {
    /// The device tensors are put on.
    fn device(&self) -> &Device;
    /// The storage dtype of dense weights (f32 for quantized files, whose blocks stay as is).
    fn dtype(&self) -> DType;
    /// Whether the source holds tensor `name`.
    fn contains(&self, name: &str) -> bool;
    /// A dense tensor (norms, biases, …) in `dtype`.
    fn tensor(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor>;
    /// A weight matrix, quantized when the file is.
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<Matrix>;
    /// A matrix only ever multiplied (a linear layer's weight, never looked up by row), which
    /// a source may hand out in the layout of the CPU kernels.
    fn projection(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        self.matrix(name, shape)
    }
    /// How the model built from this source runs its products on the CPU: the level its
    /// matrices are laid out for, and the kernels its layers may take.
    fn kernels(&self) -> KernelContext {
        KernelContext::default_level()
    }
}

/// Safetensors weights: memory-mapped files, looked up by tensor name across shards.
pub struct Weights {
    files: Vec<(PathBuf, MmapedSafetensors)>,
    /// Tensor name → index into `files`.
    index: HashMap<String, usize>,
    dtype: DType,
    device: Device,
    kernels: KernelContext,
}

impl Weights {
    /// Maps every file. A truncated or malformed file is an error naming it.
    pub fn open(paths: &[PathBuf], dtype: DType, device: &Device) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            if !path.is_file() {
                return Err(EngineError::MissingFile {
                    what: "safetensors file",
                    path: path.clone(),
                });
            }
            // SAFETY: the file is mapped read-only; like every mmap-based loader we assume it
            // is not modified while Hearth runs.
            let st =
                unsafe { MmapedSafetensors::new(path) }.map_err(|e| EngineError::Safetensors {
                    path: path.clone(),
                    message: root_cause(&e),
                })?;
            for (name, _) in st.tensors() {
                index.insert(name, i);
            }
            files.push((path.clone(), st));
        }
        Ok(Self {
            files,
            index,
            dtype,
            device: device.clone(),
            kernels: KernelContext::default_level(),
        })
    }

    /// The model built from these weights runs its products as `kernels` says.
    pub fn with_kernels(mut self, kernels: KernelContext) -> Self {
        self.kernels = kernels;
        self
    }

    /// Loads `name`, checks its shape, converts to the weight dtype and moves it to the device.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.get_as(name, shape, self.dtype)
    }

    /// Like [`Weights::get`] with an explicit dtype (norm weights stay in f32, for example).
    pub fn get_as(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| EngineError::MissingTensor {
                name: name.into(),
                files: self.file_list(),
            })?;
        let (path, st) = &self.files[i];
        let view = st.get(name).map_err(|e| EngineError::Safetensors {
            path: path.clone(),
            message: root_cause(&e),
        })?;
        if view.shape() != shape {
            return Err(EngineError::ShapeMismatch {
                name: name.into(),
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let t = st
            .load(name, &Device::Cpu)
            .map_err(|e| EngineError::Safetensors {
                path: path.clone(),
                message: format!("tensor `{name}`: {}", root_cause(&e)),
            })?;
        // Round through the weight dtype first, so a bf16 load of an f32 checkpoint gives
        // exactly what a bf16 checkpoint would (norms and biases included).
        Ok(t.to_dtype(self.dtype)?
            .to_dtype(dtype)?
            .to_device(&self.device)?)
    }

    fn file_list(&self) -> String {
        let names: Vec<String> = self.files.iter().map(|(p, _)| display_name(p)).collect();
        names.join(", ")
    }
}

fn display_name(p: &Path) -> String {
    p.display().to_string()
}

impl WeightSource for Weights {
    fn kernels(&self) -> KernelContext {
        self.kernels
    }
    fn device(&self) -> &Device {
        &self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
    fn tensor(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.get_as(name, shape, dtype)
    }
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        Ok(Matrix::Dense(self.get(name, shape)?))
    }
}

/// candle wraps errors with context and backtraces; users need the innermost message.
fn root_cause(e: &candle_core::Error) -> String {
    let mut msg = e.to_string();
    if let Some(first) = msg.lines().next() {
        msg = first.to_string();
    }
    msg
}

/// A dense tensor's size in memory.
pub(crate) fn tensor_bytes(t: &Tensor) -> usize {
    t.elem_count() * t.dtype().size_in_bytes()
}
