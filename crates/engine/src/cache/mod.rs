//! Per-sequence caches: the KV cache a model appends to ([`kv`]) and its serialised snapshots
//! for sessions ([`snapshot`]).

pub mod kv;
pub mod snapshot;
