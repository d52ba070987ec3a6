//! Who runs the servers: the caller itself, or, when the caller is root (PostgreSQL refuses to
//! run as root), the `postgres` user if it exists, else `nobody`, through `setpriv`.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::process::Command;

use nix::unistd::{Gid, Uid, User};

/// The user that server programs run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAs {
    /// The calling user, who is not root.
    Caller,
    /// An unprivileged user, switched to with `setpriv` (the caller is root).
    User { uid: Uid, gid: Gid },
}

impl RunAs {
    /// The caller when it is not root, else `postgres`, else `nobody`.
    pub(crate) fn unprivileged() -> io::Result<Self> {
        if !Uid::effective().is_root() {
            return Ok(Self::Caller);
        }
        for name in ["postgres", "nobody"] {
            if let Ok(Some(user)) = User::from_name(name) {
                return Ok(Self::User {
                    uid: user.uid,
                    gid: user.gid,
                });
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "running as root, and neither a `postgres` nor a `nobody` user exists to run the \
             server as (initdb and postgres refuse root)",
        ))
    }

    /// A command that runs `program` as this user.
    pub(crate) fn command(self, program: impl AsRef<OsStr>) -> Command {
        match self {
            Self::Caller => Command::new(program),
            Self::User { uid, gid } => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(program);
                command
            }
        }
    }

    /// Makes `path` this user's (nothing to do for the caller's own).
    pub(crate) fn own(self, path: &Path) -> io::Result<()> {
        match self {
            Self::Caller => Ok(()),
            Self::User { uid, gid } => {
                std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
            }
        }
    }
}
