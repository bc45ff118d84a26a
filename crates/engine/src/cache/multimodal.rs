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
    images: Vec<ImageRows>,
}

/// One image of a prompt as the language model takes it.
#[derive(Debug, Clone)]
pub struct ImageRows {
    /// Its first token in the prompt.
    pub first: usize,
    /// Its tokens' embeddings `[n, hidden]`.
    pub embeds: Tensor,
    /// Its pixels' hash ([`crate::vision::ImageInput::key`]).
    pub key: u64,
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
    /// images, in order.
    pub fn new(positions: Vec<Position3>, delta: i64, images: Vec<ImageRows>) -> Self {
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
        for ImageRows { first, embeds, .. } in &self.images {
            let last = first + embeds.dim(0)?;
            let (from, to) = ((*first).max(start), last.min(end));
            if from < to {
                out.push((from - start, embeds.narrow(0, from - first, to - from)?));
            }
        }
        Ok(out)
    }

    /// The prompt's images, in order.
    pub fn images(&self) -> &[ImageRows] {
        &self.images
    }

    /// The images' keys, in order.
    pub fn keys(&self) -> Vec<u64> {
        self.images.iter().map(|i| i.key).collect()
    }
}

/// `tokens` as the prefix cache compares them: the run of image tokens of the `i`-th image
/// becomes values drawn from `keys[i]` (above every vocabulary id, one per place in the run),
/// so that two prompts share a prefix through an image only when it is the same image. An
/// image token past the known images ends the keys: nothing after it can be matched.
pub fn prefix_keys(tokens: &[u32], image_token: Option<u32>, keys: &[u64]) -> Vec<u32> {
    let Some(image_token) = image_token else {
        return tokens.to_vec();
    };
    let mut out = Vec::with_capacity(tokens.len());
    let mut image = 0;
    let mut place = 0u64;
    for (i, &t) in tokens.iter().enumerate() {
        if t != image_token {
            out.push(t);
            continue;
        }
        if i > 0 && tokens[i - 1] == image_token {
            place += 1;
        } else {
            image += 1;
            place = 0;
        }
        let Some(&key) = keys.get(image - 1) else {
            break;
        };
        out.push(0x8000_0000 | (mix(key ^ place.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u32));
    }
    out
}

/// SplitMix64's finaliser: every bit of the key reaches the low 31 kept.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_matches_only_itself() {
        let img = 9;
        let prompt = [1, 2, img, img, img, 3, img, img, 4];
        let a = prefix_keys(&prompt, Some(img), &[10, 20]);
        let b = prefix_keys(&prompt, Some(img), &[10, 21]);
        assert_eq!(a.len(), prompt.len());
        assert_eq!(a[..6], b[..6], "the first image is the same");
        assert_ne!(a[6], b[6], "the second is not");
        assert_eq!(a[..2], prompt[..2]);
        assert!(a[2..5].iter().all(|&k| k >= 0x8000_0000));
        assert_ne!(a[2], a[3], "each place in the run has its own value");
        // No keys known: nothing from the first image on.
        assert_eq!(prefix_keys(&prompt, Some(img), &[]), vec![1, 2]);
        assert_eq!(prefix_keys(&prompt, Some(img), &[10]).len(), 6);
        assert_eq!(prefix_keys(&prompt, None, &[]), prompt.to_vec());
    }
}
