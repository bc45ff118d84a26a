//! The SwiGLU feed-forward block, with gate and up projections fused into one matrix so the
//! input is read once.

use crate::linear::Linear;
use crate::weights::WeightSource;
use candle_core::{Module, Result as CResult, Tensor, D};

use crate::error::Result;

#[derive(Debug, Clone)]
pub struct Mlp {
    gate_up: Linear,
    down: Linear,
    intermediate: usize,
}

impl Mlp {
    pub fn load(
        w: &dyn WeightSource,
        prefix: &str,
        hidden: usize,
        intermediate: usize,
    ) -> Result<Self> {
        let m =
            |name: &str, shape: [usize; 2]| w.matrix(&format!("{prefix}.{name}.weight"), &shape);
        let gate = m("gate_proj", [intermediate, hidden])?;
        let up = m("up_proj", [intermediate, hidden])?;
        let down = m("down_proj", [hidden, intermediate])?;
        Ok(Self {
            gate_up: Linear::fused(vec![gate, up], None)?,
            down: Linear::fused(vec![down], None)?,
            intermediate,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let gate_up = self.gate_up.forward(x)?;
        let gate = gate_up.narrow(D::Minus1, 0, self.intermediate)?;
        let up = gate_up.narrow(D::Minus1, self.intermediate, self.intermediate)?;
        let h = (candle_nn::ops::silu(&gate)? * up)?;
        self.down.forward(&h)
    }
}
