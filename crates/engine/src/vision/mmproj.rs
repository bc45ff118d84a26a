//! llama.cpp's `mmproj` GGUF of a Qwen3.5 vision tower (`clip.projector_type =
//! qwen3vl_merger`, made by `convert_hf_to_gguf.py --mmproj`): the tower's widths from its
//! `clip.vision.*` metadata and its tensors under the checkpoint's names, so the tower loads
//! from it as from safetensors.

use super::config::{ProcessorConfig, VisionConfig};
use crate::error::{EngineError, Result};
use crate::kernels::KernelContext;
use crate::load::gguf::{GgufFile, GgufWeights};
use crate::load::weights::{Matrix, WeightSource};
use candle_core::{DType, Device, Tensor};
use std::path::Path;
use std::sync::Arc;

/// An mmproj file, opened and checked.
pub struct Mmproj {
    file: Arc<GgufFile>,
}

impl Mmproj {
    /// Opens `path`; a file that is not a Qwen3.5 / Qwen3-VL mmproj is an error naming it.
    pub fn open(path: &Path) -> Result<Self> {
        let file = Arc::new(GgufFile::open(path)?);
        let projector = file.meta_str("clip.projector_type").unwrap_or("(none)");
        if file.meta_str("general.architecture").ok() != Some("clip")
            || projector != "qwen3vl_merger"
        {
            return Err(EngineError::Gguf {
                path: path.into(),
                message: format!(
                    "not a Qwen3.5 vision projector (clip.projector_type `{projector}`, expected `qwen3vl_merger`)"
                ),
            });
        }
        Ok(Self { file })
    }

    /// The tower's widths.
    pub fn config(&self) -> Result<VisionConfig> {
        let f = &self.file;
        let n = |key: &str| f.meta_count(&format!("clip.vision.{key}"));
        let (patch, image) = (n("patch_size")?, n("image_size")?);
        let side = image / patch;
        let cfg = VisionConfig::new(
            n("block_count")?,
            n("embedding_length")?,
            n("feed_forward_length")?,
            n("attention.head_count")?,
            side * side,
            n("projection_dim")?,
            patch,
            n("spatial_merge_size").unwrap_or(2),
        );
        cfg.check().map_err(|why| EngineError::Gguf {
            path: f.path().into(),
            message: why,
        })?;
        Ok(cfg)
    }

    /// The processor for the tower: the file's mean and deviation, Qwen3.5's pixel bounds.
    pub fn processor(&self, cfg: &VisionConfig) -> ProcessorConfig {
        let mut p = ProcessorConfig::for_tower(cfg);
        for (key, field) in [
            ("clip.vision.image_mean", &mut p.image_mean),
            ("clip.vision.image_std", &mut p.image_std),
        ] {
            let values: Option<Vec<f32>> = self.file.meta(key).ok().and_then(|v| {
                v.to_vec()
                    .ok()
                    .map(|items| items.iter().filter_map(|x| x.to_f32().ok()).collect())
            });
            if let Some(v) = values.and_then(|v| <[f32; 3]>::try_from(v).ok()) {
                *field = v;
            }
        }
        p
    }

    /// The tensors under the checkpoint's names (`model.visual.*`), on `device`.
    pub fn weights(&self, device: &Device) -> MmprojWeights {
        MmprojWeights {
            inner: self.file.weights(device),
        }
    }
}

/// An mmproj file's tensors under the checkpoint's names.
pub struct MmprojWeights {
    inner: GgufWeights,
}

impl MmprojWeights {
    /// The tower built from these weights runs its products as `kernels` says.
    pub fn with_kernels(self, kernels: KernelContext) -> Self {
        Self {
            inner: self.inner.with_kernels(kernels),
        }
    }
}

/// The mmproj name of the checkpoint's `model.visual.{name}`.
fn mmproj_name(name: &str) -> String {
    let name = name.strip_prefix("model.visual.").unwrap_or(name);
    if let Some(rest) = name.strip_prefix("blocks.") {
        if let Some((block, rest)) = rest.split_once('.') {
            let part = match rest.rsplit_once('.') {
                Some(("norm1", s)) => format!("ln1.{s}"),
                Some(("norm2", s)) => format!("ln2.{s}"),
                Some(("attn.qkv", s)) => format!("attn_qkv.{s}"),
                Some(("attn.proj", s)) => format!("attn_out.{s}"),
                Some(("mlp.linear_fc1", s)) => format!("ffn_up.{s}"),
                Some(("mlp.linear_fc2", s)) => format!("ffn_down.{s}"),
                _ => rest.to_string(),
            };
            return format!("v.blk.{block}.{part}");
        }
    }
    match name {
        "patch_embed.proj.bias" => "v.patch_embd.bias".into(),
        "pos_embed.weight" => "v.position_embd.weight".into(),
        "merger.norm.weight" => "v.post_ln.weight".into(),
        "merger.norm.bias" => "v.post_ln.bias".into(),
        "merger.linear_fc1.weight" => "mm.0.weight".into(),
        "merger.linear_fc1.bias" => "mm.0.bias".into(),
        "merger.linear_fc2.weight" => "mm.2.weight".into(),
        "merger.linear_fc2.bias" => "mm.2.bias".into(),
        other => other.into(),
    }
}

impl WeightSource for MmprojWeights {
    fn device(&self) -> &Device {
        self.inner.device()
    }
    fn dtype(&self) -> DType {
        DType::F32
    }
    fn contains(&self, name: &str) -> bool {
        match name.ends_with("patch_embed.proj.weight") {
            true => self.inner.contains("v.patch_embd.weight"),
            false => self.inner.contains(&mmproj_name(name)),
        }
    }
    fn tensor(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        // The 3-D patch convolution is stored as one 2-D convolution per frame.
        if let (true, [d, c, 2, p, q]) = (name.ends_with("patch_embed.proj.weight"), shape) {
            let frame = |n: &str| self.inner.tensor(n, &[*d, *c, *p, *q], dtype);
            let frames = [
                frame("v.patch_embd.weight")?,
                frame("v.patch_embd.weight.1")?,
            ];
            return Ok(Tensor::stack(&frames, 2)?);
        }
        self.inner.tensor(&mmproj_name(name), shape, dtype)
    }
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        self.inner.matrix(&mmproj_name(name), shape)
    }
    fn kernels(&self) -> KernelContext {
        self.inner.kernels()
    }
}

#[cfg(test)]
mod tests {
    use super::mmproj_name;

    #[test]
    fn checkpoint_names_map_to_llama_cpp_names() {
        for (hf, gguf) in [
            (
                "model.visual.blocks.3.attn.qkv.weight",
                "v.blk.3.attn_qkv.weight",
            ),
            ("model.visual.blocks.0.norm2.bias", "v.blk.0.ln2.bias"),
            (
                "model.visual.blocks.12.mlp.linear_fc2.weight",
                "v.blk.12.ffn_down.weight",
            ),
            ("model.visual.merger.linear_fc2.bias", "mm.2.bias"),
            ("model.visual.pos_embed.weight", "v.position_embd.weight"),
        ] {
            assert_eq!(mmproj_name(hf), gguf);
        }
    }
}
