//! `config.json` of a Qwen-family checkpoint, read the way both hub checkpoints and recent
//! `transformers` write it (`rope_theta` top-level or under `rope_parameters`, `torch_dtype`
//! or `dtype`, `head_dim` present or derived, `sliding_window` null or a number).

use crate::error::{EngineError, Result};
use serde_json::Value;
use std::path::Path;

/// The model families the engine implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Qwen2 and Qwen2.5: bias on q/k/v.
    Qwen2,
    /// Qwen3: q/k RMSNorm per head, explicit head_dim.
    Qwen3,
    /// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention, feed-forward blocks
    /// that route each token to a few of many experts.
    Qwen3Moe,
    /// Qwen3.5 and Qwen3.6 dense: hybrid layers, three of four Gated DeltaNet linear attention
    /// with a recurrent state, the fourth gated full attention (output gate, q/k norm, RoPE
    /// over part of each head).
    Qwen35,
    /// Qwen3.5 / Qwen3.6 mixture of experts: the hybrid layers, every feed-forward block
    /// routed, with a shared expert behind a sigmoid gate.
    Qwen35Moe,
}

impl Family {
    /// The architectures supported, for messages.
    pub const SUPPORTED: &'static str =
        "Qwen2ForCausalLM (Qwen2, Qwen2.5), Qwen3ForCausalLM (Qwen3), \
        Qwen3MoeForCausalLM (Qwen3-MoE), Qwen3_5ForCausalLM or Qwen3_5ForConditionalGeneration \
        (Qwen3.5, Qwen3.6), Qwen3_5MoeForCausalLM or Qwen3_5MoeForConditionalGeneration \
        (Qwen3.5-MoE, Qwen3.6-MoE)";

    /// The family of a config's `architectures` entry or `model_type`.
    pub fn from_architecture(arch: &str) -> Option<Self> {
        match arch {
            "Qwen2ForCausalLM" | "qwen2" => Some(Self::Qwen2),
            "Qwen3ForCausalLM" | "qwen3" => Some(Self::Qwen3),
            "Qwen3MoeForCausalLM" | "qwen3_moe" | "qwen3moe" => Some(Self::Qwen3Moe),
            "Qwen3_5ForCausalLM"
            | "Qwen3_5ForConditionalGeneration"
            | "qwen3_5"
            | "qwen3_5_text"
            | "qwen35" => Some(Self::Qwen35),
            "Qwen3_5MoeForCausalLM"
            | "Qwen3_5MoeForConditionalGeneration"
            | "qwen3_5_moe"
            | "qwen3_5_moe_text"
            | "qwen35moe" => Some(Self::Qwen35Moe),
            _ => None,
        }
    }

    /// The family's `model_type` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Qwen3Moe => "qwen3_moe",
            Self::Qwen35 => "qwen3_5",
            Self::Qwen35Moe => "qwen3_5_moe",
        }
    }

    /// Whether queries and keys get a per-head RMSNorm before RoPE.
    pub fn has_qk_norm(self) -> bool {
        !matches!(self, Self::Qwen2)
    }

    /// Whether the layers are hybrid: Gated DeltaNet linear attention beside gated full
    /// attention.
    pub fn is_hybrid(self) -> bool {
        matches!(self, Self::Qwen35 | Self::Qwen35Moe)
    }
}

/// The Gated DeltaNet linear attention of the hybrid families: which layers have it and the
/// sizes of its heads, its short causal convolution and its recurrent state.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttentionConfig {
    /// Taps of the depthwise causal convolution over q, k and v (`linear_conv_kernel_dim`).
    pub conv_kernel: usize,
    /// Width of a key (and query) head.
    pub key_head_dim: usize,
    /// Width of a value head.
    pub value_head_dim: usize,
    /// Key (and query) heads.
    pub num_key_heads: usize,
    /// Value heads: a multiple of the key heads, each key head shared by as many.
    pub num_value_heads: usize,
    /// `linear[i]`: whether layer `i` is linear attention (else gated full attention).
    pub linear: Vec<bool>,
    /// Value heads stored tiled (value head `h` reads key head `h % key heads`, as llama.cpp's
    /// converter reorders them) rather than grouped (`h / (value heads / key heads)`, the
    /// checkpoints' order).
    pub tiled_value_heads: bool,
}

impl LinearAttentionConfig {
    /// Channels of the convolution: queries, keys and values.
    pub fn conv_dim(&self) -> usize {
        2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim
    }

    /// f32 values of one layer's recurrent state: the convolution's last inputs and the
    /// delta rule's `[value heads, key dim, value dim]` matrix.
    pub fn state_values(&self) -> usize {
        self.conv_dim() * (self.conv_kernel - 1)
            + self.num_value_heads * self.key_head_dim * self.value_head_dim
    }

    /// Layers with linear attention.
    pub fn linear_layers(&self) -> usize {
        self.linear.iter().filter(|&&l| l).count()
    }

    /// The key head value head `v` reads.
    pub fn key_head_of(&self, v: usize) -> usize {
        if self.tiled_value_heads {
            v % self.num_key_heads
        } else {
            v / (self.num_value_heads / self.num_key_heads)
        }
    }
}

/// The mixture-of-experts part of a config: which layers route, to how many of how many
/// experts, and how big each expert is.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// Experts in each sparse layer.
    pub num_experts: usize,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: usize,
    /// The hidden size of one expert's SwiGLU block.
    pub expert_intermediate_size: usize,
    /// Whether the top-k routing weights are renormalised to sum to one.
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer routes (1: all of them) …
    pub decoder_sparse_step: usize,
    /// … except these, which keep a dense feed-forward block of `intermediate_size`.
    pub mlp_only_layers: Vec<usize>,
    /// The hidden size of the shared expert every token also runs, behind a sigmoid gate
    /// (Qwen3.5-MoE); `None` where there is none.
    pub shared_expert_intermediate_size: Option<usize>,
}

