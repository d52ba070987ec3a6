//! The Go `kit/lockfile` `PIDLock` names, for code ported from Go: each is another name for the
//! main API, kept here so that the main API has one name per operation.
//!
//! | Go | here | main API |
//! |---|---|---|
//! | `NewPIDLock(path)` | | [`FileLock::new`] |
//! | `NewPIDLockWithOptions(path, opts)` | | [`FileLock::builder`] |
//! | `(*PIDLock).Acquire`, `Release`, `Path` | | [`FileLock::acquire`], [`FileLock::release`], [`FileLock::path`] |
//! | `(*PIDLock).Held` | [`PidLock::held`] | [`FileLock::check`]`.is_ok()` |
//! | `IsLeaseHeld`, `IsLeaseNotOwned` | | [`LeaseError::is_held`](lease_core::LeaseError::is_held), [`is_not_owned`](lease_core::LeaseError::is_not_owned) |
//!
//! Two Go options have no counterpart, because this protocol has nothing for them to do; a port
//! drops them:
//!
//! * `ProcessAppearsAlive` (which the Go package itself ignores): this crate never judges a
//!   holder by its pid, which may be reused or live in another PID namespace. A holder's death
//!   is known from the kernel lock it held, or in heartbeat-only mode from its heartbeats
//!   stopping for [`FileLockBuilder::with_stale_threshold`](crate::FileLockBuilder::with_stale_threshold).
//! * `InvalidPIDLockStaleThreshold`: there are no unparseable records to reclaim. The lock's
//!   state is a file name, and a file of another protocol at the path is never taken over (an
//!   unparseable one younger than the Go package's own 1.2 s reads as a Go lock being written).
//!   To wait longer for a busy lock, use [`FileLock::acquire_with_wait`].
//!
//! ```
//! use lease_file::FileLock;
//! use lease_file::go::PidLock as _;
//!
//! let dir = tempfile::tempdir()?;
//! let lock = FileLock::builder(dir.path().join("a.lock")).build()?;
//! lock.acquire()?;
//! assert!(lock.held());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::FileLock;

/// `PIDLock.Held`.
pub trait PidLock {
    /// Whether this lock holds the lease and may still trust it (Go: `Held`):
    /// [`FileLock::check`]`.is_ok()`. False after a loss, and false once the holder-side
    /// deadline passed without a successful heartbeat (a paused process learns it on its first
    /// call after resuming).
    fn held(&self) -> bool;
}

impl PidLock for FileLock {
    fn held(&self) -> bool {
        self.check().is_ok()
    }
}
