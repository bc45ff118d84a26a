//! The x86-64 bodies of the weight rows' dot products: AVX2 (with FMA) and AVX-512 (with VNNI
//! where the CPU has it). [`super::quant_matmul`] picks among them by [`super::cpu`]'s level.
//! `attention`: the attention kernel's tile transpose and scores.

pub(crate) mod attention;
pub(crate) mod avx2;
pub(crate) mod avx512;
