//! `hearth launch AGENT`: a coding agent (Claude Code, Codex, OpenCode, Qwen Code) run against
//! `hearth serve` — started here on `--model`, or already running at `--url` — with the
//! environment and configuration that point the agent at it. The agent's own config files
//! are left as they are: everything goes in through its environment and flags.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// Claude Code (Anthropic's Messages API).
    Claude,
    /// Codex CLI (OpenAI's Responses API).
    Codex,
    /// OpenCode (chat completions).
    Opencode,
    /// Qwen Code (chat completions).
    Qwen,
}

#[derive(Args, Debug)]
pub struct LaunchArgs {
    /// The coding agent to run.
    pub agent: Agent,
    /// The model to serve (as `hearth serve --model`); with --url, the name the agent shows.
    #[arg(short, long)]
    pub model: Option<String>,
    /// A `hearth serve` already running (http://HOST:PORT) instead of starting one.
    #[arg(long)]
    pub url: Option<String>,
    /// The API key the server takes (also HEARTH_API_KEY).
    #[arg(long, env = "HEARTH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// More arguments for the `hearth serve` started here (repeatable, e.g.
    /// `--serve-arg=--kv-cache-mb=4096`).
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub serve_args: Vec<String>,
    /// Where the started server's log goes (default: a file in the system's temp folder).
    #[arg(long, value_name = "FILE")]
    pub server_log: Option<PathBuf>,
    /// Arguments for the agent, after `--` (e.g. `-- -p "fix the test"`).
    #[arg(last = true)]
    pub agent_args: Vec<String>,
}

impl Agent {
    /// The agent's command and the npm package it comes from.
    fn program(self) -> (&'static str, &'static str) {
        match self {
            Agent::Claude => ("claude", "@anthropic-ai/claude-code"),
            Agent::Codex => ("codex", "@openai/codex"),
            Agent::Opencode => ("opencode", "opencode-ai"),
            Agent::Qwen => ("qwen", "@qwen-code/qwen-code"),
        }
    }

    /// The agent's command pointed at the server at `url` (http://HOST:PORT) serving
    /// `model`, with `key` as its API key.
    pub fn command(self, program: &Path, url: &str, model: &str, key: &str) -> Command {
        let mut c = Command::new(program);
        match self {
            Agent::Claude => {
                c.env("ANTHROPIC_BASE_URL", url)
                    .env("ANTHROPIC_API_KEY", key)
                    .env("ANTHROPIC_MODEL", model)
                    // Its side requests (titles, summaries) go to the same model.
                    .env("ANTHROPIC_SMALL_FAST_MODEL", model)
                    .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", model)
                    .env("ANTHROPIC_DEFAULT_SONNET_MODEL", model)
                    .env("ANTHROPIC_DEFAULT_OPUS_MODEL", model)
                    // A long prompt's prefill on a CPU takes minutes before the first
                    // event: Claude Code gives up on a stream quiet for 5 minutes (pings do
                    // not count) and on a request after 10.
                    .env("CLAUDE_STREAM_IDLE_TIMEOUT_MS", LONG_WAIT_MS)
                    .env("API_TIMEOUT_MS", LONG_WAIT_MS)
                    // Offline: no telemetry, update checks or other traffic to Anthropic.
                    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                    .env("DISABLE_TELEMETRY", "1")
                    .env("DISABLE_AUTOUPDATER", "1");
            }
            Agent::Codex => {
                // Codex gives up on a stream quiet for 5 minutes: a long prefill is longer.
                let provider = format!(
                    "model_providers.hearth={{name=\"hearth\",base_url=\"{url}/v1\",\
                     wire_api=\"responses\",env_key=\"HEARTH_AGENT_KEY\",\
                     stream_idle_timeout_ms={LONG_WAIT_MS}}}"
                );
                c.env("HEARTH_AGENT_KEY", key)
                    .args(["-c", &provider, "-c", "model_provider=\"hearth\""])
                    .args(["-c", &format!("model={}", toml_string(model))]);
            }
            Agent::Opencode => {
                let config = json!({
                    "provider": {"hearth": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Hearth",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": key},
                        "models": {model: {}},
                    }},
                    "model": format!("hearth/{model}"),
                });
                c.env("OPENCODE_CONFIG_CONTENT", config.to_string());
            }
            Agent::Qwen => {
                c.env("OPENAI_BASE_URL", format!("{url}/v1"))
                    .env("OPENAI_API_KEY", key)
                    .env("OPENAI_MODEL", model)
                    .args(["--auth-type", "openai"]);
            }
        }
        c
    }
}

impl Agent {
    /// Tells the agent the server's context length where it takes one, so that it compacts a
    /// conversation before the server refuses it: Codex's `model_context_window` (compacting
    /// at nine tenths of it). The others learn it from the server's error (Claude Code's
    /// "prompt is too long") or not at all.
    pub fn fit_context(self, c: &mut Command, n_ctx: usize) {
        if self == Agent::Codex {
            c.args(["-c", &format!("model_context_window={n_ctx}")])
                .args([
                    "-c",
                    &format!("model_auto_compact_token_limit={}", n_ctx / 10 * 9),
                ]);
        }
    }
}

/// The server's context length (`meta.n_ctx` of `/v1/models`), where it answers in time.
fn context_length(url: &str, key: &str) -> Option<usize> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let answer = reqwest::Client::new()
            .get(format!("{url}/v1/models"))
            .bearer_auth(key)
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        let models: serde_json::Value = answer.json().await.ok()?;
        models["data"][0]["meta"]["n_ctx"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
    })
}

/// How long an agent waits on the server before it gives up (an hour, in milliseconds): the
/// agents' defaults are made for hosted models, whose first token comes in seconds.
const LONG_WAIT_MS: &str = "3600000";

