//! Tools from MCP servers: each server started (stdio) or reached (streamable HTTP) once,
//! its tools offered to the model beside the built-in ones, with their schemas (so the
//! tool-call grammar holds them as it holds any tool), re-read when the server says they
//! changed, and closed when the agent is done. A call has a timeout, may need the user's
//! approval, and its failure — the server's error, a crash, no answer — comes back to the model
//! as the tool's result.
//!
//! Servers are named on the command line (`'CMD ARGS'` or a URL) or by the `mcpServers` JSON
//! other tools use ([`McpServer::from_config`]).

mod client;

use crate::tool::{Tool, ToolSource};
use crate::tool_context::ToolContext;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: BTreeMap<String, String>,
    },
    /// A streamable-HTTP endpoint.
    Http {
        /// The endpoint (`http://…/mcp`).
        url: String,
        /// Headers sent with every request (`Authorization`, …).
        headers: BTreeMap<String, String>,
    },
}

/// One MCP server: its name (which prefixes its tools' names where they clash) and how to
/// reach it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    /// Letters, digits, `_` and `-`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
}

/// A tool as the server lists it.
#[derive(Debug, Clone)]
struct RemoteTool {
    name: String,
    description: String,
    schema: Value,
}

/// Whether a call to a server's tool may run.
#[derive(Clone, Default)]
pub enum Approval {
    /// Every call runs.
    #[default]
    Auto,
    /// No call runs; the model is told so.
    Deny,
    /// Each call runs if this says yes (it is given the tool's name and the arguments; it
    /// may block, reading a terminal).
    Ask(Ask),
}

/// Asks whether a call may run: given the tool's name and the arguments, yes or no.
pub type Ask = Arc<dyn Fn(&str, &Value) -> bool + Send + Sync>;

/// How the servers' tools are called.
#[derive(Clone)]
pub struct McpOptions {
    /// How long a server may take to start and list its tools.
    pub connect_timeout: Duration,
    /// How long one call may take.
    pub call_timeout: Duration,
    /// Whether a call may run.
    pub approval: Approval,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            approval: Approval::Auto,
        }
    }
}

impl McpServer {
    /// A server named on the command line: a URL (`http://…`, `https://…`) for streamable
    /// HTTP, or a command line to start (`'uvx mcp-server-time'`; words split as a shell
    /// splits them, with quotes).
    pub fn from_arg(arg: &str) -> Result<Self, String> {
        let arg = arg.trim();
        if arg.starts_with("http://") || arg.starts_with("https://") {
            return Ok(Self {
                name: url_name(arg),
                transport: Transport::Http {
                    url: arg.to_string(),
                    headers: BTreeMap::new(),
                },
            });
        }
        let words = split_words(arg)?;
        let (command, args) = words
            .split_first()
            .ok_or_else(|| "an empty MCP server command".to_string())?;
        Ok(Self {
            name: command_name(command, args),
            transport: Transport::Stdio {
                command: command.clone(),
                args: args.to_vec(),
                env: BTreeMap::new(),
            },
        })
    }

    /// The servers of an `mcpServers` file, as Claude Desktop, Cursor and VS Code write it:
    /// `{"mcpServers": {"NAME": {"command": …, "args": […], "env": {…}}` or
    /// `{"url": …, "headers": {…}}`}}`. Errors name the file and the field.
    pub fn from_config(path: &Path) -> Result<Vec<Self>, String> {
        let at = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {at}: {e}"))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{at}: not valid JSON: {e}"))?;
        let servers = v
            .get("mcpServers")
            .or_else(|| v.get("servers"))
            .and_then(Value::as_object)
            .ok_or_else(|| format!("{at}: expected an object `mcpServers` of servers by name"))?;
        servers
            .iter()
            .map(|(name, s)| {
                Self::from_entry(name, s).map_err(|e| format!("{at}: mcpServers.{name}{e}"))
            })
            .collect()
    }

    fn from_entry(name: &str, s: &Value) -> Result<Self, String> {
        let strings = |key: &str| -> Result<BTreeMap<String, String>, String> {
            match s.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(o)) => o
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(v) => Ok((k.clone(), v.clone())),
                        _ => Err(format!(".{key}.{k}: must be a string")),
                    })
                    .collect(),
                Some(_) => Err(format!(".{key}: must be an object of strings")),
            }
        };
        let kind = s.get("type").and_then(Value::as_str);
        let transport = match (kind, s.get("url"), s.get("command")) {
            (Some("sse"), _, _) => {
                return Err(".type: the legacy SSE transport is not supported; use the server's streamable-HTTP endpoint".into())
            }
            (Some("http" | "streamable-http" | "streamableHttp") | None, Some(url), None) => {
                let url = url.as_str().ok_or(".url: must be a string")?;
                Transport::Http {
                    url: url.to_string(),
                    headers: strings("headers")?,
                }
            }
            (Some("stdio") | None, None, Some(command)) => {
                let command = command.as_str().ok_or(".command: must be a string")?;
                let args = match s.get("args") {
                    None | Some(Value::Null) => vec![],
                    Some(Value::Array(a)) => a
                        .iter()
                        .enumerate()
                        .map(|(i, v)| {
                            v.as_str()
                                .map(str::to_owned)
                                .ok_or(format!(".args[{i}]: must be a string"))
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => return Err(".args: must be a list of strings".into()),
                };
                Transport::Stdio {
                    command: command.to_string(),
                    args,
                    env: strings("env")?,
                }
            }
            (Some(other), _, _) if !matches!(other, "stdio" | "http" | "streamable-http" | "streamableHttp") => {
                return Err(format!(".type: `{other}`; expected stdio or http"))
            }
            _ => return Err(": needs a `command` (stdio) or a `url` (streamable HTTP), not both".into()),
        };
        Ok(Self {
            name: sanitize(name),
            transport,
        })
    }
}

