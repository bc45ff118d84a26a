//! Tool calls valid by construction in the XML format of Qwen3-Coder and Qwen3.5, on the real
//! Qwen3 vocabulary: what the chat template writes walks through the grammar token by token,
//! and a call that breaks its tool's schema is refused where it breaks.

mod common;

use common::real_tokenizer;
use hearth_engine::ToolChoice;
use hearth_engine::{Constraint, EngineError, Grammars, Tokenizer, ToolFormat};
use serde_json::{json, Value};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {
            "name": "edit_file",
            "parameters": {"type": "object", "properties": {
                "path": {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "dry_run": {"type": "boolean"},
                "mode": {"enum": ["fast", "slow"]},
                "lines": {"type": "array", "items": {"type": "integer"}},
                "options": {"type": "object", "properties": {"backup": {"type": "boolean"}},
                            "additionalProperties": false}},
                "required": ["path", "count"]}}}),
        json!({"type": "function", "function": {"name": "ping"}}),
    ]
}

struct Walker {
    tok: Tokenizer,
    g: Grammars,
    end: u32,
}

impl Walker {
    /// How many of `text`'s tokens the constraint allows in a row, and whether it may end there.
    fn walk(&self, c: &Constraint, text: &str) -> Result<(usize, bool), EngineError> {
        let mut guide = self.g.guide(c)?;
        let ids = self.tok.encode(text)?;
        for (i, &id) in ids.iter().enumerate() {
            if !guide.allows(id)? {
                return Ok((i, false));
            }
            guide.consume(id)?;
        }
        Ok((ids.len(), guide.allows(self.end)?))
    }

    fn whole(&self, c: &Constraint, text: &str) -> Result<bool, EngineError> {
        Ok(self.walk(c, text)? == (self.tok.encode(text)?.len(), true))
    }

    fn choice(&self, choice: ToolChoice) -> Result<Constraint, Box<dyn std::error::Error>> {
        Ok(self
            .g
            .tool_calls(&tools(), &choice)?
            .ok_or("no constraint")?)
    }
}

fn walker() -> Result<Option<Walker>, Box<dyn std::error::Error>> {
    let Some(tok) = real_tokenizer("qwen3")? else {
        return Ok(None);
    };
    let end = tok.token_id("<|im_end|>").ok_or("no <|im_end|>")?;
    let g = Grammars::new(&tok, &[end])?.with_tool_format(ToolFormat::Xml);
    Ok(Some(Walker { tok, g, end }))
}

const GOOD: &str = "<tool_call>\n<function=edit_file>\n<parameter=path>\nsrc/main.rs\n</parameter>\n<parameter=count>\n2\n</parameter>\n<parameter=ratio>\n-0.5e3\n</parameter>\n<parameter=dry_run>\nFalse\n</parameter>\n<parameter=mode>\nslow\n</parameter>\n<parameter=lines>\n[1, 2]\n</parameter>\n<parameter=options>\n{\"backup\": true}\n</parameter>\n</function>\n</tool_call>";

fn with(param: &str, value: &str) -> String {
    format!("<tool_call>\n<function=edit_file>\n<parameter=path>\nx\n</parameter>\n<parameter=count>\n1\n</parameter>\n<parameter={param}>\n{value}\n</parameter>\n</function>\n</tool_call>")
}

#[test]
fn what_the_template_writes_is_accepted() -> TestResult {
    let Some(w) = walker()? else { return Ok(()) };
    let ping = "<tool_call>\n<function=ping>\n<parameter=host>\nexample.org\n</parameter>\n</function>\n</tool_call>";
    for choice in [
        ToolChoice::Auto,
        ToolChoice::Required,
        ToolChoice::Named("edit_file".into()),
    ] {
        let c = w.choice(choice.clone())?;
        assert!(w.whole(&c, GOOD)?, "{choice:?}");
        // Parallel calls, a trailing line break.
        assert!(w.whole(&c, &format!("{GOOD}\n{GOOD}\n"))?, "{choice:?}");
        // A string keeps its lines and its markup, up to the closing tag.
        let code = "<tool_call>\n<function=edit_file>\n<parameter=path>\nfn main() {\n    <b>&amp;</b>\n}\n\n</parameter>\n<parameter=count>\n1\n</parameter>\n</function>\n</tool_call>";
        assert!(w.whole(&c, code)?, "{choice:?}: {code}");
    }
    let auto = w.choice(ToolChoice::Auto)?;
    assert!(w.whole(&auto, &format!("I will edit it.\n\n{GOOD}"))?);
    assert!(w.whole(&auto, "Just text, <function=no> tags.")?);
    // A tool with no declared parameters takes any.
    assert!(w.whole(&auto, ping)?);
    Ok(())
}

#[test]
fn a_call_that_breaks_its_schema_is_refused_where_it_breaks() -> TestResult {
    let Some(w) = walker()? else { return Ok(()) };
    let c = w.choice(ToolChoice::Required)?;
    for (param, value) in [
        ("count", "two"),
        ("ratio", "1/2"),
        ("dry_run", "yes"),
        ("mode", "medium"),
        ("lines", "[1, \"a\"]"),
        ("options", "{\"colour\": 1}"),
        ("colour", "red"),
    ] {
        let text = with(param, value);
        assert!(!w.whole(&c, &text)?, "{param}={value} accepted");
    }
    // A required parameter left out: the call cannot close.
    let missing = "<tool_call>\n<function=edit_file>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>";
    assert!(!w.whole(&c, missing)?);
    // A tool nobody offered, text before a required call, a call of another tool when one is named.
    assert!(!w.whole(&c, &GOOD.replace("edit_file", "rm_file"))?);
    assert!(!w.whole(&c, &format!("Sure.\n{GOOD}"))?);
    let named = w.choice(ToolChoice::Named("ping".into()))?;
    assert!(!w.whole(&named, GOOD)?);
    // Typed values in their other spellings.
    assert!(w.whole(&c, &with("dry_run", "true"))?);
    assert!(w.whole(&c, &with("ratio", "3"))?);
    Ok(())
}
