//! Tool calls valid by construction: the grammar of Qwen's `<tool_call>` blocks over the
//! offered tools, on the tiny random model (which, free, never writes a call) and on the real
//! Qwen vocabulary, where the tags are single tokens.

mod common;

use hearth_engine::constraint::{tool_call_grammar, TagStyle, ToolSpec};
use hearth_engine::ToolChoice;
use hearth_engine::{
    Constraint, DTypeSpec, DeviceSpec, Engine, EngineError, Event, FinishReason, GenerateRequest,
    Grammars, LoadOptions, SamplingParams, Tokenizer, ToolFormat,
};
use serde_json::{json, Value};
use std::path::PathBuf;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn tiny() -> Result<Engine, EngineError> {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen2");
    Engine::load(&path.to_string_lossy(), &opts)
}

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 6},
                    "unit": {"enum": ["c", "f"]}
                },
                "required": ["city"],
                "additionalProperties": false
            }
        }}),
        json!({"type": "function", "function": {
            "name": "add",
            "parameters": {
                "$defs": {"small": {"type": "integer", "minimum": 0, "maximum": 99}},
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/small"}, "b": {"$ref": "#/$defs/small"}},
                "required": ["a", "b"],
                "additionalProperties": false
            }
        }}),
    ]
}

/// Whether `call` is a call of an offered tool with arguments valid for it.
fn check_call(call: &Value) -> Result<String, String> {
    let o = call.as_object().ok_or(format!("{call} is not an object"))?;
    if o.len() != 2 {
        return Err(format!("{call}: keys other than name and arguments"));
    }
    let args = o
        .get("arguments")
        .and_then(Value::as_object)
        .ok_or(format!("{call}: arguments"))?;
    let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
    match name {
        "get_weather" => {
            let city = args.get("city").and_then(Value::as_str);
            if city.is_none_or(|c| c.chars().count() > 6) {
                return Err(format!("{call}: city"));
            }
            if !matches!(
                args.get("unit").map(|u| u.as_str()),
                None | Some(Some("c" | "f"))
            ) {
                return Err(format!("{call}: unit"));
            }
            if args.keys().any(|k| k != "city" && k != "unit") {
                return Err(format!("{call}: extra argument"));
            }
        }
        "add" => {
            for k in ["a", "b"] {
                let n = args.get(k).and_then(Value::as_f64);
                if !n.is_some_and(|n| n.fract() == 0.0 && (0.0..=99.0).contains(&n)) {
                    return Err(format!("{call}: {k}"));
                }
            }
            if args.len() != 2 {
                return Err(format!("{call}: extra argument"));
            }
        }
        _ => return Err(format!("{call}: no such tool")),
    }
    Ok(name.to_string())
}

/// Splits an answer into its leading text and its calls (each checked); `between` says
/// whether text may stand between calls (else only a newline).
fn parse(text: &str, between: bool) -> Result<(String, Vec<String>), String> {
    const OPEN: &str = "<tool_call>\n";
    const CLOSE: &str = "\n</tool_call>";
    let Some(first) = text.find("<tool_call>") else {
        return Ok((text.to_string(), vec![]));
    };
    let (lead, mut rest) = text.split_at(first);
    let mut names = vec![];
    while !rest.is_empty() {
        let body = rest
            .strip_prefix(OPEN)
            .ok_or(format!("no opening tag at {rest:?}"))?;
        let end = body
            .find(CLOSE)
            .ok_or(format!("an unclosed call in {text:?}"))?;
        let call: Value =
            serde_json::from_str(&body[..end]).map_err(|e| format!("{e}: {text:?}"))?;
        names.push(check_call(&call)?);
        rest = &body[end + CLOSE.len()..];
        if rest.is_empty() || rest == "\n" {
            break; // (a line break may end the calls)
        }
        rest = match rest.find("<tool_call>") {
            Some(i) if between || &rest[..i] == "\n" => &rest[i..],
            _ => return Err(format!("text after a call: {rest:?}")),
        };
    }
    Ok((lead.to_string(), names))
}

