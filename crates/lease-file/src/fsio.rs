//! Descriptor-level file work: no symlink is followed, only regular files are accepted, reads are
//! capped, records are replaced by rename and never rewritten in place.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;

use crate::FileLockError;

/// Largest record accepted, in bytes. Anything larger is refused unread past the cap.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

fn no_follow_flags() -> i32 {
    // O_NONBLOCK keeps an open of a FIFO planted at the path from hanging; it has no effect on
    // regular files. std adds O_CLOEXEC itself.
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits()
}

/// Maps an I/O error on `path` to a [`FileLockError`], naming hostile situations clearly.
pub(crate) fn io_error(op: &'static str, path: &Path, source: io::Error) -> FileLockError {
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
        Some(reason) => FileLockError::Hostile {
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
            FileLockError::Io {
                op,
                path: path.to_owned(),
                transient,
                source,
            }
        }
    }
}

fn require_regular(file: &File, path: &Path) -> Result<std::fs::Metadata, FileLockError> {
    let meta = file.metadata().map_err(|e| io_error("fstat", path, e))?;
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(meta);
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(FileLockError::Hostile {
        path: path.to_owned(),
        reason: format!("it is {what}; only regular files are used"),
    })
}

/// Opens (creating it if missing) a companion file that is never deleted: the critical-section
/// lock file and the tenure file. An existing file is opened as it is: one `open` and one
/// `fstat`. A missing one is created with `O_EXCL` and given exactly `mode` by `fchmod`, so the
/// umask never narrows it (a companion another user cannot open breaks a shared lock): one more
/// `open` and an `fchmod`, once per path.
pub(crate) fn open_companion(path: &Path, mode: u32) -> Result<File, FileLockError> {
    // Someone deleting the file between our two opens sends us round again; a few rounds only.
    for _ in 0..8 {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(no_follow_flags())
            .open(path)
        {
            Ok(file) => {
                require_regular(&file, path)?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("open", path, e)),
        }
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(no_follow_flags())
            .open(path)
        {
            Ok(file) => {
                // Never deleted, even if this fails: another process may have opened it already.
                file.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(|e| io_error("chmod", path, e))?;
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_error("create", path, e)),
        }
    }
    Err(FileLockError::Io {
        op: "open",
        path: path.to_owned(),
        transient: true,
        source: io::Error::other("the file keeps being created and deleted by someone else"),
    })
}

/// Gives the regular file at `path` exactly `mode` if this user owns it and its mode differs;
/// best effort (the store's mode probe, created before the store's file mode was set).
pub(crate) fn chmod_if_own(path: &Path, mode: u32) {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(no_follow_flags())
        .open(path)
    else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    if meta.is_file()
        && meta.uid() == nix::unistd::geteuid().as_raw()
        && meta.mode() & 0o7777 != mode
    {
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
    }
}

/// What a record file holds.
#[derive(Debug)]
pub(crate) struct RecordBytes {
    pub(crate) bytes: Vec<u8>,
    pub(crate) inode: (u64, u64),
    pub(crate) modified: Option<std::time::SystemTime>,
}

/// Reads the record at `path`: `None` if there is none. One `open`, one `fstat`, one or two
/// `read`s, one `close`. Refuses links, non-regular files and files over [`MAX_RECORD_BYTES`].
pub(crate) fn read_record_file(path: &Path) -> Result<Option<RecordBytes>, FileLockError> {
    read_capped_file(path, MAX_RECORD_BYTES, "record")
}

