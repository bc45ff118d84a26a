//! Prompt prefill, a bounded chunk per step, oldest sequences first.

use super::Scheduler;
use crate::error::{EngineError, Result};
use crate::speculative::draft_model::DraftJob;
use crate::speculative::mtp::{self, MtpJob, MtpState};
use std::time::Instant;

impl Scheduler {
    /// Runs prompt chunks, `prefill_chunk` tokens per step in all, oldest sequences first.
    pub(super) fn prefill(&mut self) {
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
    pub(super) fn prefill_chunk(&mut self, i: usize, chunk: usize) -> Result<bool> {
        let start = Instant::now();
        let s = &mut self.running[i];
        let from = s.tokens.len();
        let tokens = s.unprefilled()[..chunk].to_vec();
        debug_assert_eq!(from, s.cache.len());
        let logits = if self.drafter.is_mtp() {
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
        if self.drafter.model().is_some() && self.running[i].speculate {
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
    pub(super) fn prefill_draft(&mut self, i: usize, chunk: &[u32]) {
        let Some(model) = self.drafter.model() else {
            return;
        };
        let s = &mut self.running[i];
        let cache = s.draft_cache.get_or_insert_with(|| model.new_cache());
        let len = s.tokens.len() + chunk.len();
        let grow = cache.bytes_for(len) - cache.bytes();
        if !self.make_room(grow, None) {
            return;
        }
        let Some(model) = self.drafter.model() else {
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
        self.drafter.draft_cost.record_catch_up(tokens, secs);
    }
}
