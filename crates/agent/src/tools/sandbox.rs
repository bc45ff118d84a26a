//! The sandbox a tool's program runs in: a subprocess (never in process) whose working
//! directory and HOME are the workspace, its environment scrubbed, under resource limits
//! (memory, CPU time, file size, processes), its file access confined to the workspace by
//! bubblewrap where it can start, else by Linux landlock, else not at all (with a warning). A
//! time limit and an output limit bound what comes back.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// What a run printed (each stream kept up to the output limit) and how it ended;
/// `status` is `None` when it ran out of time.
pub(super) struct Run {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    pub(super) status: Option<std::process::ExitStatus>,
}

impl Run {
    /// Stdout then stderr within `max` bytes; when both are long each gets half.
    pub(super) fn text(&self, max: usize) -> String {
        let out_take = self.stdout.len().min(max - self.stderr.len().min(max / 2));
        let err_take = self.stderr.len().min(max - out_take);
        let mut text = cut(&self.stdout, out_take, "stdout");
        text.push_str(&cut(&self.stderr, err_take, "stderr"));
        text
    }
}

/// The first `n` bytes of `bytes` as text (on a character boundary), marked when cut.
fn cut(bytes: &[u8], n: usize, stream: &str) -> String {
    let mut text = String::from_utf8_lossy(&bytes[..n]).into_owned();
    if n < bytes.len() {
        text.push_str(&format!("\n[{stream} truncated]\n"));
    }
    text
}

/// Reads `r` to its end, keeping the first `limit` bytes and discarding the rest, so that a
/// program printing a lot never blocks on a full pipe.
async fn drain<R: AsyncRead + Unpin>(r: Option<R>, limit: usize, kept: &mut Vec<u8>) {
    let Some(mut r) = r else { return };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Runs `cmd` under `limits`, reading both pipes at once; kills its whole process group at
/// the time limit.
pub(super) async fn run(
    mut cmd: Command,
    limits: &Limits,
    timeout: Duration,
    max_output: usize,
) -> std::io::Result<Run> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    limits.apply(&mut cmd);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    // One byte over the limit tells that a stream was cut.
    let limit = max_output + 1;
    let finished = tokio::time::timeout(timeout, async {
        let (_, _, status) = tokio::join!(
            drain(out, limit, &mut stdout),
            drain(err, limit, &mut stderr),
            child.wait()
        );
        status
    })
    .await;
    let status = match finished {
        Ok(status) => Some(status?),
        Err(_) => {
            kill_group(pid);
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            None
        }
    };
    Ok(Run {
        stdout,
        stderr,
        status,
    })
}

/// Kills the process group the child leads (it and whatever it started).
fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0) {
        // SAFETY: a plain syscall; a negative pid names the child's own process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Resource limits set in the child before it executes the program.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) memory: u64,
    pub(super) cpu_seconds: u64,
    pub(super) file_size: u64,
    /// RLIMIT_NPROC counts every task of the user, so the limit is what the user already
    /// runs plus a margin; `None` when that could not be counted.
    pub(super) processes: Option<u64>,
}

impl Limits {
    #[cfg(unix)]
    fn apply(&self, cmd: &mut Command) {
        let limits = *self;
        // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
        // syscalls (setpgid, getrlimit, setrlimit); it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                // Its own process group, so that the time limit kills what it started too.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                set_limit(libc::RLIMIT_AS, limits.memory)?;
                set_limit(libc::RLIMIT_CPU, limits.cpu_seconds)?;
                set_limit(libc::RLIMIT_FSIZE, limits.file_size)?;
                set_limit(libc::RLIMIT_CORE, 0)?;
                set_limit(libc::RLIMIT_NOFILE, 256)?;
                if let Some(n) = limits.processes {
                    set_limit(libc::RLIMIT_NPROC, n)?;
                }
                Ok(())
            });
        }
    }

    #[cfg(not(unix))]
    fn apply(&self, _: &mut Command) {
        tracing::warn!("python tool: resource limits are not supported on this platform");
    }
}

/// Lowers both limits of `resource` to `value` (never raises one).
#[cfg(unix)]
fn set_limit(resource: RlimitResource, value: u64) -> std::io::Result<()> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(resource, &mut cur) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let v = (value as libc::rlim_t).min(cur.rlim_max);
        let new = libc::rlimit {
            rlim_cur: v,
            rlim_max: v,
        };
        if libc::setrlimit(resource, &new) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(all(unix, target_os = "linux", target_env = "gnu"))]
type RlimitResource = libc::__rlimit_resource_t;
#[cfg(all(unix, not(all(target_os = "linux", target_env = "gnu"))))]
type RlimitResource = libc::c_int;

/// Tasks (threads) the current user runs, from /proc; `None` where there is no /proc.
pub(super) fn user_tasks() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let mut n = 0u64;
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            if !e
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                continue;
            }
            if e.metadata().map(|m| m.uid() != uid).unwrap_or(true) {
                continue;
            }
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            n += status
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(1);
        }
        Some(n)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// How the program's file access is confined.
