//! The tool loop: system prompt (persona, instructions, tools), a window of history (older
//! turns summarised by the model), knowledge snippets, the user's message; then call the
//! model, run the tool calls it makes (concurrently), feed the results back, and repeat until
//! it answers without calling a tool or `max_iterations` is reached.
//!
//! The prompt is the [`Aggregator`](crate::aggregator::Aggregator)'s (by default [`ToolAggregator`]: the system prompt with the
//! output parser's format instruction, the history, the turn so far); the [`OutputParser`]
//! reads each answer and words the correction for a call it cannot read; a [`LoopPolicy`]
//! says what to do with calls to unknown tools and repeated calls. Any format works: Qwen's
//! `<tool_call>` on its chat template, ReAct on a meta-template, ….

use crate::agent::{Agent, LlmAgent};
use crate::aggregator::{ToolAggregator, SYSTEM_NOTE, TOOL_RESULT};
use crate::error::{AgentError, Result};
use crate::hooks::Hook;
use crate::llm::{complete, Llm, LlmEvent, LlmRequest};
use crate::message::AgentMessage;
use crate::parser::{OutputParser, ParseStatus, ParsedOutput, QwenToolParser, QwenXmlToolParser};
use crate::run::loop_policy::{attempted_call, LoopPolicy};
use crate::tool::{Tool, ToolRegistry, ToolResult};
use crate::tool_context::ToolContext;
use async_trait::async_trait;
use futures::StreamExt;
use hearth_chat::{ChatMessage, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::UnboundedSender;

/// Which tools the model may call in one run: `None` offers none, a named tool only itself,
/// and `Required` asks again once when the first answer calls nothing.
pub use hearth_chat::ToolChoice;

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without calling a tool.
    Answer,
    /// `max_iterations` model calls were made and the last still called tools.
    MaxIterations,
    /// The model said nothing and called nothing.
    NoAction,
    /// The model failed.
    Error,
}

/// What a run of the tool loop came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolAgentRun {
    /// The answer; for a run that did not finish, the model's last text.
    pub answer: String,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Every tool call made, with its result, in order.
    pub tool_calls: Vec<ToolResult>,
    /// Model calls made.
    pub iterations: usize,
    /// What failed, with [`StopReason::Error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The backend that gave the last answer, where the model chooses among several
    /// ([`crate::llm::FallbackLlm`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// What a run reports as it goes (in JSON, tagged by `type`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolAgentEvent {
    /// Answer text that can no longer become a tool call.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// Reasoning text of the model.
    Reasoning {
        /// The new text.
        text: String,
    },
    /// Tool calls about to run, concurrently.
    ToolCallsStart {
        /// The calls, as the hooks left them.
        calls: Vec<ToolCall>,
    },
    /// A tool call's result, as the hooks left it.
    ToolResult {
        /// The result.
        result: ToolResult,
    },
    /// Every call of the round has its result.
    ToolCallsComplete,
    /// The run is over.
    Done {
        /// What it came to.
        run: ToolAgentRun,
    },
}

/// Snippets relevant to a message (retrieval), added to the prompt.
pub trait Knowledge: Send + Sync {
    /// Up to `k` snippets for `query`, best first.
    fn retrieve(&self, query: &str, k: usize) -> Vec<String>;
    /// Up to `k` snippets for `query` that `context`'s caller may read (its tenant's and
    /// the shared ones); by default [`Self::retrieve`].
    fn retrieve_in(&self, query: &str, k: usize, _context: &ToolContext) -> Vec<String> {
        self.retrieve(query, k)
    }
}

/// Knowledge passages added to the prompt per message.
pub const KNOWLEDGE_PASSAGES: usize = 3;

/// The same snippets for every message (a replay's recorded ones).
pub struct FixedKnowledge(pub Vec<String>);

impl Knowledge for FixedKnowledge {
    fn retrieve(&self, _query: &str, k: usize) -> Vec<String> {
        self.0.iter().take(k).cloned().collect()
    }
}

/// Options of one run.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Tools available for this run only.
    pub extra_tools: Vec<Arc<dyn Tool>>,
    /// Which tools the model may call.
    pub tool_choice: ToolChoice,
    /// Who the run's tool calls are for (user, tenant, deadline, cancellation, extras); the
    /// run fills in the session and the agent.
    pub context: ToolContext,
}

