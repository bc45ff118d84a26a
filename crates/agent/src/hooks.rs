//! Hooks around an agent's call: they may look at or replace the input and the output.

use crate::message::AgentMessage;

pub trait Hook: Send + Sync {
    /// Called before the input is recorded; may return replacement inputs.
    fn before_agent(
        &self,
        _agent: &str,
        inputs: Vec<AgentMessage>,
        _session: &str,
    ) -> Vec<AgentMessage> {
        inputs
    }

    /// Called after the output is recorded; may return a replacement output.
    fn after_agent(&self, _agent: &str, output: AgentMessage, _session: &str) -> AgentMessage {
        output
    }
}

/// Logs every input and output through `tracing`.
pub struct MessageLogger;

impl Hook for MessageLogger {
    fn before_agent(
        &self,
        agent: &str,
        inputs: Vec<AgentMessage>,
        session: &str,
    ) -> Vec<AgentMessage> {
        for m in &inputs {
            tracing::info!(agent, session, sender = %m.sender, "in: {}", m.text());
        }
        inputs
    }

    fn after_agent(&self, agent: &str, output: AgentMessage, session: &str) -> AgentMessage {
        tracing::info!(agent, session, "out: {}", output.text());
        output
    }
}
