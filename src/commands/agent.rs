//! `hearth agent`: one task through the tool loop on the in-process engine, streaming the
//! model's text, its tool calls and their results; `--json` prints the run as one object
//! on stdout and streams the progress to stderr. `--session NAME` continues a conversation
//! saved in a SQLite file, one transaction per completed turn; `--record FILE` writes the
//! run's every step as JSON lines for `hearth replay`.

use crate::model_args::{check_max_tokens, ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_agent::hooks::MessageLogger;
use hearth_agent::knowledge::FolderKnowledge;
use hearth_agent::llm::{Backend, FallbackConfig, FallbackLlm, FallbackServer, OpenAiLlm};
use hearth_agent::persistence::record::{Entry, Recorder, RunHeader};
use hearth_agent::run::tool_agent::{RunOptions, StopReason, ToolAgentRun};
use hearth_agent::{Agent, Llm, LlmRequest, LocalLlm, SessionStore, ToolAgent, ToolAgentEvent};
use hearth_engine::{Engine, SamplingParams};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub mcp: crate::mcp_args::McpArgs,
    /// Calls to MCP tools: ask on the terminal before each, auto (run them all), or deny.
    #[arg(long, value_enum, default_value_t = crate::mcp_args::Approve::Ask)]
    pub approve: crate::mcp_args::Approve,
    /// Tools to offer: calculator, time, files, python (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "calculator,time")]
    pub tools: Vec<String>,
    /// The directory the file tools may read (default: the current one).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub durable: SessionArgs,
    /// Most model calls in the tool loop.
    #[arg(long, default_value_t = 10)]
    pub max_iterations: usize,
    /// Most tokens per model call.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// The agent's persona (system prompt).
    #[arg(long)]
    pub system: Option<String>,
    /// A folder of text files: the passages most relevant to the task are added to the prompt.
    #[arg(long, value_name = "DIR")]
    pub knowledge: Option<PathBuf>,
    /// Record every model request and answer, tool call and result of this run in FILE
    /// (JSON lines, replaced if it exists), for `hearth replay`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Print the run as one JSON object (answer, stop reason, tool calls, iterations).
    #[arg(long)]
    pub json: bool,
    /// Log every message in and out of the agent, each tool call and each result to stderr
    /// as the run goes (lagent's MessageLogger).
    #[arg(long)]
    pub log_messages: bool,
    /// Let the model write tool calls freely (repaired by the parser) instead of decoding
    /// them under the grammar of the offered tools' schemas; for comparisons.
    #[arg(long)]
    pub free_tool_calls: bool,
    /// Run the agent on a model served over OpenAI's API (hearth serve, vLLM, SGLang,
    /// llama-server) at this base URL, e.g. http://127.0.0.1:8000/v1, instead of loading
    /// --model; the key comes from HEARTH_LLM_API_KEY or OPENAI_API_KEY.
    #[arg(long, value_name = "URL")]
    pub llm_url: Option<String>,
    /// The model to ask the server at --llm-url for (default: the first it lists).
    #[arg(long, value_name = "NAME", requires = "llm_url")]
    pub llm_model: Option<String>,
    /// A server of OpenAI's API that answers when the model before it fails (an error, or
    /// no answer within --llm-timeout); repeatable, asked in order. A failed one is skipped
    /// for 30 s, doubling while it keeps failing, then asked again.
    #[arg(long, value_name = "URL")]
    pub llm_fallback: Vec<String>,
    /// Seconds each model may take to its answer's first token before the next is asked
    /// (with --llm-fallback or --llm-config).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub llm_timeout: u64,
    /// A TOML file of fallback servers (`[[fallback]]` tables with `url`, and optionally
    /// `model`, `timeout_secs`, `retries`; top-level `timeout_secs` and `backoff_secs`),
    /// asked after --llm-fallback's; see docs/agents-and-tools.md.
    #[arg(long, value_name = "FILE")]
    pub llm_config: Option<PathBuf>,
    /// The user the agent works for, passed to its tools with each call (with the session).
    #[arg(long)]
    pub user: Option<String>,
    /// The tenant whose data the tools may touch, passed with each call.
    #[arg(long)]
    pub tenant: Option<String>,
    /// An image (PNG, JPEG, WebP, GIF) for the task, for a model with a vision tower (a
    /// model without one reads a note in its place); repeatable.
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// The task.
    pub task: String,
}