#[derive(Debug)]
pub(super) enum Confinement {
    /// A bubblewrap mount namespace: the workspace read-write, system directories and the
    /// interpreter read-only, a private /tmp, nothing else (no /etc, no /home).
    Bubblewrap(PathBuf),
    /// A landlock ruleset (its file descriptor): the same directories, enforced by the kernel
    /// in the process itself.
    #[cfg(target_os = "linux")]
    Landlock(std::os::fd::OwnedFd),
    /// Not confined: the program can read whatever the user can.
    None,
}

impl Confinement {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Confinement::Bubblewrap(_) => "bubblewrap",
            #[cfg(target_os = "linux")]
            Confinement::Landlock(_) => "landlock",
            Confinement::None => "none",
        }
    }
}

/// System directories the interpreter needs, read-only.
const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"];

#[derive(Debug)]
pub(super) struct Sandbox {
    /// The interpreter's own executable (not a launcher such as a pyenv shim).
    exe: PathBuf,
    /// The system directories that exist, each with its target where it is a symbolic link
    /// (`/lib -> usr/lib`).
    system: Vec<(PathBuf, Option<PathBuf>)>,
    /// Directories the interpreter lives in outside the system directories, read-only.
    read_only: Vec<PathBuf>,
    workspace: PathBuf,
    pub(super) how: Confinement,
}

