//! An Anthropic Messages request read and checked: `system`, `messages` of content blocks
//! (`text`, `thinking`, `tool_use`, `tool_result`), `tools` with their `input_schema`,
//! `tool_choice`, `stop_sequences` and `thinking`, turned into the call every API shares.

use crate::serve::error::ApiError;
use crate::serve::images::{base64, data_uri, part, ImagePart, Images, PartsText};
use crate::serve::request::{
    json_schema, note_once, offered_choice, system_first, tool_names, typed, ChatCall, RawSampling,
};
use hearth_engine::constraint::Constraint;
use hearth_engine::{ChatMessage, SamplingParams, ToolCall, ToolChoice};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

#[derive(Deserialize)]
struct RawMessages {
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    thinking: Option<Value>,
    #[serde(default)]
    output_config: Option<Value>,
    #[serde(default)]
    context_management: Option<Value>,
}

/// The request as a [`ChatCall`]. `count_only`: for `/v1/messages/count_tokens`, where
/// `max_tokens` is not sent.
pub fn messages_call(
    body: &Value,
    defaults: &SamplingParams,
    count_only: bool,
    server_tools: &[String],
) -> Result<ChatCall, ApiError> {
    let raw: RawMessages = typed(body)?;
    let sampling: RawSampling = typed(body)?;
    let max_tokens = match raw.max_tokens {
        Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        None if count_only => None,
        None => return Err(ApiError::invalid("max_tokens", "max_tokens is required")),
    };
    if raw.messages.is_empty() {
        return Err(ApiError::invalid("messages", "no messages"));
    }
    let mut messages = vec![];
    if let Some(system) = system(raw.system.as_ref())? {
        messages.push(ChatMessage::system(system));
    }
    let mut call_ids = HashSet::new();
    let mut images = Images::new();
    for (i, m) in raw.messages.iter().enumerate() {
        turn(i, m, &mut call_ids, &mut messages, &mut images)?;
    }
    let mut messages = system_first(messages);
    if raw
        .context_management
        .as_ref()
        .is_some_and(|c| !c.is_null())
    {
        // Its edits clear old tool results and thinking to save the model's context; the
        // whole conversation fits here or is refused by its length, so nothing is cleared.
        tracing::debug!("messages: context_management ignored (no edits applied)");
    }
    // A last assistant turn of text is where the answer starts (Anthropic's prefill).
    let prefill = match messages.last() {
        Some(m) if m.role == "assistant" && m.tool_calls.is_empty() => {
            let text = m.content.clone().unwrap_or_default();
            messages.pop();
            Some(text)
        }
        _ => None,
    };
    if !messages.iter().any(|m| m.role == "user") {
        return Err(ApiError::invalid(
            "messages",
            "the conversation needs a user message",
        ));
    }
    let tools = tools(raw.tools.as_deref().unwrap_or_default())?;
    let names = tool_names(&tools).map_err(|e| {
        renamed(
            renamed(e, ".function.parameters", ".input_schema"),
            ".function.",
            ".",
        )
    })?;
    let (tool_choice, parallel) = tool_choice(
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
        max_tokens,
        sampling: sampling.apply(defaults)?,
        stop: sampling
            .stop()
            .map_err(|e| renamed(e, "stop", "stop_sequences"))?,
        enable_thinking: thinking(raw.thinking.as_ref())?,
        response_format: output_format(raw.output_config.as_ref())?,
        parallel_tool_calls: parallel,
        prefill: prefill.filter(|p| !p.is_empty()),
        images,
        user: crate::serve::request::end_user(body),
    })
}

/// `e` with its parameter's `from` written as `to` (the shared checks name OpenAI's fields).
fn renamed(mut e: ApiError, from: &str, to: &str) -> ApiError {
    if let Some(p) = &mut e.param {
        *p = p.replacen(from, to, 1);
    }
    e
}

/// `system`: a string or a list of text blocks.
fn system(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(blocks)) => {
            let mut texts = vec![];
            for (j, b) in blocks.iter().enumerate() {
                texts.push(text_block(&format!("system[{j}]"), b)?);
            }
            Ok(Some(texts.join("\n")))
        }
        Some(_) => Err(ApiError::invalid(
            "system",
            "must be a string or a list of text blocks",
        )),
    }
}

