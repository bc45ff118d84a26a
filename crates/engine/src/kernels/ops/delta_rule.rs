//! Gated DeltaNet's per-token work on the CPU in f32 ([`crate::model`]'s linear-attention
//! layers): the short causal convolution (with SiLU) over the q, k and v channels, and one
//! value head's delta-rule update and read-out. Both run in one fixed order of operations, so a
//! prompt's rows equal decoding's bit for bit; each is compiled for AVX-512 and AVX2 and runs at
//! the level [`super::cpu`] chose (no fused multiply-adds: every level computes the same bits).

use super::attention::exp;

simd_dispatch!(pub fn conv_silu(x: &[f32], window: &[f32], weights: &[f32], out: &mut [f32]) => conv_silu_portable);

/// `out[c] = silu(w[taps-1][c]·x[c] + Σⱼ w[j][c]·window[j][c])`: the convolution of one new
/// input `x` with the `taps - 1` before it (`window`, oldest first, `[taps - 1, channels]`),
/// the weights tap-major (`[taps, channels]`).
#[inline(always)]
fn conv_silu_portable(x: &[f32], window: &[f32], weights: &[f32], out: &mut [f32]) {
    let n = out.len();
    let taps = weights.len() / n.max(1);
    if taps == 0 {
        return;
    }
    let last = &weights[(taps - 1) * n..taps * n];
    for ((o, &w), &x) in out.iter_mut().zip(last).zip(x) {
        *o = w * x;
    }
    for j in 0..taps - 1 {
        let (w, past) = (&weights[j * n..(j + 1) * n], &window[j * n..(j + 1) * n]);
        for ((o, &w), &p) in out.iter_mut().zip(w).zip(past) {
            *o += w * p;
        }
    }
    for o in out.iter_mut() {
        *o /= 1.0 + exp(-*o);
    }
}

simd_dispatch!(pub fn delta_step(state: &mut [f32], q: &[f32], k: &[f32], v: &[f32], beta: f32, decay: f32, mem: &mut [f32], out: &mut [f32]) => delta_step_portable);

/// One token of one value head: the state `S` (`[key dim, value dim]`) decays, takes the
/// delta-rule write `S += k ⊗ beta·(v − Sᵀk)`, and `out += Sᵀq` (`out` zeroed by the caller;
/// `mem` is scratch of the value dim).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn delta_step_portable(
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: f32,
    decay: f32,
    mem: &mut [f32],
    out: &mut [f32],
) {
    let vd = v.len();
    mem.iter_mut().for_each(|m| *m = 0.0);
    for (row, &ki) in state.chunks_exact_mut(vd).zip(k) {
        for (s, m) in row.iter_mut().zip(mem.iter_mut()) {
            *s *= decay;
            *m += *s * ki;
        }
    }
    for (m, &vj) in mem.iter_mut().zip(v) {
        *m = (vj - *m) * beta;
    }
    for ((row, &ki), &qi) in state.chunks_exact_mut(vd).zip(k).zip(q) {
        for ((s, &d), o) in row.iter_mut().zip(mem.iter()).zip(out.iter_mut()) {
            *s += ki * d;
            *o += *s * qi;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2000) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// The level this CPU runs gives the portable code's bits, and the delta rule is the
    /// formula (against f64).
    #[test]
    fn the_best_level_computes_the_portable_bits_and_the_formula() {
        let (kd, vd, taps, ch) = (16, 24, 4, 40);
        let (x, window, w) = (
            values(ch, 1),
            values((taps - 1) * ch, 2),
            values(taps * ch, 3),
        );
        let (q, k, v) = (values(kd, 4), values(kd, 5), values(vd, 6));
        let s0 = values(kd * vd, 7);
        // `None`: the portable body itself.
        let run = |level: Option<cpu::CpuLevel>| {
            let mut conv = vec![0f32; ch];
            let (mut s, mut mem, mut out) = (s0.clone(), vec![0f32; vd], vec![0f32; vd]);
            if let Some(level) = level {
                conv_silu(level, &x, &window, &w, &mut conv);
                delta_step(level, &mut s, &q, &k, &v, 0.7, 0.9, &mut mem, &mut out);
            } else {
                conv_silu_portable(&x, &window, &w, &mut conv);
                delta_step_portable(&mut s, &q, &k, &v, 0.7, 0.9, &mut mem, &mut out);
            }
            (conv, s, out)
        };
        for level in cpu::runnable() {
            assert_eq!(run(Some(level)), run(None), "at {level:?}");
        }
        let (conv, s, out) = run(Some(cpu::default_level()));
        for c in 0..ch {
            let mut acc = w[(taps - 1) * ch + c] as f64 * x[c] as f64;
            for j in 0..taps - 1 {
                acc += w[j * ch + c] as f64 * window[j * ch + c] as f64;
            }
            let want = acc / (1.0 + (-acc).exp());
            assert!((conv[c] as f64 - want).abs() < 1e-5, "conv {c}");
        }
        let mut st: Vec<f64> = s0.iter().map(|&x| x as f64 * 0.9).collect();
        for j in 0..vd {
            let mem: f64 = (0..kd).map(|i| st[i * vd + j] * k[i] as f64).sum();
            let d = (v[j] as f64 - mem) * 0.7;
            for i in 0..kd {
                st[i * vd + j] += k[i] as f64 * d;
            }
        }
        for j in 0..vd {
            let o: f64 = (0..kd).map(|i| st[i * vd + j] * q[i] as f64).sum();
            assert!((out[j] as f64 - o).abs() < 1e-4, "out {j}");
        }
        for (a, b) in s.iter().zip(&st) {
            assert!((*a as f64 - b).abs() < 1e-5);
        }
    }
}
