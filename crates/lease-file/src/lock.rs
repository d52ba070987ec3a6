//! The blocking lock for one path: Go `kit/lockfile` parity plus kernel tenure locks, race-free
//! takeover and fencing generations.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use lease_core::{
    FencingToken, Holder, LeaseError, LeaseKey, LossReason, NotOwnedReason, WaitOptions,
};

/// What [`FileLockBuilder::on_lost`] is given: called once, from the heartbeat thread.
type LossCallback = Arc<dyn Fn(&LossReason) + Send + Sync>;

use crate::engine::{self, Attempt, Claim, Observations, Timebase};
use crate::error::{FsError, key_of_path, not_held};
use crate::fsio::Base;
use crate::mode::{LockMode, ModePreference, detect};
use crate::state::{self, Held, KeyDir, Kind, Modes};

/// Builds a [`FileLock`]: [`FileLock::builder`], `with_*` setters, [`build`](Self::build). The
/// defaults are the Go package's.
///
/// ```
/// use lease_file::FileLock;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let lock = FileLock::builder(dir.path().join("job.lease"))
///     .with_acquire_retries(5)
///     .with_retry_delay(Duration::from_millis(50))
///     .with_heartbeat_interval(Duration::from_millis(100))
///     .with_stale_threshold(Duration::from_secs(2))
///     .on_lost(|reason| eprintln!("{reason}"))
///     .build()?;
/// lock.try_acquire()?.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct FileLockBuilder {
    path: PathBuf,
    pub(crate) options: Options,
}

/// A [`FileLock`]'s settings.
#[derive(Clone)]
pub(crate) struct Options {
    acquire_retries: u32,
    retry_delay: Duration,
    file_mode: u32,
    dir_mode: u32,
    heartbeat_interval: Duration,
    stale_threshold: Duration,
    on_lost: Option<LossCallback>,
    mode: ModePreference,
    fsync: bool,
    label: Option<String>,
    shared_directory: bool,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("acquire_retries", &self.acquire_retries)
            .field("retry_delay", &self.retry_delay)
            .field("file_mode", &format_args!("{:o}", self.file_mode))
            .field("dir_mode", &format_args!("{:o}", self.dir_mode))
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("stale_threshold", &self.stale_threshold)
            .field("on_lost", &self.on_lost.is_some())
            .field("mode", &self.mode)
            .field("fsync", &self.fsync)
            .field("label", &self.label)
            .field("shared_directory", &self.shared_directory)
            .finish()
    }
}

impl Default for Options {
    /// The Go package's defaults: acquire retries 12, retry delay 20 ms, file mode 0644,
    /// directory mode 0755, heartbeat every 250 ms, stale after 3 s, no callback, automatic
    /// mode, no fsync.
    fn default() -> Self {
        Self {
            acquire_retries: 12,
            retry_delay: Duration::from_millis(20),
            file_mode: 0o644,
            dir_mode: 0o755,
            heartbeat_interval: Duration::from_millis(250),
            stale_threshold: Duration::from_secs(3),
            on_lost: None,
            mode: ModePreference::Auto,
            fsync: false,
            label: None,
            shared_directory: false,
        }
    }
}

impl FileLockBuilder {
    /// How many times [`FileLock::acquire`] retries a transient race (Go: `AcquireRetryLimit`).
    pub fn with_acquire_retries(mut self, retries: u32) -> Self {
        self.options.acquire_retries = retries;
        self
    }
    /// Delay between acquire retries (Go: `AcquireRetryDelay`). Zero retries at once; more than
    /// [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION) is refused by
    /// [`build`](Self::build) as [`LeaseError::InvalidInput`], as for every duration here.
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.options.retry_delay = delay;
        self
    }
    /// Mode of created files (default 0644), less the umask, as `open(2)` applies it: nothing
    /// is ever made more readable than the umask allows. The lock directory gets it too, plus
    /// the matching search (`x`) bits: 0664 gives 0775, 0600 gives 0700 (before the umask).
    /// Never writable by others: 0666 gives a 0775 lock directory, in a shared directory too.
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        self.options.file_mode = mode & 0o7777;
        self
    }
    /// Mode of the missing parent directories of the lock's path, created as the Go package
    /// creates them (subject to the umask, as `mkdir(2)`). Not the lock directory itself: see
    /// [`with_file_mode`](Self::with_file_mode).
    pub fn with_dir_mode(mut self, mode: u32) -> Self {
        self.options.dir_mode = mode & 0o7777;
        self
    }
    /// How often the holder heartbeats (default 250 ms; above zero).
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.options.heartbeat_interval = interval;
        self
    }
    /// How long a heartbeat may stay unchanged before contenders call the lease stale (3 s; at
    /// least twice the heartbeat interval).
    pub fn with_stale_threshold(mut self, threshold: Duration) -> Self {
        self.options.stale_threshold = threshold;
        self
    }
    /// Called once, from the heartbeat thread, when the lease is lost (as lease-core's guards'
    /// `on_lost`), with why; [`FileLockGuard::check`] then fails with the same reason:
    ///
    /// * `NotOwned(TakenOver)`: another owner holds it now, with a greater generation;
    /// * `NotOwned(Missing)`: nobody does (released or removed by somebody else, or the lock
    ///   directory moved away or replaced);
    /// * [`LossReason::DeadlinePassed`]: the state moved on after this holder's deadline;
    /// * [`LossReason::BackendFailing`]: heartbeats failed until the deadline (nobody may have
    ///   taken it yet, but this process can no longer prove it holds it); it carries the last
    ///   heartbeat's error, also its [`source`](std::error::Error::source).
    pub fn on_lost(mut self, callback: impl Fn(&LossReason) + Send + Sync + 'static) -> Self {
        self.options.on_lost = Some(Arc::new(callback));
        self
    }
    /// Forces a [`ModePreference`] (default automatic).
    pub fn with_mode(mut self, mode: ModePreference) -> Self {
        self.options.mode = mode;
        self
    }
    /// fsyncs the lock directory after every rename, and its parent when it is created (by
    /// default nothing is fsynced: leases do not outlive a power loss anyway, but a fencing
    /// generation issued just before one may then be issued again; call this if generations
    /// must never repeat, even across a power loss).
    pub fn with_fsync(mut self) -> Self {
        self.options.fsync = true;
        self
    }
    /// Accepts a parent directory and a lock directory that users other than the caller and
    /// root can change (default off: such a directory is refused with
    /// [`LeaseError::InvalidInput`] naming its owner and mode). Any user who can write either
    /// can then release or deny this lock and read its holder's description; nothing beyond
    /// the lock directory's own entries is ever created, changed or removed, whatever they do.
    /// A directory anyone can write without the sticky bit is refused even so. See
    /// [*Shared directories and other users*](crate::protocol#shared-directories-and-other-users).
    pub fn with_shared_directory(mut self) -> Self {
        self.options.shared_directory = true;
        self
    }
    /// A human label shown to contenders.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.options.label = Some(label.into());
        self
    }

    /// The lock, with its parent directory created if needed and its [`LockMode`] detected.
    ///
    /// # Errors
    /// [`LeaseError::InvalidInput`] naming the option (a duration beyond
    /// [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION), a zero heartbeat interval or stale
    /// threshold, a stale threshold under twice the heartbeat interval, a path that names no
    /// file); a permanent [`LeaseError::Backend`] saying why when kernel locks are demanded
    /// ([`ModePreference::Kernel`]) and do not work; [`LeaseError::Backend`] when the directory
    /// cannot be created.
    pub fn build(self) -> Result<FileLock, LeaseError> {
        let key = key_of_path(&self.path)?;
        FileLock::open(self.path, self.options, &key).map_err(|e| e.into_lease(&key))
    }
}

