//! The XML tool calls of Qwen3-Coder and Qwen3.5:
//!
//! ```text
//! <tool_call>
//! <function=NAME>
//! <parameter=P>
//! VALUE
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! A value is text, written as the chat template writes it (`| string` for scalars, as Python
//! prints them, `| tojson` for objects and lists); the tool's JSON schema says what it means.
//! Without a schema a value that reads as JSON is JSON, and any other is a string.

use crate::ToolCall;
use serde_json::{Map, Value};

/// Opens a call's function: `<function=NAME>`.
pub const FUNCTION: &str = "<function=";
/// Closes a call's function.
pub const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
/// Closes a parameter.
pub const PARAMETER_END: &str = "</parameter>";

/// The parameter schema of tool `name` among `specs` (OpenAI's format, or bare).
pub(crate) fn parameters_of<'a>(specs: &'a [Value], name: &str) -> Option<&'a Value> {
    specs
        .iter()
        .map(|t| t.get("function").unwrap_or(t))
        .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|f| f.get("parameters"))
}

/// `<function=name>…</function>` (the closing tag may be missing: a cut call), typed by the
/// JSON schema of the tool's parameters where `specs` has it.
pub fn parse_function(body: &str, specs: &[Value]) -> Result<ToolCall, String> {
    let call = parse_function_so_far(body, specs)?;
    let (name, args) = (&call.function.name, &call.function.arguments);
    if let Some(required) = parameters_of(specs, name)
        .and_then(|p| p.get("required"))
        .and_then(Value::as_array)
    {
        if let Some(missing) = required
            .iter()
            .filter_map(Value::as_str)
            .find(|r| args.get(*r).is_none())
        {
            return Err(format!(
                "`{name}`: required parameter `{missing}` is missing"
            ));
        }
    }
    Ok(call)
}

/// The part of a call written so far: its function and the parameters in it, in the order
/// written and typed as [`parse_function`] types them, without asking for the required ones
/// (a streamed call, cut where a parameter closed).
pub fn parse_function_so_far(body: &str, specs: &[Value]) -> Result<ToolCall, String> {
    let rest = body
        .trim()
        .strip_prefix(FUNCTION)
        .ok_or("expected <function=")?;
    let end = rest.find('>').ok_or("unterminated <function=…>")?;
    let name = rest[..end].trim();
    if name.is_empty() || name.contains(['<', '\n']) {
        return Err("the <function=…> tag names no function".into());
    }
    let parameters = parameters_of(specs, name);
    let mut body = &rest[end + 1..];
    if let Some(close) = body.find(FUNCTION_END) {
        body = &body[..close];
    }
    let properties = parameters.and_then(|p| p.get("properties"));
    let mut args = Map::new();
    while let Some(start) = body.find(PARAMETER) {
        let between = body[..start].trim();
        if !between.is_empty() {
            return Err(format!("`{name}`: text outside a parameter: `{between}`"));
        }
        let after = &body[start + PARAMETER.len()..];
        let close = after.find('>').ok_or("unterminated <parameter=…>")?;
        let key = after[..close].trim().to_string();
        let value_and_rest = &after[close + 1..];
        // The value ends at its closing tag; models that drop it end it at the next tag.
        let (stop, skip) = match value_and_rest.find(PARAMETER_END) {
            Some(i) => (i, PARAMETER_END.len()),
            None => match value_and_rest.find(PARAMETER) {
                Some(i) => (i, 0),
                None => (value_and_rest.len(), 0),
            },
        };
        let raw = trim_one_newline(&value_and_rest[..stop]);
        let schema = properties.and_then(|p| p.get(&key));
        if properties.is_some() && schema.is_none() && !open(parameters) {
            return Err(format!("`{name}` has no parameter `{key}`"));
        }
        let value = match schema {
            Some(s) => {
                typed(raw, s).map_err(|why| format!("parameter `{key}` of `{name}`: {why}"))?
            }
            None => untyped(raw),
        };
        if args.insert(key.clone(), value).is_some() {
            return Err(format!("`{name}`: parameter `{key}` given twice"));
        }
        body = &value_and_rest[stop + skip..];
    }
    if !body.trim().is_empty() {
        return Err(format!(
            "`{name}`: text outside a parameter: `{}`",
            body.trim()
        ));
    }
    Ok(ToolCall::new(name, Value::Object(args)))
}

