//! A chat-completions request read and checked: OpenAI's JSON in, the engine's messages,
//! tools and parameters out, or an error that names the field at fault.

use super::error::ApiError;
use super::images::{data_uri, part, Images, PartsText};
use hearth_engine::constraint::Constraint;
use hearth_engine::{ChatMessage, SamplingParams, ToolCall, ToolChoice};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashSet;

#[derive(Debug, Clone)]
pub struct ChatCall {
    pub messages: Vec<ChatMessage>,
    /// The tools as the client sent them (OpenAI's function format).
    pub tools: Vec<Value>,
    pub tool_names: Vec<String>,
    pub tool_choice: ToolChoice,
    pub stream: bool,
    pub include_usage: bool,
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub enable_thinking: Option<bool>,
    /// `response_format`: the answer must be JSON (of a schema).
    pub response_format: Option<Constraint>,
    /// `parallel_tool_calls` (default true): false ends the answer after its first call.
    pub parallel_tool_calls: bool,
    /// Text the answer starts with (Anthropic's trailing assistant message), not sent back.
    pub prefill: Option<String>,
    /// The messages' images (placeholders in their text), in order.
    pub images: Images,
    /// Who the request is for (`user` or `safety_identifier`; Anthropic's
    /// `metadata.user_id`), passed to the MCP tools the server runs.
    pub user: Option<String>,
}

/// The end user a request names: OpenAI's `safety_identifier` or `user`, Anthropic's
/// `metadata.user_id`.
pub fn end_user(body: &Value) -> Option<String> {
    [
        &body["safety_identifier"],
        &body["user"],
        &body["metadata"]["user_id"],
    ]
    .into_iter()
    .find_map(|v| v.as_str().filter(|s| !s.is_empty()))
    .map(str::to_owned)
}

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

/// Parameters `/v1/chat/completions` and `/v1/completions` share.
#[derive(Deserialize)]
pub struct RawSampling {
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    min_p: Option<f32>,
    #[serde(default)]
    repetition_penalty: Option<f32>,
    #[serde(default)]
    presence_penalty: Option<f32>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    logit_bias: Option<Value>,
    /// Anthropic's name for it, in `/v1/messages`.
    #[serde(default, alias = "stop_sequences")]
    stop: Option<Value>,
}

/// At most this many stop strings (OpenAI takes 4; llama.cpp's clients send a few more)…
const MAX_STOPS: usize = 64;
/// … of at most this many bytes each: every generated token is checked against every one.
const MAX_STOP_BYTES: usize = 1024;

/// Reads `body` as `T`, naming the field whose type is wrong.
pub fn typed<T: serde::de::DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." {
            ApiError::bad_body(inner)
        } else {
            ApiError::invalid(path, inner)
        }
    })
}

/// The body as a JSON object.
pub fn json_object(bytes: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_body(format!("malformed JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_body("the request body must be a JSON object"));
    }
    Ok(v)
}

impl RawSampling {
    /// The model's defaults with the request's overrides, checked.
    pub fn apply(&self, defaults: &SamplingParams) -> Result<SamplingParams, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::unsupported("n", "only n = 1 is supported"));
        }
        if self
            .logprobs
            .as_ref()
            .is_some_and(|v| v != &Value::Bool(false) && !v.is_null())
        {
            return Err(ApiError::unsupported(
                "logprobs",
                "logprobs are not supported",
            ));
        }
        // A bias that would be silently ignored changes what the client asked for.
        if self
            .logit_bias
            .as_ref()
            .is_some_and(|v| !v.is_null() && v.as_object().is_none_or(|o| !o.is_empty()))
        {
            return Err(ApiError::unsupported(
                "logit_bias",
                "logit_bias is not supported",
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if v.is_some_and(|v| v != 0.0) {
                return Err(ApiError::unsupported(
                    name,
                    format!("{name} is not supported; use repetition_penalty"),
                ));
            }
        }
        let mut s = defaults.clone();
        if let Some(t) = self.temperature {
            s.temperature = t;
        }
        // 1 (top_p), 0 (min_p) and -1 or 0 (top_k, vLLM's convention) turn a filter off;
        // values out of range are refused below, not taken as off.
        if let Some(p) = self.top_p {
            s.top_p = (p != 1.0).then_some(p);
        }
        if let Some(k) = self.top_k {
            s.top_k = match k {
                -1 | 0 => None,
                k => Some(usize::try_from(k).map_err(|_| {
                    ApiError::invalid(
                        "top_k",
                        format!("invalid top_k: {k} (must be -1 or 0 for off, or positive)"),
                    )
                })?),
            };
        }
        if let Some(p) = self.min_p {
            s.min_p = (p != 0.0).then_some(p);
        }
        if let Some(r) = self.repetition_penalty {
            s.repetition_penalty = r;
        }
        if let Some(seed) = self.seed {
            s.seed = seed as u64;
        }
        s.validate().map_err(hearth_engine::EngineError::from)?;
        Ok(s)
    }

    /// `stop`: a string or a list of strings.
    pub fn stop(&self) -> Result<Vec<String>, ApiError> {
        let stops = match &self.stop {
            None | Some(Value::Null) => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| ApiError::invalid(format!("stop[{i}]"), "must be a string"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(ApiError::invalid(
                    "stop",
                    "must be a string or a list of strings",
                ))
            }
        };
        if let Some(i) = stops.iter().position(String::is_empty) {
            return Err(ApiError::invalid(format!("stop[{i}]"), "empty stop string"));
        }
        if stops.len() > MAX_STOPS {
            return Err(ApiError::invalid(
                "stop",
                format!("{} stop strings; at most {MAX_STOPS}", stops.len()),
            ));
        }
        if let Some(i) = stops.iter().position(|s| s.len() > MAX_STOP_BYTES) {
            return Err(ApiError::invalid(
                format!("stop[{i}]"),
                format!(
                    "a stop string of {} bytes; at most {MAX_STOP_BYTES}",
                    stops[i].len()
                ),
            ));
        }
        Ok(stops)
    }
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

/// The offered tools' names, each tool checked: a function with a name and an object schema.
pub fn tool_names(tools: &[Value]) -> Result<Vec<String>, ApiError> {
    let mut names: Vec<String> = vec![];
    for (i, t) in tools.iter().enumerate() {
        let at = format!("tools[{i}]");
        if let Some(kind) = t.get("type") {
            if kind != "function" {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!("tool type {kind} is not supported; only \"function\""),
                ));
            }
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| ApiError::invalid(&at, "a tool needs a `function` object"))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("{at}.function.name"), "needs a name"))?;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(ApiError::invalid(
                format!("{at}.function.name"),
                format!("`{name}`: a name is 1 to 64 letters, digits, `_`, `-` or `.`"),
            ));
        }
        if names.iter().any(|n| n == name) {
            return Err(ApiError::invalid(
                format!("{at}.function.name"),
                format!("two tools are named `{name}`"),
            ));
        }
        if let Some(p) = f.get("parameters") {
            check_parameters(&format!("{at}.function.parameters"), p)?;
        }
        names.push(name.to_string());
    }
    Ok(names)
}

