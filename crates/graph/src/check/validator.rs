//! Static checks of a registry, the ones agent-contracts' `ContractValidator` makes, in its
//! order and with its messages: ERROR for unknown slices in reads/writes and for subgraphs
//! that name an unknown entrypoint, supervisor or node or whose nodes read or write beyond the
//! subgraph's declared slices; WARNING for writes to `request`, unknown services, nodes
//! without a supervisor or without trigger conditions; INFO for slices with several writers.
//! Strict mode turns warnings into errors (`STRICT: …`).
//!
//! Hearth adds checks of its own, as warnings marked `extra` (errors only when strict; off with
//! `extra_checks = false`): trigger paths on undeclared slices, an entry supervisor without
//! nodes, nodes under a supervisor that neither the entry nor a subgraph reaches, and
//! subgraphs that nest in themselves.

use crate::contract::SubgraphContract;
use crate::runtime::registry::Registry;
use crate::state::REQUEST;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The contracts are wrong.
    Error,
    /// Probably a mistake; an error when strict.
    Warning,
    /// Worth knowing.
    Info,
}

/// One problem the validator found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// How serious it is.
    pub severity: Severity,
    /// What is wrong, e.g. `unknown_slice_read`, `no_trigger_conditions`, `shared_writers`.
    pub kind: String,
    /// The node concerned, if any.
    pub node: Option<String>,
    /// The subgraph concerned, if any.
    pub subgraph: Option<String>,
    /// The slice concerned, if any.
    pub slice: Option<String>,
    /// A check of Hearth's that agent-contracts does not make.
    pub extra: bool,
    /// The agent-contracts message.
    pub message: String,
}

impl Finding {
    fn new(severity: Severity, kind: &str, message: String) -> Self {
        Self {
            severity,
            kind: kind.into(),
            node: None,
            subgraph: None,
            slice: None,
            extra: false,
            message,
        }
    }
    fn node(mut self, n: &str) -> Self {
        self.node = Some(n.into());
        self
    }
    fn subgraph(mut self, s: &str) -> Self {
        self.subgraph = Some(s.into());
        self
    }
    fn slice(mut self, s: &str) -> Self {
        self.slice = Some(s.into());
        self
    }
}

/// All findings of one validation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ValidationResult {
    /// Errors, then warnings, then info, each in the order the checks ran.
    pub findings: Vec<Finding>,
}

impl ValidationResult {
    /// Any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// How many findings have severity `s`.
    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }
}

/// agent-contracts' report (ERRORS / WARNINGS / INFO), then the counts.
impl std::fmt::Display for ValidationResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (severity, title) in [
            (Severity::Error, "ERRORS:"),
            (Severity::Warning, "WARNINGS:"),
            (Severity::Info, "INFO:"),
        ] {
            let mut items = self.findings.iter().filter(|x| x.severity == severity);
            if let Some(first) = items.next() {
                writeln!(f, "{title}")?;
                for x in std::iter::once(first).chain(items) {
                    writeln!(f, "  - {}", x.message)?;
                }
            }
        }
        if self.findings.is_empty() {
            writeln!(f, "✅ All validations passed")?;
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

/// Static checks of a registry's contracts, configured by its fields.
pub struct Validator<'a> {
    /// The registry to check.
    pub registry: &'a Registry,
    /// Services that exist; `None` skips the service check.
    pub known_services: Option<BTreeSet<String>>,
    /// Warnings become errors (`STRICT: …`).
    pub strict: bool,
    /// The supervisor runs start at (others must be reachable through subgraphs).
    pub entry: String,
    /// Hearth's own checks (as warnings); off gives exactly agent-contracts' findings.
    pub extra_checks: bool,
}

impl<'a> Validator<'a> {
    /// Checks `registry`: extra checks on, entry `main`, not strict, no service check.
    pub fn new(registry: &'a Registry) -> Self {
        Self {
            registry,
            known_services: None,
            strict: false,
            entry: "main".into(),
            extra_checks: true,
        }
    }

