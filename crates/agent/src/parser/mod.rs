//! Output parsers: what a model's answer means — plain text, tool calls, or structured data.
//! A parse failure is a status on the result with the raw text kept, never a panic.

mod code;
pub mod internlm;
mod json;
mod mixed;
mod qwen;
mod react;
mod tagged;

pub use code::CodeBlockParser;
pub use internlm::InternLmParser;
pub use json::JsonParser;
pub use mixed::MixedParser;
pub use qwen::{QwenToolParser, QwenXmlToolParser};
pub use react::ReActParser;
pub use tagged::{TaggedAction, TaggedToolParser};

pub(crate) use hearth_chat::tool_call::{fenced_blocks, tool_names};
use hearth_chat::{ChatMessage, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// lagent's ToolParser statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "i32", try_from = "i32")]
pub enum ParseStatus {
    /// Plain text: no tool call.
    NoTool,
    /// Tool calls were read.
    ValidTool,
    /// A tool call could not be read.
    ParsingError,
}

impl From<ParseStatus> for i32 {
    fn from(s: ParseStatus) -> i32 {
        match s {
            ParseStatus::NoTool => 0,
            ParseStatus::ValidTool => 1,
            ParseStatus::ParsingError => -1,
        }
    }
}

impl TryFrom<i32> for ParseStatus {
    type Error = String;
    fn try_from(v: i32) -> Result<Self, String> {
        match v {
            0 => Ok(Self::NoTool),
            1 => Ok(Self::ValidTool),
            -1 => Ok(Self::ParsingError),
            o => Err(format!("{o} is not a parse status")),
        }
    }
}

/// What an output parser made of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedOutput {
    /// Whether it holds tool calls, or one that could not be read.
    pub status: ParseStatus,
    /// The text outside any tool call: the answer, or the thought before the calls.
    pub text: String,
    /// The calls read, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Structured data (the JSON parser's result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Why the answer could not be read (with [`ParseStatus::ParsingError`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer as the model wrote it.
    pub raw: String,
}

impl ParsedOutput {
    /// A plain-text reading: no calls, the text trimmed.
    pub fn text(raw: &str) -> Self {
        Self {
            status: ParseStatus::NoTool,
            text: raw.trim().to_string(),
            tool_calls: vec![],
            data: None,
            error: None,
            raw: raw.to_string(),
        }
    }

    /// A reading with tool calls; `text` is what stands outside them.
    pub fn calls(raw: &str, text: String, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            status: ParseStatus::ValidTool,
            tool_calls,
            text,
            ..Self::text(raw)
        }
    }

    /// A failed reading; the raw answer is kept as its text.
    pub fn error(raw: &str, error: impl Into<String>) -> Self {
        Self {
            status: ParseStatus::ParsingError,
            error: Some(error.into()),
            ..Self::text(raw)
        }
    }
}

/// Reads one format of model answers into tool calls or data, and describes it to the model.
pub trait OutputParser: Send + Sync {
    /// Reads an answer; `tools` are the names the model was offered.
    fn parse(&self, text: &str, tools: &[String]) -> ParsedOutput;

    /// Reads an answer against the offered tools' specs (OpenAI's format): formats whose
    /// values are text (the XML calls) type them by each tool's parameter schema.
    fn parse_with_specs(&self, text: &str, specs: &[Value]) -> ParsedOutput {
        self.parse(text, &tool_names(specs))
    }

    /// Instructions for the system prompt (none when the chat template lists the tools).
    fn format_instruction(&self, _tools: &[Value]) -> Option<String> {
        None
    }

    /// The format's instructions as the system messages that carry them: by default one,
    /// [`format_instruction`](Self::format_instruction)'s text. (InternLM names a message
    /// for each kind of tool it describes.)
    fn instruction_messages(&self, tools: &[Value]) -> Vec<ChatMessage> {
        self.format_instruction(tools)
            .map(ChatMessage::system)
            .into_iter()
            .collect()
    }

    /// The kind of tool `call` is, as the format names it where its results are sent back
    /// under that name (InternLM: `plugin` or `interpreter`).
    fn tool_type(&self, _call: &ToolCall) -> Option<String> {
        None
    }

    /// A parsed turn written back the way the model writes it (for few-shot and history).
    fn format_response(&self, parsed: &ParsedOutput) -> String {
        parsed.raw.clone()
    }

    /// How many bytes of a streamed answer are safe to show as text: the rest could still
    /// become a tool call and is held back.
    fn visible_prefix(&self, text: &str) -> usize {
        text.len()
    }

    /// Stop words the format needs (ReAct stops before `Observation:`).
    fn stop_words(&self) -> Vec<String> {
        vec![]
    }

    /// What the model is told when its tool call could not be read: how to write it again.
    fn correction(&self, error: &str) -> String {
        format!(
            "Your tool call could not be read ({error}). Write it again in the format described, or answer directly."
        )
    }

    /// A turn of the model that called tools, as the prompt shows it again: by default the
    /// text with the calls beside it, for a chat template that renders tool calls.
    fn assistant_turn(&self, parsed: &ParsedOutput) -> ChatMessage {
        ChatMessage::assistant(parsed.text.clone()).with_tool_calls(parsed.tool_calls.clone())
    }

    /// A tool's result as the format writes it, as a user turn; `None` gives it to the chat
    /// template's tool role instead.
    fn observation(&self, _result: &str) -> Option<String> {
        None
    }
}
