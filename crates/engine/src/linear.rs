//! A dense linear layer, `y = x · Wᵀ + b`, that keeps its weight in the storage dtype.
//!
//! On the CPU, activations are f32 and few-row products go to [`crate::cpu_matmul`], which reads
//! bf16/f16 weights directly; longer prefills use candle's gemm on an f32 view of the weight.
//! On GPUs candle's matmul runs in the model dtype.

use crate::cpu_matmul::{matmul_t, WeightRows};
use candle_core::{DType, Device, Module, Result, Storage, Tensor};

/// Up to this many rows the memory-bound row kernel beats converting the weight for gemm.
const ROW_KERNEL_MAX_ROWS: usize = 16;

#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out, in]`, contiguous.
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        Ok(Self {
            weight: weight.contiguous()?,
            bias,
        })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    fn cpu_rows(&self, x: &Tensor) -> Result<Option<Tensor>> {
        let (n, k) = self.weight.dims2()?;
        let dims = x.dims().to_vec();
        let m = x.elem_count() / k;
        if !matches!(x.device(), Device::Cpu) || x.dtype() != DType::F32 || m > ROW_KERNEL_MAX_ROWS
        {
            return Ok(None);
        }
        let x = x.contiguous()?;
        let (xs, xl) = x.storage_and_layout();
        let (ws, wl) = self.weight.storage_and_layout();
        let (Storage::Cpu(xs), Storage::Cpu(ws)) = (&*xs, &*ws) else {
            return Ok(None);
        };
        let (Some((x0, x1)), Some((w0, w1))) = (xl.contiguous_offsets(), wl.contiguous_offsets())
        else {
            return Ok(None);
        };
        let xv = &xs.as_slice::<f32>()?[x0..x1];
        let rows = match self.weight.dtype() {
            DType::F32 => WeightRows::F32(&ws.as_slice::<f32>()?[w0..w1]),
            DType::BF16 => WeightRows::Bf16(&ws.as_slice::<half::bf16>()?[w0..w1]),
            DType::F16 => WeightRows::F16(&ws.as_slice::<half::f16>()?[w0..w1]),
            _ => return Ok(None),
        };
        let out = matmul_t(xv, m, k, rows, n);
        let mut shape = dims;
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        Ok(Some(Tensor::from_vec(out, shape, &Device::Cpu)?))
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match self.cpu_rows(x)? {
            Some(y) => y,
            None => {
                let w = if self.weight.dtype() == x.dtype() {
                    self.weight.clone()
                } else {
                    self.weight.to_dtype(x.dtype())?
                };
                x.broadcast_matmul(&w.t()?)?
            }
        };
        match &self.bias {
            Some(b) => y.broadcast_add(b),
            None => Ok(y),
        }
    }
}