    /// Runs every check; findings come as errors, then warnings, then info.
    pub fn validate(&self) -> ValidationResult {
        let mut errors = vec![];
        let mut warnings = vec![];
        let mut info = vec![];
        let r = self.registry;
        let slices = r.valid_slices();
        use Severity::{Error, Warning};

        for c in r.contracts() {
            for s in &c.reads {
                if !slices.contains(s) {
                    errors.push(
                        Finding::new(
                            Error,
                            "unknown_slice_read",
                            format!("Unknown slice '{s}' in node '{}' reads", c.name),
                        )
                        .node(&c.name)
                        .slice(s),
                    );
                }
            }
            for s in &c.writes {
                if !slices.contains(s) {
                    errors.push(
                        Finding::new(
                            Error,
                            "unknown_slice_write",
                            format!("Unknown slice '{s}' in node '{}' writes", c.name),
                        )
                        .node(&c.name)
                        .slice(s),
                    );
                }
                if s == REQUEST {
                    warnings.push(
                        Finding::new(
                            Warning,
                            "writes_request",
                            format!(
                                "Writing to 'request' slice is discouraged (node '{}')",
                                c.name
                            ),
                        )
                        .node(&c.name),
                    );
                }
            }
        }
        if let Some(known) = &self.known_services {
            for c in r.contracts() {
                for s in c.services.iter().filter(|s| !known.contains(*s)) {
                    warnings.push(
                        Finding::new(
                            Warning,
                            "unknown_service",
                            format!("Unknown service '{s}' required by node '{}'", c.name),
                        )
                        .node(&c.name),
                    );
                }
            }
        }
        for c in r.contracts() {
            if c.supervisor.is_empty() {
                warnings.push(
                    Finding::new(
                        Warning,
                        "orphan_node",
                        format!("Node '{}' has no supervisor (orphan)", c.name),
                    )
                    .node(&c.name),
                );
            } else if c.trigger_conditions.is_empty() {
                warnings.push(
                    Finding::new(
                        Warning,
                        "no_trigger_conditions",
                        format!(
                            "Node '{}' has no trigger conditions (may be unreachable)",
                            c.name
                        ),
                    )
                    .node(&c.name),
                );
            }
        }
        for sg in r.subgraphs() {
            errors.extend(self.subgraph(sg));
        }
        if self.extra_checks {
            warnings.extend(self.extra());
        }
        let mut writers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut order: Vec<&str> = vec![];
        for c in r.contracts() {
            for s in &c.writes {
                if !writers.contains_key(s.as_str()) {
                    order.push(s);
                }
                writers.entry(s).or_default().push(&c.name);
            }
        }
        for slice in order {
            let mut nodes = writers.get(slice).cloned().unwrap_or_default();
            if nodes.len() > 1 {
                nodes.sort();
                info.push(
                    Finding::new(
                        Severity::Info,
                        "shared_writers",
                        format!("Shared writers for '{slice}': {}", nodes.join(", ")),
                    )
                    .slice(slice),
                );
            }
        }
        if self.strict {
            for mut w in warnings.drain(..) {
                w.severity = Error;
                w.message = format!("STRICT: {}", w.message);
                errors.push(w);
            }
        }
        errors.extend(warnings);
        errors.extend(info);
        ValidationResult { findings: errors }
    }

