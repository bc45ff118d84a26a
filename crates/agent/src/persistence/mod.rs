//! What outlives a process: sessions in SQLite ([`store`]), runs recorded as they happen
//! ([`record`]) and replayed against the recording ([`replay`]).

pub mod record;
pub mod replay;
pub mod store;
