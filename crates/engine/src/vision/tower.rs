//! Qwen3.5's vision tower: patches embedded, a learned position grid resampled to the
//! image, ViT blocks with 2-D rotary positions attending within one image, and the merger
//! that folds each 2 × 2 window of patches into one token of the language model's width.
//! No deepstack features: Qwen3.5 has none (Qwen3-VL does).

use super::config::VisionConfig;
use super::processor::ImageInput;
use crate::error::{EngineError, Result};
use crate::kernels::ops::full_attention::attend_all;
use crate::kernels::ops::pointwise::bias_gelu;
use crate::kernels::packed::PackedMatrix;
use crate::kernels::with_cpu_f32;
use crate::kernels::CpuLevel;
use crate::load::weights::WeightSource;
use candle_core::{DType, Device, Tensor};

#[derive(Debug, Clone)]
struct Linear {
    weight: Weight,
    bias: Tensor,
}

/// A linear layer's weight: packed in panels where the CPU runs the packed kernel (a
/// tower's products have thousands of rows), else as loaded for candle's matmul.
#[derive(Debug, Clone)]
enum Weight {
    /// Packed for the kernels of this level.
    Packed(PackedMatrix, CpuLevel),
    Plain(Tensor),
}

impl Linear {
    fn load(w: &dyn WeightSource, name: &str, out: usize, inp: usize) -> Result<Self> {
        let weight = w.tensor(&format!("{name}.weight"), &[out, inp], DType::F32)?;
        Ok(Self {
            weight: Weight::new(weight, w.kernels().level)?,
            bias: w.tensor(&format!("{name}.bias"), &[out], DType::F32)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_gelu(x, false)
    }

    /// `x · Wᵀ + b`, through the tanh GELU where `gelu`.
    fn forward_gelu(&self, x: &Tensor, gelu: bool) -> candle_core::Result<Tensor> {
        match &self.weight {
            Weight::Plain(w) => {
                let y = x.matmul(&w.t()?)?.broadcast_add(&self.bias)?;
                if gelu {
                    y.gelu()
                } else {
                    Ok(y)
                }
            }
            &Weight::Packed(ref p, level) => {
                let m = x.dim(0)?;
                let x = x.contiguous()?;
                // The rows read where they are, not copied out.
                let y = with_cpu_f32(&x, |rows| p.matmul_t(level, rows, m))?.flatten();
                let Some(mut y) = y else {
                    candle_core::bail!("the packed product takes {} columns", p.cols())
                };
                let added = with_cpu_f32(&self.bias, |b| bias_gelu(level, &mut y, b, gelu))?;
                if added.is_none() {
                    candle_core::bail!("the bias is not f32 on the CPU");
                }
                Tensor::from_vec(y, (m, p.rows()), &Device::Cpu)
            }
        }
    }
}

impl Weight {
    fn new(w: Tensor, level: CpuLevel) -> candle_core::Result<Self> {
        if !w.device().is_cpu() || !PackedMatrix::runs_here(level) {
            return Ok(Self::Plain(w));
        }
        let (n, k) = w.dims2()?;
        let packed = PackedMatrix::new(&w.flatten_all()?.to_vec1()?, n, k);
        Ok(Self::Packed(packed, level))
    }
}

#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

impl LayerNorm {
    fn load(w: &dyn WeightSource, name: &str, width: usize) -> Result<Self> {
        Ok(Self {
            weight: w.tensor(&format!("{name}.weight"), &[width], DType::F32)?,
            bias: w.tensor(&format!("{name}.bias"), &[width], DType::F32)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm(x, &self.weight, &self.bias, 1e-6)
    }
}

#[derive(Debug, Clone)]
struct Block {
    norm1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

/// Query rows whose scores are taken at once by candle's ops.
const QUERY_BLOCK: usize = 512;

/// The tower, in f32.
#[derive(Debug, Clone)]
pub struct VisionTower {
    cfg: VisionConfig,
    /// The patch embedding (a 3-D convolution whose kernel is its stride) as a matrix over a
    /// patch row: `[hidden, channels × frames × patch²]`.
    patch: Linear,
    /// The learned position grid, `side² × hidden`, on the host (resampled per image).
    positions: Vec<f32>,
    blocks: Vec<Block>,
    merger_norm: LayerNorm,
    merger_fc1: Linear,
    merger_fc2: Linear,
    /// `1 / theta^(2k / (head_dim / 2))`, one per rotated pair of a coordinate.
    inv_freq: Vec<f32>,
    device: Device,
    /// The CPU kernels' level.
    level: CpuLevel,
}

impl VisionTower {
    /// The tower's weights under `prefix` (`model.visual` in a checkpoint).
    pub fn load(cfg: &VisionConfig, w: &dyn WeightSource, prefix: &str) -> Result<Self> {
        let d = cfg.hidden_size;
        let name = |n: &str| format!("{prefix}.{n}");
        let conv = w.tensor(
            &name("patch_embed.proj.weight"),
            &[
                d,
                cfg.in_channels,
                cfg.temporal_patch_size,
                cfg.patch_size,
                cfg.patch_size,
            ],
            DType::F32,
        )?;
        let patch = Linear {
            weight: Weight::new(conv.reshape((d, cfg.patch_values()))?, w.kernels().level)?,
            bias: w.tensor(&name("patch_embed.proj.bias"), &[d], DType::F32)?,
        };
        let positions = w
            .tensor(
                &name("pos_embed.weight"),
                &[cfg.num_position_embeddings, d],
                DType::F32,
            )?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let b = |n: &str| name(&format!("blocks.{i}.{n}"));
            blocks.push(Block {
                norm1: LayerNorm::load(w, &b("norm1"), d)?,
                qkv: Linear::load(w, &b("attn.qkv"), 3 * d, d)?,
                proj: Linear::load(w, &b("attn.proj"), d, d)?,
                norm2: LayerNorm::load(w, &b("norm2"), d)?,
                fc1: Linear::load(w, &b("mlp.linear_fc1"), cfg.intermediate_size, d)?,
                fc2: Linear::load(w, &b("mlp.linear_fc2"), d, cfg.intermediate_size)?,
            });
        }
        let merged = d * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let half = cfg.head_dim() / 2;
        let theta = cfg.rope_theta() as f32;
        let inv_freq = (0..half)
            .step_by(2)
            .map(|k| 1.0 / theta.powf(k as f32 / half as f32))
            .collect();
        Ok(Self {
            cfg: cfg.clone(),
            patch,
            positions,
            blocks,
            merger_norm: LayerNorm::load(w, &name("merger.norm"), d)?,
            merger_fc1: Linear::load(w, &name("merger.linear_fc1"), merged, merged)?,
            merger_fc2: Linear::load(w, &name("merger.linear_fc2"), cfg.out_hidden_size, merged)?,
            inv_freq,
            device: w.device().clone(),
            level: w.kernels().level,
        })
    }

    /// The tower's widths.
    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// The image's tokens for the language model: `[tokens, out_hidden]`, f32, in the
    /// order the text holds them (merge windows row by row).
    pub fn forward(&self, image: &ImageInput) -> Result<Tensor> {
        let c = &self.cfg;
        let [t, gh, gw] = image.grid;
        let m = c.spatial_merge_size;
        let n = t * gh * gw;
        if t != 1
            || !gh.is_multiple_of(m)
            || !gw.is_multiple_of(m)
            || image.pixels.len() != n * c.patch_values()
        {
            return Err(EngineError::invalid(
                "image",
                format!(
                    "a grid of {t}×{gh}×{gw} patches with {} values does not fit this tower \
                     (one frame, sides a multiple of {m}, {} values a patch)",
                    image.pixels.len(),
                    c.patch_values()
                ),
            ));
        }
        let (rows, cols) = patch_coordinates(gh, gw, m);
        let pixels = Tensor::from_slice(&image.pixels, (n, c.patch_values()), &self.device)?;
        let x = self.patch.forward(&pixels)?;
        let pos = self.resampled_positions(&rows, &cols, gh, gw);
        let mut x = (x + Tensor::from_vec(pos, (n, c.hidden_size), &self.device)?)?;
        let (cos, sin) = self.rotary(&rows, &cols)?;
        for block in &self.blocks {
            x = self.block(block, &x, &cos, &sin)?;
        }
        let x = self.merger_norm.forward(&x)?;
        let x = x.reshape((n / (m * m), c.hidden_size * m * m))?;
        let x = self.merger_fc1.forward(&x)?.gelu_erf()?;
        Ok(self.merger_fc2.forward(&x)?)
    }

    fn block(&self, b: &Block, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        let (n, heads, hd) = (x.dim(0)?, c.num_heads, c.head_dim());
        let qkv = b.qkv.forward(&b.norm1.forward(x)?)?;
        let qkv = qkv.reshape((n, 3, heads, hd))?.permute((1, 2, 0, 3))?; // [3, heads, n, hd]
        let part =
            |i: usize| -> candle_core::Result<Tensor> { qkv.get(i)?.unsqueeze(0)?.contiguous() };
        let q = candle_nn::rotary_emb::rope(&part(0)?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&part(1)?, cos, sin)?;
        let v = part(2)?;
        let flat = |t: &Tensor| t.flatten_all()?.to_vec1::<f32>();
        let out = match q.device().is_cpu() {
            true => attend_all(self.level, &flat(&q)?, &flat(&k)?, &flat(&v)?, heads, n, hd),
            false => None,
        };
        let out = match out {
            Some(out) => Tensor::from_vec(out, (n, heads * hd), &self.device)?,
            None => attention(&q, &k, &v)?,
        };
        let x = (x + b.proj.forward(&out)?)?;
        let y = b.fc1.forward_gelu(&b.norm2.forward(&x)?, true)?;
        Ok((&x + b.fc2.forward(&y)?)?)
    }

    /// The learned grid resampled bilinearly (corners aligned) at each patch, in f32 as
    /// transformers computes it: `[patches × hidden]`.
    fn resampled_positions(
        &self,
        rows: &[usize],
        cols: &[usize],
        gh: usize,
        gw: usize,
    ) -> Vec<f32> {
        let d = self.cfg.hidden_size;
        let side = self.cfg.position_side();
        let last = (side - 1) as f32;
        let at = |i: usize, n: usize| -> (usize, usize, [f32; 2]) {
            let s = i as f32 * last / (n.max(2) - 1) as f32;
            let lo = s.floor();
            let f = s - lo;
            let lo = lo as usize;
            let hi = (lo + 1).min(side - 1);
            (
                lo,
                hi,
                [(1.0 - f).max(0.0), (1.0 - (f - 1.0).abs()).max(0.0)],
            )
        };
        let mut out = Vec::with_capacity(rows.len() * d);
        for (&r, &c) in rows.iter().zip(cols) {
            let (r0, r1, wr) = at(r, gh);
            let (c0, c1, wc) = at(c, gw);
            let taps = [
                (r0 * side + c0, wr[0] * wc[0]),
                (r0 * side + c1, wr[0] * wc[1]),
                (r1 * side + c0, wr[1] * wc[0]),
                (r1 * side + c1, wr[1] * wc[1]),
            ];
            for k in 0..d {
                let mut v = 0f32;
                for &(idx, weight) in &taps {
                    v += self.positions[idx * d + k] * weight;
                }
                out.push(v);
            }
        }
        out
    }

    /// cos and sin `[patches, head_dim / 2]`: the first half of the rotated pairs turn by the
    /// patch's row, the second by its column.
    fn rotary(&self, rows: &[usize], cols: &[usize]) -> Result<(Tensor, Tensor)> {
        let quarter = self.inv_freq.len();
        let mut angles = Vec::with_capacity(rows.len() * 2 * quarter);
        for (&r, &c) in rows.iter().zip(cols) {
            angles.extend(self.inv_freq.iter().map(|f| r as f32 * f));
            angles.extend(self.inv_freq.iter().map(|f| c as f32 * f));
        }
        let angles = Tensor::from_vec(angles, (rows.len(), 2 * quarter), &self.device)?;
        Ok((angles.cos()?.contiguous()?, angles.sin()?.contiguous()?))
    }
}

/// `softmax(q·kᵀ/√d)·v` by candle's ops (`q`, `k`, `v`: `[1, heads, n, d]`): `[n, heads × d]`.
fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let (_, heads, n, hd) = q.dims4()?;
    let scale = 1.0 / (hd as f64).sqrt();
    let kt = k.transpose(2, 3)?.contiguous()?;
    // Queries in blocks, so that a large image's scores are never all held at once (a
    // 1920 × 1080 screenshot has 8160 patches: 4 GiB of scores a block, taken whole).
    let mut parts = Vec::with_capacity(n.div_ceil(QUERY_BLOCK));
    for start in (0..n).step_by(QUERY_BLOCK) {
        let rows = QUERY_BLOCK.min(n - start);
        let scores = (q.narrow(2, start, rows)?.matmul(&kt)? * scale)?;
        let attn = candle_nn::ops::softmax_last_dim(&scores)?;
        parts.push(attn.matmul(v)?);
    }
    let out = Tensor::cat(&parts, 2)?; // [1, heads, n, hd]
    Ok(out.squeeze(0)?.transpose(0, 1)?.reshape((n, heads * hd))?)
}

/// Each patch row's place in the image (row, column), in the processor's order: merge
/// windows row by row, the patches of a window row by row.
pub fn patch_coordinates(gh: usize, gw: usize, m: usize) -> (Vec<usize>, Vec<usize>) {
    let bw = gw / m;
    (0..gh * gw)
        .map(|i| {
            (
                (i / (m * m * bw)) * m + (i / m) % m,
                ((i / (m * m)) % bw) * m + i % m,
            )
        })
        .unzip()
}
