//! The root package's tests share the engine's test helpers (fixtures, goldens, real data).
#![allow(dead_code)]

#[path = "../../crates/engine/tests/common/mod.rs"]
mod engine;
pub use engine::*;
