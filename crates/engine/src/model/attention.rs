//! Grouped-query self-attention reading and writing an explicit [`KvCache`]; for Qwen3.5, gated
//! (q_proj gives each head's query and an output gate, `o · sigmoid(gate)` before o_proj) and
//! rotated over part of each head.

use super::rotary::Rotary;
use crate::cache::cache_type::CacheType;
use crate::cache::kv::KvCache;
use crate::cache::multimodal::Rows;
use crate::error::Result;
use crate::kernels::ops::attention::{attend_at, rotate, Cached, Heads, Piece, Stored};
use crate::kernels::ops::hadamard;
use crate::kernels::KernelContext;
use crate::load::config::QwenConfig;
use crate::load::weights::WeightSource;
use crate::model::linear::Linear;
use candle_core::{DType, Result as CResult, Storage, Tensor, D};

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
    /// Whether q_proj gives each head `[query, gate]` (Qwen3.5's gated attention).
    gated: bool,
}

impl Attention {
    /// Bytes of weights one token's pass reads.
    pub fn weight_bytes(&self) -> usize {
        let norms = self.qk_norm.as_ref().map_or(0, |(q, k)| {
            crate::load::weights::tensor_bytes(q) + crate::load::weights::tensor_bytes(k)
        });
        self.qkv.bytes() + self.o.bytes() + norms
    }

    pub fn load(w: &dyn WeightSource, prefix: &str, cfg: &QwenConfig, act: DType) -> Result<Self> {
        let (h, d) = (cfg.hidden_size, cfg.head_dim);
        let (q_out, kv_out) = (cfg.num_attention_heads * d, cfg.num_key_value_heads * d);
        let gated = cfg.family.is_hybrid();
        let q_rows = if gated { 2 * q_out } else { q_out };
        let weight = |name: &str, rows: usize, cols: usize| {
            w.projection(&format!("{prefix}.{name}.weight"), &[rows, cols])
        };
        let bias =
            |name: &str, rows: usize| w.tensor(&format!("{prefix}.{name}.bias"), &[rows], act);
        let qkv_w = vec![
            weight("q_proj", q_rows, h)?,
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
        let norm = |name: &str| -> Result<Tensor> {
            let t = w.tensor(&format!("{prefix}.{name}.weight"), &[d], act)?;
            Ok(if cfg.norm_weights_offset {
                (t + 1.0)?
            } else {
                t
            })
        };
        let qk_norm = match cfg.family.has_qk_norm() {
            true => Some((norm("q_norm")?, norm("k_norm")?)),
            false => None,
        };
        Ok(Self {
            qkv: Linear::fused(qkv_w, qkv_b)?,
            o: Linear::fused(vec![weight("o_proj", h, q_out)?], o_b)?,
            qk_norm,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: d,
            eps: cfg.rms_norm_eps as f32,
            gated,
        })
    }

    /// The fused projection of `x`, and for gated attention the gates taken out of it:
    /// `([1, len, (heads + 2 kv_heads) d], Some([1, len, heads · d]))`.
    fn project(&self, x: &Tensor, kc: &KernelContext) -> CResult<(Tensor, Option<Tensor>)> {
        let qkv = self.qkv.forward(x, kc)?;
        if !self.gated {
            return Ok((qkv, None));
        }
        let (b, len, _) = qkv.dims3()?;
        let (h, d) = (self.heads, self.head_dim);
        let q_full = qkv
            .narrow(D::Minus1, 0, 2 * h * d)?
            .reshape((b, len, h, 2 * d))?;
        let q = q_full.narrow(3, 0, d)?.reshape((b, len, h * d))?;
        let gate = q_full.narrow(3, d, d)?.reshape((b, len, h * d))?;
        let kv = qkv.narrow(D::Minus1, 2 * h * d, 2 * self.kv_heads * d)?;
        Ok((Tensor::cat(&[&q, &kv], D::Minus1)?, Some(gate)))
    }

    /// The output projection of the attention's `out`, gated where the layer is.
    fn output(&self, out: &Tensor, gate: Option<Tensor>, kc: &KernelContext) -> CResult<Tensor> {
        match gate {
            Some(g) => self.o.forward(&(out * candle_nn::ops::sigmoid(&g)?)?, kc),
            None => self.o.forward(out, kc),
        }
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
        kc: &KernelContext,
    ) -> CResult<Tensor> {
        let (qkv, gate) = self.project(x, kc)?;
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            let len = qkv.dim(1)?;
            let out = self.attend_cpu(&qkv, layer, &[len], &mut [cache], rotary, kc)?;
            return self.output(&out, gate, kc);
        }
        let out = self.attend(&qkv, layer, cache, rotary, mask)?;
        self.output(&out, gate, kc)
    }

