//! `hearth run`: a plain completion streamed to stdout, timings to stderr; optionally held to
//! a JSON schema or a grammar.

use crate::model_args::{check_max_tokens, ModelArgs, SamplingArgs};
use anyhow::{bail, Context};
use hearth_engine::{Constraint, Engine, Event, GenerateRequest};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Hold the completion to this JSON Schema (a .json file): the output is one compact
    /// JSON document valid against it.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub json_schema: Option<PathBuf>,
    /// Hold the completion to a grammar: a `.lark` file is a Lark grammar (llguidance's
    /// dialect, with `%json {…}` and special tokens such as `<|im_end|>`); any other file
    /// holds one regular expression (Rust `regex` syntax) that the whole output must match.
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
    /// An image (PNG, JPEG, WebP, GIF) for a model with a vision tower; repeatable. Each
    /// stands where the prompt says `<__media__>`, else all stand before the prompt.
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
    /// The text to complete.
    pub prompt: String,
}

impl RunArgs {
    /// The constraint the flags ask for, read before the model loads; errors name the file.
    fn constraint(&self) -> anyhow::Result<Option<(Constraint, &Path)>> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
        };
        if let Some(path) = &self.json_schema {
            let schema = serde_json::from_str(&read(path)?)
                .with_context(|| format!("--json-schema {}: not JSON", path.display()))?;
            return Ok(Some((Constraint::JsonSchema(schema), path)));
        }
        let Some(path) = &self.grammar else {
            return Ok(None);
        };
        let text = read(path)?;
        let c = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("lark"))
        {
            Constraint::Lark(text)
        } else {
            // A file's last newline is not part of the expression.
            Constraint::Regex(text.strip_suffix('\n').unwrap_or(&text).to_string())
        };
        Ok(Some((c, path)))
    }
}

/// llama.cpp's marker of where an image stands in a plain prompt.
const MEDIA_MARKER: &str = "<__media__>";

/// `prompt` with the model's image marker for each of `images` images: at each
/// [`MEDIA_MARKER`] where the prompt has them (as many as images), else before it.
fn with_markers(engine: &Engine, prompt: &str, images: usize) -> anyhow::Result<String> {
    let marked = prompt.matches(MEDIA_MARKER).count();
    if images == 0 {
        return Ok(prompt.to_string());
    }
    let Some(support) = &engine.info().images else {
        bail!(
            "invalid --image: {} has no vision tower: it takes text only",
            engine.info().origin
        );
    };
    match marked {
        0 => Ok(support.marker.repeat(images) + prompt),
        n if n == images => Ok(prompt.replace(MEDIA_MARKER, &support.marker)),
        n => bail!(
            "invalid --image: the prompt marks {n} places with {MEDIA_MARKER} for {images} images"
        ),
    }
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
    let constraint = args.constraint()?;
    let engine = Engine::load(&args.model.model, &args.model.load_options()?)
        .with_context(|| format!("loading model `{}`", args.model.model))?;
    let sampling = args.sampling.apply(&engine.info().sampling);
    let images = args
        .image
        .iter()
        .map(|p| crate::commands::chat::read_image(&engine, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let text = with_markers(&engine, &args.prompt, images.len())?;
    let prompt = engine
        .with_image_tokens(engine.tokenizer().encode(&text)?, &images)
        .context("--image")?;
    let (constraint, file) = match constraint {
        Some((c, path)) => (Some(c), Some(path)),
        None => (None, None),
    };
    let mut events = engine
        .generate(GenerateRequest {
            sampling,
            constraint,
            images,
            ..GenerateRequest::new(prompt, args.max_tokens)
        })
        .with_context(|| match file {
            Some(path) => format!("with the constraint of {}", path.display()),
            None => "queueing the request".into(),
        })?;
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
                let u = &s.usage;
                let drafts = if u.draft_tokens > 0 {
                    format!(
                        ", {} of {} drafted tokens accepted",
                        u.accepted_draft_tokens, u.draft_tokens
                    )
                } else {
                    String::new()
                };
                eprintln!(
                    "[{} prompt tokens, {} generated, stop: {:?}] load {:.2}s, prefill {:.1} tok/s, decode {:.1} tok/s{drafts}",
                    u.prompt_tokens,
                    u.completion_tokens,
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
