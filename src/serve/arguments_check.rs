//! A streamed tool call's arguments against its tool's whole schema: the check the server gives
//! the answer's [`ToolCallSplitter`] (the call grammar loosens a few keywords; this holds them).

use hearth_engine::chat::tool_call::stream::ToolCallSplitter;
use hearth_engine::ToolCall;
use serde_json::Value;

/// A splitter of the answer for the tools `specs` (`names` theirs) whose whole calls are
/// checked against their schemas.
pub fn splitter(specs: Vec<Value>, names: Vec<String>) -> ToolCallSplitter {
    let schemas = specs.clone();
    ToolCallSplitter::new(specs, names).with_check(Box::new(move |call: &ToolCall| {
        arguments_fit(&schemas, call)
    }))
}

/// Whether `call`'s arguments are valid against its tool's whole schema (in `specs`, OpenAI's
/// format). The call grammar holds most schemas whole, but loosens the keywords it cannot
/// hold (`propertyNames`, `if`/`then`, …): this check is what keeps those calls valid. A
/// schema the validator cannot read either (a remote `$ref`) is not checked.
pub fn arguments_fit(specs: &[Value], call: &ToolCall) -> Result<(), String> {
    let name = &call.function.name;
    let Some(schema) = specs
        .iter()
        .map(|t| t.get("function").unwrap_or(t))
        .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|f| f.get("parameters"))
        .filter(|p| p.is_object())
    else {
        return Ok(());
    };
    let Ok(validator) = jsonschema::validator_for(schema) else {
        return Ok(());
    };
    let first = validator
        .iter_errors(&call.function.arguments)
        .next()
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("the arguments of `{name}` do not fit its schema at {at}: {e}")
        });
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_engine::chat::tool_call::stream::Piece;
    use serde_json::json;

    fn splitter(specs: &[Value]) -> ToolCallSplitter {
        super::splitter(specs.to_vec(), vec!["task".into()])
    }

    #[test]
    fn a_call_is_checked_against_its_tools_whole_schema() {
        // `propertyNames` is what the grammar loosens: the finished call is checked here.
        let specs = vec![json!({"type": "function", "function": {"name": "task",
            "parameters": {"type": "object", "properties": {
                "metadata": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}}}}})];
        let mut s = splitter(&specs);
        let good = "<tool_call>\n{\"name\": \"task\", \"arguments\": {\"metadata\": {\"ok\": 1}}}\n</tool_call>";
        assert!(matches!(&s.push(good)[..], [Piece::Call(_)]));
        let mut s = splitter(&specs);
        let bad = "<tool_call>\n{\"name\": \"task\", \"arguments\": {\"metadata\": {\"Not OK\": 1}}}\n</tool_call>";
        let out = s.push(bad);
        assert!(
            matches!(&out[..], [Piece::Invalid { error, raw }]
                if error.contains("`task`") && error.contains("/metadata") && raw.contains("Not OK")),
            "{out:?}"
        );
        // An untagged call, read at the end, is checked too.
        let mut s = splitter(&specs);
        let mut out = s.push("{\"name\": \"task\", \"arguments\": {\"metadata\": {\"X\": 1}}}");
        out.extend(s.finish());
        assert!(matches!(&out[..], [Piece::Invalid { .. }]), "{out:?}");
    }
}
