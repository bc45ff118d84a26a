//! `POST /v1/chat/completions`: one answer as JSON, or a stream of server-sent chunks.
//! Tool calls come back in OpenAI's `tool_calls`, reasoning as `reasoning_content`.

use super::error::ApiError;
use super::request::{chat_call, json_object, ChatCall};
use super::tool_stream::{Piece, ToolCallSplitter};
use super::{
    body_bytes, finish_reason, off_the_runtime, unix_now, usage_json, App, Closing, RequestId,
};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::chat::tool_call::CLOSE;
use hearth_engine::{
    ChatRequest, ChatStream, Constraint, EngineError, Event, Summary, ToolCall, ToolChoice,
};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, start).await {
        Ok((call, stream, splitter)) => {
            let reply = Reply::new(&app, call.include_usage);
            let closing = Closing::new(&app);
            if call.stream {
                streamed(reply, stream, splitter, closing)
            } else {
                match whole(reply, stream, splitter, closing).await {
                    Ok(v) => Json(v).into_response(),
                    Err(e) => e.into_response(),
                }
            }
        }
        Err(e) => e.into_response(),
    }
}

/// Checks the request and queues it on the engine.
fn start(
    app: &App,
    body: Result<Bytes, BytesRejection>,
) -> Result<(ChatCall, ChatStream, ToolCallSplitter), ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let info = app.engine.info();
    let call = chat_call(&body, &info.sampling)?;
    let offered = call.tool_choice != ToolChoice::None && !call.tools.is_empty();
    let constraint = constraint(app, &call)?;
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
            prefill: None,
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
    Ok((call, stream, splitter))
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

/// What every chunk and the final answer share.
struct Reply {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    calls: usize,
}

impl Reply {
    fn new(app: &App, include_usage: bool) -> Self {
        Self {
            id: format!("chatcmpl-{}", RequestId::next()),
            created: unix_now(),
            model: app.model_id.clone(),
            include_usage,
            calls: 0,
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": super::FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    }

    /// A call in OpenAI's form: an id of its own, arguments as a JSON string.
    fn call_json(&mut self, call: &ToolCall) -> Value {
        let index = self.calls;
        self.calls += 1;
        json!({
            "index": index,
            "id": call.id.clone().unwrap_or_else(|| format!("call_{}", RequestId::next())),
            "type": "function",
            "function": {
                "name": call.function.name,
                "arguments": call.function.arguments.to_string(),
            },
        })
    }

    /// The first delta of a call streamed as it is written: its id and name, no arguments yet.
    fn call_open(&mut self, name: &str) -> Value {
        let index = self.calls;
        self.calls += 1;
        json!({
            "index": index,
            "id": format!("call_{}", RequestId::next()),
            "type": "function",
            "function": {"name": name, "arguments": ""},
        })
    }

    /// The next piece of the arguments of the call [`Reply::call_open`] opened last.
    fn call_args(&self, args: &str) -> Value {
        json!({"index": self.calls.saturating_sub(1), "function": {"arguments": args}})
    }

    fn finish(&self, summary: &Summary) -> &'static str {
        finish_reason(&summary.reason, self.calls > 0)
    }
}

/// The whole answer as one `chat.completion`.
async fn whole(
    mut reply: Reply,
    mut stream: ChatStream,
    mut splitter: ToolCallSplitter,
    mut closing: Closing,
) -> Result<Value, ApiError> {
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), vec![]);
    let mut invalid = vec![];
    let mut take = |pieces: Vec<Piece>, reply: &mut Reply, content: &mut String| {
        for p in pieces {
            match p {
                Piece::Text(t) => content.push_str(&t),
                Piece::Invalid { error, raw } => invalid.push(json!({"error": error, "raw": raw})),
                // Streamed calls come whole at their end.
                Piece::CallOpen { .. } | Piece::CallArgs(_) => {}
                Piece::Call(c) | Piece::CallEnd(c) => {
                    let mut call = reply.call_json(&c);
                    // `index` belongs to streamed deltas only.
                    if let Some(o) = call.as_object_mut() {
                        o.remove("index");
                    }
                    calls.push(call)
                }
            }
        }
    };
    let summary = loop {
        match closing.next(&mut stream).await {
            Some(Event::Text { text }) => {
                take(splitter.push(&text), &mut reply, &mut content);
                if splitter.repeated() {
                    stream.end();
                }
            }
            Some(Event::Reasoning { text }) => reasoning.push_str(&text),
            Some(Event::Token { .. }) => {}
            Some(Event::Finished(s)) => break s,
            Some(Event::Error { message }) => return Err(ApiError::internal(message)),
            None => return Err(ApiError::internal("the engine stopped")),
        }
    };
    take(splitter.finish(), &mut reply, &mut content);
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if !invalid.is_empty() {
        // Calls that could not be read: not in `content`, and not lost.
        message["invalid_tool_calls"] = Value::Array(invalid);
    }
    if !calls.is_empty() {
        // OpenAI's shape: content is null when the answer is only calls.
        if content.trim().is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = Value::Array(calls);
    }
    Ok(json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "system_fingerprint": super::FINGERPRINT,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": reply.finish(&summary)}],
        "usage": usage_json(&summary),
        "timings": super::timings_json(&summary),
    }))
}

