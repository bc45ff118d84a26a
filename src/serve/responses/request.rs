//! An OpenAI Responses request read and checked: `input` (a string, or items: messages,
//! `function_call`, `function_call_output`, `reasoning`), `instructions`, function `tools`,
//! `tool_choice`, `text.format` and `reasoning`, turned into the call every API shares.
//! Stateless: nothing is kept between requests, so `previous_response_id` is refused.

use crate::serve::error::ApiError;
use crate::serve::request::{
    json_schema, offered_choice, tool_names, typed, ChatCall, RawSampling,
};
use hearth_engine::constraint::Constraint;
use hearth_engine::{ChatMessage, SamplingParams, ToolCall, ToolChoice};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

#[derive(Deserialize)]
struct RawResponses {
    #[serde(default)]
    input: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    conversation: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
}

/// The request as a [`ChatCall`], and its tools as the client sent them (echoed back in
/// the response object).
pub fn responses_call(
    body: &Value,
    defaults: &SamplingParams,
    server_tools: &[String],
) -> Result<ChatCall, ApiError> {
    let raw: RawResponses = typed(body)?;
    let sampling: RawSampling = typed(body)?;
    if raw.previous_response_id.is_some() {
        return Err(ApiError::unsupported(
            "previous_response_id",
            "this server keeps no responses: send the whole conversation in `input`",
        ));
    }
    if raw.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::unsupported(
            "conversation",
            "this server keeps no conversations: send the whole conversation in `input`",
        ));
    }
    let mut messages = vec![];
    if let Some(instructions) = raw.instructions.filter(|i| !i.is_empty()) {
        messages.push(ChatMessage::system(instructions));
    }
    match &raw.input {
        Value::String(s) => messages.push(ChatMessage::user(s.clone())),
        Value::Array(items) => items_into(items, &mut messages)?,
        Value::Null => return Err(ApiError::invalid("input", "input is required")),
        _ => {
            return Err(ApiError::invalid(
                "input",
                "must be a string or a list of input items",
            ))
        }
    }
    if !messages.iter().any(|m| m.role == "user") {
        return Err(ApiError::invalid("input", "the input needs a user message"));
    }
    let tools = tools(raw.tools.as_deref().unwrap_or_default())?;
    let names = tool_names(&tools).map_err(|mut e| {
        if let Some(p) = &mut e.param {
            *p = p.replacen(".function.", ".", 1);
        }
        e
    })?;
    let tool_choice = tool_choice(
        raw.tool_choice.as_ref(),
        &[&names[..], server_tools].concat(),
    )?;
    Ok(ChatCall {
        messages,
        tools,
        tool_names: names,
        tool_choice,
        stream: raw.stream.unwrap_or(false),
        include_usage: true,
        max_tokens: raw
            .max_output_tokens
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        sampling: sampling.apply(defaults)?,
        stop: vec![],
        enable_thinking: reasoning(raw.reasoning.as_ref())?,
        response_format: format(raw.text.as_ref())?,
        parallel_tool_calls: raw.parallel_tool_calls.unwrap_or(true),
        prefill: None,
    })
}

