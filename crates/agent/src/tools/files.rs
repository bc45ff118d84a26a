//! Reading and listing files inside one workspace directory; paths that leave it are refused.

use crate::tool::Tool;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::path::{Component, Path, PathBuf};
use tokio::io::AsyncReadExt;

/// A directory the file tools may not leave.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

const MAX_READ: usize = 64 * 1024;
/// The largest image `read_file` shows.
const MAX_IMAGE: usize = 20 << 20;

impl Workspace {
    /// The workspace at `root`, which must be a directory.
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
        let full = self.joined(path)?;
        let real = full.canonicalize().map_err(|e| format!("`{path}`: {e}"))?;
        self.inside(path, real)
    }

    /// [`Workspace::resolve`] without blocking the async runtime.
    pub async fn resolve_async(&self, path: &str) -> Result<PathBuf, String> {
        let full = self.joined(path)?;
        let real = tokio::fs::canonicalize(&full)
            .await
            .map_err(|e| format!("`{path}`: {e}"))?;
        self.inside(path, real)
    }

    fn joined(&self, path: &str) -> Result<PathBuf, String> {
        let rel = Path::new(path);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(format!("`{path}` is outside the workspace"));
        }
        Ok(self.root.join(rel))
    }

    fn inside(&self, path: &str, real: PathBuf) -> Result<PathBuf, String> {
        if !real.starts_with(&self.root) {
            return Err(format!("`{path}` is outside the workspace"));
        }
        Ok(real)
    }
}

/// The `list_files` tool: a directory's entries, directories ending in `/`.
pub struct ListFiles(pub Workspace);
/// The `read_file` tool: a text file, at most 64 KiB of it.
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
        let dir = self.0.resolve_async(path_arg(&args)).await?;
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| format!("{}: {e}", path_arg(&args)))?;
        let mut names = Vec::new();
        while let Ok(Some(e)) = entries.next_entry().await {
            let n = e.file_name().to_string_lossy().into_owned();
            // Followed like `is_dir`: a link to a directory lists as one.
            let is_dir = tokio::fs::metadata(e.path())
                .await
                .is_ok_and(|m| m.is_dir());
            names.push(if is_dir { format!("{n}/") } else { n });
        }
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
        "Read a text file in the workspace (at most 64 KiB), or look at an image file (PNG, JPEG, WebP, GIF)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "File relative to the workspace"}}, "required": ["path"]})
    }
    async fn call(&self, args: Value) -> Result<String, String> {
        let arg = path_arg(&args);
        let path = self.0.resolve_async(arg).await?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| format!("{arg}: {e}"))?;
        // The size of a regular file; a pipe or device has none worth saying.
        let size = file
            .metadata()
            .await
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        // An image is shown whole (the model backend encodes it, or notes it for a model
        // without vision), up to its own limit.
        let mut bytes = Vec::new();
        (&mut file)
            .take(12)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| format!("{arg}: {e}"))?;
        if let Some(media_type) = crate::image::media_type(&bytes) {
            (&mut file)
                .take(MAX_IMAGE as u64 + 1 - bytes.len() as u64)
                .read_to_end(&mut bytes)
                .await
                .map_err(|e| format!("{arg}: {e}"))?;
            if bytes.len() > MAX_IMAGE {
                return Err(format!("{arg}: an image over {MAX_IMAGE} bytes"));
            }
            return Ok(crate::image::inline(&bytes, media_type));
        }
        // Never more than the limit and one byte (to tell that there is more) in memory,
        // whatever the file's size.
        (&mut file)
            .take((MAX_READ + 1 - bytes.len()) as u64)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| format!("{arg}: {e}"))?;
        let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_READ)]).into_owned();
        if bytes.len() > MAX_READ {
            match size {
                Some(size) => {
                    text.push_str(&format!("\n[truncated: {MAX_READ} of {size} bytes shown]"))
                }
                None => text.push_str(&format!("\n[truncated: the first {MAX_READ} bytes shown]")),
            }
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
        // An image comes back whole, as an image span the model backend takes out.
        let png = [&[0x89, b'P', b'N', b'G'][..], &[7u8; 70_000][..]].concat();
        std::fs::write(tmp.path().join("shot.png"), &png)?;
        let shown = read.call(json!({"path": "shot.png"})).await?;
        let pieces = crate::image::pieces(&shown);
        assert!(
            matches!(&pieces[..], [crate::image::Piece::Image { media_type: "image/png", bytes, .. }] if *bytes == png),
            "{}",
            &shown[..60]
        );
        Ok(())
    }

    /// A file that never ends (a FIFO whose writer keeps writing) is read to the limit only;
    /// reading it whole would never return.
    #[cfg(unix)]
    #[test]
    fn reads_no_more_than_the_limit() -> TestResult {
        use std::io::Write;
        let tmp = tempfile::tempdir()?;
        let fifo = tmp.path().join("endless");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes())?;
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::thread::spawn(move || {
            if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                // Until the reader closes its end.
                while w.write_all(&[b'a'; 4096]).is_ok() {}
            }
        });
        let ws = Workspace::new(tmp.path())?;
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = ws.clone();
        // Its own thread and runtime: a read that never ends must not hang the test.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let r = rt.map(|rt| rt.block_on(ReadFile(reader).call(json!({"path": "endless"}))));
            let _ = tx.send(r.map_err(|e| e.to_string()).and_then(|r| r));
        });
        let text = rx.recv_timeout(std::time::Duration::from_secs(10))??;
        assert!(text.starts_with(&"a".repeat(MAX_READ)), "{}", text.len());
        assert!(
            text.ends_with("[truncated: the first 65536 bytes shown]"),
            "{}",
            &text[MAX_READ..]
        );

        std::fs::write(tmp.path().join("big.txt"), vec![b'a'; 3 * MAX_READ])?;
        let rt = tokio::runtime::Builder::new_current_thread().build()?;
        let text = rt.block_on(ReadFile(ws).call(json!({"path": "big.txt"})))?;
        assert!(
            text.ends_with(&format!(
                "[truncated: {MAX_READ} of {} bytes shown]",
                3 * MAX_READ
            )),
            "{}",
            &text[MAX_READ..]
        );
        Ok(())
    }
}
