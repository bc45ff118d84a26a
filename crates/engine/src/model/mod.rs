//! The models: one file per architecture (`qwen`: Qwen2, Qwen2.5, Qwen3, Qwen3-MoE), with the
//! layers they share beside it. Each model takes an explicit, caller-owned KV cache.

mod attention;
pub mod linear;
mod mlp;
mod moe;
mod qwen;
mod rotary;

pub use qwen::{activation_dtype, Qwen};
