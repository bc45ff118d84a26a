//! The engine's worker: a step scheduler with continuous batching.
//!
//! Each step admits waiting requests (up to `max_seqs` running), runs a bounded amount of
//! prompt prefill (`prefill_chunk` tokens: a long prompt comes in over several steps while
//! the others keep decoding), then one decoding step for every running sequence together —
//! their new tokens go through every weight once, each attends to its own cache. A sequence
//! leaves the batch when it finishes or its stream is dropped; a waiting one joins at the next
//! step. Caches live in a byte-budgeted pool ([`kv_pool`]): sessions keep theirs between
//! requests, finished requests leave theirs for later prompts with the same prefix, and idle
//! ones are evicted least recently used. When a running sequence must grow and no idle cache
//! is left to evict, the newest running sequence is preempted: its cache is dropped and it
//! waits, ahead of new requests, to run its tokens again and go on (vLLM's recompute).
//!
//! Batching does not change results: prompt chunks start at the same offsets whatever else
//! runs, and a decoding row takes the kernel it would take alone
//! ([`crate::model::linear::rows_as_sequences`]).

mod config;
pub mod kv_pool;
mod sequence;

pub use config::{SchedulerConfig, SchedulerOptions};
pub(crate) use sequence::Job;

use crate::cache::cache_type::CacheType;
use crate::cache::kv::KvCache;
use crate::cache::multimodal::prefix_keys;
use crate::error::{EngineError, Result};
use crate::generation::{Event, FinishReason, GenerateRequest, LanguageModel};
use crate::speculative::draft_model::{DraftJob, DraftModel};
use crate::speculative::mtp::{self, MtpJob, MtpState};
use crate::speculative::{budget, Speculation};
use crate::text::tokenizer::Tokenizer;
use kv_pool::{common_prefix, Drafter, KvPool, Seed, MIN_SHARED_PREFIX};
use sequence::Sequence;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tokens of answer a new sequence's cache makes room for at first (more doubles it).
const EXPECTED_ANSWER: usize = 1024;

/// Positions a new sequence for `request` is expected to reach: its prompt and an answer of
/// up to [`EXPECTED_ANSWER`] tokens.
fn expected_len(request: &GenerateRequest) -> usize {
    request.prompt.len() + request.max_tokens.min(EXPECTED_ANSWER)
}

enum Source {
    Pool(usize),
    Running(usize),
}

pub(crate) enum Command {
    /// Boxed: a request (with its grammar) is far larger than the other commands.
    Generate(Box<Job>),
    /// Forget the session's cache.
    DropSession(String),
    /// The session is over: its cache stays, unnamed, for any prompt with its prefix, until
    /// evicted.
    ReleaseSession(String),
    /// Report the scheduler's state.
    Stats(std::sync::mpsc::Sender<SchedulerStats>),
    /// A copy of the cache the session holds (or last released): its tokens and layers.
    ExportSession(
        String,
        std::sync::mpsc::Sender<Result<Option<SessionCache>>>,
    ),
    /// Keep these keys and values as the session's cache; the positions restored.
    ImportSession(SessionCache, std::sync::mpsc::Sender<Result<usize>>),
}

/// A session's cache outside the scheduler.
pub(crate) struct SessionCache {
    pub session: String,
    pub tokens: Vec<u32>,
    pub layers: Vec<(candle_core::Tensor, candle_core::Tensor)>,
    /// The types keys and values are stored in.
    pub types: (CacheType, CacheType),
    /// A hybrid model's recurrent state after the tokens (empty for others).
    pub state: Vec<crate::cache::recurrent::LayerState>,
}

/// What the scheduler holds at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SchedulerStats {
    /// Requests not running now: queued, or preempted to wait for room.
    pub waiting: usize,
    /// Sequences in the decoding batch.
    pub running: usize,
    /// Idle caches kept: sessions, and finished requests kept for their prefix.
    pub idle_caches: usize,
    /// Bytes all caches hold now, and the most they have held.
    pub kv_bytes: usize,
    /// The most bytes the caches have held at once.
    pub peak_kv_bytes: usize,
    /// Bytes the caches may hold ([`SchedulerConfig::kv_budget_bytes`]).
    pub kv_budget_bytes: usize,
    /// Idle caches evicted to stay under the budget, since the start.
    pub evictions: usize,
    /// Running sequences whose caches were dropped for others to grow, since the start.
    pub preemptions: usize,
}

pub(crate) struct Scheduler {
    model: Box<dyn LanguageModel>,
    /// Where the model came from, for errors.
    origin: String,
    tokenizer: Tokenizer,
    /// `<|im_start|>`, after which a hybrid model's recurrent state is checkpointed.
    message_start: Option<u32>,
    default_stop: Vec<u32>,
    load_time: Duration,
    config: SchedulerConfig,
    waiting: VecDeque<Job>,
    running: Vec<Sequence>,
    /// Sequences preempted, oldest first: admitted again before any waiting request.
    preempted: VecDeque<Sequence>,
    pool: KvPool,
    /// Requests waiting or running, shared with the engine handle (for `max_waiting`).
    in_flight: Arc<AtomicUsize>,
    peak_kv_bytes: usize,
    evictions: usize,
    preemptions: usize,
    /// Where decoding sequences' drafts come from ([`crate::speculative`]).
    drafts: Drafts,
    /// Decoding steps' time against their rows, for how many drafted tokens pay.
    step_cost: budget::StepCost,
    /// The draft model's passes' time.
    draft_cost: budget::DraftCost,
}

