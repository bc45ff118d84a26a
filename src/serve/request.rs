//! What every API's request becomes (the [`ChatCall`]), and the reading all three APIs share:
//! the body as JSON, sampling parameters and stop words, tools and their names, the tool
//! choice, system text first, reasoning effort, JSON schemas. Each API reads its own request
//! in its folder (`chat/`, `messages/`, `responses/`).

use super::error::ApiError;
use super::images::Images;
use hearth_engine::constraint::Constraint;
use hearth_engine::{ChatMessage, SamplingParams, ToolChoice};
use serde::Deserialize;
use serde_json::Value;
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

/// `auto`, `none` or `required`: a `tool_choice` given as a string (OpenAI's APIs).
pub fn choice_mode(mode: &str) -> Result<ToolChoice, ApiError> {
    match mode {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        other => Err(ApiError::invalid(
            "tool_choice",
            format!("`{other}`: expected auto, none, required or a named function"),
        )),
    }
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
