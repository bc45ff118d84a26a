//! What a generation request is and what it streams back: the request, its events, why it
//! finished, and the model interface the scheduler drives.

pub mod stream;

use crate::cache::kv::KvCache;
use crate::constraint::Constraint;
use crate::error::Result;
use crate::sampling::SamplingParams;
use crate::vision::ImageInput;
use candle_core::Tensor;

/// What a model must provide to be served: a forward pass over a caller-owned cache.
pub trait LanguageModel: Send {
    /// Logits (f32, `[vocab]`) of the last of `tokens`, run at positions `cache.len()..`.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor>;

    /// One decoding step of several sequences, `tokens[i]` at the end of `caches[i]`: logits
    /// `[batch, vocab]`, row `i` equal to `forward(&[tokens[i]], caches[i])`. The default
    /// runs them one by one; a real model reads its weights once for the whole batch.
    fn forward_batch(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        let rows = tokens
            .iter()
            .zip(caches.iter_mut())
            .map(|(&t, cache)| self.forward(&[t], cache))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tensor::stack(&rows, 0)?)
    }

    /// Several tokens of several sequences, `lens[i]` of them at the end of `caches[i]` (in
    /// order): logits `[tokens.len(), vocab]`, each row what decoding that sequence's tokens
    /// one at a time gives. The scheduler verifies drafted tokens with it. The default decodes
    /// them one at a time; a real model reads its weights once for all rows.
    fn forward_rows(
        &self,
        tokens: &[u32],
        lens: &[usize],
        caches: &mut [&mut KvCache],
    ) -> Result<Tensor> {
        let mut rows = Vec::with_capacity(tokens.len());
        let mut first = 0;
        for (&len, cache) in lens.iter().zip(caches.iter_mut()) {
            for &t in tokens.get(first..first + len).unwrap_or_default() {
                rows.push(self.forward(&[t], cache)?);
            }
            first += len;
        }
        if rows.len() != tokens.len() {
            return Err(crate::error::EngineError::invalid(
                "tokens",
                format!("{} tokens in rows of {lens:?}", tokens.len()),
            ));
        }
        Ok(Tensor::stack(&rows, 0)?)
    }

    /// An empty cache for one sequence.
    fn new_cache(&self) -> KvCache;
    /// The token that stands for one of an image's tokens in a prompt, where the model sees
    /// images.
    fn image_token(&self) -> Option<u32> {
        None
    }
    /// The vision tower as the engine may run it ahead of the scheduler (its encoded images
    /// kept for [`Self::attach_images`]), where the model sees images.
    fn image_encoder(&self) -> Option<crate::vision::ImageEncoder> {
        None
    }
    /// Encodes `images` and gives `cache` what they add to `prompt` (see
    /// `Qwen::attach_images`); a model without vision refuses them.
    fn attach_images(
        &self,
        _prompt: &[u32],
        _images: &[ImageInput],
        _cache: &mut KvCache,
    ) -> Result<()> {
        Err(crate::error::EngineError::invalid(
            "images",
            "this model has no vision tower: it takes text only",
        ))
    }
    /// The context length: how many positions a sequence may hold.
    fn max_positions(&self) -> usize;

    /// Whether the model has a multi-token-prediction head to draft with
    /// ([`crate::speculative::mtp`]); the methods below work only where it has.
    fn has_mtp(&self) -> bool {
        false
    }

    /// [`Self::forward`], and every position's final hidden state `[tokens.len(), hidden]`.
    fn forward_hidden(&self, _tokens: &[u32], _cache: &mut KvCache) -> Result<(Tensor, Tensor)> {
        Err(crate::error::EngineError::no_mtp_head())
    }

    /// [`Self::forward_rows`], and every row's final hidden state `[tokens.len(), hidden]`.
    fn forward_rows_hidden(
        &self,
        _tokens: &[u32],
        _lens: &[usize],
        _caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Err(crate::error::EngineError::no_mtp_head())
    }

    /// An empty cache for the multi-token-prediction head.
    fn new_mtp_cache(&self) -> KvCache {
        KvCache::new(1, self.max_positions())
    }

    /// The multi-token-prediction head over rows of several sequences (see
    /// `Qwen::mtp_rows`): each sequence's last row's logits and hidden state.
    fn mtp_rows(
        &self,
        _hidden: &Tensor,
        _tokens: &[u32],
        _lens: &[usize],
        _caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Err(crate::error::EngineError::no_mtp_head())
    }

    /// Cuts the head of [`Self::draft_rows`] to ids `0..n`; whether the model could.
    fn set_draft_vocabulary(&mut self, _n: usize) -> Result<bool> {
        Ok(false)
    }

    /// Rows as [`Self::forward_rows`] runs them; for each sequence's last row, the logits of
    /// ids `0..n` ([`Self::set_draft_vocabulary`]) and the final hidden state.
    fn draft_rows(
        &self,
        _tokens: &[u32],
        _lens: &[usize],
        _caches: &mut [&mut KvCache],
    ) -> Result<(Tensor, Tensor)> {
        Err(crate::error::EngineError::invalid(
            "draft_model",
            "this model has no draft vocabulary",
        ))
    }

    /// The LM head's rows for `ids`, f32 `[ids.len(), hidden]`.
    fn head_rows(&self, _ids: &[u32]) -> Result<Tensor> {
        Err(crate::error::EngineError::invalid(
            "draft_model",
            "this model has no draft vocabulary",
        ))
    }

    /// Where the model's caches live.
    fn device(&self) -> candle_core::Device {
        candle_core::Device::Cpu
    }
}

