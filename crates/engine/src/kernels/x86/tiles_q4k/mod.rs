//! The tile kernels of Q4_K and Q5_K ([`crate::kernels::tiles_q4k`]'s layout) by instruction set.

pub(crate) mod avx2;
pub(crate) mod avx512;
