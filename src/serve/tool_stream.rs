//! Splits a streamed answer into text and tool calls as it arrives: text is passed on at
//! once, except what could be the start of a `<tool_call>` tag; a call is held until its
//! closing tag and then parsed whole, so a client never sees half a call. Small models
//! often write the call without tags, as the whole answer (`{"name": …}` or a ```json
//! fence, as llama.cpp's Hermes parser also accepts): an answer that starts that way is
//! held to its end and read as calls if it names offered tools.

use hearth_agent::parser::{OutputParser, ParseStatus, QwenToolParser};
use hearth_engine::ToolCall;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Call(ToolCall),
}

pub struct ToolCallSplitter {
    names: Vec<String>,
    pending: String,
    in_call: bool,
    /// Nothing but whitespace has come yet.
    at_start: bool,
    /// The answer started like an untagged call: held until the end.
    bare: bool,
}

impl ToolCallSplitter {
    /// `names`: the tools offered. With none offered, everything is text.
    pub fn new(names: Vec<String>) -> Self {
        Self {
            names,
            pending: String::new(),
            in_call: false,
            at_start: true,
            bare: false,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
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
                out.push(self.call(&body));
            } else if let Some(start) = self.pending.find(OPEN) {
                push_text(&mut out, &self.pending[..start]);
                self.pending.drain(..start + OPEN.len());
                self.in_call = true;
            } else {
                // Hold back a tail that could still become `<tool_call>`.
                let keep = partial_tag_len(&self.pending);
                let cut = self.pending.len() - keep;
                push_text(&mut out, &self.pending[..cut]);
                self.pending.drain(..cut);
                break;
            }
        }
        out
    }

    /// The end of the answer: a call cut off before its closing tag is still a call if what
    /// came parses; otherwise it is text.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = vec![];
        if self.bare {
            self.bare = false;
            let parsed = QwenToolParser.parse(&rest, &self.names);
            if parsed.status == ParseStatus::ValidTool {
                push_text(&mut out, &parsed.text);
                out.extend(parsed.tool_calls.into_iter().map(Piece::Call));
            } else {
                push_text(&mut out, &rest);
            }
        } else if self.in_call {
            self.in_call = false;
            out.push(self.call(&rest));
        } else {
            push_text(&mut out, &rest);
        }
        out
    }

    /// A call body parsed with the lenient Qwen parser; what does not parse stays text.
    fn call(&self, body: &str) -> Piece {
        let raw = format!("{OPEN}{body}{CLOSE}");
        let parsed = QwenToolParser.parse(&raw, &self.names);
        match (parsed.status, parsed.tool_calls.as_slice()) {
            (ParseStatus::ValidTool, [call]) => Piece::Call(call.clone()),
            _ => Piece::Text(raw),
        }
    }
}

fn push_text(out: &mut Vec<Piece>, text: &str) {
    if !text.is_empty() {
        out.push(Piece::Text(text.to_string()));
    }
}

/// The length of the longest tail of `s` that is a proper prefix of `<tool_call>`.
fn partial_tag_len(s: &str) -> usize {
    (1..OPEN.len())
        .rev()
        .find(|&n| {
            s.len() >= n && s.is_char_boundary(s.len() - n) && OPEN.starts_with(&s[s.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(chunks: &[&str]) -> Vec<Piece> {
        let mut s = ToolCallSplitter::new(vec!["add".into()]);
        let mut out: Vec<Piece> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        out
    }

    fn text(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text(t) => Some(t.as_str()),
                Piece::Call(_) => None,
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
                    Piece::Text(_) => None,
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
    fn a_broken_call_stays_text_and_a_cut_one_parses_if_it_can() {
        let out = run(&["<tool_call>{\"name\": oops}</tool_call>"]);
        assert_eq!(text(&out), "<tool_call>{\"name\": oops}</tool_call>");
        let out = run(&["<tool_call>{\"name\": \"add\", \"arguments\": {}}"]);
        assert!(
            matches!(&out[..], [Piece::Call(c)] if c.function.name == "add"),
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
        let mut s = ToolCallSplitter::new(vec![]);
        let out = s.push("<tool_call>{}</tool_call>");
        assert_eq!(text(&out), "<tool_call>{}</tool_call>");
    }
}
