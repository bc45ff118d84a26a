//! A scheduler's drafting: where drafts come from, and what drafting costs against decoding.

use super::budget::{DraftCost, StepCost};
use super::draft_model::{DraftModel, LONG_CATCH_UP};
use super::Speculation;

/// Where drafts come from.
enum Source {
    None,
    Ngram,
    /// The draft model; with `ngram_first`, only where prompt lookup finds no draft.
    Model {
        model: DraftModel,
        ngram_first: bool,
    },
    /// The model's multi-token-prediction head.
    Mtp,
}

/// The draft source the scheduler runs with, and the time its steps and drafts take.
pub(crate) struct Drafter {
    source: Source,
    /// Decoding steps' time against their rows, for how many drafted tokens pay.
    pub step_cost: StepCost,
    /// The draft model's passes' time.
    pub draft_cost: DraftCost,
}

impl Drafter {
    /// The source for `speculation`, with the draft model where one was loaded. The engine
    /// refuses `Draft` without a draft model and `Mtp` for a model without the head.
    pub fn new(speculation: Speculation, draft: Option<DraftModel>, on_cpu: bool) -> Self {
        // Auto speculates on the CPU, whose kernels compute a verified row as decoding
        // computes it, bit for bit; GPU matrix products may sum several rows in another order
        // than one.
        let source = match (speculation, draft) {
            (Speculation::Off, _) => Source::None,
            (Speculation::Auto, _) if !on_cpu => Source::None,
            (Speculation::Ngram, _) => Source::Ngram,
            (Speculation::Draft, Some(model)) => Source::Model {
                model,
                ngram_first: false,
            },
            (Speculation::Auto, Some(model)) => Source::Model {
                model,
                ngram_first: true,
            },
            (Speculation::Auto | Speculation::Draft, None) => Source::Ngram,
            (Speculation::Mtp, _) => Source::Mtp,
        };
        Self {
            source,
            step_cost: StepCost::default(),
            draft_cost: DraftCost::default(),
        }
    }

    /// Whether sequences draft at all.
    pub fn drafts(&self) -> bool {
        !matches!(self.source, Source::None)
    }

    /// Whether prompt lookup drafts first. Auto tries it before the draft model: free where
    /// the answer repeats its context (an edit), and longer-reaching than a small model.
    pub fn ngram_first(&self) -> bool {
        match self.source {
            Source::None | Source::Mtp => false,
            Source::Ngram => true,
            Source::Model { ngram_first, .. } => ngram_first,
        }
    }

    /// Whether a model drafts (the draft model or the prediction head), a pass per token.
    pub fn with_model(&self) -> bool {
        matches!(self.source, Source::Model { .. } | Source::Mtp)
    }

    /// The draft model, where it drafts.
    pub fn model(&self) -> Option<&DraftModel> {
        match &self.source {
            Source::Model { model, .. } => Some(model),
            _ => None,
        }
    }

    /// Whether the model's multi-token-prediction head drafts.
    pub fn is_mtp(&self) -> bool {
        matches!(self.source, Source::Mtp)
    }

    /// What the draft model's catch-up on `lag` tokens a sequence missed costs, in rows (none
    /// for the prediction head, which keeps up every step, nor for a lag short enough to run
    /// with the first pass).
    pub fn catch_up_rows(&self, lag: usize, per_row: Option<f64>) -> f64 {
        match self.source {
            Source::Model { .. } if lag > LONG_CATCH_UP => {
                self.draft_cost.catch_up_rows(lag, per_row)
            }
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_follows_the_setting_and_the_device() {
        let auto_gpu = Drafter::new(Speculation::Auto, None, false);
        assert!(!auto_gpu.drafts());
        let auto_cpu = Drafter::new(Speculation::Auto, None, true);
        assert!(auto_cpu.drafts() && auto_cpu.ngram_first() && !auto_cpu.with_model());
        let mtp = Drafter::new(Speculation::Mtp, None, true);
        assert!(mtp.is_mtp() && mtp.with_model() && !mtp.ngram_first());
        assert_eq!(mtp.catch_up_rows(100, Some(1.0)), 0.0);
        assert!(!Drafter::new(Speculation::Off, None, true).drafts());
    }
}