impl MoeConfig {
    /// Whether layer `i` has experts (the rule of transformers' `Qwen3MoeDecoderLayer`).
    pub fn is_sparse_layer(&self, i: usize) -> bool {
        !self.mlp_only_layers.contains(&i)
            && self.num_experts > 0
            && (i + 1).is_multiple_of(self.decoder_sparse_step)
    }
}

/// The hyperparameters of a Qwen-family model, checked on read.
#[derive(Debug, Clone, PartialEq)]
pub struct QwenConfig {
    /// The architecture the model follows.
    pub family: Family,
    /// Tokens in the embedding table.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Hidden size of the dense SwiGLU feed-forward block.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of one attention head.
    pub head_dim: usize,
    /// Context length: most positions a sequence may hold.
    pub max_position_embeddings: usize,
    /// Base of the rotary position embedding's frequencies.
    pub rope_theta: f64,
    /// Epsilon of the RMSNorms.
    pub rms_norm_eps: f64,
    /// Whether the output projection reuses the embedding table.
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v (always on Qwen2; `attention_bias` on Qwen3, where o_proj gets one too).
    pub qkv_bias: bool,
    /// Bias on o_proj (`attention_bias` on Qwen3).
    pub o_bias: bool,
    /// The dtype the checkpoint was saved in, if the config says.
    pub torch_dtype: Option<String>,
    /// Beginning-of-sequence token, if the config names one.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens (`eos_token_id`, one or a list).
    pub eos_token_ids: Vec<u32>,
    /// Experts, for the mixture-of-experts families.
    pub moe: Option<MoeConfig>,
    /// Gated DeltaNet layers, for the hybrid families.
    pub linear_attention: Option<LinearAttentionConfig>,
    /// Dimensions of each head RoPE rotates (the first ones): all of them but on the hybrid
    /// families (`partial_rotary_factor`, a quarter).
    pub rotary_dim: usize,
    /// Whether the stored RMSNorm weights are offsets from one (Qwen3.5's checkpoints scale
    /// by `1 + w`; llama.cpp's converter stores `1 + w`).
    pub norm_weights_offset: bool,
    /// Where the text model's tensors are: `model` (`…ForCausalLM`) or `model.language_model`
    /// (`…ForConditionalGeneration`, beside a vision tower that is not used).
    pub weights_prefix: String,
    /// YaRN's RoPE scaling, where the checkpoint or the load options ask for it.
    pub yarn: Option<Yarn>,
    /// Multimodal RoPE (`mrope_section` of Qwen3.5's `rope_parameters`): how many rotated
    /// pairs take the time, row and column coordinate of a position, and whether they are
    /// interleaved (`t h w t h w …`, Qwen3.5) or in three runs. Text positions make it plain
    /// RoPE; an image's tokens differ.
    pub mrope: Option<([usize; 3], bool)>,
}

/// YaRN's RoPE scaling (Peng et al. 2023), as transformers and llama.cpp compute it: the
/// frequencies that turn fewer than `beta_slow` times over the original context are
/// interpolated by `factor`, those that turn more than `beta_fast` times kept, a linear ramp
/// between; cos and sin are scaled by the attention factor. Qwen documents it for contexts
/// past the trained one (Qwen3: factor 4 over 32 768 positions for 131 072).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// How many times the original context the positions reach.
    pub factor: f64,
    /// The context the model was trained on.
    pub original_max_positions: usize,
    /// Rotations over the original context above which a frequency is kept (default 32).
    pub beta_fast: f64,
    /// Rotations below which it is interpolated (default 1).
    pub beta_slow: f64,
    /// cos/sin's scale, where given; else `0.1 ln(factor) + 1` (with `mscale` and
    /// `mscale_all_dim`, their ratio).
    pub attention_factor: Option<f64>,
    /// DeepSeek-style numerator of the scale's ratio (with `mscale_all_dim`).
    pub mscale: Option<f64>,
    /// Its denominator.
    pub mscale_all_dim: Option<f64>,
    /// Whether the ramp's ends are rounded to whole dimensions (transformers' default).
    pub truncate: bool,
}

impl Yarn {
    /// YaRN by `factor` over a model trained on `original_max_positions`, with the defaults.
    pub fn new(factor: f64, original_max_positions: usize) -> Self {
        Self {
            factor,
            original_max_positions,
            beta_fast: 32.0,
            beta_slow: 1.0,
            attention_factor: None,
            mscale: None,
            mscale_all_dim: None,
            truncate: true,
        }
    }

    /// The positions it reaches: the original context times the factor.
    pub fn context(&self) -> usize {
        (self.original_max_positions as f64 * self.factor).round() as usize
    }

    /// The scale of cos and sin.
    pub fn attention_factor(&self) -> f64 {
        let m = |scale: f64, mscale: f64| match scale <= 1.0 {
            true => 1.0,
            false => 0.1 * mscale * scale.ln() + 1.0,
        };
        match (self.attention_factor, self.mscale, self.mscale_all_dim) {
            (Some(a), _, _) => a,
            (None, Some(a), Some(b)) if a != 0.0 && b != 0.0 => {
                m(self.factor, a) / m(self.factor, b)
            }
            _ => m(self.factor, 1.0),
        }
    }

    /// The inverse frequencies of `dim` rotated dimensions with base `theta`, in f32 as
    /// transformers computes them.
    pub fn inv_freq(&self, theta: f64, dim: usize) -> Vec<f32> {
        let correction = |rotations: f64| {
            dim as f64
                * (self.original_max_positions as f64 / (rotations * 2.0 * std::f64::consts::PI))
                    .ln()
                / (2.0 * theta.ln())
        };
        let (mut low, mut high) = (correction(self.beta_fast), correction(self.beta_slow));
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, high) = (low.max(0.0) as f32, high.min(dim as f64 - 1.0) as f32);
        let high = if low == high { high + 0.001 } else { high };
        (0..dim / 2)
            .map(|i| {
                let pos = (theta as f32).powf((2 * i) as f32 / dim as f32);
                let (extrapolated, interpolated) = (1.0 / pos, 1.0 / (self.factor as f32 * pos));
                let ramp = ((i as f32 - low) / (high - low)).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                interpolated * (1.0 - keep) + extrapolated * keep
            })
            .collect()
    }
}

