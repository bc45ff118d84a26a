//! A supervisor picks the next node, in agent-contracts' order: terminal state → explicit
//! routing → trigger rules → an LLM choosing among the top rule candidates → the best rule
//! match → the previous decision → done. `decide_with_trace` says which step decided and why.

use crate::matching::{candidates, Candidate};
use crate::registry::Registry;
use crate::sanitize::{sanitize, DEFAULT_MAX_FIELD_LENGTH};
use crate::state::{State, INTERNAL, REQUEST, RESPONSE};
use hearth_agent::llm::complete;
use hearth_agent::{ChatMessage, SamplingParams};
use hearth_agent::{Llm, LlmRequest};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    TerminalState,
    ExplicitRouting,
    RuleMatch,
    LlmDecision,
    Fallback,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "target")]
pub enum Decision {
    Node(String),
    Subgraph(String),
    Done,
}

#[derive(Debug, Clone, Serialize)]
pub struct DecisionTrace {
    pub decision: Decision,
    pub decision_type: DecisionKind,
    pub matched_rules: Vec<Candidate>,
    pub llm_used: bool,
    pub llm_reasoning: Option<String>,
}

/// Builds what the LLM router sees; the default shows request, response and _internal.
pub type ContextBuilder = Arc<dyn Fn(&State) -> Value + Send + Sync>;

#[derive(Clone)]
pub struct Supervisor {
    pub name: String,
    pub llm: Option<Arc<dyn Llm>>,
    /// `response_type`s that end the run.
    pub terminal_response_types: BTreeSet<String>,
    pub max_iterations: usize,
    pub max_field_length: usize,
    pub context_builder: Option<ContextBuilder>,
    /// Subgraph ids this supervisor may call (`call_subgraph::<id>` in `_internal.next_node`).
    pub subgraphs: BTreeSet<String>,
}

impl Supervisor {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            llm: None,
            terminal_response_types: ["done", "error"].iter().map(|s| s.to_string()).collect(),
            max_iterations: 10,
            max_field_length: DEFAULT_MAX_FIELD_LENGTH,
            context_builder: None,
            subgraphs: BTreeSet::new(),
        }
    }

    pub fn decide_with_trace<'a>(
        &'a self,
        state: &'a State,
        registry: &'a Registry,
        previous: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, DecisionTrace> {
        Box::pin(async move {
            let trace = |decision, kind, rules| DecisionTrace {
                decision,
                decision_type: kind,
                matched_rules: rules,
                llm_used: false,
                llm_reasoning: None,
            };
            // 1. The response is final.
            if let Some(t) = state.response_type() {
                if self.terminal_response_types.contains(&t) {
                    return trace(Decision::Done, DecisionKind::TerminalState, vec![]);
                }
            }
            let mine = |n: &str| {
                registry
                    .contract(n)
                    .is_some_and(|c| c.supervisor == self.name)
            };
            // 2. Explicit routing: `_internal.next_node`, or an answer going back to who asked.
            if let Some(next) = state.next_node() {
                // The runtime checks the id, the allowlist and the budgets.
                if let Some(id) = next.strip_prefix("call_subgraph::") {
                    return trace(
                        Decision::Subgraph(id.into()),
                        DecisionKind::ExplicitRouting,
                        vec![],
                    );
                } else if mine(&next) {
                    return trace(Decision::Node(next), DecisionKind::ExplicitRouting, vec![]);
                }
            }
            if state.action().as_deref() == Some("answer") {
                if let Some(asker) = state.get(INTERNAL, "asked_by").and_then(Value::as_str) {
                    if mine(asker) {
                        return trace(
                            Decision::Node(asker.into()),
                            DecisionKind::ExplicitRouting,
                            vec![],
                        );
                    }
                }
            }
            // 3. Trigger rules.
            let rules = candidates(registry.nodes_of(&self.name), state);
            // 4. The LLM picks among the top candidates (top 3 and ties).
            if let (Some(llm), false) = (&self.llm, rules.is_empty()) {
                let cut = rules.get(2).map(|c| c.priority).unwrap_or(i64::MIN);
                let top: Vec<&Candidate> = rules.iter().filter(|c| c.priority >= cut).collect();
                let (choice, reasoning) = self.ask_llm(llm.as_ref(), state, &top).await;
                let mut t = match choice.filter(|c| top.iter().any(|x| &x.node == c)) {
                    Some(node) => trace(
                        Decision::Node(node),
                        DecisionKind::LlmDecision,
                        rules.clone(),
                    ),
                    // An answer naming no candidate falls back to the best rule.
                    None => trace(
                        Decision::Node(rules[0].node.clone()),
                        DecisionKind::Fallback,
                        rules.clone(),
                    ),
                };
                t.llm_used = true;
                t.llm_reasoning = reasoning;
                return t;
            }
            // 5. The best rule match.
            if let Some(best) = rules.first() {
                return trace(
                    Decision::Node(best.node.clone()),
                    DecisionKind::RuleMatch,
                    rules,
                );
            }
            // 6. The previous decision, 7. done.
            match previous.filter(|p| mine(p)) {
                Some(p) => trace(Decision::Node(p.into()), DecisionKind::Fallback, rules),
                None => trace(Decision::Done, DecisionKind::Fallback, rules),
            }
        })
    }

    /// What the router sees of the state.
    pub fn llm_context(&self, state: &State) -> Value {
        let raw = match &self.context_builder {
            Some(b) => b(state),
            None => json!({
                REQUEST: state.slice(REQUEST),
                RESPONSE: state.slice(RESPONSE),
                INTERNAL: state.slice(INTERNAL),
            }),
        };
        sanitize(&raw, self.max_field_length)
    }

    async fn ask_llm(
        &self,
        llm: &dyn Llm,
        state: &State,
        top: &[&Candidate],
    ) -> (Option<String>, Option<String>) {
        let list: Vec<String> = top
            .iter()
            .map(|c| format!("- {} (priority {}): {}", c.node, c.priority, c.reason))
            .collect();
        let prompt = format!(
            "You route a request to the node that should handle it next.\n\nState:\n{}\n\nCandidates:\n{}\n\nReply with JSON only: {{\"node\": \"<one candidate name>\", \"reasoning\": \"<why>\"}}",
            serde_json::to_string_pretty(&self.llm_context(state)).unwrap_or_default(),
            list.join("\n")
        );
        let request = LlmRequest {
            messages: vec![ChatMessage::user(prompt)],
            max_tokens: Some(96),
            sampling: Some(SamplingParams::greedy()),
            ..Default::default()
        };
        let text = match complete(llm, request).await {
            Ok(o) => o.text,
            Err(e) => return (None, Some(format!("LLM failed: {e}"))),
        };
        parse_choice(&text, top)
    }
}

