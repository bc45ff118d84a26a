//! candle-transformers' own `quantized_qwen2` on a GGUF file, timed the way `hearth bench`
//! times Hearth (prefill of N tokens in one batch, decode one token at a time), for the
//! side-by-side comparison in benches/gguf-side-by-side.sh. Prints JSON.
//!
//!     cargo bench --bench candle_quantized -- <model.gguf> <prompt tokens> <decode tokens> <reps>

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_qwen2::ModelWeights;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let path = args
        .first()
        .expect("usage: candle_quantized <model.gguf> [pp] [tg] [reps]");
    let pp: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(32);
    let tg: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let mut file = std::fs::File::open(path).expect("open");
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).expect("gguf");
    let mut model = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).expect("model");
    let token = |i: usize| ((i * 7919 + 13) % 151_000) as u32;
    let mut run = |p: usize, n: usize| -> f64 {
        // A fresh cache: candle's model clears it when index_pos is 0.
        if p > 0 {
            let ids: Vec<u32> = (0..p).map(token).collect();
            let x = Tensor::new(ids.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let t = Instant::now();
            let l = model.forward(&x, 0).unwrap();
            l.flatten_all()
                .unwrap()
                .argmax(0)
                .unwrap()
                .to_scalar::<u32>()
                .unwrap();
            return p as f64 / t.elapsed().as_secs_f64();
        }
        let mut next = token(0);
        let t = Instant::now();
        for i in 0..n {
            let x = Tensor::new(&[next], &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let l = model.forward(&x, i).unwrap();
            next = l
                .flatten_all()
                .unwrap()
                .argmax(0)
                .unwrap()
                .to_scalar::<u32>()
                .unwrap();
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let mut out = vec![];
    for (p, n) in [(pp, 0), (0, tg)] {
        run(p, n); // warm-up
        let samples: Vec<f64> = (0..reps).map(|_| run(p, n)).collect();
        let avg = samples.iter().sum::<f64>() / samples.len() as f64;
        let test = if p > 0 {
            format!("pp{p}")
        } else {
            format!("tg{n}")
        };
        out.push(serde_json::json!({"test": test, "avg_ts": avg, "samples_ts": samples}));
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