/// Runs the calls of a turn: the tools offered on every run, and what to do with calls to
/// unknown tools, withheld tools and repeated calls.
#[derive(Clone)]
pub struct ToolExecutor {
    /// The tools offered on every run.
    pub tools: ToolRegistry,
    /// What to do with unknown, withheld and repeated calls.
    pub policy: LoopPolicy,
}

impl ToolExecutor {
    /// `tools` with the default policy.
    pub fn new(tools: ToolRegistry) -> Self {
        Self {
            tools,
            policy: LoopPolicy::default(),
        }
    }

    /// The tools a run may call (`registry`, with the run's extra ones) and those it offers
    /// the model, as `tool_choice` allows: `(registry, offered)`.
    fn for_run(&self, options: &RunOptions) -> (ToolRegistry, ToolRegistry) {
        let mut registry = self.tools.resolved();
        for t in &options.extra_tools {
            registry.add(t.clone());
        }
        let offered = match &options.tool_choice {
            ToolChoice::None => ToolRegistry::new(),
            ToolChoice::Named(n) => {
                let mut r = ToolRegistry::new();
                if let Some(t) = registry.get(n) {
                    r.add(t.clone());
                }
                r
            }
            _ => registry.clone(),
        };
        (registry, offered)
    }

    /// One round of `calls` from `registry`, concurrently: each gets an id if it has none and
    /// passes the `before_action` hooks, each result the `after_action` ones, with events as
    /// they go. Returns the calls as they ran and their results, in order.
    pub(crate) async fn execute(
        registry: &ToolRegistry,
        mut calls: Vec<ToolCall>,
        round: usize,
        (context, hooks): (&ToolContext, &[Arc<dyn Hook>]),
        emit: &(dyn Fn(ToolAgentEvent) + Sync),
    ) -> (Vec<ToolCall>, Vec<ToolResult>) {
        for (i, c) in calls.iter_mut().enumerate() {
            c.id.get_or_insert_with(|| format!("call_{}_{}", round, i + 1));
            for h in hooks {
                *c = h.before_action_in(c.clone(), context);
            }
        }
        emit(ToolAgentEvent::ToolCallsStart {
            calls: calls.clone(),
        });
        let outs: Vec<ToolResult> =
            futures::future::join_all(calls.iter().map(|c| registry.execute_in(c, context))).await;
        let mut results = Vec::with_capacity(outs.len());
        for mut r in outs {
            for h in hooks {
                r = h.after_action_in(r, context);
            }
            emit(ToolAgentEvent::ToolResult { result: r.clone() });
            results.push(r);
        }
        (calls, results)
    }
}

/// An agent that runs the tool loop (see the module docs): an [`LlmAgent`] that asks the model
/// (its name, model, memory, aggregator, parser, hooks and request defaults; its `template` is
/// the persona, the start of the system prompt) and a [`ToolExecutor`] that runs the calls.
pub struct ToolAgent {
    /// Asks the model. Its parser reads tool calls from answers (by default in the format the
    /// model writes); its aggregator is the [`ToolAggregator`].
    pub llm_agent: LlmAgent,
    /// Runs the calls the model makes.
    pub executor: ToolExecutor,
    /// Added to the system prompt after the persona.
    pub instructions: Option<String>,
    /// Model calls a run may make (default 10).
    pub max_iterations: usize,
    /// Messages of history kept verbatim; older ones are summarised.
    pub history_window: usize,
    /// Where snippets for each message come from.
    pub knowledge: Option<Arc<dyn Knowledge>>,
    /// Per session: how many of the oldest messages the summary covers, and the summary.
    summaries: Mutex<HashMap<String, (usize, String)>>,
}

impl ToolAgent {
    /// An agent on `llm`, reading tool calls in the format the model writes them.
    pub fn new(llm: Arc<dyn Llm>, tools: ToolRegistry) -> Self {
        let parser: Box<dyn OutputParser> = match llm.tool_format() {
            hearth_chat::ToolFormat::Json => Box::new(QwenToolParser),
            hearth_chat::ToolFormat::Xml => Box::new(QwenXmlToolParser),
        };
        let mut llm_agent = LlmAgent::new("assistant", llm, Some("You are a helpful assistant."));
        llm_agent.aggregator = Box::new(ToolAggregator);
        llm_agent.parser = Some(parser);
        Self {
            llm_agent,
            executor: ToolExecutor::new(tools),
            instructions: None,
            max_iterations: 10,
            history_window: 20,
            knowledge: None,
            summaries: Mutex::new(HashMap::new()),
        }
    }

