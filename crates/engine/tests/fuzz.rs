//! Property tests: the stop-string scanner, the GGUF reader and chat rendering answer every
//! input with a value or an error, without panicking or hanging.
//! `HEARTH_FUZZ_CASES` sets the cases per property (`scripts/fuzz.sh` runs them long).

use candle_core::quantized::gguf_file::{self, Value as GValue};
use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};
use hearth_engine::chat::{ChatFormat, ChatInput, ChatMessage, JinjaTemplate, MetaTemplate};
use hearth_engine::load::gguf::GgufFile;
use hearth_engine::{StopScan, StopStrings, ToolCall};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

use hearth_fuzz::check;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

// ---------------------------------------------------------------- stop strings

#[test]
fn stop_strings_lose_nothing_and_show_no_stop() {
    // A small alphabet with a multi-byte character, so stop strings overlap and chunks split
    // them in every way.
    let text = "[ab<|é>]{0,12}";
    let strategy = (
        prop::collection::vec("[ab<|é>]{1,4}", 1..4),
        prop::collection::vec(text, 0..12),
    );
    check("stop strings", strategy, |(stops, chunks)| {
        let mut s = StopStrings::new(stops.clone()).expect("non-empty stops");
        let mut shown = String::new();
        let mut pushed = String::new();
        let mut matched = None;
        for chunk in &chunks {
            pushed.push_str(chunk);
            match s.push(chunk) {
                StopScan::Emit(e) => shown.push_str(&e),
                StopScan::Stopped { emit, matched: m } => {
                    shown.push_str(&emit);
                    matched = Some(m);
                    break;
                }
            }
            // What is shown is final: it must be the start of the text.
            prop_assert!(pushed.starts_with(&shown));
        }
        for stop in &stops {
            prop_assert!(!shown.contains(stop.as_str()), "showed stop {stop:?}");
        }
        match matched {
            Some(m) => {
                prop_assert!(stops.contains(&m));
                let stopped_at = format!("{shown}{m}");
                prop_assert!(pushed.starts_with(&stopped_at));
            }
            None => {
                shown.push_str(&s.flush());
                prop_assert_eq!(&shown, &pushed, "text lost or changed");
                for stop in &stops {
                    prop_assert!(!pushed.contains(stop.as_str()), "missed stop {stop:?}");
                }
            }
        }
        Ok(())
    });
}

#[test]
fn stop_strings_take_arbitrary_text() {
    let strategy = (
        prop::collection::vec(".{0,6}", 0..4),
        prop::collection::vec(".{0,16}", 0..16),
    );
    check("stop strings arbitrary", strategy, |(stops, chunks)| {
        let Ok(mut s) = StopStrings::new(stops.clone()) else {
            prop_assert!(stops.iter().any(String::is_empty));
            return Ok(());
        };
        let mut out = String::new();
        for chunk in &chunks {
            match s.push(chunk) {
                StopScan::Emit(e) => out.push_str(&e),
                StopScan::Stopped { emit, .. } => {
                    out.push_str(&emit);
                    return Ok(());
                }
            }
        }
        out.push_str(&s.flush());
        prop_assert_eq!(out, chunks.concat());
        Ok(())
    });
}

// ---------------------------------------------------------------- GGUF

