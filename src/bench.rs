//! `hearth bench`: prefill (pp) and decode (tg) throughput, shaped like llama.cpp's llama-bench.

use crate::model_args::ModelArgs;
use anyhow::{bail, Context};
use hearth_engine::{load_model, LanguageModel, Qwen, QwenConfig};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths to prefill, comma-separated (0 to skip).
    #[arg(
        short = 'p',
        long = "n-prompt",
        default_value = "512",
        value_delimiter = ','
    )]
    pub n_prompt: Vec<usize>,
    /// Tokens to decode one at a time, comma-separated (0 to skip).
    #[arg(
        short = 'n',
        long = "n-gen",
        default_value = "128",
        value_delimiter = ','
    )]
    pub n_gen: Vec<usize>,
    /// CPU threads (default: all cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Concurrent requests, comma-separated (e.g. 1,2,4,8): runs them through the engine's
    /// scheduler, as llama-batched-bench does, for every -p/-n pair.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// With --concurrency: also the time to first token of a second request whose first this
    /// many tokens another cached request holds, against one that shares nothing.
    #[arg(long)]
    pub shared_prefix: Option<usize>,
}

#[derive(serde::Serialize)]
struct Record {
    model: String,
    family: String,
    size_bytes: usize,
    params: usize,
    backend: String,
    dtype: String,
    threads: usize,
    test: String,
    n_prompt: usize,
    n_gen: usize,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ts: Vec<f64>,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.repetitions == 0 {
        bail!("invalid -r/--repetitions: 0 (must be at least 1)");
    }
    let threads = match args.threads {
        Some(0) => bail!("invalid -t/--threads: 0"),
        Some(t) => t,
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    // Both rayon (Hearth's kernels) and candle's gemm read this.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .ok();
    if !args.concurrency.is_empty() {
        return crate::batched_bench::run(&args, threads);
    }

    let Loaded {
        model,
        cfg,
        dtype,
        size_bytes,
        origin,
        backend,
    } = load(&args.model)?;

    let mut records = vec![];
    let mut tests: Vec<(usize, usize)> = args
        .n_prompt
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| (p, 0))
        .collect();
    tests.extend(args.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)));
    for (p, n) in tests {
        if p + n + 1 > cfg.max_position_embeddings {
            bail!(
                "test pp{p}/tg{n} exceeds the model's {} positions",
                cfg.max_position_embeddings
            );
        }
        once(&model, p, n, cfg.vocab_size)?; // warm-up
        let samples = (0..args.repetitions)
            .map(|_| {
                let secs = once(&model, p, n, cfg.vocab_size)?;
                Ok((p + n) as f64 / secs)
            })
            .collect::<anyhow::Result<Vec<f64>>>()?;
        let avg = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|s| (s - avg).powi(2)).sum::<f64>()
            / (samples.len().max(2) - 1) as f64;
        records.push(Record {
            model: origin.clone(),
            family: cfg.family.name().into(),
            size_bytes,
            params: cfg.num_parameters(),
            backend: backend.clone(),
            dtype: dtype.clone(),
            threads,
            test: if p > 0 {
                format!("pp{p}")
            } else {
                format!("tg{n}")
            },
            n_prompt: p,
            n_gen: n,
            avg_ts: avg,
            stddev_ts: var.sqrt(),
            samples_ts: samples,
        });
        if !args.json {
            print_row(
                records.len() == 1,
                records.last().into_iter().next().context("no record")?,
            );
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    }
    Ok(())
}

/// A model loaded for direct forward passes (no chat layer).
pub struct Loaded {
    pub model: Qwen,
    pub cfg: QwenConfig,
    /// The weights' type as llama-bench names it: f32, bf16, … or the GGUF file type.
    pub dtype: String,
    pub size_bytes: usize,
    pub origin: String,
    pub backend: String,
}

pub fn load(args: &ModelArgs) -> anyhow::Result<Loaded> {
    let l = load_model(&args.model, &args.load_options()?)
        .with_context(|| format!("loading {}", args.model))?;
    Ok(Loaded {
        model: l.model,
        cfg: l.config,
        dtype: l.file_type,
        size_bytes: l.size_bytes,
        origin: l.info.origin,
        backend: l.info.device,
    })
}

/// Seconds for one test: prefill `p` tokens in one batch, or decode `n` tokens one at a time.
fn once(model: &Qwen, p: usize, n: usize, vocab: usize) -> anyhow::Result<f64> {
    let mut cache = LanguageModel::new_cache(model);
    // Arbitrary but fixed ids, spread over the vocabulary.
    let token = |i: usize| ((i * 7919 + 13) % vocab) as u32;
    if p > 0 {
        let prompt: Vec<u32> = (0..p).map(token).collect();
        let start = Instant::now();
        let logits = model.forward(&prompt, &mut cache)?;
        logits.argmax(0)?.to_scalar::<u32>()?; // waits for the device
        return Ok(start.elapsed().as_secs_f64());
    }
    let mut next = token(0);
    let start = Instant::now();
    for _ in 0..n {
        let logits = model.forward(&[next], &mut cache)?;
        next = logits.argmax(0)?.to_scalar::<u32>()?;
    }
    Ok(start.elapsed().as_secs_f64())
}

fn print_row(header: bool, r: &Record) {
    if header {
        println!(
            "| {:<28} | {:>9} | {:>8} | {:<7} | {:<6} | {:>7} | {:>6} | {:>16} |",
            "model", "size", "params", "backend", "dtype", "threads", "test", "t/s"
        );
        println!(
            "|{:-<30}|{:->11}|{:->10}|{:-<9}|{:-<8}|{:->9}|{:->8}|{:->18}|",
            "", "", "", "", "", "", "", ""
        );
    }
    let name = r.model.rsplit('/').next().unwrap_or(&r.model);
    let name: String = name.trim_end_matches(".gguf").chars().take(28).collect();
    println!(
        "| {:<28} | {:>6.0} MiB | {:>6.0} M | {:<7} | {:<6} | {:>7} | {:>6} | {:>8.2} ± {:<5.2} |",
        name,
        r.size_bytes as f64 / (1 << 20) as f64,
        r.params as f64 / 1e6,
        r.backend,
        r.dtype,
        r.threads,
        r.test,
        r.avg_ts,
        r.stddev_ts
    );
}
