//! The Responses API's tools as the engine offers them, and the way back: `function` tools
//! as they are; a `namespace`'s functions under their own names (`ns.name` where a name is
//! taken twice), their calls answered with the namespace; `custom` (freeform) tools as a
//! function of one string `input`, their calls answered as `custom_tool_call` items; hosted
//! tools that only OpenAI's servers run (`web_search`, `file_search`, …) left out.

use crate::serve::error::ApiError;
use crate::serve::request::note_once;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// How the engine's tool names map back to what the client offered.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// Engine name → (namespace, the function's name in it).
    namespaced: HashMap<String, (String, String)>,
    /// Engine names of custom tools: their calls carry text (`input`), not JSON arguments.
    custom: Vec<String>,
}

/// How a call goes back to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Dressed {
    /// A `function_call` item: its name, and its namespace where it has one.
    Function {
        name: String,
        namespace: Option<String>,
    },
    /// A `custom_tool_call` item.
    Custom { name: String },
}

impl Offered {
    /// How a call of the engine's tool `name` goes back.
    pub fn dress(&self, name: &str) -> Dressed {
        if self.custom.iter().any(|c| c == name) {
            return Dressed::Custom {
                name: name.to_string(),
            };
        }
        match self.namespaced.get(name) {
            Some((ns, inner)) => Dressed::Function {
                name: inner.clone(),
                namespace: Some(ns.clone()),
            },
            None => Dressed::Function {
                name: name.to_string(),
                namespace: None,
            },
        }
    }

    /// The engine's name of the client's `name` (in `namespace`, where given).
    pub fn engine_name(&self, name: &str, namespace: Option<&str>) -> String {
        let Some(ns) = namespace.filter(|ns| !ns.is_empty()) else {
            return name.to_string();
        };
        self.namespaced
            .iter()
            .find(|(_, (n, inner))| n == ns && inner == name)
            .map_or_else(|| format!("{ns}.{name}"), |(engine, _)| engine.clone())
    }

    /// Whether `name` (the engine's) is a custom tool.
    pub fn is_custom(&self, name: &str) -> bool {
        self.custom.iter().any(|c| c == name)
    }
}

/// One function as the client described it, before naming.
struct Function {
    namespace: Option<String>,
    name: String,
    value: Map<String, Value>,
    custom: bool,
}

/// The tools in the chat format the engine's templates and grammars read, and the map back.
pub fn offered_tools(tools: &[Value]) -> Result<(Vec<Value>, Offered), ApiError> {
    let mut functions = vec![];
    for (i, t) in tools.iter().enumerate() {
        read_tool(&format!("tools[{i}]"), t, None, &mut functions)?;
    }
    // A namespace's function keeps its own name unless another tool has it too.
    let mut count: HashMap<&str, usize> = HashMap::new();
    for f in &functions {
        *count.entry(f.name.as_str()).or_default() += 1;
    }
    let mut offered = Offered::default();
    let mut out = vec![];
    for f in &functions {
        let engine = match &f.namespace {
            Some(ns) if count[f.name.as_str()] > 1 => format!("{ns}.{}", f.name),
            _ => f.name.clone(),
        };
        if let Some(ns) = &f.namespace {
            offered
                .namespaced
                .insert(engine.clone(), (ns.clone(), f.name.clone()));
        }
        if f.custom {
            offered.custom.push(engine.clone());
        }
        let mut function = f.value.clone();
        function.insert("name".into(), json!(engine));
        out.push(json!({"type": "function", "function": function}));
    }
    Ok((out, offered))
}

fn read_tool(
    at: &str,
    t: &Value,
    namespace: Option<&str>,
    out: &mut Vec<Function>,
) -> Result<(), ApiError> {
    let obj = t
        .as_object()
        .ok_or_else(|| ApiError::invalid(at, "a tool must be a JSON object"))?;
    let name = || {
        obj.get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::invalid(format!("{at}.name"), "a tool needs a string `name`"))
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("function") => {
            let mut value = Map::new();
            for key in ["description", "parameters"] {
                if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                    value.insert(key.into(), v.clone());
                }
            }
            out.push(Function {
                namespace: namespace.map(str::to_owned),
                name: name()?,
                value,
                custom: false,
            });
        }
        Some("custom") => out.push(Function {
            namespace: namespace.map(str::to_owned),
            name: name()?,
            value: custom_function(at, obj)?,
            custom: true,
        }),
        Some("namespace") if namespace.is_none() => {
            let ns = name()?;
            let tools = obj.get("tools").and_then(Value::as_array).ok_or_else(|| {
                ApiError::invalid(format!("{at}.tools"), "a namespace needs a list of `tools`")
            })?;
            for (j, inner) in tools.iter().enumerate() {
                read_tool(&format!("{at}.tools[{j}]"), inner, Some(&ns), out)?;
            }
        }
        Some("namespace") => {
            return Err(ApiError::invalid(
                format!("{at}.type"),
                "a namespace cannot hold another namespace",
            ))
        }
        None => {
            return Err(ApiError::invalid(
                format!("{at}.type"),
                "a tool needs a `type`",
            ))
        }
        // Hosted tools: OpenAI's servers run them, so no call of them can come from here.
        Some(other) => note_once(&format!(
            "responses: hosted tool `{other}` left out (this server runs none)"
        )),
    }
    Ok(())
}

