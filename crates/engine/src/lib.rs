//! hearth-engine: Qwen-family models on candle, served in process.
//!
//! The model lives on a worker thread ([`Engine`]) whose scheduler batches every running
//! request into one decoding step ([`scheduler`]); callers send [`GenerateRequest`]s and read
//! an [`EventStream`]. The KV cache ([`KvCache`]) is an explicit per-sequence object, so a
//! session can keep it between requests and reuse the shared prefix.

pub mod card;
pub mod chat;
pub mod config;
pub mod constraint;
pub mod device;
pub mod engine;
pub mod error;
pub mod generation;
pub mod gguf;
pub mod huge_pages;
pub mod kernels;
pub mod kv_cache;
pub mod kv_snapshot;
pub mod linear;
pub mod load;
pub mod memory;
pub mod qwen;
pub mod sampling;
pub mod scheduler;
pub mod source;
pub mod stop;
pub mod stream;
pub mod tokenizer;
pub mod weights;

pub use card::ModelCard;
pub use chat::{ChatFormat, ChatInput, ChatMessage, ToolCall, ToolFormat};
pub use config::{Family, QwenConfig};
pub use constraint::{Constraint, Grammars};
pub use device::DeviceSpec;
pub use engine::Engine;
pub use error::{EngineError, Result};
pub use generation::{
    Event, FinishReason, GenerateRequest, LanguageModel, Summary, Timings, Usage,
};
pub use kv_cache::KvCache;
pub use load::{load_model, DTypeSpec, LoadOptions, LoadProgress, LoadedModel, ModelInfo};
pub use qwen::Qwen;
pub use sampling::{Sampler, SamplingParams};
pub use scheduler::{SchedulerConfig, SchedulerOptions, SchedulerStats};
pub use source::{HubOptions, ModelFiles};
pub use stop::{StopScan, StopStrings};
pub use stream::{ChatRequest, ChatStream, EventStream};
pub use tokenizer::{StreamDecoder, Tokenizer};
pub use weights::Weights;
