//! GGUF files (llama.cpp's format) as whole models: the Qwen configuration, the tokenizer and
//! the chat template come from the metadata, the weights stay in their quantized blocks.

use crate::error::{EngineError, Result};
use crate::kernels::tiles::{self, TileMatrix};
use crate::kernels::{BlockType, KernelOptions};
use crate::load::config::{Declared, Family, Item, LinearAttentionConfig, MoeConfig, QwenConfig};
use crate::load::weights::{Matrix, WeightSource};
use crate::text::tokenizer::Tokenizer;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;
use serde_json::json;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// An open GGUF file: its metadata and tensor index, with the tensor data read on demand.
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    reader: Mutex<BufReader<File>>,
    /// The special tokens' names, kept when the vocabulary's metadata is dropped.
    special: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The metadata a tokenizer is built from: hundreds of thousands of small strings.
const VOCABULARY_KEYS: [&str; 3] = [
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
];

/// Block types the engine computes with (llama.cpp's names).
const SUPPORTED: &[GgmlDType] = &[
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

impl GgufFile {
    /// Opens a GGUF file and reads its header, metadata and tensor index.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EngineError::MissingFile {
                what: "GGUF file",
                path: path.into(),
            },
            _ => EngineError::io(path, e),
        })?;
        let mut magic = [0u8; 4];
        {
            use std::io::Read;
            let mut f = &file;
            if f.read_exact(&mut magic).is_err() || &magic != b"GGUF" {
                return Err(EngineError::Gguf {
                    path: path.into(),
                    message: format!(
                        "not a GGUF file (magic {:?}, expected \"GGUF\")",
                        String::from_utf8_lossy(&magic)
                    ),
                });
            }
        }
        let mut reader = BufReader::new(file);
        std::io::Seek::rewind(&mut reader).map_err(|e| EngineError::io(path, e))?;
        // candle's reader panics on some malformed headers (a `general.alignment` of 0
        // divides by zero); such a file is an error naming it, not a crash.
        let read =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)));
        let content = match read {
            Ok(r) => r.map_err(|e| EngineError::Gguf {
                path: path.into(),
                message: first_line(&e),
            })?,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                return Err(EngineError::Gguf {
                    path: path.into(),
                    message: format!("malformed header or metadata ({what})"),
                });
            }
        };
        let me = Self {
            path: path.into(),
            content,
            reader: Mutex::new(reader),
            special: None,
        };
        me.check_tensors()?;
        Ok(me)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's one reader (tensors are read one at a time).
    fn reader(&self) -> Result<std::sync::MutexGuard<'_, BufReader<File>>> {
        self.reader.lock().map_err(|_| self.err("reader poisoned"))
    }

    /// An error reading tensor `name`, naming the file and the tensor.
    fn tensor_err(&self, name: &str, e: &candle_core::Error) -> EngineError {
        self.err(format!("tensor `{name}`: {}", first_line(e)))
    }

    fn err(&self, message: impl Into<String>) -> EngineError {
        EngineError::Gguf {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    /// Every tensor: a supported type, whole blocks, and data inside the file (sizes and
    /// offsets summed with checks: a file that declares more than fits in 64 bits is refused).
    fn check_tensors(&self) -> Result<()> {
        let len = std::fs::metadata(&self.path)
            .map_err(|e| EngineError::io(&self.path, e))?
            .len();
        for (name, info) in &self.content.tensor_infos {
            if !SUPPORTED.contains(&info.ggml_dtype) {
                return Err(self.err(format!(
                    "tensor `{name}` has unsupported type {:?}",
                    info.ggml_dtype
                )));
            }
            let bytes =
                tensor_bytes(info).map_err(|e| self.err(format!("tensor `{name}`: {e}")))?;
            let end = self
                .content
                .tensor_data_offset
                .checked_add(info.offset)
                .and_then(|start| start.checked_add(bytes))
                .ok_or_else(|| {
                    self.err(format!(
                        "tensor `{name}`: its offset {} and size {bytes} bytes overflow 64 bits",
                        info.offset
                    ))
                })?;
            if end > len {
                return Err(self.err(format!(
                    "truncated: tensor `{name}` ends at byte {end}, the file has {len}"
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn meta(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.err(format!("metadata key `{key}` is missing")))
    }

    pub(crate) fn meta_u32(&self, key: &str) -> Result<u32> {
        let v = self.meta(key)?;
        v.to_u32()
            .or_else(|_| v.to_u64().map(|n| n as u32))
            .or_else(|_| v.to_i32().map(|n| n as u32))
            .map_err(|_| self.err(format!("metadata key `{key}` is not an integer")))
    }

    pub(crate) fn meta_f32(&self, key: &str) -> Result<f32> {
        self.meta(key)?
            .to_f32()
            .map_err(|_| self.err(format!("metadata key `{key}` is not a float")))
    }

    pub(crate) fn meta_str(&self, key: &str) -> Result<&str> {
        self.meta(key)?
            .to_string()
            .map(String::as_str)
            .map_err(|_| self.err(format!("metadata key `{key}` is not a string")))
    }

    fn meta_strings(&self, key: &str) -> Result<Vec<&str>> {
        let items = self
            .meta(key)?
            .to_vec()
            .map_err(|_| self.err(format!("metadata key `{key}` is not a list")))?;
        items
            .iter()
            .map(|v| {
                v.to_string()
                    .map(String::as_str)
                    .map_err(|_| self.err(format!("`{key}` holds a non-string")))
            })
            .collect()
    }

    /// `general.architecture` (`qwen2`, `qwen3`, `qwen3moe`).
    pub fn architecture(&self) -> Result<&str> {
        self.meta_str("general.architecture")
    }

    /// A count that must be positive (a layer, head or vocabulary count).
    pub(crate) fn meta_count(&self, key: &str) -> Result<usize> {
        match self.meta_u32(key)? {
            0 => Err(self.err(format!("metadata key `{key}` is 0"))),
            n => Ok(n as usize),
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.content.metadata.contains_key(key)
    }

    /// The block holding the multi-token-prediction head, where the file has one: llama.cpp
    /// stores it after the model's own blocks (`{arch}.nextn_predict_layers` of them).
    fn mtp_block(&self) -> Option<usize> {
        let arch = self.architecture().ok()?;
        let mtp = self
            .meta_u32(&format!("{arch}.nextn_predict_layers"))
            .ok()? as usize;
        let blocks = self.meta_u32(&format!("{arch}.block_count")).ok()? as usize;
        (mtp > 0).then(|| blocks.checked_sub(mtp)).flatten()
    }

    /// The Qwen configuration the metadata describes.
    pub fn config(&self) -> Result<QwenConfig> {
        let arch = self.architecture()?;
        let family = match arch {
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "qwen3moe" => Family::Qwen3Moe,
            "qwen35" => Family::Qwen35,
            "qwen35moe" => Family::Qwen35Moe,
            other => {
                return Err(EngineError::UnsupportedArchitecture {
                    path: self.path.clone(),
                    found: other.into(),
                    supported: "qwen2, qwen3, qwen3moe, qwen35, qwen35moe (general.architecture)"
                        .into(),
                })
            }
        };
        let k = |s: &str| format!("{arch}.{s}");
        let hidden = self.meta_count(&k("embedding_length"))?;
        let heads = self.meta_count(&k("attention.head_count"))?;
        let kv_heads = match self.has(&k("attention.head_count_kv")) {
            true => self.meta_count(&k("attention.head_count_kv"))?,
            false => heads,
        };
        let opt_u32 = |key: &str| match self.has(key) {
            true => self.meta_u32(key).map(|n| Some(n as usize)),
            false => Ok(None),
        };
        let opt_f32 = |key: &str| match self.has(key) {
            true => self.meta_f32(key).map(Some),
            false => Ok(None),
        };
        let context = self.meta_count(&k("context_length"))?;
        // llama.cpp's RoPE scaling keys: a type and factor, or the older linear factor alone.
        let rope_scaling = match self.has(&k("rope.scaling.type")) {
            true => Some((
                k("rope.scaling.type"),
                self.meta_str(&k("rope.scaling.type"))?.to_string(),
                opt_f32(&k("rope.scaling.factor"))?,
            )),
            false => [k("rope.scaling.factor"), k("rope.scale_linear")]
                .into_iter()
                .find(|key| self.has(key))
                .map(|key| opt_f32(&key).map(|f| (key, "linear".to_string(), f)))
                .transpose()?,
        };
        // A window that covers the whole context is no window.
        let window_key = k("attention.sliding_window");
        let window = opt_u32(&window_key)?;
        let declared = Declared {
            hidden_size: hidden,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: opt_u32(&k("attention.key_length"))?,
            rope_scaling: rope_scaling
                .as_ref()
                .map(|(_, kind, factor)| (kind.clone(), factor.map(f64::from))),
            rope_dims: opt_u32(&k("rope.dimension_count"))?,
            sliding_window: window.is_some_and(|w| w < context),
            hidden_act: None,
            partial_rotary: family.is_hybrid(),
        };
        let head_dim = declared.check().map_err(|(item, message)| {
            let key = match item {
                Item::HiddenSize => k("embedding_length"),
                Item::Heads => k("attention.head_count"),
                Item::KvHeads => k("attention.head_count_kv"),
                Item::HeadDim => k("attention.key_length"),
                Item::RopeDims => k("rope.dimension_count"),
                Item::RopeScaling => rope_scaling
                    .as_ref()
                    .map(|(key, _, _)| key.clone())
                    .unwrap_or_else(|| k("rope.scaling.type")),
                Item::SlidingWindow => window_key.clone(),
                Item::HiddenAct => "(activation)".into(),
            };
            self.err(format!("metadata key `{key}`: {message}"))
        })?;
        let vocab = match self.content.tensor_infos.get("token_embd.weight") {
            Some(t) => t.shape.dims().first().copied().unwrap_or(0),
            None => return Err(self.err("tensor `token_embd.weight` is missing")),
        };
        if vocab == 0 {
            return Err(self.err("tensor `token_embd.weight` has no rows (an empty vocabulary)"));
        }
        let eos = self.meta_u32("tokenizer.ggml.eos_token_id").ok();
        let blocks = self.meta_count(&k("block_count"))?;
        // A multi-token-prediction head is stored as blocks after the model's own.
        let mtp = match self.has(&k("nextn_predict_layers")) {
            true => self.meta_u32(&k("nextn_predict_layers"))? as usize,
            false => 0,
        };
        let layers = blocks.checked_sub(mtp).filter(|&n| n > 0).ok_or_else(|| {
            self.err(format!(
                "metadata key `{}`: {mtp} prediction layers of {blocks} blocks leave no model",
                k("nextn_predict_layers")
            ))
        })?;
        if mtp > 0 {
            tracing::info!(
                "{}: a multi-token-prediction head ({mtp} block); --speculative mtp drafts with it",
                self.path.display()
            );
        }
        let moe = match family {
            Family::Qwen3Moe | Family::Qwen35Moe => Some(self.moe_config(arch, layers)?),
            Family::Qwen2 | Family::Qwen3 | Family::Qwen35 => None,
        };
        let linear_attention = match family.is_hybrid() {
            true => Some(self.linear_attention(arch, layers)?),
            false => None,
        };
        // A MoE file may have no dense layer, and then needs no dense width.
        let intermediate_size = match (&moe, self.has(&k("feed_forward_length"))) {
            (Some(_), false) => 0,
            _ => self.meta_count(&k("feed_forward_length"))?,
        };
        // llama.cpp's YaRN keys (its converter writes the type, factor and original context).
        let yarn = match &rope_scaling {
            Some((_, kind, Some(factor))) if kind == "yarn" => {
                let orig = opt_u32(&k("rope.scaling.original_context_length"))?.unwrap_or(context);
                let mut y = crate::load::config::Yarn::new(f64::from(*factor), orig);
                if let Some(b) = opt_f32(&k("rope.scaling.yarn_beta_fast"))? {
                    y.beta_fast = f64::from(b);
                }
                if let Some(b) = opt_f32(&k("rope.scaling.yarn_beta_slow"))? {
                    y.beta_slow = f64::from(b);
                }
                // llama.cpp multiplies YaRN's own scale by this.
                if let Some(a) = opt_f32(&k("rope.scaling.attn_factor"))?.filter(|&a| a > 0.0) {
                    y.attention_factor = Some(f64::from(a) * y.attention_factor());
                }
                Some(y)
            }
            Some((key, kind, None)) if kind == "yarn" => {
                return Err(self.err(format!(
                    "metadata key `{key}`: yarn without `{}`",
                    k("rope.scaling.factor")
                )))
            }
            _ => None,
        };
        let mut config = QwenConfig {
            family,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: context,
            rope_theta: self.meta_f32(&k("rope.freq_base")).unwrap_or(10_000.0) as f64,
            rms_norm_eps: self.meta_f32(&k("attention.layer_norm_rms_epsilon"))? as f64,
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
            qkv_bias: self.content.tensor_infos.contains_key("blk.0.attn_q.bias"),
            o_bias: self
                .content
                .tensor_infos
                .contains_key("blk.0.attn_output.bias"),
            torch_dtype: None,
            bos_token_id: self.meta_u32("tokenizer.ggml.bos_token_id").ok(),
            eos_token_ids: eos.into_iter().collect(),
            moe,
            linear_attention,
            rotary_dim: declared.rope_dims.unwrap_or(head_dim),
            // llama.cpp's converter stores Qwen3.5's norms as 1 + w.
            norm_weights_offset: false,
            weights_prefix: "model".into(),
            yarn: None,
            // Qwen3.5's interleaved multimodal RoPE (llama.cpp's `imrope`), for images from
            // an mmproj file.
            mrope: match (family.is_hybrid(), self.meta(&k("rope.dimension_sections"))) {
                (true, Ok(v)) => {
                    let counts: Vec<usize> = v
                        .to_vec()
                        .map(|items| {
                            items
                                .iter()
                                .filter_map(|n| {
                                    n.to_i32().ok().or(n.to_u32().ok().map(|u| u as i32))
                                })
                                .map(|n| n.max(0) as usize)
                                .collect()
                        })
                        .unwrap_or_default();
                    match counts.as_slice() {
                        [t, h, w, ..] => Some(([*t, *h, *w], true)),
                        _ => None,
                    }
                }
                _ => None,
            },
        };
        if let Some(y) = yarn {
            config.set_yarn(y);
        }
        Ok(config)
    }

    /// The experts of a `qwen3moe` file. llama.cpp always renormalises the top-k weights of
    /// this architecture (as Qwen3-MoE's checkpoints set `norm_topk_prob`); a layer without a
    /// router (`ffn_gate_inp`) keeps a dense feed-forward block.
    fn moe_config(&self, arch: &str, layers: usize) -> Result<MoeConfig> {
        let k = |s: &str| format!("{arch}.{s}");
        let num_experts = self.meta_count(&k("expert_count"))?;
        let experts_per_token = self.meta_count(&k("expert_used_count"))?;
        if experts_per_token > num_experts {
            return Err(self.err(format!(
                "metadata key `{}`: {experts_per_token} is more than the {num_experts} experts",
                k("expert_used_count")
            )));
        }
        if self.has(&k("expert_gating_func")) && self.meta_u32(&k("expert_gating_func"))? != 1 {
            return Err(self.err(format!(
                "metadata key `{}`: only softmax routing (1) is supported",
                k("expert_gating_func")
            )));
        }
        let norm_topk_prob = match self.has(&k("expert_weights_norm")) {
            true => matches!(self.meta(&k("expert_weights_norm"))?, Value::Bool(true)),
            false => true,
        };
        let mlp_only_layers = (0..layers)
            .filter(|i| {
                !self
                    .content
                    .tensor_infos
                    .contains_key(&format!("blk.{i}.ffn_gate_inp.weight"))
            })
            .collect();
        Ok(MoeConfig {
            num_experts,
            experts_per_token,
            expert_intermediate_size: self.meta_count(&k("expert_feed_forward_length"))?,
            norm_topk_prob,
            decoder_sparse_step: 1,
            mlp_only_layers,
            shared_expert_intermediate_size: match self.has(&k("expert_shared_feed_forward_length"))
            {
                true => Some(self.meta_count(&k("expert_shared_feed_forward_length"))?),
                false => None,
            },
        })
    }

    /// The Gated DeltaNet layers of a `qwen35` / `qwen35moe` file (llama.cpp's `ssm.*` keys:
    /// state size = key and value head width, group count = key heads, time-step rank = value
    /// heads). Its converter reorders value heads tiled.
    fn linear_attention(&self, arch: &str, layers: usize) -> Result<LinearAttentionConfig> {
        let k = |s: &str| format!("{arch}.{s}");
        let state = self.meta_count(&k("ssm.state_size"))?;
        let key_heads = self.meta_count(&k("ssm.group_count"))?;
        let value_heads = self.meta_count(&k("ssm.time_step_rank"))?;
        let inner = self.meta_count(&k("ssm.inner_size"))?;
        if inner != state * value_heads {
            return Err(self.err(format!(
                "metadata key `{}`: {inner} is not {value_heads} value heads (`{}`) of {state} (`{}`)",
                k("ssm.inner_size"),
                k("ssm.time_step_rank"),
                k("ssm.state_size")
            )));
        }
        if !value_heads.is_multiple_of(key_heads) {
            return Err(self.err(format!(
                "metadata key `{}`: {value_heads} value heads are not a multiple of the {key_heads} key heads (`{}`)",
                k("ssm.time_step_rank"),
                k("ssm.group_count")
            )));
        }
        let conv_kernel = self.meta_count(&k("ssm.conv_kernel"))?;
        if conv_kernel < 2 {
            return Err(self.err(format!(
                "metadata key `{}`: {conv_kernel} taps (at least 2)",
                k("ssm.conv_kernel")
            )));
        }
        let key = k("attention.recurrent_layers");
        let linear = match self.has(&key) {
            true => {
                let flags = self
                    .meta(&key)?
                    .to_vec()
                    .map_err(|_| self.err(format!("metadata key `{key}` is not a list")))?
                    .iter()
                    .map(|v| match v {
                        Value::Bool(b) => Ok(*b),
                        _ => Err(self.err(format!("metadata key `{key}` holds a non-boolean"))),
                    })
                    .collect::<Result<Vec<bool>>>()?;
                if flags.len() < layers {
                    return Err(self.err(format!(
                        "metadata key `{key}`: {} entries for {layers} layers",
                        flags.len()
                    )));
                }
                flags[..layers].to_vec()
            }
            false => {
                let interval = match self.has(&k("full_attention_interval")) {
                    true => self.meta_count(&k("full_attention_interval"))?,
                    false => 4,
                };
                (0..layers)
                    .map(|i| !(i + 1).is_multiple_of(interval))
                    .collect()
            }
        };
        Ok(LinearAttentionConfig {
            conv_kernel,
            key_head_dim: state,
            value_head_dim: state,
            num_key_heads: key_heads,
            num_value_heads: value_heads,
            linear,
            tiled_value_heads: true,
        })
    }

    /// The tokenizer the file describes (`tokenizer.ggml.*`, a GPT-2-style byte-level BPE with
    /// Qwen2's or Qwen3.5's pre-tokeniser), rebuilt as the equivalent `tokenizer.json`.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        let model = self.meta_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(self.err(format!(
                "tokenizer.ggml.model `{model}` is not supported (only gpt2 byte-level BPE)"
            )));
        }
        let pre = self.meta_str("tokenizer.ggml.pre").unwrap_or("qwen2");
        // Qwen2's tokenizer.json composes text to NFC first; Qwen3.5's keeps it as written (its
        // pre-tokeniser keeps combining marks with their letters instead).
        let (pattern, normalizer) = match pre {
            "qwen2" | "default" => (QWEN2_PRETOKENIZE, json!({"type": "NFC"})),
            "qwen35" => (QWEN35_PRETOKENIZE, serde_json::Value::Null),
            _ => {
                return Err(self.err(format!(
                    "tokenizer.ggml.pre `{pre}` is not supported (qwen2 or qwen35)"
                )))
            }
        };
        let tokens = self.meta_strings("tokenizer.ggml.tokens")?;
        let merges = self.meta_strings("tokenizer.ggml.merges")?;
        let types: Vec<u32> = match self.content.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|_| self.err("`tokenizer.ggml.token_type` is not a list"))?
                .iter()
                .map(|t| {
                    t.to_i32()
                        .map(|n| n as u32)
                        .or_else(|_| t.to_u32())
                        .unwrap_or(1)
                })
                .collect(),
            None => vec![1; tokens.len()],
        };
        // llama.cpp token types: 1 normal, 3 control, 4 user-defined, 5 unused.
        let mut vocab = serde_json::Map::new();
        let mut added = vec![];
        for (id, tok) in tokens.iter().enumerate() {
            // Added tokens are in the model's vocabulary too: `tokenizers` gives an added
            // token the id the model has for it, or else the next free one.
            vocab.insert((*tok).to_string(), json!(id));
            if let t @ (3 | 4) = types.get(id).copied().unwrap_or(1) {
                added.push(json!({
                    "id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": t == 3,
                }));
            }
        }
        let merges: Vec<Vec<&str>> = merges.iter().map(|m| m.splitn(2, ' ').collect()).collect();
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
            ]},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges}
        });
        let inner: tokenizers::Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| self.err(format!("cannot build the tokenizer from its metadata: {e}")))?;
        Ok(Tokenizer::from_tokenizers(
            inner,
            &self.path.display().to_string(),
        ))
    }

    /// The chat template (`tokenizer.chat_template`), if the file has one.
    pub fn chat_template(&self) -> Option<String> {
        self.meta_str("tokenizer.chat_template")
            .ok()
            .map(str::to_owned)
    }

    /// Drops the vocabulary's metadata (tokens, merges, token types: about 50 MB for Qwen's
    /// 151 936 tokens) once the tokenizer is built, so that loading the weights does not peak
    /// with it. [`GgufFile::tokenizer`] is an error afterwards; the special tokens' names stay.
    pub fn forget_vocabulary(&mut self) {
        self.special = Some(self.special_tokens());
        for key in VOCABULARY_KEYS {
            self.content.metadata.remove(key);
        }
    }

    /// Special tokens for the chat template, by the names HF templates use.
    pub fn special_tokens(&self) -> serde_json::Map<String, serde_json::Value> {
        if let Some(special) = &self.special {
            return special.clone();
        }
        let tokens = self
            .meta_strings("tokenizer.ggml.tokens")
            .unwrap_or_default();
        let name = |key: &str| {
            self.meta_u32(key)
                .ok()
                .and_then(|id| tokens.get(id as usize))
                .map(|t| json!(t))
                .unwrap_or(json!(null))
        };
        let mut m = serde_json::Map::new();
        m.insert("bos_token".into(), name("tokenizer.ggml.bos_token_id"));
        m.insert("eos_token".into(), name("tokenizer.ggml.eos_token_id"));
        m.insert("pad_token".into(), name("tokenizer.ggml.padding_token_id"));
        m.insert("unk_token".into(), name("tokenizer.ggml.unknown_token_id"));
        m
    }

    /// Stop ids from the eos and eot keys.
    pub fn stop_token_ids(&self) -> Vec<u32> {
        let mut ids = vec![];
        for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
            if let Ok(id) = self.meta_u32(key) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }

    /// The quantization most matrices use, as llama.cpp names file types (`Q4_K_M` files hold
    /// several block types; the name is what `general.file_type` says).
    pub fn file_type(&self) -> String {
        let names = [
            (0, "F32"),
            (1, "F16"),
            (2, "Q4_0"),
            (3, "Q4_1"),
            (7, "Q8_0"),
            (8, "Q5_0"),
            (9, "Q5_1"),
            (10, "Q2_K"),
            (11, "Q3_K_S"),
            (12, "Q3_K_M"),
            (13, "Q3_K_L"),
            (14, "Q4_K_S"),
            (15, "Q4_K_M"),
            (16, "Q5_K_S"),
            (17, "Q5_K_M"),
            (18, "Q6_K"),
            (32, "BF16"),
        ];
        match self.meta_u32("general.file_type") {
            Ok(t) => names
                .iter()
                .find(|(n, _)| *n == t)
                .map(|(_, s)| (*s).to_string())
                .unwrap_or_else(|| format!("type{t}")),
            Err(_) => "gguf".into(),
        }
    }

    /// Bytes of tensor data (for sizes in benchmark tables).
    pub fn weight_bytes(&self) -> usize {
        self.content
            .tensor_infos
            .values()
            .map(|i| tensor_bytes(i).unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add)
            .try_into()
            .unwrap_or(usize::MAX)
    }

    /// The file's tensors as weights on `device`.
    pub fn weights(self: &Arc<Self>, device: &Device) -> GgufWeights {
        GgufWeights {
            mtp_block: self.mtp_block(),
            file: self.clone(),
            device: device.clone(),
            kernels: KernelOptions::default(),
        }
    }
}

