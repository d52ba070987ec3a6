//! The crate's private error type, and its one mapping into lease-core's [`LeaseError`].

use std::path::PathBuf;
use std::time::Duration;

use lease_core::{Holder, LeaseError, LeaseKey, NotOwnedReason};

/// What the file machinery reports, before it becomes a [`LeaseError`] at the public surface
/// ([`FsError::into_lease`] for a [`FileLock`](crate::FileLock), the store's `backend_error`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FsError {
    /// Another live owner holds the lock (Go: `ErrLeaseHeld`).
    #[error("lock {} is held by {holder}", path.display())]
    Held {
        /// The lock's path.
        path: PathBuf,
        /// Who holds it.
        holder: Box<Holder>,
        /// Whether the holder keeps the kernel lock on the lock directory: then its death frees
        /// the lock at once, and a waiter blocks on the kernel lock instead of polling.
        kernel_lock: bool,
    },
    /// Waiting for the lock ran out of time.
    #[error("timed out after {} waiting for lock {}{}", lease_core::backend::fmt_duration(*waited), path.display(), holder.as_ref().map(|h| format!(" (held by {h})")).unwrap_or_default())]
    Timeout {
        /// The lock's path.
        path: PathBuf,
        /// How long the caller waited.
        waited: Duration,
        /// The last holder seen.
        holder: Option<Box<Holder>>,
    },
    /// A file in the lock's place is not what the protocol needs: a symbolic link, a directory,
    /// a FIFO, an oversized or unreadable record. Nothing was followed or changed.
    #[error("refusing {}: {reason}", path.display())]
    Hostile {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The path holds another lock protocol's file (a lease-file 0.1 record, an unknown
    /// format). It is never taken over or deleted: stop the processes that use it, then remove
    /// it by hand.
    #[error("refusing {}: {reason}", path.display())]
    Foreign {
        /// The lock's path.
        path: PathBuf,
        /// What was found and what to do.
        reason: String,
    },
    /// The directory the caller named (a store's, a lock's parent) exists and is not a
    /// directory: a caller's mistake, not a hostile record.
    #[error("{} is not a directory", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// An option is out of range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// Which option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// Kernel locks were demanded but do not work on this file system.
    #[error("kernel file locks do not work for {}: {reason}", path.display())]
    Unsupported {
        /// The lock's path.
        path: PathBuf,
        /// What the probe saw.
        reason: String,
        /// The error `flock` failed with, when it did.
        #[source]
        source: Option<std::io::Error>,
    },
    /// An I/O error; `transient` when retrying may help.
    #[error("{op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// Whether retrying may help.
        transient: bool,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl FsError {
    /// Whether retrying may help.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Io {
                transient: true,
                ..
            }
        )
    }

    /// The one mapping into [`LeaseError`], for the lock or key `key`: the holder as a core
    /// [`Holder`](lease_core::Holder), a hostile file as `Corrupt`, I/O (and kernel locks that
    /// do not work, whose reason only this error's message carries) as `Backend`.
    pub(crate) fn into_lease(self, key: &LeaseKey) -> LeaseError {
        match self {
            Self::Held { holder, .. } => LeaseError::held(key.clone(), Some(*holder)),
            Self::Timeout { waited, holder, .. } => {
                let last = LeaseError::held(key.clone(), holder.map(|h| *h));
                LeaseError::timeout(key.clone(), waited, last)
            }
            Self::Hostile { path, reason } => {
                LeaseError::corrupt(key.clone(), at_path(key, &path, &reason))
            }
            Self::Foreign { path, reason } => {
                LeaseError::foreign(key.clone(), at_path(key, &path, &reason))
            }
            Self::InvalidOption { option, reason } => LeaseError::invalid(option, reason),
            error @ Self::NotADirectory { .. } => {
                LeaseError::invalid("directory", error.to_string())
            }
            error @ (Self::Unsupported { .. } | Self::Io { .. }) => error.into_backend(),
        }
    }

    /// This error as the file backend's [`LeaseError::Backend`], transient where retrying may
    /// help: what I/O (and kernel locks that do not work) become, and what a failure that names
    /// no key (listing the store) becomes.
    pub(crate) fn into_backend(self) -> LeaseError {
        let transient = self.is_transient();
        LeaseError::backend(crate::BACKEND, transient, self)
    }
}

/// `reason`, prefixed with the path it is about unless the key already names that path (a
/// `FileLock`'s key is its path: "refusing the record of P: P: ..." said it twice).
fn at_path(key: &LeaseKey, path: &std::path::Path, reason: &str) -> String {
    if key.to_string() == path.to_string_lossy() {
        reason.to_owned()
    } else {
        format!("{}: {reason}", path.display())
    }
}

/// `NotOwned { Missing }`: the caller holds nothing (never acquired, or already released).
pub(crate) fn not_held(key: &LeaseKey) -> LeaseError {
    LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)
}

