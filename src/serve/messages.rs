//! `POST /v1/messages` (Anthropic's Messages API) and `/v1/messages/count_tokens`: the
//! answer as `thinking`, `text` and `tool_use` content blocks, whole or streamed as
//! Anthropic's events (`message_start`, `content_block_start`, `content_block_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`); errors in Anthropic's shape.

pub(super) mod request;

use super::answer::{offer_server_tools, read_whole, stream_events, Answer, Part, Shape};
use super::app::{off_the_runtime, App};
use super::error::{AnthropicError, ApiError};
use super::reply::{body_bytes, RequestId};
use super::request::{json_object, ChatCall};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{ChatInput, FinishReason, Summary};
use serde_json::{json, Value};
use std::sync::Arc;

pub async fn messages(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, start).await {
        Ok((call, answer)) => {
            let message = Message::new(&app, &call, answer.prompt_tokens());
            if call.stream {
                stream_events(message, answer)
            } else {
                match whole(message, answer).await {
                    Ok(v) => Json(v).into_response(),
                    Err(e) => AnthropicError(e).into_response(),
                }
            }
        }
        Err(e) => AnthropicError(e).into_response(),
    }
}

fn start(
    app: &Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(ChatCall, Answer), ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let (mcp, names) = app.mcp_tools();
    let call = request::messages_call(&body, &app.engine.info().sampling, false, &names)?;
    let answer = Answer::start(app, &call, mcp)?;
    Ok((call, answer))
}

/// `POST /v1/messages/count_tokens`: the prompt's length as the model would see it.
pub async fn count_tokens(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, count).await {
        Ok(n) => Json(json!({"input_tokens": n})).into_response(),
        Err(e) => AnthropicError(e).into_response(),
    }
}

fn count(app: &Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<usize, ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let (mcp, names) = app.mcp_tools();
    let mut call = request::messages_call(&body, &app.engine.info().sampling, true, &names)?;
    // The prompt as the answer would have it: with the server's tools.
    offer_server_tools(&mut call, mcp.as_ref());
    let offered = call.tool_choice != hearth_engine::ToolChoice::None && !call.tools.is_empty();
    let mut prompt = app.engine.render(&ChatInput {
        messages: &call.messages,
        tools: offered.then_some(&call.tools[..]),
        add_generation_prompt: true,
        enable_thinking: call.enable_thinking,
        extra: Default::default(),
    })?;
    prompt.push_str(call.prefill.as_deref().unwrap_or_default());
    Ok(app.engine.tokenizer().encode(&prompt)?.len())
}

/// The block being written.
enum Open {
    Text(String),
    Thinking(String),
    ToolUse { id: String, name: String },
}

/// One answer in Anthropic's shape: its content blocks as they close, and the events that
/// stream them.
struct Message {
    id: String,
    model: String,
    prompt_tokens: usize,
    /// The client's `stop_sequences`: a match is reported as `stop_sequence`.
    stops: Vec<String>,
    blocks: Vec<Value>,
    open: Option<Open>,
}

impl Message {
    fn new(app: &App, call: &ChatCall, prompt_tokens: usize) -> Self {
        Self {
            id: format!("msg_{}", RequestId::next()),
            model: app.model_id.clone(),
            prompt_tokens,
            stops: call.stop.clone(),
            blocks: vec![],
            open: None,
        }
    }

    fn index(&self) -> usize {
        self.blocks.len()
    }

    fn delta(&self, delta: Value) -> Value {
        json!({"type": "content_block_delta", "index": self.index(), "delta": delta})
    }

    fn open(&mut self, open: Open, out: &mut Vec<Value>) {
        let block = match &open {
            Open::Text(_) => json!({"type": "text", "text": ""}),
            Open::Thinking(_) => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Open::ToolUse { id, name } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        };
        out.push(
            json!({"type": "content_block_start", "index": self.index(), "content_block": block}),
        );
        self.open = Some(open);
    }

    fn open_call(&mut self, name: &str, out: &mut Vec<Value>) {
        self.close(out);
        let id = format!("toolu_{}", RequestId::next());
        self.open(
            Open::ToolUse {
                id,
                name: name.to_string(),
            },
            out,
        );
    }