/// Bytes of a tensor's data, or why its shape cannot be stored: more elements than 64 bits
/// count, or not a whole number of blocks.
fn tensor_bytes(info: &TensorInfo) -> std::result::Result<u64, String> {
    let dims = info.shape.dims();
    let elems = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .ok_or_else(|| format!("shape {dims:?} has more elements than 64 bits count"))?;
    let block = info.ggml_dtype.block_size() as u64;
    if elems % block != 0 {
        return Err(format!(
            "{elems} elements do not fill whole {:?} blocks of {block}",
            info.ggml_dtype
        ));
    }
    (elems / block)
        .checked_mul(info.ggml_dtype.type_size() as u64)
        .filter(|&b| usize::try_from(b).is_ok())
        .ok_or_else(|| format!("shape {dims:?} needs more bytes than 64 bits count"))
}

/// Qwen2's pre-tokenisation regex (as in its tokenizer.json).
const QWEN2_PRETOKENIZE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's (`tokenizer.ggml.pre = qwen35`, its `tokenizer.json`): combining marks belong to the
/// letters they follow.
const QWEN35_PRETOKENIZE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Where a tensor (or one expert's slice of one) lies in the file.
struct Located {
    name: String,
    dtype: GgmlDType,
    dims: Vec<usize>,
    start: u64,
    /// Read as bytes and rebuilt in `dims`: one expert of a 3-D tensor, or a shape the file
    /// writes with other leading ones.
    slice: bool,
}

/// The GGUF file as a [`WeightSource`], by Hugging Face tensor names.
pub struct GgufWeights {
    file: Arc<GgufFile>,
    /// Where the multi-token-prediction head's tensors (`mtp.*`) are.
    mtp_block: Option<usize>,
    device: Device,
    kernels: KernelOptions,
}

impl GgufWeights {
    /// These weights' layers pick their CPU kernels by `kernels`.
    pub fn with_kernels(mut self, kernels: KernelOptions) -> Self {
        self.kernels = kernels;
        self
    }
}

/// `model.layers.3.self_attn.q_proj.weight` → `blk.3.attn_q.weight`.
pub fn gguf_name(hf: &str) -> String {
    gguf_tensor(hf).0
}

/// The GGUF tensor holding `hf`, and the expert it is a slice of: llama.cpp stores a layer's
/// experts as one 3-D tensor per projection, `model.layers.3.mlp.experts.7.up_proj.weight` →
/// expert 7 of `blk.3.ffn_up_exps.weight`.
fn gguf_tensor(hf: &str) -> (String, Option<usize>) {
    let expert = hf.strip_prefix("model.layers.").and_then(|rest| {
        let (layer, rest) = rest.split_once(".mlp.experts.")?;
        let (e, rest) = rest.split_once('.')?;
        let kind = match rest {
            "gate_proj.weight" => "ffn_gate_exps",
            "up_proj.weight" => "ffn_up_exps",
            "down_proj.weight" => "ffn_down_exps",
            _ => return None,
        };
        let (layer, e) = (layer.parse::<usize>().ok()?, e.parse::<usize>().ok()?);
        Some((format!("blk.{layer}.{kind}.weight"), e))
    });
    match expert {
        Some((name, e)) => (name, Some(e)),
        None => (layer_name(hf), None),
    }
}

/// The multi-token-prediction head's tensor `mtp.{rest}` in llama.cpp's layout: its decoder
/// layer as block `block`, the rest as that block's `nextn.*`.
fn mtp_tensor(rest: &str, block: usize) -> (String, Option<usize>) {
    if let Some(layer) = rest.strip_prefix("layers.0.") {
        return gguf_tensor(&format!("model.layers.{block}.{layer}"));
    }
    let nextn = match rest {
        "fc.weight" => "eh_proj",
        "pre_fc_norm_embedding.weight" => "enorm",
        "pre_fc_norm_hidden.weight" => "hnorm",
        "norm.weight" => "shared_head_norm",
        other => return (format!("mtp.{other}"), None),
    };
    (format!("blk.{block}.nextn.{nextn}.weight"), None)
}

fn layer_name(hf: &str) -> String {
    let fixed: HashMap<&str, &str> = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ]
    .into_iter()
    .collect();
    if let Some(n) = fixed.get(hf) {
        return (*n).to_string();
    }
    let Some(rest) = hf.strip_prefix("model.layers.") else {
        return hf.to_string();
    };
    let Some((layer, rest)) = rest.split_once('.') else {
        return hf.to_string();
    };
    // Gated DeltaNet parameters without a `.weight` (llama.cpp keeps -exp(A_log) as `ssm_a`).
    match rest {
        "linear_attn.A" => return format!("blk.{layer}.ssm_a"),
        "linear_attn.dt_bias" => return format!("blk.{layer}.ssm_dt.bias"),
        _ => {}
    }
    let (module, suffix) = match rest.rsplit_once('.') {
        Some(x) => x,
        None => return hf.to_string(),
    };
    let mapped = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" => "ffn_gate_inp",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        "linear_attn.in_proj_qkv" => "attn_qkv",
        "linear_attn.in_proj_z" => "attn_gate",
        "linear_attn.in_proj_b" => "ssm_beta",
        "linear_attn.in_proj_a" => "ssm_alpha",
        "linear_attn.conv1d" => "ssm_conv1d",
        "linear_attn.norm" => "ssm_norm",
        "linear_attn.out_proj" => "ssm_out",
        other => other,
    };
    format!("blk.{layer}.{mapped}.{suffix}")
}

