//! The vision tower against transformers (`fixtures/vision_golden.py`): the processor's
//! resize and patches bit for bit, the tower's image tokens within 1e-4 of their scale, and
//! the multimodal rotary positions of prompts with one and two images.

mod common;

use candle_core::{DType, Device};
use hearth_engine::load::weights::Weights;
use hearth_engine::vision::{
    mrope_positions, smart_resize, ImageProcessor, ProcessorConfig, Rgb, VisionConfig, VisionTower,
};
use serde_json::Value;
use std::path::PathBuf;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn dir() -> PathBuf {
    common::fixtures().join("tiny-qwen3.5-vision")
}

fn golden() -> Result<Value, Box<dyn std::error::Error>> {
    let path = common::fixtures().join("golden/tiny-qwen3.5-vision.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

fn vision_config() -> Result<VisionConfig, Box<dyn std::error::Error>> {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("config.json"))?)?;
    Ok(VisionConfig::from_config(&config)?.ok_or("no vision_config")?)
}

fn numbers<T: serde::de::DeserializeOwned>(v: &Value) -> Result<Vec<T>, serde_json::Error> {
    serde_json::from_value(v.clone())
}

/// The engine on the CPU in f32, as the goldens are.
fn cpu_f32() -> hearth_engine::LoadOptions {
    hearth_engine::LoadOptions {
        device: hearth_engine::DeviceSpec::Cpu,
        dtype: hearth_engine::DTypeSpec::F32,
        ..Default::default()
    }
}

/// `n` greedy tokens after `prompt` with `images`, no stop token.
fn greedy(
    prompt: Vec<u32>,
    images: Vec<hearth_engine::vision::ImageInput>,
    n: usize,
) -> hearth_engine::GenerateRequest {
    hearth_engine::GenerateRequest {
        sampling: hearth_engine::SamplingParams::greedy(),
        stop_token_ids: Some(vec![]),
        images,
        ..hearth_engine::GenerateRequest::new(prompt, n)
    }
}

/// A stream's tokens and its prompt tokens found cached, or its error.
fn drain(s: &mut hearth_engine::EventStream) -> Result<(Vec<u32>, usize), String> {
    use hearth_engine::Event;
    let (mut tokens, mut cached) = (vec![], None);
    while let Some(e) = s.blocking_next() {
        match e {
            Event::Token { id } => tokens.push(id),
            Event::Finished(summary) => cached = Some(summary.usage.cached_prompt_tokens),
            Event::Error { message } => return Err(message),
            _ => {}
        }
    }
    Ok((tokens, cached.ok_or("the stream ended without a summary")?))
}

#[test]
fn smart_resize_matches_transformers() -> TestResult {
    let g = golden()?;
    let cases = g["smart_resize"].as_array().ok_or("smart_resize")?;
    assert!(cases.len() > 50);
    for case in cases {
        let n = |k: &str| case[k].as_u64().unwrap_or(0) as usize;
        let got = smart_resize(
            n("height"),
            n("width"),
            n("factor"),
            n("min_pixels"),
            n("max_pixels"),
        );
        match case.get("resized") {
            Some(want) => {
                let want: Vec<usize> = numbers(want)?;
                let (h, w) = got?;
                assert_eq!(vec![h, w], want, "{case}");
            }
            None => assert!(got.is_err(), "{case}"),
        }
    }
    Ok(())
}

#[test]
fn the_processor_gives_transformers_pixels_bit_for_bit() -> TestResult {
    let g = golden()?;
    let processor = ImageProcessor::new(ProcessorConfig::load(&dir(), &vision_config()?)?);
    assert_eq!(processor.config().min_pixels, 1024);
    assert_eq!(processor.config().max_pixels, 2560);
    for image in g["images"].as_array().ok_or("images")? {
        let file = image["file"].as_str().ok_or("file")?;
        let rgb = Rgb::decode(&std::fs::read(dir().join(file))?, 1 << 24)?;
        assert_eq!(
            (rgb.height, rgb.width),
            (
                image["height"].as_u64().unwrap_or(0) as usize,
                image["width"].as_u64().unwrap_or(0) as usize
            )
        );
        let input = processor.process(&rgb)?;
        let grid: Vec<usize> = numbers(&image["image_grid_thw"])?;
        assert_eq!(input.grid.to_vec(), grid, "{file}");
        let codes: Vec<u8> = numbers(&image["pixel_values_codes"])?;
        assert_eq!(codes.len(), input.pixels.len(), "{file}");
        // Each value is the one transformers gives for that byte, bit for bit.
        let differ: Vec<usize> = (0..codes.len())
            .filter(|&i| input.pixels[i].to_bits() != ((codes[i] as f32 - 127.5) / 127.5).to_bits())
            .collect();
        assert!(
            differ.is_empty(),
            "{file}: {} values differ, first {:?}",
            differ.len(),
            differ.first()
        );
        assert_eq!(
            input.tokens(2),
            image["num_image_tokens"].as_u64().unwrap_or(0) as usize
        );
    }
    Ok(())
}

