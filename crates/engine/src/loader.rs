//! Loading a model: what a spec names (a directory, a `.gguf` file, a hub repo, a model card),
//! its weights, tokenizer, chat format, stop words and sampling defaults, put together from
//! the files [`crate::load`] reads and the model [`crate::model`] builds. `Engine::load`,
//! `hearth bench` and `hearth parity` all load through [`load_model`].

use crate::chat::{ChatFormat, JinjaTemplate, MetaTemplate};
use crate::device::{device_name, DeviceSpec};
use crate::error::{EngineError, Result};
use crate::kernels::KernelContext;
use crate::load::card::ModelCard;
use crate::load::config::QwenConfig;
use crate::load::gguf::GgufFile;
use crate::load::source::{self, HubOptions, ModelFiles};
use crate::load::weights::Weights;
use crate::model::Qwen;
use crate::sampling::SamplingParams;
use crate::scheduler::SchedulerOptions;
use crate::text::tokenizer::Tokenizer;
use crate::vision::Vision;
use candle_core::{DType, Device};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Weight dtype: `auto` is bf16 on GPUs and the checkpoint's own dtype on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DTypeSpec {
    /// bf16 on GPUs, the checkpoint's `torch_dtype` on the CPU.
    #[default]
    Auto,
    /// 32-bit floats.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl std::str::FromStr for DTypeSpec {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "f32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "f16" | "float16" | "half" => Ok(Self::F16),
            _ => Err(EngineError::invalid(
                "dtype",
                format!("`{s}`; expected auto, f32, bf16 or f16"),
            )),
        }
    }
}

impl DTypeSpec {
    /// The dtype to load in, given the checkpoint's `torch_dtype` and the device.
    pub fn resolve(self, checkpoint: Option<&str>, device: &candle_core::Device) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
            Self::F16 => DType::F16,
            Self::Auto if !device.is_cpu() => DType::BF16,
            Self::Auto => match checkpoint {
                Some("bfloat16") => DType::BF16,
                Some("float16") => DType::F16,
                _ => DType::F32,
            },
        }
    }
}

/// How to load a model: device, dtype, hub access, chat format, scheduler, CPU kernels.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Where the model runs.
    pub device: DeviceSpec,
    /// The weights' dtype (ignored for GGUF files, which stay quantized).
    pub dtype: DTypeSpec,
    /// Hugging Face Hub access: revision, cache, offline mode.
    pub hub: HubOptions,
    /// Chat format: `model` (the checkpoint's own template), a built-in meta-template
    /// (`chatml`, `internlm2`), or a `.jinja` / meta-template `.toml` file. Default: the model
    /// card's choice, else `model`.
    pub template: Option<String>,
    /// Batching and KV cache settings of the engine's scheduler.
    pub scheduler: SchedulerOptions,
    /// Called as the weights load; the library draws nothing itself.
    pub progress: Option<LoadProgress>,
    /// The CPU kernels' instruction-set level, the model's own. Default: `HEARTH_CPU`
    /// (`portable`, `avx2`, `avx512`), else the best this CPU runs. A level the CPU lacks is
    /// an error, never an illegal instruction.
    pub cpu: Option<crate::kernels::CpuLevel>,
    /// How the model's layers pick among the CPU kernels (many-row kernels, widening types
    /// without kernels for prompts); the model's own, not process-wide.
    pub kernels: crate::kernels::KernelOptions,
    /// How the KV cache stores keys and values (default: f16 on the CPU, the activations'
    /// dtype on a GPU).
    pub cache_types: crate::cache::cache_type::CacheTypes,
    /// Most positions a sequence may hold: at most the model's context (YaRN's, where the
    /// checkpoint or `yarn` asks for it). Default: all of it.
    pub ctx_size: Option<usize>,
    /// YaRN RoPE scaling asked for at load, over what the checkpoint declares.
    pub yarn: Option<YarnOptions>,
    /// A small model of the same tokenizer that drafts tokens for this one to verify
    /// ([`crate::speculative::draft_model`]), loaded like it: a checkpoint directory, a
    /// `.gguf` file, a hub repo id or a model card name.
    pub draft_model: Option<String>,
    /// llama.cpp's vision projector (`mmproj`) GGUF for a GGUF model. Default: the one
    /// `*mmproj*.gguf` beside a Qwen3.5 model, if there is exactly one.
    pub mmproj: Option<std::path::PathBuf>,
    /// The most pixels an image may have as decoded, before it is resized to the tower's
    /// bounds (an image over it is refused; the decoder never allocates more). Default
    /// [`DEFAULT_MAX_IMAGE_PIXELS`].
    pub max_image_pixels: Option<usize>,
}

