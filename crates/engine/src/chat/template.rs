//! The model's own Jinja chat template, rendered with minijinja the way Hugging Face's
//! `apply_chat_template` renders it: `trim_blocks` and `lstrip_blocks`, Python string and dict
//! methods (minijinja-contrib's pycompat), loop controls, and HF's globals and filters
//! (`raise_exception`, `strftime_now`, a `tojson` that writes like Python's `json.dumps`).

use super::ChatMessage;
use crate::error::{EngineError, Result};
use hearth_chat::PyJson;
use minijinja::value::{Kwargs, Value as JValue, ValueKind};
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::{Map, Value};

/// Everything a chat template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct ChatInput<'a> {
    /// The conversation.
    pub messages: &'a [ChatMessage],
    /// JSON schemas of the tools, as given (OpenAI's `{"type": "function", …}` or bare).
    pub tools: Option<&'a [Value]>,
    /// End with the opening of the model's turn, so that it answers next.
    pub add_generation_prompt: bool,
    /// Passed only when set: templates test `enable_thinking is defined`.
    pub enable_thinking: Option<bool>,
    /// Any other variable a template reads.
    pub extra: Map<String, Value>,
}

/// A compiled Jinja chat template and the special tokens it is rendered with.
pub struct JinjaTemplate {
    env: Environment<'static>,
    source: String,
    /// Where the template came from, for errors.
    origin: String,
    /// `bos_token`, `eos_token`, … from tokenizer_config.json.
    special_tokens: Map<String, Value>,
}

impl std::fmt::Debug for JinjaTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JinjaTemplate({} bytes)", self.source.len())
    }
}

const NAME: &str = "chat_template";

/// Template instructions one render may run. A Qwen-style template over 2 000 messages and
/// 200 tools takes about 130 000; a template from a model file that loops without end is
/// stopped here (in about half a second) instead of hanging the caller.
pub const FUEL: u64 = 10_000_000;

impl JinjaTemplate {
    /// Compiles `source`; `origin` names where it came from in errors.
    pub fn new(source: &str, special_tokens: Map<String, Value>, origin: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_filter("string", py_string);
        env.add_test("iterable", py_iterable);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| template_error(origin, e))?;
        Ok(Self {
            env,
            source: source.to_owned(),
            origin: origin.to_owned(),
            special_tokens,
        })
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `input` into the prompt, as `apply_chat_template` would.
    pub fn render(&self, input: &ChatInput<'_>) -> Result<String> {
        validate(input)?;
        let mut ctx = self.special_tokens.clone();
        ctx.insert(
            "messages".into(),
            serde_json::to_value(input.messages).map_err(json_err)?,
        );
        ctx.insert(
            "tools".into(),
            match input.tools {
                Some(t) => Value::Array(t.to_vec()),
                None => Value::Null,
            },
        );
        ctx.insert(
            "add_generation_prompt".into(),
            input.add_generation_prompt.into(),
        );
        if let Some(t) = input.enable_thinking {
            ctx.insert("enable_thinking".into(), t.into());
        }
        for (k, v) in &input.extra {
            ctx.insert(k.clone(), v.clone());
        }
        let origin = format!("chat template from {}", self.origin);
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| template_error(&origin, e))?;
        tmpl.render(JValue::from_serialize(&ctx))
            .map_err(|e| template_error(&origin, e))
    }
}

/// Checks what every template assumes: known roles, tools that are JSON objects.
fn validate(input: &ChatInput<'_>) -> Result<()> {
    for (i, m) in input.messages.iter().enumerate() {
        if !matches!(m.role.as_str(), "system" | "user" | "assistant" | "tool") {
            return Err(EngineError::invalid(
                "messages",
                format!("messages[{i}] has unknown role `{}` (expected system, user, assistant or tool)", m.role),
            ));
        }
    }
    validate_tools(input)
}

