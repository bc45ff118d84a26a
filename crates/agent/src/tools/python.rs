//! The `python` tool: a program run by a Python 3 interpreter in the sandbox (`sandbox.rs`:
//! a subprocess in the workspace, under resource limits, its file access confined), within a
//! time limit and an output limit.

use super::sandbox::{run, user_tasks, Limits, Sandbox};
use crate::tool::Tool;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The `python` tool: runs a program in a sandboxed interpreter subprocess.
pub struct Python {
    /// The interpreter run (default `python3`).
    pub interpreter: String,
    /// The program's working directory and HOME, and (where a sandbox is available) the only
    /// directory it may write to or read outside the system directories.
    pub workspace: PathBuf,
    /// How long a program may run (default 10 s); its CPU-time limit is a second more.
    pub timeout: Duration,
    /// Bytes of output that come back, stdout and stderr together.
    pub max_output: usize,
    /// Address-space limit of the program, bytes.
    pub memory_limit: u64,
    /// Size limit of each file the program writes, bytes.
    pub file_size_limit: u64,
    /// Found by probes on the first call, then reused.
    sandbox: tokio::sync::OnceCell<Result<Sandbox, String>>,
}

impl Default for Python {
    fn default() -> Self {
        Self::new(PathBuf::from("."))
    }
}

impl Python {
    /// `python3` in `workspace`: 10 s, 16 KiB of output, 1 GiB of memory, 64 MiB files.
    pub fn new(workspace: PathBuf) -> Self {
        Self {
            interpreter: "python3".into(),
            workspace,
            timeout: Duration::from_secs(10),
            max_output: 16 * 1024,
            memory_limit: 1 << 30,
            file_size_limit: 64 << 20,
            sandbox: tokio::sync::OnceCell::new(),
        }
    }

    /// How file access is confined on this machine, e.g. `"bubblewrap"`; probes on first use.
    pub async fn confinement(&self) -> Result<&'static str, String> {
        Ok(self.sandbox().await?.how.name())
    }

    async fn sandbox(&self) -> Result<&Sandbox, String> {
        self.sandbox
            .get_or_init(|| Sandbox::probe(&self.interpreter, &self.workspace))
            .await
            .as_ref()
            .map_err(Clone::clone)
    }

    async fn limits(&self) -> Limits {
        let tasks = tokio::task::spawn_blocking(user_tasks).await.ok().flatten();
        Limits {
            memory: self.memory_limit,
            cpu_seconds: self.timeout.as_secs() + 1,
            file_size: self.file_size_limit,
            processes: tasks.map(|n| n + 64),
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
        let sandbox = self.sandbox().await?;
        let run = run(
            sandbox.command(code),
            &self.limits().await,
            self.timeout,
            self.max_output,
        )
        .await
        .map_err(|e| format!("cannot start {}: {e}", self.interpreter))?;
        let text = run.text(self.max_output);
        match run.status {
            None => Err(format!(
                "python timed out after {:?} (killed); output so far:\n{text}",
                self.timeout
            )),
            Some(s) if s.success() => Ok(text),
            Some(s) => Err(match (s.code(), signal_of(&s)) {
                (Some(c), _) => format!("exit status {c}: {text}"),
                (None, Some(sig)) => format!("killed by signal {sig}{}: {text}", why(sig)),
                (None, None) => format!("failed: {text}"),
            }),
        }
    }
}

#[cfg(unix)]
fn signal_of(s: &std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(s)
}

#[cfg(not(unix))]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