/// The most pixels a decoded image may have unless asked otherwise: an 8K × 4K screenshot.
pub const DEFAULT_MAX_IMAGE_PIXELS: usize = 8192 * 4096;

/// YaRN asked for at load (llama.cpp's `--rope-scaling yarn --rope-scale F --yarn-orig-ctx N`):
/// unset fields take the checkpoint's YaRN, else the factor `ctx_size / original` and the
/// original context the checkpoint's own.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct YarnOptions {
    /// How many times the original context the positions reach.
    pub factor: Option<f64>,
    /// The context the model was trained on.
    pub original_max_positions: Option<usize>,
}

/// Applies `yarn` and `ctx_size` to `cfg`: the context a sequence may fill and the RoPE
/// frequencies that reach it.
fn fit_context(cfg: &mut QwenConfig, opts: &LoadOptions) -> Result<()> {
    if let Some(asked) = opts.yarn {
        let original = asked
            .original_max_positions
            .or(cfg.yarn.map(|y| y.original_max_positions))
            .unwrap_or(cfg.max_position_embeddings);
        if original == 0 {
            return Err(EngineError::invalid(
                "yarn",
                "an original context of 0 positions",
            ));
        }
        let factor = asked
            .factor
            .or(opts.ctx_size.map(|n| n as f64 / original as f64))
            .or(cfg.yarn.map(|y| y.factor))
            .ok_or_else(|| {
                EngineError::invalid(
                    "yarn",
                    "no factor: give one, or the context size it should reach",
                )
            })?;
        if !factor.is_finite() || factor < 1.0 {
            return Err(EngineError::invalid(
                "yarn",
                format!("factor {factor}: expected a number from 1 up"),
            ));
        }
        cfg.set_yarn(crate::load::config::Yarn::new(factor, original));
    }
    if let Some(n) = opts.ctx_size {
        let most = cfg.max_position_embeddings;
        if n == 0 || n > most {
            let why = match cfg.yarn {
                Some(y) => format!(
                    "{n} positions; this model reaches {most} with YaRN (factor {} over {})",
                    y.factor, y.original_max_positions
                ),
                None => format!(
                    "{n} positions; this model was trained on {most}: a longer context needs YaRN RoPE scaling"
                ),
            };
            return Err(EngineError::invalid("ctx_size", why));
        }
        cfg.max_position_embeddings = n;
    }
    Ok(())
}

/// `(layers loaded, layers)` as a model's weights load, for a caller's progress display.
#[derive(Clone)]
pub struct LoadProgress(pub Arc<dyn Fn(usize, usize) + Send + Sync>);

impl std::fmt::Debug for LoadProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoadProgress")
    }
}

/// The model's CPU kernel level, chosen before any weight is laid out for it (levels with tile
/// kernels interleave block types into tiles at load): the one asked for, else `HEARTH_CPU`,
/// else the best this CPU runs. Refused where this CPU cannot run it.
fn choose_cpu_level(asked: Option<crate::kernels::CpuLevel>) -> Result<crate::kernels::CpuLevel> {
    use crate::kernels::cpu;
    match asked {
        Some(level) => {
            cpu::usable(level).map_err(|e| EngineError::invalid("CPU level", e.to_string()))
        }
        None => Ok(cpu::from_env()
            .map_err(|e| EngineError::invalid("HEARTH_CPU", e.to_string()))?
            .unwrap_or_else(cpu::detected)),
    }
}

