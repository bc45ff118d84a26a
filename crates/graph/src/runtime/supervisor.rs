//! A supervisor picks the next node in agent-contracts' order: terminal state → explicit
//! routing (a pluggable handler; its target must be one of this supervisor's nodes, `done` or
//! `call_subgraph::<registered id>`) → trigger rules → an LLM, when one is set, choosing among
//! the top rule candidates (it may also name any valid target) → the best rule match → the
//! previous decision → done. `decide_with_trace` says which step decided and why.

use crate::contract::matching::{candidates, Candidate};
use crate::python::sanitize::{sanitize, DEFAULT_MAX_FIELD_LENGTH};
use crate::runtime::registry::Registry;
use crate::state::{State, INTERNAL, REQUEST, RESPONSE};
use hearth_agent::llm::complete;
use hearth_agent::{ChatMessage, SamplingParams};
use hearth_agent::{Llm, LlmRequest};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

pub use crate::contract::CALL_SUBGRAPH;

/// Which routing step decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// `response_type` is terminal: done.
    TerminalState,
    /// The explicit-routing handler named a valid target.
    ExplicitRouting,
    /// The best matching trigger.
    RuleMatch,
    /// The LLM chose (or gave an invalid answer and the best rule was taken).
    LlmDecision,
    /// No rule matched (and no LLM answer): the previous node, else done.
    Fallback,
}

/// Where a supervisor routes next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "target")]
pub enum Decision {
    /// Run this node.
    Node(String),
    /// Enter this subgraph.
    Subgraph(String),
    /// This supervisor is finished.
    Done,
}

impl Decision {
    /// `done`, `call_subgraph::<id>` or a node name.
    pub fn from_target(target: &str) -> Self {
        if target == "done" {
            Decision::Done
        } else if let Some(id) = target.strip_prefix(CALL_SUBGRAPH) {
            Decision::Subgraph(id.into())
        } else {
            Decision::Node(target.into())
        }
    }

    /// The routing target as agent-contracts names it.
    pub fn target(&self) -> String {
        match self {
            Decision::Node(n) => n.clone(),
            Decision::Subgraph(id) => format!("{CALL_SUBGRAPH}{id}"),
            Decision::Done => "done".into(),
        }
    }
}

/// A decision and how it was reached.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionTrace {
    /// The target (`done`, `call_subgraph::<id>` or a node), as agent-contracts' `selected_node`.
    pub selected_node: String,
    /// The target, parsed.
    pub decision: Decision,
    /// The step that decided.
    pub decision_type: DecisionKind,
    /// Every node whose trigger matched, best first.
    pub matched_rules: Vec<Candidate>,
    /// The LLM decided.
    pub llm_used: bool,
    /// The LLM's reasoning, or why its answer was replaced.
    pub llm_reasoning: Option<String>,
}

impl DecisionTrace {
    fn new(target: &str, kind: DecisionKind, rules: Vec<Candidate>) -> Self {
        Self {
            selected_node: target.into(),
            decision: Decision::from_target(target),
            decision_type: kind,
            matched_rules: rules,
            llm_used: false,
            llm_reasoning: None,
        }
    }
}

/// What the LLM router is shown (agent-contracts' `ContextBuilderResult`): which slices of
/// the state, and a summary added under "Additional Context" (text, or JSON written as is).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouterContext {
    /// The slices shown (those the state has).
    pub slices: BTreeSet<String>,
    /// More context for the router.
    pub summary: Option<Value>,
}

/// agent-contracts' `context_builder(state, candidates)`: what the LLM router sees, from
/// the state and the names of the rules' candidates. Without one it sees request, response
/// and _internal.
pub type ContextBuilder = Arc<dyn Fn(&State, &[String]) -> RouterContext + Send + Sync>;

/// Explicit routing: a target that bypasses the rules, or `None`.
pub type ExplicitRouting = Arc<dyn Fn(&State) -> Option<String> + Send + Sync>;

