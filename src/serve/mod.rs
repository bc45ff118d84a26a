//! `hearth serve`: an OpenAI-compatible HTTP server on the engine, in the same process.
//! Requests go to the engine's scheduler, so concurrent clients are decoded together, and
//! a client that resends a growing conversation reuses the cached prefix of its last turn.

mod answer;
mod app;
mod arguments_check;
mod chat;
mod completions;
mod error;
#[cfg(test)]
mod fuzz;
mod images;
mod listen;
mod messages;
mod metrics;
mod reply;
mod request;
mod responses;

use crate::model_args::ModelArgs;
use anyhow::Context;
use app::App;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use error::ApiError;
use hearth_engine::Engine;
use reply::unix_now;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// MCP servers whose tools the model may call: the server runs those calls itself and
    /// asks the model again, so clients see the answer (and `mcp_calls`).
    #[command(flatten)]
    pub mcp: crate::mcp_args::McpArgs,
    /// Address to listen on; 0.0.0.0 serves other machines too.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route but /health.
    #[arg(long, env = "HEARTH_API_KEY")]
    pub api_key: Option<String>,
    /// Let browser pages from ORIGIN (e.g. http://localhost:3000, or `*`) call the API;
    /// cross-origin requests are refused without it.
    #[arg(long, value_name = "ORIGIN")]
    pub cors: Option<String>,
    /// The model name /v1/models lists and answers carry (default: the model argument).
    #[arg(long)]
    pub alias: Option<String>,
    /// Largest request body in MiB.
    #[arg(long, default_value_t = 8)]
    pub max_body_mb: usize,
    /// Requests that may wait for a place in the running batch; beyond them a request gets a
    /// 503 with `Retry-After` (default 1024).
    #[arg(long, value_name = "N")]
    pub max_queue: Option<usize>,
    /// Seconds a client may take to send a request's body (a body that never ends is a 400).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub body_timeout: u64,
    /// Seconds a client may take to send a request's line and headers; past them the
    /// connection is closed.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub header_timeout: u64,
    /// Seconds running answers may take to finish after SIGTERM or Ctrl-C (no new requests are
    /// taken meanwhile); then each ends with its final event and the server exits.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub shutdown_grace: u64,
    /// Leave tool calls free instead of decoding them under the tool-call grammar (what the
    /// model writes is parsed as it comes; for comparisons). `required` is then not enforced.
    #[arg(long)]
    pub free_tool_calls: bool,
    /// The most tokens one answer may generate, whatever the request asks (llama.cpp's
    /// `--n-predict`): agents ask for 8-32K, which a slow machine spends minutes on.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<usize>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if let Some(origin) = &args.cors {
        if cors(Some(origin)).is_none() {
            anyhow::bail!(
                "invalid --cors `{origin}`: an origin such as http://localhost:3000, or *"
            );
        }
    }
    if let Some(n) = args.max_tokens {
        crate::model_args::check_max_tokens(n)?;
    }
    let mut opts = args.model.load_options()?;
    opts.scheduler.max_waiting = args.max_queue;
    let mcp_servers = args.mcp.specs()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The operator named these servers: their calls run without asking.
    let sources = args
        .mcp
        .connect(&runtime, &mcp_servers, hearth_agent::mcp::Approval::Auto)?;
    let mcp = (!sources.is_empty()).then(|| {
        // The call's own timeout (--mcp-timeout) comes first.
        let mut registry = hearth_agent::ToolRegistry::new()
            .with_timeout(std::time::Duration::from_secs(args.mcp.mcp_timeout + 5));
        for s in sources {
            registry.add_source(s);
        }
        registry
    });
    let engine = Engine::load(&args.model.model, &opts)?;
    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let grace = std::time::Duration::from_secs(args.shutdown_grace);
    let app = Arc::new(App {
        engine: Arc::new(engine),
        model_id: args
            .alias
            .clone()
            .unwrap_or_else(|| args.model.model.clone()),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        cors: args.cors.clone(),
        body_timeout: std::time::Duration::from_secs(args.body_timeout),
        closing: close_rx,
        body_limit: args.max_body_mb.saturating_mul(1 << 20),
        created: unix_now(),
        constrain_tools: !args.free_tool_calls,
        max_tokens: args.max_tokens,
        metrics: metrics::Metrics::new(),
        mcp,
    });
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        if !addr.ip().is_loopback() && app.api_key.is_none() {
            tracing::warn!(
                "listening on {addr}, reachable from other machines, without --api-key: anyone who can reach it may use the model"
            );
        }
        // Tests and scripts read this line to find a port picked with --port 0.
        eprintln!("listening on http://{addr}");
        let header_timeout = std::time::Duration::from_secs(args.header_timeout.max(1));
        listen::serve(listener, router(app), header_timeout, async move {
            stop_signal().await;
            tracing::info!(
                "shutting down: no new requests; running answers have {} s to finish",
                grace.as_secs()
            );
            tokio::spawn(async move {
                tokio::time::sleep(grace).await;
                tracing::info!("shutdown grace over: ending the running answers");
                let _ = close_tx.send(true);
                // An answer ends within a step; a connection that still hangs is cut.
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                std::process::exit(0);
            });
        })
        .await;
        Ok(())
    })
}

