//! The chat layer: messages rendered into exactly the prompt the model was trained on (its own
//! Jinja template, or a lagent-style meta-template), stop strings, and Qwen3's reasoning told
//! apart from the answer.

mod meta_template;
mod template;
mod thinking;

pub use hearth_chat::tool_call;
pub use hearth_chat::PyJson;
pub use hearth_chat::{ChatMessage, FunctionCall, ToolCall};
pub use meta_template::{MetaTemplate, RoleFormat};
pub use template::{ChatInput, JinjaTemplate};
pub use thinking::{Piece, ThinkingSplitter};
pub use tool_call::{ToolChoice, ToolFormat};

use crate::error::Result;

/// How a model's conversations become prompts.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per loaded model: boxing would save nothing
pub enum ChatFormat {
    /// The model's own `chat_template` (tokenizer_config.json or GGUF metadata).
    Jinja(JinjaTemplate),
    /// A lagent-style meta-template (`chatml`, `internlm2`, or a `.toml` file).
    Meta(MetaTemplate),
}

impl ChatFormat {
    /// The prompt for `input`: the conversation, tools, and the generation prompt if asked.
    pub fn render(&self, input: &ChatInput<'_>) -> Result<String> {
        match self {
            Self::Jinja(t) => t.render(input),
            Self::Meta(t) => {
                template::validate_tools(input)?;
                t.render(input.messages, input.add_generation_prompt)
            }
        }
    }

    /// Whether the model writes `<think>…</think>` reasoning (Qwen3's template mentions it).
    pub fn thinks(&self) -> bool {
        match self {
            Self::Jinja(t) => t.source().contains("<think>"),
            Self::Meta(_) => false,
        }
    }

    /// How the model writes tool calls (a meta-template's models write JSON).
    pub fn tool_format(&self) -> ToolFormat {
        match self {
            Self::Jinja(t) => ToolFormat::of_template(t.source()),
            Self::Meta(_) => ToolFormat::Json,
        }
    }

    /// Whether the rendered prompt leaves the model inside a reasoning block already.
    pub fn prompt_opens_reasoning(prompt: &str) -> bool {
        let tail = prompt.trim_end();
        tail.ends_with("<think>")
    }
}