/// A small GGUF file: Qwen2 metadata, a byte-level tokenizer, two tensors; valid when
/// `alignment` is (candle writes the data 32-aligned whatever the metadata says).
fn gguf_with_alignment(alignment: u32) -> Vec<u8> {
    let s = |v: &str| GValue::String(v.into());
    // Fourteen letters, their first merge, and an end-of-text token.
    let mut tokens: Vec<GValue> = ('a'..='n').map(|c| s(&c.to_string())).collect();
    tokens.push(s("ab"));
    tokens.push(s("<|endoftext|>"));
    let meta: Vec<(&str, GValue)> = vec![
        ("general.architecture", s("qwen2")),
        ("general.alignment", GValue::U32(alignment)),
        ("general.file_type", GValue::U32(1)),
        ("qwen2.block_count", GValue::U32(1)),
        ("qwen2.context_length", GValue::U32(64)),
        ("qwen2.embedding_length", GValue::U32(8)),
        ("qwen2.feed_forward_length", GValue::U32(16)),
        ("qwen2.attention.head_count", GValue::U32(2)),
        ("qwen2.attention.head_count_kv", GValue::U32(1)),
        ("qwen2.rope.freq_base", GValue::F32(1e6)),
        ("qwen2.attention.layer_norm_rms_epsilon", GValue::F32(1e-6)),
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("qwen2")),
        ("tokenizer.ggml.tokens", GValue::Array(tokens)),
        (
            "tokenizer.ggml.token_type",
            GValue::Array((0..16).map(|_| GValue::I32(1)).collect()),
        ),
        ("tokenizer.ggml.merges", GValue::Array(vec![s("a b")])),
        ("tokenizer.ggml.eos_token_id", GValue::U32(15)),
        (
            "tokenizer.chat_template",
            s("{% for m in messages %}{{ m.content }}{% endfor %}"),
        ),
    ];
    let embd = Tensor::zeros((16, 8), candle_core::DType::F32, &Device::Cpu).unwrap();
    let norm = Tensor::ones(8, candle_core::DType::F32, &Device::Cpu).unwrap();
    let tensors = [
        (
            "token_embd.weight",
            QTensor::quantize(&embd, candle_core::quantized::GgmlDType::F32).unwrap(),
        ),
        (
            "output_norm.weight",
            QTensor::quantize(&norm, candle_core::quantized::GgmlDType::F32).unwrap(),
        ),
    ];
    let meta_refs: Vec<(&str, &GValue)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (*k, t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut out, &meta_refs, &tensor_refs).unwrap();
    out.into_inner()
}

/// Opens `bytes` as a GGUF file and asks it everything a load asks; any answer but a panic.
fn open_all(dir: &Path, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join("model.gguf");
    std::fs::write(&path, bytes).unwrap();
    let f = GgufFile::open(&path).map_err(|e| e.to_string())?;
    let _ = f.architecture();
    let _ = f.config();
    let _ = f.tokenizer();
    let _ = f.chat_template();
    let _ = f.special_tokens();
    let _ = f.stop_token_ids();
    let _ = f.file_type();
    let _ = f.weight_bytes();
    Ok(())
}

fn valid_gguf() -> Vec<u8> {
    gguf_with_alignment(32)
}

#[test]
fn gguf_alignment_of_zero_is_an_error() {
    // Found by the mutation property: candle's reader divided by the declared alignment.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, gguf_with_alignment(0)).unwrap();
    let err = GgufFile::open(&path)
        .err()
        .expect("an alignment of 0 is refused");
    let msg = err.to_string();
    assert!(msg.contains("model.gguf"), "{msg}");
    assert!(msg.contains("malformed header"), "{msg}");
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite a byte.
    Set(usize, u8),
    /// Overwrite a little-endian u32 (counts, lengths, types).
    SetU32(usize, u32),
    /// Overwrite a little-endian u64 (lengths, dimensions, offsets).
    SetU64(usize, u64),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(u64::MAX),
        Just(1 << 32),
        any::<u64>(),
        0u64..64,
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), word.clone()).prop_map(|(i, w)| Mutation::SetU32(i, w as u32)),
        (any::<usize>(), word).prop_map(|(i, w)| Mutation::SetU64(i, w)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len().max(1);
    let put = |bytes: &mut Vec<u8>, i: usize, w: &[u8]| {
        let i = i % len;
        for (j, b) in w.iter().enumerate() {
            if let Some(slot) = bytes.get_mut(i + j) {
                *slot = *b;
            }
        }
    };
    match m {
        Mutation::Set(i, b) => put(bytes, *i, &[*b]),
        Mutation::SetU32(i, w) => put(bytes, *i, &w.to_le_bytes()),
        Mutation::SetU64(i, w) => put(bytes, *i, &w.to_le_bytes()),
        Mutation::Truncate(i) => bytes.truncate(i % len),
        Mutation::Insert(i, b) => {
            let i = i % (bytes.len() + 1);
            bytes.splice(i..i, b.iter().copied());
        }
    }
}

