//! What a node declares about itself.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Prefix of a routing target that enters a subgraph (no node may be named with it).
pub const CALL_SUBGRAPH: &str = "call_subgraph::";

/// When a node should run: all of `when` holds and none of `when_not` does. Higher priority
/// is evaluated first (100+ critical, 50–99 main handlers, 1–49 fallbacks, 0 catch-all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TriggerCondition {
    #[serde(default)]
    pub priority: i64,
    /// `slice.field.nested` (or a flat key, searched in request, response, _internal, then the
    /// other declared slices in sorted order) → expected value. Booleans compare truthiness;
    /// other values Python's `==`. Kept in file order, as agent-contracts prints them.
    #[serde(default)]
    pub when: Map<String, Value>,
    #[serde(default)]
    pub when_not: Map<String, Value>,
    /// Why to pick this node, for the LLM router.
    #[serde(default)]
    pub llm_hint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeContract {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub reads: Vec<String>,
    #[serde(default)]
    pub writes: Vec<String>,
    #[serde(default)]
    pub requires_llm: bool,
    #[serde(default)]
    pub services: Vec<String>,
    /// The supervisor that routes to this node.
    #[serde(default = "main")]
    pub supervisor: String,
    #[serde(default)]
    pub trigger_conditions: Vec<TriggerCondition>,
    /// The run ends after this node.
    #[serde(default)]
    pub is_terminal: bool,
    #[serde(default)]
    pub icon: Option<String>,
}

fn main() -> String {
    "main".into()
}

impl NodeContract {
    pub fn new(name: &str, supervisor: &str) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            reads: vec![],
            writes: vec![],
            requires_llm: false,
            services: vec![],
            supervisor: supervisor.into(),
            trigger_conditions: vec![],
            is_terminal: false,
            icon: None,
        }
    }
}

/// A graph within the graph: its own supervisors and nodes, entered through `entrypoint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubgraphContract {
    pub subgraph_id: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub reads: Vec<String>,
    #[serde(default)]
    pub writes: Vec<String>,
    /// The supervisor that starts it.
    pub entrypoint: String,
    #[serde(default)]
    pub supervisors: Vec<String>,
    #[serde(default)]
    pub nodes: Vec<String>,
}
