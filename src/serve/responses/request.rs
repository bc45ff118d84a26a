//! An OpenAI Responses request read and checked: `input` (a string, or items: messages,
//! `function_call`, `custom_tool_call`, their outputs, `reasoning`), `instructions`, `tools`
//! (see [`super::tools`]), `tool_choice`, `text.format` and `reasoning`, turned into the call
//! every API shares. Stateless: nothing is kept between requests, so `previous_response_id`
//! is refused; `store: false` clients send the reasoning back as `encrypted_content`.

use super::tools::{offered_tools, Offered};
use crate::serve::error::ApiError;
use crate::serve::images::{data_uri, part, Images, PartsText};
use crate::serve::request::{
    choice_mode, effort_thinking, json_schema, note_once, offered_choice, system_first, tool_names,
    typed, ChatCall, RawSampling,
};
use base64::Engine as _;
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

/// Where a reasoning item's `encrypted_content` is this server's: the reasoning, readable.
const REASONING_MARK: &str = "hearth.";

/// A reasoning text as the `encrypted_content` a `store: false` client sends back next turn.
pub fn sealed_reasoning(text: &str) -> String {
    format!(
        "{REASONING_MARK}{}",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}

/// The reasoning in an `encrypted_content` this server gave out (another server's is opaque).
fn unsealed_reasoning(sealed: &str) -> Option<String> {
    let b64 = sealed.strip_prefix(REASONING_MARK)?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

/// The request as a [`ChatCall`], and how its tools' calls go back to the client.
pub fn responses_call(
    body: &Value,
    defaults: &SamplingParams,
    server_tools: &[String],
) -> Result<(ChatCall, Offered), ApiError> {
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
    let (tools, offered) = offered_tools(raw.tools.as_deref().unwrap_or_default())?;
    let mut messages = vec![];
    let mut images = Images::new();
    if let Some(instructions) = raw.instructions.filter(|i| !i.is_empty()) {
        messages.push(ChatMessage::system(instructions));
    }
    match &raw.input {
        Value::String(s) => messages.push(ChatMessage::user(s.clone())),
        Value::Array(items) => items_into(items, &offered, &mut messages, &mut images)?,
        Value::Null => return Err(ApiError::invalid("input", "input is required")),
        _ => {
            return Err(ApiError::invalid(
                "input",
                "must be a string or a list of input items",
            ))
        }
    }
    let messages = system_first(messages);
    if !messages.iter().any(|m| m.role == "user") {
        return Err(ApiError::invalid("input", "the input needs a user message"));
    }
    let names = tool_names(&tools).map_err(|mut e| {
        if let Some(p) = &mut e.param {
            *p = p.replacen(".function.", ".", 1);
        }
        e
    })?;
    let tool_choice = tool_choice(
        raw.tool_choice.as_ref(),
        &offered,
        &[&names[..], server_tools].concat(),
    )?;
    let call = ChatCall {
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
        images,
        user: crate::serve::request::end_user(body),
    };
    Ok((call, offered))
}

/// The input items as the engine's messages: consecutive `function_call` items join the
/// assistant turn before them, a `reasoning` item goes with the assistant turn after it.
fn items_into(
    items: &[Value],
    offered: &Offered,
    out: &mut Vec<ChatMessage>,
    images: &mut Images,
) -> Result<(), ApiError> {
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
                let text = content(&format!("{at}.content"), obj.get("content"), images)?;
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
            kind @ ("function_call" | "custom_tool_call") => {
                let call_id = field("call_id")?;
                let name = offered
                    .engine_name(field("name")?, obj.get("namespace").and_then(Value::as_str));
                let arguments = match obj.get("arguments") {
                    // A custom tool's call carries text: its `input`.
                    _ if kind == "custom_tool_call" => json!({"input": field("input")?}),
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
                let mut call = ToolCall::new(&name, arguments);
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
            "function_call_output" | "custom_tool_call_output" => {
                // Codex sends context of its own as an output with a tool's name and no
                // call (its goal, as `agent.goal_objective`): a result that answers no call.
                let answers = match (obj.get("call_id"), obj.get("name").and_then(Value::as_str)) {
                    (None | Some(Value::Null), Some(name)) => {
                        Err(offered.engine_name(name, obj.get("namespace").and_then(Value::as_str)))
                    }
                    _ => Ok(field("call_id")?),
                };
                if let Ok(call_id) = answers {
                    if !call_ids.contains(call_id) {
                        return Err(ApiError::invalid(
                            format!("{at}.call_id"),
                            format!("no earlier function_call item has call_id `{call_id}`"),
                        ));
                    }
                }
                let before = images.len();
                let output = content(&format!("{at}.output"), obj.get("output"), images)?;
                images[before..].iter_mut().for_each(|i| i.from_tool = true);
                let mut m = ChatMessage::tool(output);
                match answers {
                    Ok(call_id) => m.extra.insert("tool_call_id".into(), call_id.into()),
                    Err(name) => m.extra.insert("name".into(), name.into()),
                };
                out.push(m);
            }
            "reasoning" => {
                let text = reasoning_text(&at, obj)?;
                reasoning = Some(text).filter(|t| !t.is_empty());
            }
            // What hosted tools did (none runs here: another server's turns), and context
            // compacted on OpenAI's servers: nothing this model can read.
            hosted @ ("web_search_call"
            | "file_search_call"
            | "image_generation_call"
            | "code_interpreter_call"
            | "computer_call"
            | "computer_call_output"
            | "local_shell_call"
            | "local_shell_call_output"
            | "mcp_list_tools"
            | "mcp_approval_request"
            | "mcp_approval_response"
            | "compaction"
            | "item_reference") => {
                note_once(&format!("responses: `{hosted}` input items left out"));
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
fn content(at: &str, v: Option<&Value>, images: &mut Images) -> Result<String, ApiError> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = PartsText::default();
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text", Some(t)) => texts.text(t),
                    ("input_image", _) => {
                        let at = format!("{at}[{j}].image_url");
                        let url = p.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::invalid(
                                &at,
                                "needs an `image_url` (a data URI; file ids are not kept)",
                            )
                        })?;
                        images.push(part(at.clone(), data_uri(&at, url)?));
                        texts.image();
                    }
                    ("input_text" | "output_text" | "text", None) => {
                        return Err(ApiError::invalid(
                            format!("{at}[{j}].text"),
                            "a text part needs a string `text`",
                        ))
                    }
                    ("refusal", _) => {}
                    ("input_file" | "input_audio", _) => {
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
            Ok(texts.finish())
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
    if !content.is_empty() {
        return Ok(content.join("\n"));
    }
    if let Some(text) = obj
        .get("encrypted_content")
        .and_then(Value::as_str)
        .and_then(unsealed_reasoning)
    {
        return Ok(text);
    }
    Ok(texts("summary")?.join("\n"))
}

/// `auto`, `none`, `required`, or `{"type": "function" | "custom", "name": …}` (with the
/// function's `namespace` where it has one).
fn tool_choice(
    v: Option<&Value>,
    offered: &Offered,
    names: &[String],
) -> Result<ToolChoice, ApiError> {
    let choice = match v {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => choice_mode(s)?,
        Some(Value::Object(o))
            if matches!(
                o.get("type").and_then(Value::as_str),
                Some("function" | "custom")
            ) =>
        {
            let name = o.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid("tool_choice.name", "a function choice needs its `name`")
            })?;
            ToolChoice::Named(offered.engine_name(name, o.get("namespace").and_then(Value::as_str)))
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

/// `reasoning.effort`: `none` turns the model's thinking off, any other effort on
/// (`reasoning.summary` asks for summaries, which this server does not write: its reasoning
/// items carry the reasoning itself).
fn reasoning(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    match v.filter(|v| !v.is_null()).map(|r| r.get("effort")) {
        None | Some(None) | Some(Some(Value::Null)) => Ok(None),
        Some(Some(Value::String(e))) => effort_thinking(Some(e), "reasoning.effort"),
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
        responses_call(&body, &SamplingParams::default(), &[]).map(|(c, _)| c)
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
    fn codexs_first_request_reads() -> Result<(), ApiError> {
        let body = crate::serve::request::agent_request("codex.json");
        let (c, offered) = responses_call(&body, &SamplingParams::default(), &[])?;
        // Two developer messages become the system text; the hosted web_search is left out;
        // the namespace's functions are offered under their own names.
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "user"]);
        assert!(c.tool_names.iter().any(|n| n == "exec_command"));
        assert!(c.tool_names.iter().any(|n| n == "spawn_agent"));
        assert!(!c.tool_names.iter().any(|n| n == "web_search"));
        assert_eq!(
            offered.dress("spawn_agent"),
            super::super::tools::Dressed::Function {
                name: "spawn_agent".into(),
                namespace: Some("multi_agent_v1".into())
            }
        );
        assert!(c.stream && c.parallel_tool_calls);
        // Its third turn: two exec_command calls and their outputs.
        let body = crate::serve::request::agent_request("codex-turn3.json");
        let (c, _) = responses_call(&body, &SamplingParams::default(), &[])?;
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(
            roles,
            [
                "system",
                "user",
                "user",
                "assistant",
                "tool",
                "assistant",
                "tool"
            ]
        );
        assert_eq!(c.messages[3].tool_calls[0].function.name, "exec_command");
        // Its second turn with a goal (Codex 0.171, the 1.5B): `create_goal`'s output, then
        // the goal as an output of `agent.goal_objective` that answers no call.
        let body = crate::serve::request::agent_request("codex-goal.json");
        let (c, _) = responses_call(&body, &SamplingParams::default(), &[])?;
        let last = c
            .messages
            .last()
            .ok_or_else(|| ApiError::invalid("input", "empty"))?;
        assert_eq!(
            (last.role.as_str(), &last.extra["name"]),
            ("tool", &json!("agent.goal_objective"))
        );
        assert!(last.text().starts_with("Create a file named hello.py"));
        Ok(())
    }

    #[test]
    fn namespaced_custom_and_sealed_items_come_back() -> Result<(), ApiError> {
        let sealed = sealed_reasoning("think <b>");
        let (c, _) = responses_call(
            &json!({"input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "reasoning", "summary": [], "encrypted_content": sealed},
                {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
                {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
                {"type": "web_search_call", "status": "completed", "action": {"type": "search"}},
                {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-someone-elses"},
                {"role": "system", "content": "late"}],
                "tools": [{"type": "namespace", "name": "agents", "description": "d", "tools": [
                    {"type": "function", "name": "spawn", "parameters": {"type": "object"}}]},
                    {"type": "custom", "name": "apply_patch", "description": "p"}],
                "tool_choice": {"type": "function", "namespace": "agents", "name": "spawn"},
                "include": ["reasoning.encrypted_content"], "store": false,
                "prompt_cache_key": "k", "reasoning": {"effort": "xhigh", "summary": "auto"}}),
            &SamplingParams::default(),
            &[],
        )?;
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
        let a = &c.messages[2];
        assert_eq!(a.reasoning_content.as_deref(), Some("think <b>"));
        assert_eq!(a.tool_calls[0].function.name, "spawn");
        assert_eq!(
            a.tool_calls[1].function.arguments,
            json!({"input": "*** Begin Patch"})
        );
        assert_eq!(c.tool_choice, ToolChoice::Named("spawn".into()));
        assert_eq!(c.enable_thinking, Some(true));
        Ok(())
    }

    #[test]
    fn an_output_with_a_name_and_no_call_is_a_result_of_its_own() -> Result<(), ApiError> {
        // As Codex 0.171 sends its goal after the first turn.
        let c = call(json!({"model": "m", "input": [
            {"role": "user", "content": "Create hello.py"},
            {"type": "function_call_output", "name": "goal_objective", "namespace": "agent",
             "output": "Create hello.py"}
        ]}))?;
        assert_eq!(c.messages[1].role, "tool");
        assert_eq!(c.messages[1].text(), "Create hello.py");
        assert!(c.messages[1].extra.get("tool_call_id").is_none());
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
            Some("input[0].content[0].image_url".into())
        );
        assert_eq!(
            param(json!({"input": [{"role": "wizard", "content": "x"}]})),
            Some("input[0].role".into())
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