    /// agent-contracts' subgraph checks: the entrypoint, the definition's supervisors and
    /// nodes exist, and the subgraph's nodes stay within its declared reads and writes.
    fn subgraph(&self, sg: &SubgraphContract) -> Vec<Finding> {
        let r = self.registry;
        let id = &sg.subgraph_id;
        let supervisors: BTreeSet<&str> = r
            .contracts()
            .iter()
            .map(|c| c.supervisor.as_str())
            .collect();
        let is_node = |n: &str| r.contract(n).is_some();
        let mut out = vec![];
        let error = |kind: &str, message: String| Finding::new(Severity::Error, kind, message);
        if !is_node(&sg.entrypoint) && !supervisors.contains(sg.entrypoint.as_str()) {
            out.push(
                error(
                    "subgraph_unknown_entrypoint",
                    format!(
                        "Subgraph '{id}' entrypoint '{}' not found as node or supervisor",
                        sg.entrypoint
                    ),
                )
                .subgraph(id),
            );
        }
        for s in sg
            .supervisors
            .iter()
            .filter(|s| !supervisors.contains(s.as_str()))
        {
            out.push(
                error(
                    "subgraph_unknown_supervisor",
                    format!("Subgraph '{id}' definition references unknown supervisor '{s}'"),
                )
                .subgraph(id),
            );
        }
        for n in sg.nodes.iter().filter(|n| !is_node(n)) {
            out.push(
                error(
                    "subgraph_unknown_node",
                    format!("Subgraph '{id}' definition references unknown node '{n}'"),
                )
                .subgraph(id)
                .node(n),
            );
        }
        let reads: BTreeSet<&str> = sg.reads.iter().map(String::as_str).collect();
        let writes: BTreeSet<&str> = sg.writes.iter().map(String::as_str).collect();
        for name in subgraph_nodes(r, sg) {
            let Some(c) = r.contract(&name) else { continue };
            for (what, used, declared) in
                [("reads", &c.reads, &reads), ("writes", &c.writes, &writes)]
            {
                let beyond: BTreeSet<&str> = used
                    .iter()
                    .map(String::as_str)
                    .filter(|s| !declared.contains(s))
                    .collect();
                if !beyond.is_empty() {
                    out.push(
                        error(
                            &format!("subgraph_{what}_undeclared"),
                            format!(
                                "Subgraph '{id}' boundary violation: node '{name}' {what} undeclared slices ({})",
                                beyond.into_iter().collect::<Vec<_>>().join(", ")
                            ),
                        )
                        .subgraph(id)
                        .node(&name),
                    );
                }
            }
        }
        out
    }

    /// Hearth's own checks, as warnings.
    fn extra(&self) -> Vec<Finding> {
        let r = self.registry;
        let slices = r.valid_slices();
        let mut out = vec![];
        let mut warn = |f: Finding| out.push(Finding { extra: true, ..f });
        let warning = |kind: &str, message: String| Finding::new(Severity::Warning, kind, message);
        for c in r.contracts() {
            for t in &c.trigger_conditions {
                for key in t.when.keys().chain(t.when_not.keys()) {
                    if let Some((slice, _)) = key.split_once('.') {
                        if !slices.contains(slice) {
                            warn(
                                warning(
                                    "trigger_unknown_slice",
                                    format!(
                                        "Trigger path '{key}' of node '{}' names unknown slice '{slice}'",
                                        c.name
                                    ),
                                )
                                .node(&c.name)
                                .slice(slice),
                            );
                        }
                    }
                }
            }
        }
        let supervisors = r.supervisors();
        let entry_missing = !r.contracts().is_empty() && !supervisors.contains(&self.entry);
        if entry_missing {
            // Said once, instead of calling every node unreachable.
            warn(warning(
                "entry_without_nodes",
                format!(
                    "Entry supervisor '{}' has no nodes (supervisors: {})",
                    self.entry,
                    supervisors.join(", ")
                ),
            ));
        } else {
            let entries: BTreeSet<&str> = std::iter::once(self.entry.as_str())
                .chain(r.subgraphs().iter().map(|s| s.entrypoint.as_str()))
                .collect();
            for c in r.contracts() {
                if !c.supervisor.is_empty() && !entries.contains(c.supervisor.as_str()) {
                    warn(
                        warning(
                            "unreachable_supervisor",
                            format!(
                                "Node '{}' is unreachable: supervisor '{}' is neither the entry nor a subgraph entrypoint",
                                c.name, c.supervisor
                            ),
                        )
                        .node(&c.name),
                    );
                }
            }
        }
        for f in self.nesting() {
            warn(f);
        }
        out
    }