/// Where drafts come from.
enum Drafts {
    None,
    Ngram,
    /// The draft model; with `true`, where prompt lookup finds no draft.
    Model(DraftModel, bool),
    /// The model's multi-token-prediction head.
    Mtp,
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        model: Box<dyn LanguageModel>,
        draft: Option<DraftModel>,
        origin: String,
        tokenizer: Tokenizer,
        default_stop: Vec<u32>,
        load_time: Duration,
        config: SchedulerConfig,
        in_flight: Arc<AtomicUsize>,
    ) -> Self {
        let message_start = tokenizer.token_id("<|im_start|>");
        let pool = KvPool::new(model.image_token());
        // Auto speculates on the CPU, whose kernels compute a verified row as decoding
        // computes it, bit for bit; GPU matrix products may sum several rows in another order
        // than one. (The engine refuses `Draft` without a draft model.)
        let drafts = match (config.speculation, draft) {
            (Speculation::Off, _) => Drafts::None,
            (Speculation::Auto, _) if !model.device().is_cpu() => Drafts::None,
            (Speculation::Ngram, _) => Drafts::Ngram,
            (Speculation::Draft, Some(d)) => Drafts::Model(d, false),
            (Speculation::Auto, Some(d)) => Drafts::Model(d, true),
            (Speculation::Auto | Speculation::Draft, None) => Drafts::Ngram,
            // The engine refuses `Mtp` for a model without the head.
            (Speculation::Mtp, _) => Drafts::Mtp,
        };
        Self {
            drafts,
            step_cost: budget::StepCost::default(),
            draft_cost: budget::DraftCost::default(),
            model,
            origin,
            tokenizer,
            message_start,
            default_stop,
            load_time,
            config,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preempted: VecDeque::new(),
            pool,
            in_flight,
            peak_kv_bytes: 0,
            evictions: 0,
            preemptions: 0,
        }
    }

    /// Serves commands until the engine is dropped and every request has ended.
    pub fn run(mut self, commands: Receiver<Command>) {
        let mut open = true;
        loop {
            if self.running.is_empty() && self.waiting.is_empty() && self.preempted.is_empty() {
                if !open {
                    return;
                }
                match commands.recv() {
                    Ok(c) => self.command(c),
                    Err(_) => return,
                }
            }
            while open {
                match commands.try_recv() {
                    Ok(c) => self.command(c),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.step();
        }
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Generate(job) => self.waiting.push_back(*job),
            Command::DropSession(id) => {
                self.pool.remove(&id);
                for s in self.running.iter_mut().chain(&mut self.preempted) {
                    if s.session() == Some(id.as_str()) {
                        s.keep = false;
                    }
                }
            }
            Command::Stats(reply) => {
                let _ = reply.send(SchedulerStats {
                    waiting: self.waiting.len() + self.preempted.len(),
                    running: self.running.len(),
                    idle_caches: self.pool.len(),
                    kv_bytes: self.kv_bytes(),
                    peak_kv_bytes: self.peak_kv_bytes.max(self.kv_bytes()),
                    kv_budget_bytes: self.config.kv_budget_bytes,
                    evictions: self.evictions,
                    preemptions: self.preemptions,
                });
            }
            Command::ExportSession(id, reply) => {
                let _ = reply.send(self.export(&id));
            }
            Command::ImportSession(cache, reply) => {
                let _ = reply.send(self.import(cache));
            }
            Command::ReleaseSession(id) => {
                self.pool.release(&id);
                for s in self.running.iter_mut().chain(&mut self.preempted) {
                    if s.session() == Some(id.as_str()) {
                        s.request.session = None;
                    }
                }
            }
        }
    }

    fn export(&self, id: &str) -> Result<Option<SessionCache>> {
        let Some(e) = self.pool.session_cache(id) else {
            return Ok(None);
        };
        if e.cache.position_bytes() == 0 || e.cache.len() != e.tokens.len() {
            return Ok(None);
        }
        Ok(Some(SessionCache {
            session: id.to_string(),
            tokens: e.tokens.clone(),
            layers: e.cache.layers_copy()?,
            types: e.cache.types().unwrap_or((CacheType::F32, CacheType::F32)),
            state: e
                .cache
                .recurrent()
                .map(|r| r.layers().to_vec())
                .unwrap_or_default(),
        }))
    }

    /// Makes room for the cache under the budget (evicting idle ones) and keeps it for its
    /// session, replacing what the session held.
    fn import(&mut self, c: SessionCache) -> Result<usize> {
        if self
            .running
            .iter()
            .chain(&self.preempted)
            .any(|s| s.session() == Some(c.session.as_str()))
        {
            return Err(EngineError::invalid(
                "session cache",
                format!("session `{}` is generating now", c.session),
            ));
        }
        let mut cache = self.model.new_cache();
        if let Some((k, v)) = cache.types().filter(|&t| t != c.types) {
            return Err(EngineError::invalid(
                "session cache",
                format!(
                    "keys and values in {}/{}, where this model's cache keeps {}/{}",
                    c.types.0.name(),
                    c.types.1.name(),
                    k.name(),
                    v.name()
                ),
            ));
        }
        let need = c.tokens.len() * cache.position_bytes() + cache.bytes();
        self.pool.remove(&c.session);
        if !self.make_room(need, None) {
            return Err(EngineError::KvBudget {
                message: format!(
                    "restoring {} cached tokens needs {:.1} MiB; the budget (kv_cache_mb) is {:.0} MiB",
                    c.tokens.len(),
                    need as f64 / MIB,
                    self.config.kv_budget_bytes as f64 / MIB
                ),
            });
        }
        let device = self.model.device();
        let layers = c
            .layers
            .into_iter()
            .map(|(k, v)| Ok((k.to_device(&device)?, v.to_device(&device)?)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        cache
            .restore(layers)
            .map_err(|e| EngineError::invalid("session cache", e.to_string()))?;
        match (cache.recurrent_mut(), c.state.is_empty()) {
            (Some(r), _) => r
                .restore(c.state)
                .map_err(|e| EngineError::invalid("session cache", e.to_string()))?,
            (None, true) => {}
            (None, false) => {
                return Err(EngineError::invalid(
                    "session cache",
                    "it holds a recurrent state, and this model has no linear-attention layers",
                ))
            }
        }
        if cache.len() != c.tokens.len() {
            return Err(EngineError::invalid(
                "session cache",
                format!("{} positions for {} tokens", cache.len(), c.tokens.len()),
            ));
        }
        let n = c.tokens.len();
        self.pool
            .put(Some(c.session), c.tokens, cache, Drafter::default());
        Ok(n)
    }

    /// One scheduling step: cancellations, admissions, prefill, one batched decode.
    pub fn step(&mut self) {
        let cancelled: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].cancelled())
            .collect();
        for i in cancelled.into_iter().rev() {
            self.retire(i, FinishReason::Cancelled);
        }
        self.admit();
        self.prefill();
        self.decode();
        self.peak_kv_bytes = self.peak_kv_bytes.max(self.kv_bytes());
    }

    /// Bytes every cache holds: idle and running, each shared segment once.
    fn kv_bytes(&self) -> usize {
        let running: usize = self
            .running
            .iter()
            .map(|s| {
                s.cache.bytes()
                    + s.draft_cache.as_ref().map_or(0, |d| d.bytes())
                    + s.mtp.as_ref().map_or(0, |m| m.bytes())
            })
            .sum();
        let mut seen = std::collections::HashSet::new();
        let shared: usize = self
            .running
            .iter()
            .map(|s| &s.cache)
            .chain(self.pool.caches())
            .flat_map(KvCache::shared)
            .filter(|s| seen.insert(Arc::as_ptr(s)))
            .map(|s| s.bytes())
            .sum();
        self.pool.bytes() + running + shared
    }

    /// Evicts idle caches (never `keep`'s session) until `extra` more bytes fit the budget.
    fn make_room(&mut self, extra: usize, keep: Option<&str>) -> bool {
        while self.kv_bytes() + extra > self.config.kv_budget_bytes {
            let Some(e) = self.pool.evict_one(keep) else {
                return false;
            };
            self.evictions += 1;
            tracing::info!(
                "evicted the KV cache of {} ({} tokens, {:.1} MiB) to stay under the {:.0} MiB budget",
                e.session
                    .as_deref()
                    .map_or("a finished request".to_string(), |s| format!("session `{s}`")),
                e.tokens.len(),
                e.cache.bytes() as f64 / MIB,
                self.config.kv_budget_bytes as f64 / MIB,
            );
        }
        true
    }

    fn admit(&mut self) {
        // Preempted sequences first, oldest first; new requests wait until they are all back.
        while let Some(s) = self.preempted.front() {
            if s.cancelled() {
                self.preempted.pop_front();
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            if self.running.len() >= self.config.max_seqs {
                return;
            }
            // Its cache is empty: everything it must run again is unprefilled.
            let need = s.cache.bytes_for(s.unprefilled().len());
            if !self.make_room(need, None) {
                return;
            }
            let s = self.preempted.pop_front().expect("front checked");
            self.running.push(s);
        }
        let mut i = 0;
        while i < self.waiting.len() && self.running.len() < self.config.max_seqs {
            if self.waiting[i].events.is_closed() {
                self.waiting.remove(i);
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            // One request at a time per session: a later one waits for the earlier's cache.
            let session = self.waiting[i].request.session.clone();
            if session.as_deref().is_some_and(|id| {
                self.running
                    .iter()
                    .chain(&self.preempted)
                    .any(|s| s.session() == Some(id))
            }) {
                i += 1;
                continue;
            }
            let need = self.admission_bytes(&self.waiting[i].request, session.as_deref());
            if !self.make_room(need, session.as_deref()) {
                if !self.running.is_empty() {
                    break; // waits for a running sequence to free its cache
                }
                let job = self.waiting.remove(i).expect("index checked");
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                let _ = job.events.send(Event::Error {
                    message: EngineError::KvBudget {
                        message: format!(
                            "a prompt of {} tokens needs {:.1} MiB of KV cache; the budget \
                             (kv_cache_mb) is {:.0} MiB",
                            job.request.prompt.len(),
                            need as f64 / MIB,
                            self.config.kv_budget_bytes as f64 / MIB
                        ),
                    }
                    .to_string(),
                });
                continue;
            }
            let job = self.waiting.remove(i).expect("index checked");
            let stop = job
                .request
                .stop_token_ids
                .clone()
                .unwrap_or_else(|| self.default_stop.clone());
            let prompt = &job.request.prompt;
            // Image tokens are all one id: a prefix is matched through an image by its pixels.
            let images: Vec<u64> = job.request.images.iter().map(|i| i.key).collect();
            let keys = prefix_keys(prompt, self.model.image_token(), &images);
            let usable = keys.len().min(prompt.len().saturating_sub(1));
            let mut seed = self.seed(prompt, &keys, usable, session.as_deref());
            if job.request.images.is_empty() {
                seed.cache.set_multimodal(None);
            } else if let Err(e) =
                self.model
                    .attach_images(&job.request.prompt, &job.request.images, &mut seed.cache)
            {
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                let _ = job.events.send(Event::Error {
                    message: e.to_string(),
                });
                continue;
            }
            seed.cache.expect(expected_len(&job.request));
            // A hybrid model's state is kept where each message starts: a later prompt that
            // shares the system prompt or earlier turns resumes there.
            if let Some(start) = self.message_start {
                let from = seed.cache.len();
                let marks: Vec<usize> = job
                    .request
                    .prompt
                    .iter()
                    .enumerate()
                    .filter(|&(p, &t)| t == start && p + 1 > from)
                    .map(|(p, _)| p + 1)
                    .collect();
                seed.cache.mark_checkpoints(&marks);
            }
            match Sequence::new(job, stop, seed.cache, seed.tokens) {
                Some(mut s) => {
                    s.speculate = !matches!(self.drafts, Drafts::None);
                    s.draft_cache = seed.drafter.model;
                    s.mtp = seed.drafter.mtp;
                    self.running.push(s)
                }
                None => {
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Bytes a new sequence for `prompt` adds when its prompt is in its cache.
    fn admission_bytes(&self, request: &GenerateRequest, session: Option<&str>) -> usize {
        let prompt = request.prompt.len();
        let own = session.and_then(|id| {
            (0..self.pool.len()).find(|&i| self.pool.entry(i).session.as_deref() == Some(id))
        });
        match own.map(|i| &self.pool.entry(i).cache) {
            Some(own) => own.bytes_for(prompt).saturating_sub(own.bytes()),
            None => {
                let mut cache = self.model.new_cache();
                cache.expect(expected_len(request));
                cache.bytes_for(prompt)
            }
        }
    }

    /// The cache a new sequence starts from: its session's, else the longest prefix another
    /// cache holds (shared, or taken whole when it is a finished request's and all of it is
    /// a prefix of the prompt), else an empty one. At least one prompt token is always left
    /// to run: its logits choose the first new token.
    fn seed(&mut self, prompt: &[u32], keys: &[u32], usable: usize, session: Option<&str>) -> Seed {
        if let Some(mut e) = session.and_then(|id| self.pool.take_session(id)) {
            let common = common_prefix(&e.keys, keys).min(usable);
            let kept = e.cache.truncate(common);
            e.tokens.truncate(kept);
            if kept < common {
                tracing::info!(
                    "session cache: the prompt shares {common} tokens, but the recurrent state resumes only after {kept}; recomputing {} tokens",
                    prompt.len() - kept
                );
            }
            e.drafter.truncate(kept);
            return Seed {
                cache: e.cache,
                tokens: e.tokens,
                drafter: e.drafter,
            };
        }
        if let Some(seed) = self.shared_prefix(prompt, keys, usable) {
            return seed;
        }
        Seed {
            cache: self.model.new_cache(),
            tokens: Vec::new(),
            drafter: Drafter::default(),
        }
    }

    /// A cache seeded from the idle or running cache that shares the longest prefix with
    /// `prompt`, if one shares at least [`MIN_SHARED_PREFIX`] tokens: the rows are held
    /// where they are ([`KvCache::share_prefix`]; a running cache's prefix is frozen first). Only caches that
    /// declare their size take part (test models without real caches do not).
    fn shared_prefix(&mut self, prompt: &[u32], keys: &[u32], usable: usize) -> Option<Seed> {
        let idle = self
            .pool
            .longest_prefix(keys)
            .map(|(i, n)| (n.min(usable), i));
        let running = self
            .running
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let held = self.pool.keys(&s.tokens, &s.cache);
                (common_prefix(&held, keys).min(usable), j)
            })
            .max_by_key(|&(n, _)| n);
        let (len, source) = match (idle, running) {
            (Some((n, i)), Some((m, _))) if n >= m => (n, Source::Pool(i)),
            (_, Some((m, j))) => (m, Source::Running(j)),
            (Some((n, i)), None) => (n, Source::Pool(i)),
            (None, None) => return None,
        };
        // A recurrent state resumes only at its checkpoints.
        let shared = len;
        let len = match source {
            Source::Pool(i) => self.pool.entry(i).cache.resumable(len),
            Source::Running(j) => self.running[j].cache.resumable(len),
        };
        if len < shared && shared >= MIN_SHARED_PREFIX {
            tracing::info!(
                "prefix cache: the prompt shares {shared} tokens, but the recurrent state resumes only after {len}; recomputing {} tokens",
                prompt.len() - len
            );
        }
        if len < MIN_SHARED_PREFIX {
            return None;
        }
        if let Source::Pool(i) = source {
            let e = self.pool.entry(i);
            if e.cache.position_bytes() == 0 {
                return None;
            }
            // A finished request's cache that is all prefix: taken whole, nothing copied.
            if e.session.is_none() && len == e.tokens.len() {
                let mut e = self.pool.take(i);
                e.cache.truncate(len);
                e.tokens.truncate(len);
                e.drafter.truncate(len);
                return Some(Seed {
                    cache: e.cache,
                    tokens: e.tokens,
                    drafter: e.drafter,
                });
            }
            self.pool.touch(i);
        }
        // A running sequence's prefix becomes a segment both hold; only its rows after the
        // prefix are copied (into its new buffers).
        if let Source::Running(j) = source {
            if let Err(e) = self.running[j].cache.freeze_to(len) {
                tracing::warn!("cannot share a running sequence's prefix: {e}");
            }
        }
        let src: &KvCache = match source {
            Source::Pool(i) => &self.pool.entry(i).cache,
            Source::Running(j) => &self.running[j].cache,
        };
        if src.position_bytes() == 0 {
            return None;
        }
        // The draft source's state of the prefix too, where the source has one.
        let (model_src, mtp_src) = match source {
            Source::Pool(i) => {
                let d = &self.pool.entry(i).drafter;
                (d.model.as_ref(), d.mtp.as_ref())
            }
            Source::Running(j) => {
                let s = &self.running[j];
                (s.draft_cache.as_ref(), s.mtp.as_ref())
            }
        };
        let drafter = Drafter {
            model: match (&self.drafts, model_src) {
                (Drafts::Model(model, _), Some(d)) => model.copy_prefix(d, len).ok(),
                _ => None,
            },
            mtp: mtp_src
                .and_then(|m| m.copy_prefix(len, self.model.new_mtp_cache()).ok())
                .flatten(),
        };
        let mut cache = self.model.new_cache();
        match cache.share_prefix(src, len) {
            Ok(()) => Some(Seed {
                cache,
                tokens: prompt[..len].to_vec(),
                drafter,
            }),
            Err(e) => {
                tracing::warn!("cannot share a cached prefix: {e}");
                None
            }
        }
    }

    /// Runs prompt chunks, `prefill_chunk` tokens per step in all, oldest sequences first.
    fn prefill(&mut self) {
        let mut budget = self.config.prefill_chunk;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let s = &self.running[i];
            if s.unprefilled().is_empty() {
                i += 1;
                continue;
            }
            let chunk = s.unprefilled().len().min(self.config.prefill_chunk);
            budget = budget.saturating_sub(chunk);
            let extra = s.cache.bytes_for(s.cache.len() + chunk) - s.cache.bytes();
            let extra = match self.mtp_growth(i, chunk) {
                Ok(head) => extra + head,
                Err(e) => {
                    self.fail(i, e.to_string());
                    continue;
                }
            };
            let (stays, at) = self.room_for(i, extra, 0);
            i = at;
            if !stays {
                continue;
            }
            match self.prefill_chunk(i, chunk) {
                Ok(true) => i += 1,
                Ok(false) => {} // finished and removed
                Err(e) => self.fail(i, e.to_string()),
            }
        }
    }

    /// Runs `chunk` prompt tokens of sequence `i`; after the last, samples its first token.
    /// Returns whether the sequence is still running.
    fn prefill_chunk(&mut self, i: usize, chunk: usize) -> Result<bool> {
        let start = Instant::now();
        let s = &mut self.running[i];
        let from = s.tokens.len();
        let tokens = s.unprefilled()[..chunk].to_vec();
        debug_assert_eq!(from, s.cache.len());
        let logits = if matches!(self.drafts, Drafts::Mtp) {
            // The head drafts after the prompt too: it reads every position's hidden state.
            let (logits, hidden) = self.model.forward_hidden(&tokens, &mut s.cache)?;
            // The rows whose next prompt token is known go through the head now, so that a
            // long prompt's hidden states are not kept.
            let context: Vec<u32> = s
                .tokens
                .iter()
                .chain(&tokens)
                .copied()
                .chain(s.unprefilled().get(chunk).copied())
                .collect();
            let model = self.model.as_ref();
            let state = s
                .mtp
                .get_or_insert_with(|| MtpState::new(model.new_mtp_cache()));
            state.push(from, hidden)?;
            let mut job = [MtpJob {
                state,
                context,
                max: 0,
            }];
            mtp::draft(model, &mut job, 0)?;
            logits
        } else {
            self.model.forward(&tokens, &mut s.cache)?
        };
        if matches!(self.drafts, Drafts::Model(..)) && self.running[i].speculate {
            self.prefill_draft(i, &tokens);
        }
        let s = &mut self.running[i];
        s.prefilled(chunk, start.elapsed());
        // More to run; or the tokens of a preempted sequence are back and it decodes its
        // pending token next (sampled before: nothing to sample now).
        if !s.unprefilled().is_empty() || s.pending.is_some() {
            return Ok(true);
        }
        if !logits.sum_all()?.to_scalar::<f32>()?.is_finite() {
            return Err(EngineError::NonFinite {
                origin: self.origin.clone(),
                position: s.tokens.len() - 1,
            });
        }
        let argmax = if s.wants_greedy() {
            Some(logits.argmax(0)?.to_scalar::<u32>()?)
        } else {
            None
        };
        let next = s.choose(argmax, || Ok(logits.to_vec1::<f32>()?))?;
        self.after_sample(i, next)
    }

    /// Runs a prompt chunk of sequence `i` (after what it holds) through the draft model too,
    /// so that its first decoding step drafts: the draft model's share of the prompt is prefill
    /// time, as the served model's is. Where its cache would need a running sequence
    /// preempted, or the draft model fails, the first drafting step catches up instead.
    fn prefill_draft(&mut self, i: usize, chunk: &[u32]) {
        let Drafts::Model(model, _) = &self.drafts else {
            return;
        };
        let s = &mut self.running[i];
        let cache = s.draft_cache.get_or_insert_with(|| model.new_cache());
        let len = s.tokens.len() + chunk.len();
        let grow = cache.bytes_for(len) - cache.bytes();
        if !self.make_room(grow, None) {
            return;
        }
        let Drafts::Model(model, _) = &self.drafts else {
            return;
        };
        let s = &mut self.running[i];
        let context: Vec<u32> = s.tokens.iter().chain(chunk).copied().collect();
        let Some(cache) = s.draft_cache.as_mut() else {
            return;
        };
        let mut job = [DraftJob {
            cache,
            context,
            max: 0,
        }];
        if let Err(e) = model.draft(&mut job, self.config.prefill_chunk) {
            tracing::warn!("the draft model failed on a prompt chunk: {e}");
        }
        let (tokens, secs) = model.last_catch_up();
        self.draft_cost.record_catch_up(tokens, secs);
    }

    /// One decoding step of every sequence with a pending token, batched; a sequence with a
    /// draft verifies it in the same pass ([`crate::speculative`]).
    fn decode(&mut self) {
        self.propose();
        // Caches that must grow this step need room first, all of it together (they grow in
        // the same forward pass), the oldest sequences' first. A draft takes room only where
        // idle caches can give it: it never preempts a sequence.
        let mut reserved = 0;
        let mut i = 0;
        while i < self.running.len() {
            let s = &self.running[i];
            let grow = |s: &Sequence, rows: usize| {
                s.cache.bytes_for(s.cache.len() + rows) - s.cache.bytes()
            };
            if !s.decoding() {
                i += 1;
                continue;
            }
            if !s.draft.is_empty() {
                let extra = grow(s, 1 + s.draft.len());
                if self.make_room(reserved + extra, None) {
                    reserved += extra;
                    i += 1;
                    continue;
                }
                self.running[i].draft.clear();
            }
            let s = &self.running[i];
            let extra = grow(s, 1);
            if extra == 0 {
                i += 1;
                continue;
            }
            let (stays, at) = self.room_for(i, extra, reserved);
            i = at + usize::from(stays);
            if stays {
                reserved += extra;
            }
        }
        let batch: Vec<usize> = (0..self.running.len())
            .filter(|&i| self.running[i].decoding())
            .collect();
        if batch.is_empty() {
            return;
        }
        let rows = batch.len()
            + batch
                .iter()
                .map(|&i| self.running[i].draft.len())
                .sum::<usize>();
        let started = Instant::now();
        let result = self.decode_batch(&batch);
        let secs = started.elapsed().as_secs_f64();
        self.step_cost.record(rows, secs);
        tracing::debug!(
            sequences = batch.len(),
            rows,
            ms = secs * 1e3,
            rho = self.step_cost.rho(),
            "decoding step"
        );
        if let Err(e) = result {
            let message = e.to_string();
            for &i in batch.iter().rev() {
                if i < self.running.len() {
                    self.fail(i, message.clone());
                }
            }
        }
    }

    /// Each decoding sequence's draft for this step: every decoding sequence takes a row of
    /// the step, and drafted tokens are verified only as far as they raise the step's tokens
    /// per second ([`budget::allot`]) within `max_step_rows`.
    fn propose(&mut self) {
        let max = self.model.max_positions();
        let mut room: Vec<usize> = self.running.iter_mut().map(|s| s.draft_room(max)).collect();
        let ngram_first = match &self.drafts {
            Drafts::None => return,
            Drafts::Ngram => true,
            // Auto tries prompt lookup first: free where the answer repeats its context (an
            // edit), and longer-reaching than a small model; the draft model where it finds
            // nothing.
            Drafts::Model(_, ngram_first) => *ngram_first,
            Drafts::Mtp => false,
        };
        let with_model = matches!(self.drafts, Drafts::Model(..) | Drafts::Mtp);
        // Prompt lookup costs nothing: its drafts are found first, then cut to what pays.
        if ngram_first {
            for (s, room) in self.running.iter_mut().zip(room.iter_mut()) {
                if *room > 0 {
                    s.propose_ngram(*room);
                    if !s.draft.is_empty() || !with_model {
                        *room = s.draft.len();
                    }
                }
            }
        }
        let per_row = self.step_cost.per_row();
        let model_rows = self.draft_cost.rows(per_row);
        let candidates: Vec<budget::Candidate> = self
            .running
            .iter()
            .zip(&room)
            .map(|(s, &len)| {
                // Where the draft model drafts, each token costs its pass; prompt lookup's
                // drafts are found already.
                let (cost, catch_up) = match with_model && s.draft.is_empty() {
                    true => (model_rows, self.catch_up_rows(s, per_row)),
                    false => (0.0, 0.0),
                };
                s.draft_candidate(len, cost, catch_up)
            })
            .collect();
        let decoding = self.running.iter().filter(|s| s.decoding()).count();
        let given = budget::allot(
            &candidates,
            decoding,
            self.config.max_step_rows,
            self.step_cost.rho(),
        );
        let mut model_room = vec![0; room.len()];
        for ((s, n), want) in self.running.iter_mut().zip(given).zip(&mut model_room) {
            if s.draft.is_empty() {
                *want = n;
            } else {
                s.draft.truncate(n);
            }
        }
        if matches!(self.drafts, Drafts::Mtp) {
            if let Err(e) = self.propose_with_mtp(&model_room) {
                tracing::warn!("the multi-token-prediction head failed; decoding without drafts this step: {e}");
            }
        } else if with_model && model_room.iter().any(|&n| n > 0) {
            if let Err(e) = self.propose_with_model(&model_room) {
                tracing::warn!("the draft model failed; decoding without drafts this step: {e}");
            }
        }
    }

    /// Drafts with the draft model for every sequence with room, in one pass per token; none
    /// where the draft caches' growth does not fit the KV budget without preempting.
    fn propose_with_model(&mut self, room: &[usize]) -> Result<()> {
        let Drafts::Model(model, _) = &self.drafts else {
            return Ok(());
        };
        let wanted: Vec<usize> = (0..self.running.len()).filter(|&i| room[i] > 0).collect();
        for &i in &wanted {
            if self.running[i].draft_cache.is_none() {
                self.running[i].draft_cache = Some(model.new_cache());
            }
        }
        // Room for every draft cache to hold its context and draft.
        let grow: usize = wanted
            .iter()
            .map(|&i| {
                let s = &self.running[i];
                let c = s.draft_cache.as_ref().expect("made above");
                c.bytes_for(s.tokens.len() + 1 + room[i]) - c.bytes()
            })
            .sum();
        if !self.make_room(grow, None) {
            return Ok(());
        }
        let Drafts::Model(model, _) = &self.drafts else {
            return Ok(());
        };
        let mut jobs = Vec::with_capacity(wanted.len());
        for (i, s) in self.running.iter_mut().enumerate() {
            if room[i] > 0 {
                let context = s.draft_context();
                if let Some(cache) = s.draft_cache.as_mut() {
                    jobs.push(DraftJob {
                        cache,
                        context,
                        max: room[i],
                    });
                }
            }
        }
        let started = Instant::now();
        let drafts = model.draft(&mut jobs, self.config.prefill_chunk)?;
        drop(jobs);
        let (tokens, secs) = model.last_catch_up();
        self.draft_cost.record_catch_up(tokens, secs);
        self.take_drafts(&wanted, drafts, started, secs);
        Ok(())
    }

    /// What the draft model's catch-up on what sequence `s` missed costs, in rows (none for
    /// the multi-token-prediction head, which keeps up every step, nor for a lag short
    /// enough to run with the first pass).
    fn catch_up_rows(&self, s: &Sequence, per_row: Option<f64>) -> f64 {
        if !matches!(self.drafts, Drafts::Model(..)) {
            return 0.0;
        }
        match s.draft_lag() {
            lag if lag > crate::speculative::draft_model::LONG_CATCH_UP => {
                self.draft_cost.catch_up_rows(lag, per_row)
            }
            _ => 0.0,
        }
    }

    /// Gives sequences `which` their drafts, and times the passes that drafted them (since
    /// `started`, less `catch_up` seconds of catch-ups: as many as the longest draft has
    /// tokens).
    fn take_drafts(
        &mut self,
        which: &[usize],
        drafts: Vec<Vec<u32>>,
        started: Instant,
        catch_up: f64,
    ) {
        let passes = drafts.iter().map(Vec::len).max().unwrap_or(0);
        let secs = (started.elapsed().as_secs_f64() - catch_up).max(0.0);
        self.draft_cost.record(passes, secs);
        tracing::debug!(passes, ms = secs * 1e3, "drafting");
        for (&i, draft) in which.iter().zip(drafts) {
            self.running[i].draft = draft;
        }
    }

    /// Bytes the prediction head's cache of sequence `i` grows by to take `rows` more (none
    /// without the head).
    fn mtp_growth(&self, i: usize, rows: usize) -> Result<usize> {
        if !matches!(self.drafts, Drafts::Mtp) {
            return Ok(0);
        }
        match &self.running[i].mtp {
            Some(state) => state.growth(rows),
            None => Ok(self.model.new_mtp_cache().bytes_for(rows)),
        }
    }

    /// Drafts with the model's multi-token-prediction head for every sequence with room; every
    /// sequence with hidden states waiting runs them through the head (its cache keeps up).
    /// Nothing runs this step where the heads' caches would not fit the KV budget without
    /// preempting: the waiting rows run later.
    fn propose_with_mtp(&mut self, room: &[usize]) -> Result<()> {
        let mut grow = 0;
        for (i, s) in self.running.iter().enumerate() {
            if s.decoding() && s.mtp.is_some() {
                grow += self.mtp_growth(i, room[i])?;
            }
        }
        if !self.make_room(grow, None) {
            return Ok(());
        }
        let vocab = self.tokenizer.vocab_size();
        let mut jobs = Vec::new();
        let mut which = Vec::new();
        for (i, s) in self.running.iter_mut().enumerate() {
            if !s.decoding() {
                continue;
            }
            let context = s.draft_context();
            if let Some(state) = s.mtp.as_mut() {
                jobs.push(MtpJob {
                    state,
                    context,
                    max: room[i],
                });
                which.push(i);
            }
        }
        if jobs.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let drafts = mtp::draft(self.model.as_ref(), &mut jobs, vocab)?;
        drop(jobs);
        self.take_drafts(&which, drafts, started, 0.0);
        Ok(())
    }

    fn decode_batch(&mut self, batch: &[usize]) -> Result<()> {
        // Each sequence's rows: its pending token, then its draft.
        let mut tokens = Vec::with_capacity(batch.len());
        let mut lens = Vec::with_capacity(batch.len());
        for &i in batch {
            let s = &mut self.running[i];
            if !s.draft.is_empty() {
                // Rejected rows are cut back, a recurrent state's too.
                s.cache.verify_next();
            }
            tokens.extend(s.pending);
            tokens.extend_from_slice(&s.draft);
            lens.push(1 + s.draft.len());
        }
        // The multi-token-prediction head reads the final hidden state of every row kept.
        let with_hidden = matches!(self.drafts, Drafts::Mtp);
        let mut hidden = None;
        let logits = {
            let mut caches: Vec<&mut KvCache> = self
                .running
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| batch.contains(i))
                .map(|(_, s)| &mut s.cache)
                .collect();
            if with_hidden {
                let (logits, h) = self
                    .model
                    .forward_rows_hidden(&tokens, &lens, &mut caches)?;
                hidden = Some(h);
                logits
            } else if tokens.len() > batch.len() {
                self.model.forward_rows(&tokens, &lens, &mut caches)?
            } else if caches.len() == 1 {
                self.model.forward(&tokens, caches[0])?.unsqueeze(0)?
            } else {
                self.model.forward_batch(&tokens, &mut caches)?
            }
        };
        let argmax = if batch.iter().any(|&i| self.running[i].wants_greedy()) {
            Some(logits.argmax(1)?.to_vec1::<u32>()?)
        } else {
            None
        };
        // A NaN or infinity anywhere in a row makes its sum one (and its argmax meaningless).
        let sums: Vec<f32> = logits.sum_keepdim(1)?.flatten_all()?.to_vec1()?;
        let firsts: Vec<usize> = lens
            .iter()
            .scan(0, |row, &len| {
                *row += len;
                Some(*row - len)
            })
            .collect();
        // Back to front: a finished sequence leaves without shifting those still to do.
        for (k, &i) in batch.iter().enumerate().rev() {
            let draft = std::mem::take(&mut self.running[i].draft);
            let from = self.running[i].tokens.len();
            self.running[i].drafted(draft.len());
            self.running[i].decoded();
            let mut alive = true;
            // Row `j` chooses the token after the pending one and `draft[..j]`; the next row
            // counts only while each choice is the draft's token (so `j` drafted tokens were
            // accepted when row `j` chooses).
            for j in 0..lens[k] {
                let row = firsts[k] + j;
                if !sums[row].is_finite() {
                    let e = self.non_finite(self.running[i].tokens.len());
                    self.fail(i, e.to_string());
                    alive = false;
                    break;
                }
                let s = &mut self.running[i];
                let next = s.choose(argmax.as_ref().map(|a| a[row]), || {
                    Ok(logits.get(row)?.to_vec1::<f32>()?)
                });
                let hit = next.as_ref().is_ok_and(|&t| draft.get(j) == Some(&t));
                if hit {
                    s.accepted_draft_token();
                }
                let running = match next.and_then(|next| self.after_sample(i, next)) {
                    Ok(running) => running,
                    Err(e) => {
                        self.fail(i, e.to_string());
                        false
                    }
                };
                if !running {
                    alive = false;
                    break;
                }
                let s = &mut self.running[i];
                if !hit {
                    s.adapt_draft(draft.len(), j);
                    // The rows after this one ran on tokens that were not chosen.
                    s.cache.truncate(s.tokens.len());
                    break;
                }
                // The chosen token is the draft's: its row is run, the next row counts.
                s.decoded();
            }
            if let (true, Some(h)) = (alive, &hidden) {
                let s = &mut self.running[i];
                let kept = s.tokens.len() - from;
                let model = self.model.as_ref();
                let state = s
                    .mtp
                    .get_or_insert_with(|| MtpState::new(model.new_mtp_cache()));
                state.push(from, h.narrow(0, firsts[k], kept)?)?;
            }
        }
        Ok(())
    }

    /// Streams a sampled token or finishes the sequence; whether it is still running.
    fn after_sample(&mut self, i: usize, next: u32) -> Result<bool> {
        let max = self.model.max_positions();
        match self.running[i].accept(next, &self.tokenizer, max)? {
            None => Ok(true),
            Some(reason) => {
                self.retire(i, reason);
                Ok(false)
            }
        }
    }

    /// Ends sequence `i` with `reason`; its cache goes to the pool.
    fn retire(&mut self, i: usize, reason: FinishReason) {
        let mut s = self.running.remove(i);
        // A sequence that finished inside a verified draft: the draft's later rows go.
        s.cache.truncate(s.tokens.len());
        // Its rows become read-only, for later prompts that start with them to share.
        if let Err(e) = s.cache.freeze() {
            tracing::warn!("cannot share the finished sequence's cache: {e}");
        }
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Err(e) = s.finish(reason, &self.tokenizer, self.load_time.as_secs_f64()) {
            s.fail(e.to_string());
        }
        if s.keep {
            let drafter = Drafter {
                model: s.draft_cache,
                mtp: s.mtp,
            };
            self.pool
                .put(s.request.session.clone(), s.tokens, s.cache, drafter);
        }
    }

    /// Room under the budget for sequence `i` to grow by `extra` bytes besides `reserved`:
    /// idle caches are evicted, then the newest running sequences preempted. Returns whether
    /// `i` still runs, and where it is now (or where the next sequence is, when it left:
    /// preempted as the newest, or failed because alone it does not fit).
    fn room_for(&mut self, mut i: usize, extra: usize, reserved: usize) -> (bool, usize) {
        while !self.make_room(reserved + extra, None) {
            if self.running.len() == 1 {
                let message = self.over_budget(extra);
                self.fail(i, message);
                return (false, i);
            }
            let newest = (0..self.running.len())
                .max_by_key(|&j| self.running[j].arrived())
                .expect("two or more running");
            self.preempt(newest);
            match newest.cmp(&i) {
                std::cmp::Ordering::Equal => return (false, i),
                std::cmp::Ordering::Less => i -= 1,
                std::cmp::Ordering::Greater => {}
            }
        }
        (true, i)
    }

    /// Drops sequence `i`'s cache; it waits to run its tokens again (see [`Sequence::preempt`]).
    fn preempt(&mut self, i: usize) {
        let mut s = self.running.remove(i);
        tracing::info!(
            "preempted a sequence of {} tokens ({:.1} MiB of KV cache) for others to grow under \
             the {:.0} MiB budget; it runs again when there is room",
            s.tokens.len(),
            s.cache.bytes() as f64 / MIB,
            self.config.kv_budget_bytes as f64 / MIB,
        );
        s.preempt(self.model.new_cache());
        self.preemptions += 1;
        let at = self
            .preempted
            .iter()
            .position(|p| p.arrived() > s.arrived())
            .unwrap_or(self.preempted.len());
        self.preempted.insert(at, s);
    }

    /// Ends sequence `i` with an error; the others go on. Its cache is dropped.
    fn fail(&mut self, i: usize, message: String) {
        let s = self.running.remove(i);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        s.fail(message);
        if let Some(id) = s.session() {
            self.pool.remove(id);
        }
    }

    fn non_finite(&self, position: usize) -> EngineError {
        EngineError::NonFinite {
            origin: self.origin.clone(),
            position,
        }
    }

    fn over_budget(&self, extra: usize) -> String {
        EngineError::KvBudget {
            message: format!(
                "growing a cache by {:.1} MiB would exceed the {:.0} MiB budget (kv_cache_mb): \
                 {} running sequences hold {:.1} MiB; raise the budget or lower max_seqs",
                extra as f64 / MIB,
                self.config.kv_budget_bytes as f64 / MIB,
                self.running.len(),
                self.kv_bytes() as f64 / MIB,
            ),
        }
        .to_string()
    }
}

const MIB: f64 = (1 << 20) as f64;