    /// The start of the system prompt.
    pub fn persona(&self) -> &str {
        self.llm_agent.template.as_deref().unwrap_or_default()
    }

    /// Sets the start of the system prompt.
    pub fn set_persona(&mut self, persona: impl Into<String>) {
        self.llm_agent.template = Some(persona.into());
    }

    /// The parser that reads tool calls (Qwen's JSON format where none is set).
    fn parser(&self) -> &dyn OutputParser {
        self.llm_agent.parser.as_deref().unwrap_or(&QwenToolParser)
    }

    fn system_prompt(&self, tools: &ToolRegistry) -> String {
        let mut s = self.persona().to_string();
        if let Some(i) = &self.instructions {
            s.push_str("\n\n");
            s.push_str(i);
        }
        if !tools.is_empty() {
            s.push_str(&format!(
                "\n\nYou can call these tools: {}. Call a tool when it helps; when you have what you need, answer the user directly.",
                tools.names().join(", ")
            ));
        }
        s
    }

    /// The session's history, older turns summarised (a system note in their place).
    async fn history(&self, session: &str) -> Result<Vec<AgentMessage>> {
        let all = self.llm_agent.memory.get(session);
        if all.len() <= self.history_window {
            return Ok(all);
        }
        let split = all.len() - self.history_window;
        let cached = self
            .summaries
            .lock()
            .ok()
            .and_then(|s| s.get(session).cloned());
        let summary = match cached {
            Some((n, s)) if n == split => s,
            _ => {
                let transcript: Vec<String> = all[..split]
                    .iter()
                    .map(|m| format!("{}: {}", m.sender, m.text()))
                    .collect();
                let out = complete(
                    self.llm_agent.llm.as_ref(),
                    LlmRequest {
                        messages: vec![
                            ChatMessage::system("Summarise this conversation in a few sentences. Keep names, numbers and decisions."),
                            ChatMessage::user(transcript.join("\n")),
                        ],
                        max_tokens: Some(200),
                        ..self.llm_agent.request.clone()
                    },
                )
                .await?;
                if let Ok(mut s) = self.summaries.lock() {
                    s.insert(session.to_string(), (split, out.text.clone()));
                }
                out.text
            }
        };
        let mut msgs = vec![note(format!(
            "Summary of the earlier conversation: {}",
            summary.trim()
        ))];
        msgs.extend(all[split..].iter().cloned());
        Ok(msgs)
    }

    /// The engine session (KV cache) of this agent's conversation `session`.
    pub fn kv_session(&self, session: &str) -> String {
        format!("{}:{session}", self.llm_agent.name)
    }

    /// One turn of `session`: the agent hooks see the task and the answer, the loop runs on
    /// the session's history, and a turn that did not fail is added to memory.
    pub async fn run(
        &self,
        task: &str,
        session: &str,
        options: RunOptions,
        events: Option<&UnboundedSender<ToolAgentEvent>>,
    ) -> Result<ToolAgentRun> {
        if task.trim().is_empty() {
            return Err(AgentError::invalid("message", "empty message"));
        }
        let hooks = self.llm_agent.hooks.snapshot();
        let mut inputs = vec![AgentMessage::user(task)];
        for h in &hooks {
            inputs = h.before_agent(&self.llm_agent.name, inputs, session);
        }
        let task = inputs
            .iter()
            .map(AgentMessage::text)
            .collect::<Vec<_>>()
            .join("\n");
        if task.trim().is_empty() {
            return Err(AgentError::invalid(
                "message",
                "empty after the before_agent hooks",
            ));
        }
        let history = self.history(session).await?;
        let mut run = self
            .turn(history, &task, session, &hooks, options, events)
            .await;
        if run.stop_reason != StopReason::Error {
            for i in inputs {
                self.llm_agent.memory.add(session, i);
            }
            let mut out = AgentMessage::new(self.llm_agent.name.clone(), run.answer.clone());
            let mut info = json!({"stop_reason": run.stop_reason, "iterations": run.iterations});
            if let Some(b) = &run.backend {
                info["backend"] = json!(b);
            }
            out.extra_info = Some(info);
            self.llm_agent.memory.add(session, out.clone());
            for h in &hooks {
                out = h.after_agent(&self.llm_agent.name, out, session);
            }
            run.answer = out.text();
        }
        if let Some(tx) = events {
            let _ = tx.send(ToolAgentEvent::Done { run: run.clone() });
        }
        Ok(run)
    }

