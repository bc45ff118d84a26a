//! The tokenizer and chat template of a GGUF file: `tokenizer.ggml.*` rebuilt as the
//! equivalent `tokenizer.json`, the special tokens and the stop tokens.

use super::GgufFile;
use crate::error::Result;
use crate::text::tokenizer::Tokenizer;
use serde_json::json;

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
        let (pattern, normalizer) = match pre {
            "qwen2" | "default" => (QWEN2_PRETOKENIZE, json!({"type": "NFC"})),
            "qwen35" => (QWEN35_PRETOKENIZE, serde_json::Value::Null),
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
        // llama.cpp token types: 1 normal, 3 control, 4 user-defined, 5 unused.
        let mut vocab = serde_json::Map::new();
        let mut added = vec![];
        for (id, tok) in tokens.iter().enumerate() {
            // Added tokens are in the model's vocabulary too: `tokenizers` gives an added
            // token the id the model has for it, or else the next free one.
            vocab.insert((*tok).to_string(), json!(id));
            if let t @ (3 | 4) = types.get(id).copied().unwrap_or(1) {
                added.push(json!({
                    "id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": t == 3,
                }));
            }
        }
        let merges: Vec<Vec<&str>> = merges.iter().map(|m| m.splitn(2, ' ').collect()).collect();
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
            ]},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges}
        });
        let inner: tokenizers::Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| self.err(format!("cannot build the tokenizer from its metadata: {e}")))?;
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