/// `s` as a TOML string (a model name may hold `/` or `:`).
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// The agent's program: on PATH, else in the folder scripts/fetch-coding-agents.sh fills.
fn find_program(agent: Agent) -> anyhow::Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let cache = std::env::var_os("HEARTH_CODING_AGENTS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HEARTH_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hearth"))
                })
                .map(|c| c.join("coding-agents"))
        });
    dirs.extend(cache.map(|c| c.join("node_modules/.bin")));
    find_in(agent, &dirs)
}

/// The agent's program in the first of `dirs` that has it.
fn find_in(agent: Agent, dirs: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let (name, package) = agent.program();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "`{name}` is not installed: install it with `npm install -g {package}` \
                 (or scripts/fetch-coding-agents.sh)"
            )
        })
}

/// A `hearth serve` started for the agent, stopped when dropped.
struct Started {
    child: Child,
    url: String,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &LaunchArgs, model: &str, log: &Path) -> anyhow::Result<Started> {
    let exe = std::env::current_exe().context("cannot find hearth's own program")?;
    let mut c = Command::new(exe);
    c.args(["serve", "--model", model, "--port", "0"])
        .args(&args.serve_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(key) = &args.api_key {
        c.env("HEARTH_API_KEY", key);
    }
    let mut child = c.spawn().context("cannot start `hearth serve`")?;
    let stderr = child.stderr.take().context("no server stderr")?;
    let mut file = std::fs::File::create(log)
        .with_context(|| format!("cannot write the server log {}", log.display()))?;
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut server = Started {
        child,
        url: String::new(),
    };
    for line in lines.by_ref() {
        let line = line.context("reading the server's log")?;
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes())?;
        if let Some(addr) = line.split("listening on http://").nth(1) {
            server.url = format!("http://{}", addr.trim());
            break;
        }
    }
    if server.url.is_empty() {
        bail!(
            "`hearth serve --model {model}` stopped before it listened; its log: {}",
            log.display()
        );
    }
    // The rest of the log goes to the file, so the agent's terminal stays its own.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes());
        }
    });
    Ok(server)
}

pub fn run(args: LaunchArgs) -> anyhow::Result<()> {
    let program = find_program(args.agent)?;
    let key = args.api_key.clone().unwrap_or_else(|| "hearth".into());
    let (server, url) = match (&args.url, &args.model) {
        (Some(url), _) => (None, url.trim_end_matches('/').to_string()),
        (None, Some(model)) => {
            let log = args.server_log.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("hearth-launch-{}.log", std::process::id()))
            });
            eprintln!("starting hearth serve on {model} (log: {})", log.display());
            let s = start_server(&args, model, &log)?;
            let url = s.url.clone();
            (Some(s), url)
        }
        (None, None) => bail!("name a model to serve with --model, or a running server with --url"),
    };
    // The server answers whatever model a request names; the agent shows this one.
    let model = args.model.clone().unwrap_or_else(|| "hearth".into());
    eprintln!("{} on {url} ({model})", program.display());
    let mut agent = args.agent.command(&program, &url, &model, &key);
    if let Some(n) = context_length(&url, &key) {
        args.agent.fit_context(&mut agent, n);
    }
    let status = agent
        .args(&args.agent_args)
        .status()
        .with_context(|| format!("cannot run {}", program.display()))?;
    drop(server);
    if !status.success() {
        bail!("{} exited with {status}", program.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(c: &Command, key: &str) -> Option<String> {
        c.get_envs()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
    }

    fn args(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn each_agent_is_pointed_at_the_server() {
        let (url, model, key) = ("http://127.0.0.1:9", "qwen/coder", "k");
        let p = Path::new("agent");
        let c = Agent::Claude.command(p, url, model, key);
        assert_eq!(env(&c, "ANTHROPIC_BASE_URL").as_deref(), Some(url));
        assert_eq!(env(&c, "ANTHROPIC_MODEL").as_deref(), Some(model));
        assert_eq!(
            env(&c, "CLAUDE_STREAM_IDLE_TIMEOUT_MS").as_deref(),
            Some(LONG_WAIT_MS)
        );
        let c = Agent::Codex.command(p, url, model, key);
        let a = args(&c).join(" ");
        assert!(a.contains("base_url=\"http://127.0.0.1:9/v1\""), "{a}");
        assert!(a.contains("wire_api=\"responses\""), "{a}");
        assert!(a.contains("model=\"qwen/coder\""), "{a}");
        assert!(a.contains("stream_idle_timeout_ms=3600000"), "{a}");
        assert_eq!(env(&c, "HEARTH_AGENT_KEY").as_deref(), Some(key));
        let mut c = Agent::Codex.command(p, url, model, key);
        Agent::Codex.fit_context(&mut c, 32768);
        let a = args(&c).join(" ");
        assert!(a.contains("-c model_context_window=32768"), "{a}");
        assert!(a.contains("-c model_auto_compact_token_limit=29484"), "{a}");
        let c = Agent::Opencode.command(p, url, model, key);
        let config: serde_json::Value =
            serde_json::from_str(&env(&c, "OPENCODE_CONFIG_CONTENT").unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(config["model"], json!("hearth/qwen/coder"));
        assert_eq!(
            config["provider"]["hearth"]["options"]["baseURL"],
            json!("http://127.0.0.1:9/v1")
        );
        let c = Agent::Qwen.command(p, url, model, key);
        assert_eq!(
            env(&c, "OPENAI_BASE_URL").as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(args(&c), ["--auth-type", "openai"]);
    }

    #[test]
    fn a_missing_agent_says_how_to_install_it() {
        let empty = std::env::temp_dir().join("hearth-launch-no-agents");
        let e = find_in(Agent::Codex, &[empty])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("npm install -g @openai/codex"), "{e}");
    }
}
