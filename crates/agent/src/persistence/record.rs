//! Recording a ToolAgent run as JSON lines: a header (the agent's configuration and its
//! session state before the run), then every model request and response and every tool call
//! and result, in the order they happened, with timings, and the run's outcome. A line is
//! written and flushed as soon as it is known, so a run that dies leaves what it did.

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::hooks::Hook;
use crate::llm::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::run::tool_agent::{ToolAgent, ToolAgentRun};
use crate::tool::ToolResult;
use futures::StreamExt;
use hearth_chat::{ChatMessage, SamplingParams, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The format version this build writes and reads.
pub const RECORDING_VERSION: u32 = 1;

/// What the agent was: enough to build it again for a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// The agent's name.
    pub name: String,
    /// The start of its system prompt.
    pub persona: String,
    /// Instructions after the persona.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Model calls a run may make.
    pub max_iterations: usize,
    /// Messages of history kept verbatim.
    pub history_window: usize,
    /// The tools' schemas, as offered to the model.
    pub tools: Vec<Value>,
    /// Default answer length.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Default sampling.
    #[serde(default)]
    pub sampling: Option<SamplingParams>,
    /// Default stop words.
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// Default thinking switch.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
}

impl AgentConfig {
    /// The configuration of `agent` as it is now.
    pub fn of(agent: &ToolAgent) -> Self {
        Self {
            name: agent.llm_agent.name.clone(),
            persona: agent.persona().to_string(),
            instructions: agent.instructions.clone(),
            max_iterations: agent.max_iterations,
            history_window: agent.history_window,
            tools: agent.executor.tools.resolved().specs(),
            max_tokens: agent.llm_agent.request.max_tokens,
            sampling: agent.llm_agent.request.sampling.clone(),
            stop: agent.llm_agent.request.stop.clone(),
            enable_thinking: agent.llm_agent.request.enable_thinking,
        }
    }

    /// Sets everything but the tools and the model.
    pub fn apply(&self, agent: &mut ToolAgent) {
        agent.llm_agent.name = self.name.clone();
        agent.set_persona(self.persona.clone());
        agent.instructions = self.instructions.clone();
        agent.max_iterations = self.max_iterations;
        agent.history_window = self.history_window;
        agent.llm_agent.request.max_tokens = self.max_tokens;
        agent.llm_agent.request.sampling = self.sampling.clone();
        agent.llm_agent.request.stop = self.stop.clone();
        agent.llm_agent.request.enable_thinking = self.enable_thinking;
    }
}

/// The first line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// The format version ([`RECORDING_VERSION`]).
    pub version: u32,
    /// The model's name as its [`Llm`] gives it.
    pub model: String,
    /// The message the run answered.
    pub task: String,
    /// The session it ran in.
    pub session: String,
    /// The agent's configuration.
    pub agent: AgentConfig,
    /// The agent's state dict for the session before the run (memory, summary).
    pub state: Map<String, Value>,
    /// The knowledge passages retrieved for the task (a replay gives the same ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<String>,
    /// What the caller keeps to rebuild its tools (the CLI: tool names, workspace).
    #[serde(default)]
    pub extra: Map<String, Value>,
}

impl RunHeader {
    /// The header of a run of `task` in `session` by `agent`, as it is now.
    pub fn of(agent: &ToolAgent, task: &str, session: &str) -> Self {
        Self {
            version: RECORDING_VERSION,
            model: agent.llm_agent.llm.name(),
            task: task.to_string(),
            session: session.to_string(),
            agent: AgentConfig::of(agent),
            state: agent.state_dict(session),
            knowledge: agent
                .knowledge
                .as_ref()
                .map(|k| k.retrieve(task, crate::run::tool_agent::KNOWLEDGE_PASSAGES))
                .unwrap_or_default(),
            extra: Map::new(),
        }
    }
}

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// Boxed: the header is large and there is one per recording.
    Run(Box<RunHeader>),
    /// A request to the model.
    ModelRequest {
        /// The model call's number in the run, from 1.
        step: usize,
        /// The prompt's messages.
        messages: Vec<ChatMessage>,
        /// Tool schemas offered.
        #[serde(default)]
        tools: Vec<Value>,
        /// Answer length asked for.
        #[serde(default)]
        max_tokens: Option<usize>,
        /// Sampling asked for.
        #[serde(default)]
        sampling: Option<SamplingParams>,
        /// Stop words.
        #[serde(default)]
        stop: Option<Vec<String>>,
        /// Thinking switch.
        #[serde(default)]
        enable_thinking: Option<bool>,
    },
    /// The model's whole answer to request `step`.
    ModelResponse {
        /// The request answered.
        step: usize,
        /// The answer.
        text: String,
        /// The reasoning before it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reasoning: String,
        /// Why it stopped (`stop`, `length`, `cancelled`).
        finish: String,
        /// Tokens of the prompt.
        prompt_tokens: usize,
        /// Prompt tokens found in the KV cache.
        cached_prompt_tokens: usize,
        /// Tokens of the answer.
        completion_tokens: usize,
        /// Milliseconds from the request to the end of the answer.
        duration_ms: u64,
        /// The backend that answered, where the model chooses among several.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// The model failed on request `step`.
    ModelError {
        /// The request that failed.
        step: usize,
        /// The error.
        message: String,
        /// Milliseconds from the request to the failure.
        duration_ms: u64,
    },
    /// A tool call about to run.
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// A tool call's result.
    ToolResult {
        /// The result.
        result: ToolResult,
    },
    /// The run's outcome, the last line.
    End {
        /// What the run came to.
        run: ToolAgentRun,
    },
}

