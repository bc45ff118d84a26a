//! Errors of the agent layer.

pub type Result<T> = std::result::Result<T, AgentError>;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Engine(#[from] hearth_engine::EngineError),
    #[error("llm: {0}")]
    Llm(String),
    #[error("invalid {what}: {message}")]
    Invalid { what: &'static str, message: String },
    #[error("state: {0}")]
    State(String),
    /// A session database: the file, and what is wrong with it.
    #[error("session store {path}: {message}")]
    Store { path: String, message: String },
    /// A run recording: the file, and what is wrong with it.
    #[error("recording {path}: {message}")]
    Recording { path: String, message: String },
}

impl AgentError {
    pub fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            message: message.into(),
        }
    }
}
