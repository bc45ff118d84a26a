//! A tool-loop run's events to several subscribers at once — a terminal, a log, a web page —
//! each with its own queue: a slow or gone subscriber holds no one else up. The run takes the
//! bus's [`EventBus::sender`] where it takes any event sender.

use crate::run::tool_agent::ToolAgentEvent;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// Subscribers to a run's events.
#[derive(Default)]
pub struct EventBus {
    subscribers: Mutex<Vec<UnboundedSender<ToolAgentEvent>>>,
}

impl EventBus {
    /// A bus without subscribers.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A new subscriber: every event published from now on, in order.
    pub fn subscribe(&self) -> UnboundedReceiver<ToolAgentEvent> {
        let (tx, rx) = unbounded_channel();
        if let Ok(mut s) = self.subscribers.lock() {
            s.push(tx);
        }
        rx
    }

    /// Subscribers still listening.
    pub fn subscribers(&self) -> usize {
        self.subscribers.lock().map_or(0, |s| s.len())
    }

    /// `event` to every subscriber; those that went away are forgotten.
    pub fn publish(&self, event: ToolAgentEvent) {
        if let Ok(mut s) = self.subscribers.lock() {
            s.retain(|tx| tx.send(event.clone()).is_ok());
        }
    }

    /// A sender whose events reach every subscriber, in order, for
    /// [`ToolAgent::run`](crate::ToolAgent::run) (forwarded by a task on the current Tokio
    /// runtime, which ends when the sender is dropped).
    pub fn sender(self: &Arc<Self>) -> UnboundedSender<ToolAgentEvent> {
        let (tx, mut rx) = unbounded_channel::<ToolAgentEvent>();
        let bus = self.clone();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                bus.publish(event);
            }
        });
        tx
    }
}
