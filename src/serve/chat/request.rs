//! A chat-completions request read and checked: OpenAI's JSON in, the engine's messages,
//! tools and parameters out, or an error that names the field at fault.

use crate::serve::error::ApiError;
use crate::serve::images::{data_uri, part, Images, PartsText};
use crate::serve::request::{
    choice_mode, effort_thinking, end_user, json_schema, offered_choice, tool_names, typed,
    ChatCall, RawSampling,
};
use hearth_engine::constraint::Constraint;
use hearth_engine::{ChatMessage, SamplingParams, ToolCall, ToolChoice};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashSet;

#[derive(Deserialize)]
struct RawChat {
    messages: Vec<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    reasoning_effort: Option<String>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The whole request, checked against the model's sampling defaults; `server_tools` are the
/// tools the server offers besides the client's (its MCP tools), which `tool_choice` may name.
pub fn chat_call(
    body: &Value,
    defaults: &SamplingParams,
    server_tools: &[String],
) -> Result<ChatCall, ApiError> {
    let raw: RawChat = typed(body)?;
    let sampling: RawSampling = typed(body)?;
    if raw.messages.is_empty() {
        return Err(ApiError::invalid("messages", "no messages"));
    }
    let mut call_ids = HashSet::new();
    let mut images = Images::new();
    let messages = raw
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m, &mut call_ids, &mut images))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = raw.tools.unwrap_or_default();
    let tool_names = tool_names(&tools)?;
    let tool_choice = tool_choice(
        raw.tool_choice.as_ref(),
        &[&tool_names[..], server_tools].concat(),
    )?;
    let response_format = response_format(raw.response_format.as_ref())?;
    let enable_thinking = match raw
        .chat_template_kwargs
        .as_ref()
        .and_then(|k| k.get("enable_thinking"))
    {
        None | Some(Value::Null) => {
            effort_thinking(raw.reasoning_effort.as_deref(), "reasoning_effort")?
        }
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs.enable_thinking",
                "must be a boolean",
            ))
        }
    };
    let max_tokens = raw
        .max_completion_tokens
        .or(raw.max_tokens)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    Ok(ChatCall {
        messages,
        tools,
        tool_names,
        tool_choice,
        stream: raw.stream.unwrap_or(false),
        include_usage: raw
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        max_tokens,
        sampling: sampling.apply(defaults)?,
        stop: sampling.stop()?,
        enable_thinking,
        response_format,
        parallel_tool_calls: raw.parallel_tool_calls.unwrap_or(true),
        prefill: None,
        images,
        user: end_user(body),
    })
}

/// `{"type": "text"}`, `{"type": "json_object"}` or
/// `{"type": "json_schema", "json_schema": {"name": …, "schema": {…}}}`.
fn response_format(v: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::json_object())),
        Some("json_schema") => Ok(Some(json_schema(
            v.get("json_schema").and_then(|s| s.get("schema")),
            "response_format.json_schema.schema",
        )?)),
        other => Err(ApiError::invalid(
            "response_format.type",
            format!("{other:?}: expected text, json_object or json_schema"),
        )),
    }
}

/// Content: a string, or a list of `{"type": "text", "text": …}` and `{"type": "image_url",
/// "image_url": {"url": "data:…"}}` parts (the images go to `images`).
fn content(
    param: &str,
    v: Option<&Value>,
    images: &mut Images,
) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut texts = PartsText::default();
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("text", Some(t)) => texts.text(t),
                    ("image_url", _) => {
                        let at = format!("{param}[{j}].image_url");
                        let url = p
                            .get("image_url")
                            .and_then(|u| u.get("url").or(Some(u)))
                            .and_then(Value::as_str)
                            .ok_or_else(|| ApiError::invalid(&at, "needs a `url`"))?;
                        images.push(part(at.clone(), data_uri(&at, url)?));
                        texts.image();
                    }
                    ("text", None) => {
                        return Err(ApiError::invalid(
                            format!("{param}[{j}].text"),
                            "a text part needs a string `text`",
                        ))
                    }
                    _ => {
                        return Err(ApiError::unsupported(
                            &format!("{param}[{j}].type"),
                            format!("content part type `{kind}` is not supported; only text"),
                        ))
                    }
                }
            }
            Ok(Some(texts.finish()))
        }
        Some(_) => Err(ApiError::invalid(
            param,
            "must be a string or a list of content parts",
        )),
    }
}