/// Whether a schema with `properties` takes others too (as JSON Schema has it, unless
/// `additionalProperties` is false).
fn open(parameters: Option<&Value>) -> bool {
    !matches!(
        parameters.and_then(|p| p.get("additionalProperties")),
        Some(Value::Bool(false))
    )
}

/// The template writes `\n` + value + `\n`: one line break each side is markup, the rest the
/// value's own.
fn trim_one_newline(s: &str) -> &str {
    let s = s.strip_prefix("\r\n").or(s.strip_prefix('\n')).unwrap_or(s);
    s.strip_suffix("\r\n").or(s.strip_suffix('\n')).unwrap_or(s)
}

/// Without a schema: JSON where the text is JSON (or Python's `True`, `False`, `None`, as the
/// templates write them), else the text.
fn untyped(raw: &str) -> Value {
    match raw.trim() {
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        "None" => Value::Null,
        t => serde_json::from_str::<Value>(t).unwrap_or_else(|_| Value::String(raw.to_string())),
    }
}

/// The types a parameter's schema allows (`type`, a list of types, or `anyOf`/`oneOf`
/// branches; `enum`/`const` values say it by example), none for "anything".
fn types_of(schema: &Value) -> Vec<String> {
    let mut out = vec![];
    match schema.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => out.extend(ts.iter().filter_map(Value::as_str).map(String::from)),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(key) {
            for b in branches {
                out.extend(types_of(b));
            }
        }
    }
    let examples = schema
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .chain(schema.get("const").cloned());
    for v in examples {
        let t = match v {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "boolean",
            Value::Null => "null",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        out.push(t.to_string());
    }
    out.dedup();
    out
}

/// `raw` as the parameter's schema types it: a string verbatim, numbers, booleans (`true` or
/// Python's `True`), null (`null` or `None`), objects and arrays as JSON. Where the schema
/// allows several types the first that reads wins, a string last.
pub(crate) fn typed(raw: &str, schema: &Value) -> Result<Value, String> {
    let types = types_of(schema);
    if types.is_empty() {
        return Ok(untyped(raw));
    }
    let t = raw.trim();
    for ty in types.iter().filter(|t| *t != "string") {
        let v = match ty.as_str() {
            "integer" => t
                .parse::<i64>()
                .map(Value::from)
                .ok()
                .or_else(|| t.parse::<u64>().ok().map(Value::from))
                // `2.0` is an integer in JSON Schema.
                .or_else(|| {
                    t.parse::<f64>()
                        .ok()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| Value::from(f as i64))
                }),
            "number" => serde_json::from_str::<Value>(t)
                .ok()
                .filter(Value::is_number)
                .or_else(|| {
                    t.parse::<f64>()
                        .ok()
                        .and_then(serde_json::Number::from_f64)
                        .map(Value::Number)
                }),
            "boolean" => match t {
                "true" | "True" => Some(Value::Bool(true)),
                "false" | "False" => Some(Value::Bool(false)),
                _ => None,
            },
            "null" => matches!(t, "null" | "None").then_some(Value::Null),
            "object" => serde_json::from_str::<Value>(t)
                .ok()
                .filter(Value::is_object),
            "array" => serde_json::from_str::<Value>(t)
                .ok()
                .filter(Value::is_array),
            _ => None,
        };
        if let Some(v) = v {
            return Ok(v);
        }
    }
    if types.iter().any(|t| t == "string") {
        return Ok(Value::String(raw.to_string()));
    }
    let shown: String = t.chars().take(40).collect();
    Err(format!("`{shown}` is not {}", article(&types.join(" or "))))
}

fn article(types: &str) -> String {
    match types.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {types}"),
        _ => format!("a {types}"),
    }
}

