//! Property tests: the output parsers, the calculator and the argument repair of the tool
//! registry answer every input with a value or an error, without panicking or hanging.
//! `HEARTH_FUZZ_CASES` sets the cases per property (`scripts/fuzz.sh` runs them long).

use hearth_agent::parser::{
    CodeBlockParser, JsonParser, MixedParser, OutputParser, ParseStatus, QwenToolParser,
    ReActParser,
};
use hearth_agent::tools::{evaluate, Calculator, Number};
use hearth_agent::{ActionStatusCode, ToolCall, ToolRegistry};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

use hearth_fuzz::check;

/// Text built from the pieces the parsers look for, mixed with arbitrary characters.
fn model_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<tool_call>".to_string()),
        Just("</tool_call>".to_string()),
        Just("<tool_call".to_string()),
        Just("<function=".to_string()),
        Just("<parameter=".to_string()),
        Just("</parameter>".to_string()),
        Just("</function>".to_string()),
        Just(">".to_string()),
        Just("```json\n".to_string()),
        Just("```python\n".to_string()),
        Just("```".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just(":".to_string()),
        Just(",".to_string()),
        Just("\n".to_string()),
        Just("\"name\"".to_string()),
        Just("\"arguments\"".to_string()),
        Just("\"parameters\"".to_string()),
        Just("\"calculator\"".to_string()),
        Just("calculator".to_string()),
        Just("Thought:".to_string()),
        Just("Action:".to_string()),
        Just("Action Input:".to_string()),
        Just("Observation:".to_string()),
        Just("Final Answer:".to_string()),
        any::<char>().prop_map(String::from),
        "\\PC{0,6}",
    ];
    prop::collection::vec(piece, 0..48).prop_map(|v| v.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    hearth_fuzz::json_value("\\PC{0,12}", "\\PC{0,8}", 4, 6)
}

fn parsers() -> Vec<(&'static str, Box<dyn OutputParser>)> {
    vec![
        ("qwen", Box::new(QwenToolParser)),
        ("react", Box::new(ReActParser)),
        ("code", Box::new(CodeBlockParser::default())),
        (
            "json",
            Box::new(JsonParser {
                schema: json!({"type": "object", "required": ["answer"]}),
            }),
        ),
        (
            "mixed",
            Box::new(MixedParser {
                parsers: vec![Box::new(QwenToolParser), Box::new(ReActParser)],
            }),
        ),
    ]
}

#[test]
fn parsers_answer_every_text() {
    let parsers = parsers();
    let tools = vec!["calculator".to_string(), "search".to_string()];
    check("parsers", model_text(), |text| {
        for (name, p) in &parsers {
            let out = p.parse(&text, &tools);
            prop_assert_eq!(&out.raw, &text, "{} keeps the raw text", name);
            match out.status {
                ParseStatus::ValidTool => {
                    prop_assert!(
                        !out.tool_calls.is_empty(),
                        "{name}: a valid tool with no call"
                    )
                }
                ParseStatus::ParsingError => {
                    prop_assert!(out.error.is_some(), "{name}: an error with no message")
                }
                ParseStatus::NoTool => {}
            }
            let shown = p.visible_prefix(&text);
            prop_assert!(shown <= text.len(), "{name}: visible prefix past the end");
            prop_assert!(
                text.is_char_boundary(shown),
                "{name}: visible prefix inside a character"
            );
            let _ = p.format_response(&out);
        }
        // Qwen's calls always carry object arguments.
        for call in QwenToolParser.parse(&text, &tools).tool_calls {
            prop_assert!(call.function.arguments.is_object(), "{call:?}");
        }
        Ok(())
    });
}

#[test]
fn every_prefix_of_a_streamed_answer_parses() {
    // A streamed answer is parsed and shown piece by piece: every prefix must be safe.
    let p = QwenToolParser;
    let tools = vec!["calculator".to_string()];
    check("streamed prefixes", model_text(), |text| {
        // What was shown stays shown: a streamer cannot take text back.
        let mut shown_before = 0;
        for (i, _) in text.char_indices().skip(1).chain([(text.len(), ' ')]) {
            let prefix = &text[..i];
            let shown = p.visible_prefix(prefix);
            prop_assert!(shown <= prefix.len() && prefix.is_char_boundary(shown));
            prop_assert!(
                shown >= shown_before,
                "{prefix:?} shows {shown} bytes after {shown_before} were shown"
            );
            shown_before = shown;
            let _ = p.parse(prefix, &tools);
        }
        Ok(())
    });
}

