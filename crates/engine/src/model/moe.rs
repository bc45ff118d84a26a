//! The sparse mixture-of-experts feed-forward block of Qwen3-MoE: a router scores every
//! expert for each token, the token goes through its top-k experts (SwiGLU blocks of their
//! own), and their outputs are summed, weighted by the router's probabilities.
//!
//! Tokens are grouped by expert, so a prompt runs one matrix product per chosen expert over all
//! the tokens routed to it, and a decoding step reads only the chosen experts' weights; a
//! batched step's sequences share that pass. On the CPU the chosen experts run side by side on
//! the pool's threads (each product split across them too), straight from slices. Each
//! token's sum runs over its experts in expert order whatever else shares the step, so a row
//! computes the same alone, in a prompt or in a batch.
//!
//! Qwen3.5-MoE adds a shared expert that every token runs, its output scaled by a sigmoid
//! gate of the token (`shared_expert`, `shared_expert_gate`) and added to the routed sum.

use super::mlp::Mlp;
use crate::error::{EngineError, Result};
use crate::kernels::KernelContext;
use crate::load::config::MoeConfig;
use crate::load::weights::WeightSource;
use crate::model::linear::{with_cpu_f32, Linear};
use candle_core::{DType, Result as CResult, Tensor, D};
use rayon::prelude::*;

#[derive(Debug, Clone)]
pub struct Moe {
    /// `[experts, hidden]`: one logit per expert.
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    norm_topk_prob: bool,
    /// The shared expert and its gate (`[1, hidden]`), where the model has one.
    shared: Option<(Mlp, Linear)>,
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
        let shared = match cfg.shared_expert_intermediate_size {
            Some(size) => Some((
                Mlp::load(w, &format!("{prefix}.shared_expert"), hidden, size)?,
                Linear::fused(
                    vec![w.projection(
                        &format!("{prefix}.shared_expert_gate.weight"),
                        &[1, hidden],
                    )?],
                    None,
                )?,
            )),
            None => None,
        };
        Ok(Self {
            router: Linear::fused(vec![router], None)?,
            experts,
            top_k: cfg.experts_per_token,
            norm_topk_prob: cfg.norm_topk_prob,
            shared,
        })
    }

    /// Bytes of weights one token's pass reads: the router, `top_k` experts and the shared
    /// expert.
    pub fn weight_bytes(&self) -> usize {
        let expert = self.experts.first().map_or(0, Mlp::weight_bytes);
        let shared = self
            .shared
            .as_ref()
            .map_or(0, |(m, g)| m.weight_bytes() + g.bytes());
        self.router.bytes() + self.top_k * expert + shared
    }

    /// `routed` plus the shared expert's output scaled by its sigmoid gate, where there is one.
    fn plus_shared(&self, x: &Tensor, routed: Tensor, kc: &KernelContext) -> CResult<Tensor> {
        let Some((mlp, gate)) = &self.shared else {
            return Ok(routed);
        };
        let g = candle_nn::ops::sigmoid(&gate.forward(x, kc)?)?;
        routed + mlp.forward(x, kc)?.broadcast_mul(&g)?
    }

    /// The experts on the CPU in f32 (`x`: `[tokens, hidden]`): every chosen expert at once
    /// over the rows routed to it, then each token's weighted sum in expert order, as the
    /// tensor path sums it. `None` where some expert takes candle's ops.
    fn cpu_experts(
        &self,
        x: &Tensor,
        groups: &[Routed],
        kc: &KernelContext,
    ) -> CResult<Option<Vec<f32>>> {
        if !x.device().is_cpu() || x.dtype() != DType::F32 {
            return Ok(None);
        }
        let (tokens, hidden) = x.dims2()?;
        let x = x.contiguous()?;
        let ys = with_cpu_f32(&x, |xs| {
            groups
                .par_iter()
                .zip(&self.experts)
                .with_max_len(1)
                .map(|(routed, expert)| {
                    if routed.tokens.is_empty() {
                        return Ok(Some(Vec::new()));
                    }
                    let mut rows = Vec::with_capacity(routed.tokens.len() * hidden);
                    for &t in &routed.tokens {
                        rows.extend_from_slice(&xs[t as usize * hidden..][..hidden]);
                    }
                    expert.cpu_forward(&rows, routed.tokens.len(), kc)
                })
                .collect::<CResult<Option<Vec<Vec<f32>>>>>()
        })?;
        let Some(ys) = ys.transpose()?.flatten() else {
            return Ok(None);
        };
        let mut out = vec![0f32; tokens * hidden];
        for (routed, y) in groups.iter().zip(&ys) {
            let rows = routed.tokens.iter().zip(&routed.weights);
            for ((&t, &w), y) in rows.zip(y.chunks_exact(hidden)) {
                let o = &mut out[t as usize * hidden..][..hidden];
                for (o, &v) in o.iter_mut().zip(y) {
                    *o += v * w;
                }
            }
        }
        Ok(Some(out))
    }
}

