//! `hearth bench`: prefill (pp) and decode (tg) throughput, shaped like llama.cpp's llama-bench.

mod batched;
mod roofline;

use crate::model_args::ModelArgs;
use anyhow::{bail, Context};
use hearth_engine::kernels::ops::attention::Products;
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
    /// Tokens already in the KV cache before each test, comma-separated (as llama-bench's
    /// `-d`): decoding and prefilling after a long conversation. Prefilled once per depth,
    /// untimed.
    #[arg(
        short = 'd',
        long = "n-depth",
        default_value = "0",
        value_delimiter = ','
    )]
    pub n_depth: Vec<usize>,
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
    /// Also measure the CPU's read bandwidth with the same threads and report each decode
    /// rate as a share of the memory-bandwidth roofline (weights read per token); the
    /// measurement reads a 512 MiB buffer of its own.
    #[arg(long)]
    pub roofline: bool,
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
    n_depth: usize,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ts: Vec<f64>,
    /// With `--roofline`, on decode tests: bytes of weights one token reads, the read
    /// bandwidth measured, and the share of it the decode rate reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_bytes_per_token: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_bandwidth_gb_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    roofline: Option<f64>,
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
        if args.roofline {
            bail!("--roofline measures the single-sequence decode tests; drop --concurrency");
        }
        if args.n_depth.iter().any(|&d| d > 0) {
            bail!("-d/--n-depth runs the single-sequence tests; with --concurrency use --shared-prefix");
        }
        return batched::run(&args, threads);
    }

    let Loaded {
        model,
        cfg,
        dtype,
        size_bytes,
        origin,
        backend,
    } = load(&args.model)?;
    // Measured before and after the tests, the higher kept: a shared machine's bandwidth
    // drops while other work runs, and the roofline is what the machine can do.
    let bandwidth_before = if args.roofline {
        if !backend.starts_with("cpu") {
            bail!("--roofline measures the CPU's read bandwidth; this model runs on {backend}");
        }
        Some(roofline::read_bandwidth())
    } else {
        None
    };
    let per_token = model.weight_bytes_per_token();

    let mut records = vec![];
    let mut tests: Vec<(usize, usize)> = args
        .n_prompt
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| (p, 0))
        .collect();
    tests.extend(args.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)));
    let mut depths = args.n_depth.clone();
    depths.dedup();
    let names: Vec<String> = depths
        .iter()
        .flat_map(|&d| tests.iter().map(move |&(p, n)| test_name(p, n, d)))
        .collect();
    let mut widths_now = [0; 8];
    for d in depths {
        if let Some(&(p, n)) = tests
            .iter()
            .find(|&&(p, n)| d + p + n + 1 > cfg.max_position_embeddings)
        {
            bail!(
                "test {} exceeds the model's {} positions",
                test_name(p, n, d),
                cfg.max_position_embeddings
            );
        }
        let mut cache = at_depth(&model, d, cfg.vocab_size)?;
        for &(p, n) in &tests {
            once(&model, &mut cache, d, p, n, cfg.vocab_size)?; // warm-up
            let samples = (0..args.repetitions)
                .map(|_| {
                    let secs = once(&model, &mut cache, d, p, n, cfg.vocab_size)?;
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
                test: test_name(p, n, d),
                n_prompt: p,
                n_gen: n,
                n_depth: d,
                avg_ts: avg,
                stddev_ts: var.sqrt(),
                samples_ts: samples,
                weight_bytes_per_token: None,
                read_bandwidth_gb_s: None,
                roofline: None,
            });
            if !args.json {
                let r = records.last().context("no record")?;
                if records.len() == 1 {
                    widths_now = widths(r, &names);
                    println!("{}", header(&widths_now));
                }
                println!("{}", row(&cells(r), &widths_now));
            }
        }
    }
    let bandwidth = bandwidth_before.map(|b| b.max(roofline::read_bandwidth()));
    if let Some(b) = bandwidth {
        for r in records.iter_mut().filter(|r| r.n_gen > 0) {
            r.weight_bytes_per_token = Some(per_token);
            r.read_bandwidth_gb_s = Some(b / 1e9);
            r.roofline = Some(r.avg_ts * per_token as f64 / b);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    } else if let Some(b) = bandwidth {
        println!(
            "\nread bandwidth: {:.1} GB/s ({threads} threads, the best of 10 passes over {} MiB \
             before and after the tests)",
            b / 1e9,
            roofline::buffer_bytes() >> 20
        );
        if let Some(llc) = roofline::last_level_cache_bytes().filter(|&c| c >= per_token / 4) {
            // Then a decode step may read part of its weights from the cache, above this line.
            println!(
                "last-level cache: {} MiB, {:.0} % of the weights read per token",
                llc >> 20,
                100.0 * llc as f64 / per_token as f64
            );
        }
        for r in records.iter().filter(|r| r.n_gen > 0) {
            println!("{}", roofline_line(r, per_token, b));
        }
    }
    Ok(())
}