    /// Closes the open call with its arguments, read whole.
    fn close_call(&mut self, input: Value, out: &mut Vec<Value>) {
        if let Some(Open::ToolUse { id, name }) = self.open.take() {
            out.push(json!({"type": "content_block_stop", "index": self.index()}));
            self.blocks
                .push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        let block = match self.open.take() {
            None => return,
            Some(Open::Text(text)) => json!({"type": "text", "text": text}),
            Some(Open::Thinking(text)) => {
                json!({"type": "thinking", "thinking": text, "signature": ""})
            }
            // A call cut off before its arguments were whole: what was read of it.
            Some(Open::ToolUse { id, name }) => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        };
        out.push(json!({"type": "content_block_stop", "index": self.index()}));
        self.blocks.push(block);
    }

    fn stop_reason(&self, reason: &FinishReason) -> (&'static str, Option<String>) {
        let called = self.blocks.iter().any(|b| b["type"] == "tool_use");
        match reason {
            FinishReason::MaxTokens | FinishReason::ContextFull => ("max_tokens", None),
            _ if called => ("tool_use", None),
            FinishReason::StopString { text } if self.stops.contains(text) => {
                ("stop_sequence", Some(text.clone()))
            }
            _ => ("end_turn", None),
        }
    }
}

impl Shape for Message {
    /// Anthropic's own keep-alive event.
    fn idle(&mut self) -> Vec<Value> {
        vec![json!({"type": "ping"})]
    }

    fn start(&mut self) -> Vec<Value> {
        let start = json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
        }});
        vec![start, json!({"type": "ping"})]
    }

    /// The events `part` makes, its blocks kept for the whole answer.
    fn take(&mut self, part: Part) -> Vec<Value> {
        let mut out = vec![];
        match part {
            // The calls the server ran have no place in this API's shape; their results
            // are in the text that follows.
            Part::McpCalls(_) => {}
            Part::Text(t) | Part::Invalid { raw: t, .. } => {
                if t.is_empty() {
                    return out;
                }
                if !matches!(self.open, Some(Open::Text(_))) {
                    self.close(&mut out);
                    self.open(Open::Text(String::new()), &mut out);
                }
                if let Some(Open::Text(text)) = &mut self.open {
                    text.push_str(&t);
                }
                out.push(self.delta(json!({"type": "text_delta", "text": t})));
            }
            Part::Reasoning(t) => {
                if !matches!(self.open, Some(Open::Thinking(_))) {
                    self.close(&mut out);
                    self.open(Open::Thinking(String::new()), &mut out);
                }
                if let Some(Open::Thinking(text)) = &mut self.open {
                    text.push_str(&t);
                }
                out.push(self.delta(json!({"type": "thinking_delta", "thinking": t})));
            }
            Part::Call(c) => {
                self.open_call(&c.function.name, &mut out);
                let args = c.function.arguments.to_string();
                out.push(self.delta(json!({"type": "input_json_delta", "partial_json": args})));
                self.close_call(c.function.arguments, &mut out);
            }
            Part::CallOpen(name) => self.open_call(&name, &mut out),
            Part::CallArgs(args) => {
                out.push(self.delta(json!({"type": "input_json_delta", "partial_json": args})))
            }
            Part::CallEnd(c) => self.close_call(c.function.arguments, &mut out),
            Part::Done(summary) => {
                self.close(&mut out);
                let (reason, sequence) = self.stop_reason(&summary.reason);
                out.push(json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": usage(&summary),
                }));
                out.push(json!({"type": "message_stop"}));
            }
            Part::Failed(message) => out.push(error_event(&ApiError::internal(message))),
        }
        out
    }
}

/// Anthropic's usage: `input_tokens` are those not read from the cache.
fn usage(s: &Summary) -> Value {
    let u = &s.usage;
    json!({
        "input_tokens": u.prompt_tokens - u.cached_prompt_tokens,
        "cache_read_input_tokens": u.cached_prompt_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": u.completion_tokens,
    })
}

fn error_event(e: &ApiError) -> Value {
    AnthropicError(e.clone()).body()
}

/// The whole answer as one `message`.
async fn whole(mut message: Message, answer: Answer) -> Result<Value, ApiError> {
    let summary = read_whole(&mut message, answer).await?;
    let (reason, sequence) = message.stop_reason(&summary.reason);
    Ok(json!({
        "id": message.id,
        "type": "message",
        "role": "assistant",
        "model": message.model,
        "content": message.blocks,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(&summary),
    }))
}