#[test]
fn gguf_reader_answers_mutated_headers() {
    let valid = valid_gguf();
    let dir = tempfile::tempdir().unwrap();
    open_all(dir.path(), &valid).expect("the unmutated file opens");
    let f = GgufFile::open(&dir.path().join("model.gguf")).unwrap();
    f.config().expect("the unmutated config reads");
    f.tokenizer().expect("the unmutated tokenizer reads");
    // Mutations land mostly in the header and metadata, where the reader's decisions are.
    let header = valid.len().min(1024);
    let strategy = prop::collection::vec(mutation(), 1..6).prop_map(move |ms| {
        ms.into_iter()
            .map(|m| match m {
                Mutation::Set(i, b) => Mutation::Set(i % header, b),
                Mutation::SetU32(i, w) => Mutation::SetU32(i % header, w),
                Mutation::SetU64(i, w) => Mutation::SetU64(i % header, w),
                other => other,
            })
            .collect::<Vec<_>>()
    });
    check("gguf mutated", strategy, |ms| {
        let mut bytes = valid.clone();
        for m in &ms {
            mutate(&mut bytes, m);
        }
        if let Err(e) = open_all(dir.path(), &bytes) {
            prop_assert!(!e.is_empty());
        }
        Ok(())
    });
}

#[test]
fn gguf_reader_answers_arbitrary_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let strategy = (
        prop::sample::select(vec![1u32, 2, 3, 4]),
        prop::collection::vec(any::<u8>(), 0..512),
    )
        .prop_map(|(version, rest)| {
            let mut b = b"GGUF".to_vec();
            b.extend(version.to_le_bytes());
            b.extend(rest);
            b
        });
    check("gguf bytes", strategy, |bytes| {
        if let Err(e) = open_all(dir.path(), &bytes) {
            prop_assert!(!e.is_empty());
        }
        Ok(())
    });
}

// ---------------------------------------------------------------- chat rendering

fn json_value() -> impl Strategy<Value = Value> {
    hearth_fuzz::json_value(".{0,12}", ".{0,8}", 3, 5)
}

/// Text with the markers templates and models use.
fn chat_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<think>".to_string()),
        Just("</think>".to_string()),
        Just("<tool_call>".to_string()),
        Just("</tool_call>".to_string()),
        Just("<tool_response>".to_string()),
        Just("<|im_start|>".to_string()),
        Just("<|im_end|>".to_string()),
        Just("{{".to_string()),
        Just("{%".to_string()),
        Just("\n".to_string()),
        ".{0,10}",
    ];
    prop::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

fn role() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["system", "user", "assistant", "tool"]).prop_map(String::from),
        1 => ".{0,8}",
    ]
}

fn message() -> impl Strategy<Value = ChatMessage> {
    let call = (
        ".{0,10}",
        prop_oneof![json_value(), ".{0,20}".prop_map(Value::String)],
    )
        .prop_map(|(name, args)| ToolCall::new(name, args));
    (
        role(),
        prop::option::of(chat_text()),
        prop::option::of(chat_text()),
        prop::collection::vec(call, 0..3),
        prop::collection::vec(
            (
                prop::sample::select(vec!["name", "tool_call_id", "other"]),
                json_value(),
            ),
            0..2,
        ),
    )
        .prop_map(|(role, content, reasoning, calls, extra)| {
            let mut m = ChatMessage::new(&role, "");
            m.content = content;
            m.reasoning_content = reasoning;
            m.tool_calls = calls;
            m.extra = extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            m
        })
}

