//! Agents as layers. [`Agent::call`] = before-hooks → memory ← input → [`Agent::forward`] →
//! memory ← output → after-hooks; calling `forward` directly records nothing. Sub-agents make
//! state dicts with dotted keys (`memory`, `writer.memory`), and `reset` reaches them too.

use crate::aggregator::{Aggregator, DefaultAggregator};
use crate::error::{AgentError, Result};
use crate::hooks::{Hook, Hooks};
use crate::llm::{complete, Llm, LlmRequest};
use crate::memory::MemoryManager;
use crate::message::{AgentMessage, AgentStatusCode};
use crate::parser::OutputParser;
use crate::tool_context::ToolContext;
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::sync::Arc;

/// What [`Agent::call_stream`] yields: partial messages, then the output.
pub type MessageStream<'a> = futures::stream::BoxStream<'a, Result<AgentMessage>>;

/// An agent: a named step over a session's messages, with optional memory, hooks and
/// sub-agents.
#[async_trait]
pub trait Agent: Send + Sync {
    /// The agent's name, as hooks see it and as the sender of its own messages.
    fn name(&self) -> &str;

    /// The agent's memory, if it keeps one.
    fn memory(&self) -> Option<&MemoryManager> {
        None
    }

    /// The agent's hooks now, in order.
    fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        vec![]
    }

    /// Sub-agents by field name, for state dicts and resets.
    fn children(&self) -> Vec<(String, &dyn Agent)> {
        vec![]
    }

    /// One step over `history` (the session's memory, input included, when called through
    /// [`Agent::call`]). Writes no memory.
    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage>;

    /// Hooks, memory and `forward`, in lagent's order.
    async fn call(&self, inputs: Vec<AgentMessage>, session: &str) -> Result<AgentMessage> {
        let hooks = self.hooks();
        let mut inputs = inputs;
        for h in &hooks {
            inputs = h.before_agent(self.name(), inputs, session);
        }
        let history = match self.memory() {
            Some(m) => {
                for i in &inputs {
                    m.add(session, i.clone());
                }
                m.get(session)
            }
            None => inputs,
        };
        let mut output = self.forward(&history, session).await?;
        if let Some(m) = self.memory() {
            m.add(session, output.clone());
        }
        for h in &hooks {
            output = h.after_agent(self.name(), output, session);
        }
        Ok(output)
    }

    /// [`Agent::call`] for the caller `context` describes (user, tenant, deadline,
    /// cancellation), which an agent with tools passes to them; by default `call`.
    async fn call_in(
        &self,
        inputs: Vec<AgentMessage>,
        session: &str,
        _context: &ToolContext,
    ) -> Result<AgentMessage> {
        self.call(inputs, session).await
    }

    /// [`Agent::call`], streaming: partial messages (`stream_state` STREAM_ING) as they come,
    /// then the output. By default the output alone; [`LlmAgent`] streams its answer, and
    /// [`Sequential`], [`AgentList`] and [`AgentMap`] pass on their agents' streams.
    fn call_stream<'a>(&'a self, inputs: Vec<AgentMessage>, session: &'a str) -> MessageStream<'a> {
        Box::pin(futures::stream::once(self.call(inputs, session)))
    }

    /// For synchronous callers (builds a runtime; not from inside one); also on a
    /// `dyn Agent`.
    fn call_blocking(&self, inputs: Vec<AgentMessage>, session: &str) -> Result<AgentMessage> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| AgentError::State(format!("cannot start a runtime: {e}")))?;
        rt.block_on(self.call(inputs, session))
    }

    /// `{"memory": [...], "child.memory": [...]}` for one session.
    fn state_dict(&self, session: &str) -> Map<String, Value> {
        let mut out = Map::new();
        if let Some(m) = self.memory() {
            out.insert("memory".into(), m.with(session, |mem| mem.save()));
        }
        for (field, child) in self.children() {
            for (k, v) in child.state_dict(session) {
                out.insert(format!("{field}.{k}"), v);
            }
        }
        out
    }

    /// Restores a session from [`Agent::state_dict`]'s output, sub-agents by their dotted keys.
    fn load_state_dict(&self, session: &str, state: &Map<String, Value>) -> Result<()> {
        if let (Some(m), Some(v)) = (self.memory(), state.get("memory")) {
            m.with(session, |mem| mem.load(v))
                .map_err(AgentError::State)?;
        }
        for (field, child) in self.children() {
            let prefix = format!("{field}.");
            let sub: Map<String, Value> = state
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(&prefix)
                        .map(|rest| (rest.to_string(), v.clone()))
                })
                .collect();
            child.load_state_dict(session, &sub)?;
        }
        Ok(())
    }

    /// Releases what the agent holds for a session outside its memory: the model's KV cache.
    fn release(&self, _session: &str) {}

    /// Forgets a session (and, if `recursive`, in every sub-agent). A session never seen is fine.
    fn reset(&self, session: &str, recursive: bool) {
        if let Some(m) = self.memory() {
            m.reset(session);
        }
        self.release(session);
        if recursive {
            for (_, child) in self.children() {
                child.reset(session, true);
            }
        }
    }
}

