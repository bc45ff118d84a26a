//! Each decoding sequence's draft for a step, from the scheduler's
//! [`Drafter`](crate::speculative::drafter::Drafter): prompt lookup, the draft model or the
//! prediction head, cut to what pays ([`budget::allot`]).

use super::Scheduler;
use crate::error::Result;
use crate::speculative::budget;
use crate::speculative::draft_model::DraftJob;
use crate::speculative::mtp::{self, MtpJob};
use std::time::Instant;

impl Scheduler {
    /// Each decoding sequence's draft for this step: every decoding sequence takes a row of
    /// the step, and drafted tokens are verified only as far as they raise the step's tokens
    /// per second ([`budget::allot`]) within `max_step_rows`.
    pub(super) fn propose(&mut self) {
        let max = self.model.max_positions();
        let mut room: Vec<usize> = self.running.iter_mut().map(|s| s.draft_room(max)).collect();
        if !self.drafter.drafts() {
            return;
        }
        let ngram_first = self.drafter.ngram_first();
        let with_model = self.drafter.with_model();
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
        let per_row = self.drafter.step_cost.per_row();
        let model_rows = self.drafter.draft_cost.rows(per_row);
        let candidates: Vec<budget::Candidate> = self
            .running
            .iter()
            .zip(&room)
            .map(|(s, &len)| {
                // Where the draft model drafts, each token costs its pass; prompt lookup's
                // drafts are found already.
                let (cost, catch_up) = match with_model && s.draft.is_empty() {
                    true => (
                        model_rows,
                        self.drafter.catch_up_rows(s.draft_lag(), per_row),
                    ),
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
            self.drafter.step_cost.rho(),
        );
        let mut model_room = vec![0; room.len()];
        for ((s, n), want) in self.running.iter_mut().zip(given).zip(&mut model_room) {
            if s.draft.is_empty() {
                *want = n;
            } else {
                s.draft.truncate(n);
            }
        }
        if self.drafter.is_mtp() {
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
    pub(super) fn propose_with_model(&mut self, room: &[usize]) -> Result<()> {
        let Some(model) = self.drafter.model() else {
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
        let Some(model) = self.drafter.model() else {
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
        self.drafter.draft_cost.record_catch_up(tokens, secs);
        self.take_drafts(&wanted, drafts, started, secs);
        Ok(())
    }

    /// Gives sequences `which` their drafts, and times the passes that drafted them (since
    /// `started`, less `catch_up` seconds of catch-ups: as many as the longest draft has
    /// tokens).
    pub(super) fn take_drafts(
        &mut self,
        which: &[usize],
        drafts: Vec<Vec<u32>>,
        started: Instant,
        catch_up: f64,
    ) {
        let passes = drafts.iter().map(Vec::len).max().unwrap_or(0);
        let secs = (started.elapsed().as_secs_f64() - catch_up).max(0.0);
        self.drafter.draft_cost.record(passes, secs);
        tracing::debug!(passes, ms = secs * 1e3, "drafting");
        for (&i, draft) in which.iter().zip(drafts) {
            self.running[i].draft = draft;
        }
    }

    /// Bytes the prediction head's cache of sequence `i` grows by to take `rows` more (none
    /// without the head).
    pub(super) fn mtp_growth(&self, i: usize, rows: usize) -> Result<usize> {
        if !self.drafter.is_mtp() {
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
    pub(super) fn propose_with_mtp(&mut self, room: &[usize]) -> Result<()> {
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
}
