//! Gated DeltaNet linear attention (Qwen3.5, Qwen3.6): the token mixer of three layers in four.
//!
//! Per token: one fused projection gives q, k and v (through a short depthwise causal
//! convolution and SiLU), the output gate z, and per value head the write strength
//! `beta = sigmoid(b)` and the decay `g = -exp(A_log) · softplus(a + dt_bias)`. Each value head
//! keeps a `[key dim, value dim]` state `S`, updated by the delta rule
//!
//! ```text
//! S ← exp(g) · S;   S ← S + k ⊗ (beta · (v − Sᵀk));   o = Sᵀq
//! ```
//!
//! with q and k L2-normalised (q also scaled by 1/√key dim), then `o` RMS-normalised and gated
//! by `silu(z)` before the output projection. A prompt runs the same recurrence token by token
//! as decoding does, so every row of a prefill equals the row decoded alone; the heads run in
//! parallel. The state lives in the sequence's cache ([`crate::cache::recurrent`]).

use crate::cache::kv::KvCache;
use crate::cache::recurrent::LayerState;
use crate::error::Result;
use crate::kernels::ops::delta_rule::{conv_silu, delta_step};
use crate::kernels::{CpuLevel, KernelContext};
use crate::load::config::LinearAttentionConfig;
use crate::load::weights::WeightSource;
use crate::model::linear::Linear;
use candle_core::{DType, Device, Result as CResult, Tensor};
use rayon::prelude::*;

/// The epsilon of the q/k L2 norm (transformers' `l2norm`, FLA's kernels).
const L2_EPS: f32 = 1e-6;

#[derive(Debug, Clone)]
pub struct DeltaNet {
    /// q, k, v (the convolution's input) and z: one pass over the input.
    proj: Linear,
    /// b and a, one row per value head each: apart, so that `proj` keeps the rows of 16 the
    /// tiled kernels need when the value heads are fewer.
    gates: Linear,
    /// Tap-major, `[taps, channels]`.
    conv: Vec<f32>,
    /// `-exp(A_log)` per value head.
    neg_a: Vec<f32>,
    dt_bias: Vec<f32>,
    /// The gated RMSNorm's weight, `[value dim]` (not offset by one).
    norm: Vec<f32>,
    out: Linear,
    cfg: LinearAttentionConfig,
    eps: f32,
}

impl DeltaNet {
    /// Bytes of weights one token's pass reads.
    pub fn weight_bytes(&self) -> usize {
        let small = self.conv.len() + self.neg_a.len() + self.dt_bias.len() + self.norm.len();
        self.proj.bytes() + self.gates.bytes() + self.out.bytes() + 4 * small
    }