pub(crate) fn validate_tools(input: &ChatInput<'_>) -> Result<()> {
    for (i, t) in input.tools.unwrap_or_default().iter().enumerate() {
        if !t.is_object() {
            return Err(EngineError::invalid(
                "tools",
                format!("tools[{i}] is not a JSON object (a function schema): {t}"),
            ));
        }
    }
    Ok(())
}

fn json_err(e: serde_json::Error) -> EngineError {
    EngineError::invalid("messages", e.to_string())
}

/// Keeps the template's own words (a `raise_exception` message, the undefined name).
fn template_error(origin: &str, e: JError) -> EngineError {
    let mut msg = match e.detail() {
        _ if e.kind() == ErrorKind::OutOfFuel => format!(
            "stopped after {FUEL} steps without finishing (the template loops too long or forever)"
        ),
        Some(d) => d.to_string(),
        None => e.to_string(),
    };
    if let Some(line) = e.line() {
        msg = format!("{msg} (line {line})");
    }
    EngineError::Template {
        origin: origin.into(),
        message: msg,
    }
}

/// The widest `tojson(indent=…)` a template may ask for (each level of nesting repeats it).
const MAX_INDENT: usize = 64;

fn tojson(value: JValue, kwargs: Kwargs) -> std::result::Result<String, JError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    if let Some(n) = indent.filter(|&n| n > MAX_INDENT) {
        return Err(JError::new(
            ErrorKind::InvalidOperation,
            format!("tojson: indent {n} is more than {MAX_INDENT}"),
        ));
    }
    let mut fmt = PyJson::with_indent(indent);
    if let Some(seps) = kwargs.get::<Option<Vec<String>>>("separators")? {
        match seps.as_slice() {
            [item, key] => {
                fmt.item_sep = item.clone();
                fmt.key_sep = key.clone();
            }
            _ => {
                return Err(JError::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be two strings",
                ))
            }
        }
    }
    fmt.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    fmt.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let v: Value = serde_json::to_value(&value)
        .map_err(|e| JError::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    Ok(fmt.dumps(&v))
}

/// Python's `str()`, as transformers' Jinja has it: `True`, `False` and `None` where minijinja
/// writes `true`, `false` and `none` (Qwen3-Coder's template writes scalar arguments so).
fn py_string(value: JValue) -> String {
    match value.kind() {
        ValueKind::Bool if value.is_true() => "True".into(),
        ValueKind::Bool => "False".into(),
        ValueKind::None => "None".into(),
        _ => value.to_string(),
    }
}

/// Python's idea of iterable: strings, lists and mappings, not `None` (minijinja's test says
/// yes to none and undefined, and `tools is iterable and tools | length` then fails).
fn py_iterable(value: JValue) -> bool {
    !matches!(value.kind(), ValueKind::None | ValueKind::Undefined) && value.try_iter().is_ok()
}

