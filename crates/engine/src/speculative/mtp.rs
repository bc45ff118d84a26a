//! Drafts from the model's own multi-token-prediction head (`--speculative mtp`; Qwen3.5
//! checkpoints carry one, `mtp.*`, see [`crate::model::mtp`]). The head reads the model's final
//! hidden state at position `p` and the token at `p + 1`, and predicts the token at `p + 2`:
//! after a step, the hidden states of the rows it kept and the tokens chosen after them give
//! the head's rows, and the last of those drafts the token after the pending one. Further
//! tokens chain: the head's own hidden state stands in for the model's, one pass per token.
//!
//! The head's layer keeps keys and values of the positions it has run ([`MtpState`]); rows
//! drafted by chaining are cut before the next step runs the model's real hidden states in
//! their place. Drafts are the head's argmax: verification keeps the model's output exact
//! whatever the head predicts (see [`super`]).

use crate::cache::kv::KvCache;
use crate::error::{EngineError, Result};
use crate::generation::LanguageModel;
use candle_core::Tensor;

/// A sequence's state in the multi-token-prediction head.
pub struct MtpState {
    /// Keys and values of the head's layer.
    cache: KvCache,
    /// The position of the cache's first entry: positions before it came from a shared
    /// prefix, whose hidden states were never seen (RoPE makes attention depend only on
    /// distances, so an offset start changes nothing else).
    base: usize,
    /// Entries of `cache` the model's own hidden states produced; entries past it were
    /// drafted by chaining.
    run: usize,
    /// Final hidden states of positions `base + run..` that the head has not run yet
    /// (`[rows, hidden]`): their next token was not known.
    hidden: Option<Tensor>,
}

impl MtpState {
    /// A state holding nothing, over an empty head cache.
    pub fn new(cache: KvCache) -> Self {
        Self {
            cache,
            base: 0,
            run: 0,
            hidden: None,
        }
    }

    /// Bytes its cache holds now.
    pub fn bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Bytes its cache grows by to run every waiting row and `rows` more (a draft's chained
    /// rows, a prompt chunk's): what the KV budget must have room for first.
    pub fn growth(&self, rows: usize) -> Result<usize> {
        let waiting = match &self.hidden {
            Some(h) => h.dim(0)?,
            None => 0,
        };
        let len = self.run + waiting + rows;
        Ok(self.cache.bytes_for(len).saturating_sub(self.cache.bytes()))
    }

    /// Position after the last one whose hidden state it has (run or waiting).
    fn seen(&self) -> Result<usize> {
        let waiting = match &self.hidden {
            Some(h) => h.dim(0)?,
            None => 0,
        };
        Ok(self.base + self.run + waiting)
    }

    /// Takes the model's final hidden states of positions `from..` (`[rows, hidden]`). Rows
    /// that do not follow what it has start it over at `from` (the cache was cut back or
    /// came from a shared prefix).
    pub fn push(&mut self, from: usize, hidden: Tensor) -> Result<()> {
        if self.seen()? != from || from < self.base {
            self.cache.clear();
            self.base = from;
            self.run = 0;
            self.hidden = None;
        }
        self.hidden = Some(match self.hidden.take() {
            Some(h) => Tensor::cat(&[h, hidden], 0)?,
            None => hidden,
        });
        Ok(())
    }

    /// A state over `empty` holding what this one ran of positions before `len`; `None`
    /// where it holds none of them.
    pub fn copy_prefix(&self, len: usize, mut empty: KvCache) -> Result<Option<Self>> {
        if len <= self.base {
            return Ok(None);
        }
        let run = (len - self.base).min(self.run);
        empty.copy_prefix(&self.cache, run)?;
        Ok(Some(Self {
            cache: empty,
            base: self.base,
            run,
            hidden: None,
        }))
    }

    /// Forgets positions from `len` on (a verified step's rejected rows).
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        let seen = self.seen()?;
        if len >= seen {
            return Ok(());
        }
        if len <= self.base + self.run {
            self.run = len.saturating_sub(self.base);
            self.cache.truncate(self.run);
            self.hidden = None;
        } else if let Some(h) = self.hidden.take() {
            self.hidden = Some(h.narrow(0, 0, len - self.base - self.run)?);
        }
        Ok(())
    }
}

