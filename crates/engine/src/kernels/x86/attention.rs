//! The attention kernel's x86 bodies ([`crate::kernels::ops::attention`]): a tile of keys
//! transposed eight by eight, and query rows scored against it with the sums held in
//! registers. Each score is the same chain of fused multiply-adds in the head's order as the
//! portable body's, so every level computes the same bits.

use std::arch::x86_64::*;

/// Keys per tile ([`crate::kernels::ops::attention`]'s `TILE`).
const TILE: usize = 64;

/// `n` keys of `dim` values (`keys`) into `kt` as `[dim, TILE]`, the columns past `n` zero:
/// whole blocks of eight keys × eight values through the classic 8 × 8 transpose in AVX
/// registers, the rest one value at a time.
///
/// # Safety
/// AVX2 must be available; `keys.len() == n * dim` with `n <= TILE`, `kt.len() >= dim * TILE`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn pack_transposed(keys: &[f32], dim: usize, kt: &mut [f32]) {
    let n = keys.len() / dim;
    assert!(n <= TILE && kt.len() >= dim * TILE && keys.len() == n * dim);
    let (src, dst) = (keys.as_ptr(), kt.as_mut_ptr());
    let (whole_keys, whole_dims) = (n - n % 8, dim - dim % 8);
    for j in (0..whole_keys).step_by(8) {
        for d in (0..whole_dims).step_by(8) {
            let r: [__m256; 8] =
                std::array::from_fn(|i| _mm256_loadu_ps(src.add((j + i) * dim + d)));
            let t = transpose8(r);
            for (i, t) in t.iter().enumerate() {
                _mm256_storeu_ps(dst.add((d + i) * TILE + j), *t);
            }
        }
        for d in whole_dims..dim {
            for i in 0..8 {
                *dst.add(d * TILE + j + i) = *src.add((j + i) * dim + d);
            }
        }
    }
    for j in whole_keys..n {
        for d in 0..dim {
            *dst.add(d * TILE + j) = *src.add(j * dim + d);
        }
    }
    if n < TILE {
        for d in 0..dim {
            std::ptr::write_bytes(dst.add(d * TILE + n), 0, TILE - n);
        }
    }
}

/// Rows `r` of eight lanes to columns.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Scores of `R` query rows (`q`: `R × dim`) against a transposed tile (`kt`: `[dim, TILE]`):
/// `p[r·TILE + j] = Σ_d q_r[d]·kt[d][j]`, fused in `d`'s order; the `R × 4` sums of sixteen
/// keys stay in registers.
///
/// # Safety
/// AVX-512F must be available; `q.len() >= R * dim`, `kt.len() >= dim * TILE`,
/// `p.len() >= R * TILE`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn scores_avx512<const R: usize>(
    q: &[f32],
    kt: &[f32],
    dim: usize,
    p: &mut [f32],
) {
    assert!(q.len() >= R * dim && kt.len() >= dim * TILE && p.len() >= R * TILE);
    let (q, kt) = (q.as_ptr(), kt.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for d in 0..dim {
        let k = kt.add(d * TILE);
        let k = [
            _mm512_loadu_ps(k),
            _mm512_loadu_ps(k.add(16)),
            _mm512_loadu_ps(k.add(32)),
            _mm512_loadu_ps(k.add(48)),
        ];
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*q.add(r * dim + d));
            for c in 0..4 {
                acc[c] = _mm512_fmadd_ps(x, k[c], acc[c]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(p.as_mut_ptr().add(r * TILE + c * 16), *a);
        }
    }
}

/// [`scores_avx512`] in AVX2: one row's 64 sums in eight registers.
///
/// # Safety
/// AVX2 and FMA must be available; `q.len() >= dim`, `kt.len() >= dim * TILE`,
/// `p.len() >= TILE`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores_avx2(q: &[f32], kt: &[f32], dim: usize, p: &mut [f32]) {
    assert!(q.len() >= dim && kt.len() >= dim * TILE && p.len() >= TILE);
    let (q, kt) = (q.as_ptr(), kt.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 8];
    for d in 0..dim {
        let x = _mm256_set1_ps(*q.add(d));
        let k = kt.add(d * TILE);
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(x, _mm256_loadu_ps(k.add(c * 8)), *a);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(p.as_mut_ptr().add(c * 8), *a);
    }
}

