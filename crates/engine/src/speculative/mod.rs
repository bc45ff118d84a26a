//! Speculative decoding, exact.
//!
//! A decoding sequence proposes a few tokens it expects to write next (a draft); the scheduler
//! runs its pending token and the draft through the model in one pass
//! ([`crate::LanguageModel::forward_rows`]) and chooses each next token from those rows, in
//! order, as decoding would, until a choice differs from the draft. Every row of that pass
//! equals, bit for bit, the row decoding computes for the same tokens, and each row's token is
//! chosen by the sequence's own sampler, grammar and random state, one draw per token as in
//! decoding; so the tokens are those of plain decoding, at any temperature and seed — only
//! fewer passes produce them. (For a draft that is one token per position, comparing a token
//! sampled from the model's distribution with the draft is the standard rejection rule: the
//! draft's token is kept with the model's probability of it.) Rejected rows are cut from the
//! KV cache; a hybrid model's recurrent state, which cannot be cut back, is kept after each
//! verified row until the step's tokens are chosen ([`crate::KvCache::verify_next`]).
//!
//! Drafts come from the sequence's own context ([`ngram`]: prompt lookup), which costs nothing
//! when it finds no match, and wins most where an answer repeats what it has read (code edits,
//! JSON echoing its input, quotes); or from a small model of the same tokenizer
//! ([`draft_model`]), or from the model's own multi-token-prediction head ([`mtp`]). A draft's length adapts to how much of the sequence's drafts has been
//! accepted ([`DraftLength`]), and a step verifies only the drafted tokens that raise its
//! tokens per second ([`budget`]): all of a likely draft beside one sequence, little or
//! nothing in a step that many sequences already make wide.

pub mod budget;
pub mod draft_model;
pub(crate) mod drafter;
pub mod mtp;
pub mod ngram;

use crate::cache::kv::KvCache;
use crate::error::{EngineError, Result};

/// The caches (`cache` of each) of the drafting jobs `which` (in increasing order), for one
/// pass over them all.
fn caches_of<'a, J>(
    jobs: &'a mut [J],
    which: &[usize],
    cache: impl Fn(&mut J) -> &mut KvCache,
) -> Vec<&'a mut KvCache> {
    jobs.iter_mut()
        .enumerate()
        .filter(|(j, _)| which.contains(j))
        .map(|(_, job)| cache(job))
        .collect()
}

/// Whether and how the scheduler drafts tokens to verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Speculation {
    /// Decode one token per pass.
    Off,
    /// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's
    /// last few tokens ([`ngram::prompt_lookup`]).
    Ngram,
    /// A draft model's greedy tokens alone ([`draft_model`]; the engine must be given one).
    Draft,
    /// The model's own multi-token-prediction head ([`mtp`]; Qwen3.5 checkpoints that carry
    /// `mtp.*`).
    Mtp,
    /// Where it is exact: on the CPU, whose kernels compute a verified row as decoding
    /// computes it, bit for bit (GPU matrix products may sum several rows in another order
    /// than one), n-gram drafts, and the draft model's where prompt lookup finds none if one
    /// is given; off on GPUs.
    #[default]
    Auto,
}

impl Speculation {
    /// The names `--speculative` takes.
    pub const NAMES: &'static str = "off, ngram, draft, mtp or auto";
}

impl std::str::FromStr for Speculation {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(Self::Off),
            "ngram" | "prompt-lookup" => Ok(Self::Ngram),
            "draft" | "draft-model" => Ok(Self::Draft),
            "mtp" | "nextn" => Ok(Self::Mtp),
            "auto" => Ok(Self::Auto),
            other => Err(EngineError::invalid(
                "speculative",
                format!("`{other}` (expected {})", Self::NAMES),
            )),
        }
    }
}

impl std::fmt::Display for Speculation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
            Self::Mtp => "mtp",
            Self::Auto => "auto",
        })
    }
}

