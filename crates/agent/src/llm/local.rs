//! Hearth's engine as an [`Llm`], in process: no network hop, and each session's KV cache is
//! kept between calls so only the tokens after the common prefix are run again.

use super::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::error::{AgentError, Result};
use crate::image;
use hearth_chat::ChatMessage;
use hearth_engine::vision::ImageInput;
use hearth_engine::ToolChoice;
use hearth_engine::{ChatRequest, Constraint, Engine, Event, FinishReason};
use std::sync::Arc;

/// Hearth's [`Engine`] in this process, as an [`Llm`].
#[derive(Clone)]
pub struct LocalLlm {
    engine: Arc<Engine>,
    max_tokens: usize,
    constrain_tool_calls: bool,
}

impl LocalLlm {
    /// The engine, answering up to 512 tokens, tool calls constrained.
    pub fn new(engine: Arc<Engine>) -> Self {
        Self {
            engine,
            max_tokens: 512,
            constrain_tool_calls: true,
        }
    }

    /// Whether answers with tools offered are decoded under the grammar of Qwen's tool calls
    /// (default on): every `<tool_call>` then parses, names an offered tool and carries
    /// arguments valid against its schema. Off for a chat format that writes calls otherwise.
    pub fn with_constrained_tool_calls(mut self, on: bool) -> Self {
        self.constrain_tool_calls = on;
        self
    }

    /// The tool-call grammar for `tools`, or none (nothing offered, turned off, or a schema
    /// the grammar compiler refuses: then the answer is free and the parser repairs it).
    fn tool_constraint(&self, tools: &[serde_json::Value]) -> Option<Constraint> {
        if tools.is_empty() || !self.constrain_tool_calls {
            return None;
        }
        match self
            .engine
            .grammars()
            .and_then(|g| g.tool_calls(tools, &ToolChoice::Auto))
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("tool calls left unconstrained: {e}");
                None
            }
        }
    }

    /// The answer length when a request does not set one (lagent's default is 512).
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n;
        self
    }

    /// The engine it runs on.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// `messages` with each image they hold ([`crate::image`]) as the model's image marker,
    /// and the images in order; for a model without vision, or an image it cannot read, a
    /// note in its place (a tool's screenshot must not stop the agent).
    fn with_images(&self, messages: Vec<ChatMessage>) -> (Vec<ChatMessage>, Vec<ImageInput>) {
        let support = self.engine.info().images.as_ref();
        let mut images = vec![];
        let messages = messages
            .into_iter()
            .map(|mut m| {
                if let Some(text) = m.content.as_deref().filter(|t| image::has_images(t)) {
                    let text = image::replace_images(text, |_, bytes| {
                        let Some(support) = support else {
                            return image::TEXT_ONLY_NOTE.to_string();
                        };
                        match self.engine.image(&bytes) {
                            Ok(i) => {
                                images.push(i);
                                support.marker.clone()
                            }
                            Err(e) => {
                                tracing::warn!("an image in the {} message: {e}", m.role);
                                format!("[an image that could not be read: {e}]")
                            }
                        }
                    });
                    m.content = Some(text);
                }
                m
            })
            .collect();
        (messages, images)
    }
}

impl Llm for LocalLlm {
    fn chat(&self, r: LlmRequest) -> Result<LlmStream> {
        let constraint = self.tool_constraint(&r.tools);
        let (messages, images) = self.with_images(r.messages);
        let stream = self.engine.chat(ChatRequest {
            messages,
            tools: if r.tools.is_empty() {
                None
            } else {
                Some(r.tools)
            },
            max_tokens: r.max_tokens.unwrap_or(self.max_tokens),
            sampling: r.sampling,
            stop: r.stop,
            enable_thinking: r.enable_thinking,
            session: r.session,
            prefill: None,
            constraint,
            images,
        })?;
        let events = futures::stream::unfold(Some(stream), |state| async move {
            let mut stream = state?;
            loop {
                // The engine always ends a stream with `Finished` or `Error`; a stream that
                // just ends lost its worker, and its text must not pass for a whole answer.
                let Some(event) = stream.next().await else {
                    let gone = AgentError::Llm("the engine stopped before the answer ended".into());
                    return Some((Err(gone), None));
                };
                let item = match event {
                    Event::Text { text } => Ok(LlmEvent::Text(text)),
                    Event::Reasoning { text } => Ok(LlmEvent::Reasoning(text)),
                    Event::Token { .. } => continue,
                    Event::Finished(s) => {
                        let finish = match s.reason {
                            FinishReason::MaxTokens | FinishReason::ContextFull => "length",
                            FinishReason::Cancelled => "cancelled",
                            FinishReason::StopToken { .. }
                            | FinishReason::StopString { .. }
                            | FinishReason::Ended => "stop",
                        };
                        let done = LlmEvent::Done {
                            finish: finish.into(),
                            prompt_tokens: s.usage.prompt_tokens,
                            cached_prompt_tokens: s.usage.cached_prompt_tokens,
                            completion_tokens: s.usage.completion_tokens,
                            model: None,
                        };
                        return Some((Ok(done), None));
                    }
                    Event::Error { message } => return Some((Err(AgentError::Llm(message)), None)),
                };
                return Some((item, Some(stream)));
            }
        });
        Ok(Box::pin(events))
    }

    fn end_session(&self, session: &str) {
        let _ = self.engine.release_session(session);
    }

    fn name(&self) -> String {
        self.engine.info().origin.clone()
    }

    fn tool_format(&self) -> hearth_engine::ToolFormat {
        self.engine.info().tool_format
    }
}
