//! The `hearth` subcommands, one file or folder each (`hearth serve` is its own subsystem,
//! `src/serve/`).

pub mod agent;
pub mod bench;
pub mod chat;
pub mod graph;
pub mod launch;
pub mod models;
pub mod parity;
pub mod replay;
pub mod run;
pub mod template;
