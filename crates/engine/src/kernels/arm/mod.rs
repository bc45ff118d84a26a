//! The aarch64 bodies of the weight rows' dot products (NEON, with SDOT where the CPU has it).

pub(crate) mod neon;
