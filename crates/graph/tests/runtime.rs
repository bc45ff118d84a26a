//! The runtime over small graphs: I/O enforcement, node errors, subgraph budgets, streaming,
//! hooks, and sessions.

use hearth_graph::runtime::StepKind;
use hearth_graph::{
    async_trait, GraphError, IoPolicy, MemoryStore, Node, NodeConfig, NodeContract, NodeInputs,
    NodeOutputs, Registry, RequestContext, Runtime, RuntimeHooks, State, StreamEventType,
    SubgraphContract, TriggerCondition,
};
use serde_json::{json, Value};
use std::sync::Arc;

/// Writes `outputs` (or fails with `error`).
struct Fixed {
    contract: NodeContract,
    outputs: Value,
    error: Option<String>,
}

#[async_trait]
impl Node for Fixed {
    fn contract(&self) -> &NodeContract {
        &self.contract
    }
    async fn execute(&self, inputs: &NodeInputs, _c: &NodeConfig) -> Result<NodeOutputs, String> {
        // Reading an undeclared slice sees {} (or fails when strict).
        let peek = inputs.get_slice("secrets").map_err(|e| e.to_string())?;
        assert_eq!(peek, json!({}));
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut out = NodeOutputs::new();
        for (k, v) in self.outputs.as_object().cloned().unwrap_or_default() {
            out = out.set(&k, v);
        }
        Ok(out)
    }
}

fn node(
    name: &str,
    sup: &str,
    writes: &[&str],
    outputs: Value,
    when_action: Option<&str>,
) -> Arc<dyn Node> {
    let mut c = NodeContract::new(name, sup);
    c.reads = vec!["request".into()];
    c.writes = writes.iter().map(|s| s.to_string()).collect();
    let mut t = TriggerCondition {
        priority: 10,
        ..Default::default()
    };
    if let Some(a) = when_action {
        t.when.insert("request.action".into(), json!(a));
        t.priority = 50;
    }
    c.trigger_conditions = vec![t];
    Arc::new(Fixed {
        contract: c,
        outputs,
        error: None,
    })
}

fn runtime(nodes: Vec<Arc<dyn Node>>, subgraphs: Vec<SubgraphContract>) -> Runtime {
    let mut r = Registry::new();
    r.add_valid_slice("secrets");
    for n in nodes {
        r.add_node(n).unwrap();
    }
    for s in subgraphs {
        r.add_subgraph(s).unwrap();
    }
    Runtime::new(r, Arc::new(MemoryStore::default())).unwrap()
}