#[test]
fn string_arguments_are_repaired_into_the_object() {
    // `{"name": …, "arguments": "<JSON text>"}`: the string is decoded when it is an object,
    // and is a parse error otherwise.
    let tools = vec!["calculator".to_string()];
    let args = prop_oneof![
        json_value().prop_map(|v| v.to_string()),
        "\\PC{0,24}",
        json_value().prop_map(|v| {
            // Truncated JSON: the common way small models break it.
            let s = v.to_string();
            let cut = s
                .char_indices()
                .nth(s.chars().count() / 2)
                .map_or(0, |c| c.0);
            s[..cut].to_string()
        }),
    ];
    check("argument repair", args, |args| {
        let text = format!(
            "<tool_call>{}</tool_call>",
            json!({"name": "calculator", "arguments": args})
        );
        let out = QwenToolParser.parse(&text, &tools);
        match serde_json::from_str::<Value>(&args) {
            Ok(v) if v.is_object() => {
                prop_assert_eq!(out.status, ParseStatus::ValidTool, "{:?}", out.error);
                prop_assert_eq!(&out.tool_calls[0].function.arguments, &v);
            }
            _ => prop_assert_eq!(out.status, ParseStatus::ParsingError, "{:?}", out),
        }
        Ok(())
    });
}

/// An expression from the calculator's vocabulary, mostly well-formed-looking.
fn expression() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[0-9]{1,4}",
        "[0-9]{15,45}",
        "[0-9]{1,3}\\.[0-9]{0,3}",
        Just("+".to_string()),
        Just("-".to_string()),
        Just("*".to_string()),
        Just("/".to_string()),
        Just("%".to_string()),
        Just("^".to_string()),
        Just("**".to_string()),
        Just("×".to_string()),
        Just("÷".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("sqrt(".to_string()),
        Just("abs(".to_string()),
        Just(",".to_string()),
        Just(" ".to_string()),
        Just("e".to_string()),
        Just("1e308".to_string()),
        Just("0".to_string()),
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

#[test]
fn calculator_answers_every_expression() {
    check("calculator", expression(), |expr| {
        match evaluate(&expr) {
            Ok(Number::Float(f)) => prop_assert!(f.is_finite(), "{expr} gave {f}"),
            Ok(Number::Int(_)) => {}
            Err(e) => prop_assert!(!e.is_empty()),
        }
        if let Ok(n) = evaluate(&expr) {
            prop_assert!(!n.to_string().is_empty());
        }
        Ok(())
    });
}

/// An integer expression and its value, computed here in i128 (`None` on overflow).
fn int_expression() -> impl Strategy<Value = (String, Option<i128>)> {
    let leaf = (-1000i64..1000).prop_map(|n| {
        let text = if n < 0 {
            format!("({n})")
        } else {
            n.to_string()
        };
        (text, Some(n as i128))
    });
    leaf.prop_recursive(6, 64, 2, |inner| {
        (
            inner.clone(),
            prop::sample::select(vec!['+', '-', '*']),
            inner,
        )
            .prop_map(|((a, x), op, (b, y))| {
                let v = match (x, y) {
                    (Some(x), Some(y)) => match op {
                        '+' => x.checked_add(y),
                        '-' => x.checked_sub(y),
                        _ => x.checked_mul(y),
                    },
                    _ => None,
                };
                (format!("({a} {op} {b})"), v)
            })
    })
}

#[test]
fn calculator_is_exact_on_integers() {
    check("calculator exact", int_expression(), |(expr, want)| {
        if let Some(want) = want {
            prop_assert_eq!(evaluate(&expr), Ok(Number::Int(want)), "{}", expr);
        }
        Ok(())
    });
}

#[test]
fn the_registry_answers_every_argument_value() {
    // Arguments as the model sends them: objects, JSON strings (repaired), broken strings,
    // and values of the wrong type.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut reg = ToolRegistry::new();
    reg.add(Arc::new(Calculator));
    let args = prop_oneof![
        json_value(),
        expression().prop_map(|e| json!({ "expression": e })),
        expression().prop_map(|e| Value::String(json!({ "expression": e }).to_string())),
        model_text().prop_map(Value::String),
    ];
    check("registry", args, |args| {
        let call = ToolCall::new("calculator", args.clone());
        let result = rt.block_on(reg.execute(&call));
        prop_assert!(
            matches!(
                result.status,
                ActionStatusCode::Success
                    | ActionStatusCode::ArgsError
                    | ActionStatusCode::ApiError
            ),
            "{result:?}"
        );
        if result.status != ActionStatusCode::Success {
            prop_assert!(!result.content.is_empty(), "an error with no message");
        }
        if let Some(expr) = args.get("expression").and_then(Value::as_str) {
            if args.as_object().is_some_and(|o| o.len() == 1) {
                prop_assert_eq!(
                    result.status == ActionStatusCode::Success,
                    evaluate(expr).is_ok()
                );
            }
        }
        Ok(())
    });
}
