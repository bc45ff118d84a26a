//! Rotary position embedding (the "rotate half" layout of HF's Qwen2/Qwen3), over all of each
//! head or, for Qwen3.5, its first dimensions. Qwen3.5's is multimodal: each rotated pair
//! turns by one of a position's three coordinates (time, row, column). Text positions have
//! the three equal, which makes it this plain one (the tables); an image's tokens take their
//! rows' angles from [`Rotary::rows_at`].

use crate::cache::multimodal::Position3;
use crate::load::config::Yarn;
use candle_core::{DType, Device, Result, Tensor};

#[derive(Debug, Clone)]
pub struct Rotary {
    /// `[max_positions, rotated / 2]`, in the activation dtype.
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    /// Dimensions rotated at the start of each head.
    pub(super) rotated: usize,
    /// Each rotated pair's frequency, and which coordinate of a multimodal position turns it
    /// (0 time, 1 row, 2 column); all 0 without multimodal RoPE.
    inv_freq: Vec<f32>,
    axes: Vec<u8>,
    /// YaRN's scale of cos and sin (1 without).
    scale: f32,
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
        let scale = yarn.map_or(1.0, |y| y.attention_factor() as f32);
        Ok(Self {
            cos: cos.to_dtype(dtype)?.to_device(device)?,
            sin: sin.to_dtype(dtype)?.to_device(device)?,
            rotated: head_dim,
            axes: vec![0; half],
            inv_freq,
            scale,
        })
    }

    /// Multimodal RoPE over `sections` (pairs per coordinate: time, row, column), interleaved
    /// (`t h w t h w …` while each lasts, the rest time: Qwen3.5, Qwen3-VL) or in three runs.
    pub fn with_sections(mut self, sections: [usize; 3], interleaved: bool) -> Self {
        let half = self.axes.len();
        self.axes = (0..half)
            .map(|j| match interleaved {
                true if j % 3 == 1 && j < 3 * sections[1] => 1,
                true if j % 3 == 2 && j < 3 * sections[2] => 2,
                true => 0,
                false if j < sections[0] => 0,
                false if j < sections[0] + sections[1] => 1,
                false => 2,
            })
            .collect();
        self
    }

    /// cos and sin of each rotated pair for rows at `positions`, `[positions.len() × rotated/2]`
    /// f32: for text positions the same values as the tables' rows.
    pub fn rows_at(&self, positions: &[Position3]) -> (Vec<f32>, Vec<f32>) {
        let half = self.inv_freq.len();
        let (mut cos, mut sin) = (
            Vec::with_capacity(positions.len() * half),
            Vec::with_capacity(positions.len() * half),
        );
        for p in positions {
            for (f, &axis) in self.inv_freq.iter().zip(&self.axes) {
                let angle = p[axis as usize] as f32 * f;
                let (c, s) = (angle.cos(), angle.sin());
                if self.scale == 1.0 {
                    cos.push(c);
                    sin.push(s);
                } else {
                    cos.push(c * self.scale);
                    sin.push(s * self.scale);
                }
            }
        }
        (cos, sin)
    }

    /// Rotates `x` (`[1, heads, len, head_dim]`) for rows at `positions`.
    pub fn apply_at(&self, x: &Tensor, positions: &[Position3]) -> Result<Tensor> {
        let (cos, sin) = self.rows_at(positions);
        let half = self.inv_freq.len();
        let shape = (positions.len(), half);
        let cos = Tensor::from_vec(cos, shape, x.device())?.to_dtype(x.dtype())?;
        let sin = Tensor::from_vec(sin, shape, x.device())?.to_dtype(x.dtype())?;
        self.rotate_with(x, &cos, &sin)
    }

    /// Rotates `x` (`[1, heads, len, head_dim]`) for positions `offset..offset + len`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let len = x.dim(2)?;
        let cos = self.cos.narrow(0, offset, len)?;
        let sin = self.sin.narrow(0, offset, len)?;
        self.rotate_with(x, &cos, &sin)
    }

    fn rotate_with(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (cos, sin) = (cos.clone(), sin.clone());
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
