//! The x86-64 bodies of the weight rows' dot products: AVX2 (with FMA) and AVX-512 (with VNNI
//! where the CPU has it). [`super::quant_matmul`] picks among them by [`super::cpu`]'s level.
//! `attention`: the attention kernel's tile transpose and scores; `attention_bf16`: the same
//! with bf16 products. `dense`: the dense products'
//! bodies. `tiles`, `tiles_q4k`, `tiles_q6k`: the tile kernels per block type. [`PanelPass`]: one pass of
//! the packed products' bodies ([`super::packed`]).

pub(crate) mod attention;
pub(crate) mod attention_bf16;
pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod dense;
pub(crate) mod tiles;
pub(crate) mod tiles_q4k;
pub(crate) mod tiles_q6k;

/// One pass of a kernel body: `rows` rows of activations (`ldx` apart from `x`) times one
/// panel's `depth` weights (`w`: `depth × 32`), summed into the first `cols` outputs of
/// each row (`ldo` apart from `out`), added to what is there where `accumulate`. The caller
/// guarantees `x` holds `rows` rows of `depth` values and that no other thread touches those
/// outputs.
#[derive(Clone, Copy)]
pub(crate) struct PanelPass<'a> {
    pub x: &'a [f32],
    pub ldx: usize,
    pub rows: usize,
    pub depth: usize,
    pub w: &'a [f32],
    pub out: *mut f32,
    pub ldo: usize,
    pub cols: usize,
    pub accumulate: bool,
}
