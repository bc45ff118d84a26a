//! Rendered chat prompts are byte-identical to transformers' apply_chat_template
//! (goldens by tests/fixtures/chat_goldens.py, with the real Qwen2.5 and Qwen3 configs).

mod common;

use common::fixtures;
use hearth_engine::chat::{ChatInput, JinjaTemplate};
use hearth_engine::ChatMessage;
use serde_json::Value;

fn template(name: &str) -> JinjaTemplate {
    let path = fixtures().join(format!("tokenizers/{name}/tokenizer_config.json"));
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut special = serde_json::Map::new();
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
