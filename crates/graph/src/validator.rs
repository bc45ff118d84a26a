//! Static checks of a registry: ERROR for unknown slices; WARNING for unknown services,
//! unreachable nodes and writes to `request`; INFO for slices written by several nodes.
//! Strict mode turns warnings into errors.

use crate::registry::Registry;
use crate::state::REQUEST;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub node: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ValidationResult {
    pub findings: Vec<Finding>,
}

impl ValidationResult {
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }
}

impl std::fmt::Display for ValidationResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for x in &self.findings {
            let level = match x.severity {
                Severity::Error => "ERROR",
                Severity::Warning => "WARNING",
                Severity::Info => "INFO",
            };
            match &x.node {
                Some(n) => writeln!(f, "{level}: {n}: {}", x.message)?,
                None => writeln!(f, "{level}: {}", x.message)?,
            }
        }
        write!(
            f,
            "{} error(s), {} warning(s), {} info",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.count(Severity::Info)
        )
    }
}

pub struct Validator<'a> {
    pub registry: &'a Registry,
    /// Services that exist; `None` skips the service check.
    pub known_services: Option<BTreeSet<String>>,
    pub strict: bool,
    /// The supervisor runs start at (others must be reachable through subgraphs).
    pub entry: String,
}

impl<'a> Validator<'a> {
    pub fn new(registry: &'a Registry) -> Self {
        Self {
            registry,
            known_services: None,
            strict: false,
            entry: "main".into(),
        }
    }

    pub fn validate(&self) -> ValidationResult {
        let mut findings = vec![];
        let warn = if self.strict {
            Severity::Error
        } else {
            Severity::Warning
        };
        let slices = self.registry.valid_slices();
        let mut writers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let entries: BTreeSet<&str> = std::iter::once(self.entry.as_str())
            .chain(
                self.registry
                    .subgraphs()
                    .iter()
                    .map(|s| s.entrypoint.as_str()),
            )
            .collect();
        for c in self.registry.contracts() {
            let mut add = |severity, message: String| {
                findings.push(Finding {
                    severity,
                    node: Some(c.name.clone()),
                    message,
                })
            };
            for s in &c.reads {
                if !slices.contains(s) {
                    add(Severity::Error, format!("reads unknown slice `{s}`"));
                }
            }
            for s in &c.writes {
                if !slices.contains(s) {
                    add(Severity::Error, format!("writes unknown slice `{s}`"));
                }
                if s == REQUEST {
                    add(warn, "writes `request`, which should be read-only".into());
                }
                writers.entry(s.as_str()).or_default().push(&c.name);
            }
            for t in &c.trigger_conditions {
                for key in t.when.keys().chain(t.when_not.keys()) {
                    if let Some((slice, _)) = key.split_once('.') {
                        if !slices.contains(slice) {
                            add(
                                Severity::Error,
                                format!("trigger path `{key}` names unknown slice `{slice}`"),
                            );
                        }
                    }
                }
            }
            if let Some(known) = &self.known_services {
                for s in &c.services {
                    if !known.contains(s) {
                        add(warn, format!("uses unknown service `{s}`"));
                    }
                }
            }
            if !entries.contains(c.supervisor.as_str()) {
                add(warn, format!("is unreachable: supervisor `{}` is not the entry nor a subgraph entrypoint", c.supervisor));
            } else if c.trigger_conditions.is_empty() {
                add(warn, "is unreachable: it has no trigger conditions".into());
            }
        }
        for sg in self.registry.subgraphs() {
            for n in &sg.nodes {
                if self.registry.contract(n).is_none() {
                    findings.push(Finding {
                        severity: Severity::Error,
                        node: None,
                        message: format!("subgraph `{}` lists unknown node `{n}`", sg.subgraph_id),
                    });
                }
            }
        }
        for (slice, nodes) in writers {
            if nodes.len() > 1 {
                findings.push(Finding {
                    severity: Severity::Info,
                    node: None,
                    message: format!("slice `{slice}` is written by {}", nodes.join(", ")),
                });
            }
        }
        findings.sort_by_key(|f| f.severity);
        ValidationResult { findings }
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::contract::{NodeContract, TriggerCondition};
    use serde_json::json;

    fn node(name: &str, reads: &[&str], writes: &[&str]) -> NodeContract {
        let mut c = NodeContract::new(name, "main");
        c.reads = reads.iter().map(|s| s.to_string()).collect();
        c.writes = writes.iter().map(|s| s.to_string()).collect();
        c.trigger_conditions = vec![TriggerCondition {
            priority: 10,
            ..Default::default()
        }];
        c
    }

    #[test]
    fn levels_and_strict_mode() -> TestResult {
        let mut r = Registry::new();
        r.add_contract(node("search", &["request", "orders"], &["response"]))?;
        let mut bad = node("writer", &["request"], &["request", "response"]);
        bad.services = vec!["db".into()];
        bad.trigger_conditions[0]
            .when
            .insert("cart.ready".into(), json!(true));
        r.add_contract(bad)?;
        let mut lonely = node("lonely", &[], &[]);
        lonely.supervisor = "nowhere".into();
        r.add_contract(lonely)?;
        let mut v = Validator::new(&r);
        v.known_services = Some(BTreeSet::new());
        let res = v.validate();
        let text = res.to_string();
        assert!(
            text.contains("ERROR: search: reads unknown slice `orders`"),
            "{text}"
        );
        assert!(
            text.contains("ERROR: writer: trigger path `cart.ready` names unknown slice `cart`"),
            "{text}"
        );
        assert!(text.contains("WARNING: writer: writes `request`"), "{text}");
        assert!(
            text.contains("WARNING: writer: uses unknown service `db`"),
            "{text}"
        );
        assert!(text.contains("WARNING: lonely: is unreachable"), "{text}");
        assert!(
            text.contains("INFO: slice `response` is written by search, writer"),
            "{text}"
        );
        assert_eq!(res.count(Severity::Error), 2);
        v.strict = true;
        assert_eq!(v.validate().count(Severity::Error), 5);
        assert!(r
            .add_contract(node("search", &[], &[]))
            .unwrap_err()
            .to_string()
            .contains("two nodes are named `search`"));
        Ok(())
    }
}
