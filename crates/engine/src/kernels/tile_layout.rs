//! What the tile formats share: the tile's height, how far ahead its cache lines are asked
//! for, and the driver that runs a `C`-row kernel over groups of activation rows.

/// Rows per tile.
pub const ROWS: usize = 16;

/// How far ahead of the tile being read the kernels ask for its cache lines, into L2. Decoding
/// (`hearth bench -p 0 -n 64`, 2 threads, Sapphire Rapids) was 10–25 % slower with the lines
/// asked 4096 bytes ahead into L1 — the lines of the same L1 sets as the ones being read —
/// than 2048 or 3072 bytes ahead, or 3072 into L2 (the fastest at both levels).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 3072;

/// Asks for the cache lines [`PREFETCH`] bytes ahead of the `bytes`-long tile at `tile`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch(tile: *const u8, bytes: usize) {
    prefetch_part(tile, bytes, 0, 1);
}

/// [`prefetch`] for part `i` of `parts` of a tile, so that a K-quant tile's 36 or 53 requests
/// go out a few at a time between the multiply-adds: all at the start of a tile made Q4_K
/// decoding 12 % slower on the AVX2 path (the requests queue behind one another).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_part(tile: *const u8, bytes: usize, i: usize, parts: usize) {
    prefetch_part_ahead(tile, PREFETCH, bytes, i, parts);
}

/// [`prefetch_part`] `ahead` bytes ahead. Q6_K's tiles (3360 bytes) ask two tiles ahead: at
/// 3 KiB, less than one of their tiles, a decoding step read them from memory at 24–25 GB/s
/// on two Zen 4 cores against 31–34 two tiles ahead (`cargo bench --bench quant_kernels --
/// Q6K`), and a Qwen3.5-9B-shaped file, half of whose bytes per token are its Q6_K LM head,
/// decoded 1.12× faster (tg32 26.8–28.0 against 24.1–24.7 tok/s, four alternated runs).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_part_ahead(
    tile: *const u8,
    ahead: usize,
    bytes: usize,
    i: usize,
    parts: usize,
) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let step = bytes.div_ceil(parts).next_multiple_of(64);
    for line in (i * step..(i + 1) * step).step_by(64) {
        // SAFETY: a prefetch never faults, wherever it points.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(tile.wrapping_add(ahead + line) as *const i8) };
    }
}

/// Runs a `C`-row kernel over packed activation rows (`stride` words apart), `width` outputs
/// per row: in groups of 16 where `sixteen` (the weight block is widened once per group), then
/// of `most` (at most 8), then one smaller group (the kernels keep registers per row, so `C` is
/// a constant).
#[cfg(target_arch = "x86_64")]
macro_rules! in_groups {
    ($module:ident :: $kernel:ident, $w:expr, $cols:expr, $stride:expr, $out:expr,
     width: $width:expr, sixteen: $sixteen:expr, most: $most:expr) => {{
        let (w, cols, stride, out): (&[u8], &[u32], usize, &mut [f32]) = ($w, $cols, $stride, $out);
        let width: usize = $width;
        let n = out.len() / width;
        assert!(cols.len() >= n * stride);
        let base = cols.as_ptr();
        let mut c0 = 0;
        while $sixteen && c0 + 16 <= n {
            let o = &mut out[c0 * width..(c0 + 16) * width];
            $module::$kernel::<16>(w, base.add(c0 * stride), stride, o);
            c0 += 16;
        }
        while c0 < n {
            let len = (n - c0).min($most);
            let (at, o) = (
                base.add(c0 * stride),
                &mut out[c0 * width..(c0 + len) * width],
            );
            match len {
                8 => $module::$kernel::<8>(w, at, stride, o),
                7 => $module::$kernel::<7>(w, at, stride, o),
                6 => $module::$kernel::<6>(w, at, stride, o),
                5 => $module::$kernel::<5>(w, at, stride, o),
                4 => $module::$kernel::<4>(w, at, stride, o),
                3 => $module::$kernel::<3>(w, at, stride, o),
                2 => $module::$kernel::<2>(w, at, stride, o),
                _ => $module::$kernel::<1>(w, at, stride, o),
            }
            c0 += len;
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use in_groups;
