//! The difference between two contract sets, classified as agent-contracts' `diff_contracts`
//! does: a removed node, a changed supervisor, a node that now needs an LLM or no longer
//! writes a slice is breaking; other changes to reads, writes, services, `is_terminal`,
//! `requires_llm` or trigger conditions are behavioural; description and icon are
//! non-breaking. Lists compare as sets (order and repeats do not count) and values as Python
//! compares them (`1 == 1.0`).

use crate::contract::{NodeContract, TriggerCondition};
use crate::error::{GraphError, Result};
use crate::python::pyvalue::py_eq;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How much a node's change matters, least to most; a node takes its worst change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeSeverity {
    /// Description or icon only.
    Nonbreaking,
    /// Other changes to reads, writes, services, `is_terminal`, `requires_llm` or triggers.
    Behavioral,
    /// A changed supervisor, a new LLM requirement or a removed write.
    Breaking,
}

impl ChangeSeverity {
    fn title(self) -> &'static str {
        match self {
            ChangeSeverity::Breaking => "Breaking",
            ChangeSeverity::Behavioral => "Behavioral",
            ChangeSeverity::Nonbreaking => "Nonbreaking",
        }
    }
}

/// What changed in one node present on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeChange {
    /// The node's name.
    pub node: String,
    /// The worst of its changes.
    pub severity: ChangeSeverity,
    /// One line per change, as agent-contracts prints them (`requires_llm: False -> True`).
    pub details: Vec<String>,
}

/// The result of [`diff_contracts`]: nodes added, removed and changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContractDiff {
    /// Sorted names.
    pub added: Vec<String>,
    /// Sorted names.
    pub removed: Vec<String>,
    /// One per changed node, sorted by name.
    pub changes: Vec<NodeChange>,
}

impl ContractDiff {
    /// A removed node or a breaking change (the CLI exits with 2).
    pub fn has_breaking(&self) -> bool {
        !self.removed.is_empty()
            || self
                .changes
                .iter()
                .any(|c| c.severity == ChangeSeverity::Breaking)
    }

    /// agent-contracts' text report.
    pub fn to_text(&self) -> String {
        let mut lines: Vec<String> = vec![];
        for (title, names) in [
            ("Added nodes:", &self.added),
            ("Removed nodes:", &self.removed),
        ] {
            if !names.is_empty() {
                lines.push(title.into());
                lines.extend(names.iter().map(|n| format!("- {n}")));
                lines.push(String::new());
            }
        }
        for severity in [
            ChangeSeverity::Breaking,
            ChangeSeverity::Behavioral,
            ChangeSeverity::Nonbreaking,
        ] {
            let items: Vec<&NodeChange> = self
                .changes
                .iter()
                .filter(|c| c.severity == severity)
                .collect();
            if items.is_empty() {
                continue;
            }
            lines.push(format!("{} changes:", severity.title()));
            for c in items {
                lines.push(format!("- {}", c.node));
                lines.extend(c.details.iter().map(|d| format!("  - {d}")));
            }
            lines.push(String::new());
        }
        let text = lines.join("\n").trim().to_string();
        if text.is_empty() {
            "No changes detected.".into()
        } else {
            text
        }
    }
}

fn by_name(contracts: &[NodeContract]) -> Result<BTreeMap<&str, &NodeContract>> {
    let mut out = BTreeMap::new();
    for c in contracts {
        if out.insert(c.name.as_str(), c).is_some() {
            return Err(GraphError::Invalid(format!(
                "two nodes are named `{}`",
                c.name
            )));
        }
    }
    Ok(out)
}

