//! Per-sequence caches: the KV cache a model appends to ([`kv`]), the recurrent state of a
//! hybrid model's linear-attention layers held inside it ([`recurrent`]), and their serialised
//! snapshots for sessions ([`snapshot`]); how keys and values are stored ([`cache_type`], the
//! quantized blocks in [`quantized`]); the
//! read-only rows caches share for a common prefix ([`segment`]); a prompt's images and
//! their positions ([`multimodal`]).

pub mod cache_type;
pub mod kv;
pub mod multimodal;
pub mod quantized;
pub mod recurrent;
pub mod segment;
pub mod snapshot;
