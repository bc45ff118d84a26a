//! Static checks of a registry: ERROR for unknown slices and for subgraphs that nest in
//! themselves (directly, through the entry, or in a cycle); WARNING for unknown services,
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
        // Without nodes under the entry nothing runs: say that once, instead of calling every
        // node unreachable.
        let supervisors = self.registry.supervisors();
        let entry_missing =
            !self.registry.contracts().is_empty() && !supervisors.contains(&self.entry);
        if entry_missing {
            findings.push(Finding {
                severity: Severity::Error,
                node: None,
                message: format!(
                    "entry supervisor `{}` has no nodes (supervisors: {})",
                    self.entry,
                    supervisors.join(", ")
                ),
            });
        }
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
            if entry_missing {
                // Reported once, above.
            } else if !entries.contains(c.supervisor.as_str()) {
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
        findings.extend(self.nesting());
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

    /// Subgraphs must nest as a tree under the entry: one entered through the entry, or
    /// holding the entry's supervisor, contains the whole graph and so itself; subgraphs that
    /// hold each other's entrypoint supervisors nest in a cycle.
    fn nesting(&self) -> Vec<Finding> {
        let subgraphs = self.registry.subgraphs();
        let mut findings = vec![];
        let mut error = |message: String| {
            findings.push(Finding {
                severity: Severity::Error,
                node: None,
                message,
            })
        };
        for sg in subgraphs {
            if sg.entrypoint == self.entry {
                error(format!(
                    "subgraph `{}` is entered through `{}`, the graph's entry supervisor, so it would nest in itself",
                    sg.subgraph_id, self.entry
                ));
            } else if sg.supervisors.contains(&self.entry) {
                error(format!(
                    "subgraph `{}` holds `{}`, the graph's entry supervisor, so it would nest in itself",
                    sg.subgraph_id, self.entry
                ));
            }
        }
        // i holds j when j's entrypoint is one of i's supervisors.
        let holds: Vec<Vec<usize>> = subgraphs
            .iter()
            .enumerate()
            .map(|(i, sg)| {
                (0..subgraphs.len())
                    .filter(|&j| j != i && sg.supervisors.contains(&subgraphs[j].entrypoint))
                    .collect()
            })
            .collect();
        // Depth-first search; a back edge to a subgraph on the path closes a cycle, reported
        // once (from the first subgraph of it that the search meets).
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let mut mark = vec![Mark::New; subgraphs.len()];
        for start in 0..subgraphs.len() {
            if mark[start] != Mark::New {
                continue;
            }
            // (subgraph, next child to visit)
            let mut path: Vec<(usize, usize)> = vec![(start, 0)];
            mark[start] = Mark::OnPath;
            while let Some(&mut (at, ref mut next)) = path.last_mut() {
                match holds[at].get(*next).copied() {
                    Some(child) => {
                        *next += 1;
                        match mark[child] {
                            Mark::New => {
                                mark[child] = Mark::OnPath;
                                path.push((child, 0));
                            }
                            Mark::OnPath => {
                                let from = path.iter().position(|&(s, _)| s == child).unwrap_or(0);
                                let names: Vec<&str> = path[from..]
                                    .iter()
                                    .map(|&(s, _)| subgraphs[s].subgraph_id.as_str())
                                    .chain(std::iter::once(subgraphs[child].subgraph_id.as_str()))
                                    .collect();
                                error(format!(
                                    "subgraphs nest in a cycle: {} (each holds the next one's entrypoint supervisor)",
                                    names.join(" → ")
                                ));
                            }
                            Mark::Done => {}
                        }
                    }
                    None => {
                        mark[at] = Mark::Done;
                        path.pop();
                    }
                }
            }
        }
        findings
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::contract::{NodeContract, SubgraphContract, TriggerCondition};
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

    fn subgraph(id: &str, entrypoint: &str, supervisors: &[&str]) -> SubgraphContract {
        SubgraphContract {
            subgraph_id: id.into(),
            description: String::new(),
            reads: vec![],
            writes: vec![],
            entrypoint: entrypoint.into(),
            supervisors: supervisors.iter().map(|s| s.to_string()).collect(),
            nodes: vec![],
        }
    }

    fn errors(r: &Registry) -> Vec<String> {
        Validator::new(r)
            .validate()
            .findings
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.message)
            .collect()
    }

    #[test]
    fn a_missing_entry_is_one_error_naming_it() -> TestResult {
        let mut r = Registry::new();
        r.add_contract(node("a", &[], &[]))?;
        r.add_contract(node("b", &[], &[]))?;
        let mut v = Validator::new(&r);
        v.entry = "nosuch".into();
        let res = v.validate();
        assert_eq!(res.findings.len(), 1, "{res}");
        assert_eq!(
            res.findings[0].message,
            "entry supervisor `nosuch` has no nodes (supervisors: main)"
        );
        assert!(res.has_errors());
        Ok(())
    }

    #[test]
    fn subgraphs_that_nest_in_themselves_are_errors() -> TestResult {
        // A tree: main calls `outer`, which holds `inner`'s supervisor. Fine.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("outer", "outer_sup", &["outer_sup", "inner_sup"]))?;
        r.add_subgraph(subgraph("inner", "inner_sup", &["inner_sup"]))?;
        assert_eq!(errors(&r), Vec::<String>::new());

        // A and B hold each other's supervisors.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("a", "a_sup", &["a_sup", "b_sup"]))?;
        r.add_subgraph(subgraph("b", "b_sup", &["b_sup", "a_sup"]))?;
        r.add_subgraph(subgraph("c", "c_sup", &["c_sup", "a_sup"]))?;
        let errs = errors(&r);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("cycle: a → b → a"), "{errs:?}");

        // A longer cycle, found from wherever the search starts.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("x", "x_sup", &["y_sup"]))?;
        r.add_subgraph(subgraph("y", "y_sup", &["z_sup"]))?;
        r.add_subgraph(subgraph("z", "z_sup", &["x_sup"]))?;
        let errs = errors(&r);
        assert!(
            errs.len() == 1 && errs[0].contains("x → y → z → x"),
            "{errs:?}"
        );

        // Entered through the entry supervisor, or holding it.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("self", "main", &["main"]))?;
        r.add_subgraph(subgraph("up", "up_sup", &["up_sup", "main"]))?;
        let errs = errors(&r);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].contains("`self` is entered through `main`"),
            "{errs:?}"
        );
        assert!(errs[1].contains("`up` holds `main`"), "{errs:?}");
        Ok(())
    }
}
