//! How many drafted tokens a decoding step verifies: as many as raise the step's tokens per
//! second.
//!
//! A step of `R` rows takes about `T(R) = T₀ + R·c`: `T₀` for reading the weights once, `c`
//! per row for its arithmetic. With one sequence `T₀` dominates and a verified row is nearly
//! free; with many, the step is bound by arithmetic and a row costs what a decoded token costs,
//! so only drafts that will almost surely be accepted pay for their rows. A drafted token
//! expected to be kept with probability `v` (its sequence's acceptance rate to the power of
//! its place in the draft: acceptance stops at the first miss) raises the step's expected
//! tokens `E` per second exactly when `v / c > E / T(R)`, that is `v > E / (ρ + R)` with
//! `ρ = T₀ / c`. [`allot`] admits tokens by that rule, the likeliest first; [`StepCost`]
//! learns `ρ` from the steps the scheduler times. A token a draft model drafts costs its pass
//! too, `x` rows more ([`DraftCost`]): it pays when `v·(ρ + R + X) > E·(1 + x)`, `X` the extra
//! rows the step's drafts cost already. A draft model whose cache of the sequence lags behind
//! (it drafted nothing for a while) must first catch up on the tokens it missed: that cost,
//! in rows too ([`DraftCost::catch_up_rows`]), goes with the draft's first token. A sequence
//! that has hardly drafted yet has
//! no rate to go by: its first token is verified anyway, so that a wide batch of edits learns
//! that its drafts are kept.

/// `ρ` before the steps have told it: roughly a 0.5B model's on two CPU cores.
const PRIOR_RHO: f64 = 6.0;
/// A sequence that has drafted fewer tokens than this has its first drafted token verified
/// whatever its step's cost.
pub const NEW_DRAFTER: usize = 4;
/// Weight of each step in the fit: about the last 200 steps count.
const DECAY: f64 = 0.995;

/// A least-squares fit of step time against rows over recent decoding steps.
#[derive(Debug, Clone, Default)]
pub struct StepCost {
    n: f64,
    rows: f64,
    secs: f64,
    rows2: f64,
    rows_secs: f64,
}

impl StepCost {
    /// Counts a decoding step of `rows` rows that took `secs` seconds.
    pub fn record(&mut self, rows: usize, secs: f64) {
        let r = rows as f64;
        self.n = self.n * DECAY + 1.0;
        self.rows = self.rows * DECAY + r;
        self.secs = self.secs * DECAY + secs;
        self.rows2 = self.rows2 * DECAY + r * r;
        self.rows_secs = self.rows_secs * DECAY + r * secs;
    }

    /// `ρ = T₀ / c`: a step's fixed cost in rows. The prior until steps of different widths
    /// have been seen (one sequence decoding without drafts gives no slope).
    pub fn rho(&self) -> f64 {
        match self.fit() {
            None => PRIOR_RHO,
            // Rows cost nothing measurable: drafts are free.
            Some((_, slope)) if slope <= 0.0 => f64::INFINITY,
            Some((fixed, slope)) => (fixed / slope).max(0.0),
        }
    }

    /// Seconds a row costs (`c`), once the fit has one.
    pub fn per_row(&self) -> Option<f64> {
        self.fit().map(|(_, slope)| slope).filter(|&c| c > 0.0)
    }

    /// `(T₀, c)` of the fit, when steps of different widths have been seen.
    fn fit(&self) -> Option<(f64, f64)> {
        let n = self.n;
        if n < 8.0 {
            return None;
        }
        let var = self.rows2 / n - (self.rows / n).powi(2);
        if var < 0.25 {
            return None;
        }
        let slope = (self.rows_secs / n - self.rows / n * self.secs / n) / var;
        Some((self.secs / n - slope * self.rows / n, slope))
    }
}

/// A draft model's (or a multi-token-prediction head's) passes: their recent mean time, to
/// weigh the tokens it drafts; and its catch-ups' time per token.
#[derive(Debug, Clone, Default)]
pub struct DraftCost {
    n: f64,
    secs: f64,
    caught_up: f64,
    catch_up_secs: f64,
}

impl DraftCost {
    /// Counts `passes` draft-model passes that took `secs` seconds in all.
    pub fn record(&mut self, passes: usize, secs: f64) {
        if passes == 0 {
            return;
        }
        self.n = self.n * DECAY + passes as f64;
        self.secs = self.secs * DECAY + secs;
    }

    /// Counts a catch-up of `tokens` tokens (a prompt chunk's, or what a sequence missed) that
    /// took `secs` seconds.
    pub fn record_catch_up(&mut self, tokens: usize, secs: f64) {
        if tokens == 0 {
            return;
        }
        self.caught_up = self.caught_up * DECAY + tokens as f64;
        self.catch_up_secs = self.catch_up_secs * DECAY + secs;
    }