/// A tool's parameters: a JSON Schema object describing an object.
fn check_parameters(at: &str, p: &Value) -> Result<(), ApiError> {
    let obj = p
        .as_object()
        .ok_or_else(|| ApiError::invalid(at, "must be a JSON Schema object"))?;
    if let Some(t) = obj.get("type") {
        if t != "object" {
            return Err(ApiError::invalid(
                format!("{at}.type"),
                format!("the parameters schema must have type \"object\", not {t}"),
            ));
        }
    }
    if let Some(props) = obj.get("properties") {
        let props = props
            .as_object()
            .ok_or_else(|| ApiError::invalid(format!("{at}.properties"), "must be an object"))?;
        for (k, v) in props {
            if !v.is_object() && !v.is_boolean() {
                return Err(ApiError::invalid(
                    format!("{at}.properties.{k}"),
                    "each property must be a schema (an object)",
                ));
            }
        }
    }
    if let Some(req) = obj.get("required") {
        let ok = req
            .as_array()
            .is_some_and(|a| a.iter().all(Value::is_string));
        if !ok {
            return Err(ApiError::invalid(
                format!("{at}.required"),
                "must be a list of property names",
            ));
        }
    }
    Ok(())
}

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

/// `choice` if the tools offered (`names`) allow it: a named tool must be among them, and a
/// required call needs one. `name_at` is where the API's request names the tool.
pub fn offered_choice(
    choice: ToolChoice,
    names: &[String],
    name_at: &str,
) -> Result<ToolChoice, ApiError> {
    if let ToolChoice::Named(name) = &choice {
        if !names.iter().any(|n| n == name) {
            return Err(ApiError::invalid(
                name_at,
                format!("`{name}` is not among the tools offered"),
            ));
        }
    }
    if names.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::invalid(
            "tool_choice",
            "a tool call is required but no tools are offered",
        ));
    }
    Ok(choice)
}

/// The conversation with its system text first: every system message's text, in order,
/// joined into one leading message, where the templates take system text (Qwen3.5's refuses a
/// system message anywhere else). Agents send them among the turns (Claude Code's `system`
/// role, Codex's `developer` input).
pub fn system_first(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let (systems, mut rest): (Vec<ChatMessage>, Vec<ChatMessage>) =
        messages.into_iter().partition(|m| m.role == "system");
    if !systems.is_empty() {
        let text: Vec<String> = systems.into_iter().filter_map(|m| m.content).collect();
        rest.insert(0, ChatMessage::system(text.join("\n\n")));
    }
    rest
}

/// A reasoning effort (`reasoning_effort`, `reasoning.effort`) as the model's thinking switch:
/// `none` turns it off, any other effort on (the model has no finer setting).
pub fn effort_thinking(effort: Option<&str>, at: &str) -> Result<Option<bool>, ApiError> {
    match effort {
        None => Ok(None),
        Some("none") => Ok(Some(false)),
        Some("minimal" | "low" | "medium" | "high" | "xhigh" | "max") => Ok(Some(true)),
        Some(other) => Err(ApiError::invalid(
            at,
            format!("`{other}`: expected none, minimal, low, medium, high, xhigh or max"),
        )),
    }
}

/// A coding agent's recorded request (`tests/data/coding-agents/NAME`): its body.
#[cfg(test)]
pub fn agent_request(name: &str) -> Value {
    let path = format!(
        "{}/tests/data/coding-agents/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    v["body"].clone()
}

/// Logs `what` once per process: a part of a request that every turn of an agent sends and
/// the server leaves out (a hosted tool, an ignored option) is said once, not per request.
pub fn note_once(what: &str) {
    static SAID: std::sync::Mutex<Option<HashSet<String>>> = std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said
        .get_or_insert_with(HashSet::new)
        .insert(what.to_string())
    {
        tracing::info!("{what}");
    }
}

/// A `{"type": "json_schema", …, "schema": {…}}` format's constraint (the schema at
/// `schema_at` of the request).
pub fn json_schema(schema: Option<&Value>, schema_at: &str) -> Result<Constraint, ApiError> {
    let schema = schema
        .filter(|s| s.is_object() || s.is_boolean())
        .ok_or_else(|| {
            ApiError::invalid(schema_at, "a json_schema format needs a `schema` object")
        })?;
    Ok(Constraint::JsonSchema(schema.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
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