/// Hearth's explicit routing: `_internal.next_node` (set by a node, e.g. to call a subgraph);
/// else, when `request.action` is `answer`, the node in `_internal.asked_by` (the interactive
/// node that asked the question).
pub fn return_to_sender(state: &State) -> Option<String> {
    if let Some(next) = state.next_node().filter(|n| !n.is_empty()) {
        return Some(next);
    }
    if state.action().as_deref() == Some("answer") {
        return state
            .get(INTERNAL, "asked_by")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
    }
    None
}

/// Routes among the nodes whose contracts name it.
#[derive(Clone)]
pub struct Supervisor {
    /// The name contracts use in `supervisor`.
    pub name: String,
    /// The LLM router; `None` routes by rules only.
    pub llm: Option<Arc<dyn Llm>>,
    /// `response_type`s that end the run (agent-contracts reads them from its config, empty
    /// by default; Hearth's runtime sets `done` and `error`).
    pub terminal_response_types: BTreeSet<String>,
    /// agent-contracts has none by default; Hearth's runtime sets [`return_to_sender`].
    pub explicit_routing: Option<ExplicitRouting>,
    /// Decisions per visit before the run ends with `max_iterations`.
    pub max_iterations: usize,
    /// Longest string the LLM router sees untruncated.
    pub max_field_length: usize,
    /// What the LLM router sees; `None` shows request, response and _internal.
    pub context_builder: Option<ContextBuilder>,
    /// Subgraph ids this supervisor may call (`call_subgraph::<id>` in `_internal.next_node`).
    pub subgraphs: BTreeSet<String>,
}

