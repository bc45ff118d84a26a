//! Constrained decoding: the token trie over the real Qwen vocabulary, and generation under a
//! JSON schema, a regex and a Lark grammar. The tiny fixture model has random weights, so
//! unconstrained it writes garbage: output that parses proves the mask does the work.

use hearth_engine::{
    ChatMessage, ChatRequest, Constraint, DTypeSpec, DeviceSpec, Engine, EngineError, Event,
    EventStream, FinishReason, GenerateRequest, Grammars, LoadOptions, SamplingParams, Summary,
    Tokenizer,
};
use serde_json::{json, Value};

mod common;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn tiny() -> Result<Engine, EngineError> {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let path = common::tiny("qwen2");
    Engine::load(&path.to_string_lossy(), &opts)
}

fn collect(mut s: EventStream) -> Result<(String, Summary), String> {
    let (mut text, mut summary) = (String::new(), None);
    while let Some(e) = s.blocking_next() {
        match e {
            Event::Text { text: t } => text.push_str(&t),
            Event::Finished(s) => summary = Some(s),
            Event::Error { message } => return Err(message),
            _ => {}
        }
    }
    Ok((text, summary.ok_or("no Finished event")?))
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        seed,
        ..Default::default()
    }
}

fn prompt(e: &Engine) -> Result<Vec<u32>, EngineError> {
    e.tokenizer().encode("The answer is")
}

#[test]
fn the_trie_spells_every_real_token() -> TestResult {
    let Some(dir) = common::real_tokenizers() else {
        return Ok(());
    };
    let tok = Tokenizer::from_file(&dir.join("qwen2.5/tokenizer.json"))?;
    let im_end = tok.token_id("<|im_end|>").ok_or("no <|im_end|>")?;
    let g = Grammars::new(&tok, &[im_end])?;
    assert_eq!(
        g.vocab_size(),
        151_665,
        "the tokenizer's ids, added tokens included"
    );
    assert_eq!(g.eos_tokens(), &[im_end]);
    // Text of every kind comes back byte for byte from its tokens' bytes.
    for text in [
        "Hello, world!\n",
        "  fn main() { println!(\"{}\", 1 + 2); }\n\t",
        "naïve café — 東京 🚀",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
    ] {
        let ids = tok.encode(text)?;
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| g.token_bytes(id).to_vec())
            .collect();
        assert_eq!(bytes, text.as_bytes(), "{text:?}");
    }
    // Added tokens are special: the marker byte, then their text.
    let tool_call = tok.token_id("<tool_call>").ok_or("no <tool_call>")?;
    assert_eq!(g.token_bytes(im_end), b"\xff<|im_end|>");
    assert_eq!(g.token_bytes(tool_call), b"\xff<tool_call>");
    // Every ordinary token that is whole UTF-8 decodes to the text of its bytes.
    let mut checked = 0;
    for id in 0..151_643u32 {
        let bytes = g.token_bytes(id);
        // (Byte 0xFF alone is an ordinary token: it is never the start of UTF-8 text.)
        assert!(
            !bytes.is_empty() && (bytes[0] != 0xff || bytes.len() == 1),
            "token {id}"
        );
        if let Ok(s) = std::str::from_utf8(bytes) {
            assert_eq!(tok.decode(&[id])?, s, "token {id}");
            checked += 1;
        }
    }
    assert!(checked > 140_000, "{checked} tokens checked");
    Ok(())
}

/// A schema with every feature the tests need: an enum, `$ref`, `anyOf`, nested objects,
/// `required`, a bounded array. Bounds keep a random model's output short.
fn shape_schema() -> Value {
    json!({
        "$defs": {
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "integer", "minimum": -9, "maximum": 99},
                    "y": {"type": "integer", "minimum": 0, "maximum": 9}
                },
                "required": ["x", "y"],
                "additionalProperties": false
            }
        },
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "at": {"$ref": "#/$defs/point"},
            "tag": {"anyOf": [
                {"type": "string", "maxLength": 4},
                {"type": "boolean"},
                {"type": "null"}
            ]},
            "path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 2}
        },
        "required": ["color", "at", "tag"],
        "additionalProperties": false
    })
}

