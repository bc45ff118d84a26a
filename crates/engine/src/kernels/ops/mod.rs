//! The model's operations beside the matrix products: attention with rotary embedding and
//! SwiGLU ([`attention`]), and the Gated DeltaNet recurrence of the hybrid models
//! (`delta_rule`).

pub mod attention;
pub(crate) mod delta_rule;