impl Options {
    /// Every `Duration` option at most [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION)
    /// (so no `Instant + Duration` can overflow), the heartbeat interval and stale threshold
    /// above zero, the stale threshold at least twice the heartbeat interval.
    fn validate(&self) -> Result<(), FsError> {
        let max = lease_core::MAX_LEASE_DURATION;
        for (option, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("stale_threshold", self.stale_threshold),
            ("retry_delay", self.retry_delay),
        ] {
            if value > max {
                return Err(FsError::InvalidOption {
                    option,
                    reason: format!(
                        "{} is longer than the maximum {}",
                        lease_core::backend::fmt_duration(value),
                        lease_core::backend::fmt_duration(max)
                    ),
                });
            }
        }
        for (option, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("stale_threshold", self.stale_threshold),
        ] {
            if value.is_zero() {
                return Err(FsError::InvalidOption {
                    option,
                    reason: "must be greater than zero".into(),
                });
            }
        }
        if self.stale_threshold < self.heartbeat_interval.saturating_mul(2) {
            return Err(FsError::InvalidOption {
                option: "stale_threshold",
                reason: format!(
                    "{:?} must be at least twice the heartbeat interval {:?}",
                    self.stale_threshold, self.heartbeat_interval
                ),
            });
        }
        Ok(())
    }

    fn margin(&self) -> Duration {
        // The part of the stale threshold the holder does not trust: covers the time between
        // checking and acting.
        (self.stale_threshold / 10).max(self.heartbeat_interval / 2)
    }
}

/// The current tenure.
#[derive(Debug)]
struct Tenure {
    token: String,
    held: Held,
    /// The state entry's name: every renewal and the release rename from it.
    name: String,
    /// The lock directory (holding its kernel lock in kernel mode); taken out by the heartbeat
    /// for the duration of its I/O.
    dir: Option<KeyDir>,
    deadline: Instant,
    /// The same deadline on `CLOCK_BOOTTIME` itself, which counts time suspended: a host that
    /// slept past the deadline must not resume trusting its tenure (a holder on another host
    /// may have taken it over by observation meanwhile). `deadline` is on
    /// [`lease_core::SystemClock`], which counts it too; this second check stays for a clock
    /// that does not (a boot clock unreadable when `SystemClock` first read it). 0: unknown.
    boot_deadline: u64,
    epoch: u64,
    /// When the heartbeat thread renews next.
    next_beat: Instant,
}

#[derive(Debug, Default)]
struct State {
    tenure: Option<Tenure>,
    lost: Option<LossReason>,
    epoch: u64,
    /// The process whose heartbeat thread runs (it parks between tenures): in a `fork`ed
    /// child, the parent's thread does not exist, and the child's first tenure starts its own.
    heartbeat_in: Option<u32>,
    /// The heartbeat thread waits for a tenure, so an acquisition must wake it. Otherwise it
    /// wakes by itself at its tenure's next beat and finds out then whether that tenure (or a
    /// newer one) is current: neither release nor acquisition wakes it, which would cost two
    /// context switches per uncontended acquire + release.
    parked: bool,
    /// Releases waiting for a heartbeat in flight to hand the directory back: only then does a
    /// heartbeat wake anyone when it is done.
    awaiting_dir: u32,
    /// A [`FileLockGuard`] of this lock lives: another acquisition through the lock is refused as
    /// held (by this lock), as another process's would be.
    guarded: bool,
    /// The `FileLock` was dropped (its guard may live on).
    lock_dropped: bool,
    /// The `FileLock` and its guard were dropped: the heartbeat thread ends.
    closed: bool,
}

/// Observations are per process, not per `FileLock`: a caller that makes a new `FileLock` for
/// every attempt still sees a hung holder on another host go stale.
fn observations() -> &'static Observations {
    static OBSERVED: std::sync::OnceLock<Observations> = std::sync::OnceLock::new();
    OBSERVED.get_or_init(Observations::default)
}

/// A thread blocked in `flock` on the lock directory, for a waiter: the kernel wakes it when the
/// holder releases or dies. It hands the locked directory over only while a caller of
/// [`FileLock::acquire_with`] wants it, and otherwise lets the kernel lock go at once.
#[derive(Debug)]
struct Waiter {
    rx: mpsc::Receiver<Result<Option<KeyDir>, FsError>>,
    wanted: Arc<Mutex<bool>>,
    /// The process whose thread blocks: in a `fork`ed child that thread does not exist, so the
    /// child starts its own.
    started_in: u32,
}

struct Shared {
    path: PathBuf,
    /// The lock's parent directory, opened once: the lock directory is created, opened and
    /// checked relative to it, never through a path another user could swap.
    base: Arc<Base>,
    /// The lock directory's name in `base`.
    name: std::ffi::OsString,
    /// The key errors name: the path ([`key_of_path`]).
    key: LeaseKey,
    options: Options,
    mode: LockMode,
    time: Timebase,
    state: Mutex<State>,
    wake: Condvar,
    waiter: Mutex<Option<Waiter>>,
    /// The lock directory between tenures, kept open (and its directory stream) so that the next
    /// acquisition need not open it again; checked against the path as an opened one is.
    idle: Mutex<Option<KeyDir>>,
    /// The process that opened the lock, whose heartbeat thread this is: a `fork`ed child's
    /// copy has no such thread, and must not wait for a lock that thread held at the fork.
    opened_in: u32,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// `mutex` locked, without waiting in a `fork`ed child of the process that opened the lock:
    /// a thread of the parent (its heartbeat, a waiter, another caller) that held it at the
    /// moment of the fork does not exist in the child, and the lock stays locked there forever.
    /// Free, it is taken at once, in any process, without asking which (no `getpid`).
    fn lock_here<'a, T>(&self, mutex: &'a Mutex<T>) -> Result<MutexGuard<'a, T>, FsError> {
        match mutex.try_lock() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if self.opened_in == std::process::id() => {
                Ok(mutex.lock().unwrap_or_else(PoisonError::into_inner))
            }
            Err(std::sync::TryLockError::WouldBlock) => Err(FsError::Io {
                op: "use in a forked child (a thread of the parent held this FileLock at the \
                     fork: open a new FileLock in this process) of",
                path: self.path.clone(),
                transient: false,
                source: std::io::Error::from(std::io::ErrorKind::WouldBlock),
            }),
        }
    }
}

