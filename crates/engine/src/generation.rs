//! Requests, events and the generation loop run by the engine's worker thread.

use crate::error::{EngineError, Result};
use crate::kv_cache::KvCache;
use crate::sampling::{Sampler, SamplingParams};
use crate::stop::{StopScan, StopStrings};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use candle_core::Tensor;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// What a model must provide to be served: a forward pass over a caller-owned cache.
pub trait LanguageModel: Send {
    /// Logits (f32, `[vocab]`) of the last of `tokens`, run at positions `cache.len()..`.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor>;
    fn new_cache(&self) -> KvCache;
    fn max_positions(&self) -> usize;
}

impl LanguageModel for crate::qwen::Qwen {
    fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        crate::qwen::Qwen::forward(self, tokens, cache)
    }
    fn new_cache(&self) -> KvCache {
        crate::qwen::Qwen::new_cache(self)
    }
    fn max_positions(&self) -> usize {
        self.config().max_position_embeddings
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation; `None` takes the model's (eos, `<|im_end|>`, …).
    pub stop_token_ids: Option<Vec<u32>>,
    /// Text that ends generation, matched across token boundaries and never emitted.
    pub stop_strings: Vec<String>,
    /// Keep this sequence's KV cache after the request and reuse its longest common prefix
    /// with the next request of the same session.
    pub session: Option<String>,
}

impl GenerateRequest {
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop_token_ids: None,
            stop_strings: Vec::new(),
            session: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop token (eos, `<|im_end|>`, …) was sampled; it is not part of the text.
    StopToken {
        id: u32,
    },
    /// A stop string matched; it is not part of the text.
    StopString {
        text: String,
    },
    MaxTokens,
    /// The caller dropped the stream.
    Cancelled,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens found in the session's cache and not run again.
    pub cached_prompt_tokens: usize,
    pub completion_tokens: usize,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Timings {
    /// Time the engine took to load the model.
    pub load_s: f64,
    pub prefill_s: f64,
    pub prefill_tok_s: f64,
    pub decode_s: f64,
    pub decode_tok_s: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub reason: FinishReason,
    pub usage: Usage,
    pub timings: Timings,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A sampled token id (stop tokens excluded).
    Token { id: u32 },
    /// New text: whole UTF-8 characters only.
    Text { text: String },
    /// Reasoning (`<think>…</think>`), from the chat layer of a model that thinks.
    Reasoning { text: String },
    /// The last event of a successful generation.
    Finished(Summary),
    /// Generation failed; no event follows.
    Error { message: String },
}

pub(crate) struct Job {
    pub request: GenerateRequest,
    pub events: UnboundedSender<Event>,
}

/// The worker's state: the model, and the caches of sessions kept between requests.
pub(crate) struct Worker {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: Tokenizer,
    pub default_stop: Vec<u32>,
    pub load_time: Duration,
    sessions: HashMap<String, Session>,
}

struct Session {
    /// The tokens whose keys and values `cache` holds, in order.
    tokens: Vec<u32>,
    cache: KvCache,
}

/// Prompts are prefilled in chunks so the attention scores of a long prompt stay small.
const PREFILL_CHUNK: usize = 512;

impl Worker {
    pub fn new(
        model: Box<dyn LanguageModel>,
        tokenizer: Tokenizer,
        default_stop: Vec<u32>,
        load_time: Duration,
    ) -> Self {
        Self {
            model,
            tokenizer,
            default_stop,
            load_time,
            sessions: HashMap::new(),
        }
    }

    pub fn run(&mut self, job: Job) {
        let events = job.events.clone();
        if let Err(e) = self.generate(job) {
            let _ = events.send(Event::Error {
                message: e.to_string(),
            });
        }
    }

