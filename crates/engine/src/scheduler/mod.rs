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
//! runs, and a decoding row takes the kernel it would take alone (the kernel context's
//! `rows_are_sequences`).
//!
//! A step's phases are a file each: `admission`, `prefill`, `drafting` (with the
//! `speculative::Drafter`), `decode`; `session` moves a session's cache in and out; this file
//! holds the step, the byte budget, and how a sequence leaves (retired, preempted, failed).

mod admission;
mod config;
mod decode;
mod drafting;
pub mod kv_pool;
mod prefill;
mod sequence;
mod session;

pub use config::{SchedulerConfig, SchedulerOptions};
pub(crate) use sequence::Job;
pub(crate) use session::SessionCache;

use crate::cache::kv::KvCache;
use crate::error::{EngineError, Result};
use crate::generation::{FinishReason, LanguageModel};
use crate::speculative::draft_model::DraftModel;
use crate::speculative::drafter::Drafter;
use crate::text::tokenizer::Tokenizer;
use kv_pool::{DraftState, KvPool};
use sequence::Sequence;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

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
    /// Where decoding sequences' drafts come from, and what they cost ([`crate::speculative`]).
    drafter: Drafter,
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
        let drafter = Drafter::new(config.speculation, draft, model.device().is_cpu());
        Self {
            drafter,
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

    /// Bytes every cache holds: idle and running, each shared segment and checkpoint once.
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
            .flat_map(KvCache::shared_bytes)
            .filter(|&(id, _)| seen.insert(id))
            .map(|(_, bytes)| bytes)
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
            let draft = DraftState {
                model: s.draft_cache,
                mtp: s.mtp,
            };
            self.pool
                .put(s.request.session.clone(), s.tokens, s.cache, draft);
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