fn run(e: &Engine, c: Option<Constraint>, seed: u64) -> Result<(String, FinishReason), String> {
    let prompt = e
        .tokenizer()
        .encode("Call a tool:")
        .map_err(|e| e.to_string())?;
    let mut s = e
        .generate(GenerateRequest {
            sampling: SamplingParams {
                temperature: 1.0,
                seed,
                ..Default::default()
            },
            constraint: c,
            ..GenerateRequest::new(prompt, 300)
        })
        .map_err(|e| e.to_string())?;
    let (mut text, mut reason) = (String::new(), None);
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Text { text: t } => text.push_str(&t),
            Event::Finished(sum) => reason = Some(sum.reason),
            Event::Error { message } => return Err(message),
            _ => {}
        }
    }
    Ok((text, reason.ok_or("no Finished event")?))
}

#[test]
fn every_call_names_an_offered_tool_with_valid_arguments() -> TestResult {
    let e = tiny()?;
    let g = e.grammars()?;
    assert_eq!(
        g.tag_style(),
        TagStyle::Text,
        "the tiny vocabulary has no <tool_call> token"
    );
    let (free, _) = run(&e, None, 1)?;
    assert!(!free.contains("<tool_call>"), "{free:?}");

    let required = g.tool_calls(&tools(), &ToolChoice::Required)?;
    let named = g.tool_calls(&tools(), &ToolChoice::Named("add".into()))?;
    let auto = g.tool_calls(&tools(), &ToolChoice::Auto)?;
    let none = g.tool_calls(&tools(), &ToolChoice::None)?;
    let mut called = std::collections::BTreeSet::new();
    for seed in 1..6 {
        let (text, reason) = run(&e, required.clone(), seed)?;
        let (lead, names) = parse(&text, false)?;
        assert!(lead.is_empty() && !names.is_empty(), "required: {text:?}");
        if reason != FinishReason::MaxTokens {
            assert!(text.trim_end().ends_with("</tool_call>"), "{text:?}");
        }
        called.extend(names);

        let (text, _) = run(&e, named.clone(), seed)?;
        let (lead, names) = parse(&text, false)?;
        assert!(lead.is_empty() && !names.is_empty(), "named: {text:?}");
        assert!(names.iter().all(|n| n == "add"), "named: {text:?}");

        let (text, reason) = run(&e, auto.clone(), seed)?;
        if reason != FinishReason::MaxTokens {
            parse(&text, true)?;
        }

        let (text, _) = run(&e, none.clone(), seed)?;
        assert!(!text.contains("<tool_call>"), "none: {text:?}");
    }
    assert_eq!(called.len(), 2, "sampling reaches both tools: {called:?}");
    Ok(())
}

#[test]
fn bad_tools_and_choices_are_refused() -> TestResult {
    let e = tiny()?;
    let g = e.grammars()?;
    let err = |r: Result<Option<Constraint>, EngineError>| match r {
        Err(e) => e.to_string(),
        Ok(c) => format!("accepted: {c:?}"),
    };
    let m = err(g.tool_calls(&tools(), &ToolChoice::Named("nope".into())));
    assert!(m.contains("tool_choice") && m.contains("nope"), "{m}");
    let m = err(g.tool_calls(&[], &ToolChoice::Required));
    assert!(m.contains("tool_choice"), "{m}");
    assert_eq!(g.tool_calls(&[], &ToolChoice::Auto)?, None);
    // Checked tools are remembered; a bad one is refused on every request, also after the
    // good ones beside it were checked.
    g.tool_calls(&tools(), &ToolChoice::Auto)?;
    let mut bad = tools();
    bad[1]["function"]["parameters"] =
        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/gone"}}});
    for _ in 0..2 {
        let m = err(g.tool_calls(&bad, &ToolChoice::Auto));
        assert!(
            m.contains("tools") && m.contains("`add`") && m.contains("gone"),
            "{m}"
        );
    }
    let m = err(g.tool_calls(
        &[json!({"type": "function", "function": {}})],
        &ToolChoice::Auto,
    ));
    assert!(m.contains("tool 0"), "{m}");
    let twice = vec![tools()[0].clone(), tools()[0].clone()];
    let m = err(g.tool_calls(&twice, &ToolChoice::Auto));
    assert!(m.contains("twice"), "{m}");
    Ok(())
}

