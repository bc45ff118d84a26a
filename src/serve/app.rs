//! What every handler shares: the engine and the server's settings (`App`), the running of a
//! request's set-up off the async threads, and the closing of running answers at shutdown.

use super::error::ApiError;
use super::metrics;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use hearth_engine::{ChatStream, Engine, Event, EventStream};
use std::sync::Arc;

/// What every handler shares.
pub struct App {
    pub engine: Arc<Engine>,
    pub model_id: String,
    pub api_key: Option<String>,
    /// The origin browser pages may call from (`--cors`).
    pub cors: Option<String>,
    /// Turns true when the server is closing and running answers must end now.
    pub closing: tokio::sync::watch::Receiver<bool>,
    pub body_limit: usize,
    /// How long a request's body may take to arrive.
    pub body_timeout: std::time::Duration,
    pub created: u64,
    /// Tool calls decoded under the tool-call grammar.
    pub constrain_tools: bool,
    /// `--max-tokens`: the cap on every answer's length.
    pub max_tokens: Option<usize>,
    pub metrics: metrics::Metrics,
    /// The MCP servers' tools (`--mcp`), run by the server.
    pub mcp: Option<hearth_agent::ToolRegistry>,
}

/// A request body as the handlers take it: its bytes, or why they could not be read.
pub type Body = Result<Bytes, BytesRejection>;

/// Runs a handler's `start` (template rendering, tokenizing megabytes, compiling grammars:
/// up to a second of CPU) on tokio's blocking pool, so that it never holds up the threads
/// that carry every other client's stream.
pub async fn off_the_runtime<T: Send + 'static>(
    app: &Arc<App>,
    body: Body,
    start: fn(&Arc<App>, Body) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let app = app.clone();
    tokio::task::spawn_blocking(move || start(&app, body))
        .await
        .unwrap_or_else(|e| {
            Err(ApiError::internal(format!(
                "the request's set-up failed: {e}"
            )))
        })
}

impl App {
    /// The server's MCP tools as they are now (read once per request), and their names.
    pub fn mcp_tools(&self) -> (Option<hearth_agent::ToolRegistry>, Vec<String>) {
        let tools = self.mcp.as_ref().map(hearth_agent::ToolRegistry::resolved);
        let names = tools.as_ref().map(|t| t.names()).unwrap_or_default();
        (tools, names)
    }
}

/// Tells one running answer that the server is closing (its shutdown grace has passed), once.
pub struct Closing {
    rx: tokio::sync::watch::Receiver<bool>,
    told: bool,
}

impl Closing {
    pub fn new(app: &App) -> Self {
        Self {
            rx: app.closing.clone(),
            told: false,
        }
    }

    /// The answer's next event; once the server is closing, the answer is told to end after
    /// the token being made, and its last events (the summary) still come.
    pub async fn next<A: Running>(&mut self, answer: &mut A) -> Option<Event> {
        loop {
            tokio::select! {
                _ = self.now() => answer.end(),
                e = answer.next() => return e,
            }
        }
    }

    /// Resolves when the answer should end now; after that, never again.
    async fn now(&mut self) {
        if !self.told {
            // A dropped sender (the server is gone) closes too.
            let _ = self.rx.wait_for(|c| *c).await;
            self.told = true;
            return;
        }
        std::future::pending::<()>().await
    }
}

/// A running answer's stream, as the handlers read it.
pub trait Running {
    /// Ends the answer after the token being made.
    fn end(&self);
    /// The next event; `None` once the answer has ended.
    fn next(&mut self) -> impl std::future::Future<Output = Option<Event>> + Send;
}

impl Running for ChatStream {
    fn end(&self) {
        ChatStream::end(self)
    }
    fn next(&mut self) -> impl std::future::Future<Output = Option<Event>> + Send {
        ChatStream::next(self)
    }
}

impl Running for EventStream {
    fn end(&self) {
        EventStream::end(self)
    }
    fn next(&mut self) -> impl std::future::Future<Output = Option<Event>> + Send {
        EventStream::next(self)
    }
}
