//! Property tests of the request decoders — chat completions, Anthropic's messages, OpenAI's
//! responses — on hostile bodies: arbitrary bytes, JSON of any shape in the places their
//! requests have fields, and valid bodies with bytes changed. Each decoder answers a 4xx naming
//! what is wrong, or a call; none panics or hangs (`scripts/fuzz.sh` runs them for minutes).

use super::chat::request::chat_call;
use super::request::json_object;
use hearth_engine::SamplingParams;
use hearth_fuzz::check;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// JSON of any shape, its strings now and then the words a chat request's values use.
fn json_value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        ".{0,12}",
        prop::sample::select(vec![
            "user",
            "assistant",
            "tool",
            "system",
            "function",
            "auto",
            "required",
            "json_schema",
        ])
        .prop_map(str::to_owned),
    ];
    hearth_fuzz::json_value(text, field(), 3, 5)
}

/// The names a chat request's objects have, and a few others.
fn field() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => prop::sample::select(vec![
            "role", "content", "name", "tool_calls", "tool_call_id", "id", "type",
            "function", "arguments", "parameters", "properties", "required", "text",
            "json_schema", "schema", "strict", "messages", "tools", "tool_choice",
            "tool_use_id", "input", "input_schema", "call_id", "output", "thinking",
            "tool_result", "tool_use", "function_call", "function_call_output", "input_text",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,8}",
    ]
}

/// A chat body: each top-level field absent, well typed or of any JSON shape.
fn chat_body() -> impl Strategy<Value = Value> {
    let message = prop_oneof![
        3 => (prop::sample::select(vec!["system", "user", "assistant", "tool", "developer"]), ".{0,20}")
            .prop_map(|(r, c)| json!({"role": r, "content": c})),
        1 => json_value(),
    ];
    let fields = vec![
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "stop",
        "seed",
        "stream",
        "stream_options",
        "logit_bias",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "response_format",
        "tools",
        "tool_choice",
        "logprobs",
        "top_logprobs",
        "parallel_tool_calls",
        "session",
        "user",
        "system",
        "stop_sequences",
        "thinking",
        "output_config",
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "reasoning",
        "previous_response_id",
    ];
    (
        prop::collection::vec(message, 0..5),
        prop::collection::vec((prop::sample::select(fields), json_value()), 0..6),
    )
        .prop_map(|(messages, extra)| {
            let mut body = Map::new();
            body.insert("messages".into(), Value::Array(messages));
            for (k, v) in extra {
                body.insert(k.into(), v);
            }
            Value::Object(body)
        })
}

/// What each decoder must answer: a call, or a client error.
fn decoded(body: &Value) -> Result<(), TestCaseError> {
    let defaults = SamplingParams::default();
    let server_tools = ["clock".to_string()];
    for call in [
        chat_call(body, &defaults, &server_tools),
        super::messages::request::messages_call(body, &defaults, false, &server_tools),
        super::responses::request::responses_call(body, &defaults, &server_tools).map(|(c, _)| c),
    ] {
        match call {
            Ok(call) => prop_assert!(!call.messages.is_empty(), "a call without messages"),
            Err(e) => {
                prop_assert!(e.status.is_client_error(), "{}: {}", e.status, e.message);
                prop_assert!(!e.message.is_empty());
                prop_assert!(e.param.as_deref() != Some(""), "an empty param name");
            }
        }
    }
    Ok(())
}

#[test]
fn request_bodies_of_arbitrary_bytes_are_refused_clearly() {
    check(
        "serve body bytes",
        prop::collection::vec(any::<u8>(), 0..256),
        |bytes| {
            match json_object(&bytes) {
                Ok(v) => decoded(&v)?,
                Err(e) => prop_assert!(e.status.is_client_error()),
            }
            Ok(())
        },
    );
}

#[test]
fn chat_bodies_of_any_shape_decode_or_name_their_fault() {
    check("serve chat body", chat_body(), |body| decoded(&body));
}

#[test]
fn valid_chat_bodies_with_bytes_changed_decode_or_name_their_fault() {
    let body = json!({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18 C"}
        ],
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}],
        "tool_choice": "auto", "temperature": 0.7, "max_tokens": 64, "stop": ["\n\n"],
        "response_format": {"type": "text"}
    })
    .to_string()
    .into_bytes();
    let edits = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8);
    check("serve chat body mutated", edits, |edits| {
        let mut bytes = body.clone();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len().max(1)).min(bytes.len());
            match kind {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        match json_object(&bytes) {
            Ok(v) => decoded(&v)?,
            Err(e) => prop_assert!(e.status.is_client_error()),
        }
        Ok(())
    });
}
