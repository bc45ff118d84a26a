//! The recurrent state of a hybrid model's linear-attention layers, held in the sequence's
//! cache beside the keys and values of its full-attention layers.
//!
//! Keys and values can be cut back to any prefix; a recurrent state cannot: it is one fixed-size
//! summary of every token so far. So the state is copied at the positions a later prompt may
//! resume from — the places the scheduler marks (message starts, where a shared system prompt
//! ends or a conversation's history is written differently, and each prompt's end) and the end
//! of every prefill step (block boundaries inside a long message) — and a cache can only be cut
//! back, shared or resumed at one of those checkpoints or at its end.
//!
//! Each checkpoint is a full copy of the state (50 MiB for a Qwen3.5-9B), so a cache keeps at
//! most `MAX_CHECKPOINTS`: past that, one is dropped where dropping it leaves the shortest
//! stretch to recompute, block boundaries before marked positions, never the latest. Spaced
//! that way, a system prompt's end outlives many turns, and a long prompt keeps a few
//! boundaries spread over it. Checkpoints never change once taken: a cache seeded from
//! another's prefix holds the same ones (an `Arc`), and the budget counts each once.

use candle_core::Result;
use std::sync::Arc;

/// Checkpoints a cache keeps.
const MAX_CHECKPOINTS: usize = 6;

/// One linear-attention layer's state: the convolution's last `taps - 1` inputs (time-major,
/// `[taps - 1, channels]`) and the delta rule's matrix per value head (`[value heads, key dim,
/// value dim]`).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// The convolution's window, oldest input first.
    pub conv: Vec<f32>,
    /// The delta rule's state.
    pub delta: Vec<f32>,
}

/// The sizes of one layer's state and which layers have one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateShape {
    /// `linear[i]`: whether layer `i` keeps a recurrent state.
    pub linear: Vec<bool>,
    /// Values of the convolution window.
    pub conv: usize,
    /// Values of the delta-rule matrix.
    pub delta: usize,
}

impl StateShape {
    /// Bytes one full copy of the state takes (every linear layer, f32).
    pub fn bytes(&self) -> usize {
        self.linear.iter().filter(|&&l| l).count() * (self.conv + self.delta) * 4
    }

    fn zeros(&self) -> Vec<LayerState> {
        self.linear
            .iter()
            .filter(|&&l| l)
            .map(|_| LayerState {
                conv: vec![0.0; self.conv],
                delta: vec![0.0; self.delta],
            })
            .collect()
    }
}

/// The state after `len` tokens.
#[derive(Debug, Clone)]
struct Checkpoint {
    len: usize,
    /// Whether the scheduler marked the position (a message start, a prompt's end) rather
    /// than a prefill step ending there.
    marked: bool,
    layers: Vec<LayerState>,
}

/// The live state of every linear layer, its checkpoints, and those being written by a step.
#[derive(Debug, Clone)]
pub struct RecurrentState {
    shape: StateShape,
    /// `slot[i]`: the index among the linear layers of model layer `i`.
    slot: Vec<Option<usize>>,
    now: Vec<LayerState>,
    checkpoints: Vec<Arc<Checkpoint>>,
    /// Positions where the scheduler wants a checkpoint (message starts).
    marks: Vec<usize>,
    /// Checkpoints the layers of the running step fill in, completed by [`Self::advance`].
    pending: Vec<Checkpoint>,
    /// Whether the running step verifies drafted tokens: the state after each of its rows is
    /// kept (in `verified`, not as a checkpoint) until the cache is cut back to the accepted
    /// ones.
    verifying: bool,
    /// The states after each row of the last verifying step.
    verified: Vec<Arc<Checkpoint>>,
}

impl RecurrentState {
    /// A zero state (no tokens seen) of `shape`.
    pub fn new(shape: StateShape) -> Self {
        let mut n = 0;
        let slot = shape
            .linear
            .iter()
            .map(|&l| {
                l.then(|| {
                    n += 1;
                    n - 1
                })
            })
            .collect();
        Self {
            now: shape.zeros(),
            shape,
            slot,
            checkpoints: Vec::new(),
            marks: Vec::new(),
            pending: Vec::new(),
            verifying: false,
            verified: Vec::new(),
        }
    }

    /// The shape of the state.
    pub fn shape(&self) -> &StateShape {
        &self.shape
    }

