//! The image processor's resize: the target size (`smart_resize`) and the antialiased
//! bicubic filter over 8-bit pixels that torchvision runs on x86 (ATen's integer kernel,
//! weights of 16 bits at most), bit for bit.

use crate::error::{EngineError, Result};

/// The size an image of `height × width` is resized to: each side a multiple of `factor`,
/// the area within `min_pixels..=max_pixels`, the aspect kept as near as those allow
/// (transformers' `smart_resize`, Python's rounding included: halves to even).
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    let bad = |why: String| EngineError::invalid("image", why);
    if height == 0 || width == 0 {
        return Err(bad(format!("a {width}×{height} image has no pixels")));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(bad(format!(
            "a {width}×{height} image: the aspect ratio must be below 200"
        )));
    }
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// One axis's filter: for each output pixel, the first input pixel it reads and its integer
/// weights; and the weights' precision in bits.
struct Axis {
    taps: Vec<(usize, Vec<i64>)>,
    precision: u32,
}

/// Keys' cubic convolution (a = -0.5) as ATen writes it.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

impl Axis {
    /// ATen's `_compute_indices_int16_weights_aa` for bicubic: weights normalised to sum to
    /// one, then scaled to the largest precision at which the largest fits in 15 bits.
    fn new(n_in: usize, n_out: usize) -> Self {
        let scale = n_in as f64 / n_out as f64;
        let filterscale = scale.max(1.0);
        let support = 2.0 * filterscale;
        let mut rows = Vec::with_capacity(n_out);
        for i in 0..n_out {
            let center = (i as f64 + 0.5) * scale;
            let ss = 1.0 / filterscale;
            // C's truncation toward zero, as the kernel casts.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(n_in as i64) as usize;
            let n = xmax.saturating_sub(xmin);
            let w: Vec<f64> = (0..n)
                .map(|x| cubic(((x + xmin) as f64 - center + 0.5) * ss))
                .collect();
            let total: f64 = w.iter().fold(0.0, |s, v| s + v);
            let w = w
                .into_iter()
                .map(|v| if total != 0.0 { v / total } else { v })
                .collect::<Vec<_>>();
            rows.push((xmin, w));
        }
        let wmax = rows
            .iter()
            .flat_map(|(_, w)| w.iter().copied())
            .fold(f64::MIN, f64::max);
        let mut precision = 0u32;
        while precision < 22 && ((0.5 + wmax * (1u64 << (precision + 1)) as f64) as i64) < (1 << 15)
        {
            precision += 1;
        }
        let one = (1u64 << precision) as f64;
        let taps = rows
            .into_iter()
            .map(|(xmin, w)| {
                let q = w
                    .iter()
                    .map(|&v| {
                        if v < 0.0 {
                            (-0.5 + v * one) as i64
                        } else {
                            (0.5 + v * one) as i64
                        }
                    })
                    .collect();
                (xmin, q)
            })
            .collect();
        Self { taps, precision }
    }

    /// `sum` of integer products rounded back to a byte.
    fn byte(&self, sum: i64) -> u8 {
        let half = if self.precision > 0 {
            1i64 << (self.precision - 1)
        } else {
            0
        };
        ((sum + half) >> self.precision).clamp(0, 255) as u8
    }
}

/// `rgb` (`height × width × 3`, row-major) resized to `out_h × out_w`: horizontally first
/// (where the width changes), the intermediate rounded to bytes, then vertically.
pub fn resize_rgb(rgb: &[u8], height: usize, width: usize, out_h: usize, out_w: usize) -> Vec<u8> {
    let mut img = rgb.to_vec();
    let mut w = width;
    if out_w != width {
        let axis = Axis::new(width, out_w);
        let mut out = vec![0u8; height * out_w * 3];
        for y in 0..height {
            let row = &img[y * w * 3..(y + 1) * w * 3];
            for (x, (xmin, q)) in axis.taps.iter().enumerate() {
                for c in 0..3 {
                    let sum: i64 = q
                        .iter()
                        .enumerate()
                        .map(|(k, &wk)| row[(xmin + k) * 3 + c] as i64 * wk)
                        .sum();
                    out[(y * out_w + x) * 3 + c] = axis.byte(sum);
                }
            }
        }
        img = out;
        w = out_w;
    }
    if out_h != height {
        let axis = Axis::new(height, out_h);
        let mut out = vec![0u8; out_h * w * 3];
        for (y, (ymin, q)) in axis.taps.iter().enumerate() {
            for x in 0..w * 3 {
                let sum: i64 = q
                    .iter()
                    .enumerate()
                    .map(|(k, &wk)| img[(ymin + k) * w * 3 + x] as i64 * wk)
                    .sum();
                out[y * w * 3 + x] = axis.byte(sum);
            }
        }
        img = out;
    }
    img
}
