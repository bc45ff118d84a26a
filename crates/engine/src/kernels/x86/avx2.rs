//! AVX2 (with FMA and F16C) dot products of one weight row, as llama.cpp's x86 code computes
//! them: the block products are byte dot products (`maddubs`) accumulated in eight f32 lanes.
//! The `_rows` kernels take one weight row against up to four activation rows per pass,
//! widening each block once, and give each row exactly what its one-row kernel gives.

use super::PanelPass;
use crate::kernels::blocks::*;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_at(p: *const u8) -> f32 {
    // SAFETY: callers pass a pointer to two readable bytes.
    let bits = unsafe { std::ptr::read_unaligned(p as *const u16) };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Asks for the cache lines of the block `PREFETCH` bytes ahead of the `bytes` at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch(p: *const u8, bytes: usize) {
    let mut at = 0;
    while at < bytes {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + at) as *const i8);
        at += 64;
    }
}

/// What `blocks::largest` gives: the magnitude's maximum (`max` returns its second operand
/// where the first is NaN, so NaNs are skipped), then the first value of that magnitude.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn largest(xs: &[f32]) -> Option<f32> {
    assert!(xs.len().is_multiple_of(8));
    let sign = _mm256_set1_ps(-0.0);
    let abs = |i: usize| _mm256_andnot_ps(sign, _mm256_loadu_ps(xs.as_ptr().add(i)));
    let mut m = _mm256_setzero_ps();
    for i in (0..xs.len()).step_by(8) {
        m = _mm256_max_ps(abs(i), m);
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    if amax == 0.0 {
        return None;
    }
    let wanted = _mm256_set1_ps(amax);
    (0..xs.len()).step_by(8).find_map(|i| {
        let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs(i), wanted));
        (hits != 0).then(|| xs[i + hits.trailing_zeros() as usize])
    })
}

/// A Q8_K block's values: `iscale·x` rounded half away from zero (as `f32::round`), NaN to 0,
/// clamped to the bytes — what the portable loop gives, 8 lanes at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_k(xs: &[f32], iscale: f32, qs: &mut [i8]) {
    assert!(xs.len() == QK_K && qs.len() == QK_K);
    let scale = _mm256_set1_ps(iscale);
    let (sign, half, one) = (
        _mm256_set1_ps(-0.0),
        _mm256_set1_ps(0.5),
        _mm256_set1_ps(1.0),
    );
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    // `packs` interleaves its inputs' 128-bit lanes; these put the values back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let round = |i: usize| {
        let v = _mm256_mul_ps(scale, _mm256_loadu_ps(xs.as_ptr().add(i)));
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        // A fraction of a half or more steps away from zero (both exact below 2²³).
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half);
        let step = _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(v, sign), one));
        let r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(t, step), lo), hi);
        // NaN lanes (unordered with themselves) to zero, as `as i8` makes them.
        _mm256_cvtps_epi32(_mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v)))
    };
    for i in (0..QK_K).step_by(32) {
        let q = [0, 8, 16, 24].map(|j| round(i + j));
        // In the byte range already: the saturating packs change nothing.
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let bytes = _mm256_permutevar8x32_epi32(bytes, order);
        _mm256_storeu_si256(qs.as_mut_ptr().add(i) as *mut __m256i, bytes);
    }
}

/// The sum of a vector's eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// The 32 nibbles of a 16-byte run, low nibbles first, as bytes 0..16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
        _mm256_set1_epi8(0x0F),
    )
}

/// The 32 signed values of the Q5_0 block at `blk`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_weights(blk: *const u8) -> __m256i {
    let bits = fifth_bits(blk.add(2));
    // value - 16: where the fifth bit is clear, set the top nibble (0xF0 | v = v - 16).
    _mm256_or_si256(
        nibbles(blk.add(6)),
        _mm256_andnot_si256(bits, _mm256_set1_epi8(0xF0u8 as i8)),
    )
}

