//! Hearth's chat vocabulary, shared by the engine, the agents and the server, and light
//! enough for a client that only talks to a remote model: chat messages, tool calls and the
//! formats models write them in (JSON and XML in `<tool_call>` tags), which tools a request
//! allows, and the sampling parameters.

#![warn(missing_docs)]

mod message;
mod py_json;
mod sampling;
pub mod tool_call;

pub use message::{ChatMessage, FunctionCall, ToolCall};
pub use py_json::PyJson;
pub use sampling::{InvalidParam, SamplingParams};
pub use tool_call::{ToolChoice, ToolFormat};