/// lagent's `Agent`: an LLM, a system template, memory, an aggregator and an output parser.
pub struct LlmAgent {
    /// Sender name of its messages.
    pub name: String,
    /// The model it asks.
    pub llm: Arc<dyn Llm>,
    /// The system message, if any.
    pub template: Option<String>,
    /// One memory per session.
    pub memory: MemoryManager,
    /// Turns memory into the model's messages.
    pub aggregator: Box<dyn Aggregator>,
    /// Reads each answer into `formatted`; its stop words join the request's.
    pub parser: Option<Box<dyn OutputParser>>,
    /// Run around each call.
    pub hooks: Hooks,
    /// Defaults for every model call; its `session` is the KV cache released on reset.
    pub request: LlmRequest,
}

impl LlmAgent {
    /// An agent with an empty memory, the [`DefaultAggregator`] and no parser.
    pub fn new(name: impl Into<String>, llm: Arc<dyn Llm>, template: Option<&str>) -> Self {
        Self {
            name: name.into(),
            llm,
            template: template.map(str::to_owned),
            memory: MemoryManager::new(None),
            aggregator: Box::new(DefaultAggregator),
            parser: None,
            hooks: Hooks::new(),
            request: LlmRequest::default(),
        }
    }
}

#[async_trait]
impl Agent for LlmAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn memory(&self) -> Option<&MemoryManager> {
        Some(&self.memory)
    }

    fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        self.hooks.snapshot()
    }

    fn release(&self, _session: &str) {
        if let Some(kv) = &self.request.session {
            self.llm.end_session(kv);
        }
    }

    async fn forward(&self, history: &[AgentMessage], _session: &str) -> Result<AgentMessage> {
        let out = complete(self.llm.as_ref(), self.prepare(history)).await?;
        Ok(self.message(&out.text, AgentStatusCode::End))
    }

    /// `call`, streaming: the answer so far (re-parsed each time) with `stream_state`
    /// STREAM_ING, then the whole answer with END once memory holds it.
    fn call_stream<'a>(&'a self, inputs: Vec<AgentMessage>, session: &'a str) -> MessageStream<'a> {
        use futures::StreamExt;
        let mut inputs = inputs;
        for h in self.hooks.snapshot() {
            inputs = h.before_agent(&self.name, inputs, session);
        }
        for i in &inputs {
            self.memory.add(session, i.clone());
        }
        let request = self.prepare(&self.memory.get(session));
        enum Step {
            Start(LlmRequest),
            Going(crate::llm::LlmStream, String),
            Finished,
        }
        futures::stream::unfold(Step::Start(request), move |step| async move {
            let (mut stream, mut text) = match step {
                Step::Finished => return None,
                Step::Start(req) => match self.llm.chat(req) {
                    Ok(s) => (s, String::new()),
                    Err(e) => return Some((Err(e), Step::Finished)),
                },
                Step::Going(s, t) => (s, t),
            };
            loop {
                match stream.next().await {
                    Some(Ok(crate::llm::LlmEvent::Text(t))) => {
                        text.push_str(&t);
                        let msg = self.message(&text, AgentStatusCode::StreamIng);
                        return Some((Ok(msg), Step::Going(stream, text)));
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Some((Err(e), Step::Finished)),
                    None => {
                        let mut msg = self.message(&text, AgentStatusCode::End);
                        self.memory.add(session, msg.clone());
                        for h in self.hooks.snapshot() {
                            msg = h.after_agent(&self.name, msg, session);
                        }
                        return Some((Ok(msg), Step::Finished));
                    }
                }
            }
        })
        .boxed()
    }
}

