//! The Go `kit/lockfile` `PIDLock` names, for code ported from Go: each is another name for the
//! main API, kept here so that the main API has one name per operation.
//!
//! The verbs differ: Go's `Acquire` makes one attempt, which is [`FileLock::try_acquire`] here
//! ([`FileLock::acquire`] waits, as `lock()` does in Rust), and holding is a value, the
//! [`FileLockGuard`] both return, rather than state inside the lock: Go's `Release` and `Held`
//! are the guard's.
//!
//! | Go | here | main API |
//! |---|---|---|
//! | `NewPIDLock(path)` | | [`FileLock::new`] |
//! | `NewPIDLockWithOptions(path, opts)` | | [`FileLock::builder`] |
//! | `(*PIDLock).Acquire` (one attempt) | | [`FileLock::try_acquire`], which returns the [`FileLockGuard`] |
//! | `(*PIDLock).Release` | | [`FileLockGuard::release`] (or drop the guard) |
//! | `(*PIDLock).Path` | | [`FileLock::path`] |
//! | `(*PIDLock).Held` | [`PidLock::held`] on the guard | [`FileLockGuard::check`]`.is_ok()` |
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
//!   To wait longer for a busy lock, use [`FileLock::acquire_with`].
//!
//! ```
//! use lease_file::FileLock;
//! use lease_file::go::PidLock as _;
//!
//! let dir = tempfile::tempdir()?;
//! let lock = FileLock::builder(dir.path().join("a.lock")).build()?;
//! let held = lock.try_acquire()?; // Go: lock.Acquire()
//! assert!(held.held());
//! held.release()?; // Go: lock.Release()
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`FileLock::acquire`]: crate::FileLock::acquire
//! [`FileLock::acquire_with`]: crate::FileLock::acquire_with
//! [`FileLock::builder`]: crate::FileLock::builder
//! [`FileLock::new`]: crate::FileLock::new
//! [`FileLock::path`]: crate::FileLock::path
//! [`FileLock::try_acquire`]: crate::FileLock::try_acquire

use crate::FileLockGuard;

/// `PIDLock.Held`.
pub trait PidLock {
    /// Whether this tenure may still be trusted (Go: `Held`):
    /// [`FileLockGuard::check`]`.is_ok()`. False after a loss, and false once the holder-side
    /// deadline passed without a successful heartbeat (a paused process learns it on its first
    /// call after resuming).
    fn held(&self) -> bool;
}

impl PidLock for FileLockGuard {
    fn held(&self) -> bool {
        self.check().is_ok()
    }
}
