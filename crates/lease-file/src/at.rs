//! Directory-relative file operations: every entry of a lock directory (and of a store's
//! directory) is created, opened, renamed, listed and removed relative to an opened directory,
//! never through a path looked up afresh.
//!
//! * **Unix**: the `*at` system calls on the directory's descriptor (`openat` with
//!   `O_NOFOLLOW`, `mkdirat`, `renameat`, `unlinkat`, `fstatat(AT_SYMLINK_NOFOLLOW)`,
//!   `getdents64` on a kept stream), so replacing the directory's path changes nothing for a
//!   handle already open (the protocol's *Hostile directories*).
//! * **Windows**: no safe `openat` exists (`NtCreateFile` with a `RootDirectory` handle needs
//!   `unsafe`, which this crate forbids), so a [`Dir`] is a path checked to be a directory (not
//!   a reparse point) when opened, and each call joins the entry's name to it and goes through
//!   std, with `FILE_FLAG_OPEN_REPARSE_POINT` so that a symbolic link or junction is opened as
//!   itself and refused, never followed. No directory handle is kept: an open handle would keep
//!   a removed directory in place, delete-pending, until it closed, so a lock directory removed
//!   by hand or by a pruner would linger for every process that had it open. On Windows the
//!   store directory's access control list, not this module, keeps other users out (see the
//!   [platforms](crate::platforms) page, *Windows*).
//!
//! Errors are [`io::Error`]s that keep the system's code, matched by [`io::ErrorKind`]
//! (`NotFound`, `AlreadyExists`, `DirectoryNotEmpty`, `NotADirectory`) or by
//! [`is_link`] where no stable kind exists.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::Path;

/// What kind of entry a name is, its links never followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device (Unix).
    Other,
}

/// An entry's kind and identity, from `fstatat(AT_SYMLINK_NOFOLLOW)` (Unix) or
/// `symlink_metadata` (Windows).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stat {
    pub(crate) kind: EntryKind,
    /// Device and inode numbers on Unix; on Windows, where std gives no stable file index,
    /// `(0, creation time in 100 ns units)`: the same directory always, and a different one
    /// unless made in the same 100 ns at the same path.
    pub(crate) dev_ino: (u64, u64),
}

/// One entry of a listing.
#[derive(Debug)]
pub(crate) struct Listed {
    pub(crate) name: OsString,
    /// Its inode number on Unix; 0 on Windows (unknown).
    pub(crate) ino: u64,
    /// Its kind where the listing says (not every file system's does).
    pub(crate) kind: Option<EntryKind>,
}

/// Whether an error says the name is a symbolic link (or, on Windows, any reparse point), which
/// is never followed.
pub(crate) fn is_link(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        error.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32)
    }
    #[cfg(windows)]
    {
        error.raw_os_error() == Some(windows::ERROR_CANT_RESOLVE_FILENAME)
    }
}

/// Whether an error says the name is a FIFO or socket (`ENXIO` from a non-blocking open of a
/// FIFO without a reader); never on Windows.
pub(crate) fn is_fifo(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        error.raw_os_error() == Some(nix::errno::Errno::ENXIO as i32)
    }
    #[cfg(windows)]
    {
        let _ = error;
        false
    }
}

/// Sets a created file's or directory's permission bits exactly, through its handle (Unix;
/// Windows has none).
///
/// # Errors
/// The system's.
pub(crate) fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    {
        nix::sys::stat::fchmod(file, crate::sys::mode(mode)).map_err(io::Error::from)
    }
    #[cfg(windows)]
    {
        let _ = (file, mode);
        Ok(())
    }
}

/// Whether the effective user owns the file `meta` describes (Unix); on Windows std reads no
/// owner, and this is true.
pub(crate) fn owned_by_me(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::uid(meta) == nix::unistd::geteuid().as_raw()
    }
    #[cfg(windows)]
    {
        let _ = meta;
        true
    }
}

/// The inode number of the file `meta` describes (Unix); 0 (unknown) on Windows.
pub(crate) fn ino(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(windows)]
    {
        let _ = meta;
        0
    }
}

