//! The vision tower as the engine runs it: images encoded once and kept by their key, so
//! that the engine encodes a request's images on a thread of their own before the request
//! queues (the scheduler's steps go on meanwhile) and the scheduler finds them done.

use super::processor::ImageInput;
use super::tower::VisionTower;
use crate::error::Result;
use candle_core::Tensor;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Bytes of encoded images kept (the latest first to stay): a 1024 × 1024 image of a
/// 4096-wide model is 16 MiB in f32.
const KEPT_BYTES: usize = 256 << 20;

/// A tower and the images it encoded last, shared by the engine and the model.
#[derive(Debug, Clone)]
pub struct ImageEncoder {
    tower: Arc<VisionTower>,
    recent: Arc<Mutex<VecDeque<(u64, Tensor)>>>,
}

impl ImageEncoder {
    /// Encodes with `tower`.
    pub fn new(tower: VisionTower) -> Self {
        Self {
            tower: Arc::new(tower),
            recent: Arc::default(),
        }
    }

    /// The tower.
    pub fn tower(&self) -> &VisionTower {
        &self.tower
    }

    /// `image`'s tokens (`[tokens, out_hidden]`, f32): kept ones as they are, others encoded
    /// and kept.
    pub fn encode(&self, image: &ImageInput) -> Result<Tensor> {
        if let Some(t) = self.kept(image.key) {
            return Ok(t);
        }
        let t = self.tower.forward(image)?;
        if let Ok(mut recent) = self.recent.lock() {
            recent.retain(|(k, _)| *k != image.key);
            recent.push_back((image.key, t.clone()));
            let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
            let mut total: usize = recent.iter().map(|(_, t)| bytes(t)).sum();
            while total > KEPT_BYTES && recent.len() > 1 {
                if let Some((_, old)) = recent.pop_front() {
                    total -= bytes(&old);
                }
            }
        }
        Ok(t)
    }

    /// The image of `key`, where it is kept.
    pub fn kept(&self, key: u64) -> Option<Tensor> {
        let recent = self.recent.lock().ok()?;
        recent
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, t)| t.clone())
    }
}
