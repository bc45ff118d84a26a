//! Errors of the graph layer.

/// A result with a [`GraphError`].
pub type Result<T> = std::result::Result<T, GraphError>;

/// What can go wrong building, validating or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// A node read or wrote a slice its contract does not declare (strict mode).
    #[error("contract violation: node `{node}` {message}")]
    ContractViolation {
        /// The offending node.
        node: String,
        /// What it did.
        message: String,
    },
    /// The graph cannot be built or run: duplicate names, unknown supervisors, subgraphs or
    /// nodes without an implementation.
    #[error("invalid graph: {0}")]
    Invalid(String),
    /// A contract file could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The session store failed.
    #[error("session store {path}: {message}")]
    Store {
        /// The database file, or `(memory)`.
        path: String,
        /// Why.
        message: String,
    },
    /// A node's outputs were malformed.
    #[error("node `{node}` failed: {message}")]
    Node {
        /// The node.
        node: String,
        /// Why.
        message: String,
    },
    /// An error from hearth-agent.
    #[error(transparent)]
    Agent(#[from] hearth_agent::AgentError),
}
