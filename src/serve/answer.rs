//! One answer as every API reads it: a checked [`ChatCall`] queued on the engine, and its
//! events with tool calls split from the text. Each API (chat completions, Anthropic's
//! messages, OpenAI's responses) only dresses these parts in its own shape.

use super::error::ApiError;
use super::request::ChatCall;
use super::tool_stream::{Piece, ToolCallSplitter};
use super::{App, Closing};
use hearth_engine::chat::tool_call::CLOSE;
use hearth_engine::{
    ChatRequest, ChatStream, Constraint, EngineError, Event, Summary, ToolCall, ToolChoice,
};
use std::collections::VecDeque;

/// What an answer is made of, in order.
#[derive(Debug)]
pub enum Part {
    Text(String),
    Reasoning(String),
    /// A whole call at once.
    Call(ToolCall),
    /// A call going out as it is written: its function, then pieces of its arguments' JSON,
    /// then the call read whole.
    CallOpen(String),
    CallArgs(String),
    CallEnd(ToolCall),
    /// A call that could not be read: why, and what the model wrote.
    Invalid {
        error: String,
        raw: String,
    },
    /// The last part of an answer that ended.
    Done(Summary),
    /// The last part of an answer the engine could not finish.
    Failed(String),
}

impl From<Piece> for Part {
    fn from(p: Piece) -> Self {
        match p {
            Piece::Text(t) => Part::Text(t),
            Piece::Call(c) => Part::Call(c),
            Piece::CallOpen { name } => Part::CallOpen(name),
            Piece::CallArgs(a) => Part::CallArgs(a),
            Piece::CallEnd(c) => Part::CallEnd(c),
            Piece::Invalid { error, raw } => Part::Invalid { error, raw },
        }
    }
}

/// A queued answer, read part by part.
pub struct Answer {
    app: std::sync::Arc<App>,
    stream: ChatStream,
    splitter: ToolCallSplitter,
    closing: Closing,
    ready: VecDeque<Part>,
    over: bool,
}

impl Answer {
    /// Queues `call` on the engine: decoded under its `response_format`, or with tools
    /// offered, under the grammar of the model's tool calls as `tool_choice` allows them.
    pub fn start(app: &std::sync::Arc<App>, call: &ChatCall) -> Result<Self, ApiError> {
        let info = app.engine.info();
        let offered = call.tool_choice != ToolChoice::None && !call.tools.is_empty();
        let constraint = constraint(app, call)?;
        let mut stop = info.stop_strings.clone();
        stop.extend(call.stop.iter().cloned());
        if offered && !call.parallel_tool_calls {
            // One call: the answer ends at its closing tag (the call is read without it).
            stop.push(CLOSE.into());
        }
        let stream = app
            .engine
            .chat(ChatRequest {
                messages: call.messages.clone(),
                tools: offered.then(|| call.tools.clone()),
                max_tokens: call.max_tokens.unwrap_or(info.max_positions),
                sampling: Some(call.sampling.clone()),
                stop: Some(stop),
                enable_thinking: call.enable_thinking,
                session: None,
                prefill: call.prefill.clone(),
                constraint,
            })
            .map_err(|e| match e {
                // The schema is the client's: say which field it came from.
                EngineError::InvalidArgument {
                    arg: "constraint",
                    message,
                } => ApiError::invalid("response_format", message),
                e => ApiError::from(e),
            })?;
        let splitter = match offered {
            true => ToolCallSplitter::new(call.tools.clone(), call.tool_names.clone()),
            false => ToolCallSplitter::new(vec![], vec![]),
        };
        Ok(Self {
            app: app.clone(),
            stream,
            splitter,
            closing: Closing::new(app),
            ready: VecDeque::new(),
            over: false,
        })
    }