/// Runs `$pass::<N>` for each weight row of `w` (`rows` of them) over `xs` four activation rows
/// at a time (then the remainder), so that each pass keeps its rows' sums in registers;
/// `out[c * rows + r]`. The passes are inlined here: a matrix's setup is paid once per call.
macro_rules! in_fours {
    ($pass:ident, $w:expr, $rows:expr, $xs:expr, $out:expr) => {{
        let (w, rows, xs, out): (&[u8], usize, &[Q8Row], &mut [f32]) = ($w, $rows, $xs, $out);
        let row_bytes = w.len() / rows.max(1);
        let mut sums = [0f32; 4];
        for r in 0..rows {
            let wr = &w[r * row_bytes..(r + 1) * row_bytes];
            let mut c = 0;
            while c < xs.len() {
                let n = (xs.len() - c).min(4);
                let x = &xs[c..c + n];
                match n {
                    1 => $pass::<1>(wr, x, &mut sums),
                    2 => $pass::<2>(wr, x, &mut sums),
                    3 => $pass::<3>(wr, x, &mut sums),
                    _ => $pass::<4>(wr, x, &mut sums),
                }
                for (j, &v) in sums[..n].iter().enumerate() {
                    out[(c + j) * rows + r] = v;
                }
                c += n;
            }
        }
    }};
}

/// Defines the one-row dot product `$one` and the rows kernel `$rows` of a `$pass::<N>`: the
/// one-row kernel is the pass for one row, so batched rows get its result bit for bit.
macro_rules! one_and_rows {
    ($pass:ident, $one:ident, $rows:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $one(w: &[u8], x: &Q8Row) -> f32 {
            let mut out = [0f32];
            $pass::<1>(w, std::slice::from_ref(x), &mut out);
            out[0]
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $rows(w: &[u8], rows: usize, xs: &[Q8Row], out: &mut [f32]) {
            in_fours!($pass, w, rows, xs, out)
        }
    };
}

/// Q4_1 and Q5_1 (`value = d·q + m`, q unsigned): per block `d·dy·Σq·y` in eight f32 lanes
/// and `m·(dy·Σy)` (rounded to f16 as llama.cpp's Q8_1 activations store it) in one scalar.
macro_rules! with_minimum_pass {
    ($name:ident, $bytes:expr, |$blk:ident| $weights:expr) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
        unsafe fn $name<const N: usize>(w: &[u8], xs: &[Q8Row], out: &mut [f32]) {
            let mut acc = [_mm256_setzero_ps(); N];
            let mut mins = [0f32; N];
            let wp = w.as_ptr();
            let ones = _mm256_set1_epi16(1);
            let nb = xs[0].d.len();
            // In pairs of blocks, as `blocks32_pass`, then the odd one.
            let mut b = 0;
            while b < nb {
                let pair = b + 2 <= nb;
                let b0 = wp.add(b * $bytes);
                _mm_prefetch::<_MM_HINT_T0>(b0.wrapping_add(PREFETCH) as *const i8);
                let q0 = {
                    let $blk = b0;
                    $weights
                };
                let (dw0, m0) = (f16_at(b0), f16_at(b0.add(2)));
                let b1 = wp.add((b + pair as usize) * $bytes);
                let q1 = {
                    let $blk = b1;
                    $weights
                };
                let (dw1, m1) = (f16_at(b1), f16_at(b1.add(2)));
                for c in 0..N {
                    let x = xs.get_unchecked(c);
                    let y = x.qs.as_ptr().add(b * QK) as *const u8;
                    let dy0 = *x.d.get_unchecked(b);
                    let s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, load(y)), ones);
                    let t0 = _mm256_mul_ps(_mm256_set1_ps(dw0 * dy0), _mm256_cvtepi32_ps(s0));
                    mins[c] += m0 * *x.d_sums.get_unchecked(b);
                    if pair {
                        let dy1 = *x.d.get_unchecked(b + 1);
                        let s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, load(y.add(QK))), ones);
                        let t =
                            _mm256_fmadd_ps(_mm256_set1_ps(dw1 * dy1), _mm256_cvtepi32_ps(s1), t0);
                        acc[c] = _mm256_add_ps(acc[c], t);
                        mins[c] += m1 * *x.d_sums.get_unchecked(b + 1);
                    } else {
                        acc[c] = _mm256_add_ps(acc[c], t0);
                    }
                }
                b += 1 + pair as usize;
            }
            for c in 0..N {
                *out.get_unchecked_mut(c) = hsum(acc[c]) + mins[c];
            }
        }
    };
}

with_minimum_pass!(q4_1_pass, 20, |blk| nibbles(blk.add(4)));
with_minimum_pass!(q5_1_pass, 24, |blk| _mm256_or_si256(
    nibbles(blk.add(8)),
    _mm256_and_si256(fifth_bits(blk.add(4)), _mm256_set1_epi8(0x10))
));
one_and_rows!(q4_1_pass, q4_1, q4_1_rows);
one_and_rows!(q5_1_pass, q5_1, q5_1_rows);

