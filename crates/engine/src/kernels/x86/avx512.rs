//! Q5_0 and Q8_0 with AVX-512 (F, BW, VL, VNNI): two blocks per 512-bit vector, one
//! `vpdpbusd` (unsigned × signed bytes into i32) per pair instead of the sign trick and two
//! multiply-adds. Weights are taken unsigned (Q5_0 + 16, Q8_0 + 128) and that offset times the
//! activations' block sums is subtracted at the end; Q5_0's fifth bits come straight from a
//! mask register.

use super::PanelPass;
use crate::kernels::blocks::*;
use std::arch::x86_64::*;

/// `Σ d_w·d_x·dot(u, y)` over a row of blocks minus `offset·Σ d_w·d_x·Σy`, where
/// `$pair(blk0, blk1)` gives two blocks' unsigned weights as 64 bytes and `$one(blk)` one
/// block's as 32 (a macro, so each type's function inlines it with its target features).
macro_rules! row_dot {
    ($w:expr, $x:expr, $bytes:expr, $offset:expr, |$b0:ident, $b1:ident| $pair:expr, |$b:ident| $one:expr) => {{
        let (w, x): (&[u8], &Q8Row) = ($w, $x);
        let (wp, yp) = (w.as_ptr(), x.qs.as_ptr());
        let nb = x.d.len();
        let mut acc = _mm512_setzero_ps();
        let mut sums = 0f32;
        for p in 0..nb / 2 {
            let b = 2 * p;
            let $b0 = wp.add(b * $bytes);
            let $b1 = $b0.add($bytes);
            _mm_prefetch::<_MM_HINT_T0>($b0.wrapping_add(PREFETCH) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>($b1.wrapping_add(PREFETCH + $bytes - 1) as *const i8);
            let d0 = scale($b0) * *x.d.get_unchecked(b);
            let d1 = scale($b1) * *x.d.get_unchecked(b + 1);
            let y = _mm512_loadu_si512(yp.add(b * QK) as *const _);
            let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), $pair, y);
            let d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
            sums += d0 * *x.sums.get_unchecked(b) as f32 + d1 * *x.sums.get_unchecked(b + 1) as f32;
        }
        let mut tail = 0f32;
        if nb % 2 == 1 {
            let b = nb - 1;
            let $b = wp.add(b * $bytes);
            let d = scale($b) * *x.d.get_unchecked(b);
            let y = _mm256_loadu_si256(yp.add(b * QK) as *const __m256i);
            let s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), $one, y);
            let v = _mm256_cvtepi32_ps(s);
            let v = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            let v = _mm_add_ss(v, _mm_movehdup_ps(v));
            tail = d * _mm_cvtss_f32(v);
            sums += d * *x.sums.get_unchecked(b) as f32;
        }
        _mm512_reduce_add_ps(acc) + tail - $offset * sums
    }};
}

/// What `super::avx2::largest` gives, 16 lanes at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn largest(xs: &[f32]) -> Option<f32> {
    assert!(xs.len().is_multiple_of(16));
    let abs = |i: usize| _mm512_abs_ps(_mm512_loadu_ps(xs.as_ptr().add(i)));
    let mut m = _mm512_setzero_ps();
    for i in (0..xs.len()).step_by(16) {
        m = _mm512_max_ps(abs(i), m);
    }
    let amax = _mm512_reduce_max_ps(m);
    if amax == 0.0 {
        return None;
    }
    let wanted = _mm512_set1_ps(amax);
    (0..xs.len()).step_by(16).find_map(|i| {
        let hits = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(abs(i), wanted);
        (hits != 0).then(|| xs[i + hits.trailing_zeros() as usize])
    })
}

