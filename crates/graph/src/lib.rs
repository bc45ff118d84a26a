//! hearth-graph: agent-contracts in Rust. Nodes declare what they read, what they write and
//! when they should run ([`NodeContract`], [`TriggerCondition`]); Hearth checks the
//! declarations ([`Validator`]), builds the graph from them ([`Registry`]), routes with
//! [`Supervisor`]s (rules, then an LLM choosing among the rule candidates) and runs it with
//! sessions kept in SQLite ([`Runtime`]).
//!
//! Routing, validation, contract diffs and the LLM-input sanitiser behave as agent-contracts
//! 0.6.0 does (`scripts/graph-diff.sh` checks it against the Python library). Differences:
//! there is no LangGraph underneath — the runtime walks supervisors and nodes itself;
//! contracts can also be written in TOML; the validator has extra checks of its own.

#![warn(missing_docs)]

pub mod builder;
pub mod check;
pub mod contract;
pub mod error;
pub mod file;
pub mod python;
pub mod runtime;
pub mod state;

pub use contract::{NodeContract, SubgraphContract, TriggerCondition};
pub use error::{GraphError, Result};
pub use runtime::node::{
    AgentNode, Interactive, InteractiveNode, Node, NodeConfig, NodeInputs, NodeOutputs,
};

/// Node implementations are async traits.
pub use async_trait::async_trait;
pub use builder::{build_graph_from_registry, GraphOptions, LlmProvider, SupervisorFactory};
pub use check::validator::{Severity, ValidationResult, Validator};
pub use contract::diff::{diff_contracts, ChangeSeverity, ContractDiff, NodeChange};
pub use runtime::registry::Registry;
pub use runtime::store::{MemoryStore, SqliteStore, StateStore};
pub use runtime::supervisor::{
    return_to_sender, Decision, DecisionKind, DecisionTrace, RouterContext, Supervisor,
};
pub use runtime::{
    ExecutionResult, RequestContext, Runtime, RuntimeHooks, StreamEvent, StreamEventType,
};
pub use state::{IoPolicy, State};
