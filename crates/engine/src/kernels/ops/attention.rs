//! Causal grouped-query attention, rotary embedding and the SwiGLU product on the CPU in f32,
//! reading the fused projections' rows where they are and the KV cache in its type.
//!
//! Why not candle's ops: for a prompt they split q, k and v into transposed copies, score
//! every query against every key (the masked half too), add the mask, take a scalar `exp` per
//! score and transpose the output back; at 512 positions that glue took as long as all the
//! matrix products of the layer. Here each task takes one kv head and up to 32 positions
//! (their rows: positions × the heads of the kv head) and goes through the keys in tiles of
//! 64 with an online softmax, never holding a queries × keys score matrix: a tile of keys is
//! widened and transposed once per task, scored against several rows at a time with the sums
//! in registers, each row's running maximum, sum and weighted values updated, and the tile's
//! values added in. Keys come in spans of 1024 folded in order, which a decoding step splits
//! across threads (split-K). Every score and weighted value is a chain of fused
//! multiply-adds in one fixed order whatever rows share its pass, so a prompt's attention
//! equals token-by-token decoding's bit for bit, and every level computes the same bits: the
//! x86 bodies (`kernels/x86/attention.rs`) at AVX2 and AVX-512, the portable loops
//! elsewhere (libm's exact `fmaf` where the CPU has no FMA), at the level the caller's kernel
//! context names. With bf16 products ([`Products::Bf16`], on CPUs with AVX-512 BF16) the
//! queries, keys, values and weights are rounded to bfloat16 and multiplied in pairs
//! (`kernels/x86/attention_bf16.rs`), twice the multiply-adds per instruction, each sum still
//! one fixed chain: a prompt still attends as decoded, though not in f32's bits.

use crate::kernels::cpu::CpuLevel;
use crate::kernels::dense::SharedOut;
#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::attention as x86;
#[cfg(target_arch = "x86_64")]
use crate::kernels::x86::attention_bf16 as x86_bf16;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::Range;

/// The precision of attention's products (its sums, maximum and softmax are f32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Products {
    /// f32 throughout: every level computes the same bits.
    F32,
    /// Queries, keys, values and softmax weights rounded to bfloat16 and multiplied in pairs
    /// (`vdpbf16ps`) where the CPU has AVX-512 BF16 and a head's values are a multiple of 64,
    /// about twice the multiply-adds per instruction; f32 elsewhere. As a GPU's bf16
    /// attention; a prompt still attends as its positions decoded one by one.
    #[default]
    Bf16,
}

impl Products {
    /// `f32` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }

    /// `f32` or `bf16`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Some(Self::F32),
            "bf16" => Some(Self::Bf16),
            _ => None,
        }
    }

    /// The products taken at `level` on this CPU (bf16 only at AVX-512 with AVX-512 BF16).
    pub fn at(self, level: CpuLevel) -> Self {
        match self {
            Self::Bf16 if level == CpuLevel::Avx512 && cpu_has_bf16() => Self::Bf16,
            _ => Self::F32,
        }
    }

    /// Whether attention at `level` with `dim` values a head takes bf16 products here.
    pub fn bf16_here(self, level: CpuLevel, dim: usize) -> bool {
        self.at(level) == Self::Bf16 && dim.is_multiple_of(64)
    }
}

/// Whether this CPU has AVX-512 BF16 (detected once).
fn cpu_has_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The shape of one layer's attention.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    /// Query heads.
    pub q: usize,
    /// Key/value heads (each shared by `q / kv` query heads).
    pub kv: usize,
    /// Values per head.
    pub dim: usize,
}

/// One layer's cached keys or values: pieces of consecutive positions, in order from 0 (a
/// cache's shared segments, then its own buffer).
#[derive(Clone, Copy)]
pub struct Cached<'a> {
    /// The pieces, each starting where the one before it ends.
    pub pieces: &'a [Piece<'a>],
}

/// Positions `start..start + len` of a layer's keys or values: position `start + j` of kv
/// head `h` at `h * head_stride + j * dim` of `data`.
#[derive(Clone, Copy)]
pub struct Piece<'a> {
    /// Its first position.
    pub start: usize,
    /// Positions it holds.
    pub len: usize,
    /// The buffer, from the piece's first position of head 0.
    pub data: Stored<'a>,
    /// Values from one kv head to the next (the buffer's capacity × `dim`).
    pub head_stride: usize,
}

/// A cache buffer in its dtype ([`crate::cache::cache_type`]).
#[derive(Clone, Copy)]
pub enum Stored<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// IEEE half precision.
    F16(&'a [f16]),
    /// bfloat16.
    Bf16(&'a [bf16]),
    /// llama.cpp's q8_0 blocks ([`crate::cache::quantized`]): a row of `dim` values is
    /// `dim / 32 * 34` bytes.
    Q8_0(&'a [u8]),
    /// llama.cpp's q4_0 blocks: a row of `dim` values is `dim / 32 * 18` bytes.
    Q4_0(&'a [u8]),
}

impl Stored<'_> {
    /// Elements (values, or bytes of blocks) one row of `dim` values takes.
    fn row(&self, dim: usize) -> usize {
        match self {
            Stored::Q8_0(_) => dim / 32 * 34,
            Stored::Q4_0(_) => dim / 32 * 18,
            _ => dim,
        }
    }
}

impl Cached<'_> {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.pieces.last().map_or(0, |p| p.start + p.len)
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the pieces follow one another from position 0 to `n`.
    pub fn holds(&self, n: usize) -> bool {
        let mut at = 0;
        let consecutive = self.pieces.iter().all(|p| {
            let ok = p.start == at;
            at += p.len;
            ok
        });
        consecutive && at == n
    }

    /// Positions `range` of kv head `head` (`dim` values each) in f32: in place where they lie
    /// in one f32 piece, else widened or gathered into `buf` (by [`x86`]'s bodies at `AVX2`
    /// and above, whose callers have F16C).
    #[inline(always)]
    fn rows<'b, const BODY: u8>(
        &'b self,
        head: usize,
        range: Range<usize>,
        dim: usize,
        buf: &'b mut Vec<f32>,
    ) -> &'b [f32] {
        let mut i = self
            .pieces
            .partition_point(|p| p.start + p.len <= range.start);
        if let Some(p) = self.pieces.get(i) {
            if let (Stored::F32(d), true) = (p.data, range.end <= p.start + p.len) {
                let at = head * p.head_stride + (range.start - p.start) * dim;
                return &d[at..at + range.len() * dim];
            }
        }
        let Some(row) = self.pieces.first().map(|p| p.data.row(dim)) else {
            buf.clear();
            return buf;
        };
        buf.resize(range.len() * dim, 0.0);
        let mut at = range.start;
        while at < range.end {
            let Some(p) = self.pieces.get(i) else {
                // Past the cache (callers check its length): nothing to read.
                buf[(at - range.start) * dim..].fill(0.0);
                break;
            };
            let end = range.end.min(p.start + p.len);
            let a = head * p.head_stride + (at - p.start) * row;
            let z = a + (end - at) * row;
            widen::<BODY>(
                p.data,
                a..z,
                &mut buf[(at - range.start) * dim..(end - range.start) * dim],
            );
            at = end;
            i += 1;
        }
        buf
    }
}

