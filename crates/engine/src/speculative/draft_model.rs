//! A small model of the same tokenizer drafts for the served one (`--draft-model`): greedily,
//! one token per pass, every drafting sequence in the same pass (with `auto`, where prompt
//! lookup, [`super::ngram`], finds no draft). Each sequence keeps its own
//! cache in the draft model; before drafting, the cache is cut back to what it shares with the
//! sequence's tokens (the draft's rejected tail goes) and catches up on what is new. The
//! draft's tokens are the draft model's argmax, so verifying them by the sequence's own
//! choices keeps the served model's output exactly (see [`super`]).
//!
//! The argmax is taken over part of the vocabulary only: the first [`DRAFT_VOCABULARY`] ids
//! and the ids the sequence's tokens hold. A small model's LM head is its largest matrix
//! (the 0.5B's is a third of its weights), and a draft pass reads all of it for one token;
//! a byte-pair vocabulary numbers its tokens in the order their merges were learnt, most
//! frequent first, so its first ids cover most of what is written (Qwen's first 32,768 all
//! but 4–10 % of code and prose tokens), and an answer's rarer tokens are mostly its
//! context's (the identifiers of the file it edits); the tokenizer's added tokens (the end of a
//! turn, a tool call's tags) are always covered. A token outside these is never drafted:
//! the draft stops short of it, and verification gives it. The output stays exact whatever
//! the draft.

use crate::cache::kv::KvCache;
use crate::error::{EngineError, Result};
use crate::generation::LanguageModel;
use crate::text::tokenizer::Tokenizer;
use candle_core::Tensor;
use std::cell::Cell;
use std::time::Instant;

/// New tokens past which a sequence's catch-up runs alone, through the prefill path.
pub const LONG_CATCH_UP: usize = 2;

/// Ids a draft pass's LM head covers for every sequence (a multiple of 16, the kernels'
/// tile); the head is cut only for vocabularies at least twice as large.
pub const DRAFT_VOCABULARY: usize = 32768;

/// The draft model and the vocabulary of the model it drafts for.
pub struct DraftModel {
    model: Box<dyn LanguageModel>,
    /// Ids at or past this are not the served model's: a draft stops before one.
    vocab: usize,
    /// The ids the model's draft head covers (`0..n`), where it was cut.
    head: Option<usize>,
    /// Ids past the head's that every sequence's drafts may take (the tokenizer's added
    /// tokens), and their rows of the LM head.
    always: Vec<u32>,
    always_rows: Option<Tensor>,
    /// Tokens and seconds of the last [`DraftModel::draft`]'s catch-ups through the prefill
    /// path.
    catch_up: Cell<(usize, f64)>,
}

/// A sequence's cache in the draft model and the tokens it holds.
pub struct DraftCache {
    cache: KvCache,
    held: Vec<u32>,
    /// Ids past the draft head's that `held` has shown, and their rows of the LM head
    /// (f32 `[ids, hidden]`).
    context_ids: Vec<u32>,
    context_rows: Option<Tensor>,
}

impl DraftCache {
    /// Tokens it holds.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Bytes its cache holds now.
    pub fn bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Bytes its cache holds once it holds `len` positions.
    pub fn bytes_for(&self, len: usize) -> usize {
        self.cache.bytes_for(len)
    }
}

/// One sequence's drafting this step: its tokens so far (the pending one last) and the most
/// tokens it may draft.
pub struct DraftJob<'a> {
    /// The sequence's cache in the draft model.
    pub cache: &'a mut DraftCache,
    /// The tokens the served model's cache holds, then the pending token.
    pub context: Vec<u32>,
    /// Most tokens to draft.
    pub max: usize,
}

/// Refuses a draft model whose tokenizer is not the served model's: the same size, the same
/// special tokens and the same ids for a probe text.
pub fn check_tokenizers(main: &Tokenizer, draft: &Tokenizer, draft_spec: &str) -> Result<()> {
    let probe = "def f(x):\n    return x * 2  # Größe, 東京, 🙂\n<|im_start|>user\nhi<|im_end|>";
    let differs = |what: &str| {
        EngineError::invalid(
            "draft_model",
            format!(
                "`{draft_spec}` has another tokenizer than the served model ({what} differ); a draft model must share its vocabulary"
            ),
        )
    };
    if main.vocab_size() != draft.vocab_size() {
        return Err(differs(&format!(
            "vocabulary sizes {} and {}",
            main.vocab_size(),
            draft.vocab_size()
        )));
    }
    for special in ["<|im_start|>", "<|im_end|>", "<|endoftext|>"] {
        if main.token_id(special) != draft.token_id(special) {
            return Err(differs(&format!("the ids of {special}")));
        }
    }
    if main.encode(probe)? != draft.encode(probe)? {
        return Err(differs("the tokens of a probe text"));
    }
    Ok(())
}