/// Byte j is 0xFF where bit j of the 32 bits at `p` is set (the fifth bits of a Q5 block in
/// GGUF order; tiles keep theirs bit-sliced, see `super::tiles`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    let qh = std::ptr::read_unaligned(p as *const u32);
    let shuf = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let spread = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    _mm256_cmpeq_epi8(
        _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
        _mm256_set1_epi64x(-1),
    )
}

/// A Q4_K/Q5_K block's eight 6-bit scales (16-bit lanes 0..8, repeated in both halves) and
/// eight minimums (a 128-bit vector of 16-bit lanes), from its 12 packed bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_and_mins_k4(p: *const u8) -> (__m256i, __m128i) {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let mut u = [0u32; 4];
    std::ptr::copy_nonoverlapping(p, u.as_mut_ptr() as *mut u8, 12);
    u[3] = ((u[2] >> 4) & KMASK2) | (((u[1] >> 6) & KMASK3) << 4);
    let mins_lo = u[1] & KMASK1;
    u[1] = (u[2] & KMASK2) | (((u[0] >> 6) & KMASK3) << 4);
    u[2] = mins_lo;
    u[0] &= KMASK1;
    let mins_scales = _mm256_cvtepu8_epi16(_mm_set_epi32(
        u[3] as i32,
        u[2] as i32,
        u[1] as i32,
        u[0] as i32,
    ));
    let sc = _mm256_castsi256_si128(mins_scales);
    (
        _mm256_set_m128i(sc, sc),
        _mm256_extracti128_si256(mins_scales, 1),
    )
}

/// Scales `2j` and `2j + 1` (of [`scales_and_mins_k4`]), each broadcast to every 16-bit lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_pair_k4(scales: __m256i, j: usize) -> (__m256i, __m256i) {
    let lo = 4 * j as u8;
    (
        _mm256_shuffle_epi8(scales, _mm256_set1_epi16(i16::from_le_bytes([lo, lo + 1]))),
        _mm256_shuffle_epi8(
            scales,
            _mm256_set1_epi16(i16::from_le_bytes([lo + 2, lo + 3])),
        ),
    )
}

/// The minimums' part of a Q4_K/Q5_K block for one activation row: `Σ min_j · Σy_j` over the
/// eight 32-value sub-blocks, in four i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mins_dot(mins: __m128i, x: &Q8Row, b: usize) -> __m128i {
    let bsums = _mm256_loadu_si256(x.bsums.as_ptr().add(b * 16) as *const __m256i);
    let sums32 = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    _mm_madd_epi16(mins, sums32)
}

/// Q4_K (`$bytes` 144, no fifth bits) and Q5_K (176, fifth bits at 16): per 64 values the low
/// nibbles of 32 bytes are sub-block `2j`, the high ones `2j + 1`; each block's scales and
/// weights are unpacked once for the `N` activation rows.
macro_rules! k4_pass {
    ($name:ident, $bytes:expr, $fifth:expr) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
        unsafe fn $name<const N: usize>(w: &[u8], xs: &[Q8Row], out: &mut [f32]) {
            let m4 = _mm256_set1_epi8(0x0F);
            let mut acc = [_mm256_setzero_ps(); N];
            let mut acc_m = [_mm_setzero_ps(); N];
            let nibbles_at = if $fifth { 48 } else { 16 };
            let (ys, ds) = row_pointers::<N>(xs);
            for b in 0..xs[0].d.len() {
                let blk = w.as_ptr().add(b * $bytes);
                prefetch(blk, $bytes);
                let (dw, dmin) = (f16_at(blk), f16_at(blk.add(2)));
                let (scales, mins) = scales_and_mins_k4(blk.add(4));
                for c in 0..N {
                    let x = xs.get_unchecked(c);
                    let prod = mins_dot(mins, x, b);
                    let neg = -*x.d.get_unchecked(b) * dmin;
                    acc_m[c] = _mm_fmadd_ps(_mm_set1_ps(neg), _mm_cvtepi32_ps(prod), acc_m[c]);
                }
                let high = if $fifth {
                    load(blk.add(16))
                } else {
                    _mm256_setzero_si256()
                };
                let mut sumi = [_mm256_setzero_si256(); N];
                for j in 0..4 {
                    let (scale_l, scale_h) = scale_pair_k4(scales, j);
                    let bits = load(blk.add(nibbles_at + 32 * j));
                    let mut q_l = _mm256_and_si256(bits, m4);
                    let mut q_h = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                    if $fifth {
                        // Bit 2j of each qh byte is the fifth bit of sub-block 2j, bit 2j+1 of 2j+1.
                        let bit = |s: usize| {
                            let mask = _mm256_set1_epi8(1i8 << s);
                            let set = _mm256_cmpeq_epi8(_mm256_and_si256(high, mask), mask);
                            _mm256_and_si256(set, _mm256_set1_epi8(0x10))
                        };
                        q_l = _mm256_or_si256(q_l, bit(2 * j));
                        q_h = _mm256_or_si256(q_h, bit(2 * j + 1));
                    }
                    for c in 0..N {
                        let q8 = ys[c].add(b * QK_K + 64 * j);
                        let p_l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q_l, load(q8)));
                        let p_h =
                            _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q_h, load(q8.add(32))));
                        sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p_l, p_h));
                    }
                }
                for c in 0..N {
                    let d = *ds[c].add(b) * dw;
                    acc[c] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
                }
            }
            for c in 0..N {
                let m = _mm_add_ps(acc_m[c], _mm_movehl_ps(acc_m[c], acc_m[c]));
                let m = _mm_add_ss(m, _mm_movehdup_ps(m));
                *out.get_unchecked_mut(c) = hsum(acc[c]) + _mm_cvtss_f32(m);
            }
        }
    };
}

