//! Admission: preempted sequences back first, then waiting requests, each seeded from the
//! longest cached prefix (a session's cache, a finished request's, a running sequence's).

use super::kv_pool::{common_prefix, DraftState, Seed, MIN_SHARED_PREFIX};
use super::sequence::Sequence;
use super::{Scheduler, MIB};
use crate::cache::kv::KvCache;
use crate::cache::multimodal::prefix_keys;
use crate::error::EngineError;
use crate::generation::{Event, GenerateRequest};
use std::sync::atomic::Ordering;

/// Tokens of answer a new sequence's cache makes room for at first (more doubles it).
const EXPECTED_ANSWER: usize = 1024;

/// Positions a new sequence for `request` is expected to reach: its prompt and an answer of
/// up to [`EXPECTED_ANSWER`] tokens.
fn expected_len(request: &GenerateRequest) -> usize {
    request.prompt.len() + request.max_tokens.min(EXPECTED_ANSWER)
}

/// Where a shared prefix comes from: an idle cache of the pool, or a running sequence.
enum Source {
    Pool(usize),
    Running(usize),
}

impl Scheduler {
    pub(super) fn admit(&mut self) {
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
            // A hybrid model's state is kept where each message starts and where the prompt
            // ends: a later prompt that shares the system prompt or earlier turns resumes there.
            // (Not before `MIN_SHARED_PREFIX`: nothing resumes that early.)
            if let Some(start) = self.message_start {
                let from = seed.cache.len().max(MIN_SHARED_PREFIX - 1);
                let prompt = &job.request.prompt;
                let mut marks: Vec<usize> = prompt
                    .iter()
                    .enumerate()
                    .filter(|&(p, &t)| t == start && p + 1 > from)
                    .map(|(p, _)| p + 1)
                    .collect();
                if prompt.len() > from && marks.last() != Some(&prompt.len()) {
                    marks.push(prompt.len());
                }
                seed.cache.mark_checkpoints(&marks);
            }
            match Sequence::new(job, stop, seed.cache, seed.tokens) {
                Some(mut s) => {
                    s.speculate = self.drafter.drafts();
                    s.draft_cache = seed.draft.model;
                    s.mtp = seed.draft.mtp;
                    self.running.push(s)
                }
                None => {
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Bytes a new sequence for `prompt` adds when its prompt is in its cache.
    pub(super) fn admission_bytes(
        &self,
        request: &GenerateRequest,
        session: Option<&str>,
    ) -> usize {
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
    pub(super) fn seed(
        &mut self,
        prompt: &[u32],
        keys: &[u32],
        usable: usize,
        session: Option<&str>,
    ) -> Seed {
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
            e.draft.truncate(kept);
            return Seed {
                cache: e.cache,
                tokens: e.tokens,
                draft: e.draft,
            };
        }
        if let Some(seed) = self.shared_prefix(prompt, keys, usable) {
            return seed;
        }
        Seed {
            cache: self.model.new_cache(),
            tokens: Vec::new(),
            draft: DraftState::default(),
        }
    }

    /// A cache seeded from the idle or running cache that shares the longest prefix with
    /// `prompt`, if one shares at least [`MIN_SHARED_PREFIX`] tokens: the rows are held
    /// where they are ([`KvCache::share_prefix`]; a running cache's prefix is frozen first). Only caches that
    /// declare their size take part (test models without real caches do not).
    pub(super) fn shared_prefix(
        &mut self,
        prompt: &[u32],
        keys: &[u32],
        usable: usize,
    ) -> Option<Seed> {
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
                e.draft.truncate(len);
                return Some(Seed {
                    cache: e.cache,
                    tokens: e.tokens,
                    draft: e.draft,
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
                let d = &self.pool.entry(i).draft;
                (d.model.as_ref(), d.mtp.as_ref())
            }
            Source::Running(j) => {
                let s = &self.running[j];
                (s.draft_cache.as_ref(), s.mtp.as_ref())
            }
        };
        let draft = DraftState {
            model: match (self.drafter.model(), model_src) {
                (Some(model), Some(d)) => model.copy_prefix(d, len).ok(),
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
                draft,
            }),
            Err(e) => {
                tracing::warn!("cannot share a cached prefix: {e}");
                None
            }
        }
    }
}
