//! The tool loop's policy: what it does when a model misbehaves in ways any format allows —
//! a call to a tool that does not exist, the same call again, no call when one is required.
//! The wording of a correction for an unreadable call is the output parser's.

use hearth_chat::ToolCall;
use serde_json::Value;

/// What the tool loop does with calls it should not run, and what it tells the model then.
#[derive(Debug, Clone)]
pub struct LoopPolicy {
    /// Corrections a run may give for calls it cannot take (unknown tools, tools withheld).
    pub max_corrections: usize,
    /// A call identical to one already made is not run again; when nothing new is asked the
    /// tools are withheld and the answer asked for (small models loop otherwise).
    pub skip_repeated_calls: bool,
}

impl Default for LoopPolicy {
    fn default() -> Self {
        Self {
            max_corrections: 2,
            skip_repeated_calls: true,
        }
    }
}

impl LoopPolicy {
    /// The calls of `asked` not made before (`made`) nor earlier in `asked`.
    pub fn fresh_calls(&self, asked: &[ToolCall], made: &[(String, Value)]) -> Vec<ToolCall> {
        if !self.skip_repeated_calls {
            return asked.to_vec();
        }
        let mut fresh: Vec<ToolCall> = vec![];
        for c in asked {
            let same = |name: &str, args: &Value| {
                name == c.function.name && normalized(args) == normalized(&c.function.arguments)
            };
            let seen = made.iter().any(|(n, a)| same(n, a))
                || fresh
                    .iter()
                    .any(|k| same(&k.function.name, &k.function.arguments));
            if !seen {
                fresh.push(c.clone());
            }
        }
        fresh
    }

    /// The correction for a call to `name`, which is none of `tools`.
    pub fn unknown_tool(&self, name: &str, tools: &[String]) -> String {
        format!(
            "There is no tool named `{name}`. The tools are: {}. Call one of them, or answer in plain words.",
            tools.join(", ")
        )
    }

    /// The correction for a tool call made while the tools are withheld.
    pub fn tools_withheld(&self) -> &'static str {
        "Do not call tools now. Answer the original question in plain words, using the tool results above."
    }

    /// What the model is told when it asks only for calls already made.
    pub fn repeated_calls(&self) -> &'static str {
        "You already have the tool results above. Do not call tools again: answer the original question now."
    }

    /// What the model is told when a required tool call is missing.
    pub fn call_required(&self) -> &'static str {
        "Call one of the tools to do this."
    }
}

/// The tool name of an answer that is a JSON tool call (bare, or fenced), whatever the name.
pub fn attempted_call(text: &str) -> Option<String> {
    let t = text.trim();
    let body = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .map(|b| b.trim_end_matches('`').trim())
        .unwrap_or(t);
    if !body.starts_with('{') {
        return None;
    }
    let first = serde_json::Deserializer::from_str(body)
        .into_iter::<Value>()
        .next()?
        .ok()?;
    first.get("arguments").or_else(|| first.get("parameters"))?;
    first.get("name")?.as_str().map(str::to_owned)
}

/// Arguments compared as JSON values, strings like "2+2" and "2 + 2" alike.
fn normalized(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.split_whitespace().collect::<String>()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), normalized(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_calls_are_dropped_spacing_aside() {
        let p = LoopPolicy::default();
        let asked = vec![
            ToolCall::new("calculator", json!({"expression": "2 + 2"})),
            ToolCall::new("calculator", json!({"expression": "2+2"})),
            ToolCall::new("calculator", json!({"expression": "3+3"})),
        ];
        let made = vec![("calculator".to_string(), json!({"expression": "3 + 3"}))];
        let fresh = p.fresh_calls(&asked, &made);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].function.arguments["expression"], "2 + 2");
        let all = LoopPolicy {
            skip_repeated_calls: false,
            ..Default::default()
        };
        assert_eq!(all.fresh_calls(&asked, &made).len(), 3);
        assert_eq!(
            attempted_call("```json\n{\"name\": \"x\", \"arguments\": {}}\n```").as_deref(),
            Some("x")
        );
        assert_eq!(attempted_call("plain words"), None);
    }
}
