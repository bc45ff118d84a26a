//! Who a tool call is made for and until when: the session, the agent, the user and tenant,
//! a deadline and a cancellation signal. The tool loop passes it with every call
//! ([`Tool::call_in`](crate::Tool::call_in)); the registry ends a call at the deadline or on
//! cancellation; action hooks see it ([`Hook::before_action_in`](crate::Hook::before_action_in)).

use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// The caller of a tool call.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    /// The conversation.
    pub session: String,
    /// The agent whose model made the call.
    pub agent: String,
    /// The user the agent works for, where the caller says.
    pub user: Option<String>,
    /// The tenant (organisation, workspace) whose data the call may touch.
    pub tenant: Option<String>,
    /// When the call must have ended (with the registry's own timeout, the earlier).
    pub deadline: Option<Instant>,
    /// Set to end the call (and the run's calls after it) early.
    pub cancel: Cancel,
    /// Anything else the caller passes its tools.
    pub extra: Map<String, Value>,
}

/// A cancellation signal shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<(AtomicBool, Notify)>);

impl Cancel {
    /// Signals every clone.
    pub fn cancel(&self) {
        self.0 .0.store(true, Ordering::SeqCst);
        self.0 .1.notify_waiters();
    }

    /// Whether it was signalled.
    pub fn is_cancelled(&self) -> bool {
        self.0 .0.load(Ordering::SeqCst)
    }

    /// Returns once it is signalled.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0 .1.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}
