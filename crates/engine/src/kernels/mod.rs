//! Hearth's CPU kernels: the quantized and dense matrix products, attention and their helpers,
//! each run at the level a model's [`KernelContext`] names ([`cpu`]: the levels).
//!
//! - [`blocks`]: GGUF block formats and the 8-bit activation rows, shared by every ISA's file;
//!   [`quantize`]: activations quantised to Q8_K at a level.
//! - `portable`, `x86/avx2`, `x86/avx512`, `arm/neon`: weight rows' dot products, one file per
//!   instruction set, in a folder per architecture.
//! - [`tiles`]: Q4_0/Q5_0/Q8_0/Q4_1/Q5_1 in 16-row tiles (layout, packing, the kernel choice);
//!   `tiles_q4k` (Q4_K and Q5_K), `tiles_q6k`: the K-quants' layouts; `tile_layout`: what they
//!   share (the tile's height, prefetching, the row-group driver). Their bodies per instruction
//!   set: `x86/tiles/` (avx2, avx_vnni, avx512), `x86/tiles_q4k/`, `x86/tiles_q6k/`.
//! - [`quant_matmul`]: which kernel each block type takes at a level, and the parallel driver.
//! - `dense`: f32/bf16/f16 weights (bodies in `x86/dense`); [`packed`]: f32 weights packed in panels for products of
//!   many rows (the vision tower).
//! - `ops/`: the operations beside the products: `attention` (with rotary embedding and
//!   SwiGLU) and `delta_rule` (the hybrids' Gated DeltaNet).

/// Compiles `$body` (an `#[inline(always)]` function) for AVX-512 and AVX2; the function it
/// defines takes the level first and runs the best body of that level this CPU runs.
macro_rules! simd_dispatch {
    ($vis:vis fn $name:ident($($arg:ident: $ty:ty),*) => $body:ident) => {
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(level: $crate::kernels::cpu::CpuLevel, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::kernels::cpu::{self, CpuLevel};
                #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2($($arg: $ty),*) {
                    $body($($arg),*)
                }
                // SAFETY: capped at the detected level, whose features include these.
                match level.min(cpu::detected()) {
                    CpuLevel::Avx512 => return unsafe { avx512($($arg),*) },
                    CpuLevel::Avx2 | CpuLevel::AvxVnni => return unsafe { avx2($($arg),*) },
                    CpuLevel::Portable | CpuLevel::Neon => {}
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = level;
            $body($($arg),*)
        }
    };
}

#[cfg(target_arch = "aarch64")]
mod arm;
pub mod blocks;
mod context;
pub mod cpu;
pub(crate) mod dense;
pub(crate) mod dense_matmul;
pub mod ops;
pub mod packed;
mod portable;
pub mod quant_matmul;
pub mod quantize;
mod tile_kernels;
mod tile_layout;
pub mod tiles;
mod tiles_q4k;
mod tiles_q6k;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use blocks::{BlockType, Q8Row};
pub use context::{KernelContext, KernelOptions};
pub use cpu::{CpuLevel, CpuLevelError};
pub use quant_matmul::{kernel_path, matmul_t, QuantMatrix};

/// `f` on the values of `t` as one f32 slice, without a copy; `None` unless `t` is f32 and
/// contiguous on the CPU (what the kernels read a tensor as).
pub(crate) fn with_cpu_f32<R>(
    t: &candle_core::Tensor,
    f: impl FnOnce(&[f32]) -> R,
) -> candle_core::Result<Option<R>> {
    if t.dtype() != candle_core::DType::F32 {
        return Ok(None);
    }
    let (s, l) = t.storage_and_layout();
    let (candle_core::Storage::Cpu(s), Some((start, end))) = (&*s, l.contiguous_offsets()) else {
        return Ok(None);
    };
    Ok(Some(f(&s.as_slice::<f32>()?[start..end])))
}
