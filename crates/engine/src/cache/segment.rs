//! Keys and values that no cache writes any more, shared by the caches that start with them.
//!
//! When a sequence finishes, the rows it wrote become a [`Segment`]: a finished request's or
//! a session's positions, read-only from then on. A later prompt that starts with the same
//! tokens holds the segment (an `Arc`) and the number of its positions it uses, instead of a
//! copy, and writes only what follows into buffers of its own. A coding agent's conversation
//! thus keeps its 20K-token prefix once, however many turns and side requests start with it:
//! the caches form a tree whose shared nodes are segments, and the scheduler counts each
//! segment once against its budget. A segment is freed when the last cache holding it goes.

use candle_core::{Result, Tensor};

/// Positions `0..len` of every attention layer's keys and values, `[1, kv_heads, capacity,
/// head_dim]` each (`None` for a hybrid model's linear-attention layers).
#[derive(Debug)]
pub struct Segment {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    bytes: usize,
}

impl Segment {
    /// Keeps `layers`' first `len` positions; `bytes` is what their buffers take.
    pub(crate) fn new(layers: Vec<Option<(Tensor, Tensor)>>, len: usize, bytes: usize) -> Self {
        Self { layers, len, bytes }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no position.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes its buffers take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Layer `layer`'s keys and values for positions `0..used`, as views.
    pub(crate) fn rows(&self, layer: usize, used: usize) -> Result<(Tensor, Tensor)> {
        match self.layers.get(layer) {
            Some(Some((k, v))) if used <= self.len => {
                Ok((k.narrow(2, 0, used)?, v.narrow(2, 0, used)?))
            }
            Some(Some(_)) => {
                candle_core::bail!("{used} positions asked of a shared segment of {}", self.len)
            }
            _ => candle_core::bail!("a shared segment holds no keys for layer {layer}"),
        }
    }
}