impl Sandbox {
    /// Finds the interpreter's executable and directories, then the strongest confinement
    /// under which it starts: bubblewrap, else landlock, else none (with a warning).
    pub(super) async fn probe(interpreter: &str, workspace: &Path) -> Result<Sandbox, String> {
        let workspace = workspace
            .canonicalize()
            .map_err(|e| format!("python workspace {}: {e}", workspace.display()))?;
        if !workspace.is_dir() {
            return Err(format!(
                "python workspace {} is not a directory",
                workspace.display()
            ));
        }
        // Asked outside any sandbox: the command may be a launcher that needs the user's
        // environment; what it runs is our own fixed code.
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(interpreter)
                .args([
                    "-I",
                    "-c",
                    "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix)",
                ])
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| format!("cannot start {interpreter}: it did not answer within 30 s"))?
        .map_err(|e| format!("cannot start {interpreter}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines().map(PathBuf::from);
        let exe = match lines.next() {
            Some(exe) if out.status.success() && exe.is_absolute() => exe,
            _ => {
                return Err(format!(
                    "cannot start {interpreter}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let mut read_only: Vec<PathBuf> = Vec::new();
        let real_exe = exe.canonicalize().unwrap_or_else(|_| exe.clone());
        let exe_dirs = [exe.parent(), real_exe.parent()].map(|d| d.map(Path::to_path_buf));
        for dir in lines.map(Some).chain(exe_dirs).flatten() {
            let Ok(dir) = dir.canonicalize() else {
                continue;
            };
            let covered = |d: &Path| {
                SYSTEM_DIRS.iter().any(|s| d.starts_with(s))
                    || read_only.iter().any(|r| d.starts_with(r))
            };
            // Never the root or the whole home: that would undo the confinement.
            if dir.parent().is_none() || covered(&dir) || Some(dir.as_path()) == home().as_deref() {
                continue;
            }
            read_only.push(dir);
        }
        let system = SYSTEM_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .map(|p| {
                let link = std::fs::read_link(&p).ok();
                (p, link)
            })
            .collect();
        let mut sandbox = Sandbox {
            exe,
            system,
            read_only,
            workspace,
            how: Confinement::None,
        };
        if let Some(bwrap) = find_on_path("bwrap") {
            sandbox.how = Confinement::Bubblewrap(bwrap);
            match sandbox.starts().await {
                Ok(()) => return Ok(sandbox),
                Err(e) => tracing::warn!(
                    "python tool: bubblewrap cannot start here ({e}); trying landlock"
                ),
            }
        }
        #[cfg(target_os = "linux")]
        match landlock::ruleset(&sandbox) {
            Ok(fd) => {
                sandbox.how = Confinement::Landlock(fd);
                match sandbox.starts().await {
                    Ok(()) => return Ok(sandbox),
                    Err(e) => {
                        tracing::warn!("python tool: python does not start under landlock ({e})")
                    }
                }
            }
            Err(e) => tracing::debug!("python tool: no landlock: {e}"),
        }
        sandbox.how = Confinement::None;
        tracing::warn!(
            "python tool: neither bubblewrap nor landlock is available, so the program's file \
             access is NOT confined to the workspace {} (install bubblewrap to confine it)",
            sandbox.workspace.display()
        );
        Ok(sandbox)
    }

    /// Whether a trivial program runs under this sandbox.
    async fn starts(&self) -> Result<(), String> {
        let limits = Limits {
            memory: 1 << 30,
            cpu_seconds: 30,
            file_size: 1 << 20,
            processes: None,
        };
        let run = run(
            self.command("print('ok')"),
            &limits,
            Duration::from_secs(30),
            4096,
        )
        .await
        .map_err(|e| e.to_string())?;
        match run.status {
            Some(s) if s.success() && run.stdout == b"ok\n" => Ok(()),
            Some(_) => Err(run.text(4096).trim().to_string()),
            None => Err("it did not finish within 30 s".into()),
        }
    }

    /// The command that runs `code` in this sandbox, with a scrubbed environment.
    pub(super) fn command(&self, code: &str) -> Command {
        let ws = &self.workspace;
        let mut cmd = match &self.how {
            Confinement::Bubblewrap(bwrap) => {
                let mut cmd = Command::new(bwrap);
                cmd.args(["--unshare-all", "--die-with-parent", "--new-session"]);
                cmd.args(["--tmpfs", "/tmp", "--dev", "/dev"]);
                for (dir, link) in &self.system {
                    match link {
                        // /lib -> usr/lib and the like stay links, as on the host.
                        Some(target) => cmd.arg("--symlink").arg(target).arg(dir),
                        None => cmd.arg("--ro-bind").arg(dir).arg(dir),
                    };
                }
                for dir in &self.read_only {
                    cmd.arg("--ro-bind").arg(dir).arg(dir);
                }
                cmd.arg("--bind").arg(ws).arg(ws);
                cmd.arg("--chdir").arg(ws).arg("--").arg(&self.exe);
                cmd.env("TMPDIR", "/tmp");
                cmd
            }
            #[cfg(target_os = "linux")]
            Confinement::Landlock(fd) => {
                let mut cmd = Command::new(&self.exe);
                landlock::restrict(&mut cmd, fd);
                // /tmp is outside what landlock allows.
                cmd.env("TMPDIR", ws);
                cmd
            }
            Confinement::None => Command::new(&self.exe),
        };
        cmd.args(["-I", "-c", code])
            .current_dir(ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", ws)
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("PYTHONIOENCODING", "utf-8")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        cmd
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .and_then(|h| h.canonicalize().ok())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Landlock through its system calls: the ruleset is built in the parent, and the child
/// only enforces it between fork and exec (two syscalls, no allocation).
#[cfg(target_os = "linux")]
pub(super) mod landlock {
    use super::Sandbox;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Path;
    use tokio::process::Command;

    const CREATE_RULESET_VERSION: u32 = 1;
    const RULE_PATH_BENEATH: libc::c_int = 1;
    const EXECUTE: u64 = 1;
    const READ_FILE: u64 = 1 << 2;
    const READ_DIR: u64 = 1 << 3;
    /// Every file-system right of ABI 1 (execute through make-symlink).
    const ABI1_ALL: u64 = (1 << 13) - 1;
    const REFER: u64 = 1 << 13;
    const TRUNCATE: u64 = 1 << 14;

    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
    }

    #[repr(C, packed)]
    struct PathBeneathAttr {
        allowed_access: u64,
        parent_fd: i32,
    }

    /// A ruleset allowing everything in the workspace and reading and executing in the
    /// system and interpreter directories.
    pub(in crate::tools) fn ruleset(sandbox: &Sandbox) -> Result<OwnedFd, String> {
        // SAFETY: the version query takes no pointer.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                CREATE_RULESET_VERSION,
            )
        };
        if abi < 1 {
            return Err(format!(
                "the kernel has no landlock ({})",
                std::io::Error::last_os_error()
            ));
        }
        let mut all = ABI1_ALL;
        if abi >= 2 {
            all |= REFER;
        }
        if abi >= 3 {
            all |= TRUNCATE;
        }
        let attr = RulesetAttr {
            handled_access_fs: all,
        };
        // SAFETY: a pointer to a live struct and its size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(format!(
                "landlock_create_ruleset: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: the syscall returned a new descriptor that nothing else owns.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let read = EXECUTE | READ_FILE | READ_DIR;
        let system = sandbox.system.iter().map(|(dir, _)| dir);
        for dir in system.chain(&sandbox.read_only) {
            add_rule(&ruleset, dir, read)?;
        }
        add_rule(&ruleset, Path::new("/dev/null"), READ_FILE | (1 << 1))?;
        add_rule(&ruleset, &sandbox.workspace, all)?;
        Ok(ruleset)
    }

    fn add_rule(ruleset: &OwnedFd, dir: &Path, access: u64) -> Result<(), String> {
        let file = std::fs::File::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Rights that only make sense on directories are refused on a file.
        let access = if dir.is_dir() {
            access
        } else {
            access & (EXECUTE | READ_FILE | (1 << 1) | TRUNCATE)
        };
        let attr = PathBeneathAttr {
            allowed_access: access,
            parent_fd: file.as_raw_fd(),
        };
        // SAFETY: valid descriptors and a pointer to a live struct.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if r != 0 {
            return Err(format!(
                "landlock_add_rule {}: {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Makes the child enforce `ruleset` before it executes the program.
    pub(super) fn restrict(cmd: &mut Command, ruleset: &OwnedFd) {
        let fd = ruleset.as_raw_fd();
        // SAFETY: between fork and exec, two async-signal-safe syscalls on an inherited fd.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}
