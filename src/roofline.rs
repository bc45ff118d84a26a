//! The memory-bandwidth roofline of decoding: one token reads every weight once, so a decode
//! rate is at best the machine's read bandwidth divided by the bytes of weights per token.

use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;

/// Bytes read per pass: far more than any CPU's last-level cache.
const BUFFER_BYTES: usize = 512 << 20;
const PASSES: usize = 10;

/// The CPU's read bandwidth in bytes per second with rayon's threads (the ones the kernels
/// use): the fastest of several passes over a buffer that no cache holds, each thread reading
/// its own part, as a decode step reads each thread's weight rows.
pub fn read_bandwidth() -> f64 {
    // A non-zero fill writes every page (zeroed pages could all map one physical page).
    let buf = vec![1u64; BUFFER_BYTES / 8];
    let part = buf.len().div_ceil(rayon::current_num_threads());
    (0..PASSES)
        .map(|_| {
            let start = Instant::now();
            let sum: u64 = buf
                .par_chunks(part)
                .map(sum)
                .reduce(|| 0, u64::wrapping_add);
            black_box(sum);
            BUFFER_BYTES as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// Eight independent sums, so that the loop waits on loads rather than on additions.
fn sum(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        for (a, w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(*w);
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |a, w| a.wrapping_add(*w));
    acc.iter().fold(tail, |a, w| a.wrapping_add(*w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_word() {
        let words: Vec<u64> = (1..=21).collect();
        assert_eq!(sum(&words), 21 * 22 / 2);
        assert_eq!(sum(&[]), 0);
    }
}