/// A `system`-role message's text (its `content` at `at`): a string or text blocks.
fn system_turn(at: &str, content: &Value) -> Result<String, ApiError> {
    let at = format!("{at}.content");
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => Ok(blocks
            .iter()
            .enumerate()
            .map(|(j, b)| text_block(&format!("{at}[{j}]"), b))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n")),
        _ => Err(ApiError::invalid(
            at,
            "a system message's content is a string or a list of text blocks",
        )),
    }
}

/// A `{"type": "text", "text": …}` block's text.
fn text_block(at: &str, b: &Value) -> Result<String, ApiError> {
    match (block_type(b), b.get("text").and_then(Value::as_str)) {
        ("text", Some(t)) => Ok(t.to_string()),
        ("text", None) => Err(ApiError::invalid(
            format!("{at}.text"),
            "a text block needs a string `text`",
        )),
        (kind, _) => Err(unsupported_block(at, kind)),
    }
}

/// An `image` block's bytes: `source: {type: base64, media_type, data}` (a `url` source is
/// refused: this server fetches nothing).
fn image_source(at: &str, b: &Value) -> Result<Vec<u8>, ApiError> {
    let source = b.get("source");
    match source.and_then(|s| s.get("type")).and_then(Value::as_str) {
        Some("base64") => {
            let data = source
                .and_then(|s| s.get("data"))
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid(format!("{at}.source.data"), "needs a string"))?;
            base64(&format!("{at}.source.data"), data)
        }
        Some("url") => data_uri(
            &format!("{at}.source.url"),
            source
                .and_then(|s| s.get("url"))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
        _ => Err(ApiError::invalid(
            format!("{at}.source.type"),
            "an image source is `base64` (with `data`)",
        )),
    }
}

fn block_type(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn unsupported_block(at: &str, kind: &str) -> ApiError {
    match kind {
        "image" | "document" => ApiError::unsupported(
            &format!("{at}.type"),
            format!("`{kind}` blocks are not supported here"),
        ),
        "" => ApiError::invalid(format!("{at}.type"), "a content block needs a `type`"),
        other => ApiError::invalid(
            format!("{at}.type"),
            format!("unknown content block type `{other}` here"),
        ),
    }
}

/// One turn of `messages`, as the engine's messages (a user turn's `tool_result` blocks are
/// tool messages of their own).
fn turn(
    i: usize,
    v: &Value,
    call_ids: &mut HashSet<String>,
    out: &mut Vec<ChatMessage>,
    images: &mut Images,
) -> Result<(), ApiError> {
    let at = format!("messages[{i}]");
    let role = v
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid(format!("{at}.role"), "a message needs a string role"))?;
    let content = v
        .get("content")
        .ok_or_else(|| ApiError::invalid(format!("{at}.content"), "a message needs `content`"))?;
    let blocks = match content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                "must be a string or a list of content blocks",
            ))
        }
    };
    match role {
        // Claude Code sends system text among the turns: it goes first (`system_first`).
        "system" => {
            out.push(ChatMessage::system(system_turn(&at, content)?));
            Ok(())
        }
        "user" => user_turn(&at, &blocks, call_ids, out, images),
        "assistant" => {
            out.push(assistant_turn(&at, &blocks, call_ids)?);
            Ok(())
        }
        other => Err(ApiError::invalid(
            format!("{at}.role"),
            format!("unknown role `{other}`; expected user, assistant or system"),
        )),
    }
}

