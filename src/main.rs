//! `hearth`: run LLM agents offline on a workstation GPU.

mod commands;
mod mcp_args;
mod model_args;
mod serve;

use commands::{agent, bench, chat, graph, launch, models, parity, replay, run, template};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "hearth",
    version,
    about = "Run Qwen models and agents offline, in process"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log lines on stderr: -v debug, -vv trace (HEARTH_LOG overrides).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only warnings and errors on stderr (HEARTH_LOG overrides).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Stream a plain completion of a prompt.
    Run(run::RunArgs),
    /// Chat with a model in the terminal (or through piped stdin).
    Chat(chat::ChatArgs),
    /// Run a task through the tool loop (calculator, time, files, python).
    Agent(Box<agent::AgentArgs>),
    /// Serve the model over OpenAI's API (chat completions, completions, models).
    Serve(serve::ServeArgs),
    /// Run a recorded agent run again and report the first step that differs.
    Replay(replay::ReplayArgs),
    /// Print the exact prompt a model would see for a conversation.
    Template(template::TemplateArgs),
    /// Validate, visualise or compare node contracts.
    #[command(subcommand)]
    Graph(graph::GraphCommand),
    /// List the built-in model cards.
    Models,
    /// Measure prefill and decode tokens per second.
    Bench(bench::BenchArgs),
    /// Check this build on a device against reference logits from transformers.
    Parity(parity::ParityArgs),
    /// Run a coding agent (claude, codex, opencode, qwen) against `hearth serve`.
    Launch(launch::LaunchArgs),
}

fn main() -> std::process::ExitCode {
    hearth_engine::device::memory::one_arena();
    let cli = Cli::parse();
    // The MCP SDK's session chatter only from -vv on.
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info,rmcp=warn",
        (false, 1) => "debug,rmcp=warn",
        (false, _) => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Template(args) => template::run(args),
        Command::Agent(args) => agent::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Models => models::run(),
        Command::Graph(cmd) => graph::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Parity(args) => parity::run(args),
        Command::Launch(args) => launch::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", flag_names(&format!("{e:#}")));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The libraries name the fields they refuse (`invalid max_tokens: …`); a user of the CLI
/// sets them with flags, so errors name the flag.
fn flag_names(message: &str) -> String {
    const FIELDS: [&str; 16] = [
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repetition_penalty",
        "device",
        "max_tokens",
        "dtype",
        "template",
        "model",
        "max_seqs",
        "kv_cache_mb",
        "prefill_chunk",
        "speculative",
        "draft_model",
        "max_step_rows",
    ];
    let mut out = message.to_string();
    for field in FIELDS {
        out = out.replace(
            &format!("invalid {field}:"),
            &format!("invalid --{}:", field.replace('_', "-")),
        );
    }
    out
}
