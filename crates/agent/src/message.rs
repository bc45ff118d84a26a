//! Messages between agents, and lagent's status codes (serialised as their integer values).

use serde::{Deserialize, Serialize};
use serde_json::Value;

macro_rules! int_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $value:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(into = "i32", try_from = "i32")]
        pub enum $name { $($(#[$vm])* $variant),* }

        impl From<$name> for i32 {
            fn from(v: $name) -> i32 {
                match v { $($name::$variant => $value),* }
            }
        }

        impl TryFrom<i32> for $name {
            type Error = String;
            fn try_from(v: i32) -> Result<Self, String> {
                match v {
                    $(x if x == $value => Ok($name::$variant),)*
                    other => Err(format!("{other} is not a {}", stringify!($name))),
                }
            }
        }
    };
}

int_enum!(
    /// What kind of action a result answers (lagent's `ActionValidCode`).
    ActionValidCode {
        /// The finishing action: its response is the answer.
        Finish = 1,
        /// A tool that was run.
        Open = 0,
        /// A tool that is closed.
        Closed = -1,
        /// An action no tool answers to.
        Invalid = -2,
        /// No action at all.
        Absent = -3,
    }
);

int_enum!(
    /// lagent's `AgentStatusCode`.
    AgentStatusCode {
        /// The message is complete.
        End = 0,
        /// The message is still streaming.
        StreamIng = 1,
        /// The server failed.
        ServerErr = -1,
        /// The session has been closed.
        SessionClosed = -2,
        /// The request is too long for the session.
        SessionOutOfLimit = -3,
        /// An argument of the request is invalid.
        SessionInvalidArg = -4,
        /// The session is ready for inference.
        SessionReady = 2,
        /// A tool call starts.
        PluginStart = 3,
        /// A tool call has ended.
        PluginEnd = 4,
        /// A tool call's result is back.
        PluginReturn = 5,
        /// Code (for the interpreter) starts.
        Coding = 6,
        /// The code has ended.
        CodeEnd = 7,
        /// The code's result is back.
        CodeReturn = 8,
    }
);

int_enum!(
    /// The status of a tool result (lagent's `ActionStatusCode`).
    ActionStatusCode {
        /// The tool ran and gave its output.
        Success = 0,
        /// The tool is still running.
        Ing = 1,
        /// An HTTP request of the tool failed.
        HttpError = -1000,
        /// The arguments are invalid (not JSON, or not valid against the schema).
        ArgsError = -1001,
        /// The tool failed otherwise: unknown, timed out, panicked, or gave an error.
        ApiError = -1002,
    }
);

/// A message in an agent's memory: who sent it, what it says, and what a parser made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentMessage {
    /// Who sent it: `user`, an agent's name, or a tool's name.
    #[serde(default = "user")]
    pub sender: String,
    /// Text or any JSON.
    pub content: Value,
    /// The output parser's reading of `content` (tool calls, status), if any.
    #[serde(default)]
    pub formatted: Option<Value>,
    /// Anything else (a tool result's call id, a run's stop reason).
    #[serde(default)]
    pub extra_info: Option<Value>,
    /// What kind of message it is (`type` in JSON), e.g.
    /// [`TOOL_RESULT`](crate::aggregator::TOOL_RESULT); `None` for an ordinary one.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The agent it is addressed to ([`AgentMap`](crate::agent::AgentMap) routes by it).
    #[serde(default)]
    pub receiver: Option<String>,
    /// Whether it is still streaming or complete.
    #[serde(default = "end")]
    pub stream_state: AgentStatusCode,
}

fn user() -> String {
    "user".into()
}

fn end() -> AgentStatusCode {
    AgentStatusCode::End
}

impl AgentMessage {
    /// A complete message from `sender`, with nothing parsed.
    pub fn new(sender: impl Into<String>, content: impl Into<Value>) -> Self {
        Self {
            sender: sender.into(),
            content: content.into(),
            formatted: None,
            extra_info: None,
            kind: None,
            receiver: None,
            stream_state: AgentStatusCode::End,
        }
    }

    /// A message from the user.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", Value::String(content.into()))
    }

    /// The content as text (JSON is written out).
    pub fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

impl From<&str> for AgentMessage {
    fn from(s: &str) -> Self {
        Self::user(s)
    }
}

impl From<String> for AgentMessage {
    fn from(s: String) -> Self {
        Self::user(s)
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use serde_json::json;

    #[test]
    fn status_codes_have_lagents_values() -> TestResult {
        assert_eq!(i32::from(AgentStatusCode::SessionInvalidArg), -4);
        assert_eq!(i32::from(AgentStatusCode::CodeReturn), 8);
        assert_eq!(i32::from(ActionStatusCode::ArgsError), -1001);
        assert_eq!(
            serde_json::to_value(ActionStatusCode::ApiError)?,
            json!(-1002)
        );
        assert!(AgentStatusCode::try_from(42).is_err());
        Ok(())
    }

    #[test]
    fn messages_round_trip_through_json() -> TestResult {
        let mut m = AgentMessage::new("calculator", json!({"result": 7006652}));
        m.formatted = Some(json!({"status": 1}));
        m.kind = Some("tool".into());
        m.receiver = Some("agent".into());
        m.stream_state = AgentStatusCode::PluginReturn;
        let v = serde_json::to_value(&m)?;
        assert_eq!(v["stream_state"], json!(5));
        assert_eq!(v["type"], json!("tool"));
        let back: AgentMessage = serde_json::from_value(v)?;
        assert_eq!(back, m);
        // Defaults as lagent's: sender user, stream_state END.
        let d: AgentMessage = serde_json::from_value(json!({"content": "hi"}))?;
        assert_eq!(
            (d.sender.as_str(), d.stream_state),
            ("user", AgentStatusCode::End)
        );
        Ok(())
    }
}
