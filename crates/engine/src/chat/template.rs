//! The model's own Jinja chat template, rendered with minijinja the way Hugging Face's
//! `apply_chat_template` renders it: `trim_blocks` and `lstrip_blocks`, Python string and dict
//! methods (minijinja-contrib's pycompat), loop controls, and HF's globals and filters
//! (`raise_exception`, `strftime_now`, a `tojson` that writes like Python's `json.dumps`).

use super::message::ChatMessage;
use super::tojson::PyJson;
use crate::error::{EngineError, Result};
use minijinja::value::{Kwargs, Value as JValue};
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::{Map, Value};

/// Everything a chat template is rendered with.
#[derive(Debug, Clone, Default)]
pub struct ChatInput<'a> {
    pub messages: &'a [ChatMessage],
    /// JSON schemas of the tools, as given (OpenAI's `{"type": "function", …}` or bare).
    pub tools: Option<&'a [Value]>,
    pub add_generation_prompt: bool,
    /// Passed only when set: templates test `enable_thinking is defined`.
    pub enable_thinking: Option<bool>,
    /// Any other variable a template reads.
    pub extra: Map<String, Value>,
}

pub struct JinjaTemplate {
    env: Environment<'static>,
    source: String,
    /// `bos_token`, `eos_token`, … from tokenizer_config.json.
    special_tokens: Map<String, Value>,
}

impl std::fmt::Debug for JinjaTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JinjaTemplate({} bytes)", self.source.len())
    }
}

const NAME: &str = "chat_template";

impl JinjaTemplate {
    /// Compiles `source`; `origin` names where it came from in errors.
    pub fn new(source: &str, special_tokens: Map<String, Value>, origin: &str) -> Result<Self> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| template_error(origin, e))?;
        Ok(Self {
            env,
            source: source.to_owned(),
            special_tokens,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

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
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| template_error("chat template", e))?;
        tmpl.render(JValue::from_serialize(&ctx))
            .map_err(|e| template_error("chat template", e))
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

fn tojson(value: JValue, kwargs: Kwargs) -> std::result::Result<String, JError> {
    let indent: Option<usize> = kwargs.get("indent")?;
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

fn raise_exception(message: String) -> std::result::Result<String, JError> {
    Err(JError::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> String {
    chrono::Local::now().format(&format).to_string()
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
}
