//! The Qwen configuration a GGUF file's metadata describes (`{arch}.*` keys), for each
//! architecture llama.cpp writes Qwen models as.

use super::GgufFile;
use crate::error::{EngineError, Result};
use crate::load::config::{Declared, Family, Item, LinearAttentionConfig, MoeConfig, QwenConfig};
use candle_core::quantized::gguf_file::Value;

impl GgufFile {
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
}