fn raise_exception(message: String) -> std::result::Result<String, JError> {
    Err(JError::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> std::result::Result<String, JError> {
    use std::fmt::Write;
    // A bad specifier is a formatting error (`to_string` would panic on it).
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        JError::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, msgs: &[ChatMessage]) -> Result<String> {
        let t = JinjaTemplate::new(src, Map::new(), "test")?;
        t.render(&ChatInput {
            messages: msgs,
            ..Default::default()
        })
    }

    #[test]
    fn raise_exception_carries_the_templates_message() {
        let err = render(
            "{{ raise_exception('Only user and assistant roles!') }}",
            &[ChatMessage::user("x")],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("Only user and assistant roles!"), "{err}");
    }

    #[test]
    fn bad_strftime_formats_and_huge_indents_are_errors() {
        for (src, why) in [
            ("{{ strftime_now('%Q') }}", "bad format"),
            (
                "{{ messages | tojson(indent=1000000000000000000) }}",
                "indent",
            ),
        ] {
            let err = render(src, &[ChatMessage::user("x")])
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{src}: {err}");
        }
        let ok = render("{{ [1] | tojson(indent=64) }}", &[]).unwrap();
        assert_eq!(ok, format!("[\n{}1\n]", " ".repeat(64)));
    }

    #[test]
    fn undefined_attribute_is_an_error() {
        let err = render("{{ nothing.here }}", &[]).unwrap_err().to_string();
        assert!(err.contains("undefined"), "{err}");
    }

    #[test]
    fn syntax_error_names_the_origin() {
        let err = JinjaTemplate::new("{% if %}", Map::new(), "tokenizer_config.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tokenizer_config.json"), "{err}");
    }

    #[test]
    fn python_methods_loops_and_namespaces() {
        let src = "{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% if m.content.startswith('a') %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }}|{{ messages[0].content.split('</think>')[-1].lstrip('\\n') }}|{{ strftime_now('%Y') | length }}";
        let msgs = [
            ChatMessage::user("ab</think>\n\ncd"),
            ChatMessage::user("x"),
            ChatMessage::user("a"),
        ];
        assert_eq!(render(src, &msgs).unwrap(), "2|cd|4");
    }

    #[test]
    fn rejects_unknown_roles_and_non_object_tools() {
        let err = render("", &[ChatMessage::new("robot", "hi")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("robot") && err.contains("messages[0]"),
            "{err}"
        );
        let t = JinjaTemplate::new("", Map::new(), "t").unwrap();
        let tools = [serde_json::json!("calculator")];
        let err = t
            .render(&ChatInput {
                messages: &[],
                tools: Some(&tools),
                ..Default::default()
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("tools[0]"), "{err}");
    }

    #[test]
    fn a_template_that_never_ends_is_stopped_and_named(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let start = std::time::Instant::now();
        for src in [
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = i * j %}{% endfor %}{% endfor %}",
            "{% macro f(n) %}{% for i in range(100000) %}{{ f(n - 1) if n > 0 }}{% endfor %}{% endmacro %}{{ f(3) }}",
        ] {
            let t = JinjaTemplate::new(src, Map::new(), "tokenizer_config.json")?;
            let err = t
                .render(&ChatInput::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("tokenizer_config.json") && err.contains("without finishing"),
                "{err}"
            );
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            start.elapsed()
        );
        Ok(())
    }

    /// Fuel enough for a long agent conversation with many tools under a Qwen-style template.
    #[test]
    fn fuel_suffices_for_long_conversations_with_many_tools(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let src = r#"{%- if tools %}{{- '<|im_start|>system\n' }}{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}{{- '<|im_end|>\n' }}{%- endif %}{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}{%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}{%- for message in messages %}{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}{%- if message.role == "user" or message.role == "system" %}{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}{%- elif message.role == "assistant" %}{%- set reasoning_content = '' %}{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}{{- '<|im_start|>' + message.role + '\n' + content }}{{- '<|im_end|>\n' }}{%- elif message.role == "tool" %}{{- '<|im_start|>user' }}{{- '\n<tool_response>\n' }}{{- content }}{{- '\n</tool_response>' }}{{- '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"#;
        let msgs: Vec<ChatMessage> = (0..2000)
            .map(|i| match i % 3 {
                0 => ChatMessage::user(format!("question {i}")),
                1 => ChatMessage::new("assistant", format!("<think>hm</think>answer {i}")),
                _ => ChatMessage::new("tool", format!("result {i}")),
            })
            .collect();
        let tools: Vec<Value> = (0..200)
            .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("t{i}"), "parameters": {"type": "object"}}}))
            .collect();
        let t = JinjaTemplate::new(src, Map::new(), "test")?;
        let out = t.render(&ChatInput {
            messages: &msgs,
            tools: Some(&tools),
            add_generation_prompt: true,
            ..Default::default()
        })?;
        assert!(
            out.contains("answer 1999")
                || out.contains("result 1999")
                || out.contains("question 1998")
        );
        Ok(())
    }
}
