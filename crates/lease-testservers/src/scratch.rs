//! The disposable parts of a server: its temporary directory, its port, its log, and running
//! its helper programs with their output kept for the error.

use std::fs::{self, File};
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system's temporary directory, readable by other users (the
/// server's user must reach into it), named after the process so leftovers can be traced.
pub(crate) fn fresh_dir(kind: &str) -> io::Result<PathBuf> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("lease-{kind}-{}-{number}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {
                use std::os::unix::fs::PermissionsExt as _;
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
                return Ok(dir);
            }
            // Left by an earlier process with the same id.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::other(format!(
        "could not create a fresh lease-{kind}-* directory in {}",
        base.display()
    )))
}

/// A free TCP port on 127.0.0.1: bound, read and released (a race with another process taking
/// it in between shows up as a start-up failure with the reason in the server's log).
pub(crate) fn free_loopback_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Runs `command` to its end with stdin closed; a failure is an error that carries the command
/// and its stderr.
pub(crate) fn run(command: &mut Command) -> io::Result<Output> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| io::Error::new(error.kind(), format!("{command:?}: {error}")))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(io::Error::other(format!(
            "{command:?} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}

/// The last `lines` lines of the file at `path` (at most its last 64 KiB are read).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let length = file.metadata()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(64 * 1024)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(could not read {}: {error})", path.display()),
    }
}
