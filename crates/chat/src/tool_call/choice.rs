//! Which calls the model may make: OpenAI's `tool_choice`, one meaning for the grammar that
//! holds the decoding to it, the agent's tool loop and the server.

use serde::{Deserialize, Serialize};

/// Which calls the model may make (OpenAI's `tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// Text, then any number of calls of offered tools (or none).
    #[default]
    Auto,
    /// At least one call: under a grammar from the first token, with no text; a tool loop
    /// without one asks again when an answer calls nothing.
    Required,
    /// Calls of this tool only: the others are not offered.
    Named(String),
    /// No call: the model answers in text, and the tools are left out of the prompt.
    None,
}