impl GgufWeights {
    /// The name the file uses: `qwen35` files call the norm before the feed-forward block
    /// `post_attention_norm` where the others say `ffn_norm`.
    fn present(&self, (name, expert): (String, Option<usize>)) -> (String, Option<usize>) {
        let (name, expert) = match (name.strip_prefix("mtp."), self.mtp_block) {
            (Some(rest), Some(block)) => mtp_tensor(rest, block),
            _ => (name, expert),
        };
        let infos = &self.file.content.tensor_infos;
        if infos.contains_key(&name) {
            return (name, expert);
        }
        match name.strip_suffix(".ffn_norm.weight") {
            Some(block) if infos.contains_key(&format!("{block}.post_attention_norm.weight")) => {
                (format!("{block}.post_attention_norm.weight"), expert)
            }
            _ => (name, expert),
        }
    }

    /// The file's tensor `hf` (or the slice of one expert) with its expected shape checked,
    /// and where its data starts.
    fn info(&self, hf: &str, shape: &[usize]) -> Result<Located> {
        let (name, expert) = self.present(gguf_tensor(hf));
        let info = self.file.content.tensor_infos.get(&name).ok_or_else(|| {
            EngineError::MissingTensor {
                name: name.clone(),
                files: self.file.path.display().to_string(),
            }
        })?;
        let dims = info.shape.dims();
        let mismatch = |expected: Vec<usize>| EngineError::ShapeMismatch {
            name: name.clone(),
            expected,
            found: dims.to_vec(),
        };
        // Checked when the file was opened; an overflow here is still an error, not a wrap.
        let overflow = || self.file.err(format!("tensor `{name}`: offset overflows"));
        let mut start = self
            .file
            .content
            .tensor_data_offset
            .checked_add(info.offset)
            .ok_or_else(overflow)?;
        match expert {
            None if !same_shape(dims, shape) => return Err(mismatch(shape.to_vec())),
            None => {}
            Some(e) => {
                if dims.len() != 3 || dims[1..] != *shape {
                    let mut expected = vec![dims.first().copied().unwrap_or(0)];
                    expected.extend(shape);
                    return Err(mismatch(expected));
                }
                if e >= dims[0] {
                    return Err(self.file.err(format!(
                        "tensor `{name}` holds {} experts; the model needs expert {e}",
                        dims[0]
                    )));
                }
                let one = TensorInfo {
                    ggml_dtype: info.ggml_dtype,
                    shape: shape.into(),
                    offset: 0,
                };
                let bytes = tensor_bytes(&one)
                    .map_err(|m| self.file.err(format!("tensor `{name}`: {m}")))?;
                start = (e as u64)
                    .checked_mul(bytes)
                    .and_then(|o| start.checked_add(o))
                    .ok_or_else(overflow)?;
            }
        }
        Ok(Located {
            name,
            dtype: info.ggml_dtype,
            dims: shape.to_vec(),
            start,
            slice: expert.is_some() || dims != shape,
        })
    }

