//! Hooks around an agent's call and around each action (tool call) it takes: they may look
//! at or replace the input, the output, the call and its result. [`Hooks::add`] returns a
//! handle that removes the hook again, as lagent's `register_hook` does.

use crate::message::AgentMessage;
use crate::tool::ToolResult;
use crate::tool_context::ToolContext;
use hearth_chat::ToolCall;
use std::sync::{Arc, Mutex, Weak};

/// Code run around an agent's calls and its tool calls; each method passes its input on
/// unchanged by default.
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

    /// Called before a tool runs; may return a replacement call.
    fn before_action(&self, _agent: &str, call: ToolCall, _session: &str) -> ToolCall {
        call
    }

    /// Called after a tool ran, before the model sees the result; may replace it.
    fn after_action(&self, _agent: &str, result: ToolResult, _session: &str) -> ToolResult {
        result
    }

    /// [`Self::before_action`] with the call's whole context (user, tenant, deadline, …);
    /// by default that.
    fn before_action_in(&self, call: ToolCall, context: &ToolContext) -> ToolCall {
        self.before_action(&context.agent, call, &context.session)
    }

    /// [`Self::after_action`] with the call's whole context; by default that.
    fn after_action_in(&self, result: ToolResult, context: &ToolContext) -> ToolResult {
        self.after_action(&context.agent, result, &context.session)
    }
}

#[derive(Default)]
struct HookList {
    next_id: u64,
    hooks: Vec<(u64, Arc<dyn Hook>)>,
}

/// An agent's hooks, in the order they were added. Clones share the same list.
#[derive(Clone, Default)]
pub struct Hooks {
    list: Arc<Mutex<HookList>>,
}

/// Removes the hook it was returned for; dropping it keeps the hook.
#[derive(Debug, Clone)]
pub struct HookHandle {
    id: u64,
    list: Weak<Mutex<HookList>>,
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hook after the others; the handle removes it again.
    pub fn add(&self, hook: Arc<dyn Hook>) -> HookHandle {
        let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let id = list.next_id;
        list.next_id += 1;
        list.hooks.push((id, hook));
        HookHandle {
            id,
            list: Arc::downgrade(&self.list),
        }
    }

    /// The hooks now, in order (a hook added or removed while they run takes effect next time).
    pub fn snapshot(&self) -> Vec<Arc<dyn Hook>> {
        let list = self.list.lock().unwrap_or_else(|p| p.into_inner());
        list.hooks.iter().map(|(_, h)| h.clone()).collect()
    }

    /// How many hooks there are.
    pub fn len(&self) -> usize {
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hooks
            .len()
    }

    /// Whether there are no hooks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl HookHandle {
    /// Removes the hook; false if it was already removed or its agent is gone.
    pub fn remove(&self) -> bool {
        let Some(list) = self.list.upgrade() else {
            return false;
        };
        let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
        let before = list.hooks.len();
        list.hooks.retain(|(id, _)| *id != self.id);
        list.hooks.len() < before
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooks({})", self.len())
    }
}

/// Logs every input, output, tool call and result through `tracing`.
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

    fn before_action(&self, agent: &str, call: ToolCall, session: &str) -> ToolCall {
        tracing::info!(agent, session, tool = %call.function.name, "call: {}", call.function.arguments);
        call
    }

    fn after_action(&self, agent: &str, result: ToolResult, session: &str) -> ToolResult {
        tracing::info!(agent, session, tool = %result.name, "result: {}", result.for_model());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tag(&'static str);
    impl Hook for Tag {
        fn after_agent(&self, _a: &str, mut out: AgentMessage, _s: &str) -> AgentMessage {
            out.content = format!("{}{}", out.text(), self.0).into();
            out
        }
    }

    #[test]
    fn handles_remove_their_own_hook_once() {
        let hooks = Hooks::new();
        let a = hooks.add(Arc::new(Tag("a")));
        let _b = hooks.add(Arc::new(Tag("b")));
        let run = |hooks: &Hooks| {
            hooks
                .snapshot()
                .iter()
                .fold(AgentMessage::user(""), |m, h| h.after_agent("x", m, "s"))
                .text()
        };
        assert_eq!(run(&hooks), "ab");
        assert!(a.remove());
        assert!(!a.remove(), "a second remove finds nothing");
        assert_eq!(run(&hooks), "b");
        assert_eq!(hooks.len(), 1);
        // A handle outliving its agent's hooks is harmless.
        let gone = Hooks::new();
        let h = gone.add(Arc::new(Tag("c")));
        drop(gone);
        assert!(!h.remove());
    }
}
