//! The vision tower alone: an image from its file to its tokens for the language model —
//! decoded, resized and cut into patches (the processor), then encoded (the tower) — with the
//! tower of an mmproj GGUF (llama.cpp's `--mmproj` file) and Qwen3.5's pixel bounds;
//! milliseconds of each part, best of `--runs` (default 2). `RAYON_NUM_THREADS` sets the
//! threads. `benches/vision-side-by-side.sh` runs it beside llama.cpp's `llama-mtmd-cli`.
//!
//!     cargo bench -p hearth-engine --bench vision -- MMPROJ.gguf IMAGE... [--runs N]

use candle_core::Device;
use hearth_engine::vision::{ImageProcessor, Mmproj, Rgb, VisionTower};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if cfg!(debug_assertions) {
        eprintln!("vision: built with debug assertions; run it in release");
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runs = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).ok_or("--runs needs a count")?.parse()?,
        None => 2,
    };
    let files: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--runs"))
        .map(|(_, a)| a)
        .collect();
    let [mmproj, images @ ..] = files.as_slice() else {
        return Err("usage: vision MMPROJ.gguf IMAGE... [--runs N]".into());
    };
    let start = Instant::now();
    let mmproj = Mmproj::open(std::path::Path::new(mmproj.as_str()))?;
    let cfg = mmproj.config()?;
    let tower = VisionTower::load(&cfg, &mmproj.weights(&Device::Cpu), "model.visual")?;
    let processor = ImageProcessor::new(mmproj.processor(&cfg));
    println!(
        "tower: {} blocks of {} ({} heads), patch {}, loaded in {:.2} s; {} threads",
        cfg.depth,
        cfg.hidden_size,
        cfg.num_heads,
        cfg.patch_size,
        start.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    for image in images {
        let bytes = std::fs::read(image.as_str())?;
        let (mut prepare, mut encode) = (f64::MAX, f64::MAX);
        let mut tokens = 0;
        let mut size = (0, 0);
        for _ in 0..runs {
            let t = Instant::now();
            let rgb = Rgb::decode(&bytes, 1 << 26)?;
            let input = processor.process(&rgb)?;
            prepare = prepare.min(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let out = tower.forward(&input)?;
            encode = encode.min(t.elapsed().as_secs_f64() * 1e3);
            tokens = out.dim(0)?;
            size = (rgb.width, rgb.height);
        }
        println!(
            "{image}: {}x{} -> {tokens} tokens: prepare {prepare:.1} ms, encode {encode:.1} ms",
            size.0, size.1
        );
    }
    Ok(())
}
