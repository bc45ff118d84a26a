//! What callers read: the events of one request, and of a chat answer with reasoning told
//! apart from the text.

use crate::chat::{ChatMessage, Piece, ThinkingSplitter};
use crate::generation::Event;
use crate::sampling::SamplingParams;
use serde_json::Value;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Events of one request. Dropping it cancels the generation.
pub struct EventStream {
    pub(crate) rx: mpsc::UnboundedReceiver<Event>,
    pub(crate) ended: Arc<AtomicBool>,
    pub(crate) prompt_tokens: usize,
}

impl EventStream {
    /// Ends the answer after the token being made: the stream then closes with the summary
    /// ([`crate::FinishReason::Ended`]), unlike a drop, which loses it.
    pub fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }

    /// The next event; `None` once the generation has ended.
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// The prompt's length in tokens (APIs that report it before the answer, as Anthropic's
    /// `message_start` does).
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// For callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<Event> {
        self.rx.blocking_recv()
    }
}

impl tokio_stream::Stream for EventStream {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

/// A chat request: messages, tools, and per-call overrides of the model's defaults.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Tool definitions (JSON schemas) offered to the model.
    pub tools: Option<Vec<Value>>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// `None` takes the model's defaults.
    pub sampling: Option<SamplingParams>,
    /// `None` takes the model's stop strings; `Some` replaces them for this call.
    pub stop: Option<Vec<String>>,
    /// Turns the model's thinking on or off; `None` leaves it to the template.
    pub enable_thinking: Option<bool>,
    /// Keep the KV cache of this conversation between calls.
    pub session: Option<String>,
    /// Text the answer starts with: appended to the prompt after the generation prompt, so
    /// the model continues it (a forced `<tool_call>` opening, say). It is not streamed back.
    pub prefill: Option<String>,
    /// The language the answer must stay in (see [`crate::GenerateRequest::constraint`]);
    /// it applies to what the model writes after the prompt and `prefill`.
    pub constraint: Option<crate::constraint::Constraint>,
    /// The messages' images, in the order their markers ([`crate::ImageSupport::marker`])
    /// stand in the messages' text ([`crate::Engine::image`] prepares each).
    pub images: Vec<crate::vision::ImageInput>,
}

/// Events of a chat answer: [`Event::Reasoning`] and [`Event::Text`] kept apart.
pub struct ChatStream {
    pub(crate) events: EventStream,
    pub(crate) thinking: Option<ThinkingSplitter>,
    pub(crate) ready: VecDeque<Event>,
}

impl ChatStream {
    /// Ends the answer where it is (see [`EventStream::end`]).
    pub fn end(&self) {
        self.events.end();
    }

    /// The prompt's length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.events.prompt_tokens
    }

    /// The next event; `None` once the answer has ended.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            let e = self.events.next().await?;
            self.route(e);
        }
    }

    /// [`ChatStream::next`] for callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            let e = self.events.blocking_next()?;
            self.route(e);
        }
    }

    fn route(&mut self, e: Event) {
        let Some(split) = &mut self.thinking else {
            self.ready.push_back(e);
            return;
        };
        let pieces = match &e {
            Event::Text { text } => split.push(text),
            Event::Finished(_) | Event::Error { .. } => split.flush(),
            _ => vec![],
        };
        for p in pieces {
            self.ready.push_back(match p {
                Piece::Reasoning(text) => Event::Reasoning { text },
                Piece::Answer(text) => Event::Text { text },
            });
        }
        if !matches!(e, Event::Text { .. }) {
            self.ready.push_back(e);
        }
    }
}