fn message(
    i: usize,
    v: &Value,
    call_ids: &mut HashSet<String>,
    images: &mut Images,
) -> Result<ChatMessage, ApiError> {
    let at = format!("messages[{i}]");
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::invalid(&at, "a message must be a JSON object"))?;
    let role = obj
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(format!("{at}.role"), "a message needs a string role"))?;
    let text = content(&format!("{at}.content"), obj.get("content"), images)?;
    let required = |text: Option<String>| {
        text.ok_or_else(|| {
            ApiError::invalid(
                format!("{at}.content"),
                format!("a {role} message needs content"),
            )
        })
    };
    let mut m = match role {
        "system" | "developer" => ChatMessage::new("system", required(text)?),
        "user" => ChatMessage::new("user", required(text)?),
        "assistant" => {
            let mut m = ChatMessage::new("assistant", String::new());
            m.content = text;
            m.tool_calls = assistant_calls(&at, obj.get("tool_calls"), call_ids)?;
            if m.content.is_none() && m.tool_calls.is_empty() {
                m.content = Some(String::new());
            }
            if let Some(r) = obj.get("reasoning_content").and_then(Value::as_str) {
                m.reasoning_content = Some(r.to_string());
            }
            m
        }
        "tool" => {
            let id = obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!("{at}.tool_call_id"),
                        "a tool message needs the tool_call_id of the call it answers",
                    )
                })?;
            if !call_ids.contains(id) {
                return Err(ApiError::invalid(
                    format!("{at}.tool_call_id"),
                    format!("no earlier assistant message made a tool call with id `{id}`"),
                ));
            }
            let mut m = ChatMessage::new("tool", required(text)?);
            m.extra
                .insert("tool_call_id".into(), Value::String(id.into()));
            m
        }
        other => {
            return Err(ApiError::invalid(
                format!("{at}.role"),
                format!(
                    "unknown role `{other}`; expected system, developer, user, assistant or tool"
                ),
            ))
        }
    };
    if let Some(name) = obj.get("name").and_then(Value::as_str) {
        m.extra.insert("name".into(), Value::String(name.into()));
    }
    Ok(m)
}

/// An assistant turn's `tool_calls`, arguments given as a JSON string (OpenAI) or object.
fn assistant_calls(
    at: &str,
    v: Option<&Value>,
    call_ids: &mut HashSet<String>,
) -> Result<Vec<ToolCall>, ApiError> {
    let calls = match v {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::invalid(
                format!("{at}.tool_calls"),
                "must be a list",
            ))
        }
    };
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let at = format!("{at}.tool_calls[{j}]");
            let function = c
                .get("function")
                .ok_or_else(|| ApiError::invalid(&at, "a tool call needs a `function`"))?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(format!("{at}.function.name"), "needs a function name")
                })?;
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                    ApiError::invalid(
                        format!("{at}.function.arguments"),
                        format!("not valid JSON: {e}"),
                    )
                })?,
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => {
                    return Err(ApiError::invalid(
                        format!("{at}.function.arguments"),
                        "must be a JSON string",
                    ))
                }
            };
            let mut call = ToolCall::new(name, arguments);
            if let Some(id) = c.get("id").and_then(Value::as_str) {
                call_ids.insert(id.to_string());
                call.id = Some(id.to_string());
            }
            Ok(call)
        })
        .collect()
}

