//! Replaying a recorded run: the agent is rebuilt from the recording's header, run again
//! (with the recorded model answers and tool results, or with a live model), recorded again,
//! and the two recordings are compared line by line; the first difference is the divergence.

use crate::agent::Agent;
use crate::error::{AgentError, Result};
use crate::llm::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::message::ActionStatusCode;
use crate::persistence::record::{Entry, Recorder, Recording};
use crate::run::tool_agent::{FixedKnowledge, RunOptions, ToolAgent, ToolAgentRun};
use crate::tool::{Tool, ToolRegistry};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// An [`Llm`] that gives the recorded answers, in order.
pub struct ReplayLlm {
    model: String,
    answers: Mutex<VecDeque<Entry>>,
}

impl ReplayLlm {
    /// Gives the model answers and errors of `recording`.
    pub fn new(recording: &Recording) -> Self {
        let answers = recording
            .entries
            .iter()
            .filter(|e| matches!(e, Entry::ModelResponse { .. } | Entry::ModelError { .. }))
            .cloned()
            .collect();
        Self {
            model: recording.header.model.clone(),
            answers: Mutex::new(answers),
        }
    }
}

impl Llm for ReplayLlm {
    fn chat(&self, _request: LlmRequest) -> Result<LlmStream> {
        let next = self
            .answers
            .lock()
            .map_err(|_| AgentError::Llm("replay: lock poisoned".into()))?
            .pop_front();
        let events = match next {
            Some(Entry::ModelResponse {
                text,
                reasoning,
                finish,
                prompt_tokens,
                cached_prompt_tokens,
                completion_tokens,
                model,
                ..
            }) => {
                let mut events: Vec<Result<LlmEvent>> = vec![];
                if !reasoning.is_empty() {
                    events.push(Ok(LlmEvent::Reasoning(reasoning)));
                }
                events.push(Ok(LlmEvent::Text(text)));
                events.push(Ok(LlmEvent::Done {
                    finish,
                    prompt_tokens,
                    cached_prompt_tokens,
                    completion_tokens,
                    model,
                }));
                events
            }
            Some(Entry::ModelError { message, .. }) => vec![Err(AgentError::Llm(message))],
            _ => {
                return Err(AgentError::Llm(
                    "replay: the recording has no more model answers".into(),
                ))
            }
        };
        Ok(Box::pin(futures::stream::iter(events)))
    }

    fn name(&self) -> String {
        self.model.clone()
    }
}

/// A tool that gives the recorded results of the tool of its name: the first one recorded
/// for the same arguments (calls in one round run concurrently, so order alone would not do).
struct RecordedTool {
    name: String,
    description: String,
    parameters: Value,
    results: Mutex<Vec<(Value, ActionStatusCode, String)>>,
}

#[async_trait]
impl Tool for RecordedTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    async fn call(&self, arguments: Value) -> std::result::Result<String, String> {
        let next = self.results.lock().ok().and_then(|mut r| {
            let i = r.iter().position(|(a, _, _)| *a == arguments)?;
            Some(r.remove(i))
        });
        match next {
            Some((_, ActionStatusCode::Success, content)) => Ok(content),
            Some((_, _, content)) => Err(content),
            None => Err(format!(
                "replay: the recording has no result of `{}` for these arguments",
                self.name
            )),
        }
    }
}

/// The recording's tools, answering with the recorded results. Results the registry makes
/// itself (unknown tool, bad arguments) are made again, not taken from the recording.
pub fn recorded_tools(recording: &Recording) -> ToolRegistry {
    let mut reg = ToolRegistry::new();
    for spec in &recording.header.agent.tools {
        let f = spec.get("function").unwrap_or(spec);
        let name = f["name"].as_str().unwrap_or_default().to_string();
        let results = recording
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::ToolResult { result }
                    if result.name == name && result.status != ActionStatusCode::ArgsError =>
                {
                    Some((
                        result.arguments.clone(),
                        result.status,
                        result.content.clone(),
                    ))
                }
                _ => None,
            })
            .collect();
        reg.add(Arc::new(RecordedTool {
            description: f["description"].as_str().unwrap_or_default().to_string(),
            parameters: f
                .get("parameters")
                .cloned()
                .unwrap_or(serde_json::json!({"type": "object"})),
            name,
            results: Mutex::new(results),
        }));
    }
    reg
}

