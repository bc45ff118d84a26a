//! The recurrent state of a hybrid model's linear-attention layers, held in the sequence's
//! cache beside the keys and values of its full-attention layers.
//!
//! Keys and values can be cut back to any prefix; a recurrent state cannot: it is one fixed-size
//! summary of every token so far. So the state is copied at the positions a later prompt may
//! resume from — the end of each prefill (a turn's prompt) and the places the scheduler marks
//! (message starts: a shared system prompt) — and a cache can only be cut back, shared or
//! resumed at one of those checkpoints or at its end.

use candle_core::Result;

/// Checkpoints a cache keeps: the first (a system prompt that other conversations share) and
/// the latest ones (the previous turns' ends). Each is a full copy of the state.
const MAX_CHECKPOINTS: usize = 4;

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
    layers: Vec<LayerState>,
}

/// The live state of every linear layer, its checkpoints, and those being written by a step.
#[derive(Debug, Clone)]
pub struct RecurrentState {
    shape: StateShape,
    /// `slot[i]`: the index among the linear layers of model layer `i`.
    slot: Vec<Option<usize>>,
    now: Vec<LayerState>,
    checkpoints: Vec<Checkpoint>,
    /// Positions where the scheduler wants a checkpoint (message starts).
    marks: Vec<usize>,
    /// Checkpoints the layers of the running step fill in, completed by [`Self::advance`].
    pending: Vec<Checkpoint>,
    /// Whether the running step verifies drafted tokens: the state after each of its rows is
    /// kept (in `verified`, not as a checkpoint) until the cache is cut back to the accepted
    /// ones.
    verifying: bool,
    /// The states after each row of the last verifying step.
    verified: Vec<Checkpoint>,
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

    /// Bytes held: the live state and every checkpoint.
    pub fn bytes(&self) -> usize {
        self.shape.bytes() * (1 + self.checkpoints.len())
    }

    /// Bytes held once one more checkpoint is taken (what a prefill may add).
    pub fn bytes_with_checkpoint(&self) -> usize {
        self.shape.bytes() * (1 + (self.checkpoints.len() + 1).min(MAX_CHECKPOINTS))
    }

    /// The live state of model layer `layer`.
    pub fn layer_mut(&mut self, layer: usize) -> Result<&mut LayerState> {
        match self.slot.get(layer).copied().flatten() {
            Some(s) => Ok(&mut self.now[s]),
            None => candle_core::bail!("layer {layer} keeps no recurrent state"),
        }
    }

    /// Asks for checkpoints after these positions (each the number of tokens the state has then
    /// seen), on top of the one at the end of every prefill.
    pub fn mark(&mut self, positions: &[usize]) {
        self.marks = positions.to_vec();
    }

    /// Whether a step that ends after `end` tokens, having run `len`, wants the state after
    /// `seen` tokens kept: a marked position, or the end of a prefill.
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
                    layers: self.shape.zeros(),
                });
                self.pending.len() - 1
            }
        };
        self.pending[at].layers[slot].clone_from(state);
        Ok(())
    }

    /// Ends a step: its pending checkpoints are kept, within `MAX_CHECKPOINTS` (the first and
    /// the latest).
    pub fn advance(&mut self) {
        if std::mem::take(&mut self.verifying) {
            self.verified = std::mem::take(&mut self.pending);
            return;
        }
        for c in std::mem::take(&mut self.pending) {
            self.checkpoints.retain(|k| k.len != c.len);
            self.checkpoints.push(c);
        }
        self.checkpoints.sort_by_key(|c| c.len);
        while self.checkpoints.len() > MAX_CHECKPOINTS {
            self.checkpoints.remove(1);
        }
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
        let Some(c) = self
            .verified
            .iter()
            .chain(&self.checkpoints)
            .find(|c| c.len == len)
        else {
            candle_core::bail!("no recurrent-state checkpoint after {len} tokens")
        };
        self.now = c.layers.clone();
        self.checkpoints.retain(|c| c.len <= len);
        self.verified.clear();
        Ok(())
    }

    /// The state after `len` tokens of `src` (which has seen `seen`), with its checkpoints up
    /// to there; `len` must be resumable.
    pub fn prefix_of(src: &RecurrentState, len: usize, seen: usize) -> Result<Self> {
        let mut s = src.clone();
        s.marks.clear();
        s.rewind(len, seen)?;
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

    #[test]
    fn keeps_the_first_and_latest_checkpoints() -> Result<()> {
        let mut s = state();
        s.mark(&[3]);
        assert!(s.wants(3, 50, 50));
        for end in [3, 10, 20, 30, 40, 50] {
            let l = fill(&mut s, end as f32)?;
            for layer in [0, 2] {
                s.record(layer, end, &l)?;
            }
            s.advance();
        }
        assert_eq!(s.bytes(), 5 * s.shape().bytes());
        let kept: Vec<usize> = (0..=50).filter(|&n| s.resumable(n, 60) == n).collect();
        assert_eq!(kept, vec![0, 3, 30, 40, 50]);
        let p = RecurrentState::prefix_of(&s, 30, 60)?;
        assert_eq!(p.layers()[0].conv, vec![30.0; 2]);
        assert_eq!(p.resumable(45, 30), 30);
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
