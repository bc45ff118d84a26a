//! `hearth replay RUN.jsonl`: runs a recorded agent run again with the recorded model answers
//! and tool results and checks that it takes the same steps; `--live --model M` runs it on
//! the model (greedy) with the real tools and reports the first step where it diverges.

use crate::model_args::ModelArgs;
use anyhow::{bail, Context};
use hearth_agent::persistence::record::Recording;
use hearth_agent::persistence::replay::{recorded_tools, replay, ReplayLlm, ReplayOutcome};
use hearth_agent::{Llm, LocalLlm, SamplingParams};
use hearth_engine::Engine;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// A recording made with `hearth agent --record FILE`.
    pub recording: PathBuf,
    /// Run the model again (greedy) instead of using the recorded answers.
    #[arg(long, requires = "model")]
    pub live: bool,
    /// The model for --live: the one the run was recorded with.
    #[arg(short, long)]
    pub model: Option<String>,
    /// auto, cpu, cuda, cuda:N or metal (for --live).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Chat format for --live: model, chatml, internlm2, or a .jinja/.toml file.
    #[arg(long)]
    pub template: Option<String>,
    /// With --live: answer tool calls with the recorded results instead of running the tools,
    /// so that only the model is checked (a clock or a changed file then cannot diverge).
    #[arg(long, requires = "live")]
    pub recorded_tools: bool,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let recording = Recording::read(&args.recording)?;
    let file = args.recording.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = match (&args.model, args.live) {
        (Some(model), true) => live(&args, model, &recording, &rt)?,
        (Some(_), false) => bail!("invalid --model: only used with --live"),
        _ => rt.block_on(replay(
            &recording,
            Arc::new(ReplayLlm::new(&recording)),
            recorded_tools(&recording),
        ))?,
    };
    report(&file, &recording, &outcome)
}

fn live(
    args: &ReplayArgs,
    model: &str,
    recording: &Recording,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<ReplayOutcome> {
    let header = &recording.header;
    let model_args = ModelArgs {
        model: model.to_string(),
        revision: None,
        device: args.device.clone(),
        dtype: "auto".into(),
        offline: false,
        mmproj: None,
        max_image_pixels: None,
        template: args.template.clone(),
        max_seqs: None,
        kv_cache_mb: None,
        prefill_chunk: None,
        speculative: "auto".into(),
        draft_model: None,
        max_step_rows: None,
        cache_type_k: None,
        cache_type_v: None,
        attention_precision: "bf16".into(),
        ctx_size: None,
        rope_scaling: None,
        rope_scale: None,
        yarn_orig_ctx: None,
    };
    let engine = Arc::new(
        Engine::load(model, &model_args.load_options()?)
            .with_context(|| format!("loading model `{model}`"))?,
    );
    let free = header
        .extra
        .get("free_tool_calls")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let llm = LocalLlm::new(engine).with_constrained_tool_calls(!free);
    if !same_model(&llm.name(), &header.model) {
        bail!(
            "{}: recorded with model `{}`, but --model loads `{}`; a live replay needs the model the run was recorded with",
            recording.path.display(),
            header.model,
            llm.name()
        );
    }
    let names: Vec<String> = header
        .extra
        .get("tools")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let workspace: Option<PathBuf> = header
        .extra
        .get("workspace")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let tools = if args.recorded_tools {
        recorded_tools(recording)
    } else {
        hearth_agent::tools::registry(&names, workspace).map_err(anyhow::Error::msg)?
    };
    let mut recording = recording.clone();
    let sampling = &mut recording.header.agent.sampling;
    if sampling.as_ref().is_some_and(|s| s.temperature > 0.0) {
        eprintln!("[the run was recorded with sampling; the live replay is greedy]");
        *sampling = Some(SamplingParams::greedy());
    }
    Ok(rt.block_on(replay(&recording, Arc::new(llm), tools))?)
}

/// The same model: the same name, or paths to the same file or directory.
fn same_model(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (Path::new(a).canonicalize(), Path::new(b).canonicalize()),
            (Ok(x), Ok(y)) if x == y
        )
}

fn report(file: &str, recording: &Recording, outcome: &ReplayOutcome) -> anyhow::Result<()> {
    match &outcome.divergence {
        None => {
            println!(
                "{file}: same {} steps as recorded; answer: {}",
                recording.entries.len(),
                outcome.run.answer
            );
            Ok(())
        }
        Some(d) => bail!("{file}: the replay differs from the recording at {d}"),
    }
}
