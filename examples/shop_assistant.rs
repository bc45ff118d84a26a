//! A shop assistant as a contract graph: a search node, an answer node (an LLM agent), an
//! interactive questioner that finds out budget and colour before recommending, an
//! LLM-routed supervisor, and a `fashion` subgraph. Sessions live in a SQLite file, so a
//! conversation survives a restart.
//!
//!     cargo run --example shop_assistant -- --db /tmp/shop.db recommend
//!     cargo run --example shop_assistant -- --db /tmp/shop.db --resume answer 80
//!     cargo run --example shop_assistant -- --db /tmp/shop.db --resume answer blue
//!     cargo run --example shop_assistant -- --model "$(scripts/fetch-test-models.sh)" ask "Do you ship to Japan?"
//!
//! Without `--model` the LLM is scripted (for tests); with it, Hearth's engine runs in process.

use hearth_agent::llm::LlmStream;
use hearth_agent::{Llm, LlmAgent, LlmRequest, LocalLlm, ScriptedLlm};
use hearth_engine::{DeviceSpec, Engine, LoadOptions};
use hearth_graph::{
    async_trait, AgentNode, Interactive, InteractiveNode, Node, NodeConfig, NodeContract,
    NodeInputs, NodeOutputs, Registry, RequestContext, Runtime, SqliteStore, SubgraphContract,
    TriggerCondition,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

const CATALOG: &[(&str, &str, u64)] = &[
    ("blue linen shirt", "blue", 45),
    ("red wool scarf", "red", 30),
    ("blue denim jacket", "blue", 95),
    ("black leather boots", "black", 140),
];

fn trigger(priority: i64, when: Value, hint: &str) -> TriggerCondition {
    TriggerCondition {
        priority,
        when: serde_json::from_value(when).unwrap_or_default(),
        when_not: Default::default(),
        llm_hint: Some(hint.into()),
    }
}

fn contract(
    name: &str,
    sup: &str,
    reads: &[&str],
    writes: &[&str],
    triggers: Vec<TriggerCondition>,
) -> NodeContract {
    let mut c = NodeContract::new(name, sup);
    c.reads = reads.iter().map(|s| s.to_string()).collect();
    c.writes = writes.iter().map(|s| s.to_string()).collect();
    c.trigger_conditions = triggers;
    c
}

struct Search(NodeContract);

#[async_trait]
impl Node for Search {
    fn contract(&self) -> &NodeContract {
        &self.0
    }
    async fn execute(&self, inputs: &NodeInputs, _c: &NodeConfig) -> Result<NodeOutputs, String> {
        let q = inputs
            .field("request", "message")
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        let hits: Vec<Value> = CATALOG
            .iter()
            .filter(|(name, _, _)| q.split_whitespace().any(|w| name.contains(w)))
            .map(|(name, color, price)| json!({"name": name, "color": color, "price": price}))
            .collect();
        Ok(NodeOutputs::new().set(
            "response",
            json!({"response_type": "results", "response_data": hits}),
        ))
    }
}

/// Asks for the budget, then the colour, then recommends.
struct Questioner;

#[async_trait]
impl Interactive for Questioner {
    fn context_slice(&self) -> &str {
        "workflow"
    }
    fn check_completion(&self, ctx: &Value, _i: &NodeInputs) -> bool {
        ctx.get("budget").is_some() && ctx.get("color").is_some()
    }
    async fn process_answer(
        &self,
        mut ctx: Value,
        inputs: &NodeInputs,
        _c: &NodeConfig,
    ) -> Result<Value, String> {
        let answer = inputs
            .field("request", "message")
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        if ctx.get("budget").is_none() {
            let budget: u64 = answer
                .trim_start_matches('$')
                .parse()
                .map_err(|_| format!("`{answer}` is not a budget"))?;
            ctx["budget"] = json!(budget);
        } else {
            ctx["color"] = json!(answer.to_lowercase());
        }
        Ok(ctx)
    }
    async fn generate_question(
        &self,
        ctx: &Value,
        _i: &NodeInputs,
        _c: &NodeConfig,
    ) -> Result<NodeOutputs, String> {
        let q = if ctx.get("budget").is_none() {
            "What is your budget in dollars?"
        } else {
            "Which colour do you like?"
        };
        Ok(NodeOutputs::new().set(
            "response",
            json!({"response_type": "question", "response_message": q}),
        ))
    }
    fn create_completion_output(&self, ctx: &Value, _i: &NodeInputs) -> NodeOutputs {
        let budget = ctx["budget"].as_u64().unwrap_or(0);
        let color = ctx["color"].as_str().unwrap_or_default();
        let pick: Vec<&str> = CATALOG
            .iter()
            .filter(|(_, c, p)| *c == color && *p <= budget)
            .map(|(n, _, _)| *n)
            .collect();
        let msg = match pick.first() {
            Some(p) => format!("I recommend the {p}."),
            None => format!("Nothing in {color} under ${budget}, sorry."),
        };
        NodeOutputs::new().set(
            "response",
            json!({"response_type": "done", "response_message": msg, "response_data": pick}),
        )
    }
}

struct Trends(NodeContract);

#[async_trait]
impl Node for Trends {
    fn contract(&self) -> &NodeContract {
        &self.0
    }
    async fn execute(&self, _i: &NodeInputs, _c: &NodeConfig) -> Result<NodeOutputs, String> {
        Ok(NodeOutputs::new().set("response", json!({"response_type": "answer", "response_message": "This season: blue linen and wool scarves."})))
    }
}

/// Kills the process in the middle of a run (action `crash`), to show that a session is only
/// ever written whole: the next run resumes from the last committed state.
struct Crash(NodeContract);

#[async_trait]
impl Node for Crash {
    fn contract(&self) -> &NodeContract {
        &self.0
    }
    async fn execute(&self, _i: &NodeInputs, _c: &NodeConfig) -> Result<NodeOutputs, String> {
        std::process::abort()
    }
}

/// Sends trend questions into the `fashion` subgraph.
struct ToFashion(NodeContract);

#[async_trait]
impl Node for ToFashion {
    fn contract(&self) -> &NodeContract {
        &self.0
    }
    async fn execute(&self, _i: &NodeInputs, _c: &NodeConfig) -> Result<NodeOutputs, String> {
        Ok(NodeOutputs::new().set("_internal", json!({"next_node": "call_subgraph::fashion"})))
    }
}

/// The shop graph over `llm`, with sessions in `db`.
pub fn build(llm: Arc<dyn Llm>, db: &std::path::Path) -> hearth_graph::Result<Runtime> {
    let mut r = Registry::new();
    r.add_valid_slice("workflow");
    r.add_node(Arc::new(Search(contract(
        "search",
        "main",
        &["request"],
        &["response"],
        vec![trigger(
            60,
            json!({"request.action": "search"}),
            "find products by name",
        )],
    ))))?;
    let questioner = contract(
        "questioner",
        "main",
        &["request", "workflow"],
        &["response", "workflow", "_internal"],
        vec![trigger(
            70,
            json!({"request.action": "recommend"}),
            "ask questions before recommending",
        )],
    );
    r.add_node(Arc::new(InteractiveNode {
        contract: questioner,
        inner: Questioner,
    }))?;
    let agent = LlmAgent::new(
        "shop_answer",
        llm.clone(),
        Some("You are a friendly shop assistant. Answer in one or two sentences."),
    );
    let mut answer = contract(
        "answer",
        "main",
        &["request"],
        &["response"],
        vec![trigger(10, json!({}), "general questions about the shop")],
    );
    answer.requires_llm = true;
    r.add_node(Arc::new(AgentNode {
        contract: answer,
        agent: Arc::new(agent),
    }))?;
    r.add_node(Arc::new(ToFashion(contract(
        "to_fashion",
        "main",
        &["request"],
        &["_internal"],
        vec![trigger(
            80,
            json!({"request.action": "trends"}),
            "fashion trends",
        )],
    ))))?;
    r.add_node(Arc::new(Crash(contract(
        "crash",
        "main",
        &["request"],
        &[],
        vec![trigger(
            200,
            json!({"request.action": "crash"}),
            "simulated failure",
        )],
    ))))?;
    r.add_node(Arc::new(Trends(contract(
        "trend",
        "fashion",
        &["request"],
        &["response"],
        vec![trigger(10, json!({}), "current trends")],
    ))))?;
    r.add_subgraph(SubgraphContract {
        subgraph_id: "fashion".into(),
        description: "Fashion trends".into(),
        reads: vec!["request".into()],
        writes: vec!["response".into()],
        entrypoint: "fashion".into(),
        supervisors: vec!["fashion".into()],
        nodes: vec!["trend".into()],
    })?;
    let store = Arc::new(SqliteStore::open(db)?);
    let mut rt = Runtime::new(r, store)?;
    rt.restore_slices = vec!["_internal".into(), "workflow".into()];
    for sup in rt.supervisors.values_mut() {
        sup.terminal_response_types
            .extend(["results", "answer", "question"].map(String::from));
    }
    if let Some(main) = rt.supervisors.get_mut("main") {
        main.llm = Some(llm);
        main.subgraphs.insert("fashion".into());
    }
    Ok(rt)
}

/// A stand-in model: as router it picks the first (best-ranked) candidate; as the shop agent
/// it gives a canned answer.
struct Scripted;

impl Llm for Scripted {
    fn chat(&self, request: LlmRequest) -> hearth_agent::Result<LlmStream> {
        let prompt = request
            .messages
            .last()
            .map(|m| m.text().to_string())
            .unwrap_or_default();
        let answer = match prompt.split("Candidates:\n- ").nth(1) {
            Some(rest) => {
                let node = rest.split_whitespace().next().unwrap_or_default();
                format!("{{\"node\": \"{node}\", \"reasoning\": \"the best-ranked candidate\"}}")
            }
            None => "We ship worldwide within a week.".to_string(),
        };
        ScriptedLlm::new([answer]).chat(request)
    }
    fn name(&self) -> String {
        "scripted".into()
    }
}

struct Args {
    model: Option<String>,
    db: PathBuf,
    session: String,
    resume: bool,
    action: String,
    message: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        model: None,
        db: PathBuf::from("shop.db"),
        session: "demo".into(),
        resume: false,
        action: String::new(),
        message: None,
    };
    let mut it = std::env::args().skip(1);
    let mut rest = vec![];
    while let Some(x) = it.next() {
        match x.as_str() {
            "--model" => a.model = it.next(),
            "--db" => a.db = it.next().map(PathBuf::from).ok_or("--db needs a file")?,
            "--session" => a.session = it.next().ok_or("--session needs a name")?,
            "--resume" => a.resume = true,
            _ => rest.push(x),
        }
    }
    let mut rest = rest.into_iter();
    a.action = rest.next().ok_or(
        "usage: shop_assistant [--model M] [--db FILE] [--session S] [--resume] ACTION [MESSAGE]",
    )?;
    a.message = rest.next();
    Ok(a)
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let llm: Arc<dyn Llm> = match &a.model {
        Some(m) => {
            let engine = Engine::load(
                m,
                &LoadOptions {
                    device: DeviceSpec::Auto,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| {
                eprintln!("error: {e}");
                std::process::exit(1)
            });
            Arc::new(LocalLlm::new(Arc::new(engine)).with_max_tokens(96))
        }
        None => Arc::new(Scripted),
    };
    let rt = build(llm, &a.db).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let request = RequestContext {
        session_id: a.session.clone(),
        action: Some(a.action.clone()),
        message: a.message.clone(),
        resume_session: a.resume,
        ..Default::default()
    };
    match rt.execute(request).await {
        Ok(r) => println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
