//! Splits a streamed answer into text and tool calls as it arrives: text is passed on at
//! once, except what could be the start of a `<tool_call>` tag; a call is held until its
//! closing tag and then parsed whole (JSON, or the XML of Qwen3-Coder and Qwen3.5 typed by the
//! tool's schema), so a client never sees half a call, nor a broken one as text. Small models
//! often write the call without tags, as the whole answer (`{"name": …}` or a ```json fence,
//! as llama.cpp's Hermes parser also accepts): an answer that starts that way is held to its
//! end and read as calls if it names offered tools. A call that only repeats an earlier one
//! of the same answer is dropped and says the answer is over (a small model, forced to call,
//! writes the same call again and again).

use hearth_engine::chat::tool_call::{partial_tag, read_calls, Reading, CLOSE, OPEN};
use hearth_engine::ToolCall;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Call(ToolCall),
    /// A call that could not be read (or was cut off): why, and what the model wrote.
    Invalid {
        error: String,
        raw: String,
    },
}

pub struct ToolCallSplitter {
    /// The tools offered (OpenAI's format); none: everything is text.
    specs: Vec<Value>,
    names: Vec<String>,
    pending: String,
    in_call: bool,
    /// Nothing but whitespace has come yet.
    at_start: bool,
    /// The answer started like an untagged call: held until the end.
    bare: bool,
    /// The calls so far, to tell a repeat.
    seen: Vec<ToolCall>,
    repeated: bool,
    /// Whitespace after a call, held until text follows it (a line break that only ends the
    /// calls is not content).
    gap: String,
}

impl ToolCallSplitter {
    /// `specs`: the tools offered (their schemas type the XML form's values), `names` theirs.
    pub fn new(specs: Vec<Value>, names: Vec<String>) -> Self {
        Self {
            specs,
            names,
            pending: String::new(),
            in_call: false,
            at_start: true,
            bare: false,
            seen: vec![],
            repeated: false,
            gap: String::new(),
        }
    }

    /// Whether a call repeated an earlier one: the answer should end.
    pub fn repeated(&self) -> bool {
        self.repeated
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        if self.repeated {
            return vec![];
        }
        if self.names.is_empty() {
            let mut out = vec![];
            push_text(&mut out, text);
            return out;
        }
        self.pending.push_str(text);
        if self.bare {
            return vec![];
        }
        if self.at_start {
            let t = self.pending.trim_start();
            if t.is_empty() || t == "`" || t == "``" {
                return vec![];
            }
            self.at_start = false;
            if t.starts_with('{') || t.starts_with("```") {
                self.bare = true;
                return vec![];
            }
        }
        let mut out = vec![];
        loop {
            if self.in_call {
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let body = self.pending[..end].to_string();
                self.pending.drain(..end + CLOSE.len());
                self.in_call = false;
                out.extend(self.call(&body, false));
                if self.repeated {
                    self.pending.clear();
                    break;
                }
            } else if let Some(start) = self.pending.find(OPEN) {
                let text = self.pending[..start].to_string();
                self.text(&mut out, &text);
                self.pending.drain(..start + OPEN.len());
                self.in_call = true;
            } else {
                // Hold back a tail that could still become `<tool_call>`.
                let keep = partial_tag(&self.pending, OPEN);
                let cut = self.pending.len() - keep;
                let text = self.pending[..cut].to_string();
                self.text(&mut out, &text);
                self.pending.drain(..cut);
                break;
            }
        }
        out
    }

    /// The end of the answer: a call cut off before its closing tag is still a call if what
    /// came parses; otherwise it is an invalid call, not text.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = vec![];
        if self.repeated {
            return out;
        }
        if self.bare {
            self.bare = false;
            if let Reading::Calls { text, calls } = read_calls(&rest, &self.names, &self.specs) {
                push_text(&mut out, &text);
                for c in calls {
                    if !self.repeats(&c) {
                        self.seen.push(c.clone());
                        out.push(Piece::Call(c));
                    }
                }
            } else {
                push_text(&mut out, &rest);
            }
        } else if self.in_call {
            self.in_call = false;
            out.extend(self.call(&rest, true));
        } else {
            self.text(&mut out, &rest);
        }
        out
    }

    /// Text of the answer: whitespace right after a call waits for what follows it.
    fn text(&mut self, out: &mut Vec<Piece>, text: &str) {
        if self.seen.is_empty() {
            return push_text(out, text);
        }
        self.gap.push_str(text);
        if !self.gap.trim().is_empty() {
            push_text(out, &std::mem::take(&mut self.gap));
        }
    }

    fn repeats(&self, call: &ToolCall) -> bool {
        self.seen.iter().any(|c| {
            c.function.name == call.function.name && c.function.arguments == call.function.arguments
        })
    }

    /// A call body parsed as the model's format; what does not parse is an invalid call.
    fn call(&mut self, body: &str, cut: bool) -> Option<Piece> {
        let raw = if cut {
            format!("{OPEN}{body}")
        } else {
            format!("{OPEN}{body}{CLOSE}")
        };
        // (The parser reads a call without its closing tag as far as it goes.)
        let reading = read_calls(&raw, &self.names, &self.specs);
        match reading {
            Reading::Calls { calls, .. } if calls.len() == 1 && self.repeats(&calls[0]) => {
                self.repeated = true;
                None
            }
            Reading::Calls { mut calls, .. } if calls.len() == 1 => {
                let call = calls.remove(0);
                self.seen.push(call.clone());
                Some(Piece::Call(call))
            }
            reading => {
                let why = match reading {
                    Reading::Broken(e) => e,
                    Reading::Calls { calls, .. } if !calls.is_empty() => {
                        format!("{} calls in one <tool_call>", calls.len())
                    }
                    _ => "the tool call is empty".to_string(),
                };
                let error = if cut {
                    format!("cut off before </tool_call>: {why}")
                } else {
                    why
                };
                Some(Piece::Invalid { error, raw })
            }
        }
    }
}