/// A cross-process lease on one path (Go: `lockfile.PIDLock`, see
/// [*Coming from Go*](#coming-from-gos-kitlockfile)).
///
/// [`acquire`](Self::acquire) waits until the lease is acquired, [`try_acquire`](Self::try_acquire)
/// makes one attempt; both return a [`FileLockGuard`], whose existence proves holding: it has
/// the fencing token, [`check`](FileLockGuard::check) and [`release`](FileLockGuard::release),
/// and dropping it releases. As with `std::sync::Mutex`, holding is the guard, not state of the
/// lock: while a guard lives, an acquisition through the same lock (from any thread: share it
/// in an `Arc`) is a contender like another process's, refused as held by `try_acquire` and
/// waited out by `acquire`. There is no "acquired twice".
///
/// ```
/// use lease_file::FileLock;
///
/// let dir = tempfile::tempdir()?;
/// let lock = FileLock::new(dir.path().join("deploy.lease"))?;
/// let guard = lock.acquire()?; // waits until acquired
/// let fencing = guard.check()?;
///
/// // Another lock on the same path (in this process or any other) is turned away.
/// let other = FileLock::new(dir.path().join("deploy.lease"))?;
/// let err = other.try_acquire().unwrap_err();
/// assert!(err.is_held());
/// assert_eq!(err.holder().and_then(|h| h.pid()), Some(std::process::id()));
///
/// guard.release()?;
/// assert!(other.try_acquire()?.fencing_token() > fencing);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Coming from Go's `kit/lockfile`
///
/// A Go `PIDLock` and a `FileLock` on the same path exclude each other (see
/// [*Other lock protocols*](crate::protocol#other-lock-protocols-on-the-same-path)), so a
/// program can move from one to the other one process at a time. The names map as follows;
/// the verbs differ: Go's `Acquire` makes one attempt, which is
/// [`try_acquire`](Self::try_acquire) here ([`acquire`](Self::acquire) waits, as `lock()` does
/// in Rust), and holding is a value, the [`FileLockGuard`] both return, rather than state inside
/// the lock: Go's `Release` and `Held` are the guard's.
///
/// | Go | Rust |
/// |---|---|
/// | `NewPIDLock(path)` | [`FileLock::new`] |
/// | `NewPIDLockWithOptions(path, opts)` | [`FileLock::builder`] |
/// | its options (`AcquireRetryLimit`, `AcquireRetryDelay`, ...) | [`FileLockBuilder`]'s `with_*` setters, with the Go package's defaults |
/// | `(*PIDLock).Acquire` (one attempt) | [`FileLock::try_acquire`], which returns the [`FileLockGuard`] |
/// | `(*PIDLock).Release` | [`FileLockGuard::release`] (or drop the guard) |
/// | `(*PIDLock).Path` | [`FileLock::path`] |
/// | `(*PIDLock).Held` | [`FileLockGuard::check`]`.is_ok()` |
/// | `IsLeaseHeld`, `IsLeaseNotOwned` | [`LeaseError::is_held`], [`LeaseError::is_not_owned`] |
///
/// Two Go options have no counterpart, because this protocol has nothing for them to do; a port
/// drops them:
///
/// * `ProcessAppearsAlive` (which the Go package itself ignores): this crate never judges a
///   holder by its pid, which may be reused or live in another PID namespace. A holder's death
///   is known from the kernel lock it held, or in heartbeat-only mode from its heartbeats
///   stopping for [`with_stale_threshold`](FileLockBuilder::with_stale_threshold).
/// * `InvalidPIDLockStaleThreshold`: there are no unparseable records to reclaim. The lock's
///   state is a file name, and a file of another protocol at the path is never taken over (an
///   unparseable one younger than the Go package's own 1.2 s reads as a Go lock being written).
///   To wait longer for a busy lock, use [`acquire_with`](Self::acquire_with).
///
/// ```
/// use lease_file::FileLock;
///
/// let dir = tempfile::tempdir()?;
/// let lock = FileLock::builder(dir.path().join("a.lock")).build()?; // Go: NewPIDLock
/// let held = lock.try_acquire()?; // Go: lock.Acquire()
/// assert!(held.check().is_ok()); // Go: lock.Held()
/// held.release()?; // Go: lock.Release()
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Files
///
/// The path `P` is a directory holding one state entry whose name is the lease state
/// (`free.<generation>` or `held.<generation>.<renewal>...`, see [`protocol`](crate::protocol)); the holder's
/// diagnostic record (pid, host, label, times) is that entry's content. Nothing else is created.
///
/// # Costs (kernel mode)
///
/// Syscalls counted with `strace -f` on the helper of `benches/file_lease.rs` (marked traces,
/// 200 operations each, ext4), the directory being kept open between tenures; the heartbeat
/// thread's `futex` wakes (about one per acquire and release) are not counted:
///
/// | operation | syscalls |
/// |---|---:|
/// | acquire | 13 |
/// | release | 5 |
/// | release of a tenure that lasted 10 ms or was renewed | 6 |
/// | heartbeat (its thread) | 3 |
/// | refused attempt | 12 |
/// | first acquisition, or after the directory was replaced (or in a forked child) | +11 |
///
/// * acquire: `flock(LOCK_EX|LOCK_NB)`; the listing, `getdents64` x2 and `lseek`; `getrandom`
///   for the owner token; `getpid` x5 (the record, and the fork checks: the process that
///   opened the kept directory, took the kernel lock and owns the guard); one `renameat`; one `pwrite` of the
///   description; `newfstatat`, that the path still names the directory.
/// * release: `getpid` x3 (the fork checks, the last before the directory is kept), one
///   `renameat`, `flock(LOCK_UN)`; a tenure that
///   lasted first empties its state entry with one `ftruncate` (see
///   [*Deleting and pruning keys*](crate::protocol#deleting-and-pruning-keys): a free key then
///   holds no data block).
/// * heartbeat: the timed `futex` wait, one `renameat`, `newfstatat` (the path check); plus a
///   `flock` try while a takeover from a hung holder waits for its kernel lock.
/// * refused: `flock` (refused), the listing (3), `getrandom`, `getpid`, the holder's
///   description (`openat`, `statx`, `read` x2, `close`), `newfstatat` (the path check).
/// * first acquisition: also `openat`, `statx` and `geteuid` x2 (the ownership checks) of the
///   directory, a stream on it (`fcntl` x3, `newfstatat`), and `openat`, `statx`, `geteuid` of
///   the state entry for the description. A process's first acquisition also reads its
///   identity once (`uname`, `/proc/self/stat`, the boot id).
///
/// The floor, `open(O_CREAT|O_EXCL)` + `close` + `unlink`, is 3. Heartbeat-only mode is the
/// same without `flock` and the kernel lock's `getpid` (acquire 10, release 3 or 4); [`with_fsync`](FileLockBuilder::with_fsync) adds an `fsync` of the
/// directory after each rename. The bench's times for these, each beside its floor measured in
/// the same run, are in
/// [docs/benchmarks.md](https://github.com/lease-rs/lease/blob/main/docs/benchmarks.md).
pub struct FileLock {
    shared: Arc<Shared>,
}

impl fmt::Debug for FileLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLock")
            .field("path", &self.shared.path)
            .field("mode", &self.shared.mode)
            .field("held", &self.shared.check_tenure().is_ok())
            .finish_non_exhaustive()
    }
}

impl FileLock {
    /// A lock for `path` with default options (Go: `New`): `builder(path).build()`. Creates
    /// the parent directory if needed and detects the [`LockMode`].
    ///
    /// # Errors
    /// As [`FileLockBuilder::build`].
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, LeaseError> {
        Self::builder(path).build()
    }

    /// A builder for a lock on `path`, with the Go package's defaults (Go:
    /// `NewWithOptions`).
    pub fn builder(path: impl Into<PathBuf>) -> FileLockBuilder {
        FileLockBuilder {
            path: path.into(),
            options: Options::default(),
        }
    }

    fn open(path: PathBuf, options: Options, key: &LeaseKey) -> Result<Self, FsError> {
        options.validate()?;
        if path.file_name().is_none() {
            return Err(FsError::InvalidOption {
                option: "path",
                reason: format!("{} names no file", path.display()),
            });
        }
        let dir = path.parent().map(Path::to_owned).unwrap_or_default();
        let name = path.file_name().map(ToOwned::to_owned).unwrap_or_default();
        crate::state::check_name(&name)?;
        let base = Arc::new(Base::open(
            &dir,
            Some(options.dir_mode),
            options.shared_directory,
        )?);
        let (mode, mode_reason) = detect(&base, options.mode)?;
        tracing::debug!(path = %path.display(), ?mode, %mode_reason, "file lock ready");
        Ok(Self {
            shared: Arc::new(Shared {
                path,
                base,
                name,
                key: key.clone(),
                options,
                mode,
                time: Timebase::system(),
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
                waiter: Mutex::new(None),
                idle: Mutex::new(None),
                opened_in: std::process::id(),
            }),
        })
    }

    fn lease_error(&self, error: FsError) -> LeaseError {
        error.into_lease(&self.shared.key)
    }

    /// The lock's path (Go: `Path`).
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Which protocol this lock runs.
    pub fn mode(&self) -> LockMode {
        self.shared.mode
    }

    /// The current holder, or `None` if free (released or never held): pid and host, the label
    /// as [`owner`](Holder::owner), the generation as [`fencing`](Holder::fencing), when it
    /// acquired and last heartbeat as [`acquired_at`](Holder::acquired_at) and
    /// [`renewed_at`](Holder::renewed_at) (wall clock, display only).
    ///
    /// # Errors
    /// [`LeaseError::Backend`] for I/O errors, [`LeaseError::Corrupt`] for hostile files,
    /// [`LeaseError::Foreign`] for another protocol's.
    pub fn holder(&self) -> Result<Option<Holder>, LeaseError> {
        self.current_holder().map_err(|e| self.lease_error(e))
    }