#[test]
fn the_tower_gives_transformers_image_tokens() -> TestResult {
    let g = golden()?;
    let cfg = vision_config()?;
    let weights = Weights::open(&[dir().join("model.safetensors")], DType::F32, &Device::Cpu)?;
    let tower = VisionTower::load(&cfg, &weights, "model.visual")?;
    let processor = ImageProcessor::new(ProcessorConfig::load(&dir(), &cfg)?);
    for image in g["images"].as_array().ok_or("images")? {
        let file = image["file"].as_str().ok_or("file")?;
        let input = processor.process(&Rgb::decode(&std::fs::read(dir().join(file))?, 1 << 24)?)?;
        let got = tower.forward(&input)?;
        let shape: Vec<usize> = numbers(&image["image_embeds_shape"])?;
        assert_eq!(got.dims().to_vec(), shape, "{file}");
        let want: Vec<f32> = numbers(&image["image_embeds"])?;
        let got = got.flatten_all()?.to_vec1::<f32>()?;
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        eprintln!("{file}: worst {worst} of scale {scale}");
        assert!(
            worst <= 1e-4 * scale,
            "{file}: worst {worst} of scale {scale}"
        );
    }
    Ok(())
}

#[test]
fn prompt_positions_match_get_rope_index() -> TestResult {
    let g = golden()?;
    let image_pad = g["token_ids"]["<|image_pad|>"]
        .as_u64()
        .ok_or("image_pad")? as u32;
    for prompt in g["prompts"].as_array().ok_or("prompts")? {
        let ids: Vec<u32> = numbers(&prompt["input_ids"])?;
        let grids: Vec<[usize; 3]> = numbers(&prompt["image_grid_thw"])?;
        let want: Vec<Vec<u32>> = numbers(&prompt["position_ids"])?;
        let got = mrope_positions(&ids, image_pad, &grids, 2)?;
        for axis in 0..3 {
            let got: Vec<u32> = got.positions.iter().map(|p| p[axis]).collect();
            assert_eq!(got, want[axis], "axis {axis}");
        }
        assert_eq!(
            got.delta,
            prompt["rope_deltas"].as_i64().ok_or("rope_deltas")?
        );
        // A count of images that does not match the prompt's runs is an error.
        assert!(mrope_positions(&ids, image_pad, &grids[1..], 2).is_err());
        assert!(mrope_positions(&ids, image_pad, &[grids[0]; 3], 2).is_err());
    }
    Ok(())
}

#[test]
fn bad_images_are_refused_by_name() {
    for (bytes, named) in [
        (b"not an image".to_vec(), "not a PNG"),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(), "image"),
    ] {
        let e = Rgb::decode(&bytes, 1 << 24)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(named), "{e}");
    }
    let png = std::fs::read(dir().join("image1.png")).unwrap_or_default();
    let e = Rgb::decode(&png, 100)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("over the limit"), "{e}");
    let e = Rgb::decode(&png[..png.len() / 2], 1 << 24)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("cannot decode"), "{e}");
}

/// Prompts with one and two images: the model's logits within 1e-4 of their scale of
/// transformers', and its greedy tokens equal, prefilled whole and in chunks that cut an
/// image; Qwen3.5 dense and mixture-of-experts.
#[test]
fn prompts_with_images_give_transformers_logits_and_tokens() -> TestResult {
    logits_and_tokens_match("tiny-qwen3.5-vision")
}