/// An OpenAI-compatible server as the agent's model; its model name asked for when not given.
/// Asked on `rt`, the runtime the agent then runs on: the client's pooled connections belong
/// to it.
fn remote_llm(
    rt: &tokio::runtime::Runtime,
    url: &str,
    model: Option<&str>,
    max_tokens: usize,
) -> anyhow::Result<OpenAiLlm> {
    let llm = OpenAiLlm::new(url, model.unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("invalid --llm-url: {e}"))?
        .with_max_tokens(max_tokens);
    rt.block_on(llm.discover_model())
        .map_err(|e| anyhow::anyhow!("--llm-url: {e}"))
}

/// The --llm-config file, read before any model loads.
fn fallback_config(args: &AgentArgs) -> anyhow::Result<FallbackConfig> {
    let Some(path) = &args.llm_config else {
        return Ok(FallbackConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--llm-config {}: cannot read it", path.display()))?;
    toml::from_str::<FallbackConfig>(&text)
        .map_err(|e| anyhow::anyhow!("--llm-config {}: {e}", path.display()))
}

/// `llm`, then each --llm-fallback server and each of the --llm-config file's, as one
/// model: the first that answers in time.
fn with_fallbacks(
    rt: &tokio::runtime::Runtime,
    llm: Arc<dyn Llm>,
    args: &AgentArgs,
    config: &FallbackConfig,
) -> anyhow::Result<Arc<dyn Llm>> {
    let secs = |s: u64| std::time::Duration::from_secs(s.max(1));
    let mut servers: Vec<FallbackServer> = args
        .llm_fallback
        .iter()
        .map(|url| FallbackServer {
            url: url.clone(),
            model: None,
            timeout_secs: Some(args.llm_timeout),
            retries: 0,
        })
        .collect();
    servers.extend(config.fallbacks.iter().cloned());
    if servers.is_empty() {
        return Ok(llm);
    }
    let main_timeout = config.timeout_secs.unwrap_or(args.llm_timeout);
    let mut backends = vec![Backend::new(llm).with_timeout(secs(main_timeout))];
    for server in servers {
        let url = &server.url;
        let remote = OpenAiLlm::new(url, server.model.as_deref().unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("invalid fallback {url}: {e}"))?
            .with_max_tokens(args.max_tokens);
        // A fallback that is down now may be up when it is needed: its model is asked for
        // now if it answers, else the requests name none.
        let remote = if server.model.is_some() {
            remote
        } else {
            let discovered = rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(5), remote.discover_model())
                    .await
            });
            match discovered {
                Ok(Ok(r)) => r,
                _ => {
                    tracing::warn!("fallback {url}: no model list now; its requests name no model");
                    OpenAiLlm::new(url, "")
                        .map_err(|e| anyhow::anyhow!("invalid fallback {url}: {e}"))?
                        .with_max_tokens(args.max_tokens)
                }
            }
        };
        backends.push(
            Backend::new(Arc::new(remote))
                .named(url.clone())
                .with_timeout(secs(server.timeout_secs.unwrap_or(args.llm_timeout)))
                .with_retries(server.retries),
        );
    }
    let mut fallback = FallbackLlm::new(backends)?;
    if let Some(b) = config.backoff_secs {
        fallback = fallback.with_backoff(secs(b));
    }
    Ok(Arc::new(fallback))
}

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    if args.task.trim().is_empty() {
        bail!("invalid task: empty message");
    }
    check_max_tokens(args.max_tokens)?;
    args.sampling.check()?;
    if args.max_iterations == 0 {
        bail!("invalid --max-iterations: 0 (must be at least 1)");
    }
    // The task's images travel in its text; the model backend takes them out.
    let mut task = String::new();
    for path in &args.image {
        let span = hearth_agent::image::inline_file(path)
            .map_err(|e| anyhow::anyhow!("invalid --image: {e}"))?;
        task.push_str(&span);
    }
    task.push_str(&args.task);
    let mut tools = hearth_agent::tools::registry(&args.tools, args.workspace.clone())
        .map_err(anyhow::Error::msg)?;
    let mcp_servers = args.mcp.specs()?;
    let fallbacks = fallback_config(&args)?;
    // The database is checked before the model loads: a bad file fails fast.
    let mut durable = args.durable.open()?;
    let knowledge = args
        .knowledge
        .as_deref()
        .map(FolderKnowledge::open)
        .transpose()?;
    let recorder = args.record.as_deref().map(Recorder::create).transpose()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Started before the model loads: a server that cannot start fails fast.
    let mcp = args
        .mcp
        .connect(&rt, &mcp_servers, args.approve.approval())?;
    for source in &mcp {
        tools.add_source(source.clone());
    }
    if args.mcp.any() {
        // The call's own timeout (--mcp-timeout) comes first, and the user's answer is not
        // the tool's time: that timeout runs after it.
        let secs = match args.approve {
            crate::mcp_args::Approve::Ask => 3600,
            _ => args.mcp.mcp_timeout.max(25) + 5,
        };
        tools = tools.with_timeout(std::time::Duration::from_secs(secs));
    }
    let mut engine = None;
    let llm: Arc<dyn Llm> = match &args.llm_url {
        Some(url) => Arc::new(remote_llm(
            &rt,
            url,
            args.llm_model.as_deref(),
            args.max_tokens,
        )?),
        None => {
            let e = Arc::new(
                Engine::load(&args.model.model, &args.model.load_options()?)
                    .with_context(|| format!("loading model `{}`", args.model.model))?,
            );
            engine = Some(e.clone());
            Arc::new(
                LocalLlm::new(e)
                    .with_max_tokens(args.max_tokens)
                    .with_constrained_tool_calls(!args.free_tool_calls),
            )
        }
    };
    let llm = with_fallbacks(&rt, llm, &args, &fallbacks)?;
    // Tool use is most reliable greedy; flags still override.
    let sampling = args.sampling.apply(&SamplingParams::greedy());
    let mut agent = ToolAgent::new(llm, tools);
    agent.max_iterations = args.max_iterations;
    agent.llm_agent.request = LlmRequest {
        sampling: Some(sampling),
        max_tokens: Some(args.max_tokens),
        ..Default::default()
    };
    if let Some(s) = &args.system {
        agent.set_persona(s.clone());
    }
    if args.log_messages {
        agent.llm_agent.hooks.add(Arc::new(MessageLogger));
    }
    if let Some(k) = knowledge {
        agent.knowledge = Some(Arc::new(k));
    }
    let session = args
        .durable
        .session
        .clone()
        .unwrap_or_else(|| "default".into());
    if let Some(d) = &durable {
        d.restore(&agent, &session, engine.as_deref())?;
    }
    if let Some(r) = &recorder {
        r.attach(&mut agent);
        let mut header = RunHeader::of(&agent, &task, &session);
        // What `hearth replay --live` needs to build the same tools again.
        header
            .extra
            .insert("tools".into(), serde_json::json!(args.tools));
        header
            .extra
            .insert("workspace".into(), serde_json::json!(args.workspace));
        header.extra.insert(
            "free_tool_calls".into(),
            serde_json::json!(args.free_tool_calls),
        );
        r.write(Entry::Run(Box::new(header)));
    }

    // Who the tools work for: they read it from their call's context.
    let options = RunOptions {
        context: hearth_agent::ToolContext {
            user: args.user.clone(),
            tenant: args.tenant.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    let result = run_turn(&rt, &agent, &task, &session, args.json, options);
    let run = result?;
    if let Some(r) = &recorder {
        r.write(Entry::End { run: run.clone() });
        r.check()?;
    }
    if let Some(d) = &mut durable {
        // A failed turn wrote no memory: there is nothing new to save.
        if run.stop_reason != StopReason::Error {
            d.save(&agent, &session, engine.as_deref())?;
        }
    }
    // The agent holds the servers' tools; then their sessions end (on an early return, the
    // runtime's end kills a stdio server's process).
    drop(agent);
    crate::mcp_args::close(&rt, mcp);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    }
    gave_up(&run)
}