fn check_point(v: &Value) -> Result<(), String> {
    let o = v.as_object().ok_or(format!("point {v} is not an object"))?;
    // JSON Schema's integers are numbers without a fraction: `-0.0` and `3.0` are integers.
    let int = |k: &str, lo: i64, hi: i64| {
        o.get(k)
            .and_then(Value::as_f64)
            .filter(|n| n.fract() == 0.0 && (lo as f64..=hi as f64).contains(n))
            .ok_or(format!(
                "point {v}: `{k}` is not an integer in [{lo}, {hi}]"
            ))
    };
    int("x", -9, 99)?;
    int("y", 0, 9)?;
    if o.len() != 2 {
        return Err(format!("point {v} has extra keys"));
    }
    Ok(())
}

/// Whether `v` is valid against [`shape_schema`].
fn check_shape(v: &Value) -> Result<(), String> {
    let o = v.as_object().ok_or(format!("{v} is not an object"))?;
    let color = o.get("color").and_then(Value::as_str);
    if !matches!(color, Some("red" | "green" | "blue")) {
        return Err(format!("{v}: color not in the enum"));
    }
    check_point(o.get("at").ok_or(format!("{v}: no `at`"))?)?;
    match o.get("tag") {
        Some(Value::String(s)) if s.chars().count() <= 4 => {}
        Some(Value::Bool(_) | Value::Null) => {}
        other => return Err(format!("{v}: bad tag {other:?}")),
    }
    if let Some(path) = o.get("path") {
        let items = path
            .as_array()
            .ok_or(format!("{v}: path is not an array"))?;
        if items.len() > 2 {
            return Err(format!("{v}: path is too long"));
        }
        items.iter().try_for_each(check_point)?;
    }
    if o.keys()
        .any(|k| !["color", "at", "tag", "path"].contains(&k.as_str()))
    {
        return Err(format!("{v}: a key the schema does not have"));
    }
    Ok(())
}

