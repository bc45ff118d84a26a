//! The registry: every node's contract (and implementation), the valid slices, subgraphs;
//! the graph is built from it — supervisors and the nodes they route to.

use crate::contract::{NodeContract, SubgraphContract, CALL_SUBGRAPH};
use crate::error::{GraphError, Result};
use crate::runtime::node::Node;
use crate::state::BUILT_IN_SLICES;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Contracts, their implementations, valid slices and subgraphs: what the graph is built and
/// validated from.
#[derive(Clone, Default)]
pub struct Registry {
    contracts: Vec<NodeContract>,
    nodes: Vec<Option<Arc<dyn Node>>>,
    slices: BTreeSet<String>,
    subgraphs: Vec<SubgraphContract>,
}

impl Registry {
    /// A registry with only the built-in slices.
    pub fn new() -> Self {
        Self {
            slices: BUILT_IN_SLICES.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Registers a custom slice name (`orders`, `workflow`, …).
    pub fn add_valid_slice(&mut self, name: &str) {
        self.slices.insert(name.into());
    }

    /// Built-in and registered slice names.
    pub fn valid_slices(&self) -> &BTreeSet<String> {
        &self.slices
    }

    /// A contract without an implementation (for validation and visualisation).
    pub fn add_contract(&mut self, contract: NodeContract) -> Result<()> {
        if contract.name.starts_with(CALL_SUBGRAPH) {
            return Err(GraphError::Invalid(format!(
                "node `{}` uses the reserved prefix `{CALL_SUBGRAPH}`",
                contract.name
            )));
        }
        if self.subgraph(&contract.name).is_some() {
            return Err(GraphError::Invalid(format!(
                "node `{}` has the name of a subgraph",
                contract.name
            )));
        }
        if self.contracts.iter().any(|c| c.name == contract.name) {
            return Err(GraphError::Invalid(format!(
                "two nodes are named `{}`",
                contract.name
            )));
        }
        self.contracts.push(contract);
        self.nodes.push(None);
        Ok(())
    }

    /// Registers a node and its contract (checked as in `add_contract`).
    pub fn add_node(&mut self, node: Arc<dyn Node>) -> Result<()> {
        self.add_contract(node.contract().clone())?;
        if let Some(last) = self.nodes.last_mut() {
            *last = Some(node);
        }
        Ok(())
    }

    /// Registers a subgraph; its id must be unique and not a node's.
    pub fn add_subgraph(&mut self, subgraph: SubgraphContract) -> Result<()> {
        if self.contract(&subgraph.subgraph_id).is_some() {
            return Err(GraphError::Invalid(format!(
                "subgraph `{}` has the name of a node",
                subgraph.subgraph_id
            )));
        }
        if self
            .subgraphs
            .iter()
            .any(|s| s.subgraph_id == subgraph.subgraph_id)
        {
            return Err(GraphError::Invalid(format!(
                "two subgraphs are named `{}`",
                subgraph.subgraph_id
            )));
        }
        self.subgraphs.push(subgraph);
        Ok(())
    }

    /// Every contract, in registration order.
    pub fn contracts(&self) -> &[NodeContract] {
        &self.contracts
    }

    /// The contract of node `name`.
    pub fn contract(&self, name: &str) -> Option<&NodeContract> {
        self.contracts.iter().find(|c| c.name == name)
    }

    /// The implementation of node `name`; `None` for a bare contract.
    pub fn node(&self, name: &str) -> Option<&Arc<dyn Node>> {
        let i = self.contracts.iter().position(|c| c.name == name)?;
        self.nodes[i].as_ref()
    }

    /// Every subgraph, in registration order.
    pub fn subgraphs(&self) -> &[SubgraphContract] {
        &self.subgraphs
    }

    /// The subgraph `id`.
    pub fn subgraph(&self, id: &str) -> Option<&SubgraphContract> {
        self.subgraphs.iter().find(|s| s.subgraph_id == id)
    }

    /// Supervisor names, in order of first appearance.
    pub fn supervisors(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for c in &self.contracts {
            if !out.contains(&c.supervisor) {
                out.push(c.supervisor.clone());
            }
        }
        out
    }

    /// The contracts a supervisor routes to.
    pub fn nodes_of<'a>(
        &'a self,
        supervisor: &'a str,
    ) -> impl Iterator<Item = &'a NodeContract> + 'a {
        self.contracts
            .iter()
            .filter(move |c| c.supervisor == supervisor)
    }

    /// Checks that every contract has an implementation and that slices are known.
    pub fn check_runnable(&self) -> Result<()> {
        for (c, n) in self.contracts.iter().zip(&self.nodes) {
            if n.is_none() {
                return Err(GraphError::Invalid(format!(
                    "node `{}` has a contract but no implementation",
                    c.name
                )));
            }
            for s in c.reads.iter().chain(&c.writes) {
                if !self.slices.contains(s) {
                    return Err(GraphError::Invalid(format!(
                        "node `{}` uses unknown slice `{s}`",
                        c.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The graph as a Mermaid flowchart. Ids are escaped (any name gives valid Mermaid) and
    /// labels quoted.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n    START([start])\n");
        let sups = self.supervisors();
        let sup_id = |s: &str| mermaid_id("sup", s);
        if let Some(first) = sups.first() {
            out.push_str(&format!(
                "    START --> {}{{{{\"{}\"}}}}\n",
                sup_id(first),
                mermaid_label(first)
            ));
        }
        for s in &sups {
            for c in self.nodes_of(s) {
                let icon = c
                    .icon
                    .as_deref()
                    .map(|i| format!("{i} "))
                    .unwrap_or_default();
                let id = mermaid_id("node", &c.name);
                out.push_str(&format!(
                    "    {} --> {id}[\"{}\"]\n",
                    sup_id(s),
                    mermaid_label(&format!("{icon}{}", c.name))
                ));
                if c.is_terminal {
                    out.push_str(&format!("    {id} --> END([end])\n"));
                } else {
                    out.push_str(&format!("    {id} -.-> {}\n", sup_id(s)));
                }
            }
        }
        for sg in &self.subgraphs {
            out.push_str(&format!(
                "    subgraph {}[\"{}\"]\n        {}{{{{\"{}\"}}}}\n    end\n",
                mermaid_id("subgraph", &sg.subgraph_id),
                mermaid_label(&sg.subgraph_id),
                sup_id(&sg.entrypoint),
                mermaid_label(&sg.entrypoint)
            ));
        }
        out
    }
}

/// A Mermaid id for any name: ASCII letters, digits and `_` stay, anything else becomes
/// `_<hex>_`, so distinct names keep distinct ids; the prefix keeps ids off keywords (`end`).
pub fn mermaid_id(prefix: &str, name: &str) -> String {
    let mut out = format!("{prefix}_");
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if c == '_' {
            out.push_str("__");
        } else {
            out.push_str(&format!("_{:x}_", c as u32));
        }
    }
    out
}

/// Text inside a quoted Mermaid label: quotes and angle brackets as entities.
pub fn mermaid_label(text: &str) -> String {
    text.replace('&', "#amp;")
        .replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}