    /// What catching up on `lag` missed tokens costs, in verified rows, given a row's seconds;
    /// until both are known, a token a quarter of a pass (a prompt's rows run several times
    /// faster than decoding's).
    pub fn catch_up_rows(&self, lag: usize, per_row: Option<f64>) -> f64 {
        match per_row {
            Some(c) if self.caught_up >= 1.0 => {
                lag as f64 * self.catch_up_secs / self.caught_up / c
            }
            _ => lag as f64 * self.rows(per_row) / 4.0,
        }
    }

    /// A pass's cost in verified rows (`x`), given a row's seconds; `PRIOR_DRAFT_ROWS` until
    /// both are known.
    pub fn rows(&self, per_row: Option<f64>) -> f64 {
        match per_row {
            Some(c) if self.n >= 1.0 => self.secs / self.n / c,
            _ => PRIOR_DRAFT_ROWS,
        }
    }
}

/// A draft pass's cost in rows before one has been timed: a model a third the size of the
/// served one, whose pass reads its weights as a step does.
const PRIOR_DRAFT_ROWS: f64 = 2.0;

/// A sequence's candidate draft: up to `len` tokens, each kept with probability `rate`
/// given the ones before it were.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// Tokens it may draft (its room, or the length of the draft it found).
    pub len: usize,
    /// Its acceptance rate so far.
    pub rate: f64,
    /// Whether it has drafted too little for `rate` to mean anything: its first token is
    /// verified whatever the rule says.
    pub new: bool,
    /// What each of its tokens costs besides its row, in rows (a draft model's pass; 0 for
    /// prompt lookup).
    pub cost: f64,
    /// What its first token costs besides that, in rows: the draft model's catch-up on the
    /// tokens it missed.
    pub catch_up: f64,
}