/// A call as the XML templates write it (between the `<tool_call>` tags).
pub fn write_function(call: &ToolCall) -> String {
    let mut out = format!("{FUNCTION}{}>\n", call.function.name);
    if let Value::Object(args) = &call.function.arguments {
        for (k, v) in args {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Bool(true) => "True".into(),
                Value::Bool(false) => "False".into(),
                Value::Null => "None".into(),
                other => other.to_string(),
            };
            out.push_str(&format!("{PARAMETER}{k}>\n{v}\n{PARAMETER_END}\n"));
        }
    }
    out.push_str(FUNCTION_END);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn edit() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "edit_file", "parameters": edit_params()}}),
        ]
    }

    fn edit_params() -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"}, "count": {"type": "integer"},
            "ratio": {"type": "number"}, "dry_run": {"type": "boolean"},
            "lines": {"type": "array", "items": {"type": "integer"}},
            "options": {"type": "object"}, "note": {"type": ["integer", "null"]},
            "mode": {"enum": ["fast", "slow"]}, "any": {}},
            "required": ["path"], "additionalProperties": false})
    }

    #[test]
    fn values_are_typed_by_the_schema() {
        let body = "<function=edit_file>\n<parameter=path>\n007\n</parameter>\n<parameter=count>\n2\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=dry_run>\nFalse\n</parameter>\n<parameter=lines>\n[1, 2]\n</parameter>\n<parameter=options>\n{\"backup\": true}\n</parameter>\n<parameter=note>\nNone\n</parameter>\n<parameter=mode>\nfast\n</parameter>\n<parameter=any>\n[3]\n</parameter>\n</function>";
        let c = parse_function(body, &edit()).unwrap();
        assert_eq!(
            c.function.arguments,
            json!({"path": "007", "count": 2, "ratio": 0.5, "dry_run": false,
                   "lines": [1, 2], "options": {"backup": true}, "note": null,
                   "mode": "fast", "any": [3]})
        );
    }

    #[test]
    fn strings_keep_their_lines_and_markup() {
        let body = "<function=edit_file>\n<parameter=path>\n\nfn main() {\n    <b>&amp;</b>\n}\n\n</parameter>\n</function>";
        let c = parse_function(body, &edit()).unwrap();
        assert_eq!(
            c.function.arguments["path"],
            "\nfn main() {\n    <b>&amp;</b>\n}\n"
        );
    }

    #[test]
    fn a_value_that_does_not_fit_is_a_reason() {
        let bad = |p: &str, v: &str| {
            let body = format!(
                "<function=edit_file>\n<parameter=path>\nx\n</parameter>\n<parameter={p}>\n{v}\n</parameter>\n</function>"
            );
            parse_function(&body, &edit()).unwrap_err()
        };
        assert_eq!(
            bad("count", "two"),
            "parameter `count` of `edit_file`: `two` is not an integer"
        );
        assert!(bad("dry_run", "yes").contains("not a boolean"));
        assert!(bad("lines", "1, 2").contains("not an array"));
        assert!(bad("colour", "red").contains("has no parameter `colour`"));
        let missing = "<function=edit_file>\n<parameter=count>\n1\n</parameter>\n</function>";
        assert!(parse_function(missing, &edit())
            .unwrap_err()
            .contains("required parameter `path`"));
        let twice = "<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>";
        assert!(parse_function(twice, &[]).unwrap_err().contains("twice"));
        assert!(parse_function("<function=>\n</function>", &[]).is_err());
        assert!(parse_function("<function=f>\nloose text\n</function>", &[]).is_err());
    }

    #[test]
    fn without_a_schema_json_is_json_and_the_rest_text() {
        let body = "<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=s>\nParis\n</parameter>\n</function>";
        let c = parse_function(body, &[]).unwrap();
        assert_eq!(c.function.arguments, json!({"n": 3, "s": "Paris"}));
    }

    #[test]
    fn cut_and_unclosed_parameters_still_read() {
        let body = "<function=f>\n<parameter=a>\n1\n<parameter=b>\nx\n";
        let c = parse_function(body, &[]).unwrap();
        assert_eq!(c.function.arguments, json!({"a": 1, "b": "x"}));
    }

    #[test]
    fn written_calls_read_back_the_same() {
        let args = json!({"path": "a\nb", "count": 2, "ratio": 0.5, "dry_run": true,
                          "lines": [1], "options": {"k": "v"}, "note": null});
        let call = ToolCall::new("edit_file", args.clone());
        let text = write_function(&call);
        assert!(text.contains("<parameter=dry_run>\nTrue\n</parameter>"));
        let back = parse_function(&text, &edit()).unwrap();
        assert_eq!(back.function.arguments, args);
    }
}