    /// Rows of several sequences in one pass: `x` is `[1, rows, hidden]`, the first `lens[0]`
    /// rows the next tokens of `caches[0]`, then `lens[1]` of `caches[1]`, … (a decoding step
    /// is one row each; a speculative step verifies several). The projections run once for all
    /// rows; each sequence's rows are rotated at their positions and attend, causally, to its
    /// own cache.
    pub fn forward_rows(
        &self,
        x: &Tensor,
        layer: usize,
        lens: &[usize],
        caches: &mut [&mut KvCache],
        rotary: &Rotary,
        kc: &KernelContext,
    ) -> CResult<Tensor> {
        let (qkv, gate) = self.project(x, kc)?;
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            let out = self.attend_cpu(&qkv, layer, lens, caches, rotary, kc)?;
            return self.output(&out, gate, kc);
        }
        let mut outs = Vec::with_capacity(caches.len());
        let mut first = 0;
        for (cache, &len) in caches.iter_mut().zip(lens) {
            let mask = causal_mask(len, cache.len(), x.dtype(), x.device())?;
            let rows = qkv.narrow(1, first, len)?;
            outs.push(self.attend(&rows, layer, cache, rotary, mask.as_ref())?);
            first += len;
        }
        self.output(&Tensor::cat(&outs, 1)?, gate, kc)
    }

    /// Attention of the fused projection's output `qkv` (`[1, len, (heads + 2 kv_heads) d]`)
    /// against `cache`, before the output projection: `[1, len, heads · d]`.
    fn attend(
        &self,
        qkv: &Tensor,
        layer: usize,
        cache: &mut KvCache,
        rotary: &Rotary,
        mask: Option<&Tensor>,
    ) -> CResult<Tensor> {
        let (b, len, _) = qkv.dims3()?;
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
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
        let (q, k) = match cache.positions(len) {
            Rows::From(p) => (rotary.apply(&q, p)?, rotary.apply(&k, p)?),
            Rows::Each(p) => (rotary.apply_at(&q, &p)?, rotary.apply_at(&k, &p)?),
        };
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
        probs
            .reshape((b, kvh, group * len, total))?
            .matmul(&v)?
            .reshape((b, h, len, d))?
            .transpose(1, 2)?
            .reshape((b, len, h * d))
    }

    /// The same on the CPU in f32 ([`crate::kernels::ops::attention`]): q, k and v stay in the fused
    /// projection's rows, only the new keys and values are copied (into the cache). `lens[i]`
    /// consecutive rows are the next positions of `caches[i]`.
    fn attend_cpu(
        &self,
        qkv: &Tensor,
        layer: usize,
        lens: &[usize],
        caches: &mut [&mut KvCache],
        rotary: &Rotary,
        kc: &KernelContext,
    ) -> CResult<Tensor> {
        let (b, rows_in, _) = qkv.dims3()?;
        let device = qkv.device();
        let heads = Heads {
            q: self.heads,
            kv: self.kv_heads,
            dim: self.head_dim,
        };
        let (h, kvh, d) = (heads.q, heads.kv, heads.dim);
        let width = (h + 2 * kvh) * d;
        let mut rows: Vec<f32> = qkv.flatten_all()?.to_vec1()?;
        if let Some((qn, kn)) = &self.qk_norm {
            let (qn, kn): (Vec<f32>, Vec<f32>) = (qn.to_vec1()?, kn.to_vec1()?);
            for row in rows.chunks_exact_mut(width) {
                let (q, k) = row.split_at_mut(h * d);
                q.chunks_exact_mut(d)
                    .for_each(|x| rms_norm(x, &qn, self.eps));
                k[..kvh * d]
                    .chunks_exact_mut(d)
                    .for_each(|x| rms_norm(x, &kn, self.eps));
            }
        }
        let (cos, sin) = (
            rotary.cos.storage_and_layout(),
            rotary.sin.storage_and_layout(),
        );
        let (Storage::Cpu(cos_s), Storage::Cpu(sin_s)) = (&*cos.0, &*sin.0) else {
            candle_core::bail!("rotary tables are not on the CPU");
        };
        let cos = &cos_s.as_slice::<f32>()?[cos.1.start_offset()..];
        let sin = &sin_s.as_slice::<f32>()?[sin.1.start_offset()..];
        if lens.len() != caches.len() || lens.iter().sum::<usize>() != b * rows_in {
            candle_core::bail!(
                "{} rows of attention input for {} caches of {lens:?} rows",
                b * rows_in,
                caches.len()
            );
        }
        let mut out = Vec::with_capacity(b * rows_in * h * d);
        let mut first = 0;
        for (cache, &len) in caches.iter_mut().zip(lens) {
            let rows = &mut rows[first * width..(first + len) * width];
            first += len;
            let offset = cache.len();
            match cache.positions(len) {
                Rows::From(p) => rotate(rows, width, 0, h + kvh, d, rotary.rotated, p, cos, sin),
                Rows::Each(positions) => {
                    let (cos, sin) = rotary.rows_at(&positions);
                    rotate(rows, width, 0, h + kvh, d, rotary.rotated, 0, &cos, &sin)
                }
            }
            // Keys stored in blocks of one scale: queries and keys rotated alike (the scores
            // unchanged), so a key's outlying channels do not set its block's scale.
            if rotates_keys(cache.types(), d) {
                for row in rows.chunks_exact_mut(width) {
                    row[..(h + kvh) * d]
                        .chunks_exact_mut(d)
                        .for_each(hadamard::rotate);
                }
            }
            // The cache holds `[1, kv_heads, positions, dim]`.
            let new = |first: usize| {
                let mut t = Vec::with_capacity(kvh * len * d);
                for g in 0..kvh {
                    for row in rows.chunks_exact(width) {
                        t.extend_from_slice(&row[(first + g) * d..][..d]);
                    }
                }
                Tensor::from_vec(t, (1, kvh, len, d), device)
            };
            cache.write(layer, &new(h)?, &new(h + kvh)?)?;
            // Shared segments, then the cache's own buffer: read where they are.
            let pieces = cache.pieces(layer, 0, offset + len)?;
            let (kt, vt) = match cache.types() {
                Some(t) => t,
                None => {
                    let first = pieces.first().map(|p| p.k.dtype());
                    let ty = first.and_then(CacheType::of).unwrap_or(CacheType::F32);
                    (ty, ty)
                }
            };
            let guards: Vec<_> = pieces
                .iter()
                .map(|p| (p.start, p.k.storage_and_layout(), p.v.storage_and_layout()))
                .collect();
            let mut kp = Vec::with_capacity(guards.len());
            let mut vp = Vec::with_capacity(guards.len());
            for (start, (ks, kl), (vs, vl)) in &guards {
                let (Storage::Cpu(ks), Storage::Cpu(vs)) = (&**ks, &**vs) else {
                    candle_core::bail!("kv cache is not on the CPU");
                };
                kp.push(piece(*start, ks, kl, kt, d)?);
                vp.push(piece(*start, vs, vl, vt, d)?);
            }
            let (k, v) = (Cached { pieces: &kp }, Cached { pieces: &vp });
            if !k.holds(offset + len) || !v.holds(offset + len) {
                candle_core::bail!(
                    "the kv cache's pieces do not hold {} positions",
                    offset + len
                );
            }
            out.extend(attend_at(
                kc.level,
                kc.options.attention,
                rows,
                width,
                len,
                offset,
                k,
                v,
                heads,
            ));
        }
        Tensor::from_vec(out, (b, rows_in, h * d), device)
    }
}