/// The key a lock on `path` reports in its errors: the path itself when it is a valid
/// [`LeaseKey`]; otherwise its text with control characters replaced by `?` and, past the key
/// length limit, only its end (the file name is what tells locks apart).
///
/// # Errors
/// Never in practice: `"lock"` is the last resort, itself a valid key.
pub(crate) fn key_of_path(path: &std::path::Path) -> Result<LeaseKey, LeaseError> {
    let text = path.to_string_lossy();
    if let Ok(key) = LeaseKey::new(text.as_ref()) {
        return Ok(key);
    }
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let max = lease_core::MAX_KEY_PART_BYTES;
    let mut start = cleaned.len().saturating_sub(max);
    while !cleaned.is_char_boundary(start) {
        start += 1;
    }
    LeaseKey::new(&cleaned[start..]).or_else(|_| LeaseKey::new("lock"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each level of `error`'s report: its own message, then each source's.
    fn levels(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut out = vec![error.to_string()];
        let mut next = error.source();
        while let Some(source) = next {
            out.push(source.to_string());
            next = source.source();
        }
        out
    }

    #[test]
    fn io_errors_say_each_sentence_once_in_a_report() {
        let path = PathBuf::from("/tmp/jobs/nightly.lease");
        let key = key_of_path(&path).unwrap();
        let holder = Box::new(Holder::new().with_owner("cron").with_process(12, "h"));
        let errors = [
            FsError::Held {
                path: path.clone(),
                holder: holder.clone(),
                kernel_lock: true,
            },
            FsError::Timeout {
                path: path.clone(),
                waited: Duration::from_nanos(203_684_605),
                holder: Some(holder),
            },
            FsError::Hostile {
                path: path.clone(),
                reason: "open: it is a symbolic link; links are never followed".into(),
            },
            FsError::Foreign {
                path: path.clone(),
                reason: "a Go kit/lockfile PIDLock".into(),
            },
            FsError::NotADirectory { path: path.clone() },
            FsError::InvalidOption {
                option: "stale_threshold",
                reason: "must be positive".into(),
            },
            FsError::Unsupported {
                path: path.clone(),
                reason: "NFS".into(),
                source: None,
            },
            FsError::Unsupported {
                path: path.clone(),
                reason: "flock failed".into(),
                source: Some(std::io::Error::from_raw_os_error(37)),
            },
            crate::fsio::io_error("open", &path, std::io::Error::from_raw_os_error(36)),
        ];
        for error in errors {
            let shown = levels(&error.into_lease(&key));
            for (i, level) in shown.iter().enumerate() {
                for sentence in level.split([':', ';', '(', ')']).map(str::trim) {
                    let again = shown
                        .iter()
                        .enumerate()
                        .any(|(j, other)| i != j && other.contains(sentence));
                    assert!(
                        sentence.len() < 8 || !again,
                        "{sentence:?} twice: {shown:?}"
                    );
                }
                assert!(
                    !level.contains(&format!("{}: {}", path.display(), path.display())),
                    "{shown:?}"
                );
            }
            assert!(!shown.concat().contains("203.68"), "{shown:?}");
        }
        let source = std::io::Error::from_raw_os_error(36);
        // The system's own text for its error 36 ("File name too long" on Linux).
        let text = source.to_string();
        let io = crate::fsio::io_error("open", &path, source);
        let shown = levels(&io.into_backend()).join("\ncaused by: ");
        assert_eq!(
            shown.matches(text.as_str()).count(),
            1,
            "{shown}"
        );
    }

    #[test]
    fn a_store_on_a_regular_file_is_invalid_input_naming_the_path() {
        let dir = std::env::temp_dir().join(format!("lease-file-not-a-dir-{}", std::process::id()));
        std::fs::write(&dir, b"x").unwrap();
        let error = crate::DirectoryStore::open(&dir).unwrap_err();
        let _ = std::fs::remove_file(&dir);
        assert!(error.is_invalid_input(), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!("invalid directory: {} is not a directory", dir.display())
        );
    }

    #[test]
    fn every_path_has_a_key() {
        let plain = key_of_path(std::path::Path::new("/tmp/a.lease")).unwrap();
        assert_eq!(plain.partition(), "/tmp/a.lease");
        let control = key_of_path(std::path::Path::new("/tmp/a\nb")).unwrap();
        assert_eq!(control.partition(), "/tmp/a?b");
        let long = format!("/{}é.lease", "x".repeat(2000));
        let key = key_of_path(std::path::Path::new(&long)).unwrap();
        assert!(key.partition().ends_with("é.lease"));
        assert!(key.partition().len() <= lease_core::MAX_KEY_PART_BYTES);
        // A name that is not Unicode: bytes on Unix, an unpaired surrogate on Windows.
        #[cfg(unix)]
        let odd = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"/tmp/\xff")
            .to_owned();
        #[cfg(windows)]
        let odd = <std::ffi::OsString as std::os::windows::ffi::OsStringExt>::from_wide(&[
            u16::from(b'C'),
            u16::from(b':'),
            u16::from(b'/'),
            0xD800,
        ]);
        assert!(key_of_path(std::path::Path::new(&odd)).is_ok());
        assert_eq!(
            key_of_path(std::path::Path::new("")).unwrap().partition(),
            "lock"
        );
    }
}
