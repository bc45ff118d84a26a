//! `hearth agent`: one task through the tool loop on the in-process engine, streaming the
//! model's text, its tool calls and their results; `--json` prints the run as one object
//! on stdout and streams the progress to stderr.

use crate::model_args::{check_max_tokens, ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_agent::tool_agent::{RunOptions, StopReason, ToolAgentRun};
use hearth_agent::{LlmRequest, LocalLlm, ToolAgent, ToolAgentEvent};
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
    /// Tools to offer: calculator, time, files, python (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "calculator,time")]
    pub tools: Vec<String>,
    /// The directory the file tools may read (default: the current one).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// A session name: its history and KV cache are kept within this process.
    #[arg(long, default_value = "default")]
    pub session: String,
    /// Most model calls in the tool loop.
    #[arg(long, default_value_t = 10)]
    pub max_iterations: usize,
    /// Most tokens per model call.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    /// The agent's persona (system prompt).
    #[arg(long)]
    pub system: Option<String>,
    /// Print the run as one JSON object (answer, stop reason, tool calls, iterations).
    #[arg(long)]
    pub json: bool,
    /// The task.
    pub task: String,
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
    let tools = hearth_agent::tools::registry(&args.tools, args.workspace.clone())
        .map_err(anyhow::Error::msg)?;
    let engine = Arc::new(
        Engine::load(&args.model.model, &args.model.load_options()?)
            .with_context(|| format!("loading model `{}`", args.model.model))?,
    );
    // Tool use is most reliable greedy; flags still override.
    let sampling = args.sampling.apply(&SamplingParams::greedy());
    let llm = LocalLlm::new(engine).with_max_tokens(args.max_tokens);
    let mut agent = ToolAgent::new(Arc::new(llm), tools);
    agent.max_iterations = args.max_iterations;
    agent.request = LlmRequest {
        sampling: Some(sampling),
        ..Default::default()
    };
    if let Some(s) = &args.system {
        agent.persona = s.clone();
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let json = args.json;
    let printer = std::thread::spawn(move || {
        // With --json, stdout holds only the final object; the run's progress still shows, on
        // stderr, so a long run is not silent.
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
                    eprintln!("← {}: {}", result.name, result.for_model());
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
    let result =
        rt.block_on(agent.run(&args.task, &args.session, RunOptions::default(), Some(&tx)));
    drop(tx);
    let _ = printer.join();
    let run = result?;
    if json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    }
    gave_up(&run)
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
