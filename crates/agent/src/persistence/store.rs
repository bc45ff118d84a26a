//! Agent sessions on disk: one SQLite file holds many named sessions, each an agent's state
//! dict (memory, summary) as JSON with the number of turns it holds.
//!
//! - A save is one transaction: a process killed mid-turn leaves the earlier turns intact
//!   and the interrupted one absent.
//! - A process [`claim`](SessionStore::claim)s a session for as long as it runs; a second
//!   process claiming it fails with the holder's pid. A claim whose process died (`kill -9`)
//!   is taken over. Saves also check the turn count they loaded, so two writers can never
//!   interleave turns even without claims.
//! - The file's schema version is SQLite's `user_version`. A file that is not SQLite, holds
//!   other tables, comes from a newer schema or is read-only is refused before anything in it
//!   is written.

use crate::error::{AgentError, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The schema this build reads and writes: 2 added each session's saved KV cache.
pub const SCHEMA_VERSION: i64 = 2;

/// The graph's sessions (hearth-graph's store), kept in the same file.
const GRAPH_TABLE: &str = "hearth_sessions";

/// A session as it was last saved.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedSession {
    /// The agent's state dict.
    pub state: Map<String, Value>,
    /// Completed turns saved so far.
    pub turns: u64,
}

/// Named agent sessions in one SQLite file (see the module docs).
pub struct SessionStore {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

/// A session held by this process; dropping it lets others take the session.
pub struct SessionClaim {
    name: String,
    token: String,
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

fn store_error(path: &Path, message: impl std::fmt::Display) -> AgentError {
    AgentError::Store {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// Opens Hearth's session database at `path` — one file for agent sessions and graph
/// sessions — creating it (not its folder) if missing and bringing its tables to
/// [`SCHEMA_VERSION`]. A file that is not SQLite, holds tables of something else, comes from
/// a newer schema or is read-only is refused, naming the file, before anything is written.
/// Tables the agent does not own (the graph's `hearth_sessions`, any `graph_*`) are left to
/// their owners.
pub fn open_database(path: &Path) -> Result<Connection> {
    let err = |m: String| store_error(path, m);
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            return Err(err("is not a file".into()));
        }
        // Checked by hand: SQLite would open it read-only without a word, and as root
        // writes would even succeed.
        if meta.permissions().readonly() {
            return Err(err(
                "is read-only; sessions cannot be saved in it (make it writable or use another file)"
                    .into(),
            ));
        }
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| err(format!("cannot open: {e}")))?;
    // Another process saving a turn holds the file for milliseconds: wait for it.
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| err(e.to_string()))?;
    // Reading the header fails on a file that is not SQLite ("file is not a database").
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| err(format!("not a Hearth session database: {e}")))?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut st| st.query_map([], |r| r.get::<_, String>(0))?.collect())
        .map_err(|e| err(format!("not a Hearth session database: {e}")))?;
    if version > SCHEMA_VERSION {
        return Err(err(format!(
            "has schema version {version}, newer than this build reads ({SCHEMA_VERSION}); use a newer Hearth or another file"
        )));
    }
    let foreign: Vec<&str> = tables
        .iter()
        .map(String::as_str)
        .filter(|t| !t.starts_with("agent_") && !t.starts_with("graph_") && *t != GRAPH_TABLE)
        .collect();
    if !foreign.is_empty() {
        return Err(err(format!(
            "holds other tables ({}); refusing to use it as a session store",
            foreign.join(", ")
        )));
    }
    if version < SCHEMA_VERSION {
        // Version 1 had no saved KV caches; every step is idempotent, so a crash half-way
        // leaves a file the next open finishes.
        let has_kv = conn
            .prepare("SELECT 1 FROM pragma_table_info('agent_sessions') WHERE name = 'kv'")
            .and_then(|mut st| st.exists([]))
            .map_err(|e| err(format!("cannot read the session tables: {e}")))?;
        let add_kv = if version == 1 && !has_kv {
            "ALTER TABLE agent_sessions ADD COLUMN kv BLOB;"
        } else {
            ""
        };
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS agent_sessions (
                name TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                turns INTEGER NOT NULL,
                updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
                kv BLOB);
             {add_kv}
             CREATE TABLE IF NOT EXISTS agent_claims (
                name TEXT PRIMARY KEY,
                pid INTEGER NOT NULL,
                token TEXT NOT NULL,
                since TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
             PRAGMA user_version = {SCHEMA_VERSION};
             COMMIT;"
        ))
        .map_err(|e| err(format!("cannot create the session tables: {e}")))?;
    }
    Ok(conn)
}

