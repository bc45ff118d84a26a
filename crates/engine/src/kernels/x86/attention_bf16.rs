//! The attention kernel's bodies with its products in bfloat16 (AVX-512 BF16: Zen 4, Sapphire
//! Rapids on): `vdpbf16ps` multiplies two pairs of bf16 values exactly and adds them into f32
//! sums, twice the multiply-adds of an f32 `vfmadd` per instruction. Queries, keys, values and
//! the softmax weights are rounded to bf16 (as a GPU's bf16 attention does); every sum, the
//! maximum and the softmax stay in f32.
//!
//! A tile's keys are stored as pairs of consecutive values of a head (`[dim / 2, TILE]`, one
//! pair per 32-bit lane), its values as pairs of consecutive keys (`[TILE / 2, dim]`), so each
//! instruction takes two values of the dot product in its order. The pairs are kept as the bits
//! of `f32` slots: they are only moved, never computed on, as floats.

use super::attention::pack_transposed;
use std::arch::x86_64::*;

/// Keys per tile ([`crate::kernels::ops::attention`]'s `TILE`).
const TILE: usize = 64;

/// `x` rounded to bf16 as `vcvtneps2bf16` does: to nearest even, subnormals to zero (the
/// instruction treats them as zero), NaN kept a NaN: the tests' reference.
#[cfg(test)]
pub(crate) fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    if x.is_subnormal() {
        return ((b >> 16) & 0x8000) as u16;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// `src` (`2n` values) into `n` pairs, value `2i` low in pair `i`, as `vcvtne2ps2bf16` lays
/// them out: 32 values an instruction.
///
/// # Safety
/// AVX-512 F and BF16 must be available; `src.len()` a multiple of 32, `dst.len() >=
/// src.len() / 2`.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub(crate) unsafe fn pairs(src: &[f32], dst: &mut [f32]) {
    assert!(src.len().is_multiple_of(32) && dst.len() >= src.len() / 2);
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for i in (0..src.len()).step_by(32) {
        let b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s.add(i + 16)), _mm512_loadu_ps(s.add(i)));
        _mm512_storeu_si512(
            d.add(i / 2).cast(),
            std::mem::transmute::<__m512bh, __m512i>(b),
        );
    }
}

/// `n` keys of `dim` values (`keys`) into `kt` as `[dim / 2, TILE]` pairs, the columns past
/// `n` zero; `rows` holds the keys' pairs on the way.
///
/// # Safety
/// AVX-512 F and BF16 must be available; `dim` a multiple of 32, `keys.len() == n * dim` with
/// `n <= TILE`, `kt.len() >= dim / 2 * TILE`.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub(crate) unsafe fn pack_keys(keys: &[f32], dim: usize, rows: &mut Vec<f32>, kt: &mut [f32]) {
    rows.resize(keys.len() / 2, 0.0);
    pairs(keys, rows);
    pack_transposed(rows, dim / 2, kt);
}

/// `n` values of `dim` (`v`) into `vt` as `[n.div_ceil(2), dim]` pairs of consecutive keys,
/// key `2i` low in pair `i` (an odd last key paired with zeros).
///
/// # Safety
/// AVX-512 F and BF16 must be available; `dim` a multiple of 16, `v.len()` a multiple of
/// `dim`, `vt.len() >= v.len().div_ceil(2 * dim) * dim`.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub(crate) unsafe fn pack_values(v: &[f32], dim: usize, vt: &mut [f32]) {
    let n = v.len() / dim;
    assert!(dim.is_multiple_of(16) && v.len() == n * dim && vt.len() >= n.div_ceil(2) * dim);
    let (s, d) = (v.as_ptr(), vt.as_mut_ptr());
    for j in (0..n).step_by(2) {
        let (a, b) = (s.add(j * dim), s.add((j + 1) * dim));
        for c in (0..dim).step_by(16) {
            let lo = bits16(_mm512_cvtneps_pbh(_mm512_loadu_ps(a.add(c))));
            let hi = if j + 1 < n {
                bits16(_mm512_cvtneps_pbh(_mm512_loadu_ps(b.add(c))))
            } else {
                _mm256_setzero_si256()
            };
            let pair = _mm512_or_si512(
                _mm512_cvtepu16_epi32(lo),
                _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi)),
            );
            _mm512_storeu_si512(d.add(j / 2 * dim + c).cast(), pair);
        }
    }
}

#[inline(always)]
unsafe fn bits16(x: __m256bh) -> __m256i {
    std::mem::transmute(x)
}