    /// Loads `{prefix}.in_proj_qkv|in_proj_z|in_proj_b|in_proj_a|conv1d|A_log|dt_bias|norm|
    /// out_proj` (`prefix` is the layer's `linear_attn`).
    pub fn load(
        w: &dyn WeightSource,
        prefix: &str,
        hidden: usize,
        cfg: &LinearAttentionConfig,
        eps: f64,
    ) -> Result<Self> {
        let (vh, vd) = (cfg.num_value_heads, cfg.value_head_dim);
        let conv_dim = cfg.conv_dim();
        let name = |n: &str| format!("{prefix}.{n}");
        let m = |n: &str, rows: usize| w.projection(&name(n), &[rows, hidden]);
        let proj = Linear::fused(
            vec![
                m("in_proj_qkv.weight", conv_dim)?,
                m("in_proj_z.weight", vh * vd)?,
            ],
            None,
        )?;
        let gates = Linear::fused(
            vec![m("in_proj_b.weight", vh)?, m("in_proj_a.weight", vh)?],
            None,
        )?;
        let values = |n: &str, shape: &[usize]| -> Result<Vec<f32>> {
            Ok(w.tensor(&name(n), shape, DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        // Checkpoints keep A_log and the convolution as `[channels, 1, taps]`; llama.cpp's
        // GGUF files keep -exp(A_log) itself and `[channels, taps]`.
        // Without either, the error names A_log (the checkpoint's name).
        let gguf_names = !w.contains(&name("A_log")) && w.contains(&name("A"));
        let (neg_a, conv) = if gguf_names {
            (
                values("A", &[vh])?,
                values("conv1d.weight", &[conv_dim, cfg.conv_kernel])?,
            )
        } else {
            (
                values("A_log", &[vh])?.iter().map(|a| -a.exp()).collect(),
                values("conv1d.weight", &[conv_dim, 1, cfg.conv_kernel])?,
            )
        };
        // `[channels, taps]` → `[taps, channels]`: each tap's weights are one row over channels.
        let taps = cfg.conv_kernel;
        let conv = (0..taps * conv_dim)
            .map(|i| conv[(i % conv_dim) * taps + i / conv_dim])
            .collect();
        Ok(Self {
            proj,
            gates,
            conv,
            neg_a,
            dt_bias: values("dt_bias", &[vh])?,
            norm: values("norm.weight", &[vd])?,
            out: Linear::fused(
                vec![w.projection(&name("out_proj.weight"), &[hidden, vh * vd])?],
                None,
            )?,
            cfg: cfg.clone(),
            eps: eps as f32,
        })
    }

    /// `x`: `[1, rows, hidden]`: the first `lens[0]` rows the next tokens of `caches[0]`, then
    /// `lens[1]` of `caches[1]`, …. Reads and updates each sequence's state of layer `layer`,
    /// checkpointing it where the cache asks.
    pub fn forward(
        &self,
        x: &Tensor,
        layer: usize,
        lens: &[usize],
        caches: &mut [&mut KvCache],
        kc: &KernelContext,
    ) -> CResult<Tensor> {
        let (b, rows, _) = x.dims3()?;
        let proj = Tensor::cat(&[self.proj.forward(x, kc)?, self.gates.forward(x, kc)?], 2)?;
        let width = proj.dim(2)?;
        let proj: Vec<f32> = proj.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        if lens.len() != caches.len() || lens.iter().sum::<usize>() != b * rows {
            candle_core::bail!(
                "{} rows of linear-attention input for {} caches of {lens:?} rows",
                b * rows,
                caches.len()
            );
        }
        let vd = self.cfg.num_value_heads * self.cfg.value_head_dim;
        let mut out = Vec::with_capacity(b * rows * vd);
        let mut first = 0;
        for (cache, &len) in caches.iter_mut().zip(lens) {
            let rows = &proj[first * width..(first + len) * width];
            first += len;
            out.extend(self.sequence(rows, width, len, layer, cache, kc.level)?);
        }
        let device: &Device = x.device();
        let y = Tensor::from_vec(out, (b, rows, vd), &Device::Cpu)?
            .to_device(device)?
            .to_dtype(x.dtype())?;
        self.out.forward(&y, kc)
    }

    /// One sequence's `len` projected rows through the convolution, the delta rule and the
    /// gated norm: `[len, value heads · value dim]`.
    fn sequence(
        &self,
        rows: &[f32],
        width: usize,
        len: usize,
        layer: usize,
        cache: &mut KvCache,
        level: CpuLevel,
    ) -> CResult<Vec<f32>> {
        let c = &self.cfg;
        let (kh, kd, vh, vd) = (
            c.num_key_heads,
            c.key_head_dim,
            c.num_value_heads,
            c.value_head_dim,
        );
        let conv_dim = c.conv_dim();
        let taps = c.conv_kernel;
        let offset = cache.len();
        let Some(state) = cache.recurrent_mut() else {
            candle_core::bail!("a linear-attention layer needs a cache with a recurrent state")
        };
        // Positions whose state is kept: (index of the token after which, tokens seen then).
        let end = offset + len;
        let keep: Vec<usize> = (0..len)
            .filter(|&t| state.wants(offset + t + 1, end, len))
            .collect();

        // The convolution (with SiLU) over q, k, v, time-major `[len, conv_dim]`, and the
        // window after each kept position.
        let s = state.layer_mut(layer)?;
        let mut window = s.conv.clone(); // `[taps - 1, conv_dim]`, oldest first
        let mut windows = Vec::with_capacity(keep.len());
        let mut mixed = vec![0f32; len * conv_dim];
        for t in 0..len {
            let x = &rows[t * width..t * width + conv_dim];
            conv_silu(
                level,
                x,
                &window,
                &self.conv,
                &mut mixed[t * conv_dim..(t + 1) * conv_dim],
            );
            window.copy_within(conv_dim.., 0);
            window[(taps - 2) * conv_dim..].copy_from_slice(x);
            if keep.contains(&t) {
                windows.push(window.clone());
            }
        }
        s.conv = window;

        // q and k L2-normalised per head (q scaled by 1/√kd); beta and the decay per value head.
        let scale = 1.0 / (kd as f32).sqrt();
        for t in 0..len {
            let m = &mut mixed[t * conv_dim..(t + 1) * conv_dim];
            for (h, head) in m[..2 * kh * kd].chunks_exact_mut(kd).enumerate() {
                let inv = 1.0 / (head.iter().map(|v| v * v).sum::<f32>() + L2_EPS).sqrt();
                let f = if h < kh { inv * scale } else { inv };
                head.iter_mut().for_each(|v| *v *= f);
            }
        }
        let (z_at, b_at, a_at) = (conv_dim, conv_dim + vh * vd, conv_dim + vh * vd + vh);
        let gates: Vec<(f32, f32)> = (0..len)
            .flat_map(|t| {
                let r = &rows[t * width..(t + 1) * width];
                (0..vh).map(move |h| {
                    let beta = sigmoid(r[b_at + h]);
                    let decay = (self.neg_a[h] * softplus(r[a_at + h] + self.dt_bias[h])).exp();
                    (beta, decay)
                })
            })
            .collect();

        // The delta rule, each value head on its own (in parallel), token after token.
        let mut delta = std::mem::take(&mut s.delta);
        let per_head = kd * vd;
        let outs: Vec<(Vec<f32>, Vec<Vec<f32>>)> = delta
            .par_chunks_exact_mut(per_head)
            .enumerate()
            .map(|(h, st)| {
                let kh_of = c.key_head_of(h);
                let mut o = vec![0f32; len * vd];
                let mut kept = Vec::with_capacity(keep.len());
                let mut mem = vec![0f32; vd];
                for t in 0..len {
                    let m = &mixed[t * conv_dim..(t + 1) * conv_dim];
                    let q = &m[kh_of * kd..(kh_of + 1) * kd];
                    let k = &m[(kh + kh_of) * kd..(kh + kh_of + 1) * kd];
                    let v = &m[2 * kh * kd + h * vd..2 * kh * kd + (h + 1) * vd];
                    let (beta, decay) = gates[t * vh + h];
                    let ot = &mut o[t * vd..(t + 1) * vd];
                    delta_step(level, st, q, k, v, beta, decay, &mut mem, ot);
                    if keep.contains(&t) {
                        kept.push(st.to_vec());
                    }
                }
                (o, kept)
            })
            .collect();

        // Checkpoints: the window and every head's state after each kept position.
        for (i, (&t, window)) in keep.iter().zip(windows).enumerate() {
            let mut d = Vec::with_capacity(vh * per_head);
            for (_, kept) in &outs {
                d.extend_from_slice(&kept[i]);
            }
            let snapshot = LayerState {
                conv: window,
                delta: d,
            };
            state.record(layer, offset + t + 1, &snapshot)?;
        }
        state.layer_mut(layer)?.delta = std::mem::take(&mut delta);

        // The gated RMSNorm per head, `[len, vh · vd]`.
        let mut y = vec![0f32; len * vh * vd];
        for t in 0..len {
            let z = &rows[t * width + z_at..t * width + z_at + vh * vd];
            for (h, (o, _)) in outs.iter().enumerate() {
                let o = &o[t * vd..(t + 1) * vd];
                let inv =
                    1.0 / (o.iter().map(|v| v * v).sum::<f32>() / vd as f32 + self.eps).sqrt();
                let dst = &mut y[(t * vh + h) * vd..(t * vh + h + 1) * vd];
                for j in 0..vd {
                    dst[j] = o[j] * inv * self.norm[j] * silu(z[h * vd + j]);
                }
            }
        }
        Ok(y)
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `ln(1 + eˣ)`, linear above 20 as torch's `softplus` is.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}
