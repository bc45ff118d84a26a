//! The root package's tests share the engine's test helpers (fixtures, goldens, real data).
#![allow(dead_code)]

#[path = "../../crates/engine/tests/common/mod.rs"]
mod engine;
pub use engine::*;

/// `hearth serve` on a free loopback port (`--port 0`, unless `args` name one), stopped when
/// dropped; `addr` is where it listens.
pub struct Served {
    pub child: std::process::Child,
    pub addr: String,
}

impl Served {
    pub fn start<S: AsRef<std::ffi::OsStr>>(
        args: &[S],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        use std::io::BufRead;
        let port = args.iter().any(|a| a.as_ref() == "--port");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
            .arg("serve")
            .args(args)
            .args(if port { &[][..] } else { &["--port", "0"][..] })
            .env("HF_HUB_OFFLINE", "1")
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let addr = loop {
            let Some(line) = lines.next() else {
                let _ = child.kill();
                return Err("the server exited before listening".into());
            };
            if let Some(a) = line?.split("listening on http://").nth(1) {
                break a.trim().to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, addr })
    }
}

impl Served {
    /// `hearth serve` on the CPU with `model`, and `extra` arguments.
    pub fn on_cpu(
        model: &std::path::Path,
        extra: &[&str],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let model = model.to_str().ok_or("model path")?;
        Self::start(&[&["--model", model, "--device", "cpu"][..], extra].concat())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tiny Qwen3.5 with a vision tower (`image1.png` beside it).
pub fn vision_dir() -> std::path::PathBuf {
    fixtures().join("tiny-qwen3.5-vision")
}

/// The vision golden's first prompt (`image1.png`, then "What is this?"), transformers'
/// greedy tokens for it and their text.
pub struct VisionGolden {
    pub prompt: serde_json::Value,
    pub greedy: Vec<u32>,
    pub text: String,
}

pub fn vision_golden() -> Result<VisionGolden, Box<dyn std::error::Error>> {
    let golden: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        fixtures().join("golden/tiny-qwen3.5-vision.json"),
    )?)?;
    let prompt = golden["prompts"][0].clone();
    let greedy: Vec<u32> = serde_json::from_value(prompt["greedy_f32"].clone())?;
    let tokenizer = hearth_engine::Tokenizer::from_file(&vision_dir().join("tokenizer.json"))?;
    let text = tokenizer.decode(&greedy)?;
    Ok(VisionGolden {
        prompt,
        greedy,
        text,
    })
}
