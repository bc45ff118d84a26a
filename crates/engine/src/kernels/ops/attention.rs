//! Causal grouped-query attention, rotary embedding and the SwiGLU product on the CPU in f32,
//! reading the fused projections' rows where they are.
//!
//! Why not candle's ops: for a prompt they split q, k and v into transposed copies, score
//! every query against every key (the masked half too), add the mask, take a scalar `exp` per
//! score and transpose the output back; at 512 positions that glue took as long as all the
//! matrix products of the layer. Here each task takes one kv head and a few queries, scores
//! only the keys a query sees, and writes its output rows in place; `exp` is a polynomial the
//! compiler vectorises. The task's query rows (its positions × the heads of its kv head) go in
//! blocks of sixteen through tiles of 64 keys, so each tile is read from memory once per
//! block; each query's sums still run in one fixed order, so a prompt's attention equals
//! token-by-token decoding's bit for bit, and every level computes the same bits. Every loop
//! is compiled for AVX-512 and AVX2, run at the level [`super::cpu`] chose.

#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::CpuLevel;
use crate::kernels::dense::SharedOut;
use rayon::prelude::*;
use std::ops::Range;

/// The shape of one layer's attention.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

/// One layer's cached keys or values: position `j` of kv head `h` at `h * head_stride + j * dim`.
#[derive(Clone, Copy)]
pub struct Cached<'a> {
    pub data: &'a [f32],
    pub head_stride: usize,
}

/// `e^x` in operations that vectorise: `2^n` from the exponent bits times a degree-6
/// polynomial for `2^f`, |f| ≤ ½. Relative error a few ulp near 0, growing as `|x|·6e-8` (the
/// rounding of `x·log₂e`); `x` is clamped to f32's range.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer
    let t = x.clamp(-87.0, 88.0) * std::f32::consts::LOG2_E;
    let r = t + MAGIC; // its low mantissa bits hold n = round(t)
    let n = r - MAGIC;
    let f = t - n;
    let p = 1.0
        + f * (std::f32::consts::LN_2
            + f * (0.240_226_5
                + f * (0.055_504_11
                    + f * (0.009_618_129 + f * (0.001_333_355 + f * 0.000_154_035_3)))));
    // 2^n from the bits of `r` (`0x4B40_0000 + n`), in integer operations: a float-to-int
    // cast would not vectorise (it saturates).
    p * f32::from_bits(r.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23)
}

/// Rotates the first `rotated` of the `dim` values of `heads` heads in each row of `rows`
/// (`width` values per row, the heads from column `first`) for positions `offset..`, in the
/// "rotate half" layout: `cos`/`sin` are `[positions, rotated / 2]`. The rest of each head
/// passes through (Qwen3.5 rotates a quarter of it; the others all).
#[allow(clippy::too_many_arguments)] // the layout of a fused QKV row: a struct would only rename them
pub fn rotate(
    rows: &mut [f32],
    width: usize,
    first: usize,
    heads: usize,
    dim: usize,
    rotated: usize,
    offset: usize,
    cos: &[f32],
    sin: &[f32],
) {
    let half = rotated / 2;
    for (t, row) in rows.chunks_exact_mut(width).enumerate() {
        let at = (offset + t) * half;
        let (cos, sin) = (&cos[at..at + half], &sin[at..at + half]);
        for x in row[first..first + heads * dim].chunks_exact_mut(dim) {
            let (a, b) = x[..rotated].split_at_mut(half);
            for i in 0..half {
                let (x0, x1) = (a[i], b[i]);
                a[i] = x0 * cos[i] - x1 * sin[i];
                b[i] = x1 * cos[i] + x0 * sin[i];
            }
        }
    }
}

/// Queries per task.
const QUERY_BLOCK: usize = 32;

