//! The Qwen decoder: embeddings, layers, final norm and the LM head. It holds no per-sequence
//! state; every call reads and extends the caller's [`KvCache`]. A hybrid model's (Qwen3.5)
//! layers mix tokens by Gated DeltaNet ([`DeltaNet`]) or gated full attention, in the order its
//! config gives.

use super::attention::{causal_mask, Attention};
use super::delta_net::DeltaNet;
use super::layer::{FeedForward, Layer, Mixer};
use super::mtp::Mtp;
use super::rotary::Rotary;
use crate::cache::cache_type::{CacheType, CacheTypes};
use crate::cache::kv::KvCache;
use crate::cache::multimodal::{ImageRows, Multimodal};
use crate::cache::recurrent::StateShape;
use crate::error::{EngineError, Result};
use crate::kernels::KernelContext;
use crate::load::config::QwenConfig;
use crate::load::weights::{Matrix, WeightSource};
use crate::model::linear::Linear;
use crate::vision::{mrope_positions, ImageInput, Vision};
use candle_core::{DType, Device, Tensor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A Qwen2, Qwen3 or Qwen3-MoE causal language model, its KV cache kept outside ([`KvCache`]).
#[derive(Debug, Clone)]
pub struct Qwen {
    cfg: QwenConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    /// The LM head over the first ids alone, for drafting ([`Qwen::set_draft_vocabulary`]).
    draft_head: Option<Linear>,
    /// The multi-token-prediction head, where the checkpoint has one (Qwen3.5).
    mtp: Option<Mtp>,
    rotary: Rotary,
    act_dtype: DType,
    /// The dtypes the KV cache stores keys and values in.
    cache_types: (CacheType, CacheType),
    /// The vision tower, where the checkpoint has one and it was loaded.
    vision: Option<Vision>,
    device: Device,
    /// How its products run on the CPU (the level its weights were laid out for).
    kernels: KernelContext,
}

/// The activation dtype for weights of `weight_dtype` on `device`: the CPU computes in f32
/// (reading half-precision weights directly), GPUs in the weight dtype.
pub fn activation_dtype(weight_dtype: DType, device: &Device) -> DType {
    if device.is_cpu() {
        DType::F32
    } else {
        weight_dtype
    }
}

impl Qwen {
    /// Builds the model of `cfg` from the weights of `w`.
    pub fn load(cfg: &QwenConfig, w: &dyn WeightSource) -> Result<Self> {
        Self::load_with_progress(cfg, w, &|_, _| {})
    }

    /// [`Qwen::load`], calling `progress(layers done, layers)` as each layer's weights load.
    pub fn load_with_progress(
        cfg: &QwenConfig,
        w: &dyn WeightSource,
        progress: &dyn Fn(usize, usize),
    ) -> Result<Self> {
        let device = w.device().clone();
        let act = activation_dtype(w.dtype(), &device);
        let (h, eps_dims) = (cfg.hidden_size, [cfg.hidden_size]);
        let root = &cfg.weights_prefix;
        // Qwen3.5's checkpoints store RMSNorm weights as offsets from one.
        let norm = |name: &str| -> Result<Tensor> {
            let t = w.tensor(name, &eps_dims, act)?;
            Ok(if cfg.norm_weights_offset {
                (t + 1.0)?
            } else {
                t
            })
        };
        let embed =
            Embedding(w.matrix(&format!("{root}.embed_tokens.weight"), &[cfg.vocab_size, h])?);
        let n = cfg.num_hidden_layers;
        progress(0, n);
        let layers = (0..n)
            .map(|i| {
                let p = format!("{root}.layers.{i}");
                let mixer = match &cfg.linear_attention {
                    Some(l) if l.linear[i] => Mixer::Linear(DeltaNet::load(
                        w,
                        &format!("{p}.linear_attn"),
                        h,
                        l,
                        cfg.rms_norm_eps,
                    )?),
                    _ => Mixer::Attention(Attention::load(w, &format!("{p}.self_attn"), cfg, act)?),
                };
                let layer = Ok(Layer {
                    input_norm: norm(&format!("{p}.input_layernorm.weight"))?,
                    mixer,
                    post_norm: norm(&format!("{p}.post_attention_layernorm.weight"))?,
                    ffn: FeedForward::load(w, &format!("{p}.mlp"), i, cfg)?,
                });
                progress(i + 1, n);
                layer
            })
            .collect::<Result<Vec<_>>>()?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear::fused(vec![embed.0.clone()], None)?
        } else {
            Linear::fused(
                vec![w.projection("lm_head.weight", &[cfg.vocab_size, h])?],
                None,
            )?
        };
        let mtp = match cfg.family.is_hybrid() {
            true => Mtp::load(w, cfg, act, &norm)?,
            false => None,
        };
        Ok(Self {
            cfg: cfg.clone(),
            mtp,
            norm: norm(&format!("{root}.norm.weight"))?,
            rotary: {
                let r = Rotary::new(
                    cfg.rotary_dim,
                    cfg.rope_theta,
                    cfg.yarn.as_ref(),
                    cfg.max_position_embeddings,
                    act,
                    &device,
                )?;
                match cfg.mrope {
                    Some((sections, interleaved)) => r.with_sections(sections, interleaved),
                    None => r,
                }
            },
            embed,
            layers,
            lm_head,
            draft_head: None,
            act_dtype: act,
            cache_types: {
                let t = CacheType::of(act).unwrap_or(CacheType::F32);
                (t, t)
            },
            vision: None,
            device,
            kernels: w.kernels(),
        })
    }

    /// How the model's products run on the CPU.
    pub fn kernels(&self) -> KernelContext {
        self.kernels
    }

    /// The model's configuration.
    pub fn config(&self) -> &QwenConfig {
        &self.cfg
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The activation dtype.
    pub fn dtype(&self) -> DType {
        self.act_dtype
    }

    /// Stores the KV cache's keys and values as `types` asks (default: as the activations,
    /// for a model loaded alone; [`crate::load_model`] applies its options' default).
    pub fn set_cache_types(&mut self, types: CacheTypes) -> Result<()> {
        self.cache_types = types.resolve(self.act_dtype, &self.device, self.cfg.head_dim)?;
        Ok(())
    }

    /// The types of the KV cache's keys and values.
    pub fn cache_types(&self) -> (CacheType, CacheType) {
        self.cache_types
    }

    /// Bytes of keys and values one position takes in one attention layer.
    fn position_bytes_per_layer(&self) -> usize {
        let c = &self.cfg;
        let (k, v) = self.cache_types;
        c.num_key_value_heads * (k.row_bytes(c.head_dim) + v.row_bytes(c.head_dim))
    }

    /// Bytes of weights one decoded token reads: every layer's, the LM head's and one row of
    /// the embedding table (the memory-bandwidth roofline of decoding is the read bandwidth
    /// divided by this).
    pub fn weight_bytes_per_token(&self) -> usize {
        use crate::load::weights::tensor_bytes;
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                tensor_bytes(&l.input_norm)
                    + l.mixer.weight_bytes()
                    + tensor_bytes(&l.post_norm)
                    + l.ffn.weight_bytes()
            })
            .sum();
        let row = self.embed.0.bytes() / self.cfg.vocab_size.max(1);
        layers + tensor_bytes(&self.norm) + self.lm_head.bytes() + row
    }

    /// A cache sized for this model: keys and values of its attention layers, and the
    /// recurrent state of its linear-attention layers.
    pub fn new_cache(&self) -> KvCache {
        let c = &self.cfg;
        let linear = c.linear_attention.as_ref();
        let attention_layers = c.num_hidden_layers - linear.map_or(0, |l| l.linear_layers());
        let (k, v) = self.cache_types;
        let cache = KvCache::new(c.num_hidden_layers, c.max_position_embeddings)
            .with_position_bytes(attention_layers * self.position_bytes_per_layer())
            .with_types(k, v);
        match linear {
            Some(l) => cache.with_recurrent_state(StateShape {
                linear: l.linear.clone(),
                conv: l.conv_dim() * (l.conv_kernel - 1),
                delta: l.num_value_heads * l.key_head_dim * l.value_head_dim,
            }),
            None => cache,
        }
    }

    /// Runs `tokens` at positions `cache.len()..`, extends the cache, and returns the logits of
    /// the last position as f32 `[vocab]`.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.on_pool(|| {
            let hidden = self.hidden(tokens, cache)?;
            let last = hidden.narrow(1, tokens.len() - 1, 1)?;
            Ok(self
                .lm_head
                .forward(&last, &self.kernels)?
                .flatten_all()?
                .to_dtype(DType::F32)?)
        })
    }

    /// One decoding step of several sequences: `tokens[i]` runs at position `caches[i].len()`
    /// of its own cache. Every weight is read once for all of them; each attends only to its
    /// own keys. Returns f32 logits `[batch, vocab]`, row `i` equal to what
    /// [`Qwen::forward`] gives for `tokens[i]` alone.
    pub fn forward_batch(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        if tokens.len() != caches.len() || tokens.is_empty() {
            return Err(EngineError::invalid(
                "tokens",
                format!(
                    "a batch needs one token per cache: {} tokens, {} caches",
                    tokens.len(),
                    caches.len()
                ),
            ));
        }
        self.forward_rows(tokens, &vec![1; tokens.len()], caches)
    }

    /// Several tokens of several sequences in one pass: the first `lens[0]` of `tokens` run at
    /// the end of `caches[0]`, the next `lens[1]` at the end of `caches[1]`, …. Every weight is
    /// read once for all rows. Returns f32 logits for every row, `[tokens.len(), vocab]`: row
    /// `r` equal, bit for bit, to what decoding that sequence's tokens one at a time gives
    /// ([`Qwen::forward`] token by token), so a speculative step that verifies drafted tokens
    /// chooses exactly what decoding would have.
    pub fn forward_rows(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<Tensor> {
        self.over_rows(tokens, lens, caches, |x, kc| {
            Ok(self
                .lm_head
                .forward(&x, kc)?
                .squeeze(0)?
                .to_dtype(DType::F32)?)
        })
    }

    /// [`Qwen::forward_rows`], and each row's final hidden state `[tokens.len(), hidden]`
    /// (after the final norm: what the multi-token-prediction head reads).
    pub fn forward_rows_hidden(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        self.over_rows(tokens, lens, caches, |x, kc| {
            let logits = self
                .lm_head
                .forward(&x, kc)?
                .squeeze(0)?
                .to_dtype(DType::F32)?;
            Ok((logits, x.squeeze(0)?))
        })
    }

    /// `head` over the normed hidden states `[1, rows, hidden]` of [`Qwen::forward_rows`]'
    /// rows, once the caches are checked: every row through the kernels it takes decoded
    /// alone (the context `head` is given), the head's too.
    fn over_rows<T: Send>(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
        head: impl FnOnce(Tensor, &KernelContext) -> Result<T> + Send,
    ) -> Result<T> {
        self.check_rows(tokens, lens, caches)?;
        let kc = self.kernels.with_rows_as_sequences(true);
        self.on_pool(|| head(self.rows_hidden(tokens, lens, caches, &kc)?, &kc))
    }

    /// Normed hidden states `[1, rows, hidden]` of [`Qwen::forward_rows`]' rows, with every
    /// row taken as a sequence (`kc`); extends the caches.
    fn rows_hidden(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
        kc: &KernelContext,
    ) -> Result<Tensor> {
        let mut images = vec![];
        let mut first = 0;
        for (cache, &len) in caches.iter().zip(lens) {
            if let Some(m) = cache.multimodal() {
                for (row, e) in m.embeddings(cache.len(), len)? {
                    images.push((first + row, e));
                }
            }
            first += len;
        }
        let x = self.layers_over(tokens, &images, kc, |mixer, h, i| match mixer {
            Mixer::Attention(a) => a.forward_rows(h, i, lens, caches, &self.rotary, kc),
            Mixer::Linear(d) => d.forward(h, i, lens, caches, kc),
        })?;
        for (cache, &len) in caches.iter_mut().zip(lens) {
            cache.advance(len);
        }
        let eps = self.cfg.rms_norm_eps as f32;
        Ok(candle_nn::ops::rms_norm(&x, &self.norm, eps)?)
    }

    /// Like [`Qwen::forward`], and every position's final hidden state `[len, hidden]`.
    pub fn forward_hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<(Tensor, Tensor)> {
        self.on_pool(|| {
            let hidden = self.hidden(tokens, cache)?;
            let last = hidden.narrow(1, tokens.len() - 1, 1)?;
            let logits = self
                .lm_head
                .forward(&last, &self.kernels)?
                .flatten_all()?
                .to_dtype(DType::F32)?;
            Ok((logits, hidden.squeeze(0)?))
        })
    }

    /// Gives [`Qwen::draft_rows`] an LM head over ids `0..n` alone: a draft model's pass then
    /// reads that share of the head (the largest matrix of a small model). Returns whether the
    /// head could be cut (on the CPU, one matrix, no bias; a GPU keeps the whole head, whose
    /// cut has not been measured there).
    pub fn set_draft_vocabulary(&mut self, n: usize) -> Result<bool> {
        if !self.device.is_cpu() {
            return Ok(false);
        }
        self.draft_head = self.lm_head.row_prefix(n)?;
        Ok(self.draft_head.is_some())
    }

    /// Rows of several sequences, as [`Qwen::forward_rows`] runs them, with the head of
    /// [`Qwen::set_draft_vocabulary`] on each sequence's last row: its logits of ids `0..n`
    /// (f32 `[lens.len(), n]`) and its final hidden state (f32 `[lens.len(), hidden]`), for
    /// [`Qwen::head_rows`]' other ids.
    pub fn draft_rows(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        let Some(head) = &self.draft_head else {
            return Err(EngineError::invalid(
                "draft_model",
                "no draft vocabulary was set on this model",
            ));
        };
        self.over_rows(tokens, lens, caches, |x, kc| {
            let x = x
                .squeeze(0)?
                .index_select(&last_rows(lens, &self.device)?, 0)?;
            let logits = head.forward(&x.unsqueeze(0)?, kc)?.squeeze(0)?;
            Ok((logits.to_dtype(DType::F32)?, x.to_dtype(DType::F32)?))
        })
    }

    /// The LM head's rows for `ids`, f32 `[ids.len(), hidden]`: a hidden state's logit of id
    /// `ids[i]` is its dot product with row `i`.
    pub fn head_rows(&self, ids: &[u32]) -> Result<Tensor> {
        let ids = Tensor::new(ids, &self.device)?;
        self.lm_head.weight_rows(&ids)?.ok_or_else(|| {
            EngineError::invalid("draft_model", "the LM head has several parts or a bias")
        })
    }

    /// Gives the model its vision tower; its output must be the model's width.
    pub fn set_vision(&mut self, vision: Vision) -> Result<()> {
        let out = vision.tower().config().out_hidden_size;
        if out != self.cfg.hidden_size {
            return Err(EngineError::invalid(
                "vision",
                format!(
                    "the vision tower writes {out} values a token, the model takes {}",
                    self.cfg.hidden_size
                ),
            ));
        }
        self.vision = Some(vision);
        Ok(())
    }

    /// The vision tower and its processor, where the model has them.
    pub fn vision(&self) -> Option<&Vision> {
        self.vision.as_ref()
    }

    /// Encodes `images` and gives `cache` their tokens' embeddings and the prompt's
    /// positions: `prompt` holds each image as a run of image tokens, in order. An image the
    /// cache's earlier images hold already (the same pixels, as a shared prefix brings them)
    /// is not encoded again.
    pub fn attach_images(
        &self,
        prompt: &[u32],
        images: &[ImageInput],
        cache: &mut KvCache,
    ) -> Result<()> {
        let Some(v) = &self.vision else {
            return Err(EngineError::invalid(
                "images",
                "this model has no vision tower: it takes text only",
            ));
        };
        let merge = v.tower().config().spatial_merge_size;
        let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid).collect();
        let positions = mrope_positions(prompt, v.image_token, &grids, merge)?;
        let held = cache.multimodal().cloned();
        let known = |key: u64, n: usize| {
            held.as_ref()?
                .images()
                .iter()
                .find(|i| i.key == key && i.embeds.dim(0).ok() == Some(n))
                .map(|i| i.embeds.clone())
        };
        let mut rows = Vec::with_capacity(images.len());
        let mut from = 0;
        for image in images {
            // Checked by the positions: each image is a run of its tokens, in order.
            let first = from
                + prompt[from..]
                    .iter()
                    .position(|&t| t == v.image_token)
                    .unwrap_or(0);
            let embeds = match known(image.key, image.tokens(merge)) {
                Some(e) => e,
                // Encoded ahead by the engine where it could, else here.
                None => self
                    .on_pool(|| v.encoder.encode(image))?
                    .to_dtype(self.act_dtype)?
                    .to_device(&self.device)?,
            };
            from = first + embeds.dim(0)?;
            rows.push(ImageRows {
                first,
                embeds,
                key: image.key,
            });
        }
        let m = Multimodal::new(positions.positions, positions.delta, rows);
        cache.set_multimodal(Some(Arc::new(m)));
        Ok(())
    }

    /// Whether the checkpoint carries a multi-token-prediction head.
    pub fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    /// An empty cache for the multi-token-prediction head's layer.
    pub fn new_mtp_cache(&self) -> KvCache {
        let c = &self.cfg;
        let (k, v) = self.cache_types;
        KvCache::new(1, c.max_position_embeddings)
            .with_position_bytes(self.position_bytes_per_layer())
            .with_types(k, v)
    }

    /// The multi-token-prediction head over rows of several sequences: row `r` reads the final
    /// hidden state `hidden[r]` of some position `p` and the token `tokens[r]` at `p + 1`;
    /// the first `lens[0]` rows extend `caches[0]`, the next `lens[1]` `caches[1]`, ….
    /// Returns, for each sequence's last row, the logits of the token at `p + 2`
    /// (f32 `[caches.len(), vocab]`) and the head's hidden state (which a further row reads
    /// in place of the model's, to draft one more token).
    pub fn mtp_rows(
        &self,
        hidden: &Tensor,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        let Some(mtp) = &self.mtp else {
            return Err(EngineError::no_mtp_head());
        };
        if hidden.dim(0)? != tokens.len() {
            return Err(EngineError::invalid(
                "tokens",
                format!("{} tokens for {} hidden rows", tokens.len(), hidden.dim(0)?),
            ));
        }
        self.check_rows(tokens, lens, caches)?;
        let eps = self.cfg.rms_norm_eps as f32;
        let kc = &self.kernels;
        self.on_pool(|| {
            let ids = Tensor::new(tokens, &self.device)?;
            let e = self.embed.lookup(&ids)?.to_dtype(self.act_dtype)?;
            let e = candle_nn::ops::rms_norm(&e, &mtp.norm_embedding, eps)?;
            let h =
                candle_nn::ops::rms_norm(&hidden.to_dtype(self.act_dtype)?, &mtp.norm_hidden, eps)?;
            let x = mtp
                .fc
                .forward(&Tensor::cat(&[e, h], 1)?.unsqueeze(0)?, kc)?;
            let layer = &mtp.layer;
            let Mixer::Attention(attention) = &layer.mixer else {
                unreachable!("the head's layer is loaded with attention")
            };
            let n = candle_nn::ops::rms_norm(&x, &layer.input_norm, eps)?;
            let x = (x + attention.forward_rows(&n, 0, lens, caches, &self.rotary, kc)?)?;
            let n = candle_nn::ops::rms_norm(&x, &layer.post_norm, eps)?;
            let x = (&x + layer.ffn.forward(&n, kc)?)?;
            for (cache, &len) in caches.iter_mut().zip(lens) {
                cache.advance(len);
            }
            let x = x
                .squeeze(0)?
                .index_select(&last_rows(lens, &self.device)?, 0)?;
            let x = candle_nn::ops::rms_norm(&x, &mtp.norm, eps)?;
            let logits = self
                .lm_head
                .forward(&x.unsqueeze(0)?, kc)?
                .squeeze(0)?
                .to_dtype(DType::F32)?;
            Ok((logits, x))
        })
    }

    /// Like [`Qwen::forward`], but returns logits for every position, `[len, vocab]`.
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.on_pool(|| {
            let hidden = self.hidden(tokens, cache)?;
            Ok(self
                .lm_head
                .forward(&hidden, &self.kernels)?
                .squeeze(0)?
                .to_dtype(DType::F32)?)
        })
    }

    /// On the CPU the matrix kernels run on rayon's pool. The whole step runs on one of its
    /// threads, and the pool's other threads spin for work until it ends, as llama.cpp's do:
    /// a sleeping thread takes tens of microseconds to wake, and a decoding step hands out
    /// about a hundred matrix products, each a few tens of microseconds long.
    fn on_pool<T: Send>(&self, step: impl FnOnce() -> T + Send) -> T {
        if !self.device.is_cpu() || rayon::current_thread_index().is_some() {
            return step();
        }
        let done = AtomicBool::new(false);
        rayon::scope(|s| {
            let owner = rayon::current_thread_index();
            for _ in 1..rayon::current_num_threads() {
                let done = &done;
                s.spawn(move |_| stay_awake(done, owner));
            }
            // Set on the way out, a panic included: the scope waits for the spinning jobs.
            let _release = Release(&done);
            step()
        })
    }

    /// [`Qwen::check_step`] for each sequence's rows, which must add up to `tokens`.
    fn check_rows(&self, tokens: &[u32], lens: &[usize], caches: &[&mut KvCache]) -> Result<()> {
        if lens.len() != caches.len() || lens.iter().sum::<usize>() != tokens.len() {
            return Err(EngineError::invalid(
                "tokens",
                format!(
                    "{} tokens in rows of {lens:?} for {} caches",
                    tokens.len(),
                    caches.len()
                ),
            ));
        }
        let mut first = 0;
        for (&len, cache) in lens.iter().zip(caches.iter()) {
            self.check_step(&tokens[first..first + len], cache)?;
            first += len;
        }
        Ok(())
    }

    /// Refuses what the model cannot run: no tokens, positions past the context, ids outside
    /// the vocabulary.
    fn check_step(&self, tokens: &[u32], cache: &KvCache) -> Result<()> {
        let len = tokens.len();
        if len == 0 {
            return Err(EngineError::invalid("tokens", "nothing to run: no tokens"));
        }
        let offset = cache.len();
        if offset + len > self.cfg.max_position_embeddings {
            return Err(EngineError::PromptTooLong {
                len: offset + len,
                max: self.cfg.max_position_embeddings,
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(EngineError::invalid(
                "tokens",
                format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.cfg.vocab_size
                ),
            ));
        }
        Ok(())
    }

    /// Embeds `tokens` (`[1, len, hidden]`) and runs every layer, with `mix(mixer, normed
    /// input, layer)` for the token mixer; before the final norm.
    fn layers_over(
        &self,
        tokens: &[u32],
        images: &[(usize, Tensor)],
        kc: &KernelContext,
        mut mix: impl FnMut(&Mixer, &Tensor, usize) -> candle_core::Result<Tensor>,
    ) -> Result<Tensor> {
        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.lookup(&ids)?.to_dtype(self.act_dtype)?;
        if !images.is_empty() {
            // An image's tokens take the tower's embeddings in place of the token's.
            let mut parts = Vec::with_capacity(2 * images.len() + 1);
            let mut at = 0;
            for (row, embeds) in images {
                parts.push(x.narrow(0, at, row - at)?);
                parts.push(embeds.to_dtype(self.act_dtype)?);
                at = row + embeds.dim(0)?;
            }
            parts.push(x.narrow(0, at, tokens.len() - at)?);
            x = Tensor::cat(&parts, 0)?;
        }
        let mut x = x.unsqueeze(0)?;
        let eps = self.cfg.rms_norm_eps as f32;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.input_norm, eps)?;
            x = (x + mix(&layer.mixer, &h, i)?)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.post_norm, eps)?;
            x = (x + layer.ffn.forward(&h, kc)?)?;
        }
        Ok(x)
    }

    fn hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.check_step(tokens, cache)?;
        let (len, offset) = (tokens.len(), cache.len());
        let mask = causal_mask(len, offset, self.act_dtype, &self.device)?;
        let images = match cache.multimodal() {
            Some(m) => m.embeddings(offset, len)?,
            None => vec![],
        };
        let kc = &self.kernels;
        let x = self.layers_over(tokens, &images, kc, |mixer, h, i| match mixer {
            Mixer::Attention(a) => a.forward(h, i, cache, &self.rotary, mask.as_ref(), kc),
            Mixer::Linear(d) => d.forward(h, i, &[len], &mut [&mut *cache], kc),
        })?;
        cache.advance(len);
        let eps = self.cfg.rms_norm_eps as f32;
        Ok(candle_nn::ops::rms_norm(&x, &self.norm, eps)?)
    }
}

/// Sets its flag when dropped.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs the pool's pending jobs, or spins, until `done`. A no-op on the step's own thread
/// (which may pick this job up itself while it waits for others).
fn stay_awake(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner {
        return;
    }
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::hint::spin_loop();
        }
    }
}

/// The index of each sequence's last row among rows laid out `lens[0]` first, then `lens[1]`, ….
fn last_rows(lens: &[usize], device: &Device) -> candle_core::Result<Tensor> {
    let last: Vec<u32> = lens
        .iter()
        .scan(0u32, |end, &len| {
            *end += len as u32;
            Some(*end - 1)
        })
        .collect();
    Tensor::new(last.as_slice(), device)
}

/// The token embedding table; a quantized one is looked up without dequantizing it whole.
#[derive(Debug, Clone)]
struct Embedding(Matrix);

impl Embedding {
    fn lookup(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        match &self.0 {
            Matrix::Dense(t) => t.index_select(ids, 0),
            Matrix::Quantized(q) => q.embedding(ids),
            Matrix::Tiles(_) => candle_core::bail!("an embedding table is never in tiles"),
        }
    }
}