/// A custom tool as a function of one string, `input`. A `regex` format holds the string to
/// its pattern; a Lark grammar goes with the function as its `format`, which the engine
/// decodes the input under (and the model reads among the tools).
fn custom_function(at: &str, obj: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut input = json!({"type": "string", "description": "The tool's input, as raw text."});
    let description = obj
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut grammar = None;
    if let Some(format) = obj.get("format").filter(|f| !f.is_null()) {
        match format.get("type").and_then(Value::as_str) {
            Some("text") | None => {}
            Some("grammar") => {
                let definition = format
                    .get("definition")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            format!("{at}.format.definition"),
                            "a grammar format needs a string `definition`",
                        )
                    })?;
                match format.get("syntax").and_then(Value::as_str) {
                    Some("regex") => input["pattern"] = json!(definition),
                    Some("lark") => {
                        grammar = Some(json!({"type": "grammar", "syntax": "lark",
                            "definition": definition}));
                    }
                    other => {
                        return Err(ApiError::invalid(
                            format!("{at}.format.syntax"),
                            format!("{other:?}: expected lark or regex"),
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    format!("{at}.format.type"),
                    format!("`{other}`: expected text or grammar"),
                ))
            }
        }
    }
    let mut f = Map::new();
    f.insert("description".into(), json!(description));
    f.insert(
        "parameters".into(),
        json!({"type": "object", "properties": {"input": input}, "required": ["input"]}),
    );
    if let Some(g) = grammar {
        f.insert("format".into(), g);
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_custom_and_hosted_tools() -> Result<(), ApiError> {
        let (tools, offered) = offered_tools(&[
            json!({"type": "function", "name": "exec_command", "parameters": {"type": "object"}}),
            json!({"type": "namespace", "name": "agents", "description": "sub-agents", "tools": [
                {"type": "function", "name": "spawn", "parameters": {"type": "object"}},
                {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]}),
            json!({"type": "custom", "name": "apply_patch", "description": "Patch files.",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\""}}),
            json!({"type": "custom", "name": "digits",
                "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]+"}}),
            json!({"type": "web_search", "external_web_access": true}),
        ])?;
        let names: Vec<&str> = tools
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "exec_command",
                "spawn",
                "agents.exec_command",
                "apply_patch",
                "digits"
            ]
        );
        assert_eq!(
            offered.dress("spawn"),
            Dressed::Function {
                name: "spawn".into(),
                namespace: Some("agents".into())
            }
        );
        assert_eq!(
            offered.dress("agents.exec_command"),
            Dressed::Function {
                name: "exec_command".into(),
                namespace: Some("agents".into())
            }
        );
        assert_eq!(
            offered.dress("apply_patch"),
            Dressed::Custom {
                name: "apply_patch".into()
            }
        );
        assert_eq!(
            offered.engine_name("exec_command", Some("agents")),
            "agents.exec_command"
        );
        assert_eq!(offered.engine_name("spawn", Some("agents")), "spawn");
        assert_eq!(offered.engine_name("exec_command", None), "exec_command");
        let patch = &tools[3]["function"];
        assert_eq!(patch["description"], json!("Patch files."));
        assert_eq!(patch["format"]["syntax"], json!("lark"));
        assert!(patch["format"]["definition"]
            .as_str()
            .is_some_and(|d| d.contains("Begin Patch")));
        assert_eq!(patch["parameters"]["required"], json!(["input"]));
        assert_eq!(
            tools[4]["function"]["parameters"]["properties"]["input"]["pattern"],
            json!("[0-9]+")
        );
        Ok(())
    }

    #[test]
    fn bad_tools_name_the_field() {
        let param = |t: Value| offered_tools(&[t]).err().and_then(|e| e.param);
        assert_eq!(param(json!({"name": "f"})), Some("tools[0].type".into()));
        assert_eq!(
            param(json!({"type": "namespace", "name": "ns"})),
            Some("tools[0].tools".into())
        );
        assert_eq!(
            param(json!({"type": "custom", "name": "c",
                "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}})),
            Some("tools[0].format.syntax".into())
        );
    }
}
