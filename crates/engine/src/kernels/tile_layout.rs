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
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    let step = bytes.div_ceil(parts).next_multiple_of(64);
    for line in (i * step..(i + 1) * step).step_by(64) {
        // SAFETY: a prefetch never faults, wherever it points.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(tile.wrapping_add(PREFETCH + line) as *const i8) };
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

/// The nibble-and-high-bits shuffle the tiles of Q5_0, Q5_K and Q6_K share, per level.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// Bit `i` of each byte of `bits` moved to bit 4, the bits of `keep` (at and above bit 4)
    /// kept: a fifth bit (`keep` 0x10) or a pair of top bits (0x30) beside its nibble. 16-bit
    /// shifts: what crosses into a neighbouring byte lands outside `keep`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::kernels) fn bit_to_4(bits: __m256i, i: usize, keep: i8) -> __m256i {
        let at_4 = match i {
            0 => _mm256_slli_epi16::<4>(bits),
            1 => _mm256_slli_epi16::<3>(bits),
            2 => _mm256_slli_epi16::<2>(bits),
            3 => _mm256_slli_epi16::<1>(bits),
            4 => bits,
            5 => _mm256_srli_epi16::<1>(bits),
            6 => _mm256_srli_epi16::<2>(bits),
            _ => _mm256_srli_epi16::<3>(bits),
        };
        _mm256_and_si256(at_4, _mm256_set1_epi8(keep))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    /// Bit `i` of each byte of `bits` moved to bit 4, the bits of `keep` kept, as the AVX2
    /// kernels do ([`super::avx2::bit_to_4`]).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(in crate::kernels) fn bit_to_4(bits: __m512i, i: usize, keep: i8) -> __m512i {
        let at_4 = match i {
            0 => _mm512_slli_epi16::<4>(bits),
            1 => _mm512_slli_epi16::<3>(bits),
            2 => _mm512_slli_epi16::<2>(bits),
            3 => _mm512_slli_epi16::<1>(bits),
            4 => bits,
            5 => _mm512_srli_epi16::<1>(bits),
            6 => _mm512_srli_epi16::<2>(bits),
            _ => _mm512_srli_epi16::<3>(bits),
        };
        _mm512_and_si512(at_4, _mm512_set1_epi8(keep))
    }
}
