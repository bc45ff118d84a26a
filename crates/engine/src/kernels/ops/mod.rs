//! The model's operations beside the matrix products: attention with rotary embedding and
//! SwiGLU ([`attention`]), and the Gated DeltaNet recurrence of the hybrid models
//! (`delta_rule`), row-wise passes over a product's rows ([`pointwise`]: bias and GELU,
//! softmax), the attention of every query over every key ([`full_attention`]: a vision
//! tower's, within one image) and the rotation of heads that a quantized key cache stores
//! ([`hadamard`]).

pub mod attention;
pub(crate) mod delta_rule;
pub mod full_attention;
pub mod hadamard;
pub mod pointwise;
