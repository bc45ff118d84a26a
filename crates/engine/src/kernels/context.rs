//! The one kernel context a model's forward pass carries: the instruction-set level its
//! weights were laid out for, which kernels its layers may take, and whether each activation
//! row is a sequence of its own. Each model keeps its own, so two models in one process may
//! run at different levels.

use super::cpu::{self, CpuLevel};
use super::ops::attention::Products;

/// How a model's products run on the CPU; passed into every layer's `forward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelContext {
    /// The instruction-set level (one this CPU runs; the kernels cap it at the detected one).
    pub level: CpuLevel,
    /// Which kernels the layers may take.
    pub options: KernelOptions,
    /// Every activation row is a sequence of its own (a batched decode step): each row goes
    /// through the kernel it would take alone (no widening to f32 for gemm, no dense gemm), so
    /// a request's tokens do not depend on how many others share its step.
    pub rows_are_sequences: bool,
}

impl KernelContext {
    /// Kernels at `level` with `options`, rows not taken as sequences.
    pub fn new(level: CpuLevel, options: KernelOptions) -> Self {
        Self {
            level,
            options,
            rows_are_sequences: false,
        }
    }

    /// The process's default: `HEARTH_CPU`, else the best level this CPU runs
    /// ([`cpu::default_level`]), with the default options.
    pub fn default_level() -> Self {
        Self::new(cpu::default_level(), KernelOptions::default())
    }

    /// The same context with every row taken as a sequence of its own, or not.
    pub fn with_rows_as_sequences(self, on: bool) -> Self {
        Self {
            rows_are_sequences: on,
            ..self
        }
    }
}

impl Default for KernelContext {
    fn default() -> Self {
        Self::default_level()
    }
}

/// How a model's layers pick among the CPU kernels, beside the instruction-set level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOptions {
    /// AVX-512 VNNI's many-row kernels for Q4_K and Q6_K in GGUF order (off: the one-row
    /// kernels, as other CPUs run; for tests and benchmarks of those paths).
    pub many_row_kernels: bool,
    /// From this many rows on (prompts), a quantized matrix of a type without Hearth's kernels
    /// (Q2_K, Q3_K, …) is widened to f32 and multiplied with gemm (`usize::MAX`: never).
    pub dequantize_from_rows: usize,
    /// Attention's products: bf16 where the CPU has AVX-512 BF16 (the default), or f32.
    pub attention: Products,
}

impl Default for KernelOptions {
    fn default() -> Self {
        Self {
            many_row_kernels: true,
            dequantize_from_rows: 16,
            attention: Products::Bf16,
        }
    }
}