/// What a loaded model is, for users and benchmark tables.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    /// The directory, GGUF file or `repo@revision` the model came from.
    pub origin: String,
    /// The model family's name.
    pub family: String,
    /// Number of parameters.
    pub parameters: usize,
    /// The weights' dtype (`bf16`, `f32`, …), or `gguf`.
    pub dtype: String,
    /// The device's name.
    pub device: String,
    /// The context length (`max_position_embeddings`).
    pub max_positions: usize,
    /// Token ids that end generation.
    pub stop_token_ids: Vec<u32>,
    /// Stop strings every chat request gets unless it sets its own.
    pub stop_strings: Vec<String>,
    /// Sampling defaults: the model card's, else generation_config.json's, else greedy.
    pub sampling: SamplingParams,
    /// `model`, a meta-template name, a file, or none.
    pub chat_template: Option<String>,
    /// Whether the model writes `<think>` reasoning.
    pub thinks: bool,
    /// How the model writes tool calls (its chat template shows it).
    pub tool_format: crate::chat::ToolFormat,
    /// Seconds the load took.
    pub load_s: f64,
    /// How the model takes images, where it does.
    #[serde(skip)]
    pub images: Option<ImageSupport>,
    /// What the model's numbers depend on: its weight files (path, size, modification time),
    /// dtype, device and CPU kernels. A KV cache saved by one process is reused by another
    /// only when their fingerprints agree.
    pub fingerprint: String,
}

/// How a model with vision takes images: the processor that prepares them, and how a prompt
/// holds one.
#[derive(Debug, Clone)]
pub struct ImageSupport {
    /// Prepares an image for the tower.
    pub processor: crate::vision::ImageProcessor,
    /// The token each of an image's tokens is in the prompt.
    pub image_token: u32,
    /// The text that stands for one image in a rendered prompt (`<|vision_start|><|image_pad|>
    /// <|vision_end|>`): its image token is repeated as many times as the image has tokens.
    pub marker: String,
    /// Side of the window of patches merged into one token.
    pub merge: usize,
    /// The most pixels an image may have as decoded ([`LoadOptions::max_image_pixels`]).
    pub max_pixels: usize,
}

impl ImageSupport {
    /// Where the vocabulary names the image token and the tokens around it.
    fn new(v: &Vision, tokenizer: &Tokenizer, max_pixels: usize) -> Option<Self> {
        let pad = tokenizer.inner().id_to_token(v.image_token)?;
        let (start, end) = (
            pad.replace("image_pad", "vision_start"),
            pad.replace("image_pad", "vision_end"),
        );
        let marker = match (tokenizer.token_id(&start), tokenizer.token_id(&end)) {
            (Some(_), Some(_)) => format!("{start}{pad}{end}"),
            _ => pad,
        };
        Some(Self {
            processor: v.processor.clone(),
            image_token: v.image_token,
            marker,
            merge: v.tower().config().spatial_merge_size,
            max_pixels,
        })
    }
}

/// A loaded model and everything the engine serves it with.
pub struct LoadedModel {
    /// The model.
    pub model: Qwen,
    /// Its configuration.
    pub config: QwenConfig,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// What it is, for users and benchmark tables.
    pub info: ModelInfo,
    /// Its chat format; `None` when it has no template.
    pub chat: Option<ChatFormat>,
    /// The device it was loaded on.
    pub device: Device,
    /// Bytes of the weights as stored (for benchmark tables).
    pub size_bytes: usize,
    /// The weights' type as llama-bench names it: f32, bf16, … or the GGUF file type.
    pub file_type: String,
    /// How long the load took.
    pub load_time: Duration,
}

