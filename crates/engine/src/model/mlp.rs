//! The SwiGLU feed-forward block, with gate and up projections fused into one matrix so the
//! input is read once.

use crate::kernels::ops::attention::silu_mul;
use crate::load::weights::WeightSource;
use crate::model::linear::with_cpu_f32;
use crate::model::linear::Linear;
use candle_core::{Module, Result as CResult, Tensor, D};

use crate::error::Result;

#[derive(Debug, Clone)]
pub struct Mlp {
    gate_up: Linear,
    down: Linear,
    intermediate: usize,
}

impl Mlp {
    /// Bytes of weights one token's pass reads.
    pub fn weight_bytes(&self) -> usize {
        self.gate_up.bytes() + self.down.bytes()
    }

    pub fn load(
        w: &dyn WeightSource,
        prefix: &str,
        hidden: usize,
        intermediate: usize,
    ) -> Result<Self> {
        let m = |name: &str, shape: [usize; 2]| {
            w.projection(&format!("{prefix}.{name}.weight"), &shape)
        };
        let gate = m("gate_proj", [intermediate, hidden])?;
        let up = m("up_proj", [intermediate, hidden])?;
        let down = m("down_proj", [hidden, intermediate])?;
        Ok(Self {
            gate_up: Linear::fused(vec![gate, up], None)?.with_kernels(w.kernels()),
            down: Linear::fused(vec![down], None)?.with_kernels(w.kernels()),
            intermediate,
        })
    }

    /// The block on `m` rows of f32 on the CPU, from and into slices, as [`Module::forward`]
    /// computes it there (see [`Linear::cpu_product`]); `None` where it takes candle's ops.
    pub(crate) fn cpu_forward(
        &self,
        x: &[f32],
        m: usize,
        sequences: bool,
    ) -> CResult<Option<Vec<f32>>> {
        let Some(gate_up) = self.gate_up.cpu_product(x, m, sequences)? else {
            return Ok(None);
        };
        let h = silu_mul(&gate_up, self.intermediate);
        self.down.cpu_product(&h, m, sequences)
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let gate_up = self.gate_up.forward(x)?;
        // On the CPU in f32, one vectorised pass instead of candle's three.
        let fused = with_cpu_f32(&gate_up, |gu| silu_mul(gu, self.intermediate))?;
        if let Some(h) = fused {
            let mut shape = gate_up.dims().to_vec();
            if let Some(last) = shape.last_mut() {
                *last = self.intermediate;
            }
            return self
                .down
                .forward(&Tensor::from_vec(h, shape, gate_up.device())?);
        }
        let gate = gate_up.narrow(D::Minus1, 0, self.intermediate)?;
        let up = gate_up.narrow(D::Minus1, self.intermediate, self.intermediate)?;
        let h = (candle_nn::ops::silu(&gate)? * up)?;
        self.down.forward(&h)
    }
}
