//! Where sessions live between requests: in memory (tests) or in a SQLite file (default).
//! A save is one transaction, so a crash mid-run leaves the last committed session intact.

use crate::error::{GraphError, Result};
use rusqlite::{params, Connection};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Saves and restores a session's slices between requests.
pub trait StateStore: Send + Sync {
    /// The slices saved for `session_id`, or `None` if there are none.
    fn load(&self, session_id: &str) -> Result<Option<Map<String, Value>>>;
    /// Replaces the session's saved slices.
    fn save(&self, session_id: &str, slices: &Map<String, Value>) -> Result<()>;
    /// Forgets the session.
    fn delete(&self, session_id: &str) -> Result<()>;
}

/// Sessions in memory, lost on exit (tests).
#[derive(Default)]
pub struct MemoryStore {
    sessions: Mutex<HashMap<String, Map<String, Value>>>,
}

impl StateStore for MemoryStore {
    fn load(&self, id: &str) -> Result<Option<Map<String, Value>>> {
        Ok(self
            .sessions
            .lock()
            .map_err(|_| poisoned())?
            .get(id)
            .cloned())
    }
    fn save(&self, id: &str, slices: &Map<String, Value>) -> Result<()> {
        self.sessions
            .lock()
            .map_err(|_| poisoned())?
            .insert(id.into(), slices.clone());
        Ok(())
    }
    fn delete(&self, id: &str) -> Result<()> {
        self.sessions.lock().map_err(|_| poisoned())?.remove(id);
        Ok(())
    }
}

fn poisoned() -> GraphError {
    GraphError::Store {
        path: "(memory)".into(),
        message: "lock poisoned".into(),
    }
}

/// Sessions in Hearth's SQLite session database (table `hearth_sessions`).
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens or creates the file: Hearth's one session database, which agent sessions
    /// (`hearth agent --session`) share ([`hearth_agent::open_database`] checks and upgrades
    /// it). A file that is not a Hearth session database, or is locked by another writer, is
    /// an error, and nothing in it is overwritten.
    pub fn open(path: &Path) -> Result<Self> {
        let err = |m: String| GraphError::Store {
            path: path.display().to_string(),
            message: m,
        };
        let conn = hearth_agent::open_database(path).map_err(|e| match e {
            hearth_agent::AgentError::Store { message, .. } => err(message),
            other => err(other.to_string()),
        })?;
        // A graph session saves between steps: fail fast rather than stall a run.
        conn.busy_timeout(Duration::from_millis(500))
            .map_err(|e| err(e.to_string()))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS hearth_sessions (
                id TEXT PRIMARY KEY, slices TEXT NOT NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        )
        .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            path: path.into(),
            conn: Mutex::new(conn),
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> GraphError {
        GraphError::Store {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }
}

impl StateStore for SqliteStore {
    fn load(&self, id: &str) -> Result<Option<Map<String, Value>>> {
        let conn = self.conn.lock().map_err(|_| self.err("lock poisoned"))?;
        let row: Option<String> = conn
            .query_row(
                "SELECT slices FROM hearth_sessions WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| {
                if matches!(e, rusqlite::Error::QueryReturnedNoRows) {
                    Ok(None)
                } else {
                    Err(e)
                }
            })
            .map_err(|e| self.err(e))?;
        match row {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| self.err(format!("session `{id}` is corrupt: {e}"))),
        }
    }

    fn save(&self, id: &str, slices: &Map<String, Value>) -> Result<()> {
        let text = serde_json::to_string(slices).map_err(|e| self.err(e))?;
        let mut conn = self.conn.lock().map_err(|_| self.err("lock poisoned"))?;
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        tx.execute(
            "INSERT INTO hearth_sessions (id, slices, updated_at) VALUES (?1, ?2, CURRENT_TIMESTAMP)
             ON CONFLICT(id) DO UPDATE SET slices = excluded.slices, updated_at = CURRENT_TIMESTAMP",
            params![id, text],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    fn delete(&self, id: &str) -> Result<()> {
        let conn = self.conn.lock().map_err(|_| self.err("lock poisoned"))?;
        conn.execute("DELETE FROM hearth_sessions WHERE id = ?1", params![id])
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use serde_json::json;

    #[test]
    fn sqlite_round_trip_and_bad_files() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("sessions.db");
        let s = SqliteStore::open(&path)?;
        let mut slices = Map::new();
        slices.insert("_internal".into(), json!({"turn_count": 2}));
        s.save("a", &slices)?;
        drop(s);
        let s = SqliteStore::open(&path)?;
        assert_eq!(s.load("a")?, Some(slices));
        assert_eq!(s.load("b")?, None);
        s.delete("a")?;
        assert_eq!(s.load("a")?, None);

        let junk = tmp.path().join("junk.db");
        std::fs::write(
            &junk,
            b"this is not a database, just text that is long enough to have a header",
        )?;
        let before = std::fs::read(&junk)?;
        let err = SqliteStore::open(&junk)
            .err()
            .ok_or("opened a non-database")?
            .to_string();
        assert!(
            err.contains("junk.db") && err.contains("not a Hearth session database"),
            "{err}"
        );
        assert_eq!(std::fs::read(&junk)?, before, "nothing overwritten");

        let other = tmp.path().join("other.db");
        Connection::open(&other)?.execute_batch("CREATE TABLE users (id INTEGER)")?;
        let err = SqliteStore::open(&other)
            .err()
            .ok_or("opened a foreign database")?
            .to_string();
        assert!(err.contains("users"), "{err}");
        Ok(())
    }

    #[test]
    fn graph_and_agent_sessions_share_one_file() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let mut slices = Map::new();
        slices.insert("_internal".into(), json!({"turn_count": 1}));
        // Graph first, then the agent store opens the same file, and back.
        let path = tmp.path().join("hearth.db");
        SqliteStore::open(&path)?.save("g", &slices)?;
        let agents = hearth_agent::SessionStore::open(&path)?;
        agents.save("a", &Map::new(), 0)?;
        let graphs = SqliteStore::open(&path)?;
        assert_eq!(graphs.load("g")?, Some(slices.clone()));
        assert_eq!(agents.load("a")?.map(|s| s.turns), Some(1));
        // Agent first.
        let path = tmp.path().join("agents-first.db");
        hearth_agent::SessionStore::open(&path)?.save("a", &Map::new(), 0)?;
        SqliteStore::open(&path)?.save("g", &slices)?;
        assert_eq!(SqliteStore::open(&path)?.load("g")?, Some(slices));
        Ok(())
    }

    #[test]
    fn a_locked_file_is_a_clear_error() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("s.db");
        let s = SqliteStore::open(&path)?;
        let holder = Connection::open(&path)?;
        holder.execute_batch("BEGIN EXCLUSIVE")?;
        let err = s.save("a", &Map::new()).unwrap_err().to_string();
        assert!(err.contains("s.db") && err.contains("locked"), "{err}");
        holder.execute_batch("ROLLBACK")?;
        s.save("a", &Map::new())?;
        Ok(())
    }
}
