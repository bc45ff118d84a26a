//! The memory-bandwidth roofline of decoding: one token reads every weight once, so a decode
//! rate is at best the machine's read bandwidth divided by the bytes of weights per token.

use rayon::prelude::*;
use std::hint::black_box;
use std::time::Instant;

/// Bytes read per pass at least, and at most.
const MIN_BUFFER_BYTES: usize = 512 << 20;
const MAX_BUFFER_BYTES: usize = 4 << 30;
const PASSES: usize = 10;

/// The CPU's read bandwidth in bytes per second with rayon's threads (the ones the kernels
/// use): the fastest of several passes over a buffer that no cache holds, each thread reading
/// its own part, as a decode step reads each thread's weight rows.
pub fn read_bandwidth() -> f64 {
    let bytes = buffer_bytes();
    // A non-zero fill writes every page (zeroed pages could all map one physical page).
    let buf = vec![1u64; bytes / 8];
    let part = buf.len().div_ceil(rayon::current_num_threads());
    (0..PASSES)
        .map(|_| {
            let start = Instant::now();
            let sum: u64 = buf
                .par_chunks(part)
                .map(sum)
                .reduce(|| 0, u64::wrapping_add);
            black_box(sum);
            bytes as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// Bytes of one pass of [`read_bandwidth`] on this machine.
pub fn buffer_bytes() -> usize {
    buffer_bytes_for(last_level_cache_bytes())
}

/// Four times the last-level cache, so that passes read memory and not the cache (some
/// server CPUs have hundreds of MiB of L3, as much as a small model's weights).
fn buffer_bytes_for(llc: Option<usize>) -> usize {
    llc.map_or(MIN_BUFFER_BYTES, |c| c.saturating_mul(4))
        .clamp(MIN_BUFFER_BYTES, MAX_BUFFER_BYTES)
}

/// The largest data cache this CPU reports (Linux sysfs), in bytes.
pub fn last_level_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let kind = std::fs::read_to_string(e.path().join("type")).ok()?;
            if kind.trim() == "Instruction" {
                return None;
            }
            parse_cache_size(&std::fs::read_to_string(e.path().join("size")).ok()?)
        })
        .max()
}

/// `"491520K"`, `"32M"` or a plain byte count.
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        (i, 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
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

    #[test]
    fn the_buffer_outgrows_the_last_level_cache() {
        assert_eq!(parse_cache_size("491520K\n"), Some(480 << 20));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(buffer_bytes_for(None), 512 << 20);
        assert_eq!(buffer_bytes_for(Some(32 << 20)), 512 << 20);
        assert_eq!(buffer_bytes_for(Some(480 << 20)), 1920 << 20);
        assert_eq!(buffer_bytes_for(Some(usize::MAX)), 4 << 30);
    }
}