/// One generation: a tokenized prompt and how to continue it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How to pick each next token.
    pub sampling: SamplingParams,
    /// Token ids that end generation; `None` takes the model's (eos, `<|im_end|>`, …).
    pub stop_token_ids: Option<Vec<u32>>,
    /// Text that ends generation, matched across token boundaries and never emitted.
    pub stop_strings: Vec<String>,
    /// Keep this sequence's KV cache after the request and reuse its longest common prefix
    /// with the next request of the same session.
    pub session: Option<String>,
    /// The language the output must stay in (JSON schema, regex, Lark grammar): tokens that
    /// leave it are never sampled, and the sequence ends only where the text is complete —
    /// then with [`FinishReason::StopToken`] (the model's end-of-sequence id) at the latest
    /// when the grammar admits nothing more. A grammar that cannot be compiled, or admits no
    /// text, is refused by [`crate::Engine::generate`] (invalid `constraint`).
    pub constraint: Option<Constraint>,
    /// The prompt's images, in order: each stands in the prompt as a run of the model's
    /// image token as long as [`ImageInput::tokens`] says (a model without vision refuses
    /// them).
    pub images: Vec<ImageInput>,
}

impl GenerateRequest {
    /// A request with default sampling and no stops, session or constraint.
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop_token_ids: None,
            stop_strings: Vec::new(),
            session: None,
            constraint: None,
            images: Vec::new(),
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token (eos, `<|im_end|>`, …) was sampled; it is not part of the text.
    StopToken {
        /// The token sampled.
        id: u32,
    },
    /// A stop string matched; it is not part of the text.
    StopString {
        /// The stop string that matched.
        text: String,
    },
    /// `max_tokens` were generated.
    MaxTokens,
    /// The sequence reached the model's context length (`max_position_embeddings`).
    ContextFull,
    /// The caller dropped the stream.
    Cancelled,
    /// The caller ended the answer ([`crate::EventStream::end`]): what it needed had come
    /// (a tool call that only repeats an earlier one, say).
    Ended,
}

/// Token counts of a finished generation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens found in the session's cache and not run again.
    pub cached_prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Tokens drafted for speculative verification ([`crate::speculative`]).
    pub draft_tokens: usize,
    /// Drafted tokens that were what decoding chose (each saved one pass).
    pub accepted_draft_tokens: usize,
}

/// Wall-clock times (seconds) and rates (tokens per second) of a finished generation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Timings {
    /// Time the engine took to load the model.
    pub load_s: f64,
    /// From the request's arrival to its first generated token (queueing included).
    pub first_token_s: f64,
    /// Time spent running the prompt.
    pub prefill_s: f64,
    /// Prompt tokens run per second (cached ones excluded).
    pub prefill_tok_s: f64,
    /// From the first generated token to the end.
    pub decode_s: f64,
    /// Decoding steps per second.
    pub decode_tok_s: f64,
}

/// What the last event of a successful generation reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// Why it ended.
    pub reason: FinishReason,
    /// Token counts.
    pub usage: Usage,
    /// Times and rates.
    pub timings: Timings,
}

/// What a generation streams back, in order.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A sampled token id (stop tokens excluded).
    Token {
        /// The token id.
        id: u32,
    },
    /// New text: whole UTF-8 characters only.
    Text {
        /// The text.
        text: String,
    },
    /// Reasoning (`<think>…</think>`), from the chat layer of a model that thinks.
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// The last event of a successful generation.
    Finished(Summary),
    /// Generation failed; no event follows.
    Error {
        /// What went wrong.
        message: String,
    },
}