impl LlmAgent {
    fn prepare(&self, history: &[AgentMessage]) -> LlmRequest {
        let messages = self.aggregator.aggregate(
            history,
            &self.name,
            self.parser.as_deref(),
            self.template.as_deref(),
            &[],
        );
        let mut stop = self.request.stop.clone();
        if let Some(p) = &self.parser {
            let words = p.stop_words();
            if !words.is_empty() {
                stop.get_or_insert_with(Vec::new).extend(words);
            }
        }
        LlmRequest {
            messages,
            stop,
            ..self.request.clone()
        }
    }

    fn message(&self, text: &str, state: AgentStatusCode) -> AgentMessage {
        let mut msg = AgentMessage::new(self.name.clone(), text.to_string());
        msg.stream_state = state;
        if let Some(p) = &self.parser {
            msg.formatted = serde_json::to_value(p.parse(text, &[])).ok();
        }
        msg
    }
}

/// Agents in a row, each reading the previous one's output; `exit_at` stops early.
pub struct Sequential {
    /// The pipeline's name.
    pub name: String,
    /// (field name, agent) pairs, run in order; the field name prefixes their state keys.
    pub agents: Vec<(String, Box<dyn Agent>)>,
    /// Stops after the agent whose output this accepts.
    pub exit_at: Option<ExitTest>,
}

/// Whether a `Sequential` stops after an agent's output.
pub type ExitTest = Box<dyn Fn(&AgentMessage) -> bool + Send + Sync>;

#[async_trait]
impl Agent for Sequential {
    fn name(&self) -> &str {
        &self.name
    }

    fn children(&self) -> Vec<(String, &dyn Agent)> {
        self.agents
            .iter()
            .map(|(k, a)| (k.clone(), a.as_ref()))
            .collect()
    }

    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage> {
        self.call_in(history.to_vec(), session, &ToolContext::default())
            .await
    }

    /// Each agent called for `context`'s caller (a pipeline has no memory or hooks of its own).
    async fn call_in(
        &self,
        inputs: Vec<AgentMessage>,
        session: &str,
        context: &ToolContext,
    ) -> Result<AgentMessage> {
        let mut msgs = inputs;
        let mut last = None;
        for (_, agent) in &self.agents {
            let out = agent.call_in(msgs, session, context).await?;
            let done = self.exit_at.as_ref().is_some_and(|f| f(&out));
            msgs = vec![out.clone()];
            last = Some(out);
            if done {
                break;
            }
        }
        last.ok_or_else(|| AgentError::invalid("agents", "Sequential has no agents"))
    }

    fn call_stream<'a>(&'a self, inputs: Vec<AgentMessage>, session: &'a str) -> MessageStream<'a> {
        let agents = self.agents.iter().map(|(_, a)| a.as_ref()).collect();
        relay(
            agents,
            inputs,
            session,
            Relay::Chain(self.exit_at.as_ref()),
            "Sequential has no agents",
        )
    }
}

/// How [`relay`] feeds its agents.
enum Relay<'a> {
    /// Each reads the previous one's output; stops after an output the test accepts.
    Chain(Option<&'a ExitTest>),
    /// Each reads the same input.
    Same,
}