    /// Whether layer `layer` keeps a recurrent state (and so no keys and values).
    pub fn is_linear(&self, layer: usize) -> bool {
        self.slot.get(layer).is_some_and(Option::is_some)
    }

    /// Bytes this state alone holds: the live state and the checkpoints no other state shares
    /// (those are [`Self::shared`]).
    pub fn bytes(&self) -> usize {
        let own = self.checkpoints.iter().filter(|c| !is_shared(c)).count();
        self.shape.bytes() * (1 + own)
    }

    /// Bytes held once one more checkpoint is taken (what a prefill may add): one more copy,
    /// unless the cap drops one of its own.
    pub fn bytes_with_checkpoint(&self) -> usize {
        let full = self.checkpoints.len() >= MAX_CHECKPOINTS;
        if full && !self.checkpoints.iter().any(is_shared) {
            self.bytes()
        } else {
            self.bytes() + self.shape.bytes()
        }
    }

    /// The checkpoints other states hold too, each as (identity, bytes), so that a total over
    /// many states counts each once.
    pub fn shared(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.checkpoints
            .iter()
            .filter(|c| is_shared(c))
            .map(|c| (Arc::as_ptr(c) as usize, self.shape.bytes()))
    }

    /// The live state of model layer `layer`.
    pub fn layer_mut(&mut self, layer: usize) -> Result<&mut LayerState> {
        match self.slot.get(layer).copied().flatten() {
            Some(s) => Ok(&mut self.now[s]),
            None => candle_core::bail!("layer {layer} keeps no recurrent state"),
        }
    }

    /// Asks for checkpoints after these positions (each the number of tokens the state has then
    /// seen, ascending), on top of the one at the end of every prefill step; marked ones are
    /// kept longer.
    pub fn mark(&mut self, positions: &[usize]) {
        self.marks = positions.to_vec();
    }

    /// Whether a step that ends after `end` tokens, having run `len`, wants the state after
    /// `seen` tokens kept: a marked position, or the end of a prefill step.
    pub fn wants(&self, seen: usize, end: usize, len: usize) -> bool {
        self.verifying || (seen == end && len > 1) || self.marks.binary_search(&seen).is_ok()
    }

    /// The next step verifies drafted tokens: the state after each of its rows is kept, so
    /// that the cache can be cut back to any of them ([`Self::rewind`]), and no checkpoint is
    /// taken.
    pub fn verify_next(&mut self) {
        self.verifying = true;
    }

    /// Forgets the states a verifying step kept.
    pub fn drop_verified(&mut self) {
        self.verified.clear();
    }

    /// Records layer `layer`'s state after `seen` tokens into the step's pending checkpoint.
    pub fn record(&mut self, layer: usize, seen: usize, state: &LayerState) -> Result<()> {
        let Some(slot) = self.slot.get(layer).copied().flatten() else {
            candle_core::bail!("layer {layer} keeps no recurrent state")
        };
        let at = match self.pending.iter().position(|c| c.len == seen) {
            Some(at) => at,
            None => {
                self.pending.push(Checkpoint {
                    len: seen,
                    marked: self.marks.binary_search(&seen).is_ok(),
                    layers: self.shape.zeros(),
                });
                self.pending.len() - 1
            }
        };
        self.pending[at].layers[slot].clone_from(state);
        Ok(())
    }

    /// Ends a step: its pending checkpoints are kept, within `MAX_CHECKPOINTS`.
    pub fn advance(&mut self) {
        if std::mem::take(&mut self.verifying) {
            self.verified = std::mem::take(&mut self.pending)
                .into_iter()
                .map(Arc::new)
                .collect();
            return;
        }
        for c in std::mem::take(&mut self.pending) {
            self.checkpoints.retain(|k| k.len != c.len);
            self.checkpoints.push(Arc::new(c));
        }
        self.checkpoints.sort_by_key(|c| c.len);
        while self.checkpoints.len() > MAX_CHECKPOINTS {
            let drop = self.least_needed();
            self.checkpoints.remove(drop);
        }
    }

    /// The checkpoint to drop: of the block boundaries if any (else of the marked ones), the
    /// one whose neighbours are closest (the fewest tokens to recompute where a prompt parts
    /// between them); never the latest.
    fn least_needed(&self) -> usize {
        let c = &self.checkpoints;
        let gap = |i: usize| c[i + 1].len - if i == 0 { 0 } else { c[i - 1].len };
        let boundaries = c[..c.len() - 1].iter().any(|k| !k.marked);
        (0..c.len() - 1)
            .filter(|&i| !boundaries || !c[i].marked)
            .min_by_key(|&i| gap(i))
            .unwrap_or(0)
    }