    /// A quantized matrix read straight into 16-row tiles, where this CPU has their kernels
    /// (`None` otherwise): a few groups of rows at a time, so loading needs no second copy of
    /// the matrix.
    fn tiles(&self, hf: &str, shape: &[usize]) -> Result<Option<TileMatrix>> {
        let Located {
            name, dtype, start, ..
        } = self.info(hf, shape)?;
        let Some(kind) = BlockType::of(dtype) else {
            return Ok(None);
        };
        let [rows, cols] = *shape else {
            return Ok(None);
        };
        if !self.device.is_cpu() || cols % kind.block_values() != 0 || !tiles::supported(kind, rows)
        {
            return Ok(None);
        }
        let mut reader = self.file.reader()?;
        read_tiles(&mut *reader, start, kind, rows, cols)
            .map(Some)
            .map_err(|e| self.file.tensor_err(&name, &e))
    }

    /// An F16, BF16 or F32 tensor read on the CPU straight into the buffer the dense tensor
    /// keeps (through a quantized tensor the buffer was copied once more, and loading peaked at
    /// the model plus its largest tensor); `None` for block types.
    fn dense_cpu(&self, hf: &str, shape: &[usize]) -> Result<Option<Tensor>> {
        let Located {
            name,
            dtype,
            start,
            dims,
            ..
        } = self.info(hf, shape)?;
        let elems = dims.iter().product();
        let mut reader = self.file.reader()?;
        let tensor = match dtype {
            GgmlDType::F16 => read_dense::<half::f16>(&mut *reader, start, elems, shape),
            GgmlDType::BF16 => read_dense::<half::bf16>(&mut *reader, start, elems, shape),
            GgmlDType::F32 => read_dense::<f32>(&mut *reader, start, elems, shape),
            _ => return Ok(None),
        };
        tensor
            .map(Some)
            .map_err(|e| self.file.tensor_err(&name, &e))
    }

