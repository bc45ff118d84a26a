//! `hearth template`: prints the exact prompt a model would see for a conversation.

use crate::model_args::ModelArgs;
use anyhow::Context;
use hearth_engine::{ChatInput, ChatMessage};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct TemplateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// JSON as apply_chat_template takes it: `messages`, optional `tools`,
    /// `add_generation_prompt` (default true) and `enable_thinking`.
    #[arg(long)]
    pub input: PathBuf,
}

pub fn run(args: TemplateArgs) -> anyhow::Result<()> {
    let path = &args.input;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let messages: Vec<ChatMessage> =
        serde_json::from_value(v.get("messages").cloned().unwrap_or(Value::Null))
            .with_context(|| format!("{}: field `messages`", path.display()))?;
    let tools = match v.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) => Some(t.clone()),
        Some(other) => anyhow::bail!(
            "{}: field `tools` must be a list, found {other}",
            path.display()
        ),
    };
    let flag = |k: &str| -> anyhow::Result<Option<bool>> {
        match v.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => anyhow::bail!(
                "{}: field `{k}` must be true or false, found {other}",
                path.display()
            ),
        }
    };
    let format =
        hearth_engine::engine::load_chat_format(&args.model.model, &args.model.load_options()?)?;
    let prompt = format.render(&ChatInput {
        messages: &messages,
        tools: tools.as_deref(),
        add_generation_prompt: flag("add_generation_prompt")?.unwrap_or(true),
        enable_thinking: flag("enable_thinking")?,
        extra: Default::default(),
    })?;
    let mut out = std::io::stdout().lock();
    out.write_all(prompt.as_bytes())?;
    out.flush()?;
    Ok(())
}
