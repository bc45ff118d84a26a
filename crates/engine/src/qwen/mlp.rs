//! The SwiGLU feed-forward block, with gate and up projections fused into one matrix so the
//! input is read once.

use crate::linear::Linear;
use crate::weights::Weights;
use candle_core::{Module, Result as CResult, Tensor, D};

use crate::error::Result;

#[derive(Debug, Clone)]
pub struct Mlp {
    gate_up: Linear,
    down: Linear,
    intermediate: usize,
}

impl Mlp {
    pub fn load(w: &Weights, prefix: &str, hidden: usize, intermediate: usize) -> Result<Self> {
        let gate = w.get(
            &format!("{prefix}.gate_proj.weight"),
            &[intermediate, hidden],
        )?;
        let up = w.get(&format!("{prefix}.up_proj.weight"), &[intermediate, hidden])?;
        let down = w.get(
            &format!("{prefix}.down_proj.weight"),
            &[hidden, intermediate],
        )?;
        Ok(Self {
            gate_up: Linear::new(Tensor::cat(&[&gate, &up], 0)?, None)?,
            down: Linear::new(down, None)?,
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
