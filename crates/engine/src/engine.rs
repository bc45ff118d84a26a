//! The engine: a handle to the worker thread that owns the model. Requests go to the worker's
//! scheduler ([`crate::scheduler`]) through a channel; each comes back as an async stream of
//! events.

use crate::cache::kv::KvCache;
use crate::cache::snapshot::KvSnapshot;
use crate::chat::{ChatFormat, ChatInput, ThinkingSplitter};
use crate::constraint::Grammars;
use crate::error::{EngineError, Result};
use crate::generation::stream::{ChatRequest, ChatStream, EventStream};
use crate::generation::{GenerateRequest, LanguageModel};
use crate::sampling::SamplingParams;
use crate::scheduler::{Command, Job, Scheduler, SchedulerConfig, SchedulerStats, SessionCache};
use crate::speculative::draft_model::DraftModel;
use crate::speculative::Speculation;
use crate::text::stop::StopStrings;
use crate::text::tokenizer::Tokenizer;
use crate::vision::{ImageInput, Rgb};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

pub use crate::loader::{
    load_chat_format, load_model, resolve_model, Checkpoint, DTypeSpec, LoadOptions, LoadedModel,
    ModelInfo,
};

/// A handle to a model served by its worker thread; once it is dropped, the worker finishes its requests and exits.
pub struct Engine {
    commands: std::sync::mpsc::Sender<Command>,
    /// Requests with images go here first: their images are encoded on a thread of their
    /// own, then the request goes on to the scheduler (CPU models with vision).
    image_jobs: Option<std::sync::mpsc::Sender<Box<Job>>>,
    tokenizer: Tokenizer,
    info: ModelInfo,
    chat: Option<Arc<ChatFormat>>,
    config: SchedulerConfig,
    in_flight: Arc<AtomicUsize>,
    max_waiting: usize,
    /// The grammar compiler, built at the first constrained request (or its error).
    grammars: OnceLock<std::result::Result<Grammars, String>>,
}

const MIB: f64 = (1 << 20) as f64;

/// Logs what the KV cache takes per position and for one sequence of the whole context, and
/// warns where that sequence would not fit the budget (it would then be refused when it
/// grows past it).
fn report_memory(cache: &KvCache, context: usize, budget: usize) {
    let (per_position, full) = (cache.position_bytes(), cache.bytes_for(context));
    let types = cache
        .types()
        .map(|(k, v)| format!(" (keys {}, values {})", k.name(), v.name()))
        .unwrap_or_default();
    tracing::info!(
        "KV cache: {:.1} KiB per position{types}, {:.0} MiB for one sequence of the whole {context}-position context",
        per_position as f64 / 1024.0,
        full as f64 / MIB
    );
    if full > budget {
        tracing::warn!(
            "one sequence of {context} positions needs {:.0} MiB of KV cache, more than the {:.0} MiB budget: alone, a sequence fits about {} positions (ctx_size, the cache types or kv_cache_mb change that)",
            full as f64 / MIB,
            budget as f64 / MIB,
            budget / per_position.max(1)
        );
    }
}

impl Engine {
    /// Loads `spec` — a checkpoint directory, a `.gguf` file, a hub repo id, or a model card
    /// name such as `qwen2.5-0.5b-instruct` — and starts the worker.
    pub fn load(spec: &str, opts: &LoadOptions) -> Result<Self> {
        let loaded = load_model(spec, opts)?;
        let config = opts.scheduler.resolve(&loaded.device)?;
        // A context asked for that one sequence's cache cannot fill is refused up front.
        let full = loaded
            .model
            .new_cache()
            .bytes_for(loaded.info.max_positions);
        if opts.ctx_size.is_some() && full > config.kv_budget_bytes {
            return Err(EngineError::invalid(
                "ctx_size",
                format!(
                    "{} positions need {:.0} MiB of KV cache for one sequence, more than the {:.0} MiB budget: lower ctx_size or the cache types (cache_type_k, cache_type_v), or raise kv_cache_mb",
                    loaded.info.max_positions,
                    full as f64 / MIB,
                    config.kv_budget_bytes as f64 / MIB
                ),
            ));
        }
        let draft = match &opts.draft_model {
            Some(d) => Some(Self::load_draft(d, opts, &loaded)?),
            None if config.speculation == Speculation::Draft => {
                return Err(EngineError::invalid(
                    "speculative",
                    "`draft` needs a draft model (draft_model)",
                ))
            }
            None => None,
        };
        Self::checked_start(
            Box::new(loaded.model),
            draft,
            loaded.tokenizer,
            loaded.info,
            loaded.chat,
            loaded.load_time,
            config,
        )
    }

