//! The vision tower's settings (`vision_config` in a `…ForConditionalGeneration` config.json)
//! and the image processor's (`preprocessor_config.json`).

use crate::error::{EngineError, Result};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// Widths of Qwen3.5's vision tower.
#[derive(Debug, Clone, Deserialize)]
pub struct VisionConfig {
    /// ViT blocks.
    pub depth: usize,
    /// Width of the blocks.
    pub hidden_size: usize,
    /// Width inside each block's MLP.
    pub intermediate_size: usize,
    /// Attention heads of a block.
    pub num_heads: usize,
    /// A square grid of learned position embeddings, resampled to each image's grid.
    pub num_position_embeddings: usize,
    /// The language model's width: what the merger writes.
    pub out_hidden_size: usize,
    /// Side of a patch in pixels.
    pub patch_size: usize,
    /// Side of the window of patches merged into one token.
    pub spatial_merge_size: usize,
    /// Frames in a patch (an image is its one frame repeated).
    pub temporal_patch_size: usize,
    /// Colour channels.
    #[serde(default = "three")]
    pub in_channels: usize,
    #[serde(default)]
    rope_parameters: Option<VisionRope>,
}

#[derive(Debug, Clone, Deserialize)]
struct VisionRope {
    rope_theta: Option<f64>,
}

fn three() -> usize {
    3
}

impl VisionConfig {
    /// The `vision_config` of a config.json, `None` where it has none.
    pub fn from_config(config: &Value) -> Result<Option<Self>> {
        let Some(v) = config.get("vision_config") else {
            return Ok(None);
        };
        let cfg: Self = serde_json::from_value(v.clone())
            .map_err(|e| EngineError::invalid("config.json", format!("vision_config: {e}")))?;
        cfg.check()
            .map_err(|why| EngineError::invalid("config.json", format!("vision_config: {why}")))?;
        Ok(Some(cfg))
    }

    /// A tower of these widths (one RGB frame repeated twice per patch, rotary base 10 000),
    /// as llama.cpp's mmproj files describe it.
    #[allow(clippy::too_many_arguments)] // the widths a tower is made of: a struct would only rename them
    pub fn new(
        depth: usize,
        hidden_size: usize,
        intermediate_size: usize,
        num_heads: usize,
        num_position_embeddings: usize,
        out_hidden_size: usize,
        patch_size: usize,
        spatial_merge_size: usize,
    ) -> Self {
        Self {
            depth,
            hidden_size,
            intermediate_size,
            num_heads,
            num_position_embeddings,
            out_hidden_size,
            patch_size,
            spatial_merge_size,
            temporal_patch_size: 2,
            in_channels: 3,
            rope_parameters: None,
        }
    }

    /// Whether the widths fit together; the error says how they do not.
    pub fn check(&self) -> std::result::Result<(), String> {
        let heads_fit = self.num_heads > 0 && self.hidden_size.is_multiple_of(self.num_heads * 4);
        let side = (self.num_position_embeddings as f64).sqrt() as usize;
        if !heads_fit || side * side != self.num_position_embeddings || self.patch_size == 0 {
            return Err(
                "the width must split into heads of a multiple of 4, the position \
                        embeddings must form a square, the patch side must be above 0"
                    .into(),
            );
        }
        if self.spatial_merge_size == 0 {
            return Err("the merge window must be above 0".into());
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// The side of the learned position grid.
    pub fn position_side(&self) -> usize {
        (self.num_position_embeddings as f64).sqrt() as usize
    }

    /// Base of the 2-D rotary frequencies.
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .unwrap_or(10_000.0)
    }

    /// Values in one patch row of the processor's output: channels × frames × patch².
    pub fn patch_values(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
}

/// How images are resized and normalised before the tower (transformers'
/// `Qwen2VLImageProcessor`, which Qwen3.5's processor uses).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessorConfig {
    /// Bounds on the resized image's area, in pixels.
    pub min_pixels: usize,
    /// See `min_pixels`.
    pub max_pixels: usize,
    /// Side of a patch in pixels.
    pub patch_size: usize,
    /// Side of the window of patches merged into one token.
    pub merge_size: usize,
    /// Frames in a patch.
    pub temporal_patch_size: usize,
    /// Per channel, subtracted from values in 0..=1.
    pub image_mean: [f32; 3],
    /// Per channel, what the centred values are divided by.
    pub image_std: [f32; 3],
}

impl ProcessorConfig {
    /// The released Qwen3.5 processor's settings for a tower of `vision`.
    pub fn for_tower(vision: &VisionConfig) -> Self {
        Self {
            min_pixels: 65_536,
            max_pixels: 16_777_216,
            patch_size: vision.patch_size,
            merge_size: vision.spatial_merge_size,
            temporal_patch_size: vision.temporal_patch_size,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
        }
    }

    /// `preprocessor_config.json` in `dir` over [`ProcessorConfig::for_tower`]'s defaults:
    /// `size.shortest_edge`/`longest_edge` (or Qwen2-VL's `min_pixels`/`max_pixels`), the
    /// patch, merge and temporal sizes, `image_mean`, `image_std`.
    pub fn load(dir: &Path, vision: &VisionConfig) -> Result<Self> {
        let mut cfg = Self::for_tower(vision);
        let path = dir.join("preprocessor_config.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(cfg);
        };
        let bad = |why: String| EngineError::config(&path, "preprocessor", why);
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let count = |v: Option<&Value>, key: &str| -> Result<Option<usize>> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(n) => n
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| bad(format!("`{key}` must be a positive integer"))),
            }
        };
        let size = v.get("size");
        if let Some(n) = count(
            size.and_then(|s| s.get("shortest_edge")),
            "size.shortest_edge",
        )?
        .or(count(v.get("min_pixels"), "min_pixels")?)
        {
            cfg.min_pixels = n;
        }
        if let Some(n) = count(
            size.and_then(|s| s.get("longest_edge")),
            "size.longest_edge",
        )?
        .or(count(v.get("max_pixels"), "max_pixels")?)
        {
            cfg.max_pixels = n;
        }
        for (key, field) in [
            ("patch_size", &mut cfg.patch_size),
            ("merge_size", &mut cfg.merge_size),
            ("temporal_patch_size", &mut cfg.temporal_patch_size),
        ] {
            if let Some(n) = count(v.get(key), key)? {
                *field = n;
            }
        }
        for (key, field) in [
            ("image_mean", &mut cfg.image_mean),
            ("image_std", &mut cfg.image_std),
        ] {
            if let Some(values) = v.get(key) {
                let values: Vec<f32> = serde_json::from_value(values.clone())
                    .map_err(|e| bad(format!("`{key}`: {e}")))?;
                *field = values
                    .try_into()
                    .map_err(|_| bad(format!("`{key}` must hold three numbers")))?;
            }
        }
        if cfg.patch_size != vision.patch_size
            || cfg.merge_size != vision.spatial_merge_size
            || cfg.temporal_patch_size != vision.temporal_patch_size
        {
            return Err(bad(
                "patch_size, merge_size and temporal_patch_size must match config.json's \
                 vision_config"
                    .into(),
            ));
        }
        if cfg.image_std.contains(&0.0) || cfg.min_pixels > cfg.max_pixels {
            return Err(bad(
                "image_std must not be 0, and the pixel bounds must be in order".into(),
            ));
        }
        Ok(cfg)
    }

    /// The side every resized dimension is a multiple of: a patch times the merge.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }
}
