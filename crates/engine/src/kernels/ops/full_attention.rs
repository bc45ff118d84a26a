//! Attention of every query over every key, without a mask: a vision tower's patches attend
//! to all patches of their image. Per head, the keys and the transposed values are packed
//! once ([`PackedMatrix`]) and the queries go through in blocks: scores as one product, a
//! softmax over each row, the weighted values as a second product. Where the CPU runs no
//! packed kernel (below AVX2) the caller keeps candle's ops.

use super::pointwise::softmax_rows;
use crate::kernels::cpu::CpuLevel;
use crate::kernels::packed::PackedMatrix;

/// Queries per block: their scores (`BLOCK × keys` values, 16 MiB for a 1920 × 1080
/// screenshot's 8160 patches) are all that is held at once.
const BLOCK: usize = 512;

/// `softmax(q·kᵀ/√dim)·v` of `heads` heads over `n` positions, each of `q`, `k`, `v` head-major
/// (`[heads, n, dim]`); returns `[n, heads × dim]`. `None` where this CPU runs no packed
/// kernel ([`PackedMatrix::runs_here`]) or the lengths do not fit.
pub fn attend_all(
    level: CpuLevel,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: usize,
    n: usize,
    dim: usize,
) -> Option<Vec<f32>> {
    let len = heads * n * dim;
    if !PackedMatrix::runs_here(level) || q.len() != len || k.len() != len || v.len() != len {
        return None;
    }
    let scale = 1.0 / (dim as f32).sqrt();
    let mut out = vec![0f32; n * heads * dim];
    let (mut scores, mut weighted, mut vt) = (Vec::new(), Vec::new(), vec![0f32; dim * n]);
    for h in 0..heads {
        let at = h * n * dim;
        let (qh, kh, vh) = (
            &q[at..at + n * dim],
            &k[at..at + n * dim],
            &v[at..at + n * dim],
        );
        let keys = PackedMatrix::new(kh, n, dim);
        for (j, row) in vh.chunks_exact(dim).enumerate() {
            for (d, &x) in row.iter().enumerate() {
                vt[d * n + j] = x;
            }
        }
        let values = PackedMatrix::new(&vt, dim, n);
        for start in (0..n).step_by(BLOCK) {
            let rows = BLOCK.min(n - start);
            let block = &qh[start * dim..(start + rows) * dim];
            if !keys.matmul_t_into(level, block, rows, &mut scores) {
                return None;
            }
            softmax_rows(level, &mut scores, n, scale);
            if !values.matmul_t_into(level, &scores, rows, &mut weighted) {
                return None;
            }
            for (r, o) in weighted.chunks_exact(dim).enumerate() {
                out[(start + r) * heads * dim + h * dim..][..dim].copy_from_slice(o);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_over_all_keys_matches_the_plain_sums() {
        let (heads, n, dim) = (2, 45, 24);
        let gen = |seed: usize| -> Vec<f32> {
            (0..heads * n * dim)
                .map(|i| (((i + seed) * 7919) % 101) as f32 / 50.0 - 1.0)
                .collect()
        };
        let (q, k, v) = (gen(1), gen(2), gen(3));
        let level = crate::kernels::cpu::default_level();
        let Some(got) = attend_all(level, &q, &k, &v, heads, n, dim) else {
            assert!(
                !PackedMatrix::runs_here(level),
                "no attention where the kernel runs"
            );
            return;
        };
        for h in 0..heads {
            for i in 0..n {
                let at = |t: &[f32], j: usize, d: usize| t[(h * n + j) * dim + d] as f64;
                let s: Vec<f64> = (0..n)
                    .map(|j| (0..dim).map(|d| at(&q, i, d) * at(&k, j, d)).sum::<f64>())
                    .map(|s| s / (dim as f64).sqrt())
                    .collect();
                let top = s.iter().cloned().fold(f64::MIN, f64::max);
                let w: Vec<f64> = s.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = w.iter().sum();
                for d in 0..dim {
                    let want: f64 = (0..n).map(|j| w[j] * at(&v, j, d)).sum::<f64>() / total;
                    let g = got[i * heads * dim + h * dim + d] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5,
                        "head {h} row {i} [{d}]: {g} vs {want}"
                    );
                }
            }
        }
    }
}
