//! A decoder layer: a token mixer (gated DeltaNet or attention) and a feed-forward block
//! (dense or routed to experts), each behind an RMSNorm and a residual connection.

use super::attention::Attention;
use super::delta_net::DeltaNet;
use super::mlp::Mlp;
use super::moe::Moe;
use crate::error::Result;
use crate::kernels::KernelContext;
use crate::load::config::QwenConfig;
use crate::load::weights::WeightSource;
use candle_core::Tensor;

/// A decoder layer's weights.
#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub(super) input_norm: Tensor,
    pub(super) mixer: Mixer,
    pub(super) post_norm: Tensor,
    pub(super) ffn: FeedForward,
}

/// A layer's token mixer.
#[derive(Debug, Clone)]
pub(super) enum Mixer {
    Attention(Attention),
    Linear(DeltaNet),
}

impl Mixer {
    pub(super) fn weight_bytes(&self) -> usize {
        match self {
            Self::Attention(a) => a.weight_bytes(),
            Self::Linear(d) => d.weight_bytes(),
        }
    }
}

/// A layer's feed-forward block: dense, or routed to experts.
#[derive(Debug, Clone)]
pub(super) enum FeedForward {
    Dense(Mlp),
    Experts(Moe),
}

impl FeedForward {
    pub(super) fn load(
        w: &dyn WeightSource,
        prefix: &str,
        layer: usize,
        cfg: &QwenConfig,
    ) -> Result<Self> {
        let sparse = cfg.moe.as_ref().is_some_and(|m| m.is_sparse_layer(layer));
        Self::load_as(w, prefix, sparse, cfg)
    }

    /// Routed to experts when `sparse` (and the model has experts), dense otherwise.
    pub(super) fn load_as(
        w: &dyn WeightSource,
        prefix: &str,
        sparse: bool,
        cfg: &QwenConfig,
    ) -> Result<Self> {
        match &cfg.moe {
            Some(moe) if sparse => Ok(Self::Experts(Moe::load(w, prefix, cfg.hidden_size, moe)?)),
            _ => Ok(Self::Dense(Mlp::load(
                w,
                prefix,
                cfg.hidden_size,
                cfg.intermediate_size,
            )?)),
        }
    }

    pub(super) fn forward(&self, x: &Tensor, kc: &KernelContext) -> candle_core::Result<Tensor> {
        match self {
            Self::Dense(m) => m.forward(x, kc),
            Self::Experts(m) => m.forward(x, kc),
        }
    }

    pub(super) fn weight_bytes(&self) -> usize {
        match self {
            Self::Dense(m) => m.weight_bytes(),
            Self::Experts(m) => m.weight_bytes(),
        }
    }
}