    /// Subgraphs must nest as a tree under the entry: one entered through the entry, or
    /// holding the entry's supervisor, contains the whole graph and so itself; subgraphs that
    /// hold each other's entrypoint supervisors nest in a cycle.
    fn nesting(&self) -> Vec<Finding> {
        let subgraphs = self.registry.subgraphs();
        let mut findings = vec![];
        let mut warn = |id: &str, kind: &str, message: String| {
            findings.push(Finding::new(Severity::Warning, kind, message).subgraph(id))
        };
        for sg in subgraphs {
            if sg.entrypoint == self.entry {
                warn(&sg.subgraph_id, "subgraph_nests_itself", format!(
                    "Subgraph '{}' is entered through '{}', the graph's entry supervisor, so it would nest in itself",
                    sg.subgraph_id, self.entry
                ));
            } else if sg.supervisors.contains(&self.entry) {
                warn(&sg.subgraph_id, "subgraph_nests_itself", format!(
                    "Subgraph '{}' holds '{}', the graph's entry supervisor, so it would nest in itself",
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
                                warn(&subgraphs[child].subgraph_id, "subgraph_cycle", format!(
                                    "Subgraphs nest in a cycle: {} (each holds the next one's entrypoint supervisor)",
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

/// The nodes a subgraph holds: its listed nodes (with the entrypoint when that is a node), or,
/// when it lists none, every node of its supervisors (the entrypoint's, the listed ones', and
/// those of listed nodes). Sorted.
pub fn subgraph_nodes(r: &Registry, sg: &SubgraphContract) -> BTreeSet<String> {
    let mut nodes: BTreeSet<String> = sg.nodes.iter().cloned().collect();
    let mut supervisors: BTreeSet<String> = sg.supervisors.iter().cloned().collect();
    if r.contract(&sg.entrypoint).is_some() {
        nodes.insert(sg.entrypoint.clone());
    } else {
        supervisors.insert(sg.entrypoint.clone());
    }
    for n in &nodes {
        if let Some(c) = r.contract(n) {
            supervisors.insert(c.supervisor.clone());
        }
    }
    if !sg.nodes.is_empty() {
        return nodes;
    }
    r.contracts()
        .iter()
        .filter(|c| supervisors.contains(&c.supervisor))
        .map(|c| c.name.clone())
        .collect()
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

    fn kinds(res: &ValidationResult) -> Vec<(Severity, &str, Option<&str>, bool)> {
        res.findings
            .iter()
            .map(|f| (f.severity, f.kind.as_str(), f.node.as_deref(), f.extra))
            .collect()
    }

    #[test]
    fn levels_order_and_strict_mode() -> TestResult {
        use Severity::*;
        let mut r = Registry::new();
        r.add_contract(node("search", &["request", "orders"], &["response"]))?;
        let mut bad = node("writer", &["request"], &["request", "response"]);
        bad.services = vec!["db".into()];
        bad.trigger_conditions[0]
            .when
            .insert("cart.ready".into(), json!(true));
        r.add_contract(bad)?;
        let mut lonely = node("lonely", &[], &[]);
        lonely.trigger_conditions.clear();
        r.add_contract(lonely)?;
        let mut v = Validator::new(&r);
        v.known_services = Some(BTreeSet::new());
        let res = v.validate();
        assert_eq!(
            kinds(&res),
            [
                (Error, "unknown_slice_read", Some("search"), false),
                (Warning, "writes_request", Some("writer"), false),
                (Warning, "unknown_service", Some("writer"), false),
                (Warning, "no_trigger_conditions", Some("lonely"), false),
                (Warning, "trigger_unknown_slice", Some("writer"), true),
                (Info, "shared_writers", None, false),
            ]
        );
        let text = res.to_string();
        assert!(
            text.starts_with(
                "ERRORS:\n  - Unknown slice 'orders' in node 'search' reads\nWARNINGS:\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  - Shared writers for 'response': search, writer\n"),
            "{text}"
        );
        v.strict = true;
        let res = v.validate();
        assert_eq!(res.count(Error), 5);
        assert!(res.findings[1]
            .message
            .starts_with("STRICT: Writing to 'request'"));
        v.strict = false;
        v.extra_checks = false;
        assert!(v.validate().findings.iter().all(|f| !f.extra));
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

    fn messages(r: &Registry, kind: &str) -> Vec<String> {
        Validator::new(r)
            .validate()
            .findings
            .into_iter()
            .filter(|f| f.kind == kind)
            .map(|f| f.message)
            .collect()
    }

    #[test]
    fn a_missing_entry_is_one_warning_naming_it() -> TestResult {
        let mut r = Registry::new();
        r.add_contract(node("a", &[], &[]))?;
        r.add_contract(node("b", &[], &[]))?;
        let mut v = Validator::new(&r);
        v.entry = "nosuch".into();
        let res = v.validate();
        assert_eq!(res.findings.len(), 1, "{res}");
        assert_eq!(
            res.findings[0].message,
            "Entry supervisor 'nosuch' has no nodes (supervisors: main)"
        );
        assert!(!res.has_errors());
        v.strict = true;
        assert!(v.validate().has_errors());
        Ok(())
    }

    #[test]
    fn subgraph_boundaries_and_definitions() -> TestResult {
        let mut r = Registry::new();
        r.add_contract(node("a", &["request"], &["response"]))?;
        let mut b = node("b", &["request", "_internal"], &["response"]);
        b.supervisor = "side".into();
        r.add_contract(b)?;
        let mut sg = subgraph("s", "side", &["side", "ghost"]);
        sg.reads = vec!["request".into()];
        sg.writes = vec!["response".into()];
        r.add_subgraph(sg)?;
        r.add_subgraph(subgraph("t", "nowhere", &[]))?;
        let res = Validator::new(&r).validate();
        let errs: Vec<&str> = res
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(
            errs,
            [
                "Subgraph 's' definition references unknown supervisor 'ghost'",
                "Subgraph 's' boundary violation: node 'b' reads undeclared slices (_internal)",
                "Subgraph 't' entrypoint 'nowhere' not found as node or supervisor",
            ]
        );
        Ok(())
    }

    #[test]
    fn subgraphs_that_nest_in_themselves_are_warned_about() -> TestResult {
        // A tree: main calls `outer`, which holds `inner`'s supervisor. Fine.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("outer", "outer_sup", &["outer_sup", "inner_sup"]))?;
        r.add_subgraph(subgraph("inner", "inner_sup", &["inner_sup"]))?;
        assert_eq!(messages(&r, "subgraph_cycle"), Vec::<String>::new());

        // A and B hold each other's supervisors.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("a", "a_sup", &["a_sup", "b_sup"]))?;
        r.add_subgraph(subgraph("b", "b_sup", &["b_sup", "a_sup"]))?;
        r.add_subgraph(subgraph("c", "c_sup", &["c_sup", "a_sup"]))?;
        let errs = messages(&r, "subgraph_cycle");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("cycle: a → b → a"), "{errs:?}");

        // A longer cycle, found from wherever the search starts.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("x", "x_sup", &["y_sup"]))?;
        r.add_subgraph(subgraph("y", "y_sup", &["z_sup"]))?;
        r.add_subgraph(subgraph("z", "z_sup", &["x_sup"]))?;
        let errs = messages(&r, "subgraph_cycle");
        assert!(
            errs.len() == 1 && errs[0].contains("x → y → z → x"),
            "{errs:?}"
        );

        // Entered through the entry supervisor, or holding it.
        let mut r = Registry::new();
        r.add_subgraph(subgraph("self", "main", &["main"]))?;
        r.add_subgraph(subgraph("up", "up_sup", &["up_sup", "main"]))?;
        let errs = messages(&r, "subgraph_nests_itself");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].contains("'self' is entered through 'main'"),
            "{errs:?}"
        );
        assert!(errs[1].contains("'up' holds 'main'"), "{errs:?}");
        Ok(())
    }
}
