//! One request while the scheduler runs it: its cache, sampler, stop words, text decoder and
//! event channel, from its first prompt chunk to its finish.

use crate::cache::kv::KvCache;
use crate::constraint::Guide;
use crate::error::Result;
use crate::generation::{Event, FinishReason, GenerateRequest, Summary, Timings, Usage};
use crate::sampling::Sampler;
use crate::speculative::draft_model::DraftCache;
use crate::speculative::mtp::MtpState;
use crate::speculative::{ngram, DraftLength};
use crate::text::stop::{StopScan, StopStrings};
use crate::text::tokenizer::{StreamDecoder, Tokenizer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// A request as it arrives at the worker.
pub(crate) struct Job {
    pub request: GenerateRequest,
    /// The matcher of `request.constraint`, compiled when it was queued.
    pub guide: Option<Guide>,
    pub events: UnboundedSender<Event>,
    /// Set by the caller to end the answer where it is.
    pub ended: Arc<AtomicBool>,
    pub arrived: Instant,
}

pub(crate) struct Sequence {
    pub request: GenerateRequest,
    pub events: UnboundedSender<Event>,
    ended: Arc<AtomicBool>,
    arrived: Instant,
    sampler: Sampler,
    stop_strings: StopStrings,
    stop_ids: Vec<u32>,
    guide: Option<Guide>,
    decoder: StreamDecoder,
    pub cache: KvCache,
    /// The tokens whose keys and values `cache` holds.
    pub tokens: Vec<u32>,
    /// After a preemption: every token the dropped cache held (prompt and generated), run
    /// again as a prompt before decoding goes on from `pending`.
    rerun: Vec<u32>,
    /// Prompt tokens found cached (not run again).
    pub cached: usize,
    /// The prompt, then every generated token (for the repetition penalty).
    history: Vec<u32>,
    /// The last sampled token, not yet run: the sequence is decoding.
    pub pending: Option<u32>,
    generated: usize,
    decode_steps: usize,
    prefill: Duration,
    first_token: Option<Instant>,
    /// Whether the cache goes back to the pool at the end (not after `drop_session`).
    pub keep: bool,
    /// Whether this sequence drafts tokens to verify (see [`crate::speculative`]).
    pub speculate: bool,
    /// Tokens drafted this step, verified after `pending`.
    pub draft: Vec<u32>,
    drafting: DraftLength,
    /// This sequence's cache in the draft model, once it has drafted with one.
    pub draft_cache: Option<DraftCache>,
    /// This sequence's state in the model's multi-token-prediction head, once it has one.
    pub mtp: Option<MtpState>,
}

impl Sequence {
    /// The sequence of `job`, starting from `cache` (which holds `tokens`, a prefix of the
    /// prompt); `None` after reporting a bad request on its stream.
    pub fn new(job: Job, mut stop_ids: Vec<u32>, cache: KvCache, tokens: Vec<u32>) -> Option<Self> {
        let Job {
            request,
            guide,
            events,
            ended,
            arrived,
        } = job;
        // Where the grammar accepts, the model's end-of-sequence ends it whatever the request
        // listed: it is the only way out of a complete text.
        if let Some(g) = &guide {
            for &t in g.eos_tokens() {
                if !stop_ids.contains(&t) {
                    stop_ids.push(t);
                }
            }
        }
        let parts = Sampler::new(request.sampling.clone())
            .and_then(|s| Ok((s, StopStrings::new(request.stop_strings.clone())?)));
        let (sampler, stop_strings) = match parts {
            Ok(p) => p,
            Err(e) => {
                let _ = events.send(Event::Error {
                    message: e.to_string(),
                });
                return None;
            }
        };
        Some(Self {
            sampler,
            stop_strings,
            stop_ids,
            guide,
            decoder: StreamDecoder::new(),
            cached: tokens.len(),
            cache,
            tokens,
            rerun: Vec::new(),
            history: request.prompt.clone(),
            pending: None,
            generated: 0,
            decode_steps: 0,
            prefill: Duration::ZERO,
            first_token: None,
            keep: true,
            speculate: false,
            draft: Vec::new(),
            drafting: DraftLength::default(),
            draft_cache: None,
            mtp: None,
            request,
            events,
            ended,
            arrived,
        })
    }

    pub fn session(&self) -> Option<&str> {
        self.request.session.as_deref()
    }

    /// Whether the caller has dropped its stream.
    pub fn cancelled(&self) -> bool {
        self.events.is_closed()
    }

    /// The prompt tokens still to run (after a preemption, the tokens to run again).
    pub fn unprefilled(&self) -> &[u32] {
        let all = if self.rerun.is_empty() {
            &self.request.prompt
        } else {
            &self.rerun
        };
        &all[self.tokens.len().min(all.len())..]
    }

    /// Records a prompt chunk run into the cache.
    pub fn prefilled(&mut self, chunk: usize, took: Duration) {
        let next = self.unprefilled()[..chunk].to_vec();
        self.tokens.extend_from_slice(&next);
        self.prefill += took;
        if self.unprefilled().is_empty() {
            self.rerun.clear();
        }
    }

    /// Whether the sequence decodes this step: a token pending, no prompt left to run.
    pub fn decoding(&self) -> bool {
        self.pending.is_some() && self.unprefilled().is_empty()
    }

    /// Drops the cache (for `empty`, a new one that holds nothing): the tokens it held will
    /// be run again when the sequence is admitted again. Sampler, grammar, stop strings and
    /// text decoder keep their state, so the answer goes on where it stopped.
    pub fn preempt(&mut self, empty: KvCache) {
        let held = std::mem::take(&mut self.tokens);
        // Still in its prompt: the prompt runs again from the start. Decoding: everything
        // held runs again, then the pending token. Preempted again while running those again:
        // what it holds is a prefix of them, and all of them still run.
        if self.pending.is_some() && self.rerun.is_empty() {
            self.rerun = held;
        }
        // The prompt's images go with it: they are encoded once.
        let mut empty = empty;
        empty.set_multimodal(self.cache.multimodal().cloned());
        self.cache = empty;
        self.draft_cache = None;
        self.mtp = None;
    }

    /// When the request arrived (the newest running sequence is preempted first).
    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// Records the pending token run into the cache (by a decoding step, or as a verified
    /// draft token).
    pub fn decoded(&mut self) {
        if let Some(t) = self.pending.take() {
            self.tokens.push(t);
            self.decode_steps += 1;
        }
    }

    /// How many tokens this step may draft to verify after `pending` (see
    /// [`crate::speculative`]): as many as the draft length allows and no more than the
    /// request's tokens and the model's positions leave room for; 0 when the sequence does not
    /// speculate. Clears the last step's draft.
    pub fn draft_room(&mut self, max_positions: usize) -> usize {
        self.draft.clear();
        if !self.speculate || !self.decoding() {
            return 0;
        }
        // Each verified row chooses one token: the pending one is generated already, and it
        // and the draft take positions.
        let left = self.request.max_tokens.saturating_sub(self.generated + 1);
        let room = max_positions.saturating_sub(self.tokens.len() + 1);
        let max = left.min(room);
        if max == 0 {
            return 0;
        }
        self.drafting.take().min(max)
    }

    /// Drafts by prompt lookup over the prompt and answer so far (which end with the pending
    /// token), up to `max` tokens.
    pub fn propose_ngram(&mut self, max: usize) {
        self.draft = ngram::prompt_lookup(&self.history, max);
    }

    /// The tokens a draft model must have seen to draft after them: those of the cache, then
    /// the pending token.
    pub fn draft_context(&self) -> Vec<u32> {
        self.tokens.iter().copied().chain(self.pending).collect()
    }

    /// This sequence's draft of up to `len` tokens, each costing `cost` rows besides its own
    /// and its first `catch_up` more, as the step's budget weighs it.
    pub fn draft_candidate(
        &self,
        len: usize,
        cost: f64,
        catch_up: f64,
    ) -> crate::speculative::budget::Candidate {
        self.drafting.candidate(len, cost, catch_up)
    }

    /// Tokens of its context the draft model's cache of it has not run yet.
    pub fn draft_lag(&self) -> usize {
        let context = self.tokens.len() + usize::from(self.pending.is_some());
        context.saturating_sub(self.draft_cache.as_ref().map_or(0, |c| c.held()))
    }

    /// Counts a draft of `n` tokens sent for verification.
    pub fn drafted(&mut self, n: usize) {
        self.drafting.drafted += n;
    }

    /// Counts a drafted token that was what decoding chose.
    pub fn accepted_draft_token(&mut self) {
        self.drafting.accepted += 1;
    }

    /// Adapts the next draft's length to how much of this one (`drafted` tokens) was
    /// accepted.
    pub fn adapt_draft(&mut self, drafted: usize, accepted: usize) {
        self.drafting.adapt(drafted, accepted);
    }

    pub fn wants_greedy(&self) -> bool {
        let p = self.sampler.params();
        p.is_greedy() && p.repetition_penalty == 1.0
    }

    /// Chooses the next token from this sequence's logits (`argmax` precomputed for greedy
    /// sequences, so that only ids cross from a GPU). A constrained sequence keeps the sample
    /// if its grammar allows it; otherwise the logits are masked to what the grammar allows
    /// and it samples again (from the same random state's next draw).
    pub fn choose(
        &mut self,
        argmax: Option<u32>,
        logits: impl FnOnce() -> Result<Vec<f32>>,
    ) -> Result<u32> {
        let mut logits = Some(logits);
        let mut host = None;
        let first = match argmax {
            Some(id) if self.wants_greedy() => id,
            _ => {
                let mut work = logits.take().map_or(Ok(Vec::new()), |f| f())?;
                // The sampler edits the logits it is given: a constrained sequence keeps the
                // originals, in case its grammar refuses the sample.
                if self.guide.is_some() {
                    host = Some(work.clone());
                }
                self.sampler.sample(&mut work, &self.history)
            }
        };
        let Some(guide) = &mut self.guide else {
            return Ok(first);
        };
        if guide.allows(first)? {
            return Ok(first);
        }
        let mut host = match (host, logits.take()) {
            (Some(h), _) => h,
            (None, Some(f)) => f()?,
            (None, None) => Vec::new(),
        };
        guide.mask(&mut host)?;
        Ok(self.sampler.sample(&mut host, &self.history))
    }

    /// Takes a sampled token: streams it, or finishes. Returns why it finished, if it did.
    pub fn accept(
        &mut self,
        next: u32,
        tok: &Tokenizer,
        max_positions: usize,
    ) -> Result<Option<FinishReason>> {
        self.first_token.get_or_insert_with(Instant::now);
        if self.stop_ids.contains(&next) {
            return Ok(Some(FinishReason::StopToken { id: next }));
        }
        if let Some(g) = &mut self.guide {
            g.consume(next)?;
        }
        self.generated += 1;
        self.history.push(next);
        let (text, matched) = match self.stop_strings.push(&self.decoder.push(tok, next)?) {
            StopScan::Emit(text) => (text, None),
            StopScan::Stopped { emit, matched } => (emit, Some(matched)),
        };
        let sent = self.events.send(Event::Token { id: next }).is_ok()
            && (text.is_empty() || self.events.send(Event::Text { text }).is_ok());
        if !sent {
            return Ok(Some(FinishReason::Cancelled));
        }
        if self.ended.load(Ordering::Relaxed) {
            return Ok(Some(FinishReason::Ended));
        }
        if let Some(text) = matched {
            return Ok(Some(FinishReason::StopString { text }));
        }
        // A complete text that admits nothing more: the model could only end it.
        if let Some(eos) = self
            .guide
            .as_ref()
            .filter(|g| g.is_complete())
            .and_then(|g| g.eos_tokens().first().copied())
        {
            return Ok(Some(FinishReason::StopToken { id: eos }));
        }
        if self.generated >= self.request.max_tokens {
            return Ok(Some(FinishReason::MaxTokens));
        }
        // The token must run at the next position before another can be sampled.
        if self.tokens.len() + 1 > max_positions {
            return Ok(Some(FinishReason::ContextFull));
        }
        self.pending = Some(next);
        Ok(None)
    }

    /// Streams what the decoder and stop scanner hold back, then the summary.
    pub fn finish(&mut self, reason: FinishReason, tok: &Tokenizer, load_s: f64) -> Result<()> {
        let rest = match &reason {
            FinishReason::StopString { .. } | FinishReason::Cancelled => String::new(),
            _ => {
                let tail = self.decoder.flush(tok)?;
                match self.stop_strings.push(&tail) {
                    StopScan::Emit(t) => t + &self.stop_strings.flush(),
                    StopScan::Stopped { emit, .. } => emit,
                }
            }
        };
        if !rest.is_empty() {
            let _ = self.events.send(Event::Text { text: rest });
        }
        let prefill_s = self.prefill.as_secs_f64();
        let decode_s = self.first_token.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let prefilled = self.request.prompt.len() - self.cached;
        let summary = Summary {
            reason,
            usage: Usage {
                prompt_tokens: self.request.prompt.len(),
                cached_prompt_tokens: self.cached,
                completion_tokens: self.generated,
                draft_tokens: self.drafting.drafted,
                accepted_draft_tokens: self.drafting.accepted,
            },
            timings: Timings {
                load_s,
                first_token_s: self
                    .first_token
                    .map_or(0.0, |t| (t - self.arrived).as_secs_f64()),
                prefill_s,
                prefill_tok_s: rate(prefilled, prefill_s),
                decode_s,
                decode_tok_s: rate(self.decode_steps, decode_s),
            },
        };
        let _ = self.events.send(Event::Finished(summary));
        Ok(())
    }

    /// Reports an error; no event follows.
    pub fn fail(&self, message: String) {
        let _ = self.events.send(Event::Error { message });
    }
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence(prompt: Vec<u32>) -> Option<Sequence> {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let job = Job {
            request: GenerateRequest::new(prompt, 100),
            guide: None,
            events,
            ended: Arc::new(AtomicBool::new(false)),
            arrived: Instant::now(),
        };
        Sequence::new(job, vec![], KvCache::new(1, 512), vec![])
    }

    /// Preempted while decoding, then again before the tokens it held ran again: every one of
    /// them still runs, not only the prompt.
    #[test]
    fn a_sequence_preempted_twice_runs_all_it_held_again() -> std::result::Result<(), &'static str>
    {
        let prompt: Vec<u32> = (0..20).collect();
        let mut s = sequence(prompt.clone()).ok_or("no sequence")?;
        s.prefilled(20, Duration::ZERO);
        for t in 100..110 {
            s.pending = Some(t);
            s.decoded();
        }
        s.pending = Some(110);
        let held = s.tokens.clone();
        assert_eq!(held.len(), 30);
        s.preempt(KvCache::new(1, 512));
        assert_eq!(s.unprefilled(), &held[..]);
        // Half of it ran again, then preempted once more.
        s.prefilled(15, Duration::ZERO);
        s.preempt(KvCache::new(1, 512));
        assert_eq!(s.unprefilled(), &held[..]);
        // Preempted before any of it ran again.
        s.preempt(KvCache::new(1, 512));
        assert_eq!(s.unprefilled(), &held[..]);
        s.prefilled(30, Duration::ZERO);
        assert!(s.decoding());
        Ok(())
    }
}
