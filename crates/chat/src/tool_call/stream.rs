//! Splits a streamed answer into text and tool calls as it arrives: text is passed on at
//! once, except what could be the start of a `<tool_call>` tag. A JSON call is held until its
//! closing tag and then parsed whole; an XML call (Qwen3-Coder, Qwen3.5) goes out as it is
//! written: its name once its `<function=…>` tag is read, then each parameter, typed by the
//! tool's schema, once it closes, as pieces of the arguments' JSON that add up to exactly the
//! string the whole call would carry. Neither ever reaches the client as text. Small models
//! often write the call without tags, as the whole answer (`{"name": …}` or a ```json fence,
//! as llama.cpp's Hermes parser also accepts): an answer that starts that way is held to its
//! end and read as calls if it names offered tools. A call that only repeats an earlier one
//! of the same answer is dropped and says the answer is over (a small model, forced to call,
//! writes the same call again and again).

use super::xml::{parse_function_so_far, FUNCTION, PARAMETER_END};
use super::{partial_tag, read_calls, Reading, CLOSE, OPEN};
use crate::ToolCall;
use serde_json::Value;

/// What a piece of a streamed answer is.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text for the reader.
    Text(String),
    /// A whole call at once.
    Call(ToolCall),
    /// A call going out as it is written: its function …
    CallOpen {
        /// The function called.
        name: String,
    },
    /// … the next piece of its arguments' JSON …
    CallArgs(String),
    /// … and the call, read whole, once its arguments have all gone out.
    CallEnd(ToolCall),
    /// A call that could not be read (or was cut off): why, and what the model wrote.
    Invalid {
        /// Why it is not a valid call.
        error: String,
        /// The text the model wrote.
        raw: String,
    },
}

/// Splits a streamed answer into [`Piece`]s (see the module's documentation).
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
    /// How much of the call being written has gone out.
    open: Sent,
    /// What a whole call must also pass: its arguments against its tool's whole schema,
    /// where the caller has a validator ([`ToolCallSplitter::with_check`]).
    check: Option<Check>,
}

/// A check of a whole call: `Err` says why it is not valid.
pub type Check = Box<dyn Fn(&ToolCall) -> Result<(), String> + Send + Sync>;

