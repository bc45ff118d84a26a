//! Stop strings matched across token boundaries. Text that could still become a stop string
//! is held back; the matched stop string is never emitted; held text that turns out not to
//! be one is released, so nothing is lost.

use crate::error::{EngineError, Result};

/// Stop strings a request may carry, and the bytes of each: every token is scanned against
/// all of them on the scheduler's thread, which every sequence shares (OpenAI allows 4).
pub const MAX_STOP_STRINGS: usize = 64;
/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 1024;

/// A scanner of generated text for a request's stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
}

/// What [`StopStrings::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopScan {
    /// Text that is safe to show.
    Emit(String),
    /// A stop string matched: show `emit` (what came before it), then stop.
    Stopped {
        /// Text before the stop string.
        emit: String,
        /// The stop string that matched.
        matched: String,
    },
}

impl StopStrings {
    /// A scanner for `stops`; refuses empty, too many or too long stop strings.
    pub fn new(stops: Vec<String>) -> Result<Self> {
        if let Some(i) = stops.iter().position(String::is_empty) {
            return Err(EngineError::invalid(
                "stop",
                format!("stop string {i} is empty"),
            ));
        }
        if stops.len() > MAX_STOP_STRINGS {
            return Err(EngineError::invalid(
                "stop",
                format!("{} stop strings (at most {MAX_STOP_STRINGS})", stops.len()),
            ));
        }
        if let Some(i) = stops.iter().position(|s| s.len() > MAX_STOP_BYTES) {
            return Err(EngineError::invalid(
                "stop",
                format!(
                    "stop string {i} is {} bytes long (at most {MAX_STOP_BYTES})",
                    stops[i].len()
                ),
            ));
        }
        Ok(Self {
            stops,
            pending: String::new(),
        })
    }

    /// Whether there are no stop strings.
    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Adds generated text; returns what can be shown now, holding back a possible stop string's start.
    pub fn push(&mut self, text: &str) -> StopScan {
        self.pending.push_str(text);
        // The earliest match wins; on a tie the longer stop string.
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, s)| (*at, std::cmp::Reverse(s.len())));
        if let Some((at, s)) = found {
            let emit = self.pending[..at].to_string();
            let matched = s.clone();
            self.pending.clear();
            return StopScan::Stopped { emit, matched };
        }
        let hold = self.held_suffix_len();
        let cut = self.pending.len() - hold;
        let emit = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        StopScan::Emit(emit)
    }

    /// The longest suffix of the pending text that is a proper prefix of some stop string.
    fn held_suffix_len(&self) -> usize {
        let p = &self.pending;
        p.char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                self.stops
                    .iter()
                    .any(|s| s.len() > p.len() - i && s.starts_with(&p[i..]))
            })
            .map(|i| p.len() - i)
            .unwrap_or(0)
    }

    /// Releases held text at the end of generation.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(s: &[&str]) -> StopStrings {
        StopStrings::new(s.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    #[test]
    fn stop_string_across_two_tokens() {
        let mut s = stops(&["Observation:"]);
        assert_eq!(
            s.push("Thought: add\nObserv"),
            StopScan::Emit("Thought: add\n".into())
        );
        assert_eq!(
            s.push("ation: 42"),
            StopScan::Stopped {
                emit: "".into(),
                matched: "Observation:".into()
            }
        );
    }

    #[test]
    fn stop_string_across_three_tokens_with_text_before() {
        let mut s = stops(&["<|im_end|>"]);
        assert_eq!(s.push("Paris.<|im"), StopScan::Emit("Paris.".into()));
        assert_eq!(s.push("_e"), StopScan::Emit("".into()));
        assert_eq!(
            s.push("nd|>\nmore"),
            StopScan::Stopped {
                emit: "".into(),
                matched: "<|im_end|>".into()
            }
        );
    }

    #[test]
    fn a_partial_match_that_is_not_one_is_released() {
        let mut s = stops(&["STOP"]);
        assert_eq!(s.push("ab ST"), StopScan::Emit("ab ".into()));
        assert_eq!(s.push("O"), StopScan::Emit("".into()));
        assert_eq!(s.push("RM is"), StopScan::Emit("STORM is".into()));
        assert_eq!(s.push(" S"), StopScan::Emit(" ".into()));
        assert_eq!(s.flush(), "S", "held text at the end is not lost");
    }

    #[test]
    fn earliest_match_wins_and_multibyte_text_is_safe() {
        let mut s = stops(&["}}", "。"]);
        assert_eq!(
            s.push("答え}}です。"),
            StopScan::Stopped {
                emit: "答え".into(),
                matched: "}}".into()
            }
        );
        let mut s = stops(&["éé"]);
        assert_eq!(s.push("café"), StopScan::Emit("caf".into()));
        assert_eq!(s.push("!"), StopScan::Emit("é!".into()));
    }

    #[test]
    fn empty_stop_string_is_refused() {
        let err = StopStrings::new(vec!["ok".into(), String::new()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("stop string 1 is empty"), "{err}");
    }

    #[test]
    fn too_many_or_too_long_stop_strings_are_refused() {
        let many = (0..=MAX_STOP_STRINGS).map(|i| format!("s{i}")).collect();
        let err = StopStrings::new(many).unwrap_err().to_string();
        assert!(err.contains("65 stop strings (at most 64)"), "{err}");
        let long = vec!["ok".into(), "a".repeat(MAX_STOP_BYTES + 1)];
        let err = StopStrings::new(long).unwrap_err().to_string();
        assert!(err.contains("stop string 1 is 1025 bytes long"), "{err}");
        let most = (0..MAX_STOP_STRINGS)
            .map(|_| "a".repeat(MAX_STOP_BYTES))
            .collect();
        assert!(StopStrings::new(most).is_ok());
    }
}