/// A tool-name-safe form of `s`: letters, digits, `_` and `-`.
fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "mcp".into()
    } else {
        out
    }
}

/// A server's name from its URL: the host.
fn url_name(url: &str) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    sanitize(rest.split(['/', ':']).next().unwrap_or(rest))
}

/// A server's name from its command: the package a launcher runs (`npx -y
/// @modelcontextprotocol/server-memory` → `server-memory`, `python -m mcp_server_time` →
/// `mcp_server_time`), else the program's own name.
fn command_name(command: &str, args: &[String]) -> String {
    let base = |s: &str| {
        let s = s.rsplit('/').next().unwrap_or(s);
        s.strip_suffix(".py")
            .or(s.strip_suffix(".js"))
            .unwrap_or(s)
            .to_string()
    };
    let program = base(command);
    let launcher = matches!(
        program.as_str(),
        "npx" | "uvx" | "bunx" | "pipx" | "python" | "python3" | "node" | "deno" | "uv"
    );
    if launcher {
        let mut words = args.iter().filter(|a| !a.starts_with('-'));
        if let Some(first) = words.next() {
            // `uv run X`, `pipx run X`
            let pick = if first == "run" {
                words.next()
            } else {
                Some(first)
            };
            if let Some(p) = pick {
                // `pkg@1.2` → `pkg`
                let p = p.strip_prefix('@').map_or(p.as_str(), |s| s);
                let p = p.split('@').next().unwrap_or(p);
                return sanitize(&base(p));
            }
        }
    }
    sanitize(&program)
}

/// Words as a POSIX shell splits them: whitespace apart, `'…'` and `"…"` kept whole,
/// `\` escaping the next character outside single quotes.
fn split_words(s: &str) -> Result<Vec<String>, String> {
    let (mut words, mut word, mut started) = (vec![], String::new(), false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            '\'' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unclosed ' in `{s}`")),
                    }
                }
            }
            '"' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(c) => word.push(c),
                        None => return Err(format!("unclosed \" in `{s}`")),
                    }
                }
            }
            '\\' => {
                started = true;
                word.extend(chars.next());
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    if started {
        words.push(word);
    }
    Ok(words)
}

/// One connected server: a [`ToolSource`] of its tools as they are now.
pub struct McpTools {
    name: String,
    connection: Arc<client::Connection>,
    tools: client::ToolList,
    options: McpOptions,
}

impl McpTools {
    /// Starts or reaches `server` and lists its tools.
    pub async fn connect(server: &McpServer, options: McpOptions) -> Result<Self, String> {
        let (connection, tools) = client::connect(server, options.connect_timeout)
            .await
            .map_err(|e| format!("MCP server {}: {e}", server.name))?;
        Ok(Self {
            name: server.name.clone(),
            connection: Arc::new(connection),
            tools,
            options,
        })
    }

    /// Ends the session; a stdio server's process ends with it.
    pub async fn close(self) {
        if let Ok(c) = Arc::try_unwrap(self.connection) {
            c.close().await;
        }
    }
}

