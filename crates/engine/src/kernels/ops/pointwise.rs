//! Row-wise passes over a product's output, in operations that vectorise: a linear layer's
//! bias and GELU (tanh form) in one pass, and a softmax. The vision tower runs them over
//! millions of values per block, where candle's ops take a pass each and a scalar `tanh` or
//! `exp` per value.

use super::attention::exp;
use crate::kernels::cpu::CpuLevel;
use rayon::prelude::*;

/// Each row of `rows` (`bias.len()` values each) plus `bias`, then through the tanh GELU
/// (`0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`) where `gelu`.
pub fn bias_gelu(level: CpuLevel, rows: &mut [f32], bias: &[f32], gelu: bool) {
    let n = bias.len().max(1);
    rows.par_chunks_mut(n * 64).for_each(|chunk| {
        chunk
            .chunks_mut(n)
            .for_each(|row| bias_gelu_row(level, row, bias, gelu))
    });
}

simd_dispatch!(fn bias_gelu_row(row: &mut [f32], bias: &[f32], gelu: bool) => bias_gelu_row_portable);

#[inline(always)]
fn bias_gelu_row_portable(row: &mut [f32], bias: &[f32], gelu: bool) {
    if !gelu {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
        return;
    }
    const C: f32 = 0.797_884_6; // √(2/π)
    for (v, b) in row.iter_mut().zip(bias) {
        let x = *v + b;
        let u = C * (x + 0.044_715 * x * x * x);
        // tanh u = 1 − 2 / (e^{2u} + 1): ±1 at the ends, where e^{2u} saturates.
        let t = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
        *v = 0.5 * x * (1.0 + t);
    }
}

/// Each row of `rows` (`n` values each) scaled by `scale`, then its softmax.
pub fn softmax_rows(level: CpuLevel, rows: &mut [f32], n: usize, scale: f32) {
    rows.par_chunks_mut(n.max(1))
        .for_each(|row| softmax_row(level, row, scale));
}

simd_dispatch!(fn softmax_row(row: &mut [f32], scale: f32) => softmax_row_portable);

#[inline(always)]
fn softmax_row_portable(row: &mut [f32], scale: f32) {
    // Sixteen lanes of maxima and sums, so that both loops vectorise (one running value
    // would be a chain the compiler must keep in order).
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let (chunks, tail) = row.split_at_mut(row.len() / L * L);
    for c in chunks.chunks_exact(L) {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let top = tail
        .iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
        * scale;
    let mut sums = [0f32; L];
    for c in chunks.chunks_exact_mut(L) {
        for (s, v) in sums.iter_mut().zip(c) {
            *v = exp(v.mul_add(scale, -top));
            *s += *v;
        }
    }
    let mut sum: f32 = sums.iter().sum();
    for v in tail.iter_mut() {
        *v = exp(v.mul_add(scale, -top));
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_and_gelu_match_the_formula() {
        let bias = [0.5f32, -1.0, 2.0];
        let xs: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) / 10.0).collect();
        let mut rows = xs.clone();
        bias_gelu(crate::kernels::cpu::default_level(), &mut rows, &bias, true);
        for (i, (&x, &got)) in xs.iter().zip(&rows).enumerate() {
            let x = (x + bias[i % 3]) as f64;
            let want = 0.5
                * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh());
            assert!(
                (got as f64 - want).abs() <= 2e-6 * (1.0 + want.abs()),
                "gelu({x}) = {got}, not {want}"
            );
        }
        let mut rows = xs.clone();
        bias_gelu(
            crate::kernels::cpu::default_level(),
            &mut rows,
            &bias,
            false,
        );
        assert_eq!(rows[4], xs[4] - 1.0);
    }

    #[test]
    fn softmax_rows_sum_to_one_in_the_scores_order() {
        let mut rows: Vec<f32> = (0..40).map(|i| (i % 7) as f32 * 3.0 - 9.0).collect();
        let want: Vec<f64> = rows[20..].iter().map(|&s| (s as f64 * 0.5).exp()).collect();
        softmax_rows(crate::kernels::cpu::default_level(), &mut rows, 20, 0.5);
        let total: f64 = want.iter().sum();
        for (got, w) in rows[20..].iter().zip(&want) {
            assert!(
                (*got as f64 - w / total).abs() <= 1e-6,
                "{got} vs {}",
                w / total
            );
        }
        assert!((rows[..20].iter().sum::<f32>() - 1.0).abs() <= 1e-6);
    }
}
