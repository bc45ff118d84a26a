//! The text before a tool call may not spell one: no `{"name"` (JSON whitespace allowed after
//! the brace) until the call's `<tool_call>` token opens it.
//!
//! Kept beside the grammar rather than in it: as a negated lexeme of the grammar
//! (`.* & ~(.*\{\s*"name".*)`) it made llguidance walk the whole token trie (333 thousand
//! nodes, 2–4 ms) for a mask of free text, where a plain "any text" lexeme costs 0.1–0.3 ms.
//! Here a token is checked by running its bytes through the pattern, and a mask only looks
//! at the tokens that hold a `"` (the only ones that can finish the pattern).

use llguidance::toktrie::TokTrie;
use std::sync::Arc;

/// Where the text stands in `{` whitespace* `"name"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Not inside the pattern; or how many of `{`, `"`, `n`, `a`, `m`, `e` are matched.
    At(u8),
    /// The text spells the pattern.
    Spelled,
}

const KEY: &[u8] = b"name\"";

fn step(at: u8, b: u8) -> Progress {
    if b == b'{' {
        return Progress::At(1);
    }
    match at {
        1 if matches!(b, b' ' | b'\t' | b'\n' | b'\r') => Progress::At(1),
        1 if b == b'"' => Progress::At(2),
        2..=6 if b == KEY[at as usize - 2] => {
            if at == 6 {
                Progress::Spelled
            } else {
                Progress::At(at + 1)
            }
        }
        _ => Progress::At(0),
    }
}

/// The text with a token added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// The guard turns off within the token (the answer starts like a call).
    Off,
    Spelled,
    /// Progress through the pattern, and whether a non-whitespace byte has been written.
    At(u8, bool),
}

/// One sequence's guard: off once a call opens, or when the answer starts like a call
/// (`{` or a fence: the grammar's untagged call, where `{"name"` is the call itself).
#[derive(Debug, Clone)]
pub(crate) struct ProseGuard {
    at: u8,
    /// A non-whitespace byte has been written.
    started: bool,
    active: bool,
    /// The token that opens a call (`<tool_call>`), if the vocabulary has one.
    open: Option<u32>,
    /// Ids whose bytes hold a `"`, ascending.
    quoted: Arc<[u32]>,
}

impl ProseGuard {
    pub(crate) fn new(open: Option<u32>, quoted: Arc<[u32]>) -> Self {
        Self {
            at: 0,
            started: false,
            active: true,
            open,
            quoted,
        }
    }

    /// What the text becomes with `bytes` added. Added tokens other than the opening tag
    /// (toktrie's marker byte, then their name) are not text.
    fn run(&self, bytes: &[u8]) -> After {
        if bytes.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
            return After::At(self.at, self.started);
        }
        let (mut at, mut started) = (self.at, self.started);
        for &b in bytes {
            if !started {
                if b.is_ascii_whitespace() {
                    continue;
                }
                started = true;
                if b == b'{' || b == b'`' {
                    return After::Off;
                }
            }
            match step(at, b) {
                Progress::At(n) => at = n,
                Progress::Spelled => return After::Spelled,
            }
        }
        After::At(at, started)
    }

    /// Whether token `id` (its raw bytes `bytes`) keeps the text from spelling a call.
    pub(crate) fn allows(&self, id: u32, bytes: &[u8]) -> bool {
        !self.active || Some(id) == self.open || self.run(bytes) != After::Spelled
    }

    /// Sets the logits of the tokens that would spell a call to -inf.
    pub(crate) fn mask(&self, logits: &mut [f32], trie: &TokTrie) {
        if !self.active {
            return;
        }
        for &id in self.quoted.iter() {
            if let Some(l) = logits.get_mut(id as usize) {
                if l.is_finite() && self.run(trie.token(id)) == After::Spelled {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// Takes token `id` into the text.
    pub(crate) fn consume(&mut self, id: u32, bytes: &[u8]) {
        if !self.active {
            return;
        }
        if Some(id) == self.open {
            self.active = false;
            return;
        }
        match self.run(bytes) {
            After::At(at, started) => (self.at, self.started) = (at, started),
            // Spelled: refused by `allows`; should it come anyway, the guard has nothing left
            // to keep.
            After::Off | After::Spelled => self.active = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u32 = 7;

    fn guard() -> ProseGuard {
        ProseGuard::new(Some(OPEN), Arc::from(Vec::new()))
    }

    /// Feeds `tokens` in turn; the index of the first one refused.
    fn refused_at(tokens: &[&str]) -> Option<usize> {
        let mut g = guard();
        for (i, t) in tokens.iter().enumerate() {
            if !g.allows(0, t.as_bytes()) {
                return Some(i);
            }
            g.consume(0, t.as_bytes());
        }
        None
    }

    #[test]
    fn text_may_not_spell_a_call_across_tokens() {
        assert_eq!(refused_at(&["Here", ": {\"name\""]), Some(1));
        assert_eq!(refused_at(&["Here: {", " \n\t\"na", "me", "\""]), Some(3));
        assert_eq!(refused_at(&["Here: {\"nam", "e\": 1"]), Some(1));
        // Near misses are text.
        assert_eq!(
            refused_at(&["a {\"names\"", " {x \"name\"", " {\"Name\""]),
            None
        );
        assert_eq!(refused_at(&["a {\"nam", "es\""]), None);
        assert_eq!(refused_at(&["a {{", "\"name\""]), Some(1));
    }

    #[test]
    fn a_call_opened_or_an_answer_that_starts_like_one_turns_it_off() {
        // The grammar's untagged call: `{` or a fence as the first non-blank.
        assert_eq!(refused_at(&["\n ", "{\"name\": \"f\"}"]), None);
        assert_eq!(refused_at(&["```json\n{\"name\""]), None);
        // After the opening tag the call itself spells `{"name"`.
        let mut g = guard();
        g.consume(0, b"Let me look.");
        assert!(!g.allows(0, b"{\"name\""));
        g.consume(OPEN, b"\xff<tool_call>");
        assert!(g.allows(0, b"{\"name\""));
        // Other added tokens are not text: they neither start nor break the pattern.
        let mut g = guard();
        g.consume(0, b"x {");
        g.consume(9, b"\xff<|fim_pad|>");
        assert!(!g.allows(0, b"\"name\""));
    }
}