    fn qtensor(&self, hf: &str, shape: &[usize]) -> Result<candle_core::quantized::QTensor> {
        let t = self.info(hf, shape)?;
        let mut reader = self.file.reader()?;
        let loaded = match (&self.device, t.slice) {
            (Device::Cpu, _) => read_cpu(&mut *reader, t.start, t.dtype, &t.dims),
            // One expert of a 3-D tensor: its blocks, then onto the device.
            (_, true) => read_cpu(&mut *reader, t.start, t.dtype, &t.dims).and_then(|q| {
                let bytes = q.data()?;
                candle_core::quantized::ggml_file::qtensor_from_ggml(
                    t.dtype,
                    &bytes,
                    t.dims.clone(),
                    &self.device,
                )
            }),
            (_, false) => self
                .file
                .content
                .tensor(&mut *reader, &t.name, &self.device),
        };
        let name = t.name;
        loaded.map_err(|e| self.file.tensor_err(&name, &e))
    }
}

/// One shape up to leading ones: converters write a `[1, n]` weight as `[n]` or as `[1, n]`
/// (ggml pads every shape with ones), and both hold the same values in the same order.
fn same_shape(file: &[usize], wanted: &[usize]) -> bool {
    let strip = |d: &[usize]| d.iter().position(|&n| n != 1).map_or(0, |i| d.len() - i);
    let (f, w) = (strip(file), strip(wanted));
    file[file.len() - f..] == wanted[wanted.len() - w..]
}

