//! The one file that speaks MCP, through the official SDK (`rmcp`): connect to a server over
//! stdio or streamable HTTP, list its tools (again when it says they changed), call one,
//! close. A revision of the protocol or of the SDK changes this file only.

use super::{usable, McpServer, RemoteTool, Transport};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientInfo, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// The tools a server offers now, shared with the handler that re-lists them.
pub(super) type ToolList = Arc<Mutex<Vec<RemoteTool>>>;

/// Reacts to the server's notifications: `tools/list_changed` re-reads its tools.
struct Handler {
    server: String,
    tools: ToolList,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientInfo {
        ClientInfo::new(
            ClientCapabilities::default(),
            Implementation::new("hearth", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(tools) => {
                let tools = usable(&self.server, tools.into_iter().map(remote_tool).collect());
                tracing::info!(
                    "MCP server {}: its tools changed, now {}",
                    self.server,
                    names(&tools)
                );
                if let Ok(mut list) = self.tools.lock() {
                    *list = tools;
                }
            }
            Err(e) => tracing::warn!("MCP server {}: cannot list its tools: {e}", self.server),
        }
    }
}

/// A connected server.
pub(super) struct Connection {
    service: RunningService<RoleClient, Handler>,
}

fn names(tools: &[RemoteTool]) -> String {
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}

fn remote_tool(t: rmcp::model::Tool) -> RemoteTool {
    RemoteTool {
        name: t.name.to_string(),
        description: t.description.map(|d| d.to_string()).unwrap_or_default(),
        schema: Value::Object((*t.input_schema).clone()),
    }
}

/// Connects (spawning a stdio server), initializes within `timeout`, and lists the tools.
pub(super) async fn connect(
    spec: &McpServer,
    timeout: Duration,
) -> Result<(Connection, ToolList), String> {
    let tools: ToolList = Arc::default();
    let handler = Handler {
        server: spec.name.clone(),
        tools: tools.clone(),
    };
    let service = match &spec.transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            // A server's log lines are the user's to see with -v, not on the terminal.
            if let Some(stderr) = stderr {
                let server = spec.name.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!("MCP server {server}: {line}");
                    }
                });
            }
            tokio::time::timeout(timeout, handler.serve(transport))
                .await
                .map_err(|_| format!("no answer to `initialize` within {timeout:?}"))?
                .map_err(|e| format!("initialize failed: {e}"))?
        }
        Transport::Http { url, headers } => {
            // https needs a process-wide crypto provider; one installed already is kept.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                );
            for (k, v) in headers {
                let name = k
                    .parse()
                    .map_err(|e| format!("header `{k}` is not a header name: {e}"))?;
                let value = v
                    .parse()
                    .map_err(|e| format!("header `{k}` has a value no header can have: {e}"))?;
                config.custom_headers.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            tokio::time::timeout(timeout, handler.serve(transport))
                .await
                .map_err(|_| format!("no answer to `initialize` within {timeout:?}"))?
                .map_err(|e| format!("initialize failed: {e}"))?
        }
    };
    let listed = tokio::time::timeout(timeout, service.list_all_tools())
        .await
        .map_err(|_| format!("no answer to `tools/list` within {timeout:?}"))?
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let listed = usable(&spec.name, listed.into_iter().map(remote_tool).collect());
    if let Ok(mut list) = tools.lock() {
        *list = listed;
    }
    Ok((Connection { service }, tools))
}

impl Connection {
    /// Calls `name`; the text of its content (images in it as [`crate::image`] spans), or
    /// its error (a tool error, the server gone, no answer within `timeout`) as the model
    /// should read it.
    pub(super) async fn call(
        &self,
        name: &str,
        arguments: Value,
        timeout: Duration,
        meta: serde_json::Map<String, Value>,
    ) -> Result<String, String> {
        let mut params = CallToolRequestParams::new(name.to_string());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        if !meta.is_empty() {
            params.meta = Some(rmcp::model::Meta(meta));
        }
        let result = tokio::time::timeout(timeout, self.service.call_tool(params))
            .await
            .map_err(|_| format!("no answer within {timeout:?}"))?
            .map_err(|e| format!("the call failed: {e}"))?;
        let mut texts: Vec<String> = vec![];
        for c in &result.content {
            if let Some(i) = c.raw.as_image() {
                // An image (a screenshot) travels in the text; the model backend takes it out.
                texts.push(crate::image::inline_base64(&i.data, &i.mime_type));
                continue;
            }
            match c.raw.as_text() {
                Some(t) => texts.push(t.text.clone()),
                // Audio and resources: the model reads text and images only; say what came.
                None => texts.push(format!(
                    "[{} content not shown]",
                    serde_json::to_value(&c.raw)
                        .ok()
                        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_else(|| "non-text".into())
                )),
            }
        }
        if texts.is_empty() {
            if let Some(s) = &result.structured_content {
                texts.push(s.to_string());
            }
        }
        let text = texts.join("\n");
        if result.is_error == Some(true) {
            Err(text)
        } else {
            Ok(text)
        }
    }

    /// Ends the session (a stdio server's process is ended with it).
    pub(super) async fn close(self) {
        if let Err(e) = self.service.cancel().await {
            tracing::debug!("closing an MCP session: {e}");
        }
    }
}
