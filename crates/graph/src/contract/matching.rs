//! Trigger conditions against the state, as agent-contracts evaluates them: dotted paths
//! (absent is null), flat keys searched in request, response, _internal, then the other
//! declared slices in sorted order; `true`/`false` compare truthiness, anything else Python's
//! `==` (so `1 == 1.0 == true`); an empty condition always matches; each node keeps its best
//! match.

use crate::contract::{NodeContract, TriggerCondition};
pub use crate::python::pyvalue::truthy;
use crate::python::pyvalue::{py_eq, py_str};
use crate::state::{State, BUILT_IN_SLICES};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// The value at `key`: a dotted path into a slice, or a flat key searched in request,
/// response, _internal, then the other `slices` (the declared ones) in sorted order. Slices
/// that were never declared are not searched.
pub fn lookup<'a>(state: &'a State, key: &str, slices: &BTreeSet<String>) -> Option<&'a Value> {
    if key.contains('.') {
        return state.path(key);
    }
    let builtin = BUILT_IN_SLICES
        .iter()
        .filter(|s| slices.contains(**s))
        .copied();
    let custom = slices
        .iter()
        .map(String::as_str)
        .filter(|s| !BUILT_IN_SLICES.contains(s));
    builtin
        .chain(custom)
        .filter_map(|s| state.slices.get(s))
        .find_map(|slice| slice.as_object().and_then(|o| o.get(key)))
}

fn holds(state: &State, key: &str, expected: &Value, slices: &BTreeSet<String>) -> bool {
    let actual = lookup(state, key, slices);
    match expected {
        Value::Bool(b) => truthy(actual) == *b,
        other => py_eq(actual.unwrap_or(&Value::Null), other),
    }
}

/// Whether `cond` holds: every `when` pair does and no `when_not` pair does.
pub fn matches(cond: &TriggerCondition, state: &State, slices: &BTreeSet<String>) -> bool {
    cond.when.iter().all(|(k, v)| holds(state, k, v, slices))
        && !cond
            .when_not
            .iter()
            .any(|(k, v)| holds(state, k, v, slices))
}

/// A node whose trigger matched, with the condition that did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// The node's name.
    pub node: String,
    /// The matching condition's priority.
    pub priority: i64,
    /// Index of the condition in the node's `trigger_conditions`.
    pub condition_index: usize,
    /// The condition as agent-contracts prints it: `a=1 AND b=x`, `NOT a=1`, `(always)`.
    pub condition: String,
    /// Why it matched, for people and the LLM router.
    pub reason: String,
}

/// Every node's best (highest-priority, first on ties) matching condition, best first; ties
/// keep registration order.
pub fn candidates<'a>(
    contracts: impl Iterator<Item = &'a NodeContract>,
    state: &State,
    slices: &BTreeSet<String>,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = contracts
        .filter_map(|c| {
            c.trigger_conditions
                .iter()
                .enumerate()
                .filter(|(_, t)| matches(t, state, slices))
                .max_by_key(|(i, t)| (t.priority, std::cmp::Reverse(*i)))
                .map(|(i, t)| Candidate {
                    node: c.name.clone(),
                    priority: t.priority,
                    condition_index: i,
                    condition: condition_text(t),
                    reason: describe(c, t),
                })
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.priority));
    out
}

/// agent-contracts' rendering: the `when` pairs, else the `when_not` pairs, else `(always)`.
pub fn condition_text(t: &TriggerCondition) -> String {
    if !t.when.is_empty() {
        join(&t.when, "")
    } else if !t.when_not.is_empty() {
        join(&t.when_not, "NOT ")
    } else {
        "(always)".into()
    }
}

fn join(map: &serde_json::Map<String, Value>, prefix: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{prefix}{k}={}", py_str(v)))
        .collect::<Vec<_>>()
        .join(" AND ")
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

    fn slices(names: &[&str]) -> BTreeSet<String> {
        BUILT_IN_SLICES
            .iter()
            .chain(names)
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn paths_flat_keys_truthiness_and_negation() -> TestResult {
        let s = state();
        let ok = |when: Value, when_not: Value| {
            matches(&cond(1, when, when_not), &s, &slices(&["context"]))
        };
        assert!(ok(json!({"request.action": "search"}), json!({})));
        assert!(ok(
            json!({"request.params.category": "electronics"}),
            json!({})
        ));
        assert!(
            ok(json!({"action": "search"}), json!({})),
            "flat key found in request"
        );
        assert!(
            ok(json!({"authenticated": true}), json!({})),
            "custom slice, truthy 1"
        );
        assert!(ok(json!({"authenticated": 1.0}), json!({})), "1 == 1.0");
        assert!(ok(json!({"context.missing": false}), json!({})));
        assert!(
            ok(json!({"request.missing": null}), json!({})),
            "absent is null"
        );
        assert!(!ok(json!({}), json!({"request.missing": null})));
        assert!(!ok(json!({"request.action": "buy"}), json!({})));
        assert!(!ok(json!({}), json!({"request.action": "search"})));
        assert!(ok(json!({}), json!({})), "empty condition matches");
        assert!(!ok(json!({"nowhere.deep.path": "x"}), json!({})));
        assert!(
            !matches(
                &cond(1, json!({"authenticated": true}), json!({})),
                &s,
                &slices(&[])
            ),
            "undeclared slices are not searched"
        );
        Ok(())
    }

    #[test]
    fn flat_keys_search_custom_slices_in_sorted_order() -> TestResult {
        let mut s = State::new();
        s.set("zeta", "k", json!("z"));
        s.set("alpha", "k", json!("a"));
        let found = lookup(&s, "k", &slices(&["zeta", "alpha"]));
        assert_eq!(found, Some(&json!("a")));
        s.set("response", "k", json!("r"));
        assert_eq!(
            lookup(&s, "k", &slices(&["zeta", "alpha"])),
            Some(&json!("r"))
        );
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
            cond(50, json!({}), json!({"x": 1})),
        ];
        let c = candidates([&a, &b].into_iter(), &state(), &slices(&[]));
        let got: Vec<(&str, i64, usize, &str)> = c
            .iter()
            .map(|c| {
                (
                    c.node.as_str(),
                    c.priority,
                    c.condition_index,
                    c.condition.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [("a", 60, 1, "action=search"), ("b", 50, 1, "NOT x=1")]
        );
        assert!(c[0].reason.contains("action = \"search\""));
        Ok(())
    }
}