fn user_turn(
    at: &str,
    blocks: &[Value],
    call_ids: &HashSet<String>,
    out: &mut Vec<ChatMessage>,
    images: &mut Images,
) -> Result<(), ApiError> {
    let mut texts: Option<PartsText> = None;
    let flush = |texts: &mut Option<PartsText>, out: &mut Vec<ChatMessage>| {
        if let Some(t) = texts.take() {
            out.push(ChatMessage::user(t.finish()));
        }
    };
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(b) {
            "tool_result" => {}
            "image" => {
                images.push(part(format!("{at}.source"), image_source(&at, b)?));
                texts.get_or_insert_with(PartsText::default).image();
                continue;
            }
            _ => {
                let t = text_block(&at, b)?;
                texts.get_or_insert_with(PartsText::default).text(&t);
                continue;
            }
        }
        flush(&mut texts, out);
        let id = b
            .get("tool_use_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{at}.tool_use_id"),
                    "a tool_result needs the tool_use_id of the call it answers",
                )
            })?;
        if !call_ids.contains(id) {
            return Err(ApiError::invalid(
                format!("{at}.tool_use_id"),
                format!("no earlier assistant message has a tool_use with id `{id}`"),
            ));
        }
        let mut result = match b.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                // Text and images (a tool's screenshot, Claude Code's Read of an image).
                let mut text = PartsText::default();
                for (k, p) in parts.iter().enumerate() {
                    let at = format!("{at}.content[{k}]");
                    if block_type(p) == "image" {
                        images.push(ImagePart {
                            from_tool: true,
                            ..part(format!("{at}.source"), image_source(&at, p)?)
                        });
                        text.image();
                    } else {
                        text.text(&text_block(&at, p)?);
                    }
                }
                text.finish()
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("{at}.content"),
                    "must be a string or a list of text blocks",
                ))
            }
        };
        if b.get("is_error").and_then(Value::as_bool) == Some(true) {
            result = format!("Error: {result}");
        }
        let mut m = ChatMessage::tool(result);
        m.extra
            .insert("tool_call_id".into(), Value::String(id.into()));
        out.push(m);
    }
    flush(&mut texts, out);
    Ok(())
}

fn assistant_turn(
    at: &str,
    blocks: &[Value],
    call_ids: &mut HashSet<String>,
) -> Result<ChatMessage, ApiError> {
    let (mut texts, mut thinking, mut calls) = (vec![], vec![], vec![]);
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(b) {
            "text" => texts.push(text_block(&at, b)?),
            "thinking" => thinking.push(
                b.get("thinking")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            format!("{at}.thinking"),
                            "a thinking block needs a string `thinking`",
                        )
                    })?
                    .to_string(),
            ),
            // Another model's encrypted reasoning: nothing this one can read.
            "redacted_thinking" => {}
            "tool_use" => {
                let id = b.get("id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(format!("{at}.id"), "a tool_use block needs an `id`")
                })?;
                let name = b
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        ApiError::invalid(format!("{at}.name"), "a tool_use block needs a `name`")
                    })?;
                let input = match b.get("input") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => {
                        return Err(ApiError::invalid(
                            format!("{at}.input"),
                            "must be a JSON object",
                        ))
                    }
                };
                call_ids.insert(id.to_string());
                let mut call = ToolCall::new(name, input);
                call.id = Some(id.to_string());
                calls.push(call);
            }
            kind => return Err(unsupported_block(&at, kind)),
        }
    }
    let mut m = ChatMessage::assistant(texts.concat());
    if !calls.is_empty() && texts.is_empty() {
        // Only calls: no text, as the templates expect.
        m.content = None;
    }
    m.tool_calls = calls;
    if !thinking.is_empty() {
        m.reasoning_content = Some(thinking.join("\n"));
    }
    Ok(m)
}

/// Anthropic's tools (`name`, `description`, `input_schema`) in the OpenAI function format
/// the engine's templates and grammars read. Server tools (`web_search_…`, `code_execution_…`)
/// run on Anthropic's side: none runs here, so they are left out (logged once), as a client
/// that offers them also works without them.
fn tools(tools: &[Value]) -> Result<Vec<Value>, ApiError> {
    tools
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let at = format!("tools[{i}]");
            let Some(obj) = t.as_object() else {
                return Some(Err(ApiError::invalid(&at, "a tool must be a JSON object")));
            };
            match obj.get("type").and_then(Value::as_str) {
                None | Some("custom") => Some(custom_tool(&at, obj)),
                Some(other) => {
                    note_once(&format!(
                        "messages: server tool `{other}` left out (none runs here)"
                    ));
                    None
                }
            }
        })
        .collect()
}