/// Attention of `len` queries at positions `offset..offset + len` over keys and values
/// `0..offset + len` (each query sees the keys up to its own position). `q`: `len` rows of
/// `q_width` values, query head `h` at column `h * dim` (already rotated). Returns
/// `[len, heads.q * dim]`.
pub fn attend(
    q: &[f32],
    q_width: usize,
    len: usize,
    offset: usize,
    k: Cached<'_>,
    v: Cached<'_>,
    heads: Heads,
) -> Vec<f32> {
    attend_at(crate::kernels::cpu::active(), q, q_width, len, offset, k, v, heads)
}

/// [`attend`] at `level` (one this CPU runs).
#[allow(clippy::too_many_arguments)]
fn attend_at(
    level: crate::kernels::cpu::CpuLevel,
    q: &[f32],
    q_width: usize,
    len: usize,
    offset: usize,
    k: Cached<'_>,
    v: Cached<'_>,
    heads: Heads,
) -> Vec<f32> {
    let width = heads.q * heads.dim;
    let mut out = vec![0f32; len * width];
    let dst = SharedOut(out.as_mut_ptr());
    let blocks = len.div_ceil(QUERY_BLOCK);
    (0..heads.kv * blocks).into_par_iter().for_each_init(
        || Vec::with_capacity(offset + len + heads.dim),
        |scores, task| {
            let (kv_head, block) = (task % heads.kv, task / heads.kv);
            let t0 = block * QUERY_BLOCK;
            let t1 = (t0 + QUERY_BLOCK).min(len);
            let task = Task {
                q,
                q_width,
                offset,
                k,
                v,
                heads,
                kv_head,
                queries: (t0, t1),
            };
            attend_block(level, &task, scores, &dst);
        },
    );
    out
}

struct Task<'a> {
    q: &'a [f32],
    q_width: usize,
    offset: usize,
    k: Cached<'a>,
    v: Cached<'a>,
    heads: Heads,
    kv_head: usize,
    queries: (usize, usize),
}

