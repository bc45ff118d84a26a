//! Contracts written in TOML, YAML or JSON: nodes, custom slices, subgraphs, and how their
//! supervisors route (terminal response types, explicit routing).

use crate::contract::{NodeContract, SubgraphContract};
use crate::error::{GraphError, Result};
use crate::runtime::registry::Registry;
use crate::runtime::supervisor::{return_to_sender, Supervisor};
use crate::state::IoPolicy;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

/// A contract file as written: custom slices, known services, nodes, subgraphs and
/// supervisor settings.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ContractFile {
    /// Custom slices, besides request, response and _internal.
    #[serde(default)]
    pub slices: Vec<String>,
    /// Services that exist, for the validator's unknown-service check.
    #[serde(default)]
    pub services: Option<Vec<String>>,
    /// Node contracts.
    #[serde(default)]
    pub nodes: Vec<NodeContract>,
    /// Subgraph contracts.
    #[serde(default)]
    pub subgraphs: Vec<SubgraphContract>,
    /// How the file's supervisors route (`[supervisor]`).
    #[serde(default)]
    pub supervisor: SupervisorSettings,
    /// What undeclared reads and writes do (`[io]`: `strict`, `warn`, `drop_undeclared_writes`,
    /// agent-contracts' `io:` settings and defaults); for [`crate::Runtime::policy`].
    #[serde(default)]
    pub io: IoPolicy,
}

/// Explicit routing, before the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ExplicitRoutingKind {
    /// `_internal.next_node`, else an answer back to `_internal.asked_by` (Hearth's runtime).
    #[default]
    ReturnToSender,
    /// None (agent-contracts without an `explicit_routing_handler`).
    None,
}

/// How the file's supervisors route. The defaults are Hearth's runtime; agent-contracts'
/// bare defaults are `terminal_response_types = []` and `explicit_routing = "none"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorSettings {
    /// `response_type`s that end the run (default `done` and `error`).
    #[serde(default = "terminal_types")]
    pub terminal_response_types: Vec<String>,
    /// Explicit routing before the rules (default return-to-sender).
    #[serde(default)]
    pub explicit_routing: ExplicitRoutingKind,
    /// Longest string the LLM router sees untruncated; absent keeps the supervisor's default.
    #[serde(default)]
    pub max_field_length: Option<usize>,
}

fn terminal_types() -> Vec<String> {
    vec!["done".into(), "error".into()]
}

impl Default for SupervisorSettings {
    fn default() -> Self {
        Self {
            terminal_response_types: terminal_types(),
            explicit_routing: ExplicitRoutingKind::default(),
            max_field_length: None,
        }
    }
}

impl ContractFile {
    /// Reads a `.toml`, `.yaml`/`.yml` or `.json` file; unknown fields are an error.
    pub fn load(path: &Path) -> Result<Self> {
        let err = |m: String| GraphError::File {
            path: path.display().to_string(),
            message: m,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => toml::from_str(&text).map_err(|e| err(e.to_string())),
            Some("yaml" | "yml") => serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string())),
            Some("json") => serde_json::from_str(&text).map_err(|e| err(e.to_string())),
            _ => Err(err("expected a .toml, .yaml, .yml or .json file".into())),
        }
    }

    /// A registry of the file's slices, node contracts (without implementations) and subgraphs.
    pub fn registry(&self) -> Result<Registry> {
        let mut r = Registry::new();
        for s in &self.slices {
            r.add_valid_slice(s);
        }
        for n in &self.nodes {
            r.add_contract(n.clone())?;
        }
        for s in &self.subgraphs {
            r.add_subgraph(s.clone())?;
        }
        Ok(r)
    }

    /// The supervisor `name` as the file's settings configure it.
    pub fn supervisor(&self, name: &str) -> Supervisor {
        let mut s = Supervisor::new(name);
        let settings = &self.supervisor;
        s.terminal_response_types = settings.terminal_response_types.iter().cloned().collect();
        if settings.explicit_routing == ExplicitRoutingKind::ReturnToSender {
            s.explicit_routing = Some(Arc::new(return_to_sender));
        }
        if let Some(n) = settings.max_field_length {
            s.max_field_length = n;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::runtime::supervisor::DecisionKind;
    use crate::state::{State, INTERNAL, RESPONSE};

    const FILE: &str = r#"
[[nodes]]
name = "a"
trigger_conditions = [{ priority = 1 }]
[[nodes]]
name = "b"
"#;

    #[test]
    fn the_io_table_sets_the_policy_with_agent_contracts_defaults() -> TestResult {
        let f: ContractFile = toml::from_str("[io]\nstrict = true\n")?;
        assert_eq!(
            f.io,
            IoPolicy {
                strict: true,
                warn: true,
                drop_undeclared_writes: true
            }
        );
        let f: ContractFile =
            serde_yaml_ng::from_str("io:\n  warn: false\n  drop_undeclared_writes: false\n")?;
        assert!(!f.io.strict && !f.io.warn && !f.io.drop_undeclared_writes);
        assert_eq!(
            toml::from_str::<ContractFile>(FILE)?.io,
            IoPolicy::default()
        );
        assert!(toml::from_str::<ContractFile>("[io]\nloud = true\n").is_err());
        Ok(())
    }

    #[tokio::test]
    async fn the_supervisor_table_sets_terminal_types_and_explicit_routing() -> TestResult {
        let mut state = State::new();
        state.set(INTERNAL, "next_node", "b".into());
        state.set(RESPONSE, "response_type", "done".into());

        let hearth: ContractFile = toml::from_str(FILE)?;
        let r = hearth.registry()?;
        let t = hearth
            .supervisor("main")
            .decide_with_trace(&state, &r, None)
            .await;
        assert_eq!(t.decision_type, DecisionKind::TerminalState);

        let bare: ContractFile = toml::from_str(&format!(
            "{FILE}[supervisor]\nterminal_response_types = []\nexplicit_routing = \"none\"\n"
        ))?;
        let t = bare
            .supervisor("main")
            .decide_with_trace(&state, &r, None)
            .await;
        assert_eq!(
            (t.selected_node.as_str(), t.decision_type),
            ("a", DecisionKind::RuleMatch)
        );

        let routed: ContractFile = toml::from_str(&format!(
            "{FILE}[supervisor]\nterminal_response_types = [\"error\"]\n"
        ))?;
        let t = routed
            .supervisor("main")
            .decide_with_trace(&state, &r, None)
            .await;
        assert_eq!(
            (t.selected_node.as_str(), t.decision_type),
            ("b", DecisionKind::ExplicitRouting)
        );

        let typo = toml::from_str::<ContractFile>(&format!("{FILE}[supervisor]\nexplicit = 1\n"));
        assert!(typo.is_err_and(|e| e.to_string().contains("explicit")));
        Ok(())
    }
}