/// Reads a tensor's blocks from the file straight into the buffer the model keeps (candle's
/// reader goes through a second, temporary copy, which raised the peak memory of loading by
/// the largest tensor), with that buffer on huge pages from its first touch.
fn read_cpu(
    reader: &mut (impl Read + Seek),
    start: u64,
    dtype: GgmlDType,
    dims: &[usize],
) -> candle_core::Result<QTensor> {
    use candle_core::quantized::k_quants::*;
    let Some(elems) = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) else {
        candle_core::bail!("shape {dims:?} has more elements than fit in memory");
    };
    if !elems.is_multiple_of(dtype.block_size()) {
        candle_core::bail!(
            "{elems} elements do not fill whole {dtype:?} blocks of {}",
            dtype.block_size()
        );
    }
    let blocks = elems / dtype.block_size();
    let Some(bytes) = blocks.checked_mul(dtype.type_size()) else {
        candle_core::bail!("shape {dims:?} needs more bytes than fit in memory");
    };
    seek_to_tensor(reader, start, bytes)?;
    let storage = match dtype {
        GgmlDType::F32 => read_blocks::<f32>(reader, blocks)?,
        GgmlDType::F16 => read_blocks::<half::f16>(reader, blocks)?,
        GgmlDType::BF16 => read_blocks::<half::bf16>(reader, blocks)?,
        GgmlDType::Q4_0 => read_blocks::<BlockQ4_0>(reader, blocks)?,
        GgmlDType::Q4_1 => read_blocks::<BlockQ4_1>(reader, blocks)?,
        GgmlDType::Q5_0 => read_blocks::<BlockQ5_0>(reader, blocks)?,
        GgmlDType::Q5_1 => read_blocks::<BlockQ5_1>(reader, blocks)?,
        GgmlDType::Q8_0 => read_blocks::<BlockQ8_0>(reader, blocks)?,
        GgmlDType::Q8_1 => read_blocks::<BlockQ8_1>(reader, blocks)?,
        GgmlDType::Q2K => read_blocks::<BlockQ2K>(reader, blocks)?,
        GgmlDType::Q3K => read_blocks::<BlockQ3K>(reader, blocks)?,
        GgmlDType::Q4K => read_blocks::<BlockQ4K>(reader, blocks)?,
        GgmlDType::Q5K => read_blocks::<BlockQ5K>(reader, blocks)?,
        GgmlDType::Q6K => read_blocks::<BlockQ6K>(reader, blocks)?,
        GgmlDType::Q8K => read_blocks::<BlockQ8K>(reader, blocks)?,
    };
    QTensor::new(storage, dims)
}