/// A Q8_K block's values as `super::avx2::quantize_q8_k` gives them, 16 lanes at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_k(xs: &[f32], iscale: f32, qs: &mut [i8]) {
    assert!(xs.len() == QK_K && qs.len() == QK_K);
    let scale = _mm512_set1_ps(iscale);
    let (half, one) = (_mm512_set1_ps(0.5), _mm512_set1_ps(1.0));
    let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
    for i in (0..QK_K).step_by(16) {
        let v = _mm512_mul_ps(scale, _mm512_loadu_ps(xs.as_ptr().add(i)));
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        // A fraction of a half or more steps away from zero (both exact below 2²³).
        let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(_mm512_sub_ps(v, t)), half);
        let step = _mm512_castsi512_ps(_mm512_ternarylogic_epi32::<0xEA>(
            _mm512_castps_si512(v),
            _mm512_set1_epi32(i32::MIN),
            _mm512_castps_si512(one),
        ));
        let r = _mm512_mask_add_ps(t, up, t, step);
        let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        // NaN lanes (unordered with themselves) to zero, as `as i8` makes them.
        let q = _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), r);
        _mm_storeu_si128(
            qs.as_mut_ptr().add(i) as *mut __m128i,
            _mm512_cvtepi32_epi8(q),
        );
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn scale(p: *const u8) -> f32 {
    let bits = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Q5_0's 32 values, unsigned (0..32): 16 bytes of nibbles at `p + 6`, fifth bits at `p + 2`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q5_0_one(p: *const u8) -> __m256i {
    let qs = _mm_loadu_si128(p.add(6) as *const __m128i);
    let nibbles = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
        _mm256_set1_epi8(0x0F),
    );
    let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
    _mm256_or_si256(nibbles, _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10)))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q4_0(w: &[u8], x: &Q8Row) -> f32 {
    row_dot!(w, x, 18, 8.0, |b0, b1| nibble_pair(b0, b1, 2), |b| {
        let qs = _mm_loadu_si128(b.add(2) as *const __m128i);
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
            _mm256_set1_epi8(0x0F),
        )
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q5_0(w: &[u8], x: &Q8Row) -> f32 {
    row_dot!(w, x, 22, 16.0, |b0, b1| q5_0_pair(b0, b1), |b| q5_0_one(b))
}

/// Two Q4_0/Q5_0 blocks' nibbles (16 bytes each at `b + at`) as 64 bytes, low nibbles first.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn nibble_pair(b0: *const u8, b1: *const u8, at: usize) -> __m512i {
    // 64-bit lanes 0-1 and 4-5 keep the nibble bytes, 2-3 and 6-7 shift the high ones down.
    let shifts = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    let qs0 = _mm_loadu_si128(b0.add(at) as *const __m128i);
    let qs1 = _mm_loadu_si128(b1.add(at) as *const __m128i);
    let z = _mm512_inserti32x4(_mm512_castsi128_si512(qs0), qs0, 1);
    let z = _mm512_inserti32x4(_mm512_inserti32x4(z, qs1, 2), qs1, 3);
    _mm512_and_si512(_mm512_srlv_epi64(z, shifts), _mm512_set1_epi8(0x0F))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q5_0_pair(b0: *const u8, b1: *const u8) -> __m512i {
    let qh = std::ptr::read_unaligned(b0.add(2) as *const u32) as u64
        | (std::ptr::read_unaligned(b1.add(2) as *const u32) as u64) << 32;
    _mm512_or_si512(
        nibble_pair(b0, b1, 6),
        _mm512_maskz_mov_epi8(qh, _mm512_set1_epi8(0x10)),
    )
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_0_pair(b0: *const u8, b1: *const u8) -> __m512i {
    let lo = _mm256_loadu_si256(b0.add(2) as *const __m256i);
    let hi = _mm256_loadu_si256(b1.add(2) as *const __m256i);
    _mm512_xor_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
        _mm512_set1_epi8(-128),
    )
}

/// Q6_K, one weight row against `C` activation rows. Each 256-value block is widened once
/// into four vectors of 64 unsigned 6-bit values and four vectors of f32 scales
/// (`d × scale` of each 16 values, over the 4 lanes that sum them); per activation row, the
/// integer sums start from `-32 × Σy` (the values' offset) and are scaled in f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes the accumulators, columns and outputs together
pub unsafe fn q6k_rows<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    let m4 = _mm512_set1_epi8(0x0F);
    let m2 = _mm512_set1_epi8(3);
    // 16-bit shift counts: the low 256 bits take the high bits at shift a, the upper at b.
    let counts = |a: i16, b: i16| {
        _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
            1,
        )
    };
    let (first, second) = (counts(0, 2), counts(4, 6));
    let blocks = stride / K_WORDS;
    let mut acc = [_mm512_setzero_ps(); C];
    for b in 0..blocks {
        let blk = w.as_ptr().add(b * 210);
        let dw = scale(blk.add(208));
        let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
        let mut q = [_mm512_setzero_si512(); 4];
        let mut sc = [_mm512_setzero_ps(); 4];
        for h in 0..2 {
            let low = _mm512_loadu_si512(blk.add(h * 64) as *const _);
            let high =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(128 + h * 32) as *const __m256i));
            let top = |c| _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(high, c), m2), 4);
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(low, m4), top(first));
            q[2 * h + 1] =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), m4), top(second));
        }
        for (z, sc) in sc.iter_mut().enumerate() {
            // Scales 4z..4z+4, each over 4 i32 lanes.
            let g = (4 * z) as u8;
            let pick = _mm_set_epi32(
                i32::from_le_bytes([g + 3; 4]),
                i32::from_le_bytes([g + 2; 4]),
                i32::from_le_bytes([g + 1; 4]),
                i32::from_le_bytes([g; 4]),
            );
            let lanes = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(scales, pick));
            *sc = _mm512_mul_ps(_mm512_cvtepi32_ps(lanes), _mm512_set1_ps(dw));
        }
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let mut block = _mm512_setzero_ps();
            for z in 0..4 {
                let y = _mm512_loadu_si512(at.add(z * 16) as *const _);
                let offset = _mm512_loadu_si512(at.add(64 + z * 16) as *const _);
                let s = _mm512_dpbusd_epi32(offset, q[z], y);
                block = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc[z], block);
            }
            let dx = _mm512_set1_ps(f32::from_bits(*at.add(128)));
            acc[c] = _mm512_fmadd_ps(block, dx, acc[c]);
        }
    }
    for c in 0..C {
        *out.get_unchecked_mut(c) = _mm512_reduce_add_ps(acc[c]);
    }
}

