//! Error mapping and directory creation shared by the protocol's file work.

use std::io;
use std::path::{Path, PathBuf};

use crate::at::{self, Dir};
use crate::error::FsError;

/// Largest record accepted, in bytes. Anything larger is refused unread past the cap.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Maps an I/O error on `path` to a [`FsError`]: a file of the wrong kind in the lock's place
/// is hostile (its errno says all there is to say); anything else, a permission denied
/// included, is I/O with the OS error as its source.
pub(crate) fn io_error(op: &'static str, path: &Path, source: io::Error) -> FsError {
    let hostile = if at::is_link(&source) {
        Some("it is a symbolic link; links are never followed")
    } else if source.kind() == io::ErrorKind::IsADirectory {
        Some("it is a directory, not a regular file")
    } else if at::is_fifo(&source) {
        Some("it is a FIFO or socket, not a regular file")
    } else {
        None
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
            ) || transient_code(&source);
            FsError::Io {
                op,
                path: path.to_owned(),
                transient,
                source,
            }
        }
    }
}

/// Whether the system's code says the error may pass: out of space or locks, an I/O error or
/// a stale handle (Unix); another handle's share mode or byte-range lock (Windows).
fn transient_code(source: &io::Error) -> bool {
    #[cfg(unix)]
    {
        use nix::errno::Errno;
        matches!(
            source.raw_os_error().map(Errno::from_raw),
            Some(Errno::EAGAIN | Errno::ENOSPC | Errno::EIO | Errno::ESTALE | Errno::ENOLCK)
        )
    }
    #[cfg(windows)]
    {
        use crate::at::windows::{ERROR_LOCK_VIOLATION, ERROR_SHARING_VIOLATION};
        matches!(
            source.raw_os_error(),
            Some(ERROR_SHARING_VIOLATION | ERROR_LOCK_VIOLATION)
        )
    }
}

/// A directory opened once (a store's directory, a `FileLock`'s parent), that every entry in it
/// is created, opened, renamed and removed relative to: replacing its path afterwards (by a
/// symbolic link, or another directory) changes nothing for this handle.
#[derive(Debug)]
pub(crate) struct Base {
    path: PathBuf,
    dir: Dir,
    shared: bool,
}

impl Base {
    /// Opens `path` (the current directory for an empty path), creating it and its missing
    /// parents with `create` when given, and checks who can change it: see [`trusted`].
    pub(crate) fn open(path: &Path, create: Option<u32>, shared: bool) -> Result<Self, FsError> {
        let shown = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let dir = open_dir(shown, create)?;
        let meta = dir.metadata().map_err(|e| io_error("fstat", shown, e))?;
        trusted(shown, &meta, shared, "directory")?;
        Ok(Self {
            path: path.to_owned(),
            dir,
            shared,
        })
    }

    /// The directory's path, as given (for messages: operations never go through it).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of the entry `name`, for messages.
    pub(crate) fn join(&self, name: &std::ffi::OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// The directory's descriptor.
    #[cfg(unix)]
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dir.fd()
    }

    /// The open directory, for operations on its entries.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Whether other users were allowed to change it (`with_shared_directory`).
    pub(crate) fn shared(&self) -> bool {
        self.shared
    }
}

/// Opens the directory `path`, its last component never through a link; when it is missing
/// and `create` says with which mode, its missing components are made one by one, each with
/// `mkdirat` relative to its opened parent and then opened with `O_NOFOLLOW`.
fn open_dir(path: &Path, create: Option<u32>) -> Result<Dir, FsError> {
    match Dir::open_path(path) {
        Ok(dir) => Ok(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create.is_some() => {
            let (Some(name), Some(parent)) = (path.file_name(), path.parent()) else {
                return Err(io_error("open directory", path, e));
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let parent_dir = open_dir(parent, create)?;
            let mode = create.unwrap_or(0o755);
            match parent_dir.mkdir(name, mode) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_error("create directory", path, e)),
            }
            parent_dir.open_dir(name).map_err(|e| dir_error(path, e))
        }
        Err(e) => Err(dir_error(path, e)),
    }
}

fn dir_error(path: &Path, e: io::Error) -> FsError {
    if e.kind() == io::ErrorKind::NotADirectory {
        FsError::NotADirectory {
            path: path.to_owned(),
        }
    } else {
        io_error("open directory", path, e)
    }
}

/// Whether a directory with metadata `meta` can only be changed by the caller and root, the
/// way OpenSSH's `StrictModes` judges a home directory: owned by the caller or root, and not
/// writable by group or others unless sticky (where others can add entries but never rename or
/// remove the caller's). With `shared` (the caller's explicit opt-in), any owner and a
/// group-writable mode are accepted; a directory anyone can write without the sticky bit never
/// is.
///
/// # Errors
/// [`FsError::InvalidOption`] naming `path`, its owner and mode, and how to allow it.
#[cfg(unix)]
pub(crate) fn trusted(
    path: &Path,
    meta: &std::fs::Metadata,
    shared: bool,
    what: &str,
) -> Result<(), FsError> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    let owner_ok = meta.uid() == me || meta.uid() == 0;
    let world = mode & 0o002 != 0 && !sticky;
    let group = mode & 0o020 != 0 && !sticky;
    let ok = if shared {
        !world
    } else {
        owner_ok && !world && !group
    };
    if ok {
        return Ok(());
    }
    let owner = nix::unistd::User::from_uid(meta.uid().into())
        .ok()
        .flatten()
        .map_or_else(
            || format!("uid {}", meta.uid()),
            |u| format!("{} (uid {})", u.name, meta.uid()),
        );
    let why = if world {
        "anyone can rename or remove its entries (world-writable, not sticky); no opt-in \
         accepts that: make it sticky (chmod +t) or not world-writable"
            .to_owned()
    } else {
        "another user can rename or remove its entries, and so release or deny the leases in \
         it; if every user who can change it is trusted, allow it with \
         with_shared_directory() (lease: --shared-dir)"
            .to_owned()
    };
    Err(FsError::InvalidOption {
        option: "shared_directory",
        reason: format!(
            "{what} {} is owned by {owner} with mode {mode:04o}: {why}",
            path.display()
        ),
    })
}

/// On Windows a directory's access control list, not permission bits, says who can change it,
/// and std reads no ACL: the store directory's ACL is the user's to set (a directory in the
/// user's profile admits only that user, SYSTEM and administrators). See the
/// [platforms](crate::platforms) page, *Windows*.
///
/// # Errors
/// Never.
#[cfg(windows)]
pub(crate) fn trusted(
    _path: &Path,
    _meta: &std::fs::Metadata,
    _shared: bool,
    _what: &str,
) -> Result<(), FsError> {
    Ok(())
}