fn request(action: &str) -> RequestContext {
    RequestContext {
        session_id: "s".into(),
        action: Some(action.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn undeclared_writes_are_dropped_or_fail_when_strict() {
    let sneaky = node(
        "sneaky",
        "main",
        &["response"],
        json!({"response": {"response_type": "done"}, "secrets": {"x": 1}}),
        None,
    );
    let mut rt = runtime(vec![sneaky.clone()], vec![]);
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.response_type.as_deref(), Some("done"));
    assert_eq!(
        r.state.slice("secrets"),
        &Value::Null,
        "the undeclared write was dropped"
    );
    rt.policy = IoPolicy {
        strict: true,
        ..IoPolicy::default()
    };
    let err = rt.execute(request("go")).await.unwrap_err();
    assert!(matches!(err, GraphError::ContractViolation { .. }), "{err}");
    assert!(
        err.to_string().contains("sneaky")
            && err.to_string().contains("undeclared slice `secrets`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_failing_node_becomes_an_error_response() {
    let mut c = NodeContract::new("broken", "main");
    c.writes = vec!["response".into()];
    c.trigger_conditions = vec![TriggerCondition::default()];
    let broken: Arc<dyn Node> = Arc::new(Fixed {
        contract: c,
        outputs: json!({}),
        error: Some("database down".into()),
    });
    let rt = runtime(vec![broken], vec![]);
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.response_type.as_deref(), Some("error"));
    assert_eq!(r.response_message.as_deref(), Some("database down"));
    assert_eq!(r.state.error().as_deref(), Some("database down"));
}

fn call(id: &str) -> Value {
    json!({"_internal": {"next_node": format!("call_subgraph::{id}")}})
}

/// Lets the entry supervisor `main` call subgraph `id`.
fn allow_subgraph(rt: &mut Runtime, id: &str) {
    if let Some(main) = rt.supervisors.get_mut("main") {
        main.subgraphs.insert(id.into());
    }
}

fn sg(id: &str, entry: &str, nodes: &[&str]) -> SubgraphContract {
    SubgraphContract {
        subgraph_id: id.into(),
        description: String::new(),
        reads: vec![],
        writes: vec![],
        entrypoint: entry.into(),
        supervisors: vec![entry.into()],
        nodes: nodes.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test]
async fn subgraphs_run_and_return_with_a_trace() {
    let rt = {
        let mut rt = runtime(
            vec![
                node("router", "main", &["_internal"], call("inner"), Some("go")),
                node(
                    "leaf",
                    "inner_sup",
                    &["response"],
                    json!({"response": {"response_type": "done", "response_message": "from inside"}}),
                    None,
                ),
            ],
            vec![sg("inner", "inner_sup", &["leaf"])],
        );
        allow_subgraph(&mut rt, "inner");
        rt
    };
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.response_message.as_deref(), Some("from inside"));
    let kinds: Vec<(String, usize)> = r
        .trace
        .iter()
        .map(|t| (format!("{:?}", t.kind), t.depth))
        .collect();
    assert_eq!(
        kinds[..3],
        [
            ("Node".to_string(), 0),
            ("Subgraph".to_string(), 0),
            ("Node".to_string(), 1)
        ]
    );
    assert!(r.termination.is_none());
}

#[tokio::test]
async fn subgraph_budgets_and_bad_ids() {
    // Not on the supervisor's allowlist.
    let rt = runtime(
        vec![
            node("router", "main", &["_internal"], call("inner"), Some("go")),
            node(
                "leaf",
                "inner_sup",
                &["response"],
                json!({"response": {"response_type": "done"}}),
                None,
            ),
        ],
        vec![sg("inner", "inner_sup", &["leaf"])],
    );
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.termination.as_deref(), Some("allowlist_violation"));
    assert!(matches!(r.trace.last().unwrap().kind, StepKind::StopGlobal));

    // A subgraph id that does not exist.
    let mut rt = runtime(
        vec![node(
            "router",
            "main",
            &["_internal"],
            call("ghost"),
            Some("go"),
        )],
        vec![],
    );
    allow_subgraph(&mut rt, "ghost");
    // Routing to it is refused (as agent-contracts does) and the rules route instead, until
    // the supervisor's iterations run out.
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.termination.as_deref(), Some("max_iterations"));
    assert!(r
        .trace
        .iter()
        .all(|s| !matches!(s.kind, StepKind::Subgraph)));

    // A subgraph that calls itself: a cycle.
    let mut rt = runtime(
        vec![
            node("router", "main", &["_internal"], call("loop"), Some("go")),
            node("again", "loop_sup", &["_internal"], call("loop"), None),
        ],
        vec![sg("loop", "loop_sup", &["again"])],
    );
    for s in rt.supervisors.values_mut() {
        s.subgraphs.insert("loop".into());
    }
    assert_eq!(
        rt.execute(request("go"))
            .await
            .unwrap()
            .termination
            .as_deref(),
        Some("cycle_detected")
    );

    // Nested deeper than max_depth.
    let mut rt = runtime(
        vec![
            node("router", "main", &["_internal"], call("a"), Some("go")),
            node("to_b", "a_sup", &["_internal"], call("b"), None),
            node("to_c", "b_sup", &["_internal"], call("c"), None),
            node(
                "leaf",
                "c_sup",
                &["response"],
                json!({"response": {"response_type": "done"}}),
                None,
            ),
        ],
        vec![
            sg("a", "a_sup", &["to_b"]),
            sg("b", "b_sup", &["to_c"]),
            sg("c", "c_sup", &["leaf"]),
        ],
    );
    for s in rt.supervisors.values_mut() {
        s.subgraphs.extend(["a", "b", "c"].map(String::from));
    }
    assert_eq!(
        rt.execute(request("go"))
            .await
            .unwrap()
            .termination
            .as_deref(),
        Some("max_depth_exceeded")
    );

    // A node that never finishes the response: the step budget ends it.
    let mut rt = runtime(
        vec![node(
            "busy",
            "main",
            &["response"],
            json!({"response": {"n": 1}}),
            None,
        )],
        vec![],
    );
    rt.supervisors.get_mut("main").unwrap().max_iterations = 1000;
    rt.budgets.max_steps = 5;
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(
        (r.termination.as_deref(), r.steps),
        (Some("max_steps_exceeded"), 5)
    );
}

#[tokio::test]
async fn streaming_events_serialise_as_sse() {
    let rt = runtime(
        vec![node(
            "hello",
            "main",
            &["response"],
            json!({"response": {"response_type": "done", "response_message": "hi"}}),
            None,
        )],
        vec![],
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    rt.stream(request("go"), &tx).await.unwrap();
    drop(tx);
    let mut kinds = vec![];
    let mut last_sse = String::new();
    while let Some(e) = rx.recv().await {
        if e.kind == StreamEventType::NodeStart {
            // Each node's status line.
            assert_eq!(e.data["message"], json!("Executing hello..."));
        }
        kinds.push(e.kind);
        last_sse = e.to_sse();
    }
    assert_eq!(
        kinds,
        [
            StreamEventType::Progress,
            StreamEventType::NodeStart,
            StreamEventType::NodeEnd,
            StreamEventType::Data,
            StreamEventType::Progress,
            StreamEventType::Done
        ]
    );
    assert!(
        last_sse.starts_with("event: done\ndata: {") && last_sse.ends_with("\n\n"),
        "{last_sse}"
    );
}

struct CountHooks(std::sync::atomic::AtomicUsize);

#[async_trait]
impl RuntimeHooks for CountHooks {
    async fn prepare_state(&self, mut state: State, _r: &RequestContext) -> State {
        state.set("_internal", "active_mode", "testing".into());
        state
    }
    async fn after_execution(&self, state: &State, _r: &hearth_graph::ExecutionResult) {
        assert_eq!(state.active_mode().as_deref(), Some("testing"));
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn hooks_and_session_restore() {
    let mut rt = runtime(
        vec![node(
            "hello",
            "main",
            &["response"],
            json!({"response": {"response_type": "done"}}),
            None,
        )],
        vec![],
    );
    let hooks = Arc::new(CountHooks(Default::default()));
    rt.hooks.push(hooks.clone());
    rt.execute(request("go")).await.unwrap();
    let r = rt
        .execute(RequestContext {
            resume_session: true,
            ..request("go")
        })
        .await
        .unwrap();
    assert_eq!(r.state.turn_count(), 2, "_internal was restored");
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(
        r.state.turn_count(),
        1,
        "without resume the session starts over"
    );
    assert_eq!(hooks.0.load(std::sync::atomic::Ordering::SeqCst), 3);
}

struct UsesCatalog(NodeContract);

#[async_trait]
impl Node for UsesCatalog {
    fn contract(&self) -> &NodeContract {
        &self.0
    }
    async fn execute(&self, _i: &NodeInputs, config: &NodeConfig) -> Result<NodeOutputs, String> {
        let catalog = config
            .service::<Vec<String>>("catalog")
            .ok_or("no catalog service")?;
        Ok(NodeOutputs::new().set(
            "response",
            json!({"response_type": "done", "response_data": *catalog}),
        ))
    }
}

#[tokio::test]
async fn services_are_injected_by_name() {
    let mut c = NodeContract::new("lister", "main");
    c.writes = vec!["response".into()];
    c.services = vec!["catalog".into()];
    c.trigger_conditions = vec![TriggerCondition::default()];
    let mut rt = runtime(vec![Arc::new(UsesCatalog(c))], vec![]);
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(
        r.response_message.as_deref(),
        Some("no catalog service"),
        "missing service → error response"
    );
    rt.config
        .services
        .insert("catalog".into(), Arc::new(vec!["scarf".to_string()]));
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.response_data, Some(json!(["scarf"])));
}

/// Budgets per request: the request's over `_internal.budgets` (a resumed session's, numbers
/// or strings as agent-contracts reads them) over the runtime's, written back normalised; the
/// supervisor's decision and iteration, the decision trace (agent-contracts' items) and the
/// termination reason are saved with the session.
#[tokio::test]
async fn budgets_come_per_request_and_the_trace_is_saved_with_the_session() {
    let store = Arc::new(MemoryStore::default());
    let mut r = Registry::new();
    r.add_valid_slice("secrets");
    r.add_node(node(
        "busy",
        "main",
        &["response"],
        json!({"response": {"n": 1}}),
        None,
    ))
    .unwrap();
    let mut rt = Runtime::new(r, store.clone()).unwrap();
    rt.supervisors.get_mut("main").unwrap().max_iterations = 1000;
    let saved = |store: &MemoryStore| {
        use hearth_graph::StateStore;
        store.load("s").unwrap().unwrap_or_default()["_internal"].clone()
    };

    // The runtime's 40 steps, cut to 3 by the request.
    let mut req = request("go");
    req.budgets = Some(hearth_graph::runtime::Budgets {
        max_steps: 3,
        ..Default::default()
    });
    let res = rt.execute(req).await.unwrap();
    assert_eq!(
        (res.termination.as_deref(), res.steps),
        (Some("max_steps_exceeded"), 3)
    );
    let internal = saved(&store);
    assert_eq!(
        internal["budgets"],
        json!({"max_depth": 2, "max_steps": 3, "max_reentry": 2})
    );
    assert_eq!(internal["decision"], json!("busy"));
    assert_eq!(internal["main_iteration"], json!(3));
    assert_eq!(internal["termination_reason"], json!("max_steps_exceeded"));
    let trace = internal["decision_trace"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(trace.len(), 4, "{trace:?}");
    assert_eq!(trace[0]["decision_kind"], json!("NODE"));
    assert_eq!(trace[0]["target"], json!("busy"));
    assert_eq!(trace[3]["decision_kind"], json!("STOP_GLOBAL"));
    assert_eq!(trace[3]["termination_reason"], json!("max_steps_exceeded"));

    // A resumed session whose `_internal.budgets` says 5 (as a string): 5 steps, and the trace
    // grows by this run's.
    use hearth_graph::StateStore;
    let mut slices = store.load("s").unwrap().unwrap_or_default();
    slices["_internal"]["budgets"] = json!({"max_steps": "5"});
    store.save("s", &slices).unwrap();
    let mut req = request("go");
    req.resume_session = true;
    let res = rt.execute(req).await.unwrap();
    assert_eq!(
        (res.termination.as_deref(), res.steps),
        (Some("max_steps_exceeded"), 5)
    );
    let internal = saved(&store);
    assert_eq!(internal["budgets"]["max_steps"], json!(5));
    assert_eq!(
        internal["decision_trace"].as_array().map(Vec::len),
        Some(4 + 6)
    );
    // Without either, the runtime's.
    let res = rt.execute(request("go")).await.unwrap();
    assert_eq!(res.steps, 40);
}

/// A subgraph whose rules match nothing returns at once (its supervisor does not fall back to
/// the parent's last node); entered again and again, the third entry is over `max_reentry`.
#[tokio::test]
async fn a_subgraph_entered_too_often_ends_the_run() {
    let mut rt = runtime(
        vec![
            node("router", "main", &["_internal"], call("inner"), Some("go")),
            node(
                "never",
                "inner_sup",
                &["response"],
                json!({"response": {"n": 1}}),
                Some("zzz"),
            ),
        ],
        vec![sg("inner", "inner_sup", &["never"])],
    );
    allow_subgraph(&mut rt, "inner");
    let r = rt.execute(request("go")).await.unwrap();
    assert_eq!(r.termination.as_deref(), Some("max_reentry_exceeded"));
    // Inside, only the supervisor's `done`: no node of the parent ran there.
    assert!(r
        .trace
        .iter()
        .filter(|t| t.depth == 1)
        .all(|t| matches!(t.kind, StepKind::StopLocal)));
    let entered = r
        .trace
        .iter()
        .filter(|t| matches!(t.kind, StepKind::Subgraph))
        .count();
    assert_eq!(entered, 3, "two entries, the third refused");
}

/// A node that declares it needs an LLM or a service the runtime lacks is named.
#[test]
fn missing_llms_and_services_are_named() {
    let mut c = NodeContract::new("writer", "main");
    c.reads = vec!["request".into()];
    c.writes = vec!["response".into()];
    c.requires_llm = true;
    c.services = vec!["db".into()];
    c.trigger_conditions = vec![TriggerCondition::default()];
    let mut rt = runtime(
        vec![Arc::new(Fixed {
            contract: c,
            outputs: json!({}),
            error: None,
        })],
        vec![],
    );
    let missing = rt.missing_dependencies();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].contains("writer") && missing[0].contains("LLM"));
    assert!(missing[1].contains("`db`"));
    rt.config.services.insert("db".into(), Arc::new(1u8));
    rt.config.llm = Some(Arc::new(hearth_agent::ScriptedLlm::new(["x"])));
    assert!(rt.missing_dependencies().is_empty());
}

/// A terminal node ends the whole run after it, whatever its response and whatever would
/// match next.
#[tokio::test]
async fn a_terminal_node_ends_the_run() {
    let mut r = Registry::new();
    r.add_valid_slice("secrets");
    let mut c = NodeContract::new("last", "main");
    c.reads = vec!["request".into()];
    c.writes = vec!["response".into()];
    c.is_terminal = true;
    c.trigger_conditions = vec![TriggerCondition {
        priority: 10,
        ..Default::default()
    }];
    r.add_node(Arc::new(Fixed {
        contract: c,
        outputs: json!({"response": {"n": 1}}),
        error: None,
    }))
    .unwrap();
    let rt = Runtime::new(r, Arc::new(MemoryStore::default())).unwrap();
    let res = rt.execute(request("go")).await.unwrap();
    assert_eq!((res.termination.as_deref(), res.steps), (None, 1));
    let kinds: Vec<String> = res.trace.iter().map(|t| format!("{:?}", t.kind)).collect();
    assert_eq!(kinds, ["Node", "StopGlobal"]);
}

/// A call's session, user and tenant.
type Caller = (String, Option<String>, Option<String>);

/// Remembers who each call was for.
struct WhoAsks(std::sync::Mutex<Vec<Caller>>);

#[async_trait]
impl hearth_agent::Tool for WhoAsks {
    fn name(&self) -> &str {
        "who"
    }
    fn description(&self) -> &str {
        "Says who is asking."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _args: Value) -> Result<String, String> {
        Err("called without a context".into())
    }
    async fn call_in(
        &self,
        _args: Value,
        context: &hearth_agent::tool_context::ToolContext,
    ) -> Result<String, String> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push((
                context.session.clone(),
                context.user.clone(),
                context.tenant.clone(),
            ));
        }
        Ok("you".into())
    }
}

