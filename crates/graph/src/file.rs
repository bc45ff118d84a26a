//! Contracts written in TOML or YAML: nodes, custom slices, subgraphs; and the diff of two.

use crate::contract::{NodeContract, SubgraphContract};
use crate::error::{GraphError, Result};
use crate::registry::Registry;
use serde::Deserialize;
use std::path::Path;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ContractFile {
    #[serde(default)]
    pub slices: Vec<String>,
    #[serde(default)]
    pub services: Option<Vec<String>>,
    #[serde(default)]
    pub nodes: Vec<NodeContract>,
    #[serde(default)]
    pub subgraphs: Vec<SubgraphContract>,
}

impl ContractFile {
    pub fn load(path: &Path) -> Result<Self> {
        let err = |m: String| GraphError::File {
            path: path.display().to_string(),
            message: m,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => toml::from_str(&text).map_err(|e| err(e.to_string())),
            Some("yaml" | "yml") => serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string())),
            _ => Err(err("expected a .toml, .yaml or .yml file".into())),
        }
    }

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
}

/// Added, removed and changed nodes between two contract sets.
pub fn diff(a: &ContractFile, b: &ContractFile) -> Vec<String> {
    let mut out = vec![];
    for n in &a.nodes {
        match b.nodes.iter().find(|m| m.name == n.name) {
            None => out.push(format!("- node {}", n.name)),
            Some(m) if m != n => {
                let (x, y) = (
                    serde_json::to_value(n).unwrap_or_default(),
                    serde_json::to_value(m).unwrap_or_default(),
                );
                let fields: Vec<String> = x
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| y.get(k.as_str()) != Some(v))
                    .map(|(k, v)| {
                        format!(
                            "    {k}: {v} -> {}",
                            y.get(k.as_str()).cloned().unwrap_or_default()
                        )
                    })
                    .collect();
                out.push(format!("~ node {}\n{}", n.name, fields.join("\n")));
            }
            _ => {}
        }
    }
    for m in &b.nodes {
        if !a.nodes.iter().any(|n| n.name == m.name) {
            out.push(format!("+ node {}", m.name));
        }
    }
    out
}
