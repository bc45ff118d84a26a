//! GGUF files: tiny ones written here from the tiny fixture (quantized and not) against the
//! transformers goldens; broken ones for the errors; and the real Qwen2.5-Coder-0.5B-Instruct
//! Q4_K_M when scripts/fetch-test-models.sh has fetched it.

mod common;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use common::*;
use hearth_engine::load::gguf::{gguf_name, GgufFile};
use hearth_engine::{Qwen, Tokenizer};
use std::path::{Path, PathBuf};

/// The tiny Qwen2 fixture as a GGUF file: matrices in `quant`, vectors in f32.
fn write_tiny(path: &Path, quant: GgmlDType, edit: impl FnOnce(&mut Vec<(String, Value)>)) {
    let dir = tiny("qwen2");
    let tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    let mut tokens = vec![String::new(); 1024];
    let mut types = vec![1i32; 1024];
    for (t, id) in tok["model"]["vocab"].as_object().unwrap() {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    for a in tok["added_tokens"].as_array().unwrap() {
        let id = a["id"].as_u64().unwrap() as usize;
        tokens[id] = a["content"].as_str().unwrap().into();
        types[id] = 3;
    }
    let merges: Vec<Value> = tok["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            Value::String(format!(
                "{} {}",
                m[0].as_str().unwrap(),
                m[1].as_str().unwrap()
            ))
        })
        .collect();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap())
            .unwrap();
    let s = |v: &str| Value::String(v.into());
    let mut meta: Vec<(String, Value)> = vec![
        ("general.architecture".into(), s("qwen2")),
        ("qwen2.block_count".into(), Value::U32(2)),
        ("qwen2.context_length".into(), Value::U32(512)),
        ("qwen2.embedding_length".into(), Value::U32(64)),
        ("qwen2.feed_forward_length".into(), Value::U32(128)),
        ("qwen2.attention.head_count".into(), Value::U32(4)),
        ("qwen2.attention.head_count_kv".into(), Value::U32(2)),
        ("qwen2.rope.freq_base".into(), Value::F32(1e6)),
        (
            "qwen2.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-6),
        ),
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.pre".into(), s("qwen2")),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges".into(), Value::Array(merges)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1023)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(1021)),
        (
            "tokenizer.chat_template".into(),
            s(cfg["chat_template"].as_str().unwrap()),
        ),
    ];
    edit(&mut meta);
    let weights =
        candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let mut tensors: Vec<(String, QTensor)> = weights
        .iter()
        .map(|(name, t)| {
            let q = if t.rank() == 2 { quant } else { GgmlDType::F32 };
            (gguf_name(name), QTensor::quantize(t, q).unwrap())
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &meta_refs, &tensor_refs).unwrap();
}

fn load(path: &Path) -> (Qwen, Tokenizer) {
    let file = std::sync::Arc::new(GgufFile::open(path).unwrap());
    let cfg = file.config().unwrap();
    (
        Qwen::load(&cfg, &file.weights(&Device::Cpu)).unwrap(),
        file.tokenizer().unwrap(),
    )
}

fn last_logits(m: &Qwen, ids: &[u32]) -> Vec<f32> {
    m.forward(ids, &mut m.new_cache())
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn f32_gguf_matches_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny-f32.gguf");
    write_tiny(&path, GgmlDType::F32, |_| {});
    let g = golden("qwen2");
    let (m, _) = load(&path);
    let d = max_abs_diff(&last_logits(&m, &g.prompt_ids), &g.logits_f32);
    assert!(d <= 1e-4, "{d}");
}

/// Q8_0 rounds each weight to 8 bits per block of 32 and the activations likewise: the logits
/// move by about 1 % of their scale, and the best token stays the best.
#[test]
fn q8_0_and_f16_gguf_stay_close_to_transformers() {
    let g = golden("qwen2");
    let scale = g.logits_f32.iter().fold(0f32, |a, &x| a.max(x.abs()));
    for (quant, tol) in [(GgmlDType::Q8_0, 0.05), (GgmlDType::F16, 0.01)] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tiny.gguf");
        write_tiny(&path, quant, |_| {});
        let (m, _) = load(&path);
        let got = last_logits(&m, &g.prompt_ids);
        let d = max_abs_diff(&got, &g.logits_f32);
        assert!(d <= tol * scale, "{quant:?}: {d} (scale {scale})");
        assert_eq!(
            hearth_engine::sampling::argmax(&got),
            g.greedy_f32[0],
            "{quant:?}"
        );
    }
}

