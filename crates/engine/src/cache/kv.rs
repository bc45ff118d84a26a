//! The key/value cache of one sequence, held outside the model's layers.
//!
//! Each layer's keys and values live in a preallocated `[1, kv_heads, capacity, head_dim]`
//! buffer written in place; the cache grows by doubling, so decoding allocates nothing per
//! token. Because the cache is its own object, a caller can keep it between requests,
//! truncate it to a shared prefix and prefill only what follows, and a scheduler can count the
//! bytes every cache holds against a budget before it lets one grow.
//!
//! A hybrid model's cache also holds the recurrent state of its linear-attention layers
//! ([`RecurrentState`]), which can be cut back only to its checkpoints: [`KvCache::truncate`]
//! and [`KvCache::resumable`] say how far back it really goes.

use super::recurrent::{RecurrentState, StateShape};
use candle_core::{DType, Result, Tensor};

const INITIAL_CAPACITY: usize = 256;

/// Not `Clone`: cloned tensors would share storage and in-place writes would corrupt both.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    capacity: usize,
    max_len: usize,
    /// Bytes one position takes over all layers (keys and values); 0 where unknown.
    position_bytes: usize,
    /// The linear-attention layers' state, for hybrid models.
    recurrent: Option<RecurrentState>,
    /// The dtypes keys and values are stored in (appended rows are converted); `None`: as
    /// the first appended.
    dtypes: Option<(DType, DType)>,
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
            dtypes: None,
        }
    }

    /// Stores keys in `k` and values in `v` (the model's cache types), whatever the dtype
    /// of the rows appended.
    pub fn with_dtypes(mut self, k: DType, v: DType) -> Self {
        self.dtypes = Some((k, v));
        self
    }

    /// The dtypes keys and values are stored in, where set.
    pub fn dtypes(&self) -> Option<(DType, DType)> {
        self.dtypes
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

    /// Bytes allocated now (capacity, not length: growth by doubling counts in full), with the
    /// recurrent state and its checkpoints.
    pub fn bytes(&self) -> usize {
        self.capacity * self.position_bytes + self.recurrent.as_ref().map_or(0, |r| r.bytes())
    }

    /// Bytes allocated once the cache holds `len` positions (a recurrent state with one more
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
            *dst = RecurrentState::prefix_of(from, len, src.len)?;
        }
        if len == 0 {
            return Ok(());
        }
        let cap = self.capacity_for(len);
        for (i, (dst, src)) in self.layers.iter_mut().zip(&src.layers).enumerate() {
            if self.recurrent.as_ref().is_some_and(|r| r.is_linear(i)) {
                continue;
            }
            let Some((k, v)) = src else {
                candle_core::bail!("the source cache has a layer without keys")
            };
            let (nk, nv) = alloc_pair(k, v, cap)?;
            nk.slice_set(&k.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
            nv.slice_set(&v.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
            *dst = Some((nk, nv));
        }
        self.capacity = cap;
        self.len = len;
        Ok(())
    }

    /// Copies of every layer's keys and values for the positions held (`[1, kv_heads, len,
    /// head_dim]`), detached from the buffers that later writes reuse; a hybrid model's
    /// linear-attention layers, which hold none, are left out.
    pub fn layers_copy(&self) -> Result<Vec<(Tensor, Tensor)>> {
        self.layers
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.recurrent.as_ref().is_some_and(|r| r.is_linear(*i)))
            .map(|(_, l)| match l {
                Some((k, v)) => Ok((
                    k.narrow(2, 0, self.len)?.copy()?,
                    v.narrow(2, 0, self.len)?.copy()?,
                )),
                None => candle_core::bail!("a layer of the cache holds no keys"),
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
            if let Some((kd, vd)) = self.dtypes.filter(|&d| d != (k.dtype(), v.dtype())) {
                candle_core::bail!(
                    "keys and values in {:?}/{:?} where this model's cache keeps {kd:?}/{vd:?}",
                    k.dtype(),
                    v.dtype()
                );
            }
            self.layers[i] = Some((k, v));
        }
        self.capacity = len;
        self.len = len;
        Ok(())
    }

    /// The capacity the buffers have once they hold `needed` positions.
    fn capacity_for(&self, needed: usize) -> usize {
        if needed <= self.capacity {
            return self.capacity;
        }
        let mut cap = self.capacity.max(INITIAL_CAPACITY);
        while cap < needed {
            cap *= 2;
        }
        cap.min(self.max_len).max(needed)
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
                self.len = 0;
                return 0;
            }
        }
        self.len = keep;
        keep
    }

    /// The next pass over this cache verifies drafted tokens: it can then be cut back to any
    /// of that pass's positions ([`KvCache::truncate`]), a recurrent state included (which
    /// keeps its state after each row until then).
    pub fn verify_next(&mut self) {
        if let Some(r) = &mut self.recurrent {
            r.verify_next();
        }
    }

    /// Forgets every position; the buffers are kept for reuse.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Writes `k`, `v` (`[1, kv_heads, new, head_dim]`) of `layer` at the current end and
    /// returns views of every position so far, the new ones included.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        let end = self.len + new;
        if end > self.max_len {
            candle_core::bail!(
                "sequence of {end} positions exceeds the model's {} (max_position_embeddings)",
                self.max_len
            );
        }
        let (kd, vd) = self.dtypes.unwrap_or((k.dtype(), v.dtype()));
        let (k, v) = (k.to_dtype(kd)?, v.to_dtype(vd)?);
        if end > self.capacity {
            self.grow(end)?;
        }
        if self.layers[layer].is_none() {
            self.layers[layer] = Some(alloc_pair(&k, &v, self.capacity)?);
        }
        let Some((kc, vc)) = &self.layers[layer] else {
            candle_core::bail!("kv cache layer {layer} was not allocated")
        };
        kc.slice_set(&k.contiguous()?, 2, self.len)?;
        vc.slice_set(&v.contiguous()?, 2, self.len)?;
        Ok((kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?))
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
            if self.len > 0 {
                nk.slice_set(&k.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
                nv.slice_set(&v.narrow(2, 0, self.len)?.contiguous()?, 2, 0)?;
            }
            *slot = Some((nk, nv));
        }
        self.capacity = cap;
        Ok(())
    }
}

/// Buffers of `capacity` positions shaped and typed as `k` and `v`.
fn alloc_pair(k: &Tensor, v: &Tensor, capacity: usize) -> Result<(Tensor, Tensor)> {
    let buffer = |like: &Tensor| -> Result<Tensor> {
        let (b, h, _, d) = like.dims4()?;
        Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())
    };
    Ok((buffer(k)?, buffer(v)?))
}