/// How many tokens of each candidate's draft the step verifies, for a step that decodes
/// `decoding` sequences (a row each) and runs at most `max_rows` rows, with `rho` from
/// [`StepCost::rho`].
pub fn allot(candidates: &[Candidate], decoding: usize, max_rows: usize, rho: f64) -> Vec<usize> {
    let mut given = vec![0usize; candidates.len()];
    // The value of each candidate's next token: its rate to the power of the token's place.
    let value = |i: usize, given: &[usize]| {
        let c = &candidates[i];
        match given[i] < c.len {
            true => c.rate.clamp(0.0, 1.0).powi(given[i] as i32 + 1),
            false => 0.0,
        }
    };
    let mut rows = decoding;
    let mut extra = 0.0;
    let mut expected = decoding as f64;
    for (i, c) in candidates.iter().enumerate() {
        if c.new && c.len > 0 && rows < max_rows {
            expected += value(i, &given);
            given[i] += 1;
            rows += 1;
            extra += c.cost;
        }
    }
    // What a candidate's next token costs besides its row: its pass, and for its first the
    // catch-up.
    let cost = |i: usize, given: &[usize]| {
        let c = &candidates[i];
        c.cost + if given[i] == 0 { c.catch_up } else { 0.0 }
    };
    while rows < max_rows {
        // The token that gains most for what it costs.
        let Some((best, v)) =
            (0..candidates.len())
                .map(|i| (i, value(i, &given)))
                .max_by(|a, b| {
                    let gain = |&(i, v): &(usize, f64)| v / (1.0 + cost(i, &given));
                    gain(a).total_cmp(&gain(b))
                })
        else {
            break;
        };
        // Worth its row and its pass: `v·(ρ + R + X) > E·(1 + x)`, this row counted in `R`.
        let x = cost(best, &given);
        if v <= 0.0 || v * (rho + (rows + 1) as f64 + extra + x) <= expected * (1.0 + x) {
            break;
        }
        expected += v;
        given[best] += 1;
        rows += 1;
        extra += x;
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(len: usize, rate: f64) -> Candidate {
        Candidate {
            len,
            rate,
            new: false,
            cost: 0.0,
            catch_up: 0.0,
        }
    }

    #[test]
    fn one_sequence_drafts_whatever_is_likely_enough() {
        // A step of one row is mostly the weights' reading: an edit's draft goes whole.
        assert_eq!(allot(&[c(12, 0.98)], 1, 64, 6.0), [12]);
        // A chat's, whose tokens are kept a quarter of the time: the first only.
        assert_eq!(allot(&[c(4, 0.25)], 1, 64, 6.0), [1]);
        // Nothing below 1 / (ρ + 2).
        assert_eq!(allot(&[c(4, 0.1)], 1, 64, 6.0), [0]);
    }

    #[test]
    fn wide_steps_take_only_drafts_that_will_be_kept() {
        // Sixteen sequences: a row costs nearly a token; half-likely drafts do not pay.
        let chat = vec![c(4, 0.5); 16];
        assert_eq!(allot(&chat, 16, 64, 6.0), vec![0; 16]);
        // One of them is an edit: its draft goes, most of it.
        let mut mixed = chat.clone();
        mixed[3] = c(12, 0.99);
        let given = allot(&mixed, 16, 64, 6.0);
        assert!(given[3] >= 8, "{given:?}");
        assert_eq!(given.iter().sum::<usize>(), given[3], "{given:?}");
    }

    #[test]
    fn a_new_sequence_tries_one_token() {
        let new = Candidate {
            new: true,
            ..c(4, 0.5)
        };
        assert_eq!(allot(&[new; 3], 16, 64, 6.0), [1, 1, 1]);
        // Not past the cap, and not what it has not found.
        assert_eq!(allot(&[new; 3], 16, 17, 6.0), [1, 0, 0]);
        assert_eq!(allot(&[Candidate { len: 0, ..new }], 1, 64, 6.0), [0]);
    }

    #[test]
    fn the_likeliest_tokens_go_first_and_the_cap_holds() {
        let given = allot(&[c(12, 0.6), c(12, 0.99)], 2, 8, 100.0);
        assert_eq!(given.iter().sum::<usize>(), 6);
        assert!(given[1] >= given[0], "{given:?}");
        // Free rows (no measurable cost per row): every candidate token up to the cap.
        assert_eq!(allot(&[c(3, 0.2), c(2, 0.2)], 2, 64, f64::INFINITY), [3, 2]);
        assert_eq!(allot(&[c(0, 0.9)], 1, 64, 6.0), [0]);
    }

    #[test]
    fn a_draft_models_tokens_pay_for_its_passes() {
        // A pass costs two rows: an edit's likely draft still goes whole beside one sequence;
        // a chat's, kept two times in three, only its first token; a third, none.
        let model = |len, rate| Candidate {
            cost: 2.0,
            ..c(len, rate)
        };
        assert_eq!(allot(&[model(12, 0.99)], 1, 64, 3.0), [12]);
        assert_eq!(allot(&[model(4, 0.67)], 1, 64, 3.0), [1]);
        assert_eq!(allot(&[model(4, 0.33)], 1, 64, 3.0), [0]);
        // Rows that cost nothing measurable make a step's time no matter: everything goes.
        assert_eq!(allot(&[model(4, 0.2)], 1, 64, f64::INFINITY), [4]);
        let mut cost = DraftCost::default();
        assert_eq!(cost.rows(Some(0.01)), PRIOR_DRAFT_ROWS);
        cost.record(10, 0.2);
        assert!((cost.rows(Some(0.01)) - 2.0).abs() < 1e-9);
        assert_eq!(cost.rows(None), PRIOR_DRAFT_ROWS);
    }

    #[test]
    fn a_lagging_draft_model_pays_for_its_catch_up() {
        // A chat's draft, kept two times in three, pays for its first token beside one
        // sequence; not where the draft model must first catch up on 100 missed tokens (a
        // token's catch-up a fifth of a row: 20 rows). An edit's likely draft still does.
        let model = |len, rate, catch_up| Candidate {
            cost: 2.0,
            catch_up,
            ..c(len, rate)
        };
        assert_eq!(allot(&[model(4, 0.67, 0.0)], 1, 64, 3.0), [1]);
        let mut cost = DraftCost::default();
        cost.record_catch_up(50, 0.01 * 50.0 / 5.0);
        let lag = cost.catch_up_rows(100, Some(0.01));
        assert!((lag - 20.0).abs() < 1e-9, "{lag}");
        assert_eq!(allot(&[model(4, 0.67, lag)], 1, 64, 3.0), [0]);
        assert_eq!(allot(&[model(12, 0.99, lag)], 1, 64, 3.0), [12]);
        // Before any catch-up is timed: a quarter of a pass per token.
        assert_eq!(
            DraftCost::default().catch_up_rows(8, None),
            8.0 * PRIOR_DRAFT_ROWS / 4.0
        );
    }

    #[test]
    fn the_fit_finds_the_fixed_cost_in_rows() {
        let mut cost = StepCost::default();
        assert_eq!(cost.rho(), PRIOR_RHO);
        // T = 12 ms + 2 ms per row: ρ = 6.
        for i in 0..100 {
            let rows = 1 + i % 9;
            cost.record(rows, 0.012 + 0.002 * rows as f64);
        }
        assert!((cost.rho() - 6.0).abs() < 1e-6, "{}", cost.rho());
        // Always one row: no slope to fit, the prior stands.
        let mut one = StepCost::default();
        for _ in 0..100 {
            one.record(1, 0.015);
        }
        assert_eq!(one.rho(), PRIOR_RHO);
    }
}
