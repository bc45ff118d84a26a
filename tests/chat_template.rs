//! Rendered chat prompts are byte-identical to transformers' apply_chat_template
//! (goldens by crates/engine/tests/fixtures/chat_goldens.py, with the real Qwen2.5 and Qwen3 configs, and
//! the Qwen3-Coder and Qwen3.5 templates that write tool calls as XML).

mod common;

use common::fixtures;
use hearth_engine::chat::{ChatInput, JinjaTemplate};
use hearth_engine::ChatMessage;
use serde_json::Value;

/// The template of golden `name`: the tokenizer config's own, or a template file with the
/// Qwen3 config's special tokens.
fn template(name: &str) -> JinjaTemplate {
    let (tokenizer, file) = match name {
        "qwen3-coder" => ("qwen3", Some("Qwen3-Coder.jinja")),
        "qwen3.5" => ("qwen3", Some("Qwen3.5-4B.jinja")),
        other => (other, None),
    };
    let path = fixtures().join(format!("tokenizers/{tokenizer}/tokenizer_config.json"));
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut special = serde_json::Map::new();
    for k in ["bos_token", "eos_token", "pad_token", "unk_token"] {
        special.insert(k.into(), cfg.get(k).cloned().unwrap_or(Value::Null));
    }
    let (source, origin) = match file {
        Some(f) => {
            let p = fixtures().join("templates").join(f);
            (std::fs::read_to_string(&p).unwrap(), p)
        }
        None => (cfg["chat_template"].as_str().unwrap().to_string(), path),
    };
    JinjaTemplate::new(&source, special, &origin.display().to_string()).unwrap()
}

fn check(name: &str, min_cases: usize) {
    let t = template(name);
    let path = fixtures().join(format!("golden/chat-{name}.json"));
    let rows: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(rows.len() >= min_cases);
    for row in rows {
        let case = row["name"].as_str().unwrap();
        let input = &row["input"];
        let messages: Vec<ChatMessage> = serde_json::from_value(input["messages"].clone()).unwrap();
        let tools: Option<Vec<Value>> = input.get("tools").map(|t| t.as_array().unwrap().clone());
        let got = t
            .render(&ChatInput {
                messages: &messages,
                tools: tools.as_deref(),
                add_generation_prompt: input["add_generation_prompt"].as_bool().unwrap(),
                enable_thinking: input.get("enable_thinking").and_then(Value::as_bool),
                extra: Default::default(),
            })
            .unwrap_or_else(|e| panic!("{name}/{case}: {e}"));
        assert_eq!(got, row["prompt"].as_str().unwrap(), "{name}/{case}");
    }
}

#[test]
fn qwen2_5_prompts_match_transformers() {
    check("qwen2.5", 19);
}

#[test]
fn qwen3_prompts_match_transformers() {
    check("qwen3", 25);
}

#[test]
fn qwen3_coder_prompts_match_transformers() {
    check("qwen3-coder", 18);
}

#[test]
fn qwen3_5_prompts_match_transformers() {
    check("qwen3.5", 22);
}

/// Every call the XML templates write reads back, typed by its tool's schema, as the call
/// that was rendered (the parser of Qwen3-Coder and Qwen3.5 on their templates' own output).
#[test]
fn xml_calls_the_templates_write_read_back_the_same() {
    use hearth_agent::parser::{OutputParser, ParseStatus, QwenXmlToolParser};
    let mut checked = 0;
    for name in ["qwen3-coder", "qwen3.5"] {
        let path = fixtures().join(format!("golden/chat-{name}.json"));
        let rows: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for row in rows {
            let case = row["name"].as_str().unwrap();
            let input = &row["input"];
            let tools = input["tools"].as_array().cloned().unwrap_or_default();
            let expected: Vec<Value> = input["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|m| m["tool_calls"].as_array())
                .flatten()
                .map(|c| {
                    let args = &c["function"]["arguments"];
                    match args.as_str() {
                        Some(s) => serde_json::from_str(s).unwrap(),
                        None => args.clone(),
                    }
                })
                .collect();
            let prompt = row["prompt"].as_str().unwrap();
            // (The system prompt's example call is no call.)
            let blocks: Vec<&str> = prompt
                .match_indices("<tool_call>\n<function=")
                .filter(|(i, _)| !prompt[*i..].starts_with("<tool_call>\n<function=example_"))
                .map(|(i, _)| {
                    let end = prompt[i..].find("</tool_call>").unwrap() + "</tool_call>".len();
                    &prompt[i..i + end]
                })
                .collect();
            assert_eq!(blocks.len(), expected.len(), "{name}/{case}");
            for (block, want) in blocks.iter().zip(&expected) {
                let parsed = QwenXmlToolParser.parse_with_specs(block, &tools);
                assert_eq!(
                    parsed.status,
                    ParseStatus::ValidTool,
                    "{name}/{case}: {parsed:?}"
                );
                let got = &parsed.tool_calls[0].function.arguments;
                assert_eq!(got, want, "{name}/{case}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 12, "{checked} calls checked");
}