#[test]
fn a_mixture_of_experts_with_images_gives_transformers_logits_and_tokens() -> TestResult {
    logits_and_tokens_match("tiny-qwen3.5-moe-vision")?;
    // And through the engine, as a user loads it.
    use hearth_engine::Engine;
    let dir = common::fixtures().join("tiny-qwen3.5-moe-vision");
    let g: Value = serde_json::from_str(&std::fs::read_to_string(
        common::fixtures().join("golden/tiny-qwen3.5-moe-vision.json"),
    )?)?;
    let opts = cpu_f32();
    let engine = Engine::load(dir.to_str().ok_or("path")?, &opts)?;
    let prompt = &g["prompts"][0];
    let want: Vec<u32> = numbers(&prompt["greedy_f32"])?;
    let image = engine.image(&std::fs::read(dir.join("image1.png"))?)?;
    let request = greedy(numbers(&prompt["input_ids"])?, vec![image], want.len());
    assert_eq!(drain(&mut engine.generate(request)?)?.0, want);
    Ok(())
}

fn logits_and_tokens_match(checkpoint: &str) -> TestResult {
    use hearth_engine::vision::Vision;
    use hearth_engine::{KvCache, Qwen, QwenConfig};
    let dir = || common::fixtures().join(checkpoint);
    let g: Value = serde_json::from_str(&std::fs::read_to_string(
        common::fixtures().join(format!("golden/{checkpoint}.json")),
    )?)?;
    let cfg = QwenConfig::from_file(&dir().join("config.json"))?;
    assert!(
        cfg.mrope.is_some(),
        "the checkpoint's multimodal RoPE is read"
    );
    let weights = Weights::open(&[dir().join("model.safetensors")], DType::F32, &Device::Cpu)?;
    let mut model = Qwen::load(&cfg, &weights)?;
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("config.json"))?)?;
    let vision = Vision::load(&config, &dir(), &weights, "model.visual")?.ok_or("no vision")?;
    model.set_vision(vision)?;
    let processor = &model.vision().ok_or("vision")?.processor;
    for prompt in g["prompts"].as_array().ok_or("prompts")? {
        let ids: Vec<u32> = numbers(&prompt["input_ids"])?;
        let files: Vec<String> = numbers(&prompt["images"])?;
        let mut images = vec![];
        for f in &files {
            let rgb = Rgb::decode(&std::fs::read(dir().join(f))?, 1 << 24)?;
            images.push(processor.process(&rgb)?);
        }
        let want: Vec<f32> = numbers(&prompt["logits_last_f32"])?;
        let greedy_want: Vec<u32> = numbers(&prompt["greedy_f32"])?;
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        // Whole, and in chunks whose cut falls inside the first image.
        let first_image = ids
            .iter()
            .position(|&t| t == 1019)
            .ok_or("no image token")?;
        for cut in [ids.len(), first_image + 3] {
            let mut cache: KvCache = model.new_cache();
            model.attach_images(&ids, &images, &mut cache)?;
            let mut logits = model.forward(&ids[..cut], &mut cache)?;
            if cut < ids.len() {
                logits = model.forward(&ids[cut..], &mut cache)?;
            }
            let got = logits.to_vec1::<f32>()?;
            let worst = got
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            eprintln!(
                "{} images, cut at {cut}: worst {worst} of scale {scale}",
                files.len()
            );
            assert!(
                worst <= 1e-4 * scale,
                "cut {cut}: worst {worst} of scale {scale}"
            );
            let mut tokens = vec![];
            for _ in 0..greedy_want.len() {
                let v = logits.to_vec1::<f32>()?;
                let next = (0..v.len())
                    .max_by(|&a, &b| v[a].total_cmp(&v[b]))
                    .unwrap_or(0) as u32;
                tokens.push(next);
                logits = model.forward(&[next], &mut cache)?;
            }
            assert_eq!(tokens, greedy_want, "cut {cut}");
        }
    }
    // Without the images (their tokens embedded as text, plain positions) the logits differ.
    let ids: Vec<u32> = numbers(&g["prompts"][0]["input_ids"])?;
    let want: Vec<f32> = numbers(&g["prompts"][0]["logits_last_f32"])?;
    let plain = model
        .forward(&ids, &mut model.new_cache())?
        .to_vec1::<f32>()?;
    let apart = plain
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(apart > 1e-2, "{apart}");
    // A model without vision refuses images by name.
    let text = Qwen::load(&cfg, &weights)?;
    let mut cache = text.new_cache();
    let e = text
        .attach_images(&[1, 2], &[], &mut cache)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("images") && e.contains("no vision"), "{e}");
    Ok(())
}

