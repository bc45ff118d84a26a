//! Images in: the vision tower of Qwen3.5 / 3.6 / 3.8 (`model.visual.*`), the image
//! processor that feeds it, and the multimodal rotary positions of a prompt that holds
//! images.
//!
//! An image is decoded ([`Rgb`]), resized and cut into patches ([`ImageProcessor`]), and
//! encoded by the tower ([`VisionTower`]) into as many tokens of the language model's width
//! as the prompt holds `<|image_pad|>` tokens for it; the prompt's positions come from
//! [`mrope_positions`].

mod config;
mod encoder;
mod mmproj;
mod positions;
mod processor;
mod resize;
mod tower;

pub use config::{ProcessorConfig, VisionConfig};
pub use encoder::ImageEncoder;
pub use mmproj::{Mmproj, MmprojWeights};
pub use positions::{mrope_positions, MropePositions};
pub use processor::{ImageInput, ImageProcessor, Rgb};
pub use resize::{resize_rgb, smart_resize};
pub use tower::{patch_coordinates, VisionTower};

use crate::error::{EngineError, Result};
use crate::load::weights::WeightSource;
use serde_json::Value;
use std::path::Path;

/// A model's vision: its tower, the processor that feeds it, and the token that stands for
/// one of an image's tokens in the text (`<|image_pad|>`).
#[derive(Debug, Clone)]
pub struct Vision {
    /// The tower, and the images it encoded last.
    pub encoder: ImageEncoder,
    /// Its image processor.
    pub processor: ImageProcessor,
    /// `image_token_id` of config.json.
    pub image_token: u32,
}

impl Vision {
    /// The tower.
    pub fn tower(&self) -> &VisionTower {
        self.encoder.tower()
    }

    /// The vision of a `…ForConditionalGeneration` checkpoint in `dir` whose config.json is
    /// `config`: `None` where the config has no `vision_config` or the weights no tower
    /// (`{prefix}.patch_embed.proj.weight`).
    pub fn load(
        config: &Value,
        dir: &Path,
        weights: &dyn WeightSource,
        prefix: &str,
    ) -> Result<Option<Self>> {
        let Some(cfg) = VisionConfig::from_config(config)? else {
            return Ok(None);
        };
        if !weights.contains(&format!("{prefix}.patch_embed.proj.weight")) {
            return Ok(None);
        }
        let image_token = config
            .get("image_token_id")
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                EngineError::config(
                    &dir.join("config.json"),
                    "image_token_id",
                    "a model with a vision tower needs the id of its image token",
                )
            })? as u32;
        Ok(Some(Self {
            encoder: ImageEncoder::new(VisionTower::load(&cfg, weights, prefix)?),
            processor: ImageProcessor::new(ProcessorConfig::load(dir, &cfg)?),
            image_token,
        }))
    }

    /// The vision of llama.cpp's mmproj file `path`, for a model whose vocabulary has the
    /// image token `image_token`, its products run as `kernels` says (the model's).
    pub fn from_mmproj(
        path: &Path,
        image_token: u32,
        device: &candle_core::Device,
        kernels: crate::kernels::KernelContext,
    ) -> Result<Self> {
        let mmproj = Mmproj::open(path)?;
        let cfg = mmproj.config()?;
        Ok(Self {
            encoder: ImageEncoder::new(VisionTower::load(
                &cfg,
                &mmproj.weights(device).with_kernels(kernels),
                "model.visual",
            )?),
            processor: ImageProcessor::new(mmproj.processor(&cfg)),
            image_token,
        })
    }
}
