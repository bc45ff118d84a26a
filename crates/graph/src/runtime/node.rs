//! Nodes: `execute(inputs, config) → outputs` behind a contract. Inputs show only the slices
//! the contract reads; outputs are checked against what it writes. Also the interactive
//! (question/answer) node lifecycle, and an adapter that runs any hearth-agent Agent as a node.

use crate::contract::NodeContract;
use crate::error::{GraphError, Result};
use crate::state::{IoPolicy, State, REQUEST, RESPONSE};
use async_trait::async_trait;
use hearth_agent::tool_context::ToolContext;
use hearth_agent::{Agent, AgentMessage, Llm};
use serde_json::{json, Map, Value};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// The slices a node may read.
pub struct NodeInputs {
    node: String,
    slices: Map<String, Value>,
    declared: Vec<String>,
    policy: IoPolicy,
    /// A strict-mode violation, kept even if the node swallows the error.
    violation: std::sync::Mutex<Option<String>>,
}

impl NodeInputs {
    /// The slices of `state` that `contract` reads; `policy` decides what an undeclared read does.
    pub fn new(contract: &NodeContract, state: &State, policy: IoPolicy) -> Self {
        let slices = contract
            .reads
            .iter()
            .filter_map(|s| state.slices.get(s).map(|v| (s.clone(), v.clone())))
            .collect();
        Self {
            node: contract.name.clone(),
            slices,
            declared: contract.reads.clone(),
            policy,
            violation: Default::default(),
        }
    }

    /// A declared slice; an undeclared one is `{}` (with a warning), or an error when strict.
    pub fn get_slice(&self, name: &str) -> Result<Value> {
        if !self.declared.iter().any(|d| d == name) {
            if self.policy.strict {
                let message = format!("reads undeclared slice `{name}`");
                if let Ok(mut v) = self.violation.lock() {
                    v.get_or_insert(message.clone());
                }
                return Err(GraphError::ContractViolation {
                    node: self.node.clone(),
                    message,
                });
            }
            if self.policy.warn {
                tracing::warn!(
                    "node `{}` reads undeclared slice `{name}`; it sees {{}}",
                    self.node
                );
            }
            return Ok(json!({}));
        }
        Ok(self.slices.get(name).cloned().unwrap_or_else(|| json!({})))
    }

    /// The strict-mode violation this node committed, if any.
    pub fn violation(&self) -> Option<GraphError> {
        let v = self.violation.lock().ok()?.clone()?;
        Some(GraphError::ContractViolation {
            node: self.node.clone(),
            message: v,
        })
    }

    /// A field of a declared slice, or null.
    pub fn field(&self, slice: &str, field: &str) -> Value {
        self.get_slice(slice)
            .ok()
            .and_then(|s| s.get(field).cloned())
            .unwrap_or(Value::Null)
    }
}

/// What a node writes: fields per slice, merged into the state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeOutputs {
    /// Slice name → fields (a JSON object) to merge into it.
    pub writes: Map<String, Value>,
}

impl NodeOutputs {
    /// No writes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `fields` (a JSON object) to be merged into `slice`.
    pub fn set(mut self, slice: &str, fields: Value) -> Self {
        self.writes.insert(slice.into(), fields);
        self
    }

    /// Applies the writes the contract declares; undeclared ones are dropped with a warning,
    /// or fail when strict.
    pub fn apply(
        self,
        contract: &NodeContract,
        state: &mut State,
        policy: IoPolicy,
    ) -> Result<Vec<String>> {
        let mut dropped = vec![];
        for (slice, fields) in self.writes {
            if !contract.writes.iter().any(|w| w == &slice) {
                if policy.strict {
                    return Err(GraphError::ContractViolation {
                        node: contract.name.clone(),
                        message: format!("writes undeclared slice `{slice}`"),
                    });
                }
                if policy.warn {
                    tracing::warn!(
                        "node `{}` writes undeclared slice `{slice}`; dropped",
                        contract.name
                    );
                }
                if policy.drop_undeclared_writes {
                    dropped.push(slice);
                    continue;
                }
            }
            match fields {
                Value::Object(m) => state.merge(&slice, m),
                other => {
                    return Err(GraphError::Node {
                        node: contract.name.clone(),
                        message: format!("writes to `{slice}` must be an object, not {other}"),
                    })
                }
            }
        }
        Ok(dropped)
    }
}

/// What a node gets besides its inputs: services by name, and the LLM.
#[derive(Clone, Default)]
pub struct NodeConfig {
    /// Services by name, as contracts list them in `services`.
    pub services: HashMap<String, Arc<dyn Any + Send + Sync>>,
    /// The LLM, for nodes that need one.
    pub llm: Option<Arc<dyn Llm>>,
}

impl NodeConfig {
    /// The service `name` as a `T`; `None` if absent or of another type.
    pub fn service<T: Any + Send + Sync>(&self, name: &str) -> Option<Arc<T>> {
        self.services
            .get(name)
            .cloned()
            .and_then(|s| s.downcast::<T>().ok())
    }
}