/// [`scores_avx2`] for two rows at once, a half tile (32 keys) per pass: the `2 × 4` sums in
/// registers take one load of keys for two rows' multiply-adds, where one row alone loads a
/// vector of keys for each (the loads, not the multiply-adds, bound the one-row body). Each
/// sum is the same chain as the one-row body's.
///
/// # Safety
/// AVX2 and FMA must be available; `q.len() >= 2 * dim`, `kt.len() >= dim * TILE`,
/// `p.len() >= 2 * TILE`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores_avx2_pair(q: &[f32], kt: &[f32], dim: usize, p: &mut [f32]) {
    assert!(q.len() >= 2 * dim && kt.len() >= dim * TILE && p.len() >= 2 * TILE);
    let (q, kt) = (q.as_ptr(), kt.as_ptr());
    for half in [0, TILE / 2] {
        let mut acc = [[_mm256_setzero_ps(); 4]; 2];
        for d in 0..dim {
            let k = kt.add(d * TILE + half);
            let k: [__m256; 4] = std::array::from_fn(|c| _mm256_loadu_ps(k.add(c * 8)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_set1_ps(*q.add(r * dim + d));
                for c in 0..4 {
                    acc[c] = _mm256_fmadd_ps(x, k[c], acc[c]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(p.as_mut_ptr().add(r * TILE + half + c * 8), *a);
            }
        }
    }
}

/// `R` rows' weighted values `acc_r += Σ_j p_r[j] · v_j` over a tile's first `seen` keys
/// (`p`: the rows' tile weights, `TILE` apart; `v`: `seen × dim`; `acc[r]`: row `r`'s `dim`
/// sums), 64 columns at a time with the `R × 4` sums in registers across the keys.
///
/// # Safety
/// AVX-512F must be available; `dim` a multiple of 64, `p.len() >= (R - 1) * TILE + seen`,
/// `v.len() >= seen * dim`, each `acc[r]` valid for `dim` values and none overlapping.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(crate) unsafe fn weigh_avx512<const R: usize>(
    p: &[f32],
    v: &[f32],
    seen: usize,
    dim: usize,
    acc: [*mut f32; R],
) {
    assert!(dim.is_multiple_of(64) && p.len() >= (R - 1) * TILE + seen && v.len() >= seen * dim);
    let (p, v) = (p.as_ptr(), v.as_ptr());
    for c in (0..dim).step_by(64) {
        let mut a: [[__m512; 4]; R] = std::array::from_fn(|r| {
            std::array::from_fn(|i| _mm512_loadu_ps(acc[r].add(c + i * 16)))
        });
        for j in 0..seen {
            let row = v.add(j * dim + c);
            let vj = [
                _mm512_loadu_ps(row),
                _mm512_loadu_ps(row.add(16)),
                _mm512_loadu_ps(row.add(32)),
                _mm512_loadu_ps(row.add(48)),
            ];
            for (r, a) in a.iter_mut().enumerate() {
                let w = _mm512_set1_ps(*p.add(r * TILE + j));
                for i in 0..4 {
                    a[i] = _mm512_fmadd_ps(w, vj[i], a[i]);
                }
            }
        }
        for (r, a) in a.iter().enumerate() {
            for (i, a) in a.iter().enumerate() {
                _mm512_storeu_ps(acc[r].add(c + i * 16), *a);
            }
        }
    }
}

/// [`weigh_avx512`] in AVX2 for one row: 64 columns' sums in eight registers.
///
/// # Safety
/// AVX2 and FMA must be available; `dim` a multiple of 64, `p.len() >= seen`,
/// `v.len() >= seen * dim`, `acc.len() >= dim`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weigh_avx2(p: &[f32], v: &[f32], seen: usize, dim: usize, acc: &mut [f32]) {
    assert!(dim.is_multiple_of(64) && p.len() >= seen && v.len() >= seen * dim && acc.len() >= dim);
    let (p, v, out) = (p.as_ptr(), v.as_ptr(), acc.as_mut_ptr());
    for c in (0..dim).step_by(64) {
        let mut a: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(out.add(c + i * 8)));
        for j in 0..seen {
            let w = _mm256_set1_ps(*p.add(j));
            let row = v.add(j * dim + c);
            for (i, a) in a.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(row.add(i * 8)), *a);
            }
        }
        for (i, a) in a.iter().enumerate() {
            _mm256_storeu_ps(out.add(c + i * 8), *a);
        }
    }
}

