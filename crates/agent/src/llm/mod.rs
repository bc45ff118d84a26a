//! The language model an agent talks to: messages, tools and generation parameters in, a
//! stream of events out. [`LocalLlm`] is Hearth's engine in the same process; [`OpenAiLlm`]
//! any OpenAI-compatible server; [`ScriptedLlm`] answers from a script, for tests of agent
//! logic.

mod fallback;
#[cfg(feature = "local")]
mod local;
mod openai;
mod scripted;

pub use fallback::{Backend, FallbackConfig, FallbackLlm, FallbackServer};
#[cfg(feature = "local")]
pub use local::LocalLlm;
pub use openai::OpenAiLlm;
pub use scripted::ScriptedLlm;

use crate::error::Result;
use futures::stream::BoxStream;
use futures::StreamExt;
use hearth_chat::{ChatMessage, SamplingParams, ToolFormat};
use serde_json::Value;

/// One call: the conversation, the tools offered, and per-call overrides.
#[derive(Debug, Clone, Default)]
pub struct LlmRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tool schemas in OpenAI's function format; empty offers none.
    pub tools: Vec<Value>,
    /// The longest answer, in tokens; `None` takes the model's default.
    pub max_tokens: Option<usize>,
    /// `None` takes the model's defaults.
    pub sampling: Option<SamplingParams>,
    /// `None` takes the model's stop words; `Some` replaces them for this call.
    pub stop: Option<Vec<String>>,
    /// Whether a thinking model reasons first; `None` takes the template's default.
    pub enable_thinking: Option<bool>,
    /// A conversation whose KV cache the model may keep between calls.
    pub session: Option<String>,
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    /// Answer text.
    Text(String),
    /// Reasoning text, before the answer.
    Reasoning(String),
    /// The end: why it stopped (`stop`, `length`, `cancelled`), and token counts.
    Done {
        /// Why generation stopped.
        finish: String,
        /// Tokens of the prompt.
        prompt_tokens: usize,
        /// Prompt tokens found in the KV cache rather than computed.
        cached_prompt_tokens: usize,
        /// Tokens of the answer.
        completion_tokens: usize,
        /// The backend that answered, where the model chooses among several
        /// ([`FallbackLlm`]); `None` otherwise.
        model: Option<String>,
    },
}

/// The events of one answer.
pub type LlmStream = BoxStream<'static, Result<LlmEvent>>;

/// A chat model agents talk to.
pub trait Llm: Send + Sync {
    /// Starts answering; events arrive on the stream.
    fn chat(&self, request: LlmRequest) -> Result<LlmStream>;

    /// Releases what the model keeps for a session (its KV cache): the session is over.
    fn end_session(&self, _session: &str) {}

    /// The model's name, for logs and recordings.
    fn name(&self) -> String;

    /// How the model writes tool calls (its chat template shows it).
    fn tool_format(&self) -> ToolFormat {
        ToolFormat::Json
    }
}

/// A whole answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmOutput {
    /// The answer.
    pub text: String,
    /// The reasoning before it.
    pub reasoning: String,
    /// Why it stopped (`stop`, `length`, `cancelled`).
    pub finish: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens found in the KV cache.
    pub cached_prompt_tokens: usize,
    /// Tokens of the answer.
    pub completion_tokens: usize,
    /// The backend that answered, where the model chooses among several.
    pub model: Option<String>,
}

/// Runs a request to the end.
pub async fn complete(llm: &dyn Llm, request: LlmRequest) -> Result<LlmOutput> {
    let mut stream = llm.chat(request)?;
    let mut out = LlmOutput::default();
    while let Some(ev) = stream.next().await {
        match ev? {
            LlmEvent::Text(t) => out.text.push_str(&t),
            LlmEvent::Reasoning(t) => out.reasoning.push_str(&t),
            LlmEvent::Done {
                finish,
                prompt_tokens,
                cached_prompt_tokens,
                completion_tokens,
                model,
            } => {
                out.model = model;
                out.finish = finish;
                out.prompt_tokens = prompt_tokens;
                out.cached_prompt_tokens = cached_prompt_tokens;
                out.completion_tokens = completion_tokens;
            }
        }
    }
    Ok(out)
}
