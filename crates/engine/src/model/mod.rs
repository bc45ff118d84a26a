//! The models: one file per architecture (`qwen`: Qwen2, Qwen2.5, Qwen3, Qwen3-MoE, Qwen3.5), with the
//! layers they share beside it. Each model takes an explicit, caller-owned KV cache.

pub(crate) mod attention;
mod delta_net;
mod language_model;
mod layer;
pub mod linear;
mod mlp;
mod moe;
pub mod mtp;
mod qwen;
mod rotary;

pub use qwen::{activation_dtype, Qwen};
