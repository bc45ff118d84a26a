//! The key/value cache of one sequence, held outside the model's layers.
//!
//! Each layer's keys and values live in a preallocated `[1, kv_heads, capacity, head_dim]`
//! buffer written in place; the cache grows to the length its sequence is expected to reach
//! ([`KvCache::expect`]), then by doubling, so decoding allocates nothing per token. Because the cache is its own object, a caller can keep it between requests,
//! truncate it to a shared prefix and prefill only what follows, and a scheduler can count the
//! bytes every cache holds against a budget before it lets one grow.
//!
//! Positions a finished sequence wrote can be frozen into a read-only [`Segment`], which later
//! caches whose prompts start with the same tokens hold instead of copying it
//! ([`KvCache::share_prefix`]): a cache is its shared segments, in order, then its own
//! buffers. The CPU attention reads the pieces where they are.
//!
//! A hybrid model's cache also holds the recurrent state of its linear-attention layers
//! ([`RecurrentState`]), which can be cut back only to its checkpoints: [`KvCache::truncate`]
//! and [`KvCache::resumable`] say how far back it really goes.

use super::cache_type::CacheType;
use super::multimodal::{Multimodal, Rows};
use super::quantized;
use super::recurrent::{RecurrentState, StateShape};
use super::segment::Segment;
use candle_core::{DType, Result, Tensor};
use std::sync::Arc;

const INITIAL_CAPACITY: usize = 256;

/// Not `Clone`: cloned tensors would share storage and in-place writes would corrupt both.
#[derive(Debug)]
pub struct KvCache {
    /// Positions `base..len` of each layer, in buffers only this cache writes.
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    /// Positions the own buffers have room for, from `base`.
    capacity: usize,
    max_len: usize,
    /// Bytes one position takes over all layers (keys and values); 0 where unknown.
    position_bytes: usize,
    /// The linear-attention layers' state, for hybrid models.
    recurrent: Option<RecurrentState>,
    /// The types keys and values are stored in (appended rows are converted); `None`: as
    /// the first appended.
    types: Option<(CacheType, CacheType)>,
    /// Positions `0..base`: segments shared with other caches, in order, each with the
    /// positions of it this cache uses.
    shared: Vec<(Arc<Segment>, usize)>,
    base: usize,
    /// Positions the sequence is expected to reach (its prompt and a typical answer): growth
    /// by doubling stops there first, so a 19K-token prompt takes 19K positions, not 32K.
    expected: usize,
    /// The prompt's images and the positions they give its tokens, if it holds any.
    multimodal: Option<Arc<Multimodal>>,
}

/// A run of positions of one layer as the attention reads them: keys and values of positions
/// `start..start + len`, `[1, kv_heads, len, head_dim]` views.
pub(crate) struct Piece {
    pub start: usize,
    pub k: Tensor,
    pub v: Tensor,
}

