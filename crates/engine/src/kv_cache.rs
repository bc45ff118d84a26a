//! The key/value cache of one sequence, held outside the model's layers.
//!
//! Each layer's keys and values live in a preallocated `[1, kv_heads, capacity, head_dim]`
//! buffer written in place; the cache grows by doubling, so decoding allocates nothing per
//! token. Because the cache is its own object, a caller can keep it between requests,
//! truncate it to a shared prefix and prefill only what follows.

use candle_core::{Result, Tensor};

const INITIAL_CAPACITY: usize = 256;

/// Not `Clone`: cloned tensors would share storage and in-place writes would corrupt both.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    capacity: usize,
    max_len: usize,
}

impl KvCache {
    /// An empty cache for `num_layers` layers that may hold up to `max_len` positions.
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        Self {
            layers: (0..num_layers).map(|_| None).collect(),
            len: 0,
            capacity: 0,
            max_len,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets every position from `len` on; the buffers are kept for reuse.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn clear(&mut self) {
        self.len = 0;
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
        if end > self.capacity {
            self.grow(end, k)?;
        }
        if self.layers[layer].is_none() {
            self.layers[layer] = Some(alloc_pair(k, self.capacity)?);
        }
        let Some((kc, vc)) = &self.layers[layer] else {
            candle_core::bail!("kv cache layer {layer} was not allocated")
        };
        kc.slice_set(&k.contiguous()?, 2, self.len)?;
        vc.slice_set(&v.contiguous()?, 2, self.len)?;
        Ok((kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?))
    }

    /// Marks `n` positions written by every layer (called by a model after its last layer).
    pub fn advance(&mut self, n: usize) {
        self.len += n;
    }

    fn grow(&mut self, needed: usize, like: &Tensor) -> Result<()> {
        let mut cap = self.capacity.max(INITIAL_CAPACITY);
        while cap < needed {
            cap *= 2;
        }
        let cap = cap.min(self.max_len).max(needed);
        for slot in self.layers.iter_mut() {
            let Some((k, v)) = slot.take() else { continue };
            let (nk, nv) = alloc_pair(like, cap)?;
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

fn alloc_pair(like: &Tensor, capacity: usize) -> Result<(Tensor, Tensor)> {
    let (b, h, _, d) = like.dims4()?;
    let k = Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())?;
    let v = Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())?;
    Ok((k, v))
}
