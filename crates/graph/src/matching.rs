//! Trigger conditions against the state: dotted paths, flat keys searched across slices,
//! booleans by truthiness, an empty condition always matching, and each node's best match.

use crate::contract::{NodeContract, TriggerCondition};
use crate::state::{State, BUILT_IN_SLICES};
use serde::Serialize;
use serde_json::Value;

/// Python's truthiness: null, false, 0, "" and empty collections are false.
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// The value at `key`: a dotted path into a slice, or a flat key searched in request,
/// response, _internal, then the other slices in order.
pub fn lookup<'a>(state: &'a State, key: &str) -> Option<&'a Value> {
    if key.contains('.') {
        return state.path(key);
    }
    let builtin = BUILT_IN_SLICES.iter().filter_map(|s| state.slices.get(*s));
    let custom = state
        .slices
        .iter()
        .filter(|(k, _)| !BUILT_IN_SLICES.contains(&k.as_str()))
        .map(|(_, v)| v);
    builtin.chain(custom).find_map(|slice| slice.get(key))
}

fn holds(state: &State, key: &str, expected: &Value) -> bool {
    let actual = lookup(state, key);
    match expected {
        Value::Bool(b) => truthy(actual) == *b,
        other => actual == Some(other),
    }
}

pub fn matches(cond: &TriggerCondition, state: &State) -> bool {
    cond.when.iter().all(|(k, v)| holds(state, k, v))
        && !cond.when_not.iter().any(|(k, v)| holds(state, k, v))
}

/// A node whose trigger matched, with the condition that did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub node: String,
    pub priority: i64,
    pub condition_index: usize,
    /// Why it matched, for people and the LLM router.
    pub reason: String,
}

/// Every node's best (highest-priority) matching condition, best first; ties keep
/// registration order.
pub fn candidates<'a>(
    contracts: impl Iterator<Item = &'a NodeContract>,
    state: &State,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = contracts
        .filter_map(|c| {
            c.trigger_conditions
                .iter()
                .enumerate()
                .filter(|(_, t)| matches(t, state))
                .max_by_key(|(i, t)| (t.priority, std::cmp::Reverse(*i)))
                .map(|(i, t)| Candidate {
                    node: c.name.clone(),
                    priority: t.priority,
                    condition_index: i,
                    reason: describe(c, t),
                })
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.priority));
    out
}

fn describe(c: &NodeContract, t: &TriggerCondition) -> String {
    let mut parts = vec![];
    if let Some(h) = &t.llm_hint {
        parts.push(h.clone());
    } else if !c.description.is_empty() {
        parts.push(c.description.clone());
    }
    let conds: Vec<String> = t
        .when
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .chain(t.when_not.iter().map(|(k, v)| format!("{k} != {v}")))
        .collect();
    if !conds.is_empty() {
        parts.push(format!("matched: {}", conds.join(", ")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use serde_json::json;

    fn cond(p: i64, when: Value, when_not: Value) -> TriggerCondition {
        let map = |v: Value| match v {
            Value::Object(m) => m.into_iter().collect(),
            _ => Default::default(),
        };
        TriggerCondition {
            priority: p,
            when: map(when),
            when_not: map(when_not),
            llm_hint: None,
        }
    }

    fn state() -> State {
        let mut s = State::new();
        s.set("request", "action", "search".into());
        s.set("request", "params", json!({"category": "electronics"}));
        s.set("context", "authenticated", json!(1));
        s.set("_internal", "done", json!(false));
        s
    }

    #[test]
    fn paths_flat_keys_truthiness_and_negation() -> TestResult {
        let s = state();
        assert!(matches(
            &cond(1, json!({"request.action": "search"}), json!({})),
            &s
        ));
        assert!(matches(
            &cond(
                1,
                json!({"request.params.category": "electronics"}),
                json!({})
            ),
            &s
        ));
        assert!(
            matches(&cond(1, json!({"action": "search"}), json!({})), &s),
            "flat key found in request"
        );
        assert!(
            matches(&cond(1, json!({"authenticated": true}), json!({})), &s),
            "custom slice, truthy 1"
        );
        assert!(matches(
            &cond(1, json!({"context.missing": false}), json!({})),
            &s
        ));
        assert!(!matches(
            &cond(1, json!({"request.action": "buy"}), json!({})),
            &s
        ));
        assert!(!matches(
            &cond(1, json!({}), json!({"request.action": "search"})),
            &s
        ));
        assert!(
            matches(&cond(0, json!({}), json!({})), &s),
            "empty condition matches"
        );
        assert!(!matches(
            &cond(1, json!({"nowhere.deep.path": "x"}), json!({})),
            &s
        ));
        Ok(())
    }

    #[test]
    fn best_match_per_node_sorted_by_priority() -> TestResult {
        let mut a = NodeContract::new("a", "main");
        a.trigger_conditions = vec![
            cond(10, json!({}), json!({})),
            cond(60, json!({"action": "search"}), json!({})),
        ];
        let mut b = NodeContract::new("b", "main");
        b.trigger_conditions = vec![
            cond(100, json!({"action": "buy"}), json!({})),
            cond(50, json!({}), json!({})),
        ];
        let c = candidates([&a, &b].into_iter(), &state());
        let got: Vec<(&str, i64, usize)> = c
            .iter()
            .map(|c| (c.node.as_str(), c.priority, c.condition_index))
            .collect();
        assert_eq!(got, [("a", 60, 1), ("b", 50, 1)]);
        assert!(c[0].reason.contains("action = \"search\""));
        Ok(())
    }
}