/// Writes all of `bytes` at offset 0 of `file` (`pwrite`; on Windows `WriteFile` at an offset,
/// which moves the file's position too: nothing here reads it).
///
/// # Errors
/// The system's.
pub(crate) fn write_all_at(file: &File, bytes: &[u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, 0)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < bytes.len() {
            let offset = u64::try_from(done).map_err(io::Error::other)?;
            match std::os::windows::fs::FileExt::seek_write(file, &bytes[done..], offset) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// An opened directory: its descriptor (Unix), or its path checked to be a directory
/// (Windows).
#[derive(Debug)]
pub(crate) struct Dir {
    #[cfg(unix)]
    file: File,
    #[cfg(windows)]
    path: std::path::PathBuf,
}

#[cfg(unix)]
mod imp {
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;

    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::Mode;

    use super::{Dir, EntryKind, File, Listed, OsStr, Path, Stat, io};

    /// Flags every directory is opened with: never through a symbolic link, never inherited.
    fn dir_flags() -> OFlag {
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
    }

    fn kind_of(mode: nix::libc::mode_t) -> EntryKind {
        match mode & nix::libc::S_IFMT {
            nix::libc::S_IFREG => EntryKind::File,
            nix::libc::S_IFDIR => EntryKind::Dir,
            nix::libc::S_IFLNK => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }

    impl Dir {
        /// Opens the directory `path`, its last component never through a link.
        pub(crate) fn open_path(path: &Path) -> io::Result<Self> {
            let fd = nix::fcntl::open(path, dir_flags(), Mode::empty())?;
            Ok(Self {
                file: File::from(fd),
            })
        }

        /// Opens the directory `name` in this one, never through a link.
        pub(crate) fn open_dir(&self, name: &OsStr) -> io::Result<Self> {
            let fd = nix::fcntl::openat(self.file.as_fd(), name, dir_flags(), Mode::empty())?;
            Ok(Self {
                file: File::from(fd),
            })
        }

        /// Makes the directory `name` with `mode` (less the umask).
        pub(crate) fn mkdir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
            Ok(nix::sys::stat::mkdirat(
                self.file.as_fd(),
                name,
                crate::sys::mode(mode),
            )?)
        }

        /// The kind and identity of the entry `name`, a link not followed.
        pub(crate) fn stat(&self, name: &OsStr) -> io::Result<Stat> {
            let stat =
                nix::sys::stat::fstatat(self.file.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
            Ok(Stat {
                kind: kind_of(stat.st_mode),
                dev_ino: crate::sys::dev_ino(&stat),
            })
        }

        /// Renames the entry `from` to `to`, both in this directory: one `renameat`, which
        /// fails with `ENOENT` if `from` is gone.
        pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
            Ok(nix::fcntl::renameat(
                self.file.as_fd(),
                from,
                self.file.as_fd(),
                to,
            )?)
        }

        /// Removes the file `name`.
        pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
            Ok(nix::unistd::unlinkat(
                self.file.as_fd(),
                name,
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )?)
        }

        /// Removes the directory `name` if it is empty.
        pub(crate) fn rmdir(&self, name: &OsStr) -> io::Result<()> {
            Ok(nix::unistd::unlinkat(
                self.file.as_fd(),
                name,
                nix::unistd::UnlinkatFlags::RemoveDir,
            )?)
        }

        /// Opens the file `name` for reading, never through a link, never blocking on a FIFO.
        pub(crate) fn open_read(&self, name: &OsStr) -> io::Result<File> {
            self.open_flags(name, OFlag::O_RDONLY)
        }

        /// Opens the file `name` for writing, never through a link, never blocking on a FIFO,
        /// never creating it.
        pub(crate) fn open_write(&self, name: &OsStr) -> io::Result<File> {
            self.open_flags(name, OFlag::O_WRONLY)
        }

        fn open_flags(&self, name: &OsStr, access: OFlag) -> io::Result<File> {
            let flags = access | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::openat(self.file.as_fd(), name, flags, Mode::empty())?;
            Ok(File::from(fd))
        }

        /// Creates the file `name` for writing, failing if anything is there
        /// (`O_CREAT|O_EXCL|O_NOFOLLOW`), with `mode` less the umask.
        pub(crate) fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::openat(self.file.as_fd(), name, flags, crate::sys::mode(mode))?;
            Ok(File::from(fd))
        }

        /// Another handle of this directory, sharing its open file description.
        pub(crate) fn try_clone(&self) -> io::Result<Self> {
            Ok(Self {
                file: self.file.try_clone()?,
            })
        }

        /// The open directory (its kernel lock, its descriptor to share).
        pub(crate) fn file(&self) -> &File {
            &self.file
        }

        /// `fstat` of the directory.
        pub(crate) fn metadata(&self) -> io::Result<std::fs::Metadata> {
            self.file.metadata()
        }

        /// `fsync` of the directory: its entries' names are on disk once it returns.
        pub(crate) fn sync(&self) -> io::Result<()> {
            self.file.sync_all()
        }

        /// The directory's descriptor.
        pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.file.as_fd()
        }

        /// Gives the directory `mode` exactly (`fchmod`).
        pub(crate) fn set_mode(&self, mode: u32) -> io::Result<()> {
            super::set_mode(&self.file, mode)
        }

        /// Tries the kernel lock on the directory (`flock(LOCK_EX|LOCK_NB)`).
        pub(crate) fn try_lock(&self) -> Result<(), std::fs::TryLockError> {
            self.file.try_lock()
        }

        /// Waits for the kernel lock on the directory (`flock(LOCK_EX)`).
        pub(crate) fn lock(&self) -> io::Result<()> {
            self.file.lock()
        }

        /// Drops the kernel lock on the directory.
        pub(crate) fn unlock(&self) -> io::Result<()> {
            self.file.unlock()
        }
    }

    /// A directory stream, kept and rewound between listings: a listing is then `getdents64`
    /// twice and an `lseek`, instead of also opening, checking and closing a stream each time.
    #[derive(Debug)]
    pub(crate) struct Stream(nix::dir::Dir);

    impl Stream {
        /// A stream on a duplicate of `dir`: the duplicate shares the open file description
        /// (and so its kernel lock, which closing the duplicate never drops while `dir` is
        /// open).
        pub(crate) fn new(dir: &Dir) -> io::Result<Self> {
            Self::from_dir(dir.try_clone()?)
        }

        /// A stream on `dir` itself.
        pub(crate) fn from_dir(dir: Dir) -> io::Result<Self> {
            Ok(Self(nix::dir::Dir::from_fd(dir.file.into())?))
        }

        /// Calls `each` with every entry but `.` and `..`, from the directory's start.
        pub(crate) fn each<E>(
            &mut self,
            mut each: impl FnMut(Listed) -> Result<(), E>,
            error: impl Fn(io::Error) -> E,
        ) -> Result<(), E> {
            // The iterator rewinds the stream when dropped, so every listing reads the
            // directory afresh from its start.
            for entry in self.0.iter() {
                let entry = entry.map_err(|e| error(e.into()))?;
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let kind = entry.file_type().map(|kind| match kind {
                    nix::dir::Type::File => EntryKind::File,
                    nix::dir::Type::Directory => EntryKind::Dir,
                    nix::dir::Type::Symlink => EntryKind::Symlink,
                    _ => EntryKind::Other,
                });
                each(Listed {
                    name: OsStr::from_bytes(name).to_owned(),
                    ino: entry.ino(),
                    kind,
                })?;
            }
            Ok(())
        }
    }
}

