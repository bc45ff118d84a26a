//! The registry: every node's contract (and implementation), the valid slices, subgraphs;
//! the graph is built from it — supervisors and the nodes they route to.

use crate::contract::{NodeContract, SubgraphContract};
use crate::error::{GraphError, Result};
use crate::node::Node;
use crate::state::BUILT_IN_SLICES;
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Clone, Default)]
pub struct Registry {
    contracts: Vec<NodeContract>,
    nodes: Vec<Option<Arc<dyn Node>>>,
    slices: BTreeSet<String>,
    subgraphs: Vec<SubgraphContract>,
}

impl Registry {
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

    pub fn valid_slices(&self) -> &BTreeSet<String> {
        &self.slices
    }

    /// A contract without an implementation (for validation and visualisation).
    pub fn add_contract(&mut self, contract: NodeContract) -> Result<()> {
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

    pub fn add_node(&mut self, node: Arc<dyn Node>) -> Result<()> {
        self.add_contract(node.contract().clone())?;
        if let Some(last) = self.nodes.last_mut() {
            *last = Some(node);
        }
        Ok(())
    }

    pub fn add_subgraph(&mut self, subgraph: SubgraphContract) -> Result<()> {
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

    pub fn contracts(&self) -> &[NodeContract] {
        &self.contracts
    }

    pub fn contract(&self, name: &str) -> Option<&NodeContract> {
        self.contracts.iter().find(|c| c.name == name)
    }

    pub fn node(&self, name: &str) -> Option<&Arc<dyn Node>> {
        let i = self.contracts.iter().position(|c| c.name == name)?;
        self.nodes[i].as_ref()
    }

    pub fn subgraphs(&self) -> &[SubgraphContract] {
        &self.subgraphs
    }

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

    /// The graph as a Mermaid flowchart.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n    START([start])\n");
        let sups = self.supervisors();
        if let Some(first) = sups.first() {
            out.push_str(&format!("    START --> {first}{{{{{first}}}}}\n"));
        }
        for s in &sups {
            for c in self.nodes_of(s) {
                let icon = c
                    .icon
                    .as_deref()
                    .map(|i| format!("{i} "))
                    .unwrap_or_default();
                out.push_str(&format!("    {s} --> {}[\"{icon}{}\"]\n", c.name, c.name));
                if c.is_terminal {
                    out.push_str(&format!("    {} --> END([end])\n", c.name));
                } else {
                    out.push_str(&format!("    {} -.-> {s}\n", c.name));
                }
            }
        }
        for sg in &self.subgraphs {
            out.push_str(&format!(
                "    subgraph {}\n        {}{{{{{}}}}}\n    end\n",
                sg.subgraph_id, sg.entrypoint, sg.entrypoint
            ));
        }
        out
    }
}
