//! What a node declares about itself; trigger conditions against the state ([`matching`]);
//! the difference between two contract sets ([`diff`]).

pub mod diff;
pub mod matching;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Prefix of a routing target that enters a subgraph (no node may be named with it).
pub const CALL_SUBGRAPH: &str = "call_subgraph::";

/// When a node should run: all of `when` holds and none of `when_not` does. Higher priority
/// is evaluated first (100+ critical, 50–99 main handlers, 1–49 fallbacks, 0 catch-all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TriggerCondition {
    /// Evaluation order among all triggers of a supervisor; higher first.
    #[serde(default)]
    pub priority: i64,
    /// `slice.field.nested` (or a flat key, searched in request, response, _internal, then the
    /// other declared slices in sorted order) → expected value. Booleans compare truthiness;
    /// other values Python's `==`. Kept in file order, as agent-contracts prints them.
    #[serde(default)]
    pub when: Map<String, Value>,
    /// Keys that must not hold (compared as in `when`); any one that holds blocks the trigger.
    #[serde(default)]
    pub when_not: Map<String, Value>,
    /// Why to pick this node, for the LLM router.
    #[serde(default)]
    pub llm_hint: Option<String>,
}

/// A node's declaration: the slices it reads and writes, what it needs (services, an LLM),
/// the supervisor that routes to it and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeContract {
    /// Unique node name (not starting with `call_subgraph::`).
    pub name: String,
    /// What the node does; the LLM router sees it when a trigger has no `llm_hint`.
    #[serde(default)]
    pub description: String,
    /// Slices the node may read; others read as `{}` (or fail when strict).
    #[serde(default)]
    pub reads: Vec<String>,
    /// Slices the node may write; the runtime's `IoPolicy` decides what other writes do.
    #[serde(default)]
    pub writes: Vec<String>,
    /// The node calls an LLM.
    #[serde(default)]
    pub requires_llm: bool,
    /// Services the node uses, by name (see `NodeConfig::services`).
    #[serde(default)]
    pub services: Vec<String>,
    /// The supervisor that routes to this node.
    #[serde(default = "main")]
    pub supervisor: String,
    /// When the supervisor's rules pick this node.
    #[serde(default)]
    pub trigger_conditions: Vec<TriggerCondition>,
    /// The run ends after this node.
    #[serde(default)]
    pub is_terminal: bool,
    /// Shown before the name in diagrams.
    #[serde(default)]
    pub icon: Option<String>,
}

fn main() -> String {
    "main".into()
}

impl NodeContract {
    /// A contract with only a name and a supervisor; everything else empty or false.
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
    /// Unique id, routed to as `call_subgraph::<id>`.
    pub subgraph_id: String,
    /// What the subgraph does.
    #[serde(default)]
    pub description: String,
    /// Slices its nodes may read.
    #[serde(default)]
    pub reads: Vec<String>,
    /// Slices its nodes may write.
    #[serde(default)]
    pub writes: Vec<String>,
    /// The supervisor that starts it.
    pub entrypoint: String,
    /// Supervisors inside it.
    #[serde(default)]
    pub supervisors: Vec<String>,
    /// Nodes inside it.
    #[serde(default)]
    pub nodes: Vec<String>,
}