    /// The longest prefix of at most `len` tokens this state can resume from, given that it has
    /// seen `seen` tokens: all of them, or a checkpoint's, or none.
    pub fn resumable(&self, len: usize, seen: usize) -> usize {
        if len >= seen {
            return seen;
        }
        self.checkpoints
            .iter()
            .chain(&self.verified)
            .map(|c| c.len)
            .filter(|&l| l <= len)
            .max()
            .unwrap_or(0)
    }

    /// Goes back to the state after `len` tokens, which must be [`Self::resumable`]; a state
    /// that has seen `seen` tokens. Later checkpoints are dropped.
    pub fn rewind(&mut self, len: usize, seen: usize) -> Result<()> {
        self.pending.clear();
        if len >= seen {
            return Ok(());
        }
        if len == 0 {
            self.now = self.shape.zeros();
            self.checkpoints.clear();
            return Ok(());
        }
        self.now = self.kept_at(len)?.layers.clone();
        self.checkpoints.retain(|c| c.len <= len);
        self.verified.clear();
        Ok(())
    }

    /// The checkpoint, or the state a verifying step kept, after `len` tokens.
    fn kept_at(&self, len: usize) -> Result<&Checkpoint> {
        match self
            .verified
            .iter()
            .chain(&self.checkpoints)
            .find(|c| c.len == len)
        {
            Some(c) => Ok(c),
            None => candle_core::bail!("no recurrent-state checkpoint after {len} tokens"),
        }
    }

    /// The state after `len` tokens of `src` (which has seen `seen`), with its checkpoints up
    /// to there — the source's own where `share`, else copies; `len` must be resumable.
    pub fn prefix_of(src: &RecurrentState, len: usize, seen: usize, share: bool) -> Result<Self> {
        let now = if len >= seen {
            src.now.clone()
        } else if len == 0 {
            src.shape.zeros()
        } else {
            src.kept_at(len)?.layers.clone()
        };
        let mut s = Self::new(src.shape.clone());
        s.now = now;
        s.checkpoints = src
            .checkpoints
            .iter()
            .filter(|c| len > 0 && c.len <= len)
            .map(|c| {
                if share {
                    c.clone()
                } else {
                    Arc::new((**c).clone())
                }
            })
            .collect();
        Ok(s)
    }

    /// The live state of every linear layer, in layer order.
    pub fn layers(&self) -> &[LayerState] {
        &self.now
    }

    /// Replaces the live state (a session restored); checkpoints are dropped.
    pub fn restore(&mut self, layers: Vec<LayerState>) -> Result<()> {
        let fits = layers.len() == self.now.len()
            && layers
                .iter()
                .all(|l| l.conv.len() == self.shape.conv && l.delta.len() == self.shape.delta);
        if !fits {
            candle_core::bail!(
                "a recurrent state of {} layers does not fit this model's {} linear-attention layers of {} + {} values",
                layers.len(),
                self.now.len(),
                self.shape.conv,
                self.shape.delta
            );
        }
        self.now = layers;
        self.checkpoints.clear();
        self.pending.clear();
        Ok(())
    }
}