    fn current_holder(&self) -> Result<Option<Holder>, FsError> {
        let kd = match KeyDir::open(&self.shared.base, &self.shared.name, Kind::Lease, None) {
            Ok(Some(kd)) => kd,
            Ok(None) => return Ok(None),
            Err(FsError::Held { holder, .. }) => return Ok(Some(*holder)),
            Err(e) => return Err(e),
        };
        let found = kd.state()?;
        Ok(match &found.state {
            state::State::Free(_) => None,
            state::State::Held(held) => Some(held.holder(engine::describe_tenure(&kd, &found))),
        })
    }

    /// Acquires, **waiting** until the lease is free ([`WaitOptions::default()`]: no timeout),
    /// as `std::sync::Mutex::lock` does; see [`acquire_with`](Self::acquire_with) for how it
    /// waits and how to bound the wait.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), but never a timeout.
    pub fn acquire(&self) -> Result<FileLockGuard, LeaseError> {
        self.acquire_with(&WaitOptions::default())
    }

    /// One attempt to acquire (Go: `Acquire`): a lock held by a live owner fails at once with
    /// [`LeaseError::Held`]; a transient race (the state changing under every look,
    /// interrupted I/O) is retried up to `acquire_retries` times, `retry_delay` apart, as the Go
    /// package retries its stale-removal races. To wait for a held lock, use
    /// [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// [`LeaseError::Held`] naming the holder; a transient [`LeaseError::Backend`] once the
    /// retries are spent; [`LeaseError::Backend`] for other I/O errors,
    /// [`LeaseError::Corrupt`] for hostile files, [`LeaseError::Foreign`] for another
    /// protocol's, at once.
    pub fn try_acquire(&self) -> Result<FileLockGuard, LeaseError> {
        let fencing = self.attempt_retrying()?;
        Ok(FileLockGuard::new(self.shared.clone(), fencing))
    }

    /// One attempt, its transient races retried `acquire_retries` times.
    fn attempt_retrying(&self) -> Result<FencingToken, LeaseError> {
        let mut attempt = 0;
        loop {
            match self.attempt_once() {
                Err(e) if e.is_transient() && attempt < self.shared.options.acquire_retries => {
                    attempt += 1;
                    std::thread::sleep(self.shared.options.retry_delay);
                }
                other => return other,
            }
        }
    }

    /// Acquires, waiting up to [`wait`'s timeout](WaitOptions::timeout) (forever when it has
    /// none), as a lease-core guard's `with_wait` does for a store; a zero timeout is one attempt
    /// (its transient races not retried) that fails with [`LeaseError::Held`] naming the holder.
    /// Only the timeout is read: in
    /// kernel mode a waiter for a holder that holds the kernel lock blocks in `flock` and is woken
    /// by the kernel the moment the holder releases or dies; otherwise (and for a hung holder,
    /// taken over once its lease stood still for its duration) it looks again every
    /// [`retry_delay`](FileLockBuilder::with_retry_delay). `wait`'s backoff and `on_wait`
    /// callback are not used.
    ///
    /// ```
    /// use lease_core::WaitOptions;
    /// use lease_file::FileLock;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let holder = FileLock::new(dir.path().join("a.lease"))?;
    /// let _held = holder.acquire()?;
    /// let waiter = FileLock::new(dir.path().join("a.lease"))?;
    /// let err = waiter.acquire_with(&WaitOptions::new(Duration::from_millis(50))).unwrap_err();
    /// assert!(err.is_timeout());
    /// assert_eq!(err.holder().and_then(|h| h.pid()), Some(std::process::id()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Timeout`] naming the last holder seen (pid, host, since); the last
    /// transient error when that persisted until the timeout; other errors at once.
    pub fn acquire_with(&self, wait: &WaitOptions) -> Result<FileLockGuard, LeaseError> {
        let fencing = self.wait_for(wait)?;
        Ok(FileLockGuard::new(self.shared.clone(), fencing))
    }

    /// Waits as `wait` says, then holds the lease.
    fn wait_for(&self, wait: &WaitOptions) -> Result<FencingToken, LeaseError> {
        let timeout = wait.timeout().unwrap_or(Duration::MAX);
        let result = self
            .wait_to_acquire(timeout)
            .map_err(|e| self.lease_error(e));
        // A thread still blocked in `flock` for us is not wanted any more: when it gets the
        // kernel lock, it lets it go at once (it is kept for the next call). Handing it over
        // to nobody, it would keep the kernel lock for as long as this `FileLock` lives, from
        // whoever holds the lease next, this lock's own tenure included. (In a forked child, a
        // parent's waiter is not this process's: its thread does not exist here.)
        let Ok(mut waiter) = self.shared.lock_here(&self.shared.waiter) else {
            return result;
        };
        if let Some(w) = waiter
            .as_ref()
            .filter(|w| w.started_in == std::process::id())
        {
            let mut wanted = w.wanted.lock().unwrap_or_else(PoisonError::into_inner);
            *wanted = false;
            // It may have handed the lock over just before: let that go too.
            let done = !matches!(w.rx.try_recv(), Err(mpsc::TryRecvError::Empty));
            drop(wanted);
            if done {
                *waiter = None;
            }
        }
        result
    }

    fn wait_to_acquire(&self, timeout: Duration) -> Result<FencingToken, FsError> {
        let start = Instant::now();
        let mut locked = None;
        // The generation of a holder whose state claims a kernel lock that, once we held this
        // directory's, still did not prove it gone (it names another directory's lock, or a
        // clock not shared with us): the kernel lock is free and blocking on it returns at once,
        // so waiting for it again would spin. Poll that holder instead.
        let mut kernel_lock_silent = None;
        loop {
            let had_kernel_lock = locked.is_some();
            match self.try_acquire_with(locked.take()) {
                // A zero timeout is one attempt, refused as held (as a guard's zero wait is).
                Err(held @ FsError::Held { .. }) if timeout.is_zero() => return Err(held),
                Err(FsError::Held {
                    holder,
                    kernel_lock,
                    ..
                }) => {
                    if had_kernel_lock {
                        kernel_lock_silent = Some(holder.fencing_token());
                    }
                    let waited = start.elapsed();
                    if waited >= timeout {
                        return Err(FsError::Timeout {
                            path: self.shared.path.clone(),
                            waited,
                            holder: Some(holder),
                        });
                    }
                    let poll = self
                        .shared
                        .options
                        .retry_delay
                        .min(timeout - waited)
                        .max(Duration::from_micros(100));
                    if self.shared.mode == LockMode::Kernel
                        && kernel_lock
                        && kernel_lock_silent != Some(holder.fencing_token())
                    {
                        // The kernel wakes us when the holder lets go; a hung holder keeps its
                        // lock, so look again at least once per `stale_threshold / 4`.
                        let wait = (self.shared.options.stale_threshold / 4)
                            .max(poll)
                            .min(timeout - waited);
                        // Start the heartbeat thread now, not in the middle of the takeover.
                        self.start_heartbeat()?;
                        locked = self.wait_for_kernel_lock(wait)?;
                    } else {
                        std::thread::sleep(poll);
                    }
                }
                Err(e) if e.is_transient() && start.elapsed() < timeout => {
                    let remaining = timeout.saturating_sub(start.elapsed());
                    std::thread::sleep(self.shared.options.retry_delay.min(remaining));
                }
                other => return other,
            }
        }
    }

