//! Grouped-query self-attention reading and writing an explicit [`KvCache`].

use super::rotary::Rotary;
use crate::config::{Family, QwenConfig};
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::linear::Linear;
use crate::weights::WeightSource;
use candle_core::{DType, Module, Result as CResult, Tensor, D};

#[derive(Debug, Clone)]
pub struct Attention {
    /// q, k and v projections fused: one pass over the input.
    qkv: Linear,
    o: Linear,
    /// Qwen3's per-head RMSNorm of queries and keys.
    qk_norm: Option<(Tensor, Tensor)>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f32,
}

impl Attention {
    pub fn load(w: &dyn WeightSource, prefix: &str, cfg: &QwenConfig, act: DType) -> Result<Self> {
        let (h, d) = (cfg.hidden_size, cfg.head_dim);
        let (q_out, kv_out) = (cfg.num_attention_heads * d, cfg.num_key_value_heads * d);
        let weight = |name: &str, rows: usize, cols: usize| {
            w.matrix(&format!("{prefix}.{name}.weight"), &[rows, cols])
        };
        let bias =
            |name: &str, rows: usize| w.tensor(&format!("{prefix}.{name}.bias"), &[rows], act);
        let qkv_w = vec![
            weight("q_proj", q_out, h)?,
            weight("k_proj", kv_out, h)?,
            weight("v_proj", kv_out, h)?,
        ];
        let qkv_b = if cfg.qkv_bias {
            Some(Tensor::cat(
                &[
                    &bias("q_proj", q_out)?,
                    &bias("k_proj", kv_out)?,
                    &bias("v_proj", kv_out)?,
                ],
                0,
            )?)
        } else {
            None
        };
        let o_b = if cfg.o_bias {
            Some(bias("o_proj", h)?)
        } else {
            None
        };
        let qk_norm = match cfg.family {
            Family::Qwen3 => Some((
                w.tensor(&format!("{prefix}.q_norm.weight"), &[d], act)?,
                w.tensor(&format!("{prefix}.k_norm.weight"), &[d], act)?,
            )),
            Family::Qwen2 => None,
        };
        Ok(Self {
            qkv: Linear::fused(qkv_w, qkv_b)?,
            o: Linear::fused(vec![weight("o_proj", h, q_out)?], o_b)?,
            qk_norm,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: d,
            eps: cfg.rms_norm_eps as f32,
        })
    }

    /// `x`: `[1, len, hidden]` at positions `cache.len()..`; `mask`: `[len, cache.len() + len]`
    /// additive, or `None` for a single new position.
    pub fn forward(
        &self,
        x: &Tensor,
        layer: usize,
        cache: &mut KvCache,
        rotary: &Rotary,
        mask: Option<&Tensor>,
    ) -> CResult<Tensor> {
        let (b, len, _) = x.dims3()?;
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        let qkv = self.qkv.forward(x)?;
        let split = |start: usize, heads: usize| -> CResult<Tensor> {
            qkv.narrow(D::Minus1, start * d, heads * d)?
                .reshape((b, len, heads, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (mut q, mut k, v) = (split(0, h)?, split(h, kvh)?, split(h + kvh, kvh)?);
        if let Some((qn, kn)) = &self.qk_norm {
            q = candle_nn::ops::rms_norm(&q, qn, self.eps)?;
            k = candle_nn::ops::rms_norm(&k, kn, self.eps)?;
        }
        let offset = cache.len();
        let q = rotary.apply(&q, offset)?;
        let k = rotary.apply(&k, offset)?;
        let (k, v) = cache.append(layer, &k, &v)?;
        let total = k.dim(2)?;

        // Grouped-query attention without copying keys per head: the query heads that share a
        // kv head are stacked as rows, `[1, kv_heads, group * len, d]`.
        let group = h / kvh;
        let q = (q * (1.0 / (d as f64).sqrt()))?.reshape((b, kvh, group * len, d))?;
        let scores = q.matmul(&k.t()?)?.reshape((b, h, len, total))?;
        let scores = match mask {
            Some(m) => scores.broadcast_add(m)?,
            None => scores,
        };
        let in_dtype = scores.dtype();
        let probs =
            candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?.to_dtype(in_dtype)?;
        let out = probs
            .reshape((b, kvh, group * len, total))?
            .matmul(&v)?
            .reshape((b, h, len, d))?
            .transpose(1, 2)?
            .reshape((b, len, h * d))?;
        self.o.forward(&out)
    }
}