/// Ctrl-C, or SIGTERM where there is one (a service manager's stop).
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

pub fn router(app: Arc<App>) -> Router {
    let guarded = Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), auth));
    let router = Router::new()
        .route("/", get(page))
        .route("/health", get(health))
        .merge(guarded)
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(app.clone(), count))
        // The handlers read the body themselves and answer an oversized one, or one that takes
        // too long to arrive, in OpenAI's shape.
        .layer(DefaultBodyLimit::max(app.body_limit))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            app.body_timeout,
        ));
    let router = match cors(app.cors.as_deref()) {
        Some(layer) => router.layer(layer),
        None => router,
    };
    router.with_state(app)
}

/// Browser pages from `origin` (`*`: any) may call the API; none: no CORS headers, so
/// browsers refuse cross-origin calls.
fn cors(origin: Option<&str>) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origin = match origin? {
        "*" => AllowOrigin::any(),
        o => AllowOrigin::exact(header::HeaderValue::from_str(o).ok()?),
    };
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([axum::http::Method::GET, axum::http::Method::POST])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
    )
}

/// The key comes as `Authorization: Bearer KEY` (OpenAI's clients) or `x-api-key: KEY`
/// (Anthropic's).
async fn auth(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if let Some(key) = &app.api_key {
        let headers = request.headers();
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        if ![bearer, x_api_key]
            .into_iter()
            .flatten()
            .any(|s| same_key(s, key))
        {
            let error = ApiError::unauthorized();
            if request.uri().path().starts_with("/v1/messages") {
                return error::AnthropicError(error).into_response();
            }
            return error.into_response();
        }
    }
    next.run(request).await
}

/// Whether `sent` is `key`, in time that does not depend on where they differ (only on their
/// lengths), so a client cannot find the key a byte at a time.
fn same_key(sent: &str, key: &str) -> bool {
    use subtle::ConstantTimeEq;
    sent.as_bytes().ct_eq(key.as_bytes()).into()
}

/// The chat page (src/serve/page.html): static, so it needs no key; its calls to the API
/// carry the key the user types in. Its own script and styles only, and no framing by other
/// sites.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data: blob:; frame-ancestors 'none'",
            ),
        ],
        include_str!("page.html"),
    )
        .into_response()
}

/// Counts every request by route and status.
async fn count(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    app.metrics.request(&path, response.status().as_u16());
    response
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let engine = app.engine.clone();
    match tokio::task::spawn_blocking(move || engine.stats()).await {
        Ok(Ok(stats)) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            app.metrics.render(&stats),
        )
            .into_response(),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// Liveness, and what the scheduler holds: a client that left must not keep a sequence.
async fn health(State(app): State<Arc<App>>) -> Response {
    let engine = app.engine.clone();
    match tokio::task::spawn_blocking(move || engine.stats()).await {
        Ok(Ok(s)) => Json(json!({
            "status": "ok",
            "running": s.running,
            "waiting": s.waiting,
            "kv_cache": {
                "bytes": s.kv_bytes,
                "peak_bytes": s.peak_kv_bytes,
                "budget_bytes": s.kv_budget_bytes,
                "idle_caches": s.idle_caches,
            },
        }))
        .into_response(),
        Ok(Err(e)) => ApiError::from(e).into_response(),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

async fn models(State(app): State<Arc<App>>) -> Json<Value> {
    let info = app.engine.info();
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.model_id,
            "object": "model",
            "created": app.created,
            "owned_by": "hearth",
            "meta": {
                "origin": info.origin,
                "family": info.family,
                "n_ctx": info.max_positions,
                "n_vocab": app.engine.tokenizer().vocab_size(),
                "dtype": info.dtype,
                "device": info.device,
            },
        }],
    }))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_must_match_whole() {
        assert!(same_key("sesame", "sesame"));
        assert!(!same_key("sesam", "sesame"));
        assert!(!same_key("sesamee", "sesame"));
        assert!(!same_key("Sesame", "sesame"));
        assert!(!same_key("", "sesame"));
    }

    #[test]
    fn cors_is_off_unless_an_origin_is_given() {
        assert!(cors(None).is_none());
        assert!(cors(Some("*")).is_some());
        assert!(cors(Some("http://localhost:3000")).is_some());
        // Not a header value: refused rather than opened to all.
        assert!(cors(Some("bad\norigin")).is_none());
    }
}