/// `tg64: 392 MB of weights per token × 41.4 tok/s = 16.2 GB/s = 84 % of the read bandwidth`.
fn roofline_line(r: &Record, per_token: usize, bandwidth: f64) -> String {
    let rate = r.avg_ts * per_token as f64;
    format!(
        "{}: {:.0} MB of weights per token × {:.1} tok/s = {:.1} GB/s = {:.0} % of the read bandwidth",
        r.test,
        per_token as f64 / 1e6,
        r.avg_ts,
        rate / 1e9,
        100.0 * rate / bandwidth
    )
}

/// llama-bench's names: `pp512`, `tg128`, `tg128 @ d4096`.
fn test_name(p: usize, n: usize, depth: usize) -> String {
    let test = if p > 0 {
        format!("pp{p}")
    } else {
        format!("tg{n}")
    };
    match depth {
        0 => test,
        d => format!("{test} @ d{d}"),
    }
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
    // Which CPU kernels ran (`HEARTH_CPU` may ask for a lower level than the CPU has).
    let backend = match l.info.device.as_str() {
        "cpu" => {
            let kc = l.model.kernels();
            match kc.options.attention.at(kc.level) {
                Products::Bf16 => format!("cpu-{}-bf16attn", kc.level),
                Products::F32 => format!("cpu-{}", kc.level),
            }
        }
        other => other.to_string(),
    };
    Ok(Loaded {
        model: l.model,
        cfg: l.config,
        dtype: l.file_type,
        size_bytes: l.size_bytes,
        origin: l.info.origin,
        backend,
    })
}

/// Arbitrary but fixed ids, spread over the vocabulary.
fn token(i: usize, vocab: usize) -> u32 {
    ((i * 7919 + 13) % vocab) as u32
}

/// A cache holding `depth` tokens, prefilled in chunks of 512 as the scheduler prefills.
fn at_depth(model: &Qwen, depth: usize, vocab: usize) -> anyhow::Result<hearth_engine::KvCache> {
    let mut cache = LanguageModel::new_cache(model);
    let ids: Vec<u32> = (0..depth).map(|i| token(i, vocab)).collect();
    for chunk in ids.chunks(512) {
        model.forward(chunk, &mut cache)?;
    }
    Ok(cache)
}