/// Runs one turn, showing the model's text on stdout (on stderr with `json`, where stdout
/// keeps only the final object) and its tool calls and results on stderr as they happen.
pub(crate) fn run_turn(
    rt: &tokio::runtime::Runtime,
    agent: &ToolAgent,
    task: &str,
    session: &str,
    json: bool,
    options: RunOptions,
) -> hearth_agent::Result<ToolAgentRun> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let printer = std::thread::spawn(move || {
        let mut out: Box<dyn Write> = if json {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout().lock())
        };
        while let Some(event) = rx.blocking_recv() {
            let _ = match event {
                ToolAgentEvent::TextDelta { text } => write!(out, "{text}"),
                ToolAgentEvent::Reasoning { text } => {
                    eprint!("{text}");
                    Ok(())
                }
                ToolAgentEvent::ToolCallsStart { calls } => {
                    for c in calls {
                        eprintln!("\n→ {}({})", c.function.name, c.function.arguments);
                    }
                    Ok(())
                }
                ToolAgentEvent::ToolResult { result } => {
                    // An image shows as its type and size, not its base64.
                    let shown = hearth_agent::image::replace_images(&result.for_model(), |t, b| {
                        format!("[{t}, {} bytes]", b.len())
                    });
                    eprintln!("← {}: {shown}", result.name);
                    Ok(())
                }
                ToolAgentEvent::ToolCallsComplete => Ok(()),
                ToolAgentEvent::Done { run } => {
                    eprintln!(
                        "[stop: {:?}, {} iterations, {} tool calls]",
                        run.stop_reason,
                        run.iterations,
                        run.tool_calls.len()
                    );
                    writeln!(out)
                }
            };
            let _ = out.flush();
        }
    });
    let result = rt.block_on(agent.run(task, session, options, Some(&tx)));
    drop(tx);
    let _ = printer.join();
    result
}

