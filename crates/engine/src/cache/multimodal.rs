//! What a prompt's images add to its sequence: each image's tokens (the vision tower's
//! output, in the model's width) where the prompt holds them, and the multimodal rotary
//! positions of the prompt's tokens. The cache carries it, so that every chunk of the
//! prompt, and every token after it, finds its embeddings and its positions.

use candle_core::Tensor;

/// A row's position as multimodal RoPE reads it: time, row, column.
pub type Position3 = [u32; 3];

/// The images of one sequence's prompt.
#[derive(Debug, Clone)]
pub struct Multimodal {
    positions: Vec<Position3>,
    delta: i64,
    /// Each image's first token in the prompt and its tokens' embeddings `[n, hidden]`.
    images: Vec<(usize, Tensor)>,
}

/// The positions of a run of rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    /// Plain positions from this one on (text: the three coordinates equal, consecutive).
    From(usize),
    /// One position per row.
    Each(Vec<Position3>),
}

impl Multimodal {
    /// The prompt's positions (the tokens past them continue at index + `delta`) and its
    /// images' embeddings, each with its first token's index.
    pub fn new(positions: Vec<Position3>, delta: i64, images: Vec<(usize, Tensor)>) -> Self {
        Self {
            positions,
            delta,
            images,
        }
    }

    /// The positions of rows `start..start + len`.
    pub fn rows(&self, start: usize, len: usize) -> Rows {
        let at = |i: usize| -> Position3 {
            match self.positions.get(i) {
                Some(&p) => p,
                None => [(i as i64 + self.delta).max(0) as u32; 3],
            }
        };
        let first = at(start);
        let plain = (0..len).all(|k| {
            let p = at(start + k);
            p == [first[0] + k as u32; 3]
        });
        match plain {
            true => Rows::From(first[0] as usize),
            false => Rows::Each((start..start + len).map(at).collect()),
        }
    }

    /// The image embeddings that replace token embeddings among rows `start..start + len`:
    /// `(row within the run, embeddings)` in order.
    pub fn embeddings(
        &self,
        start: usize,
        len: usize,
    ) -> candle_core::Result<Vec<(usize, Tensor)>> {
        let end = start + len;
        let mut out = vec![];
        for (first, embeds) in &self.images {
            let last = first + embeds.dim(0)?;
            let (from, to) = ((*first).max(start), last.min(end));
            if from < to {
                out.push((from - start, embeds.narrow(0, from - first, to - from)?));
            }
        }
        Ok(out)
    }

    /// Where the first image starts in the prompt: a shared prefix ends there at the latest.
    pub fn first_image(&self) -> Option<usize> {
        self.images.iter().map(|(first, _)| *first).min()
    }
}
