//! Arguments every model-loading command shares.

use anyhow::bail;
use hearth_engine::kernels::{ops::attention::Products, KernelOptions};
use hearth_engine::{
    CacheType, CacheTypes, DTypeSpec, DeviceSpec, HubOptions, LoadOptions, LoadProgress,
    SamplingParams, SchedulerOptions, YarnOptions,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A checkpoint directory, a Hugging Face repo id (owner/name), or a model card name
    /// (`hearth models` lists them).
    #[arg(short, long, default_value = "", hide_default_value = true)]
    pub model: String,
    /// Hub revision (branch, tag or commit).
    #[arg(long)]
    pub revision: Option<String>,
    /// auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// auto, f32, bf16 or f16 (auto: bf16 on GPUs, the checkpoint's dtype on the CPU).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// Use only the local Hugging Face cache (also HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,
    /// llama.cpp's vision projector GGUF for a GGUF model (images in). Default: the one
    /// `*mmproj*.gguf` beside a Qwen3.5 GGUF, if there is exactly one.
    #[arg(long)]
    pub mmproj: Option<std::path::PathBuf>,
    /// The most pixels an image may have as decoded (larger ones are refused; default
    /// 33554432, an 8K × 4K screenshot). Images are then resized to the model's bounds.
    #[arg(long)]
    pub max_image_pixels: Option<usize>,
    /// Chat format: model (its own template), chatml, internlm2, or a .jinja/.toml file.
    #[arg(long)]
    pub template: Option<String>,
    /// Sequences decoded together at most; more requests wait (default 8 on the CPU, 32 on
    /// a GPU).
    #[arg(long)]
    pub max_seqs: Option<usize>,
    /// MiB of KV cache all sequences and kept sessions may hold together; idle sessions are
    /// evicted least recently used (default a quarter of RAM on the CPU, 8192 on a GPU).
    #[arg(long)]
    pub kv_cache_mb: Option<usize>,
    /// Prompt tokens prefilled per scheduler step, so that running sequences keep decoding
    /// while a long prompt comes in (default 512).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Speculative decoding: off, ngram (draft the tokens that followed the latest earlier
    /// occurrence of the last few, then verify them in one pass), draft (a --draft-model's
    /// tokens), mtp (the model's own multi-token-prediction head, which Qwen3.5 checkpoints
    /// carry) or auto (on the CPU: ngram, and the --draft-model's tokens where ngram finds
    /// none). The tokens are those decoding gives, at any temperature.
    #[arg(long, default_value = "auto")]
    pub speculative: String,
    /// A small model of the same tokenizer that drafts tokens for --model to verify (a GGUF
    /// file, checkpoint directory, hub repo id or card name); with it, --speculative auto
    /// takes its drafts.
    #[arg(long)]
    pub draft_model: Option<String>,
    /// Rows a decoding step runs at most once drafts are added: each running sequence takes
    /// one, drafts fill the rest (default 64 on the CPU, 256 on a GPU).
    #[arg(long)]
    pub max_step_rows: Option<usize>,
    /// How the KV cache stores keys: f32, f16, bf16, q8_0 or q4_0 (default f16 on the CPU; on
    /// a GPU the model's dtype, the only one taken there).
    #[arg(long)]
    pub cache_type_k: Option<String>,
    /// How the KV cache stores values: f32, f16, bf16, q8_0 or q4_0 (default f16 on the CPU;
    /// on a GPU the model's dtype).
    #[arg(long)]
    pub cache_type_v: Option<String>,
    /// Attention's products on the CPU: bf16 (queries, keys, values and weights rounded to
    /// bfloat16, sums in f32; taken where the CPU has AVX-512 BF16, about twice as fast at
    /// depth) or f32.
    #[arg(long, default_value = "bf16")]
    pub attention_precision: String,
    /// Most positions a sequence may hold (default the model's context: its
    /// max_position_embeddings, or the original context times the YaRN factor).
    #[arg(long)]
    pub ctx_size: Option<usize>,
    /// RoPE scaling: yarn extends a model past the context it was trained on (as Qwen
    /// documents for 131 072 positions on Qwen3); the factor is --rope-scale, else
    /// --ctx-size over the original context.
    #[arg(long)]
    pub rope_scaling: Option<String>,
    /// YaRN's factor: how many times the original context the positions reach.
    #[arg(long)]
    pub rope_scale: Option<f64>,
    /// The context the model was trained on, for YaRN (default the checkpoint's).
    #[arg(long)]
    pub yarn_orig_ctx: Option<usize>,
}

