//! The orthonormal Walsh–Hadamard rotation of a head's values. A quantized KV cache stores
//! each key in blocks of 32 values with one scale; a model whose keys have a few outlying
//! channels (Qwen2.5's do) then spends the whole block's range on them and rounds the other
//! channels to a few levels. Rotating every key and every query of a head by the same
//! orthonormal matrix leaves each score `q·k` as it was and spreads an outlier over all the
//! head's channels, so one scale fits the block (as QuaRot and ik_llama.cpp's Hadamard keys
//! do).

/// Whether a head of `dim` values can be rotated: a power of two, at least two.
pub fn fits(dim: usize) -> bool {
    dim >= 2 && dim.is_power_of_two()
}

/// `x` times the `n × n` Hadamard matrix divided by `√n` (`n = x.len()`, a power of two): its
/// own inverse, and it keeps lengths and dot products.
pub fn rotate(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(fits(n), "a Hadamard rotation of {n} values");
    let mut span = 1;
    while span < n {
        for block in x.chunks_exact_mut(2 * span) {
            let (a, b) = block.split_at_mut(span);
            for (a, b) in a.iter_mut().zip(b) {
                let (s, d) = (*a + *b, *a - *b);
                *a = s;
                *b = d;
            }
        }
        span *= 2;
    }
    let scale = 1.0 / (n as f32).sqrt();
    for v in x {
        *v *= scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 1009) as f32 / 504.5 - 1.0) * 3.0)
            .collect()
    }

    #[test]
    fn the_rotation_keeps_dot_products_and_undoes_itself() {
        for n in [2, 64, 128, 256] {
            let (q, k) = (values(n, 1), values(n, 2));
            let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
            let (mut qr, mut kr) = (q.clone(), k.clone());
            rotate(&mut qr);
            rotate(&mut kr);
            let (before, after) = (dot(&q, &k), dot(&qr, &kr));
            assert!(
                (before - after).abs() <= 1e-4 * n as f32,
                "{n}: {before} vs {after}"
            );
            rotate(&mut kr);
            for (a, b) in kr.iter().zip(&k) {
                assert!((a - b).abs() <= 1e-5, "{n}: {a} vs {b}");
            }
        }
        assert!(!fits(96) && !fits(1) && fits(64));
    }

    #[test]
    fn an_outlying_channel_spreads_over_the_head() {
        let mut k = vec![0.01f32; 64];
        k[5] = 40.0;
        rotate(&mut k);
        let largest = k.iter().fold(0f32, |m, v| m.max(v.abs()));
        // 40 / √64 = 5 on every channel, the small ones within 0.1 of it.
        assert!(largest < 5.1, "{largest}");
        assert!(k.iter().all(|v| v.abs() > 4.9), "{k:?}");
    }
}
