//! A server process whose life is tied to its parent's: it runs under a shell whose stdin is a
//! pipe only the parent writes to, and a watcher in that shell stops the server when the pipe
//! reaches end of file. So the server stops when the parent drops its [`Supervised`] and also
//! when the parent is killed outright (`SIGKILL`), where no `Drop` runs.

use std::fs::File;
use std::io;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Runs `"$@"` (the server) and exits with its status. The watcher sends `$1` (a signal name)
/// to the server at end of file on fd 3 (the pipe: background jobs of a non-interactive shell
/// read /dev/null, hence stdin is kept as fd 3). When the server ends first, the watcher is
/// killed before it could signal a process id the system may have handed out again.
const SUPERVISOR: &str = r#"signal=$1; shift; exec 3<&0
"$@" </dev/null & server=$!
(cat <&3 >/dev/null; kill -s "$signal" "$server" 2>/dev/null) & watcher=$!
wait "$server"; status=$?
kill "$watcher" 2>/dev/null
exit "$status""#;

/// A server started under the supervisor shell.
#[derive(Debug)]
pub(crate) struct Supervised {
    // A mutex so that a cluster's `&self` methods can see whether the server has ended.
    shell: Mutex<Child>,
}

impl Supervised {
    /// Starts `server` (a program and its arguments, already set to run as the right user and in
    /// the right directory) under the supervisor, its output appended to `log`; `on_orphan` is
    /// the signal (`QUIT`, `TERM`, ...) the server gets when this process goes away.
    pub(crate) fn spawn(server: &Command, on_orphan: &str, log: &Path) -> io::Result<Self> {
        let log = File::options().create(true).append(true).open(log)?;
        let mut shell = Command::new("sh");
        shell
            .args(["-c", SUPERVISOR, "supervisor", on_orphan])
            .arg(server.get_program())
            .args(server.get_args())
            .stdin(Stdio::piped())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(dir) = server.get_current_dir() {
            shell.current_dir(dir);
        }
        for (name, value) in server.get_envs() {
            match value {
                Some(value) => shell.env(name, value),
                None => shell.env_remove(name),
            };
        }
        Ok(Self {
            shell: Mutex::new(shell.spawn()?),
        })
    }

    /// The server's exit status if it has ended.
    pub(crate) fn try_wait(&self) -> io::Result<Option<ExitStatus>> {
        self.shell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_wait()
    }

    /// Waits up to `timeout` for the server to end; `None` if it is still running then.
    pub(crate) fn wait_timeout(&self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            sleep(Duration::from_millis(10));
        }
    }

    /// Closes the pipe (the watcher signals the server), waits up to `timeout` for the end, and
    /// kills the shell if it is still there then.
    pub(crate) fn release(self, timeout: Duration) {
        let mut shell = self
            .shell
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        drop(shell.stdin.take());
        let deadline = Instant::now() + timeout;
        while matches!(shell.try_wait(), Ok(None)) && Instant::now() < deadline {
            sleep(Duration::from_millis(10));
        }
        // Kill fails only when the shell is gone already, which is what we want.
        let _ = shell.kill();
        let _ = shell.wait();
    }
}
