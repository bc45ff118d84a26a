//! The SwiGLU feed-forward block, with gate and up projections fused into one matrix so the
//! input is read once.

use crate::kernels::ops::attention::silu_mul;
use crate::kernels::KernelContext;
use crate::load::weights::WeightSource;
use crate::model::linear::with_cpu_f32;
use crate::model::linear::Linear;
use candle_core::{Result as CResult, Tensor, D};

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
            gate_up: Linear::fused(vec![gate, up], None)?,
            down: Linear::fused(vec![down], None)?,
            intermediate,
        })
    }

    /// The block on `m` rows of f32 on the CPU, from and into slices, as [`Mlp::forward`]
    /// computes it there (see [`Linear::cpu_product`]); `None` where it takes candle's ops.
    pub(crate) fn cpu_forward(
        &self,
        x: &[f32],
        m: usize,
        kc: &KernelContext,
    ) -> CResult<Option<Vec<f32>>> {
        let Some(gate_up) = self.gate_up.cpu_product(x, m, kc)? else {
            return Ok(None);
        };
        let h = silu_mul(kc.level, &gate_up, self.intermediate);
        self.down.cpu_product(&h, m, kc)
    }

    pub fn forward(&self, x: &Tensor, kc: &KernelContext) -> CResult<Tensor> {
        let gate_up = self.gate_up.forward(x, kc)?;
        // On the CPU in f32, one vectorised pass instead of candle's three.
        let fused = with_cpu_f32(&gate_up, |gu| silu_mul(kc.level, gu, self.intermediate))?;
        if let Some(h) = fused {
            let mut shape = gate_up.dims().to_vec();
            if let Some(last) = shape.last_mut() {
                *last = self.intermediate;
            }
            return self
                .down
                .forward(&Tensor::from_vec(h, shape, gate_up.device())?, kc);
        }
        let gate = gate_up.narrow(D::Minus1, 0, self.intermediate)?;
        let up = gate_up.narrow(D::Minus1, self.intermediate, self.intermediate)?;
        let h = (candle_nn::ops::silu(&gate)? * up)?;
        self.down.forward(&h, kc)
    }
}