    /// Waits up to `wait` for a thread blocked in `flock` on the lock directory (one per lock,
    /// kept across the calls of one `acquire_with`) to get the kernel lock, and hands its
    /// descriptor over.
    fn wait_for_kernel_lock(&self, wait: Duration) -> Result<Option<KeyDir>, FsError> {
        let mut waiter = self.shared.lock_here(&self.shared.waiter)?;
        let pid = std::process::id();
        if waiter.as_ref().is_some_and(|w| w.started_in != pid) {
            *waiter = None;
        }
        let w = waiter.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel();
            let wanted = Arc::new(Mutex::new(true));
            let base = self.shared.base.clone();
            let name = self.shared.name.clone();
            let still_wanted = wanted.clone();
            std::thread::spawn(move || {
                let got = KeyDir::open(&base, &name, Kind::Lease, None)
                    .and_then(|kd| kd.map(|mut kd| kd.lock_blocking().map(|()| kd)).transpose());
                let wanted = still_wanted.lock().unwrap_or_else(PoisonError::into_inner);
                if *wanted {
                    let _ = tx.send(got);
                } // else the lock goes with `got`, here
            });
            Waiter {
                rx,
                wanted,
                started_in: pid,
            }
        });
        *w.wanted.lock().unwrap_or_else(PoisonError::into_inner) = true;
        match w.rx.recv_timeout(wait) {
            Ok(got) => {
                *waiter = None;
                got
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                *waiter = None;
                Ok(None)
            }
        }
    }

    /// One attempt to acquire, no retries.
    fn attempt_once(&self) -> Result<FencingToken, LeaseError> {
        self.try_acquire_with(None).map_err(|e| self.lease_error(e))
    }

    /// One attempt, through `dir` if given (already holding the kernel lock).
    fn try_acquire_with(&self, dir: Option<KeyDir>) -> Result<FencingToken, FsError> {
        let shared = &self.shared;
        let span = tracing::debug_span!("file_lock_acquire", path = %shared.path.display());
        let _enter = span.enter();
        {
            let mut state = shared.lock_here(&shared.state)?;
            if state.guarded {
                // This lock's own guard holds it: a contender like any other process's.
                return Err(self.held_by_own_guard(&state));
            }
            if state.tenure.is_some() {
                // A lost tenure is over: forget it (its kernel lock is already dropped).
                state.tenure = None;
                state.epoch += 1;
            }
        }
        match dir {
            Some(kd) => self.attempt(kd, false),
            None => {
                let idle = self
                    .shared
                    .lock_here(&self.shared.idle)?
                    .take()
                    // One kept by the process this one was forked from shares its kernel lock
                    // with that process: closed here (the parent's copy keeps its lock), and
                    // the path opened afresh.
                    .filter(KeyDir::opened_here);
                match idle {
                    Some(kd) => self.attempt(kd, true),
                    None => self.attempt(self.open_dir()?, false),
                }
            }
        }
    }

    /// The refusal of an acquisition through this lock while its guard lives: held by this
    /// process, as another lock's attempt would be told.
    fn held_by_own_guard(&self, state: &State) -> FsError {
        let me = crate::ident::current();
        let tenure = state.tenure.as_ref();
        let generation = tenure.map_or(0, |t| t.held.generation);
        FsError::Held {
            path: self.shared.path.clone(),
            holder: Box::new(own_holder(
                &me,
                self.shared.options.label.as_deref(),
                generation,
            )),
            kernel_lock: state.lost.is_none() && tenure.is_some_and(|t| t.held.kernel.is_some()),
        }
    }

    /// Opens (creating it if needed) the lock directory.
    fn open_dir(&self) -> Result<KeyDir, FsError> {
        let opts = &self.shared.options;
        let modes = Modes {
            file: opts.file_mode,
            dir: opts.file_mode | ((opts.file_mode & 0o444) >> 2),
            fsync: opts.fsync,
        };
        KeyDir::open(
            &self.shared.base,
            &self.shared.name,
            Kind::Lease,
            Some(modes),
        )?
        .map(|kd| kd.durable(opts.fsync))
        .ok_or_else(|| FsError::Io {
            op: "open lock directory",
            path: self.shared.path.clone(),
            transient: true,
            source: std::io::Error::other("removed while being created"),
        })
    }

    /// Starts the heartbeat thread if it is not running (it parks until a tenure starts).
    fn start_heartbeat(&self) -> Result<(), FsError> {
        let mut state = self.shared.lock_here(&self.shared.state)?;
        let here = std::process::id();
        if state.heartbeat_in == Some(here) {
            return Ok(());
        }
        self.spawn_heartbeat(&mut state, here)
    }

    /// Starts the heartbeat thread of process `here` (this one).
    fn spawn_heartbeat(&self, state: &mut State, here: u32) -> Result<(), FsError> {
        state.heartbeat_in = Some(here);
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("lease-file-heartbeat".into())
            .spawn(move || heartbeat_loop(&shared))
            .map(drop)
            .map_err(|e| crate::fsio::io_error("spawn heartbeat", &self.shared.path, e))
    }

    /// One attempt through `kd`. A directory kept from an earlier tenure (`cached`) that no
    /// longer is the one at the path (removed or replaced by hand), or that fails, is dropped
    /// and the attempt made again through a freshly opened one.
    fn attempt(&self, kd: KeyDir, cached: bool) -> Result<FencingToken, FsError> {
        let shared = &self.shared;
        let opts = &shared.options;
        // A directory handed over by the waiting thread was opened without the option.
        let mut kd = kd.durable(opts.fsync);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let claim = Claim {
            token: &token,
            duration: opts.stale_threshold,
            kernel: shared.mode == LockMode::Kernel,
            record: engine::holder_record(
                shared.mode,
                &token,
                opts.label.clone(),
                SystemTime::now(),
                opts.stale_threshold,
            ),
        };
        let attempt = match engine::try_acquire(&mut kd, &claim, &shared.time, observations()) {
            Err(_) if cached => return self.attempt(self.open_dir()?, false),
            other => other?,
        };
        match attempt {
            Attempt::Busy { found, holder } => {
                if cached && !kd.still_at_path() {
                    return self.attempt(self.open_dir()?, false);
                }
                self.shared.keep_idle(kd);
                let state::State::Held(held) = &found.state else {
                    return Err(FsError::Io {
                        op: "acquire",
                        path: shared.path.clone(),
                        transient: true,
                        source: std::io::Error::other("the lease state changed"),
                    });
                };
                Err(FsError::Held {
                    path: shared.path.clone(),
                    holder: Box::new(held.holder(holder)),
                    kernel_lock: held.kernel.is_some(),
                })
            }
            Attempt::Won { held, name, now } => {
                self.install(kd, cached, token, held, name, now.mono)
            }
        }
    }

    /// Makes a won tenure this lock's own, after checking that the path still names the
    /// directory it was won in, and starts (or wakes) the heartbeat thread.
    fn install(
        &self,
        mut kd: KeyDir,
        cached: bool,
        token: String,
        held: Held,
        name: String,
        now: Instant,
    ) -> Result<FencingToken, FsError> {
        let shared = &self.shared;
        let opts = &shared.options;
        let generation = held.generation;
        if !kd.still_at_path() {
            // The directory was moved away or replaced while we took it: nobody else can see
            // this tenure, so do not trust it.
            let _ = engine::release(&mut kd, &name, &held, None, &shared.time);
            if cached {
                return self.attempt(self.open_dir()?, false);
            }
            return Err(FsError::Io {
                op: "acquire",
                path: shared.path.clone(),
                transient: true,
                source: std::io::Error::other("the lock directory was replaced"),
            });
        }
        let kernel = held.kernel.is_some();
        // The directory was opened, or its opener checked, in this process: its opener is this
        // process's id, known without another `getpid`.
        let here = kd.opener();
        let mut state = lock(&shared.state);
        state.epoch += 1;
        let epoch = state.epoch;
        state.lost = None;
        state.guarded = true;
        state.tenure = Some(Tenure {
            token,
            held,
            name,
            dir: Some(kd),
            deadline: now + opts.stale_threshold.saturating_sub(opts.margin()),
            boot_deadline: boot_deadline(now + opts.stale_threshold.saturating_sub(opts.margin())),
            epoch,
            next_beat: now + opts.heartbeat_interval,
        });
        if state.heartbeat_in != Some(here) {
            self.spawn_heartbeat(&mut state, here)?;
        } else if state.parked {
            shared.wake.notify_all();
        }
        tracing::info!(generation, kernel, "file lock acquired");
        Ok(lease_core::backend::fencing_token(generation))
    }
}

