//! Cross-process file leases, for one machine or a shared NFS directory: kernel locks where they
//! work, heartbeats and race-free takeover where they do not, fencing tokens always. No server,
//! no async runtime.
//!
//! ```
//! use lease_core::WaitOptions;
//! use lease_file::{FileLock, LockMode};
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let lock = FileLock::builder(dir.path().join("report.lease"))
//!     .with_label("report-cron")
//!     .on_lost(|reason| eprintln!("stop writing: {reason}"))
//!     .build()?;
//! assert_eq!(lock.mode(), LockMode::Kernel); // a local file system
//!
//! let guard = lock.acquire()?; // waits until acquired; `try_acquire` makes one attempt
//! let fencing = guard.fencing_token();
//! // ... pass `fencing` with every write to the protected resource, and check before acting:
//! assert_eq!(guard.check()?, fencing);
//! guard.release()?; // or drop the guard
//!
//! // Waiting at most 5 s; a timeout names who holds it:
//! let again = lock.acquire_with(&WaitOptions::new(Duration::from_secs(5)))?;
//! assert!(again.fencing_token() > fencing);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What is here
//!
//! * [`FileLock`]: a blocking lease on one path. [`acquire`](FileLock::acquire) waits,
//!   [`try_acquire`](FileLock::try_acquire) makes one attempt, and both return a
//!   [`FileLockGuard`], the proof of holding, with the names every guard has (`key`,
//!   `fencing_token`, `check`, `deadline`, `release`). A heartbeat thread keeps it; an
//!   [`on_lost`](FileLockBuilder::on_lost) callback is told why it was lost. Coming from Go's
//!   `kit/lockfile`: [`FileLock`] maps its names
//!   ([*Coming from Go*](FileLock#coming-from-gos-kitlockfile)).
//! * [`DirectoryStore`]: a directory of leases implementing lease-core's `LeaseBackend`,
//!   `LeaseListing` and `FencedValues` (the whole conformance suite passes), so lease-core's
//!   `LeaseGuard`, `CountingLease` and `Election`, the fleet and the `lease` command run on files:
//!
//! ```
//! use lease_core::{LeaseGuard, LeaseKey};
//! use lease_file::DirectoryStore;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let store = Arc::new(DirectoryStore::open(dir.path())?);
//! let key = LeaseKey::new("nightly-report")?;
//! let guard = LeaseGuard::builder(store, &key, Duration::from_secs(30)).acquire_blocking()?;
//! assert_eq!(guard.check()?, guard.fencing_token());
//! guard.release()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! * [`LockMode`] and [`ModePreference`]: whether holders also keep a kernel lock;
//!   [`PruneReport`]: what [`DirectoryStore::prune`] removed.
//! * [`protocol`]: how it works and what it guarantees, in full.
//!
//! Errors are lease-core's `LeaseError`, by meaning, with their sources; this crate re-exports
//! nothing of lease-core, so depend on both: `cargo add lease-core lease-file`.
//!
//! # Guarantees, in short
//!
//! Each change of a lock is one `rename(2)` from the exact state observed, a compare-and-swap
//! that a process paused for any time can never replay ([`protocol`] has the argument):
//!
//! * fencing tokens are issued once each, increasing, assuming nothing about time;
//! * no two holders trust a lease at once, in any processes on the host or across hosts sharing
//!   an NFS directory, as long as monotonic clocks run at rates within 10 % of each other;
//! * a crashed holder's lease is free at once where kernel locks work (local file systems), and
//!   after its duration elsewhere ([`LockMode`]);
//! * links are never followed, planted files give a typed error, never a panic, and a directory
//!   other users can change is refused unless shared on purpose
//!   ([*Shared directories*](protocol#shared-directories-and-other-users));
//! * a `fork`ed child never releases its parent's lease ([*Forks*](protocol#forks)).
//!
//! # Platforms
//!
//! | System | Status |
//! |---|---|
//! | Linux | supported, every suite runs |
//! | macOS (x86_64, aarch64) | builds, tests and benches compile, checked on every change |
//! | FreeBSD (x86_64) | builds, tests and benches compile, checked on every change |
//! | Windows (x86_64) | heartbeat-only, every rename under a `cas` lock; checked on every change, its tests run under Wine |
//! | others | a `compile_error!` naming the [`platforms`] page |
//!
//! The [`platforms`] page argues, with its sources, each system's clock that counts time
//! asleep, network file system detection, descriptor-relative calls, and what replaces `/proc`
//! and inotify where they are missing.
//!
//! # Features
//!
//! * `metrics`: every acquisition and renewal reports through the `metrics` facade (names in
//!   lease-core's `metrics` module, every series in `docs/metrics.md`). Off, nothing is recorded.
//! * `failpoints`: named pauses before every state rename, for the pause-injection tests. Never
//!   in production builds.
//! * `portable-paths`: Linux takes the macOS and FreeBSD code paths (no `/proc`, no
//!   `CLOCK_BOOTTIME`, no inotify), so that its tests hold them to the same promise
//!   ([*Held to the same tests on Linux*](platforms#held-to-the-same-tests-on-linux)). Never in
//!   production builds.
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: feature-gated items then show their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[doc = include_str!("docs/platforms.md")]
pub mod platforms {}

#[cfg(not(any(
    target_os = "linux",
    target_os = "macos",
    target_os = "freebsd",
    windows
)))]
compile_error!(
    "lease-file runs on Linux, macOS, FreeBSD and Windows only: see \
     https://docs.rs/lease-file/latest/lease_file/platforms/"
);

/// The crate's items, on the systems it supports only: elsewhere the `compile_error!` above is
/// the one error a build reports, not a wall of missing system calls.
macro_rules! on_supported_systems {
    ($($item:item)*) => {
        $(
            #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd", windows))]
            $item
        )*
    };
}

on_supported_systems! {
    mod at;
    mod encode;
    mod engine;
    mod error;
    #[cfg(feature = "failpoints")]
    mod faults;
    mod fenced;
    mod foreign;
    mod fsio;
    mod ident;
    mod lock;
    mod mode;
    pub mod protocol;
    mod prune;
    mod record;
    mod state;
    mod store;
    mod sys;
    #[cfg(test)]
    mod tests;
    mod wake;
    #[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
    mod watch;

    pub use fenced::MAX_FENCED_FILE_BYTES;
    pub use fsio::MAX_RECORD_BYTES;
    pub use lock::{FileLock, FileLockBuilder, FileLockGuard};
    pub use mode::{LockMode, ModePreference};
    pub use prune::PruneReport;
    pub use store::{DirectoryStore, DirectoryStoreBuilder};

    use lease_core::LeaseError;

    /// The backend name in [`LeaseError::Backend`] errors.
    const BACKEND: &str = "file";

    /// The refusal of `op` (a release, renewal or delete) in a process other than the one that
    /// acquired the lease: a `fork`ed child's copy of a lease is its parent's, and ending or
    /// changing it would end or change the parent's.
    fn forked_refusal(op: &str) -> LeaseError {
        LeaseError::unsupported(
            BACKEND,
            match op {
                "renew" => {
                    "renew in a process other than the one that acquired the lease (a forked child)"
                }
                "delete" => {
                    "delete in a process other than the one that acquired the lease (a forked child)"
                }
                _ => "release in a process other than the one that acquired the lease (a forked child)",
            },
        )
    }
}