/// [`attend_block_with`] compiled for `level`: at AVX2 with the scores' dot products written
/// in AVX2 (the compiler vectorises [`dot`] in 128-bit halves with shuffles), at AVX-512 two
/// query rows at a time in 512-bit vectors.
fn attend_block(
    level: crate::kernels::cpu::CpuLevel,
    task: &Task<'_>,
    scratch: &mut Vec<f32>,
    dst: &SharedOut,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
        unsafe fn avx512(task: &Task<'_>, scratch: &mut Vec<f32>, dst: &SharedOut) {
            attend_block_with::<true, true>(task, scratch, dst)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(task: &Task<'_>, scratch: &mut Vec<f32>, dst: &SharedOut) {
            attend_block_with::<true, false>(task, scratch, dst)
        }
        // SAFETY: `level` is one this CPU runs (`cpu::active()` or a test's
        // `cpu::runnable()`), whose features include these.
        match level {
            CpuLevel::Avx512 => return unsafe { avx512(task, scratch, dst) },
            CpuLevel::Avx2 | CpuLevel::AvxVnni => return unsafe { avx2(task, scratch, dst) },
            CpuLevel::Portable | CpuLevel::Neon => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level; // one loop at every level there
    attend_block_with::<false, false>(task, scratch, dst)
}

/// Query rows (a query of one head) that share each pass over the keys and values: 16 read
/// the cache half as often as 8 (1.5B Q4_K_M pp512 after 4096 positions +10 %; 32 and 64
/// measured the same as 16, with scores that outgrow a small L2 sooner).
const ROWS: usize = 16;

/// Keys per tile: a tile of keys or values (64 × 128 f32 at most, 32 KiB) stays in L1 while
/// every row of a block reads it, so the cache is read from memory once per block rather than
/// once per row (past a few thousand positions a head's keys and values outgrow L2).
const KEY_TILE: usize = 64;

/// One task's queries; `AVX2`: the caller runs with AVX2 enabled, and the scores take
/// [`x86::dot`] (the same sums as [`dot`]); `AVX512`: with AVX-512 too, and pairs of rows take
/// [`x86::dot8x2`].
#[inline(always)]
fn attend_block_with<const AVX2: bool, const AVX512: bool>(
    task: &Task<'_>,
    scratch: &mut Vec<f32>,
    dst: &SharedOut,
) {
    let Heads { q: qh, kv, dim } = task.heads;
    let group = qh / kv;
    let scale = 1.0 / (dim as f32).sqrt();
    let (t0, t1) = task.queries;
    let keys = task.offset + t1;
    let kh = &task.k.data[task.kv_head * task.k.head_stride..][..keys * dim];
    let vh = &task.v.data[task.kv_head * task.v.head_stride..][..keys * dim];
    scratch.clear();
    scratch.resize(ROWS * (keys + dim), 0.0);
    let (scores, acc) = scratch.split_at_mut(ROWS * keys);
    // Row `i`: position `t0 + i / group`, head `i % group` of the kv head's group. The heads
    // of one position see the same keys, so a block is (nearly) rectangular, and decoding's
    // one position still shares each key among the group.
    let row = |i: usize| (t0 + i / group, task.kv_head * group + i % group);
    let seen = |t: usize| task.offset + t + 1;
    let query = |i: usize| {
        let (t, head) = row(i);
        &task.q[t * task.q_width + head * dim..][..dim]
    };
    let rows = (t1 - t0) * group;
    for first in (0..rows).step_by(ROWS) {
        let block = first..(first + ROWS).min(rows);
        let last = seen(row(block.end - 1).0);
        // Each row's sums in one fixed order, whatever the tiles and the rows beside it: a
        // query's output does not depend on which other queries share its block (a prefill)
        // or not (a decoding step).
        for tile in (0..last).step_by(KEY_TILE) {
            let end = |b: usize| (tile + KEY_TILE).min(seen(row(first + b).0));
            let mut b = 0;
            while b < block.len() {
                // The rows taken now and the key each one's own scoring starts from.
                #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
                let (mut rows, mut start) = (1, tile);
                #[cfg(target_arch = "x86_64")]
                if AVX512 && b + 1 < block.len() && dim.is_multiple_of(8) {
                    // Two rows at once, each in its own half of the vectors: the keys both
                    // rows see, eight at a time, then each row's own rest.
                    let (qa, qb) = (query(first + b), query(first + b + 1));
                    let both = end(b).min(end(b + 1));
                    while start + 8 <= both {
                        let j = start;
                        // SAFETY: `AVX512` is set only by callers compiled with AVX-512;
                        // eight keys of `dim` values from key `j`.
                        let (da, db) = unsafe { x86::dot8x2(qa, qb, &kh[j * dim..(j + 8) * dim]) };
                        put8(&mut scores[b * keys + j..], da, scale);
                        put8(&mut scores[(b + 1) * keys + j..], db, scale);
                        start += 8;
                    }
                    rows = 2;
                }
                for r in b..b + rows {
                    let s = &mut scores[r * keys..];
                    score::<AVX2>(query(first + r), kh, start..end(r), scale, s);
                }
                b += rows;
            }
        }
        let mut inv = [0f32; ROWS];
        for (b, i) in block.clone().enumerate() {
            let s = &mut scores[b * keys..][..seen(row(i).0)];
            let max = largest(s);
            // The exponentials in a loop of their own, which vectorises.
            for v in s.iter_mut() {
                *v = exp(*v - max);
            }
            inv[b] = 1.0 / sum(s);
        }
        acc.fill(0.0);
        for tile in (0..last).step_by(KEY_TILE) {
            for (b, i) in block.clone().enumerate() {
                let end = (tile + KEY_TILE).min(seen(row(i).0));
                if end <= tile {
                    continue; // an earlier position of the block: its keys ended before
                }
                let p = &scores[b * keys + tile..b * keys + end];
                let (v, acc) = (&vh[tile * dim..end * dim], &mut acc[b * dim..(b + 1) * dim]);
                match dim {
                    64 => weigh_values::<64>(p, inv[b], v, acc),
                    128 => weigh_values::<128>(p, inv[b], v, acc),
                    _ => {
                        for (j, &p) in p.iter().enumerate() {
                            let p = p * inv[b];
                            for (a, &v) in acc.iter_mut().zip(&v[j * dim..(j + 1) * dim]) {
                                *a += p * v;
                            }
                        }
                    }
                }
            }
        }
        for (b, i) in block.enumerate() {
            let (t, head) = row(i);
            // SAFETY: output row `t` of this head belongs to this task alone (tasks split the
            // kv heads and the queries), and has `dim` values from `t * qh * dim + head * dim`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    acc[b * dim..].as_ptr(),
                    dst.at(t * qh * dim + head * dim),
                    dim,
                )
            };
        }
    }
}

