//! An [`Llm`] over an ordered list of backends (the local engine, OpenAI-compatible servers,
//! another local model): the first that gives the first event of an answer in time answers.
//! A backend that fails — an error, no event within its timeout, a stream that ends empty —
//! is tried again up to its retries, then skipped for a back-off that doubles with each
//! failure in a row (up to eight times the first) and is tried again after it. The answer's
//! [`LlmEvent::Done`] names the backend that gave it, and the log says each failure.
//!
//! Once an answer has begun it stays with its backend: text already streamed cannot be taken
//! back, so a failure mid-answer is the answer's error.

use super::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::error::{AgentError, Result};
use futures::StreamExt;
use hearth_chat::ToolFormat;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One backend and how long it is waited for.
#[derive(Clone)]
pub struct Backend {
    llm: Arc<dyn Llm>,
    name: String,
    /// Most time from the request to the answer's first event.
    pub first_event_timeout: Duration,
    /// Further tries on this backend before the next is asked.
    pub retries: usize,
}

impl Backend {
    /// `llm`, named by its model, waited for 300 s, not retried.
    pub fn new(llm: Arc<dyn Llm>) -> Self {
        Self {
            name: llm.name(),
            llm,
            first_event_timeout: Duration::from_secs(300),
            retries: 0,
        }
    }

    /// The name the log and the answer give it.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Most time from the request to the answer's first event.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.first_event_timeout = timeout;
        self
    }

    /// Further tries on this backend before the next is asked.
    pub fn with_retries(mut self, retries: usize) -> Self {
        self.retries = retries;
        self
    }

    /// The answer's first event and the rest of its stream, or why there is none.
    async fn first_event(&self, request: LlmRequest) -> Result<(LlmEvent, LlmStream)> {
        let mut stream = self.llm.chat(request)?;
        match tokio::time::timeout(self.first_event_timeout, stream.next()).await {
            Err(_) => Err(AgentError::Llm(format!(
                "no answer within {:?}",
                self.first_event_timeout
            ))),
            Ok(None) => Err(AgentError::Llm("the answer ended before it began".into())),
            Ok(Some(Err(e))) => Err(e),
            Ok(Some(Ok(first))) => Ok((first, stream)),
        }
    }
}

/// A backend's health: failures in a row, and until when it is skipped.
struct Slot {
    backend: Backend,
    health: Mutex<(u32, Option<Instant>)>,
}

impl Slot {
    fn skipped_until(&self) -> Option<Instant> {
        self.health
            .lock()
            .ok()
            .and_then(|h| h.1)
            .filter(|&t| t > Instant::now())
    }

    fn failed(&self, backoff: Duration) -> Duration {
        let Ok(mut h) = self.health.lock() else {
            return backoff;
        };
        h.0 = h.0.saturating_add(1);
        let wait = backoff * 2u32.pow(h.0.saturating_sub(1).min(3));
        h.1 = Some(Instant::now() + wait);
        wait
    }

    fn answered(&self) {
        if let Ok(mut h) = self.health.lock() {
            *h = (0, None);
        }
    }
}

/// The fallback models of a config file (`hearth agent --llm-config FILE`, TOML), asked in
/// order after the main model:
///
/// ```toml
/// timeout_secs = 120      # the main model's time to its first token
/// backoff_secs = 30       # a failed model is skipped this long (doubling while it fails)
/// [[fallback]]
/// url = "http://127.0.0.1:8000/v1"
/// model = "Qwen/Qwen2.5-Coder-7B-Instruct"   # default: the first the server lists
/// timeout_secs = 300
/// retries = 1
/// ```
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackConfig {
    /// Seconds the main model may take to its answer's first token.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Seconds a model that failed is skipped at first.
    #[serde(default)]
    pub backoff_secs: Option<u64>,
    /// The servers of OpenAI's API asked after it, in order.
    #[serde(default, rename = "fallback")]
    pub fallbacks: Vec<FallbackServer>,
}

/// One fallback server of a [`FallbackConfig`].
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackServer {
    /// Its base URL (`…/v1`).
    pub url: String,
    /// The model to ask for; by default the first it lists.
    #[serde(default)]
    pub model: Option<String>,
    /// Seconds to its answer's first token.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Further tries on it before the next is asked.
    #[serde(default)]
    pub retries: usize,
}

/// Backends in order of preference, the next answering where one fails.
#[derive(Clone)]
pub struct FallbackLlm {
    slots: Vec<Arc<Slot>>,
    backoff: Duration,
}

impl FallbackLlm {
    /// Over `backends`, the first preferred; a failed one is skipped for 30 s at first.
    pub fn new(backends: Vec<Backend>) -> Result<Self> {
        if backends.is_empty() {
            return Err(AgentError::invalid("backends", "no backend to ask"));
        }
        let slots = backends
            .into_iter()
            .map(|backend| {
                Arc::new(Slot {
                    backend,
                    health: Mutex::new((0, None)),
                })
            })
            .collect();
        Ok(Self {
            slots,
            backoff: Duration::from_secs(30),
        })
    }

    /// How long a backend that failed is skipped at first (doubling with each failure in a
    /// row, up to eight times this).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The backends to ask, in order: those not backing off, in preference order, then those
    /// backing off, soonest back first (when all failed lately, one is still asked).
    fn order(&self) -> Vec<Arc<Slot>> {
        let (mut ready, mut waiting): (Vec<_>, Vec<_>) = self
            .slots
            .iter()
            .cloned()
            .partition(|s| s.skipped_until().is_none());
        waiting.sort_by_key(|s| s.skipped_until());
        ready.append(&mut waiting);
        ready
    }
}

impl Llm for FallbackLlm {
    fn chat(&self, request: LlmRequest) -> Result<LlmStream> {
        let (order, backoff) = (self.order(), self.backoff);
        let answer = async move {
            let mut failures = vec![];
            for slot in order {
                let b = &slot.backend;
                for attempt in 0..=b.retries {
                    match b.first_event(request.clone()).await {
                        Ok((first, rest)) => {
                            slot.answered();
                            if !failures.is_empty() {
                                tracing::info!("LLM backend {} answered", b.name);
                            }
                            let name = b.name.clone();
                            let tagged = futures::stream::iter([Ok(first)]).chain(rest).map(
                                move |mut event| {
                                    if let Ok(LlmEvent::Done { model, .. }) = &mut event {
                                        model.get_or_insert_with(|| name.clone());
                                    }
                                    event
                                },
                            );
                            return tagged.boxed();
                        }
                        Err(e) => {
                            tracing::warn!(
                                "LLM backend {} (try {} of {}): {e}",
                                b.name,
                                attempt + 1,
                                b.retries + 1
                            );
                            failures.push(format!("{}: {e}", b.name));
                        }
                    }
                }
                let wait = slot.failed(backoff);
                tracing::warn!("LLM backend {} skipped for {wait:?}", b.name);
            }
            let all = AgentError::Llm(format!("every backend failed: {}", failures.join("; ")));
            futures::stream::iter([Err(all)]).boxed()
        };
        Ok(futures::stream::once(answer).flatten().boxed())
    }

    fn end_session(&self, session: &str) {
        for s in &self.slots {
            s.backend.llm.end_session(session);
        }
    }

    fn name(&self) -> String {
        let names: Vec<&str> = self.slots.iter().map(|s| s.backend.name.as_str()).collect();
        names.join(" or ")
    }

    fn tool_format(&self) -> ToolFormat {
        self.slots
            .first()
            .map_or(ToolFormat::Json, |s| s.backend.llm.tool_format())
    }
}
