//! `hearth run`: a plain completion streamed to stdout, timings to stderr.

use crate::model_args::{check_max_tokens, ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_engine::{Engine, Event};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// The text to complete.
    pub prompt: String,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.prompt.is_empty() {
        bail!("invalid prompt: empty prompt");
    }
    // Whitespace alone gives the model nothing to continue from.
    if args.prompt.trim().is_empty() {
        bail!("invalid prompt: the prompt is only whitespace");
    }
    check_max_tokens(args.max_tokens)?;
    args.sampling.check()?;
    let engine = Engine::load(&args.model.model, &args.model.load_options()?)
        .with_context(|| format!("loading model `{}`", args.model.model))?;
    let sampling = args.sampling.apply(&engine.info().sampling);
    let mut events = engine.complete(&args.prompt, args.max_tokens, sampling)?;
    let mut out = std::io::stdout().lock();
    while let Some(event) = events.blocking_next() {
        match event {
            Event::Text { text } | Event::Reasoning { text } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Event::Token { .. } => {}
            Event::Finished(s) => {
                writeln!(out)?;
                let t = &s.timings;
                eprintln!(
                    "[{} prompt tokens, {} generated, stop: {:?}] load {:.2}s, prefill {:.1} tok/s, decode {:.1} tok/s",
                    s.usage.prompt_tokens,
                    s.usage.completion_tokens,
                    s.reason,
                    t.load_s,
                    t.prefill_tok_s,
                    t.decode_tok_s
                );
            }
            Event::Error { message } => bail!("generation failed: {message}"),
        }
    }
    Ok(())
}
