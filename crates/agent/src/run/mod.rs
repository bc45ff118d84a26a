//! The run loop: an agent that calls tools until it answers ([`tool_agent`]), when it stops
//! ([`loop_policy`]), lagent's action executor over the same round runner
//! ([`action_executor`]), and the events a run publishes ([`event_bus`]).

pub mod action_executor;
pub mod event_bus;
pub mod loop_policy;
pub mod tool_agent;