/// Loads `spec` — a checkpoint directory, a `.gguf` file, a hub repo id, or a model card name
/// such as `qwen2.5-0.5b-instruct`.
pub fn load_model(spec: &str, opts: &LoadOptions) -> Result<LoadedModel> {
    let start = Instant::now();
    let kernels = KernelContext::new(choose_cpu_level(opts.cpu)?, opts.kernels);
    let (card, mut checkpoint) = resolve_model(spec, opts)?;
    let device = opts.device.open()?;
    let progress = |done: usize, total: usize| {
        if let Some(p) = &opts.progress {
            (p.0)(done, total);
        }
    };
    let (model, cfg, tokenizer, dtype_label, generation, mut stop, size_bytes, file_type) =
        match &mut checkpoint {
            Checkpoint::Dense(files) => {
                let mut cfg = QwenConfig::from_file(&files.config)?;
                fit_context(&mut cfg, opts)?;
                let tokenizer = Tokenizer::from_file(&files.tokenizer)?;
                let dtype = opts.dtype.resolve(cfg.torch_dtype.as_deref(), &device);
                let weights = Weights::open(&files.weights, dtype, &device)?.with_kernels(kernels);
                let mut model = Qwen::load_with_progress(&cfg, &weights, &progress)?;
                model.set_cache_types(opts.cache_types)?;
                if cfg.weights_prefix != "model" {
                    let dir = files.config.parent().unwrap_or(Path::new("."));
                    match Vision::load(&read_json(&files.config)?, dir, &weights, "model.visual")? {
                        Some(v) => {
                            tracing::info!(
                                "{}: vision tower of {} blocks loaded (images in)",
                                files.config.display(),
                                v.tower().config().depth
                            );
                            model.set_vision(v)?;
                        }
                        None => tracing::info!(
                            "{}: the language model ({}.*) is loaded; no vision tower",
                            files.config.display(),
                            cfg.weights_prefix
                        ),
                    }
                }
                let generation = match &files.generation_config {
                    Some(p) => read_json(p)?,
                    None => Value::Null,
                };
                let tokenizer_config = match &files.tokenizer_config {
                    Some(p) => read_json(p)?,
                    None => Value::Null,
                };
                let stop = stop_token_ids(&cfg, &generation, &tokenizer_config, &tokenizer);
                let label = format!("{dtype:?}").to_lowercase();
                let size = cfg.num_parameters() * dtype.size_in_bytes();
                (
                    model,
                    cfg,
                    tokenizer,
                    label.clone(),
                    generation,
                    stop,
                    size,
                    label,
                )
            }
            Checkpoint::Gguf(file) => {
                if opts.dtype != DTypeSpec::Auto {
                    tracing::warn!("dtype is ignored for GGUF files: weights stay quantized");
                }
                let mut cfg = file.config()?;
                fit_context(&mut cfg, opts)?;
                let phase = Instant::now();
                let tokenizer = file.tokenizer()?;
                let tokenizer_secs = phase.elapsed().as_secs_f64();
                if let Some(file) = Arc::get_mut(file) {
                    file.forget_vocabulary();
                    crate::device::memory::return_freed_memory();
                }
                let phase = Instant::now();
                let weights = file.weights(&device).with_kernels(kernels);
                let mut model = Qwen::load_with_progress(&cfg, &weights, &progress)?;
                // Where a GGUF's start-up goes, for comparing it with llama.cpp's mmap.
                tracing::debug!(
                    tokenizer_s = tokenizer_secs,
                    weights_s = phase.elapsed().as_secs_f64(),
                    "GGUF load phases"
                );
                model.set_cache_types(opts.cache_types)?;
                // An mmproj beside the model is only tried for a model that takes images;
                // one that does not fit it is left out with a warning. One asked for must fit.
                let auto = opts.mmproj.is_none();
                let found = match auto && cfg.mrope.is_none() {
                    true => None,
                    false => mmproj_for(file.path(), opts.mmproj.as_deref()),
                };
                if let Some(path) = found {
                    match attach_mmproj(&mut model, &path, &tokenizer, &device) {
                        Ok(depth) => tracing::info!(
                            "{}: vision tower of {depth} blocks loaded (images in)",
                            path.display()
                        ),
                        Err(e) if auto => tracing::warn!("{}: not used: {e}", path.display()),
                        Err(e) => return Err(e),
                    }
                }
                let mut stop = file.stop_token_ids();
                for t in CHATML_STOPS {
                    if let Some(id) = tokenizer.token_id(t).filter(|id| !stop.contains(id)) {
                        stop.push(id);
                    }
                }
                let (size, file_type) = (file.weight_bytes(), file.file_type());
                (
                    model,
                    cfg,
                    tokenizer,
                    "gguf".into(),
                    Value::Null,
                    stop,
                    size,
                    file_type,
                )
            }
        };
    let template_choice = template_choice(opts, card.as_ref());
    let chat = chat_format(&template_choice, &checkpoint)?;
    let mut stop_words: Vec<String> = card.as_ref().map(|c| c.stop.clone()).unwrap_or_default();
    if let Some(ChatFormat::Meta(m)) = &chat {
        stop_words.extend(m.stop.iter().cloned());
    }
    let stop_strings = split_stop_words(&stop_words, &tokenizer, &mut stop);
    let mut sampling = sampling_defaults(&generation);
    if let Some(c) = &card {
        c.apply_sampling(&mut sampling);
    }
    let load_time = start.elapsed();
    let (k, v) = model.cache_types();
    // Quantized keys are stored rotated (`model::attention::rotates_keys`): a session saved
    // before that, or without it, does not fit.
    let rotated = match crate::model::attention::rotates_keys(Some((k, v)), cfg.head_dim) {
        true => " (keys rotated)",
        false => "",
    };
    let cache_label = format!("kv cache {}/{}{rotated}", k.name(), v.name());
    let fingerprint = fingerprint(&checkpoint, &dtype_label, &cache_label, &device, kernels);
    let max_image_pixels = opts.max_image_pixels.unwrap_or(DEFAULT_MAX_IMAGE_PIXELS);
    let info = ModelInfo {
        origin: checkpoint.origin(),
        family: cfg.family.name().into(),
        parameters: cfg.num_parameters(),
        dtype: dtype_label,
        device: device_name(&device),
        max_positions: cfg.max_position_embeddings,
        stop_token_ids: stop,
        stop_strings,
        sampling,
        chat_template: chat.as_ref().map(|_| template_choice.clone()),
        thinks: chat.as_ref().is_some_and(|c| c.thinks()),
        tool_format: chat.as_ref().map(|c| c.tool_format()).unwrap_or_default(),
        load_s: load_time.as_secs_f64(),
        fingerprint,
        images: model
            .vision()
            .and_then(|v| ImageSupport::new(v, &tokenizer, max_image_pixels)),
    };
    tracing::info!(
        "loaded {} ({}, {:.0} M parameters, {}, {}) in {:.2}s",
        info.origin,
        info.family,
        info.parameters as f64 / 1e6,
        info.dtype,
        info.device,
        info.load_s
    );
    if device.is_cpu() && matches!(checkpoint, Checkpoint::Gguf(_)) {
        tracing::info!(
            "CPU kernels: {}; attention products {}",
            crate::kernels::kernel_path(kernels.level),
            kernels.options.attention.at(kernels.level).name()
        );
    }
    Ok(LoadedModel {
        model,
        config: cfg,
        tokenizer,
        info,
        chat,
        device,
        size_bytes,
        file_type,
        load_time,
    })
}