    /// The prompt's length in tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.stream.prompt_tokens()
    }

    /// The next part; `None` after [`Part::Done`] or [`Part::Failed`]. Once the server is
    /// closing, the answer ends after the token being made and still ends with `Done`.
    pub async fn next(&mut self) -> Option<Part> {
        while self.ready.is_empty() && !self.over {
            let parts: Vec<Part> = match self.closing.next(&mut self.stream).await {
                Some(Event::Text { text }) => {
                    let pieces = self.splitter.push(&text);
                    if self.splitter.repeated() {
                        // The model repeats a call it made: it is looping.
                        self.stream.end();
                    }
                    pieces.into_iter().map(Part::from).collect()
                }
                Some(Event::Reasoning { text }) => vec![Part::Reasoning(text)],
                Some(Event::Token { .. }) => vec![],
                Some(Event::Finished(summary)) => {
                    self.over = true;
                    self.app.metrics.finished(&summary);
                    let mut parts: Vec<Part> =
                        self.splitter.finish().into_iter().map(Part::from).collect();
                    parts.push(Part::Done(summary));
                    parts
                }
                Some(Event::Error { message }) => {
                    self.over = true;
                    vec![Part::Failed(message)]
                }
                None => {
                    self.over = true;
                    vec![Part::Failed("the engine stopped".into())]
                }
            };
            self.ready.extend(parts);
        }
        self.ready.pop_front()
    }
}

/// What the answer is decoded under: the `response_format` schema, or with tools offered,
/// the grammar of Qwen's tool calls as `tool_choice` allows them (calls always parse, name an
/// offered tool and carry arguments valid against its schema; `required` and a named tool
/// force a call).
fn constraint(app: &App, call: &ChatCall) -> Result<Option<Constraint>, ApiError> {
    if call.tools.is_empty() || !app.constrain_tools {
        return Ok(call.response_format.clone());
    }
    let choice = &call.tool_choice;
    match (&call.response_format, choice) {
        (Some(_), ToolChoice::Required | ToolChoice::Named(_)) => Err(ApiError::invalid(
            "response_format",
            "a forced tool call and a response_format cannot both hold",
        )),
        // The answer must be that JSON: no call can open.
        (Some(format), _) => Ok(Some(format.clone())),
        // Text only: nothing to constrain.
        (None, ToolChoice::None) => Ok(None),
        (None, _) => Ok(app.engine.grammars()?.tool_calls(&call.tools, choice)?),
    }
}

/// An API's shape of an answer: the events that open its stream, and those each part makes
/// (the shape keeps what the whole answer needs).
pub trait Shape: Send + 'static {
    fn start(&mut self) -> Vec<serde_json::Value>;
    fn take(&mut self, part: Part) -> Vec<serde_json::Value>;
}

/// Reads the whole answer into `shape`; its summary, or why it failed.
pub async fn read_whole<S: Shape>(shape: &mut S, mut answer: Answer) -> Result<Summary, ApiError> {
    loop {
        match answer.next().await {
            Some(Part::Done(s)) => {
                shape.take(Part::Done(s.clone()));
                return Ok(s);
            }
            Some(Part::Failed(m)) => return Err(ApiError::internal(m)),
            Some(part) => {
                shape.take(part);
            }
            None => return Err(ApiError::internal("the engine stopped")),
        }
    }
}

/// Streams `shape`'s events, each named by its `type`. A client that goes away cancels the
/// generation: the task sees the channel close and drops the engine's stream.
pub fn stream_events<S: Shape>(mut shape: S, mut answer: Answer) -> axum::response::Response {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        if super::send_all(&tx, shape.start()).await.is_err() {
            return;
        }
        loop {
            let part = tokio::select! {
                _ = tx.closed() => return,
                p = answer.next() => p,
            };
            let Some(part) = part else { return };
            let last = matches!(part, Part::Done(_) | Part::Failed(_));
            if super::send_all(&tx, shape.take(part)).await.is_err() || last {
                return;
            }
        }
    });
    super::typed_event_stream(rx)
}