impl Moe {
    pub fn forward(&self, x: &Tensor, kc: &KernelContext) -> CResult<Tensor> {
        let dims = x.dims().to_vec();
        let hidden = x.dim(D::Minus1)?;
        let tokens = x.elem_count() / hidden.max(1);
        let x = x.reshape((tokens, hidden))?;
        let logits = self.router_logits(&x, kc)?;
        let groups = route(&logits, self.experts.len(), self.top_k, self.norm_topk_prob);
        let routed = match self.cpu_experts(&x, &groups, kc)? {
            Some(out) => Tensor::from_vec(out, (tokens, hidden), x.device())?,
            None => self.tensor_experts(&x, &groups, kc)?,
        };
        self.plus_shared(&x, routed, kc)?.reshape(dims)
    }

    /// The router's logits, `[tokens, experts]` flat. On the CPU every row takes the one-row
    /// kernel (GGUF files keep the router in f32, whose prompts would otherwise go to gemm):
    /// a token's experts and weights must not depend on the prompt around it.
    fn router_logits(&self, x: &Tensor, kc: &KernelContext) -> CResult<Vec<f32>> {
        let tokens = x.dim(0)?;
        let x = x.contiguous()?;
        let one_row = kc.with_rows_as_sequences(true);
        let rows = with_cpu_f32(&x, |xs| self.router.cpu_product(xs, tokens, &one_row))?;
        if let Some(logits) = rows.transpose()?.flatten() {
            return Ok(logits);
        }
        self.router
            .forward(&x, kc)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()
    }

