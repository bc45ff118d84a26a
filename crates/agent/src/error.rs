//! Errors of the agent layer.

/// The agent layer's result.
pub type Result<T> = std::result::Result<T, AgentError>;

/// What can go wrong in the agent layer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// An error of the engine.
    #[cfg(feature = "local")]
    #[error(transparent)]
    Engine(#[from] hearth_engine::EngineError),
    /// The model could not answer (a server error, a broken stream, a script run dry).
    #[error("llm: {0}")]
    Llm(String),
    /// An argument that is not acceptable.
    #[error("invalid {what}: {message}")]
    Invalid {
        /// What was given (`message`, `receiver`, `llm_url`, …).
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A state dict that cannot be loaded, or a runtime that cannot start.
    #[error("state: {0}")]
    State(String),
    /// A session database: the file, and what is wrong with it.
    #[error("session store {path}: {message}")]
    Store {
        /// The database file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A run recording: the file, and what is wrong with it.
    #[error("recording {path}: {message}")]
    Recording {
        /// The recording file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl AgentError {
    /// An [`AgentError::Invalid`] about `what`.
    pub fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            message: message.into(),
        }
    }
}

impl From<hearth_chat::InvalidParam> for AgentError {
    fn from(e: hearth_chat::InvalidParam) -> Self {
        Self::Invalid {
            what: e.arg,
            message: e.message,
        }
    }
}
