//! Python's semantics where agent-contracts depends on them: values compared and printed as
//! Python does ([`pyvalue`]), `binascii`'s base64 ([`binascii`]), and what the LLM router may
//! see ([`sanitize`]).

pub mod binascii;
pub mod pyvalue;
pub mod sanitize;
