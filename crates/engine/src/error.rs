//! Errors of the engine. Every variant names the file, field, tensor or argument at fault,
//! so that a user can fix their input without reading the source.

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, EngineError>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{what} not found: {path}")]
    MissingFile { what: &'static str, path: PathBuf },

    #[error("{path}: field `{field}`: {message}")]
    Config {
        path: PathBuf,
        field: String,
        message: String,
    },

    #[error("{path}: unsupported architecture `{found}`; supported: {supported}")]
    UnsupportedArchitecture {
        path: PathBuf,
        found: String,
        supported: String,
    },

    #[error("tensor `{name}` is missing from the weights ({files})")]
    MissingTensor { name: String, files: String },

    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    #[error("{path}: not a valid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },

    #[error("{path}: GGUF: {message}")]
    Gguf { path: PathBuf, message: String },

    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer { path: PathBuf, message: String },

    #[error(
        "offline: `{file}` of `{repo}` (revision `{revision}`) is not in the Hugging Face cache at {cache}; \
         run once without --offline/HF_HUB_OFFLINE=1 to fetch it, or pass --model <local dir>"
    )]
    NotCached {
        repo: String,
        revision: String,
        file: String,
        cache: PathBuf,
    },

    #[error("hub: cannot fetch `{file}` of `{repo}`: {message}")]
    Hub {
        repo: String,
        file: String,
        message: String,
    },

    #[error("invalid {arg}: {message}")]
    InvalidArgument { arg: &'static str, message: String },

    #[error(
        "prompt has {len} tokens, more than the model's {max} positions (max_position_embeddings)"
    )]
    PromptTooLong { len: usize, max: usize },

    #[error("{origin}: template error: {message}")]
    Template { origin: String, message: String },

    #[error("device: {0}")]
    Device(String),

    #[error("the engine worker has stopped")]
    WorkerGone,

    #[error("the engine's queue is full ({waiting} requests waiting or running; max_waiting)")]
    QueueFull { waiting: usize },

    #[error(
        "{origin}: the model produced NaN or infinite logits at position {position}; its weights \
         are damaged, or overflow in this dtype"
    )]
    NonFinite { origin: String, position: usize },

    /// A constrained sequence that cannot go on (its grammar reached a dead end).
    #[error("constraint: {0}")]
    Constraint(String),

    #[error("KV cache budget: {message}")]
    KvBudget { message: String },

    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl EngineError {
    pub fn invalid(arg: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            arg,
            message: message.into(),
        }
    }

    /// A bad field of a configuration file (config.json, a model card, a meta-template, …).
    pub fn config(path: &std::path::Path, field: &str, message: impl Into<String>) -> Self {
        Self::Config {
            path: path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
