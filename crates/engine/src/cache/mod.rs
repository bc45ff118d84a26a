//! Per-sequence caches: the KV cache a model appends to ([`kv`]), the recurrent state of a
//! hybrid model's linear-attention layers held inside it ([`recurrent`]), and their serialised
//! snapshots for sessions ([`snapshot`]); how keys and values are stored ([`cache_type`]).

pub mod cache_type;
pub mod kv;
pub mod recurrent;
pub mod snapshot;
