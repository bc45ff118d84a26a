//! Model cards (`crates/engine/models/*.toml`): a short name for a hub checkpoint, with its
//! family, files, chat template, stop words and default sampling. Built into the binary; the
//! files live inside the crate so that it packages on its own.

use crate::error::{EngineError, Result};
use crate::sampling::SamplingParams;
use serde::Deserialize;
use std::path::Path;

/// A built-in model card: a short name for a hub checkpoint and how to serve it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// The short name users pass (`qwen3-8b`).
    pub name: String,
    /// One line for listings.
    #[serde(default)]
    pub description: String,
    /// The Hugging Face repository.
    pub hub_id: String,
    /// The repository revision; default `main`.
    #[serde(default = "main")]
    pub revision: String,
    /// The model family (`qwen2`, `qwen3`, `qwen3_moe`).
    pub family: String,
    /// `safetensors` or `gguf`.
    pub format: String,
    /// The repository files the model needs; for `gguf`, the first is the model file.
    pub files: Vec<String>,
    /// `model` for the checkpoint's own chat template, else a meta-template in `templates/`.
    pub template: String,
    /// Stop words: special tokens become stop ids, other text stop strings.
    #[serde(default)]
    pub stop: Vec<String>,
    /// Sampling defaults recommended for the model.
    #[serde(default)]
    pub sampling: CardSampling,
}

/// A card's sampling defaults; each set field overrides the engine's.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CardSampling {
    /// Softmax temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling mass.
    pub top_p: Option<f32>,
    /// Keep only the `top_k` most likely tokens.
    pub top_k: Option<usize>,
    /// Drop tokens below `min_p` times the top probability.
    pub min_p: Option<f32>,
    /// Penalty on tokens already in the context.
    pub repetition_penalty: Option<f32>,
}

fn main() -> String {
    "main".into()
}

macro_rules! embedded {
    ($($dir:literal / $file:literal),* $(,)?) => {
        &[$(($file, include_str!(concat!("../../", $dir, "/", $file)))),*]
    };
}

const CARDS: &[(&str, &str)] = embedded![
    "models" / "qwen2.5-0.5b-instruct.toml",
    "models" / "qwen2.5-1.5b-instruct.toml",
    "models" / "qwen2.5-3b-instruct.toml",
    "models" / "qwen2.5-7b-instruct.toml",
    "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.toml",
    "models" / "qwen3-0.6b.toml",
    "models" / "qwen3-30b-a3b-instruct-2507.toml",
    "models" / "qwen3-30b-a3b-q4_k_m.toml",
    "models" / "qwen3-coder-30b-a3b-instruct.toml",
    "models" / "qwen3-coder-30b-a3b-instruct-q4_k_m.toml",
    "models" / "qwen3-1.7b.toml",
    "models" / "qwen3-4b.toml",
    "models" / "qwen3-8b.toml",
    "models" / "qwen3.5-0.8b.toml",
    "models" / "qwen3.5-2b.toml",
    "models" / "qwen3.5-4b.toml",
    "models" / "qwen3.5-9b.toml",
    "models" / "qwen3.5-27b.toml",
    "models" / "qwen3.5-35b-a3b.toml",
    "models" / "qwen3.6-27b.toml",
    "models" / "qwen3.6-35b-a3b.toml",
];

const META_TEMPLATES: &[(&str, &str)] =
    embedded!["templates" / "chatml.toml", "templates" / "internlm2.toml"];