    /// The draft model `spec` for `main`, on its device, with its tokenizer checked.
    fn load_draft(spec: &str, opts: &LoadOptions, main: &LoadedModel) -> Result<DraftModel> {
        let draft = load_model(
            spec,
            &LoadOptions {
                draft_model: None,
                mmproj: None,
                template: None,
                ..opts.clone()
            },
        )
        .map_err(|e| EngineError::invalid("draft_model", format!("`{spec}`: {e}")))?;
        crate::speculative::draft_model::check_tokenizers(&main.tokenizer, &draft.tokenizer, spec)?;
        tracing::info!(
            "draft model: {} ({} parameters) drafts for {}",
            draft.info.origin,
            draft.info.parameters,
            main.info.origin
        );
        let mut added: Vec<u32> = main
            .tokenizer
            .inner()
            .get_added_tokens_decoder()
            .into_keys()
            .collect();
        added.sort_unstable();
        DraftModel::new(Box::new(draft.model), main.config.vocab_size, &added)
    }

    /// Starts a worker thread that owns `model`, with the CPU's scheduler defaults.
    pub fn serve(
        model: Box<dyn LanguageModel>,
        tokenizer: Tokenizer,
        info: ModelInfo,
        chat: Option<ChatFormat>,
        load_time: Duration,
    ) -> Self {
        Self::start(
            model,
            None,
            tokenizer,
            info,
            chat,
            load_time,
            SchedulerConfig::default(),
        )
    }

    /// Like [`Engine::serve`], with the scheduler's settings given; a budget too small for one
    /// sequence is refused.
    pub fn serve_with(
        model: Box<dyn LanguageModel>,
        tokenizer: Tokenizer,
        info: ModelInfo,
        chat: Option<ChatFormat>,
        load_time: Duration,
        config: SchedulerConfig,
    ) -> Result<Self> {
        Self::checked_start(model, None, tokenizer, info, chat, load_time, config)
    }

    fn checked_start(
        model: Box<dyn LanguageModel>,
        draft: Option<DraftModel>,
        tokenizer: Tokenizer,
        info: ModelInfo,
        chat: Option<ChatFormat>,
        load_time: Duration,
        config: SchedulerConfig,
    ) -> Result<Self> {
        config.check()?;
        let cache = model.new_cache();
        config.check_budget(cache.bytes_for(1))?;
        report_memory(&cache, info.max_positions, config.kv_budget_bytes);
        if config.speculation == Speculation::Mtp {
            crate::speculative::mtp::check(model.as_ref(), &info.origin)?;
        }
        tracing::info!(
            "scheduler: up to {} sequences together, {} prompt tokens per step, {:.0} MiB of KV cache",
            config.max_seqs,
            config.prefill_chunk,
            config.kv_budget_bytes as f64 / (1 << 20) as f64
        );
        Ok(Self::start(
            model, draft, tokenizer, info, chat, load_time, config,
        ))
    }