/// Gives `model` the vision tower of the mmproj file `path`; returns its depth.
fn attach_mmproj(
    model: &mut Qwen,
    path: &Path,
    tokenizer: &Tokenizer,
    device: &Device,
) -> Result<usize> {
    let bad = |why: String| EngineError::invalid("mmproj", format!("{}: {why}", path.display()));
    let image_token = tokenizer.token_id("<|image_pad|>").ok_or_else(|| {
        bad("the model's vocabulary has no <|image_pad|> token for images".into())
    })?;
    let vision = Vision::from_mmproj(path, image_token, device, model.kernels())
        .map_err(|e| bad(e.to_string()))?;
    let depth = vision.tower().config().depth;
    model.set_vision(vision).map_err(|e| bad(e.to_string()))?;
    Ok(depth)
}

/// The mmproj file of the GGUF model `model`: `explicit`, else the one `*mmproj*.gguf` beside
/// it (none where there are several: which goes with the model is not known).
fn mmproj_for(model: &Path, explicit: Option<&Path>) -> Option<std::path::PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let dir = model.parent()?;
    let found: Vec<_> = std::fs::read_dir(if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    })
    .ok()?
    .filter_map(|e| e.ok().map(|e| e.path()))
    .filter(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("mmproj") && n.ends_with(".gguf"))
    })
    .collect();
    match found.as_slice() {
        [one] => Some(one.clone()),
        [] => None,
        _ => {
            tracing::info!(
                "{}: several mmproj files; pass the one that goes with the model with --mmproj",
                dir.display()
            );
            None
        }
    }
}