/// `scores[j] = scale · q·k_j` for the keys `range`, each sum as [`dot`] takes it; `AVX2`: the
/// caller runs with AVX2 enabled.
#[inline(always)]
fn score<const AVX2: bool>(
    q: &[f32],
    kh: &[f32],
    range: Range<usize>,
    scale: f32,
    scores: &mut [f32],
) {
    let dim = q.len();
    let (j, end) = (range.start, range.end);
    #[cfg(target_arch = "x86_64")]
    let mut j = j;
    #[cfg(target_arch = "x86_64")]
    if AVX2 && dim.is_multiple_of(8) {
        while j + 8 <= end {
            // SAFETY: `AVX2` is set only by callers compiled with AVX2 enabled; eight keys of
            // `dim` values from key `j`.
            put8(
                &mut scores[j..],
                unsafe { x86::dot8(q, &kh[j * dim..(j + 8) * dim]) },
                scale,
            );
            j += 8;
        }
    }
    for j in j..end {
        let k = &kh[j * dim..(j + 1) * dim];
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: as above.
            scores[j] = unsafe { x86::dot(q, k) } * scale;
            continue;
        }
        scores[j] = dot(q, k) * scale;
    }
}

/// Eight keys' dot products, scaled, into `scores[..8]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn put8(scores: &mut [f32], d: [f32; 8], scale: f32) {
    for (s, d) in scores[..8].iter_mut().zip(d) {
        *s = d * scale;
    }
}

/// `acc += Σ_j (p_j · inv) · v_j` for the head sizes of Qwen models, with the sums in a local
/// array the compiler keeps in registers across the keys (a slice would be stored and loaded
/// at every key); the same operations in the same order as the general loop.
#[inline(always)]
fn weigh_values<const D: usize>(p: &[f32], inv: f32, vh: &[f32], out: &mut [f32]) {
    let mut acc: [f32; D] = out[..D].try_into().expect("a row of D sums");
    for (&p, v) in p.iter().zip(vh.chunks_exact(D)) {
        let p = p * inv;
        for (a, &v) in acc.iter_mut().zip(v) {
            *a += p * v;
        }
    }
    out[..D].copy_from_slice(&acc);
}

/// The largest of `s` (not empty), in eight lanes: the maximum does not depend on the order.
#[inline(always)]
fn largest(s: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let s8 = s.chunks_exact(8);
    let rest = s8
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for c in s8 {
        for l in 0..8 {
            lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
        }
    }
    lanes.iter().fold(rest, |m, &v| m.max(v))
}

