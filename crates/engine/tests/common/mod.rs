//! What the engine's tests share: the real Qwen tokenizers, where they are.

use hearth_engine::Tokenizer;
use std::path::PathBuf;

/// The real tokenizer of `family` (`qwen2.5`, `qwen3`) from `HEARTH_TOKENIZERS`, the shared
/// folder or the fetch script's cache; `None` (a skip) where it is missing, an error instead
/// when `HEARTH_REQUIRE_DATA` is set.
pub fn real_tokenizer(family: &str) -> Result<Option<Tokenizer>, Box<dyn std::error::Error>> {
    let dirs = [
        std::env::var_os("HEARTH_TOKENIZERS").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hearth/tokenizers")),
    ];
    let Some(path) = dirs
        .into_iter()
        .flatten()
        .map(|d| d.join(family).join("tokenizer.json"))
        .find(|p| p.is_file())
    else {
        if std::env::var_os("HEARTH_REQUIRE_DATA").is_some_and(|v| !v.is_empty() && v != "0") {
            return Err(format!(
                "the real {family} tokenizer is missing (HEARTH_REQUIRE_DATA is set)"
            )
            .into());
        }
        eprintln!("SKIPPED: the real {family} tokenizer is missing");
        return Ok(None);
    };
    Ok(Some(Tokenizer::from_file(&path)?))
}
