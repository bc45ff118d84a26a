//! `POST /v1/responses` (OpenAI's Responses API, stateless): the answer as `reasoning`,
//! `message` and `function_call` output items, whole or streamed as the API's events
//! (`response.created`, `response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, …, `response.completed`).

pub(super) mod request;
mod tools;

use super::answer::{read_whole, stream_events, Answer, Part, Shape};
use super::app::{off_the_runtime, App};
use super::error::ApiError;
use super::reply::{body_bytes, unix_now, RequestId};
use super::request::{json_object, ChatCall};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::{FinishReason, Summary};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tools::{Dressed, Offered};

pub async fn responses(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match off_the_runtime(&app, body, start).await {
        Ok((call, output, answer)) => {
            if call.stream {
                stream_events(output, answer)
            } else {
                match whole(output, answer).await {
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
) -> Result<(ChatCall, Output, Answer), ApiError> {
    let body = json_object(&body_bytes(body, app.body_limit)?)?;
    let (mcp, names) = app.mcp_tools();
    let (call, offered) = request::responses_call(&body, &app.engine.info().sampling, &names)?;
    let answer = Answer::start(app, &call, mcp)?;
    Ok((call, Output::new(app, &body, offered), answer))
}

/// The item being written.
enum Open {
    Reasoning {
        id: String,
        text: String,
    },
    Message {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
    },
}

/// One answer in the Responses shape: its output items as they close, and the events that
/// stream them.
struct Output {
    id: String,
    created_at: u64,
    model: String,
    /// What the response object repeats of the request (tools, tool_choice, instructions, …).
    echo: Map<String, Value>,
    items: Vec<Value>,
    open: Option<Open>,
    sequence: u64,
    /// How calls go back: namespaces, custom tools.
    offered: Offered,
    /// `include: ["reasoning.encrypted_content"]`: reasoning items carry it, for a client that
    /// keeps nothing on the server (`store: false`) to send back next turn.
    sealed_reasoning: bool,
}

impl Output {
    fn new(app: &App, body: &Value, offered: Offered) -> Self {
        let sealed_reasoning = body
            .get("include")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
        let mut echo = Map::new();
        for (key, default) in [
            ("instructions", Value::Null),
            ("max_output_tokens", Value::Null),
            ("parallel_tool_calls", Value::Bool(true)),
            ("temperature", Value::Null),
            ("top_p", Value::Null),
            ("tool_choice", json!("auto")),
            ("tools", json!([])),
            ("text", json!({"format": {"type": "text"}})),
            ("reasoning", json!({"effort": null, "summary": null})),
            ("metadata", json!({})),
        ] {
            let v = body.get(key).filter(|v| !v.is_null()).cloned();
            echo.insert(key.into(), v.unwrap_or(default));
        }
        Self {
            id: format!("resp_{}", RequestId::next()),
            created_at: unix_now(),
            model: app.model_id.clone(),
            echo,
            items: vec![],
            open: None,
            sequence: 0,
            offered,
            sealed_reasoning,
        }
    }

    /// The response object: `in_progress` while streaming, then as it ended.
    fn object(&self, status: &str, summary: Option<&Summary>, error: Value) -> Value {
        let mut o = Map::new();
        o.insert("id".into(), json!(self.id));
        o.insert("object".into(), json!("response"));
        o.insert("created_at".into(), json!(self.created_at));
        o.insert("status".into(), json!(status));
        o.insert("error".into(), error);
        let incomplete = summary
            .filter(|s| {
                matches!(
                    s.reason,
                    FinishReason::MaxTokens | FinishReason::ContextFull
                )
            })
            .map(|_| json!({"reason": "max_output_tokens"}));
        o.insert(
            "incomplete_details".into(),
            incomplete.unwrap_or(Value::Null),
        );
        o.insert("model".into(), json!(self.model));
        o.insert("output".into(), Value::Array(self.items.clone()));
        o.insert("previous_response_id".into(), Value::Null);
        o.insert("store".into(), json!(false));
        o.insert("truncation".into(), json!("disabled"));
        o.extend(self.echo.clone());
        o.insert("usage".into(), summary.map_or(Value::Null, usage));
        Value::Object(o)
    }

    fn event(&mut self, kind: &str, fields: Value) -> Value {
        let mut e = json!({"type": kind, "sequence_number": self.sequence});
        self.sequence += 1;
        if let (Some(e), Value::Object(f)) = (e.as_object_mut(), fields) {
            e.extend(f);
        }
        e
    }

    fn index(&self) -> usize {
        self.items.len()
    }

    fn open_message(&mut self, out: &mut Vec<Value>) {
        let id = format!("msg_{}", RequestId::next());
        let item = json!({"id": id, "type": "message", "status": "in_progress",
            "role": "assistant", "content": []});
        let index = self.index();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        out.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        ));
        self.open = Some(Open::Message {
            id,
            text: String::new(),
        });
    }

    fn open_reasoning(&mut self, out: &mut Vec<Value>) {
        let id = format!("rs_{}", RequestId::next());
        let item = json!({"id": id, "type": "reasoning", "summary": [], "content": []});
        let index = self.index();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        let part = json!({"type": "reasoning_text", "text": ""});
        out.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        ));
        self.open = Some(Open::Reasoning {
            id,
            text: String::new(),
        });
    }

    fn open_call(&mut self, name: &str, out: &mut Vec<Value>) {
        self.close(out);
        let (id, call_id) = (
            format!("fc_{}", RequestId::next()),
            format!("call_{}", RequestId::next()),
        );
        let item = self.call_item(&id, &call_id, name, "", "in_progress");
        let index = self.index();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        self.open = Some(Open::Call {
            id,
            call_id,
            name: name.to_string(),
        });
    }

    /// A call's item as the client offered its tool: a `function_call` (with its namespace
    /// where it has one) or a `custom_tool_call`, whose `input` is the text the engine's call
    /// carries as its `input` argument.
    fn call_item(
        &self,
        id: &str,
        call_id: &str,
        name: &str,
        arguments: &str,
        status: &str,
    ) -> Value {
        match self.offered.dress(name) {
            Dressed::Function { name, namespace } => {
                let mut item = json!({"id": id, "type": "function_call", "call_id": call_id,
                    "name": name, "arguments": arguments, "status": status});
                if let Some(ns) = namespace {
                    item["namespace"] = json!(ns);
                }
                item
            }
            Dressed::Custom { name } => json!({"id": id, "type": "custom_tool_call",
                "call_id": call_id, "name": name, "input": custom_input(arguments),
                "status": status}),
        }
    }

    fn call_args(&mut self, args: &str, out: &mut Vec<Value>) {
        if let Some(Open::Call { id, name, .. }) = &self.open {
            // A custom call's input goes out whole at its end (its JSON pieces are not text).
            if self.offered.is_custom(name) {
                return;
            }
            let fields = json!({"item_id": id, "output_index": self.items.len(), "delta": args});
            out.push(self.event("response.function_call_arguments.delta", fields));
        }
    }

    /// Closes the open call with its arguments, read whole.
    fn close_call(&mut self, arguments: &str, out: &mut Vec<Value>) {
        let Some(Open::Call { id, call_id, name }) = self.open.take() else {
            return;
        };
        let index = self.index();
        if self.offered.is_custom(&name) {
            let input = custom_input(arguments);
            out.push(self.event(
                "response.custom_tool_call_input.delta",
                json!({"item_id": id, "output_index": index, "delta": input}),
            ));
            out.push(self.event(
                "response.custom_tool_call_input.done",
                json!({"item_id": id, "output_index": index, "input": input}),
            ));
        } else {
            let shown = match self.offered.dress(&name) {
                Dressed::Function { name, .. } | Dressed::Custom { name } => name,
            };
            out.push(self.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "name": shown, "arguments": arguments}),
            ));
        }
        let item = self.call_item(&id, &call_id, &name, arguments, "completed");
        self.done(item, out);
    }

    fn close(&mut self, out: &mut Vec<Value>) {
        let index = self.index();
        match self.open.take() {
            None => {}
            Some(Open::Message { id, text }) => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text, "logprobs": []}),
                ));
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                let item = json!({"id": id, "type": "message", "status": "completed",
                    "role": "assistant", "content": [part]});
                self.done(item, out);
            }
            Some(Open::Reasoning { id, text }) => {
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                ));
                let part = json!({"type": "reasoning_text", "text": text});
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                let mut item =
                    json!({"id": id, "type": "reasoning", "summary": [], "content": [part]});
                if self.sealed_reasoning {
                    item["encrypted_content"] = json!(request::sealed_reasoning(&text));
                }
                self.done(item, out);
            }
            // A call cut off before its arguments were whole.
            Some(Open::Call { id, call_id, name }) => {
                let item = self.call_item(&id, &call_id, &name, "{}", "incomplete");
                self.done(item, out);
            }
        }
    }

    fn done(&mut self, item: Value, out: &mut Vec<Value>) {
        let index = self.index();
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.items.push(item);
    }
}

