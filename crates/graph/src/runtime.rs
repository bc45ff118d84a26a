//! Running a graph for one request: create the state, restore the session's slices, let hooks
//! prepare it, walk supervisors and nodes (and subgraphs, within budgets), build the result,
//! persist the session, and report progress as server-sent events if asked.

use crate::error::{GraphError, Result};
use crate::node::{NodeConfig, NodeInputs};
use crate::registry::Registry;
use crate::state::{IoPolicy, State, INTERNAL, REQUEST, RESPONSE};
use crate::store::SessionStore;
use crate::supervisor::{Decision, DecisionTrace, Supervisor};
use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct RequestContext {
    pub session_id: String,
    pub action: Option<String>,
    pub params: Option<Value>,
    pub message: Option<String>,
    pub image: Option<String>,
    /// Restore the session's saved slices first.
    pub resume_session: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepKind {
    Node,
    Subgraph,
    StopLocal,
    StopGlobal,
    Fallback,
}

#[derive(Debug, Clone, Serialize)]
pub struct TraceStep {
    pub step: usize,
    pub depth: usize,
    pub supervisor: String,
    pub kind: StepKind,
    pub target: Option<String>,
    pub decision: Option<DecisionTrace>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecutionResult {
    pub session_id: String,
    pub response_type: Option<String>,
    pub response_message: Option<String>,
    pub response_data: Option<Value>,
    pub steps: usize,
    /// Why the run ended early: max_depth_exceeded, max_steps_exceeded, cycle_detected,
    /// allowlist_violation, max_iterations.
    pub termination: Option<String>,
    pub trace: Vec<TraceStep>,
    #[serde(skip)]
    pub state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamEventType {
    NodeStart,
    NodeEnd,
    Status,
    Progress,
    Data,
    Error,
    Done,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamEvent {
    #[serde(rename = "type")]
    pub kind: StreamEventType,
    pub node_name: Option<String>,
    pub data: Value,
}

impl StreamEvent {
    /// `event: node_start\ndata: {...}\n\n`.
    pub fn to_sse(&self) -> String {
        let name = serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_lowercase))
            .unwrap_or_default();
        format!(
            "event: {name}\ndata: {}\n\n",
            serde_json::to_string(self).unwrap_or_default()
        )
    }
}

#[async_trait]
pub trait RuntimeHooks: Send + Sync {
    async fn prepare_state(&self, state: State, _request: &RequestContext) -> State {
        state
    }
    async fn after_execution(&self, _state: &State, _result: &ExecutionResult) {}
}

/// Subgraph budgets (agent-contracts' defaults).
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    pub max_depth: usize,
    pub max_steps: usize,
    pub max_reentry: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            max_depth: 2,
            max_steps: 40,
            max_reentry: 2,
        }
    }
}

pub struct Runtime {
    pub registry: Registry,
    pub supervisors: HashMap<String, Supervisor>,
    pub entry: String,
    pub store: Arc<dyn SessionStore>,
    /// Slices restored on resume (default `_internal`).
    pub restore_slices: Vec<String>,
    pub policy: IoPolicy,
    pub hooks: Vec<Arc<dyn RuntimeHooks>>,
    pub config: NodeConfig,
    pub budgets: Budgets,
}

enum Flow {
    /// The supervisor finished; the caller goes on.
    Local,
    /// The whole run ends.
    Global(Option<String>),
}

struct Run<'a> {
    steps: usize,
    stack: Vec<String>,
    entries: HashMap<String, usize>,
    trace: Vec<TraceStep>,
    events: Option<&'a UnboundedSender<StreamEvent>>,
}

impl Run<'_> {
    fn emit(&self, kind: StreamEventType, node: Option<&str>, data: Value) {
        if let Some(tx) = self.events {
            let _ = tx.send(StreamEvent {
                kind,
                node_name: node.map(str::to_owned),
                data,
            });
        }
    }
}

impl Runtime {
    /// A runtime over `registry`, with a supervisor per name its contracts use.
    pub fn new(registry: Registry, store: Arc<dyn SessionStore>) -> Result<Self> {
        registry.check_runnable()?;
        let mut supervisors = HashMap::new();
        for s in registry.supervisors() {
            supervisors.insert(s.clone(), Supervisor::hearth(&s));
        }
        for sg in registry.subgraphs() {
            supervisors
                .entry(sg.entrypoint.clone())
                .or_insert_with(|| Supervisor::hearth(&sg.entrypoint));
        }
        let entry = registry
            .supervisors()
            .first()
            .cloned()
            .unwrap_or_else(|| "main".into());
        Ok(Self {
            registry,
            supervisors,
            entry,
            store,
            restore_slices: vec![INTERNAL.into()],
            policy: IoPolicy::default(),
            hooks: vec![],
            config: NodeConfig::default(),
            budgets: Budgets::default(),
        })
    }

