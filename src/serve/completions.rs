//! `POST /v1/completions`: a raw prompt continued, no chat template.

use super::app::{off_the_runtime, App, Closing};
use super::error::ApiError;
use super::reply::{body_bytes, finish_reason, send_all, unix_now, usage_json, RequestId};
use super::request::{json_object, typed, RawSampling};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{Event, EventStream, GenerateRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Deserialize)]
struct RawCompletion {
    prompt: Value,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<Value>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    suffix: Option<String>,
    /// llama.cpp's and vLLM's extension: generate `max_tokens` whatever the model's end
    /// tokens (for benchmarks).
    #[serde(default)]
    ignore_eos: Option<bool>,
}

pub async fn completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, start).await {
        Ok((stream, streaming, include_usage)) => {
            let id = format!("cmpl-{}", RequestId::next());
            if streaming {
                streamed(&app, id, stream, include_usage)
            } else {
                match whole(&app, id, stream).await {
                    Ok(v) => Json(v).into_response(),
                    Err(e) => e.into_response(),
                }
            }
        }
        Err(e) => e.into_response(),
    }
}

fn start(
    app: &Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(EventStream, bool, bool), ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let raw: RawCompletion = typed(&body)?;
    let sampling: RawSampling = typed(&body)?;
    if raw.echo == Some(true) {
        return Err(ApiError::unsupported("echo", "echo is not supported"));
    }
    if raw.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "suffix is not supported"));
    }
    let prompt = prompt_ids(app, &raw.prompt)?;
    let params = sampling.apply(&app.engine.info().sampling)?;
    let include_usage = raw
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // OpenAI's default length for completions.
    let max_tokens = raw
        .max_tokens
        .map_or(16, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let stream = app.engine.generate(GenerateRequest {
        sampling: params,
        stop_strings: sampling.stop()?,
        stop_token_ids: (raw.ignore_eos == Some(true)).then(Vec::new),
        ..GenerateRequest::new(prompt, max_tokens)
    })?;
    Ok((stream, raw.stream.unwrap_or(false), include_usage))
}

/// A prompt: a string, a list holding one string, or token ids.
fn prompt_ids(app: &App, prompt: &Value) -> Result<Vec<u32>, ApiError> {
    let text = match prompt {
        Value::String(s) => s.as_str(),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default(),
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            let vocab = app.engine.tokenizer().vocab_size() as u64;
            return a
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_u64() {
                    Some(id) if id < vocab => Ok(id as u32),
                    _ => Err(ApiError::invalid(
                        format!("prompt[{i}]"),
                        format!("token id {v} is outside the vocabulary of {vocab}"),
                    )),
                })
                .collect();
        }
        Value::Array(_) => {
            return Err(ApiError::unsupported(
                "prompt",
                "one prompt per request: a string, a list of one string, or token ids",
            ))
        }
        _ => return Err(ApiError::invalid("prompt", "must be a string")),
    };
    if text.is_empty() {
        return Err(ApiError::invalid("prompt", "empty prompt"));
    }
    Ok(app.engine.tokenizer().encode(text)?)
}

fn chunk(app: &App, id: &str, text: &str, finish: Option<&str>) -> Value {
    json!({
        "id": id,
        "object": "text_completion",
        "created": unix_now(),
        "model": app.model_id,
        "system_fingerprint": super::reply::FINGERPRINT,
        "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
    })
}

async fn whole(app: &App, id: String, mut stream: EventStream) -> Result<Value, ApiError> {
    let mut text = String::new();
    let mut closing = Closing::new(app);
    loop {
        match closing.next(&mut stream).await {
            Some(Event::Text { text: t }) => text.push_str(&t),
            Some(Event::Finished(s)) => {
                app.metrics.finished(&s);
                let mut v = chunk(app, &id, &text, Some(finish_reason(&s.reason, false)));
                v["usage"] = usage_json(&s);
                v["timings"] = super::reply::timings_json(&s);
                return Ok(v);
            }
            Some(Event::Error { message }) => return Err(ApiError::internal(message)),
            Some(_) => {}
            None => return Err(ApiError::internal("the engine stopped")),
        }
    }
}

fn streamed(app: &Arc<App>, id: String, mut stream: EventStream, include_usage: bool) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    let (model, created) = (app.model_id.clone(), unix_now());
    let chunk = move |text: &str, finish: Option<&str>| {
        json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "system_fingerprint": super::reply::FINGERPRINT,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut closing = Closing::new(app);
    let app = app.clone();
    tokio::spawn(async move {
        let metrics = &app.metrics;
        loop {
            let event = tokio::select! {
                _ = tx.closed() => return,
                e = closing.next(&mut stream) => e,
            };
            let out = match event {
                Some(Event::Text { text }) => vec![chunk(&text, None)],
                Some(Event::Finished(s)) => {
                    metrics.finished(&s);
                    let mut out = vec![chunk("", Some(finish_reason(&s.reason, false)))];
                    if include_usage {
                        let mut last = chunk("", None);
                        last["choices"] = json!([]);
                        last["usage"] = usage_json(&s);
                        out.push(last);
                    }
                    let _ = send_all(&tx, out).await;
                    return;
                }
                Some(Event::Error { message }) => {
                    let _ = send_all(&tx, vec![ApiError::internal(message).body()]).await;
                    return;
                }
                Some(_) => vec![],
                None => return,
            };
            if send_all(&tx, out).await.is_err() {
                return;
            }
        }
    });
    super::reply::event_stream(rx)
}