/// Decoding reads every tensor once — the tied embedding table whole, as the LM head — plus
/// one row of the table for the input token.
#[test]
fn a_decoded_token_reads_every_weight_and_one_embedding_row() {
    for (quant, row_bytes) in [(GgmlDType::F32, 64 * 4), (GgmlDType::Q8_0, 64 / 32 * 34)] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tiny.gguf");
        write_tiny(&path, quant, |_| {});
        let file = GgufFile::open(&path).unwrap();
        let (m, _) = load(&path);
        assert_eq!(
            m.weight_bytes_per_token(),
            file.weight_bytes() + row_bytes,
            "{quant:?}"
        );
    }
}

/// Loading drops the vocabulary's metadata once the tokenizer is built; the special tokens'
/// names stay for the chat template.
#[test]
fn the_vocabulary_metadata_goes_once_the_tokenizer_is_built() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny.gguf");
    write_tiny(&path, GgmlDType::Q8_0, |_| {});
    let mut file = GgufFile::open(&path).unwrap();
    let special = file.special_tokens();
    assert!(special["eos_token"].is_string(), "{special:?}");
    file.tokenizer().unwrap();
    file.forget_vocabulary();
    assert_eq!(file.special_tokens(), special);
    let err = file
        .tokenizer()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("tokenizer.ggml.tokens"), "{err}");
}

#[test]
fn gguf_tokenizer_and_template_come_from_the_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny.gguf");
    write_tiny(&path, GgmlDType::Q8_0, |_| {});
    let (_, tok) = load(&path);
    let reference = Tokenizer::from_file(&tiny("qwen2").join("tokenizer.json")).unwrap();
    for text in [
        "Hello, world!",
        "<|im_start|>user\nhi<|im_end|>",
        "你好 émoji 😀",
        "  spaces\n\n",
    ] {
        assert_eq!(
            tok.encode(text).unwrap(),
            reference.encode(text).unwrap(),
            "{text:?}"
        );
    }
    let file = GgufFile::open(&path).unwrap();
    assert!(file.chat_template().unwrap().contains("<|im_start|>"));
    assert_eq!(file.stop_token_ids(), vec![1023]);
}

/// A vocabulary the tokenizer cannot be built from is an error naming the key, not a crash.
#[test]
fn a_broken_merge_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("merges.gguf");
    write_tiny(&path, GgmlDType::Q8_0, |m| {
        for (k, v) in m.iter_mut() {
            if let (true, Value::Array(merges)) = (k == "tokenizer.ggml.merges", v) {
                merges[3] = Value::String("nospace".into());
            }
        }
    });
    let err = GgufFile::open(&path)
        .unwrap()
        .tokenizer()
        .unwrap_err()
        .to_string();
    assert!(err.contains("merges.gguf"), "{err}");
    assert!(
        err.contains("`tokenizer.ggml.merges` holds `nospace`"),
        "{err}"
    );
}

fn open_err(path: &Path) -> String {
    match GgufFile::open(path).and_then(|f| f.config().map(|_| ())) {
        Ok(()) => panic!("{} should not load", path.display()),
        Err(e) => e.to_string(),
    }
}

/// Byte offset of the u32 type id of tensor `name` in a GGUF file.
fn dtype_offset(bytes: &[u8], name: &str) -> usize {
    let needle = name.as_bytes();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    at + 4 + 8 * n_dims
}