impl SessionStore {
    /// Opens the file with [`open_database`].
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            path: path.into(),
            conn: Arc::new(Mutex::new(open_database(path)?)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl std::fmt::Display) -> AgentError {
        store_error(&self.path, e)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.conn.lock().map_err(|_| self.err("lock poisoned"))
    }

    /// The session saved under `name`, if any.
    pub fn load(&self, name: &str) -> Result<Option<SavedSession>> {
        let conn = self.lock()?;
        let row: Option<(String, i64)> = conn
            .query_row(
                "SELECT state, turns FROM agent_sessions WHERE name = ?1",
                params![name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((text, turns)) = row else {
            return Ok(None);
        };
        let state = serde_json::from_str(&text)
            .map_err(|e| self.err(format!("session `{name}` is corrupt: {e}")))?;
        Ok(Some(SavedSession {
            state,
            turns: turns.max(0) as u64,
        }))
    }

    /// Saves the state after a completed turn, in one transaction. `loaded_turns` is the turn
    /// count this process loaded (0 for a new session): if another process saved in between,
    /// nothing is written and the error says so. Returns the new turn count.
    pub fn save(&self, name: &str, state: &Map<String, Value>, loaded_turns: u64) -> Result<u64> {
        self.save_with_cache(name, state, loaded_turns, None)
    }

    /// [`SessionStore::save`], with the engine's KV cache of the session as opaque bytes
    /// (`None` forgets an earlier one), in the same transaction.
    pub fn save_with_cache(
        &self,
        name: &str,
        state: &Map<String, Value>,
        loaded_turns: u64,
        kv: Option<&[u8]>,
    ) -> Result<u64> {
        let text = serde_json::to_string(state).map_err(|e| self.err(e))?;
        let mut conn = self.lock()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let now: Option<i64> = tx
            .query_row(
                "SELECT turns FROM agent_sessions WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let found = now.unwrap_or(0).max(0) as u64;
        if found != loaded_turns {
            return Err(self.err(format!(
                "session `{name}` was saved by another process ({found} turns, this one loaded {loaded_turns}); this turn was not saved"
            )));
        }
        let turns = loaded_turns + 1;
        tx.execute(
            "INSERT INTO agent_sessions (name, state, turns, updated_at, kv)
             VALUES (?1, ?2, ?3, CURRENT_TIMESTAMP, ?4)
             ON CONFLICT(name) DO UPDATE SET state = excluded.state, turns = excluded.turns,
                updated_at = CURRENT_TIMESTAMP, kv = excluded.kv",
            params![name, text, turns as i64, kv],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(turns)
    }

    /// The KV cache saved with the session's last turn, if any.
    pub fn load_cache(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let conn = self.lock()?;
        let kv: Option<Option<Vec<u8>>> = conn
            .query_row(
                "SELECT kv FROM agent_sessions WHERE name = ?1",
                params![name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(kv.flatten())
    }

    /// Deletes a saved session; false if there was none.
    pub fn delete(&self, name: &str) -> Result<bool> {
        let conn = self.lock()?;
        let n = conn
            .execute("DELETE FROM agent_sessions WHERE name = ?1", params![name])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Session names, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        let conn = self.lock()?;
        let mut st = conn
            .prepare("SELECT name FROM agent_sessions ORDER BY name")
            .map_err(|e| self.err(e))?;
        let names = st
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e));
        names
    }

    /// Holds `name` for this process until the claim is dropped. Fails, naming the holder,
    /// if a live process holds it; a claim left by a dead process is taken over.
    pub fn claim(&self, name: &str) -> Result<SessionClaim> {
        let pid = std::process::id();
        let token = format!(
            "{pid}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let mut conn = self.lock()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let holder: Option<(i64, String, String)> = tx
            .query_row(
                "SELECT pid, token, since FROM agent_claims WHERE name = ?1",
                params![name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        if let Some((holder_pid, _, since)) = holder {
            if process_alive(holder_pid) {
                return Err(self.err(format!(
                    "session `{name}` is in use by process {holder_pid} (since {since} UTC); wait for it to finish"
                )));
            }
            tracing::warn!(
                "session `{name}`: taking over the claim of process {holder_pid}, which is gone"
            );
        }
        tx.execute(
            "INSERT INTO agent_claims (name, pid, token, since) VALUES (?1, ?2, ?3, CURRENT_TIMESTAMP)
             ON CONFLICT(name) DO UPDATE SET pid = excluded.pid, token = excluded.token,
                since = CURRENT_TIMESTAMP",
            params![name, pid as i64, token],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(SessionClaim {
            name: name.to_string(),
            token,
            path: self.path.clone(),
            conn: self.conn.clone(),
        })
    }
}

impl SessionClaim {
    /// The session held.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for SessionClaim {
    fn drop(&mut self) {
        let Ok(conn) = self.conn.lock() else { return };
        if let Err(e) = conn.execute(
            "DELETE FROM agent_claims WHERE name = ?1 AND token = ?2",
            params![self.name, self.token],
        ) {
            tracing::warn!(
                "{}: could not release session `{}`: {e}",
                self.path.display(),
                self.name
            );
        }
    }
}

/// Whether a process of this machine is running (a process of this test, too).
fn process_alive(pid: i64) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            return false;
        }
        // Signal 0 checks existence; EPERM means it exists under another user.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        // Without a way to ask, a claim is taken as held.
        let _ = pid;
        true
    }
}

#[cfg(test)]
mod tests {
    type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

    use super::*;
    use serde_json::json;

    fn state(n: usize) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("memory".into(), json!(vec!["turn"; n]));
        m
    }

    #[test]
    fn saves_count_turns_and_refuse_a_stale_writer() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("agents.db");
        let a = SessionStore::open(&path)?;
        assert_eq!(a.load("s")?, None);
        assert_eq!(a.save("s", &state(2), 0)?, 1);
        let b = SessionStore::open(&path)?;
        let loaded = b.load("s")?.ok_or("missing")?;
        assert_eq!((loaded.turns, loaded.state), (1, state(2)));
        assert_eq!(b.save("s", &state(4), 1)?, 2);
        // `a` still believes one turn is saved: its save would drop b's turn.
        let err = a.save("s", &state(4), 1).err().ok_or("saved")?.to_string();
        assert!(
            err.contains("agents.db") && err.contains("another process"),
            "{err}"
        );
        assert_eq!(b.load("s")?.ok_or("missing")?.turns, 2);
        assert_eq!(a.names()?, ["s"]);
        assert!(a.delete("s")?);
        assert_eq!(a.load("s")?, None);
        Ok(())
    }

    #[test]
    fn a_claimed_session_is_refused_until_released() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("agents.db");
        let a = SessionStore::open(&path)?;
        let b = SessionStore::open(&path)?;
        let held = a.claim("s")?;
        let err = b.claim("s").err().ok_or("claimed twice")?.to_string();
        assert!(
            err.contains("in use by process") && err.contains(&std::process::id().to_string()),
            "{err}"
        );
        b.claim("other")?;
        drop(held);
        b.claim("s")?;
        // A claim of a process that no longer exists is taken over.
        let conn = Connection::open(&path)?;
        conn.execute(
            "UPDATE agent_claims SET pid = ?1, token = 'dead' WHERE name = 's'",
            params![i32::MAX as i64],
        )?;
        a.claim("s")?;
        Ok(())
    }

    #[test]
    fn bad_files_are_refused_and_left_as_they_were() -> TestResult {
        let tmp = tempfile::tempdir()?;

        let junk = tmp.path().join("junk.db");
        std::fs::write(
            &junk,
            b"not a database, only text long enough to fill a header ...",
        )?;
        let before = std::fs::read(&junk)?;
        let err = SessionStore::open(&junk)
            .err()
            .ok_or("opened junk")?
            .to_string();
        assert!(
            err.contains("junk.db") && err.contains("not a Hearth session database"),
            "{err}"
        );
        assert_eq!(std::fs::read(&junk)?, before);

        let newer = tmp.path().join("newer.db");
        Connection::open(&newer)?.execute_batch("PRAGMA user_version = 7")?;
        let before = std::fs::read(&newer)?;
        let err = SessionStore::open(&newer)
            .err()
            .ok_or("opened newer")?
            .to_string();
        assert!(
            err.contains("newer.db") && err.contains("schema version 7"),
            "{err}"
        );
        assert_eq!(std::fs::read(&newer)?, before);

        let other = tmp.path().join("other.db");
        Connection::open(&other)?.execute_batch("CREATE TABLE users (id INTEGER)")?;
        let err = SessionStore::open(&other)
            .err()
            .ok_or("opened other")?
            .to_string();
        assert!(err.contains("users"), "{err}");

        let ro = tmp.path().join("ro.db");
        SessionStore::open(&ro)?.save("s", &state(1), 0)?;
        let mut perms = std::fs::metadata(&ro)?.permissions();
        perms.set_readonly(true);
        std::fs::set_permissions(&ro, perms)?;
        let before = std::fs::read(&ro)?;
        let err = SessionStore::open(&ro)
            .err()
            .ok_or("opened read-only")?
            .to_string();
        assert!(err.contains("ro.db") && err.contains("read-only"), "{err}");
        assert_eq!(std::fs::read(&ro)?, before);

        // The graph's session table may share the file.
        let shared = tmp.path().join("shared.db");
        Connection::open(&shared)?
            .execute_batch("CREATE TABLE hearth_sessions (id TEXT PRIMARY KEY, slices TEXT)")?;
        SessionStore::open(&shared)?.save("s", &state(1), 0)?;
        Ok(())
    }

    #[test]
    fn the_kv_cache_is_saved_with_its_turn() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("s.db");
        let store = SessionStore::open(&path)?;
        assert_eq!(store.load_cache("s")?, None);
        store.save_with_cache("s", &state(1), 0, Some(b"cache one"))?;
        assert_eq!(store.load_cache("s")?.as_deref(), Some(&b"cache one"[..]));
        // A turn saved without a cache forgets the stale one.
        store.save("s", &state(2), 1)?;
        assert_eq!(store.load_cache("s")?, None);
        // A stale writer writes neither state nor cache.
        assert!(store
            .save_with_cache("s", &state(9), 1, Some(b"stale"))
            .is_err());
        assert_eq!(store.load_cache("s")?, None);
        assert_eq!(store.load("s")?.ok_or("no session")?.turns, 2);
        Ok(())
    }

    #[test]
    fn a_version_1_file_is_upgraded_and_keeps_its_sessions() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("v1.db");
        Connection::open(&path)?.execute_batch(
            "CREATE TABLE agent_sessions (name TEXT PRIMARY KEY, state TEXT NOT NULL,
                turns INTEGER NOT NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
             CREATE TABLE agent_claims (name TEXT PRIMARY KEY, pid INTEGER NOT NULL,
                token TEXT NOT NULL, since TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP);
             INSERT INTO agent_sessions (name, state, turns) VALUES ('old', '{\"memory\":[]}', 3);
             PRAGMA user_version = 1;",
        )?;
        let store = SessionStore::open(&path)?;
        assert_eq!(store.load("old")?.ok_or("lost")?.turns, 3);
        assert_eq!(store.load_cache("old")?, None);
        store.save_with_cache("old", &state(4), 3, Some(b"kv"))?;
        drop(store);
        let version: i64 =
            Connection::open(&path)?.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        assert_eq!(version, SCHEMA_VERSION);
        assert_eq!(
            SessionStore::open(&path)?.load("old")?.ok_or("lost")?.turns,
            4
        );
        Ok(())
    }
}