/// Reads the regular file at `path` (a `what`, for messages), at most `cap` bytes: `None` if
/// there is none. One `open`, one `fstat`, one or two `read`s, one `close`. Refuses links,
/// non-regular files and files over `cap`, reading no further than one byte past it.
pub(crate) fn read_capped_file(
    path: &Path,
    cap: usize,
    what: &str,
) -> Result<Option<RecordBytes>, FileLockError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(no_follow_flags())
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error("open record", path, e)),
    };
    let meta = require_regular(&file, path)?;
    if meta.len() > cap as u64 {
        return Err(FileLockError::Hostile {
            path: path.to_owned(),
            reason: format!(
                "the {what} is {} bytes; {what}s are at most {cap}",
                meta.len()
            ),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(cap) + 1);
    // Read one byte past the cap so a file that grew after fstat is still refused.
    file.take(cap as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read record", path, e))?;
    if bytes.len() > cap {
        return Err(FileLockError::Hostile {
            path: path.to_owned(),
            reason: format!("the {what} is larger than {cap} bytes"),
        });
    }
    Ok(Some(RecordBytes {
        bytes,
        inode: (meta.dev(), meta.ino()),
        modified: meta.modified().ok(),
    }))
}

/// Replaces `path` atomically with `bytes`: a temporary file in the same directory, created with
/// `O_EXCL|O_NOFOLLOW` and given exactly `mode`, written, optionally fsynced, renamed over
/// `path`. Readers see the old record or the new one, never a partial one.
///
/// Syscalls: `open`, `fchmod`, `write`, (`fsync`), `close`, `rename` (+ directory `fsync`).
pub(crate) fn replace_atomically(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    fsync: bool,
) -> Result<(), FileLockError> {
    let temp = temp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&temp)
            .map_err(|e| io_error("create temporary record", &temp, e))?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_error("chmod temporary record", &temp, e))?;
        file.write_all(bytes)
            .map_err(|e| io_error("write temporary record", &temp, e))?;
        if fsync {
            file.sync_all()
                .map_err(|e| io_error("fsync temporary record", &temp, e))?;
        }
        drop(file);
        std::fs::rename(&temp, path).map_err(|e| io_error("rename record", path, e))?;
        if fsync && let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_error("fsync directory", dir, e))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// `.<name>.<pid>.<nonce>.tmp` next to `path`, the nonce 12 lowercase hex digits: hidden and
/// unique. Built from the name's bytes (not a lossy string, which would give two non-UTF-8
/// names one prefix); [`is_temp_of`] recognises exactly these names.
fn temp_path(path: &Path) -> PathBuf {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}.{}.tmp", std::process::id(), &nonce[..12]));
    path.with_file_name(name)
}

/// Whether `file` is a temporary record of the record named `name`, exactly as [`temp_path`]
/// makes them: `.`, the name, `.`, a decimal pid, `.`, 12 lowercase hex digits, `.tmp`. The pid
/// and nonce hold no dot and the nonce has a fixed length, so one file name matches one record
/// name only: the temporaries of `a.b` are never those of `a`.
pub(crate) fn is_temp_of(file: &OsStr, name: &OsStr) -> bool {
    let Some(rest) = file
        .as_bytes()
        .strip_prefix(b".")
        .and_then(|r| r.strip_prefix(name.as_bytes()))
        .and_then(|r| r.strip_prefix(b"."))
        .and_then(|r| r.strip_suffix(b".tmp"))
    else {
        return false;
    };
    let Some(dot) = rest.iter().position(|b| *b == b'.') else {
        return false;
    };
    let (pid, nonce) = (&rest[..dot], &rest[dot + 1..]);
    !pid.is_empty()
        && pid.iter().all(u8::is_ascii_digit)
        && nonce.len() == 12
        && nonce
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Creates `dir` (and parents) with `mode` if it does not exist.
pub(crate) fn ensure_dir(dir: &Path, mode: u32) -> Result<(), FileLockError> {
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(FileLockError::Hostile {
                path: dir.to_owned(),
                reason: "the lock directory is not a directory".into(),
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

/// `path` with `suffix` appended to its file name.
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_belong_to_one_record_only() {
        for name in ["a", "a.b", "a.b.c", ".a", "x.1.0123456789ab", "a\u{e9}"] {
            let temp = temp_path(&Path::new("/d").join(name));
            let file = temp.file_name().unwrap_or_default();
            for other in [
                "a",
                "a.b",
                "a.b.c",
                ".a",
                "x.1.0123456789ab",
                "x",
                "",
                "a\u{e9}",
            ] {
                assert_eq!(
                    is_temp_of(file, OsStr::new(other)),
                    name == other,
                    "{file:?} of {name:?} vs {other:?}"
                );
            }
        }
        for not_temp in [
            ".a.1.0123456789ab",
            ".a.x.0123456789ab.tmp",
            ".a.1.0123456789AB.tmp",
            ".a.1.0123456789a.tmp",
            ".a..0123456789ab.tmp",
            "a.1.0123456789ab.tmp",
        ] {
            assert!(
                !is_temp_of(OsStr::new(not_temp), OsStr::new("a")),
                "{not_temp}"
            );
        }
    }
}
