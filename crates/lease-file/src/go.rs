//! The Go `kit/lockfile` `PIDLock` names, for code ported from Go: each is another name for (or
//! an accepted-but-unused setting of) the main API, kept here so that the main API has one name
//! per operation.
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
//! | `ProcessAppearsAlive` | [`PidLockOptions::with_liveness`] | none: never called |
//! | `InvalidPIDLockStaleThreshold` | [`PidLockOptions::with_invalid_record_stale`] | none: validated, never used |
//! | `IsLeaseHeld`, `IsLeaseNotOwned` | | [`LeaseError::is_held`](lease_core::LeaseError::is_held), [`is_not_owned`](lease_core::LeaseError::is_not_owned) |
//!
//! ```
//! use lease_file::FileLock;
//! use lease_file::go::{PidLock as _, PidLockOptions as _};
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let lock = FileLock::builder(dir.path().join("a.lock"))
//!     .with_invalid_record_stale(Duration::from_millis(1200))
//!     .build()?;
//! let held = lock.try_acquire()?; // Go: lock.Acquire()
//! assert!(held.held());
//! held.release()?; // Go: lock.Release()
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`FileLock::acquire`]: crate::FileLock::acquire
//! [`FileLock::builder`]: crate::FileLock::builder
//! [`FileLock::new`]: crate::FileLock::new
//! [`FileLock::path`]: crate::FileLock::path
//! [`FileLock::try_acquire`]: crate::FileLock::try_acquire

use std::sync::Arc;
use std::time::Duration;

use crate::{FileLockBuilder, FileLockGuard};

pub use crate::ident::LivenessProbe;

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

/// The Go package's options that this protocol accepts but has no use for.
pub trait PidLockOptions: Sized {
    /// Go `InvalidPIDLockStaleThreshold` (default 1.2 s); accepted and validated (at most
    /// [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION), else `InvalidInput` from
    /// `build`), but this protocol has no unparseable records to reclaim: its state is a name,
    /// and a file of another protocol at the path is never taken over (an unparseable one
    /// younger than the Go package's own 1.2 s reads as a Go lock being written).
    fn with_invalid_record_stale(self, threshold: Duration) -> Self;

    /// The invalid-record stale threshold.
    fn invalid_record_stale(&self) -> Duration;

    /// Go `ProcessAppearsAlive` (which the Go package itself ignores); accepted but never
    /// called: this crate never judges a holder by a pid, which may be reused or live in another
    /// PID namespace. A holder's death is known from the kernel lock it holds.
    fn with_liveness(self, alive: impl Fn(u32) -> bool + Send + Sync + 'static) -> Self;
}

impl PidLockOptions for FileLockBuilder {
    fn with_invalid_record_stale(mut self, threshold: Duration) -> Self {
        self.options.invalid_record_stale = threshold;
        self
    }

    fn invalid_record_stale(&self) -> Duration {
        self.options.invalid_record_stale
    }

    fn with_liveness(mut self, alive: impl Fn(u32) -> bool + Send + Sync + 'static) -> Self {
        self.options.liveness = Some(Arc::new(alive));
        self
    }
}