k4_pass!(q4k_pass, 144, false);
k4_pass!(q5k_pass, 176, true);
one_and_rows!(q4k_pass, q4k, q4k_rows);
one_and_rows!(q5k_pass, q5k, q5k_rows);

/// Q6_K: per half of a block, 64 bytes of low nibbles and 32 of high bit pairs make four runs
/// of 32 values (offset by 32), unpacked once for the `N` activation rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
unsafe fn q6k_pass<const N: usize>(w: &[u8], xs: &[Q8Row], out: &mut [f32]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); N];
    let (ys, ds) = row_pointers::<N>(xs);
    for b in 0..xs[0].d.len() {
        let blk = w.as_ptr().add(b * 210);
        prefetch(blk, 210);
        let dw = f16_at(blk.add(208));
        let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
        // The weights' offset of 32 in one step: Σ(q - 32)·y·s = Σq·y·s - 32·Σ s_j·(Σy)_j
        // over the 16 sub-blocks of 16, whose sums the activations carry (exact integers).
        let all_scales = _mm256_cvtepi8_epi16(scales);
        let mut sumi: [__m256i; N] = std::array::from_fn(|c| {
            let bsums = _mm256_loadu_si256(xs[c].bsums.as_ptr().add(b * 16) as *const __m256i);
            _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32::<5>(_mm256_madd_epi16(all_scales, bsums)),
            )
        });
        for half in 0..2usize {
            let bits1 = load(blk.add(64 * half));
            let bits2 = load(blk.add(64 * half + 32));
            let high = load(blk.add(128 + 32 * half));
            let h0 = _mm256_slli_epi16(_mm256_and_si256(high, m2), 4);
            let h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), m2), 4);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), m2), 4);
            let h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), m2), 4);
            let q = [
                _mm256_or_si256(_mm256_and_si256(bits1, m4), h0),
                _mm256_or_si256(_mm256_and_si256(bits2, m4), h1),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4), h2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4), h3),
            ];
            for (i, q) in q.into_iter().enumerate() {
                // Scales 2s and 2s+1 of this 32-value run, each for 8 16-bit lanes.
                let s = (half * 8 + 2 * i) as u8;
                let pick =
                    _mm_set_epi64x(i64::from_le_bytes([s + 1; 8]), i64::from_le_bytes([s; 8]));
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
                for c in 0..N {
                    let y = load(ys[c].add(b * QK_K + 128 * half + 32 * i));
                    // q·y (at most 2 × 63 × 128 per pair): maddubs needs the unsigned operand.
                    let p = _mm256_maddubs_epi16(q, y);
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sc, p));
                }
            }
        }
        for c in 0..N {
            let d = *ds[c].add(b) * dw;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..N {
        *out.get_unchecked_mut(c) = hsum(acc[c]);
    }
}

one_and_rows!(q6k_pass, q6k, q6k_rows);