/// YaRN's parameters from a `rope_scaling` / `rope_parameters` object (transformers' names
/// and defaults); `Err((key, why))`.
fn yarn_of(s: &Value, max_positions: usize) -> std::result::Result<Yarn, (&'static str, String)> {
    let num = |key: &'static str| -> std::result::Result<Option<f64>, (&'static str, String)> {
        match s.get(key).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err((key, format!("expected a number, found {v}"))),
            },
        }
    };
    let original = match num("original_max_position_embeddings")? {
        Some(n) if n >= 1.0 => n as usize,
        Some(n) => {
            return Err((
                "original_max_position_embeddings",
                format!("expected a positive integer, found {n}"),
            ))
        }
        None => max_positions,
    };
    let factor = num("factor")?.unwrap_or(max_positions as f64 / original as f64);
    if factor.is_nan() || factor < 1.0 {
        return Err((
            "factor",
            format!("expected a number from 1 up, found {factor}"),
        ));
    }
    let mut y = Yarn::new(factor, original);
    y.beta_fast = num("beta_fast")?.unwrap_or(32.0);
    y.beta_slow = num("beta_slow")?.unwrap_or(1.0);
    y.attention_factor = num("attention_factor")?;
    y.mscale = num("mscale")?;
    y.mscale_all_dim = num("mscale_all_dim")?;
    y.truncate = s.get("truncate").and_then(Value::as_bool).unwrap_or(true);
    Ok(y)
}

struct Fields<'a> {
    path: &'a Path,
    v: &'a Value,
}

impl Fields<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> EngineError {
        EngineError::Config {
            path: self.path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.v.get(field).filter(|v| !v.is_null())
    }

    fn usize(&self, field: &str) -> Result<usize> {
        self.opt_usize(field)?
            .ok_or_else(|| self.err(field, "missing"))
    }

    fn opt_usize(&self, field: &str) -> Result<Option<usize>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.err(field, format!("expected a positive integer, found {v}"))),
        }
    }

    fn opt_f64(&self, field: &str) -> Result<Option<f64>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected a number, found {v}"))),
        }
    }

    fn opt_bool(&self, field: &str) -> Result<Option<bool>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(field, format!("expected true or false, found {v}"))),
        }
    }

    /// The experts of a mixture-of-experts config. transformers 5 writes the expert count as
    /// `num_local_experts`, the hub's checkpoints as `num_experts`.
    fn moe(&self, layers: usize) -> Result<MoeConfig> {
        let (count_field, num_experts) = match self.opt_usize("num_experts")? {
            Some(n) => ("num_experts", n),
            None => ("num_local_experts", self.usize("num_local_experts")?),
        };
        let experts_per_token = self.usize("num_experts_per_tok")?;
        if experts_per_token > num_experts {
            return Err(self.err(
                "num_experts_per_tok",
                format!(
                    "{experts_per_token} is more than the {num_experts} experts (`{count_field}`)"
                ),
            ));
        }
        let mlp_only_layers = match self.get("mlp_only_layers") {
            None => vec![],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v.as_u64() {
                    Some(n) if (n as usize) < layers => Ok(n as usize),
                    _ => Err(self.err(
                        "mlp_only_layers",
                        format!("expected layer numbers below {layers}, found {v}"),
                    )),
                })
                .collect::<Result<_>>()?,
            Some(v) => {
                return Err(self.err("mlp_only_layers", format!("expected a list, found {v}")))
            }
        };
        Ok(MoeConfig {
            num_experts,
            experts_per_token,
            expert_intermediate_size: self.usize("moe_intermediate_size")?,
            norm_topk_prob: self.opt_bool("norm_topk_prob")?.unwrap_or(false),
            decoder_sparse_step: self.opt_usize("decoder_sparse_step")?.unwrap_or(1),
            mlp_only_layers,
            shared_expert_intermediate_size: self.opt_usize("shared_expert_intermediate_size")?,
        })
    }

    /// The Gated DeltaNet part of a hybrid config, checked: value heads a multiple of key
    /// heads, one layer type per layer, each known.
    fn linear_attention(&self, layers: usize) -> Result<LinearAttentionConfig> {
        let num_key_heads = self.usize("linear_num_key_heads")?;
        let num_value_heads = self.usize("linear_num_value_heads")?;
        let key_head_dim = self.usize("linear_key_head_dim")?;
        let value_head_dim = self.usize("linear_value_head_dim")?;
        let conv_kernel = self.usize("linear_conv_kernel_dim")?;
        for (field, n) in [
            ("linear_num_key_heads", num_key_heads),
            ("linear_num_value_heads", num_value_heads),
            ("linear_key_head_dim", key_head_dim),
            ("linear_value_head_dim", value_head_dim),
        ] {
            if n == 0 {
                return Err(self.err(field, "expected a positive integer, found 0"));
            }
        }
        if conv_kernel < 2 {
            return Err(self.err(
                "linear_conv_kernel_dim",
                format!("expected at least 2 taps, found {conv_kernel}"),
            ));
        }
        if !num_value_heads.is_multiple_of(num_key_heads) {
            return Err(self.err(
                "linear_num_value_heads",
                format!(
                    "{num_value_heads} is not a multiple of the {num_key_heads} key heads (`linear_num_key_heads`)"
                ),
            ));
        }
        let linear = match self.get("layer_types") {
            None => {
                let interval = self
                    .opt_usize("full_attention_interval")?
                    .unwrap_or(4)
                    .max(1);
                (0..layers)
                    .map(|i| !(i + 1).is_multiple_of(interval))
                    .collect()
            }
            Some(Value::Array(a)) => {
                if a.len() != layers {
                    return Err(self.err(
                        "layer_types",
                        format!(
                            "{} entries for {layers} layers (`num_hidden_layers`)",
                            a.len()
                        ),
                    ));
                }
                a.iter()
                    .map(|t| match t.as_str() {
                        Some("linear_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(self.err(
                            "layer_types",
                            format!(
                                "expected \"linear_attention\" or \"full_attention\", found {t}"
                            ),
                        )),
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            Some(v) => return Err(self.err("layer_types", format!("expected a list, found {v}"))),
        };
        Ok(LinearAttentionConfig {
            conv_kernel,
            key_head_dim,
            value_head_dim,
            num_key_heads,
            num_value_heads,
            linear,
            tiled_value_heads: false,
        })
    }

    /// A token id or a list of them (`eos_token_id` is either).
    fn ids(&self, field: &str) -> Result<Vec<u32>> {
        match self.get(field) {
            None => Ok(vec![]),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(|n| vec![n as u32])
                .ok_or_else(|| self.err(field, "expected a token id")),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_u64()
                        .map(|n| n as u32)
                        .ok_or_else(|| self.err(field, "expected a list of token ids"))
                })
                .collect(),
            Some(v) => Err(self.err(field, format!("expected a token id or a list, found {v}"))),
        }
    }
}

