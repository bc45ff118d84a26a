//! Built-in tools, and toolkits (several APIs under one tool's name).

mod calculator;
mod files;
mod python;
mod sandbox;
mod time;
mod toolkit;

pub use calculator::{evaluate, Calculator, Number};
pub use files::{ListFiles, ReadFile, Workspace};
pub use python::Python;
pub use time::CurrentTime;
pub use toolkit::Toolkit;

use crate::tool::{Tool, ToolRegistry};
use std::path::PathBuf;
use std::sync::Arc;

/// Built-in tool names, as `--tools` takes them.
pub const BUILT_IN: &[&str] = &["calculator", "time", "files", "python"];

/// A registry with the named built-ins (`files` adds `list_files` and `read_file`).
pub fn registry(names: &[String], workspace: Option<PathBuf>) -> Result<ToolRegistry, String> {
    let mut reg = ToolRegistry::new();
    // `--tools ""` offers none.
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match name {
            "calculator" => reg.add(Arc::new(Calculator)),
            "time" => reg.add(Arc::new(CurrentTime)),
            "files" => {
                let root = workspace.clone().unwrap_or_else(|| PathBuf::from("."));
                let ws = Workspace::new(&root)?;
                reg.add(Arc::new(ListFiles(ws.clone())) as Arc<dyn Tool>);
                reg.add(Arc::new(ReadFile(ws)));
            }
            "python" => {
                let root = workspace.clone().unwrap_or_else(|| PathBuf::from("."));
                // Checked now rather than on the first call.
                Workspace::new(&root)?;
                reg.add(Arc::new(Python::new(root)))
            }
            other => {
                return Err(format!(
                    "unknown tool `{other}` in --tools; built-in: {}",
                    BUILT_IN.join(", ")
                ))
            }
        }
    }
    Ok(reg)
}
