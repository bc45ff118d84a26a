//! Telling Qwen3's reasoning (`<think>…</think>`) apart from its answer in a text stream.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// A piece of streamed text: reasoning or answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Inside `<think>…</think>`.
    Reasoning(String),
    /// The answer.
    Answer(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: a `<think>` may still open.
    Start,
    Thinking,
    Answering,
}

/// Splits streamed text. Reasoning may open only at the start of the answer (optionally after
/// whitespace); when the prompt already opened it (`starts_in_reasoning`), the text begins as
/// reasoning. Tag fragments split across deltas are held back until they resolve.
#[derive(Debug, Clone)]
pub struct ThinkingSplitter {
    state: State,
    pending: String,
    /// Just after `</think>`: the newlines the template puts before the answer are dropped.
    after_close: bool,
}

impl ThinkingSplitter {
    /// A splitter for one answer; `starts_in_reasoning` when the prompt ends in `<think>`.
    pub fn new(starts_in_reasoning: bool) -> Self {
        Self {
            state: if starts_in_reasoning {
                State::Thinking
            } else {
                State::Start
            },
            pending: String::new(),
            after_close: false,
        }
    }

    /// Adds streamed text; returns the pieces that are certain now.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = vec![];
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.pending.trim_start();
                    if trimmed.starts_with(OPEN) {
                        let skip = self.pending.len() - trimmed.len() + OPEN.len();
                        self.pending.drain(..skip);
                        self.state = State::Thinking;
                        continue;
                    }
                    if OPEN.starts_with(trimmed) {
                        return out; // still could open
                    }
                    self.state = State::Answering;
                }
                State::Thinking => match self.pending.find(CLOSE) {
                    Some(at) => {
                        let reasoning: String = self.pending.drain(..at).collect();
                        self.pending.drain(..CLOSE.len());
                        push(&mut out, Piece::Reasoning(reasoning));
                        self.after_close = true;
                        self.state = State::Answering;
                    }
                    None => {
                        let keep = partial_suffix(&self.pending, CLOSE);
                        let cut = self.pending.len() - keep;
                        let reasoning: String = self.pending.drain(..cut).collect();
                        push(&mut out, Piece::Reasoning(reasoning));
                        return out;
                    }
                },
                State::Answering => {
                    if self.after_close {
                        // The template writes "</think>\n\n" before the answer.
                        self.pending = self.pending.trim_start_matches('\n').to_string();
                        if self.pending.is_empty() {
                            return out;
                        }
                        self.after_close = false;
                    }
                    let answer = std::mem::take(&mut self.pending);
                    push(&mut out, Piece::Answer(answer));
                    return out;
                }
            }
        }
    }

    /// Whatever is held at the end of the stream.
    pub fn flush(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = vec![];
        match self.state {
            State::Thinking => push(&mut out, Piece::Reasoning(rest)),
            _ => push(&mut out, Piece::Answer(rest)),
        }
        out
    }
}

fn push(out: &mut Vec<Piece>, p: Piece) {
    let empty = match &p {
        Piece::Reasoning(s) | Piece::Answer(s) => s.is_empty(),
    };
    if !empty {
        out.push(p);
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(starts: bool, deltas: &[&str]) -> (String, String) {
        let mut s = ThinkingSplitter::new(starts);
        let mut pieces: Vec<Piece> = deltas.iter().flat_map(|d| s.push(d)).collect();
        pieces.extend(s.flush());
        let (mut r, mut a) = (String::new(), String::new());
        for p in pieces {
            match p {
                Piece::Reasoning(t) => r.push_str(&t),
                Piece::Answer(t) => a.push_str(&t),
            }
        }
        (r, a)
    }

    #[test]
    fn splits_reasoning_from_the_answer_across_deltas() {
        let (r, a) = run(
            false,
            &[
                "<th",
                "ink>\nThe user",
                " asks.\n</th",
                "ink>\n\nParis",
                ".",
            ],
        );
        assert_eq!(r, "\nThe user asks.\n");
        assert_eq!(a, "Paris.");
    }

    #[test]
    fn no_think_block_is_all_answer() {
        let (r, a) = run(false, &["Par", "is <think> is text here"]);
        assert_eq!((r.as_str(), a.as_str()), ("", "Paris <think> is text here"));
        let (r, a) = run(false, &["<", "b>bold</b>"]);
        assert_eq!((r.as_str(), a.as_str()), ("", "<b>bold</b>"));
    }

    #[test]
    fn prompt_opened_reasoning_and_an_unclosed_block() {
        let (r, a) = run(true, &["thinking...", "</think>", "\n", "\nDone"]);
        assert_eq!((r.as_str(), a.as_str()), ("thinking...", "Done"));
        let (r, a) = run(false, &["<think>never closes </thi"]);
        assert_eq!((r.as_str(), a.as_str()), ("never closes </thi", ""));
    }
}