/// Through the engine: a prompt with an image beside a text prompt, batched, each gives the
/// tokens transformers gives (the image's) or it gives alone (the text's), and the image's
/// again when a second request shares its text up to the image.
#[test]
fn the_engine_batches_a_prompt_with_an_image_beside_text() -> TestResult {
    use hearth_engine::Engine;
    let g = golden()?;
    let opts = cpu_f32();
    let engine = Engine::load(dir().to_str().ok_or("path")?, &opts)?;
    let support = engine
        .info()
        .images
        .clone()
        .ok_or("the engine takes images")?;
    assert_eq!(support.image_token, 1019);
    let prompt = &g["prompts"][0];
    let ids: Vec<u32> = numbers(&prompt["input_ids"])?;
    let want: Vec<u32> = numbers(&prompt["greedy_f32"])?;
    let image = engine.image(&std::fs::read(dir().join("image1.png"))?)?;
    let request = |prompt: Vec<u32>, images| greedy(prompt, images, want.len());
    let tokens = |s: &mut hearth_engine::EventStream| drain(s).map(|(t, _)| t);
    let text: Vec<u32> = ids.iter().copied().filter(|&t| t != 1019).collect();
    let alone = tokens(&mut engine.generate(request(text.clone(), vec![]))?)?;
    for _ in 0..2 {
        let mut a = engine.generate(request(ids.clone(), vec![image.clone()]))?;
        let mut b = engine.generate(request(text.clone(), vec![]))?;
        assert_eq!(tokens(&mut a)?, want);
        assert_eq!(tokens(&mut b)?, alone);
    }
    // Images that do not fit the prompt are refused at once.
    let e = engine
        .generate(request(text.clone(), vec![image.clone()]))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("images"), "{e}");
    // An image the tower cannot take (its pixels do not fill its grid) fails its own request
    // as it is encoded, ahead of the queue; the engine goes on.
    let broken = hearth_engine::vision::ImageInput::new(vec![0.0; 10], [1, 2, 2]);
    let mut one = ids[..ids.iter().position(|&t| t == 1019).ok_or("image")?].to_vec();
    one.extend([1019, 1018, 872]);
    let e = tokens(&mut engine.generate(request(one, vec![broken]))?)
        .err()
        .unwrap_or_default();
    assert!(e.contains("does not fit this tower"), "{e}");
    assert_eq!(
        tokens(&mut engine.generate(request(text.clone(), vec![]))?)?,
        alone
    );
    Ok(())
}

/// The prefix cache knows an image by its pixels: the same prompt with the same image runs
/// again from past the image (and gives the same tokens), the same prompt with other pixels
/// shares nothing from the image on, and a next turn of the conversation resumes after the
/// image and answers as a fresh engine does.
#[test]
fn a_prompt_with_an_image_reuses_its_cache_by_the_pixels() -> TestResult {
    use hearth_engine::vision::ImageInput;
    use hearth_engine::Engine;
    let g = golden()?;
    let opts = cpu_f32();
    let path = dir();
    let path = path.to_str().ok_or("path")?;
    let engine = Engine::load(path, &opts)?;
    let prompt = &g["prompts"][0];
    let ids: Vec<u32> = numbers(&prompt["input_ids"])?;
    let want: Vec<u32> = numbers(&prompt["greedy_f32"])?;
    let image_at = ids.iter().position(|&t| t == 1019).ok_or("an image")?;
    let image_end = image_at + ids.iter().filter(|&&t| t == 1019).count();
    let image = engine.image(&std::fs::read(dir().join("image1.png"))?)?;
    let mut pixels = image.pixels.clone();
    pixels[0] += 0.5;
    let other = ImageInput::new(pixels, image.grid);
    assert_ne!(other.key, image.key);
    // Tokens and prompt tokens found cached.
    let run = |engine: &Engine, prompt: &[u32], image: &ImageInput, n: usize| {
        let mut s = engine.generate(greedy(prompt.to_vec(), vec![image.clone()], n))?;
        Ok::<_, Box<dyn std::error::Error>>(drain(&mut s)?)
    };
    assert_eq!(run(&engine, &ids, &image, want.len())?, (want.clone(), 0));
    let (tokens, cached) = run(&engine, &ids, &image, want.len())?;
    assert_eq!(tokens, want);
    assert!(
        cached > image_end,
        "{cached} cached, the image ends at {image_end}"
    );
    let (_, cached) = run(&engine, &ids, &other, want.len())?;
    assert!(cached <= image_at, "{cached} cached through another image");

    // The next turn: the first answer, then a user message of text.
    let mut next = ids.clone();
    next.extend(&want);
    next.extend([
        1023, 198, 1022, 872, 198, 34, 316, 79, 1023, 198, 1022, 64, 198,
    ]);
    let (tokens, cached) = run(&engine, &next, &image, 8)?;
    assert!(cached > image_end, "{cached} cached next turn");
    let fresh = Engine::load(path, &opts)?;
    assert_eq!(run(&fresh, &next, &image, 8)?, (tokens, 0));
    Ok(())
}