/// `Σ s` in eight lanes, then the tail in order and a fixed tree: one order at every level,
/// which the compiler vectorises (a sum in order is a chain of dependent additions, a tenth of
/// the attention's time 4096 positions in).
#[inline(always)]
fn sum(s: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let s8 = s.chunks_exact(8);
    let tail = s8.remainder().iter().fold(0f32, |a, &v| a + v);
    for c in s8 {
        for l in 0..8 {
            lanes[l] += c[l];
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// `Σ a·b` in eight lanes, then a fixed tree of additions: the same value at every level (the
/// compiler vectorises the lanes; it never fuses or reorders float operations).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail = tail_dot(a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::dot`] in AVX2: the eight lanes in one vector, multiplied and added (not fused),
    /// the same tree of additions, so the same value bit for bit.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let body = n - n % 8;
        let mut acc = _mm256_setzero_ps();
        for i in (0..body).step_by(8) {
            let p = _mm256_mul_ps(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            );
            acc = _mm256_add_ps(acc, p);
        }
        let tail = super::tail_dot(&a[body..n], &b[body..n]);
        // Lanes l + (l + 4), then (0 + 1) + (2 + 3).
        let half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let pairs = _mm_hadd_ps(half, half);
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs))) + tail
    }

    /// [`dot`] of `q` with each of the eight keys in `k` (`q.len()` values each, a multiple
    /// of eight): the same products and sums per key, and the final additions of the eight
    /// done side by side — the halves, then two rounds of pairs — in the same tree.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot8(q: &[f32], k: &[f32]) -> [f32; 8] {
        let dim = q.len();
        assert!(dim.is_multiple_of(8) && k.len() == 8 * dim);
        let mut acc = [_mm256_setzero_ps(); 8];
        for i in (0..dim).step_by(8) {
            let x = _mm256_loadu_ps(q.as_ptr().add(i));
            for (j, acc) in acc.iter_mut().enumerate() {
                let p = _mm256_mul_ps(x, _mm256_loadu_ps(k.as_ptr().add(j * dim + i)));
                *acc = _mm256_add_ps(*acc, p);
            }
        }
        sums8(acc)
    }

    /// [`dot8`] of two queries `qa` and `qb` with the same eight keys: `qa` in the low half of
    /// each 512-bit vector and `qb` in the high half, each key's eight values broadcast to
    /// both, so each half does [`dot8`]'s operations for its query.
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn dot8x2(qa: &[f32], qb: &[f32], k: &[f32]) -> ([f32; 8], [f32; 8]) {
        let dim = qa.len();
        assert!(dim.is_multiple_of(8) && qb.len() == dim && k.len() == 8 * dim);
        let mut acc = [_mm512_setzero_ps(); 8];
        for i in (0..dim).step_by(8) {
            // 256-bit halves through their f64 views: AVX-512F has them, the f32 forms
            // need AVX-512DQ.
            let x = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(qa.as_ptr().add(i)))),
                _mm256_castps_pd(_mm256_loadu_ps(qb.as_ptr().add(i))),
            ));
            for (j, acc) in acc.iter_mut().enumerate() {
                let y = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(
                    k.as_ptr().add(j * dim + i).cast::<f64>(),
                )));
                *acc = _mm512_add_ps(*acc, _mm512_mul_ps(x, y));
            }
        }
        (
            sums8(acc.map(|a| _mm512_castps512_ps256(a))),
            sums8(acc.map(|a| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a))))),
        )
    }

    /// Eight keys' lanes to their sums, each in [`super::dot`]'s tree: lanes l + (l + 4); then
    /// (0 + 1), (2 + 3); then their sum.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sums8(acc: [__m256; 8]) -> [f32; 8] {
        let half = acc.map(|a| _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
        let pairs = [0, 2, 4, 6].map(|j| _mm_hadd_ps(half[j], half[j + 1]));
        let sums = _mm256_set_m128(
            _mm_hadd_ps(pairs[2], pairs[3]),
            _mm_hadd_ps(pairs[0], pairs[1]),
        );
        // The empty tail's sum, added as the one-key product adds it.
        let sums = _mm256_add_ps(sums, _mm256_set1_ps(super::tail_dot(&[], &[])));
        let mut out = [0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), sums);
        out
    }
}