/// Scores of `R` query rows (`q`: `R × dim / 2` pairs) against a tile of pairs (`kt`:
/// `[dim / 2, TILE]`): `p[r·TILE + j] = Σ q_r·k_j`, a pair at a time in the head's order; the
/// `R × 4` sums of sixteen keys stay in registers.
///
/// # Safety
/// AVX-512 F and BF16 must be available; `q.len() >= R * half`, `kt.len() >= half * TILE`,
/// `p.len() >= R * TILE` (`half`: pairs per head).
#[inline]
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub(crate) unsafe fn scores<const R: usize>(q: &[f32], kt: &[f32], half: usize, p: &mut [f32]) {
    assert!(q.len() >= R * half && kt.len() >= half * TILE && p.len() >= R * TILE);
    let (q, kt) = (q.as_ptr().cast::<i32>(), kt.as_ptr());
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for d in 0..half {
        let k = kt.add(d * TILE);
        let k: [__m512bh; 4] = std::array::from_fn(|c| pairs_at(k.add(c * 16)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(*q.add(r * half + d)));
            for c in 0..4 {
                acc[c] = _mm512_dpbf16_ps(acc[c], k[c], x);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(p.as_mut_ptr().add(r * TILE + c * 16), *a);
        }
    }
}

/// `R` rows' weighted values `acc_r += Σ_j w_r[j] · v_j` over a tile's first `seen` pairs of
/// keys (`w`: the rows' weights as pairs, `TILE / 2` apart; `vt`: `seen × dim` pairs;
/// `acc[r]`: row `r`'s `dim` sums), 64 columns at a time with the `R × 4` sums in registers.
///
/// # Safety
/// AVX-512 F and BF16 must be available; `dim` a multiple of 64, `w.len() >= (R - 1) * TILE / 2
/// + seen`, `vt.len() >= seen * dim`, each `acc[r]` valid for `dim` values, none overlapping.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16,avx2,fma")]
pub(crate) unsafe fn weigh<const R: usize>(
    w: &[f32],
    vt: &[f32],
    seen: usize,
    dim: usize,
    acc: [*mut f32; R],
) {
    assert!(
        dim.is_multiple_of(64) && w.len() >= (R - 1) * TILE / 2 + seen && vt.len() >= seen * dim
    );
    let (w, vt) = (w.as_ptr().cast::<i32>(), vt.as_ptr());
    for c in (0..dim).step_by(64) {
        let mut a: [[__m512; 4]; R] = std::array::from_fn(|r| {
            std::array::from_fn(|i| _mm512_loadu_ps(acc[r].add(c + i * 16)))
        });
        for j in 0..seen {
            let row = vt.add(j * dim + c);
            let v: [__m512bh; 4] = std::array::from_fn(|i| pairs_at(row.add(i * 16)));
            for (r, a) in a.iter_mut().enumerate() {
                let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(*w.add(r * TILE / 2 + j)));
                for i in 0..4 {
                    a[i] = _mm512_dpbf16_ps(a[i], v[i], x);
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

/// Sixteen pairs stored as the bits of sixteen `f32` slots.
#[inline(always)]
unsafe fn pairs_at(p: *const f32) -> __m512bh {
    std::mem::transmute(_mm512_loadu_si512(p.cast()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_to_bf16_matches_the_instruction() {
        if !std::arch::is_x86_feature_detected!("avx512bf16") {
            return;
        }
        let xs: Vec<f32> = (0..64)
            .map(|i| match i {
                0 => 1.0 + f32::EPSILON * 64.0, // ties and near-ties of the bf16 grid
                1 => 1.0 + f32::EPSILON * 128.0,
                2 => 1.0 + f32::EPSILON * 192.0,
                3 => f32::MIN_POSITIVE / 4.0,
                4 => -f32::MIN_POSITIVE / 4.0,
                5 => f32::MAX,
                6 => f32::INFINITY,
                7 => -0.0,
                _ => ((i * 7919) % 1000) as f32 / 37.0 - 13.0,
            })
            .collect();
        let mut got = vec![0f32; 32];
        // SAFETY: the CPU has AVX-512 BF16 (checked above; AVX-512 F with it).
        unsafe { pairs(&xs, &mut got) };
        for (i, x) in xs.iter().enumerate() {
            let bits = got[i / 2].to_bits();
            let half = if i % 2 == 0 {
                bits & 0xffff
            } else {
                bits >> 16
            };
            assert_eq!(half as u16, to_bf16(*x), "value {i}: {x}");
        }
    }
}
