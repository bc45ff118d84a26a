//! Lark rules for a call in the XML format of Qwen3-Coder and Qwen3.5, as their chat
//! templates write it between the `<tool_call>` tags:
//!
//! ```text
//! <function=NAME>
//! <parameter=P>
//! VALUE
//! </parameter>
//! </function>
//! ```
//!
//! Parameters come in the order the schema declares them (the order the template lists them
//! to the model), each required one present, each optional one at most once. A value is held
//! to its parameter's type: an integer, a number, `true`/`false` (or Python's `True`/`False`,
//! as the template writes them back), `null`/`None`, one of an `enum`'s strings, JSON for
//! objects and arrays (laid out as `tojson` writes it), and any text for a string, up to the
//! first `\n</parameter>`.

use super::custom_grammar::{embed, Spelling};
use super::tool_spec::ToolSpec;
use serde_json::{json, Map, Value};

/// Rule `rule`: a call of one of `tools` (a rule per tool, `{rule}_{i}`, and per parameter).
pub(crate) fn push_xml_calls(g: &mut String, rule: &str, tools: &[&ToolSpec]) {
    let names: Vec<String> = (0..tools.len()).map(|i| format!("{rule}_{i}")).collect();
    g.push_str(&format!("{rule}: {}\n", names.join(" | ")));
    for (name, tool) in names.iter().zip(tools) {
        push_call(g, name, tool);
    }
    // Text up to the first closing tag (a lazy lexeme: it ends as soon as the tag is written).
    g.push_str("xml_text[lazy]: TEXT \"\\n</parameter>\\n\"\n");
}

fn push_call(g: &mut String, rule: &str, tool: &ToolSpec) {
    let open = literal(&format!("<function={}>\n", tool.name));
    let params = &tool.parameters;
    let properties = params.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seq = vec![];
    if let Some(Ok(rules)) = tool
        .grammar
        .as_deref()
        .map(|l| embed(l, rule, Spelling::Raw))
    {
        // A custom tool's input, raw, under its own grammar.
        g.push_str(&format!(
            "{rule}: {open} \"<parameter=input>\\n\" {rule}_start \"\\n</parameter>\\n\" \"</function>\"\n{rules}"
        ));
        return;
    }
    match properties {
        Some(props) => {
            for (i, (key, schema)) in props.iter().enumerate() {
                let p = format!("{rule}_p{i}");
                push_parameter(g, &p, key, schema, &defs(params), tool.lenient);
                seq.push(if required.contains(&key.as_str()) {
                    p
                } else {
                    format!("{p}?")
                });
            }
        }
        // No declared parameters: any names, any text.
        None => {
            let p = format!("{rule}_any");
            g.push_str(&format!(
                "{p}: \"<parameter=\" /[A-Za-z_][A-Za-z0-9_.\\-]*/ \">\\n\" xml_text\n"
            ));
            seq.push(format!("{p}*"));
        }
    }
    g.push_str(&format!(
        "{rule}: {open} {} \"</function>\"\n",
        seq.join(" ")
    ));
}

/// The `$defs` (or `definitions`) of the tool's parameters, for refs in a JSON value.
fn defs(params: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(d) = params.get(key) {
            out.insert(key.into(), d.clone());
        }
    }
    out
}

/// One `<parameter=key>\nVALUE\n</parameter>\n`.
fn push_parameter(
    g: &mut String,
    rule: &str,
    key: &str,
    schema: &Value,
    defs: &Map<String, Value>,
    lenient: bool,
) {
    let open = literal(&format!("<parameter={key}>\n"));
    let end = "\"\\n</parameter>\\n\"";
    let value = match scalar(schema) {
        Some(Scalar::Text) => {
            g.push_str(&format!("{rule}: {open} xml_text\n"));
            return;
        }
        Some(Scalar::Rule(r)) => r,
        None => {
            // Objects, arrays and anything richer: JSON, as the template's `tojson` writes it.
            let mut s = schema.clone();
            if let Value::Object(m) = &mut s {
                for (k, v) in defs {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
                m.insert(
                    "x-guidance".into(),
                    json!({"whitespace_flexible": false, "item_separator": ", ",
                        "key_separator": ": ", "lenient": lenient}),
                );
            }
            format!("%json {s}")
        }
    };
    g.push_str(&format!(
        "{rule}_v: {value}\n{rule}: {open} {rule}_v {end}\n"
    ));
}

enum Scalar {
    /// Any text up to the closing tag.
    Text,
    /// A Lark expression for the value.
    Rule(String),
}

// Bounded so that every value the grammar admits is one the parser can hold: an integer in
// 64 bits, a number in an f64 (a random model wrote `7.5E716`).
const INTEGER: &str = r"/-?(0|[1-9][0-9]{0,17})/";
const NUMBER: &str = r"/-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][+\-]?[0-9]{1,2})?/";
const BOOLEAN: &str = "\"true\" | \"false\" | \"True\" | \"False\"";
const NULL: &str = "\"null\" | \"None\"";

/// A value written as plain text (not JSON): by its type, or by its `enum` of strings.
fn scalar(schema: &Value) -> Option<Scalar> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let strings: Vec<String> = values
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.contains("\n</parameter>"))
            .map(literal)
            .collect();
        return (strings.len() == values.len() && !strings.is_empty())
            .then(|| Scalar::Rule(strings.join(" | ")));
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        // No type: any JSON value is read, and text is a string.
        None if schema.as_object().is_some_and(|o| {
            !o.contains_key("anyOf") && !o.contains_key("oneOf") && !o.contains_key("$ref")
        }) =>
        {
            return Some(Scalar::Text)
        }
        _ => return None,
    };
    if types.contains(&"string") {
        // Constraints on the string's form (pattern, format, length) are not held.
        return Some(Scalar::Text);
    }
    let mut alts = vec![];
    for t in &types {
        alts.push(match *t {
            "integer" => INTEGER,
            "number" => NUMBER,
            "boolean" => BOOLEAN,
            "null" => NULL,
            _ => return None,
        });
    }
    (!alts.is_empty()).then(|| Scalar::Rule(alts.join(" | ")))
}

/// `s` as a Lark string literal.
fn literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}