/// What a checkpoint declares about its attention and positions, from config.json or from
/// GGUF metadata, checked by one function so that both sources refuse the same models.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Declared {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Given explicitly (Qwen3), else derived from the hidden size.
    pub head_dim: Option<usize>,
    /// A RoPE variant the source names (`yarn`, `linear`, `default`, `none`, …) and its factor.
    pub rope_scaling: Option<(String, Option<f64>)>,
    /// Dimensions of each head that RoPE rotates, where the source says.
    pub rope_dims: Option<usize>,
    /// Whether RoPE may rotate part of each head only (the hybrid families).
    pub partial_rotary: bool,
    /// Sliding-window attention switched on.
    pub sliding_window: bool,
    pub hidden_act: Option<String>,
}

/// The declared value a check refused; each source names it by its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    HiddenSize,
    Heads,
    KvHeads,
    HeadDim,
    RopeScaling,
    RopeDims,
    SlidingWindow,
    HiddenAct,
}

impl Declared {
    /// The head size (given or derived) when the engine implements what is declared, else
    /// the item refused and why. What the engine does not implement would run and give
    /// silently wrong logits, so it is refused.
    pub(crate) fn check(&self) -> std::result::Result<usize, (Item, String)> {
        for (item, n) in [
            (Item::HiddenSize, self.hidden_size),
            (Item::Heads, self.num_attention_heads),
            (Item::KvHeads, self.num_key_value_heads),
        ] {
            if n == 0 {
                return Err((item, "expected a positive integer, found 0".into()));
            }
        }
        let (heads, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if !heads.is_multiple_of(kv) {
            return Err((
                Item::KvHeads,
                format!("{kv} does not divide the number of attention heads {heads}"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(0) => return Err((Item::HeadDim, "expected a positive integer, found 0".into())),
            Some(d) => d,
            None if self.hidden_size.is_multiple_of(heads) => self.hidden_size / heads,
            None => {
                return Err((
                    Item::HeadDim,
                    format!(
                        "missing, and the hidden size {} is not a multiple of the {heads} attention heads",
                        self.hidden_size
                    ),
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err((
                Item::HeadDim,
                format!("{head_dim} is odd; RoPE needs an even size"),
            ));
        }
        if let Some(dims) = self.rope_dims {
            if self.partial_rotary && (dims == 0 || dims > head_dim || dims % 2 != 0) {
                return Err((
                    Item::RopeDims,
                    format!("RoPE over {dims} of the {head_dim} dimensions of a head: expected an even number from 2 to {head_dim}"),
                ));
            }
            if !self.partial_rotary && dims != head_dim {
                return Err((
                    Item::RopeDims,
                    format!("RoPE over {dims} of the {head_dim} dimensions of a head is not supported (only all of them)"),
                ));
            }
        }
        if let Some((kind, factor)) = &self.rope_scaling {
            // A factor of exactly 1 scales nothing, whatever the variant.
            if !matches!(kind.as_str(), "default" | "none" | "yarn") && *factor != Some(1.0) {
                let factor = factor.map(|x| format!(" (factor {x})")).unwrap_or_default();
                return Err((
                    Item::RopeScaling,
                    format!(
                        "RoPE scaling `{kind}`{factor} is not supported (only plain RoPE and yarn)"
                    ),
                ));
            }
        }
        if self.sliding_window {
            return Err((
                Item::SlidingWindow,
                "sliding-window attention is not supported".into(),
            ));
        }
        if let Some(act) = &self.hidden_act {
            if act != "silu" {
                return Err((
                    Item::HiddenAct,
                    format!("`{act}` is not supported (only `silu`)"),
                ));
            }
        }
        Ok(head_dim)
    }
}

impl QwenConfig {
    /// Scales RoPE by `yarn`, whose context becomes this model's where it is longer.
    pub fn set_yarn(&mut self, yarn: Yarn) {
        self.max_position_embeddings = self.max_position_embeddings.max(yarn.context());
        self.yarn = Some(yarn);
    }

    /// Reads and checks a `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EngineError::MissingFile {
                what: "config.json",
                path: path.to_path_buf(),
            },
            _ => EngineError::io(path, e),
        })?;
        Self::from_json_str(&text, path)
    }

    /// Parses a `config.json`'s text; `path` names it in errors.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| EngineError::Config {
            path: path.to_path_buf(),
            field: "(file)".into(),
            message: format!("invalid JSON: {e}"),
        })?;
        Self::from_value(&v, path)
    }

