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
    /// lagent's `AgentStatusCode`.
    AgentStatusCode {
        End = 0,
        StreamIng = 1,
        ServerErr = -1,
        SessionClosed = -2,
        SessionOutOfLimit = -3,
        SessionInvalidArg = -4,
        SessionReady = 2,
        PluginStart = 3,
        PluginEnd = 4,
        PluginReturn = 5,
        Coding = 6,
        CodeEnd = 7,
        CodeReturn = 8,
    }
);

int_enum!(
    /// The status of a tool result (lagent's `ActionStatusCode`).
    ActionStatusCode {
        Success = 0,
        Ing = 1,
        HttpError = -1000,
        ArgsError = -1001,
        ApiError = -1002,
    }
);

/// A message in an agent's memory: who sent it, what it says, and what a parser made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentMessage {
    #[serde(default = "user")]
    pub sender: String,
    /// Text or any JSON.
    pub content: Value,
    /// The output parser's reading of `content` (tool calls, status), if any.
    #[serde(default)]
    pub formatted: Option<Value>,
    #[serde(default)]
    pub extra_info: Option<Value>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub receiver: Option<String>,
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