/// A graph node: a contract, and code that turns its inputs into outputs.
#[async_trait]
pub trait Node: Send + Sync {
    /// What the node declares; the registry and runtime route and check by it.
    fn contract(&self) -> &NodeContract;
    /// `Err` becomes `response_type = "error"` with the message.
    async fn execute(
        &self,
        inputs: &NodeInputs,
        config: &NodeConfig,
    ) -> std::result::Result<NodeOutputs, String>;
}

/// A node that asks questions and processes answers until it has what it needs.
#[async_trait]
pub trait Interactive: Send + Sync {
    /// The slice holding the conversation's progress (declared in reads and writes).
    fn context_slice(&self) -> &str;
    /// The conversation's context so far; by default the context slice, or `{}`.
    fn prepare_context(&self, inputs: &NodeInputs) -> Value {
        inputs
            .get_slice(self.context_slice())
            .unwrap_or_else(|_| json!({}))
    }
    /// Whether the context holds everything the node needs.
    fn check_completion(&self, context: &Value, inputs: &NodeInputs) -> bool;
    /// Takes the user's answer (`request.action == "answer"`); returns the new context.
    async fn process_answer(
        &self,
        context: Value,
        inputs: &NodeInputs,
        config: &NodeConfig,
    ) -> std::result::Result<Value, String>;
    /// The next question to ask, as outputs (usually a `response`).
    async fn generate_question(
        &self,
        context: &Value,
        inputs: &NodeInputs,
        config: &NodeConfig,
    ) -> std::result::Result<NodeOutputs, String>;
    /// The outputs once complete; by default `response_type = "done"` with the context as data.
    fn create_completion_output(&self, context: &Value, _inputs: &NodeInputs) -> NodeOutputs {
        NodeOutputs::new().set(
            RESPONSE,
            json!({"response_type": "done", "response_data": context}),
        )
    }
}

/// prepare_context → check_completion → process_answer → check_completion → question or done.
pub struct InteractiveNode<T: Interactive> {
    /// The node's contract.
    pub contract: NodeContract,
    /// The question/answer logic.
    pub inner: T,
}

#[async_trait]
impl<T: Interactive> Node for InteractiveNode<T> {
    fn contract(&self) -> &NodeContract {
        &self.contract
    }

    async fn execute(
        &self,
        inputs: &NodeInputs,
        config: &NodeConfig,
    ) -> std::result::Result<NodeOutputs, String> {
        let slice = self.inner.context_slice().to_string();
        let mut ctx = self.inner.prepare_context(inputs);
        if self.inner.check_completion(&ctx, inputs) {
            return Ok(self
                .inner
                .create_completion_output(&ctx, inputs)
                .set(&slice, ctx.clone()));
        }
        if inputs.field(REQUEST, "action") == json!("answer") {
            ctx = self.inner.process_answer(ctx, inputs, config).await?;
            if self.inner.check_completion(&ctx, inputs) {
                return Ok(self
                    .inner
                    .create_completion_output(&ctx, inputs)
                    .set(&slice, ctx.clone()));
            }
        }
        let out = self.inner.generate_question(&ctx, inputs, config).await?;
        // Remember who asked, so the answer comes back here (explicit routing).
        Ok(out.set(&slice, ctx).set(
            crate::state::INTERNAL,
            json!({"asked_by": self.contract.name}),
        ))
    }
}

/// Any hearth-agent [`Agent`] as a node: `request.message` in, `response` out.
pub struct AgentNode {
    /// The node's contract.
    pub contract: NodeContract,
    /// The agent that answers.
    pub agent: Arc<dyn Agent>,
}

#[async_trait]
impl Node for AgentNode {
    fn contract(&self) -> &NodeContract {
        &self.contract
    }

    async fn execute(
        &self,
        inputs: &NodeInputs,
        _config: &NodeConfig,
    ) -> std::result::Result<NodeOutputs, String> {
        let message = inputs.field(REQUEST, "message");
        let text = message.as_str().unwrap_or_default().to_string();
        let session = inputs
            .field(REQUEST, "session_id")
            .as_str()
            .unwrap_or("default")
            .to_string();
        // The request's caller, for the agent's tools.
        let field = |name: &str| inputs.field(REQUEST, name).as_str().map(str::to_owned);
        let context = ToolContext {
            session: session.clone(),
            agent: self.agent.name().to_string(),
            user: field("user"),
            tenant: field("tenant"),
            ..ToolContext::default()
        };
        let out = self
            .agent
            .call_in(vec![AgentMessage::user(text)], &session, &context)
            .await
            .map_err(|e| e.to_string())?;
        Ok(NodeOutputs::new().set(
            RESPONSE,
            json!({"response_type": "answer", "response_message": out.text()}),
        ))
    }
}