/// `--session NAME` and `--db FILE`: a conversation kept in the session database, for
/// `hearth agent` and `hearth chat`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SessionArgs {
    /// Keep the conversation as NAME: its memory and KV cache are loaded from the session
    /// database and saved there after each turn (without it, nothing is remembered after
    /// this run).
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// The session database (default: $XDG_DATA_HOME/hearth/agents.db, or
    /// ~/.local/share/hearth/agents.db).
    #[arg(long, value_name = "FILE", requires = "session")]
    pub db: Option<PathBuf>,
}

impl SessionArgs {
    /// The named session, opened and claimed (before a model loads: a bad file fails fast);
    /// none without `--session`.
    pub(crate) fn open(&self) -> anyhow::Result<Option<Durable>> {
        match &self.session {
            Some(name) if name.trim().is_empty() => bail!("invalid --session: empty name"),
            Some(name) => Durable::open(name, self.db.clone()).map(Some),
            None => Ok(None),
        }
    }
}

/// A named session held by this process: its database, its claim, and the turns loaded.
pub(crate) struct Durable {
    name: String,
    store: SessionStore,
    _claim: hearth_agent::SessionClaim,
    loaded_turns: u64,
    saved: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Durable {
    pub(crate) fn open(name: &str, db: Option<PathBuf>) -> anyhow::Result<Self> {
        let path = match db {
            Some(p) => p,
            None => {
                let p = default_db()?;
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                p
            }
        };
        let store = SessionStore::open(&path)?;
        let claim = store.claim(name)?;
        let saved = store.load(name)?;
        Ok(Self {
            name: name.to_string(),
            loaded_turns: saved.as_ref().map_or(0, |s| s.turns),
            saved: saved.map(|s| s.state),
            store,
            _claim: claim,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Loads the saved memory into `agent`, and with a local `engine` the KV cache saved with
    /// the last turn, so that the next prompt runs only what follows it. A cache the engine
    /// refuses (another model, file or kernel level) is reported and the prompt is computed
    /// in full.
    pub(crate) fn restore(
        &self,
        agent: &ToolAgent,
        session: &str,
        engine: Option<&Engine>,
    ) -> anyhow::Result<()> {
        let Some(state) = &self.saved else {
            return Ok(());
        };
        agent.load_state_dict(&self.name, state).with_context(|| {
            format!("session `{}` in {}", self.name, self.store.path().display())
        })?;
        let Some(engine) = engine else {
            return Ok(());
        };
        let where_ = format!("session `{}` in {}", self.name, self.store.path().display());
        match self.store.load_cache(&self.name)? {
            None => tracing::info!(
                "{where_}: {} earlier turn(s), no KV cache saved; the first prompt is computed in full",
                self.loaded_turns
            ),
            Some(bytes) => match engine.restore_session_cache(&agent.kv_session(session), &bytes) {
                Ok(n) => tracing::info!(
                    "{where_}: {} earlier turn(s), {n} tokens of KV cache restored ({:.1} MiB)",
                    self.loaded_turns,
                    bytes.len() as f64 / (1 << 20) as f64
                ),
                Err(e) => tracing::warn!(
                    "{where_}: the saved KV cache is not used ({e}); the first prompt is computed in full"
                ),
            },
        }
        Ok(())
    }

    /// Saves the agent's state of the session as one more turn, with the engine's KV cache of
    /// it when the model runs in this process.
    pub(crate) fn save(
        &mut self,
        agent: &ToolAgent,
        session: &str,
        engine: Option<&Engine>,
    ) -> anyhow::Result<()> {
        let kv = match engine.map(|e| e.session_cache(&agent.kv_session(session))) {
            Some(Ok(kv)) => kv,
            Some(Err(e)) => {
                tracing::warn!("session `{}`: its KV cache is not saved: {e}", self.name);
                None
            }
            None => None,
        };
        self.loaded_turns = self.store.save_with_cache(
            &self.name,
            &agent.state_dict(&self.name),
            self.loaded_turns,
            kv.as_deref(),
        )?;
        Ok(())
    }
}

/// The session database when `--db` is not given.
fn default_db() -> anyhow::Result<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .context(
            "no data directory for the session database: set HOME or XDG_DATA_HOME, or pass --db",
        )?;
    Ok(base.join("hearth").join("agents.db"))
}

/// A run that failed, or ended without an answer, is not a success: scripts must see it in
/// the exit status, after the run itself has been printed.
fn gave_up(run: &ToolAgentRun) -> anyhow::Result<()> {
    if run.stop_reason == StopReason::Error {
        bail!(
            "the agent failed after {} model call(s): {}",
            run.iterations,
            run.error.as_deref().unwrap_or("no error message")
        );
    }
    if run.answer.trim().is_empty() {
        let why = match &run.stop_reason {
            StopReason::MaxIterations => "it reached --max-iterations".to_string(),
            other => format!("stop: {other:?}"),
        };
        bail!(
            "the agent gave no answer after {} model call(s) ({why})",
            run.iterations
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(answer: &str, stop_reason: StopReason) -> ToolAgentRun {
        let error = (stop_reason == StopReason::Error).then(|| "model failed".into());
        ToolAgentRun {
            answer: answer.into(),
            stop_reason,
            tool_calls: vec![],
            iterations: 3,
            error,
            backend: None,
        }
    }

    #[test]
    fn a_run_that_gives_up_is_an_error() {
        let e = gave_up(&run("", StopReason::MaxIterations)).unwrap_err();
        assert!(e.to_string().contains("--max-iterations"), "{e}");
        assert!(gave_up(&run(" \n", StopReason::NoAction)).is_err());
        let e = gave_up(&run("partial", StopReason::Error)).unwrap_err();
        assert!(e.to_string().contains("model failed"), "{e}");
        assert!(gave_up(&run("4", StopReason::Answer)).is_ok());
        // An answer written before the last tool round still answers the task.
        assert!(gave_up(&run("4", StopReason::MaxIterations)).is_ok());
    }
}