/// Longest draft a sequence proposes.
pub const MAX_DRAFT: usize = 12;
/// A sequence's first draft length.
const FIRST_DRAFT: usize = 4;
/// Steps without drafting after a draft of which nothing was accepted, doubling with each
/// such draft in a row (up to this many): a context that only repeats by chance stops costing
/// verification rows.
const MAX_PAUSE: usize = 32;

/// How long a sequence's next draft may be: doubled after a draft accepted whole, cut to one
/// past what was accepted otherwise, and paused after drafts of which nothing was accepted.
#[derive(Debug, Clone)]
pub struct DraftLength {
    next: usize,
    misses: u32,
    pause: usize,
    /// Tokens drafted so far.
    pub drafted: usize,
    /// Drafted tokens accepted so far.
    pub accepted: usize,
}

impl Default for DraftLength {
    fn default() -> Self {
        Self {
            next: FIRST_DRAFT,
            misses: 0,
            pause: 0,
            drafted: 0,
            accepted: 0,
        }
    }
}

impl DraftLength {
    /// The most tokens the next draft may have: 0 while paused. Call once per decoding step.
    pub fn take(&mut self) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        self.next
    }

    /// A draft of up to `len` tokens as [`budget::allot`] weighs it: kept at the share of
    /// drafted tokens accepted so far (a sequence that has drafted nothing counts as half),
    /// new while it has drafted fewer than [`budget::NEW_DRAFTER`] tokens, each token costing
    /// `cost` rows besides its own (a draft model's pass), its first `catch_up` more.
    pub fn candidate(&self, len: usize, cost: f64, catch_up: f64) -> budget::Candidate {
        budget::Candidate {
            len,
            rate: (self.accepted + 1) as f64 / (self.drafted + 2) as f64,
            new: self.drafted < budget::NEW_DRAFTER,
            cost,
            catch_up,
        }
    }

    /// Adapts to a verified draft of `drafted` tokens of which the first `accepted` were kept
    /// (the counts [`Self::drafted`] and [`Self::accepted`] are the caller's to keep).
    pub fn adapt(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        if accepted == drafted {
            self.next = (self.next * 2).min(MAX_DRAFT);
            self.misses = 0;
        } else if accepted == 0 {
            self.next = FIRST_DRAFT.min(self.next).max(1);
            self.misses += 1;
            self.pause = (1usize << self.misses.min(5)).min(MAX_PAUSE) - 1;
        } else {
            self.next = (accepted + 1).max(2);
            self.misses = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_bad_ones_are_named() {
        assert_eq!("off".parse::<Speculation>().unwrap(), Speculation::Off);
        assert_eq!("NGRAM".parse::<Speculation>().unwrap(), Speculation::Ngram);
        assert_eq!("auto".parse::<Speculation>().unwrap(), Speculation::Auto);
        assert_eq!("mtp".parse::<Speculation>().unwrap(), Speculation::Mtp);
        assert_eq!(Speculation::Mtp.to_string(), "mtp");
        let e = "eagle".parse::<Speculation>().unwrap_err().to_string();
        assert!(e.contains("speculative") && e.contains("eagle"), "{e}");
    }

    #[test]
    fn draft_length_grows_on_success_and_pauses_on_misses() {
        let mut d = DraftLength::default();
        assert_eq!(d.take(), FIRST_DRAFT);
        d.adapt(4, 4);
        assert_eq!(d.take(), 8);
        d.adapt(8, 8);
        assert_eq!(d.take(), MAX_DRAFT);
        d.adapt(12, 3);
        assert_eq!(d.take(), 4);
        // Nothing accepted: one step off, then three more after a second miss in a row.
        d.adapt(4, 0);
        assert_eq!(d.take(), 0);
        assert_eq!(d.take(), 4);
        d.adapt(4, 0);
        assert_eq!((d.take(), d.take(), d.take()), (0, 0, 0));
        assert_eq!(d.take(), 4);
        // Some accepted: one past that, at least two.
        d.adapt(4, 1);
        assert_eq!(d.take(), 2);
        // A step without a draft changes nothing.
        d.adapt(0, 0);
        assert_eq!(d.take(), 2);
    }
}
