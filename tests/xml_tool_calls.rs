//! XML tool calls (Qwen3-Coder, Qwen3.5) valid by construction while sampling: the tiny random
//! model, held to the XML call grammar, writes calls that the XML parser reads and whose
//! arguments fit their tools' schemas, at every seed. (No string parameters: a random model
//! would not close one; string values are walked token by token in the engine's tests.)

mod common;

use hearth_agent::parser::{OutputParser, ParseStatus, QwenXmlToolParser};
use hearth_agent::schema::validate;
use hearth_engine::ToolChoice;
use hearth_engine::{
    DTypeSpec, DeviceSpec, Engine, Event, GenerateRequest, Grammars, LoadOptions, SamplingParams,
    ToolFormat,
};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "edit_file", "parameters": {
            "type": "object", "properties": {
                "count": {"type": "integer"},
                "dry_run": {"type": "boolean"},
                "mode": {"enum": ["fast", "slow"]},
                "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}},
            "required": ["count"], "additionalProperties": false}}}),
        json!({"type": "function", "function": {"name": "ping", "parameters": {
            "type": "object", "properties": {"ratio": {"type": "number"}},
            "required": ["ratio"]}}}),
    ]
}

#[test]
fn sampled_xml_calls_parse_and_fit_their_schemas() {
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let e = Engine::load(&common::tiny("qwen3").to_string_lossy(), &opts).unwrap();
    let g = Grammars::new(e.tokenizer(), &e.info().stop_token_ids)
        .unwrap()
        .with_tool_format(ToolFormat::Xml);
    let required = g
        .tool_calls(&tools(), &ToolChoice::Required)
        .unwrap()
        .unwrap();
    let prompt = e.tokenizer().encode("Call a tool:").unwrap();
    let mut names = std::collections::BTreeSet::new();
    let mut finished = 0;
    for seed in 1..7 {
        let mut s = e
            .generate(GenerateRequest {
                sampling: SamplingParams {
                    temperature: 1.0,
                    seed,
                    ..Default::default()
                },
                constraint: Some(required.clone()),
                ..GenerateRequest::new(prompt.clone(), 400)
            })
            .unwrap();
        let (mut text, mut done) = (String::new(), None);
        while let Some(ev) = s.blocking_next() {
            match ev {
                Event::Text { text: t } => text.push_str(&t),
                Event::Finished(sum) => done = Some(sum.reason),
                Event::Error { message } => panic!("{message}"),
                _ => {}
            }
        }
        assert!(text.starts_with("<tool_call>\n<function="), "{text:?}");
        if done == Some(hearth_engine::FinishReason::MaxTokens) {
            continue; // a long number: the grammar is checked token by token elsewhere
        }
        finished += 1;
        let parsed = QwenXmlToolParser.parse_with_specs(&text, &tools());
        assert_eq!(
            parsed.status,
            ParseStatus::ValidTool,
            "{text:?}: {parsed:?}"
        );
        for call in &parsed.tool_calls {
            let spec = tools()
                .into_iter()
                .find(|t| t["function"]["name"] == call.function.name.as_str())
                .unwrap();
            let mut schema = spec["function"]["parameters"].clone();
            schema
                .as_object_mut()
                .unwrap()
                .remove("additionalProperties");
            validate(&call.function.arguments, &schema).unwrap_or_else(|e| panic!("{e}: {text:?}"));
            names.insert(call.function.name.clone());
        }
    }
    assert!(
        finished >= 3,
        "only {finished} answers ended before max_tokens"
    );
    assert!(!names.is_empty());
}

/// A checkpoint whose template is `chat_template.jinja` (as transformers ≥ 4.43 saves it), with
/// or without a tokenizer config beside it: the file's template is the one rendered, and its
/// `<function=` calls make the model's tool format XML.
#[test]
fn a_chat_template_file_is_the_models_template() {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(common::tiny("qwen3")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    let coder = common::fixtures().join("templates/Qwen3-Coder.jinja");
    std::fs::copy(&coder, tmp.path().join("chat_template.jinja")).unwrap();
    let opts = LoadOptions {
        device: DeviceSpec::Cpu,
        dtype: DTypeSpec::F32,
        ..Default::default()
    };
    let messages = [hearth_engine::ChatMessage::user("Hi")];
    let input = hearth_engine::ChatInput {
        messages: &messages,
        tools: Some(&tools()),
        add_generation_prompt: true,
        enable_thinking: None,
        extra: Default::default(),
    };
    for keep_config in [true, false] {
        if !keep_config {
            std::fs::remove_file(tmp.path().join("tokenizer_config.json")).unwrap();
        }
        let e = Engine::load(&tmp.path().to_string_lossy(), &opts).unwrap();
        assert_eq!(
            e.info().tool_format,
            ToolFormat::Xml,
            "config kept: {keep_config}"
        );
        let prompt = e.render(&input).unwrap();
        assert!(
            prompt.contains("<function>\n<name>edit_file</name>"),
            "config kept: {keep_config}: {prompt}"
        );
    }
}
