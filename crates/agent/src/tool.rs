//! Tools: a name, a description, a JSON schema of the arguments and an async call; a registry
//! that validates arguments, enforces a timeout and turns every failure into a result the
//! model can read — the loop never aborts because a tool failed.

use crate::message::ActionStatusCode;
use crate::schema;
use crate::tool_context::ToolContext;
use async_trait::async_trait;
use hearth_chat::ToolCall;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Something the model can call: a name, a description, an argument schema and an async call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, as the model reads it.
    fn description(&self) -> &str;
    /// JSON schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Runs the tool; `Err` is the tool's own error message.
    async fn call(&self, arguments: Value) -> Result<String, String>;
    /// Runs the tool for the caller `context` describes (session, user, tenant, deadline,
    /// cancellation); a tool that needs to know implements this, the others only
    /// [`Self::call`].
    async fn call_in(&self, arguments: Value, _context: &ToolContext) -> Result<String, String> {
        self.call(arguments).await
    }
}

/// The JSON schema of `T`, without the `$schema`/`title` noise, for [`Tool::parameters`].
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(json!({"type": "object"}));
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call's id, if it had one.
    pub id: Option<String>,
    /// The tool called.
    pub name: String,
    /// The arguments (a JSON string decoded into the object it encodes).
    pub arguments: Value,
    /// Success, or what went wrong.
    pub status: ActionStatusCode,
    /// The tool's output, or the error message.
    pub content: String,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
}

impl ToolResult {
    /// Whether the tool succeeded.
    pub fn ok(&self) -> bool {
        self.status == ActionStatusCode::Success
    }

    /// What the model reads in the tool turn.
    pub fn for_model(&self) -> String {
        if self.ok() {
            self.content.clone()
        } else {
            format!("Error: {}", self.content)
        }
    }
}

/// Tools whose list can change while the agent lives (an MCP server's, which says so with
/// `tools/list_changed`): the registry reads it again at the start of every run.
pub trait ToolSource: Send + Sync {
    /// What the source is called; prefixes its tools' names where they clash with others.
    fn name(&self) -> &str;
    /// Its tools now.
    fn tools(&self) -> Vec<Arc<dyn Tool>>;
}

/// A tool offered under another name (a source's tool whose own name was taken, a toolkit's
/// API), and with another description where one is given.
pub(crate) struct Renamed {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) inner: Arc<dyn Tool>,
}

#[async_trait]
impl Tool for Renamed {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        self.description
            .as_deref()
            .unwrap_or_else(|| self.inner.description())
    }
    fn parameters(&self) -> Value {
        self.inner.parameters()
    }
    async fn call(&self, arguments: Value) -> Result<String, String> {
        self.inner.call(arguments).await
    }
    async fn call_in(&self, arguments: Value, context: &ToolContext) -> Result<String, String> {
        self.inner.call_in(arguments, context).await
    }
}

