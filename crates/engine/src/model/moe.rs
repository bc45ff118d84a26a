//! The sparse mixture-of-experts feed-forward block of Qwen3-MoE: a router scores every
//! expert for each token, the token goes through its top-k experts (SwiGLU blocks of their
//! own), and their outputs are summed, weighted by the router's probabilities.
//!
//! Tokens are grouped by expert, so a prompt runs one matrix product per chosen expert over all
//! the tokens routed to it, and a decoding step reads only the chosen experts' weights. Each
//! token's sum runs over its experts in expert order whatever else shares the step, so a row
//! computes the same alone, in a prompt or in a batch.

use super::mlp::Mlp;
use crate::error::{EngineError, Result};
use crate::load::config::MoeConfig;
use crate::load::weights::WeightSource;
use crate::model::linear::Linear;
use candle_core::{DType, Module, Result as CResult, Tensor, D};

#[derive(Debug, Clone)]
pub struct Moe {
    /// `[experts, hidden]`: one logit per expert.
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    norm_topk_prob: bool,
}

impl Moe {
    pub fn load(
        w: &dyn WeightSource,
        prefix: &str,
        hidden: usize,
        cfg: &MoeConfig,
    ) -> Result<Self> {
        let n = cfg.num_experts;
        let router = w.projection(&format!("{prefix}.gate.weight"), &[n, hidden])?;
        let experts = (0..n)
            .map(|e| {
                Mlp::load(
                    w,
                    &format!("{prefix}.experts.{e}"),
                    hidden,
                    cfg.expert_intermediate_size,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if cfg.experts_per_token == 0 || cfg.experts_per_token > n {
            return Err(EngineError::invalid(
                "num_experts_per_tok",
                format!("{} of {n} experts", cfg.experts_per_token),
            ));
        }
        Ok(Self {
            router: Linear::fused(vec![router], None)?,
            experts,
            top_k: cfg.experts_per_token,
            norm_topk_prob: cfg.norm_topk_prob,
        })
    }

    /// Bytes of weights one token's pass reads: the router and `top_k` experts.
    pub fn weight_bytes(&self) -> usize {
        let expert = self.experts.first().map_or(0, Mlp::weight_bytes);
        self.router.bytes() + self.top_k * expert
    }
}

impl Module for Moe {
    fn forward(&self, x: &Tensor) -> CResult<Tensor> {
        let dims = x.dims().to_vec();
        let hidden = x.dim(D::Minus1)?;
        let tokens = x.elem_count() / hidden.max(1);
        let x = x.reshape((tokens, hidden))?;
        let logits = self
            .router
            .forward(&x)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let groups = route(&logits, self.experts.len(), self.top_k, self.norm_topk_prob);
        let mut out = x.zeros_like()?;
        for (expert, routed) in self.experts.iter().zip(&groups) {
            if routed.tokens.is_empty() {
                continue;
            }
            let idx = Tensor::new(routed.tokens.as_slice(), x.device())?;
            let weights = Tensor::new(routed.weights.as_slice(), x.device())?
                .to_dtype(x.dtype())?
                .unsqueeze(1)?;
            let y = expert
                .forward(&x.index_select(&idx, 0)?)?
                .broadcast_mul(&weights)?;
            out = out.index_add(&idx, &y, 0)?;
        }
        out.reshape(dims)
    }
}

/// The tokens routed to one expert, with the router's weight of each.
#[derive(Debug, Default, Clone, PartialEq)]
struct Routed {
    tokens: Vec<u32>,
    weights: Vec<f32>,
}

/// Routes each token (a row of `experts` logits) to its `top_k` experts as transformers'
/// `Qwen3MoeTopKRouter` does: softmax in f32, the k largest probabilities (the lower expert
/// first on a tie), renormalised to sum to one where `norm` says. Returns the tokens of each
/// expert in token order.
fn route(logits: &[f32], experts: usize, top_k: usize, norm: bool) -> Vec<Routed> {
    let mut groups = vec![Routed::default(); experts];
    if experts == 0 {
        return groups;
    }
    let mut probs = vec![0f32; experts];
    let mut chosen: Vec<(usize, f32)> = Vec::with_capacity(top_k);
    for (t, row) in logits.chunks_exact(experts).enumerate() {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for (p, &l) in probs.iter_mut().zip(row) {
            *p = (l - max).exp();
            sum += *p;
        }
        for p in probs.iter_mut() {
            *p /= sum;
        }
        chosen.clear();
        for _ in 0..top_k.min(experts) {
            // The largest not yet taken; NaN (a broken model) counts as smallest.
            let best = (0..experts)
                .filter(|e| chosen.iter().all(|&(c, _)| c != *e))
                .fold(None::<usize>, |best, e| match best {
                    Some(b)
                        if probs[e].partial_cmp(&probs[b]) != Some(std::cmp::Ordering::Greater) =>
                    {
                        Some(b)
                    }
                    _ => Some(e),
                });
            if let Some(e) = best {
                chosen.push((e, probs[e]));
            }
        }
        let total: f32 = chosen.iter().map(|&(_, p)| p).sum();
        for &(e, p) in &chosen {
            let w = if norm { p / total } else { p };
            groups[e].tokens.push(t as u32);
            groups[e].weights.push(w);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_the_top_k_with_renormalised_weights() {
        // Two tokens over four experts.
        let logits = [0.0, 2.0, 1.0, -1.0, 3.0, 3.0, 0.0, 0.0];
        let g = route(&logits, 4, 2, true);
        assert_eq!(g[0].tokens, vec![1]);
        assert_eq!(g[1].tokens, vec![0, 1]);
        assert_eq!(g[2].tokens, vec![0]);
        assert!(g[3].tokens.is_empty());
        // Token 0: softmax over [0, 2, 1, -1], experts 1 and 2, renormalised.
        let (a, b) = (2f32.exp(), 1f32.exp());
        assert!((g[1].weights[0] - a / (a + b)).abs() < 1e-6);
        assert!((g[2].weights[0] - b / (a + b)).abs() < 1e-6);
        // Token 1: a tie, both halves.
        assert!((g[0].weights[0] - 0.5).abs() < 1e-6);
        assert!((g[1].weights[1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn without_renormalising_the_weights_are_the_probabilities() {
        let logits = [1.0, 1.0, 1.0, 1.0];
        let g = route(&logits, 4, 1, false);
        assert_eq!(g[0].tokens, vec![0]);
        assert!((g[0].weights[0] - 0.25).abs() < 1e-6);
    }

    #[test]
    fn nan_logits_still_route_k_experts() {
        let logits = [f32::NAN, 1.0, f32::NAN];
        let g = route(&logits, 3, 2, true);
        let routed: usize = g.iter().map(|r| r.tokens.len()).sum();
        assert_eq!(routed, 2);
    }
}