/// Schemas as coding agents send them (Claude Code's TaskCreate has `propertyNames`) hold
/// keywords llguidance does not implement: they are loosened, never refused, and the calls
/// still name the tool with an object of arguments that keeps the keywords it can hold.
#[test]
fn keywords_the_grammar_cannot_hold_are_loosened_not_refused() -> TestResult {
    let e = tiny()?;
    let g = e.grammars()?;
    let tools = [json!({"type": "function", "function": {
        "name": "task",
        "parameters": {
            "type": "object",
            "properties": {
                "subject": {"type": "string", "maxLength": 8},
                "metadata": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
                "when": {"type": "string", "format": "made-up-format"},
                "kind": {"if": {"const": "a"}, "then": {"minLength": 1}}
            },
            "required": ["subject"],
            "dependentSchemas": {"when": {"required": ["kind"]}}
        }
    }})];
    for _ in 0..2 {
        let c = g.tool_calls(&tools, &ToolChoice::Required)?;
        for seed in 1..4 {
            let (text, reason) = run(&e, c.clone(), seed)?;
            let body = text
                .split("<tool_call>")
                .nth(1)
                .and_then(|b| b.split("</tool_call>").next())
                .ok_or(format!("no call: {text:?}"))?;
            if reason == FinishReason::MaxTokens && !text.contains("</tool_call>") {
                continue;
            }
            let call: Value = serde_json::from_str(body.trim())?;
            assert_eq!(call["name"], json!("task"), "{text:?}");
            let subject = call["arguments"]["subject"].as_str().ok_or("subject")?;
            assert!(subject.chars().count() <= 8, "{text:?}");
        }
    }
    Ok(())
}

/// `text`'s tokens under `c`, one by one: how many are allowed before the first that is not,
/// and whether `end` (the end of the answer) is allowed after them all.
fn walk(
    g: &Grammars,
    tok: &Tokenizer,
    end: u32,
    c: &Constraint,
    text: &str,
) -> Result<(usize, bool), EngineError> {
    let mut guide = g.guide(c)?;
    let ids = tok.encode(text)?;
    for (i, &id) in ids.iter().enumerate() {
        if !guide.allows(id)? {
            return Ok((i, false));
        }
        guide.consume(id)?;
    }
    Ok((ids.len(), guide.allows(end)?))
}