/// The products past the last whole eight, summed in order.
#[inline(always)]
fn tail_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `silu(gate) · up` for rows holding `[gate | up]`, `n` values each; returns `[rows, n]`.
pub fn silu_mul(gate_up: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; gate_up.len() / 2];
    if out.len() >= 1 << 14 {
        out.par_chunks_mut(n)
            .zip(gate_up.par_chunks_exact(2 * n))
            .for_each(|(o, gu)| silu_mul_row(gu, o));
    } else {
        out.chunks_mut(n)
            .zip(gate_up.chunks_exact(2 * n))
            .for_each(|(o, gu)| silu_mul_row(gu, o));
    }
    out
}

simd_dispatch!(fn silu_mul_row(gate_up: &[f32], out: &mut [f32]) => silu_mul_row_portable);

#[inline(always)]
fn silu_mul_row_portable(gate_up: &[f32], out: &mut [f32]) {
    let (gate, up) = gate_up.split_at(out.len());
    for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu;

    #[test]
    fn exp_matches_the_library_to_a_few_ulp() {
        // Softmax and SiLU arguments down to the clamp at -87 (below, the result is ~0).
        for i in -1990..=2000 {
            let x = i as f32 * 0.0437;
            let (got, want) = (exp(x), x.exp());
            assert!(
                (got - want).abs() <= (4.0 * f32::EPSILON + 1e-7 * x.abs()) * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp(-1000.0) < 1e-37 && exp(-1000.0) >= 0.0);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
    }

    /// Against a plain softmax(q·kᵀ/√d + causal mask)·v in f64, with grouped heads and a
    /// cache that already holds positions before the queries.
    /// The AVX2 dot product of the scores equals the portable one bit for bit.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx2_dot_equals_the_portable_one() {
        if cpu::detected() < CpuLevel::Avx2 {
            return;
        }
        for n in [8, 13, 64, 128, 131] {
            let a: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.1) / 7.3).collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5 % 11) as f32 - 4.9) / 3.7).collect();
            // SAFETY: AVX2 and FMA were detected.
            let fast = unsafe { super::x86::dot(&a, &b) };
            assert_eq!(fast.to_bits(), dot(&a, &b).to_bits(), "n={n}");
        }
        for n in [8, 64, 128] {
            let q: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.1) / 7.3).collect();
            let k: Vec<f32> = (0..8 * n)
                .map(|i| ((i * 5 % 11) as f32 - 4.9) / 3.7)
                .collect();
            // SAFETY: AVX2 and FMA were detected.
            let eight = unsafe { super::x86::dot8(&q, &k) };
            for (j, d) in eight.iter().enumerate() {
                let one = dot(&q, &k[j * n..(j + 1) * n]);
                assert_eq!(d.to_bits(), one.to_bits(), "n={n}, key {j}");
            }
        }
    }

    /// A prompt's attention equals decoding its positions one at a time, bit for bit, with
    /// more keys than a tile and more query rows than a block.
    #[test]
    fn a_prompt_attends_as_its_positions_decoded_one_by_one() {
        let heads = Heads {
            q: 6,
            kv: 2,
            dim: 64,
        };
        let (offset, len, cap) = (90, 45, 160);
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let width = heads.q * heads.dim;
        let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
        let k: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 7))
            .collect();
        let v: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 11))
            .collect();
        let cached = |data| Cached {
            data,
            head_stride: cap * heads.dim,
        };
        let prompt = attend(&q, width, len, offset, cached(&k), cached(&v), heads);
        for t in 0..len {
            let row = &q[t * width..(t + 1) * width];
            let one = attend(row, width, 1, offset + t, cached(&k), cached(&v), heads);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&prompt[t * width..(t + 1) * width]),
                bits(&one),
                "position {t}"
            );
        }
    }

    #[test]
    fn attention_is_the_same_at_every_level() {
        // Head sizes of Qwen's models; queries that end inside a block, a pair and a tile.
        for (dim, offset, len) in [(64, 90, 45), (128, 100, 33), (128, 0, 9), (64, 5, 1)] {
            let heads = Heads { q: 6, kv: 2, dim };
            let cap = offset + len;
            let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
            let width = heads.q * dim;
            let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
            let k: Vec<f32> = (0..heads.kv * cap * dim).map(|i| value(i, 7)).collect();
            let v: Vec<f32> = (0..heads.kv * cap * dim).map(|i| value(i, 11)).collect();
            let cached = |data| Cached {
                data,
                head_stride: cap * dim,
            };
            let at = |level| {
                attend_at(level, &q, width, len, offset, cached(&k), cached(&v), heads)
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>()
            };
            let portable = at(crate::kernels::cpu::CpuLevel::Portable);
            for level in crate::kernels::cpu::runnable() {
                assert_eq!(at(level), portable, "{level}, dim {dim}, {offset}+{len}");
            }
        }
    }

    #[test]
    fn attention_matches_the_plain_formula() {
        // 64 and 128 take the register-held value sums; 8 the general loop.
        // Then more keys than a tile (64) and more queries than a task (32).
        for (dim, offset, len) in [(8, 5, 19), (64, 5, 19), (128, 5, 19), (64, 100, 45)] {
            attention_matches_the_plain_formula_at(dim, offset, len);
        }
    }

    fn attention_matches_the_plain_formula_at(dim: usize, offset: usize, len: usize) {
        let heads = Heads { q: 6, kv: 2, dim };
        let cap = offset + len + 3;
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let q_width = heads.q * heads.dim + 3; // rows wider than the queries, as in fused q/k/v
        let q: Vec<f32> = (0..len * q_width).map(|i| value(i, 13)).collect();
        let k: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 7))
            .collect();
        let v: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 11))
            .collect();
        let stride = cap * heads.dim;
        let got = attend(
            &q,
            q_width,
            len,
            offset,
            Cached {
                data: &k,
                head_stride: stride,
            },
            Cached {
                data: &v,
                head_stride: stride,
            },
            heads,
        );
        let d = heads.dim;
        let group = heads.q / heads.kv;
        for t in 0..len {
            for h in 0..heads.q {
                let g = h / group;
                let qv = &q[t * q_width + h * d..][..d];
                let seen = offset + t + 1;
                let s: Vec<f64> = (0..seen)
                    .map(|j| {
                        let key = &k[g * stride + j * d..][..d];
                        qv.iter().zip(key).map(|(a, b)| (a * b) as f64).sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for i in 0..d {
                    let want: f64 = (0..seen)
                        .map(|j| e[j] / sum * v[g * stride + j * d + i] as f64)
                        .sum();
                    let have = got[t * heads.q * d + h * d + i] as f64;
                    assert!(
                        (have - want).abs() < 1e-5,
                        "dim={dim} t={t} h={h} i={i}: {have} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn rotation_and_swiglu_match_their_formulas() {
        let (dim, half) = (4, 2);
        let cos: Vec<f32> = (0..3 * half).map(|i| (i as f32 * 0.3).cos()).collect();
        let sin: Vec<f32> = (0..3 * half).map(|i| (i as f32 * 0.3).sin()).collect();
        // One row: a column before the head, one head at position 1 + 1.
        let mut row = vec![9.0, 1.0, 2.0, 3.0, 4.0];
        rotate(&mut row, 5, 1, 1, dim, dim, 2, &cos, &sin);
        let (c, s) = (&cos[4..6], &sin[4..6]);
        let want = [
            9.0,
            1.0 * c[0] - 3.0 * s[0],
            2.0 * c[1] - 4.0 * s[1],
            3.0 * c[0] + 1.0 * s[0],
            4.0 * c[1] + 2.0 * s[1],
        ];
        for (g, w) in row.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{row:?} vs {want:?}");
        }
        let gate_up = [1.0f32, -2.0, 0.5, 3.0];
        let out = silu_mul(&gate_up, 2);
        for (i, o) in out.iter().enumerate() {
            let g = gate_up[i] as f64;
            let want = g / (1.0 + (-g).exp()) * gate_up[2 + i] as f64;
            assert!((*o as f64 - want).abs() < 1e-6, "{out:?}");
        }
    }
}
