//! An offered tool ([`ToolSpec`]) and the JSON schema of one call of it, laid out as
//! [`Layout`] says: what the JSON and XML call grammars ([`super::tool_call`],
//! [`super::xml_call`]) are built from.

use crate::error::{EngineError, Result};
use serde_json::{json, Map, Value};

/// How a call's JSON is laid out between its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// As `json.dumps` writes it, on one line (`", "`, `": "`): the chat template's layout,
    /// which the model follows inside the tags. No other whitespace, so that a model cannot
    /// pad a call until it runs out of tokens.
    Dumps,
    /// A space or a line break and an indent between tokens: a call the model writes without
    /// tags, as the whole answer, comes pretty-printed in a fence (`{\n  "name": …`), and held
    /// to one line it goes off the answer it was writing (ends strings early, fills arrays
    /// with every `enum` value). One bounded run per gap.
    Free,
}

const FREE_WHITESPACE: &str = r"(?: |\n {0,24})";

/// An offered tool: its name and the JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
    /// Keywords of the schema the grammar cannot hold are ignored (llguidance's lenient
    /// mode): those parts admit any value of their declared type, and the finished call is
    /// checked against the whole schema instead.
    pub lenient: bool,
    /// A Lark grammar the tool's one string argument, `input`, follows (a custom tool of the
    /// Responses API, offered as a function with `format: {type: grammar, syntax: lark,
    /// definition}`): the call's input is decoded under it.
    pub grammar: Option<String>,
}

impl ToolSpec {
    /// Reads tools in OpenAI's format (`{"type": "function", "function": {"name", "parameters"}}`)
    /// or bare (`{"name", "parameters"}`). A tool without `parameters` takes any object; one
    /// with a Lark `format` takes its `input` under that grammar.
    /// Names must be non-empty and distinct; errors name the tool's index in `tools`.
    pub fn from_openai(tools: &[Value]) -> Result<Vec<Self>> {
        let mut specs: Vec<ToolSpec> = Vec::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            let f = tool.get("function").unwrap_or(tool);
            let bad = |why: &str| EngineError::invalid("tools", format!("tool {i}: {why}"));
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("no `function.name`"))?;
            if specs.iter().any(|s| s.name == name) {
                return Err(bad(&format!("`{name}` is offered twice")));
            }
            let parameters = match f.get("parameters") {
                None | Some(Value::Null) => json!({"type": "object"}),
                Some(p @ (Value::Object(_) | Value::Bool(true))) => p.clone(),
                Some(_) => {
                    return Err(bad(&format!(
                        "`{name}`: `parameters` is not a JSON schema object"
                    )))
                }
            };
            let format = f.get("format").filter(|v| !v.is_null());
            let grammar = match format {
                None => None,
                Some(format) => {
                    let lark = format.get("type").and_then(Value::as_str) == Some("grammar")
                        && format.get("syntax").and_then(Value::as_str) == Some("lark");
                    let definition = format.get("definition").and_then(Value::as_str);
                    match (lark, definition) {
                        (true, Some(d)) => Some(d.to_string()),
                        _ => {
                            return Err(bad(&format!(
                            "`{name}`: `format` is not {{type: grammar, syntax: lark, definition}}"
                        )))
                        }
                    }
                }
            };
            specs.push(ToolSpec {
                name: name.to_string(),
                parameters,
                lenient: false,
                grammar,
            });
        }
        Ok(specs)
    }

    /// The schema of one call of this tool: `{"name": <const>, "arguments": <parameters>}`,
    /// with the parameters' `$defs` lifted to the top so that their `#/$defs/…` refs resolve.
    /// Arguments that list their `properties` take no others unless the schema says so
    /// (`additionalProperties`), as in OpenAI's strict mode: a function does not take keyword
    /// arguments it does not declare, and small models otherwise copy schema words (`required`)
    /// or invent keys (`duration2`) into the call.
    pub fn call_schema(&self, layout: Layout) -> Value {
        let mut arguments = self.parameters.clone();
        let mut schema = Map::new();
        if let Value::Object(params) = &mut arguments {
            for key in ["$defs", "definitions"] {
                if let Some(defs) = params.remove(key) {
                    schema.insert(key.into(), defs);
                }
            }
            let declared = params.get("properties").is_some_and(Value::is_object);
            let open = [
                "additionalProperties",
                "patternProperties",
                "unevaluatedProperties",
            ]
            .iter()
            .any(|k| params.contains_key(*k));
            if declared && !open {
                params.insert("additionalProperties".into(), json!(false));
            }
        }
        schema.insert("type".into(), json!("object"));
        schema.insert(
            "properties".into(),
            json!({"name": {"const": self.name}, "arguments": arguments}),
        );
        schema.insert("required".into(), json!(["name", "arguments"]));
        schema.insert("additionalProperties".into(), json!(false));
        let mut guidance = match layout {
            Layout::Dumps => json!({"whitespace_flexible": false,
                "item_separator": ", ", "key_separator": ": "}),
            Layout::Free => json!({"whitespace_flexible": false,
                "whitespace_pattern": FREE_WHITESPACE, "item_separator": ",",
                "key_separator": ":"}),
        };
        if self.lenient {
            guidance["lenient"] = json!(true);
        }
        schema.insert("x-guidance".into(), guidance);
        Value::Object(schema)
    }
}
