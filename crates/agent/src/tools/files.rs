//! Reading and listing files inside one workspace directory; paths that leave it are refused.

use crate::tool::Tool;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};

/// A directory the file tools may not leave.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

const MAX_READ: usize = 64 * 1024;

impl Workspace {
    pub fn new(root: &Path) -> Result<Self, String> {
        let root = root
            .canonicalize()
            .map_err(|e| format!("workspace {}: {e}", root.display()))?;
        if !root.is_dir() {
            return Err(format!("workspace {} is not a directory", root.display()));
        }
        Ok(Self { root })
    }

    /// `path` (relative to the root) resolved, or a refusal if it escapes the workspace —
    /// through `..`, an absolute path, or a symbolic link.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let rel = Path::new(path);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(format!("`{path}` is outside the workspace"));
        }
        let full = self.root.join(rel);
        let real = full.canonicalize().map_err(|e| format!("`{path}`: {e}"))?;
        if !real.starts_with(&self.root) {
            return Err(format!("`{path}` is outside the workspace"));
        }
        Ok(real)
    }
}

pub struct ListFiles(pub Workspace);
pub struct ReadFile(pub Workspace);

fn path_arg(args: &Value) -> &str {
    args.get("path").and_then(Value::as_str).unwrap_or(".")
}

#[async_trait]
impl Tool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }
    fn description(&self) -> &str {
        "List the entries of a directory in the workspace (directories end with /)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "Directory relative to the workspace; default ."}}})
    }
    async fn call(&self, args: Value) -> Result<String, String> {
        let dir = self.0.resolve(path_arg(&args))?;
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", path_arg(&args)))?
            .filter_map(|e| e.ok())
            .map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                if e.path().is_dir() {
                    format!("{n}/")
                } else {
                    n
                }
            })
            .collect();
        names.sort();
        Ok(names.join("\n"))
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a text file in the workspace (at most 64 KiB)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "File relative to the workspace"}}, "required": ["path"]})
    }
    async fn call(&self, args: Value) -> Result<String, String> {
        let path = self.0.resolve(path_arg(&args))?;
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path_arg(&args)))?;
        let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_READ)]).into_owned();
        if bytes.len() > MAX_READ {
            text.push_str(&format!(
                "\n[truncated: {} of {} bytes shown]",
                MAX_READ,
                bytes.len()
            ));
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;

    #[tokio::test]
    async fn reads_inside_and_refuses_outside() -> TestResult {
        let tmp = tempfile::tempdir()?;
        std::fs::create_dir(tmp.path().join("sub"))?;
        std::fs::write(tmp.path().join("sub/a.txt"), "hello")?;
        let ws = Workspace::new(tmp.path())?;
        let read = ReadFile(ws.clone());
        assert_eq!(read.call(json!({"path": "sub/a.txt"})).await?, "hello");
        assert_eq!(ListFiles(ws.clone()).call(json!({})).await?, "sub/");
        for bad in ["../../etc/passwd", "/etc/passwd", "sub/../../x"] {
            let err = read.call(json!({"path": bad})).await.unwrap_err();
            assert!(err.contains("outside the workspace"), "{bad}: {err}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", tmp.path().join("link"))?;
            let err = read.call(json!({"path": "link/passwd"})).await.unwrap_err();
            assert!(err.contains("outside the workspace"), "{err}");
        }
        assert!(read.call(json!({"path": "missing.txt"})).await.is_err());
        Ok(())
    }
}