/// Elements `range` of `data` (whole rows) as f32 values, into `out`.
#[inline(always)]
fn widen<const BODY: u8>(data: Stored<'_>, range: Range<usize>, out: &mut [f32]) {
    use crate::cache::{cache_type::CacheType, quantized::dequantize};
    let (a, z) = (range.start, range.end);
    match data {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as below; `out` holds the blocks' values.
        Stored::Q8_0(d) if BODY >= AVX2 => unsafe { x86::dequantize_q8_0(&d[a..z], out) },
        #[cfg(target_arch = "x86_64")]
        Stored::Q4_0(d) if BODY >= AVX2 => unsafe { x86::dequantize_q4_0(&d[a..z], out) },
        Stored::Q8_0(d) => dequantize(CacheType::Q8_0, &d[a..z], out),
        Stored::Q4_0(d) => dequantize(CacheType::Q4_0, &d[a..z], out),
        Stored::F32(d) => out.copy_from_slice(&d[a..z]),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `BODY` is AVX2 or more only in callers compiled with AVX2 and F16C (every
        // x86 level above the portable one has it); `out` holds `z - a` values.
        Stored::F16(d) if BODY >= AVX2 => unsafe { x86::widen_f16(&d[a..z], out) },
        #[cfg(target_arch = "x86_64")]
        Stored::Bf16(d) if BODY >= AVX2 => unsafe { x86::widen_bf16(&d[a..z], out) },
        Stored::F16(d) => d[a..z].convert_to_f32_slice(out),
        Stored::Bf16(d) => d[a..z].convert_to_f32_slice(out),
    }
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

/// Keys per tile: a tile's keys (transposed) and values, at most 64 × 256 f32 each, stay in
/// L1/L2 while every query row of a task takes them, so the cache is read from memory once
/// per task rather than once per row.
const TILE: usize = 64;

/// Keys per span: a query's keys are taken in spans of this many, each span's softmax
/// state from nothing, then the spans' states folded in order. Decoding splits one
/// sequence's spans across threads (split-K) and a prompt takes them in turn on one: the
/// same fold, so the same bits either way.
const SPAN: usize = 16 * TILE;

/// Query positions per task of a prompt.
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
    attend_at(
        crate::kernels::cpu::default_level(),
        Products::F32,
        q,
        q_width,
        len,
        offset,
        k,
        v,
        heads,
    )
}

/// [`attend`] at `level` (one this CPU runs), its products in `products`.
#[allow(clippy::too_many_arguments)]
pub fn attend_at(
    level: crate::kernels::cpu::CpuLevel,
    products: Products,
    q: &[f32],
    q_width: usize,
    len: usize,
    offset: usize,
    k: Cached<'_>,
    v: Cached<'_>,
    heads: Heads,
) -> Vec<f32> {
    let Heads { q: qh, kv, dim } = heads;
    let bf16 = products.bf16_here(level, dim);
    let keys = offset + len;
    let spans = keys.div_ceil(SPAN);
    let blocks = len.div_ceil(QUERY_BLOCK);
    let mut out = vec![0f32; len * qh * dim];
    let job = |kv_head: usize, block: usize, spans: Range<usize>| Job {
        q,
        q_width,
        offset,
        k,
        v,
        heads,
        kv_head,
        positions: block * QUERY_BLOCK..((block + 1) * QUERY_BLOCK).min(len),
        spans,
    };
    // Heads × query blocks give every thread work for a prompt; a decoding step at depth
    // (one query block, two to eight kv heads) also splits its keys.
    if spans == 1 || kv * blocks >= 2 * rayon::current_num_threads() {
        let dst = SharedOut(out.as_mut_ptr());
        (0..kv * blocks).into_par_iter().for_each(|task| {
            let job = job(task % kv, task / kv, 0..spans);
            SCRATCH.with_borrow_mut(|scratch| run(level, bf16, &job, scratch, &Sink::Out(&dst)));
        });
        return out;
    }
    let rows = len * qh;
    let mut states = vec![0f32; spans * rows * dim];
    let mut softmax = vec![(f32::NEG_INFINITY, 0f32); spans * rows];
    let sink = Sink::Span {
        acc: SharedOut(states.as_mut_ptr()),
        softmax: SharedPair(softmax.as_mut_ptr()),
        rows,
    };
    (0..spans * kv * blocks).into_par_iter().for_each(|task| {
        let (span, rest) = (task / (kv * blocks), task % (kv * blocks));
        let job = job(rest % kv, rest / kv, span..span + 1);
        SCRATCH.with_borrow_mut(|scratch| run(level, bf16, &job, scratch, &sink));
    });
    out.par_chunks_mut(dim).enumerate().for_each(|(r, out)| {
        let mut total = State::empty(dim);
        for s in 0..spans {
            let (m, l) = softmax[s * rows + r];
            total.fold(m, l, &states[(s * rows + r) * dim..][..dim]);
        }
        total.finish(out);
    });
    out
}

/// One task: the query rows of one kv head at some positions, over some spans of keys.
struct Job<'a> {
    q: &'a [f32],
    q_width: usize,
    offset: usize,
    k: Cached<'a>,
    v: Cached<'a>,
    heads: Heads,
    kv_head: usize,
    positions: Range<usize>,
    spans: Range<usize>,
}

