//! `hearth parity`: checks this build, on a chosen device and dtype, against reference logits
//! computed by Hugging Face transformers (`crates/engine/tests/fixtures/generate.py` writes them), so that a
//! GPU build can be verified on the machine that runs it.

use crate::commands::bench::{load, Loaded};
use crate::model_args::ModelArgs;
use anyhow::{bail, Context};
use hearth_engine::LanguageModel;
use serde::Deserialize;

#[derive(clap::Args, Debug)]
pub struct ParityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A golden file from crates/engine/tests/fixtures/generate.py (e.g. crates/engine/tests/fixtures/golden/tiny-qwen2.json).
    #[arg(long)]
    pub golden: std::path::PathBuf,
}

#[derive(Deserialize)]
struct Golden {
    prompt_ids: Vec<u32>,
    logits_f32: Vec<f32>,
    greedy_f32: Vec<u32>,
    long_prompt_ids: Vec<u32>,
    long_logits_f32: Vec<f32>,
    logits_bf16_native: Vec<f32>,
}

#[derive(serde::Serialize)]
struct Check {
    name: &'static str,
    /// Largest absolute difference, and the bound it must stay within.
    max_abs_diff: f32,
    bound: f32,
    pass: bool,
}

pub fn run(args: ParityArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.golden)
        .with_context(|| format!("reading --golden {}", args.golden.display()))?;
    let g: Golden = serde_json::from_str(&text).with_context(|| {
        format!(
            "--golden {}: not a golden file of generate.py",
            args.golden.display()
        )
    })?;
    let Loaded {
        model,
        dtype,
        backend,
        ..
    } = load(&args.model)?;
    let logits = |ids: &[u32]| -> anyhow::Result<Vec<f32>> {
        let mut cache = LanguageModel::new_cache(&model);
        Ok(model.forward(ids, &mut cache)?.to_vec1()?)
    };
    let scale = |v: &[f32]| v.iter().fold(0f32, |a, x| a.max(x.abs()));
    let short = logits(&g.prompt_ids)?;
    let long = logits(&g.long_prompt_ids)?;
    let mut checks = vec![];
    let mut check = |name, d: f32, bound: f32| {
        checks.push(Check {
            name,
            max_abs_diff: d,
            bound,
            pass: d <= bound,
        });
    };
    // f32 on a GPU sums in another order than PyTorch on the CPU: 1e-3 of the logits' scale.
    // bf16 rounds every activation to 8 mantissa bits: 5 % of the scale (as tests/model_parity.rs).
    let (reference, long_reference, rel) = match dtype.as_str() {
        "f32" => (&g.logits_f32, Some(&g.long_logits_f32), 1e-3),
        "bf16" | "f16" => (&g.logits_bf16_native, None, 0.05),
        other => bail!("parity compares f32, bf16 or f16 weights; this model is {other}"),
    };
    // Where transformers' own bf16 run parts from its f32 one (a router's near tie flipped by
    // rounding, as in the tiny Qwen3.5-MoE), it is no reference for bf16: compare with f32 at
    // the bound of the long prompt's check instead.
    let reference_parts =
        max_abs_diff("logits_bf16_native", &g.logits_f32, reference)? > 0.05 * scale(&g.logits_f32);
    if long_reference.is_none() && reference_parts {
        check(
            "logits_vs_f32",
            max_abs_diff("logits_vs_f32", &short, &g.logits_f32)?,
            0.1 * scale(&g.logits_f32),
        );
    } else {
        check(
            "logits",
            max_abs_diff("logits", &short, reference)?,
            rel * scale(reference),
        );
    }
    match long_reference {
        Some(r) => check(
            "logits_300_tokens",
            max_abs_diff("logits_300_tokens", &long, r)?,
            rel * scale(r),
        ),
        None => check(
            "logits_300_tokens_vs_f32",
            max_abs_diff("logits_300_tokens_vs_f32", &long, &g.long_logits_f32)?,
            0.1 * scale(&g.long_logits_f32),
        ),
    }
    // Greedy tokens: exact in f32; in bf16 near-ties may flip, so the matching prefix is reported.
    let mut cache = LanguageModel::new_cache(&model);
    let mut l = model.forward(&g.prompt_ids, &mut cache)?;
    let mut greedy = vec![];
    for _ in 0..g.greedy_f32.len() {
        let next = l.argmax(0)?.to_scalar::<u32>()?;
        greedy.push(next);
        l = model.forward(&[next], &mut cache)?;
    }
    let same = greedy
        .iter()
        .zip(&g.greedy_f32)
        .take_while(|(a, b)| a == b)
        .count();
    let pass = checks.iter().all(|c| c.pass) && (dtype != "f32" || same == g.greedy_f32.len());
    let report = serde_json::json!({
        "golden": args.golden.display().to_string(),
        "backend": backend,
        "dtype": dtype,
        "checks": checks,
        "greedy_matching_prefix": same,
        "greedy_total": g.greedy_f32.len(),
        "pass": pass,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if !pass {
        bail!("parity failed against {}", args.golden.display());
    }
    Ok(())
}

/// The largest absolute difference between the model's logits and the golden ones; vectors of
/// different lengths (another vocabulary, a short golden file) are an error, not a zip over
/// the shorter one. NaN anywhere counts as an infinite difference.
fn max_abs_diff(name: &str, got: &[f32], golden: &[f32]) -> anyhow::Result<f32> {
    if got.len() != golden.len() {
        bail!(
            "{name}: the model gives {} logits, the golden file has {} (another vocabulary?)",
            got.len(),
            golden.len()
        );
    }
    Ok(got.iter().zip(golden).fold(0f32, |m, (x, y)| {
        let d = (x - y).abs();
        if d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d)
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_mismatch_fails_instead_of_zipping() -> anyhow::Result<()> {
        assert_eq!(max_abs_diff("logits", &[1.0, 2.0], &[1.0, 2.5])?, 0.5);
        // A short vector that agrees with the golden one's start must not pass.
        let err = max_abs_diff("logits", &[1.0], &[1.0, 2.0])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("logits") && err.contains("1 logits") && err.contains("has 2"),
            "{err}"
        );
        assert!(max_abs_diff("logits", &[1.0, 2.0, 3.0], &[1.0, 2.0]).is_err());
        assert_eq!(max_abs_diff("logits", &[f32::NAN], &[1.0])?, f32::INFINITY);
        Ok(())
    }
}
