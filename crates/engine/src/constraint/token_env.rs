//! The model's vocabulary as grammars see it: a token trie over the raw bytes of every token,
//! and tokenization through Hearth's own tokenizer.

use super::byte_level::ByteLevel;
use crate::error::{EngineError, Result};
use crate::text::tokenizer::Tokenizer;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use std::sync::Arc;

/// toktrie's view of a [`Tokenizer`]: built once per model, shared by every grammar.
pub struct TokenEnv {
    tokenizer: Tokenizer,
    trie: TokTrie,
    /// Ordinary tokens whose bytes hold a `"` (what can finish spelling a call's `{"name"`).
    quoted: Arc<[u32]>,
}

impl TokenEnv {
    /// The trie of `tokenizer`'s vocabulary. Ordinary tokens are their bytes; added tokens
    /// (`<|im_end|>`, `<tool_call>`, …) are toktrie's special-token marker followed by their
    /// text, so that text can never spell them and grammars name them as `<|im_end|>`.
    /// `eos` are the ids that end a sequence (the model's stop tokens; at least one).
    pub fn new(tokenizer: &Tokenizer, eos: &[u32]) -> Result<Self> {
        let inner = tokenizer.inner();
        let added = inner.get_added_tokens_decoder();
        let vocab = added
            .keys()
            .map(|&id| id as usize + 1)
            .chain([tokenizer.vocab_size()])
            .max()
            .unwrap_or(0);
        let table = ByteLevel::new();
        let mut words = Vec::with_capacity(vocab);
        for id in 0..vocab as u32 {
            let word = match added.get(&id) {
                Some(t) => [&[TokTrie::SPECIAL_TOKEN_MARKER], t.content.as_bytes()].concat(),
                None => match inner.id_to_token(id) {
                    Some(s) => table.decode(&s).ok_or_else(|| {
                        EngineError::invalid(
                            "tokenizer",
                            format!(
                                "token {id} ({s:?}) is not byte-level BPE; constrained decoding \
                                 needs a byte-level vocabulary"
                            ),
                        )
                    })?,
                    // A hole in the ids: a token that can never be chosen.
                    None => Vec::new(),
                },
            };
            words.push(word);
        }
        let quoted = (0..vocab as u32)
            .filter(|&id| {
                let w = &words[id as usize];
                w.first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER) && w.contains(&b'"')
            })
            .collect();
        let eos: Vec<u32> = eos.iter().copied().filter(|&t| t < vocab as u32).collect();
        let Some(&first) = eos.first() else {
            return Err(EngineError::invalid(
                "stop_token_ids",
                "constrained decoding needs an end-of-sequence token inside the vocabulary",
            ));
        };
        let info = TokRxInfo::new(vocab as u32, first);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        Ok(Self {
            tokenizer: tokenizer.clone(),
            trie,
            quoted,
        })
    }

    /// The vocabulary as a byte trie, for llguidance.
    pub fn trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Ordinary tokens whose bytes hold a `"`, ascending.
    pub(crate) fn quoted(&self) -> Arc<[u32]> {
        self.quoted.clone()
    }

    /// The ids that end a sequence where the grammar accepts.
    pub fn eos_tokens(&self) -> &[u32] {
        self.trie.eos_tokens()
    }
}

impl TokenizerEnv for TokenEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Text goes through the model's tokenizer (canonical tokens); bytes that are not UTF-8
    /// (a part of a character) are split greedily along the trie.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self
                .tokenizer
                .inner()
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}