/// Where a task's rows go: normalised into the output (it took all their spans), or one
/// span's softmax state (max, sum) and weighted values per row, `rows` to a span, for the
/// fold that follows.
enum Sink<'a> {
    Out(&'a SharedOut),
    Span {
        acc: SharedOut,
        softmax: SharedPair,
        rows: usize,
    },
}

struct SharedPair(*mut (f32, f32));
// SAFETY: used only for writes at indices that the tasks partition between them.
unsafe impl Sync for SharedPair {}

thread_local! {
    /// Each thread's buffers, kept from one call to the next: a decoding step calls once per
    /// layer, and allocating them per call (two dozen buffers from one contended arena) cost
    /// a tenth of a 0.5B's decoding.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// A task's buffers, kept across the tasks a thread takes.
#[derive(Default)]
struct Scratch {
    /// Its query rows, scaled by 1/√d.
    q: Vec<f32>,
    /// One tile of keys, transposed: `[dim, TILE]`.
    kt: Vec<f32>,
    /// One tile of keys and of values widened to f32, for a cache in 16 bits.
    kf: Vec<f32>,
    vf: Vec<f32>,
    /// With bf16 products: the query rows, the tile's keys on their way to `kt`, its values
    /// and each row's weights, as pairs of bf16 values (`x86/attention_bf16.rs`'s layouts).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    qb: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    kb: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    vb: Vec<f32>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pb: Vec<f32>,
    /// Each row's scores, then weights, for the tile: `[rows, TILE]`.
    p: Vec<f32>,
    /// Each row's state over the span now taken, and over the spans before it.
    span: Vec<State>,
    total: Vec<State>,
}

/// One query row's online softmax: the largest score seen, the sum of `e^(s - max)` and the
/// values weighted by those.
#[derive(Clone)]
struct State {
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl State {
    fn empty(dim: usize) -> Self {
        Self {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            acc: vec![0.0; dim],
        }
    }

    fn clear(&mut self) {
        self.max = f32::NEG_INFINITY;
        self.sum = 0.0;
        self.acc.fill(0.0);
    }

    /// Folds in another span's state; an empty one (sum 0: no keys) changes nothing.
    #[inline(always)]
    fn fold(&mut self, max: f32, sum: f32, acc: &[f32]) {
        if sum == 0.0 {
            return;
        }
        if self.sum == 0.0 {
            (self.max, self.sum) = (max, sum);
            self.acc.copy_from_slice(acc);
            return;
        }
        let top = self.max.max(max);
        let (a, b) = (exp(self.max - top), exp(max - top));
        self.sum = sum.mul_add(b, self.sum * a);
        for (t, &x) in self.acc.iter_mut().zip(acc) {
            *t = x.mul_add(b, *t * a);
        }
        self.max = top;
    }

    /// The attention output: the weighted values over the sum.
    fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.sum;
        for (o, &a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// [`run_rows`] compiled for `level`, with the rows each pass takes sized to its registers
/// (sixteen vectors of sums): four at AVX-512, two at AVX2, one elsewhere. A row's sums are
/// the same whichever rows share its pass, and `mul_add` is one rounding at every level (a
/// fused instruction, or the library's exact `fmaf`), so every level computes the same bits.
/// `bf16` ([`Products::bf16_here`]): the AVX-512 BF16 bodies.
fn run(
    level: crate::kernels::cpu::CpuLevel,
    bf16: bool,
    job: &Job<'_>,
    scratch: &mut Scratch,
    sink: &Sink,
) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma,f16c")]
        unsafe fn avx512_bf16(job: &Job<'_>, scratch: &mut Scratch, sink: &Sink) {
            run_rows::<4, BF16>(job, scratch, sink)
        }
        if bf16 {
            // SAFETY: `bf16` only where the CPU has AVX-512 BF16 at level AVX-512.
            return unsafe { avx512_bf16(job, scratch, sink) };
        }
        #[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
        unsafe fn avx512(job: &Job<'_>, scratch: &mut Scratch, sink: &Sink) {
            run_rows::<4, AVX512>(job, scratch, sink)
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn avx2(job: &Job<'_>, scratch: &mut Scratch, sink: &Sink) {
            run_rows::<2, AVX2>(job, scratch, sink)
        }
        // SAFETY: `level` is one this CPU runs (`cpu::default_level()` or a test's
        // `cpu::runnable()`), whose features include these.
        match level {
            CpuLevel::Avx512 => return unsafe { avx512(job, scratch, sink) },
            CpuLevel::Avx2 | CpuLevel::AvxVnni => return unsafe { avx2(job, scratch, sink) },
            CpuLevel::Portable | CpuLevel::Neon => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, bf16);
    run_rows::<1, PORTABLE>(job, scratch, sink)
}

/// The bodies [`run_rows`] takes: the portable ones, or [`x86`]'s at AVX2 or AVX-512 (its
/// callers compiled with those features).
const PORTABLE: u8 = 0;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const AVX2: u8 = 1;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const AVX512: u8 = 2;
/// AVX-512 with its products in bf16 ([`x86_bf16`]).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const BF16: u8 = 3;

/// One task, `R` query rows at a time. Row `i` is position `t0 + i / group`, head `i % group`
/// of the kv head's group: the heads of one position see the same keys, and rows in order
/// see ever more keys.
#[inline(always)]
fn run_rows<const R: usize, const BODY: u8>(job: &Job<'_>, s: &mut Scratch, sink: &Sink) {
    let Heads { q: qh, kv, dim } = job.heads;
    let group = qh / kv;
    let (t0, t1) = (job.positions.start, job.positions.end);
    let n = (t1 - t0) * group;
    let row = |i: usize| (t0 + i / group, job.kv_head * group + i % group);
    let limit = |i: usize| job.offset + t0 + i / group + 1;
    let keys = job.offset + t1;
    let scale = 1.0 / (dim as f32).sqrt();
    s.q.clear();
    for i in 0..n {
        let (t, head) = row(i);
        let q = &job.q[t * job.q_width + head * dim..][..dim];
        s.q.extend(q.iter().map(|x| x * scale));
    }
    #[cfg(target_arch = "x86_64")]
    if BODY == BF16 {
        s.qb.resize(n * dim / 2, 0.0);
        s.pb.resize(n * TILE / 2, 0.0);
        // SAFETY: `BF16` only in callers compiled with AVX-512 BF16, for heads of a multiple
        // of 64 values.
        unsafe { x86_bf16::pairs(&s.q, &mut s.qb) };
    }
    s.kt.resize(dim * TILE, 0.0);
    s.p.resize(n * TILE, 0.0);
    s.span.resize_with(n, || State::empty(dim));
    s.total.resize_with(n, || State::empty(dim));
    for st in s.span.iter_mut().chain(s.total.iter_mut()) {
        st.acc.resize(dim, 0.0);
        st.clear();
    }
    // The first row that sees key `j` (rows before it end earlier).
    let first_seeing = |j: usize| j.saturating_sub(job.offset + t0) * group;
    for span in job.spans.clone() {
        let (a, z) = (span * SPAN, ((span + 1) * SPAN).min(keys));
        if a >= keys {
            break;
        }
        for st in &mut s.span[first_seeing(a).min(n)..] {
            st.clear();
        }
        for tile in (a..z).step_by(TILE) {
            let nk = TILE.min(keys - tile);
            let k = job
                .k
                .rows::<BODY>(job.kv_head, tile..tile + nk, dim, &mut s.kf);
            #[cfg(target_arch = "x86_64")]
            if BODY == BF16 {
                // SAFETY: as for `pairs` above; `k` holds `nk <= TILE` keys.
                unsafe { x86_bf16::pack_keys(k, dim, &mut s.kb, &mut s.kt) }
            } else if BODY >= AVX2 {
                // SAFETY: `BODY` is AVX2 or more only in callers compiled with AVX2; `k`
                // holds `nk <= TILE` keys, `s.kt` `dim * TILE` values.
                unsafe { x86::pack_transposed(k, dim, &mut s.kt) }
            } else {
                pack_transposed(k, dim, &mut s.kt);
            }
            #[cfg(not(target_arch = "x86_64"))]
            pack_transposed(k, dim, &mut s.kt);
            let vt = job
                .v
                .rows::<BODY>(job.kv_head, tile..tile + nk, dim, &mut s.vf);
            #[cfg(target_arch = "x86_64")]
            if BODY == BF16 {
                s.vb.resize(TILE / 2 * dim, 0.0);
                // SAFETY: as above; `vt` holds `nk <= TILE` values of `dim`.
                unsafe { x86_bf16::pack_values(vt, dim, &mut s.vb) };
            }
            let first = first_seeing(tile).min(n);
            let mut i = first;
            while i < n {
                // AVX-512 takes the rows four at a time and the rest together (a kv head of
                // seven query heads decodes as four and three, each tile loaded twice).
                let take = match BODY {
                    AVX512 | BF16 => (n - i).min(4),
                    _ if n - i >= R => R,
                    _ => 1,
                };
                let (q, p) = (&s.q[i * dim..(i + take) * dim], &mut s.p[i * TILE..]);
                #[cfg(target_arch = "x86_64")]
                match BODY {
                    // SAFETY: as above; `qb` holds the rows' pairs, `p` their tiles.
                    BF16 => unsafe {
                        let (q, half) = (&s.qb[i * dim / 2..], dim / 2);
                        match take {
                            4 => x86_bf16::scores::<4>(q, &s.kt, half, p),
                            3 => x86_bf16::scores::<3>(q, &s.kt, half, p),
                            2 => x86_bf16::scores::<2>(q, &s.kt, half, p),
                            _ => x86_bf16::scores::<1>(q, &s.kt, half, p),
                        }
                    },
                    // SAFETY: as above, with AVX-512F at `AVX512`; `q` holds `take` rows,
                    // `p` their tiles.
                    AVX512 => unsafe {
                        match take {
                            4 => x86::scores_avx512::<4>(q, &s.kt, dim, p),
                            3 => x86::scores_avx512::<3>(q, &s.kt, dim, p),
                            2 => x86::scores_avx512::<2>(q, &s.kt, dim, p),
                            _ => x86::scores_avx512::<1>(q, &s.kt, dim, p),
                        }
                    },
                    // SAFETY: as above; `q` holds `take` rows, `p` their tiles.
                    AVX2 if take == 2 => unsafe { x86::scores_avx2_pair(q, &s.kt, dim, p) },
                    AVX2 => unsafe { x86::scores_avx2(q, &s.kt, dim, p) },
                    _ => scores::<1>(q, &s.kt, dim, p),
                }
                #[cfg(not(target_arch = "x86_64"))]
                if take == R {
                    scores::<R>(q, &s.kt, dim, p)
                } else {
                    scores::<1>(q, &s.kt, dim, p)
                }
                i += take;
            }
            for (i, st) in s.span.iter_mut().enumerate().skip(first) {
                let p: &mut [f32; TILE] = (&mut s.p[i * TILE..(i + 1) * TILE])
                    .try_into()
                    .expect("a tile");
                st.soften(&mut *p, (limit(i) - tile).min(TILE));
                #[cfg(target_arch = "x86_64")]
                if BODY == BF16 {
                    // SAFETY: as above; a tile's weights are 64 values.
                    unsafe { x86_bf16::pairs(&p[..], &mut s.pb[i * TILE / 2..]) };
                }
            }
            let mut i = first;
            while i < n {
                let take = match BODY {
                    AVX512 | BF16 if dim % 64 == 0 => (n - i).min(4),
                    _ if n - i >= R && dim % 16 == 0 => R,
                    _ => 1,
                };
                // The keys the last (latest) row of the pass sees; earlier rows' weights for
                // keys they do not see are 0.
                let seen = (limit(i + take - 1) - tile).min(nk);
                let (p, v) = (&s.p[i * TILE..], &vt[..seen * dim]);
                let rows = &mut s.span[i..i + take];
                #[cfg(target_arch = "x86_64")]
                if BODY == BF16 {
                    let (w, pairs) = (&s.pb[i * TILE / 2..], seen.div_ceil(2));
                    let mut acc = rows.iter_mut().map(|r| r.acc.as_mut_ptr());
                    let mut next = || acc.next().unwrap_or(std::ptr::null_mut());
                    let vb = &s.vb[..pairs * dim];
                    // SAFETY: as above; `w` holds the rows' weights as pairs, `vb` the tile's
                    // `pairs` pairs of values, each row's own `acc` `dim` sums.
                    unsafe {
                        use x86_bf16::weigh;
                        match take {
                            4 => weigh::<4>(w, vb, pairs, dim, [(); 4].map(|_| next())),
                            3 => weigh::<3>(w, vb, pairs, dim, [(); 3].map(|_| next())),
                            2 => weigh::<2>(w, vb, pairs, dim, [(); 2].map(|_| next())),
                            _ => weigh::<1>(w, vb, pairs, dim, [next()]),
                        }
                    }
                    i += take;
                    continue;
                }
                #[cfg(target_arch = "x86_64")]
                if dim % 64 == 0 && BODY >= AVX2 {
                    // SAFETY: as above; `p` holds the rows' tiles, `v` `seen` values, each
                    // row's own `acc` `dim` sums.
                    let mut acc = rows.iter_mut().map(|r| r.acc.as_mut_ptr());
                    let mut next = || acc.next().unwrap_or(std::ptr::null_mut());
                    match BODY {
                        AVX512 => unsafe {
                            match take {
                                4 => {
                                    x86::weigh_avx512::<4>(p, v, seen, dim, [(); 4].map(|_| next()))
                                }
                                3 => {
                                    x86::weigh_avx512::<3>(p, v, seen, dim, [(); 3].map(|_| next()))
                                }
                                2 => {
                                    x86::weigh_avx512::<2>(p, v, seen, dim, [(); 2].map(|_| next()))
                                }
                                _ => x86::weigh_avx512::<1>(p, v, seen, dim, [next()]),
                            }
                        },
                        // SAFETY: as above, two rows' own sums.
                        _ if take == 2 => unsafe {
                            x86::weigh_avx2_pair(p, v, seen, dim, [next(), next()])
                        },
                        // SAFETY: as above.
                        _ => unsafe { x86::weigh_avx2(p, v, seen, dim, &mut rows[0].acc) },
                    }
                    i += take;
                    continue;
                }
                let all = take == R;
                match dim {
                    _ if all && dim % 64 == 0 => weigh::<R, 64>(p, v, seen, dim, rows),
                    _ if all && dim % 16 == 0 => weigh::<R, 16>(p, v, seen, dim, rows),
                    _ if dim % 64 == 0 => weigh::<1, 64>(p, v, seen, dim, rows),
                    _ if dim % 16 == 0 => weigh::<1, 16>(p, v, seen, dim, rows),
                    _ if dim % 8 == 0 => weigh::<1, 8>(p, v, seen, dim, rows),
                    _ => weigh::<1, 1>(p, v, seen, dim, rows),
                }
                i += take;
            }
        }
        match sink {
            Sink::Out(_) => {
                for (t, st) in s.total.iter_mut().zip(&s.span).skip(first_seeing(a)) {
                    t.fold(st.max, st.sum, &st.acc);
                }
            }
            Sink::Span { acc, softmax, rows } => {
                for (i, st) in s.span.iter().enumerate().skip(first_seeing(a)) {
                    let (t, head) = row(i);
                    let at = span * rows + t * qh + head;
                    // SAFETY: span `span` of row (t, head) belongs to this task alone, and
                    // the buffers hold `spans × rows` states of `dim` values.
                    unsafe {
                        *softmax.0.add(at) = (st.max, st.sum);
                        std::ptr::copy_nonoverlapping(st.acc.as_ptr(), acc.at(at * dim), dim);
                    }
                }
            }
        }
    }
    if let Sink::Out(dst) = sink {
        for (i, st) in s.total.iter().enumerate() {
            let (t, head) = row(i);
            // SAFETY: output row `t` of this head belongs to this task alone (tasks split the
            // kv heads and the queries), and has `dim` values from `t * qh * dim + head * dim`.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.at((t * qh + head) * dim), dim) };
            st.finish(out);
        }
    }
}

/// `keys` (`n` rows of `dim`) into `kt` as `[dim, TILE]`, the columns past `n` zero.
#[inline(always)]
fn pack_transposed(keys: &[f32], dim: usize, kt: &mut [f32]) {
    let n = keys.len() / dim;
    for (j, key) in keys.chunks_exact(dim).enumerate() {
        for (d, &x) in key.iter().enumerate() {
            kt[d * TILE + j] = x;
        }
    }
    if n < TILE {
        for col in kt.chunks_exact_mut(TILE) {
            col[n..].fill(0.0);
        }
    }
}

/// Scores of `R` query rows (`q`: `R × dim`) against a tile: `p[r·TILE + j] = Σ_d q_r[d]·k_j[d]`,
/// fused multiply-adds in `d`'s order, the sums held in registers across `d`.
#[inline(always)]
fn scores<const R: usize>(q: &[f32], kt: &[f32], dim: usize, p: &mut [f32]) {
    let (q, kt) = (&q[..R * dim], &kt[..dim * TILE]);
    let mut acc = [[0f32; TILE]; R];
    for (d, k) in kt.chunks_exact(TILE).enumerate() {
        let k: &[f32; TILE] = k.try_into().expect("a tile");
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = q[r * dim + d];
            for (a, &k) in acc.iter_mut().zip(k) {
                *a = x.mul_add(k, *a);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        p[r * TILE..(r + 1) * TILE].copy_from_slice(acc);
    }
}

/// `R` rows' states `+= Σ_j p_r[j] · v_j` over the tile's first `seen` values, `W` columns at
/// a time held in registers across the keys; per value the same fused operations in the
/// keys' order whatever `R` and `W`.
#[inline(always)]
fn weigh<const R: usize, const W: usize>(
    p: &[f32],
    v: &[f32],
    seen: usize,
    dim: usize,
    rows: &mut [State],
) {
    let v = &v[..seen * dim];
    for c in (0..dim).step_by(W) {
        let mut acc = [[0f32; W]; R];
        for (a, st) in acc.iter_mut().zip(rows.iter()) {
            a.copy_from_slice(&st.acc[c..c + W]);
        }
        for j in 0..seen {
            let v: &[f32; W] = v[j * dim + c..j * dim + c + W]
                .try_into()
                .expect("W values");
            for (r, acc) in acc.iter_mut().enumerate() {
                let p = p[r * TILE + j];
                for (a, &v) in acc.iter_mut().zip(v) {
                    *a = p.mul_add(v, *a);
                }
            }
        }
        for (a, st) in acc.iter().zip(rows.iter_mut()) {
            st.acc[c..c + W].copy_from_slice(a);
        }
    }
}

impl State {
    /// Takes one tile's scores `p` (the first `valid` seen): updates the max and the sum,
    /// rescales the weighted values, and leaves the tile's weights `e^(s - max)` in `p`
    /// (0 past `valid`).
    #[inline(always)]
    fn soften(&mut self, p: &mut [f32; TILE], valid: usize) {
        for (j, x) in p.iter_mut().enumerate() {
            *x = if j < valid { *x } else { f32::NEG_INFINITY };
        }
        let top = self.max.max(largest(p));
        for (j, x) in p.iter_mut().enumerate() {
            *x = if j < valid { exp(*x - top) } else { 0.0 };
        }
        let mut lanes = [0f32; 16];
        for c in p.chunks_exact(16) {
            for (l, &x) in lanes.iter_mut().zip(c) {
                *l += x;
            }
        }
        if top > self.max {
            let c = exp(self.max - top);
            self.sum *= c;
            for a in &mut self.acc {
                *a *= c;
            }
            self.max = top;
        }
        self.sum += sum16(lanes);
    }
}

/// The sixteen lanes' sum in a fixed tree.
#[inline(always)]
fn sum16(l: [f32; 16]) -> f32 {
    let h: [f32; 8] = std::array::from_fn(|i| l[i] + l[i + 8]);
    let q: [f32; 4] = std::array::from_fn(|i| h[i] + h[i + 4]);
    (q[0] + q[2]) + (q[1] + q[3])
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

/// `silu(gate) · up` for rows holding `[gate | up]`, `n` values each; returns `[rows, n]`.
pub fn silu_mul(level: CpuLevel, gate_up: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; gate_up.len() / 2];
    if out.len() >= 1 << 14 {
        out.par_chunks_mut(n)
            .zip(gate_up.par_chunks_exact(2 * n))
            .for_each(|(o, gu)| silu_mul_row(level, gu, o));
    } else {
        out.chunks_mut(n)
            .zip(gate_up.chunks_exact(2 * n))
            .for_each(|(o, gu)| silu_mul_row(level, gu, o));
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

    /// A cache of one buffer (its positions bounded by `head_stride`); leaked, as tests may.
    fn cached(data: Stored<'_>, head_stride: usize) -> Cached<'_> {
        let piece = Piece {
            start: 0,
            len: head_stride,
            data,
            head_stride,
        };
        Cached {
            pieces: Box::leak(Box::new([piece])),
        }
    }

    /// A cache in pieces (a shared prefix, then a buffer of its own) attends as the same
    /// positions in one buffer, bit for bit, for a prompt and for decoding, with pieces that
    /// end inside a tile and inside a span.
    #[test]
    fn a_cache_in_pieces_attends_as_one_buffer() {
        let heads = Heads {
            q: 4,
            kv: 2,
            dim: 64,
        };
        let d = heads.dim;
        let total = SPAN + 300;
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let k: Vec<f32> = (0..heads.kv * total * d).map(|i| value(i, 7)).collect();
        let v: Vec<f32> = (0..heads.kv * total * d).map(|i| value(i, 11)).collect();
        let whole = |data: &[f32]| -> Vec<f16> { data.iter().map(|&x| f16::from_f32(x)).collect() };
        let (k16, v16) = (whole(&k), whole(&v));
        // Positions `a..z` of every head, in a buffer with room for `spare` more.
        let part = |data: &[f16], a: usize, z: usize, spare: usize| -> Vec<f16> {
            let mut out = Vec::new();
            for h in 0..heads.kv {
                out.extend_from_slice(&data[(h * total + a) * d..(h * total + z) * d]);
                out.extend(std::iter::repeat_n(f16::ZERO, spare * d));
            }
            out
        };
        let cuts = [0, 37, 1000, SPAN + 100, total];
        let spare = [0, 3, 0, 9];
        let parts = |data: &[f16]| -> Vec<Vec<f16>> {
            (0..4)
                .map(|i| part(data, cuts[i], cuts[i + 1], spare[i]))
                .collect()
        };
        let (kp, vp) = (parts(&k16), parts(&v16));
        fn pieces<'a>(
            bufs: &'a [Vec<f16>],
            cuts: &[usize],
            spare: &[usize],
            d: usize,
        ) -> Vec<Piece<'a>> {
            (0..4)
                .map(|i| Piece {
                    start: cuts[i],
                    len: cuts[i + 1] - cuts[i],
                    data: Stored::F16(&bufs[i]),
                    head_stride: (cuts[i + 1] - cuts[i] + spare[i]) * d,
                })
                .collect()
        }
        let (kpieces, vpieces) = (pieces(&kp, &cuts, &spare, d), pieces(&vp, &cuts, &spare, d));
        let (kc, vc) = (Cached { pieces: &kpieces }, Cached { pieces: &vpieces });
        assert!(kc.holds(total) && vc.holds(total));
        let width = heads.q * d;
        for len in [1, 40] {
            let offset = total - len;
            let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
            for level in crate::kernels::cpu::runnable() {
                for products in [Products::F32, Products::Bf16] {
                    let one = attend_at(
                        level,
                        products,
                        &q,
                        width,
                        len,
                        offset,
                        cached(Stored::F16(&k16), total * d),
                        cached(Stored::F16(&v16), total * d),
                        heads,
                    );
                    let split = attend_at(level, products, &q, width, len, offset, kc, vc, heads);
                    assert!(
                        one.iter()
                            .zip(&split)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{level:?}, {products:?}, {len} rows: the pieces change the result"
                    );
                }
            }
        }
    }

    fn f32s(data: &[f32], head_stride: usize) -> Cached<'_> {
        cached(Stored::F32(data), head_stride)
    }

    /// `x` as a cache of `ty` holds it (in the buffer of its type), and those values in f32.
    struct Held {
        halves: Vec<f16>,
        brains: Vec<bf16>,
        blocks: Vec<u8>,
        wide: Vec<f32>,
    }

    impl Held {
        fn new(ty: crate::cache::cache_type::CacheType, x: &[f32]) -> Self {
            use crate::cache::{cache_type::CacheType, quantized};
            let mut held = Held {
                halves: vec![],
                brains: vec![],
                blocks: vec![],
                wide: vec![0.0; x.len()],
            };
            match ty {
                CacheType::F16 => held.halves = x.iter().map(|&v| f16::from_f32(v)).collect(),
                CacheType::Bf16 => held.brains = x.iter().map(|&v| bf16::from_f32(v)).collect(),
                _ => quantized::quantize_row(ty, x, &mut held.blocks),
            }
            match ty {
                CacheType::F16 => held.halves.convert_to_f32_slice(&mut held.wide),
                CacheType::Bf16 => held.brains.convert_to_f32_slice(&mut held.wide),
                _ => quantized::dequantize(ty, &held.blocks, &mut held.wide),
            }
            held
        }

        fn stored(&self, ty: crate::cache::cache_type::CacheType) -> Stored<'_> {
            use crate::cache::cache_type::CacheType;
            match ty {
                CacheType::F16 => Stored::F16(&self.halves),
                CacheType::Bf16 => Stored::Bf16(&self.brains),
                CacheType::Q8_0 => Stored::Q8_0(&self.blocks),
                _ => Stored::Q4_0(&self.blocks),
            }
        }
    }

    /// A cache in f16, bf16, q8_0 or q4_0 gives the bits of an f32 cache holding the values it
    /// stores (rounded, or dequantized), at every level (the AVX bodies' widening and
    /// dequantizing and the portable loops' agree), past a span.
    #[test]
    fn a_cache_in_any_type_attends_as_its_values_in_f32() {
        use crate::cache::cache_type::CacheType;
        let heads = Heads {
            q: 4,
            kv: 2,
            dim: 64,
        };
        let (offset, len) = (SPAN + 30, 5);
        let cap = offset + len + 7;
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let width = heads.q * heads.dim;
        let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
        let k: Vec<f32> = (0..heads.kv * cap * 64).map(|i| value(i, 7)).collect();
        let v: Vec<f32> = (0..heads.kv * cap * 64).map(|i| value(i, 11)).collect();
        for ty in [
            CacheType::F16,
            CacheType::Bf16,
            CacheType::Q8_0,
            CacheType::Q4_0,
        ] {
            let (kh, vh) = (Held::new(ty, &k), Held::new(ty, &v));
            let stride = cap * ty.row_len(64);
            for level in crate::kernels::cpu::runnable() {
                for products in [Products::F32, Products::Bf16] {
                    let run = |k: Cached<'_>, v: Cached<'_>| {
                        attend_at(level, products, &q, width, len, offset, k, v, heads)
                            .into_iter()
                            .map(f32::to_bits)
                            .collect::<Vec<_>>()
                    };
                    let wide = run(f32s(&kh.wide, cap * 64), f32s(&vh.wide, cap * 64));
                    let typed = run(cached(kh.stored(ty), stride), cached(vh.stored(ty), stride));
                    assert_eq!(typed, wide, "{ty:?} at {level}, {products:?}");
                }
            }
        }
    }

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

    /// A prompt's attention equals decoding its positions one at a time, bit for bit, with
    /// more keys than a tile and more query rows than a block, and past a span (where
    /// decoding splits the keys across threads); with bf16 products too (where the CPU has
    /// them), odd tiles' last pair of keys included.
    #[test]
    fn a_prompt_attends_as_its_positions_decoded_one_by_one() {
        let level = crate::kernels::cpu::default_level();
        for products in [Products::F32, Products::Bf16] {
            for (offset, len) in [(90, 45), (SPAN + 70, 40), (2 * SPAN - 3, 7)] {
                a_prompt_attends_as_decoded(level, products, offset, len);
            }
        }
    }

    fn a_prompt_attends_as_decoded(level: CpuLevel, products: Products, offset: usize, len: usize) {
        let heads = Heads {
            q: 6,
            kv: 2,
            dim: 64,
        };
        let cap = offset + len + 20;
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let width = heads.q * heads.dim;
        let q: Vec<f32> = (0..len * width).map(|i| value(i, 13)).collect();
        let k: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 7))
            .collect();
        let v: Vec<f32> = (0..heads.kv * cap * heads.dim)
            .map(|i| value(i, 11))
            .collect();
        let cached = |data| f32s(data, cap * heads.dim);
        let run = |q: &[f32], len: usize, offset: usize| {
            attend_at(
                level,
                products,
                q,
                width,
                len,
                offset,
                cached(&k),
                cached(&v),
                heads,
            )
        };
        let prompt = run(&q, len, offset);
        for t in 0..len {
            let row = &q[t * width..(t + 1) * width];
            let one = run(row, 1, offset + t);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&prompt[t * width..(t + 1) * width]),
                bits(&one),
                "position {t}"
            );
        }
    }

    /// Queries of `len` positions and keys and values of `cap`, a fixed pattern within ±1.36.
    fn inputs(heads: Heads, len: usize, cap: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let value = |i: usize, s: usize| ((i * s % 101) as f32 - 50.0) / 37.0;
        let (width, kv) = (heads.q * heads.dim, heads.kv * cap * heads.dim);
        (
            (0..len * width).map(|i| value(i, 13)).collect(),
            (0..kv).map(|i| value(i, 7)).collect(),
            (0..kv).map(|i| value(i, 11)).collect(),
        )
    }

    #[test]
    fn attention_is_the_same_at_every_level() {
        // Head sizes of Qwen's models; queries that end inside a block, a pair and a tile.
        for (dim, offset, len) in [(64, 90, 45), (128, 100, 33), (128, 0, 9), (64, 5, 1)] {
            let heads = Heads { q: 6, kv: 2, dim };
            let cap = offset + len;
            let width = heads.q * dim;
            let (q, k, v) = inputs(heads, len, cap);
            let cached = |data| f32s(data, cap * dim);
            let at = |level| {
                attend_at(
                    level,
                    Products::F32,
                    &q,
                    width,
                    len,
                    offset,
                    cached(&k),
                    cached(&v),
                    heads,
                )
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
        // 64 and 128 take the values 64 columns at a time, 8 one at a time, 24 eight at a
        // time; then more keys than a tile (64) and more queries than a task (32), then keys
        // in two spans.
        for (dim, offset, len) in [
            (8, 5, 19),
            (24, 5, 19),
            (64, 5, 19),
            (128, 5, 19),
            (64, 100, 45),
            (64, SPAN + 100, 3),
        ] {
            attention_matches_the_plain_formula_at(dim, offset, len);
        }
    }

    /// With bf16 products, attention is the formula's over the queries, keys and values
    /// rounded to bf16, within the rounding of the softmax weights (2⁻⁹ of each).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn bf16_products_attend_as_the_rounded_values() {
        use crate::kernels::x86::attention_bf16::to_bf16;
        let level = CpuLevel::Avx512;
        if !Products::Bf16.bf16_here(level, 64) || crate::kernels::cpu::usable(level).is_err() {
            return; // no AVX-512 BF16 on this CPU
        }
        let round = |x: f32| f32::from_bits((to_bf16(x) as u32) << 16) as f64;
        for (dim, offset, len) in [(64, 5, 19), (128, 100, 45), (64, SPAN + 100, 3)] {
            let heads = Heads { q: 6, kv: 2, dim };
            let cap = offset + len;
            let width = heads.q * dim;
            let (q, k, v) = inputs(heads, len, cap);
            let stride = cap * dim;
            let at = |products| {
                attend_at(
                    level,
                    products,
                    &q,
                    width,
                    len,
                    offset,
                    f32s(&k, stride),
                    f32s(&v, stride),
                    heads,
                )
            };
            let got = at(Products::Bf16);
            let scale = 1.0 / (dim as f32).sqrt();
            let rows = |row: &[f32]| row.iter().map(|&x| round(x * scale)).collect();
            let want = formula(&q, width, len, offset, &k, &v, stride, heads, rows, round);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(&have, want)| (have as f64 - want).abs())
                .fold(0f64, f64::max);
            // Values are at most 1.36; each weight rounded by at most 2⁻⁹ of itself.
            assert!(worst < 1.36 / 512.0, "dim {dim}, {offset}+{len}: {worst}");
            assert_ne!(got, at(Products::F32), "bf16 products not taken");
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
            f32s(&k, stride),
            f32s(&v, stride),
            heads,
        );
        let (root, width) = ((heads.dim as f64).sqrt(), heads.q * heads.dim);
        let rows = |row: &[f32]| row.iter().map(|&x| x as f64 / root).collect();
        let want = formula(
            &q,
            q_width,
            len,
            offset,
            &k,
            &v,
            stride,
            heads,
            rows,
            f64::from,
        );
        for (at, (&have, want)) in got.iter().zip(&want).enumerate() {
            let (t, h, i) = (at / width, at % width / heads.dim, at % heads.dim);
            assert!(
                (have as f64 - want).abs() < 1e-5,
                "dim={dim} t={t} h={h} i={i}: {have} vs {want}"
            );
        }
    }

    /// Attention by its formula in f64, output rows `heads.q × dim` wide: `query` makes the
    /// vector a head's query row scores with (scaled, and rounded where the products are),
    /// `value` reads each key and value.
    #[allow(clippy::too_many_arguments)]
    fn formula(
        q: &[f32],
        q_width: usize,
        len: usize,
        offset: usize,
        k: &[f32],
        v: &[f32],
        stride: usize,
        heads: Heads,
        query: impl Fn(&[f32]) -> Vec<f64>,
        value: impl Fn(f32) -> f64,
    ) -> Vec<f64> {
        let (d, group) = (heads.dim, heads.q / heads.kv);
        let mut out = vec![0.0; len * heads.q * d];
        for t in 0..len {
            for h in 0..heads.q {
                let g = h / group;
                let qv = query(&q[t * q_width + h * d..][..d]);
                let seen = offset + t + 1;
                let s: Vec<f64> = (0..seen)
                    .map(|j| {
                        let key = &k[g * stride + j * d..][..d];
                        qv.iter().zip(key).map(|(a, &b)| a * value(b)).sum::<f64>()
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for i in 0..d {
                    out[(t * heads.q + h) * d + i] = (0..seen)
                        .map(|j| e[j] / sum * value(v[g * stride + j * d + i]))
                        .sum();
                }
            }
        }
        out
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
        let out = silu_mul(CpuLevel::Portable, &gate_up, 2);
        for (i, o) in out.iter().enumerate() {
            let g = gate_up[i] as f64;
            let want = g / (1.0 + (-g).exp()) * gate_up[2 + i] as f64;
            assert!((*o as f64 - want).abs() < 1e-6, "{out:?}");
        }
    }
}
