//! hearth-agent: what InternLM lagent and a tool-loop Agent class give their users, in Rust,
//! on Hearth's in-process engine.
//!
//! - [`AgentMessage`] with lagent's status codes, [`Memory`] per session;
//! - [`Agent`]: `call` = before-hooks → memory ← input → `forward` → memory ← output →
//!   after-hooks; `forward` alone records nothing; state dicts with dotted keys;
//! - [`Aggregator`]s turn memory into chat messages, [`OutputParser`]s turn answers into
//!   tool calls (Qwen `<tool_call>`, InternLM2 actions, ReAct, code blocks, JSON);
//! - [`Tool`]s with JSON schemas, a [`ToolRegistry`] with timeouts and argument checks;
//! - [`ToolAgent`]: the tool loop, built from an aggregator, an output parser and a
//!   [`run::loop_policy::LoopPolicy`], with hooks around each turn and each tool call;
//!   [`Llm`] with [`LocalLlm`] on the engine;
//! - [`SessionStore`]: agent sessions in a SQLite file, one transaction per turn;
//! - [`persistence::record`] and [`persistence::replay`]: a run as JSON lines, and re-running it step for step;
//! - [`knowledge::FolderKnowledge`]: passages of a folder of text files, ranked by BM25.
//!
//! Deliberate differences from lagent: session ids are strings; hooks are trait objects
//! rather than registered callables; there is no separate async twin of each class, since
//! every entry point is async and `call_blocking` covers synchronous callers.

#![warn(missing_docs)]

pub mod agent;
pub mod aggregator;
pub mod error;
pub mod hooks;
pub mod image;
pub mod knowledge;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod message;
pub mod parser;
pub mod persistence;
pub mod run;
pub mod schema;
pub mod tool;
pub mod tool_context;
pub mod tools;

pub use agent::{Agent, AgentList, AgentMap, LlmAgent, MessageStream, Sequential};
pub use aggregator::{
    Aggregator, DefaultAggregator, FewShotAggregator, InternLmAggregator, Preamble, ToolAggregator,
};
pub use error::{AgentError, Result};
pub use hooks::{Hook, HookHandle, Hooks};
#[cfg(feature = "local")]
pub use llm::LocalLlm;
pub use llm::{Llm, LlmEvent, LlmOutput, LlmRequest, ScriptedLlm};
pub use memory::{Memory, MemoryManager};
pub use message::{ActionStatusCode, ActionValidCode, AgentMessage, AgentStatusCode};
pub use parser::{OutputParser, ParseStatus, ParsedOutput};
pub use persistence::store::{open_database, SavedSession, SessionClaim, SessionStore};
pub use run::action_executor::ActionExecutor;
pub use run::event_bus::EventBus;
pub use run::tool_agent::{
    StopReason, ToolAgent, ToolAgentEvent, ToolAgentRun, ToolChoice, ToolExecutor,
};
pub use tool::{Tool, ToolRegistry, ToolResult, ToolSource};
pub use tool_context::{Cancel, ToolContext};

/// The engine types agents speak in.
pub use hearth_chat::{ChatMessage, SamplingParams, ToolCall};
