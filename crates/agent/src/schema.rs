//! Checking tool arguments against the tool's JSON schema before the call: the subset tool
//! schemas use (`type`, `properties`, `required`, `enum`, `items`, `additionalProperties`).

use serde_json::Value;

/// The first way `value` breaks `schema`, as a path and a reason.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "arguments")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn matches_type(v: &Value, ty: &str) -> bool {
    match ty {
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => type_name(v) == other,
    }
}

fn check(v: &Value, schema: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    match schema.get("type") {
        Some(Value::String(ty)) if !matches_type(v, ty) => {
            return Err(format!("{path} must be {ty}, not {}", type_name(v)));
        }
        Some(Value::Array(types))
            if !types
                .iter()
                .filter_map(Value::as_str)
                .any(|t| matches_type(v, t)) =>
        {
            return Err(format!(
                "{path} has type {}, not one of {}",
                type_name(v),
                Value::Array(types.clone())
            ));
        }
        _ => {}
    }
    if let Some(Value::Array(allowed)) = schema.get("enum") {
        if !allowed.contains(v) {
            return Err(format!(
                "{path} must be one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let Value::Object(obj) = v {
        if let Some(Value::Array(required)) = schema.get("required") {
            for r in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{path}.{r} is required"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, x) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(x, s, &format!("{path}.{k}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{path}.{k} is not an accepted argument"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (v, schema.get("items")) {
        for (i, x) in items.iter().enumerate() {
            check(x, item_schema, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_types_required_and_enums() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["city"], "additionalProperties": false});
        assert!(validate(
            &json!({"city": "Paris", "days": 3, "unit": "c", "tags": ["a"]}),
            &schema
        )
        .is_ok());
        assert_eq!(
            validate(&json!({"days": 3}), &schema).unwrap_err(),
            "arguments.city is required"
        );
        assert_eq!(
            validate(&json!({"city": 5}), &schema).unwrap_err(),
            "arguments.city must be string, not integer"
        );
        assert!(validate(&json!({"city": "x", "unit": "k"}), &schema)
            .unwrap_err()
            .contains("one of"));
        assert!(validate(&json!({"city": "x", "tags": [1]}), &schema)
            .unwrap_err()
            .contains("tags[0]"));
        assert!(validate(&json!({"city": "x", "zzz": 1}), &schema)
            .unwrap_err()
            .contains("zzz"));
        assert!(validate(&json!("text"), &schema).is_err());
    }
}
