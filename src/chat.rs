//! `hearth chat`: an interactive terminal chat with streaming output and multi-turn history.
//! Reads one user message per line; piped stdin works for scripting.

use crate::model_args::{ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_engine::{ChatMessage, ChatRequest, Engine, Event};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// A system message for the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// Qwen3 thinking: on or off (default: the template's default).
    #[arg(long)]
    pub think: Option<String>,
}

const HELP: &str =
    "commands: /reset, /system <text>, /think on|off, /exit (Ctrl-C stops an answer)";

fn parse_think(v: &str) -> anyhow::Result<bool> {
    match v {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => bail!("invalid --think/`/think`: `{v}` (expected on or off)"),
    }
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    args.sampling.check()?;
    let mut thinking = args.think.as_deref().map(parse_think).transpose()?;
    let engine = Engine::load(&args.model.model, &args.model.load_options()?)
        .with_context(|| format!("loading model `{}`", args.model.model))?;
    let sampling = args.sampling.apply(&engine.info().sampling);

    // Ctrl-C while answering stops the answer; at the prompt it ends the session.
    let answering = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (answering, interrupted) = (answering.clone(), interrupted.clone());
        ctrlc::set_handler(move || {
            if answering.load(Ordering::SeqCst) {
                interrupted.store(true, Ordering::SeqCst);
            } else {
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;
    }

    let interactive = std::io::stdin().is_terminal();
    let tty_out = std::io::stdout().is_terminal();
    let mut system = args.system.clone();
    let mut history: Vec<ChatMessage> = vec![];
    let mut session = 0u64;
    if interactive {
        eprintln!("{} — {HELP}", engine.info().origin);
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(cmd) = line.strip_prefix('/') {
            let (name, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
            match name {
                "exit" | "quit" => break,
                "reset" => {
                    history.clear();
                    engine.drop_session(&format!("chat-{session}"))?;
                    session += 1;
                    eprintln!("[history cleared]");
                }
                "system" => {
                    system = Some(rest.trim().to_string()).filter(|s| !s.is_empty());
                    eprintln!(
                        "[system message {}]",
                        if system.is_some() { "set" } else { "removed" }
                    );
                }
                "think" => match parse_think(rest.trim()) {
                    Ok(on) => {
                        thinking = Some(on);
                        if !engine.info().thinks {
                            eprintln!("[this model does not think; the setting has no effect]");
                        } else {
                            eprintln!("[thinking {}]", if on { "on" } else { "off" });
                        }
                    }
                    Err(e) => eprintln!("{e}"),
                },
                "help" => eprintln!("{HELP}"),
                other => eprintln!("unknown command /{other}; {HELP}"),
            }
            continue;
        }

        let mut messages = vec![];
        if let Some(s) = &system {
            messages.push(ChatMessage::system(s.clone()));
        }
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(line));
        let mut stream = engine.chat(ChatRequest {
            messages,
            tools: None,
            max_tokens: args.max_tokens,
            sampling: Some(sampling.clone()),
            stop: None,
            enable_thinking: thinking,
            session: Some(format!("chat-{session}")),
        })?;
        answering.store(true, Ordering::SeqCst);
        interrupted.store(false, Ordering::SeqCst);
        let (mut answer, mut reasoning) = (String::new(), String::new());
        let mut out = std::io::stdout().lock();
        let mut stopped = false;
        while let Some(event) = stream.blocking_next() {
            if interrupted.load(Ordering::SeqCst) {
                stopped = true;
                break; // dropping the stream cancels the generation
            }
            match event {
                Event::Text { text } => {
                    answer.push_str(&text);
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                }
                Event::Reasoning { text } => {
                    reasoning.push_str(&text);
                    if tty_out {
                        write!(out, "\x1b[2m{text}\x1b[0m")?;
                        out.flush()?;
                    } else {
                        eprint!("{text}");
                    }
                }
                Event::Error { message } => {
                    answering.store(false, Ordering::SeqCst);
                    bail!("generation failed: {message}");
                }
                Event::Token { .. } | Event::Finished(_) => {}
            }
        }
        drop(stream);
        answering.store(false, Ordering::SeqCst);
        writeln!(out)?;
        if stopped {
            eprintln!("[stopped]");
        }
        history.push(ChatMessage::user(line));
        let mut reply = ChatMessage::assistant(answer);
        if !reasoning.is_empty() {
            reply.reasoning_content = Some(reasoning.trim().to_string());
        }
        history.push(reply);
    }
    Ok(())
}
