//! Errors of the graph layer.

pub type Result<T> = std::result::Result<T, GraphError>;

#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("contract violation: node `{node}` {message}")]
    ContractViolation { node: String, message: String },
    #[error("invalid graph: {0}")]
    Invalid(String),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("session store {path}: {message}")]
    Store { path: String, message: String },
    #[error("node `{node}` failed: {message}")]
    Node { node: String, message: String },
    #[error(transparent)]
    Agent(#[from] hearth_agent::AgentError),
}