/// Tools by name; runs calls with argument checks and a timeout (30 s by default).
#[derive(Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    /// The source each resolved tool came from, by the name it is offered under.
    origins: BTreeMap<String, String>,
    timeout: Duration,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self {
            tools: BTreeMap::new(),
            sources: vec![],
            origins: BTreeMap::new(),
            timeout: Duration::from_secs(30),
        }
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a call may run before it fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds a tool, replacing one of the same name.
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Adds a source whose tools are read at the start of every run ([`Self::resolved`]).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// The tools with the sources' tools as they are now: a source's tool whose name is taken
    /// (by a tool or an earlier source's tool) is offered as `<source>_<name>`; one whose
    /// prefixed name is taken too is left out, with a warning.
    pub fn resolved(&self) -> ToolRegistry {
        let mut out = ToolRegistry {
            tools: self.tools.clone(),
            sources: vec![],
            origins: self.origins.clone(),
            timeout: self.timeout,
        };
        for source in &self.sources {
            for tool in source.tools() {
                if !out.tools.contains_key(tool.name()) {
                    out.origins
                        .insert(tool.name().to_string(), source.name().to_string());
                    out.add(tool);
                    continue;
                }
                let name = format!("{}_{}", source.name(), tool.name());
                if out.tools.contains_key(&name) {
                    tracing::warn!(
                        "`{}` of {} is left out: its name and `{name}` are both taken",
                        tool.name(),
                        source.name()
                    );
                    continue;
                }
                out.origins.insert(name.clone(), source.name().to_string());
                out.add(Arc::new(Renamed {
                    name,
                    description: None,
                    inner: tool,
                }));
            }
        }
        out
    }

    /// The source a tool of [`Self::resolved`] came from (an MCP server's name); `None` for
    /// a tool added directly.
    pub fn source_of(&self, name: &str) -> Option<&str> {
        self.origins.get(name).map(String::as_str)
    }

    /// Removes a tool; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.tools.remove(name).is_some()
    }

    /// Tool names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tools as the chat template takes them (OpenAI's function format).
    pub fn specs(&self) -> Vec<Value> {
        self.tools
            .values()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name(), "description": t.description(), "parameters": t.parameters()}})
            })
            .collect()
    }

    /// Runs one call. Unknown tools, bad arguments, timeouts, errors and panics all become
    /// results with a status and a message.
    pub async fn execute(&self, call: &ToolCall) -> ToolResult {
        self.execute_in(call, &ToolContext::default()).await
    }

    /// Runs one call for `context`'s caller ([`Tool::call_in`]), ended at its deadline (or
    /// the registry's timeout, the earlier) or when it is cancelled.
    pub async fn execute_in(&self, call: &ToolCall, context: &ToolContext) -> ToolResult {
        let start = Instant::now();
        let name = call.function.name.clone();
        let mut result = ToolResult {
            id: call.id.clone(),
            name: name.clone(),
            arguments: call.function.arguments.clone(),
            status: ActionStatusCode::Success,
            content: String::new(),
            duration_ms: 0,
        };
        let fail = |mut r: ToolResult, status, msg: String| {
            r.status = status;
            r.content = msg;
            r.duration_ms = start.elapsed().as_millis() as u64;
            r
        };
        let Some(tool) = self.tools.get(&name).cloned() else {
            let known = self.names().join(", ");
            return fail(
                result,
                ActionStatusCode::ApiError,
                format!("unknown tool `{name}`; available: {known}"),
            );
        };
        // Arguments sent as a JSON string are repaired into the object they encode.
        let args = match &call.function.arguments {
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(v) => v,
                Err(e) => {
                    return fail(
                        result,
                        ActionStatusCode::ArgsError,
                        format!("arguments are not JSON: {e}"),
                    )
                }
            },
            Value::Null => json!({}),
            v => v.clone(),
        };
        result.arguments = args.clone();
        if let Err(e) = schema::validate(&args, &tool.parameters()) {
            return fail(result, ActionStatusCode::ArgsError, e);
        }
        if context.cancel.is_cancelled() {
            return fail(
                result,
                ActionStatusCode::ApiError,
                format!("`{name}` was not run: the run was cancelled"),
            );
        }
        let left = context
            .deadline
            .map(|d| d.saturating_duration_since(start))
            .filter(|&d| d < self.timeout);
        let limit = left.unwrap_or(self.timeout);
        let owned = context.clone();
        let task = tokio::spawn(async move { tool.call_in(args, &owned).await });
        let abort = task.abort_handle();
        let cancel = context.cancel.clone();
        let ran = tokio::select! {
            r = tokio::time::timeout(limit, task) => Some(r),
            () = cancel.cancelled() => None,
        };
        let Some(ran) = ran else {
            abort.abort();
            return fail(
                result,
                ActionStatusCode::ApiError,
                format!("`{name}` was cancelled"),
            );
        };
        match ran {
            Err(_) => {
                abort.abort();
                let why = match left {
                    Some(_) => "the run's deadline passed".to_string(),
                    None => format!("timed out after {:?}", self.timeout),
                };
                fail(
                    result,
                    ActionStatusCode::ApiError,
                    format!("`{name}` {why}"),
                )
            }
            Ok(Err(join)) if join.is_panic() => {
                let payload = join.into_panic();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                fail(
                    result,
                    ActionStatusCode::ApiError,
                    format!("`{name}` panicked: {msg}"),
                )
            }
            Ok(Err(join)) => fail(
                result,
                ActionStatusCode::ApiError,
                format!("`{name}` was cancelled: {join}"),
            ),
            Ok(Ok(Err(e))) => fail(result, ActionStatusCode::ApiError, e),
            Ok(Ok(Ok(out))) => {
                result.content = out;
                result.duration_ms = start.elapsed().as_millis() as u64;
                result
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sleepy;
    #[async_trait]
    impl Tool for Sleepy {
        fn name(&self) -> &str {
            "sleepy"
        }
        fn description(&self) -> &str {
            "sleeps, fails or panics"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object", "properties": {"mode": {"type": "string"}}, "required": ["mode"]})
        }
        async fn call(&self, args: Value) -> Result<String, String> {
            match args["mode"].as_str() {
                Some("hang") => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok("late".into())
                }
                Some("fail") => Err("disk on fire".into()),
                Some("panic") => panic!("boom"),
                _ => Ok("rested".into()),
            }
        }
    }

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall::new(name, args)
    }

    #[tokio::test]
    async fn every_failure_becomes_a_result() {
        let mut reg = ToolRegistry::new().with_timeout(Duration::from_millis(200));
        reg.add(Arc::new(Sleepy));
        let ok = reg.execute(&call("sleepy", json!({"mode": "rest"}))).await;
        assert!(ok.ok() && ok.content == "rested");
        let s = reg
            .execute(&call("sleepy", json!("{\"mode\": \"rest\"}")))
            .await;
        assert!(s.ok(), "arguments as a JSON string are repaired: {s:?}");
        let r = reg.execute(&call("nope", json!({}))).await;
        assert_eq!(r.status, ActionStatusCode::ApiError);
        assert!(r.content.contains("unknown tool `nope`") && r.content.contains("sleepy"));
        let r = reg.execute(&call("sleepy", json!({"mode": 3}))).await;
        assert_eq!(r.status, ActionStatusCode::ArgsError);
        assert!(
            r.content.contains("arguments.mode must be string"),
            "{}",
            r.content
        );
        let r = reg.execute(&call("sleepy", json!("{not json"))).await;
        assert_eq!(r.status, ActionStatusCode::ArgsError);
        let r = reg.execute(&call("sleepy", json!({"mode": "hang"}))).await;
        assert!(r.content.contains("timed out"), "{}", r.content);
        let r = reg.execute(&call("sleepy", json!({"mode": "fail"}))).await;
        assert_eq!(
            (r.status, r.for_model()),
            (
                ActionStatusCode::ApiError,
                "Error: disk on fire".to_string()
            )
        );
        let r = reg.execute(&call("sleepy", json!({"mode": "panic"}))).await;
        assert!(r.content.contains("panicked: boom"), "{}", r.content);
    }
}