/// [`weigh_avx2`] for two rows at once, 32 columns per pass: a vector of values loaded once
/// for both rows' multiply-adds, each sum the same chain as the one-row body's.
///
/// # Safety
/// AVX2 and FMA must be available; `dim` a multiple of 32, `p.len() >= TILE + seen`,
/// `v.len() >= seen * dim`, `acc` two distinct rows' `dim` sums.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weigh_avx2_pair(
    p: &[f32],
    v: &[f32],
    seen: usize,
    dim: usize,
    acc: [*mut f32; 2],
) {
    assert!(dim.is_multiple_of(32) && p.len() >= TILE + seen && v.len() >= seen * dim);
    let (p, v) = (p.as_ptr(), v.as_ptr());
    for c in (0..dim).step_by(32) {
        let mut a: [[__m256; 4]; 2] = std::array::from_fn(|r| {
            std::array::from_fn(|i| _mm256_loadu_ps(acc[r].add(c + i * 8)))
        });
        for j in 0..seen {
            let row = v.add(j * dim + c);
            let vj: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(row.add(i * 8)));
            for (r, a) in a.iter_mut().enumerate() {
                let w = _mm256_set1_ps(*p.add(r * TILE + j));
                for i in 0..4 {
                    a[i] = _mm256_fmadd_ps(w, vj[i], a[i]);
                }
            }
        }
        for (r, a) in a.iter().enumerate() {
            for (i, a) in a.iter().enumerate() {
                _mm256_storeu_ps(acc[r].add(c + i * 8), *a);
            }
        }
    }
}

/// `src` (IEEE halves) widened into `dst`, eight at a time with F16C.
///
/// # Safety
/// AVX2 and F16C must be available; `dst.len() >= src.len()`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn widen_f16(src: &[half::f16], dst: &mut [f32]) {
    assert!(dst.len() >= src.len());
    let n = src.len();
    let (s, d) = (src.as_ptr().cast::<u16>(), dst.as_mut_ptr());
    for i in (0..n - n % 8).step_by(8) {
        let h = _mm_loadu_si128(s.add(i).cast());
        _mm256_storeu_ps(d.add(i), _mm256_cvtph_ps(h));
    }
    for (i, x) in src.iter().enumerate().skip(n - n % 8) {
        *d.add(i) = x.to_f32();
    }
}

/// `src` (bfloat16) widened into `dst`, eight at a time: each value's bits moved up 16.
///
/// # Safety
/// AVX2 must be available; `dst.len() >= src.len()`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn widen_bf16(src: &[half::bf16], dst: &mut [f32]) {
    assert!(dst.len() >= src.len());
    let n = src.len();
    let (s, d) = (src.as_ptr().cast::<u16>(), dst.as_mut_ptr());
    for i in (0..n - n % 8).step_by(8) {
        let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(s.add(i).cast()));
        _mm256_storeu_ps(d.add(i), _mm256_castsi256_ps(_mm256_slli_epi32::<16>(h)));
    }
    for (i, x) in src.iter().enumerate().skip(n - n % 8) {
        *d.add(i) = x.to_f32();
    }
}

/// `src` (whole q8_0 blocks: an f16 scale, 32 signed bytes) into `dst`: each byte times its
/// block's scale, eight at a time (the products are exact, as the portable loop's).
///
/// # Safety
/// AVX2 and F16C must be available; `dst.len() >= src.len() / 34 * 32`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    assert!(dst.len() >= src.len() / 34 * 32);
    for (b, block) in src.chunks_exact(34).enumerate() {
        let p = block.as_ptr();
        let d = _mm256_set1_ps(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
        let out = dst.as_mut_ptr().add(b * 32);
        for i in 0..4 {
            let q = _mm_loadl_epi64(p.add(2 + i * 8).cast());
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
            _mm256_storeu_ps(out.add(i * 8), _mm256_mul_ps(f, d));
        }
    }
}

/// `src` (whole q4_0 blocks: an f16 scale, 16 bytes of two four-bit values, value `j` low in
/// byte `j`, `j + 16` high) into `dst`: (value − 8) times the scale, eight at a time.
///
/// # Safety
/// AVX2 and F16C must be available; `dst.len() >= src.len() / 18 * 32`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    assert!(dst.len() >= src.len() / 18 * 32);
    let (mask, eight) = (_mm_set1_epi8(15), _mm_set1_epi8(8));
    for (b, block) in src.chunks_exact(18).enumerate() {
        let d = _mm256_set1_ps(half::f16::from_le_bytes([block[0], block[1]]).to_f32());
        let q = _mm_loadu_si128(block.as_ptr().add(2).cast());
        let lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16::<4>(q), mask), eight);
        let out = dst.as_mut_ptr().add(b * 32);
        for (i, half) in [lo, hi].into_iter().enumerate() {
            for j in 0..2 {
                let part = if j == 0 {
                    half
                } else {
                    _mm_srli_si128::<8>(half)
                };
                let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
                _mm256_storeu_ps(out.add(i * 16 + j * 8), _mm256_mul_ps(f, d));
            }
        }
    }
}