/// Q4_K, one weight row against `C` activation rows: each block widened once into four
/// vectors of 64 nibbles and their f32 scales (`d × scale` per 32 values); the minimums
/// (`dmin × min × Σy` per 32 values) are one 16-bit multiply-add per activation row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // `c` indexes the accumulators, columns and outputs together
pub unsafe fn q4k_rows<const C: usize>(w: &[u8], cols: *const u32, stride: usize, out: &mut [f32]) {
    let m4 = _mm512_set1_epi8(0x0F);
    let halves = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    let blocks = stride / K_WORDS;
    let mut acc = [_mm512_setzero_ps(); C];
    for b in 0..blocks {
        let blk = w.as_ptr().add(b * 144);
        let (d, dmin) = (scale(blk), scale(blk.add(2)));
        let packed = std::slice::from_raw_parts(blk.add(4), 12);
        let mut mins = [0i16; 8];
        let mut sc = [_mm512_setzero_ps(); 4];
        let mut q = [_mm512_setzero_si512(); 4];
        for z in 0..4 {
            let (s0, m0) = scale_min_k4(2 * z, packed);
            let (s1, m1) = scale_min_k4(2 * z + 1, packed);
            mins[2 * z] = m0 as i16;
            mins[2 * z + 1] = m1 as i16;
            sc[z] = _mm512_mask_blend_ps(
                0xFF00,
                _mm512_set1_ps(d * s0 as f32),
                _mm512_set1_ps(d * s1 as f32),
            );
            let bytes =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(16 + 32 * z) as *const __m256i));
            q[z] = _mm512_and_si512(_mm512_srlv_epi64(bytes, halves), m4);
        }
        let mins = _mm_loadu_si128(mins.as_ptr() as *const __m128i);
        let neg_dmin = _mm_set1_ps(-dmin);
        for c in 0..C {
            let at = cols.add(c * stride + b * K_WORDS);
            let mut block = _mm512_setzero_ps();
            for z in 0..4 {
                let y = _mm512_loadu_si512(at.add(z * 16) as *const _);
                let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[z], y);
                block = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc[z], block);
            }
            let sums = _mm_loadu_si128(at.add(129) as *const __m128i);
            let m = _mm_mul_ps(_mm_cvtepi32_ps(_mm_madd_epi16(mins, sums)), neg_dmin);
            block = _mm512_add_ps(block, _mm512_zextps128_ps512(m));
            let dx = _mm512_set1_ps(f32::from_bits(*at.add(128)));
            acc[c] = _mm512_fmadd_ps(block, dx, acc[c]);
        }
    }
    for c in 0..C {
        *out.get_unchecked_mut(c) = _mm512_reduce_add_ps(acc[c]);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q8_0(w: &[u8], x: &Q8Row) -> f32 {
    row_dot!(w, x, 34, 128.0, |b0, b1| q8_0_pair(b0, b1), |b| {
        _mm256_xor_si256(
            _mm256_loadu_si256(b.add(2) as *const __m256i),
            _mm256_set1_epi8(-128),
        )
    })
}

/// One [`PanelPass`] of up to 8 rows, an 8 × 32 block of sums in sixteen registers
/// ([`crate::kernels::packed`]).
///
/// # Safety
/// AVX-512F, and `pass` as [`PanelPass`] says.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn panel_product(pass: &PanelPass<'_>) {
    match pass.rows {
        8 => panel_rows::<8>(pass),
        7 => panel_rows::<7>(pass),
        6 => panel_rows::<6>(pass),
        5 => panel_rows::<5>(pass),
        4 => panel_rows::<4>(pass),
        3 => panel_rows::<3>(pass),
        2 => panel_rows::<2>(pass),
        _ => panel_rows::<1>(pass),
    }
}

#[inline]
#[target_feature(enable = "avx512f")]
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
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for d in 0..depth {
        let w0 = _mm512_loadu_ps(wp.add(d * 32));
        let w1 = _mm512_loadu_ps(wp.add(d * 32 + 16));
        for (r, a) in acc.iter_mut().enumerate() {
            let xb = _mm512_set1_ps(*xp.add(r * ldx + d));
            a[0] = _mm512_fmadd_ps(xb, w0, a[0]);
            a[1] = _mm512_fmadd_ps(xb, w1, a[1]);
        }
    }
    // The columns this panel has: all 32, or the first `cols` of the last panel.
    let mask = |c: usize| ((1u32 << c.min(16)) - 1) as u16;
    let (lo, hi) = (mask(cols), mask(cols.saturating_sub(16)));
    for (r, a) in acc.iter().enumerate() {
        let o = out.add(r * ldo);
        let (mut s0, mut s1) = (a[0], a[1]);
        if accumulate {
            s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(lo, o));
            s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(hi, o.add(16)));
        }
        _mm512_mask_storeu_ps(o, lo, s0);
        _mm512_mask_storeu_ps(o.add(16), hi, s1);
    }
}
