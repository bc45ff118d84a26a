//! One constrained sequence's matcher: which token may come next, and whether the text is
//! complete. The scheduler samples freely first and masks only when the sample is refused, so
//! a model that already follows the grammar pays almost nothing.

use super::prose_guard::ProseGuard;
use super::token_env::TokenEnv;
use crate::error::{EngineError, Result};
use llguidance::Matcher;
use std::sync::Arc;

/// The grammar state of one constrained sequence.
pub struct Guide {
    /// Boxed: a matcher is large, and requests move through channels.
    matcher: Box<Matcher>,
    env: Arc<TokenEnv>,
    /// For a tool-call answer: the text before a call may not spell one.
    prose: Option<ProseGuard>,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Guide(complete: {})", self.is_complete())
    }
}

impl Guide {
    pub(crate) fn new(matcher: Matcher, env: Arc<TokenEnv>, prose: Option<ProseGuard>) -> Self {
        Self {
            matcher: Box::new(matcher),
            env,
            prose,
        }
    }

    /// The ids that end the sequence (allowed only where the grammar accepts).
    pub fn eos_tokens(&self) -> &[u32] {
        self.env.eos_tokens()
    }

    fn is_eos(&self, token: u32) -> bool {
        self.eos_tokens().contains(&token)
    }

    /// Whether `token` may come next; an end-of-sequence token only where the text is complete.
    pub fn allows(&mut self, token: u32) -> Result<bool> {
        if self.is_eos(token) {
            return self.is_accepting();
        }
        // An id outside the trie (a padding row of the logits) would stop the matcher.
        if token as usize >= self.env.trie().vocab_size() || self.matcher.is_stopped() {
            return Ok(false);
        }
        if let Some(p) = &self.prose {
            if !p.allows(token, self.env.trie().token(token)) {
                return Ok(false);
            }
        }
        let valid = self
            .matcher
            .validate_tokens(&[token])
            .map_err(|e| failed(&e))?;
        Ok(valid == 1)
    }

    /// Sets every logit the grammar does not allow next to -inf. An error when it allows
    /// none: a dead end must fail the request, not spin.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = if self.matcher.is_stopped() {
            self.env.trie().eos_token_set()
        } else {
            self.matcher.compute_mask().map_err(|e| failed(&e))?
        };
        if let Some(p) = &self.prose {
            p.mask(logits, self.env.trie());
        }
        // 32 ids per word of the mask: most words are all refused or, in free text, all
        // allowed; only mixed ones go id by id.
        let words = allowed.as_slice();
        let len = allowed.len();
        let mut any = false;
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            // Ids past the trie's vocabulary (padding rows of the logits) are never allowed.
            let valid = len.saturating_sub(w * 32).min(32);
            let mut bits = words.get(w).copied().unwrap_or(0);
            if valid < 32 {
                bits &= (1u32 << valid) - 1;
            }
            match bits {
                0 => chunk.fill(f32::NEG_INFINITY),
                u32::MAX => any = any || chunk.iter().any(|l| l.is_finite()),
                _ => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if bits >> b & 1 == 0 {
                            *l = f32::NEG_INFINITY;
                        } else {
                            any = any || l.is_finite();
                        }
                    }
                }
            }
        }
        if !any {
            return Err(EngineError::Constraint(
                "no token can continue the text under the constraint".into(),
            ));
        }
        Ok(())
    }

    /// llguidance's account of the last mask (trie nodes walked, slices applied, lexer cost),
    /// for benchmarks that look into a slow step.
    pub fn last_step_stats(&self) -> String {
        match self.matcher.last_step_stats() {
            Ok(s) => format!(
                "{} trie nodes, {} slices, lexer cost {}",
                s.trie_nodes_walked, s.slices_applied, s.lexer_cost
            ),
            Err(e) => e.to_string(),
        }
    }

    /// Advances past `token` (never an end-of-sequence token: those finish the sequence).
    pub fn consume(&mut self, token: u32) -> Result<()> {
        self.matcher.consume_token(token).map_err(|e| failed(&e))?;
        if let Some(p) = &mut self.prose {
            p.consume(token, self.env.trie().token(token));
        }
        Ok(())
    }

    /// Whether the text so far is a complete sentence of the grammar.
    pub fn is_accepting(&mut self) -> Result<bool> {
        if self.is_complete() {
            return Ok(true);
        }
        self.matcher.is_accepting().map_err(|e| failed(&e))
    }

    /// The grammar admits nothing more: the only way on is end-of-sequence.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }
}

fn failed(e: &anyhow::Error) -> EngineError {
    EngineError::Constraint(e.to_string())
}
