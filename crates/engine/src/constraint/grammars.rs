//! The grammar compiler of one model: its token trie and llguidance's parser factory, built
//! once and shared by every constrained request.

use super::guide::Guide;
use super::spec::Constraint;
use super::token_env::TokenEnv;
use crate::error::{EngineError, Result};
use crate::tokenizer::Tokenizer;
use llguidance::toktrie::TokEnv;
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;

pub struct Grammars {
    factory: ParserFactory,
    env: Arc<TokenEnv>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Grammars({} tokens)", self.env.trie().vocab_size())
    }
}

impl Grammars {
    /// The compiler for `tokenizer`'s vocabulary; `eos` are the model's stop tokens.
    pub fn new(tokenizer: &Tokenizer, eos: &[u32]) -> Result<Self> {
        let env = Arc::new(TokenEnv::new(tokenizer, eos)?);
        let tok_env: TokEnv = env.clone();
        let mut factory = ParserFactory::new_simple(&tok_env)
            .map_err(|e| EngineError::invalid("tokenizer", format!("token trie: {e}")))?;
        // Grammar warnings come back as errors or are dropped, never printed by the library.
        factory.quiet();
        Ok(Self { factory, env })
    }

    /// The number of token ids the trie knows (logits beyond it are never allowed).
    pub fn vocab_size(&self) -> usize {
        self.env.trie().vocab_size()
    }

    /// The ids that end a constrained sequence (only where its grammar accepts).
    pub fn eos_tokens(&self) -> &[u32] {
        self.env.eos_tokens()
    }

    /// The raw bytes of token `id` (added tokens start with toktrie's marker byte 0xFF).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.env.trie().token(id)
    }

    /// Compiles `constraint` into a fresh matcher. A grammar llguidance cannot compile, or
    /// one that admits no text at all, is an error on `constraint` that says why.
    pub fn guide(&self, constraint: &Constraint) -> Result<Guide> {
        let invalid = |why: String| {
            EngineError::invalid("constraint", format!("{}: {why}", constraint.kind()))
        };
        let parser = self
            .factory
            .create_parser(constraint.grammar())
            .map_err(|e| invalid(e.to_string()))?;
        let mut matcher = Matcher::new(Ok(parser));
        let first = matcher.compute_mask().map_err(|e| invalid(e.to_string()))?;
        if first.is_zero() {
            return Err(invalid("it admits no text at all".into()));
        }
        Ok(Guide::new(matcher, self.env.clone()))
    }
}
