//! The tokenizer and chat template of a GGUF file: `tokenizer.ggml.*` rebuilt as the
//! equivalent `tokenizer.json`, the special tokens and the stop tokens.

use super::GgufFile;
use crate::error::Result;
use crate::text::tokenizer::Tokenizer;
use serde_json::json;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

/// The metadata a tokenizer is built from: hundreds of thousands of small strings.
const VOCABULARY_KEYS: [&str; 3] = [
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
];

/// Qwen2's pre-tokenisation regex (as in its tokenizer.json).
const QWEN2_PRETOKENIZE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's (`tokenizer.ggml.pre = qwen35`, its `tokenizer.json`): combining marks belong to the
/// letters they follow.
const QWEN35_PRETOKENIZE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl GgufFile {
    /// The tokenizer the file describes (`tokenizer.ggml.*`, a GPT-2-style byte-level BPE with
    /// Qwen2's or Qwen3.5's pre-tokeniser), rebuilt as the equivalent `tokenizer.json`.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let model = self.meta_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(self.err(format!(
                "tokenizer.ggml.model `{model}` is not supported (only gpt2 byte-level BPE)"
            )));
        }
        let pre = self.meta_str("tokenizer.ggml.pre").unwrap_or("qwen2");
        // Qwen2's tokenizer.json composes text to NFC first; Qwen3.5's keeps it as written (its
        // pre-tokeniser keeps combining marks with their letters instead).
        let (pattern, nfc) = match pre {
            "qwen2" | "default" => (QWEN2_PRETOKENIZE, true),
            "qwen35" => (QWEN35_PRETOKENIZE, false),
            _ => {
                return Err(self.err(format!(
                    "tokenizer.ggml.pre `{pre}` is not supported (qwen2 or qwen35)"
                )))
            }
        };
        let tokens = self.meta_strings("tokenizer.ggml.tokens")?;
        let merges = self.meta_strings("tokenizer.ggml.merges")?;
        let types: Vec<u32> = match self.content.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|_| self.err("`tokenizer.ggml.token_type` is not a list"))?
                .iter()
                .map(|t| {
                    t.to_i32()
                        .map(|n| n as u32)
                        .or_else(|_| t.to_u32())
                        .unwrap_or(1)
                })
                .collect(),
            None => vec![1; tokens.len()],
        };
        let built = |e: tokenizers::Error| {
            self.err(format!("cannot build the tokenizer from its metadata: {e}"))
        };
        // Built with `tokenizers`' own types, as its `tokenizer.json` for these settings would
        // be read (writing that JSON and parsing it again took longer than the rest).
        let vocab: Vocab = (0u32..)
            .zip(&tokens)
            .map(|(id, tok)| ((*tok).to_string(), id))
            .collect();
        let merges = merges
            .iter()
            .map(|m| match m.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(self.err(format!(
                    "`tokenizer.ggml.merges` holds `{m}`, not two tokens and a space"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(built)?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        if nfc {
            inner.with_normalizer(Some(NFC)).map_err(built)?;
        }
        let split = Split::new(
            SplitPattern::Regex(pattern.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(built)?;
        let byte_level = ByteLevel::new(false, false, false);
        inner
            .with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])))
            .with_post_processor(Some(byte_level))
            .with_decoder(Some(byte_level));
        // llama.cpp token types: 1 normal, 3 control, 4 user-defined, 5 unused. Added tokens
        // are in the model's vocabulary too, and keep the id it gives them.
        let added = tokens
            .iter()
            .zip(&types)
            .filter(|(_, t)| matches!(t, 3 | 4))
            .map(|(tok, t)| AddedToken::from((*tok).to_string(), *t == 3).normalized(false));
        inner.add_tokens(added).map_err(built)?;
        Ok(Tokenizer::from_tokenizers(
            inner,
            &self.path.display().to_string(),
        ))
    }

    /// The chat template (`tokenizer.chat_template`), if the file has one.
    pub fn chat_template(&self) -> Option<String> {
        self.meta_str("tokenizer.chat_template")
            .ok()
            .map(str::to_owned)
    }

    /// Drops the vocabulary's metadata (tokens, merges, token types: about 50 MB for Qwen's
    /// 151 936 tokens) once the tokenizer is built, so that loading the weights does not peak
    /// with it. [`GgufFile::tokenizer`] is an error afterwards; the special tokens' names stay.
    pub fn forget_vocabulary(&mut self) {
        self.special = Some(self.special_tokens());
        for key in VOCABULARY_KEYS {
            self.content.metadata.remove(key);
        }
    }

    /// Special tokens for the chat template, by the names HF templates use.
    pub fn special_tokens(&self) -> serde_json::Map<String, serde_json::Value> {
        if let Some(special) = &self.special {
            return special.clone();
        }
        let tokens = self
            .meta_strings("tokenizer.ggml.tokens")
            .unwrap_or_default();
        let name = |key: &str| {
            self.meta_u32(key)
                .ok()
                .and_then(|id| tokens.get(id as usize))
                .map(|t| json!(t))
                .unwrap_or(json!(null))
        };
        let mut m = serde_json::Map::new();
        m.insert("bos_token".into(), name("tokenizer.ggml.bos_token_id"));
        m.insert("eos_token".into(), name("tokenizer.ggml.eos_token_id"));
        m.insert("pad_token".into(), name("tokenizer.ggml.padding_token_id"));
        m.insert("unk_token".into(), name("tokenizer.ggml.unknown_token_id"));
        m
    }

    /// Stop ids from the eos and eot keys.
    pub fn stop_token_ids(&self) -> Vec<u32> {
        let mut ids = vec![];
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Ok(id) = self.meta_u32(key) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }
}