    pub async fn execute(&self, request: RequestContext) -> Result<ExecutionResult> {
        self.run(request, None).await
    }

    /// Runs and reports events; the last is DONE (or ERROR).
    pub async fn stream(
        &self,
        request: RequestContext,
        events: &UnboundedSender<StreamEvent>,
    ) -> Result<ExecutionResult> {
        let result = self.run(request, Some(events)).await;
        match &result {
            Ok(r) => {
                let _ = events.send(StreamEvent {
                    kind: StreamEventType::Done,
                    node_name: None,
                    data: json!({"response_type": r.response_type, "response_message": r.response_message, "steps": r.steps, "termination": r.termination}),
                });
            }
            Err(e) => {
                let _ = events.send(StreamEvent {
                    kind: StreamEventType::Error,
                    node_name: None,
                    data: json!({"message": e.to_string()}),
                });
            }
        }
        result
    }

    async fn run(
        &self,
        request: RequestContext,
        events: Option<&UnboundedSender<StreamEvent>>,
    ) -> Result<ExecutionResult> {
        let mut state = State::new();
        if request.resume_session {
            if let Some(saved) = self.store.load(&request.session_id)? {
                for s in &self.restore_slices {
                    if let Some(v) = saved.get(s) {
                        state.slices.insert(s.clone(), v.clone());
                    }
                }
            }
        }
        let req = state.slice_mut(REQUEST);
        req.insert("session_id".into(), request.session_id.clone().into());
        for (k, v) in [
            ("action", request.action.clone().map(Value::from)),
            ("params", request.params.clone()),
            ("message", request.message.clone().map(Value::from)),
            ("image", request.image.clone().map(Value::from)),
        ] {
            if let Some(v) = v {
                req.insert(k.into(), v);
            }
        }
        state.reset_response();
        state.increment_turn();
        for h in &self.hooks {
            state = h.prepare_state(state, &request).await;
        }
        let mut run = Run {
            steps: 0,
            stack: vec![],
            entries: HashMap::new(),
            trace: vec![],
            events,
        };
        let termination = match self.supervise(&self.entry, 0, &mut state, &mut run).await? {
            Flow::Local | Flow::Global(None) => None,
            Flow::Global(Some(reason)) => Some(reason),
        };
        let result = ExecutionResult {
            session_id: request.session_id.clone(),
            response_type: state.response_type(),
            response_message: state.response_message(),
            response_data: state.response_data().cloned(),
            steps: run.steps,
            termination,
            trace: run.trace,
            state: state.clone(),
        };
        self.store.save(&request.session_id, &state.slices)?;
        for h in &self.hooks {
            h.after_execution(&state, &result).await;
        }
        Ok(result)
    }