impl Supervisor {
    /// A supervisor as agent-contracts makes one: no terminal types, no explicit routing.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            llm: None,
            terminal_response_types: BTreeSet::new(),
            explicit_routing: None,
            max_iterations: 10,
            max_field_length: DEFAULT_MAX_FIELD_LENGTH,
            context_builder: None,
            subgraphs: BTreeSet::new(),
        }
    }

    /// A supervisor as Hearth's runtime uses it: `done` and `error` end the run, and
    /// [`return_to_sender`] routes explicitly.
    pub fn hearth(name: &str) -> Self {
        let mut s = Self::new(name);
        s.terminal_response_types = ["done", "error"].iter().map(|s| s.to_string()).collect();
        s.explicit_routing = Some(Arc::new(return_to_sender));
        s
    }

    /// Targets a decision may name: this supervisor's nodes, `done`, and every registered
    /// subgraph (the runtime checks the allowlist and the budgets).
    pub fn is_valid_target(&self, target: &str, registry: &Registry) -> bool {
        if target == "done" {
            return true;
        }
        if let Some(id) = target.strip_prefix(CALL_SUBGRAPH) {
            return registry.subgraph(id).is_some();
        }
        registry
            .contract(target)
            .is_some_and(|c| c.supervisor == self.name)
    }

    /// The next target for `state`, with the step that chose it and the matched rules.
    /// `previous` is the node that ran last (suggested to the LLM, and the fallback).
    pub fn decide_with_trace<'a>(
        &'a self,
        state: &'a State,
        registry: &'a Registry,
        previous: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, DecisionTrace> {
        Box::pin(async move {
            // 1. The response is final.
            if let Some(t) = state.get(RESPONSE, "response_type").and_then(Value::as_str) {
                if self.terminal_response_types.contains(t) {
                    return DecisionTrace::new("done", DecisionKind::TerminalState, vec![]);
                }
            }
            // 2. Explicit routing; an invalid target falls through to the rules.
            if let Some(handler) = &self.explicit_routing {
                if let Some(target) = handler(state).filter(|t| !t.is_empty()) {
                    if self.is_valid_target(&target, registry) {
                        return DecisionTrace::new(&target, DecisionKind::ExplicitRouting, vec![]);
                    }
                    tracing::warn!(
                        "supervisor `{}`: explicit routing to unknown target `{target}`; routing by rules",
                        self.name
                    );
                }
            }
            // 3. Trigger rules.
            let rules = candidates(
                registry.nodes_of(&self.name),
                state,
                registry.valid_slices(),
            );
            // The node that ran last, suggested to the LLM and used when nothing matches.
            let child = previous
                .map(str::to_owned)
                .or_else(|| {
                    state
                        .get(INTERNAL, "decision")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .filter(|d| !d.is_empty() && d != "done");
            // 4. The LLM picks among the top candidates (top 3 and ties), or any valid target.
            if let Some(llm) = &self.llm {
                let top = top_candidates(&rules);
                let (choice, reasoning) = self
                    .ask_llm(llm.as_ref(), state, &top, child.as_deref())
                    .await;
                let picked = match choice {
                    Some(c) if self.is_valid_target(&c, registry) => {
                        Some((c, reasoning.unwrap_or_default()))
                    }
                    // An invalid answer takes the best rule candidate.
                    Some(c) => top.first().map(|best| {
                        (
                            best.node.clone(),
                            format!("LLM returned invalid '{c}', using rule candidate"),
                        )
                    }),
                    // The LLM failed: the rules decide.
                    None => None,
                };
                if let Some((target, why)) = picked {
                    let mut t = DecisionTrace::new(&target, DecisionKind::LlmDecision, rules);
                    t.llm_used = true;
                    t.llm_reasoning = Some(why);
                    return t;
                }
            }
            // 5. The best rule match.
            if let Some(best) = rules.first() {
                let node = best.node.clone();
                return DecisionTrace::new(&node, DecisionKind::RuleMatch, rules);
            }
            // 6. The previous decision, 7. done.
            match child {
                Some(p) => DecisionTrace::new(&p, DecisionKind::Fallback, rules),
                None => DecisionTrace::new("done", DecisionKind::Fallback, rules),
            }
        })
    }

    /// What the router sees of the state, given the candidates' names: the chosen slices
    /// (sanitized) and the summary's text.
    pub fn llm_context(&self, state: &State, candidates: &[String]) -> (Value, Option<String>) {
        let chosen = match &self.context_builder {
            Some(b) => b(state, candidates),
            None => RouterContext {
                slices: [REQUEST, RESPONSE, INTERNAL].map(str::to_owned).into(),
                summary: None,
            },
        };
        let mut shown = serde_json::Map::new();
        for name in &chosen.slices {
            if let Some(v) = state.slices.get(name) {
                shown.insert(name.clone(), sanitize(v, self.max_field_length));
            }
        }
        let summary = chosen.summary.map(|s| match s {
            Value::String(text) => text,
            other => other.to_string(),
        });
        (Value::Object(shown), summary)
    }

    /// The node chosen and the reasoning; no node when the LLM failed or gave no answer.
    async fn ask_llm(
        &self,
        llm: &dyn Llm,
        state: &State,
        top: &[&Candidate],
        child: Option<&str>,
    ) -> (Option<String>, Option<String>) {
        let list: Vec<String> = top
            .iter()
            .map(|c| format!("- {} (priority {}): {}", c.node, c.priority, c.reason))
            .collect();
        let list = if list.is_empty() {
            "(none)".to_string()
        } else {
            list.join("\n")
        };
        let names: Vec<String> = top.iter().map(|c| c.node.clone()).collect();
        let (shown, summary) = self.llm_context(state, &names);
        let more = summary.map_or_else(String::new, |s| format!("\n\nAdditional Context:\n{s}"));
        let prompt = format!(
            "You route a request to the node that should handle it next (`done` ends the flow).\n\nState:\n{}{more}\n\nCandidates:\n{list}\n\nLast active node: {}\n\nIf there are candidates, pick one of them. Reply with JSON only: {{\"node\": \"<node name or done>\", \"reasoning\": \"<why>\"}}",
            serde_json::to_string_pretty(&shown).unwrap_or_default(),
            child.unwrap_or("None"),
        );
        let request = LlmRequest {
            messages: vec![ChatMessage::user(prompt)],
            max_tokens: Some(96),
            sampling: Some(SamplingParams::greedy()),
            ..Default::default()
        };
        let text = match complete(llm, request).await {
            Ok(o) => o.text,
            Err(e) => {
                tracing::warn!("supervisor `{}`: the LLM failed: {e}", self.name);
                return (None, None);
            }
        };
        parse_choice(&text, top)
    }
}

/// The top three candidates and any that tie with the third.
fn top_candidates(rules: &[Candidate]) -> Vec<&Candidate> {
    let mut out: Vec<&Candidate> = vec![];
    for (i, c) in rules.iter().enumerate() {
        if i < 3 || out.last().is_some_and(|l| l.priority == c.priority) {
            out.push(c);
        } else {
            break;
        }
    }
    out
}

/// `{"node" | "next_node": …, "reasoning": …}`, or else the first candidate name the text
/// mentions.
fn parse_choice(text: &str, top: &[&Candidate]) -> (Option<String>, Option<String>) {
    let start = text.find('{');
    let end = text.rfind('}');
    if let (Some(s), Some(e)) = (start, end) {
        if let Some(v) = text
            .get(s..=e)
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
        {
            let node = v
                .get("next_node")
                .or_else(|| v.get("node"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let why = v
                .get("reasoning")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return (node, why);
        }
    }
    let named = top
        .iter()
        .filter_map(|c| text.find(&c.node).map(|i| (i, c.node.clone())))
        .min()
        .map(|(_, n)| n);
    (named, Some(text.trim().to_string()))
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use crate::contract::{NodeContract, SubgraphContract, TriggerCondition};
    use hearth_agent::ScriptedLlm;
    use serde_json::json;

    fn registry() -> std::result::Result<Registry, Box<dyn std::error::Error + Send + Sync>> {
        let mut r = Registry::new();
        for (name, p, action) in [
            ("search", 50, "search"),
            ("chat", 10, ""),
            ("other", 5, "x"),
        ] {
            let mut c = NodeContract::new(name, "main");
            let mut t = TriggerCondition {
                priority: p,
                llm_hint: Some(format!("use for {name}")),
                ..Default::default()
            };
            if !action.is_empty() {
                t.when.insert("request.action".into(), json!(action));
            }
            c.trigger_conditions = vec![t];
            r.add_contract(c)?;
        }
        Ok(r)
    }

    fn state(action: &str) -> State {
        let mut s = State::new();
        s.set(REQUEST, "action", action.into());
        s
    }

    fn kind(t: &DecisionTrace) -> (&str, DecisionKind) {
        (t.selected_node.as_str(), t.decision_type.clone())
    }

    #[tokio::test]
    async fn decision_order() -> TestResult {
        let r = registry()?;
        let sup = Supervisor::hearth("main");
        let t = sup.decide_with_trace(&state("search"), &r, None).await;
        assert_eq!(kind(&t), ("search", DecisionKind::RuleMatch));
        assert_eq!(t.matched_rules.len(), 2);
        let mut s = state("search");
        s.set(RESPONSE, "response_type", "done".into());
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("done", DecisionKind::TerminalState));
        assert_eq!(
            Supervisor::new("main")
                .decide_with_trace(&s, &r, None)
                .await
                .decision_type,
            DecisionKind::RuleMatch,
            "agent-contracts has no terminal types unless configured"
        );
        let mut s = state("search");
        s.set_next_node(Some("chat"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("chat", DecisionKind::ExplicitRouting));
        s.set_next_node(Some("done"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(
            (t.decision, t.decision_type),
            (Decision::Done, DecisionKind::ExplicitRouting)
        );
        // An invalid explicit target falls through to the rules, so does an unknown subgraph.
        for target in ["ghost", "call_subgraph::nope"] {
            s.set_next_node(Some(target));
            let t = sup.decide_with_trace(&s, &r, None).await;
            assert_eq!(kind(&t), ("search", DecisionKind::RuleMatch), "{target}");
        }
        let mut s = state("answer");
        s.set(INTERNAL, "asked_by", "search".into());
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("search", DecisionKind::ExplicitRouting));
        // Nothing matches: the previous decision, then done.
        let mut s = state("nothing");
        s.set(REQUEST, "action", "zzz".into());
        let t = sup.decide_with_trace(&s, &r, Some("other")).await;
        assert_eq!(kind(&t), ("chat", DecisionKind::RuleMatch));
        Ok(())
    }

    #[tokio::test]
    async fn fallbacks_and_subgraph_targets() -> TestResult {
        let mut r = Registry::new();
        let mut c = NodeContract::new("only", "main");
        c.trigger_conditions = vec![TriggerCondition {
            priority: 1,
            when: json!({"request.go": true})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ..Default::default()
        }];
        r.add_contract(c)?;
        r.add_subgraph(SubgraphContract {
            subgraph_id: "sg".into(),
            description: String::new(),
            reads: vec![],
            writes: vec![],
            entrypoint: "side".into(),
            supervisors: vec![],
            nodes: vec![],
        })?;
        let sup = Supervisor::hearth("main");
        let mut s = State::new();
        assert_eq!(
            kind(&sup.decide_with_trace(&s, &r, None).await),
            ("done", DecisionKind::Fallback)
        );
        s.set(INTERNAL, "decision", "only".into());
        assert_eq!(
            kind(&sup.decide_with_trace(&s, &r, None).await),
            ("only", DecisionKind::Fallback)
        );
        s.set_next_node(Some("call_subgraph::sg"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(
            (t.decision, t.decision_type),
            (
                Decision::Subgraph("sg".into()),
                DecisionKind::ExplicitRouting
            )
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_context_builder_picks_the_slices_and_adds_a_summary() -> TestResult {
        let r = registry()?;
        let mut sup = Supervisor::hearth("main");
        let llm = ScriptedLlm::new(["{\"node\": \"chat\"}"]);
        sup.llm = Some(Arc::new(llm.clone()));
        let seen = Arc::new(std::sync::Mutex::new(vec![]));
        let record = seen.clone();
        sup.context_builder = Some(Arc::new(move |state: &State, candidates: &[String]| {
            if let Ok(mut s) = record.lock() {
                s.extend(candidates.iter().cloned());
            }
            RouterContext {
                slices: ["request".to_string(), "conversation".to_string()].into(),
                summary: Some(json!({"turns": state.slice("conversation")["turns"]})),
            }
        }));
        let mut s = state("search");
        s.set("conversation", "turns", 7.into());
        s.set(INTERNAL, "secret_marker", "hidden".into());
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("chat", DecisionKind::LlmDecision));
        let prompt = llm.requests()[0].messages[0].text().to_string();
        assert!(prompt.contains("\"conversation\""), "{prompt}");
        assert!(
            !prompt.contains("secret_marker"),
            "_internal was not chosen: {prompt}"
        );
        assert!(
            prompt.contains("Additional Context:\n{\"turns\":7}"),
            "{prompt}"
        );
        assert!(seen
            .lock()
            .map_err(|_| "poisoned")?
            .contains(&"search".to_string()));
        Ok(())
    }

    #[tokio::test]
    async fn the_llm_may_name_any_valid_target_and_bad_answers_fall_back() -> TestResult {
        let r = registry()?;
        let mut sup = Supervisor::hearth("main");
        let llm = ScriptedLlm::new([
            "{\"node\": \"chat\", \"reasoning\": \"small talk\"}",
            "{\"next_node\": \"other\", \"reasoning\": \"not a candidate\"}",
            "{\"next_node\": \"done\"}",
            "{\"node\": \"billing\", \"reasoning\": \"hallucinated\"}",
        ]);
        sup.llm = Some(Arc::new(llm.clone()));
        let mut s = state("search");
        s.set(
            REQUEST,
            "image",
            format!("data:image/png;base64,{}", "A".repeat(300)).into(),
        );
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("chat", DecisionKind::LlmDecision));
        assert_eq!(t.llm_reasoning.as_deref(), Some("small talk"));
        let prompt = llm.requests()[0].messages[0].text().to_string();
        assert!(
            prompt.contains("[DATA_URI:image/png]") && !prompt.contains("AAAAAAAA"),
            "{prompt}"
        );
        assert!(prompt.contains("use for search"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("other", DecisionKind::LlmDecision));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("done", DecisionKind::LlmDecision));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("search", DecisionKind::LlmDecision));
        assert_eq!(
            t.llm_reasoning.as_deref(),
            Some("LLM returned invalid 'billing', using rule candidate")
        );
        assert!(t.llm_used);
        // The script is spent: the LLM fails and the rules decide.
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(kind(&t), ("search", DecisionKind::RuleMatch));
        assert!(!t.llm_used);
        Ok(())
    }
}