impl ModelCard {
    /// Parses and checks a card's TOML; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self> {
        let card: Self = toml::from_str(text)
            .map_err(|e| EngineError::config(origin, "(model card)", e.to_string()))?;
        let bad = |field: &str, message: String| EngineError::config(origin, field, message);
        if !matches!(card.format.as_str(), "safetensors" | "gguf") {
            return Err(bad(
                "format",
                format!("`{}` (expected safetensors or gguf)", card.format),
            ));
        }
        if card.template != "model" && meta_template_source(&card.template).is_none() {
            let known: Vec<&str> = META_TEMPLATES
                .iter()
                .map(|(f, _)| f.trim_end_matches(".toml"))
                .collect();
            return Err(bad(
                "template",
                format!(
                    "`{}` is not a template in templates/ (known: model, {})",
                    card.template,
                    known.join(", ")
                ),
            ));
        }
        if card.stop.iter().any(String::is_empty) {
            return Err(bad("stop", "a stop word is empty".into()));
        }
        Ok(card)
    }

    /// Every built-in card, in name order.
    pub fn all() -> Result<Vec<Self>> {
        let mut cards = CARDS
            .iter()
            .map(|(file, text)| Self::parse(text, &Path::new("models").join(file)))
            .collect::<Result<Vec<_>>>()?;
        cards.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(cards)
    }

    /// The card called `name` (case-insensitive), if any.
    pub fn find(name: &str) -> Result<Option<Self>> {
        Ok(Self::all()?
            .into_iter()
            .find(|c| c.name.eq_ignore_ascii_case(name)))
    }

    /// The card's defaults over the engine's.
    pub fn apply_sampling(&self, p: &mut SamplingParams) {
        let s = &self.sampling;
        if let Some(t) = s.temperature {
            p.temperature = t;
        }
        p.top_p = s.top_p.filter(|&v| v < 1.0).or(p.top_p);
        p.top_k = s.top_k.or(p.top_k);
        p.min_p = s.min_p.or(p.min_p);
        if let Some(r) = s.repetition_penalty {
            p.repetition_penalty = r;
        }
    }
}

/// The TOML source of a built-in meta-template (`chatml`, `internlm2`).
pub fn meta_template_source(name: &str) -> Option<&'static str> {
    META_TEMPLATES
        .iter()
        .find(|(f, _)| f.trim_end_matches(".toml") == name)
        .map(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_card_parses() {
        let cards = ModelCard::all().unwrap();
        assert_eq!(cards.len(), 21);
        for name in [
            "qwen3-30b-a3b-instruct-2507",
            "qwen3-coder-30b-a3b-instruct-q4_k_m",
        ] {
            let c = ModelCard::find(name).unwrap().unwrap();
            assert_eq!(c.family, "qwen3_moe", "{name}");
        }
        for (name, family) in [
            ("qwen3.5-9b", "qwen3_5"),
            ("Qwen3.6-35B-A3B", "qwen3_5_moe"),
        ] {
            let c = ModelCard::find(name).unwrap().unwrap();
            assert_eq!(c.family, family, "{name}");
            assert_eq!(c.sampling.top_k, Some(20));
        }
        let c = ModelCard::find("Qwen2.5-0.5B-Instruct").unwrap().unwrap();
        assert_eq!(c.hub_id, "Qwen/Qwen2.5-0.5B-Instruct");
        assert_eq!(c.family, "qwen2");
        let g = ModelCard::find("qwen2.5-coder-0.5b-instruct-q4_k_m")
            .unwrap()
            .unwrap();
        assert_eq!(g.format, "gguf");
        assert!(ModelCard::find("llama-9000").unwrap().is_none());
    }

    #[test]
    fn a_card_naming_a_missing_template_is_refused() {
        let text = CARDS[0]
            .1
            .replace("template = \"model\"", "template = \"vicuna\"");
        let err = ModelCard::parse(&text, Path::new("models/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("vicuna") && err.contains("models/x.toml") && err.contains("template"),
            "{err}"
        );
    }

    #[test]
    fn card_sampling_overrides_defaults() {
        let c = ModelCard::find("qwen3-0.6b").unwrap().unwrap();
        let mut p = SamplingParams::default();
        c.apply_sampling(&mut p);
        assert_eq!(
            (p.temperature, p.top_p, p.top_k),
            (0.6, Some(0.95), Some(20))
        );
    }
}