/// See [`ModelInfo::fingerprint`].
fn fingerprint(
    checkpoint: &Checkpoint,
    dtype: &str,
    cache: &str,
    device: &Device,
    kernels: KernelContext,
) -> String {
    let files = match checkpoint {
        Checkpoint::Dense(f) => f.weights.clone(),
        Checkpoint::Gguf(g) => vec![g.path().to_path_buf()],
    };
    let mut parts: Vec<String> = files
        .iter()
        .map(|p| {
            let path = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            let meta = std::fs::metadata(p).ok();
            let modified = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!(
                "{} ({} bytes, modified {modified})",
                path.display(),
                meta.map_or(0, |m| m.len())
            )
        })
        .collect();
    parts.push(dtype.to_string());
    parts.push(cache.to_string());
    parts.push(device_name(device));
    if device.is_cpu() {
        parts.push(format!(
            "kernels {}, attention {}",
            crate::kernels::kernel_path(kernels.level),
            kernels.options.attention.at(kernels.level).name()
        ));
    }
    parts.join("; ")
}

/// A model's own chat template, its special tokens, and where it came from.
type OwnTemplate = (String, serde_json::Map<String, Value>, String);

/// What a model spec resolved to.
pub enum Checkpoint {
    /// A safetensors checkpoint directory.
    Dense(ModelFiles),
    /// One GGUF file: weights, tokenizer and template.
    Gguf(Arc<GgufFile>),
}

impl Checkpoint {
    /// Where the checkpoint came from: its directory, `repo@revision`, or GGUF path.
    pub fn origin(&self) -> String {
        match self {
            Self::Dense(f) => f.origin.clone(),
            Self::Gguf(g) => g.path().display().to_string(),
        }
    }

    /// The model's own chat template, its special tokens, and where it came from.
    fn template(&self) -> Result<Option<OwnTemplate>> {
        match self {
            Self::Gguf(g) => Ok(g.chat_template().map(|t| {
                (
                    t,
                    g.special_tokens(),
                    format!("{} (tokenizer.chat_template)", g.path().display()),
                )
            })),
            Self::Dense(files) => {
                let cfg = match &files.tokenizer_config {
                    Some(path) => Some(read_json(path)?),
                    None => None,
                };
                if let Some(file) = &files.chat_template {
                    let text =
                        std::fs::read_to_string(file).map_err(|e| EngineError::io(file, e))?;
                    let special = cfg.as_ref().map(special_tokens).unwrap_or_default();
                    return Ok(Some((text, special, file.display().to_string())));
                }
                let (Some(path), Some(cfg)) = (&files.tokenizer_config, cfg) else {
                    return Ok(None);
                };
                let source = match cfg.get("chat_template") {
                    Some(Value::String(s)) => Some(s.clone()),
                    // Several named templates: the default one.
                    Some(Value::Array(named)) => named
                        .iter()
                        .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                        .and_then(|t| t.get("template")?.as_str().map(str::to_owned)),
                    _ => None,
                };
                let Some(source) = source else {
                    return Ok(None);
                };
                Ok(Some((
                    source,
                    special_tokens(&cfg),
                    path.display().to_string(),
                )))
            }
        }
    }
}

/// The special tokens a template may name (`bos_token`, …), from tokenizer_config.json.
fn special_tokens(cfg: &Value) -> serde_json::Map<String, Value> {
    let mut special = serde_json::Map::new();
    for key in ["bos_token", "eos_token", "pad_token", "unk_token"] {
        let token = match cfg.get(key) {
            Some(Value::String(s)) => Value::String(s.clone()),
            Some(Value::Object(o)) => o.get("content").cloned().unwrap_or(Value::Null),
            _ => Value::Null,
        };
        special.insert(key.into(), token);
    }
    special
}

