//! `POST /v1/chat/completions`: one answer as JSON, or a stream of server-sent chunks.
//! Tool calls come back in OpenAI's `tool_calls`, reasoning as `reasoning_content`.

pub(super) mod request;

use super::answer::{Answer, Part};
use super::app::{off_the_runtime, App};
use super::error::ApiError;
use super::reply::{body_bytes, finish_reason, unix_now, usage_json, RequestId};
use super::request::{json_object, ChatCall};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Summary, ToolCall};
use request::chat_call;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

pub async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, start).await {
        Ok((call, answer)) => {
            let reply = Reply::new(&app, call.include_usage);
            if call.stream {
                streamed(reply, answer)
            } else {
                match whole(reply, answer).await {
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
    app: &Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(ChatCall, Answer), ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let (mcp, names) = app.mcp_tools();
    let call = chat_call(&body, &app.engine.info().sampling, &names)?;
    let answer = Answer::start(app, &call, mcp)?;
    Ok((call, answer))
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
            "system_fingerprint": super::reply::FINGERPRINT,
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
async fn whole(mut reply: Reply, mut answer: Answer) -> Result<Value, ApiError> {
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), vec![]);
    let (mut invalid, mut mcp_calls) = (vec![], vec![]);
    let summary = loop {
        match answer.next().await {
            Some(Part::McpCalls(log)) => mcp_calls.extend(log),
            Some(Part::Text(t)) => content.push_str(&t),
            Some(Part::Reasoning(t)) => reasoning.push_str(&t),
            Some(Part::Invalid { error, raw }) => invalid.push(json!({"error": error, "raw": raw})),
            // Streamed calls come whole at their end.
            Some(Part::CallOpen(_) | Part::CallArgs(_)) => {}
            Some(Part::Call(c) | Part::CallEnd(c)) => {
                let mut call = reply.call_json(&c);
                // `index` belongs to streamed deltas only.
                if let Some(o) = call.as_object_mut() {
                    o.remove("index");
                }
                calls.push(call)
            }
            Some(Part::Done(s)) => break s,
            Some(Part::Failed(message)) => return Err(ApiError::internal(message)),
            None => return Err(ApiError::internal("the engine stopped")),
        }
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if !invalid.is_empty() {
        // Calls that could not be read: not in `content`, and not lost.
        message["invalid_tool_calls"] = Value::Array(invalid);
    }
    if !mcp_calls.is_empty() {
        // What the server ran on its MCP tools on the way to this answer.
        message["mcp_calls"] = Value::Array(mcp_calls);
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
        "system_fingerprint": super::reply::FINGERPRINT,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": reply.finish(&summary)}],
        "usage": usage_json(&summary),
        "timings": super::reply::timings_json(&summary),
    }))
}

/// Chunks as server-sent events. A client that goes away cancels the generation: the
/// task sees the channel close and drops the engine's stream.
fn streamed(mut reply: Reply, mut answer: Answer) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(async move {
        let first = reply.chunk(json!({"role": "assistant", "content": ""}), None);
        if tx.send(first).await.is_err() {
            return;
        }
        loop {
            let part = tokio::select! {
                _ = tx.closed() => return,
                p = answer.next() => p,
            };
            let (delta, done) = match part {
                Some(Part::Text(t)) => (json!({"content": t}), false),
                Some(Part::Reasoning(t)) => (json!({"reasoning_content": t}), false),
                Some(Part::McpCalls(log)) => (json!({"mcp_calls": log}), false),
                Some(Part::Call(c)) => (json!({"tool_calls": [reply.call_json(&c)]}), false),
                Some(Part::CallOpen(name)) => {
                    (json!({"tool_calls": [reply.call_open(&name)]}), false)
                }
                Some(Part::CallArgs(args)) => {
                    (json!({"tool_calls": [reply.call_args(&args)]}), false)
                }
                // Every piece of it has gone out.
                Some(Part::CallEnd(_)) => continue,
                Some(Part::Invalid { error, raw }) => (
                    json!({"invalid_tool_calls": [{"error": error, "raw": raw}]}),
                    false,
                ),
                Some(Part::Done(summary)) => {
                    let mut out = vec![reply.chunk(json!({}), Some(reply.finish(&summary)))];
                    if reply.include_usage {
                        let mut last = reply.chunk(json!({}), None);
                        last["choices"] = json!([]);
                        last["usage"] = usage_json(&summary);
                        out.push(last);
                    }
                    let _ = super::reply::send_all(&tx, out).await;
                    return;
                }
                Some(Part::Failed(message)) => (ApiError::internal(message).body(), true),
                None => (ApiError::internal("the engine stopped").body(), true),
            };
            let chunk = if done {
                delta
            } else {
                reply.chunk(delta, None)
            };
            if tx.send(chunk).await.is_err() || done {
                return;
            }
        }
    });
    super::reply::event_stream(rx)
}
