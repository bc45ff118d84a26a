//! Rotary position embedding (the "rotate half" layout of HF's Qwen2/Qwen3), over all of each
//! head or, for Qwen3.5, its first dimensions (text positions make its multimodal RoPE this
//! plain one: the three position ids are equal).

use crate::load::config::Yarn;
use candle_core::{DType, Device, Result, Tensor};

#[derive(Debug, Clone)]
pub struct Rotary {
    /// `[max_positions, rotated / 2]`, in the activation dtype.
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    /// Dimensions rotated at the start of each head.
    pub(super) rotated: usize,
}

impl Rotary {
    /// RoPE over the first `head_dim` dimensions of each head. Positions and angles are
    /// computed in f32 (f64 for the frequencies) whatever the model dtype: in bf16, positions
    /// above 256 would otherwise be rounded. With `yarn`, YaRN's frequencies and scale of cos
    /// and sin.
    pub fn new(
        head_dim: usize,
        theta: f64,
        yarn: Option<&Yarn>,
        max_positions: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let inv_freq: Vec<f32> = match yarn {
            Some(y) => y.inv_freq(theta, head_dim),
            None => (0..head_dim)
                .step_by(2)
                .map(|i| (1.0 / theta.powf(i as f64 / head_dim as f64)) as f32)
                .collect(),
        };
        let half = inv_freq.len();
        let mut angles = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            angles.extend(inv_freq.iter().map(|f| p as f32 * f));
        }
        let angles = Tensor::from_vec(angles, (max_positions, half), &Device::Cpu)?;
        let (mut cos, mut sin) = (angles.cos()?, angles.sin()?);
        if let Some(y) = yarn {
            let scale = y.attention_factor();
            (cos, sin) = ((cos * scale)?, (sin * scale)?);
        }
        Ok(Self {
            cos: cos.to_dtype(dtype)?.to_device(device)?,
            sin: sin.to_dtype(dtype)?.to_device(device)?,
            rotated: head_dim,
        })
    }

    /// Rotates `x` (`[1, heads, len, head_dim]`) for positions `offset..offset + len`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let len = x.dim(2)?;
        let cos = self.cos.narrow(0, offset, len)?;
        let sin = self.sin.narrow(0, offset, len)?;
        let d = x.dim(3)?;
        if self.rotated < d {
            let rot = x.narrow(3, 0, self.rotated)?.contiguous()?;
            let rot = candle_nn::rotary_emb::rope(&rot, &cos, &sin)?;
            return Tensor::cat(&[&rot, &x.narrow(3, self.rotated, d - self.rotated)?], 3)?
                .contiguous();
        }
        candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)
    }
}