impl ToolSource for McpTools {
    fn name(&self) -> &str {
        &self.name
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let listed = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        listed
            .into_iter()
            .map(|t| {
                Arc::new(McpTool {
                    server: self.name.clone(),
                    remote: t,
                    connection: self.connection.clone(),
                    options: self.options.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// The tools of a listing the model can be offered: those whose input schema describes an
/// object (the others are left out, with a warning, once per listing).
fn usable(server: &str, tools: Vec<RemoteTool>) -> Vec<RemoteTool> {
    tools
        .into_iter()
        .filter(|t| match check_schema(&t.schema) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "MCP server {server}: tool `{}` is left out: its input schema {e}",
                    t.name
                );
                false
            }
        })
        .collect()
}

/// A tool's input schema must describe an object.
fn check_schema(schema: &Value) -> Result<(), String> {
    let obj = schema.as_object().ok_or("is not an object")?;
    match obj.get("type") {
        None => {}
        Some(t) if t == "object" => {}
        Some(t) => return Err(format!("has type {t}, not \"object\"")),
    }
    if let Some(p) = obj.get("properties") {
        let props = p
            .as_object()
            .ok_or("has `properties` that are not an object")?;
        if let Some((k, _)) = props
            .iter()
            .find(|(_, v)| !v.is_object() && !v.is_boolean())
        {
            return Err(format!("has a property `{k}` that is not a schema"));
        }
    }
    Ok(())
}

/// One of a server's tools.
struct McpTool {
    server: String,
    remote: RemoteTool,
    connection: Arc<client::Connection>,
    options: McpOptions,
}

/// What the server is told of the caller: the context's session, user and tenant.
fn caller_meta(context: &ToolContext) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    for (key, value) in [
        ("hearth/session", Some(&context.session)),
        ("hearth/user", context.user.as_ref()),
        ("hearth/tenant", context.tenant.as_ref()),
    ] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            meta.insert(key.into(), Value::String(v.clone()));
        }
    }
    meta
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.remote.name
    }

    fn description(&self) -> &str {
        &self.remote.description
    }

    fn parameters(&self) -> Value {
        self.remote.schema.clone()
    }

    async fn call(&self, arguments: Value) -> Result<String, String> {
        self.call_in(arguments, &ToolContext::default()).await
    }

    /// The call, with whom it is for in the request's `_meta` (`hearth/session`,
    /// `hearth/user`, `hearth/tenant`, where known), for a server that serves several.
    async fn call_in(&self, arguments: Value, context: &ToolContext) -> Result<String, String> {
        match &self.options.approval {
            Approval::Auto => {}
            Approval::Deny => {
                return Err(format!(
                    "calls to the tools of MCP server {} are not allowed",
                    self.server
                ))
            }
            Approval::Ask(ask) => {
                let (ask, name, args) = (ask.clone(), self.remote.name.clone(), arguments.clone());
                let yes = tokio::task::spawn_blocking(move || ask(&name, &args))
                    .await
                    .unwrap_or(false);
                if !yes {
                    return Err("the user declined this call".into());
                }
            }
        }
        self.connection
            .call(
                &self.remote.name,
                arguments,
                self.options.call_timeout,
                caller_meta(context),
            )
            .await
            .map_err(|e| format!("MCP server {}: {e}", self.server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_and_urls_name_their_servers() -> Result<(), String> {
        let s =
            McpServer::from_arg("npx -y @modelcontextprotocol/server-filesystem '/tmp/my dir'")?;
        assert_eq!(s.name, "server-filesystem");
        assert_eq!(
            s.transport,
            Transport::Stdio {
                command: "npx".into(),
                args: vec![
                    "-y".into(),
                    "@modelcontextprotocol/server-filesystem".into(),
                    "/tmp/my dir".into()
                ],
                env: BTreeMap::new()
            }
        );
        assert_eq!(
            McpServer::from_arg("python3 -m mcp_server_time")?.name,
            "mcp_server_time"
        );
        assert_eq!(
            McpServer::from_arg("uvx mcp-server-git@2025.1")?.name,
            "mcp-server-git"
        );
        assert_eq!(
            McpServer::from_arg("/usr/local/bin/my-tools --fast")?.name,
            "my-tools"
        );
        assert_eq!(
            McpServer::from_arg("http://127.0.0.1:9000/mcp")?.name,
            "127_0_0_1"
        );
        assert!(McpServer::from_arg("  ").is_err());
        assert!(McpServer::from_arg("node 'unclosed").is_err());
        Ok(())
    }

    #[test]
    fn a_config_file_reads_as_other_tools_write_it() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("mcp.json");
        let write = |text: &str| std::fs::write(&path, text).map_err(|e| e.to_string());
        write(
            r#"{"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
            "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}}}}"#,
        )?;
        let servers = McpServer::from_config(&path)?;
        assert_eq!(servers.len(), 2);
        let named = |n: &str| servers.iter().find(|s| s.name == n).map(|s| &s.transport);
        assert!(
            matches!(named("remote"), Some(Transport::Http { url, .. }) if url == "https://example.com/mcp")
        );
        assert!(matches!(named("time"), Some(Transport::Stdio { env, .. }) if env["TZ"] == "UTC"));
        for (text, fault) in [
            (
                r#"{"mcpServers": {"a": {"command": 5}}}"#,
                "mcpServers.a.command",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#,
                "mcpServers.a.args",
            ),
            (
                r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#,
                "mcpServers.a.type",
            ),
            (r#"{"mcpServers": {"a": {}}}"#, "mcpServers.a: needs"),
            (r#"{"servers": 3}"#, "mcpServers"),
            ("{not json", "not valid JSON"),
        ] {
            write(text)?;
            let e = McpServer::from_config(&path).err().unwrap_or_default();
            assert!(e.contains(fault) && e.contains("mcp.json"), "{text}: {e}");
        }
        Ok(())
    }

    #[test]
    fn a_schema_must_describe_an_object() {
        assert!(check_schema(
            &serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}})
        )
        .is_ok());
        assert!(check_schema(&serde_json::json!({})).is_ok());
        assert!(check_schema(&serde_json::json!({"type": "string"})).is_err());
        assert!(
            check_schema(&serde_json::json!({"type": "object", "properties": {"a": 3}})).is_err()
        );
        assert!(check_schema(&serde_json::json!([1])).is_err());
    }
}
