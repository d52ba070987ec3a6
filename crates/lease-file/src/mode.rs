//! Whether kernel locks work where the locks live.

use std::path::Path;

use crate::error::FsError;
use crate::fsio::Base;

/// How a lock keeps its critical sections and its tenure, as detected (or forced) for its
/// directory: [`FileLock::mode`](crate::FileLock::mode), [`DirectoryStore::mode`](crate::DirectoryStore::mode).
///
/// ```
/// use lease_file::{DirectoryStore, LockMode, ModePreference};
///
/// let dir = tempfile::tempdir()?;
/// let store = DirectoryStore::builder(dir.path())
///     .with_mode(ModePreference::HeartbeatOnly)
///     .build()?;
/// assert_eq!(store.mode(), LockMode::HeartbeatOnly);
/// assert_eq!(store.mode().to_string(), "heartbeat-only");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockMode {
    /// `flock` works here: the holder keeps a kernel lock on the lock directory for its whole
    /// tenure (and says so in the state), so a contender on this host notices a crashed holder at
    /// once, and a waiter is woken by the kernel.
    Kernel,
    /// `flock` does not work (or is not trusted) here, such as on NFS or SMB: a crashed holder's
    /// lease ends when its duration runs out. Safety is the same in both modes: it rests on the
    /// rename compare-and-swap, never on the kernel lock.
    HeartbeatOnly,
}

impl LockMode {
    /// The name written into records' `protocol` field, and shown by [`Display`](std::fmt::Display).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::HeartbeatOnly => "heartbeat-only",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which mode to use ([`FileLockBuilder::with_mode`](crate::FileLockBuilder::with_mode),
/// [`DirectoryStoreBuilder::with_mode`](crate::DirectoryStoreBuilder::with_mode)); the
/// protocol's [*Modes*](crate::protocol#modes) say what each gives up.
///
/// ```
/// use lease_file::{FileLock, ModePreference};
///
/// let dir = tempfile::tempdir()?;
/// // Kernel locks or an error: on NFS this fails instead of falling back.
/// let lock = FileLock::builder(dir.path().join("a.lease"))
///     .with_mode(ModePreference::Kernel)
///     .build()?;
/// # let _ = lock;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModePreference {
    /// Kernel locks where they work, heartbeat-only elsewhere (the default).
    #[default]
    Auto,
    /// Kernel locks or an error: never fall back.
    Kernel,
    /// Heartbeat-only even where kernel locks work (for tests, or mixed fleets where some
    /// contenders reach the directory over NFS).
    HeartbeatOnly,
}

/// Decides the mode for locks in `dir`, probing `flock` on the directory itself.
pub(crate) fn detect(
    base: &Base,
    preference: ModePreference,
) -> Result<(LockMode, String), FsError> {
    let dir = base.path();
    let probe = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if preference == ModePreference::HeartbeatOnly {
        return Ok((
            LockMode::HeartbeatOnly,
            "heartbeat-only mode requested".into(),
        ));
    }
    let fallback = |reason: String, source: Option<std::io::Error>| match preference {
        ModePreference::Kernel => Err(FsError::Unsupported {
            path: probe.to_owned(),
            reason,
            source,
        }),
        _ => {
            let error = source.as_ref().map(ToString::to_string).unwrap_or_default();
            tracing::warn!(path = %probe.display(), %reason, %error, "kernel locks unusable; heartbeat-only mode");
            Ok((LockMode::HeartbeatOnly, reason))
        }
    };
    // Not a fallback on Windows but the design (no warning): every lock is heartbeat-only.
    #[cfg(windows)]
    {
        let _ = (base, fallback);
        let reason = "kernel mode is not ported to Windows: every lock there is heartbeat-only \
                      (see the platforms page, Windows)";
        match preference {
            ModePreference::Kernel => Err(FsError::Unsupported {
                path: probe.to_owned(),
                reason: reason.to_owned(),
                source: None,
            }),
            _ => Ok((LockMode::HeartbeatOnly, reason.to_owned())),
        }
    }
    #[cfg(unix)]
    probe_unix(base, probe, fallback)
}

/// The probe on Unix: a network file system falls back; elsewhere `flock` on a second open
/// file description of the directory says.
#[cfg(unix)]
fn probe_unix(
    base: &Base,
    probe: &Path,
    fallback: impl Fn(String, Option<std::io::Error>) -> Result<(LockMode, String), FsError>,
) -> Result<(LockMode, String), FsError> {
    use std::fs::TryLockError;

    use nix::errno::Errno;
    use nix::fcntl::OFlag;

    use crate::fsio::io_error;

    if let Some(kind) = crate::sys::network_file_system(base.fd()) {
        return fallback(
            format!(
                "{kind} file system: flock is not reliable across hosts there (force \
                 ModePreference::Kernel if every contender runs on this host)"
            ),
            None,
        );
    }
    // A second open file description of the directory: its lock is its own, and never the
    // base descriptor's.
    let file = nix::fcntl::openat(
        base.fd(),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map(std::fs::File::from)
    .map_err(|e| io_error("open directory", probe, e.into()))?;
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            Ok((LockMode::Kernel, "flock works".into()))
        }
        Err(TryLockError::WouldBlock) => Ok((LockMode::Kernel, "flock works (held)".into())),
        Err(TryLockError::Error(e)) => match e.raw_os_error().map(Errno::from_raw) {
            Some(Errno::ENOLCK | Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => {
                fallback("flock failed".to_owned(), Some(e))
            }
            _ => Err(io_error("probe flock", probe, e)),
        },
    }
}
