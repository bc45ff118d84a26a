//! Activations quantised to Q8_K (llama.cpp's 8-bit rows for the K-quants) at the CPU level
//! [`super::cpu`] chose; every level gives the portable loop's rows bit for bit.

use super::blocks::{Q8Row, QK_K};
use super::cpu::{self, CpuLevel};
#[cfg(target_arch = "x86_64")]
use super::x86::{avx2, avx512};

/// Q8_K: per 256 values, the value of largest magnitude maps to -127, scale kept in f32; at the
/// default level, which every level gives bit for bit.
pub fn quantize_q8_k(x: &[f32]) -> Q8Row {
    quantize_q8_k_at(cpu::default_level(), x)
}

/// [`quantize_q8_k`] at `level` (capped at what this CPU runs).
pub(crate) fn quantize_q8_k_at(level: CpuLevel, x: &[f32]) -> Q8Row {
    #[cfg(target_arch = "x86_64")]
    let level = level.min(cpu::detected());
    let blocks = x.len() / QK_K;
    let mut d = vec![0f32; blocks];
    let mut qs = vec![0i8; x.len()];
    let mut bsums = vec![0i16; x.len() / 16];
    for (((xs, qs), bsums), d) in x
        .chunks_exact(QK_K)
        .zip(qs.chunks_exact_mut(QK_K))
        .zip(bsums.chunks_exact_mut(QK_K / 16))
        .zip(&mut d)
    {
        // SAFETY (each level's arm): its features were detected; `xs` and `qs` are a block long.
        match level {
            #[cfg(target_arch = "x86_64")]
            CpuLevel::Avx512 => unsafe {
                let Some(max) = avx512::largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                avx512::quantize_q8_k(xs, *d, qs)
            },
            #[cfg(target_arch = "x86_64")]
            CpuLevel::Avx2 | CpuLevel::AvxVnni => unsafe {
                let Some(max) = avx2::largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                avx2::quantize_q8_k(xs, *d, qs)
            },
            _ => {
                let Some(max) = largest(xs) else {
                    continue;
                };
                *d = -127.0 / max;
                for (q, v) in qs.iter_mut().zip(xs) {
                    *q = (*d * v).round().clamp(-128.0, 127.0) as i8;
                }
            }
        }
        for (s, q) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i16).sum();
        }
        // The scale from the inverse the values were rounded with, as llama.cpp derives it.
        *d = 1.0 / *d;
    }
    Q8Row {
        d,
        qs,
        bsums,
        sums: Vec::new(),
        d_sums: Vec::new(),
    }
}

/// The first of the values of largest magnitude (NaNs skipped), or `None` where all are zero.
fn largest(xs: &[f32]) -> Option<f32> {
    let amax = xs
        .iter()
        .fold(0f32, |m, v| if m < v.abs() { v.abs() } else { m });
    if amax == 0.0 {
        return None;
    }
    xs.iter().copied().find(|v| v.abs() == amax)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q8_K rows are the portable loop's at every level this CPU runs, bit for bit: values half
    /// way between integers (away from zero, as `f32::round`), the first of two values of one
    /// magnitude, zero, NaN, infinite and subnormal blocks.
    #[test]
    fn q8_k_quantizes_the_same_at_every_level() {
        let mut x: Vec<f32> = (0..8 * QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        x[..QK_K].fill(0.0);
        let ties = &mut x[QK_K..2 * QK_K];
        let halves = [2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5];
        for (i, v) in ties.iter_mut().enumerate() {
            *v = halves[i % halves.len()];
        }
        ties[7] = -127.0; // the scale becomes exactly 1
        x[2 * QK_K + 3] = -60.0; // the first of the two: the scale's sign
        x[2 * QK_K + 10] = 60.0;
        x[3 * QK_K + 5] = f32::NAN;
        x[3 * QK_K + 6] = f32::NAN;
        x[4 * QK_K + 9] = f32::INFINITY;
        x[5 * QK_K..6 * QK_K].fill(1e-42);
        x[5 * QK_K + 100] = -3e-42;
        x[6 * QK_K..7 * QK_K].fill(f32::NAN);
        let want = quantize_q8_k_at(CpuLevel::Portable, &x);
        assert_eq!(want.qs[QK_K..QK_K + 8], [3, -3, 1, -1, 2, -2, 127, -127]);
        assert!(want.d[2] > 0.0, "the scale of -60 first is positive");
        assert!(want.qs[3 * QK_K + 5] == 0 && want.d[6] == 0.0);
        for level in cpu::runnable() {
            let got = quantize_q8_k_at(level, &x);
            let bits = |r: &Q8Row| r.d.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "scales at {level}");
            let differ = got.qs.iter().zip(&want.qs).position(|(g, w)| g != w);
            assert_eq!(differ, None, "the first value that differs at {level}");
            assert_eq!(got.bsums, want.bsums, "sums at {level}");
        }
    }
}