#[test]
fn a_random_model_writes_valid_json_under_a_schema() -> TestResult {
    let e = tiny()?;
    let p = prompt(&e)?;
    // Unconstrained, the random model's text is no JSON at all.
    let (free, _) = collect(e.generate(GenerateRequest {
        sampling: sampled(1),
        ..GenerateRequest::new(p.clone(), 60)
    })?)?;
    assert!(serde_json::from_str::<Value>(&free).is_err(), "{free:?}");
    // Several at once: the constrained rows go through the batched decode.
    let seeds = [0u64, 1, 2, 3, 4, 5];
    let streams = seeds
        .iter()
        .map(|&seed| {
            e.generate(GenerateRequest {
                sampling: if seed == 0 {
                    SamplingParams::greedy()
                } else {
                    sampled(seed)
                },
                constraint: Some(Constraint::JsonSchema(shape_schema())),
                ..GenerateRequest::new(p.clone(), 400)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut texts = std::collections::BTreeSet::new();
    for (seed, s) in seeds.iter().zip(streams) {
        let (text, summary) = collect(s)?;
        assert!(
            matches!(summary.reason, FinishReason::StopToken { .. }),
            "seed {seed}: {:?} after {text:?}",
            summary.reason
        );
        let v: Value =
            serde_json::from_str(&text).map_err(|err| format!("seed {seed}: {err}: {text:?}"))?;
        check_shape(&v)?;
        texts.insert(text);
    }
    assert!(texts.len() > 2, "sampling varies the answers: {texts:?}");
    Ok(())
}

#[test]
fn a_regex_and_a_lark_grammar_hold() -> TestResult {
    let e = tiny()?;
    let p = prompt(&e)?;
    for seed in 1..5 {
        let (text, summary) = collect(e.generate(GenerateRequest {
            sampling: sampled(seed),
            constraint: Some(Constraint::Regex("[a-z]{3}-[0-9]{2,4}".into())),
            ..GenerateRequest::new(p.clone(), 50)
        })?)?;
        let (word, digits) = text.split_once('-').ok_or(format!("{text:?}"))?;
        assert!(
            word.len() == 3 && word.bytes().all(|b| b.is_ascii_lowercase()),
            "{text:?}"
        );
        assert!((2..=4).contains(&digits.len()), "{text:?}");
        assert!(digits.bytes().all(|b| b.is_ascii_digit()), "{text:?}");
        assert!(
            matches!(summary.reason, FinishReason::StopToken { .. }),
            "{summary:?}"
        );

        let lark = "start: \"yes\" | \"no\" | NUM \" apples\"\nNUM: /[1-9][0-9]?/";
        let (text, _) = collect(e.generate(GenerateRequest {
            sampling: sampled(seed),
            constraint: Some(Constraint::Lark(lark.into())),
            ..GenerateRequest::new(p.clone(), 50)
        })?)?;
        let ok = text == "yes"
            || text == "no"
            || text.strip_suffix(" apples").is_some_and(|n| {
                n.parse::<u32>().is_ok_and(|n| (1..100).contains(&n)) && !n.starts_with('0')
            });
        assert!(ok, "{text:?}");
    }
    Ok(())
}

/// Guides for one constraint share its compiled grammar (and lexer) but not their place in
/// it; at most 32 constraints stay compiled.
#[test]
fn guides_of_one_constraint_are_independent() -> TestResult {
    let e = tiny()?;
    let g = e.grammars()?;
    let id = |t: &str| -> Result<u32, Box<dyn std::error::Error>> {
        match e.tokenizer().encode(t)?[..] {
            [id] => Ok(id),
            ref ids => Err(format!("{t:?} is {ids:?}, not one token").into()),
        }
    };
    let (a, b, c) = (id("a")?, id("b")?, id("c")?);
    let rx = Constraint::Regex("ab|cd".into());
    let mut first = g.guide(&rx)?;
    first.consume(a)?;
    let mut second = g.guide(&rx)?;
    assert_eq!(g.compiled(), 1);
    assert!(first.allows(b)? && !first.allows(c)?);
    assert!(second.allows(c)? && !second.allows(b)?);
    second.consume(c)?;
    assert!(!second.is_accepting()? && !first.is_accepting()?);
    first.consume(b)?;
    assert!(first.is_accepting()? && !second.is_accepting()?);

    // The mask: refused ids (and padding rows past the vocabulary) to -inf, allowed ones kept;
    // nothing left to sample is an error.
    let vocab = g.vocab_size();
    let mut logits = vec![1.5f32; vocab + 40];
    g.guide(&rx)?.mask(&mut logits)?;
    assert_eq!((logits[a as usize], logits[c as usize]), (1.5, 1.5));
    assert_eq!(logits[b as usize], f32::NEG_INFINITY);
    assert!(logits[vocab..].iter().all(|l| *l == f32::NEG_INFINITY));
    let mut dead = vec![f32::NEG_INFINITY; vocab];
    assert!(g.guide(&rx)?.mask(&mut dead).is_err());

    for n in 0..40 {
        g.guide(&Constraint::Regex(format!("x{{{n}}}")))?;
    }
    assert_eq!(g.compiled(), 32);
    Ok(())
}

#[test]
fn a_chat_request_carries_its_constraint() -> TestResult {
    let e = tiny()?;
    let mut s = e.chat(ChatRequest {
        messages: vec![ChatMessage::user("colour?")],
        max_tokens: 40,
        sampling: Some(sampled(9)),
        constraint: Some(Constraint::JsonSchema(json!({"enum": ["red", "green"]}))),
        ..Default::default()
    })?;
    let mut text = String::new();
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text: t } => text.push_str(&t),
            Event::Error { message } => return Err(message.into()),
            _ => {}
        }
    }
    assert!(text == "\"red\"" || text == "\"green\"", "{text:?}");
    Ok(())
}

fn refusal(e: &Engine, c: Constraint) -> Result<String, Box<dyn std::error::Error>> {
    match e.generate(GenerateRequest {
        constraint: Some(c),
        ..GenerateRequest::new(prompt(e)?, 10)
    }) {
        Ok(_) => Err("the engine took a constraint it cannot hold".into()),
        Err(
            err @ EngineError::InvalidArgument {
                arg: "constraint", ..
            },
        ) => Ok(err.to_string()),
        Err(other) => Err(format!("refused for the wrong reason: {other}").into()),
    }
}

#[test]
fn bad_grammars_are_refused_when_queued() -> TestResult {
    let e = tiny()?;
    let m = refusal(&e, Constraint::JsonSchema(json!({"type": "frobnicate"})))?;
    assert!(
        m.contains("constraint") && m.contains("JSON schema") && m.contains("frobnicate"),
        "{m}"
    );
    let m = refusal(
        &e,
        Constraint::JsonSchema(json!({"properties": {"a": {"$ref": "#/$defs/nowhere"}}})),
    )?;
    assert!(m.contains("nowhere"), "{m}");
    let m = refusal(&e, Constraint::Lark("start: foo(".into()))?;
    assert!(m.contains("Lark grammar"), "{m}");
    let m = refusal(&e, Constraint::Regex("(unclosed".into()))?;
    assert!(m.contains("regex"), "{m}");
    // Grammars that admit no text at all: refused, never a hang.
    for c in [
        Constraint::JsonSchema(json!({"enum": []})),
        Constraint::JsonSchema(json!(false)),
        Constraint::Regex("[a&&b]".into()),
    ] {
        let m = refusal(&e, c.clone())?;
        assert!(m.contains("constraint"), "{c:?}: {m}");
    }
    Ok(())
}

#[test]
fn too_few_tokens_end_with_length_not_a_match() -> TestResult {
    let e = tiny()?;
    for seed in 1..4 {
        let (text, summary) = collect(e.generate(GenerateRequest {
            sampling: sampled(seed),
            constraint: Some(Constraint::JsonSchema(shape_schema())),
            ..GenerateRequest::new(prompt(&e)?, 4)
        })?)?;
        assert_eq!(summary.reason, FinishReason::MaxTokens, "{text:?}");
        assert_eq!(summary.usage.completion_tokens, 4);
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text:?}");
        assert!(text.starts_with("{\""), "{text:?}");
    }
    Ok(())
}

