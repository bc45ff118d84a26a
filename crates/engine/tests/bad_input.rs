//! Broken checkpoints give errors that name the file, field or tensor at fault.

mod common;

use candle_core::{safetensors, DType, Device, Tensor};
use common::*;
use hearth_engine::{DTypeSpec, DeviceSpec, Engine, HubOptions, LoadOptions};
use std::collections::HashMap;
use std::path::Path;

fn copy_fixture(family: &str, to: &Path) {
    for entry in std::fs::read_dir(tiny(family)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn load_err(dir: &Path) -> String {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    match Engine::load(dir.to_str().unwrap(), &opts) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

fn rewrite_weights(dir: &Path, edit: impl FnOnce(&mut HashMap<String, Tensor>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = safetensors::load(&path, &Device::Cpu).unwrap();
    edit(&mut tensors);
    safetensors::save(&tensors, &path).unwrap();
}

#[test]
fn missing_config_json() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    std::fs::remove_file(tmp.path().join("config.json")).unwrap();
    let err = load_err(tmp.path());
    assert!(
        err.contains("config.json") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn missing_tokenizer_json() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    std::fs::remove_file(tmp.path().join("tokenizer.json")).unwrap();
    assert!(load_err(tmp.path()).contains("tokenizer.json"));
}

#[test]
fn unknown_architecture() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    let cfg = tmp.path().join("config.json");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("Qwen2ForCausalLM", "MistralForCausalLM");
    std::fs::write(&cfg, text).unwrap();
    let err = load_err(tmp.path());
    assert!(
        err.contains("MistralForCausalLM") && err.contains("Qwen2ForCausalLM"),
        "{err}"
    );
}

#[test]
fn tensor_missing_from_the_weights() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    rewrite_weights(tmp.path(), |t| {
        t.remove("model.layers.1.mlp.up_proj.weight");
    });
    let err = load_err(tmp.path());
    assert!(
        err.contains("`model.layers.1.mlp.up_proj.weight` is missing")
            && err.contains("model.safetensors"),
        "{err}"
    );
}

/// A Qwen3.5 checkpoint without a layer's recurrent-state parameters, or with a convolution
/// that does not match the config's linear-attention dims: the tensor is named.
#[test]
fn hybrid_state_tensors_missing_or_misshapen() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen3.5", tmp.path());
    rewrite_weights(tmp.path(), |t| {
        t.remove("model.layers.1.linear_attn.A_log");
    });
    let err = load_err(tmp.path());
    assert!(
        err.contains("`model.layers.1.linear_attn.A_log` is missing"),
        "{err}"
    );
    copy_fixture("qwen3.5", tmp.path());
    rewrite_weights(tmp.path(), |t| {
        t.insert(
            "model.layers.0.linear_attn.conv1d.weight".into(),
            Tensor::zeros((96, 1, 4), DType::F32, &Device::Cpu).unwrap(),
        );
    });
    let err = load_err(tmp.path());
    assert!(
        err.contains("`model.layers.0.linear_attn.conv1d.weight`") && err.contains("[128, 1, 4]"),
        "{err}"
    );
}

#[test]
fn tensor_with_a_wrong_shape() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    rewrite_weights(tmp.path(), |t| {
        t.insert(
            "model.norm.weight".into(),
            Tensor::zeros(63, DType::F32, &Device::Cpu).unwrap(),
        );
    });
    let err = load_err(tmp.path());
    assert!(
        err.contains("`model.norm.weight`") && err.contains("[63]") && err.contains("[64]"),
        "{err}"
    );
}

#[test]
fn truncated_safetensors_file() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    let path = tmp.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_err(tmp.path());
    assert!(
        err.contains("model.safetensors") && err.contains("not a valid safetensors file"),
        "{err}"
    );
}

#[test]
fn missing_shard_listed_in_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen3", tmp.path());
    std::fs::remove_file(tmp.path().join("model-00003-of-00005.safetensors")).unwrap();
    let err = load_err(tmp.path());
    assert!(err.contains("model-00003-of-00005.safetensors"), "{err}");
}

#[test]
fn hub_id_not_cached_while_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        hub: HubOptions {
            offline: true,
            cache_dir: Some(tmp.path().into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = Engine::load("Qwen/Qwen2.5-0.5B-Instruct", &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("`config.json`")
            && err.contains("Qwen/Qwen2.5-0.5B-Instruct")
            && err.contains("offline"),
        "{err}"
    );
}

#[test]
fn hub_layout_in_the_cache_loads_offline() {
    // The tiny checkpoint placed in a cache laid out as hf-hub lays it out.
    let tmp = tempfile::tempdir().unwrap();
    let commit = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let repo = tmp.path().join("models--hearth--tiny-qwen2");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/v1"), commit).unwrap();
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    copy_fixture("qwen2", &snap);
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        hub: HubOptions {
            offline: true,
            revision: Some("v1".into()),
            cache_dir: Some(tmp.path().into()),
            progress: false,
        },
        template: None,
        scheduler: Default::default(),
        progress: None,
        cpu: None,
        kernels: Default::default(),
        cache_types: Default::default(),
        ctx_size: None,
        yarn: None,
        draft_model: None,
        mmproj: None,
        max_image_pixels: None,
    };
    let e = Engine::load("hearth/tiny-qwen2", &opts).unwrap();
    assert_eq!(e.info().origin, "hearth/tiny-qwen2@v1");
    assert_eq!(e.info().family, "qwen2");
}

/// A context past the model's own without YaRN, and one whose one sequence outgrows the KV
/// budget, are refused at load, naming the option (a cache type a GPU cannot use: the unit
/// tests of `cache_type`).
#[test]
fn contexts_and_cache_types_that_cannot_work_are_refused() {
    let tiny = tiny("qwen3");
    let load = |opts: LoadOptions| {
        Engine::load(tiny.to_str().unwrap(), &opts)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let base = || LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let err = load(LoadOptions {
        ctx_size: Some(4096),
        ..base()
    });
    assert!(err.contains("ctx_size") && err.contains("YaRN"), "{err}");
    // 32 768 positions by YaRN (factor 64 over 512): 16 MiB of f16 cache for one sequence.
    let err = load(LoadOptions {
        ctx_size: Some(32768),
        yarn: Some(hearth_engine::YarnOptions::default()),
        scheduler: hearth_engine::SchedulerOptions {
            kv_cache_mb: Some(1),
            ..Default::default()
        },
        ..base()
    });
    assert!(
        err.contains("ctx_size") && err.contains("kv_cache_mb"),
        "{err}"
    );
    // Within the budget it loads, and says so.
    let e = Engine::load(
        tiny.to_str().unwrap(),
        &LoadOptions {
            ctx_size: Some(2048),
            yarn: Some(hearth_engine::YarnOptions::default()),
            ..base()
        },
    )
    .unwrap();
    assert_eq!(e.info().max_positions, 2048);
}
