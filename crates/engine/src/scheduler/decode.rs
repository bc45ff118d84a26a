//! One batched decoding step: every running sequence's pending token and draft in one pass.

use super::sequence::Sequence;
use super::Scheduler;
use crate::cache::kv::KvCache;
use crate::error::Result;
use crate::speculative::mtp::MtpState;
use std::time::Instant;

impl Scheduler {
    /// One decoding step of every sequence with a pending token, batched; a sequence with a
    /// draft verifies it in the same pass ([`crate::speculative`]).
    pub(super) fn decode(&mut self) {
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
        self.drafter.step_cost.record(rows, secs);
        tracing::debug!(
            sequences = batch.len(),
            rows,
            ms = secs * 1e3,
            rho = self.drafter.step_cost.rho(),
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

    pub(super) fn decode_batch(&mut self, batch: &[usize]) -> Result<()> {
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
        let with_hidden = self.drafter.is_mtp();
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
    pub(super) fn after_sample(&mut self, i: usize, next: u32) -> Result<bool> {
        let max = self.model.max_positions();
        match self.running[i].accept(next, &self.tokenizer, max)? {
            None => Ok(true),
            Some(reason) => {
                self.retire(i, reason);
                Ok(false)
            }
        }
    }
}
