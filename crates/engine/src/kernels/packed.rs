//! `y = x · Wᵀ` on the CPU for many rows of f32 activations (a vision tower's thousands of
//! patches), with the f32 weight packed once, at load, into panels of [`PANEL`] output
//! columns: `[k][PANEL]` each, so that the inner loop reads the weight contiguously.
//!
//! Why not candle's matmul: its gemm runs 256-bit kernels on every x86 CPU (512-bit ones need
//! a nightly compiler) and packs the weight again on every call. Here each task takes a block
//! of rows and goes through the panels in slices of `DEPTH` (256) weights, an 8 × 32 block of
//! outputs summed in sixteen 512-bit registers (`kernels/x86/avx512.rs`), or 3 × 32 in twelve
//! 256-bit ones (`kernels/x86/avx2.rs`). Where the CPU runs neither (ARM, old x86) the
//! caller keeps candle's matmul.

use super::cpu::{self, CpuLevel};

/// Output columns of one panel: two 512-bit vectors.
pub const PANEL: usize = 32;

/// Weights of a panel summed per pass over the block's rows (32 KiB of the panel, 8 KiB of
/// each 8 rows of activations: both stay in the first levels of cache).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const DEPTH: usize = 256;

/// A weight `[n, k]` in panels of [`PANEL`] rows of it, each stored `[k][PANEL]` (the last
/// padded with zeros).
#[derive(Debug, Clone)]
pub struct PackedMatrix {
    n: usize,
    k: usize,
    panels: Vec<f32>,
}

impl PackedMatrix {
    /// Packs `w` (`[n, k]`, row-major).
    pub fn new(w: &[f32], n: usize, k: usize) -> Self {
        debug_assert_eq!(w.len(), n * k);
        let count = n.div_ceil(PANEL);
        let mut panels = vec![0f32; count * k * PANEL];
        for (p, panel) in panels.chunks_mut(k * PANEL).enumerate() {
            for c in 0..PANEL.min(n - p * PANEL) {
                let row = &w[(p * PANEL + c) * k..][..k];
                for (d, &v) in row.iter().enumerate() {
                    panel[d * PANEL + c] = v;
                }
            }
        }
        Self { n, k, panels }
    }

    /// Output columns.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Whether this CPU runs the kernel (AVX2 or AVX-512, at the level [`cpu`] chose).
    pub fn runs_here(level: CpuLevel) -> bool {
        level.min(cpu::detected()) >= CpuLevel::Avx2 && cfg!(target_arch = "x86_64")
    }

    /// `x · Wᵀ` for `x` of `m` rows (`[m, k]`): `[m, n]`; `None` where this CPU runs the
    /// kernel at no level ([`Self::runs_here`]).
    pub fn matmul_t(&self, level: CpuLevel, x: &[f32], m: usize) -> Option<Vec<f32>> {
        let mut out = Vec::new();
        self.matmul_t_into(level, x, m, &mut out).then_some(out)
    }

    /// [`Self::matmul_t`] into `out` (its buffer reused); whether it ran.
    pub fn matmul_t_into(&self, level: CpuLevel, x: &[f32], m: usize, out: &mut Vec<f32>) -> bool {
        if !Self::runs_here(level) || x.len() != m * self.k {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            self.run(level.min(cpu::detected()), x, m, out);
            true
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (out, &self.panels);
            false
        }
    }

    /// The product at `level` (AVX2 or above, one this CPU runs).
    #[cfg(target_arch = "x86_64")]
    fn run(&self, level: CpuLevel, x: &[f32], m: usize, out: &mut Vec<f32>) {
        use super::dense::SharedOut;
        use super::x86::{avx2, avx512, PanelPass};
        use rayon::prelude::*;
        let (n, k) = (self.n, self.k);
        // The rows one pass takes, and its body.
        type Body = unsafe fn(&PanelPass<'_>);
        let (per_pass, body): (usize, Body) = match level {
            CpuLevel::Avx512 => (8, avx512::panel_product),
            _ => (3, avx2::panel_product),
        };
        // Blocks of rows per task: several a thread, to balance; at most 192 rows, whose
        // slice of activations (192 KiB) stays in the second-level cache.
        let threads = rayon::current_num_threads();
        let block = m
            .div_ceil(4 * threads)
            .next_multiple_of(per_pass)
            .clamp(per_pass, 192);
        out.clear();
        out.reserve(m * n);
        let dst = SharedOut(out.as_mut_ptr());
        (0..m.div_ceil(block))
            .into_par_iter()
            .with_max_len(1)
            .for_each(|b| {
                let (r0, r1) = (b * block, ((b + 1) * block).min(m));
                for d0 in (0..k).step_by(DEPTH) {
                    let depth = DEPTH.min(k - d0);
                    for (p, panel) in self.panels.chunks(k * PANEL).enumerate() {
                        let cols = PANEL.min(n - p * PANEL);
                        let w = &panel[d0 * PANEL..(d0 + depth) * PANEL];
                        for r in (r0..r1).step_by(per_pass) {
                            let pass = PanelPass {
                                x: &x[r * k + d0..],
                                ldx: k,
                                rows: per_pass.min(r1 - r),
                                depth,
                                w,
                                out: dst.at(r * n + p * PANEL),
                                ldo: n,
                                cols,
                                accumulate: d0 > 0,
                            };
                            // SAFETY: `runs_here` checked the body's level; `x` holds the
                            // rows of `k` from `d0` (the last `depth` long), `w` `depth` × 32
                            // weights, and this task alone writes rows `r0..r1` of the
                            // output (`cols` of each), read back after the first slice has
                            // written them.
                            unsafe { body(&pass) }
                        }
                    }
                }
            });
        // SAFETY: the tasks cover rows `0..m`, each writing all `n` columns of its rows.
        unsafe { out.set_len(m * n) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_product_matches_the_plain_sums() {
        // Uneven everything: rows not a multiple of a pass, columns of 32, depth of 256.
        let (m, k, n) = (37, 300, 70);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 113) as f32 / 56.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 104729) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let packed = PackedMatrix::new(&w, n, k);
        let check = |got: &[f32]| {
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                        .sum();
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "[{i},{j}] {g} vs {want}"
                    );
                }
            }
        };
        let level = cpu::default_level();
        match packed.matmul_t(level, &x, m) {
            Some(got) => check(&got),
            None => assert!(
                !PackedMatrix::runs_here(level),
                "no product where the kernel runs"
            ),
        }
        // Every body this CPU runs.
        #[cfg(target_arch = "x86_64")]
        for level in cpu::runnable().into_iter().filter(|&l| l >= CpuLevel::Avx2) {
            let mut got = vec![];
            packed.run(level, &x, m, &mut got);
            check(&got);
        }
    }
}
