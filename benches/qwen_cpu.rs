//! Dense Qwen on the CPU: Hearth's engine and candle-transformers' `qwen2::ModelForCausalLM`,
//! side by side in one run, on the same safetensors checkpoint.
//!
//!     python crates/engine/tests/fixtures/generate.py --bench-model ~/.cache/hearth/bench/qwen2.5-0.5b-shape
//!     RAYON_NUM_THREADS=2 cargo bench --bench qwen_cpu -- ~/.cache/hearth/bench/qwen2.5-0.5b-shape
//!
//! Prints a table and writes `benches/results/<date>-dense-cpu.json`.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::qwen2 as reference;
use hearth_engine::{Qwen, QwenConfig, Weights};
use std::path::{Path, PathBuf};
use std::time::Instant;

const PROMPT: usize = 64;
const DECODE: usize = 32;
const REPS: usize = 3;

fn reference_config(cfg: &QwenConfig) -> reference::Config {
    reference::Config {
        vocab_size: cfg.vocab_size,
        hidden_size: cfg.hidden_size,
        intermediate_size: cfg.intermediate_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        num_key_value_heads: cfg.num_key_value_heads,
        max_position_embeddings: cfg.max_position_embeddings,
        sliding_window: cfg.max_position_embeddings,
        max_window_layers: cfg.num_hidden_layers,
        tie_word_embeddings: cfg.tie_word_embeddings,
        rope_theta: cfg.rope_theta,
        rms_norm_eps: cfg.rms_norm_eps,
        use_sliding_window: false,
        hidden_act: candle_nn::Activation::Silu,
    }
}

fn token(i: usize, vocab: usize) -> u32 {
    ((i * 7919 + 13) % vocab) as u32
}

/// (prefill tok/s, decode tok/s), best of REPS.
fn time_hearth(model: &Qwen, vocab: usize) -> (f64, f64) {
    let prompt: Vec<u32> = (0..PROMPT).map(|i| token(i, vocab)).collect();
    let (mut pp, mut tg) = (0f64, 0f64);
    for _ in 0..REPS {
        let mut cache = model.new_cache();
        let t = Instant::now();
        let mut next = model
            .forward(&prompt, &mut cache)
            .unwrap()
            .argmax(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap();
        pp = pp.max(PROMPT as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..DECODE {
            next = model
                .forward(&[next], &mut cache)
                .unwrap()
                .argmax(0)
                .unwrap()
                .to_scalar::<u32>()
                .unwrap();
        }
        tg = tg.max(DECODE as f64 / t.elapsed().as_secs_f64());
    }
    (pp, tg)
}

fn time_reference(model: &mut reference::ModelForCausalLM, vocab: usize) -> (f64, f64) {
    let prompt: Vec<u32> = (0..PROMPT).map(|i| token(i, vocab)).collect();
    let last = |l: Tensor| {
        l.flatten_all()
            .unwrap()
            .argmax(0)
            .unwrap()
            .to_scalar::<u32>()
            .unwrap()
    };
    let (mut pp, mut tg) = (0f64, 0f64);
    for _ in 0..REPS {
        model.clear_kv_cache();
        let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let t = Instant::now();
        let mut next = last(model.forward(&input, 0).unwrap());
        pp = pp.max(PROMPT as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for i in 0..DECODE {
            let input = Tensor::new(&[next], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            next = last(model.forward(&input, PROMPT + i).unwrap());
        }
        tg = tg.max(DECODE as f64 / t.elapsed().as_secs_f64());
    }
    (pp, tg)
}

fn weight_files(dir: &Path) -> Vec<PathBuf> {
    hearth_engine::load::source::local_dir(dir)
        .expect("a checkpoint directory")
        .weights
}

fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .expect("usage: cargo bench --bench qwen_cpu -- <checkpoint dir>");
    let cfg = QwenConfig::from_file(&dir.join("config.json")).unwrap();
    let files = weight_files(&dir);
    let threads = rayon::current_num_threads();
    let mut rows = vec![];
    for dtype in [DType::F32, DType::BF16] {
        let hearth =
            Qwen::load(&cfg, &Weights::open(&files, dtype, &Device::Cpu).unwrap()).unwrap();
        let (hp, hd) = time_hearth(&hearth, cfg.vocab_size);
        drop(hearth);
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, &Device::Cpu).unwrap() };
        let mut refm = reference::ModelForCausalLM::new(&reference_config(&cfg), vb).unwrap();
        let (rp, rd) = time_reference(&mut refm, cfg.vocab_size);
        drop(refm);
        // Decode reads every weight once per token: that bounds tokens/s by memory bandwidth.
        let bytes = cfg.num_parameters() * dtype.size_in_bytes();
        let row = serde_json::json!({
            "dtype": format!("{dtype:?}").to_lowercase(), "threads": threads,
            "prompt_tokens": PROMPT, "decode_tokens": DECODE,
            "hearth_prefill_tok_s": hp, "hearth_decode_tok_s": hd,
            "candle_transformers_prefill_tok_s": rp, "candle_transformers_decode_tok_s": rd,
            "decode_ratio": hd / rd, "prefill_ratio": hp / rp,
            "weight_bytes": bytes, "hearth_decode_gb_s": hd * bytes as f64 / 1e9,
        });
        println!(
            "{:<5} threads {threads}: prefill hearth {hp:7.1} tok/s, candle-transformers {rp:7.1} ({:.2}x) | decode hearth {hd:6.2} tok/s, candle-transformers {rd:6.2} ({:.2}x), {:.1} GB/s",
            format!("{dtype:?}").to_lowercase(),
            hp / rp,
            hd / rd,
            hd * bytes as f64 / 1e9
        );
        rows.push(row);
    }
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("benches/results/{date}-dense-cpu.json"));
    let doc = serde_json::json!({
        "command": format!("RAYON_NUM_THREADS={threads} cargo bench --bench qwen_cpu -- {}", dir.display()),
        "model": "Qwen2.5-0.5B shape, random weights (crates/engine/tests/fixtures/generate.py --bench-model)",
        "results": rows,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    println!("wrote {}", out.display());
}