#[cfg(windows)]
pub(crate) mod windows {
    //! The Win32 values used here, with their documented meaning.

    /// `FILE_FLAG_BACKUP_SEMANTICS`: needed to open a directory at all (CreateFileW,
    /// *Directories*).
    pub(crate) const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;
    /// `FILE_FLAG_OPEN_REPARSE_POINT`: a reparse point (symbolic link, junction) is opened as
    /// itself, never followed (CreateFileW, *Symbolic link behavior*).
    pub(crate) const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
    /// `ERROR_CANT_RESOLVE_FILENAME` (1921), "The name of the file cannot be resolved by the
    /// system": what this module reports for a link it refuses to follow.
    pub(crate) const ERROR_CANT_RESOLVE_FILENAME: i32 = 1921;
    /// `ERROR_SHARING_VIOLATION` (32): another handle's share mode refuses this access.
    pub(crate) const ERROR_SHARING_VIOLATION: i32 = 32;
    /// `ERROR_LOCK_VIOLATION` (33): a byte range another handle locked.
    pub(crate) const ERROR_LOCK_VIOLATION: i32 = 33;
}

#[cfg(windows)]
mod imp {
    use std::fs::OpenOptions;
    use std::os::windows::fs::{MetadataExt, OpenOptionsExt};

    use super::windows::{
        ERROR_CANT_RESOLVE_FILENAME, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    };
    use super::{Dir, EntryKind, File, Listed, OsStr, Path, Stat, io};