/// Chunks as server-sent events. A client that goes away cancels the generation: the
/// task sees the channel close and drops the engine's stream.
fn streamed(
    mut reply: Reply,
    mut stream: ChatStream,
    mut splitter: ToolCallSplitter,
    mut closing: Closing,
) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(async move {
        let first = reply.chunk(json!({"role": "assistant", "content": ""}), None);
        if tx.send(first).await.is_err() {
            return;
        }
        loop {
            let event = tokio::select! {
                _ = tx.closed() => return,
                e = closing.next(&mut stream) => e,
            };
            let mut out = vec![];
            let pieces = |pieces: Vec<Piece>, reply: &mut Reply, out: &mut Vec<Value>| {
                for p in pieces {
                    let delta = match p {
                        Piece::Text(t) => json!({"content": t}),
                        Piece::Call(c) => json!({"tool_calls": [reply.call_json(&c)]}),
                        Piece::CallOpen { name } => json!({"tool_calls": [reply.call_open(&name)]}),
                        Piece::CallArgs(args) => json!({"tool_calls": [reply.call_args(&args)]}),
                        // Every piece of it has gone out.
                        Piece::CallEnd(_) => continue,
                        Piece::Invalid { error, raw } => {
                            json!({"invalid_tool_calls": [{"error": error, "raw": raw}]})
                        }
                    };
                    out.push(reply.chunk(delta, None));
                }
            };
            let mut done = false;
            match event {
                Some(Event::Text { text }) => {
                    pieces(splitter.push(&text), &mut reply, &mut out);
                    if splitter.repeated() {
                        stream.end();
                    }
                }
                Some(Event::Reasoning { text }) => {
                    out.push(reply.chunk(json!({"reasoning_content": text}), None))
                }
                Some(Event::Token { .. }) => {}
                Some(Event::Finished(summary)) => {
                    pieces(splitter.finish(), &mut reply, &mut out);
                    out.push(reply.chunk(json!({}), Some(reply.finish(&summary))));
                    if reply.include_usage {
                        let mut last = reply.chunk(json!({}), None);
                        last["choices"] = json!([]);
                        last["usage"] = usage_json(&summary);
                        out.push(last);
                    }
                    done = true;
                }
                Some(Event::Error { message }) => {
                    out.push(ApiError::internal(message).body());
                    done = true;
                }
                None => {
                    out.push(ApiError::internal("the engine stopped").body());
                    done = true;
                }
            }
            if super::send_all(&tx, out).await.is_err() {
                return;
            }
            if done {
                return;
            }
        }
    });
    super::event_stream(rx)
}