/// From `before` to `after`; two nodes of one name in either is an error.
pub fn diff_contracts(before: &[NodeContract], after: &[NodeContract]) -> Result<ContractDiff> {
    let (a, b) = (by_name(before)?, by_name(after)?);
    Ok(ContractDiff {
        added: b
            .keys()
            .filter(|n| !a.contains_key(*n))
            .map(|n| n.to_string())
            .collect(),
        removed: a
            .keys()
            .filter(|n| !b.contains_key(*n))
            .map(|n| n.to_string())
            .collect(),
        changes: a
            .iter()
            .filter_map(|(name, x)| b.get(name).and_then(|y| node_change(x, y)))
            .collect(),
    })
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn same_trigger(x: &TriggerCondition, y: &TriggerCondition) -> bool {
    let map_eq = |p: &serde_json::Map<String, serde_json::Value>,
                  q: &serde_json::Map<String, serde_json::Value>| {
        p.len() == q.len() && p.iter().all(|(k, v)| q.get(k).is_some_and(|w| py_eq(v, w)))
    };
    x.priority == y.priority
        && x.llm_hint == y.llm_hint
        && map_eq(&x.when, &y.when)
        && map_eq(&x.when_not, &y.when_not)
}

fn node_change(a: &NodeContract, b: &NodeContract) -> Option<NodeChange> {
    let mut details = vec![];
    let mut severity = ChangeSeverity::Nonbreaking;
    let mut bump = |s: ChangeSeverity| severity = severity.max(s);
    if a.supervisor != b.supervisor {
        details.push(format!("supervisor: {} -> {}", a.supervisor, b.supervisor));
        bump(ChangeSeverity::Breaking);
    }
    if a.requires_llm != b.requires_llm {
        details.push(format!(
            "requires_llm: {} -> {}",
            py_bool(a.requires_llm),
            py_bool(b.requires_llm)
        ));
        bump(if b.requires_llm {
            ChangeSeverity::Breaking
        } else {
            ChangeSeverity::Behavioral
        });
    }
    if a.is_terminal != b.is_terminal {
        details.push(format!(
            "is_terminal: {} -> {}",
            py_bool(a.is_terminal),
            py_bool(b.is_terminal)
        ));
        bump(ChangeSeverity::Behavioral);
    }
    if a.description != b.description {
        details.push("description changed".into());
    }
    if a.icon != b.icon {
        details.push("icon changed".into());
    }
    for (field, x, y, removed) in [
        ("reads", &a.reads, &b.reads, ChangeSeverity::Behavioral),
        ("writes", &a.writes, &b.writes, ChangeSeverity::Breaking),
        (
            "services",
            &a.services,
            &b.services,
            ChangeSeverity::Behavioral,
        ),
    ] {
        let (x, y): (BTreeSet<&str>, BTreeSet<&str>) = (
            x.iter().map(String::as_str).collect(),
            y.iter().map(String::as_str).collect(),
        );
        let plus: Vec<&str> = y.difference(&x).copied().collect();
        let minus: Vec<&str> = x.difference(&y).copied().collect();
        let mut parts = vec![];
        if !plus.is_empty() {
            parts.push(format!("+{}", plus.join(", ")));
            bump(ChangeSeverity::Behavioral);
        }
        if !minus.is_empty() {
            parts.push(format!("-{}", minus.join(", ")));
            bump(removed);
        }
        if !parts.is_empty() {
            details.push(format!("{field}: {}", parts.join(" ")));
        }
    }
    let (x, y) = (&a.trigger_conditions, &b.trigger_conditions);
    if x.len() != y.len() || x.iter().zip(y).any(|(p, q)| !same_trigger(p, q)) {
        details.push(format!(
            "trigger_conditions changed ({} -> {})",
            x.len(),
            y.len()
        ));
        bump(ChangeSeverity::Behavioral);
    }
    (!details.is_empty()).then(|| NodeChange {
        node: a.name.clone(),
        severity,
        details,
    })
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use serde_json::json;

    fn node(name: &str) -> NodeContract {
        let mut c = NodeContract::new(name, "main");
        c.reads = vec!["request".into(), "_internal".into()];
        c.writes = vec!["response".into()];
        c.trigger_conditions = vec![TriggerCondition {
            priority: 10,
            when: json!({"request.n": 1})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ..Default::default()
        }];
        c
    }

    #[test]
    fn classes_and_what_does_not_count() -> TestResult {
        let a = vec![node("x"), node("y"), node("gone")];
        let mut x = node("x");
        x.reads.reverse();
        x.writes.push("response".into());
        x.trigger_conditions[0].when = json!({"request.n": 1.0})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut y = node("y");
        y.writes = vec!["workflow".into()];
        y.requires_llm = true;
        y.description = "new".into();
        let b = vec![x, y, node("new")];
        let d = diff_contracts(&a, &b)?;
        assert_eq!(d.added, ["new"]);
        assert_eq!(d.removed, ["gone"]);
        assert_eq!(
            d.changes,
            [NodeChange {
                node: "y".into(),
                severity: ChangeSeverity::Breaking,
                details: vec![
                    "requires_llm: False -> True".into(),
                    "description changed".into(),
                    "writes: +workflow -response".into(),
                ],
            }]
        );
        assert!(d.has_breaking());
        assert!(d.to_text().starts_with("Added nodes:\n- new\n\nRemoved nodes:\n- gone\n\nBreaking changes:\n- y\n  - requires_llm"));
        assert_eq!(diff_contracts(&a, &a)?.to_text(), "No changes detected.");
        let dup = diff_contracts(&[node("x"), node("x")], &a);
        assert!(dup.is_err_and(|e| e.to_string().contains("two nodes are named `x`")));
        Ok(())
    }
}