/// `{"node": …, "reasoning": …}`, or else the first candidate name the text mentions.
fn parse_choice(text: &str, top: &[&Candidate]) -> (Option<String>, Option<String>) {
    let start = text.find('{');
    let end = text.rfind('}');
    if let (Some(s), Some(e)) = (start, end) {
        if let Ok(v) = serde_json::from_str::<Value>(&text[s..=e]) {
            let node = v.get("node").and_then(Value::as_str).map(str::to_owned);
            let why = v
                .get("reasoning")
                .and_then(Value::as_str)
                .map(str::to_owned);
            return (node, why.or_else(|| Some(text.trim().to_string())));
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
    use crate::contract::{NodeContract, TriggerCondition};
    use hearth_agent::ScriptedLlm;

    fn registry() -> std::result::Result<Registry, Box<dyn std::error::Error + Send + Sync>> {
        let mut r = Registry::new();
        for (name, p, action) in [("search", 50, "search"), ("chat", 10, "")] {
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

    #[tokio::test]
    async fn decision_order() -> TestResult {
        let r = registry()?;
        let sup = Supervisor::new("main");
        let t = sup.decide_with_trace(&state("search"), &r, None).await;
        assert_eq!(
            (t.decision, t.decision_type),
            (Decision::Node("search".into()), DecisionKind::RuleMatch)
        );
        assert_eq!(t.matched_rules.len(), 2);
        let mut s = state("search");
        s.set(RESPONSE, "response_type", "done".into());
        assert_eq!(
            sup.decide_with_trace(&s, &r, None).await.decision_type,
            DecisionKind::TerminalState
        );
        let mut s = state("search");
        s.set_next_node(Some("chat"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(
            (t.decision, t.decision_type),
            (Decision::Node("chat".into()), DecisionKind::ExplicitRouting)
        );
        // An invalid explicit target falls through to the rules.
        s.set_next_node(Some("ghost"));
        assert_eq!(
            sup.decide_with_trace(&s, &r, None).await.decision_type,
            DecisionKind::RuleMatch
        );
        let mut s = state("answer");
        s.set(INTERNAL, "asked_by", "search".into());
        assert_eq!(
            sup.decide_with_trace(&s, &r, None).await.decision,
            Decision::Node("search".into())
        );
        Ok(())
    }

    #[tokio::test]
    async fn the_llm_chooses_among_candidates_and_bad_answers_fall_back() -> TestResult {
        let r = registry()?;
        let mut sup = Supervisor::new("main");
        let llm = ScriptedLlm::new([
            "{\"node\": \"chat\", \"reasoning\": \"small talk\"}",
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
        assert_eq!(
            (t.decision, t.decision_type),
            (Decision::Node("chat".into()), DecisionKind::LlmDecision)
        );
        assert_eq!(t.llm_reasoning.as_deref(), Some("small talk"));
        let prompt = llm.requests()[0].messages[0].text().to_string();
        assert!(
            prompt.contains("[IMAGE_DATA]") && !prompt.contains("AAAAAAAA"),
            "{prompt}"
        );
        assert!(prompt.contains("use for search"));
        let t = sup.decide_with_trace(&s, &r, None).await;
        assert_eq!(
            (t.decision, t.decision_type),
            (Decision::Node("search".into()), DecisionKind::Fallback)
        );
        assert!(t.llm_used);
        Ok(())
    }
}