impl Shared {
    fn lease_error(&self, error: FsError) -> LeaseError {
        error.into_lease(&self.key)
    }

    /// The current tenure's deadline ([`FileLockGuard::deadline`]); now when there is none.
    fn tenure_deadline(&self) -> Instant {
        lock(&self.state)
            .tenure
            .as_ref()
            .map_or_else(mono_now, |t| t.deadline)
    }

    /// The fencing generation of the current tenure if it can be trusted, else why not
    /// ([`FileLockGuard::check`]).
    fn check_tenure(&self) -> Result<FencingToken, LeaseError> {
        let state = lock(&self.state);
        let key = &self.key;
        if let Some(lost) = &state.lost {
            return Err(LeaseError::lost(key.clone(), lost.clone()));
        }
        match &state.tenure {
            None => Err(not_held(key)),
            Some(t) if mono_now() >= t.deadline || suspended_past(t.boot_deadline) => {
                Err(LeaseError::lost(key.clone(), LossReason::DeadlinePassed))
            }
            Some(t) => Ok(lease_core::backend::fencing_token(t.held.generation)),
        }
    }

    /// Releases the current tenure ([`FileLockGuard::release`]); on an I/O error the tenure
    /// is kept.
    fn release_tenure(&self) -> Result<(), LeaseError> {
        let shared = self;
        let span = tracing::debug_span!("file_lock_release", path = %shared.path.display());
        let _enter = span.enter();
        let mut state = lock(&shared.state);
        loop {
            if state.lost.is_some() || state.tenure.is_none() {
                if state.tenure.take().is_some() {
                    state.epoch += 1;
                }
                return Err(match &state.lost {
                    Some(lost) => LeaseError::lost(shared.key.clone(), lost.clone()),
                    None => not_held(&shared.key),
                });
            }
            // A heartbeat in flight has the directory: wait for it to come back.
            if state.tenure.as_ref().is_some_and(|t| t.dir.is_some()) {
                break;
            }
            state.awaiting_dir += 1;
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.awaiting_dir -= 1;
        }
        let Some(tenure) = state.tenure.as_mut() else {
            return Err(self.lease_error(busy(&shared.path)));
        };
        let held = tenure.held.clone();
        let generation = held.generation;
        let name = tenure.name.clone();
        let Some(mut kd) = tenure.dir.take() else {
            return Err(self.lease_error(busy(&shared.path)));
        };
        let released = engine::release(&mut kd, &name, &held, None, &shared.time);
        match released {
            Err(e) => {
                if let Some(t) = state.tenure.as_mut() {
                    t.dir = Some(kd);
                }
                Err(self.lease_error(e))
            }
            Ok(ours) => {
                state.tenure = None;
                state.epoch += 1;
                let lost = state.lost.clone();
                drop(state);
                // The heartbeat thread is not woken: it finds the tenure gone at its next beat.
                self.keep_idle(kd);
                if ours {
                    tracing::info!(generation, "file lock released");
                    Ok(())
                } else {
                    tracing::warn!(generation, "release found the lease no longer ours");
                    let reason = lost.unwrap_or(LossReason::NotOwned(NotOwnedReason::Missing));
                    Err(LeaseError::lost(shared.key.clone(), reason))
                }
            }
        }
    }
    /// Gives up a tenure whose release failed: it is forgotten, its kernel lock dropped and
    /// its heartbeats stopped, so others take the lease over once it expires.
    fn abandon_tenure(&self) {
        let mut state = lock(&self.state);
        if state.tenure.take().is_some() {
            state.epoch += 1;
            tracing::warn!(path = %self.path.display(), "file lock tenure abandoned");
        }
    }

    /// Keeps `kd` (not holding the kernel lock) for the next acquisition.
    fn keep_idle(&self, mut kd: KeyDir) {
        kd.unlock();
        if kd.opened_here() {
            *self.idle.lock().unwrap_or_else(PoisonError::into_inner) = Some(kd);
        }
    }

    /// The guard is gone: the lock can be acquired again, and once the [`FileLock`] is gone too,
    /// the heartbeat thread ends.
    fn end_guard(&self) {
        let mut state = lock(&self.state);
        state.guarded = false;
        if state.lock_dropped {
            state.epoch += 1;
            state.closed = true;
        }
        self.wake.notify_all();
    }
}

/// A held [`FileLock`]: the file backend's blocking guard. Its existence proves that the lock
/// was acquired, and it is the only way to act on the tenure. It has the names every guard of
/// the project has, with the same meaning (lease-core's `BlockingLeaseGuard`): [`key`](Self::key),
/// [`fencing_token`](Self::fencing_token), [`check`](Self::check) (whose error says why the
/// lease was lost) and a blocking [`release`](Self::release). While it lives, the lock's
/// heartbeat thread keeps the lease alive, even after the [`FileLock`] itself is dropped: the
/// guard is `'static` and can move between threads.
///
/// Dropping the guard releases the lease best-effort, **in the process that acquired it only**:
/// the copy of a guard in a child made by `fork` leaves the parent's lease alone.
///
/// ```
/// use lease_file::FileLock;
///
/// let dir = tempfile::tempdir()?;
/// let lock = FileLock::new(dir.path().join("nightly.lease"))?;
/// {
///     let guard = lock.try_acquire()?;
///     assert_eq!(guard.check()?, guard.fencing_token());
///     // While the guard lives, the lock is held: by this lock too.
///     assert!(lock.try_acquire().unwrap_err().is_held());
/// } // dropped: released
/// let again = lock.try_acquire()?;
/// again.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping the guard releases the lock"]
pub struct FileLockGuard {
    shared: Arc<Shared>,
    fencing: FencingToken,
    /// The acquiring process: a guard copied into a forked child never releases.
    pid: u32,
    released: bool,
}

impl fmt::Debug for FileLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLockGuard")
            .field("path", &self.shared.path)
            .field("fencing", &self.fencing)
            .field("trusted", &self.check().is_ok())
            .finish_non_exhaustive()
    }
}

impl FileLockGuard {
    fn new(shared: Arc<Shared>, fencing: FencingToken) -> Self {
        Self {
            shared,
            fencing,
            pid: std::process::id(),
            released: false,
        }
    }

    /// The key this guard's errors name: the lock's path as a [`LeaseKey`] (control characters
    /// replaced by `?`, and only the end of a path longer than a key may be); the path itself
    /// is [`FileLock::path`].
    pub fn key(&self) -> &LeaseKey {
        &self.shared.key
    }