impl ModelArgs {
    pub fn load_options(&self) -> anyhow::Result<LoadOptions> {
        if self.model.trim().is_empty() {
            bail!("invalid --model: none given; pass a checkpoint directory, a .gguf file, a hub repo id or a model card name");
        }
        Ok(LoadOptions {
            device: self.device.parse::<DeviceSpec>()?,
            dtype: self.dtype.parse::<DTypeSpec>()?,
            hub: HubOptions {
                revision: self.revision.clone(),
                offline: self.offline,
                cache_dir: None,
                progress: true,
            },
            template: self.template.clone(),
            scheduler: SchedulerOptions {
                max_seqs: self.max_seqs,
                prefill_chunk: self.prefill_chunk,
                kv_cache_mb: self.kv_cache_mb,
                max_waiting: None,
                speculation: Some(self.speculative.parse()?),
                max_step_rows: self.max_step_rows,
            },
            progress: load_progress(),
            // HEARTH_CPU, read by the engine.
            cpu: None,
            kernels: KernelOptions {
                attention: Products::parse(&self.attention_precision).ok_or_else(|| {
                    anyhow::anyhow!(
                        "invalid --attention-precision: `{}`; expected bf16 or f32",
                        self.attention_precision
                    )
                })?,
                ..Default::default()
            },
            cache_types: self.cache_types()?,
            ctx_size: self.ctx_size,
            yarn: self.yarn()?,
            draft_model: self.draft_model.clone(),
            mmproj: self.mmproj.clone(),
            max_image_pixels: self.max_image_pixels,
        })
    }

    fn yarn(&self) -> anyhow::Result<Option<YarnOptions>> {
        let asked = YarnOptions {
            factor: self.rope_scale,
            original_max_positions: self.yarn_orig_ctx,
        };
        match self.rope_scaling.as_deref().map(str::trim) {
            Some("yarn") => Ok(Some(asked)),
            None | Some("none") if asked == YarnOptions::default() => Ok(None),
            None => bail!("invalid --rope-scale/--yarn-orig-ctx: they take --rope-scaling yarn"),
            Some("none") => {
                bail!("invalid --rope-scaling: none takes no --rope-scale or --yarn-orig-ctx")
            }
            Some(other) => bail!("invalid --rope-scaling: `{other}`; expected yarn or none"),
        }
    }

    fn cache_types(&self) -> anyhow::Result<CacheTypes> {
        let parse = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<CacheType>> {
            v.as_deref()
                .map(|s| {
                    s.parse()
                        .map_err(|e| anyhow::anyhow!("invalid {flag}: {e}"))
                })
                .transpose()
        };
        Ok(CacheTypes {
            k: parse("--cache-type-k", &self.cache_type_k)?,
            v: parse("--cache-type-v", &self.cache_type_v)?,
        })
    }
}

/// A bar on stderr while the weights load, for a terminal only: pipes and log files get none.
fn load_progress() -> Option<LoadProgress> {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return None;
    }
    let bar = ProgressBar::hidden();
    if let Ok(style) = ProgressStyle::with_template("loading weights {bar:30} {pos}/{len} layers") {
        bar.set_style(style);
    }
    Some(LoadProgress(std::sync::Arc::new(move |done, total| {
        if done == 0 {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.set_length(total as u64);
        }
        bar.set_position(done as u64);
        if done == total {
            bar.finish_and_clear();
        }
    })))
}

/// Sampling flags; unset ones keep the model's defaults.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 is greedy. Default: the model's generation_config.json.
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long, allow_negative_numbers = true)]
    pub min_p: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    pub repetition_penalty: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    pub fn apply(&self, defaults: &SamplingParams) -> SamplingParams {
        let mut p = defaults.clone();
        if let Some(t) = self.temperature {
            p.temperature = t;
        }
        p.top_p = self.top_p.or(p.top_p);
        p.top_k = self.top_k.or(p.top_k);
        p.min_p = self.min_p.or(p.min_p);
        p.repetition_penalty = self.repetition_penalty.unwrap_or(p.repetition_penalty);
        p.seed = self.seed.unwrap_or(p.seed);
        p
    }

    /// Reports bad values before a model is loaded.
    pub fn check(&self) -> anyhow::Result<()> {
        self.apply(&SamplingParams::default()).validate()?;
        Ok(())
    }
}

pub fn check_max_tokens(n: usize) -> anyhow::Result<()> {
    if n == 0 {
        bail!("invalid --max-tokens: 0 (must be at least 1)");
    }
    Ok(())
}