    /// Reads a parsed `config.json`; `path` names it in errors.
    pub fn from_value(v: &Value, path: &Path) -> Result<Self> {
        let top = Fields { path, v };
        let arch = match top.get("architectures") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
        .or_else(|| {
            top.get("model_type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .ok_or_else(|| top.err("architectures", "missing (and no `model_type`)"))?;
        let family = Family::from_architecture(&arch).ok_or_else(|| {
            EngineError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: arch.clone(),
                supported: Family::SUPPORTED.into(),
            }
        })?;
        // `…ForConditionalGeneration`: the language model's fields are under `text_config`.
        let text = match top.get("text_config") {
            Some(t @ Value::Object(_)) if family.is_hybrid() => Some(t),
            Some(_) if family.is_hybrid() => {
                return Err(top.err("text_config", "expected an object"))
            }
            _ => None,
        };
        if family.is_hybrid() && text.is_none() && arch.ends_with("ForConditionalGeneration") {
            return Err(top.err(
                "text_config",
                format!("missing: a {arch} checkpoint keeps its language model's settings there"),
            ));
        }
        let f = Fields {
            path,
            v: text.unwrap_or(v),
        };

        let hidden_size = f.usize("hidden_size")?;
        let num_attention_heads = f.usize("num_attention_heads")?;
        let num_key_value_heads = f
            .opt_usize("num_key_value_heads")?
            .unwrap_or(num_attention_heads);

        let rope_params = f.get("rope_parameters");
        let rope_theta = match f.opt_f64("rope_theta")? {
            Some(t) => t,
            None => match rope_params.and_then(|p| p.get("rope_theta")) {
                Some(t) => t
                    .as_f64()
                    .ok_or_else(|| f.err("rope_parameters.rope_theta", "expected a number"))?,
                None => 10_000.0,
            },
        };
        // A RoPE variant is declared in either of two places; a scaled one in either counts.
        let mut rope_field = "rope_scaling";
        let mut rope_scaling: Option<(String, Option<f64>)> = None;
        let mut scaling_params: Option<&Value> = None;
        for (field, scaling) in [
            ("rope_scaling", f.get("rope_scaling")),
            ("rope_parameters", rope_params),
        ] {
            let Some(s) = scaling else { continue };
            let Some(kind) = s.get("rope_type").or_else(|| s.get("type")) else {
                continue;
            };
            let plain = |k: &str| matches!(k, "default" | "none");
            if rope_scaling.as_ref().is_none_or(|(k, _)| plain(k)) {
                rope_field = field;
                let kind = kind.as_str().unwrap_or("?").to_string();
                rope_scaling = Some((kind, s.get("factor").and_then(Value::as_f64)));
                scaling_params = Some(s);
            }
        }
        let declared_max_positions = f.opt_usize("max_position_embeddings")?.unwrap_or(32_768);
        let yarn = match (&rope_scaling, scaling_params) {
            (Some((kind, _)), Some(s)) if kind == "yarn" => Some(
                yarn_of(s, declared_max_positions)
                    .map_err(|(key, m)| f.err(&format!("{rope_field}.{key}"), m))?,
            ),
            _ => None,
        };
        let partial_rotary = match f.opt_f64("partial_rotary_factor")? {
            Some(p) => Some(p),
            None => match rope_params.and_then(|p| p.get("partial_rotary_factor")) {
                Some(p) => Some(p.as_f64().ok_or_else(|| {
                    f.err("rope_parameters.partial_rotary_factor", "expected a number")
                })?),
                None => None,
            },
        };
        let explicit_head_dim = f.opt_usize("head_dim")?;
        let rope_dims = match partial_rotary {
            Some(p) if !(p > 0.0 && p <= 1.0) => {
                return Err(f.err(
                    "partial_rotary_factor",
                    format!("expected a fraction in (0, 1], found {p}"),
                ))
            }
            Some(p) => {
                let d = explicit_head_dim.unwrap_or(hidden_size / num_attention_heads.max(1));
                Some((d as f64 * p) as usize)
            }
            None if family.is_hybrid() => {
                Some(explicit_head_dim.unwrap_or(hidden_size / num_attention_heads.max(1)) / 4)
            }
            None => None,
        };
        let declared = Declared {
            hidden_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim: explicit_head_dim,
            rope_scaling,
            rope_dims,
            partial_rotary: family.is_hybrid(),
            sliding_window: f.opt_bool("use_sliding_window")?.unwrap_or(false),
            hidden_act: match f.get("hidden_act") {
                None => None,
                Some(Value::String(a)) => Some(a.clone()),
                Some(other) => Some(other.to_string()),
            },
        };
        let head_dim = declared.check().map_err(|(item, message)| {
            let field = match item {
                Item::HiddenSize => "hidden_size",
                Item::Heads => "num_attention_heads",
                Item::KvHeads => "num_key_value_heads",
                Item::HeadDim => "head_dim",
                Item::RopeDims if family.is_hybrid() => "partial_rotary_factor",
                Item::RopeDims => "head_dim",
                Item::RopeScaling => rope_field,
                Item::SlidingWindow => "use_sliding_window",
                Item::HiddenAct => "hidden_act",
            };
            match item {
                Item::SlidingWindow => f.err(field, format!("{message}; set it to false")),
                _ => f.err(field, message),
            }
        })?;

        let attention_bias = f.opt_bool("attention_bias")?;
        let (qkv_bias, o_bias) = match family {
            Family::Qwen2 => (true, false),
            Family::Qwen3 | Family::Qwen3Moe | Family::Qwen35 | Family::Qwen35Moe => {
                let b = attention_bias.unwrap_or(false);
                (b, b)
            }
        };
        let num_hidden_layers = f.usize("num_hidden_layers")?;
        let moe = match family {
            Family::Qwen3Moe => Some(f.moe(num_hidden_layers)?),
            Family::Qwen35Moe => {
                let mut m = f.moe(num_hidden_layers)?;
                // Qwen3.5-MoE's router always renormalises its top-k weights.
                m.norm_topk_prob = true;
                Some(m)
            }
            Family::Qwen2 | Family::Qwen3 | Family::Qwen35 => None,
        };
        let linear_attention = match family.is_hybrid() {
            true => Some(f.linear_attention(num_hidden_layers)?),
            false => None,
        };
        let torch_dtype = f
            .get("dtype")
            .or_else(|| f.get("torch_dtype"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut eos_token_ids = f.ids("eos_token_id")?;
        eos_token_ids.dedup();

        let mut config = Self {
            family,
            vocab_size: f.usize("vocab_size")?,
            hidden_size,
            intermediate_size: match family {
                // Every Qwen3.5-MoE block is routed: no dense width.
                Family::Qwen35Moe => f.opt_usize("intermediate_size")?.unwrap_or(0),
                _ => f.usize("intermediate_size")?,
            },
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            max_position_embeddings: declared_max_positions,
            rope_theta,
            rms_norm_eps: f.opt_f64("rms_norm_eps")?.unwrap_or(1e-6),
            tie_word_embeddings: match top.opt_bool("tie_word_embeddings")? {
                Some(t) => t,
                None => f.opt_bool("tie_word_embeddings")?.unwrap_or(false),
            },
            qkv_bias,
            o_bias,
            torch_dtype,
            bos_token_id: f.ids("bos_token_id")?.first().copied(),
            eos_token_ids,
            moe,
            linear_attention,
            rotary_dim: rope_dims.unwrap_or(head_dim),
            norm_weights_offset: family.is_hybrid(),
            weights_prefix: match text {
                Some(_) => "model.language_model".into(),
                None => "model".into(),
            },
            yarn: None,
            mrope: match rope_params.and_then(|p| p.get("mrope_section")) {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let sections: [usize; 3] = serde_json::from_value(v.clone()).map_err(|_| {
                        f.err("rope_parameters.mrope_section", "expected three counts")
                    })?;
                    let interleaved = rope_params
                        .and_then(|p| p.get("mrope_interleaved"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    if sections.iter().sum::<usize>() * 2 > rope_dims.unwrap_or(head_dim) {
                        return Err(f.err(
                            "rope_parameters.mrope_section",
                            "more rotated pairs than the rotary dimensions hold",
                        ));
                    }
                    Some((sections, interleaved))
                }
            },
        };
        if let Some(y) = yarn {
            // YaRN extends the context to the original one times its factor.
            config.set_yarn(y);
        }
        Ok(config)
    }

    /// Parameters, counting tied embeddings once.
    pub fn num_parameters(&self) -> usize {
        let (h, i, d) = (self.hidden_size, self.intermediate_size, self.head_dim);
        let q = self.num_attention_heads * d;
        let kv = self.num_key_value_heads * d;
        let mut attn = h * q + 2 * h * kv + q * h;
        if self.qkv_bias {
            attn += q + 2 * kv;
        }
        if self.o_bias {
            attn += h;
        }
        if self.family.has_qk_norm() {
            attn += 2 * d;
        }
        if self.family.is_hybrid() {
            attn += q; // the output gate's half of q_proj
        }
        let ffn = |layer: usize| match &self.moe {
            Some(m) if m.is_sparse_layer(layer) => {
                let shared = m
                    .shared_expert_intermediate_size
                    .map_or(0, |s| 3 * h * s + h);
                m.num_experts * (3 * h * m.expert_intermediate_size + h) + shared
            }
            _ => 3 * h * i,
        };
        let mixer = |layer: usize| match &self.linear_attention {
            Some(l) if l.linear[layer] => {
                let vd = l.num_value_heads * l.value_head_dim;
                let conv = l.conv_dim();
                h * conv
                    + h * vd
                    + 2 * h * l.num_value_heads
                    + conv * l.conv_kernel
                    + 2 * l.num_value_heads
                    + l.value_head_dim
                    + vd * h
            }
            _ => attn,
        };
        let layers: usize = (0..self.num_hidden_layers)
            .map(|l| mixer(l) + ffn(l) + 2 * h)
            .sum();
        let embed = self.vocab_size * h;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        layers + embed + head + h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<QwenConfig> {
        QwenConfig::from_value(&v, Path::new("config.json"))
    }

    fn qwen2() -> Value {
        json!({
            "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
            "sliding_window": 32768, "use_sliding_window": false, "eos_token_id": 151645
        })
    }

    #[test]
    fn reads_a_hub_qwen2_config() {
        let c = parse(qwen2()).unwrap();
        assert_eq!(c.family, Family::Qwen2);
        assert_eq!(c.head_dim, 64);
        assert!(c.qkv_bias && !c.o_bias);
        assert_eq!(c.rope_theta, 1e6);
        assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
        assert_eq!(c.eos_token_ids, vec![151645]);
        // Qwen2.5-0.5B has 494 M parameters.
        assert_eq!(c.num_parameters() / 1_000_000, 494);
    }

    #[test]
    fn reads_the_recent_transformers_layout() {
        let mut v = qwen2();
        let o = v.as_object_mut().unwrap();
        o.remove("rope_theta");
        o.remove("torch_dtype");
        o.insert("dtype".into(), json!("float32"));
        o.insert("sliding_window".into(), Value::Null);
        o.insert(
            "rope_parameters".into(),
            json!({"rope_theta": 5000.0, "rope_type": "default"}),
        );
        let c = parse(v).unwrap();
        assert_eq!(c.rope_theta, 5000.0);
        assert_eq!(c.torch_dtype.as_deref(), Some("float32"));
    }

    #[test]
    fn qwen3_takes_explicit_head_dim() {
        let v = json!({
            "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
            "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
            "head_dim": 128, "vocab_size": 151936, "attention_bias": false,
            "eos_token_id": [151645, 151643]
        });
        let c = parse(v).unwrap();
        assert_eq!((c.family, c.head_dim), (Family::Qwen3, 128));
        assert!(!c.qkv_bias);
        assert_eq!(c.eos_token_ids, vec![151645, 151643]);
    }

    /// The hub's `Qwen/Qwen3-30B-A3B/config.json`, as published.
    fn qwen3_30b_a3b() -> Value {
        json!({
            "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
            "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
            "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
            "intermediate_size": 6144, "max_position_embeddings": 40960,
            "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
            "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
            "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
            "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
            "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
            "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "use_cache": true, "use_sliding_window": false, "vocab_size": 151936
        })
    }

    #[test]
    fn qwen3_moe_reads_the_hub_config() {
        let c = parse(qwen3_30b_a3b()).unwrap();
        assert_eq!((c.family, c.head_dim), (Family::Qwen3Moe, 128));
        let moe = c.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.experts_per_token), (128, 8));
        assert_eq!(moe.expert_intermediate_size, 768);
        assert!(moe.norm_topk_prob && moe.is_sparse_layer(0) && moe.is_sparse_layer(47));
        // 30.5 B, as the model card says.
        let b = c.num_parameters() as f64 / 1e9;
        assert!((30.4..30.6).contains(&b), "{b}");

        // Dense layers between sparse ones, and either spelling of the expert count.
        let mut v = qwen3_30b_a3b();
        v["decoder_sparse_step"] = json!(2);
        v["mlp_only_layers"] = json!([3]);
        v.as_object_mut().unwrap().remove("num_experts");
        v["num_local_experts"] = json!(128);
        let moe = parse(v).unwrap().moe.unwrap();
        assert_eq!(moe.num_experts, 128);
        let sparse: Vec<usize> = (0..8).filter(|&i| moe.is_sparse_layer(i)).collect();
        assert_eq!(sparse, [1, 5, 7]);
    }

    #[test]
    fn qwen3_moe_refuses_impossible_routing() {
        let mut v = qwen3_30b_a3b();
        v["num_experts_per_tok"] = json!(129);
        let err = parse(v).unwrap_err().to_string();
        assert!(err.contains("num_experts_per_tok"), "{err}");
        let mut v = qwen3_30b_a3b();
        v["mlp_only_layers"] = json!([48]);
        let err = parse(v).unwrap_err().to_string();
        assert!(err.contains("mlp_only_layers"), "{err}");
    }

    #[test]
    fn unknown_architecture_lists_the_supported_ones() {
        let mut v = qwen2();
        v["architectures"] = json!(["LlamaForCausalLM"]);
        let err = parse(v).unwrap_err().to_string();
        assert!(
            err.contains("LlamaForCausalLM") && err.contains("Qwen3ForCausalLM"),
            "{err}"
        );
    }

    #[test]
    fn missing_and_malformed_fields_are_named() {
        let mut v = qwen2();
        v.as_object_mut().unwrap().remove("hidden_size");
        let err = parse(v).unwrap_err().to_string();
        assert!(
            err.contains("`hidden_size`") && err.contains("missing"),
            "{err}"
        );

        let mut v = qwen2();
        v["num_key_value_heads"] = json!(3);
        assert!(parse(v)
            .unwrap_err()
            .to_string()
            .contains("num_key_value_heads"));

        let mut v = qwen2();
        v["rope_scaling"] = json!({"type": "longrope", "factor": 4.0});
        assert!(parse(v).unwrap_err().to_string().contains("longrope"));
    }

    #[test]
    fn yarn_extends_the_context_as_qwen_documents_it() -> Result<()> {
        // Qwen3's model card: factor 4 over the 32 768 positions it was trained on.
        let mut v = qwen2();
        v["max_position_embeddings"] = json!(40960);
        v["rope_scaling"] =
            json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768});
        let c = parse(v)?;
        assert_eq!(c.yarn, Some(Yarn::new(4.0, 32768)));
        assert_eq!(c.max_position_embeddings, 131_072);
        let y = Yarn::new(4.0, 32768);
        assert!((y.attention_factor() - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
        // The highest frequencies are kept, the lowest divided by the factor.
        let plain: Vec<f32> = (0..64)
            .map(|i| 1e6f32.powf(-(2 * i) as f32 / 128.0))
            .collect();
        let scaled = y.inv_freq(1e6, 128);
        assert!((scaled[0] - plain[0]).abs() <= 1e-6 * plain[0]);
        assert!((scaled[63] - plain[63] / 4.0).abs() <= 1e-5 * plain[63]);
        // Without an original context, the declared one; transformers' names in
        // rope_parameters; attention_factor as given.
        let mut v = qwen2();
        v["rope_parameters"] =
            json!({"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e6, "attention_factor": 1.0});
        let c = parse(v)?;
        assert_eq!(c.yarn.map(|y| y.original_max_positions), Some(32768));
        assert_eq!(c.max_position_embeddings, 65536);
        assert_eq!(c.yarn.map(|y| y.attention_factor()), Some(1.0));
        // Bad values name their field.
        let mut v = qwen2();
        v["rope_scaling"] = json!({"rope_type": "yarn", "factor": 0.5});
        let err = parse(v).unwrap_err().to_string();
        assert!(
            err.contains("`rope_scaling.factor`") && err.contains("0.5"),
            "{err}"
        );
        let mut v = qwen2();
        v["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4, "beta_fast": "fast"});
        let err = parse(v).unwrap_err().to_string();
        assert!(err.contains("`rope_scaling.beta_fast`"), "{err}");
        Ok(())
    }

    #[test]
    fn scaled_rope_in_either_place_and_sliding_windows_are_refused() {
        let mut v = qwen2();
        v["rope_scaling"] = json!({"rope_type": "default"});
        v["rope_parameters"] = json!({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6});
        let err = parse(v).unwrap_err().to_string();
        assert!(
            err.contains("`rope_parameters`") && err.contains("linear") && err.contains("factor 2"),
            "{err}"
        );
        // A factor of 1 scales nothing.
        let mut v = qwen2();
        v["rope_scaling"] = json!({"type": "yarn", "factor": 1.0});
        assert!(parse(v).is_ok());
        let mut v = qwen2();
        v["use_sliding_window"] = json!(true);
        let err = parse(v).unwrap_err().to_string();
        assert!(err.contains("`use_sliding_window`"), "{err}");
        let mut v = qwen2();
        v["hidden_act"] = json!("gelu");
        let err = parse(v).unwrap_err().to_string();
        assert!(
            err.contains("`hidden_act`") && err.contains("gelu"),
            "{err}"
        );
    }

    /// The checks both config.json and GGUF metadata go through.
    #[test]
    fn declared_checks() {
        let ok = Declared {
            hidden_size: 64,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            ..Default::default()
        };
        assert_eq!(ok.check(), Ok(16));
        let refused = |d: Declared| d.check().unwrap_err().0;
        assert_eq!(
            refused(Declared {
                num_attention_heads: 0,
                ..ok.clone()
            }),
            Item::Heads
        );
        assert_eq!(
            refused(Declared {
                num_key_value_heads: 0,
                ..ok.clone()
            }),
            Item::KvHeads
        );
        assert_eq!(
            refused(Declared {
                num_key_value_heads: 3,
                ..ok.clone()
            }),
            Item::KvHeads
        );
        assert_eq!(
            refused(Declared {
                hidden_size: 66,
                ..ok.clone()
            }),
            Item::HeadDim
        );
        assert_eq!(
            refused(Declared {
                head_dim: Some(15),
                ..ok.clone()
            }),
            Item::HeadDim
        );
        assert_eq!(
            refused(Declared {
                rope_dims: Some(8),
                ..ok.clone()
            }),
            Item::RopeDims
        );
        assert_eq!(
            refused(Declared {
                rope_scaling: Some(("llama3".into(), Some(4.0))),
                ..ok.clone()
            }),
            Item::RopeScaling
        );
        assert_eq!(
            refused(Declared {
                rope_scaling: Some(("dynamic".into(), None)),
                ..ok.clone()
            }),
            Item::RopeScaling
        );
        assert_eq!(
            refused(Declared {
                sliding_window: true,
                ..ok.clone()
            }),
            Item::SlidingWindow
        );
        for plain in ["default", "none", "yarn"] {
            let d = Declared {
                rope_scaling: Some((plain.into(), Some(8.0))),
                ..ok.clone()
            };
            assert_eq!(d.check(), Ok(16));
        }
    }

    fn qwen3_5_9b() -> Value {
        // Qwen3.5-9B's config.json (the text part; the vision tower's settings cut short).
        json!({
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "tie_word_embeddings": false,
            "text_config": {
                "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
                "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
                "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                "linear_num_value_heads": 32, "full_attention_interval": 4,
                "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "vocab_size": 248320,
                "eos_token_id": 248044, "hidden_act": "silu",
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                    "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                    "mrope_interleaved": true}
            },
            "vision_config": {"depth": 27, "hidden_size": 1152}
        })
    }

    #[test]
    fn qwen3_5_reads_the_language_model_of_a_conditional_generation_config() -> Result<()> {
        let c = parse(qwen3_5_9b())?;
        assert_eq!(
            (c.family, c.head_dim, c.rotary_dim),
            (Family::Qwen35, 256, 64)
        );
        assert_eq!(c.weights_prefix, "model.language_model");
        assert!(c.norm_weights_offset && !c.tie_word_embeddings);
        let l = c
            .linear_attention
            .clone()
            .ok_or_else(|| EngineError::invalid("test", "no linear attention"))?;
        assert_eq!(l.linear.iter().filter(|&&x| !x).count(), 8);
        assert!(!l.linear[3] && l.linear[2] && !l.linear[31]);
        assert_eq!(
            (l.conv_dim(), l.key_head_of(3), l.key_head_of(31)),
            (8192, 1, 15)
        );
        // ~9B parameters (the vision tower not counted).
        let p = c.num_parameters() as f64 / 1e9;
        assert!((8.0..10.0).contains(&p), "{p}");
        Ok(())
    }

    #[test]
    fn qwen3_5_refuses_inconsistent_linear_attention() {
        let field_of = |v: Value| match parse(v) {
            Err(EngineError::Config { field, message, .. }) => format!("{field}: {message}"),
            other => format!("{other:?}"),
        };
        let mut v = qwen3_5_9b();
        v["text_config"]["linear_num_value_heads"] = json!(24);
        v["text_config"]["linear_num_key_heads"] = json!(16);
        assert!(field_of(v).starts_with("linear_num_value_heads: 24 is not a multiple"));
        let mut v = qwen3_5_9b();
        v["text_config"]["layer_types"] = Value::Array(vec![json!("linear_attention"); 31]);
        assert!(field_of(v).starts_with("layer_types: 31 entries for 32 layers"));
        let mut v = qwen3_5_9b();
        v["text_config"]["layer_types"] = json!(["linear_attention", "sliding"]);
        v["text_config"]["num_hidden_layers"] = json!(2);
        assert!(field_of(v).contains("found \"sliding\""));
        let mut v = qwen3_5_9b();
        v["text_config"]["linear_key_head_dim"] = json!(0);
        assert!(field_of(v).starts_with("linear_key_head_dim: expected a positive integer"));
        let mut v = qwen3_5_9b();
        v["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(1.5);
        assert!(field_of(v).starts_with("partial_rotary_factor: expected a fraction"));
        let mut v = qwen3_5_9b();
        v.as_object_mut().map(|o| o.remove("text_config"));
        assert!(field_of(v).starts_with("text_config: missing"));
        // A vision-only checkpoint is no language model.
        let v = json!({"architectures": ["Qwen3_5VisionModel"], "hidden_size": 1152});
        match parse(v) {
            Err(EngineError::UnsupportedArchitecture {
                found, supported, ..
            }) => {
                assert_eq!(found, "Qwen3_5VisionModel");
                assert!(supported.contains("Qwen3_5ForConditionalGeneration"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn qwen3_5_moe_has_a_shared_expert_and_no_dense_width() -> Result<()> {
        let mut v = qwen3_5_9b();
        v["architectures"] = json!(["Qwen3_5MoeForConditionalGeneration"]);
        let t = &mut v["text_config"];
        t.as_object_mut().map(|o| o.remove("intermediate_size"));
        t["num_experts"] = json!(256);
        t["num_experts_per_tok"] = json!(8);
        t["moe_intermediate_size"] = json!(512);
        t["shared_expert_intermediate_size"] = json!(512);
        let c = parse(v)?;
        let m = c
            .moe
            .clone()
            .ok_or_else(|| EngineError::invalid("test", "no experts"))?;
        assert_eq!((c.family, c.intermediate_size), (Family::Qwen35Moe, 0));
        assert_eq!(
            (m.shared_expert_intermediate_size, m.norm_topk_prob),
            (Some(512), true)
        );
        assert!((0..32).all(|i| m.is_sparse_layer(i)));
        Ok(())
    }

    #[test]
    fn missing_file_is_named() {
        let err = QwenConfig::from_file(Path::new("/nonexistent/config.json")).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/config.json"),
            "{err}"
        );
    }
}
