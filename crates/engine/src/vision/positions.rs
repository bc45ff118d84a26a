//! Multimodal rotary positions of a prompt that holds images (transformers'
//! `get_rope_index` for Qwen3.5): text advances all three coordinates (time, row, column)
//! by one per token; an image's tokens take the position where it starts in time and that
//! plus their row and column in the merged grid; the text after it resumes past the image's
//! longer side, not its token count.

use crate::error::{EngineError, Result};

/// Positions `[time, row, column]` of each token of a prompt, and the shift that continues
/// them: the token at index `i` past the prompt takes position `i + delta` in all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MropePositions {
    /// One per prompt token.
    pub positions: Vec<[u32; 3]>,
    /// Position minus index past the prompt (at most 0: an image takes fewer positions than tokens).
    pub delta: i64,
}

/// The positions of `tokens`, whose runs of `image_token` are the images of `grids` (frames,
/// patch rows, patch columns) in order, each run `frames × rows × columns / merge²` long.
pub fn mrope_positions(
    tokens: &[u32],
    image_token: u32,
    grids: &[[usize; 3]],
    merge: usize,
) -> Result<MropePositions> {
    let mut positions = Vec::with_capacity(tokens.len());
    let (mut cur, mut i, mut images) = (0u32, 0usize, grids.iter());
    while i < tokens.len() {
        if tokens[i] != image_token {
            positions.push([cur; 3]);
            cur += 1;
            i += 1;
            continue;
        }
        let Some(&[t, h, w]) = images.next() else {
            return Err(EngineError::invalid(
                "images",
                "the prompt holds more images than were given",
            ));
        };
        let (lh, lw) = (h / merge, w / merge);
        let n = t * lh * lw;
        if tokens.len() < i + n || tokens[i..i + n].iter().any(|&t| t != image_token) {
            return Err(EngineError::invalid(
                "images",
                format!("an image of {n} tokens is not a run of {n} image tokens in the prompt"),
            ));
        }
        for tt in 0..t {
            for r in 0..lh {
                for c in 0..lw {
                    positions.push([cur + tt as u32, cur + r as u32, cur + c as u32]);
                }
            }
        }
        i += n;
        cur += lh.max(lw) as u32;
    }
    if images.next().is_some() {
        return Err(EngineError::invalid(
            "images",
            "more images were given than the prompt holds",
        ));
    }
    let top = positions
        .iter()
        .flatten()
        .max()
        .map_or(0, |&p| p as i64 + 1);
    Ok(MropePositions {
        delta: top - tokens.len() as i64,
        positions,
    })
}
