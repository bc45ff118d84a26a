//! The Qwen family (Qwen2, Qwen2.5, Qwen3, Qwen3-MoE) with an explicit, caller-owned KV cache.

mod attention;
mod mlp;
mod model;
mod moe;
mod rotary;

pub use model::{activation_dtype, Qwen};
