//! The engine: loads a model, gives it to a worker thread that owns it, and serves generation
//! requests sent through a channel as async streams of events.

use crate::config::QwenConfig;
use crate::device::{device_name, DeviceSpec};
use crate::error::{EngineError, Result};
use crate::generation::{Event, GenerateRequest, Job, LanguageModel, Worker};
use crate::qwen::Qwen;
use crate::sampling::SamplingParams;
use crate::source::{self, HubOptions};
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;
use candle_core::DType;
use serde_json::Value;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Weight dtype: `auto` is bf16 on GPUs and the checkpoint's own dtype on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DTypeSpec {
    #[default]
    Auto,
    F32,
    Bf16,
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
                "--dtype",
                format!("`{s}`; expected auto, f32, bf16 or f16"),
            )),
        }
    }
}

impl DTypeSpec {
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

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub device: DeviceSpec,
    pub dtype: DTypeSpec,
    pub hub: HubOptions,
}

/// What a loaded model is, for users and benchmark tables.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    pub origin: String,
    pub family: String,
    pub parameters: usize,
    pub dtype: String,
    pub device: String,
    pub max_positions: usize,
    pub stop_token_ids: Vec<u32>,
    /// Sampling defaults from generation_config.json (greedy when it has none).
    pub sampling: SamplingParams,
    pub load_s: f64,
}

enum Command {
    Generate(Job),
    DropSession(String),
}

pub struct Engine {
    commands: std::sync::mpsc::Sender<Command>,
    tokenizer: Tokenizer,
    info: ModelInfo,
}

impl Engine {
    /// Loads `spec` (a checkpoint directory or a hub repo id) and starts the worker.
    pub fn load(spec: &str, opts: &LoadOptions) -> Result<Self> {
        let start = Instant::now();
        let files = source::resolve(spec, &opts.hub)?;
        let cfg = QwenConfig::from_file(&files.config)?;
        let tokenizer = Tokenizer::from_file(&files.tokenizer)?;
        let device = opts.device.open()?;
        let dtype = opts.dtype.resolve(cfg.torch_dtype.as_deref(), &device);
        let weights = Weights::open(&files.weights, dtype, &device)?;
        let model = Qwen::load(&cfg, &weights)?;
        drop(weights);

        let generation = match &files.generation_config {
            Some(p) => read_json(p)?,
            None => Value::Null,
        };
        let tokenizer_config = match &files.tokenizer_config {
            Some(p) => read_json(p)?,
            None => Value::Null,
        };
        let stop = stop_token_ids(&cfg, &generation, &tokenizer_config, &tokenizer);
        let load_time = start.elapsed();
        let info = ModelInfo {
            origin: files.origin.clone(),
            family: cfg.family.name().into(),
            parameters: cfg.num_parameters(),
            dtype: format!("{dtype:?}").to_lowercase(),
            device: device_name(&device),
            max_positions: cfg.max_position_embeddings,
            stop_token_ids: stop.clone(),
            sampling: sampling_defaults(&generation),
            load_s: load_time.as_secs_f64(),
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
        Ok(Self::serve(Box::new(model), tokenizer, info, load_time))
    }

    /// Starts a worker thread that owns `model`.
    pub fn serve(
        model: Box<dyn LanguageModel>,
        tokenizer: Tokenizer,
        info: ModelInfo,
        load_time: Duration,
    ) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Command>();
        let mut worker = Worker::new(
            model,
            tokenizer.clone(),
            info.stop_token_ids.clone(),
            load_time,
        );
        std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || {
                while let Ok(cmd) = rx.recv() {
                    match cmd {
                        Command::Generate(job) => worker.run(job),
                        Command::DropSession(id) => {
                            worker.drop_session(&id);
                        }
                    }
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| tracing::error!("cannot start the engine thread: {e}"));
        Self {
            commands: tx,
            tokenizer,
            info,
        }
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Queues a request. Invalid requests fail here, before any work is done.
    pub fn generate(&self, request: GenerateRequest) -> Result<EventStream> {
        if request.prompt.is_empty() {
            return Err(EngineError::invalid("prompt", "empty prompt"));
        }
        if request.max_tokens == 0 {
            return Err(EngineError::invalid(
                "--max-tokens",
                "0 (must be at least 1)",
            ));
        }
        if request.prompt.len() >= self.info.max_positions {
            return Err(EngineError::PromptTooLong {
                len: request.prompt.len(),
                max: self.info.max_positions,
            });
        }
        request.sampling.validate()?;
        let (events, rx) = mpsc::unbounded_channel();
        self.commands
            .send(Command::Generate(Job { request, events }))
            .map_err(|_| EngineError::WorkerGone)?;
        Ok(EventStream { rx })
    }

    /// Tokenizes `prompt` and generates a plain completion of it.
    pub fn complete(
        &self,
        prompt: &str,
        max_tokens: usize,
        sampling: SamplingParams,
    ) -> Result<EventStream> {
        if prompt.is_empty() {
            return Err(EngineError::invalid("prompt", "empty prompt"));
        }
        let ids = self.tokenizer.encode(prompt)?;
        self.generate(GenerateRequest {
            sampling,
            ..GenerateRequest::new(ids, max_tokens)
        })
    }

    /// Forgets a session's KV cache (a session never seen is fine).
    pub fn drop_session(&self, id: &str) -> Result<()> {
        self.commands
            .send(Command::DropSession(id.into()))
            .map_err(|_| EngineError::WorkerGone)
    }
}

/// Events of one request. Dropping it cancels the generation.
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<Event>,
}

impl EventStream {
    pub async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    /// For callers outside an async runtime.
    pub fn blocking_next(&mut self) -> Option<Event> {
        self.rx.blocking_recv()
    }
}

impl tokio_stream::Stream for EventStream {
    type Item = Event;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EngineError::Config {
        path: path.to_path_buf(),
        field: "(file)".into(),
        message: format!("invalid JSON: {e}"),
    })
}

/// Stop ids: generation_config's eos list, config's eos, tokenizer_config's eos and pad
/// tokens, and Qwen's `<|im_end|>` / `<|endoftext|>` when the vocabulary has them.
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
    for t in ["<|im_end|>", "<|endoftext|>"] {
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