    /// The loop itself over `history` (the messages before the task). Writes no memory.
    async fn turn(
        &self,
        history: Vec<AgentMessage>,
        task: &str,
        session: &str,
        hooks: &[Arc<dyn Hook>],
        options: RunOptions,
        events: Option<&UnboundedSender<ToolAgentEvent>>,
    ) -> ToolAgentRun {
        let emit = |e: ToolAgentEvent| {
            if let Some(tx) = events {
                let _ = tx.send(e);
            }
        };
        let (registry, offered) = self.executor.for_run(&options);
        let names = offered.names();
        let specs = offered.specs();
        let system = self.system_prompt(&offered);
        // The chat template lists the tools, unless the format's own instruction does.
        let template_tools = self.parser().format_instruction(&specs).is_none();
        let mut stop = self.llm_agent.request.stop.clone();
        let words = self.parser().stop_words();
        if !words.is_empty() {
            stop.get_or_insert_with(Vec::new).extend(words);
        }
        let mut msgs = history;
        let context = ToolContext {
            session: session.to_string(),
            agent: self.llm_agent.name.clone(),
            ..options.context.clone()
        };
        if let Some(k) = &self.knowledge {
            let snippets = k.retrieve_in(task, KNOWLEDGE_PASSAGES, &context);
            if !snippets.is_empty() {
                msgs.push(note(format!(
                    "Relevant knowledge:\n- {}",
                    snippets.join("\n- ")
                )));
            }
        }
        msgs.push(AgentMessage::user(task));
        let tell = |msgs: &mut Vec<AgentMessage>, text: &str| msgs.push(AgentMessage::user(text));

        let mut results: Vec<ToolResult> = vec![];
        let mut withhold_tools = offered.is_empty();
        let mut asked_again = false;
        let mut corrections = 0;
        let mut last_text = String::new();
        let finish = |run: ToolAgentRun| {
            // The run is over: the engine may evict its cache (the next turn, whose prompt
            // starts with this one's, still finds it while it stays).
            self.llm_agent.llm.end_session(&self.kv_session(session));
            run
        };
        let mut backend = None;
        for iteration in 1..=self.max_iterations {
            let messages = self.llm_agent.aggregator.aggregate(
                &msgs,
                &self.llm_agent.name,
                Some(self.parser()),
                Some(&system),
                &specs,
            );
            let request = LlmRequest {
                messages,
                tools: if withhold_tools || !template_tools {
                    vec![]
                } else {
                    specs.clone()
                },
                stop: stop.clone(),
                session: Some(self.kv_session(session)),
                ..self.llm_agent.request.clone()
            };
            let text = match self.stream_answer(request, &emit).await {
                Ok((t, model)) => {
                    backend = model.or(backend);
                    t
                }
                Err(e) => {
                    return finish(ToolAgentRun {
                        answer: last_text,
                        stop_reason: StopReason::Error,
                        tool_calls: results,
                        iterations: iteration,
                        error: Some(e.to_string()),
                        backend,
                    })
                }
            };
            let parsed = if withhold_tools {
                ParsedOutput::text(&text)
            } else {
                self.parser().parse_with_specs(&text, &specs)
            };
            let mut answer = AgentMessage::new(self.llm_agent.name.clone(), text.clone());
            answer.formatted = serde_json::to_value(&parsed).ok();
            if parsed.status == ParseStatus::ParsingError {
                // The unreadable turn stays out of the prompt; the parser says how to write it.
                msgs.push(answer);
                let error = parsed.error.as_deref().unwrap_or("no detail");
                tell(&mut msgs, &self.parser().correction(error));
                last_text = text;
                continue;
            }
            if parsed.tool_calls.is_empty() {
                if options.tool_choice == ToolChoice::Required && results.is_empty() && !asked_again
                {
                    asked_again = true;
                    msgs.push(answer);
                    tell(&mut msgs, self.executor.policy.call_required());
                    continue;
                }
                // A tool call the parser would not take (an unknown tool, or tools withheld) is
                // not an answer: say what is wrong, a bounded number of times.
                if let Some(name) = attempted_call(&text) {
                    if corrections < self.executor.policy.max_corrections {
                        corrections += 1;
                        msgs.push(answer);
                        let why = if withhold_tools {
                            self.executor.policy.tools_withheld().to_string()
                        } else {
                            self.executor.policy.unknown_tool(&name, &names)
                        };
                        tell(&mut msgs, &why);
                        continue;
                    }
                }
                let answer = parsed.text.clone();
                let reason = if answer.is_empty() {
                    StopReason::NoAction
                } else {
                    StopReason::Answer
                };
                return finish(ToolAgentRun {
                    answer,
                    stop_reason: reason,
                    tool_calls: results,
                    iterations: iteration,
                    error: None,
                    backend,
                });
            }
            last_text = parsed.text.clone();
            let made: Vec<(String, Value)> = results
                .iter()
                .map(|r| (r.name.clone(), r.arguments.clone()))
                .collect();
            let calls = self.executor.policy.fresh_calls(&parsed.tool_calls, &made);
            if calls.is_empty() {
                withhold_tools = true;
                tell(&mut msgs, self.executor.policy.repeated_calls());
                continue;
            }
            let (calls, outs) =
                ToolExecutor::execute(&registry, calls, iteration, (&context, hooks), &emit).await;
            // The turn as it ran: only the calls made, with their ids.
            let mut ran = parsed.clone();
            ran.tool_calls = calls;
            answer.formatted = serde_json::to_value(&ran).ok();
            msgs.push(answer);
            for r in outs {
                let mut m = AgentMessage::new(r.name.clone(), r.for_model());
                m.kind = Some(TOOL_RESULT.into());
                m.extra_info = Some(json!({ "id": r.id }));
                msgs.push(m);
                results.push(r);
            }
            emit(ToolAgentEvent::ToolCallsComplete);
        }
        finish(ToolAgentRun {
            answer: last_text,
            stop_reason: StopReason::MaxIterations,
            tool_calls: results,
            iterations: self.max_iterations,
            error: None,
            backend,
        })
    }