/// Positions `reader` at a tensor's `bytes` from `start`, or says the file is too short.
fn seek_to_tensor(
    reader: &mut (impl Read + Seek),
    start: u64,
    bytes: usize,
) -> candle_core::Result<()> {
    let file_len = reader.seek(SeekFrom::End(0))?;
    let end = start.saturating_add(bytes as u64);
    if end > file_len {
        candle_core::bail!("needs bytes {start}..{end} but the file has {file_len} (truncated?)");
    }
    reader.seek(SeekFrom::Start(start))?;
    Ok(())
}

/// `rows` rows of `cols` values of a tile type, from `start`, into tiles on huge pages.
fn read_tiles(
    reader: &mut (impl Read + Seek),
    start: u64,
    kind: BlockType,
    rows: usize,
    cols: usize,
) -> candle_core::Result<TileMatrix> {
    let bytes = rows
        .checked_mul(cols / kind.block_values())
        .and_then(|blocks| blocks.checked_mul(kind.block_bytes()))
        .filter(|_| rows > 0 && cols.is_multiple_of(kind.block_values()));
    let Some(bytes) = bytes else {
        candle_core::bail!("{rows}×{cols} {kind:?} does not fit in memory as whole blocks");
    };
    seek_to_tensor(reader, start, bytes)?;
    let mut data: Vec<u8> = Vec::with_capacity(bytes);
    crate::device::huge_pages::prefer_huge_pages(data.as_ptr(), bytes);
    data.resize(bytes, 0);
    // Groups of 16 rows read a few MiB at a time and interleaved in parallel (rearranging the
    // K-quants' bytes took as long as reading them).
    let group = bytes / rows * tiles::ROWS;
    let batch = group * (4usize << 20).div_ceil(group);
    let mut blocks = vec![0u8; batch.min(bytes)];
    for tiles in data.chunks_mut(batch) {
        let blocks = &mut blocks[..tiles.len()];
        reader.read_exact(blocks)?;
        blocks
            .par_chunks_exact(group)
            .zip(tiles.par_chunks_exact_mut(group))
            .for_each(|(blocks, tiles)| tiles::interleave_group(kind, blocks, cols, tiles));
    }
    crate::device::huge_pages::back_with_huge_pages(&data);
    Ok(TileMatrix {
        kind,
        rows,
        cols,
        data,
    })
}