#[test]
fn broken_files_are_named_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.gguf");
    write_tiny(&good, GgmlDType::Q8_0, |_| {});
    let bytes = std::fs::read(&good).unwrap();
    let variant = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| -> PathBuf {
        let p = tmp.path().join(name);
        let mut b = bytes.clone();
        edit(&mut b);
        std::fs::write(&p, b).unwrap();
        p
    };

    let truncated = variant("truncated.gguf", &|b| b.truncate(b.len() - 1000));
    let err = open_err(&truncated);
    assert!(
        err.contains("truncated.gguf") && err.contains("truncated"),
        "{err}"
    );

    let magic = variant("magic.gguf", &|b| b[..4].copy_from_slice(b"GGML"));
    let err = open_err(&magic);
    assert!(err.contains("not a GGUF file"), "{err}");

    let version = variant("version.gguf", &|b| {
        b[4..8].copy_from_slice(&99u32.to_le_bytes())
    });
    let err = open_err(&version);
    assert!(err.contains("version.gguf") && err.contains("99"), "{err}");

    let quant = variant("quant.gguf", &|b| {
        let at = dtype_offset(b, "blk.0.attn_q.weight");
        b[at..at + 4].copy_from_slice(&16u32.to_le_bytes()); // IQ2_XXS
    });
    let err = open_err(&quant);
    assert!(err.contains("quant.gguf") && err.contains("16"), "{err}");

    let arch = tmp.path().join("arch.gguf");
    write_tiny(&arch, GgmlDType::Q8_0, |m| {
        m[0].1 = Value::String("llama".into())
    });
    let err = open_err(&arch);
    assert!(err.contains("`llama`") && err.contains("qwen2"), "{err}");

    let key = tmp.path().join("key.gguf");
    write_tiny(&key, GgmlDType::Q8_0, |m| {
        m.retain(|(k, _)| k != "qwen2.embedding_length")
    });
    let err = open_err(&key);
    assert!(err.contains("`qwen2.embedding_length` is missing"), "{err}");
}

