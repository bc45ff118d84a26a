//! hearth-engine: Qwen-family models on candle, served in process.
//!
//! The model lives on a worker thread ([`Engine`]) whose scheduler batches every running
//! request into one decoding step ([`scheduler`]); callers send [`GenerateRequest`]s and read
//! an [`EventStream`]. The KV cache ([`KvCache`]) is an explicit per-sequence object, so a
//! session can keep it between requests and reuse the shared prefix.

#![warn(missing_docs)]

pub mod cache;
pub mod chat;
pub mod constraint;
pub mod device;
pub mod engine;
pub mod error;
pub mod generation;
pub mod kernels;
pub mod load;
pub mod loader;
pub mod model;
pub mod sampling;
pub mod scheduler;
pub mod speculative;
pub mod text;
pub mod vision;

pub use cache::cache_type::{CacheType, CacheTypes};
pub use cache::kv::KvCache;
pub use chat::{ChatFormat, ChatInput, ChatMessage, ToolCall, ToolChoice, ToolFormat};
pub use constraint::{Constraint, Grammars};
pub use device::DeviceSpec;
pub use engine::Engine;
pub use error::{EngineError, Result};
pub use generation::stream::{ChatRequest, ChatStream, EventStream};
pub use generation::{
    Event, FinishReason, GenerateRequest, LanguageModel, Summary, Timings, Usage,
};
pub use load::card::ModelCard;
pub use load::config::{Family, QwenConfig, Yarn};
pub use load::source::{HubOptions, ModelFiles};
pub use load::weights::Weights;
pub use loader::{
    load_model, DTypeSpec, ImageSupport, LoadOptions, LoadProgress, LoadedModel, ModelInfo,
    YarnOptions, DEFAULT_MAX_IMAGE_PIXELS,
};
pub use model::Qwen;
pub use sampling::{Sampler, SamplingParams};
pub use scheduler::{SchedulerConfig, SchedulerOptions, SchedulerStats};
pub use speculative::Speculation;
pub use text::stop::{StopScan, StopStrings};
pub use text::tokenizer::{StreamDecoder, Tokenizer};
