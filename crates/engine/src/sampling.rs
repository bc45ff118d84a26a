//! Choosing the next token: greedy, or temperature with top-k, top-p and min-p filtering, after
//! a repetition penalty over the recent tokens. The same seed gives the same tokens.

use crate::error::Result;
pub use hearth_chat::SamplingParams;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Picks tokens with [`SamplingParams`] and its own seeded random generator.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler for `params`, once they validate.
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        Ok(Self {
            rng: StdRng::seed_from_u64(params.seed),
            params,
        })
    }

    /// The parameters it samples with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` (modified in place); `history` is every token so far.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        let p = &self.params;
        if p.repetition_penalty != 1.0 {
            let start = history.len().saturating_sub(p.repetition_window);
            let mut seen = std::collections::HashSet::new();
            for &t in &history[start..] {
                if let Some(l) = logits.get_mut(t as usize) {
                    if seen.insert(t) {
                        *l = if *l > 0.0 {
                            *l / p.repetition_penalty
                        } else {
                            *l * p.repetition_penalty
                        };
                    }
                }
            }
        }
        if p.is_greedy() {
            return argmax(logits);
        }
        // Candidates sorted by logit, best first; filters cut this list.
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        if cand.is_empty() {
            return argmax(logits);
        }
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if let Some(k) = p.top_k {
            cand.truncate(k);
        }
        // Scaled after the best logit is subtracted: a tiny temperature then sends every other
        // candidate to 0 and the best to 1 (greedy), where `l / t` would overflow to inf and
        // make every probability NaN.
        let max = cand[0].1;
        let mut probs: Vec<f32> = cand
            .iter()
            .map(|(_, l)| ((l - max) / p.temperature).exp())
            .collect();
        let total: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= total);
        if let Some(top_p) = p.top_p {
            // Keep the smallest prefix whose mass reaches top_p (at least one token).
            let mut mass = 0.0;
            let mut keep = probs.len();
            for (i, &q) in probs.iter().enumerate() {
                mass += q;
                if mass >= top_p {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
        }
        if let Some(min_p) = p.min_p {
            let floor = probs[0] * min_p;
            let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
            probs.truncate(keep);
        }
        let total: f32 = probs.iter().sum();
        let mut r = self.rng.random::<f32>() * total;
        for (i, &q) in probs.iter().enumerate() {
            if r < q {
                return cand[i].0;
            }
            r -= q;
        }
        cand[probs.len() - 1].0
    }
}

/// The index of the largest logit (the first one on ties, as torch's argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 0.5, 2.9]
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.sample(&mut logits(), &[]), 1);
    }

    #[test]
    fn a_tiny_temperature_is_greedy_not_nan() {
        for temperature in [1e-45, 1e-39, f32::MIN_POSITIVE] {
            let params = SamplingParams {
                temperature,
                top_k: None,
                ..SamplingParams::default()
            };
            for seed in 0..20 {
                let mut s = Sampler::new(SamplingParams {
                    seed,
                    ..params.clone()
                })
                .unwrap();
                assert_eq!(s.sample(&mut logits(), &[]), 1, "temperature {temperature}");
            }
        }
    }

    #[test]
    fn repetition_penalty_follows_hf() {
        let params = SamplingParams {
            repetition_penalty: 2.0,
            ..Default::default()
        };
        let mut s = Sampler::new(params).unwrap();
        let mut l = logits();
        // Token 1 (3.0 → 1.5) was just said; 5 (2.9) wins. Token 3 (-1) doubles to -2.
        assert_eq!(s.sample(&mut l, &[1, 3, 1]), 5);
        assert_eq!(l[1], 1.5);
        assert_eq!(l[3], -2.0);
        // Outside the window the penalty does not apply.
        let params = SamplingParams {
            repetition_penalty: 2.0,
            repetition_window: 1,
            ..Default::default()
        };
        let mut s = Sampler::new(params).unwrap();
        assert_eq!(s.sample(&mut logits(), &[1, 0]), 1);
    }

    #[test]
    fn filters_restrict_the_choice() {
        let draw = |params: SamplingParams| {
            let mut s = Sampler::new(params).unwrap();
            (0..200)
                .map(|_| s.sample(&mut logits(), &[]))
                .collect::<std::collections::BTreeSet<_>>()
        };
        let base = SamplingParams {
            temperature: 1.0,
            ..Default::default()
        };
        assert!(draw(base.clone()).len() >= 4);
        let top_k = draw(SamplingParams {
            top_k: Some(2),
            ..base.clone()
        });
        assert_eq!(top_k, [1, 5].into());
        let top_p = draw(SamplingParams {
            top_p: Some(0.3),
            ..base.clone()
        });
        assert_eq!(top_p, [1].into());
        // min_p 0.5: keep tokens with p >= 0.5 * p(best): logits within ln 2 of 3.0.
        let min_p = draw(SamplingParams {
            min_p: Some(0.5),
            ..base
        });
        assert_eq!(min_p, [1, 2, 5].into());
    }

    #[test]
    fn seed_makes_it_reproducible() {
        let params = SamplingParams {
            temperature: 1.5,
            seed: 7,
            ..Default::default()
        };
        let run = || {
            let mut s = Sampler::new(params.clone()).unwrap();
            (0..50)
                .map(|_| s.sample(&mut logits(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
        let other = SamplingParams {
            seed: 8,
            ..params.clone()
        };
        let mut s = Sampler::new(other).unwrap();
        let b: Vec<u32> = (0..50).map(|_| s.sample(&mut logits(), &[])).collect();
        assert_ne!(run(), b);
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = |p: SamplingParams| {
            Sampler::new(p)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(bad(SamplingParams {
            temperature: -0.5,
            ..Default::default()
        })
        .contains("temperature"));
        assert!(bad(SamplingParams {
            top_p: Some(1.5),
            ..Default::default()
        })
        .contains("top_p"));
        assert!(bad(SamplingParams {
            top_k: Some(0),
            ..Default::default()
        })
        .contains("top_k"));
        assert!(bad(SamplingParams {
            repetition_penalty: 0.0,
            ..Default::default()
        })
        .contains("repetition_penalty"));
    }
}