/// Offsets and sizes that overflow 64 bits are refused by name, not summed into a wrap (or a
/// panic in a debug build).
#[test]
fn overflowing_offsets_and_sizes_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.gguf");
    write_tiny(&good, GgmlDType::Q8_0, |_| {});
    let bytes = std::fs::read(&good).unwrap();
    let variant = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| -> PathBuf {
        let p = tmp.path().join(name);
        let mut b = bytes.clone();
        edit(&mut b);
        std::fs::write(&p, b).unwrap();
        p
    };

    // The u64 offset follows the u32 type id.
    for offset in [u64::MAX, u64::MAX - 4096, 1 << 63] {
        let p = variant("offset.gguf", &|b| {
            let at = dtype_offset(b, "blk.1.ffn_down.weight") + 4;
            b[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        });
        let err = open_err(&p);
        assert!(
            err.contains("offset.gguf") && err.contains("`blk.1.ffn_down.weight`"),
            "{offset}: {err}"
        );
        assert!(
            err.contains("overflow") || err.contains("truncated"),
            "{offset}: {err}"
        );
    }

    // A dimension so large that the element count overflows.
    let p = variant("dims.gguf", &|b| {
        let at = dtype_offset(b, "blk.0.attn_q.weight");
        let first_dim = at - 16;
        b[first_dim..first_dim + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    });
    let err = open_err(&p);
    assert!(
        err.contains("dims.gguf")
            && err.contains("`blk.0.attn_q.weight`")
            && err.contains("64 bits"),
        "{err}"
    );
}

fn meta_err(edit: impl FnOnce(&mut Vec<(String, Value)>)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("meta.gguf");
    write_tiny(&path, GgmlDType::Q8_0, edit);
    open_err(&path)
}

/// The GGUF path refuses what config.json refuses: RoPE scaling, sliding windows, heads that
/// do not divide.
#[test]
fn gguf_metadata_gets_the_config_json_checks() {
    let set = |m: &mut Vec<(String, Value)>, key: &str, v: Value| {
        m.retain(|(k, _)| k != key);
        m.push((key.into(), v));
    };
    let err = meta_err(|m| {
        set(
            m,
            "qwen2.rope.scaling.type",
            Value::String("longrope".into()),
        );
        set(m, "qwen2.rope.scaling.factor", Value::F32(4.0));
    });
    assert!(
        err.contains("`qwen2.rope.scaling.type`")
            && err.contains("longrope")
            && err.contains("factor 4"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.rope.scaling.type", Value::String("yarn".into())));
    assert!(
        err.contains("`qwen2.rope.scaling.type`") && err.contains("qwen2.rope.scaling.factor"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.rope.scaling.type", Value::String("linear".into())));
    assert!(err.contains("RoPE scaling `linear`"), "{err}");
    let err = meta_err(|m| set(m, "qwen2.rope.scale_linear", Value::F32(2.0)));
    assert!(
        err.contains("`qwen2.rope.scale_linear`") && err.contains("linear"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.rope.dimension_count", Value::U32(8)));
    assert!(
        err.contains("`qwen2.rope.dimension_count`") && err.contains("8 of the 16"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.attention.sliding_window", Value::U32(128)));
    assert!(
        err.contains("`qwen2.attention.sliding_window`") && err.contains("sliding-window"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.attention.head_count_kv", Value::U32(3)));
    assert!(
        err.contains("`qwen2.attention.head_count_kv`") && err.contains("does not divide"),
        "{err}"
    );
    let err = meta_err(|m| set(m, "qwen2.attention.head_count", Value::U32(0)));
    assert!(err.contains("`qwen2.attention.head_count` is 0"), "{err}");

    // Plain RoPE, a factor of 1 and a window as long as the context all still load.
    for edit in [
        |m: &mut Vec<(String, Value)>| {
            m.push((
                "qwen2.rope.scaling.type".into(),
                Value::String("none".into()),
            ))
        },
        |m: &mut Vec<(String, Value)>| {
            m.push((
                "qwen2.rope.scaling.type".into(),
                Value::String("yarn".into()),
            ));
            m.push(("qwen2.rope.scaling.factor".into(), Value::F32(1.0)));
        },
        |m: &mut Vec<(String, Value)>| {
            m.push(("qwen2.attention.sliding_window".into(), Value::U32(512)));
            m.push(("qwen2.rope.dimension_count".into(), Value::U32(16)));
        },
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ok.gguf");
        write_tiny(&path, GgmlDType::Q8_0, edit);
        let cfg = GgufFile::open(&path).unwrap().config().unwrap();
        assert_eq!(cfg.head_dim, 16);
    }
}

/// llama.cpp's YaRN keys (as its converter writes Qwen3's `rope_scaling`) give the scaling and
/// the context it reaches; `rope.scaling.attn_factor` multiplies YaRN's own scale.
#[test]
fn gguf_yarn_keys_extend_the_context() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("yarn.gguf");
    write_tiny(&path, GgmlDType::Q8_0, |m| {
        m.push((
            "qwen2.rope.scaling.type".into(),
            Value::String("yarn".into()),
        ));
        m.push(("qwen2.rope.scaling.factor".into(), Value::F32(4.0)));
        m.push((
            "qwen2.rope.scaling.original_context_length".into(),
            Value::U32(256),
        ));
        m.push(("qwen2.rope.scaling.attn_factor".into(), Value::F32(2.0)));
    });
    let cfg = GgufFile::open(&path).unwrap().config().unwrap();
    let y = cfg.yarn.expect("yarn");
    assert_eq!((y.factor, y.original_max_positions), (4.0, 256));
    // The file's context_length is 512; YaRN reaches 4 × 256.
    assert_eq!(cfg.max_position_embeddings, 1024);
    let own = hearth_engine::Yarn::new(4.0, 256).attention_factor();
    assert!((y.attention_factor() - 2.0 * own).abs() < 1e-6);
}

#[test]
fn real_gguf_tokenizer_matches_qwen2_5() {
    let Some(model) = common::real_gguf() else {
        return;
    };
    let file = GgufFile::open(&model).unwrap();
    // Its metadata passes the same checks as a config.json.
    assert_eq!(file.config().unwrap().head_dim, 64);
    let tok = file.tokenizer().unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("golden/tokenizer-qwen2.5.json")).unwrap(),
    )
    .unwrap();
    assert!(rows.len() >= 50);
    for r in rows {
        let text = r["text"].as_str().unwrap();
        let ids: Vec<u32> = r["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}