/// The tower from llama.cpp's mmproj GGUF (`fixtures/gguf_hybrid.sh`) beside the model's GGUF:
/// found there, the same image tokens as from safetensors, and the greedy tokens transformers
/// gives; a model GGUF without vision refuses an explicit mmproj that does not fit it.
#[test]
fn an_mmproj_beside_a_gguf_model_takes_images() -> TestResult {
    use hearth_engine::vision::Mmproj;
    use hearth_engine::{Engine, LoadOptions};
    let g = golden()?;
    let ggufs = common::fixtures().join("gguf/vision");
    let mmproj = Mmproj::open(&ggufs.join("tiny-qwen3.5-vision-mmproj-f32.gguf"))?;
    let cfg = mmproj.config()?;
    assert_eq!(
        (cfg.depth, cfg.hidden_size, cfg.out_hidden_size),
        (2, 32, 64)
    );
    let tower = VisionTower::load(&cfg, &mmproj.weights(&Device::Cpu), "model.visual")?;
    let processor = ImageProcessor::new(ProcessorConfig::load(&dir(), &cfg)?);
    let image = processor.process(&Rgb::decode(
        &std::fs::read(dir().join("image1.png"))?,
        1 << 24,
    )?)?;
    let want: Vec<f32> = numbers(&g["images"][0]["image_embeds"])?;
    let got = tower.forward(&image)?.flatten_all()?.to_vec1::<f32>()?;
    let worst = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst <= 1e-4 * 6.7, "worst {worst}");

    let opts = cpu_f32();
    let engine = Engine::load(
        ggufs
            .join("tiny-qwen3.5-vision-f32.gguf")
            .to_str()
            .ok_or("path")?,
        &opts,
    )?;
    assert!(
        engine.info().images.is_some(),
        "the mmproj beside the model is found"
    );
    let prompt = &g["prompts"][0];
    let ids: Vec<u32> = numbers(&prompt["input_ids"])?;
    let want_tokens: Vec<u32> = numbers(&prompt["greedy_f32"])?;
    // The mmproj carries no pixel bounds: the engine takes Qwen3.5's (at least 65 536 pixels,
    // 64 tokens); the golden prompt's image is the fixture processor's (35 tokens).
    let bounded = engine.image(&std::fs::read(dir().join("image1.png"))?)?;
    assert!(bounded.tokens(2) >= 64, "{:?}", bounded.grid);
    let mut s = engine.generate(greedy(ids, vec![image], want_tokens.len()))?;
    assert_eq!(drain(&mut s)?.0, want_tokens);

    // A text model given an mmproj that does not fit it: an error naming the option.
    let e = Engine::load(
        common::fixtures()
            .join("gguf/tiny-qwen3.5-f32.gguf")
            .to_str()
            .ok_or("path")?,
        &LoadOptions {
            mmproj: Some(ggufs.join("tiny-qwen3.5-vision-mmproj-f32.gguf")),
            ..opts.clone()
        },
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("mmproj"), "{e}");
    Ok(())
}