    /// Streams one answer, showing only text that cannot still become a tool call.
    async fn stream_answer(
        &self,
        request: LlmRequest,
        emit: &(dyn Fn(ToolAgentEvent) + Sync),
    ) -> Result<(String, Option<String>)> {
        let mut stream = self.llm_agent.llm.chat(request)?;
        let mut backend = None;
        let (mut text, mut shown) = (String::new(), 0usize);
        let names = self.executor.tools.names();
        // The answer's calls so far and where the text stood when the last one was whole: a
        // call that repeats an earlier one ends the answer there (a small model forced to call
        // writes the same call until its token limit, the last one cut). Dropping the stream
        // stops the generation.
        let (mut calls, mut whole_at) = (0usize, 0usize);
        while let Some(ev) = stream.next().await {
            match ev? {
                LlmEvent::Text(t) => {
                    text.push_str(&t);
                    let visible = self.parser().visible_prefix(&text);
                    // (Only an answer the parser holds back can hold calls: prose is not read.)
                    if visible < text.len() {
                        let parsed = self.parser().parse(&text, &names);
                        let split = parsed.tool_calls.split_last();
                        if let (ParseStatus::ValidTool, Some((last, earlier))) =
                            (parsed.status, split)
                        {
                            if parsed.tool_calls.len() > calls {
                                if earlier.iter().any(|c| c.function == last.function) {
                                    text.truncate(whole_at);
                                    shown = shown.min(whole_at);
                                    break;
                                }
                                (calls, whole_at) = (parsed.tool_calls.len(), text.len());
                            }
                        }
                    }
                    if visible > shown {
                        emit(ToolAgentEvent::TextDelta {
                            text: text[shown..visible].to_string(),
                        });
                        shown = visible;
                    }
                }
                LlmEvent::Reasoning(t) => emit(ToolAgentEvent::Reasoning { text: t }),
                LlmEvent::Done { model, .. } => backend = model,
            }
        }
        // A held-back tail that turned out to be plain text is released.
        if self.parser().parse(&text, &names).tool_calls.is_empty() && text.len() > shown {
            emit(ToolAgentEvent::TextDelta {
                text: text[shown..].to_string(),
            });
        }
        Ok((text, backend))
    }
}

