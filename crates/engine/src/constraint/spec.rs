//! What a request may constrain its output to.

use llguidance::api::TopLevelGrammar;
use serde_json::Value;

/// The language a generation must stay in. Tokens that would leave it are masked out before
/// sampling, and the sequence may end only where the text is complete.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Constraint {
    /// A JSON document valid against this JSON Schema (`$ref` into `$defs`, `anyOf`, `enum`,
    /// `const`, nested objects, `required`, … as llguidance supports them). The output is
    /// compact JSON: no whitespace between tokens.
    JsonSchema(Value),
    /// Text matching this regular expression as a whole (Rust `regex` syntax).
    Regex(String),
    /// A Lark grammar in llguidance's dialect (`start:` rule, `%json {…}` for an embedded
    /// schema, `<|im_end|>`-style names for special tokens).
    Lark(String),
    /// An answer that may hold tool calls (built by `Grammars::tool_calls` for `auto`): a Lark
    /// grammar as above, and the text before the `<tool_call>` token may not spell a call
    /// (`{"name"`), which is checked beside the grammar.
    ToolCalls(String),
}

impl Constraint {
    /// Any JSON object (OpenAI's `response_format: json_object`).
    pub fn json_object() -> Self {
        Self::JsonSchema(serde_json::json!({"type": "object"}))
    }

    /// What kind of constraint this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JsonSchema(_) => "JSON schema",
            Self::Regex(_) => "regex",
            Self::Lark(_) => "Lark grammar",
            Self::ToolCalls(_) => "tool-call grammar",
        }
    }

    pub(crate) fn grammar(&self) -> TopLevelGrammar {
        match self {
            Self::JsonSchema(schema) => TopLevelGrammar::from_json_schema(compact(schema)),
            Self::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Self::Lark(lark) | Self::ToolCalls(lark) => TopLevelGrammar::from_lark(lark.clone()),
        }
    }
}

/// `schema` with llguidance told to allow no whitespace between JSON tokens (unless the schema
/// says otherwise in its own `x-guidance`): a model cannot pad its answer with blanks until
/// `max_tokens` runs out.
pub(crate) fn compact(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_flexible": false}));
    }
    schema
}