impl KvCache {
    /// An empty cache for `num_layers` layers that may hold up to `max_len` positions.
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        Self {
            layers: (0..num_layers).map(|_| None).collect(),
            len: 0,
            capacity: 0,
            max_len,
            position_bytes: 0,
            recurrent: None,
            types: None,
            shared: Vec::new(),
            base: 0,
            expected: 0,
            multimodal: None,
        }
    }

    /// The images of the prompt this cache holds, and their positions.
    pub fn multimodal(&self) -> Option<&Arc<Multimodal>> {
        self.multimodal.as_ref()
    }

    /// Gives the cache its prompt's images (or takes them away).
    pub fn set_multimodal(&mut self, m: Option<Arc<Multimodal>>) {
        self.multimodal = m;
    }

    /// The rotary positions of the next `len` rows.
    pub fn positions(&self, len: usize) -> Rows {
        match &self.multimodal {
            Some(m) => m.rows(self.len, len),
            None => Rows::From(self.len),
        }
    }

    /// Tells the cache the sequence is expected to reach `len` positions: its buffers grow
    /// to that length rather than past it (and double from there if it goes on).
    pub fn expect(&mut self, len: usize) {
        self.expected = len;
    }

    /// Stores keys in `k` and values in `v` (the model's cache types), whatever the dtype
    /// of the rows appended.
    pub fn with_types(mut self, k: CacheType, v: CacheType) -> Self {
        self.types = Some((k, v));
        self
    }

    /// The types keys and values are stored in, where set.
    pub fn types(&self) -> Option<(CacheType, CacheType)> {
        self.types
    }

    /// Gives the cache a recurrent state of `shape` (a hybrid model's): its linear layers keep
    /// that instead of keys and values.
    pub fn with_recurrent_state(mut self, shape: StateShape) -> Self {
        self.recurrent = Some(RecurrentState::new(shape));
        self
    }

    /// The recurrent state, for hybrid models.
    pub fn recurrent(&self) -> Option<&RecurrentState> {
        self.recurrent.as_ref()
    }

    /// The recurrent state to update, for hybrid models.
    pub fn recurrent_mut(&mut self) -> Option<&mut RecurrentState> {
        self.recurrent.as_mut()
    }

    /// The longest prefix of at most `len` positions this cache can be cut back or copied to:
    /// `len` itself (up to what it holds) for keys and values alone; with a recurrent state,
    /// its end or its latest checkpoint at or before `len`.
    pub fn resumable(&self, len: usize) -> usize {
        match &self.recurrent {
            Some(r) => r.resumable(len, self.len),
            None => len.min(self.len),
        }
    }

    /// Asks for recurrent-state checkpoints after these positions (no-op without a state).
    pub fn mark_checkpoints(&mut self, positions: &[usize]) {
        if let Some(r) = &mut self.recurrent {
            r.mark(positions);
        }
    }

    /// Declares the bytes one position takes over all layers, so that [`KvCache::bytes`] and
    /// [`KvCache::bytes_for`] can count them before the buffers exist.
    pub fn with_position_bytes(mut self, bytes: usize) -> Self {
        self.position_bytes = bytes;
        self
    }

    /// Bytes one position takes over all layers (keys and values); 0 where unknown.
    pub fn position_bytes(&self) -> usize {
        self.position_bytes
    }

    /// Bytes this cache alone holds now: its own buffers (capacity, not length: growth by
    /// doubling counts in full) and the recurrent state with its own checkpoints. What it
    /// shares ([`KvCache::shared_bytes`]) is counted apart, once for all the caches that hold it.
    pub fn bytes(&self) -> usize {
        self.capacity * self.position_bytes + self.recurrent.as_ref().map_or(0, |r| r.bytes())
    }

    /// The segments this cache shares with others, in order.
    pub fn shared(&self) -> impl Iterator<Item = &Arc<Segment>> {
        self.shared.iter().map(|(s, _)| s)
    }

    /// Everything this cache holds with others, as (identity, bytes): its shared segments and
    /// the recurrent-state checkpoints another cache holds too. A total over many caches
    /// counts each identity once.
    pub fn shared_bytes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.shared
            .iter()
            .map(|(s, _)| (Arc::as_ptr(s) as usize, s.bytes()))
            .chain(self.recurrent.iter().flat_map(RecurrentState::shared))
    }

    /// Positions held in shared segments (the rest are in its own buffers).
    pub fn shared_len(&self) -> usize {
        self.base
    }

    /// Bytes this cache alone holds once it holds `len` positions (a recurrent state with one more
    /// checkpoint, which the prefill that gets there may take).
    pub fn bytes_for(&self, len: usize) -> usize {
        let state = match &self.recurrent {
            Some(r) if len > self.len => r.bytes_with_checkpoint(),
            Some(r) => r.bytes(),
            None => 0,
        };
        self.capacity_for(len) * self.position_bytes + state
    }

    /// Copies the first `len` positions of `src` (a cache of the same model) into this empty
    /// cache, so that a sequence sharing a prompt prefix with `src` skips running it.
    pub fn copy_prefix(&mut self, src: &KvCache, len: usize) -> Result<()> {
        self.take_prefix(src, len, false)
    }

    /// Takes the first `len` positions of `src` (a cache of the same model) into this empty
    /// cache: the segments `src` shares are shared (held, not copied), the positions in its
    /// own buffers copied.
    pub fn share_prefix(&mut self, src: &KvCache, len: usize) -> Result<()> {
        self.take_prefix(src, len, true)
    }

    /// The first `len` positions of `src` into this empty cache, its shared segments held
    /// where `share`, and the recurrent state after them.
    fn take_prefix(&mut self, src: &KvCache, len: usize, share: bool) -> Result<()> {
        if !self.is_empty() || len > src.len || self.layers.len() != src.layers.len() {
            candle_core::bail!(
                "cannot copy {len} positions of a {}-position cache of {} layers into a {}-position cache of {}",
                src.len,
                src.layers.len(),
                self.len,
                self.layers.len()
            );
        }
        if let (Some(dst), Some(from)) = (&mut self.recurrent, &src.recurrent) {
            if src.resumable(len) != len {
                candle_core::bail!(
                    "the source cache's recurrent state has no checkpoint after {len} positions"
                );
            }
            *dst = RecurrentState::prefix_of(from, len, src.len, share)?;
        }
        // The images go along: a prompt that shares them reuses their embeddings.
        self.multimodal = src.multimodal.clone();
        self.shared.clear();
        let mut at = 0;
        for (segment, used) in src.shared.iter().filter(|_| share) {
            if at >= len {
                break;
            }
            let take = (*used).min(len - at);
            self.shared.push((segment.clone(), take));
            at += take;
        }
        self.copy_rows(src, at, len)
    }

    /// Copies positions `from..to` of `src` into this cache's own buffers (which then start at
    /// `from`, its shared positions).
    fn copy_rows(&mut self, src: &KvCache, from: usize, to: usize) -> Result<()> {
        self.base = from;
        self.capacity = 0;
        self.layers.iter_mut().for_each(|l| *l = None);
        if to > from {
            let cap = self.capacity_for(to);
            for i in self.attention_layers() {
                let (k, v) = src.rows(i, from, to)?;
                let (nk, nv) = alloc_pair(&k, &v, cap)?;
                nk.slice_set(&k.contiguous()?, 2, 0)?;
                nv.slice_set(&v.contiguous()?, 2, 0)?;
                self.layers[i] = Some((nk, nv));
            }
            self.capacity = cap;
        }
        self.len = to;
        Ok(())
    }

    /// The layers that hold keys and values (a hybrid's linear-attention layers do not).
    fn attention_layers(&self) -> Vec<usize> {
        (0..self.layers.len())
            .filter(|&i| !self.recurrent.as_ref().is_some_and(|r| r.is_linear(i)))
            .collect()
    }

    /// Layer `layer`'s positions `from..to` as pieces: views of the shared segments' rows and
    /// of the own buffers' (which may hold rows a pass wrote before [`KvCache::advance`]).
    pub(crate) fn pieces(&self, layer: usize, from: usize, to: usize) -> Result<Vec<Piece>> {
        if from > to || (to > self.len && to > self.base + self.capacity) {
            candle_core::bail!("positions {from}..{to} of a {}-position cache", self.len);
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        for (segment, used) in &self.shared {
            let (a, z) = (from.max(start), to.min(start + used));
            if a < z {
                let (k, v) = segment.rows(layer, z - start)?;
                pieces.push(Piece {
                    start: a,
                    k: k.narrow(2, a - start, z - a)?,
                    v: v.narrow(2, a - start, z - a)?,
                });
            }
            start += used;
        }
        let a = from.max(self.base);
        if a < to {
            let Some(Some((k, v))) = self.layers.get(layer) else {
                candle_core::bail!("kv cache layer {layer} holds no keys")
            };
            pieces.push(Piece {
                start: a,
                k: k.narrow(2, a - self.base, to - a)?,
                v: v.narrow(2, a - self.base, to - a)?,
            });
        }
        Ok(pieces)
    }

    /// Layer `layer`'s keys and values of positions `from..to` as one pair of tensors: views
    /// where they lie in one piece, joined otherwise.
    fn rows(&self, layer: usize, from: usize, to: usize) -> Result<(Tensor, Tensor)> {
        let pieces = self.pieces(layer, from, to)?;
        match pieces.as_slice() {
            [one] => Ok((one.k.clone(), one.v.clone())),
            [] => candle_core::bail!("no positions {from}..{to} in kv cache layer {layer}"),
            _ => {
                let ks: Vec<&Tensor> = pieces.iter().map(|p| &p.k).collect();
                let vs: Vec<&Tensor> = pieces.iter().map(|p| &p.v).collect();
                Ok((Tensor::cat(&ks, 2)?, Tensor::cat(&vs, 2)?))
            }
        }
    }

    /// Makes the positions in this cache's own buffers read-only and shareable: they become
    /// a segment that later caches starting with the same tokens hold instead of copying
    /// ([`KvCache::share_prefix`]); the cache goes on in new buffers. Buffers much larger than
    /// their rows are shrunk first. Only on the CPU, whose attention reads the pieces where
    /// they are; elsewhere the cache is left as it is.
    pub fn freeze(&mut self) -> Result<()> {
        let own = self.len - self.base;
        let on_cpu = self.on_cpu();
        if own == 0 {
            // Nothing of its own: buffers kept for reuse would only take room while idle.
            self.layers.iter_mut().for_each(|l| *l = None);
            self.capacity = 0;
            return Ok(());
        }
        if !on_cpu {
            return Ok(());
        }
        let keep = if self.capacity > own + own / 8 {
            own
        } else {
            self.capacity
        };
        let mut layers = Vec::with_capacity(self.layers.len());
        for slot in &self.layers {
            layers.push(match slot {
                Some((k, v)) if keep < self.capacity => {
                    Some((k.narrow(2, 0, keep)?.copy()?, v.narrow(2, 0, keep)?.copy()?))
                }
                other => other.clone(),
            });
        }
        let segment = Segment::new(layers, own, keep * self.position_bytes);
        self.shared.push((Arc::new(segment), own));
        self.base = self.len;
        self.layers.iter_mut().for_each(|l| *l = None);
        self.capacity = 0;
        Ok(())
    }

    /// Makes the positions of this cache's own buffers before `at` read-only and shareable,
    /// as [`KvCache::freeze`] does with all of them, for a running sequence whose prefix
    /// another prompt starts with: the buffers become the segment (its bytes counted in
    /// full), and the positions from `at` on are copied into new buffers, where the cache
    /// goes on. Only on the CPU; a no-op where `at` is not past the shared positions.
    pub fn freeze_to(&mut self, at: usize) -> Result<()> {
        if at <= self.base || at > self.len || !self.on_cpu() {
            return Ok(());
        }
        let (used, tail) = (at - self.base, self.len - at);
        let bytes = self.capacity * self.position_bytes;
        let (base, capacity) = (self.base, self.capacity);
        (self.base, self.capacity) = (at, 0);
        let cap = if tail > 0 {
            self.capacity_for(self.len)
        } else {
            0
        };
        (self.base, self.capacity) = (base, capacity);
        // The new buffers first: on an error the cache is left as it was.
        let mut moved = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            moved.push(match layer {
                Some((k, v)) if tail > 0 => {
                    let (nk, nv) = alloc_pair(k, v, cap)?;
                    nk.slice_set(&k.narrow(2, used, tail)?.contiguous()?, 2, 0)?;
                    nv.slice_set(&v.narrow(2, used, tail)?.contiguous()?, 2, 0)?;
                    Some((nk, nv))
                }
                _ => None,
            });
        }
        let old = std::mem::replace(&mut self.layers, moved);
        (self.base, self.capacity) = (at, cap);
        let segment = Segment::new(old, used, bytes);
        self.shared.push((Arc::new(segment), used));
        Ok(())
    }

    /// Whether the buffers are on the CPU (where the attention reads a cache in pieces).
    fn on_cpu(&self) -> bool {
        self.layers
            .iter()
            .flatten()
            .next()
            .is_some_and(|(k, _)| k.device().is_cpu())
    }

    /// Copies of every layer's keys and values for the positions held (`[1, kv_heads, len,
    /// head_dim]`), detached from the buffers that later writes reuse; a hybrid model's
    /// linear-attention layers, which hold none, are left out.
    pub fn layers_copy(&self) -> Result<Vec<(Tensor, Tensor)>> {
        self.attention_layers()
            .into_iter()
            .map(|i| {
                let (k, v) = self.rows(i, 0, self.len)?;
                Ok((k.copy()?, v.copy()?))
            })
            .collect()
    }

    /// Fills this empty cache with `layers` (`[1, kv_heads, len, head_dim]` each, as
    /// [`KvCache::layers_copy`] gives them), which must match its layer count and position size.
    pub fn restore(&mut self, layers: Vec<(Tensor, Tensor)>) -> Result<()> {
        let Some((k0, _)) = layers.first() else {
            candle_core::bail!("no layers to restore")
        };
        let (_, heads, len, head_dim) = k0.dims4()?;
        let v0 = &layers[0].1;
        let position = layers.len()
            * heads
            * head_dim
            * (k0.dtype().size_in_bytes() + v0.dtype().size_in_bytes());
        let attention: Vec<usize> = (0..self.layers.len())
            .filter(|&i| !self.recurrent.as_ref().is_some_and(|r| r.is_linear(i)))
            .collect();
        if !self.is_empty() || layers.len() != attention.len() {
            candle_core::bail!(
                "a cache of {} attention layers cannot take {} layers",
                attention.len(),
                layers.len()
            );
        }
        if self.position_bytes != 0 && position != self.position_bytes {
            candle_core::bail!(
                "{position} bytes per position where this model keeps {}",
                self.position_bytes
            );
        }
        if len > self.max_len {
            candle_core::bail!("{len} positions, more than the model's {}", self.max_len);
        }
        for ((k, v), &i) in layers.into_iter().zip(&attention) {
            if k.dims4()? != (1, heads, len, head_dim) || v.dims4()? != (1, heads, len, head_dim) {
                candle_core::bail!("layers of different shapes");
            }
            if let Some((kd, vd)) = self
                .types
                .map(|(k, v)| (k.dtype(), v.dtype()))
                .filter(|&d| d != (k.dtype(), v.dtype()))
            {
                candle_core::bail!(
                    "keys and values in {:?}/{:?} where this model's cache keeps {kd:?}/{vd:?}",
                    k.dtype(),
                    v.dtype()
                );
            }
            self.layers[i] = Some((k, v));
        }
        self.shared.clear();
        self.base = 0;
        self.capacity = len;
        self.len = len;
        Ok(())
    }

    /// The capacity the own buffers have once the cache holds `needed` positions.
    fn capacity_for(&self, needed: usize) -> usize {
        let needed = needed.saturating_sub(self.base);
        if needed <= self.capacity {
            return self.capacity;
        }
        let mut cap = self.capacity.max(INITIAL_CAPACITY);
        while cap < needed {
            cap *= 2;
        }
        let expected = self.expected.saturating_sub(self.base);
        if expected >= needed {
            cap = cap.min(expected);
        }
        cap.min(self.max_len.saturating_sub(self.base)).max(needed)
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most positions the cache may hold (the model's context length).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets every position from `len` on (from the last recurrent-state checkpoint at or
    /// before `len`, for a hybrid model); the buffers are kept for reuse. Returns the positions
    /// kept.
    pub fn truncate(&mut self, len: usize) -> usize {
        let keep = self.resumable(len);
        if let Some(r) = &mut self.recurrent {
            let rewound = r.rewind(keep, self.len);
            // The states a verifying step kept are of no use once it is cut back.
            r.drop_verified();
            if rewound.is_err() {
                // Unreachable (`keep` is resumable); start over rather than run on a wrong state.
                let _ = r.rewind(0, self.len);
                self.cut(0);
                return 0;
            }
        }
        self.cut(keep);
        keep
    }

    /// Keeps positions `0..len`: shared segments past them are let go; the own buffers are
    /// kept for reuse (from the new end of the shared positions, where it moved back).
    fn cut(&mut self, len: usize) {
        if len < self.base {
            let mut at = 0;
            let mut keep = 0;
            for (_, used) in &mut self.shared {
                if at >= len {
                    break;
                }
                *used = (*used).min(len - at);
                at += *used;
                keep += 1;
            }
            self.shared.truncate(keep);
            self.base = at;
        }
        self.len = len;
    }

    /// The next pass over this cache verifies drafted tokens: it can then be cut back to any
    /// of that pass's positions ([`KvCache::truncate`]), a recurrent state included (which
    /// keeps its state after each row until then).
    pub fn verify_next(&mut self) {
        if let Some(r) = &mut self.recurrent {
            r.verify_next();
        }
    }

    /// Forgets every position, and the prompt's images; the buffers are kept for reuse.
    pub fn clear(&mut self) {
        self.truncate(0);
        self.multimodal = None;
    }

    /// Writes `k`, `v` (`[1, kv_heads, new, head_dim]`) of `layer` at the current end and
    /// returns every position so far, the new ones included: views of the buffers, joined
    /// into one tensor where the cache shares segments.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        self.write(layer, k, v)?;
        self.rows(layer, 0, self.len + new)
    }

    /// Writes `k`, `v` (`[1, kv_heads, new, head_dim]`) of `layer` at the current end (read
    /// back with [`KvCache::pieces`] up to `len() + new`).
    pub(crate) fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let new = k.dim(2)?;
        let end = self.len + new;
        if end > self.max_len {
            candle_core::bail!(
                "sequence of {end} positions exceeds the model's {} (max_position_embeddings)",
                self.max_len
            );
        }
        let (k, v) = match self.types {
            Some((kt, vt)) => (stored(k, kt)?, stored(v, vt)?),
            None => (k.clone(), v.clone()),
        };
        if end - self.base > self.capacity {
            self.grow(end)?;
        }
        if self.layers[layer].is_none() {
            self.layers[layer] = Some(alloc_pair(&k, &v, self.capacity)?);
        }
        let Some((kc, vc)) = &self.layers[layer] else {
            candle_core::bail!("kv cache layer {layer} was not allocated")
        };
        kc.slice_set(&k.contiguous()?, 2, self.len - self.base)?;
        vc.slice_set(&v.contiguous()?, 2, self.len - self.base)?;
        Ok(())
    }

    /// Marks `n` positions written by every layer (called by a model after its last layer);
    /// the recurrent-state checkpoints the step took are kept.
    pub fn advance(&mut self, n: usize) {
        self.len += n;
        if let Some(r) = &mut self.recurrent {
            r.advance();
        }
    }

    fn grow(&mut self, needed: usize) -> Result<()> {
        let cap = self.capacity_for(needed);
        for slot in self.layers.iter_mut() {
            let Some((k, v)) = slot.take() else { continue };
            let (nk, nv) = alloc_pair(&k, &v, cap)?;
            let own = self.len - self.base;
            if own > 0 {
                nk.slice_set(&k.narrow(2, 0, own)?.contiguous()?, 2, 0)?;
                nv.slice_set(&v.narrow(2, 0, own)?.contiguous()?, 2, 0)?;
            }
            *slot = Some((nk, nv));
        }
        self.capacity = cap;
        Ok(())
    }
}

