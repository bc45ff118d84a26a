//! A small model of the same tokenizer drafts for the served one (`--draft-model`): greedily,
//! one token per pass, every drafting sequence in the same pass (with `auto`, where prompt
//! lookup, [`super::ngram`], finds no draft). Each sequence keeps its own
//! cache in the draft model; before drafting, the cache is cut back to what it shares with the
//! sequence's tokens (the draft's rejected tail goes) and catches up on what is new. The
//! draft's tokens are the draft model's argmax, so verifying them by the sequence's own
//! choices keeps the served model's output exactly (see [`super`]).

use crate::cache::kv::KvCache;
use crate::error::{EngineError, Result};
use crate::generation::LanguageModel;
use crate::tokenizer::Tokenizer;

/// New tokens past which a sequence's catch-up runs alone, through the prefill path.
const LONG_CATCH_UP: usize = 2;

/// The draft model and the vocabulary of the model it drafts for.
pub struct DraftModel {
    model: Box<dyn LanguageModel>,
    /// Ids at or past this are not the served model's: a draft stops before one.
    vocab: usize,
}

/// A sequence's cache in the draft model and the tokens it holds.
pub struct DraftCache {
    cache: KvCache,
    held: Vec<u32>,
}

impl DraftCache {
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
    /// `model` drafting for a served model whose vocabulary has `vocab` ids.
    pub fn new(model: Box<dyn LanguageModel>, vocab: usize) -> Self {
        Self { model, vocab }
    }

    /// An empty cache for one sequence.
    pub fn new_cache(&self) -> DraftCache {
        DraftCache {
            cache: self.model.new_cache(),
            held: Vec::new(),
        }
    }

    /// A cache holding the first `len` tokens that `src` holds (fewer where it holds fewer).
    pub fn copy_prefix(&self, src: &DraftCache, len: usize) -> Result<DraftCache> {
        let mut new = self.new_cache();
        let len = len.min(src.held.len()).min(src.cache.len());
        new.cache.copy_prefix(&src.cache, len)?;
        new.held = src.held[..len].to_vec();
        Ok(new)
    }

    /// Drafts up to `job.max` tokens for every job: the new part of each context in one pass
    /// (at most `chunk` tokens of it; a job with more only catches up, and drafts nothing this
    /// step), then one pass per drafted token. Returns each job's draft.
    pub fn draft(&self, jobs: &mut [DraftJob<'_>], chunk: usize) -> Result<Vec<Vec<u32>>> {
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
        for (j, job) in jobs.iter_mut().enumerate() {
            let len = lens[j];
            if long[j] {
                let logits = self
                    .model
                    .forward(&tokens[first..first + len], &mut job.cache.cache)?;
                best[j] = logits.argmax(0)?.to_scalar::<u32>()?;
            }
            first += len;
        }
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
            let logits = {
                let mut caches = super::caches_of(jobs, &short, |job| &mut job.cache.cache);
                self.model.forward_rows(&rows, &short_lens, &mut caches)?
            };
            let argmax: Vec<u32> = logits.argmax(1)?.to_vec1()?;
            let mut last = 0;
            for (&j, &len) in short.iter().zip(&short_lens) {
                last += len;
                best[j] = argmax[last - 1];
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
            let logits = {
                let mut caches = super::caches_of(jobs, &more, |job| &mut job.cache.cache);
                self.model.forward_batch(&step, &mut caches)?
            };
            let best: Vec<u32> = logits.argmax(1)?.to_vec1()?;
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
