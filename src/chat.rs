//! `hearth chat`: an interactive terminal chat with streaming output and multi-turn history.
//! Reads one user message per line; piped stdin works for scripting.

use crate::model_args::{ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_engine::{ChatInput, ChatMessage, ChatRequest, Engine, Event, SamplingParams};
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
    let mut input = stdin.lock();
    let mut failed: Vec<usize> = vec![];
    let mut number = 0usize;
    let mut raw = Vec::new();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        raw.clear();
        if input.read_until(b'\n', &mut raw).context("reading stdin")? == 0 {
            break;
        }
        number += 1;
        // One undecodable line is that line's error, not the end of the session.
        let line = match std::str::from_utf8(&raw) {
            Ok(line) => line,
            Err(e) => {
                eprintln!(
                    "error: line {number}: not valid UTF-8 (bad byte at column {}); line skipped",
                    e.valid_up_to() + 1
                );
                failed.push(number);
                continue;
            }
        };
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

        let turn = Turn {
            engine: &engine,
            system: system.as_deref(),
            thinking,
            max_tokens: args.max_tokens,
            sampling: &sampling,
            session: format!("chat-{session}"),
            tty_out,
            answering: &answering,
            interrupted: &interrupted,
        };
        if let Err(e) = turn.answer(&mut history, line) {
            eprintln!("error: line {number}: {e:#}");
            failed.push(number);
        }
    }
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|n| n.to_string()).collect();
        bail!(
            "{} input line(s) failed (line {}); the others were answered",
            failed.len(),
            list.join(", ")
        );
    }
    Ok(())
}

/// One user message: what it is answered with and where the answer goes.
struct Turn<'a> {
    engine: &'a Engine,
    system: Option<&'a str>,
    thinking: Option<bool>,
    max_tokens: usize,
    sampling: &'a SamplingParams,
    session: String,
    tty_out: bool,
    answering: &'a AtomicBool,
    interrupted: &'a AtomicBool,
}

impl Turn<'_> {
    fn messages(&self, history: &[ChatMessage], line: &str) -> Vec<ChatMessage> {
        let mut messages = vec![];
        if let Some(s) = self.system {
            messages.push(ChatMessage::system(s));
        }
        messages.extend(history.iter().cloned());
        messages.push(ChatMessage::user(line));
        messages
    }

    fn prompt_tokens(&self, messages: &[ChatMessage]) -> anyhow::Result<usize> {
        let prompt = self.engine.render(&ChatInput {
            messages,
            tools: None,
            add_generation_prompt: true,
            enable_thinking: self.thinking,
            extra: Default::default(),
        })?;
        Ok(self.engine.tokenizer().encode(&prompt)?.len())
    }

    /// Drops the oldest turns (never the system message) until the prompt leaves room for an
    /// answer: `max_tokens`, or a quarter of the context when that is less.
    fn fit(&self, history: &mut Vec<ChatMessage>, line: &str) -> anyhow::Result<()> {
        let positions = self.engine.info().max_positions;
        // A message too long by itself is refused before any history is given up for it.
        let alone = self.prompt_tokens(&self.messages(&[], line))?;
        if alone >= positions {
            bail!(
                "the message is {alone} tokens in the chat format, more than the model's {positions} positions (max_position_embeddings)"
            );
        }
        let room = self.max_tokens.min(positions / 4);
        let mut dropped = 0;
        while !history.is_empty()
            && self.prompt_tokens(&self.messages(history, line))? + room > positions
        {
            // A turn is a user message and every reply up to the next one.
            let next_user = history
                .iter()
                .skip(1)
                .position(|m| m.role == "user")
                .map_or(history.len(), |i| i + 1);
            history.drain(..next_user);
            dropped += next_user;
        }
        if dropped > 0 {
            eprintln!(
                "[history trimmed: dropped the {dropped} oldest message(s) to fit the model's {positions} positions]"
            );
        }
        Ok(())
    }

    /// Streams the answer to `line` and adds both to `history`; on an error the history is
    /// left as it was (less any turns trimmed to make room).
    fn answer(&self, history: &mut Vec<ChatMessage>, line: &str) -> anyhow::Result<()> {
        self.fit(history, line)?;
        let mut stream = self.engine.chat(ChatRequest {
            messages: self.messages(history, line),
            tools: None,
            max_tokens: self.max_tokens,
            sampling: Some(self.sampling.clone()),
            stop: None,
            enable_thinking: self.thinking,
            session: Some(self.session.clone()),
            prefill: None,
            constraint: None,
        })?;
        self.answering.store(true, Ordering::SeqCst);
        self.interrupted.store(false, Ordering::SeqCst);
        let (mut answer, mut reasoning) = (String::new(), String::new());
        let mut out = std::io::stdout().lock();
        let mut stopped = false;
        let mut failure = None;
        while let Some(event) = stream.blocking_next() {
            if self.interrupted.load(Ordering::SeqCst) {
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
                    if self.tty_out {
                        write!(out, "\x1b[2m{text}\x1b[0m")?;
                        out.flush()?;
                    } else {
                        eprint!("{text}");
                    }
                }
                Event::Error { message } => {
                    failure = Some(message);
                    break;
                }
                Event::Token { .. } | Event::Finished(_) => {}
            }
        }
        drop(stream);
        self.answering.store(false, Ordering::SeqCst);
        if !answer.is_empty() || failure.is_none() {
            writeln!(out)?;
        }
        if let Some(message) = failure {
            bail!("generation failed: {message}");
        }
        if stopped {
            eprintln!("[stopped]");
        }
        history.push(ChatMessage::user(line));
        let mut reply = ChatMessage::assistant(answer);
        if !reasoning.is_empty() {
            reply.reasoning_content = Some(reasoning.trim().to_string());
        }
        history.push(reply);
        Ok(())
    }
}
