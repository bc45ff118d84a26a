//! The tile kernels of Q6_K ([`crate::kernels::tiles_q6k`]'s layout) by instruction set.

pub(crate) mod avx2;
pub(crate) mod avx512;