fn why(sig: i32) -> &'static str {
    #[cfg(unix)]
    match sig {
        libc::SIGXCPU => return " (CPU time limit)",
        libc::SIGKILL => return " (killed, e.g. out of memory)",
        libc::SIGSEGV => return " (segmentation fault, e.g. out of memory)",
        _ => {}
    }
    let _ = sig;
    ""
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    #[cfg(target_os = "linux")]
    use crate::tools::sandbox::{landlock, Confinement};
    use std::time::Instant;

    fn in_tmp(tmp: &tempfile::TempDir) -> Python {
        Python::new(tmp.path().to_path_buf())
    }

    #[tokio::test]
    async fn runs_limits_time_and_output() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let py = Python {
            timeout: Duration::from_millis(1500),
            max_output: 100,
            ..in_tmp(&tmp)
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
            .call(json!({"code": "print('started', flush=True); import time; time.sleep(30)"}))
            .await
            .unwrap_err();
        assert!(
            err.contains("timed out") && err.contains("started"),
            "{err}"
        );
        let out = py.call(json!({"code": "print('x' * 10000)"})).await?;
        assert!(
            out.len() < 200 && out.trim_end().ends_with("[stdout truncated]"),
            "{out}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_megabyte_on_both_streams_comes_back_truncated_not_timed_out() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let py = Python {
            timeout: Duration::from_secs(10),
            max_output: 1000,
            ..in_tmp(&tmp)
        };
        let started = Instant::now();
        let out = py
            .call(json!({"code": "import sys\nfor _ in range(1024):\n    sys.stdout.write('o' * 1023 + '\\n')\n    sys.stderr.write('e' * 1023 + '\\n')\n"}))
            .await?;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(
            out.contains("ooo") && out.contains("[stdout truncated]"),
            "{out}"
        );
        assert!(
            out.contains("eee") && out.contains("[stderr truncated]"),
            "{out}"
        );
        assert!(out.len() < 1100, "{}", out.len());
        Ok(())
    }

    #[tokio::test]
    async fn runs_in_the_workspace_with_a_scrubbed_environment_and_limits() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let py = in_tmp(&tmp);
        let ws = tmp.path().canonicalize()?;
        let out = py
            .call(json!({"code": "import os\nprint(os.getcwd())\nprint(os.environ.get('HOME'))\nprint(sorted(k for k in os.environ if k.startswith('CARGO')))\nopen('made.txt', 'w').write('hi')"}))
            .await?;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], ws.to_string_lossy(), "{out}");
        assert_eq!(lines[1], ws.to_string_lossy(), "{out}");
        assert_eq!(lines[2], "[]", "the test's CARGO_* variables leaked: {out}");
        assert_eq!(std::fs::read_to_string(ws.join("made.txt"))?, "hi");
        // 1 GiB of address space: allocating 2 GiB fails inside python.
        let err = py
            .call(json!({"code": "b = bytearray(2 * 1024**3)"}))
            .await
            .unwrap_err();
        assert!(err.contains("MemoryError"), "{err}");
        let err = py
            .call(json!({"code": "import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE)); open('big', 'wb').write(b'x' * (65 << 20))"}))
            .await
            .unwrap_err();
        assert!(
            err.contains("File too large") || err.contains("EFBIG"),
            "{err}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn cannot_read_outside_the_workspace() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let py = in_tmp(&tmp);
        let how = py.confinement().await?;
        if how == "none" {
            println!("SKIPPED: neither bubblewrap nor landlock can confine python on this machine");
            return Ok(());
        }
        println!("python confined by {how}");
        let secret = tempfile::tempdir()?;
        std::fs::write(secret.path().join("secret.txt"), "s3cret")?;
        for path in [
            "/etc/passwd".to_string(),
            secret
                .path()
                .join("secret.txt")
                .to_string_lossy()
                .into_owned(),
        ] {
            let r = py
                .call(json!({ "code": format!("print(open({path:?}).read())") }))
                .await;
            let err = r.expect_err(&format!("{how}: read {path}"));
            assert!(
                err.contains("FileNotFoundError") || err.contains("PermissionError"),
                "{how}: {err}"
            );
        }
        let err = py
            .call(json!({"code": "open('/usr/hearth-test', 'w')"}))
            .await
            .unwrap_err();
        assert!(err.contains("Error"), "{how}: {err}");
        // Reading and writing inside the workspace still works.
        std::fs::write(tmp.path().join("in.txt"), "inside")?;
        assert_eq!(
            py.call(json!({"code": "print(open('in.txt').read())"}))
                .await?,
            "inside\n"
        );
        Ok(())
    }

    /// The fallback when bubblewrap cannot start: landlock alone still keeps /etc out.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn landlock_alone_confines_reads() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let py = in_tmp(&tmp);
        let mut sandbox = Sandbox::probe(&py.interpreter, &py.workspace).await?;
        match landlock::ruleset(&sandbox) {
            Ok(fd) => sandbox.how = Confinement::Landlock(fd),
            Err(e) => {
                println!("SKIPPED: no landlock here: {e}");
                return Ok(());
            }
        }
        let limits = py.limits().await;
        let secs = Duration::from_secs(10);
        let code = "print(open('/etc/passwd').read())";
        let denied = run(sandbox.command(code), &limits, secs, 4096).await?;
        let text = denied.text(4096);
        assert!(!denied.status.is_some_and(|s| s.success()), "{text}");
        assert!(text.contains("PermissionError"), "{text}");
        let fine = run(sandbox.command("print(2 + 2)"), &limits, secs, 4096).await?;
        assert_eq!(fine.text(4096), "4\n");
        Ok(())
    }
}
