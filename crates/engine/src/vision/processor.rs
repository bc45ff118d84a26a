//! Images into the tower's input: decoded, made RGB, resized, normalised and cut into
//! patches in the order the tower reads them (transformers' `Qwen2VLImageProcessor` with
//! torchvision, which Qwen3.5's processor is).

use super::config::ProcessorConfig;
use super::resize::{resize_rgb, smart_resize};
use crate::error::{EngineError, Result};
use std::borrow::Cow;

/// An image ready for the tower: one row per patch, the patches of each merge window
/// consecutive; each row channels × frames × patch rows × patch columns.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageInput {
    /// `rows × row_len` values.
    pub pixels: Vec<f32>,
    /// Frames, patch rows, patch columns (`image_grid_thw`).
    pub grid: [usize; 3],
    /// A hash of the pixels and grid: the prefix cache knows an image by it, so a later
    /// prompt with the same image reuses the rows it left.
    pub key: u64,
}

impl ImageInput {
    /// The tower's input of `pixels` on `grid`, keyed by their hash.
    pub fn new(pixels: Vec<f32>, grid: [usize; 3]) -> Self {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for g in grid {
            h.update((g as u64).to_le_bytes());
        }
        // The values' bytes as they lie (the key never leaves the process).
        h.update(bytemuck::cast_slice::<f32, u8>(&pixels));
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Self {
            pixels,
            grid,
            key: u64::from_le_bytes(first),
        }
    }

    /// How many tokens the image takes in the text: its patches over a merge window.
    pub fn tokens(&self, merge: usize) -> usize {
        self.grid.iter().product::<usize>() / (merge * merge)
    }
}

/// An image decoded to 8-bit RGB, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Rgb {
    /// Pixels across.
    pub width: usize,
    /// Pixels down.
    pub height: usize,
    /// `height × width × 3` bytes.
    pub data: Vec<u8>,
}

impl Rgb {
    /// Decodes PNG, JPEG, WebP or GIF (its first frame) `bytes`; transparency is laid over
    /// white, as the processor does. `max_pixels` bounds the decoded size (a corrupt or
    /// hostile header cannot make it allocate more). Errors name what is wrong.
    pub fn decode(bytes: &[u8], max_pixels: usize) -> Result<Self> {
        use image::ImageDecoder;
        let bad = |why: String| EngineError::invalid("image", why);
        let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| bad(format!("cannot read it: {e}")))?;
        if reader.format().is_none() {
            return Err(bad("not a PNG, JPEG, WebP or GIF image".into()));
        }
        // The size from the header, checked before any pixel is decoded.
        let decoder = reader
            .into_decoder()
            .map_err(|e| bad(format!("cannot read its header: {e}")))?;
        let (w, h) = decoder.dimensions();
        let (width, height) = (w as usize, h as usize);
        if width == 0 || height == 0 {
            return Err(bad(format!("a {width}×{height} image has no pixels")));
        }
        if width.saturating_mul(height) > max_pixels {
            return Err(bad(format!(
                "a {width}×{height} image is over the limit of {max_pixels} pixels"
            )));
        }
        let decoded = image::DynamicImage::from_decoder(decoder)
            .map_err(|e| bad(format!("cannot decode it: {e}")))?;
        let data = if decoded.color().has_alpha() {
            let rgba = decoded.to_rgba8();
            rgba.pixels()
                .flat_map(|p| {
                    let a = p.0[3] as u32;
                    // Over opaque white.
                    let over = move |c: u8| ((c as u32 * a + 255 * (255 - a) + 127) / 255) as u8;
                    [over(p.0[0]), over(p.0[1]), over(p.0[2])]
                })
                .collect()
        } else {
            decoded.to_rgb8().into_raw()
        };
        Ok(Self {
            width,
            height,
            data,
        })
    }
}

/// Resizes and normalises images for one tower.
#[derive(Debug, Clone)]
pub struct ImageProcessor {
    cfg: ProcessorConfig,
}

impl ImageProcessor {
    /// A processor with `cfg`'s bounds and normalisation.
    pub fn new(cfg: ProcessorConfig) -> Self {
        Self { cfg }
    }

    /// Its settings.
    pub fn config(&self) -> &ProcessorConfig {
        &self.cfg
    }

    /// `image` resized to the processor's bounds (8-bit, row-major RGB; the image itself
    /// where it already fits) and its size.
    pub fn resized<'a>(&self, image: &'a Rgb) -> Result<(Cow<'a, [u8]>, usize, usize)> {
        let c = &self.cfg;
        let (h, w) = smart_resize(
            image.height,
            image.width,
            c.factor(),
            c.min_pixels,
            c.max_pixels,
        )?;
        let data = match (h, w) == (image.height, image.width) {
            true => Cow::Borrowed(image.data.as_slice()),
            false => Cow::Owned(resize_rgb(&image.data, image.height, image.width, h, w)),
        };
        Ok((data, h, w))
    }

    /// `image` as the tower's input.
    pub fn process(&self, image: &Rgb) -> Result<ImageInput> {
        let (data, h, w) = self.resized(image)?;
        let c = &self.cfg;
        let (p, m, t) = (c.patch_size, c.merge_size, c.temporal_patch_size);
        let (gh, gw) = (h / p, w / p);
        // torchvision's normalise, the rescale folded in: (code - 255·mean) / (255·std) in f32.
        let mean = c.image_mean.map(|v| (v as f64 * 255.0) as f32);
        let std = c.image_std.map(|v| (v as f64 * 255.0) as f32);
        let row_len = 3 * t * p * p;
        let mut pixels = Vec::with_capacity(gh * gw * row_len);
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for ih in 0..m {
                    for iw in 0..m {
                        let (row, col) = (bh * m + ih, bw * m + iw);
                        for ch in 0..3 {
                            for _frame in 0..t {
                                for py in 0..p {
                                    for px in 0..p {
                                        let (y, x) = (row * p + py, col * p + px);
                                        let code = data[(y * w + x) * 3 + ch] as f32;
                                        pixels.push((code - mean[ch]) / std[ch]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(ImageInput::new(pixels, [1, gh, gw]))
    }
}
