//! An [`Llm`] that answers from a script and records what it was asked.

use super::{Llm, LlmEvent, LlmRequest, LlmStream};
use crate::error::{AgentError, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// An [`Llm`] giving scripted answers in order, for tests of agent logic.
#[derive(Clone, Default)]
pub struct ScriptedLlm {
    answers: Arc<Mutex<VecDeque<String>>>,
    requests: Arc<Mutex<Vec<LlmRequest>>>,
    ended: Arc<Mutex<Vec<String>>>,
}

impl ScriptedLlm {
    /// Gives `answers`, one per call; a call after the last fails.
    pub fn new<S: Into<String>>(answers: impl IntoIterator<Item = S>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers.into_iter().map(Into::into).collect())),
            requests: Arc::default(),
            ended: Arc::default(),
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<LlmRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Every session released with [`Llm::end_session`] so far, in order.
    pub fn ended_sessions(&self) -> Vec<String> {
        self.ended.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Llm for ScriptedLlm {
    fn chat(&self, request: LlmRequest) -> Result<LlmStream> {
        if let Ok(mut r) = self.requests.lock() {
            r.push(request);
        }
        let answer = self
            .answers
            .lock()
            .ok()
            .and_then(|mut a| a.pop_front())
            .ok_or_else(|| AgentError::Llm("the script has no more answers".into()))?;
        // Streamed in small pieces, as a model would.
        let mut events: Vec<Result<LlmEvent>> = answer
            .chars()
            .collect::<Vec<_>>()
            .chunks(3)
            .map(|c| Ok(LlmEvent::Text(c.iter().collect())))
            .collect();
        events.push(Ok(LlmEvent::Done {
            finish: "stop".into(),
            prompt_tokens: 0,
            cached_prompt_tokens: 0,
            completion_tokens: answer.chars().count(),
            model: None,
        }));
        Ok(Box::pin(futures::stream::iter(events)))
    }

    fn end_session(&self, session: &str) {
        if let Ok(mut e) = self.ended.lock() {
            e.push(session.to_string());
        }
    }

    fn name(&self) -> String {
        "scripted".into()
    }
}
