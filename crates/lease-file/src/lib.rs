//! Cross-process file leases: kernel locks where they work, heartbeats and race-free takeover
//! where they do not, fencing generations always.
//!
//! ```
//! use lease_file::{FileLock, FileLockOptions, LockMode};
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir()?;
//! let options = FileLockOptions::default()
//!     .with_label("report-cron")
//!     .on_lease_lost(|reason| eprintln!("stop writing: {reason}"));
//! let lock = FileLock::with_options(dir.path().join("report.lease"), options)?;
//! assert_eq!(lock.mode(), LockMode::Kernel); // a local file system
//!
//! let fencing = lock.acquire()?;
//! // ... pass `fencing` with every write to the protected resource, and check before acting:
//! assert_eq!(lock.check()?, fencing);
//! lock.release()?;
//!
//! // Waiting, with who holds it on timeout:
//! let again = lock.acquire_timeout(Duration::from_secs(5))?;
//! assert!(again > fencing);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Two surfaces share one record format and one critical-section protocol:
//!
//! * [`FileLock`]: a blocking lease on one path with the Go `kit/lockfile` `PIDLock` API
//!   (`new`, `with_options`, `acquire`, `release`, `held`, `path`) and options, a heartbeat thread,
//!   an on-lease-lost callback, and a blocking [`FileLock::acquire_timeout`]. No async runtime.
//! * [`DirectoryStore`]: a directory of leases implementing lease-core's
//!   [`LeaseBackend`](lease_core::LeaseBackend) and [`LeaseListing`](lease_core::LeaseListing)
//!   (the whole conformance suite passes), so the lessor and the command line tool run on files.
//!
//! # The protocol
//!
//! For a lock at path `P`:
//!
//! * **`P`** holds a JSON [`LeaseFileRecord`]: schema version, owner id, pid, host, PID namespace,
//!   boot id, process start time, heartbeat counter, timestamps, fencing generation. It is only
//!   ever *replaced*: a temporary file `.<name>.<pid>.<nonce>.tmp` in the same directory is
//!   created with `O_EXCL|O_NOFOLLOW`, given the configured mode, written (and optionally
//!   fsynced), then renamed over `P`. A reader sees the old record or the new one, never a
//!   truncated one. A kernel-mode takeover removes the temporaries a dead writer left of `P`,
//!   matched exactly (pid digits, 12 hex digits), so those of another lock whose name extends
//!   `P`'s (`a.b` for `a`) are never touched.
//! * **`P.lock`** is flocked for each *critical section*: read the record, decide, rename a new
//!   record. It is never deleted or renamed, so the flock+unlink race (two processes locking two
//!   different inodes under one name) cannot happen; each entry also checks, with one `lstat`,
//!   that the locked inode is still the one at the path. Because takeover, heartbeat and release
//!   all decide and write inside this section, two contenders can never both take over one stale
//!   record, a release can never race a takeover, and a heartbeat can never resurrect a lease
//!   another owner took.
//! * **`P.owner`** is flocked by the holder for its whole tenure, and never deleted. The kernel
//!   drops that lock when the holder's process dies, however it dies, so a contender that can
//!   take it knows the holder is gone and takes over *at once* (the record says whether its
//!   owner holds this lock: a new owner that took over from a hung holder cannot get it until
//!   the old process lets go, and its heartbeat thread keeps trying).
//! * A holder that is alive but hung (SIGSTOP, a stalled VM) keeps its kernel lock; contenders
//!   then call it stale when its heartbeat counter has not changed for the stale threshold on
//!   *their own monotonic clock*. Wall timestamps in the record are diagnostics: a wall-clock
//!   jump makes nothing look stale or fresh. The holder trusts its tenure only until the start of
//!   its last successful heartbeat plus the stale threshold minus a margin, which is before any
//!   contender can have watched the counter stand still that long.
//! * A pid probe is a fast path only when the record's host, PID namespace and boot id all match
//!   ours, and the pid is either gone (`kill(pid, 0)` = `ESRCH`) or now belongs to a process with
//!   another start time: never a bare pid.
//! * The **fencing generation** is the previous record's generation plus one, decided inside the
//!   critical section; release writes a *released* record that keeps it, so it increases
//!   strictly across every acquisition, release and takeover. (Reclaiming an unparseable record
//!   restarts it above any reachable counter, from the wall clock in microseconds.)
//! * An unparseable record counts as held until it has been seen unchanged for the
//!   invalid-record threshold (or its mtime is that old), then is reclaimed.
//!
//! ## Where kernel locks do not work
//!
//! On NFS, SMB/CIFS, FUSE, 9p and AFS (detected with `statfs`), or where `flock` fails with `ENOLCK`,
//! `EOPNOTSUPP` or `ENOSYS`, the lock runs in [`LockMode::HeartbeatOnly`] and says so through
//! [`FileLock::mode`] (and [`FileLock::mode_reason`]); [`ModePreference::Kernel`] turns the
//! fallback into an error instead. Critical sections are then epochs: entering creates
//! `P.cs.<n+1>` with `O_EXCL` (only one process can), allowed when `P.cs.<n>.done` exists, or when
//! epoch `n` has been stuck for the stale threshold on our monotonic clock, or its writer is
//! provably gone on this host. Because a reclaim creates a *new* name rather than deleting and
//! recreating one, two contenders can never both reclaim one stale epoch. A process that was
//! paused *inside* a critical section for longer than the stale threshold checks, just before its
//! rename, that no later epoch exists. Takeover of a crashed holder waits for the stale threshold.
//!
//! **Known defect (issue 9): heartbeat-only mode can issue a fencing generation twice.** A pause
//! between that check and the rename can last any length, and the later epoch files the check
//! looks for are deleted by cleanup and by contenders that lost a race, so a paused process can
//! rename its old record over a newer owner's. The exhaustive model checker in
//! `tests/model_check.rs` finds it in 18 steps with three processes (and in 22 steps even when
//! the check and the rename are made one atomic step), and the issue reproduced it with real
//! processes stopped for 1 s. Until the protocol is redesigned, do not rely on heartbeat-only
//! mode (NFS, SMB, FUSE, 9p, AFS) where a process can be paused; kernel mode is not affected by
//! this defect: a process paused inside its critical section holds the kernel lock and only
//! delays the others.
//!
//! # Guarantees and limits
//!
//! * No two `FileLock`s (in any processes on the machine, or across hosts in heartbeat-only mode)
//!   are ever both told they hold one path, provided monotonic clocks run at the same rate and,
//!   in heartbeat-only mode, no process is paused inside a critical section (see the known
//!   defect above; kernel mode: a paused process inside it only delays others, who give up with
//!   a transient error).
//! * A holder paused past its deadline learns it on its first [`FileLock::check`] /
//!   [`FileLock::held`] after resuming; its heartbeat then reports
//!   [`LostReason::TakenOver`] if another owner took over, and the newer owner's fencing token is
//!   greater. Only fencing protects the resource from the paused holder's in-flight writes.
//! * Transient I/O errors are tolerated until the tenure's deadline, then reported as
//!   [`LostReason::Untrusted`].
//! * Symlinks are never followed (`O_NOFOLLOW` on every open), only regular files are read or
//!   locked (`fstat` check; FIFOs cannot block the open thanks to `O_NONBLOCK`), records are read
//!   up to [`MAX_RECORD_BYTES`].
//! * Every file the crate creates (records and their temporaries, companions, epoch files and
//!   their done markers, fenced values, the store's mode probe) gets exactly the configured mode
//!   by `fchmod` after an exclusive create, whatever the umask, so users sharing a lock through
//!   a group-writable mode can all open it. Existing files keep their mode. Created directories
//!   are subject to the umask, as `mkdir(2)`.
//! * Planted files of any name, size or number give a typed error or are ignored, never a panic
//!   or a spin. A directory, symbolic link, FIFO or oversized file at `P` or a companion path is
//!   [`FileLockError::Hostile`]; a garbage record counts as held (see above). Epoch files count
//!   only under the canonical decimal names this crate writes, `P.cs.1` to `P.cs.<2^63-1>`:
//!   other names (`P.cs.007`, `P.cs.+7`, `P.cs.18446744073709551615`) are ignored and never
//!   deleted; a done marker counts only for the highest epoch, and one planted for the next
//!   epoch is removed by whoever creates that epoch; a planted epoch at the very top of the
//!   range is refused as [`FileLockError::Hostile`] naming it. A stuck epoch makes
//!   [`FileLock::acquire_timeout`] give up at its timeout, not at the stale threshold.
//! * No option value panics. Every duration option of [`FileLockOptions`] beyond
//!   [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION), a zero heartbeat interval or stale
//!   threshold, is refused by [`FileLock::with_options`] as [`FileLockError::InvalidOption`]
//!   naming the option; a [`DirectoryStore`] safety margin that leaves nothing of a lease to
//!   trust, or an injected clock so late that the lease's end cannot be represented, fails the
//!   operation with lease-core's `InvalidInput` naming `safety_margin` or `clock`.
//! * Deleting `P` by hand restarts the fencing generation; deleting the companions is harmless
//!   (a replaced critical-section file is detected and reopened).
//! * Every process sharing a path must run the same protocol: a lock refuses a held record
//!   written under the other one (the record's `protocol` field) with
//!   [`FileLockError::Unsupported`] rather than fail open.
//!
//! # Design choices
//!
//! * **Two companions, not one.** The critical-section lock is held for microseconds by anyone;
//!   the tenure lock for the whole tenure by the holder only. One file cannot do both: a holder
//!   keeping the critical-section lock would lock out the contenders that must read its record to
//!   judge it stale.
//! * **A released record instead of `unlink`.** Deleting the record would lose the fencing
//!   generation and reopen the unlink races; rewriting it as released keeps both closed.
//! * **A heartbeat counter, not a timestamp.** Contenders time how long the counter stands still
//!   on their own monotonic clock (as Kubernetes leader election does), so wall-clock jumps and
//!   skew between containers never make a live lease look stale.
//! * **One heartbeat thread per lock**, started at the first acquisition and parked between
//!   tenures: a heartbeat stuck in slow I/O on one path never delays another lock's (the Java
//!   DynamoDB lock client's single renewal thread does). The cost is one parked thread per
//!   `FileLock`.
//! * **The blocking lock reads the operating system's clocks** (`Instant`, `SystemTime`): it
//!   coordinates real processes, and its tests use real processes with short thresholds. The
//!   [`DirectoryStore`] reads the injected [`Clock`](lease_core::Clock), as the contract requires,
//!   so the conformance suite drives it with a manual clock.
//! * **Inline I/O in the store's futures.** The operations are a few local syscalls (about 40 per
//!   acquire + release, measured by the benchmark), shorter than a thread hop, so the futures do
//!   them when first polled and need no runtime; on a network file system they can block the
//!   executor thread for the duration of the I/O.
//! * **Costs** (`benches/file_lease.rs`, ext4): an uncontended acquire + release is about ten
//!   `O_EXCL` lock-file cycles (two atomic record replacements, each a create + write + rename),
//!   takeover after SIGKILL of the holder takes about a millisecond (two to three times a process
//!   blocked in `flock`), and a held lease heartbeating every 250 ms costs 0.1 to 0.2% of a core.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod chain;
mod cs;
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
mod record;
mod store;
mod wake;

pub use cs::{LockMode, ModePreference};
pub use encode::{
    FENCED_PREFIX, MAX_FILE_NAME_BYTES, RECORD_SUFFIX, decode_file_name, fenced_file_name,
    key_file_name,
};
pub use error::{FileLockError, LostReason};
pub use fenced::MAX_FENCED_FILE_BYTES;
pub use fsio::MAX_RECORD_BYTES;
pub use ident::LivenessProbe;
pub use lock::{FileLock, FileLockOptions, HolderInfo, LostCallback};
pub use record::{LeaseFileRecord, RecordError, SCHEMA_VERSION};
pub use store::DirectoryStore;
