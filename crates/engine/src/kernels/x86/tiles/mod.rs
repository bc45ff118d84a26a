//! The tile kernels of Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 ([`crate::kernels::tiles`]) by
//! instruction set.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod avx_vnni;
