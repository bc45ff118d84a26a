//! Constrained decoding: a request may require its output to match a JSON schema, a regex or
//! a Lark grammar ([`Constraint`]). llguidance compiles it against the model's token trie
//! ([`Grammars`], built once per model from Hearth's tokenizer); each constrained sequence
//! carries a matcher ([`Guide`]) that the scheduler asks before it keeps a sampled token.
//!
//! For tool calls, [`Grammars::tool_calls`] builds the constraint that keeps Qwen's
//! `<tool_call>` blocks valid against the offered tools ([`tool_call_grammar`]), with the call
//! inside written as JSON or, for Qwen3-Coder and Qwen3.5, as XML (`xml_call`); a custom
//! tool's input is held to its own Lark grammar (`custom_grammar`).

mod byte_level;
mod custom_grammar;
mod grammars;
mod guide;
mod prose_guard;
mod spec;
mod token_env;
mod tool_call;
mod tool_spec;
mod xml_call;

pub use byte_level::ByteLevel;
pub use grammars::Grammars;
pub use guide::Guide;
pub use spec::Constraint;
pub use token_env::TokenEnv;
pub use tool_call::{tool_call_grammar, TagStyle};
pub use tool_spec::{Layout, ToolSpec};