/// The agents' streams one after another, as `Sequential` and `AgentList` call them: every
/// message each agent yields is passed on; the last one it yields is its output.
fn relay<'a>(
    agents: Vec<&'a dyn Agent>,
    inputs: Vec<AgentMessage>,
    session: &'a str,
    how: Relay<'a>,
    empty: &'static str,
) -> MessageStream<'a> {
    use futures::StreamExt;
    struct State<'a> {
        agents: std::vec::IntoIter<&'a dyn Agent>,
        inputs: Vec<AgentMessage>,
        current: Option<MessageStream<'a>>,
        output: Option<AgentMessage>,
        how: Relay<'a>,
        done: bool,
    }
    let state = State {
        agents: agents.into_iter(),
        inputs,
        current: None,
        output: None,
        how,
        done: false,
    };
    futures::stream::unfold(state, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            let Some(current) = st.current.as_mut() else {
                match st.agents.next() {
                    Some(a) => st.current = Some(a.call_stream(st.inputs.clone(), session)),
                    None => {
                        st.done = true;
                        if st.output.is_none() {
                            return Some((Err(AgentError::invalid("agents", empty)), st));
                        }
                    }
                }
                continue;
            };
            match current.next().await {
                Some(Ok(m)) => {
                    st.output = Some(m.clone());
                    return Some((Ok(m), st));
                }
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.current = None;
                    if let (Relay::Chain(exit), Some(out)) = (&st.how, &st.output) {
                        st.done = exit.is_some_and(|f| f(out));
                        st.inputs = vec![out.clone()];
                    }
                }
            }
        }
    })
    .boxed()
}

/// Agents held in a list (state keys `0.memory`, `1.memory`, …); calling it runs them all on
/// the same input and returns the last answer.
pub struct AgentList {
    /// The list's name.
    pub name: String,
    /// The agents, run in order.
    pub agents: Vec<Box<dyn Agent>>,
}

#[async_trait]
impl Agent for AgentList {
    fn name(&self) -> &str {
        &self.name
    }

    fn children(&self) -> Vec<(String, &dyn Agent)> {
        self.agents
            .iter()
            .enumerate()
            .map(|(i, a)| (i.to_string(), a.as_ref()))
            .collect()
    }

    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage> {
        self.call_in(history.to_vec(), session, &ToolContext::default())
            .await
    }

    /// Each agent called for `context`'s caller (a list has no memory or hooks of its own).
    async fn call_in(
        &self,
        inputs: Vec<AgentMessage>,
        session: &str,
        context: &ToolContext,
    ) -> Result<AgentMessage> {
        let mut last = None;
        for a in &self.agents {
            last = Some(a.call_in(inputs.clone(), session, context).await?);
        }
        last.ok_or_else(|| AgentError::invalid("agents", "AgentList is empty"))
    }

    fn call_stream<'a>(&'a self, inputs: Vec<AgentMessage>, session: &'a str) -> MessageStream<'a> {
        let agents = self.agents.iter().map(|a| a.as_ref()).collect();
        relay(agents, inputs, session, Relay::Same, "AgentList is empty")
    }
}

/// Agents by name (state keys `<name>.memory`); calling it routes to the agent named by the
/// last message's `receiver`.
pub struct AgentMap {
    /// The map's name.
    pub name: String,
    /// Agents by the name a message's `receiver` gives.
    pub agents: std::collections::BTreeMap<String, Box<dyn Agent>>,
}

#[async_trait]
impl Agent for AgentMap {
    fn name(&self) -> &str {
        &self.name
    }

    fn children(&self) -> Vec<(String, &dyn Agent)> {
        self.agents
            .iter()
            .map(|(k, a)| (k.clone(), a.as_ref()))
            .collect()
    }

    async fn forward(&self, history: &[AgentMessage], session: &str) -> Result<AgentMessage> {
        self.route(history)?.call(history.to_vec(), session).await
    }

    /// The agent named called for `context`'s caller.
    async fn call_in(
        &self,
        inputs: Vec<AgentMessage>,
        session: &str,
        context: &ToolContext,
    ) -> Result<AgentMessage> {
        self.route(&inputs)?
            .call_in(inputs.clone(), session, context)
            .await
    }