/// `rows` (`[1, kv_heads, n, head_dim]`) as `ty` stores them: converted, or quantized into
/// blocks (`[1, kv_heads, n, row bytes]` of u8).
fn stored(rows: &Tensor, ty: CacheType) -> Result<Tensor> {
    if !ty.is_quantized() {
        return rows.to_dtype(ty.dtype());
    }
    let (b, h, n, d) = rows.dims4()?;
    let values: Vec<f32> = rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
    let mut out = Vec::with_capacity(b * h * n * ty.row_bytes(d));
    for row in values.chunks_exact(d) {
        quantized::quantize_row(ty, row, &mut out);
    }
    Tensor::from_vec(out, (b, h, n, ty.row_len(d)), rows.device())
}

/// Buffers of `capacity` positions shaped and typed as `k` and `v`.
fn alloc_pair(k: &Tensor, v: &Tensor, capacity: usize) -> Result<(Tensor, Tensor)> {
    let buffer = |like: &Tensor| -> Result<Tensor> {
        let (b, h, _, d) = like.dims4()?;
        Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())
    };
    Ok((buffer(k)?, buffer(v)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Keys and values of positions `from..to` for 2 kv heads of 4 values: each value says its
    /// position, so rows read back name where they came from.
    fn rows(from: usize, to: usize, layer: usize) -> Result<(Tensor, Tensor)> {
        let n = to - from;
        let data: Vec<f32> = (0..2)
            .flat_map(|h| {
                (from..to).flat_map(move |p| (0..4).map(move |i| (p * 100 + h * 10 + i) as f32))
            })
            .collect();
        let k = Tensor::from_vec(data, (1, 2, n, 4), &Device::Cpu)?;
        let v = ((&k * -1.0)? + layer as f64)?;
        Ok((k, v))
    }

    fn filled(len: usize) -> Result<KvCache> {
        let mut c = KvCache::new(2, 4096).with_position_bytes(2 * 2 * 2 * 4 * 4);
        append(&mut c, 0, len)?;
        Ok(c)
    }

    fn append(c: &mut KvCache, from: usize, to: usize) -> Result<()> {
        for layer in 0..2 {
            let (k, v) = rows(from, to, layer)?;
            c.write(layer, &k, &v)?;
        }
        c.advance(to - from);
        Ok(())
    }

    /// Every layer's keys and values as rows of every position.
    fn held(c: &KvCache) -> Result<Vec<Vec<f32>>> {
        c.layers_copy()?
            .into_iter()
            .flat_map(|(k, v)| [k, v])
            .map(|t| t.flatten_all()?.to_vec1())
            .collect()
    }

    fn expected(len: usize) -> Result<Vec<Vec<f32>>> {
        let mut out = vec![];
        for layer in 0..2 {
            let (k, v) = rows(0, len, layer)?;
            out.push(k.flatten_all()?.to_vec1()?);
            out.push(v.flatten_all()?.to_vec1()?);
        }
        Ok(out)
    }

    #[test]
    fn a_shared_prefix_is_held_not_copied_and_reads_as_a_copy() -> Result<()> {
        let mut a = filled(300)?;
        a.freeze()?;
        assert_eq!((a.shared_len(), a.bytes()), (300, 0));
        let segment_bytes: usize = a.shared().map(|s| s.bytes()).sum();
        // Grown to 512 positions, shrunk to its 300 rows when frozen.
        assert_eq!(segment_bytes, 300 * 128);
        let mut b = KvCache::new(2, 4096).with_position_bytes(128);
        b.share_prefix(&a, 250)?;
        assert_eq!((b.len(), b.shared_len(), b.bytes()), (250, 250, 0));
        assert!(Arc::ptr_eq(
            a.shared()
                .next()
                .ok_or_else(|| candle_core::Error::Msg("none".into()))?,
            b.shared()
                .next()
                .ok_or_else(|| candle_core::Error::Msg("none".into()))?
        ));
        append(&mut b, 250, 320)?;
        assert_eq!(held(&b)?, expected(320)?);
        // Its own rows only: the segment is counted once, apart.
        assert_eq!(b.bytes(), 256 * 128);
        Ok(())
    }

    #[test]
    fn a_running_cache_shares_its_prefix_and_goes_on_after_it() -> Result<()> {
        let mut a = filled(100)?;
        a.freeze()?;
        append(&mut a, 100, 250)?;
        a.freeze_to(180)?;
        assert_eq!((a.shared().count(), a.shared_len(), a.len()), (2, 180, 250));
        assert_eq!(a.bytes(), 256 * 128);
        assert_eq!(held(&a)?, expected(250)?);
        let mut b = KvCache::new(2, 4096).with_position_bytes(128);
        b.share_prefix(&a, 180)?;
        assert_eq!((b.shared_len(), b.bytes()), (180, 0));
        append(&mut a, 250, 260)?;
        append(&mut b, 180, 200)?;
        assert_eq!((held(&a)?, held(&b)?), (expected(260)?, expected(200)?));
        // Not past the shared positions: nothing to do.
        a.freeze_to(150)?;
        assert_eq!(a.shared().count(), 2);
        Ok(())
    }

    #[test]
    fn buffers_grow_to_the_expected_length_then_double() -> Result<()> {
        let mut c = KvCache::new(2, 4096).with_position_bytes(128);
        c.expect(300);
        append(&mut c, 0, 290)?;
        assert_eq!(c.bytes(), 300 * 128);
        append(&mut c, 290, 310)?;
        assert_eq!(c.bytes(), 600 * 128);
        assert_eq!(held(&c)?, expected(310)?);
        Ok(())
    }

    #[test]
    fn a_cache_cut_back_into_its_shared_rows_goes_on_from_there() -> Result<()> {
        let mut a = filled(100)?;
        a.freeze()?;
        append(&mut a, 100, 180)?;
        a.freeze()?;
        append(&mut a, 180, 200)?;
        assert_eq!((a.shared().count(), a.shared_len()), (2, 180));
        assert_eq!(held(&a)?, expected(200)?);
        // Into the second segment, then into the first.
        assert_eq!(a.truncate(150), 150);
        assert_eq!((a.shared().count(), a.shared_len()), (2, 150));
        append(&mut a, 150, 210)?;
        assert_eq!(held(&a)?, expected(210)?);
        assert_eq!(a.truncate(60), 60);
        assert_eq!((a.shared().count(), a.shared_len()), (1, 60));
        append(&mut a, 60, 90)?;
        assert_eq!(held(&a)?, expected(90)?);
        // A copy of a cache in pieces is one buffer of the same rows.
        let mut c = KvCache::new(2, 4096).with_position_bytes(128);
        c.copy_prefix(&a, 75)?;
        assert_eq!((c.shared_len(), held(&c)?), (0, expected(75)?));
        // Sharing from a cache with rows of its own: the segment held, the rest copied.
        let mut d = KvCache::new(2, 4096).with_position_bytes(128);
        d.share_prefix(&a, 80)?;
        assert_eq!((d.shared_len(), d.len()), (60, 80));
        assert_eq!(held(&d)?, expected(80)?);
        assert_eq!(a.truncate(0), 0);
        assert_eq!((a.shared().count(), held(&d)?), (0, expected(80)?));
        Ok(())
    }
}
