//! `hearth run`: a plain completion streamed to stdout, timings to stderr.

use crate::model_args::ModelArgs;
use anyhow::{bail, Context};
use hearth_engine::{Engine, Event, SamplingParams};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 is greedy. Default: the model's generation_config.json.
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    #[arg(long)]
    pub top_p: Option<f32>,
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long)]
    pub min_p: Option<f32>,
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// The text to complete.
    pub prompt: String,
}

impl RunArgs {
    fn sampling(&self, defaults: &SamplingParams) -> SamplingParams {
        let mut p = defaults.clone();
        if let Some(t) = self.temperature {
            p.temperature = t;
        }
        p.top_p = self.top_p.or(p.top_p);
        p.top_k = self.top_k.or(p.top_k);
        p.min_p = self.min_p.or(p.min_p);
        p.repetition_penalty = self.repetition_penalty.unwrap_or(p.repetition_penalty);
        p.seed = self.seed.unwrap_or(p.seed);
        p
    }

    /// Argument errors are reported before the model is loaded.
    fn check(&self) -> anyhow::Result<()> {
        if self.prompt.is_empty() {
            bail!("invalid prompt: empty prompt");
        }
        if self.max_tokens == 0 {
            bail!("invalid --max-tokens: 0 (must be at least 1)");
        }
        self.sampling(&SamplingParams::default()).validate()?;
        Ok(())
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    args.check()?;
    let engine = Engine::load(&args.model.model, &args.model.load_options()?)
        .with_context(|| format!("loading model `{}`", args.model.model))?;
    let sampling = args.sampling(&engine.info().sampling);
    let mut events = engine.complete(&args.prompt, args.max_tokens, sampling)?;
    let mut out = std::io::stdout().lock();
    while let Some(event) = events.blocking_next() {
        match event {
            Event::Text { text } => {
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