    fn call_stream<'a>(&'a self, inputs: Vec<AgentMessage>, session: &'a str) -> MessageStream<'a> {
        match self.route(&inputs) {
            Ok(agent) => agent.call_stream(inputs, session),
            Err(e) => Box::pin(futures::stream::once(async move { Err(e) })),
        }
    }
}

impl AgentMap {
    /// The agent the last message's `receiver` names.
    fn route(&self, messages: &[AgentMessage]) -> Result<&dyn Agent> {
        let to = messages
            .last()
            .and_then(|m| m.receiver.clone())
            .unwrap_or_default();
        let agent = self.agents.get(&to).ok_or_else(|| {
            let known: Vec<&String> = self.agents.keys().collect();
            AgentError::invalid(
                "receiver",
                format!("no agent named `{to}` (have {known:?})"),
            )
        })?;
        Ok(agent.as_ref())
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::llm::ScriptedLlm;

    struct Upper;
    impl Hook for Upper {
        fn before_agent(&self, _a: &str, inputs: Vec<AgentMessage>, _s: &str) -> Vec<AgentMessage> {
            inputs
                .into_iter()
                .map(|m| AgentMessage::new(m.sender.clone(), m.text().to_uppercase()))
                .collect()
        }
    }

    #[test]
    fn a_boxed_agent_answers_a_synchronous_caller() -> TestResult {
        let llm = Arc::new(ScriptedLlm::new(["sync"]));
        let agent: Box<dyn Agent> = Box::new(LlmAgent::new("bot", llm, None));
        let out = agent.call_blocking(vec!["hi".into()], "s")?;
        assert_eq!(out.text(), "sync");
        Ok(())
    }

    #[tokio::test]
    async fn call_records_memory_forward_does_not() -> TestResult {
        let llm = Arc::new(ScriptedLlm::new(["one", "two", "three"]));
        let agent = LlmAgent::new("bot", llm.clone(), Some("Be brief."));
        agent.hooks.add(Arc::new(Upper));
        let out = agent.call(vec!["hello".into()], "s1").await?;
        assert_eq!((out.sender.as_str(), out.text().as_str()), ("bot", "one"));
        let mem = agent.memory.get("s1");
        assert_eq!(mem.len(), 2);
        assert_eq!(
            mem[0].text(),
            "HELLO",
            "the hook replaced the input before it was recorded"
        );
        // The model saw the system template and the hooked input.
        let req = &llm.requests()[0];
        assert_eq!(req.messages[0].text(), "Be brief.");
        assert_eq!(req.messages[1].text(), "HELLO");
        // forward alone: an answer, and no memory written.
        let out = agent.forward(&[AgentMessage::user("x")], "s1").await?;
        assert_eq!(out.text(), "two");
        assert_eq!(agent.memory.get("s1").len(), 2);
        // Other sessions are separate; reset of an unknown session is fine.
        agent.call(vec!["hi".into()], "s2").await?;
        assert_eq!(agent.memory.get("s2").len(), 2);
        agent.reset("never-seen", true);
        agent.reset("s1", true);
        assert!(agent.memory.get("s1").is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn sequential_state_dict_has_dotted_keys() -> TestResult {
        let writer = LlmAgent::new("writer", Arc::new(ScriptedLlm::new(["draft"])), None);
        let critic = LlmAgent::new("critic", Arc::new(ScriptedLlm::new(["LGTM"])), None);
        let seq = Sequential {
            name: "pipeline".into(),
            agents: vec![
                ("writer".into(), Box::new(writer)),
                ("critic".into(), Box::new(critic)),
            ],
            exit_at: None,
        };
        let out = seq.call(vec!["write".into()], "s").await?;
        assert_eq!(out.text(), "LGTM");
        let state = seq.state_dict("s");
        let keys: Vec<&String> = state.keys().collect();
        assert_eq!(keys, ["writer.memory", "critic.memory"]);
        assert_eq!(
            state["writer.memory"]
                .as_array()
                .ok_or("no memory array")?
                .len(),
            2
        );
        // Restored into fresh agents.
        let fresh = Sequential {
            name: "pipeline".into(),
            agents: vec![
                (
                    "writer".into(),
                    Box::new(LlmAgent::new(
                        "writer",
                        Arc::new(ScriptedLlm::new(Vec::<String>::new())),
                        None,
                    )),
                ),
                (
                    "critic".into(),
                    Box::new(LlmAgent::new(
                        "critic",
                        Arc::new(ScriptedLlm::new(Vec::<String>::new())),
                        None,
                    )),
                ),
            ],
            exit_at: None,
        };
        fresh.load_state_dict("s", &state)?;
        assert_eq!(fresh.state_dict("s"), state);
        fresh.reset("s", true);
        assert_eq!(
            fresh.state_dict("s")["writer.memory"],
            serde_json::json!([])
        );
        Ok(())
    }

    #[tokio::test]
    async fn streaming_yields_partial_messages_then_the_end() -> TestResult {
        use futures::StreamExt;
        let mut agent = LlmAgent::new(
            "bot",
            Arc::new(ScriptedLlm::new([
                "<tool_call>{\"name\": \"calculator\", \"arguments\": {}}</tool_call>",
            ])),
            None,
        );
        agent.parser = Some(Box::new(crate::parser::QwenToolParser));
        let msgs = agent
            .call_stream(vec!["go".into()], "s")
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<AgentMessage>>>()?;
        assert!(msgs.len() > 3);
        assert!(msgs[..msgs.len() - 1]
            .iter()
            .all(|m| m.stream_state == AgentStatusCode::StreamIng));
        let last = msgs.last().ok_or("no messages")?;
        assert_eq!(last.stream_state, AgentStatusCode::End);
        // `formatted` is re-parsed on every chunk: broken JSON first, a valid call at the end.
        assert_eq!(
            msgs[5].formatted.as_ref().ok_or("not parsed")?["status"],
            serde_json::json!(-1)
        );
        assert_eq!(
            last.formatted.as_ref().ok_or("not parsed")?["status"],
            serde_json::json!(1)
        );
        assert_eq!(agent.memory.get("s").len(), 2);
        Ok(())
    }

    #[tokio::test]
    async fn lists_and_maps_nest_state() -> TestResult {
        let list = AgentList {
            name: "both".into(),
            agents: vec![
                Box::new(LlmAgent::new("a", Arc::new(ScriptedLlm::new(["A"])), None)),
                Box::new(LlmAgent::new("b", Arc::new(ScriptedLlm::new(["B"])), None)),
            ],
        };
        assert_eq!(list.call(vec!["hi".into()], "s").await?.text(), "B");
        let keys: Vec<String> = list.state_dict("s").keys().cloned().collect();
        assert_eq!(keys, ["0.memory", "1.memory"]);
        let mut map = AgentMap {
            name: "router".into(),
            agents: Default::default(),
        };
        map.agents.insert(
            "math".into(),
            Box::new(LlmAgent::new(
                "math",
                Arc::new(ScriptedLlm::new(["4"])),
                None,
            )),
        );
        let mut m = AgentMessage::user("2+2");
        m.receiver = Some("math".into());
        assert_eq!(map.call(vec![m], "s").await?.text(), "4");
        assert_eq!(
            map.state_dict("s").keys().cloned().collect::<Vec<_>>(),
            ["math.memory"]
        );
        let err = map
            .call(vec!["nobody".into()], "s")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no agent named"), "{err}");
        Ok(())
    }

    #[tokio::test]
    async fn sequential_exits_early() -> TestResult {
        let a = LlmAgent::new("a", Arc::new(ScriptedLlm::new(["STOP here"])), None);
        let b = LlmAgent::new("b", Arc::new(ScriptedLlm::new(["never"])), None);
        let seq = Sequential {
            name: "s".into(),
            agents: vec![("a".into(), Box::new(a)), ("b".into(), Box::new(b))],
            exit_at: Some(Box::new(|m: &AgentMessage| m.text().starts_with("STOP"))),
        };
        assert_eq!(seq.call(vec!["go".into()], "x").await?.text(), "STOP here");
        Ok(())
    }
}