/// How much of a streamed call has gone out.
#[derive(Debug, Default)]
struct Sent {
    /// Its function's name.
    named: bool,
    /// Its first `params` parameters.
    params: usize,
    /// How much of the call's text was last read: it is read again only once more has closed.
    read_to: usize,
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
            open: Sent::default(),
            check: None,
        }
    }

    /// Calls that fail `check` go out as [`Piece::Invalid`] with its reason.
    pub fn with_check(mut self, check: Check) -> Self {
        self.check = Some(check);
        self
    }

    fn fits(&self, call: &ToolCall) -> Result<(), String> {
        self.check.as_ref().map_or(Ok(()), |check| check(call))
    }

    /// Whether a call repeated an earlier one: the answer should end.
    pub fn repeated(&self) -> bool {
        self.repeated
    }

    /// The pieces `text`, the answer's next chunk, completes; what may still become a call
    /// is held.
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
                    self.stream_call(&mut out);
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
                self.open = Sent::default();
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
                    if let Err(error) = self.fits(&c) {
                        out.push(Piece::Invalid {
                            error,
                            raw: rest.clone(),
                        });
                    } else if !self.repeats(&c) {
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

    /// A call body parsed as the model's format; what does not parse is an invalid call. A
    /// call partly gone out ends with the rest of its arguments.
    fn call(&mut self, body: &str, cut: bool) -> Vec<Piece> {
        let open = std::mem::take(&mut self.open);
        let piece = self.read_call(body, cut);
        match piece {
            Some(Piece::Call(call)) if open.named => {
                let mut out = vec![];
                push_params(&mut out, &call, open.params, true);
                out.push(Piece::CallEnd(call));
                out
            }
            piece => piece.into_iter().collect(),
        }
    }

    /// An XML call being written: its name and every parameter closed so far that has not yet
    /// gone out. Held back: a call that so far only repeats an earlier one (it may be a
    /// repeat, which ends the answer unsent), a tool not offered and what does not parse (both
    /// come out invalid at the call's end).
    fn stream_call(&mut self, out: &mut Vec<Piece>) {
        let body = &self.pending;
        if !body.trim_start().starts_with(FUNCTION) {
            return;
        }
        let cut = match body.rfind(PARAMETER_END) {
            Some(i) => i + PARAMETER_END.len(),
            None => match body.find('>') {
                Some(i) => i + 1,
                None => return,
            },
        };
        if cut == self.open.read_to {
            return;
        }
        self.open.read_to = cut;
        let Ok(call) = parse_function_so_far(&body[..cut], &self.specs) else {
            return;
        };
        if !self.names.contains(&call.function.name) {
            return;
        }
        if !self.open.named {
            if self.could_repeat(&call) {
                return;
            }
            out.push(Piece::CallOpen {
                name: call.function.name.clone(),
            });
            self.open.named = true;
        }
        self.open.params = push_params(out, &call, self.open.params, false);
    }

    /// Whether `call`, as far as it is written, matches an earlier call of the answer.
    fn could_repeat(&self, call: &ToolCall) -> bool {
        let Some(so_far) = call.function.arguments.as_object() else {
            return false;
        };
        self.seen.iter().any(|c| {
            c.function.name == call.function.name
                && so_far
                    .iter()
                    .all(|(k, v)| c.function.arguments.get(k) == Some(v))
        })
    }

    fn read_call(&mut self, body: &str, cut: bool) -> Option<Piece> {
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
                if let Err(why) = self.fits(&call) {
                    return Some(Piece::Invalid { error: why, raw });
                }
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

/// The parameters of `call` from the `from`-th on, as pieces of its arguments' JSON (written
/// as `serde_json` writes the whole object, so the pieces add up to `arguments.to_string()`),
/// and the closing brace where `last`. Returns the parameters gone out.
fn push_params(out: &mut Vec<Piece>, call: &ToolCall, from: usize, last: bool) -> usize {
    let empty = serde_json::Map::new();
    let args = call.function.arguments.as_object().unwrap_or(&empty);
    let mut json = String::new();
    for (i, (k, v)) in args.iter().enumerate().skip(from) {
        json.push(if i == 0 { '{' } else { ',' });
        json.push_str(&format!("{}:{v}", Value::String(k.clone())));
    }
    if last {
        json.push_str(if args.is_empty() { "{}" } else { "}" });
    }
    if !json.is_empty() {
        out.push(Piece::CallArgs(json));
    }
    args.len().max(from)
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
            matches!(&out[..], [.., Piece::CallEnd(c)] if c.function.arguments == json!({"a": 7})),
            "{out:?}"
        );
        let mut s = splitter();
        let out = s.push("<tool_call>\n<function=add>\n<parameter=a>\nseven\n</parameter>\n</function>\n</tool_call>");
        assert!(
            matches!(&out[..], [Piece::Invalid { error, .. }] if error.contains("not an integer")),
            "{out:?}"
        );
    }

    fn pair() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "edit", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
            "text": {"type": "string"}}, "required": ["path", "text"]}}}),
        ]
    }

    /// What a streamed call sends: its name, then pieces of its arguments that add up to the
    /// whole call's arguments string.
    fn streamed(out: &[Piece]) -> Vec<(String, String, ToolCall)> {
        let mut calls = vec![];
        let mut open: Option<(String, String)> = None;
        for p in out {
            match p {
                Piece::CallOpen { name } => open = Some((name.clone(), String::new())),
                Piece::CallArgs(a) => open.as_mut().expect("arguments of an open call").1 += a,
                Piece::CallEnd(c) => {
                    let (name, args) = open.take().expect("the end of an open call");
                    calls.push((name, args, c.clone()));
                }
                // Written all at once: nothing to stream.
                Piece::Call(c) => {
                    let args = c.function.arguments.to_string();
                    calls.push((c.function.name.clone(), args, c.clone()));
                }
                _ => {}
            }
        }
        calls
    }

    #[test]
    fn an_xml_call_goes_out_parameter_by_parameter_and_adds_up_to_the_whole() {
        let answer = "On it.\n<tool_call>\n<function=edit>\n<parameter=path>\nsrc/a.rs\n</parameter>\n<parameter=line>\n12\n</parameter>\n<parameter=text>\nfn main() {\n    println!(\"<hi>\");\n}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=edit>\n<parameter=path>\nb\n</parameter>\n<parameter=text>\nx\n</parameter>\n</function>\n</tool_call>";
        let chars: Vec<char> = answer.chars().collect();
        for step in [1, 2, 5, 13, answer.len()] {
            let mut s = ToolCallSplitter::new(pair(), vec!["edit".into()]);
            let mut out = vec![];
            let mut before_close = None;
            for chunk in chars.chunks(step) {
                let chunk: String = chunk.iter().collect();
                out.extend(s.push(&chunk));
                // The first parameter is out before the call's closing tag has come.
                if before_close.is_none() && !s.pending.is_empty() && s.in_call {
                    before_close = out
                        .iter()
                        .position(|p| matches!(p, Piece::CallArgs(a) if a.contains("src/a.rs")));
                }
            }
            out.extend(s.finish());
            assert_eq!(text(&out).trim(), "On it.", "step {step}");
            let calls = streamed(&out);
            assert_eq!(calls.len(), 2, "step {step}: {out:?}");
            for (name, args, call) in &calls {
                assert_eq!(name, &call.function.name);
                assert_eq!(args, &call.function.arguments.to_string(), "step {step}");
            }
            assert_eq!(
                calls[0].2.function.arguments,
                json!({"path": "src/a.rs", "line": 12, "text": "fn main() {\n    println!(\"<hi>\");\n}"})
            );
            if step < 20 {
                assert!(before_close.is_some(), "step {step}: {out:?}");
            }
        }
    }

    #[test]
    fn a_streamed_call_that_repeats_an_earlier_one_is_held_and_dropped() {
        let call = "<tool_call>\n<function=edit>\n<parameter=path>\na\n</parameter>\n<parameter=text>\nx\n</parameter>\n</function>\n</tool_call>";
        let mut s = ToolCallSplitter::new(pair(), vec!["edit".into()]);
        let mut out = s.push(call);
        // The same call again, written slowly: nothing of it goes out …
        for line in call.split_inclusive('\n') {
            let more = s.push(line);
            assert!(
                !more
                    .iter()
                    .any(|p| matches!(p, Piece::CallOpen { .. } | Piece::CallArgs(_))),
                "{more:?}"
            );
            out.extend(more);
        }
        // … and it ends the answer.
        assert!(s.repeated());
        out.extend(s.finish());
        assert_eq!(streamed(&out).len(), 1, "{out:?}");
        // One that starts like it and then differs goes out once it differs.
        let mut s = ToolCallSplitter::new(pair(), vec!["edit".into()]);
        let mut out = s.push(call);
        out.extend(s.push("\n<tool_call>\n<function=edit>\n<parameter=path>\na\n</parameter>\n"));
        assert!(
            !out.iter().any(|p| matches!(p, Piece::CallOpen { .. })),
            "{out:?}"
        );
        out.extend(s.push("<parameter=text>\ny\n</parameter>\n"));
        assert!(
            out.iter().any(|p| matches!(p, Piece::CallOpen { .. })),
            "{out:?}"
        );
        out.extend(s.push("</function>\n</tool_call>"));
        out.extend(s.finish());
        let calls = streamed(&out);
        assert_eq!(calls.len(), 2, "{out:?}");
        assert_eq!(calls[1].1, r#"{"path":"a","text":"y"}"#);
    }

    #[test]
    fn a_streamed_call_cut_off_ends_as_far_as_it_parses() {
        let mut s = ToolCallSplitter::new(pair(), vec!["edit".into()]);
        let mut out = s.push("<tool_call>\n<function=edit>\n<parameter=path>\na\n</parameter>\n<parameter=text>\nhal");
        out.extend(s.finish());
        // The text parameter was cut: the call is whole as far as it goes, and says so.
        let calls = streamed(&out);
        assert_eq!(calls.len(), 1, "{out:?}");
        assert_eq!(calls[0].1, calls[0].2.function.arguments.to_string());
        // A tool nobody offered is not streamed.
        let mut s = ToolCallSplitter::new(pair(), vec!["edit".into()]);
        let out = s.push("<tool_call>\n<function=rm>\n<parameter=path>\n/\n</parameter>\n");
        assert!(out.is_empty(), "{out:?}");
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
    fn a_call_is_checked_by_the_callers_check() {
        // What the caller's check says of a whole call, tagged or not, decides it.
        let check = || -> Check {
            Box::new(|c: &ToolCall| {
                let keys = c.function.arguments["metadata"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                match keys
                    .keys()
                    .all(|k| k.chars().all(|c| c.is_ascii_lowercase()))
                {
                    true => Ok(()),
                    false => Err(format!(
                        "the arguments of `{}` do not fit at /metadata",
                        c.function.name
                    )),
                }
            })
        };
        let specs =
            vec![json!({"type": "function", "function": {"name": "task", "parameters": {}}})];
        let mut s = ToolCallSplitter::new(specs.clone(), vec!["task".into()]).with_check(check());
        let good = "<tool_call>\n{\"name\": \"task\", \"arguments\": {\"metadata\": {\"ok\": 1}}}\n</tool_call>";
        assert!(matches!(&s.push(good)[..], [Piece::Call(_)]));
        let mut s = ToolCallSplitter::new(specs.clone(), vec!["task".into()]).with_check(check());
        let bad = "<tool_call>\n{\"name\": \"task\", \"arguments\": {\"metadata\": {\"Not OK\": 1}}}\n</tool_call>";
        let out = s.push(bad);
        assert!(
            matches!(&out[..], [Piece::Invalid { error, raw }]
                if error.contains("`task`") && error.contains("/metadata") && raw.contains("Not OK")),
            "{out:?}"
        );
        let mut s = ToolCallSplitter::new(specs.clone(), vec!["task".into()]).with_check(check());
        let mut out = s.push("{\"name\": \"task\", \"arguments\": {\"metadata\": {\"X\": 1}}}");
        out.extend(s.finish());
        assert!(matches!(&out[..], [Piece::Invalid { .. }]), "{out:?}");
        // Without a check the same call goes out.
        let mut s = ToolCallSplitter::new(specs, vec!["task".into()]);
        assert!(matches!(&s.push(bad)[..], [Piece::Call(_)]));
    }

    #[test]
    fn without_tools_everything_is_text() {
        let mut s = ToolCallSplitter::new(vec![], vec![]);
        let out = s.push("<tool_call>{}</tool_call>");
        assert_eq!(text(&out), "<tool_call>{}</tool_call>");
    }
}