impl DraftModel {
    /// `model` drafting for a served model whose vocabulary has `vocab` ids, its head cut to
    /// the first [`DRAFT_VOCABULARY`] ids where the vocabulary is large; `always`: ids its
    /// drafts may always take (the tokenizer's added tokens).
    pub fn new(model: Box<dyn LanguageModel>, vocab: usize, always: &[u32]) -> Result<Self> {
        let head = match vocab >= 2 * DRAFT_VOCABULARY {
            true => Some(DRAFT_VOCABULARY),
            false => None,
        };
        Self::with_head(model, vocab, head, always)
    }

    /// [`Self::new`] with the head cut to ids `0..n` (`None`: the whole vocabulary).
    pub fn with_head(
        mut model: Box<dyn LanguageModel>,
        vocab: usize,
        head: Option<usize>,
        always: &[u32],
    ) -> Result<Self> {
        // A head that cannot be cut drafts over the whole vocabulary, as before.
        let head = match head {
            // The context's ids need the head's rows too.
            Some(n) if n < vocab => match model.set_draft_vocabulary(n) {
                Ok(true) if model.head_rows(&[0]).is_ok() => Some(n),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!("the draft model's head stays whole: {e}");
                    None
                }
            },
            _ => None,
        };
        let mut draft = Self {
            model,
            vocab,
            head,
            always: Vec::new(),
            always_rows: None,
            catch_up: Cell::new((0, 0.0)),
        };
        let mut cache = draft.new_cache();
        if let Err(e) = draft.note_context(&mut cache, always) {
            tracing::debug!("the draft model's head stays whole: {e}");
            draft.head = None;
            cache = draft.new_cache();
        }
        draft.always = cache.context_ids;
        draft.always_rows = cache.context_rows;
        Ok(draft)
    }

    /// An empty cache for one sequence.
    pub fn new_cache(&self) -> DraftCache {
        DraftCache {
            cache: self.model.new_cache(),
            held: Vec::new(),
            context_ids: self.always.clone(),
            context_rows: self.always_rows.clone(),
        }
    }

    /// A cache holding the first `len` tokens that `src` holds (fewer where it holds fewer).
    pub fn copy_prefix(&self, src: &DraftCache, len: usize) -> Result<DraftCache> {
        let mut new = self.new_cache();
        let len = len.min(src.held.len()).min(src.cache.len());
        new.cache.copy_prefix(&src.cache, len)?;
        new.held = src.held[..len].to_vec();
        // A superset of the prefix's ids: harmless, they only widen its drafts' choice.
        new.context_ids = src.context_ids.clone();
        new.context_rows = src.context_rows.clone();
        Ok(new)
    }

    /// Adds the ids of `tokens` past the draft head's to the cache's context ids.
    fn note_context(&self, cache: &mut DraftCache, tokens: &[u32]) -> Result<()> {
        let Some(n) = self.head else {
            return Ok(());
        };
        let mut new: Vec<u32> = Vec::new();
        for &t in tokens {
            let t_usize = t as usize;
            if t_usize >= n
                && t_usize < self.vocab
                && !cache.context_ids.contains(&t)
                && !new.contains(&t)
            {
                new.push(t);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        let rows = self.model.head_rows(&new)?;
        cache.context_rows = Some(match cache.context_rows.take() {
            Some(old) => Tensor::cat(&[old, rows], 0)?,
            None => rows,
        });
        cache.context_ids.extend(new);
        Ok(())
    }

    /// Each job's argmax for one row: the draft head's logits `[jobs, n]` and final hidden
    /// states `[jobs, hidden]`, against each job's context rows too.
    fn cut_argmax(
        &self,
        jobs: &[&DraftCache],
        logits: &Tensor,
        hidden: &Tensor,
    ) -> Result<Vec<u32>> {
        let best: Vec<u32> = logits.argmax(1)?.to_vec1()?;
        let top: Vec<f32> = logits.max(1)?.to_vec1()?;
        let mut out = Vec::with_capacity(jobs.len());
        for (j, cache) in jobs.iter().enumerate() {
            let mut choice = (best[j], top[j]);
            if let Some(rows) = &cache.context_rows {
                let h = hidden.narrow(0, j, 1)?;
                let l = h.matmul(&rows.t()?)?.squeeze(0)?;
                let i = l.argmax(0)?.to_scalar::<u32>()? as usize;
                let v = l.get(i)?.to_scalar::<f32>()?;
                if v > choice.1 {
                    choice = (cache.context_ids[i], v);
                }
            }
            out.push(choice.0);
        }
        Ok(out)
    }

    /// One pass over rows (`lens[i]` of them at the end of `caches[i]`): the argmax of each
    /// sequence's last row, over the draft head's ids and its context's where the head is cut.
    fn pass(
        &self,
        rows: &[u32],
        lens: &[usize],
        jobs: &mut [DraftJob<'_>],
        which: &[usize],
    ) -> Result<Vec<u32>> {
        if self.head.is_none() {
            let logits = {
                let mut caches = super::caches_of(jobs, which, |job| &mut job.cache.cache);
                self.model.forward_rows(rows, lens, &mut caches)?
            };
            let argmax: Vec<u32> = logits.argmax(1)?.to_vec1()?;
            let mut last = 0;
            return Ok(lens
                .iter()
                .map(|&len| {
                    last += len;
                    argmax[last - 1]
                })
                .collect());
        }
        let mut first = 0;
        for (&j, &len) in which.iter().zip(lens) {
            self.note_context(&mut *jobs[j].cache, &rows[first..first + len])?;
            first += len;
        }
        let (logits, hidden) = {
            let mut caches = super::caches_of(jobs, which, |job| &mut job.cache.cache);
            self.model.draft_rows(rows, lens, &mut caches)?
        };
        let caches: Vec<&DraftCache> = which.iter().map(|&j| &*jobs[j].cache).collect();
        self.cut_argmax(&caches, &logits, &hidden)
    }

    /// Tokens and seconds of the last [`Self::draft`]'s long catch-ups (a prompt chunk, or
    /// what a sequence missed while it drafted nothing): what the scheduler weighs a lagging
    /// cache's next draft by.
    pub fn last_catch_up(&self) -> (usize, f64) {
        self.catch_up.get()
    }

    /// Drafts up to `job.max` tokens for every job: the new part of each context in one pass
    /// (at most `chunk` tokens of it; a job with more only catches up, and drafts nothing this
    /// step), then one pass per drafted token. Returns each job's draft.
    pub fn draft(&self, jobs: &mut [DraftJob<'_>], chunk: usize) -> Result<Vec<Vec<u32>>> {
        self.catch_up.set((0, 0.0));
        let max_positions = self.model.max_positions();
        let mut tokens = Vec::new();
        let mut lens = Vec::with_capacity(jobs.len());
        let mut drafting = Vec::with_capacity(jobs.len());
        for job in jobs.iter_mut() {
            let c = &mut job.cache;
            let shared = common_prefix(&c.held, &job.context);
            let kept = c.cache.truncate(shared);
            c.held.truncate(kept);
            let new = &job.context[kept..];
            let whole = new.len() <= chunk.max(1);
            let run = &new[..new.len().min(chunk.max(1))];
            tokens.extend_from_slice(run);
            c.held.extend_from_slice(run);
            lens.push(run.len());
            // The draft runs at positions after the context; each drafted token but the last
            // takes one.
            let room = max_positions.saturating_sub(job.context.len());
            drafting.push(whole && job.max > 0 && room > 0);
            job.max = job.max.min(room);
        }
        let mut drafts = vec![Vec::new(); jobs.len()];
        if tokens.is_empty() {
            return Ok(drafts);
        }
        // A long catch-up (a prompt) runs alone through the prefill path, whose LM head takes
        // only the last row; short ones (a step's accepted tokens) run together, every row's
        // logits computed.
        let long: Vec<bool> = lens.iter().map(|&len| len > LONG_CATCH_UP).collect();
        let mut best = vec![0u32; jobs.len()];
        let mut first = 0;
        let started = Instant::now();
        let mut caught_up = 0;
        for (j, job) in jobs.iter_mut().enumerate() {
            let len = lens[j];
            if long[j] {
                self.note_context(job.cache, &tokens[first..first + len])?;
                let logits = self
                    .model
                    .forward(&tokens[first..first + len], &mut job.cache.cache)?;
                best[j] = logits.argmax(0)?.to_scalar::<u32>()?;
                caught_up += len;
            }
            first += len;
        }
        self.catch_up
            .set((caught_up, started.elapsed().as_secs_f64()));
        let short: Vec<usize> = (0..jobs.len())
            .filter(|&j| !long[j] && lens[j] > 0)
            .collect();
        if !short.is_empty() {
            let mut rows = Vec::new();
            let mut short_lens = Vec::new();
            let mut first = 0;
            for (j, &len) in lens.iter().enumerate() {
                if short.contains(&j) {
                    rows.extend_from_slice(&tokens[first..first + len]);
                    short_lens.push(len);
                }
                first += len;
            }
            let argmax = self.pass(&rows, &short_lens, jobs, &short)?;
            for (&j, b) in short.iter().zip(argmax) {
                best[j] = b;
            }
        }
        for (j, &len) in lens.iter().enumerate() {
            if len > 0 && drafting[j] && (best[j] as usize) < self.vocab {
                drafts[j].push(best[j]);
            }
        }
        // Then one token per pass for the jobs that want more.
        loop {
            let more: Vec<usize> = (0..jobs.len())
                .filter(|&j| !drafts[j].is_empty() && drafts[j].len() < jobs[j].max)
                .collect();
            if more.is_empty() {
                return Ok(drafts);
            }
            let step: Vec<u32> = more
                .iter()
                .map(|&j| *drafts[j].last().expect("non-empty"))
                .collect();
            let best = self.pass(&step, &vec![1; step.len()], jobs, &more)?;
            for (row, &j) in more.iter().enumerate() {
                jobs[j].cache.held.push(step[row]);
                if (best[row] as usize) < self.vocab {
                    drafts[j].push(best[row]);
                } else {
                    // Past the served model's vocabulary: the draft ends here.
                    jobs[j].max = drafts[j].len();
                }
            }
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
