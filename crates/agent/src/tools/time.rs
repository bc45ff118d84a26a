//! The current date and time.

use crate::tool::Tool;
use async_trait::async_trait;
use serde_json::{json, Value};

/// The `current_time` tool: the local date and time, and the weekday.
pub struct CurrentTime;

#[async_trait]
impl Tool for CurrentTime {
    fn name(&self) -> &str {
        "current_time"
    }
    fn description(&self) -> &str {
        "The current local date and time (ISO 8601, with the UTC offset) and the weekday."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    async fn call(&self, _args: Value) -> Result<String, String> {
        let now = chrono::Local::now();
        Ok(format!(
            "{} ({})",
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
            now.format("%A")
        ))
    }
}