fn is_shared(c: &Arc<Checkpoint>) -> bool {
    Arc::strong_count(c) > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> RecurrentState {
        RecurrentState::new(StateShape {
            linear: vec![true, false, true],
            conv: 2,
            delta: 3,
        })
    }

    fn fill(s: &mut RecurrentState, v: f32) -> Result<LayerState> {
        let l = LayerState {
            conv: vec![v; 2],
            delta: vec![v; 3],
        };
        for layer in [0, 2] {
            *s.layer_mut(layer)? = l.clone();
        }
        Ok(l)
    }

    #[test]
    fn rewinds_only_to_checkpoints() -> Result<()> {
        let mut s = state();
        assert!(!s.is_linear(1) && s.is_linear(2));
        assert!(s.layer_mut(1).is_err());
        // A prefill of 10 tokens checkpoints its end; a decoded token does not.
        assert!(s.wants(10, 10, 10) && !s.wants(11, 11, 1));
        let at10 = fill(&mut s, 1.0)?;
        for layer in [0, 2] {
            s.record(layer, 10, &at10)?;
        }
        s.advance();
        fill(&mut s, 2.0)?;
        assert_eq!(
            (s.resumable(12, 12), s.resumable(11, 12), s.resumable(9, 12)),
            (12, 10, 0)
        );
        assert!(s.rewind(11, 12).is_err());
        s.rewind(10, 12)?;
        assert_eq!(s.layers()[1], at10);
        s.rewind(0, 10)?;
        assert_eq!(s.layers()[0].delta, vec![0.0; 3]);
        assert_eq!(s.resumable(5, 0), 0);
        Ok(())
    }

    /// Runs `len` tokens after `from` as one step, checkpointing where the state wants.
    fn step(s: &mut RecurrentState, from: usize, len: usize) -> Result<()> {
        let end = from + len;
        for seen in from + 1..=end {
            if s.wants(seen, end, len) {
                let l = fill(s, seen as f32)?;
                for layer in [0, 2] {
                    s.record(layer, seen, &l)?;
                }
            }
        }
        fill(s, end as f32)?;
        s.advance();
        Ok(())
    }

    /// Positions of at most `seen` the state can resume at (0 and its end among them).
    fn kept(s: &RecurrentState, seen: usize) -> Vec<usize> {
        (0..=seen).filter(|&n| s.resumable(n, seen) == n).collect()
    }

    #[test]
    fn keeps_marked_positions_and_spreads_block_boundaries() -> Result<()> {
        let mut s = state();
        // A 2000-token prompt in steps of 100: its system prompt ends at 301.
        s.mark(&[301, 2000]);
        for from in (0..2000).step_by(100) {
            step(&mut s, from, 100)?;
        }
        assert_eq!(s.bytes(), (1 + MAX_CHECKPOINTS) * s.shape().bytes());
        let at = kept(&s, 2000);
        assert_eq!(at.len(), MAX_CHECKPOINTS + 1, "{at:?}");
        assert!(at.contains(&301), "{at:?}");
        // Keeping only the first and latest would leave 1699 tokens to recompute.
        let widest = at.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(widest <= 500, "{at:?}");
        let p = RecurrentState::prefix_of(&s, 301, 2000, true)?;
        assert_eq!(p.layers()[0].conv, vec![301.0; 2]);
        assert_eq!(p.resumable(1000, 301), 301);

        // Ten turns of 50 tokens each (a message start and the prompt's end marked): block
        // boundaries go first; the system prompt's end and the latest turns stay.
        let mut seen = 2000;
        for _ in 0..10 {
            s.mark(&[seen + 3, seen + 50]);
            step(&mut s, seen, 50)?;
            seen += 50;
        }
        let at = kept(&s, seen);
        assert_eq!(at.len(), MAX_CHECKPOINTS + 1, "{at:?}");
        assert!(at.contains(&301) && at.contains(&2000), "{at:?}");
        assert!(s.resumable(seen - 1, seen) >= seen - 50, "{at:?}");
        Ok(())
    }

    #[test]
    fn a_shared_prefix_holds_the_same_checkpoints() -> Result<()> {
        let mut s = state();
        s.mark(&[40]);
        step(&mut s, 0, 50)?;
        step(&mut s, 50, 50)?;
        let one = s.shape().bytes();
        // The live state and the checkpoints after 40, 50 and 100.
        assert_eq!(s.bytes(), 4 * one);
        let p = RecurrentState::prefix_of(&s, 50, 100, true)?;
        assert_eq!(p.layers()[0].conv, vec![50.0; 2]);
        assert_eq!(p.resumable(45, 50), 40);
        // The checkpoints after 40 and 50 are held by both and counted by neither alone.
        assert_eq!((s.bytes(), p.bytes()), (2 * one, one));
        let ids: Vec<(usize, usize)> = p.shared().collect();
        assert_eq!(ids.len(), 2);
        assert!(s.shared().eq(ids.iter().copied()));
        let copy = RecurrentState::prefix_of(&s, 50, 100, false)?;
        assert_eq!((copy.bytes(), copy.shared().count()), (3 * one, 0));
        drop(s);
        assert_eq!((p.bytes(), p.shared().count()), (3 * one, 0));
        Ok(())
    }

    #[test]
    fn a_restored_state_must_fit() {
        let mut s = state();
        let wrong = vec![LayerState {
            conv: vec![0.0; 2],
            delta: vec![0.0; 3],
        }];
        assert!(s.restore(wrong).is_err());
    }
}