    /// The fencing generation of this tenure if it can still be trusted, else why not: pass it
    /// with every write to the protected resource. Reads no file.
    ///
    /// ```
    /// use lease_core::{LeaseError, LossReason};
    /// use lease_file::FileLock;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let guard = FileLock::new(dir.path().join("a.lease"))?.acquire()?;
    /// match guard.check() {
    ///     Ok(fencing) => assert_eq!(fencing, guard.fencing_token()),
    ///     Err(LeaseError::Lost { reason: LossReason::DeadlinePassed, .. }) => { /* paused */ }
    ///     Err(other) => return Err(other.into()), // taken over, removed, heartbeats failing
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Lost`] with the [`LossReason`] when the lease was lost (the reason the
    /// [`on_lost`](FileLockBuilder::on_lost) callback was told;
    /// [`LossReason::DeadlinePassed`] once the holder-side deadline passed without a
    /// heartbeat: paused, or I/O stalled; and at once in a `fork`ed child's copy, whose
    /// heartbeats are the parent's). It is [`is_not_owned`](LeaseError::is_not_owned).
    pub fn check(&self) -> Result<FencingToken, LeaseError> {
        if self.pid != std::process::id() {
            // A forked child's copy: the tenure and its heartbeats are the parent's.
            return Err(LeaseError::lost(
                self.shared.key.clone(),
                LossReason::DeadlinePassed,
            ));
        }
        self.shared.check_tenure()
    }

    /// The fencing generation of this tenure (even once no longer trusted).
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// The holder-side deadline of the latest heartbeat, on the system's monotonic clock
    /// ([`SystemClock`](lease_core::SystemClock)): after it, [`check`](Self::check) fails.
    /// Each heartbeat moves it on by the stale threshold less a margin; once the lease is lost
    /// it is the moment the loss was noticed.
    ///
    /// ```
    /// use lease_core::{Clock, SystemClock};
    /// use lease_file::FileLock;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let guard = FileLock::new(dir.path().join("a.lease"))?.acquire()?;
    /// let left = guard.deadline().saturating_duration_since(SystemClock.monotonic());
    /// assert!(left > Duration::ZERO && left <= Duration::from_secs(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(&self) -> Instant {
        if self.pid != std::process::id() {
            // A forked child's copy: the parent's heartbeat thread may have held the state at
            // the fork, and nothing is trusted here anyway.
            return self
                .shared
                .lock_here(&self.shared.state)
                .ok()
                .and_then(|state| state.tenure.as_ref().map(|t| t.deadline))
                .unwrap_or_else(mono_now);
        }
        self.shared.tenure_deadline()
    }

    /// Releases the lease (Go: `Release`): one rename of this tenure's state entry to
    /// `free.<generation>`, which succeeds only if the state is still exactly this tenure's, then
    /// drops the kernel lock. Never touches another owner's state. The lock can then be acquired
    /// again.
    ///
    /// # Errors
    /// [`LeaseError::Lost`] with the reason if the lease was lost; a [`LeaseError::Backend`] for
    /// I/O errors: the tenure is then abandoned (its kernel lock dropped, heartbeats stopped),
    /// and others take the lease over once it expires. [`LeaseError::Unsupported`] in a process
    /// other than the one that acquired the lease (a `fork`ed child's copy of the guard):
    /// nothing is renamed or unlocked, the parent keeps holding (see [*Forks*](crate::protocol#forks)).
    pub fn release(mut self) -> Result<(), LeaseError> {
        self.released = true;
        if self.pid != std::process::id() {
            // A forked child's copy: the tenure and its kernel lock are the parent's.
            tracing::warn!(acquired_by = self.pid, "release refused in a forked child");
            return Err(crate::forked_refusal("release"));
        }
        let result = self.shared.release_tenure();
        if result.as_ref().is_err_and(|e| !e.is_not_owned()) {
            self.shared.abandon_tenure();
        }
        self.shared.end_guard();
        result
    }
}

impl Drop for FileLockGuard {
    fn drop(&mut self) {
        if self.released || self.pid != std::process::id() {
            return;
        }
        if let Err(error) = self.shared.release_tenure() {
            tracing::debug!(%error, "best-effort release on drop failed");
            if !error.is_not_owned() {
                self.shared.abandon_tenure();
            }
        }
        self.shared.end_guard();
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // In a `fork`ed child whose parent had a thread inside the state at the fork, the
        // state stays locked forever: only a lock this process holds (it acquired through the
        // copy) needs telling, so the copy just goes.
        let Ok(mut state) = self.shared.lock_here(&self.shared.state) else {
            return;
        };
        state.lock_dropped = true;
        // A guard keeps the heartbeat thread; its end closes it.
        if !state.guarded {
            state.epoch += 1;
            state.closed = true;
        }
        self.shared.wake.notify_all();
    }
}

/// Now on the clock every tenure deadline here is measured on ([`lease_core::SystemClock`],
/// which counts time suspended): never std's `Instant::now`, which falls behind it by the time
/// the host slept, so comparing the two would trust a tenure that long past its deadline.
fn mono_now() -> Instant {
    lease_core::Clock::monotonic(&lease_core::SystemClock)
}

/// `CLOCK_BOOTTIME` now, in nanoseconds (0 if unreadable).
fn boottime_ns() -> u64 {
    crate::sys::suspend_clock_ns().unwrap_or(0)
}

/// `deadline` on `CLOCK_BOOTTIME`: now on that clock plus the time left until it (0 if the
/// clock cannot be read, which turns the check off).
fn boot_deadline(deadline: Instant) -> u64 {
    let left = deadline.saturating_duration_since(mono_now());
    match boottime_ns() {
        0 => 0,
        now => now.saturating_add(crate::engine::nanos(left)),
    }
}

/// Whether `CLOCK_BOOTTIME` says `boot_deadline` passed: the host slept past it, even if the
/// monotonic clock (stopped while it slept) says otherwise.
fn suspended_past(boot_deadline: u64) -> bool {
    boot_deadline != 0 && boottime_ns() >= boot_deadline
}

fn busy(path: &Path) -> FsError {
    FsError::Io {
        op: "release",
        path: path.to_owned(),
        transient: true,
        source: std::io::Error::other("a heartbeat is in flight"),
    }
}

/// The lock's heartbeat thread: started at the first acquisition, parked between tenures, ended
/// when the `FileLock` is dropped. One thread per lock, so a heartbeat stuck in slow I/O on one
/// path never delays another lock's.
///
/// It sleeps until the current tenure's next beat and looks again when it wakes: a tenure that
/// ended meanwhile is noticed then (release does not wake it), and a newer tenure is beaten on
/// that tenure's own schedule, which starts at its acquisition, so its first beat is never late
/// even though the acquisition did not wake the thread either. Only a parked thread (no tenure
/// for a whole interval) is woken, by the next acquisition.
fn heartbeat_loop(shared: &Arc<Shared>) {
    let span = tracing::debug_span!("file_lock_heartbeat", path = %shared.path.display());
    let _enter = span.enter();
    let interval = shared.options.heartbeat_interval;
    let mut state = lock(&shared.state);
    // Whether the thread already waited one interval without a tenure: only then does it park.
    // Parking at once would have every acquisition of a lock taken and released in a loop wake
    // it, only for it to find the tenure gone again.
    let mut lingered = false;
    loop {
        if state.closed {
            return;
        }
        let current = state
            .tenure
            .as_ref()
            .filter(|_| state.lost.is_none())
            .map(|t| (t.epoch, t.next_beat));
        let Some((epoch, due)) = current else {
            if lingered {
                state.parked = true;
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.parked = false;
                lingered = false;
            } else {
                // A tenure that starts meanwhile is due an interval after it starts, so after
                // this wait: its first beat is not late.
                state = shared
                    .wake
                    .wait_timeout(state, interval)
                    .map(|(s, _)| s)
                    .unwrap_or_else(|p| p.into_inner().0);
                lingered = true;
            }
            continue;
        };
        lingered = false;
        let now = mono_now();
        if now < due {
            state = shared
                .wake
                .wait_timeout(state, due - now)
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
            continue;
        }
        drop(state);
        heartbeat_once(shared, epoch);
        state = lock(&shared.state);
    }
}

/// One heartbeat; false when the tenure is over.
fn heartbeat_once(shared: &Shared, epoch: u64) -> bool {
    let (mut kd, name, held, token) = {
        let mut state = lock(&shared.state);
        match state.tenure.as_mut() {
            Some(t) if t.epoch == epoch => {
                // The next beat is due an interval after this one starts, however long it takes.
                t.next_beat = mono_now() + shared.options.heartbeat_interval;
                match t.dir.take() {
                    Some(kd) => (kd, t.name.clone(), t.held.clone(), t.token.clone()),
                    None => return true,
                }
            }
            _ => return false,
        }
    };
    let result = beat(shared, &mut kd, &name, &held, &token);
    settle_beat(shared, epoch, kd, result)
}

/// What one heartbeat found: renewed (the new state, its entry name, and when the renewal was
/// sent), lost, or failed (an error, retried until the deadline).
type Beat = Result<Result<(Held, String, Instant), LossReason>, FsError>;

