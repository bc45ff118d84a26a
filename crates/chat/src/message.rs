//! Chat messages as Hugging Face chat templates and OpenAI-style APIs take them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool` (meta-templates may define more).
    pub role: String,
    /// `None` for an assistant turn that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Qwen3's reasoning of an assistant turn, when kept apart from the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls of an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Fields a template may read that Hearth does not interpret (`name`, `tool_call_id`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call the model made, as OpenAI's API writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, when the API gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The call's type: `function` (the default).
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called and its arguments.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

/// The function a tool call names, and its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// A JSON object, or a JSON string as some APIs send it; templates get it as given.
    pub arguments: Value,
}

impl ChatMessage {
    /// A message of `role` with text `content`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: Some(content.into()),
            reasoning_content: None,
            tool_calls: vec![],
            extra: Map::new(),
        }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }

    /// A `tool` message: the result of a tool call.
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new("tool", content)
    }

    /// The message with these tool calls.
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.tool_calls = calls;
        self
    }

    /// The content, or `""` when there is none.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

impl ToolCall {
    /// A call of function `name` with `arguments`.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: None,
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments,
            },
        }
    }
}