#[tokio::test]
async fn an_agent_nodes_tools_see_the_requests_user_and_tenant() {
    use hearth_agent::{ScriptedLlm, ToolAgent, ToolRegistry};
    let who = Arc::new(WhoAsks(Default::default()));
    let mut tools = ToolRegistry::new();
    tools.add(who.clone());
    let llm = ScriptedLlm::new([
        "<tool_call>\n{\"name\": \"who\", \"arguments\": {}}\n</tool_call>",
        "It is you.",
    ]);
    let agent = ToolAgent::new(Arc::new(llm), tools);
    let mut c = NodeContract::new("helper", "main");
    c.reads = vec!["request".into()];
    c.writes = vec!["response".into()];
    c.trigger_conditions = vec![TriggerCondition::default()];
    let node = hearth_graph::AgentNode {
        contract: c,
        agent: Arc::new(agent),
    };
    let mut rt = runtime(vec![Arc::new(node)], vec![]);
    // The agent's answer ends the run.
    if let Some(sup) = rt.supervisors.get_mut("main") {
        sup.terminal_response_types.insert("answer".into());
    }
    let r = rt
        .execute(RequestContext {
            message: Some("who am I?".into()),
            user: Some("ana".into()),
            tenant: Some("acme".into()),
            ..request("ask")
        })
        .await
        .unwrap();
    assert_eq!(
        r.state.get("response", "response_message"),
        Some(&json!("It is you."))
    );
    let seen = who.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(
            "s".to_string(),
            Some("ana".to_string()),
            Some("acme".to_string())
        )]
    );
}