impl Entry {
    /// What the line is, for messages: `model request 2`, `tool result calculator`, ….
    pub fn describe(&self) -> String {
        match self {
            Entry::Run(_) => "run header".into(),
            Entry::ModelRequest { step, .. } => format!("model request {step}"),
            Entry::ModelResponse { step, .. } => format!("model response {step}"),
            Entry::ModelError { step, .. } => format!("model error {step}"),
            Entry::ToolCall { call } => format!("tool call {}", call.function.name),
            Entry::ToolResult { result } => format!("tool result {}", result.name),
            Entry::End { .. } => "end of run".into(),
        }
    }
}

struct Sink {
    file: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
    entries: Vec<Entry>,
    steps: usize,
    failure: Option<String>,
}

/// Collects entries, in memory and (if made with [`Recorder::create`]) in a file. As a
/// [`Hook`] it records every tool call and result.
#[derive(Clone)]
pub struct Recorder {
    sink: Arc<Mutex<Sink>>,
}

impl Recorder {
    /// Records in memory only.
    pub fn in_memory() -> Self {
        Self {
            sink: Arc::new(Mutex::new(Sink {
                file: None,
                entries: vec![],
                steps: 0,
                failure: None,
            })),
        }
    }

    /// Records into `path` (created, or replaced).
    pub fn create(path: &Path) -> Result<Self> {
        let file = std::fs::File::create(path).map_err(|e| AgentError::Recording {
            path: path.display().to_string(),
            message: format!("cannot create: {e}"),
        })?;
        let rec = Self::in_memory();
        if let Ok(mut s) = rec.sink.lock() {
            s.file = Some((path.into(), std::io::BufWriter::new(file)));
        }
        Ok(rec)
    }

    /// Records everything `agent` asks its model and every tool call it makes from now on.
    pub fn attach(&self, agent: &mut ToolAgent) {
        agent.llm_agent.llm =
            Arc::new(RecordingLlm::new(agent.llm_agent.llm.clone(), self.clone()));
        agent.llm_agent.hooks.add(Arc::new(self.clone()));
    }

    /// Adds an entry (and writes it, flushed, to the file); a failed write is kept for
    /// [`Recorder::check`].
    pub fn write(&self, entry: Entry) {
        let mut guard = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        let sink = &mut *guard;
        if let Some((path, out)) = &mut sink.file {
            let written = serde_json::to_string(&entry)
                .map_err(std::io::Error::other)
                .and_then(|line| writeln!(out, "{line}"))
                .and_then(|_| out.flush());
            if let Err(e) = written {
                let message = format!("{}: {e}", path.display());
                sink.failure.get_or_insert(message);
            }
        }
        sink.entries.push(entry);
    }

    fn next_step(&self) -> usize {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        sink.steps += 1;
        sink.steps
    }

    /// Every entry recorded so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.sink
            .lock()
            .map(|s| s.entries.clone())
            .unwrap_or_default()
    }

    /// The first write that failed, if any.
    pub fn check(&self) -> Result<()> {
        let sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        match (&sink.failure, &sink.file) {
            (Some(f), Some((path, _))) => Err(AgentError::Recording {
                path: path.display().to_string(),
                message: format!("writing failed: {f}"),
            }),
            _ => Ok(()),
        }
    }
}

impl Hook for Recorder {
    fn before_action(&self, _agent: &str, call: ToolCall, _session: &str) -> ToolCall {
        self.write(Entry::ToolCall { call: call.clone() });
        call
    }

    fn after_action(&self, _agent: &str, result: ToolResult, _session: &str) -> ToolResult {
        self.write(Entry::ToolResult {
            result: result.clone(),
        });
        result
    }
}

/// An [`Llm`] that records each request and its answer, then passes the answer on.
pub struct RecordingLlm {
    inner: Arc<dyn Llm>,
    recorder: Recorder,
}