    fn start(
        model: Box<dyn LanguageModel>,
        draft: Option<DraftModel>,
        tokenizer: Tokenizer,
        info: ModelInfo,
        chat: Option<ChatFormat>,
        load_time: Duration,
        config: SchedulerConfig,
    ) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<Command>();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let image_jobs = model
            .image_encoder()
            .filter(|_| model.device().is_cpu())
            .and_then(|e| encode_ahead(e, tx.clone(), in_flight.clone()));
        let scheduler = Scheduler::new(
            model,
            draft,
            info.origin.clone(),
            tokenizer.clone(),
            info.stop_token_ids.clone(),
            load_time,
            config.clone(),
            in_flight.clone(),
        );
        std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || scheduler.run(rx))
            .map(|_| ())
            .unwrap_or_else(|e| tracing::error!("cannot start the engine thread: {e}"));
        Self {
            commands: tx,
            image_jobs,
            tokenizer,
            info,
            chat: chat.map(Arc::new),
            max_waiting: config.max_waiting,
            config,
            in_flight,
            grammars: OnceLock::new(),
        }
    }

    /// The model's grammar compiler: its token trie and llguidance's parser factory, built
    /// once (at the first call, some 100 ms for a 150k vocabulary) and shared by every
    /// constrained request. Callers may use it to check a schema before they send it.
    pub fn grammars(&self) -> Result<&Grammars> {
        self.grammars
            .get_or_init(|| {
                Grammars::new(&self.tokenizer, &self.info.stop_token_ids)
                    .map(|g| g.with_tool_format(self.info.tool_format))
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| EngineError::invalid("constraint", e.clone()))
    }

    /// What the scheduler holds now: sequences waiting and running, KV bytes and evictions.
    pub fn stats(&self) -> Result<SchedulerStats> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.commands
            .send(Command::Stats(tx))
            .map_err(|_| EngineError::WorkerGone)?;
        rx.recv().map_err(|_| EngineError::WorkerGone)
    }

    /// The scheduler's settings.
    pub fn scheduler(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// What was loaded: name, family, context length, chat defaults.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Queues a request. Invalid requests fail here, before any work is done.
    pub fn generate(&self, request: GenerateRequest) -> Result<EventStream> {
        if request.prompt.is_empty() {
            return Err(EngineError::invalid("prompt", "empty prompt"));
        }
        if request.max_tokens == 0 {
            return Err(EngineError::invalid("max_tokens", "0 (must be at least 1)"));
        }
        if request.prompt.len() >= self.info.max_positions {
            return Err(EngineError::PromptTooLong {
                len: request.prompt.len(),
                max: self.info.max_positions,
            });
        }
        request.sampling.validate()?;
        StopStrings::new(request.stop_strings.clone())?;
        if !request.images.is_empty() {
            // Checked here, so that images that do not fit the prompt are refused at once.
            let Some(support) = &self.info.images else {
                return Err(self.no_vision());
            };
            let grids: Vec<[usize; 3]> = request.images.iter().map(|i| i.grid).collect();
            crate::vision::mrope_positions(
                &request.prompt,
                support.image_token,
                &grids,
                support.merge,
            )?;
        }
        // Compiled here, so that a bad grammar is refused before the request queues.
        let guide = match &request.constraint {
            Some(c) => Some(self.grammars()?.guide(c)?),
            None => None,
        };
        let waiting = self.in_flight.fetch_add(1, Ordering::Relaxed);
        if waiting >= self.max_waiting {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::QueueFull { waiting });
        }
        let (events, rx) = mpsc::unbounded_channel();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let prompt_tokens = request.prompt.len();
        let job = Box::new(Job {
            request,
            guide,
            events,
            ended: ended.clone(),
            arrived: Instant::now(),
        });
        let sent = match &self.image_jobs {
            Some(images) if !job.request.images.is_empty() => images.send(job).is_ok(),
            _ => self.commands.send(Command::Generate(job)).is_ok(),
        };
        if !sent {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(EngineError::WorkerGone);
        }
        Ok(EventStream {
            rx,
            ended,
            prompt_tokens,
        })
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

    /// Decodes an image (PNG, JPEG, WebP, GIF) and prepares it for this model's vision tower.
    /// A model without vision, or a bad image, is an error on `images` / `image` that says
    /// why.
    pub fn image(&self, bytes: &[u8]) -> Result<ImageInput> {
        let Some(images) = &self.info.images else {
            return Err(self.no_vision());
        };
        images
            .processor
            .process(&Rgb::decode(bytes, images.max_pixels)?)
    }

    fn no_vision(&self) -> EngineError {
        EngineError::invalid(
            "images",
            format!(
                "{} has no vision tower: it takes text only",
                self.info.origin
            ),
        )
    }

    /// `ids` with each image token (one per image, where the prompt's text held the
    /// [`ImageSupport::marker`](crate::ImageSupport::marker)) repeated as many times as its
    /// image has tokens: the prompt of a [`GenerateRequest`] with `images`.
    pub fn with_image_tokens(&self, ids: Vec<u32>, images: &[ImageInput]) -> Result<Vec<u32>> {
        let Some(support) = &self.info.images else {
            return match images.is_empty() {
                true => Ok(ids),
                false => Err(self.no_vision()),
            };
        };
        let marked = ids.iter().filter(|&&t| t == support.image_token).count();
        if marked != images.len() {
            return Err(EngineError::invalid(
                "images",
                format!(
                    "the messages hold {marked} images, {} were given",
                    images.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(ids.len());
        let mut next = images.iter();
        for t in ids {
            match (t == support.image_token).then(|| next.next()).flatten() {
                Some(image) => out.extend(std::iter::repeat_n(t, image.tokens(support.merge))),
                None => out.push(t),
            }
        }
        Ok(out)
    }

    /// The prompt the model sees for `input`.
    pub fn render(&self, input: &ChatInput<'_>) -> Result<String> {
        match &self.chat {
            Some(c) => c.render(input),
            None => Err(EngineError::invalid(
                "template",
                format!(
                    "{} has no chat_template; pick a meta-template (--template chatml) or a template file",
                    self.info.origin
                ),
            )),
        }
    }

    /// Renders `request.messages` with the model's chat format and streams the answer, with
    /// reasoning (`<think>…</think>`) reported apart from the text.
    pub fn chat(&self, request: ChatRequest) -> Result<ChatStream> {
        if request.messages.is_empty() {
            return Err(EngineError::invalid("messages", "no messages"));
        }
        let mut prompt = self.render(&ChatInput {
            messages: &request.messages,
            tools: request.tools.as_deref(),
            add_generation_prompt: true,
            enable_thinking: request.enable_thinking,
            extra: Default::default(),
        })?;
        if let Some(prefill) = &request.prefill {
            prompt.push_str(prefill);
        }
        let ids = self.with_image_tokens(self.tokenizer.encode(&prompt)?, &request.images)?;
        let stop_strings = request
            .stop
            .unwrap_or_else(|| self.info.stop_strings.clone());
        StopStrings::new(stop_strings.clone())?;
        let events = self.generate(GenerateRequest {
            prompt: ids,
            max_tokens: request.max_tokens,
            sampling: request
                .sampling
                .unwrap_or_else(|| self.info.sampling.clone()),
            stop_token_ids: None,
            stop_strings,
            session: request.session,
            constraint: request.constraint,
            images: request.images,
        })?;
        let thinking = self
            .info
            .thinks
            .then(|| ThinkingSplitter::new(ChatFormat::prompt_opens_reasoning(&prompt)));
        Ok(ChatStream {
            events,
            thinking,
            ready: VecDeque::new(),
        })
    }

    /// Ends a session: its KV cache is no longer kept for it, but stays (unnamed, evicted first
    /// when memory is short) for any later prompt that starts with the same tokens — the next
    /// turn of the same conversation, or another agent with the same system prompt.
    pub fn release_session(&self, id: &str) -> Result<()> {
        self.commands
            .send(Command::ReleaseSession(id.into()))
            .map_err(|_| EngineError::WorkerGone)
    }

    /// The KV cache the session holds (or last released) as bytes that
    /// [`Engine::restore_session_cache`] of a later process accepts; `None` when no cache is
    /// kept for it (evicted, or never run).
    pub fn session_cache(&self, id: &str) -> Result<Option<Vec<u8>>> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.commands
            .send(Command::ExportSession(id.into(), tx))
            .map_err(|_| EngineError::WorkerGone)?;
        let Some(c) = rx.recv().map_err(|_| EngineError::WorkerGone)?? else {
            return Ok(None);
        };
        KvSnapshot {
            fingerprint: self.info.fingerprint.clone(),
            tokens: c.tokens,
            layers: c.layers,
            types: c.types,
            state: c.state,
        }
        .to_bytes()
        .map(Some)
    }

    /// Keeps `bytes` (from [`Engine::session_cache`]) as the session's KV cache, so that its
    /// next request runs only the tokens after the cached ones. Bytes computed by another
    /// model (see [`ModelInfo::fingerprint`]), cut or garbled are refused with the reason.
    /// Returns the tokens restored.
    pub fn restore_session_cache(&self, id: &str, bytes: &[u8]) -> Result<usize> {
        let snap = KvSnapshot::from_bytes(bytes, &candle_core::Device::Cpu)?;
        if snap.fingerprint != self.info.fingerprint {
            return Err(EngineError::invalid(
                "session cache",
                format!(
                    "computed by another model or setup ({}); this one is {}",
                    snap.fingerprint, self.info.fingerprint
                ),
            ));
        }
        if snap.tokens.is_empty() {
            return Ok(0);
        }
        if snap.tokens.len() >= self.info.max_positions {
            return Err(EngineError::invalid(
                "session cache",
                format!(
                    "{} tokens, more than the model's {} positions",
                    snap.tokens.len(),
                    self.info.max_positions
                ),
            ));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.commands
            .send(Command::ImportSession(
                SessionCache {
                    session: id.into(),
                    tokens: snap.tokens,
                    layers: snap.layers,
                    types: snap.types,
                    state: snap.state,
                },
                tx,
            ))
            .map_err(|_| EngineError::WorkerGone)?;
        rx.recv().map_err(|_| EngineError::WorkerGone)?
    }

    /// Forgets a session's KV cache (a session never seen is fine).
    pub fn drop_session(&self, id: &str) -> Result<()> {
        self.commands
            .send(Command::DropSession(id.into()))
            .map_err(|_| EngineError::WorkerGone)
    }
}

/// Starts the thread that encodes requests' images before they queue: each request's images
/// through `encoder` (kept for the scheduler's [`LanguageModel::attach_images`]), then the
/// request to the scheduler; a request whose caller is gone, or whose image fails, ends
/// there. `None` where the thread cannot start (the scheduler then encodes).
fn encode_ahead(
    encoder: crate::vision::ImageEncoder,
    commands: std::sync::mpsc::Sender<Command>,
    in_flight: Arc<AtomicUsize>,
) -> Option<std::sync::mpsc::Sender<Box<Job>>> {
    let (tx, rx) = std::sync::mpsc::channel::<Box<Job>>();
    let run = move || {
        while let Ok(job) = rx.recv() {
            let failed = match job.events.is_closed() {
                true => Some(None),
                false => job
                    .request
                    .images
                    .iter()
                    .find_map(|image| encoder.encode(image).err())
                    .map(Some),
            };
            let handed = match failed {
                None => commands.send(Command::Generate(job)).is_ok(),
                Some(error) => {
                    if let Some(e) = error {
                        let _ = job.events.send(crate::generation::Event::Error {
                            message: e.to_string(),
                        });
                    }
                    false
                }
            };
            if !handed {
                in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    };
    match std::thread::Builder::new()
        .name("hearth-images".into())
        .spawn(run)
    {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!("cannot start the image thread ({e}); images are encoded in turn");
            None
        }
    }
}