    /// The experts with candle's ops, one after another (GPUs, and weights without Hearth's
    /// kernels): the same sums as [`Moe::cpu_experts`].
    fn tensor_experts(&self, x: &Tensor, groups: &[Routed], kc: &KernelContext) -> CResult<Tensor> {
        let mut out = x.zeros_like()?;
        for (expert, routed) in self.experts.iter().zip(groups) {
            if routed.tokens.is_empty() {
                continue;
            }
            let idx = Tensor::new(routed.tokens.as_slice(), x.device())?;
            let weights = Tensor::new(routed.weights.as_slice(), x.device())?
                .to_dtype(x.dtype())?
                .unsqueeze(1)?;
            let y = expert
                .forward(&x.index_select(&idx, 0)?, kc)?
                .broadcast_mul(&weights)?;
            out = out.index_add(&idx, &y, 0)?;
        }
        Ok(out)
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
    use crate::kernels::tiles::{self, TileMatrix};
    use crate::kernels::BlockType;
    use crate::load::weights::Matrix;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::Device;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// Random experts as a Q4_K_M file holds them: Q4_K gate and up (in tiles where this CPU
    /// has their kernels), Q8_0 down, an f32 router.
    struct Quantized(HashMap<String, Matrix>);

    impl WeightSource for Quantized {
        fn device(&self) -> &Device {
            &Device::Cpu
        }
        fn dtype(&self) -> DType {
            DType::F32
        }
        fn contains(&self, name: &str) -> bool {
            self.0.contains_key(name)
        }
        fn tensor(&self, name: &str, _: &[usize], _: DType) -> Result<Tensor> {
            Err(EngineError::invalid("tensor", name))
        }
        fn matrix(&self, name: &str, _: &[usize]) -> Result<Matrix> {
            self.0
                .get(name)
                .cloned()
                .ok_or_else(|| EngineError::invalid("matrix", name))
        }
    }

    type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn random(rows: usize, cols: usize, seed: usize) -> CResult<Tensor> {
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| (((i * 7919 + seed * 104_729) % 1009) as f32 / 504.5 - 1.0) * 0.3)
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu)
    }

    fn quantized(w: &Tensor, dtype: GgmlDType) -> TestResult<Matrix> {
        let q = QTensor::quantize(w, dtype)?;
        let (rows, cols) = w.dims2()?;
        let kind = BlockType::of(dtype).ok_or("a block type with kernels")?;
        if tiles::supported(crate::kernels::cpu::default_level(), kind, rows) {
            let data = tiles::interleave(kind, &q.data()?, rows, cols).into();
            return Ok(Matrix::Tiles(Arc::new(TileMatrix {
                kind,
                rows,
                cols,
                data,
            })));
        }
        Ok(Matrix::Quantized(Arc::new(q)))
    }

    const HIDDEN: usize = 256;

    fn tiny_moe() -> TestResult<Moe> {
        let cfg = MoeConfig {
            num_experts: 8,
            experts_per_token: 3,
            expert_intermediate_size: 256,
            norm_topk_prob: true,
            decoder_sparse_step: 1,
            mlp_only_layers: vec![],
            shared_expert_intermediate_size: None,
        };
        let mut m = HashMap::new();
        m.insert("l.gate.weight".into(), Matrix::Dense(random(8, HIDDEN, 1)?));
        for e in 0..8 {
            let inter = cfg.expert_intermediate_size;
            let p = format!("l.experts.{e}");
            let gate = random(inter, HIDDEN, 10 + e)?;
            let up = random(inter, HIDDEN, 20 + e)?;
            let down = random(HIDDEN, inter, 30 + e)?;
            m.insert(
                format!("{p}.gate_proj.weight"),
                quantized(&gate, GgmlDType::Q4K)?,
            );
            m.insert(
                format!("{p}.up_proj.weight"),
                quantized(&up, GgmlDType::Q4K)?,
            );
            m.insert(
                format!("{p}.down_proj.weight"),
                quantized(&down, GgmlDType::Q8_0)?,
            );
        }
        Ok(Moe::load(&Quantized(m), "l", HIDDEN, &cfg)?)
    }

    fn flat(t: &Tensor) -> CResult<Vec<f32>> {
        t.flatten_all()?.to_vec1::<f32>()
    }

    /// The CPU path (experts side by side, from slices) gives the tensor path's sums bit for
    /// bit, and each token's row is what that token gives alone: in a prompt, in a batched
    /// step (every row a sequence) and decoding.
    #[test]
    fn the_cpu_experts_equal_the_tensor_path_and_each_row_alone() -> TestResult {
        let moe = tiny_moe()?;
        let x = random(37, HIDDEN, 99)?;
        let kc = KernelContext::default_level();
        for tokens in [1, 3, 37] {
            let x = x.narrow(0, 0, tokens)?;
            let logits = moe.router_logits(&x, &kc)?;
            let g = route(&logits, moe.experts.len(), moe.top_k, moe.norm_topk_prob);
            let fast = moe.cpu_experts(&x, &g, &kc)?.ok_or("the CPU path")?;
            let slow = flat(&moe.tensor_experts(&x, &g, &kc)?)?;
            assert_eq!(fast, slow, "{tokens} tokens");
            let batched = moe.forward(&x, &kc.with_rows_as_sequences(true))?;
            let batched = flat(&batched)?;
            for t in 0..tokens {
                let alone = flat(&moe.forward(&x.narrow(0, t, 1)?, &kc)?)?;
                let row = &fast[t * HIDDEN..][..HIDDEN];
                assert_eq!(row, alone.as_slice(), "token {t} of {tokens}");
                assert_eq!(&batched[t * HIDDEN..][..HIDDEN], row, "batched token {t}");
            }
        }
        Ok(())
    }

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