fn push_text(out: &mut Vec<Piece>, text: &str) {
    if !text.is_empty() {
        out.push(Piece::Text(text.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}}}}}),
        ]
    }

    fn splitter() -> ToolCallSplitter {
        ToolCallSplitter::new(add(), vec!["add".into()])
    }

    fn run(chunks: &[&str]) -> Vec<Piece> {
        let mut s = splitter();
        let mut out: Vec<Piece> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        out
    }

    fn text(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_call_split_anywhere_comes_out_whole() {
        let answer = "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 2}\"}\n</tool_call>";
        for step in 1..8 {
            let chars: Vec<char> = answer.chars().collect();
            let chunks: Vec<String> = chars.chunks(step).map(|c| c.iter().collect()).collect();
            let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
            let out = run(&refs);
            let calls: Vec<&ToolCall> = out
                .iter()
                .filter_map(|p| match p {
                    Piece::Call(c) => Some(c),
                    _ => None,
                })
                .collect();
            assert_eq!(calls.len(), 2, "step {step}: {out:?}");
            assert_eq!(calls[0].function.arguments, json!({"a": 1}));
            assert_eq!(calls[1].function.arguments, json!({"a": 2}));
            assert_eq!(text(&out).trim(), "Sure.", "step {step}");
        }
    }

    #[test]
    fn text_that_only_looks_like_a_tag_is_passed_on() {
        let out = run(&["a <tool", "_cal", "l? b < c"]);
        assert_eq!(text(&out), "a <tool_call? b < c");
        let out = run(&["x <tool_"]);
        assert_eq!(text(&out), "x <tool_");
    }

    #[test]
    fn a_broken_call_is_no_text_and_a_cut_one_parses_if_it_can() {
        let out = run(&["Hm. <tool_call>{\"name\": oops}</tool_call>"]);
        assert_eq!(text(&out), "Hm. ");
        assert!(
            matches!(&out[1], Piece::Invalid { error, raw } if error.contains("not valid JSON") && raw.contains("oops")),
            "{out:?}"
        );
        let out = run(&["<tool_call>{\"name\": \"add\", \"arguments\": {}}"]);
        assert!(
            matches!(&out[..], [Piece::Call(c)] if c.function.name == "add"),
            "{out:?}"
        );
        // Cut inside its arguments (max_tokens): an invalid call, never content.
        let out = run(&["<tool_call>\n{\"name\": \"add\", \"arguments\": {\""]);
        assert!(
            matches!(&out[..], [Piece::Invalid { error, .. }] if error.starts_with("cut off")),
            "{out:?}"
        );
    }

    #[test]
    fn a_repeated_call_ends_the_answer() {
        let call = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        let other = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2}}\n</tool_call>";
        let mut s = splitter();
        let mut out = s.push(&format!("{call}\n{other}\n"));
        assert!(!s.repeated());
        out.extend(s.push(&format!("{call}\n<tool_call>\n{{\"na")));
        assert!(s.repeated());
        out.extend(s.push("me\": \"add\"}"));
        out.extend(s.finish());
        let calls = out.iter().filter(|p| matches!(p, Piece::Call(_))).count();
        assert_eq!(calls, 2, "{out:?}");
        assert_eq!(
            text(&out),
            "",
            "line breaks between calls are no content: {out:?}"
        );
    }

    #[test]
    fn xml_calls_are_typed_by_the_schema() {
        let mut s = splitter();
        let answer = "Adding.\n\n<tool_call>\n<function=add>\n<parameter=a>\n007\n</parameter>\n</function>\n</tool_call>";
        let mut out: Vec<Piece> = answer
            .split_inclusive('\n')
            .flat_map(|c| s.push(c))
            .collect();
        out.extend(s.finish());
        assert_eq!(text(&out).trim(), "Adding.");
        assert!(
            matches!(&out[..], [.., Piece::Call(c)] if c.function.arguments == json!({"a": 7})),
            "{out:?}"
        );
        let mut s = splitter();
        let out = s.push("<tool_call>\n<function=add>\n<parameter=a>\nseven\n</parameter>\n</function>\n</tool_call>");
        assert!(
            matches!(&out[..], [Piece::Invalid { error, .. }] if error.contains("not an integer")),
            "{out:?}"
        );
    }

    #[test]
    fn an_answer_that_is_an_untagged_call_is_read_as_one() {
        let out = run(&["  {\"name\": \"add\", ", "\"arguments\": {\"a\": 1}}"]);
        assert!(
            matches!(&out[..], [Piece::Call(c)] if c.function.name == "add"),
            "{out:?}"
        );
        let out = run(&["``", "`json\n{\"name\": \"add\", \"arguments\": {}}\n```"]);
        assert!(
            matches!(&out[..], [Piece::Call(c)] if c.function.name == "add"),
            "{out:?}"
        );
        // A tool nobody offered, or JSON that is no call, stays text.
        let out = run(&["{\"name\": \"rm\", \"arguments\": {}}"]);
        assert_eq!(text(&out), "{\"name\": \"rm\", \"arguments\": {}}");
        let out = run(&["{\"a\": 1} and more"]);
        assert_eq!(text(&out), "{\"a\": 1} and more");
    }

    #[test]
    fn without_tools_everything_is_text() {
        let mut s = ToolCallSplitter::new(vec![], vec![]);
        let out = s.push("<tool_call>{}</tool_call>");
        assert_eq!(text(&out), "<tool_call>{}</tool_call>");
    }
}