/// The values and block scales of the first `N` rows of `xs`, as raw pointers: the kernels'
/// block loops read them without going through each row's vectors again.
#[inline(always)]
fn row_pointers<const N: usize>(xs: &[Q8Row]) -> ([*const u8; N], [*const f32; N]) {
    (
        std::array::from_fn(|c| xs[c].qs.as_ptr() as *const u8),
        std::array::from_fn(|c| xs[c].d.as_ptr()),
    )
}

/// Blocks of 32 signed weights (`$weights`: the bytes of the block at `$blk`) against `N`
/// activation rows: each block's weights are unpacked once for all of them.
macro_rules! blocks32_pass {
    ($name:ident, $bytes:expr, |$blk:ident| $weights:expr) => {
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::needless_range_loop)] // `c` indexes rows, sums and outputs together
        unsafe fn $name<const N: usize>(w: &[u8], xs: &[Q8Row], out: &mut [f32]) {
            let mut acc = [_mm256_setzero_ps(); N];
            let wp = w.as_ptr();
            // Each row's values and scales, hoisted out of the block loop.
            let (ys, ds) = row_pointers::<N>(xs);
            for b in 0..xs[0].d.len() {
                let $blk = wp.add(b * $bytes);
                _mm_prefetch::<_MM_HINT_T0>($blk.wrapping_add(PREFETCH) as *const i8);
                let wq = $weights;
                let scale = f16_at($blk);
                // maddubs multiplies unsigned by signed bytes: w's sign moves onto y.
                let unsigned = _mm256_sign_epi8(wq, wq);
                for c in 0..N {
                    let d = _mm256_set1_ps(scale * *ds[c].add(b));
                    let y = load(ys[c].add(b * QK));
                    let pairs = _mm256_maddubs_epi16(unsigned, _mm256_sign_epi8(y, wq));
                    let s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
                    acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[c]);
                }
            }
            for c in 0..N {
                *out.get_unchecked_mut(c) = hsum(acc[c]);
            }
        }
    };
}

blocks32_pass!(q4_0_pass, 18, |blk| _mm256_sub_epi8(
    nibbles(blk.add(2)),
    _mm256_set1_epi8(8)
));
blocks32_pass!(q5_0_pass, 22, |blk| q5_0_weights(blk));
blocks32_pass!(q8_0_pass, 34, |blk| load(blk.add(2)));
one_and_rows!(q4_0_pass, q4_0, q4_0_rows);
one_and_rows!(q5_0_pass, q5_0, q5_0_rows);
one_and_rows!(q8_0_pass, q8_0, q8_0_rows);

/// One [`PanelPass`] of up to 3 rows, as [`super::avx512::panel_product`] computes it with
/// 256-bit vectors: three rows of four vectors of sums fill twelve of the sixteen registers.
///
/// # Safety
/// AVX2 and FMA, and `pass` as [`PanelPass`] says.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn panel_product(pass: &PanelPass<'_>) {
    match pass.rows {
        3 => panel_rows::<3>(pass),
        2 => panel_rows::<2>(pass),
        _ => panel_rows::<1>(pass),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_rows<const R: usize>(pass: &PanelPass<'_>) {
    let PanelPass {
        x,
        ldx,
        depth,
        w,
        out,
        ldo,
        cols,
        accumulate,
        ..
    } = *pass;
    debug_assert!(x.len() >= (R - 1) * ldx + depth && w.len() >= depth * 32);
    let (xp, wp) = (x.as_ptr(), w.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    for d in 0..depth {
        let ws = [0, 8, 16, 24].map(|c| _mm256_loadu_ps(wp.add(d * 32 + c)));
        for (r, a) in acc.iter_mut().enumerate() {
            let xb = _mm256_set1_ps(*xp.add(r * ldx + d));
            for (a, w) in a.iter_mut().zip(ws) {
                *a = _mm256_fmadd_ps(xb, w, *a);
            }
        }
    }
    let mut sums = [0f32; 32];
    for (r, a) in acc.iter().enumerate() {
        let o = out.add(r * ldo);
        for (v, s) in a.iter().zip(sums.chunks_exact_mut(8)) {
            _mm256_storeu_ps(s.as_mut_ptr(), *v);
        }
        // The last panel's columns past `cols` are padding: not written.
        for (c, &s) in sums.iter().enumerate().take(cols) {
            *o.add(c) = if accumulate { *o.add(c) + s } else { s };
        }
    }
}