    fn generate(&mut self, job: Job) -> Result<()> {
        let Job {
            request: req,
            events,
        } = job;
        let mut sampler = Sampler::new(req.sampling.clone())?;
        let mut stop_strings = StopStrings::new(req.stop_strings.clone())?;
        let stop = req
            .stop_token_ids
            .clone()
            .unwrap_or_else(|| self.default_stop.clone());

        let mut session = match &req.session {
            Some(id) => self.sessions.remove(id),
            None => None,
        }
        .unwrap_or_else(|| Session {
            tokens: Vec::new(),
            cache: self.model.new_cache(),
        });
        // Reuse the longest common prefix, but always run at least one prompt token: its
        // logits choose the first new token.
        let common = session
            .tokens
            .iter()
            .zip(&req.prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(req.prompt.len().saturating_sub(1));
        session.cache.truncate(common);
        session.tokens.truncate(common);

        let result = self.decode_loop(
            &req,
            &stop,
            &mut sampler,
            &mut stop_strings,
            &mut session,
            common,
            &events,
        );
        if let Some(id) = &req.session {
            if result.is_ok() {
                self.sessions.insert(id.clone(), session);
            }
        }
        result
    }

    fn decode_loop(
        &mut self,
        req: &GenerateRequest,
        stop: &[u32],
        sampler: &mut Sampler,
        stop_strings: &mut StopStrings,
        session: &mut Session,
        cached: usize,
        events: &UnboundedSender<Event>,
    ) -> Result<()> {
        let prefill_start = Instant::now();
        let mut logits = None;
        for chunk in req.prompt[cached..].chunks(PREFILL_CHUNK) {
            if events.is_closed() {
                return Ok(());
            }
            logits = Some(self.model.forward(chunk, &mut session.cache)?);
            session.tokens.extend_from_slice(chunk);
        }
        let Some(mut logits) = logits else {
            return Err(EngineError::invalid("prompt", "empty prompt"));
        };
        let prefill_s = prefill_start.elapsed().as_secs_f64();

        let decode_start = Instant::now();
        let mut history = req.prompt.clone();
        let mut decoder = StreamDecoder::new();
        let mut generated = 0usize;
        let mut forwards = 0usize;
        let reason = loop {
            let next = self.pick(&logits, sampler, &history)?;
            if stop.contains(&next) {
                break FinishReason::StopToken { id: next };
            }
            generated += 1;
            history.push(next);
            let (text, matched) = match stop_strings.push(&decoder.push(&self.tokenizer, next)?) {
                StopScan::Emit(text) => (text, None),
                StopScan::Stopped { emit, matched } => (emit, Some(matched)),
            };
            let sent = events.send(Event::Token { id: next }).is_ok()
                && (text.is_empty() || events.send(Event::Text { text }).is_ok());
            if !sent {
                break FinishReason::Cancelled;
            }
            if let Some(text) = matched {
                break FinishReason::StopString { text };
            }
            if generated >= req.max_tokens {
                break FinishReason::MaxTokens;
            }
            if session.cache.len() + 1 > self.model.max_positions() {
                break FinishReason::MaxTokens;
            }
            logits = self.model.forward(&[next], &mut session.cache)?;
            session.tokens.push(next);
            forwards += 1;
        };
        let rest = match &reason {
            FinishReason::StopString { .. } => String::new(),
            _ => {
                let tail = decoder.flush(&self.tokenizer)?;
                match stop_strings.push(&tail) {
                    StopScan::Emit(t) => t + &stop_strings.flush(),
                    StopScan::Stopped { emit, .. } => emit,
                }
            }
        };
        if !rest.is_empty() {
            let _ = events.send(Event::Text { text: rest });
        }
        let decode_s = decode_start.elapsed().as_secs_f64();
        let prefilled = req.prompt.len() - cached;
        let summary = Summary {
            reason,
            usage: Usage {
                prompt_tokens: req.prompt.len(),
                cached_prompt_tokens: cached,
                completion_tokens: generated,
            },
            timings: Timings {
                load_s: self.load_time.as_secs_f64(),
                prefill_s,
                prefill_tok_s: rate(prefilled, prefill_s),
                decode_s,
                decode_tok_s: rate(forwards, decode_s),
            },
        };
        let _ = events.send(Event::Finished(summary));
        Ok(())
    }

    fn pick(&self, logits: &Tensor, sampler: &mut Sampler, history: &[u32]) -> Result<u32> {
        let p = sampler.params();
        if p.is_greedy() && p.repetition_penalty == 1.0 {
            // On a GPU only the chosen id crosses to the host.
            return Ok(logits.argmax(0)?.to_scalar::<u32>()?);
        }
        let mut host = logits.to_vec1::<f32>()?;
        Ok(sampler.sample(&mut host, history))
    }

    /// Forgets a session's cache. Returns whether it existed.
    pub fn drop_session(&mut self, id: &str) -> bool {
        self.sessions.remove(id).is_some()
    }
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}