    fn link_refused() -> io::Error {
        io::Error::from_raw_os_error(ERROR_CANT_RESOLVE_FILENAME)
    }

    fn kind_of(meta: &std::fs::Metadata) -> EntryKind {
        let kind = meta.file_type();
        if kind.is_symlink() {
            EntryKind::Symlink
        } else if kind.is_dir() {
            EntryKind::Dir
        } else if kind.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        }
    }

    /// Refuses an opened handle that is a reparse point, or not of the kind wanted.
    fn checked(file: File, dir: bool) -> io::Result<File> {
        let meta = file.metadata()?;
        match kind_of(&meta) {
            EntryKind::Symlink => Err(link_refused()),
            EntryKind::Dir if !dir => Err(io::Error::from(io::ErrorKind::IsADirectory)),
            EntryKind::Dir => Ok(file),
            _ if dir => Err(io::Error::from(io::ErrorKind::NotADirectory)),
            _ => Ok(file),
        }
    }

    /// Opens the directory at `path` (a reparse point refused) to check it, then closes it.
    fn open_dir_at(path: &Path) -> io::Result<Dir> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
            .open(path)?;
        checked(file, true)?;
        Ok(Dir {
            path: path.to_owned(),
        })
    }

    impl Dir {
        /// Opens the directory `path`, a link at it refused.
        pub(crate) fn open_path(path: &Path) -> io::Result<Self> {
            open_dir_at(path)
        }

        /// Opens the directory `name` in this one, a link refused.
        pub(crate) fn open_dir(&self, name: &OsStr) -> io::Result<Self> {
            open_dir_at(&self.path.join(name))
        }

        /// Makes the directory `name` (no permission bits on Windows).
        pub(crate) fn mkdir(&self, name: &OsStr, _mode: u32) -> io::Result<()> {
            std::fs::create_dir(self.path.join(name))
        }

        /// The kind and identity of the entry `name`, a link not followed.
        pub(crate) fn stat(&self, name: &OsStr) -> io::Result<Stat> {
            let meta = std::fs::symlink_metadata(self.path.join(name))?;
            Ok(Stat {
                kind: kind_of(&meta),
                dev_ino: (0, meta.creation_time()),
            })
        }

        /// Renames the entry `from` to `to`, both in this directory (std's `rename`:
        /// `MoveFileExW`). Not a compare-and-swap on its own on Windows: see
        /// [`KeyDir::swap`](crate::state::KeyDir::swap).
        pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
            std::fs::rename(self.path.join(from), self.path.join(to))
        }

        /// Removes the file `name`.
        pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
            std::fs::remove_file(self.path.join(name))
        }

        /// Removes the directory `name` if it is empty.
        pub(crate) fn rmdir(&self, name: &OsStr) -> io::Result<()> {
            std::fs::remove_dir(self.path.join(name))
        }

        /// Opens the file `name` for reading, a link refused.
        pub(crate) fn open_read(&self, name: &OsStr) -> io::Result<File> {
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
                .open(self.path.join(name))?;
            checked(file, false)
        }

        /// Opens the file `name` for writing, a link refused, never creating it.
        pub(crate) fn open_write(&self, name: &OsStr) -> io::Result<File> {
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
                .open(self.path.join(name))?;
            checked(file, false)
        }

        /// Creates the file `name` for writing, failing if anything is there (`CREATE_NEW`).
        pub(crate) fn create_new(&self, name: &OsStr, _mode: u32) -> io::Result<File> {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
                .open(self.path.join(name))
        }

        /// The same directory.
        pub(crate) fn try_clone(&self) -> io::Result<Self> {
            Ok(Self {
                path: self.path.clone(),
            })
        }

        /// The directory's metadata, read by path (a reparse point not followed).
        pub(crate) fn metadata(&self) -> io::Result<std::fs::Metadata> {
            std::fs::symlink_metadata(&self.path)
        }

        /// Nothing: `FlushFileBuffers` needs a handle with write access, which a directory
        /// cannot be opened with, and NTFS journals its directory entries itself.
        #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
        pub(crate) fn sync(&self) -> io::Result<()> {
            Ok(())
        }

        /// Nothing: Windows has no permission bits.
        #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
        pub(crate) fn set_mode(&self, _mode: u32) -> io::Result<()> {
            Ok(())
        }

        /// Refused: no kernel mode on Windows (see [`crate::mode`]).
        #[allow(clippy::unused_self)]
        pub(crate) fn try_lock(&self) -> Result<(), std::fs::TryLockError> {
            Err(std::fs::TryLockError::Error(io::ErrorKind::Unsupported.into()))
        }

        /// Refused: no kernel mode on Windows.
        #[allow(clippy::unused_self)]
        pub(crate) fn lock(&self) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }

        /// Nothing to drop.
        #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
        pub(crate) fn unlock(&self) -> io::Result<()> {
            Ok(())
        }

        /// The file `name` in this directory, opened for reading and writing and created if
        /// missing: the lock directory's `cas` file, which is only ever locked, never read.
        pub(crate) fn open_or_create(&self, name: &OsStr) -> io::Result<File> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
                .open(self.path.join(name))?;
            checked(file, false)
        }
    }

    /// A listing: `FindFirstFileW`/`FindNextFileW` through std's `read_dir`, afresh each time.
    #[derive(Debug)]
    pub(crate) struct Stream(std::path::PathBuf);

    impl Stream {
        /// A listing of `dir`.
        pub(crate) fn new(dir: &Dir) -> io::Result<Self> {
            Ok(Self(dir.path.clone()))
        }

        /// A listing of `dir`.
        pub(crate) fn from_dir(dir: Dir) -> io::Result<Self> {
            Ok(Self(dir.path))
        }

        /// Calls `each` with every entry.
        pub(crate) fn each<E>(
            &mut self,
            mut each: impl FnMut(Listed) -> Result<(), E>,
            error: impl Fn(io::Error) -> E,
        ) -> Result<(), E> {
            for entry in std::fs::read_dir(&self.0).map_err(&error)? {
                let entry = entry.map_err(&error)?;
                let kind = entry.file_type().ok().map(|kind| {
                    if kind.is_symlink() {
                        EntryKind::Symlink
                    } else if kind.is_dir() {
                        EntryKind::Dir
                    } else if kind.is_file() {
                        EntryKind::File
                    } else {
                        EntryKind::Other
                    }
                });
                each(Listed {
                    name: entry.file_name(),
                    ino: 0,
                    kind,
                })?;
            }
            Ok(())
        }
    }
}

pub(crate) use imp::Stream;

impl Dir {
    /// Whether the entry `name` exists (as anything; a link not followed).
    ///
    /// # Errors
    /// The system's, other than "not found".
    pub(crate) fn exists(&self, name: &OsStr) -> io::Result<bool> {
        match self.stat(name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}
