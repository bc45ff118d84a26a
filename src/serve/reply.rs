//! What the handlers send back: the request body read under its limit, OpenAI's usage,
//! timings and finish reasons, answer ids, and server-sent event streams.

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use hearth_engine::{FinishReason, Summary};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// Sent as `system_fingerprint`: which server answered.
pub const FINGERPRINT: &str = concat!("hearth-", env!("CARGO_PKG_VERSION"));

/// The request body, or an error in OpenAI's shape (413 past the limit).
pub fn body_bytes(body: Result<Bytes, BytesRejection>, limit: usize) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_body(format!("cannot read the request body: {e}"))
        }
    })
}

pub fn finish_reason(reason: &FinishReason, called: bool) -> &'static str {
    match reason {
        FinishReason::MaxTokens | FinishReason::ContextFull => "length",
        _ if called => "tool_calls",
        _ => "stop",
    }
}

pub fn usage_json(s: &Summary) -> Value {
    let u = &s.usage;
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
    })
}

/// llama-server's `timings`: where the time of a request went.
pub fn timings_json(s: &Summary) -> Value {
    let t = &s.timings;
    json!({
        "prompt_n": s.usage.prompt_tokens - s.usage.cached_prompt_tokens,
        "prompt_ms": t.prefill_s * 1e3,
        "prompt_per_second": t.prefill_tok_s,
        "predicted_n": s.usage.completion_tokens,
        "predicted_ms": t.decode_s * 1e3,
        "predicted_per_second": t.decode_tok_s,
        "first_token_ms": t.first_token_s * 1e3,
        "draft_n": s.usage.draft_tokens,
        "draft_n_accepted": s.usage.accepted_draft_tokens,
    })
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unique ids for answers and tool calls: the process start time and a counter.
pub struct RequestId;

impl RequestId {
    pub fn next() -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let start = *START.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        format!("{start:x}{:06x}", COUNTER.fetch_add(1, Ordering::Relaxed))
    }
}

/// Sends `values` in order; an error once the client has gone.
pub async fn send_all(tx: &tokio::sync::mpsc::Sender<Value>, values: Vec<Value>) -> Result<(), ()> {
    for v in values {
        tx.send(v).await.map_err(|_| ())?;
    }
    Ok(())
}

/// The chunks a generation task sends, as server-sent events: each one JSON, then OpenAI's
/// `[DONE]` once the task has finished (or the body ends when the client goes).
pub fn event_stream(rx: tokio::sync::mpsc::Receiver<Value>) -> Response {
    sse(
        rx,
        |v| SseEvent::default().data(v.to_string()),
        Some("[DONE]"),
    )
}

/// The events of Anthropic's and OpenAI's Responses streams: each named by its `type`
/// (`event: message_start`, `event: response.output_text.delta`, …); no `[DONE]`.
pub fn typed_event_stream(rx: tokio::sync::mpsc::Receiver<Value>) -> Response {
    let named = |v: Value| {
        let name = v["type"].as_str().unwrap_or("message").to_string();
        SseEvent::default().event(name).data(v.to_string())
    };
    sse(rx, named, None)
}

pub fn sse(
    rx: tokio::sync::mpsc::Receiver<Value>,
    frame: fn(Value) -> SseEvent,
    last: Option<&'static str>,
) -> Response {
    use axum::response::sse::{KeepAlive, Sse};
    let events = futures::stream::unfold(Some(rx), move |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(v) => Some((Ok::<_, std::convert::Infallible>(frame(v)), Some(rx))),
            None => last.map(|l| (Ok(SseEvent::default().data(l)), None)),
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
