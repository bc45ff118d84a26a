//! Running a graph for one request: create the state, restore the session's slices, let hooks
//! prepare it, walk supervisors and nodes (and subgraphs, within budgets), build the result,
//! persist the session, and report progress as server-sent events if asked. Its parts: nodes
//! ([`node`]), the registry of their contracts ([`registry`]), supervisors ([`supervisor`]),
//! where sessions live between requests ([`store`]).

pub mod node;
pub mod registry;
pub mod store;
pub mod supervisor;

use crate::error::{GraphError, Result};
use crate::runtime::node::{NodeConfig, NodeInputs};
use crate::runtime::registry::Registry;
use crate::runtime::store::StateStore;
use crate::runtime::supervisor::{Decision, DecisionTrace, Supervisor};
use crate::state::{IoPolicy, State, INTERNAL, REQUEST, RESPONSE};
use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// One request to the graph; its fields become the `request` slice.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct RequestContext {
    /// The session; its slices are saved after the run and restored on resume.
    pub session_id: String,
    /// What the user does, e.g. `answer` to reply to a question.
    pub action: Option<String>,
    /// Parameters of the action.
    pub params: Option<Value>,
    /// The user's text.
    pub message: Option<String>,
    /// An attached image.
    pub image: Option<String>,
    /// Restore the session's saved slices first.
    pub resume_session: bool,
    /// This request's budgets, over `_internal.budgets` and the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Budgets>,
    /// The user the request is for; agent nodes pass it to their tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The tenant whose data the request's tools may touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// What a trace step did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepKind {
    /// Ran a node.
    Node,
    /// Entered (or was refused) a subgraph.
    Subgraph,
    /// The supervisor decided `done`; its caller goes on.
    StopLocal,
    /// The whole run ended (a terminal node, a budget or a refused subgraph).
    StopGlobal,
    /// The supervisor ran out of iterations.
    Fallback,
}

/// One step of a run, for the trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceStep {
    /// Number of decisions so far in the run.
    pub step: usize,
    /// Subgraph nesting depth; 0 is the entry supervisor.
    pub depth: usize,
    /// The deciding supervisor.
    pub supervisor: String,
    /// What happened.
    pub kind: StepKind,
    /// The node or subgraph, if any.
    pub target: Option<String>,
    /// Why the supervisor chose it; `None` for stops.
    pub decision: Option<DecisionTrace>,
}

/// What a run produced: the response, the trace and the final state.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionResult {
    /// The request's session.
    pub session_id: String,
    /// `response.response_type` at the end.
    pub response_type: Option<String>,
    /// `response.response_message` at the end.
    pub response_message: Option<String>,
    /// `response.response_data` at the end.
    pub response_data: Option<Value>,
    /// Supervisor decisions taken.
    pub steps: usize,
    /// Why the run ended early: max_depth_exceeded, max_steps_exceeded, cycle_detected,
    /// allowlist_violation, max_iterations.
    pub termination: Option<String>,
    /// Every step, in order.
    pub trace: Vec<TraceStep>,
    /// The state after the run (not serialised).
    #[serde(skip)]
    pub state: State,
}

/// Kinds of progress event a streamed run reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamEventType {
    /// A node starts.
    NodeStart,
    /// A node finished.
    NodeEnd,
    /// A status message, e.g. entering a subgraph.
    Status,
    /// A step began (`step`, `max_steps`).
    Progress,
    /// The non-empty `response` after a node ran.
    Data,
    /// A node or the run failed.
    Error,
    /// The run finished; the last event unless the run failed.
    Done,
}

/// A progress event of a streamed run.
#[derive(Debug, Clone, Serialize)]
pub struct StreamEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: StreamEventType,
    /// The node it concerns, if any.
    pub node_name: Option<String>,
    /// Details, a JSON object.
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

/// Application code around a run: prepare the state before it, observe the result after.
#[async_trait]
pub trait RuntimeHooks: Send + Sync {
    /// Adjusts the state before the first supervisor runs; by default unchanged.
    async fn prepare_state(&self, state: State, _request: &RequestContext) -> State {
        state
    }
    /// Called after the session is saved; by default does nothing.
    async fn after_execution(&self, _state: &State, _result: &ExecutionResult) {}
}

/// Subgraph budgets (agent-contracts' defaults). A run takes the request's, else those in
/// `_internal.budgets` (each field that is there), else the runtime's, and writes the ones it
/// ran under back to `_internal.budgets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Budgets {
    /// Deepest subgraph nesting.
    pub max_depth: usize,
    /// Most supervisor decisions in one run.
    pub max_steps: usize,
    /// Most times one subgraph may be entered in one run.
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

impl Budgets {
    /// These budgets with each field `value` (`_internal.budgets`) holds in place of its own,
    /// as agent-contracts reads them: a number, or a string of one.
    pub fn overridden_by(self, value: Option<&Value>) -> Self {
        let field = |name: &str, own: usize| -> usize {
            let v = value.and_then(|v| v.get(name));
            v.and_then(Value::as_u64)
                .or_else(|| {
                    v.and_then(Value::as_str)
                        .and_then(|s| s.trim().parse().ok())
                })
                .map_or(own, |n| n as usize)
        };
        Self {
            max_depth: field("max_depth", self.max_depth),
            max_steps: field("max_steps", self.max_steps),
            max_reentry: field("max_reentry", self.max_reentry),
        }
    }
}

/// The most entries `_internal.decision_trace` keeps (the latest), across a session's runs.
const TRACE_KEPT: usize = 200;

