//! Error mapping and directory creation shared by the protocol's file work.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::errno::Errno;

use crate::error::FsError;

/// Largest record accepted, in bytes. Anything larger is refused unread past the cap.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Maps an I/O error on `path` to a [`FsError`], naming hostile situations clearly.
pub(crate) fn io_error(op: &'static str, path: &Path, source: io::Error) -> FsError {
    let hostile = match source.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ELOOP) => Some("it is a symbolic link; links are never followed".to_owned()),
        Some(Errno::EISDIR) => Some("it is a directory, not a regular file".to_owned()),
        Some(Errno::ENXIO) => Some("it is a FIFO or socket, not a regular file".to_owned()),
        Some(Errno::EACCES | Errno::EPERM) => Some(format!(
            "permission denied ({source}); check the file and directory modes"
        )),
        _ => None,
    };
    match hostile {
        Some(reason) => FsError::Hostile {
            path: path.to_owned(),
            reason: format!("{op}: {reason}"),
        },
        None => {
            let transient = matches!(
                source.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) || matches!(
                source.raw_os_error().map(Errno::from_raw),
                Some(Errno::EAGAIN | Errno::ENOSPC | Errno::EIO | Errno::ESTALE | Errno::ENOLCK)
            );
            FsError::Io {
                op,
                path: path.to_owned(),
                transient,
                source,
            }
        }
    }
}

/// Creates `dir` (and parents) with `mode` if it does not exist.
pub(crate) fn ensure_dir(dir: &Path, mode: u32) -> Result<(), FsError> {
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(meta) if meta.is_symlink() => {
            return Err(FsError::Hostile {
                path: dir.to_owned(),
                reason: "the lock directory is a symbolic link; links are never followed".into(),
            });
        }
        Ok(_) => {
            return Err(FsError::NotADirectory {
                path: dir.to_owned(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("stat directory", dir, e)),
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| io_error("create directory", dir, e))
}