/// The heartbeat's I/O: one rename of the tenure's state entry, then, when it missed, one read
/// of the state to say why.
fn beat(shared: &Shared, kd: &mut KeyDir, name: &str, held: &Held, token: &str) -> Beat {
    let opts = &shared.options;
    // The path is checked after the rename, not before: a renewal counts only if the path still
    // names the directory once it is made (a directory replaced before or during this heartbeat
    // fails that check as it would fail one made before). A rename that did not happen, or
    // failed, is checked too, before anything else is judged: a directory moved away or removed
    // is a loss now, not a failing heartbeat retried until the deadline.
    let kernel = shared.mode == LockMode::Kernel;
    let renewed = engine::renew(kd, name, held, opts.stale_threshold, kernel, &shared.time);
    if !kd.still_at_path() {
        return Ok(Err(LossReason::NotOwned(NotOwnedReason::Missing)));
    }
    if let Some((next, next_name, now)) = renewed? {
        return Ok(Ok((next, next_name, now.mono)));
    }
    let found = kd.state()?;
    match engine::mismatch(&found, held.generation, token) {
        // Still this tenure's state: the rename missed it (the entry was briefly away, or a
        // listing raced), which is a failed heartbeat, retried until the deadline.
        None if found.name == name => Err(FsError::Io {
            op: "heartbeat",
            path: shared.path.clone(),
            transient: true,
            source: std::io::Error::other("the lease state was briefly missing"),
        }),
        None | Some(engine::Gone::Expired) => Ok(Err(LossReason::DeadlinePassed)),
        Some(engine::Gone::Released) => Ok(Err(LossReason::NotOwned(NotOwnedReason::Missing))),
        Some(engine::Gone::TakenOver) => match &found.state {
            state::State::Held(h) => {
                let holder = h.holder(engine::describe_tenure(kd, &found));
                tracing::warn!(path = %shared.path.display(), %holder, "lease taken over");
                Ok(Err(LossReason::NotOwned(NotOwnedReason::TakenOver)))
            }
            state::State::Free(_) => Ok(Err(LossReason::NotOwned(NotOwnedReason::Missing))),
        },
    }
}

/// Records what a heartbeat found in the tenure it was made for (if that is still the current
/// one); false when the tenure is over.
fn settle_beat(shared: &Shared, epoch: u64, kd: KeyDir, result: Beat) -> bool {
    let opts = &shared.options;
    let mut state = lock(&shared.state);
    let Some(t) = state.tenure.as_mut().filter(|t| t.epoch == epoch) else {
        shared.wake.notify_all();
        return false;
    };
    let reason = match result {
        Ok(Ok((next, next_name, sent))) => {
            if next.kernel.is_some() && t.held.kernel.is_none() {
                tracing::info!(generation = next.generation, "tenure kernel lock obtained");
            }
            t.held = next;
            t.name = next_name;
            t.deadline = sent + opts.stale_threshold.saturating_sub(opts.margin());
            t.boot_deadline = boot_deadline(t.deadline);
            t.dir = Some(kd);
            tracing::trace!(
                generation = t.held.generation,
                seq = t.held.seq,
                "heartbeat written"
            );
            if state.awaiting_dir > 0 {
                shared.wake.notify_all();
            }
            return true;
        }
        Ok(Err(reason)) => reason,
        Err(error) if mono_now() < t.deadline => {
            tracing::warn!(%error, "heartbeat failed; retrying until the deadline");
            t.dir = Some(kd);
            shared.wake.notify_all();
            return true;
        }
        // The last heartbeat's error, whole: it is the loss's source.
        Err(error) => LossReason::BackendFailing(Arc::new(shared.lease_error(error))),
    };
    state.lost = Some(reason.clone());
    // Keep the tenure's generation visible, but let the kernel lock go to the new owner.
    if let Some(t) = state.tenure.as_mut() {
        t.deadline = mono_now();
    }
    drop(kd);
    drop(state);
    shared.wake.notify_all();
    tracing::warn!(path = %shared.path.display(), %reason, "file lock lost");
    if let Some(callback) = &opts.on_lost {
        callback(&reason);
    }
    false
}

/// This process as the holder of generation `generation` (0: none yet), described as another
/// process would find it: pid, host, label and fencing token.
fn own_holder(me: &crate::ident::Identity, label: Option<&str>, generation: u64) -> Holder {
    let mut holder = Holder::new().with_process(me.pid, me.host.clone());
    if generation > 0 {
        holder = holder.with_fencing(lease_core::backend::fencing_token(generation));
    }
    match label {
        Some(label) => holder.with_owner(label),
        None => holder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder's defaults are the Go `kit/lockfile` package's: defaultAcquireRetryLimit 12,
    /// defaultAcquireRetryDelay 20 ms, heartbeat every 250 ms, stale after 3 s, modes 0644 and
    /// 0755 (its defaultInvalidLockStaleThreshold has no counterpart: see `FileLock`, *Coming
    /// from Go*).
    #[test]
    fn defaults_match_the_go_package() {
        let o = FileLock::builder("a.lease").options;
        assert_eq!(o.heartbeat_interval, Duration::from_millis(250));
        assert_eq!(o.stale_threshold, Duration::from_secs(3));
        assert_eq!(o.acquire_retries, 12);
        assert_eq!(o.retry_delay, Duration::from_millis(20));
        assert_eq!(o.file_mode, 0o644);
        assert_eq!(o.dir_mode, 0o755);
        assert!(!o.fsync && !o.shared_directory);
    }

    /// A host that slept past the tenure's deadline (`CLOCK_BOOTTIME` ran on, `CLOCK_MONOTONIC`
    /// stood still: here, a boot-time deadline already behind while the monotonic one is far
    /// ahead) resumes distrusting its tenure: `check` says the deadline passed.
    /// Unix: Windows keeps no second deadline (its `Instant` counts sleep already).
    #[cfg(unix)]
    #[test]
    fn a_tenure_slept_past_on_the_boot_clock_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lock = FileLock::builder(dir.path().join("slept.lease"))
            .with_stale_threshold(Duration::from_secs(60))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let guard = lock.try_acquire().unwrap_or_else(|e| panic!("{e}"));
        assert!(guard.check().is_ok());
        {
            let mut state = lock
                .shared
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let tenure = state.tenure.as_mut().unwrap_or_else(|| panic!("a tenure"));
            assert!(tenure.deadline > mono_now() + Duration::from_secs(30));
            // As if the host had slept until a second past the deadline.
            tenure.boot_deadline = boottime_ns().saturating_sub(1_000_000_000);
        }
        let err = guard.check().unwrap_err();
        assert!(
            matches!(
                err,
                LeaseError::Lost {
                    reason: LossReason::DeadlinePassed,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// A guard copied into a forked child (here: one that says another process acquired it)
    /// leaves the lease alone when dropped; only the acquiring process releases. Unix: Windows
    /// has no `fork` (and the copy's kept directory handle, never closed, keeps Windows from
    /// removing the test's directory).
    #[cfg(unix)]
    #[test]
    fn a_guard_dropped_in_another_process_does_not_release() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("forked.lease");
        let lock = FileLock::new(&path).unwrap_or_else(|e| panic!("{e}"));
        let mut guard = lock.try_acquire().unwrap_or_else(|e| panic!("{e}"));
        let fencing = guard.fencing_token();
        guard.pid = guard.pid.wrapping_add(1);
        drop(guard);
        let other = FileLock::new(&path).unwrap_or_else(|e| panic!("{e}"));
        let err = other.try_acquire().map(drop).unwrap_err();
        assert!(err.is_held(), "still held after the copy's drop: {err}");
        // The acquiring process's own release still works.
        lock.shared
            .release_tenure()
            .unwrap_or_else(|e| panic!("{e}"));
        let next = other.try_acquire().unwrap_or_else(|e| panic!("{e}"));
        assert!(next.fencing_token() > fencing);
    }
}