/// A model card (when `spec` names one) and the checkpoint it points to.
pub fn resolve_model(spec: &str, opts: &LoadOptions) -> Result<(Option<ModelCard>, Checkpoint)> {
    let path = Path::new(spec);
    if path.is_file()
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return Ok((None, Checkpoint::Gguf(Arc::new(GgufFile::open(path)?))));
    }
    let card = if path.exists() {
        None
    } else {
        ModelCard::find(spec)?
    };
    let mut hub = opts.hub.clone();
    let checkpoint = match &card {
        Some(c) => {
            hub.revision = hub.revision.or_else(|| Some(c.revision.clone()));
            if c.format == "gguf" {
                let file = c.files.first().ok_or_else(|| {
                    EngineError::invalid(
                        "model",
                        format!("model card `{}` lists no GGUF file", c.name),
                    )
                })?;
                let path = match source::fetched_model(file) {
                    Some(local) => local,
                    None => source::hub_file(&c.hub_id, file, &hub)?,
                };
                Checkpoint::Gguf(Arc::new(GgufFile::open(&path)?))
            } else {
                Checkpoint::Dense(source::resolve(&c.hub_id, &hub)?)
            }
        }
        None => Checkpoint::Dense(source::resolve(spec, &hub)?),
    };
    Ok((card, checkpoint))
}

fn template_choice(opts: &LoadOptions, card: Option<&ModelCard>) -> String {
    opts.template
        .clone()
        .or_else(|| card.map(|c| c.template.clone()))
        .unwrap_or_else(|| "model".into())
}

/// The chat format of a model without loading its weights (for `hearth template`).
pub fn load_chat_format(spec: &str, opts: &LoadOptions) -> Result<ChatFormat> {
    let (card, checkpoint) = resolve_model(spec, opts)?;
    let choice = template_choice(opts, card.as_ref());
    chat_format(&choice, &checkpoint)?.ok_or_else(|| {
        EngineError::invalid(
            "template",
            format!(
                "{} has no chat_template; pick a meta-template (--template chatml) or a template file",
                checkpoint.origin()
            ),
        )
    })
}

/// The chat format named by `choice`.
fn chat_format(choice: &str, checkpoint: &Checkpoint) -> Result<Option<ChatFormat>> {
    if choice == "model" {
        return match checkpoint.template()? {
            Some((source, special, origin)) => Ok(Some(ChatFormat::Jinja(JinjaTemplate::new(
                &source, special, &origin,
            )?))),
            None => Ok(None),
        };
    }
    if let Some(text) = crate::load::card::meta_template_source(choice) {
        return Ok(Some(ChatFormat::Meta(MetaTemplate::from_toml(
            text,
            Path::new(choice),
        )?)));
    }
    let path = Path::new(choice);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        return Ok(Some(if choice.ends_with(".toml") {
            ChatFormat::Meta(MetaTemplate::from_toml(&text, path)?)
        } else {
            ChatFormat::Jinja(JinjaTemplate::new(&text, serde_json::Map::new(), choice)?)
        }));
    }
    Err(EngineError::invalid(
        "template",
        format!("`{choice}` is neither `model`, a built-in meta-template (chatml, internlm2) nor a file"),
    ))
}

/// Stop words that are one special token become stop ids; the rest stay stop strings.
fn split_stop_words(words: &[String], tok: &Tokenizer, ids: &mut Vec<u32>) -> Vec<String> {
    let mut strings = vec![];
    for w in words {
        match tok.token_id(w) {
            Some(id) => {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            None => {
                if !strings.contains(w) {
                    strings.push(w.clone());
                }
            }
        }
    }
    strings
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EngineError::Config {
        path: path.to_path_buf(),
        field: "(file)".into(),
        message: format!("invalid JSON: {e}"),
    })
}