/// Whether a cache of `types` holds keys rotated by [`hadamard::rotate`]: quantized keys, of
/// heads the rotation fits. Its queries are rotated the same way.
pub(crate) fn rotates_keys(types: Option<(CacheType, CacheType)>, dim: usize) -> bool {
    types.is_some_and(|(k, _)| k.is_quantized()) && hadamard::fits(dim)
}

/// A piece of the cache (`[1, kv_heads, positions, dim]`, rows contiguous) as the kernel
/// reads it, in its dtype.
fn piece<'a>(
    start: usize,
    s: &'a candle_core::CpuStorage,
    l: &candle_core::Layout,
    ty: CacheType,
    dim: usize,
) -> CResult<Piece<'a>> {
    use candle_core::{backend::BackendStorage, CpuStorage as S};
    if l.stride()[2..] != [ty.row_len(dim), 1] {
        candle_core::bail!("kv cache rows are not contiguous");
    }
    let at = l.start_offset();
    let data = match (s, ty) {
        (S::F32(d), _) => Stored::F32(&d[at..]),
        (S::F16(d), _) => Stored::F16(&d[at..]),
        (S::BF16(d), _) => Stored::Bf16(&d[at..]),
        (S::U8(d), CacheType::Q8_0) => Stored::Q8_0(&d[at..]),
        (S::U8(d), CacheType::Q4_0) => Stored::Q4_0(&d[at..]),
        (other, _) => candle_core::bail!("a kv cache in {:?} as {}", other.dtype(), ty.name()),
    };
    Ok(Piece {
        start,
        len: l.dims()[2],
        data,
        head_stride: l.stride()[1],
    })
}

/// RMSNorm of one head's values in place (Qwen3's q/k norm), as candle computes it.
fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let mean = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    x.iter_mut().zip(w).for_each(|(v, w)| *v *= inv * w);
}

/// `[len, offset + len]`: position `offset + i` sees keys `0..=offset + i`. None for one token.
pub(crate) fn causal_mask(
    len: usize,
    offset: usize,
    dtype: DType,
    device: &candle_core::Device,
) -> CResult<Option<Tensor>> {
    if len == 1 {
        return Ok(None);
    }
    let total = offset + len;
    let mask: Vec<f32> = (0..len)
        .flat_map(|i| {
            (0..total).map(move |j| {
                if j > offset + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Some(
        Tensor::from_vec(mask, (len, total), device)?.to_dtype(dtype)?,
    ))
}
