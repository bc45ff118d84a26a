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
}

impl AgentError {
    pub fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            message: message.into(),
        }
    }
}