#[test]
fn on_the_real_vocabulary_the_tags_are_tokens() -> TestResult {
    let Some(tok) = common::real_tokenizer("qwen2.5")? else {
        return Ok(());
    };
    let im_end = tok.token_id("<|im_end|>").ok_or("no <|im_end|>")?;
    let g = Grammars::new(&tok, &[im_end])?;
    assert_eq!(g.tag_style(), TagStyle::SpecialTokens);
    // The answer Qwen writes, token by token: every token allowed, then the end allowed.
    let good = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    let walk = |c: &Constraint, text: &str| walk(&g, &tok, im_end, c, text);
    let n = tok.encode(good)?.len();
    for choice in [
        ToolChoice::Auto,
        ToolChoice::Required,
        ToolChoice::Named("get_weather".into()),
    ] {
        let c = g.tool_calls(&tools(), &choice)?.ok_or("no constraint")?;
        assert_eq!(walk(&c, good)?, (n, true), "{choice:?}");
        assert_eq!(
            walk(&c, &format!("{good}\n{good}"))?,
            (2 * n + 1, true),
            "{choice:?}"
        );
        // A tool that was not offered is refused at its name.
        let (at, _) = walk(&c, &good.replace("get_weather", "get_time"))?;
        assert!(at < n, "{choice:?}");
    }
    let none = g
        .tool_calls(&tools(), &ToolChoice::None)?
        .ok_or("no constraint")?;
    assert_eq!(walk(&none, good)?.0, 0, "`none` refuses the opening token");
    assert!(walk(&none, "Hello")?.1);
    let required = g
        .tool_calls(&tools(), &ToolChoice::Required)?
        .ok_or("no constraint")?;
    assert_eq!(
        walk(&required, "Hello")?.0,
        0,
        "`required` opens with a call"
    );
    let named = g
        .tool_calls(&tools(), &ToolChoice::Named("add".into()))?
        .ok_or("no constraint")?;
    assert!(walk(&named, good)?.0 < n, "named `add` refuses get_weather");
    // Text then a call in `auto`; and the grammar text itself is what the builder says.
    let auto = g
        .tool_calls(&tools(), &ToolChoice::Auto)?
        .ok_or("no constraint")?;
    assert!(walk(&auto, &format!("Let me check.\n{good}"))?.1);
    assert!(walk(&auto, "  Hello {there}")?.1);
    // An untagged call is held to the same schemas; text may not spell one.
    let bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    assert_eq!(walk(&auto, bare)?, (tok.encode(bare)?.len(), true));
    let stranger = bare.replace("get_weather", "get_time");
    // A key the tool does not declare is refused when its schema says nothing of others, and
    // taken when it allows them.
    let extra = bare.replace("\"Paris\"}", "\"Paris\", \"required\": [\"city\"]}");
    assert_ne!(extra, bare);
    for (others, taken) in [(None, false), (Some(true), true)] {
        let mut t = tools();
        let params = t[0]["function"]["parameters"]
            .as_object_mut()
            .ok_or("parameters")?;
        params.remove("additionalProperties");
        if let Some(v) = others {
            params.insert("additionalProperties".into(), v.into());
        }
        let c = g
            .tool_calls(&t, &ToolChoice::Auto)?
            .ok_or("no constraint")?;
        let n = tok.encode(&extra)?.len();
        assert_eq!(walk(&c, &extra)?.0 == n, taken, "{others:?}: {extra}");
        assert_eq!(walk(&c, bare)?.0, tok.encode(bare)?.len());
    }
    assert!(walk(&auto, &stranger)?.0 < tok.encode(&stranger)?.len());
    let prose = format!("Here: {bare}");
    assert!(walk(&auto, &prose)?.0 < tok.encode(&prose)?.len());
    // The mask, too: after `{"name` in text every token that closes the key is refused.
    let mut guide = g.guide(&auto)?;
    for id in tok.encode("Here: {\"name")? {
        guide.consume(id)?;
    }
    let mut logits = vec![0f32; g.vocab_size()];
    guide.mask(&mut logits)?;
    for (piece, allowed) in [("\"", false), ("\":", false), ("s", true), ("_", true)] {
        let id = tok.token_id(piece).ok_or(piece)?;
        assert_eq!(logits[id as usize].is_finite(), allowed, "{piece:?}");
    }
    // Fenced as the whole answer, too; a fence with something else than a call is refused.
    for fence in ["```json\n", "```\n"] {
        let fenced = format!("{fence}{bare}\n```");
        assert_eq!(
            walk(&auto, &fenced)?,
            (tok.encode(&fenced)?.len(), true),
            "{fenced}"
        );
        let fenced = format!("{fence}{stranger}\n```");
        assert!(
            walk(&auto, &fenced)?.0 < tok.encode(&fenced)?.len(),
            "{fenced}"
        );
    }
    // Untagged, pretty-printed in a fence, as small models write it; whitespace between the
    // JSON's tokens is a space or one line break and an indent, no more. In the tags, the
    // template's one-line layout only.
    let pretty = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```";
    assert_eq!(walk(&auto, pretty)?, (tok.encode(pretty)?.len(), true));
    let unfenced = &pretty[8..pretty.len() - 4];
    assert_eq!(walk(&auto, unfenced)?, (tok.encode(unfenced)?.len(), true));
    let tagged = good.replace("{\"city\"", "{\n  \"city\"");
    assert!(walk(&auto, &tagged)?.0 < tok.encode(&tagged)?.len());
    for padded in [
        pretty.replace("{\n  \"name", "{\n\n  \"name"),
        pretty.replace("{\n  \"name", &format!("{{\n{}\"name", " ".repeat(30))),
        pretty.replace("{\n  \"name", "{  \"name"),
    ] {
        assert!(
            walk(&auto, &padded)?.0 < tok.encode(&padded)?.len(),
            "{padded}"
        );
    }
    // One untagged call only: after it the answer ends (several calls take their tags).
    let two = format!("{bare}\n{bare}");
    assert!(walk(&auto, &two)?.0 < tok.encode(&two)?.len());
    let code = "```python\nprint(1)\n```";
    assert!(walk(&auto, code)?.0 < tok.encode(code)?.len());
    let specs = ToolSpec::from_openai(&tools())?;
    assert_eq!(
        tool_call_grammar(
            &specs,
            &ToolChoice::Auto,
            TagStyle::SpecialTokens,
            ToolFormat::Json
        )?,
        Some(auto)
    );
    Ok(())
}

/// Codex's `apply_patch` grammar (codex-rs `tool_apply_patch.lark`), as its Responses
/// requests carry it in a custom tool's `format`.
const APPLY_PATCH: &str = include_str!("fixtures/apply_patch.lark");

fn apply_patch_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "apply_patch",
        "description": "Edit files with a patch.",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
            "required": ["input"]},
        "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH}
    }})
}

/// A custom tool's input is decoded under its Lark grammar: inside the JSON call (escaped)
/// and inside the XML one (raw); a grammar that cannot be embedded leaves the input free.
#[test]
fn a_custom_tools_input_follows_its_lark_grammar() -> TestResult {
    let Some(tok) = common::real_tokenizer("qwen2.5")? else {
        return Ok(());
    };
    let im_end = tok.token_id("<|im_end|>").ok_or("no <|im_end|>")?;
    let patch = "*** Begin Patch\n*** Update File: src/main.rs\n@@ fn main() {\n-    println!(\"hi\");\n+\tprintln!(\"a\\\\b\");\n*** Add File: hello.py\n+print('hello world')\n*** End Patch\n";
    let broken = "*** Begin Patch\n*** Rewrite File: a.py\n*** End Patch\n";
    let json_call = |input: &str| {
        let call = json!({"name": "apply_patch", "arguments": {"input": input}});
        let body = serde_json::to_string(&call).unwrap_or_default();
        // As `json.dumps` lays it out.
        let body = body.replacen("\":", "\": ", 3).replacen(",\"", ", \"", 1);
        format!("<tool_call>\n{body}\n</tool_call>")
    };
    let xml_call = |input: &str| {
        format!("<tool_call>\n<function=apply_patch>\n<parameter=input>\n{input}\n</parameter>\n</function>\n</tool_call>")
    };
    for format in [ToolFormat::Json, ToolFormat::Xml] {
        let g = Grammars::new(&tok, &[im_end])?.with_tool_format(format);
        let call = match format {
            ToolFormat::Json => json_call,
            ToolFormat::Xml => xml_call,
        };
        let walk = |c: &Constraint, text: &str| walk(&g, &tok, im_end, c, text);
        let mut tools = tools();
        tools.push(apply_patch_tool());
        for choice in [ToolChoice::Auto, ToolChoice::Named("apply_patch".into())] {
            let c = g.tool_calls(&tools, &choice)?.ok_or("no constraint")?;
            let good = call(patch);
            assert_eq!(
                walk(&c, &good)?,
                (tok.encode(&good)?.len(), true),
                "{format:?} {choice:?}: {good}"
            );
            let bad = call(broken);
            let (at, _) = walk(&c, &bad)?;
            assert!(at < tok.encode(&bad)?.len(), "{format:?} {choice:?}: {bad}");
        }
        // A grammar that cannot be embedded (a directive): the input is any string.
        let mut loose = apply_patch_tool();
        loose["function"]["format"]["definition"] =
            json!("start: WORD\n%ignore \" \"\nWORD: /[a-z]+/\n");
        let c = g
            .tool_calls(&[loose], &ToolChoice::Required)?
            .ok_or("no constraint")?;
        let free = call(broken);
        assert_eq!(
            walk(&c, &free)?,
            (tok.encode(&free)?.len(), true),
            "{format:?}"
        );
    }
    Ok(())
}