/// The input items as the engine's messages: consecutive `function_call` items join the
/// assistant turn before them, a `reasoning` item goes with the assistant turn after it.
fn items_into(items: &[Value], out: &mut Vec<ChatMessage>) -> Result<(), ApiError> {
    let mut call_ids = HashSet::new();
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| ApiError::invalid(&at, "an input item must be a JSON object"))?;
        let field = |name: &str| {
            obj.get(name).and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(format!("{at}.{name}"), format!("needs a string `{name}`"))
            })
        };
        match obj.get("type").and_then(Value::as_str).unwrap_or("message") {
            "message" => {
                let role = field("role")?;
                let text = content(&format!("{at}.content"), obj.get("content"))?;
                let mut m = match role {
                    "user" | "system" | "assistant" => ChatMessage::new(role, text),
                    "developer" => ChatMessage::system(text),
                    other => {
                        return Err(ApiError::invalid(
                            format!("{at}.role"),
                            format!(
                            "unknown role `{other}`; expected user, system, developer or assistant"
                        ),
                        ))
                    }
                };
                if role == "assistant" {
                    m.reasoning_content = reasoning.take();
                }
                out.push(m);
            }
            "function_call" => {
                let call_id = field("call_id")?;
                let name = field("name")?;
                let arguments = match obj.get("arguments") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                    Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                        ApiError::invalid(format!("{at}.arguments"), format!("not valid JSON: {e}"))
                    })?,
                    Some(_) => {
                        return Err(ApiError::invalid(
                            format!("{at}.arguments"),
                            "must be a JSON string",
                        ))
                    }
                };
                call_ids.insert(call_id.to_string());
                let mut call = ToolCall::new(name, arguments);
                call.id = Some(call_id.to_string());
                match out.last_mut() {
                    Some(m) if m.role == "assistant" => m.tool_calls.push(call),
                    _ => {
                        let mut m = ChatMessage::assistant(String::new());
                        m.content = None;
                        m.reasoning_content = reasoning.take();
                        m.tool_calls.push(call);
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                let call_id = field("call_id")?;
                if !call_ids.contains(call_id) {
                    return Err(ApiError::invalid(
                        format!("{at}.call_id"),
                        format!("no earlier function_call item has call_id `{call_id}`"),
                    ));
                }
                let output = content(&format!("{at}.output"), obj.get("output"))?;
                let mut m = ChatMessage::tool(output);
                m.extra
                    .insert("tool_call_id".into(), Value::String(call_id.into()));
                out.push(m);
            }
            "reasoning" => {
                let text = reasoning_text(&at, obj)?;
                reasoning = Some(text);
            }
            other => {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    format!("input item type `{other}` is not supported"),
                ))
            }
        }
    }
    Ok(())
}

/// Text content: a string, or `input_text` / `output_text` parts.
fn content(at: &str, v: Option<&Value>) -> Result<String, ApiError> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = vec![];
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text", Some(t)) => texts.push(t),
                    ("input_text" | "output_text" | "text", None) => {
                        return Err(ApiError::invalid(
                            format!("{at}[{j}].text"),
                            "a text part needs a string `text`",
                        ))
                    }
                    ("refusal", _) => {}
                    ("input_image" | "input_file" | "input_audio", _) => {
                        return Err(ApiError::unsupported(
                            &format!("{at}[{j}].type"),
                            format!("`{kind}` parts are not supported: the model reads text only"),
                        ))
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            format!("{at}[{j}].type"),
                            format!("unknown content part type `{kind}`"),
                        ))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        None | Some(Value::Null) => Err(ApiError::invalid(at, "missing")),
        Some(_) => Err(ApiError::invalid(
            at,
            "must be a string or a list of content parts",
        )),
    }
}

/// A `reasoning` item's text: its `content` (reasoning_text), else its summary.
fn reasoning_text(at: &str, obj: &Map<String, Value>) -> Result<String, ApiError> {
    let texts = |key: &str| -> Result<Vec<String>, ApiError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(parts)) => parts
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    p.get("text")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            ApiError::invalid(format!("{at}.{key}[{j}].text"), "needs a string")
                        })
                })
                .collect(),
            Some(_) => Err(ApiError::invalid(format!("{at}.{key}"), "must be a list")),
        }
    };
    let content = texts("content")?;
    Ok(if content.is_empty() {
        texts("summary")?
    } else {
        content
    }
    .join("\n"))
}

/// Function tools (`{"type": "function", "name", "description", "parameters"}`) in the
/// chat format the engine's templates and grammars read.
fn tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let at = format!("tools[{i}]");
            let obj = t
                .as_object()
                .ok_or_else(|| ApiError::invalid(&at, "a tool must be a JSON object"))?;
            match obj.get("type").and_then(Value::as_str) {
                Some("function") => {}
                other => {
                    return Err(ApiError::unsupported(
                        &format!("{at}.type"),
                        format!("tool type {other:?} is not available here; only \"function\""),
                    ))
                }
            }
            let mut function = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), v.clone());
                }
            }
            Ok(json!({"type": "function", "function": function}))
        })
        .collect()
}