fn tool_choice(v: Option<&Value>, names: &[String]) -> Result<ToolChoice, ApiError> {
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => choice_mode(s)?,
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "tool_choice.function.name",
                        "a named tool choice is {\"type\": \"function\", \"function\": {\"name\": …}}",
                    )
                })?;
            ToolChoice::Named(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "must be a string or an object",
            ))
        }
    };
    offered_choice(choice, names, "tool_choice.function.name")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::request::agent_request;
    use serde_json::json;

    fn call(body: Value) -> Result<ChatCall, ApiError> {
        chat_call(&body, &SamplingParams::default(), &[])
    }

    fn param(body: Value) -> Option<String> {
        call(body).err().and_then(|e| e.param)
    }

    #[test]
    fn qwen_code_and_opencode_requests_read() -> Result<(), ApiError> {
        for (name, tools) in [
            ("qwen-code.json", 15),
            ("opencode.json", 10),
            ("opencode-title.json", 0),
            ("opencode-turn3.json", 10),
        ] {
            let c = call(agent_request(name))?;
            assert_eq!(c.messages[0].role, "system", "{name}");
            assert_eq!(c.tools.len(), tools, "{name}");
            assert!(c.stream && c.include_usage, "{name}");
            assert!(c.max_tokens.is_some(), "{name}");
        }
        let c = call(
            json!({"messages": [{"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "hi"}], "reasoning_effort": "none",
            "max_completion_tokens": 5, "parallel_tool_calls": false,
            "stream_options": {"include_usage": true}}),
        )?;
        assert_eq!(c.messages[0].role, "system");
        assert_eq!((c.enable_thinking, c.max_tokens), (Some(false), Some(5)));
        assert!(!c.parallel_tool_calls);
        assert_eq!(
            param(
                json!({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "lots"})
            ),
            Some("reasoning_effort".into())
        );
        Ok(())
    }

    #[test]
    fn errors_name_the_field() {
        let user = json!({"role": "user", "content": "hi"});
        assert_eq!(param(json!({"messages": []})), Some("messages".into()));
        assert_eq!(
            param(json!({"messages": [user], "temperature": "hot"})),
            Some("temperature".into())
        );
        assert_eq!(
            param(json!({"messages": [user, {"role": "wizard", "content": "x"}]})),
            Some("messages[1].role".into())
        );
        assert_eq!(
            param(
                json!({"messages": [user, {"role": "tool", "content": "4", "tool_call_id": "c1"}]})
            ),
            Some("messages[1].tool_call_id".into())
        );
        assert_eq!(param(json!({"messages": [user], "n": 2})), Some("n".into()));
        // Out of range is refused, not taken as the filter off.
        assert_eq!(
            param(json!({"messages": [user], "top_p": 1.5})),
            Some("top_p".into())
        );
        assert_eq!(
            param(json!({"messages": [user], "min_p": -0.1})),
            Some("min_p".into())
        );
        assert_eq!(
            param(json!({"messages": [user], "top_k": -3})),
            Some("top_k".into())
        );
        for off in [
            json!({"top_p": 1.0}),
            json!({"min_p": 0.0}),
            json!({"top_k": -1}),
        ] {
            let mut body = json!({"messages": [user]});
            body.as_object_mut()
                .unwrap()
                .extend(off.as_object().unwrap().clone());
            assert!(call(body).is_ok());
        }
        assert_eq!(
            param(json!({"messages": [user], "logit_bias": {"50256": -100}})),
            Some("logit_bias".into())
        );
        assert_eq!(param(json!({"messages": [user], "logit_bias": {}})), None);
        let many: Vec<String> = (0..10_000).map(|i| format!("s{i}")).collect();
        assert_eq!(
            param(json!({"messages": [user], "stop": many})),
            Some("stop".into())
        );
        assert_eq!(
            param(json!({"messages": [user], "stop": ["ok", "x".repeat(1 << 20)]})),
            Some("stop[1]".into())
        );
        assert_eq!(
            param(
                json!({"messages": [user], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]})
            ),
            Some("tools[0].function.parameters.type".into())
        );
        assert_eq!(
            param(json!({"messages": [user], "tool_choice": "required"})),
            Some("tool_choice".into())
        );
        assert_eq!(
            param(json!({"messages": [user], "temperature": -1.0})),
            Some("temperature".into())
        );
    }

    #[test]
    fn a_tool_round_trip_reads_as_the_engine_messages() -> Result<(), ApiError> {
        let c = call(json!({
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "4"}
            ],
            "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "add"}},
            "stream": true, "stream_options": {"include_usage": true},
            "max_completion_tokens": 7, "stop": "END", "seed": 3, "unknown_field": 1
        }))?;
        assert_eq!(c.messages[0].content.as_deref(), Some("2+2?"));
        assert_eq!(
            c.messages[1].tool_calls[0].function.arguments,
            json!({"a": 2, "b": 2})
        );
        assert_eq!(c.messages[2].extra["tool_call_id"], json!("c1"));
        assert_eq!(c.tool_choice, ToolChoice::Named("add".into()));
        assert!(c.stream && c.include_usage);
        assert_eq!(
            (c.max_tokens, c.stop, c.sampling.seed),
            (Some(7), vec!["END".to_string()], 3)
        );
        Ok(())
    }
}