/// A message the aggregator gives the model as a system message where it stands.
fn note(text: String) -> AgentMessage {
    let mut m = AgentMessage::new("system", text);
    m.kind = Some(SYSTEM_NOTE.into());
    m
}

#[async_trait]
impl Agent for ToolAgent {
    fn name(&self) -> &str {
        &self.llm_agent.name
    }

    fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        self.llm_agent.hooks.snapshot()
    }

    fn release(&self, session: &str) {
        self.llm_agent.llm.end_session(&self.kv_session(session));
    }

    /// A turn through [`ToolAgent::run`]: the task is the inputs' text, and memory and hooks
    /// are handled there.
    async fn call(&self, inputs: Vec<AgentMessage>, session: &str) -> Result<AgentMessage> {
        self.call_in(inputs, session, &ToolContext::default()).await
    }

    /// [`ToolAgent::run`] with `context` for the tools.
    async fn call_in(
        &self,
        inputs: Vec<AgentMessage>,
        session: &str,
        context: &ToolContext,
    ) -> Result<AgentMessage> {
        let task: Vec<String> = inputs.iter().map(AgentMessage::text).collect();
        let options = RunOptions {
            context: context.clone(),
            ..RunOptions::default()
        };
        let run = self.run(&task.join("\n"), session, options, None).await?;
        Ok(self.answer_message(&run))
    }

    /// The tool loop on the last message, with the earlier ones as history. Writes no memory.
    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage> {
        let Some((last, earlier)) = history.split_last() else {
            return Err(AgentError::invalid("message", "no message to answer"));
        };
        let run = self
            .turn(
                earlier.to_vec(),
                &last.text(),
                session,
                &self.llm_agent.hooks.snapshot(),
                RunOptions::default(),
                None,
            )
            .await;
        Ok(self.answer_message(&run))
    }

    /// `memory` (the session's messages) and `summary` (the summary of its oldest messages,
    /// and how many it covers; null when there is none).
    fn state_dict(&self, session: &str) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert(
            "memory".into(),
            self.llm_agent.memory.with(session, |m| m.save()),
        );
        let summary = self
            .summaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .map(|(covers, text)| json!({"covers": covers, "text": text}))
            .unwrap_or(Value::Null);
        out.insert("summary".into(), summary);
        out
    }

    fn load_state_dict(&self, session: &str, state: &Map<String, Value>) -> Result<()> {
        let summary = match state.get("summary") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let covers = v.get("covers").and_then(Value::as_u64);
                let text = v.get("text").and_then(Value::as_str);
                match (covers, text) {
                    (Some(c), Some(t)) => Some((c as usize, t.to_string())),
                    _ => {
                        return Err(AgentError::State(format!(
                            "summary: expected {{\"covers\": <count>, \"text\": <string>}}, got {v}"
                        )))
                    }
                }
            }
        };
        if let Some(v) = state.get("memory") {
            self.llm_agent
                .memory
                .with(session, |m| m.load(v))
                .map_err(AgentError::State)?;
        }
        let mut summaries = self.summaries.lock().unwrap_or_else(|p| p.into_inner());
        match summary {
            Some(s) => summaries.insert(session.to_string(), s),
            None => summaries.remove(session),
        };
        Ok(())
    }

    /// Forgets the session's memory and summary and releases its KV cache in the engine.
    fn reset(&self, session: &str, _recursive: bool) {
        self.llm_agent.memory.reset(session);
        self.summaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
        self.release(session);
    }
}

impl ToolAgent {
    fn answer_message(&self, run: &ToolAgentRun) -> AgentMessage {
        let mut msg = AgentMessage::new(self.llm_agent.name.clone(), run.answer.clone());
        msg.extra_info = serde_json::to_value(run).ok();
        msg
    }
}
