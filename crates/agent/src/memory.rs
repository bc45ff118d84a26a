//! Memory: the messages of one session, and a manager holding one memory per session id,
//! created on first use.

use crate::message::AgentMessage;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The messages of one session, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    messages: Vec<AgentMessage>,
    /// `get` returns at most this many of the most recent messages by default.
    recent_n: Option<usize>,
}

impl Memory {
    /// An empty memory whose `get` returns at most `recent_n` messages unless told otherwise.
    pub fn new(recent_n: Option<usize>) -> Self {
        Self {
            messages: vec![],
            recent_n,
        }
    }

    /// The most recent `recent_n` (or the memory's own window) messages that pass `filter`.
    pub fn get(
        &self,
        recent_n: Option<usize>,
        filter: Option<&dyn Fn(&AgentMessage) -> bool>,
    ) -> Vec<AgentMessage> {
        let picked: Vec<&AgentMessage> = self
            .messages
            .iter()
            .filter(|m| filter.is_none_or(|f| f(m)))
            .collect();
        let n = recent_n
            .or(self.recent_n)
            .unwrap_or(picked.len())
            .min(picked.len());
        picked[picked.len() - n..]
            .iter()
            .map(|m| (*m).clone())
            .collect()
    }

    /// Appends a message.
    pub fn add(&mut self, message: AgentMessage) {
        self.messages.push(message);
    }

    /// Removes the messages at `indices` (positions in the whole memory).
    pub fn delete(&mut self, indices: &[usize]) {
        let mut i = 0;
        self.messages.retain(|_| {
            let keep = !indices.contains(&i);
            i += 1;
            keep
        });
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages as a JSON array.
    pub fn save(&self) -> Value {
        serde_json::to_value(&self.messages).unwrap_or(Value::Array(vec![]))
    }

    /// Replaces the messages with those of a [`Memory::save`] array.
    pub fn load(&mut self, saved: &Value) -> Result<(), String> {
        self.messages =
            serde_json::from_value(saved.clone()).map_err(|e| format!("memory: {e}"))?;
        Ok(())
    }
}

/// One [`Memory`] per session id.
#[derive(Debug, Default)]
pub struct MemoryManager {
    sessions: Mutex<BTreeMap<String, Memory>>,
    recent_n: Option<usize>,
}

impl MemoryManager {
    /// No sessions yet; each memory made keeps a window of `recent_n` messages.
    pub fn new(recent_n: Option<usize>) -> Self {
        Self {
            sessions: Mutex::new(BTreeMap::new()),
            recent_n,
        }
    }

    /// Runs `f` on the session's memory, creating it if needed.
    pub fn with<R>(&self, session: &str, f: impl FnOnce(&mut Memory) -> R) -> R {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let memory = sessions
            .entry(session.to_string())
            .or_insert_with(|| Memory::new(self.recent_n));
        f(memory)
    }

    /// The session's messages, within its window.
    pub fn get(&self, session: &str) -> Vec<AgentMessage> {
        self.with(session, |m| m.get(None, None))
    }

    /// Appends a message to the session's memory.
    pub fn add(&self, session: &str, message: AgentMessage) {
        self.with(session, |m| m.add(message));
    }

    /// Forgets a session; returns whether it existed (a session never seen is not an error).
    pub fn reset(&self, session: &str) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session)
            .is_some()
    }

    /// Whether the session has a memory.
    pub fn has(&self, session: &str) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(session)
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    #[test]
    fn window_filter_delete_save_load() -> TestResult {
        let mut m = Memory::new(Some(2));
        for i in 0..5 {
            m.add(AgentMessage::new(
                if i % 2 == 0 { "user" } else { "bot" },
                format!("m{i}"),
            ));
        }
        let texts = |v: Vec<AgentMessage>| v.iter().map(|m| m.text()).collect::<Vec<_>>();
        assert_eq!(texts(m.get(None, None)), ["m3", "m4"]);
        assert_eq!(texts(m.get(Some(10), None)).len(), 5);
        let bot = |x: &AgentMessage| x.sender == "bot";
        assert_eq!(texts(m.get(Some(10), Some(&bot))), ["m1", "m3"]);
        m.delete(&[0, 4]);
        assert_eq!(texts(m.get(Some(10), None)), ["m1", "m2", "m3"]);
        let saved = m.save();
        let mut other = Memory::new(None);
        other.load(&saved)?;
        assert_eq!(texts(other.get(None, None)), ["m1", "m2", "m3"]);
        assert!(other.load(&serde_json::json!(42)).is_err());
        Ok(())
    }

    #[test]
    fn manager_creates_sessions_lazily_and_resets() -> TestResult {
        let mm = MemoryManager::new(None);
        assert!(!mm.has("a"));
        mm.add("a", AgentMessage::user("hi"));
        assert_eq!(mm.get("a").len(), 1);
        assert_eq!(mm.get("b").len(), 0);
        assert!(mm.reset("a"));
        assert!(!mm.reset("never-seen"));
        Ok(())
    }
}