/// A custom tool in the OpenAI function format.
fn custom_tool(at: &str, obj: &Map<String, Value>) -> Result<Value, ApiError> {
    let mut function = Map::new();
    for (from, to) in [
        ("name", "name"),
        ("description", "description"),
        ("input_schema", "parameters"),
    ] {
        if let Some(v) = obj.get(from) {
            function.insert(to.into(), v.clone());
        }
    }
    if !function.contains_key("parameters") {
        return Err(ApiError::invalid(
            format!("{at}.input_schema"),
            "a tool needs an `input_schema`",
        ));
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_choice` (`auto`, `any`, `tool` with a `name`, `none`) and whether the answer may
/// make more than one call (`disable_parallel_tool_use`).
fn tool_choice(v: Option<&Value>, names: &[String]) -> Result<(ToolChoice, bool), ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok((ToolChoice::Auto, true));
    };
    let parallel = !v
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let choice = match v.get("type").and_then(Value::as_str) {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => {
            let name = v.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid("tool_choice.name", "a `tool` choice needs the tool's name")
            })?;
            ToolChoice::Named(name.to_string())
        }
        other => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                format!("{other:?}: expected auto, any, tool or none"),
            ))
        }
    };
    Ok((offered_choice(choice, names, "tool_choice.name")?, parallel))
}

/// `thinking`: `{"type": "enabled", "budget_tokens": N}` turns the model's thinking on,
/// `{"type": "disabled"}` off; absent leaves it to the model's template.
fn thinking(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.get("type").and_then(Value::as_str) {
        Some("enabled" | "adaptive" | "between_tools") => Ok(Some(true)),
        Some("disabled") => Ok(Some(false)),
        other => Err(ApiError::invalid(
            "thinking.type",
            format!("{other:?}: expected enabled or disabled"),
        )),
    }
}

/// `output_config.format`: `{"type": "json_schema", "schema": {…}}` decodes the answer
/// under that schema (`effort` has nothing to set here).
fn output_format(v: Option<&Value>) -> Result<Option<Constraint>, ApiError> {
    let Some(format) = v.and_then(|c| c.get("format")).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => Ok(Some(json_schema(
            format.get("schema"),
            "output_config.format.schema",
        )?)),
        other => Err(ApiError::invalid(
            "output_config.format.type",
            format!("{other:?}: expected json_schema"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: Value) -> Result<ChatCall, ApiError> {
        messages_call(&body, &SamplingParams::default(), false, &[])
    }

    fn param(body: Value) -> Option<String> {
        call(body).err().and_then(|e| e.param)
    }

    #[test]
    fn a_tool_round_trip_reads_as_the_engine_messages() -> Result<(), ApiError> {
        let c = call(json!({
            "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "add them", "signature": ""},
                    {"type": "text", "text": "Let me add."},
                    {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 2}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "4"}]},
                    {"type": "text", "text": "Thanks"}]}
            ],
            "tools": [{"name": "add", "description": "Add", "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"], "thinking": {"type": "enabled", "budget_tokens": 1024},
            "temperature": 0.2, "stream": true
        }))?;
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(c.messages[2].content.as_deref(), Some("Let me add."));
        assert_eq!(c.messages[2].reasoning_content.as_deref(), Some("add them"));
        assert_eq!(c.messages[2].tool_calls[0].id.as_deref(), Some("toolu_1"));
        assert_eq!(c.messages[3].content.as_deref(), Some("4"));
        assert_eq!(c.messages[3].extra["tool_call_id"], json!("toolu_1"));
        assert_eq!(
            c.tools[0]["function"]["parameters"]["type"],
            json!("object")
        );
        assert_eq!(c.tool_choice, ToolChoice::Required);
        assert!(!c.parallel_tool_calls && c.stream);
        assert_eq!(
            (c.stop, c.enable_thinking, c.max_tokens),
            (vec!["END".to_string()], Some(true), Some(64))
        );
        Ok(())
    }

    #[test]
    fn a_last_assistant_turn_is_the_answers_start() -> Result<(), ApiError> {
        let c = call(json!({"max_tokens": 8, "messages": [
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "The color is"}]}))?;
        assert_eq!(c.messages.len(), 1);
        assert_eq!(c.prefill.as_deref(), Some("The color is"));
        Ok(())
    }

    #[test]
    fn claude_codes_first_request_reads() -> Result<(), ApiError> {
        let body = crate::serve::request::agent_request("claude-code.json");
        let c = call(body)?;
        // Its `system`-role message (after the user's) joins the system text, in order.
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user"]);
        let system = c.messages[0].content.as_deref().unwrap_or_default();
        let (agent, types) = (
            system.find("You are a Claude agent"),
            system.find("Available agent types"),
        );
        assert!(
            agent.is_some() && types.is_some() && agent < types,
            "{system}"
        );
        assert_eq!(c.tools.len(), 24);
        assert_eq!((c.enable_thinking, c.max_tokens), (Some(true), Some(32000)));
        assert!(c.stream);
        // Its third turn: two Write calls and their results (one with `cache_control`).
        let c = call(crate::serve::request::agent_request(
            "claude-code-turn3.json",
        ))?;
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "assistant", "tool"]
        );
        assert_eq!(c.messages[2].tool_calls[0].function.name, "Write");
        Ok(())
    }

    #[test]
    fn system_messages_anywhere_and_server_tools_are_taken() -> Result<(), ApiError> {
        let c = call(json!({"max_tokens": 8, "system": "One.",
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}}]},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Three."}],
            "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {"name": "f", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"}, "thinking": {"type": "adaptive"},
            "metadata": {"user_id": "u"}}))?;
        assert_eq!(
            c.messages[0].content.as_deref(),
            Some("One.\n\nTwo.\n\nThree.")
        );
        assert_eq!(c.messages.len(), 2);
        assert_eq!(c.tool_names, ["f"]);
        assert_eq!(
            param(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"},
                {"role": "system", "content": 7}]})
            ),
            Some("messages[1].content".into())
        );
        Ok(())
    }

    #[test]
    fn errors_name_the_field() {
        let user = json!({"role": "user", "content": "hi"});
        assert_eq!(
            param(json!({"messages": [user]})),
            Some("max_tokens".into())
        );
        assert!(messages_call(
            &json!({"messages": [user]}),
            &SamplingParams::default(),
            true,
            &[]
        )
        .is_ok());
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [{"role": "critic", "content": "x"}]})),
            Some("messages[0].role".into())
        );
        // An image is read (the model then says whether it takes it); a document is not.
        let c = messages_call(
            &json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]}]}),
            &SamplingParams::default(),
            true,
            &[],
        );
        let c = c.ok().unwrap_or_else(|| panic!("an image block is read"));
        assert_eq!(c.images.len(), 1);
        assert_eq!(c.images[0].at, "messages[0].content[1].source");
        let text = c.messages[0].content.clone().unwrap_or_default();
        assert_eq!(text, format!("Look:{}", crate::serve::images::PLACEHOLDER));
        assert_eq!(
            param(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": ""}}]}]})
            ),
            Some("messages[0].content[0].type".into())
        );
        assert_eq!(
            param(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_9", "content": "4"}]}]})
            ),
            Some("messages[0].content[0].tool_use_id".into())
        );
        assert_eq!(
            param(
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "hologram"}]}]})
            ),
            Some("messages[0].content[0].type".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user], "stop_sequences": [""]})),
            Some("stop_sequences[0]".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user],
                "tools": [{"name": "f", "input_schema": {"type": "string"}}]})),
            Some("tools[0].input_schema.type".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user],
                "tools": [{"name": "bad name", "input_schema": {"type": "object"}}]})),
            Some("tools[0].name".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user], "tool_choice": {"type": "any"}})),
            Some("tool_choice".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user], "temperature": "warm"})),
            Some("temperature".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user], "thinking": {"type": "maybe"}})),
            Some("thinking.type".into())
        );
        assert_eq!(
            param(json!({"max_tokens": 5, "messages": [user],
                "output_config": {"format": {"type": "json_schema"}}})),
            Some("output_config.format.schema".into())
        );
    }
}