/// ChatML's turn markers: a model that writes `<|im_start|>` has begun a new turn (as Ollama's
/// Qwen templates also stop on it).
const CHATML_STOPS: [&str; 3] = ["<|im_end|>", "<|endoftext|>", "<|im_start|>"];

/// Stop ids: generation_config's eos list, config's eos, tokenizer_config's eos and pad
/// tokens, and ChatML's markers when the vocabulary has them.
fn stop_token_ids(
    cfg: &QwenConfig,
    generation: &Value,
    tok_cfg: &Value,
    tok: &Tokenizer,
) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    let mut add = |id: u32| {
        if !ids.contains(&id) {
            ids.push(id);
        }
    };
    match generation.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().into_iter().for_each(|n| add(n as u32)),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .for_each(|n| add(n as u32)),
        _ => {}
    }
    cfg.eos_token_ids.iter().for_each(|&i| add(i));
    for key in ["eos_token", "pad_token"] {
        let token = match tok_cfg.get(key) {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(Value::Object(o)) => o.get("content").and_then(Value::as_str),
            _ => None,
        };
        if let Some(id) = token.and_then(|t| tok.token_id(t)) {
            add(id);
        }
    }
    for t in CHATML_STOPS {
        if let Some(id) = tok.token_id(t) {
            add(id);
        }
    }
    ids
}

fn sampling_defaults(generation: &Value) -> SamplingParams {
    let mut p = SamplingParams::default();
    let f = |k: &str| generation.get(k).and_then(Value::as_f64);
    if generation.get("do_sample").and_then(Value::as_bool) == Some(true) {
        p.temperature = f("temperature").unwrap_or(1.0) as f32;
        p.top_p = f("top_p").map(|v| v as f32).filter(|&v| v < 1.0);
        p.top_k = generation
            .get("top_k")
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .filter(|&k| k > 0);
        p.min_p = f("min_p").map(|v| v as f32).filter(|&v| v > 0.0);
    }
    if let Some(r) = f("repetition_penalty") {
        p.repetition_penalty = r as f32;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3() -> Result<QwenConfig> {
        let v = serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 32, "vocab_size": 1024, "max_position_embeddings": 40960,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-6
        });
        QwenConfig::from_value(&v, std::path::Path::new("config.json"))
    }

    fn fit(ctx_size: Option<usize>, yarn: Option<YarnOptions>) -> Result<QwenConfig> {
        let mut cfg = qwen3()?;
        let opts = LoadOptions {
            ctx_size,
            yarn,
            ..Default::default()
        };
        fit_context(&mut cfg, &opts).map(|()| cfg)
    }

    #[test]
    fn the_context_is_cut_or_extended_with_yarn_only() -> Result<()> {
        assert_eq!(fit(None, None)?.max_position_embeddings, 40960);
        assert_eq!(fit(Some(8192), None)?.max_position_embeddings, 8192);
        let err = fit(Some(131_072), None).unwrap_err().to_string();
        assert!(
            err.contains("ctx_size") && err.contains("131072") && err.contains("YaRN"),
            "{err}"
        );
        // Qwen's recipe: factor 4 over 32 768 positions.
        let yarn = YarnOptions {
            factor: Some(4.0),
            original_max_positions: Some(32768),
        };
        let c = fit(Some(131_072), Some(yarn))?;
        assert_eq!(c.max_position_embeddings, 131_072);
        assert_eq!(c.yarn, Some(crate::load::config::Yarn::new(4.0, 32768)));
        // The factor from the context asked for, over the declared context.
        let c = fit(Some(81920), Some(YarnOptions::default()))?;
        assert_eq!(c.yarn.map(|y| y.factor), Some(2.0));
        let err = fit(Some(200_000), Some(yarn)).unwrap_err().to_string();
        assert!(err.contains("ctx_size") && err.contains("131072"), "{err}");
        let err = fit(None, Some(YarnOptions::default()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("yarn") && err.contains("no factor"), "{err}");
        let err = fit(
            None,
            Some(YarnOptions {
                factor: Some(0.5),
                ..yarn
            }),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("factor 0.5"), "{err}");
        assert!(fit(Some(0), None).is_err());
        Ok(())
    }
}