fn tool_spec() -> impl Strategy<Value = Value> {
    prop_oneof![
        (".{0,10}", ".{0,20}", json_value()).prop_map(|(name, description, parameters)| json!({
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        })),
        json_value(),
    ]
}

#[derive(Debug, Clone)]
struct Conversation {
    messages: Vec<ChatMessage>,
    tools: Option<Vec<Value>>,
    add_generation_prompt: bool,
    enable_thinking: Option<bool>,
}

fn conversation() -> impl Strategy<Value = Conversation> {
    (
        prop::collection::vec(message(), 0..6),
        prop::option::of(prop::collection::vec(tool_spec(), 0..3)),
        any::<bool>(),
        prop::option::of(any::<bool>()),
    )
        .prop_map(
            |(messages, tools, add_generation_prompt, enable_thinking)| Conversation {
                messages,
                tools,
                add_generation_prompt,
                enable_thinking,
            },
        )
}

fn qwen_template(name: &str) -> JinjaTemplate {
    let path = fixtures().join(format!("tokenizers/{name}/tokenizer_config.json"));
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut special = Map::new();
    for k in ["bos_token", "eos_token", "pad_token", "unk_token"] {
        special.insert(k.into(), cfg.get(k).cloned().unwrap_or(Value::Null));
    }
    JinjaTemplate::new(
        cfg["chat_template"].as_str().unwrap(),
        special,
        &path.display().to_string(),
    )
    .unwrap()
}

#[test]
fn chat_templates_render_arbitrary_conversations() {
    let chatml_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/chatml.toml");
    let formats = [
        ("qwen3", ChatFormat::Jinja(qwen_template("qwen3"))),
        ("qwen2.5", ChatFormat::Jinja(qwen_template("qwen2.5"))),
        (
            "chatml",
            ChatFormat::Meta(MetaTemplate::from_file(&chatml_path).unwrap()),
        ),
    ];
    // Counts rendered prompts, so that a property passing only on errors is noticed.
    let rendered = std::cell::Cell::new(0u64);
    check("chat render", conversation(), |c| {
        let input = ChatInput {
            messages: &c.messages,
            tools: c.tools.as_deref(),
            add_generation_prompt: c.add_generation_prompt,
            enable_thinking: c.enable_thinking,
            extra: Map::new(),
        };
        for (name, format) in &formats {
            match format.render(&input) {
                Ok(prompt) => {
                    rendered.set(rendered.get() + 1);
                    if *name == "chatml" {
                        // The meta-template writes every message's text as given.
                        for m in &c.messages {
                            prop_assert!(prompt.contains(m.text()), "{name} lost {:?}", m.text());
                        }
                    }
                }
                Err(e) => prop_assert!(!e.to_string().is_empty(), "{name}: empty error"),
            }
        }
        Ok(())
    });
    assert!(rendered.get() > 0, "no conversation rendered");
    eprintln!("fuzz chat render: {} prompts rendered", rendered.get());
}

#[test]
fn meta_templates_load_from_arbitrary_toml() {
    let chatml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/chatml.toml"),
    )
    .unwrap();
    let strategy = prop_oneof![
        ".{0,200}",
        // The real file with a slice cut out or replaced.
        (any::<usize>(), 0usize..40, ".{0,8}").prop_map(move |(at, n, with)| {
            let at = chatml
                .char_indices()
                .map(|(i, _)| i)
                .nth(at % chatml.chars().count())
                .unwrap_or(0);
            let end = chatml[at..]
                .char_indices()
                .map(|(i, _)| at + i)
                .nth(n)
                .unwrap_or(chatml.len());
            format!("{}{with}{}", &chatml[..at], &chatml[end..])
        }),
    ];
    check("meta-template toml", strategy, |text| {
        if let Ok(t) = MetaTemplate::from_toml(&text, Path::new("fuzz.toml")) {
            let msgs = [ChatMessage::system("s"), ChatMessage::user("u")];
            let _ = t.render(&msgs, true);
        }
        Ok(())
    });
}
