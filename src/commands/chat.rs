//! `hearth chat`: an interactive terminal chat with streaming output and multi-turn history.
//! Reads one user message per line; piped stdin works for scripting. With `--tools`,
//! `--knowledge` or `--session` each message goes through the agent's tool loop, showing tool
//! calls and results as they happen; `--session` keeps the conversation across runs.

use crate::commands::agent::{run_turn, SessionArgs};
use crate::model_args::{ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_agent::knowledge::FolderKnowledge;
use hearth_agent::{Agent, LlmRequest, LocalLlm, ToolAgent};
use hearth_engine::vision::ImageInput;
use hearth_engine::{ChatInput, ChatMessage, ChatRequest, Engine, Event, SamplingParams};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
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
    /// Tools the model may call (calculator, time, files, python; comma-separated): each
    /// message runs the tool loop.
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
    /// The directory the file tools may read (default: the current one).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// A folder of text files: the passages most relevant to each message join the prompt.
    #[arg(long, value_name = "DIR")]
    pub knowledge: Option<PathBuf>,
    #[command(flatten)]
    pub durable: SessionArgs,
    /// An image (PNG, JPEG, WebP, GIF) for the first message, for a model with a vision
    /// tower; repeatable. `/image FILE` attaches one to the next message.
    #[arg(long)]
    pub image: Vec<PathBuf>,
    /// Most model calls per message in the tool loop.
    #[arg(long, default_value_t = 10)]
    pub max_iterations: usize,
}

