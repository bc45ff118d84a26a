//! Tool calls valid by construction: a Lark grammar for Qwen's tool-call format over the
//! tools a request offers.
//!
//! Qwen writes a call as `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, several
//! calls one per line. The grammar leaves text free until the model opens a call (in `auto`
//! mode), then holds the call to `{"name": <an offered tool>, "arguments": <that tool's
//! parameter schema>}` and the closing tag. `required` opens a call from the first token, a
//! named tool allows only that one, and `none` never lets a call open. A call in its tags is
//! written as Python's `json.dumps` writes it (`", "` and `": "`), as the chat template shows
//! calls; an untagged one may be pretty-printed (see [`Layout`]).

use super::custom_grammar::{embed, Spelling};
use super::spec::Constraint;
use super::tool_spec::{Layout, ToolSpec};
use super::xml_call::push_xml_calls;
use crate::chat::{ToolChoice, ToolFormat};
use crate::error::{EngineError, Result};

/// How the tags that open and close a call are spelled in the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagStyle {
    /// `<tool_call>` and `</tool_call>` are single added tokens (Qwen2.5, Qwen3): text can
    /// never spell them, so a call opens only by its token.
    SpecialTokens,
    /// The tags are plain text (a vocabulary without them as tokens).
    Text,
}

/// The grammar of an answer under `choice` with `tools` offered, calls written in `format`,
/// or `None` where nothing needs constraining (`auto` with no tools). `required` or a named
/// tool with nothing that matches is an error on `tool_choice`.
pub fn tool_call_grammar(
    tools: &[ToolSpec],
    choice: &ToolChoice,
    tags: TagStyle,
    format: ToolFormat,
) -> Result<Option<Constraint>> {
    let offered: Vec<&ToolSpec> = match choice {
        ToolChoice::Named(name) => {
            let t = tools.iter().filter(|t| &t.name == name).collect::<Vec<_>>();
            if t.is_empty() {
                return Err(EngineError::invalid(
                    "tool_choice",
                    format!("names `{name}`, which is not among the offered tools"),
                ));
            }
            t
        }
        _ => tools.iter().collect(),
    };
    if offered.is_empty() {
        return match choice {
            ToolChoice::Required => Err(EngineError::invalid(
                "tool_choice",
                "`required` with no tools offered",
            )),
            _ => Ok(None),
        };
    }
    let (open, close) = match tags {
        TagStyle::SpecialTokens => ("<tool_call>", "</tool_call>"),
        TagStyle::Text => ("\"<tool_call>\"", "\"</tool_call>\""),
    };
    let xml = format == ToolFormat::Xml;
    let mut g = String::new();
    let start = match (choice, tags) {
        // XML calls have no untagged form to allow for.
        (ToolChoice::Auto, TagStyle::SpecialTokens) if xml => "start: TEXT calls?\n",
        (ToolChoice::None, TagStyle::SpecialTokens) => "start: TEXT\n",
        // Text that never spells the opening tag.
        (ToolChoice::None, TagStyle::Text) => "start: FREE\n",
        // Small models often write a call without its tags, as the whole answer, bare or
        // fenced: that form is held to the same schemas (`bare`). Text may neither open like JSON nor spell a call
        // (`{"name"`) anywhere, so every call the answer holds is one of the two valid forms.
        (ToolChoice::Auto, TagStyle::SpecialTokens) => "start: PROSE calls? | bare\n",
        // The opening tag ends the text as soon as it is written (a lazy lexeme).
        (ToolChoice::Auto, TagStyle::Text) => "start: (opened body_close)* FREE\n",
        _ => "start: calls\n",
    };
    g.push_str(start);
    // A line break after the last call may still end the answer: a model that breaks the
    // line to go on with text is not forced into another call (a small one repeats the last).
    g.push_str(&format!(
        "calls: call (\"\\n\" call)* \"\\n\"?\ncall: {open} \"\\n\" body \"\\n\" {close}\n"
    ));
    if matches!((choice, tags), (ToolChoice::Auto, TagStyle::Text)) {
        g.push_str("opened[lazy]: TEXT \"<tool_call>\"\n");
        g.push_str(&format!("body_close: \"\\n\" body \"\\n\" {close}\n"));
    }
    match format {
        ToolFormat::Json => push_calls(&mut g, "body", &offered, Layout::Dumps),
        ToolFormat::Xml => push_xml_calls(&mut g, "body", &offered),
    }
    g.push_str("TEXT: /(?s:.*)/\n");
    if !xml && matches!((choice, tags), (ToolChoice::Auto, TagStyle::SpecialTokens)) {
        // One call, bare or in a ```json fence, as the whole answer (both as llama.cpp's Hermes
        // parser and Hearth's server read them). Only one: a model that meant to go on with
        // text after the call would otherwise be led by its "\n" into a string of forced calls.
        g.push_str("bare: own | \"```\" \"json\"? \"\\n\" own \"\\n```\"\n");
        push_calls(&mut g, "own", &offered, Layout::Free);
        // Text that does not open like JSON; that it never spells a call (`{"name"`) is checked
        // beside the grammar (`Constraint::ToolCalls`): as a negated lexeme here it made every
        // mask of free text walk the whole token trie.
        g.push_str("PROSE: /(?s:\\s*([^\\s{`].*)?)/\n");
    }
    g.push_str("FREE: /(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/\n");
    Ok(Some(match (choice, tags) {
        (ToolChoice::Auto, TagStyle::SpecialTokens) if !xml => Constraint::ToolCalls(g),
        _ => Constraint::Lark(g),
    }))
}

/// Rule `rule`: a call of one of `tools` laid out as `layout` (a rule per tool, `{rule}_{i}`).
/// A tool with a grammar of its own is written as the template's layout, its input inside
/// a JSON string held to that grammar.
fn push_calls(g: &mut String, rule: &str, tools: &[&ToolSpec], layout: Layout) {
    let names: Vec<String> = (0..tools.len()).map(|i| format!("{rule}_{i}")).collect();
    g.push_str(&format!("{rule}: {}\n", names.join(" | ")));
    for (name, tool) in names.iter().zip(tools) {
        match tool
            .grammar
            .as_deref()
            .map(|l| embed(l, name, Spelling::Json))
        {
            Some(Ok(rules)) => {
                let open = serde_json::to_string(&format!(
                    "{{\"name\": {}, \"arguments\": {{\"input\": \"",
                    serde_json::Value::from(tool.name.as_str())
                ))
                .unwrap_or_default();
                g.push_str(&format!(
                    "{name}: {open} {name}_start \"\\\"}}}}\"\n{rules}"
                ));
            }
            // Checked when the tools were read (`Grammars::tool_calls`): not reached there.
            _ => g.push_str(&format!("{name}: %json {}\n", tool.call_schema(layout))),
        }
    }
}
