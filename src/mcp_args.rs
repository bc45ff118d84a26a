//! The MCP options of `hearth agent`: which servers' tools to offer, whether each call needs
//! the user's yes, and how long a call may take; the servers started before the run and
//! closed after it.

use anyhow::Context;
use hearth_agent::mcp::{Approval, McpOptions, McpServer, McpTools};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct McpArgs {
    /// An MCP server whose tools the agent may call: a command line to start
    /// ('uvx mcp-server-time') or a streamable-HTTP URL (http://127.0.0.1:3001/mcp). Repeatable.
    #[arg(long = "mcp", value_name = "CMD|URL")]
    pub servers: Vec<String>,
    /// MCP servers from a JSON file in the `mcpServers` format of Claude Desktop and Cursor.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Seconds one MCP tool call may take.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub mcp_timeout: u64,
}

/// Whether `hearth agent` runs a call to an MCP tool (`--approve`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum Approve {
    Ask,
    Auto,
    Deny,
}

impl Approve {
    pub fn approval(self) -> Approval {
        match self {
            Approve::Auto => Approval::Auto,
            Approve::Deny => Approval::Deny,
            Approve::Ask => Approval::Ask(Arc::new(ask)),
        }
    }
}

impl McpArgs {
    /// Whether any server is named.
    pub fn any(&self) -> bool {
        !self.servers.is_empty() || self.mcp_config.is_some()
    }

    /// The servers named, checked (before anything starts).
    pub fn specs(&self) -> anyhow::Result<Vec<McpServer>> {
        let mut specs = self
            .servers
            .iter()
            .map(|s| {
                McpServer::from_arg(s).map_err(|e| anyhow::anyhow!("invalid --mcp `{s}`: {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(path) = &self.mcp_config {
            specs.extend(McpServer::from_config(path).map_err(anyhow::Error::msg)?);
        }
        Ok(specs)
    }

    /// Starts or reaches every server, at once; the first that fails stops the run.
    pub fn connect(
        &self,
        rt: &tokio::runtime::Runtime,
        specs: &[McpServer],
        approval: Approval,
    ) -> anyhow::Result<Vec<Arc<McpTools>>> {
        let options = McpOptions {
            call_timeout: Duration::from_secs(self.mcp_timeout.max(1)),
            approval,
            ..McpOptions::default()
        };
        let connected = rt.block_on(futures::future::join_all(
            specs.iter().map(|s| McpTools::connect(s, options.clone())),
        ));
        let mut sources = vec![];
        for (spec, c) in specs.iter().zip(connected) {
            let tools = c.map_err(anyhow::Error::msg).context("--mcp")?;
            let names: Vec<String> = hearth_agent::ToolSource::tools(&tools)
                .iter()
                .map(|t| t.name().to_string())
                .collect();
            tracing::info!("MCP server {}: {}", spec.name, names.join(", "));
            sources.push(Arc::new(tools));
        }
        Ok(sources)
    }
}

/// Ends every server's session (a stdio server's process with it).
pub fn close(rt: &tokio::runtime::Runtime, sources: Vec<Arc<McpTools>>) {
    rt.block_on(async {
        for s in sources {
            if let Ok(s) = Arc::try_unwrap(s) {
                s.close().await;
            }
        }
    });
}

/// Asks on the terminal whether `tool` may run with `args`; without a terminal, no.
fn ask(tool: &str, args: &serde_json::Value) -> bool {
    if !std::io::stdin().is_terminal() {
        tracing::warn!(
            "{tool}: no terminal to ask for approval on; pass --approve auto to allow MCP calls"
        );
        return false;
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "Allow the MCP tool {tool}({args})? [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
}
