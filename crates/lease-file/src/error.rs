//! The error type of the blocking lock.

use std::path::PathBuf;
use std::time::Duration;

use crate::HolderInfo;

/// Why a [`FileLock`](crate::FileLock) stopped trusting its tenure.
///
/// The two cases call for different reactions: after [`TakenOver`](Self::TakenOver) another owner
/// holds the lease with a greater fencing generation, so work in flight must stop; after
/// [`Untrusted`](Self::Untrusted) nobody may have taken it yet, but this process can no longer
/// prove it holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The record names another owner (who took the lease over), or no owner at all (somebody
    /// released or removed it).
    TakenOver {
        /// The owner the record now names, if any.
        holder: Option<Box<HolderInfo>>,
    },
    /// Heartbeats failed (or the process was paused) until the tenure's deadline passed.
    Untrusted {
        /// What went wrong last.
        reason: String,
    },
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TakenOver { holder: Some(h) } => write!(f, "lease taken over by {h}"),
            Self::TakenOver { holder: None } => {
                f.write_str("lease taken away: the record names no owner any more")
            }
            Self::Untrusted { reason } => write!(f, "lease can no longer be trusted: {reason}"),
        }
    }
}

/// Everything that can go wrong with a [`FileLock`](crate::FileLock), by meaning.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileLockError {
    /// Another live owner holds the lock (Go: `ErrLeaseHeld`).
    #[error("lock {} is held by {holder}", path.display())]
    Held {
        /// The lock's path.
        path: PathBuf,
        /// Who holds it.
        holder: Box<HolderInfo>,
    },
    /// Waiting for the lock ran out of time.
    #[error("timed out after {waited:?} waiting for lock {}{}", path.display(), holder.as_ref().map(|h| format!(" (held by {h})")).unwrap_or_default())]
    Timeout {
        /// The lock's path.
        path: PathBuf,
        /// How long the caller waited.
        waited: Duration,
        /// The last holder seen.
        holder: Option<Box<HolderInfo>>,
    },
    /// This lock does not hold the lease (release without acquire, or after a loss).
    #[error("lock {} is not held by this process{}", path.display(), lost.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    NotHeld {
        /// The lock's path.
        path: PathBuf,
        /// Why, when the lease was lost rather than never held.
        lost: Option<LostReason>,
    },
    /// This `FileLock` already holds the lease.
    #[error("lock {} is already held by this FileLock", path.display())]
    AlreadyHeld {
        /// The lock's path.
        path: PathBuf,
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
    },
    /// An I/O error; `transient` when retrying may help.
    #[error("{op} {}: {source}", path.display())]
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

impl FileLockError {
    /// Another live owner holds the lock (Go: `IsLeaseHeld`).
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Held { .. })
    }

    /// Waiting timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// The caller does not hold the lock (Go: `IsLeaseNotOwned`).
    pub fn is_not_held(&self) -> bool {
        matches!(self, Self::NotHeld { .. })
    }

    /// A hostile or malformed file was refused.
    pub fn is_hostile(&self) -> bool {
        matches!(self, Self::Hostile { .. })
    }

    /// Another lock protocol's file sits at the path.
    pub fn is_foreign(&self) -> bool {
        matches!(self, Self::Foreign { .. })
    }

    /// The holder named by a [`Held`](Self::Held) or [`Timeout`](Self::Timeout) error.
    pub fn holder(&self) -> Option<&HolderInfo> {
        match self {
            Self::Held { holder, .. } => Some(holder),
            Self::Timeout { holder, .. } => holder.as_deref(),
            _ => None,
        }
    }

    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Io {
                transient: true,
                ..
            }
        )
    }
}
