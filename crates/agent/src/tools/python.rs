//! Python run as a subprocess (never in process), with a time limit and an output limit.

use crate::tool::Tool;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

pub struct Python {
    pub interpreter: String,
    pub timeout: Duration,
    pub max_output: usize,
}

impl Default for Python {
    fn default() -> Self {
        Self {
            interpreter: "python3".into(),
            timeout: Duration::from_secs(10),
            max_output: 16 * 1024,
        }
    }
}

#[async_trait]
impl Tool for Python {
    fn name(&self) -> &str {
        "python"
    }
    fn description(&self) -> &str {
        "Run a Python 3 program and return what it prints (stdout and stderr). Use print() for results."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}}, "required": ["code"]})
    }
    async fn call(&self, args: Value) -> Result<String, String> {
        let code = args["code"].as_str().ok_or("`code` must be a string")?;
        let mut child = tokio::process::Command::new(&self.interpreter)
            .args(["-I", "-c", code])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.interpreter))?;
        let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
        let limit = self.max_output as u64 + 1;
        let read = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            if let Some(s) = out.as_mut() {
                let _ = s.take(limit).read_to_end(&mut o).await;
            }
            if let Some(s) = err.as_mut() {
                let _ = s.take(limit).read_to_end(&mut e).await;
            }
            let status = child.wait().await;
            (o, e, status)
        };
        let (o, e, status) = match tokio::time::timeout(self.timeout, read).await {
            Ok(r) => r,
            Err(_) => {
                return Err(format!(
                    "python timed out after {:?} (killed)",
                    self.timeout
                ))
            }
        };
        let mut text = String::from_utf8_lossy(&o).into_owned();
        text.push_str(&String::from_utf8_lossy(&e));
        if text.len() > self.max_output {
            let mut cut = self.max_output;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("\n[output truncated]");
        }
        match status {
            Ok(s) if s.success() => Ok(text),
            Ok(s) => Err(format!("exit status {}: {text}", s.code().unwrap_or(-1))),
            Err(e) => Err(format!("python: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    #[tokio::test]
    async fn runs_limits_time_and_output() -> TestResult {
        let py = Python {
            timeout: Duration::from_millis(1500),
            max_output: 100,
            ..Default::default()
        };
        assert_eq!(
            py.call(json!({"code": "print(1234 * 5678)"})).await?,
            "7006652\n"
        );
        let err = py
            .call(json!({"code": "raise ValueError('bad')"}))
            .await
            .unwrap_err();
        assert!(err.contains("ValueError: bad"), "{err}");
        let err = py
            .call(json!({"code": "import time; time.sleep(30)"}))
            .await
            .unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        let out = py.call(json!({"code": "print('x' * 10000)"})).await?;
        assert!(
            out.len() < 200 && out.ends_with("[output truncated]"),
            "{out}"
        );
        Ok(())
    }
}