fn read_blocks<T: candle_core::quantized::k_quants::GgmlType + 'static>(
    reader: &mut impl Read,
    blocks: usize,
) -> candle_core::Result<QStorage> {
    Ok(QStorage::Cpu(Box::new(read_vec::<T>(reader, blocks)?)))
}

/// `elems` values of `T` from `start` as a CPU tensor of `shape`, read into the buffer it keeps.
fn read_dense<T: candle_core::quantized::k_quants::GgmlType + candle_core::WithDType>(
    reader: &mut (impl Read + Seek),
    start: u64,
    elems: usize,
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let Some(bytes) = elems.checked_mul(std::mem::size_of::<T>()) else {
        candle_core::bail!("{elems} values do not fit in memory");
    };
    seek_to_tensor(reader, start, bytes)?;
    Tensor::from_vec(read_vec::<T>(reader, elems)?, shape, &Device::Cpu)
}

/// `blocks` blocks of `T` from `reader`, in a buffer on huge pages from its first touch.
fn read_vec<T: candle_core::quantized::k_quants::GgmlType>(
    reader: &mut impl Read,
    blocks: usize,
) -> candle_core::Result<Vec<T>> {
    let mut data: Vec<T> = Vec::with_capacity(blocks);
    let bytes = blocks * std::mem::size_of::<T>();
    crate::device::huge_pages::prefer_huge_pages(data.as_ptr() as *const u8, bytes);
    data.resize(blocks, T::zeros());
    // SAFETY: GGML block types are plain `repr(C)` integers and floats without padding
    // (candle asserts their sizes), so any bytes are a valid value; the slice covers exactly
    // the initialised elements.
    let raw = unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut u8, bytes) };
    reader.read_exact(raw)?;
    Ok(data)
}

impl WeightSource for GgufWeights {
    fn device(&self) -> &Device {
        &self.device
    }
    fn dtype(&self) -> DType {
        DType::F32
    }
    fn contains(&self, name: &str) -> bool {
        self.file
            .content
            .tensor_infos
            .contains_key(&self.present(gguf_tensor(name)).0)
    }
    fn tensor(&self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Ok(self
            .qtensor(name, shape)?
            .dequantize(&self.device)?
            .to_dtype(dtype)?)
    }
    fn kernels(&self) -> KernelOptions {
        self.kernels
    }
    fn projection(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        match self.tiles(name, shape)? {
            Some(tiles) => Ok(Matrix::Tiles(Arc::new(tiles))),
            None => self.matrix(name, shape),
        }
    }
    fn matrix(&self, name: &str, shape: &[usize]) -> Result<Matrix> {
        if self.device.is_cpu() {
            if let Some(dense) = self.dense_cpu(name, shape)? {
                return Ok(Matrix::Dense(dense));
            }
        }
        let q = self.qtensor(name, shape)?;
        // Unquantized matrices (F16, BF16, F32 files) run as dense weights in their own type:
        // the dense kernels read half-precision rows directly, candle's quantized path has no
        // fast half-precision product.
        let dense = match q.dtype() {
            GgmlDType::F16 => Some(DType::F16),
            GgmlDType::BF16 => Some(DType::BF16),
            GgmlDType::F32 => Some(DType::F32),
            _ => None,
        };
        match dense {
            Some(dtype) => Ok(Matrix::Dense(q.dequantize(&self.device)?.to_dtype(dtype)?)),
            None => Ok(Matrix::Quantized(Arc::new(q))),
        }
    }
}

fn first_line(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_up_to_leading_ones() {
        assert!(same_shape(&[2048], &[1, 2048]));
        assert!(same_shape(&[1, 2048], &[2048]));
        assert!(same_shape(&[1], &[1, 1]));
        assert!(!same_shape(&[2048, 1], &[2048]));
        assert!(!same_shape(&[2, 2048], &[1, 2048]));
    }

    #[test]
    fn maps_hugging_face_names_to_gguf() {
        assert_eq!(gguf_name("model.embed_tokens.weight"), "token_embd.weight");
        assert_eq!(
            gguf_name("model.layers.11.self_attn.q_proj.bias"),
            "blk.11.attn_q.bias"
        );
        assert_eq!(
            gguf_name("model.layers.0.mlp.down_proj.weight"),
            "blk.0.ffn_down.weight"
        );
        assert_eq!(
            gguf_name("model.layers.2.self_attn.k_norm.weight"),
            "blk.2.attn_k_norm.weight"
        );
        assert_eq!(
            gguf_name("model.layers.2.post_attention_layernorm.weight"),
            "blk.2.ffn_norm.weight"
        );
        assert_eq!(gguf_name("lm_head.weight"), "output.weight");
        assert_eq!(
            gguf_name("model.layers.4.mlp.gate.weight"),
            "blk.4.ffn_gate_inp.weight"
        );
        assert_eq!(
            gguf_tensor("model.layers.4.mlp.experts.17.down_proj.weight"),
            ("blk.4.ffn_down_exps.weight".to_string(), Some(17))
        );
        assert_eq!(
            gguf_tensor("model.layers.0.mlp.experts.0.gate_proj.weight"),
            ("blk.0.ffn_gate_exps.weight".to_string(), Some(0))
        );
    }

    #[test]
    fn the_prediction_head_is_the_block_after_the_model() {
        assert_eq!(
            mtp_tensor("fc.weight", 24),
            ("blk.24.nextn.eh_proj.weight".to_string(), None)
        );
        assert_eq!(
            mtp_tensor("norm.weight", 24).0,
            "blk.24.nextn.shared_head_norm.weight"
        );
        assert_eq!(
            mtp_tensor("pre_fc_norm_hidden.weight", 24).0,
            "blk.24.nextn.hnorm.weight"
        );
        assert_eq!(
            mtp_tensor("layers.0.self_attn.q_proj.weight", 24).0,
            "blk.24.attn_q.weight"
        );
        assert_eq!(
            mtp_tensor("layers.0.mlp.experts.5.up_proj.weight", 40),
            ("blk.40.ffn_up_exps.weight".to_string(), Some(5))
        );
    }
}