const HELP: &str =
    "commands: /reset, /system <text>, /think on|off, /image <file>, /exit (Ctrl-C stops an answer)";

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
    if !args.tools.is_empty() || args.knowledge.is_some() || args.durable.session.is_some() {
        return agent_chat(args);
    }
    let engine = Engine::load(&args.model.model, &args.model.load_options()?)
        .with_context(|| format!("loading model `{}`", args.model.model))?;
    // Images waiting for the next message, and those the history holds, in order.
    let mut pending = args
        .image
        .iter()
        .map(|p| read_image(&engine, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut images: Vec<ImageInput> = vec![];
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
    repl(interactive, |line| {
        let line = match line {
            Line::Message(text) => text,
            Line::Command { name, rest } => {
                match name {
                    "image" => match read_image(&engine, Path::new(rest.trim())) {
                        Ok(image) => {
                            pending.push(image);
                            eprintln!("[image attached to the next message]");
                        }
                        Err(e) => return Ok(Err(e)),
                    },
                    "reset" => {
                        history.clear();
                        images.clear();
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
                return Ok(Ok(()));
            }
        };

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
        // The message's images stand where the model's prompt holds them: before its text.
        let marker = engine.info().images.as_ref().map(|i| i.marker.clone());
        let line = format!("{}{line}", marker.unwrap_or_default().repeat(pending.len()));
        let all: Vec<ImageInput> = images.iter().chain(&pending).cloned().collect();
        pending.clear();
        match turn.answer(&mut history, &line, &all) {
            Ok(kept) => images = all[all.len() - kept..].to_vec(),
            Err(e) => return Ok(Err(e)),
        }
        Ok(Ok(()))
    })
}

/// An image file prepared for the model, or an error naming the file.
pub(crate) fn read_image(engine: &Engine, path: &Path) -> anyhow::Result<ImageInput> {
    let bytes = std::fs::read(path).with_context(|| format!("reading image {}", path.display()))?;
    engine
        .image(&bytes)
        .with_context(|| format!("image {}", path.display()))
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
    fn fit(
        &self,
        history: &mut Vec<ChatMessage>,
        line: &str,
        images: &[ImageInput],
    ) -> anyhow::Result<()> {
        let positions = self.engine.info().max_positions;
        // Each image's tokens, counted for all of them (an upper bound once turns are dropped).
        let merge = self.engine.info().images.as_ref().map_or(1, |i| i.merge);
        let pictures: usize = images.iter().map(|i| i.tokens(merge)).sum();
        // A message too long by itself is refused before any history is given up for it.
        let alone = self.prompt_tokens(&self.messages(&[], line))? + pictures;
        if alone >= positions {
            bail!(
                "the message is {alone} tokens in the chat format, more than the model's {positions} positions (max_position_embeddings)"
            );
        }
        let room = self.max_tokens.min(positions / 4);
        let mut dropped = 0;
        while !history.is_empty()
            && self.prompt_tokens(&self.messages(history, line))? + pictures + room > positions
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
    /// `images` are those the history and `line` hold, in order; returns how many of the
    /// latest the history still holds after it was trimmed to fit.
    fn answer(
        &self,
        history: &mut Vec<ChatMessage>,
        line: &str,
        images: &[ImageInput],
    ) -> anyhow::Result<usize> {
        self.fit(history, line, images)?;
        let messages = self.messages(history, line);
        let kept = match &self.engine.info().images {
            Some(i) => messages
                .iter()
                .filter_map(|m| m.content.as_deref())
                .map(|c| c.matches(i.marker.as_str()).count())
                .sum::<usize>()
                .min(images.len()),
            None => 0,
        };
        let mut stream = self.engine.chat(ChatRequest {
            messages,
            tools: None,
            max_tokens: self.max_tokens,
            sampling: Some(self.sampling.clone()),
            stop: None,
            enable_thinking: self.thinking,
            session: Some(self.session.clone()),
            prefill: None,
            constraint: None,
            images: images[images.len() - kept..].to_vec(),
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
        Ok(kept)
    }
}

const AGENT_HELP: &str = "commands: /reset, /system <text>, /image <file>, /exit";

/// The chat as a multi-turn agent: every line is a turn of the tool loop.
fn agent_chat(args: ChatArgs) -> anyhow::Result<()> {
    if args.max_iterations == 0 {
        bail!("invalid --max-iterations: 0 (must be at least 1)");
    }
    let tools = hearth_agent::tools::registry(&args.tools, args.workspace.clone())
        .map_err(anyhow::Error::msg)?;
    let knowledge = args
        .knowledge
        .as_deref()
        .map(FolderKnowledge::open)
        .transpose()?;
    let mut durable = args.durable.open()?;
    let engine = Arc::new(
        Engine::load(&args.model.model, &args.model.load_options()?)
            .with_context(|| format!("loading model `{}`", args.model.model))?,
    );
    // Tool use is most reliable greedy; flags still override.
    let sampling = args.sampling.apply(&SamplingParams::greedy());
    let origin = engine.info().origin.clone();
    let llm = LocalLlm::new(engine.clone()).with_max_tokens(args.max_tokens);
    let mut agent = ToolAgent::new(Arc::new(llm), tools);
    agent.max_iterations = args.max_iterations;
    agent.llm_agent.request = LlmRequest {
        sampling: Some(sampling),
        max_tokens: Some(args.max_tokens),
        enable_thinking: args.think.as_deref().map(parse_think).transpose()?,
        ..Default::default()
    };
    if let Some(s) = &args.system {
        agent.set_persona(s.clone());
    }
    if let Some(k) = knowledge {
        agent.knowledge = Some(Arc::new(k));
    }
    let session = durable
        .as_ref()
        .map_or("chat".to_string(), |d| d.name().to_string());
    if let Some(d) = &durable {
        d.restore(&agent, &session, Some(&engine))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "{origin} — tools: {} — {AGENT_HELP}",
            agent.executor.tools.names().join(", ")
        );
    }
    // Images for the next message travel in its text ([`hearth_agent::image`]).
    let mut pending = String::new();
    for path in &args.image {
        pending.push_str(
            &hearth_agent::image::inline_file(path)
                .map_err(|e| anyhow::anyhow!("invalid --image: {e}"))?,
        );
    }
    repl(interactive, |line| {
        let line = match line {
            Line::Message(text) => text,
            Line::Command { name, rest } => {
                match name {
                    "reset" => {
                        agent.reset(&session, true);
                        if let Some(d) = &mut durable {
                            d.save(&agent, &session, Some(&engine))?;
                        }
                        eprintln!("[history cleared]");
                    }
                    "system" => {
                        agent.set_persona(rest.trim().to_string());
                        eprintln!("[system message set]");
                    }
                    "image" => match hearth_agent::image::inline_file(Path::new(rest.trim())) {
                        Ok(span) => {
                            pending.push_str(&span);
                            eprintln!("[image attached to the next message]");
                        }
                        Err(e) => return Ok(Err(anyhow::anyhow!("{e}"))),
                    },
                    "help" => eprintln!("{AGENT_HELP}"),
                    other => eprintln!("unknown command /{other}; {AGENT_HELP}"),
                }
                return Ok(Ok(()));
            }
        };
        let line = std::mem::take(&mut pending) + line;
        match run_turn(&rt, &agent, &line, &session, false, Default::default()) {
            Ok(run) => match &run.error {
                Some(e) => return Ok(Err(anyhow::anyhow!("{e}"))),
                None => {
                    if let Some(d) = &mut durable {
                        d.save(&agent, &session, Some(&engine))?;
                    }
                }
            },
            Err(e) => return Ok(Err(e.into())),
        }
        Ok(Ok(()))
    })
}

/// A line of a session: a `/command` with the rest of its line, or a message.
enum Line<'a> {
    Command { name: &'a str, rest: &'a str },
    Message(&'a str),
}

/// The one read loop of `hearth chat` and `hearth chat --tools`: a line of stdin at a time,
/// prompted on a terminal, until its end or `/exit`. `handle` answers each line: `Ok(Err(e))`
/// is that line's error (reported with its number; the session goes on), `Err` ends the
/// session. A line that is not UTF-8 is its own error. At the end, an error names the lines
/// that failed, if any did.
fn repl(
    interactive: bool,
    mut handle: impl FnMut(Line<'_>) -> anyhow::Result<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let mut input = std::io::stdin().lock();
    let (mut raw, mut number, mut failed) = (Vec::new(), 0usize, Vec::<usize>::new());
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
        let line = match std::str::from_utf8(&raw) {
            Ok(line) => line.trim_end_matches(['\r', '\n']),
            Err(e) => {
                eprintln!(
                    "error: line {number}: not valid UTF-8 (bad byte at column {}); line skipped",
                    e.valid_up_to() + 1
                );
                failed.push(number);
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let line = match line.strip_prefix('/') {
            Some(cmd) => {
                let (name, rest) = cmd.split_once(' ').unwrap_or((cmd, ""));
                if matches!(name, "exit" | "quit") {
                    break;
                }
                Line::Command { name, rest }
            }
            None => Line::Message(line),
        };
        if let Err(e) = handle(line)? {
            eprintln!("error: line {number}: {e:#}");
            failed.push(number);
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = failed.iter().map(|n| n.to_string()).collect();
    bail!(
        "{} input line(s) failed (line {}); the others were answered",
        failed.len(),
        list.join(", ")
    );
}