impl Shape for Output {
    /// The API has no keep-alive event: `response.in_progress` again, which says what is
    /// so (clients take it as a no-op).
    fn idle(&mut self) -> Vec<Value> {
        let snapshot = self.object("in_progress", None, Value::Null);
        vec![self.event("response.in_progress", json!({"response": snapshot}))]
    }

    fn start(&mut self) -> Vec<Value> {
        let snapshot = self.object("in_progress", None, Value::Null);
        vec![
            self.event("response.created", json!({"response": snapshot})),
            self.event("response.in_progress", json!({"response": snapshot})),
        ]
    }

    /// The events `part` makes, its items kept for the whole answer.
    fn take(&mut self, part: Part) -> Vec<Value> {
        let mut out = vec![];
        match part {
            // The calls the server ran, as the API's own `mcp_call` items.
            Part::McpCalls(log) => {
                self.close(&mut out);
                for call in log {
                    let id = format!("mcp_{}", RequestId::next());
                    let result = call["result"].as_str().unwrap_or_default().to_string();
                    let mut item = json!({"id": id, "type": "mcp_call",
                        "server_label": call["server"].as_str().unwrap_or("mcp"),
                        "name": call["name"], "arguments": call["arguments"].to_string(),
                        "status": "completed"});
                    if call["ok"] == json!(true) {
                        item["output"] = json!(result);
                    } else {
                        item["status"] = json!("failed");
                        item["error"] = json!({"type": "mcp_tool_execution_error",
                            "content": [{"type": "text", "text": result}]});
                    }
                    let index = self.index();
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    self.done(item, &mut out);
                }
            }
            Part::Text(t) | Part::Invalid { raw: t, .. } => {
                if t.is_empty() {
                    return out;
                }
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close(&mut out);
                    self.open_message(&mut out);
                }
                let Some(Open::Message { id, text }) = &mut self.open else {
                    return out;
                };
                text.push_str(&t);
                let fields = json!({"item_id": id, "output_index": self.items.len(),
                    "content_index": 0, "delta": t, "logprobs": []});
                out.push(self.event("response.output_text.delta", fields));
            }
            Part::Reasoning(t) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    self.close(&mut out);
                    self.open_reasoning(&mut out);
                }
                let Some(Open::Reasoning { id, text }) = &mut self.open else {
                    return out;
                };
                text.push_str(&t);
                let fields = json!({"item_id": id, "output_index": self.items.len(),
                    "content_index": 0, "delta": t});
                out.push(self.event("response.reasoning_text.delta", fields));
            }
            Part::Call(c) => {
                self.open_call(&c.function.name, &mut out);
                let args = c.function.arguments.to_string();
                self.call_args(&args, &mut out);
                self.close_call(&args, &mut out);
            }
            Part::CallOpen(name) => self.open_call(&name, &mut out),
            Part::CallArgs(args) => self.call_args(&args, &mut out),
            Part::CallEnd(c) => self.close_call(&c.function.arguments.to_string(), &mut out),
            Part::Done(summary) => {
                self.close(&mut out);
                let (kind, status) = match summary.reason {
                    FinishReason::MaxTokens | FinishReason::ContextFull => {
                        ("response.incomplete", "incomplete")
                    }
                    _ => ("response.completed", "completed"),
                };
                let response = self.object(status, Some(&summary), Value::Null);
                out.push(self.event(kind, json!({"response": response})));
            }
            Part::Failed(message) => {
                self.close(&mut out);
                let error = json!({"code": "server_error", "message": message});
                let response = self.object("failed", None, error);
                out.push(self.event("response.failed", json!({"response": response})));
            }
        }
        out
    }
}

/// A custom tool call's text: the `input` string of the engine's call's arguments.
fn custom_input(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .ok()
        .and_then(|v| v.get("input").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

fn usage(s: &Summary) -> Value {
    let u = &s.usage;
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The whole answer as one response object.
async fn whole(mut output: Output, answer: Answer) -> Result<Value, ApiError> {
    let summary = read_whole(&mut output, answer).await?;
    let status = match summary.reason {
        FinishReason::MaxTokens | FinishReason::ContextFull => "incomplete",
        _ => "completed",
    };
    Ok(output.object(status, Some(&summary), Value::Null))
}