/// One sequence's drafting this step.
pub struct MtpJob<'a> {
    /// Its state in the head.
    pub state: &'a mut MtpState,
    /// The tokens the model's cache holds, then the pending token.
    pub context: Vec<u32>,
    /// Most tokens to draft.
    pub max: usize,
}

/// Runs every job's waiting rows whose next token the context holds through the head in one
/// pass, then one pass per further drafted token. Returns each job's draft: empty for a job
/// with `max` 0, one that waits for no rows or whose rows do not end just before the context's
/// last token, and none past the model's vocabulary (`vocab` ids). With `max` 0 it only keeps
/// the head's cache up with the context (a prompt's chunks).
pub fn draft(
    model: &dyn LanguageModel,
    jobs: &mut [MtpJob<'_>],
    vocab: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut drafts = vec![Vec::new(); jobs.len()];
    let mut hidden = Vec::new();
    let mut tokens = Vec::new();
    let mut lens = Vec::new();
    let mut ran = Vec::new();
    let mut drafting = Vec::new();
    for (j, job) in jobs.iter_mut().enumerate() {
        let st = &mut *job.state;
        // What chaining drafted last step goes.
        st.cache.truncate(st.run);
        let Some(h) = st.hidden.take() else { continue };
        let start = st.base + st.run;
        let rows = h.dim(0)?;
        if start + 1 > job.context.len() {
            // Hidden states past the context (a cut the state missed): start over.
            st.cache.clear();
            (st.base, st.run) = (0, 0);
            continue;
        }
        // Rows whose next token is known run; the rest wait for it.
        let known = rows.min(job.context.len() - start - 1);
        if known < rows {
            st.hidden = Some(h.narrow(0, known, rows - known)?);
        }
        if known == 0 {
            continue;
        }
        tokens.extend_from_slice(&job.context[start + 1..start + known + 1]);
        hidden.push(h.narrow(0, 0, known)?);
        lens.push(known);
        ran.push(j);
        drafting.push(known == rows && start + rows + 1 == job.context.len() && job.max > 0);
    }
    if ran.is_empty() {
        return Ok(drafts);
    }
    let hidden = Tensor::cat(&hidden, 0)?;
    let (mut logits, mut out) = {
        let mut caches = super::caches_of(jobs, &ran, |job| &mut job.state.cache);
        model.mtp_rows(&hidden, &tokens, &lens, &mut caches)?
    };
    for &j in &ran {
        let st = &mut *jobs[j].state;
        st.run = st.cache.len();
    }
    // Rows of `logits` and `out`: the jobs of `active`, in order.
    let mut active: Vec<usize> = ran.clone();
    let mut keep: Vec<bool> = drafting;
    loop {
        let best: Vec<u32> = logits.argmax(1)?.to_vec1()?;
        let mut next = Vec::new();
        let mut rows = Vec::new();
        for (row, (&j, &go)) in active.iter().zip(&keep).enumerate() {
            if !go || best[row] as usize >= vocab {
                continue;
            }
            drafts[j].push(best[row]);
            if drafts[j].len() < jobs[j].max {
                next.push(j);
                rows.push(row as u32);
            }
        }
        if next.is_empty() {
            return Ok(drafts);
        }
        let step: Vec<u32> = next
            .iter()
            .map(|&j| *drafts[j].last().expect("drafted"))
            .collect();
        let h = out.index_select(&Tensor::new(rows.as_slice(), out.device())?, 0)?;
        (logits, out) = {
            let mut caches = super::caches_of(jobs, &next, |job| &mut job.state.cache);
            model.mtp_rows(&h, &step, &vec![1; next.len()], &mut caches)?
        };
        keep = vec![true; next.len()];
        active = next;
    }
}

/// Refuses `--speculative mtp` for a model without the head.
pub fn check(model: &dyn LanguageModel, origin: &str) -> Result<()> {
    match model.has_mtp() {
        true => Ok(()),
        false => Err(EngineError::invalid(
            "speculative",
            format!(
                "`mtp` drafts with a multi-token-prediction head (mtp.*), and {origin} has none"
            ),
        )),
    }
}
