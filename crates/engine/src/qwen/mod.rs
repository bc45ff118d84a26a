//! The Qwen family (Qwen2, Qwen2.5, Qwen3) with an explicit, caller-owned KV cache.

mod attention;
mod mlp;
mod model;
mod rotary;

pub use model::{activation_dtype, Qwen};
