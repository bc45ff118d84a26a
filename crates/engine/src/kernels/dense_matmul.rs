//! Products with dense weights: the body for a level (`x86/dense` or the portable one in
//! [`super::dense`]) over tasks of weight rows in parallel.

use super::cpu::CpuLevel;
use super::dense::{BlockFn, Outputs, SharedOut, WeightRows};
use rayon::prelude::*;

fn kernel(level: CpuLevel) -> BlockFn {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::dense::at(level)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = level;
        super::dense::block_portable
    }
}

/// `x · wᵀ` at `level` (capped to what this CPU runs): `x` is `[m, k]`, `w` is `[n, k]`;
/// returns `[m, n]`.
pub fn matmul_t_at(
    level: CpuLevel,
    x: &[f32],
    m: usize,
    k: usize,
    w: WeightRows<'_>,
    n: usize,
) -> Vec<f32> {
    debug_assert_eq!(x.len(), m * k);
    let kernel = kernel(level);
    par_rows(n, m, |out| kernel(x, m, k, w, out))
}

/// Runs `block` over tasks of the `n` weight rows in parallel, each writing its rows' outputs
/// of the `[m, n]` result, and returns the result.
fn par_rows(n: usize, m: usize, block: impl Fn(&Outputs<'_>) + Sync) -> Vec<f32> {
    // Enough rows per task to amortise scheduling, few enough to balance the threads.
    let rows_per_task = (n / (rayon::current_num_threads() * 8)).clamp(8, 256);
    // Not zeroed first: the tasks write every element (a prompt's outputs are megabytes).
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    let dst = SharedOut(out.as_mut_ptr());
    // One task at a time to whichever thread is free: a thread slowed by the rest of the
    // machine does not hold the others up at the end of each product.
    (0..n.div_ceil(rows_per_task))
        .into_par_iter()
        .with_max_len(1)
        .for_each(|t| {
            let first = t * rows_per_task;
            let rows = rows_per_task.min(n - first);
            block(&Outputs {
                dst: &dst,
                m,
                n,
                first,
                rows,
            });
        });
    // SAFETY: the tasks cover rows `0..n`, each writing all `m` of its outputs.
    unsafe { out.set_len(m * n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn reference(x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn matches_a_plain_product_for_each_weight_type_at_every_level() {
        let (m, k, n) = (3, 77, 301); // odd sizes exercise the tails
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
            .collect();
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let x_at = |mm: usize| -> Vec<f32> { (0..mm * k).map(|i| x[i % (m * k)]).collect() };
        for (name, rows) in [
            ("f32", WeightRows::F32(&w)),
            ("bf16", WeightRows::Bf16(&wb)),
            ("f16", WeightRows::F16(&wh)),
        ] {
            for level in crate::kernels::cpu::runnable() {
                // Every width of a register block's last group at both levels' shapes.
                for mm in [1, 2, m, 4, 5, 6, 7, 13] {
                    let x = &x_at(mm);
                    let want = reference(x, mm, k, &w, n);
                    let got = matmul_t_at(level, x, mm, k, rows, n);
                    for (g, e) in got.iter().zip(&want) {
                        assert!(
                            (g - e).abs() < 1e-4,
                            "{name} at {level}, m={mm}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// A prompt's rows, in register blocks of several activation rows and a tail, each get
    /// exactly what the row gets alone (decoding), at every level.
    #[test]
    fn each_row_of_a_prompt_sums_as_decoding_does() {
        // 7 to 12 rows: every tail after blocks of four or six; five weight rows: a tail after
        // blocks of two, three or four.
        for m in 7..=12 {
            prompt_rows_sum_as_decoding(m);
        }
    }

    fn prompt_rows_sum_as_decoding(m: usize) {
        let (k, n) = (4096, 5);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0 + (i % 3) as f32 * 0.001)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0 + (i % 7) as f32 * 0.003)
            .collect();
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        for (name, rows) in [
            ("f32", WeightRows::F32(&w)),
            ("bf16", WeightRows::Bf16(&wb)),
            ("f16", WeightRows::F16(&wh)),
        ] {
            for level in crate::kernels::cpu::runnable() {
                let all = matmul_t_at(level, &x, m, k, rows, n);
                for (i, row) in x.chunks_exact(k).enumerate() {
                    let alone = matmul_t_at(level, row, 1, k, rows, n);
                    assert_eq!(
                        &all[i * n..(i + 1) * n],
                        &alone[..],
                        "{name} at {level}, row {i} of {m}"
                    );
                }
            }
        }
    }
}