/// Runs a registry's graph for requests, keeping sessions in a store.
pub struct Runtime {
    /// Contracts and node implementations.
    pub registry: Registry,
    /// Supervisors by name.
    pub supervisors: HashMap<String, Supervisor>,
    /// The supervisor runs start at (default: the first one registered).
    pub entry: String,
    /// Where sessions are saved.
    pub store: Arc<dyn StateStore>,
    /// Slices restored on resume (default `_internal`).
    pub restore_slices: Vec<String>,
    /// What undeclared reads and writes do.
    pub policy: IoPolicy,
    /// Called before and after each run, in order.
    pub hooks: Vec<Arc<dyn RuntimeHooks>>,
    /// Services and LLM passed to every node.
    pub config: NodeConfig,
    /// Subgraph and step limits.
    pub budgets: Budgets,
    /// Whether the missing dependencies were reported (once per runtime).
    reported: std::sync::atomic::AtomicBool,
}

enum Flow {
    /// The supervisor finished; the caller goes on.
    Local,
    /// The whole run ends.
    Global(Option<String>),
}

struct Run<'a> {
    budgets: Budgets,
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
    pub fn new(registry: Registry, store: Arc<dyn StateStore>) -> Result<Self> {
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
            reported: Default::default(),
        })
    }

    /// What the nodes declare they need and `config` lacks: an LLM (`requires_llm`) or a
    /// service, one line per node and need. The first run logs them as warnings (as
    /// agent-contracts does when a node first runs).
    pub fn missing_dependencies(&self) -> Vec<String> {
        let mut out = vec![];
        for c in self.registry.contracts() {
            let name = &c.name;
            if c.requires_llm && self.config.llm.is_none() {
                out.push(format!(
                    "node `{name}` requires an LLM, and none is configured"
                ));
            }
            for s in c
                .services
                .iter()
                .filter(|s| !self.config.services.contains_key(*s))
            {
                out.push(format!(
                    "node `{name}` requires service `{s}`, which is not provided"
                ));
            }
        }
        out
    }

    /// Runs one request to the end, without events.
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
        if !self
            .reported
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            for m in self.missing_dependencies() {
                tracing::warn!("{m}");
            }
        }
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
            ("user", request.user.clone().map(Value::from)),
            ("tenant", request.tenant.clone().map(Value::from)),
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
        let budgets = request
            .budgets
            .unwrap_or_else(|| self.budgets.overridden_by(state.get(INTERNAL, "budgets")));
        state.set(INTERNAL, "budgets", json!(budgets));
        let mut run = Run {
            budgets,
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
        record_trace(&mut state, &run.trace, termination.as_deref());
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
            let iteration_key = format!("{name}_iteration");
            for iteration in 0..sup.max_iterations {
                if run.steps >= run.budgets.max_steps {
                    self.stop(run, depth, name, true);
                    return Ok(Flow::Global(Some("max_steps_exceeded".into())));
                }
                run.steps += 1;
                run.emit(
                    StreamEventType::Progress,
                    None,
                    json!({"step": run.steps, "max_steps": run.budgets.max_steps}),
                );
                let trace = sup
                    .decide_with_trace(state, &self.registry, previous.as_deref())
                    .await;
                // As agent-contracts' supervisor writes them: the last node decided (which
                // a supervisor falls back to when no rule matches, a resumed session's
                // too) or done. A subgraph call is not written: the subgraph's supervisor
                // would fall back to calling itself.
                if !matches!(trace.decision, Decision::Subgraph(_)) {
                    state.set(INTERNAL, "decision", json!(trace.selected_node));
                }
                state.set(INTERNAL, &iteration_key, json!(iteration + 1));
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
                        } else if depth + 1 > run.budgets.max_depth {
                            Some("max_depth_exceeded")
                        } else if run.entries.get(&id).copied().unwrap_or(0)
                            >= run.budgets.max_reentry
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
                        // The subgraph's supervisor starts without a last decision (it would
                        // fall back to the parent's node); the parent's is back after it.
                        let parent = state.get(INTERNAL, "decision").cloned();
                        state.set(INTERNAL, "decision", Value::Null);
                        let flow = self
                            .supervise(&sg.entrypoint.clone(), depth + 1, state, run)
                            .await?;
                        state.set(INTERNAL, "decision", parent.unwrap_or(Value::Null));
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
            state.set(INTERNAL, "decision", json!("done"));
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
        // A status line per node, as agent-contracts' streaming gives: its description, else
        // what runs.
        let message = match contract.description.trim() {
            "" => format!("Executing {name}..."),
            d => d.to_string(),
        };
        run.emit(
            StreamEventType::NodeStart,
            Some(name),
            json!({ "message": message }),
        );
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

/// The run's steps appended to `_internal.decision_trace` (agent-contracts' items: step,
/// depth, supervisor, decision_kind, target, reason, termination_reason; the latest
/// [`TRACE_KEPT`] kept) and its termination in `_internal.termination_reason`, so that both
/// are saved with the session.
fn record_trace(state: &mut State, trace: &[TraceStep], termination: Option<&str>) {
    let mut items = match state.get(INTERNAL, "decision_trace") {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![],
    };
    let last_stop = trace
        .iter()
        .rposition(|t| matches!(t.kind, StepKind::StopGlobal | StepKind::Fallback));
    for (i, t) in trace.iter().enumerate() {
        let kind = serde_json::to_value(&t.kind).unwrap_or(Value::Null);
        items.push(json!({
            "step": t.step,
            "depth": t.depth,
            "supervisor": t.supervisor,
            "decision_kind": kind,
            "target": t.target,
            "reason": t.decision.as_ref().and_then(|d| d.llm_reasoning.clone()),
            "termination_reason": if Some(i) == last_stop { termination } else { None },
        }));
    }
    let from = items.len().saturating_sub(TRACE_KEPT);
    state.set(
        INTERNAL,
        "decision_trace",
        Value::Array(items.split_off(from)),
    );
    state.set(INTERNAL, "termination_reason", json!(termination));
}
