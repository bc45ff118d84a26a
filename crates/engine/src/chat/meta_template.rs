//! lagent-style meta-templates for models without a Jinja chat template: per role a begin
//! marker (with and without the sender's name) and an end marker, a fallback role for senders
//! the template does not know, and a generation prefix when the last turn is not the model's.
//! Defined in TOML (see `crates/engine/templates/*.toml`).

use super::ChatMessage;
use crate::error::{EngineError, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// How one role's messages are marked.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoleFormat {
    /// The role it applies to (`user`, `assistant`, …).
    pub role: String,
    /// Begin marker when the message has no sender name.
    #[serde(default)]
    pub begin: String,
    /// Begin marker when it has one; `{name}` is replaced by it.
    #[serde(default)]
    pub begin_with_name: Option<String>,
    /// Marker after the message.
    #[serde(default)]
    pub end: String,
    /// Sender names shown differently (InternLM2: `plugin` → `<|plugin|>`).
    #[serde(default)]
    pub names: HashMap<String, String>,
}

/// A meta-template: role markers, stop strings and a generation prefix.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetaTemplate {
    /// The template's name.
    pub name: String,
    /// The role the model speaks as; its begin marker is the generation prefix.
    #[serde(default = "assistant")]
    pub generation_role: String,
    /// Used for messages whose role has no entry.
    #[serde(default)]
    pub fallback_role: Option<String>,
    /// Stop strings that end the model's turn.
    #[serde(default)]
    pub stop: Vec<String>,
    /// The markers of each role.
    pub roles: Vec<RoleFormat>,
}

fn assistant() -> String {
    "assistant".into()
}

impl MetaTemplate {
    /// Parses and checks a meta-template's TOML; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self> {
        let t: Self = toml::from_str(text)
            .map_err(|e| EngineError::config(origin, "(meta-template)", e.to_string()))?;
        let bad = |field: &str, message: String| EngineError::config(origin, field, message);
        if t.role(&t.generation_role).is_none() {
            return Err(bad(
                "generation_role",
                format!("`{}` has no [[roles]] entry", t.generation_role),
            ));
        }
        if let Some(f) = &t.fallback_role {
            if t.role(f).is_none() {
                return Err(bad(
                    "fallback_role",
                    format!("`{f}` has no [[roles]] entry"),
                ));
            }
        }
        if t.stop.iter().any(String::is_empty) {
            return Err(bad("stop", "a stop string is empty".into()));
        }
        Ok(t)
    }

    /// Reads and parses a meta-template file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        Self::from_toml(&text, path)
    }

    fn role(&self, role: &str) -> Option<&RoleFormat> {
        self.roles.iter().find(|r| r.role == role)
    }

    fn begin(fmt: &RoleFormat, name: Option<&str>) -> String {
        match (name, &fmt.begin_with_name) {
            (Some(name), Some(with)) => {
                let shown = fmt.names.get(name).map(String::as_str).unwrap_or(name);
                with.replace("{name}", shown)
            }
            _ => fmt.begin.clone(),
        }
    }

    /// The prompt for `messages`; the generation prefix is added when `add_generation_prompt`
    /// is set and the last message is not the model's own.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let mut prompt = String::new();
        for (i, m) in messages.iter().enumerate() {
            let fmt = self
                .role(&m.role)
                .or_else(|| self.fallback_role.as_deref().and_then(|f| self.role(f)))
                .ok_or_else(|| {
                    EngineError::invalid(
                        "messages",
                        format!(
                            "messages[{i}] has role `{}`, which meta-template `{}` does not define (and it has no fallback_role)",
                            m.role, self.name
                        ),
                    )
                })?;
            let name = m.extra.get("name").and_then(|v| v.as_str());
            prompt.push_str(&Self::begin(fmt, name));
            prompt.push_str(m.text());
            prompt.push_str(&fmt.end);
        }
        let last_is_model = messages
            .last()
            .is_some_and(|m| m.role == self.generation_role);
        if add_generation_prompt && !last_is_model {
            if let Some(fmt) = self.role(&self.generation_role) {
                prompt.push_str(&fmt.begin);
            }
        }
        Ok(prompt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERNLM2: &str = include_str!("../../templates/internlm2.toml");
    const CHATML: &str = include_str!("../../templates/chatml.toml");

    #[test]
    fn chatml_renders_turns_and_the_generation_prefix() {
        let t = MetaTemplate::from_toml(CHATML, Path::new("chatml.toml")).unwrap();
        let msgs = [ChatMessage::system("Be brief."), ChatMessage::user("Hi")];
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        // The model spoke last: nothing to add.
        let msgs = [ChatMessage::user("Hi"), ChatMessage::assistant("Hello")];
        assert!(t
            .render(&msgs, true)
            .unwrap()
            .ends_with("Hello<|im_end|>\n"));
        assert_eq!(t.stop, vec!["<|im_end|>".to_string()]);
    }

    #[test]
    fn internlm2_names_plugins_and_falls_back() {
        let t = MetaTemplate::from_toml(INTERNLM2, Path::new("internlm2.toml")).unwrap();
        let mut sys = ChatMessage::system("{\"name\": \"calc\"}");
        sys.extra.insert("name".into(), "plugin".into());
        let mut env = ChatMessage::new("environment", "42");
        env.extra.insert("name".into(), "interpreter".into());
        let other = ChatMessage::new("critic", "looks fine");
        let got = t.render(&[sys, env, other], true).unwrap();
        assert_eq!(
            got,
            "<|im_start|>system name=<|plugin|>\n{\"name\": \"calc\"}<|im_end|>\n\
             <|im_start|>environment name=<|interpreter|>\n42<|im_end|>\n\
             <|im_start|>user\nlooks fine<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn unknown_role_without_fallback_is_an_error() {
        let t = MetaTemplate::from_toml(CHATML, Path::new("chatml.toml")).unwrap();
        let err = t
            .render(&[ChatMessage::new("critic", "x")], true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("critic") && err.contains("chatml"), "{err}");
    }

    #[test]
    fn bad_definitions_are_named() {
        let err = MetaTemplate::from_toml("name = \"x\"\nroles = []", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("generation_role") && err.contains("x.toml"),
            "{err}"
        );
        let src = "name = \"x\"\nstop = [\"\"]\n[[roles]]\nrole = \"assistant\"";
        let err = MetaTemplate::from_toml(src, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("empty"), "{err}");
    }
}
