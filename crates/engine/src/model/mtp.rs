//! Qwen3.5's multi-token-prediction head (`mtp.*`): one more gated-attention decoder layer
//! that reads the model's final hidden state at position `p` beside the embedding of the token
//! at `p + 1`, and predicts the token at `p + 2` through the model's own LM head. It drafts
//! for speculative decoding ([`crate::speculative::mtp`]); its own layer keeps keys and values
//! in a one-layer [`crate::KvCache`] per sequence.
//!
//! The layout is the checkpoints' (`mtp.fc`, `mtp.pre_fc_norm_embedding`,
//! `mtp.pre_fc_norm_hidden`, `mtp.layers.0.*`, `mtp.norm`), and the computation is vLLM's and
//! llama.cpp's: `fc([norm_e(embed(t)), norm_h(h)])`, the layer, then `norm`.

use super::attention::Attention;
use super::layer::{FeedForward, Layer, Mixer};
use crate::error::Result;
use crate::load::config::QwenConfig;
use crate::load::weights::WeightSource;
use crate::model::linear::Linear;
use candle_core::Tensor;

/// Where the head's tensors are in a checkpoint.
pub const PREFIX: &str = "mtp";

/// The head's weights.
#[derive(Debug, Clone)]
pub struct Mtp {
    /// `[hidden, 2·hidden]`: the normed embedding and hidden state, concatenated, to one.
    pub(super) fc: Linear,
    pub(super) norm_embedding: Tensor,
    pub(super) norm_hidden: Tensor,
    pub(super) layer: Layer,
    pub(super) norm: Tensor,
}

impl Mtp {
    /// The head of `w`, if the checkpoint carries one (`mtp.fc.weight`).
    pub fn load(
        w: &dyn WeightSource,
        cfg: &QwenConfig,
        act: candle_core::DType,
        norm: &dyn Fn(&str) -> Result<Tensor>,
    ) -> Result<Option<Self>> {
        let fc_name = format!("{PREFIX}.fc.weight");
        if !w.contains(&fc_name) {
            return Ok(None);
        }
        let h = cfg.hidden_size;
        let p = format!("{PREFIX}.layers.0");
        // A mixture-of-experts model's head routes to experts as its layers do.
        let sparse = w.contains(&format!("{p}.mlp.gate.weight"));
        let layer = Layer {
            input_norm: norm(&format!("{p}.input_layernorm.weight"))?,
            mixer: Mixer::Attention(Attention::load(w, &format!("{p}.self_attn"), cfg, act)?),
            post_norm: norm(&format!("{p}.post_attention_layernorm.weight"))?,
            ffn: FeedForward::load_as(w, &format!("{p}.mlp"), sparse, cfg)?,
        };
        Ok(Some(Self {
            fc: Linear::fused(vec![w.projection(&fc_name, &[h, 2 * h])?], None)?,
            norm_embedding: norm(&format!("{PREFIX}.pre_fc_norm_embedding.weight"))?,
            norm_hidden: norm(&format!("{PREFIX}.pre_fc_norm_hidden.weight"))?,
            layer,
            norm: norm(&format!("{PREFIX}.norm.weight"))?,
        }))
    }

    /// Bytes of weights one drafted token reads (the LM head aside).
    pub fn weight_bytes(&self) -> usize {
        use crate::load::weights::tensor_bytes;
        self.fc.bytes()
            + self.layer.mixer.weight_bytes()
            + self.layer.ffn.weight_bytes()
            + tensor_bytes(&self.layer.input_norm)
            + tensor_bytes(&self.layer.post_norm)
    }
}