    fn supervise<'a>(
        &'a self,
        name: &'a str,
        depth: usize,
        state: &'a mut State,
        run: &'a mut Run<'_>,
    ) -> futures::future::BoxFuture<'a, Result<Flow>> {
        Box::pin(async move {
            let sup = self.supervisors.get(name).ok_or_else(|| {
                GraphError::Invalid(format!("supervisor `{name}` does not exist"))
            })?;
            let mut previous: Option<String> = None;
            for _ in 0..sup.max_iterations {
                if run.steps >= self.budgets.max_steps {
                    self.stop(run, depth, name, true);
                    return Ok(Flow::Global(Some("max_steps_exceeded".into())));
                }
                run.steps += 1;
                run.emit(
                    StreamEventType::Progress,
                    None,
                    json!({"step": run.steps, "max_steps": self.budgets.max_steps}),
                );
                let trace = sup
                    .decide_with_trace(state, &self.registry, previous.as_deref())
                    .await;
                match trace.decision.clone() {
                    Decision::Done => {
                        run.trace.push(TraceStep {
                            step: run.steps,
                            depth,
                            supervisor: name.into(),
                            kind: StepKind::StopLocal,
                            target: None,
                            decision: Some(trace),
                        });
                        return Ok(Flow::Local);
                    }
                    Decision::Node(node) => {
                        state.set_next_node(None);
                        run.trace.push(TraceStep {
                            step: run.steps,
                            depth,
                            supervisor: name.into(),
                            kind: StepKind::Node,
                            target: Some(node.clone()),
                            decision: Some(trace),
                        });
                        self.run_node(&node, state, run).await?;
                        let terminal = self.registry.contract(&node).is_some_and(|c| c.is_terminal);
                        previous = Some(node);
                        if terminal {
                            self.stop(run, depth, name, true);
                            return Ok(Flow::Global(None));
                        }
                    }
                    Decision::Subgraph(id) => {
                        state.set_next_node(None);
                        let sg = self.registry.subgraph(&id).ok_or_else(|| {
                            GraphError::Invalid(format!("subgraph `{id}` does not exist"))
                        })?;
                        let reason = if !sup.subgraphs.contains(&id) {
                            Some("allowlist_violation")
                        } else if run.stack.contains(&id) {
                            Some("cycle_detected")
                        } else if depth + 1 > self.budgets.max_depth {
                            Some("max_depth_exceeded")
                        } else if run.entries.get(&id).copied().unwrap_or(0)
                            >= self.budgets.max_reentry
                        {
                            Some("max_reentry_exceeded")
                        } else {
                            None
                        };
                        run.trace.push(TraceStep {
                            step: run.steps,
                            depth,
                            supervisor: name.into(),
                            kind: StepKind::Subgraph,
                            target: Some(id.clone()),
                            decision: Some(trace),
                        });
                        if let Some(r) = reason {
                            self.stop(run, depth, name, true);
                            return Ok(Flow::Global(Some(r.into())));
                        }
                        *run.entries.entry(id.clone()).or_default() += 1;
                        run.stack.push(id.clone());
                        run.emit(
                            StreamEventType::Status,
                            None,
                            json!({"message": format!("entering subgraph {id}")}),
                        );
                        let flow = self
                            .supervise(&sg.entrypoint.clone(), depth + 1, state, run)
                            .await?;
                        run.stack.pop();
                        if let Flow::Global(r) = flow {
                            return Ok(Flow::Global(r));
                        }
                        // Back in the parent: a terminal response of the child ends here too.
                    }
                }
            }
            run.trace.push(TraceStep {
                step: run.steps,
                depth,
                supervisor: name.into(),
                kind: StepKind::Fallback,
                target: None,
                decision: None,
            });
            Ok(Flow::Global(Some("max_iterations".into())))
        })
    }

    fn stop(&self, run: &mut Run<'_>, depth: usize, supervisor: &str, global: bool) {
        let kind = if global {
            StepKind::StopGlobal
        } else {
            StepKind::StopLocal
        };
        run.trace.push(TraceStep {
            step: run.steps,
            depth,
            supervisor: supervisor.into(),
            kind,
            target: None,
            decision: None,
        });
    }

    async fn run_node(&self, name: &str, state: &mut State, run: &mut Run<'_>) -> Result<()> {
        let node = self
            .registry
            .node(name)
            .ok_or_else(|| GraphError::Invalid(format!("node `{name}` has no implementation")))?
            .clone();
        let contract = node.contract().clone();
        run.emit(StreamEventType::NodeStart, Some(name), json!({}));
        let inputs = NodeInputs::new(&contract, state, self.policy);
        let outcome = node.execute(&inputs, &self.config).await;
        if let Some(v) = inputs.violation() {
            return Err(v);
        }
        match outcome {
            Ok(outputs) => {
                outputs.apply(&contract, state, self.policy)?;
                state.clear_error();
            }
            Err(message) => {
                tracing::warn!("node `{name}` failed: {message}");
                state.set_error(&message);
                state.merge(
                    RESPONSE,
                    serde_json::from_value(
                        json!({"response_type": "error", "response_message": message}),
                    )
                    .unwrap_or_default(),
                );
                run.emit(
                    StreamEventType::Error,
                    Some(name),
                    json!({"message": message}),
                );
            }
        }
        run.emit(StreamEventType::NodeEnd, Some(name), json!({}));
        if let Some(r) = state
            .slices
            .get(RESPONSE)
            .filter(|r| r.as_object().is_some_and(|o| !o.is_empty()))
        {
            run.emit(StreamEventType::Data, Some(name), r.clone());
        }
        Ok(())
    }
}
