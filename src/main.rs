//! `hearth`: run LLM agents offline on a workstation GPU.

mod bench;
mod model_args;
mod run;

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
}

#[derive(Subcommand)]
enum Command {
    /// Stream a plain completion of a prompt.
    Run(run::RunArgs),
    /// Measure prefill and decode tokens per second.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