/// Where a replay first differs from its recording.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// Position among the entries after the header (0-based).
    pub index: usize,
    /// The recorded entry there (`model request 3`, …), or `end of recording`.
    pub recorded: String,
    /// The replay's entry there, or `end of replay`.
    pub replayed: String,
    /// The first differing field (`messages[2].content`) and both values.
    pub path: String,
    /// The recorded value at `path` (the whole entry where one side has ended).
    pub recorded_value: Option<Value>,
    /// The replayed value at `path` (the whole entry where one side has ended).
    pub replayed_value: Option<Value>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<Value>| match v {
            None => "(nothing)".to_string(),
            Some(Value::String(s)) => format!("{s:?}"),
            Some(v) => v.to_string(),
        };
        write!(
            f,
            "step {} ({}): {}\n  recorded: {}\n  replayed: {}",
            self.index + 1,
            self.recorded,
            if self.path.is_empty() {
                format!("the replay has {} here", self.replayed)
            } else {
                format!("at {}", self.path)
            },
            show(&self.recorded_value),
            show(&self.replayed_value)
        )
    }
}

/// Fields that say how long or how cached, not what happened.
const IGNORED: &[&str] = &["duration_ms", "cached_prompt_tokens"];

fn comparable(e: &Entry) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                for k in IGNORED {
                    o.remove(*k);
                }
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    strip(&mut v);
    v
}

/// The first path at which `a` and `b` differ, with both values.
fn first_field(
    a: &Value,
    b: &Value,
    path: String,
) -> Option<(String, Option<Value>, Option<Value>)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match y.get(k) {
                    Some(vb) => {
                        if let Some(d) = first_field(va, vb, p) {
                            return Some(d);
                        }
                    }
                    None => return Some((p, Some(va.clone()), None)),
                }
            }
            y.iter()
                .find(|(k, _)| !x.contains_key(*k))
                .map(|(k, vb)| (format!("{path}.{k}"), None, Some(vb.clone())))
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = first_field(va, vb, p) {
                            return Some(d);
                        }
                    }
                    (va, vb) => return Some((p, va.cloned(), vb.cloned())),
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some((path, Some(a.clone()), Some(b.clone()))),
    }
}

/// The first difference between a recording's entries and a replay's (both without headers).
pub fn first_difference(recorded: &[Entry], replayed: &[Entry]) -> Option<Divergence> {
    for i in 0..recorded.len().max(replayed.len()) {
        match (recorded.get(i), replayed.get(i)) {
            (Some(a), Some(b)) => {
                let (va, vb) = (comparable(a), comparable(b));
                if let Some((path, ra, rb)) = first_field(&va, &vb, String::new()) {
                    return Some(Divergence {
                        index: i,
                        recorded: a.describe(),
                        replayed: b.describe(),
                        path,
                        recorded_value: ra,
                        replayed_value: rb,
                    });
                }
            }
            (a, b) => {
                return Some(Divergence {
                    index: i,
                    recorded: a.map_or("end of recording".into(), Entry::describe),
                    replayed: b.map_or("end of replay".into(), Entry::describe),
                    path: String::new(),
                    recorded_value: a.map(comparable),
                    replayed_value: b.map(comparable),
                })
            }
        }
    }
    None
}

/// A replay's outcome: the run, its own entries, and the first divergence, if any.
#[derive(Debug, Clone)]
pub struct ReplayOutcome {
    /// The replayed run.
    pub run: ToolAgentRun,
    /// The replay's entries, after the header.
    pub entries: Vec<Entry>,
    /// The first difference from the recording; `None` when they agree.
    pub divergence: Option<Divergence>,
}

/// Runs the recording's task again on `llm` with `tools`, from the recorded session state,
/// and compares what happens with what was recorded.
pub async fn replay(
    recording: &Recording,
    llm: Arc<dyn Llm>,
    tools: ToolRegistry,
) -> Result<ReplayOutcome> {
    let header = &recording.header;
    let recorder = Recorder::in_memory();
    let mut agent = ToolAgent::new(llm, tools);
    header.agent.apply(&mut agent);
    if !header.knowledge.is_empty() {
        agent.knowledge = Some(Arc::new(FixedKnowledge(header.knowledge.clone())));
    }
    agent
        .load_state_dict(&header.session, &header.state)
        .map_err(|e| AgentError::Recording {
            path: recording.path.display().to_string(),
            message: format!("the session state in the header: {e}"),
        })?;
    recorder.attach(&mut agent);
    let run = agent
        .run(&header.task, &header.session, RunOptions::default(), None)
        .await?;
    recorder.write(Entry::End { run: run.clone() });
    let entries = recorder.entries();
    let divergence = first_difference(&recording.entries, &entries);
    Ok(ReplayOutcome {
        run,
        entries,
        divergence,
    })
}