/// Seconds for one test after the `depth` tokens in `cache` (what the test adds is dropped
/// first): prefill `p` tokens in one batch, or decode `n` tokens one at a time.
fn once(
    model: &Qwen,
    cache: &mut hearth_engine::KvCache,
    depth: usize,
    p: usize,
    n: usize,
    vocab: usize,
) -> anyhow::Result<f64> {
    cache.truncate(depth);
    let token = |i: usize| token(depth + i, vocab);
    if p > 0 {
        let prompt: Vec<u32> = (0..p).map(token).collect();
        let start = Instant::now();
        let logits = model.forward(&prompt, cache)?;
        logits.argmax(0)?.to_scalar::<u32>()?; // waits for the device
        return Ok(start.elapsed().as_secs_f64());
    }
    let mut next = token(0);
    let start = Instant::now();
    for _ in 0..n {
        let logits = model.forward(&[next], cache)?;
        next = logits.argmax(0)?.to_scalar::<u32>()?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The table's columns: label and right alignment.
const COLUMNS: [(&str, bool); 8] = [
    ("model", false),
    ("size", true),
    ("params", true),
    ("backend", false),
    ("dtype", false),
    ("threads", true),
    ("test", true),
    ("t/s", true),
];

/// Room for the widest rate a CPU or GPU reaches, as `avg ± stddev`.
const RATE_WIDTH: usize = 18; // "99999.99 ± 9999.99"

fn cells(r: &Record) -> [String; 8] {
    let name = r.model.rsplit('/').next().unwrap_or(&r.model);
    [
        name.trim_end_matches(".gguf").to_string(),
        format!("{:.0} MiB", r.size_bytes as f64 / (1 << 20) as f64),
        format!("{:.0} M", r.params as f64 / 1e6),
        r.backend.clone(),
        r.dtype.clone(),
        r.threads.to_string(),
        r.test.clone(),
        format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts),
    ]
}

/// Column widths: rows are printed as they are measured, so they come from the first row
/// (every row shares its model, size, backend and dtype), every test's name and the widest
/// expected rate.
fn widths(first: &Record, tests: &[String]) -> [usize; 8] {
    let cells = cells(first);
    let mut w = [0; 8];
    for (i, (label, _)) in COLUMNS.iter().enumerate() {
        w[i] = label.chars().count().max(cells[i].chars().count());
    }
    w[6] = tests.iter().map(|t| t.len()).fold(w[6], usize::max);
    w[7] = w[7].max(RATE_WIDTH);
    w
}

fn row(cells: &[String; 8], widths: &[usize; 8]) -> String {
    let mut line = String::from("|");
    for ((cell, (_, right)), &w) in cells.iter().zip(COLUMNS).zip(widths) {
        let pad = " ".repeat(w.saturating_sub(cell.chars().count()));
        if right {
            line += &format!(" {pad}{cell} |");
        } else {
            line += &format!(" {cell}{pad} |");
        }
    }
    line
}

fn header(widths: &[usize; 8]) -> String {
    let labels = COLUMNS.map(|(l, _)| l.to_string());
    let rule: String = widths
        .iter()
        .map(|w| format!("{}|", "-".repeat(w + 2)))
        .collect();
    format!("{}\n|{rule}", row(&labels, widths))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(model: &str, test: &str, avg: f64, sd: f64) -> Record {
        Record {
            model: model.into(),
            family: "qwen2".into(),
            size_bytes: 7 << 30,
            params: 7_615_616_512,
            backend: "cuda:0".into(),
            dtype: "Q4_K - Medium".into(),
            threads: 16,
            test: test.into(),
            n_prompt: 512,
            n_gen: 0,
            n_depth: 0,
            avg_ts: avg,
            stddev_ts: sd,
            samples_ts: vec![],
            weight_bytes_per_token: None,
            read_bandwidth_gb_s: None,
            roofline: None,
        }
    }

    #[test]
    fn the_roofline_line_divides_the_bytes_read_by_the_bandwidth() {
        let r = record("m", "tg64", 40.0, 1.0);
        // 500 MB per token × 40 tok/s = 20 GB/s of 25.
        assert_eq!(
            roofline_line(&r, 500_000_000, 25e9),
            "tg64: 500 MB of weights per token × 40.0 tok/s = 20.0 GB/s = 80 % of the read bandwidth"
        );
    }

    #[test]
    fn tests_are_named_as_llama_bench_names_them() {
        assert_eq!(test_name(512, 0, 0), "pp512");
        assert_eq!(test_name(0, 128, 0), "tg128");
        assert_eq!(test_name(0, 64, 4096), "tg64 @ d4096");
        assert_eq!(test_name(512, 0, 4096), "pp512 @ d4096");
    }

    #[test]
    fn table_columns_line_up_with_long_names_and_rates() {
        let name = "/models/qwen2.5-coder-7b-instruct-q4_k_m-with-a-long-suffix.gguf";
        let tests = ["pp512".to_string(), "tg128".into(), "pp16384".into()];
        let rows = [
            record(name, "pp512", 12345.678, 123.456),
            record(name, "tg128", 3.2, 0.01),
            record(name, "pp16384", 99999.99, 9999.99),
        ];
        let w = widths(&rows[0], &tests);
        let mut lines: Vec<String> = header(&w).lines().map(str::to_owned).collect();
        lines.extend(rows.iter().map(|r| row(&cells(r), &w)));
        let bars = |l: &str| -> Vec<usize> {
            l.chars()
                .enumerate()
                .filter(|&(_, c)| c == '|')
                .map(|(i, _)| i)
                .collect()
        };
        for l in &lines {
            assert_eq!(bars(l), bars(&lines[0]), "\n{}", lines.join("\n"));
        }
        assert!(lines[2].contains("qwen2.5-coder-7b-instruct-q4_k_m-with-a-long-suffix"));
        assert!(lines[4].contains("99999.99 ± 9999.99"));
    }
}
