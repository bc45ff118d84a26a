//! Errors of the engine. Every variant names the file, field, tensor or argument at fault,
//! so that a user can fix their input without reading the source.

use std::path::PathBuf;

/// Result of the engine's fallible operations.
pub type Result<T> = std::result::Result<T, EngineError>;

/// Everything that can go wrong while loading a model or generating.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file at fault.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A file that the model needs is absent.
    #[error("{what} not found: {path}")]
    MissingFile {
        /// Which file it is (`config.json`, `tokenizer.json`, …).
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },

    /// A configuration field is missing or has a bad value.
    #[error("{path}: field `{field}`: {message}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// The field at fault.
        field: String,
        /// What is wrong with it.
        message: String,
    },

    /// The model's `architectures` is not one that the engine implements.
    #[error("{path}: unsupported architecture `{found}`; supported: {supported}")]
    UnsupportedArchitecture {
        /// The configuration file.
        path: PathBuf,
        /// The architecture it names.
        found: String,
        /// The architectures the engine does support.
        supported: String,
    },

    /// A tensor that the model needs is not in the weight files.
    #[error("tensor `{name}` is missing from the weights ({files})")]
    MissingTensor {
        /// Name of the missing tensor.
        name: String,
        /// The weight files searched.
        files: String,
    },

    /// A tensor's shape differs from the one the configuration implies.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Name of the tensor.
        name: String,
        /// Shape implied by the configuration.
        expected: Vec<usize>,
        /// Shape found in the weights.
        found: Vec<usize>,
    },

    /// A safetensors file could not be parsed.
    #[error("{path}: not a valid safetensors file: {message}")]
    Safetensors {
        /// The file at fault.
        path: PathBuf,
        /// What the parser reported.
        message: String,
    },

    /// A GGUF file could not be parsed or holds something unsupported.
    #[error("{path}: GGUF: {message}")]
    Gguf {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// The tokenizer file could not be loaded.
    #[error("{path}: cannot load tokenizer: {message}")]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// What the tokenizer library reported.
        message: String,
    },

    /// Offline mode, and a file of the model is not in the local Hugging Face cache.
    #[error(
        "offline: `{file}` of `{repo}` (revision `{revision}`) is not in the Hugging Face cache at {cache}; \
         run once without --offline/HF_HUB_OFFLINE=1 to fetch it, or pass --model <local dir>"
    )]
    NotCached {
        /// The Hugging Face repository.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The file of the repository that is missing.
        file: String,
        /// The cache directory searched.
        cache: PathBuf,
    },

    /// Downloading a file from the Hugging Face Hub failed.
    #[error("hub: cannot fetch `{file}` of `{repo}`: {message}")]
    Hub {
        /// The Hugging Face repository.
        repo: String,
        /// The file being fetched.
        file: String,
        /// What the hub client reported.
        message: String,
    },

    /// An argument or request field has a bad value.
    #[error("invalid {arg}: {message}")]
    InvalidArgument {
        /// The argument at fault.
        arg: &'static str,
        /// What is wrong with it.
        message: String,
    },

    /// The prompt does not fit in the model's context window.
    #[error(
        "prompt has {len} tokens, more than the model's {max} positions (max_position_embeddings)"
    )]
    PromptTooLong {
        /// Prompt length in tokens.
        len: usize,
        /// The model's maximum positions.
        max: usize,
    },

    /// A chat template failed to compile or render.
    #[error("{origin}: template error: {message}")]
    Template {
        /// Where the template came from (file or model).
        origin: String,
        /// What the template engine reported.
        message: String,
    },

    /// The requested device cannot be opened or is not compiled in.
    #[error("device: {0}")]
    Device(String),

    /// The engine's worker thread has exited; no more requests can be served.
    #[error("the engine worker has stopped")]
    WorkerGone,

    /// Too many requests are already waiting or running (`max_waiting`).
    #[error("the engine's queue is full ({waiting} requests waiting or running; max_waiting)")]
    QueueFull {
        /// Requests waiting or running now.
        waiting: usize,
    },

    /// The model's logits were NaN or infinite.
    #[error(
        "{origin}: the model produced NaN or infinite logits at position {position}; its weights \
         are damaged, or overflow in this dtype"
    )]
    NonFinite {
        /// The model that produced them.
        origin: String,
        /// Token position at which it happened.
        position: usize,
    },

    /// A constrained sequence that cannot go on (its grammar reached a dead end).
    #[error("constraint: {0}")]
    Constraint(String),

    /// The KV cache budget (`kv_cache_mb`) cannot hold what a request needs.
    #[error("KV cache budget: {message}")]
    KvBudget {
        /// What needed room and how much.
        message: String,
    },

    /// An error from candle.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl EngineError {
    /// The error of asking a model without a multi-token-prediction head to run one.
    pub fn no_mtp_head() -> Self {
        Self::invalid(
            "speculative",
            "the model has no multi-token-prediction head (mtp.*)",
        )
    }

    /// An [`EngineError::InvalidArgument`] for `arg`.
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

    /// An [`EngineError::Io`] on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<hearth_chat::InvalidParam> for EngineError {
    fn from(e: hearth_chat::InvalidParam) -> Self {
        Self::invalid(e.arg, e.message)
    }
}