impl RecordingLlm {
    /// Passes requests to `inner`, recording them and their answers in `recorder`.
    pub fn new(inner: Arc<dyn Llm>, recorder: Recorder) -> Self {
        Self { inner, recorder }
    }
}

impl Llm for RecordingLlm {
    fn chat(&self, r: LlmRequest) -> Result<LlmStream> {
        let step = self.recorder.next_step();
        self.recorder.write(Entry::ModelRequest {
            step,
            messages: r.messages.clone(),
            tools: r.tools.clone(),
            max_tokens: r.max_tokens,
            sampling: r.sampling.clone(),
            stop: r.stop.clone(),
            enable_thinking: r.enable_thinking,
        });
        let start = Instant::now();
        let recorder = self.recorder.clone();
        let stream = match self.inner.chat(r) {
            Ok(s) => s,
            Err(e) => {
                recorder.write(Entry::ModelError {
                    step,
                    message: e.to_string(),
                    duration_ms: start.elapsed().as_millis() as u64,
                });
                return Err(e);
            }
        };
        let (mut text, mut reasoning) = (String::new(), String::new());
        Ok(Box::pin(stream.map(move |event| {
            let duration_ms = start.elapsed().as_millis() as u64;
            match &event {
                Ok(LlmEvent::Text(t)) => text.push_str(t),
                Ok(LlmEvent::Reasoning(t)) => reasoning.push_str(t),
                Ok(LlmEvent::Done {
                    finish,
                    prompt_tokens,
                    cached_prompt_tokens,
                    completion_tokens,
                    model,
                }) => recorder.write(Entry::ModelResponse {
                    model: model.clone(),
                    step,
                    text: std::mem::take(&mut text),
                    reasoning: std::mem::take(&mut reasoning),
                    finish: finish.clone(),
                    prompt_tokens: *prompt_tokens,
                    cached_prompt_tokens: *cached_prompt_tokens,
                    completion_tokens: *completion_tokens,
                    duration_ms,
                }),
                Err(e) => recorder.write(Entry::ModelError {
                    step,
                    message: e.to_string(),
                    duration_ms,
                }),
            }
            event
        })))
    }

    fn end_session(&self, session: &str) {
        self.inner.end_session(session)
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}

/// A recording read back.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The file read.
    pub path: PathBuf,
    /// The first line.
    pub header: RunHeader,
    /// Every line after the header.
    pub entries: Vec<Entry>,
}

impl Recording {
    /// Reads the recording at `path`: a header of a format this build reads, then entries.
    pub fn read(path: &Path) -> Result<Self> {
        let err = |m: String| AgentError::Recording {
            path: path.display().to_string(),
            message: m,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let mut header = None;
        let mut entries = vec![];
        let lines: Vec<&str> = text.split('\n').collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let number = i + 1;
            let entry: Entry = serde_json::from_str(line).map_err(|e| {
                // Only the last line can be cut (a run that died while writing it).
                if e.is_eof() && i + 1 == lines.len() {
                    err(format!(
                        "line {number} is cut off in the middle (the recording ended while it was written)"
                    ))
                } else {
                    err(format!("line {number}: {e}"))
                }
            })?;
            match (entry, header.is_none()) {
                (Entry::Run(h), true) => {
                    if h.version > RECORDING_VERSION {
                        return Err(err(format!(
                            "recording format {}, newer than this build reads ({RECORDING_VERSION})",
                            h.version
                        )));
                    }
                    header = Some(*h);
                }
                (Entry::Run(_), false) => {
                    return Err(err(format!("line {number}: a second run header")))
                }
                (_, true) => {
                    return Err(err(format!(
                        "line {number}: not a run recording (it must start with the run header)"
                    )))
                }
                (e, false) => entries.push(e),
            }
        }
        let header = header.ok_or_else(|| err("empty: no run header".into()))?;
        Ok(Self {
            path: path.into(),
            header,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    #[test]
    fn cut_and_foreign_recordings_are_errors_naming_the_line() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let cut = tmp.path().join("cut.jsonl");
        std::fs::write(&cut, "{\"type\": \"run\", \"version\": 1, \"mod")?;
        let err = Recording::read(&cut).err().ok_or("read")?.to_string();
        assert!(
            err.contains("cut.jsonl") && err.contains("line 1 is cut off"),
            "{err}"
        );
        let other = tmp.path().join("other.jsonl");
        std::fs::write(&other, "{\"type\": \"tool_call\", \"call\": {\"function\": {\"name\": \"x\", \"arguments\": {}}}}\n")?;
        let err = Recording::read(&other).err().ok_or("read")?.to_string();
        assert!(err.contains("must start with the run header"), "{err}");
        let empty = tmp.path().join("empty.jsonl");
        std::fs::write(&empty, "\n")?;
        assert!(Recording::read(&empty).is_err());
        Ok(())
    }
}