/// `auto`, `none`, `required`, or `{"type": "function", "name": …}`.
fn tool_choice(v: Option<&Value>, names: &[String]) -> Result<ToolChoice, ApiError> {
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`{other}`: expected auto, none, required or a named function"),
                ))
            }
        },
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid("tool_choice.name", "a function choice needs its `name`")
            })?;
            ToolChoice::Named(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::unsupported(
                "tool_choice",
                "expected auto, none, required or {\"type\": \"function\", \"name\": …}",
            ))
        }
    };
    offered_choice(choice, names, "tool_choice.name")
}

/// `reasoning.effort`: `none` turns the model's thinking off, any other effort on.
fn reasoning(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    match v.filter(|v| !v.is_null()).map(|r| r.get("effort")) {
        None | Some(None) | Some(Some(Value::Null)) => Ok(None),
        Some(Some(Value::String(e))) => match e.as_str() {
            "none" => Ok(Some(false)),
            "minimal" | "low" | "medium" | "high" | "xhigh" => Ok(Some(true)),
            other => Err(ApiError::invalid(
                "reasoning.effort",
                format!("`{other}`: expected none, minimal, low, medium or high"),
            )),
        },
        Some(Some(_)) => Err(ApiError::invalid("reasoning.effort", "must be a string")),
    }
}

/// `text.format`: `text`, `json_object`, or `json_schema` with its `schema`.
fn format(v: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
    let Some(format) = v.and_then(|t| t.get("format")).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Constraint::json_object())),
        Some("json_schema") => Ok(Some(json_schema(
            format.get("schema"),
            "text.format.schema",
        )?)),
        other => Err(ApiError::invalid(
            "text.format.type",
            format!("{other:?}: expected text, json_object or json_schema"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: Value) -> Result<ChatCall, ApiError> {
        responses_call(&body, &SamplingParams::default(), &[])
    }

    fn param(body: Value) -> Option<String> {
        call(body).err().and_then(|e| e.param)
    }

    #[test]
    fn a_tool_round_trip_reads_as_the_engine_messages() -> Result<(), ApiError> {
        let c = call(json!({
            "model": "m", "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "add"}]},
                {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\": 2}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "4"}
            ],
            "tools": [{"type": "function", "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}],
            "tool_choice": {"type": "function", "name": "add"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "reasoning": {"effort": "none"}, "max_output_tokens": 9, "stream": true
        }))?;
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(
            c.messages[2].tool_calls[0].function.arguments,
            json!({"a": 2})
        );
        assert_eq!(c.messages[2].reasoning_content.as_deref(), Some("add"));
        assert_eq!(c.messages[3].extra["tool_call_id"], json!("call_1"));
        assert_eq!(c.tool_choice, ToolChoice::Named("add".into()));
        assert_eq!(
            (c.enable_thinking, c.max_tokens, c.stream),
            (Some(false), Some(9), true)
        );
        assert!(c.response_format.is_some());
        Ok(())
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(param(json!({"model": "m"})), Some("input".into()));
        assert_eq!(
            param(json!({"input": "hi", "previous_response_id": "resp_1"})),
            Some("previous_response_id".into())
        );
        assert_eq!(
            param(
                json!({"input": [{"type": "function_call_output", "call_id": "c9", "output": "4"}]})
            ),
            Some("input[0].call_id".into())
        );
        assert_eq!(
            param(
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})
            ),
            Some("input[0].content[0].type".into())
        );
        assert_eq!(
            param(json!({"input": [{"role": "wizard", "content": "x"}]})),
            Some("input[0].role".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "tools": [{"type": "web_search"}]})),
            Some("tools[0].type".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "tools": [{"type": "function", "name": "a b"}]})),
            Some("tools[0].name".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "tool_choice": "required"})),
            Some("tool_choice".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "text": {"format": {"type": "yaml"}}})),
            Some("text.format.type".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "reasoning": {"effort": "extreme"}})),
            Some("reasoning.effort".into())
        );
        assert_eq!(
            param(json!({"input": "hi", "temperature": "hot"})),
            Some("temperature".into())
        );
    }
}