#[test]
fn the_real_model_answers_in_the_schema() -> TestResult {
    let Some(path) = common::real_gguf() else {
        return Ok(());
    };
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        ..Default::default()
    };
    let e = Engine::load(&path.to_string_lossy(), &opts)?;
    let schema = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"type": "string", "maxLength": 30},
            "population_millions": {"type": "number"},
            "continent": {"enum": ["Africa", "Americas", "Asia", "Europe", "Oceania"]}
        },
        "required": ["city", "country", "continent"],
        "additionalProperties": false
    });
    let mut s = e.chat(ChatRequest {
        messages: vec![ChatMessage::user(
            "Describe Paris as a JSON object with city, country, population_millions and continent.",
        )],
        max_tokens: 80,
        sampling: Some(SamplingParams::greedy()),
        constraint: Some(Constraint::JsonSchema(schema)),
        ..Default::default()
    })?;
    let (mut text, mut reason) = (String::new(), None);
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text: t } => text.push_str(&t),
            Event::Finished(sum) => reason = Some(sum.reason),
            Event::Error { message } => return Err(message.into()),
            _ => {}
        }
    }
    assert!(
        matches!(reason, Some(FinishReason::StopToken { .. })),
        "{reason:?}: {text}"
    );
    let v: Value = serde_json::from_str(&text).map_err(|err| format!("{err}: {text}"))?;
    assert_eq!(v["continent"], "Europe", "{text}");
    assert!(
        v["city"].as_str().is_some_and(|c| c.contains("Paris")),
        "{text}"
    );
    Ok(())
}
