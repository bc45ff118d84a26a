//! The model's tokenizer (`tokenizers`), and incremental detokenisation for streaming.

use crate::error::{EngineError, Result};
use std::path::{Path, PathBuf};

/// A model's tokenizer, with the file it came from for error messages.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({})", self.path.display())
    }
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(EngineError::MissingFile {
                what: "tokenizer.json",
                path: path.to_path_buf(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| EngineError::Tokenizer {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Self {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// Wraps a tokenizer built elsewhere (from a GGUF file, say); `origin` names it in errors.
    pub fn from_tokenizers(inner: tokenizers::Tokenizer, origin: &str) -> Self {
        Self {
            inner,
            path: PathBuf::from(origin),
        }
    }

    /// Ids of `text`; special tokens written in the text (`<|im_start|>`) become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| EngineError::Tokenizer {
                path: self.path.clone(),
                message: format!("encoding failed: {e}"),
            })
    }

    /// Text of `ids`, special tokens included (they are part of what the model wrote).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| EngineError::Tokenizer {
                path: self.path.clone(),
                message: format!("decoding failed: {e}"),
            })
    }

    /// The id of a token written as text (`<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// Turns a growing list of ids into text deltas that are always whole UTF-8 characters.
///
/// Byte-level BPE splits a character across tokens; decoding a lone token of such a pair gives
/// U+FFFD. The decoder re-decodes a short window of recent tokens and emits only the new text,
/// holding it back while it still ends in an incomplete character.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the window re-decoded for context.
    prefix: usize,
    /// Tokens up to here have been emitted.
    read: usize,
}

/// Tokens held back at most while their text is an incomplete character.
const MAX_HELD: usize = 8;

impl StreamDecoder {
    /// A decoder with no tokens yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        // A character is at most 4 byte tokens: past that, held text is let go as it is, so
        // that ids that never complete one (or decode to nothing) keep the window short.
        let held = self.ids.len() - self.read;
        if (now.len() > before.len() && !now.ends_with('\u{FFFD}')) || held >= MAX_HELD {
            let delta = match now.get(before.len()..) {
                Some(d) if now.starts_with(&before) => d.to_string(),
                // Decoding a longer window changed earlier text (rare): emit what is new.
                _ => now.chars().skip(before.chars().count()).collect(),
            };
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(delta)
        } else {
            Ok(String::new())
        }
    }

    /// Whatever is still held back (an incomplete character at the very end).
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String> {
        if self.read == self.ids.len() {
            return Ok(String::new());
        }
        let before = tok.decode(&self.ids[self.prefix..self.read])?;
        let now = tok.decode(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(now.get(before.len()..).unwrap_or_default().to_string())
    }
}
