//! The blocking lock for one path: Go `kit/lockfile` parity plus kernel tenure locks, race-free
//! takeover and fencing generations.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, TryLockError};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use lease_core::FencingToken;

use crate::cs::{Cs, LockMode, ModePreference, detect};
use crate::fsio::{ensure_dir, open_companion, read_record_file, replace_atomically, with_suffix};
use crate::ident::{self, LivenessProbe};
use crate::{FileLockError, LeaseFileRecord, LostReason, SCHEMA_VERSION};

/// A callback told once when a held lease is lost.
pub type LostCallback = Arc<dyn Fn(&LostReason) + Send + Sync>;

/// Options of a [`FileLock`], with the Go package's meanings and defaults.
///
/// ```
/// use lease_file::FileLockOptions;
/// use std::time::Duration;
///
/// let options = FileLockOptions::default()
///     .with_acquire_retries(5)
///     .with_retry_delay(Duration::from_millis(50))
///     .with_heartbeat_interval(Duration::from_millis(100))
///     .with_stale_threshold(Duration::from_secs(2))
///     .on_lease_lost(|reason| eprintln!("{reason}"));
/// assert_eq!(options.stale_threshold(), Duration::from_secs(2));
/// ```
#[derive(Clone)]
pub struct FileLockOptions {
    acquire_retries: u32,
    retry_delay: Duration,
    invalid_record_stale: Duration,
    file_mode: u32,
    dir_mode: u32,
    liveness: Option<LivenessProbe>,
    heartbeat_interval: Duration,
    stale_threshold: Duration,
    on_lease_lost: Option<LostCallback>,
    mode: ModePreference,
    fsync: bool,
    label: Option<String>,
}

impl fmt::Debug for FileLockOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLockOptions")
            .field("acquire_retries", &self.acquire_retries)
            .field("retry_delay", &self.retry_delay)
            .field("invalid_record_stale", &self.invalid_record_stale)
            .field("file_mode", &format_args!("{:o}", self.file_mode))
            .field("dir_mode", &format_args!("{:o}", self.dir_mode))
            .field("liveness", &self.liveness.is_some())
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("stale_threshold", &self.stale_threshold)
            .field("on_lease_lost", &self.on_lease_lost.is_some())
            .field("mode", &self.mode)
            .field("fsync", &self.fsync)
            .field("label", &self.label)
            .finish()
    }
}

impl Default for FileLockOptions {
    /// The Go package's defaults: acquire retries 12, retry delay 20 ms, invalid-record stale
    /// threshold 1.2 s, file mode
    /// 0644, directory mode 0755, signal-0 liveness probe, heartbeat every 250 ms, stale after
    /// 3 s, no callback, automatic mode, no fsync.
    fn default() -> Self {
        Self {
            acquire_retries: 12,
            retry_delay: Duration::from_millis(20),
            invalid_record_stale: Duration::from_millis(1200),
            file_mode: 0o644,
            dir_mode: 0o755,
            liveness: None,
            heartbeat_interval: Duration::from_millis(250),
            stale_threshold: Duration::from_secs(3),
            on_lease_lost: None,
            mode: ModePreference::Auto,
            fsync: false,
            label: None,
        }
    }
}

impl FileLockOptions {
    /// How many times [`FileLock::acquire`] retries a transient race (Go: `AcquireRetryLimit`).
    pub fn with_acquire_retries(mut self, retries: u32) -> Self {
        self.acquire_retries = retries;
        self
    }
    /// Delay between acquire retries (Go: `AcquireRetryDelay`). Zero retries at once; more than
    /// [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION) is refused by
    /// [`FileLock::with_options`] as [`FileLockError::InvalidOption`], as for every duration here.
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }
    /// How long an unparseable record counts as held before it is reclaimed (zero: at once).
    pub fn with_invalid_record_stale(mut self, threshold: Duration) -> Self {
        self.invalid_record_stale = threshold;
        self
    }
    /// Mode of created files (exactly this mode, whatever the umask).
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        self.file_mode = mode & 0o7777;
        self
    }
    /// Mode of created directories (subject to the umask, as `mkdir(2)`).
    pub fn with_dir_mode(mut self, mode: u32) -> Self {
        self.dir_mode = mode & 0o7777;
        self
    }
    /// Replaces the signal-0 probe of a holder's pid (consulted only for holders on this host, in
    /// this PID namespace and boot).
    pub fn with_liveness(mut self, alive: impl Fn(u32) -> bool + Send + Sync + 'static) -> Self {
        self.liveness = Some(Arc::new(alive));
        self
    }
    /// How often the holder heartbeats (default 250 ms; above zero).
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }
    /// How long a heartbeat may stay unchanged before contenders call the lease stale (3 s; at
    /// least twice the heartbeat interval).
    pub fn with_stale_threshold(mut self, threshold: Duration) -> Self {
        self.stale_threshold = threshold;
        self
    }
    /// Called once, from the heartbeat thread, when the lease is lost.
    pub fn on_lease_lost(mut self, callback: impl Fn(&LostReason) + Send + Sync + 'static) -> Self {
        self.on_lease_lost = Some(Arc::new(callback));
        self
    }
    /// Forces a [`ModePreference`] (default automatic).
    pub fn with_mode(mut self, mode: ModePreference) -> Self {
        self.mode = mode;
        self
    }
    /// fsync records and the directory on every write (default off: leases do not outlive a
    /// power loss anyway, but fencing generations then may repeat; turn it on if they must not).
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }
    /// A human label shown to contenders.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }
    /// The acquire retry limit.
    pub fn acquire_retries(&self) -> u32 {
        self.acquire_retries
    }
    /// The delay between acquire retries.
    pub fn retry_delay(&self) -> Duration {
        self.retry_delay
    }
    /// The invalid-record stale threshold.
    pub fn invalid_record_stale(&self) -> Duration {
        self.invalid_record_stale
    }
    /// The file creation mode.
    pub fn file_mode(&self) -> u32 {
        self.file_mode
    }
    /// The directory creation mode.
    pub fn dir_mode(&self) -> u32 {
        self.dir_mode
    }
    /// The heartbeat interval.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
    }
    /// The stale threshold.
    pub fn stale_threshold(&self) -> Duration {
        self.stale_threshold
    }

    /// Every `Duration` option at most [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION)
    /// (so no `Instant + Duration` can overflow), the heartbeat interval and stale threshold
    /// above zero, the stale threshold at least twice the heartbeat interval.
    fn validate(&self) -> Result<(), FileLockError> {
        let max = lease_core::MAX_LEASE_DURATION;
        for (option, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("stale_threshold", self.stale_threshold),
            ("retry_delay", self.retry_delay),
            ("invalid_record_stale", self.invalid_record_stale),
        ] {
            if value > max {
                return Err(FileLockError::InvalidOption {
                    option,
                    reason: format!("{value:?} is longer than the maximum {max:?} (30 days)"),
                });
            }
        }
        for (option, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("stale_threshold", self.stale_threshold),
        ] {
            if value.is_zero() {
                return Err(FileLockError::InvalidOption {
                    option,
                    reason: "must be greater than zero".into(),
                });
            }
        }
        if self.stale_threshold < self.heartbeat_interval.saturating_mul(2) {
            return Err(FileLockError::InvalidOption {
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

/// What is known of the holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder's pid (0 if unknown).
    pub pid: u32,
    /// The holder's host name.
    pub host: String,
    /// The holder's label.
    pub label: Option<String>,
    /// The holder's fencing generation.
    pub generation: u64,
    /// When the holder acquired the lock, by its wall clock.
    pub since: Option<SystemTime>,
    /// When the holder last heartbeat, by its wall clock.
    pub last_heartbeat: Option<SystemTime>,
    /// Set when the holder is not described by a valid record (unparseable, or missing while
    /// the tenure lock is held): why.
    pub unparseable: Option<String>,
}

fn wall_ns(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn from_ns(ns: u64) -> Option<SystemTime> {
    (ns > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

impl HolderInfo {
    pub(crate) fn from_record(record: &LeaseFileRecord) -> Self {
        Self {
            pid: record.pid,
            host: record.host.clone(),
            label: record.label.clone(),
            generation: record.generation,
            since: from_ns(record.acquired_at_ns),
            last_heartbeat: from_ns(record.written_at_ns),
            unparseable: None,
        }
    }

    fn unparseable(reason: String) -> Self {
        Self {
            pid: 0,
            host: String::new(),
            label: None,
            generation: 0,
            since: None,
            last_heartbeat: None,
            unparseable: Some(reason),
        }
    }
}

impl fmt::Display for HolderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reason) = &self.unparseable {
            return write!(f, "an unknown holder ({reason})");
        }
        if let Some(label) = &self.label {
            write!(f, "{label}, ")?;
        }
        write!(f, "pid {} on {}", self.pid, self.host)?;
        write!(f, ", generation {}", self.generation)?;
        if let Some(since) = self.since {
            write!(f, ", since {}", lease_core::fmt_time(since))?;
        }
        Ok(())
    }
}

/// What a contender remembers of the record it saw last, to time staleness on its own
/// monotonic clock.
#[derive(Debug, Clone)]
enum Observed {
    Record {
        owner: Option<String>,
        generation: u64,
        heartbeat: u64,
        first_seen: Instant,
    },
    Garbage {
        fingerprint: u64,
        first_seen: Instant,
    },
}

#[derive(Debug)]
struct Tenure {
    owner: String,
    generation: u64,
    heartbeat: u64,
    acquired_at_ns: u64,
    deadline: Instant,
    tenure_file: Option<File>,
    epoch: u64,
}

#[derive(Debug, Default)]
struct State {
    tenure: Option<Tenure>,
    lost: Option<LostReason>,
    epoch: u64,
    /// The heartbeat thread runs (it parks between tenures).
    thread_started: bool,
    /// The `FileLock` was dropped: the heartbeat thread ends.
    closed: bool,
}

/// Observations are per process and per path, not per `FileLock`: a caller that makes a new
/// `FileLock` for every attempt still sees a hung holder go stale.
fn observations() -> MutexGuard<'static, BTreeMap<PathBuf, Observed>> {
    static OBSERVED: Mutex<BTreeMap<PathBuf, Observed>> = Mutex::new(BTreeMap::new());
    OBSERVED.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Shared {
    path: PathBuf,
    owner_path: PathBuf,
    options: FileLockOptions,
    mode: LockMode,
    mode_reason: String,
    cs: Cs,
    state: Mutex<State>,
    wake: Condvar,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A cross-process lease on one path (Go: `lockfile.PIDLock`).
///
/// ```
/// use lease_file::FileLock;
///
/// let dir = tempfile::tempdir()?;
/// let lock = FileLock::new(dir.path().join("deploy.lease"))?;
/// let fencing = lock.acquire()?;
/// assert!(lock.held());
///
/// // Another lock on the same path (in this process or any other) is turned away.
/// let other = FileLock::new(dir.path().join("deploy.lease"))?;
/// let err = other.try_acquire().unwrap_err();
/// assert!(err.is_held());
/// assert_eq!(err.holder().map(|h| h.pid), Some(std::process::id()));
///
/// lock.release()?;
/// assert!(other.try_acquire()? > fencing);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Files
///
/// * `P` holds the JSON [`LeaseFileRecord`]; it is only ever replaced by `rename(2)`.
/// * `P.lock` is flocked for the few microseconds of a critical section; never deleted.
/// * `P.owner` is flocked by the holder for its whole tenure; never deleted.
/// * In [`LockMode::HeartbeatOnly`], `P.cs.<n>` files mark critical-section epochs.
///
/// # Costs (kernel mode, no fsync)
///
/// | operation | syscalls |
/// |---|---|
/// | critical section | `flock(LOCK_EX\|LOCK_NB)`, `fstat`, `lstat` ... `flock(LOCK_UN)`: 4 |
/// | read the record | `open`, `fstat`, `read` x2, `close`: 5 |
/// | replace the record | `open(O_EXCL)`, `fchmod`, `write`, `close`, `rename`: 5 |
/// | tenure kernel lock | `open`, `fstat`, `flock`: 3 (once per acquisition) |
///
/// Measured with `strace -f -c` (`benches/file_lease.rs`), an uncontended
/// [`try_acquire`](Self::try_acquire) plus [`release`](Self::release) is about 44 syscalls
/// (std adds an `fcntl` and a `statx` here and there, `uuid` a `getrandom` per name), a heartbeat
/// about 20, a refused attempt on a held lock about 15. The heartbeat thread is started once per
/// `FileLock` (about 17 more syscalls, the first time) and parks between tenures. The benchmark
/// compares them with a bare `O_EXCL` create (4) and a bare `flock` (2).
pub struct FileLock {
    shared: Arc<Shared>,
}

impl fmt::Debug for FileLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLock")
            .field("path", &self.shared.path)
            .field("mode", &self.shared.mode)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl FileLock {
    /// A lock for `path` with default options (Go: `New`). Creates the parent directory if
    /// needed and detects the [`LockMode`].
    ///
    /// # Errors
    /// If the directory cannot be created, or a hostile file sits at a companion path.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, FileLockError> {
        Self::with_options(path, FileLockOptions::default())
    }

    /// A lock for `path` with `options` (Go: `NewWithOptions`).
    ///
    /// # Errors
    /// As [`new`](Self::new), plus [`FileLockError::InvalidOption`] naming the option (a
    /// duration beyond [`MAX_LEASE_DURATION`](lease_core::MAX_LEASE_DURATION), a zero heartbeat
    /// interval or stale threshold, a stale threshold under twice the heartbeat interval), plus
    /// [`FileLockError::Unsupported`] when kernel locks are demanded and do not work.
    pub fn with_options(
        path: impl Into<PathBuf>,
        options: FileLockOptions,
    ) -> Result<Self, FileLockError> {
        options.validate()?;
        let path = path.into();
        if path.file_name().is_none() {
            return Err(FileLockError::InvalidOption {
                option: "path",
                reason: format!("{} names no file", path.display()),
            });
        }
        let dir = path.parent().map(Path::to_owned).unwrap_or_default();
        ensure_dir(&dir, options.dir_mode)?;
        let lock_path = with_suffix(&path, ".lock");
        let owner_path = with_suffix(&path, ".owner");
        let (mode, mode_reason) = detect(&dir, &lock_path, options.file_mode, options.mode)?;
        let cs = match mode {
            LockMode::Kernel => Cs::kernel(lock_path, options.file_mode),
            _ => Cs::files(&path, options.file_mode, options.stale_threshold),
        };
        tracing::debug!(path = %path.display(), ?mode, %mode_reason, "file lock ready");
        Ok(Self {
            shared: Arc::new(Shared {
                path,
                owner_path,
                options,
                mode,
                mode_reason,
                cs,
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
            }),
        })
    }

    /// The record's path (Go: `Path`).
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Which protocol this lock runs.
    pub fn mode(&self) -> LockMode {
        self.shared.mode
    }

    /// Why that mode was chosen (`"flock works"`, `"nfs file system: ..."`).
    pub fn mode_reason(&self) -> &str {
        &self.shared.mode_reason
    }

    /// Whether this lock holds the lease and may still trust it (Go: `Held`): false after a loss,
    /// and false once the holder-side deadline passed without a successful heartbeat (a paused
    /// process learns it on its first call after resuming).
    pub fn held(&self) -> bool {
        self.check().is_ok()
    }

    /// The fencing generation of the current tenure if it can be trusted, else why not.
    ///
    /// # Errors
    /// [`FileLockError::NotHeld`], carrying the [`LostReason`] when the lease was lost.
    pub fn check(&self) -> Result<FencingToken, FileLockError> {
        let state = lock(&self.shared.state);
        let not_held = |lost| FileLockError::NotHeld {
            path: self.shared.path.clone(),
            lost,
        };
        if let Some(lost) = &state.lost {
            return Err(not_held(Some(lost.clone())));
        }
        match &state.tenure {
            None => Err(not_held(None)),
            Some(t) if Instant::now() >= t.deadline => Err(not_held(Some(LostReason::Untrusted {
                reason: "the deadline passed without a heartbeat (paused or I/O stalled)".into(),
            }))),
            Some(t) => Ok(FencingToken::new(t.generation)),
        }
    }

    /// Why the last tenure was lost, if it was.
    pub fn lost(&self) -> Option<LostReason> {
        lock(&self.shared.state).lost.clone()
    }

    /// The fencing generation of the current tenure (even if no longer trusted).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        lock(&self.shared.state)
            .tenure
            .as_ref()
            .map(|t| FencingToken::new(t.generation))
    }

    /// Reads the record: the current holder, or `None` if free (released or never held).
    ///
    /// # Errors
    /// I/O errors and hostile files.
    pub fn holder(&self) -> Result<Option<HolderInfo>, FileLockError> {
        match read(&self.shared.path)? {
            Read::Missing => Ok(None),
            Read::Valid(r) if r.owner.is_none() => Ok(None),
            Read::Valid(r) => Ok(Some(HolderInfo::from_record(&r))),
            Read::Invalid { reason, .. } => Ok(Some(HolderInfo::unparseable(format!(
                "unparseable record: {reason}"
            )))),
        }
    }

    /// Acquires (Go: `Acquire`): a lock held by a live owner fails at once with
    /// [`FileLockError::Held`]; a transient race (the critical section reclaimed under us,
    /// interrupted I/O) is retried up to `acquire_retries` times, `retry_delay` apart, as the Go
    /// package retries its stale-removal races. To wait for a held lock, use
    /// [`acquire_timeout`](Self::acquire_timeout).
    ///
    /// # Errors
    /// [`FileLockError::Held`] naming the holder; a transient error once the retries are spent;
    /// other errors at once.
    pub fn acquire(&self) -> Result<FencingToken, FileLockError> {
        let mut attempt = 0;
        loop {
            match self.try_acquire() {
                Err(e) if e.is_transient() && attempt < self.shared.options.acquire_retries => {
                    attempt += 1;
                    std::thread::sleep(self.shared.options.retry_delay);
                }
                other => return other,
            }
        }
    }

    /// Acquires, retrying every `retry_delay` until `timeout`. A hung holder is taken over once
    /// its heartbeat has been unchanged for the stale threshold, so pass a timeout above it to
    /// wait that out. No attempt waits for a busy critical section past the timeout.
    ///
    /// # Errors
    /// [`FileLockError::Timeout`] naming the last holder seen (pid, host, since); the last
    /// transient error when the critical section itself stayed busy until the timeout; other
    /// errors at once.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<FencingToken, FileLockError> {
        let start = Instant::now();
        loop {
            let remaining = timeout.saturating_sub(start.elapsed());
            match self.try_acquire_within(self.shared.options.stale_threshold.min(remaining)) {
                Err(FileLockError::Held { holder, .. }) => {
                    let waited = start.elapsed();
                    if waited >= timeout {
                        return Err(FileLockError::Timeout {
                            path: self.shared.path.clone(),
                            waited,
                            holder: Some(holder),
                        });
                    }
                    let delay = self
                        .shared
                        .options
                        .retry_delay
                        .min(timeout - waited)
                        .max(Duration::from_micros(100));
                    std::thread::sleep(delay);
                }
                Err(e) if e.is_transient() && start.elapsed() < timeout => {
                    let remaining = timeout.saturating_sub(start.elapsed());
                    std::thread::sleep(self.shared.options.retry_delay.min(remaining));
                }
                other => return other,
            }
        }
    }

    /// One attempt to acquire.
    ///
    /// # Errors
    /// [`FileLockError::Held`] when a live owner holds it; [`FileLockError::AlreadyHeld`] when
    /// this lock does; I/O errors and hostile files.
    pub fn try_acquire(&self) -> Result<FencingToken, FileLockError> {
        self.try_acquire_within(self.shared.options.stale_threshold)
    }

    /// One attempt, waiting at most `cs_wait` for the critical section.
    fn try_acquire_within(&self, cs_wait: Duration) -> Result<FencingToken, FileLockError> {
        let shared = &self.shared;
        let span = tracing::debug_span!("file_lock_acquire", path = %shared.path.display());
        let _enter = span.enter();
        {
            let mut state = lock(&shared.state);
            if state.tenure.is_some() {
                if state.lost.is_none() {
                    return Err(FileLockError::AlreadyHeld {
                        path: shared.path.clone(),
                    });
                }
                // A lost tenure is over: forget it (its kernel lock is already dropped).
                state.tenure = None;
                state.epoch += 1;
            }
        }
        let opts = &shared.options;
        let cs = shared.cs.enter(cs_wait)?;
        if lock(&shared.state).tenure.is_some() {
            // Another thread acquired through this same lock meanwhile.
            return Err(FileLockError::AlreadyHeld {
                path: shared.path.clone(),
            });
        }
        let sent = Instant::now();
        let current = read(&shared.path)?;
        let seen_at = Instant::now();
        if let Read::Valid(r) = &current
            && r.owner.is_some()
            && let Some(protocol) = r.protocol.as_deref()
            && protocol != shared.mode.as_str()
        {
            return Err(FileLockError::Unsupported {
                path: shared.path.clone(),
                reason: format!(
                    "the holder runs the {protocol} protocol and this lock the {} one: they would \
                     not exclude each other (use one ModePreference for every process)",
                    shared.mode
                ),
            });
        }
        let mut tenure_file = None;
        let previous = match &current {
            Read::Missing if shared.mode == LockMode::Kernel => {
                // No record, but maybe a live holder whose record was deleted by hand: its
                // tenure kernel lock says so, and its next heartbeat gives the lease up.
                match try_tenure(&shared.owner_path, opts.file_mode)? {
                    Some(file) => {
                        tenure_file = Some(file);
                        0
                    }
                    None => {
                        return Err(FileLockError::Held {
                            path: shared.path.clone(),
                            holder: Box::new(HolderInfo::unparseable(
                                "the record is missing but a holder keeps the tenure lock".into(),
                            )),
                        });
                    }
                }
            }
            Read::Missing => 0,
            Read::Valid(r) if r.owner.is_none() => r.generation,
            Read::Valid(r) => {
                let mut free = None;
                if shared.mode == LockMode::Kernel
                    && let Some(file) = try_tenure(&shared.owner_path, opts.file_mode)?
                {
                    if r.tenure {
                        free = Some("the holder's kernel lock is free: its process exited");
                    }
                    tenure_file = Some(file);
                }
                if free.is_none() && ident::writer_is_gone(r, opts.liveness.as_ref()) {
                    free = Some("the holder's process is gone (same host, pid namespace, boot)");
                }
                if free.is_none() {
                    let mut observed = observations();
                    let first = match observed.get(&shared.path) {
                        Some(Observed::Record {
                            owner,
                            generation,
                            heartbeat,
                            first_seen,
                        }) if *owner == r.owner
                            && *generation == r.generation
                            && *heartbeat == r.heartbeat =>
                        {
                            *first_seen
                        }
                        _ => {
                            observed.insert(
                                shared.path.clone(),
                                Observed::Record {
                                    owner: r.owner.clone(),
                                    generation: r.generation,
                                    heartbeat: r.heartbeat,
                                    first_seen: seen_at,
                                },
                            );
                            seen_at
                        }
                    };
                    if seen_at.duration_since(first) >= opts.stale_threshold {
                        free = Some("the heartbeat stopped for the stale threshold");
                    }
                }
                match free {
                    Some(why) => {
                        tracing::info!(generation = r.generation, pid = r.pid, host = %r.host, why, "taking over");
                        if shared.mode == LockMode::Kernel {
                            // Only critical-section holders write temporary records, and we hold
                            // it: any left over belong to a writer that died mid-write.
                            remove_stale_temps(&shared.path);
                        }
                        r.generation
                    }
                    None => {
                        return Err(FileLockError::Held {
                            path: shared.path.clone(),
                            holder: Box::new(HolderInfo::from_record(r)),
                        });
                    }
                }
            }
            Read::Invalid {
                reason,
                fingerprint,
                modified,
            } => {
                let mut observed = observations();
                let first = match observed.get(&shared.path) {
                    Some(Observed::Garbage {
                        fingerprint: f,
                        first_seen,
                    }) if f == fingerprint => *first_seen,
                    _ => {
                        observed.insert(
                            shared.path.clone(),
                            Observed::Garbage {
                                fingerprint: *fingerprint,
                                first_seen: seen_at,
                            },
                        );
                        seen_at
                    }
                };
                let old_by_mtime = modified
                    .and_then(|m| SystemTime::now().duration_since(m).ok())
                    .is_some_and(|age| age >= opts.invalid_record_stale);
                if seen_at.duration_since(first) < opts.invalid_record_stale && !old_by_mtime {
                    return Err(FileLockError::Held {
                        path: shared.path.clone(),
                        holder: Box::new(HolderInfo::unparseable(format!(
                            "unparseable record: {reason}"
                        ))),
                    });
                }
                tracing::warn!(%reason, "reclaiming an unparseable record");
                // The old generation is unknown: continue above any counter this crate could
                // have reached, from the wall clock in microseconds.
                wall_ns(SystemTime::now()) / 1000
            }
        };
        let generation = previous
            .checked_add(1)
            .ok_or_else(|| FileLockError::Hostile {
                path: shared.path.clone(),
                reason: "the fencing generation is exhausted".into(),
            })?;
        if shared.mode == LockMode::Kernel && tenure_file.is_none() {
            tenure_file = try_tenure(&shared.owner_path, opts.file_mode)?;
        }
        let owner = uuid::Uuid::new_v4().simple().to_string();
        let now = SystemTime::now();
        let record = make_record(
            shared.mode,
            opts,
            &owner,
            generation,
            0,
            wall_ns(now),
            tenure_file.is_some(),
        );
        if !cs.still_exclusive() {
            return Err(busy_lost(&shared.path));
        }
        replace_atomically(&shared.path, &record.to_bytes(), opts.file_mode, opts.fsync)?;
        drop(cs);
        observations().remove(&shared.path);
        let epoch = {
            let mut state = lock(&shared.state);
            state.epoch += 1;
            state.lost = None;
            state.tenure = Some(Tenure {
                owner,
                generation,
                heartbeat: 0,
                acquired_at_ns: record.acquired_at_ns,
                deadline: sent + opts.stale_threshold.saturating_sub(opts.margin()),
                tenure_file,
                epoch: state.epoch,
            });
            state.epoch
        };
        tracing::info!(
            generation,
            epoch,
            tenure = record.tenure,
            "file lock acquired"
        );
        let start_thread = {
            let mut state = lock(&shared.state);
            !std::mem::replace(&mut state.thread_started, true)
        };
        shared.wake.notify_all();
        if start_thread {
            let thread_shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name("lease-file-heartbeat".into())
                .spawn(move || heartbeat_loop(&thread_shared));
            if let Err(e) = spawned {
                lock(&shared.state).thread_started = false;
                let _ = self.release();
                return Err(FileLockError::Io {
                    op: "spawn heartbeat thread",
                    path: shared.path.clone(),
                    transient: true,
                    source: e,
                });
            }
        }
        Ok(FencingToken::new(generation))
    }

    /// Releases the lease (Go: `Release`): under the critical section, and only if the record
    /// still names this tenure, writes a released record that keeps the fencing generation, then
    /// drops the tenure lock. Never touches another owner's record.
    ///
    /// # Errors
    /// [`FileLockError::NotHeld`] if this lock does not hold the lease (never acquired, already
    /// released, or lost: then with the reason); I/O errors (the tenure is kept, retry).
    pub fn release(&self) -> Result<(), FileLockError> {
        let shared = &self.shared;
        let span = tracing::debug_span!("file_lock_release", path = %shared.path.display());
        let _enter = span.enter();
        let cs = shared.cs.enter(shared.options.stale_threshold)?;
        let (owner, generation, heartbeat, acquired_at_ns) = {
            let state = lock(&shared.state);
            match &state.tenure {
                Some(t) => (t.owner.clone(), t.generation, t.heartbeat, t.acquired_at_ns),
                None => {
                    return Err(FileLockError::NotHeld {
                        path: shared.path.clone(),
                        lost: state.lost.clone(),
                    });
                }
            }
        };
        let ours = matches!(read(&shared.path)?, Read::Valid(ref r)
            if r.owner.as_deref() == Some(owner.as_str()) && r.generation == generation);
        if ours {
            let mut record = make_record(
                shared.mode,
                &shared.options,
                &owner,
                generation,
                heartbeat + 1,
                acquired_at_ns,
                false,
            );
            record.owner = None;
            if !cs.still_exclusive() {
                return Err(busy_lost(&shared.path));
            }
            replace_atomically(
                &shared.path,
                &record.to_bytes(),
                shared.options.file_mode,
                shared.options.fsync,
            )?;
        }
        let mut state = lock(&shared.state);
        state.tenure = None; // closes the tenure file: its kernel lock goes with it
        state.epoch += 1;
        drop(cs);
        shared.wake.notify_all();
        if ours {
            tracing::info!(generation, "file lock released");
            Ok(())
        } else {
            tracing::warn!(generation, "release found the lease no longer ours");
            let lost = state.lost.clone();
            Err(FileLockError::NotHeld {
                path: shared.path.clone(),
                lost: lost.or(Some(LostReason::TakenOver { holder: None })),
            })
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let held = lock(&self.shared.state).tenure.is_some();
        if held && let Err(error) = self.release() {
            tracing::debug!(%error, "best-effort release on drop failed");
        }
        let mut state = lock(&self.shared.state);
        state.epoch += 1;
        state.closed = true;
        self.shared.wake.notify_all();
    }
}

/// Removes the temporary records of `path` (and of no other record) left by writers that died
/// mid-write: names are matched exactly by [`is_temp_of`](crate::fsio::is_temp_of).
fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if crate::fsio::is_temp_of(&entry.file_name(), name) {
            tracing::debug!(file = ?entry.file_name(), "removing a temporary record left by a dead writer");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn busy_lost(path: &Path) -> FileLockError {
    FileLockError::Io {
        op: "rename record",
        path: path.to_owned(),
        transient: true,
        source: std::io::Error::other(
            "another process reclaimed the critical section while this one was inside it",
        ),
    }
}

/// Tries the tenure file's kernel lock: `Some(file)` holding it, `None` if somebody holds it.
fn try_tenure(path: &Path, mode: u32) -> Result<Option<File>, FileLockError> {
    let file = open_companion(path, mode)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(crate::fsio::io_error("flock tenure", path, e)),
    }
}

fn make_record(
    mode: LockMode,
    options: &FileLockOptions,
    owner: &str,
    generation: u64,
    heartbeat: u64,
    acquired_at_ns: u64,
    tenure: bool,
) -> LeaseFileRecord {
    let me = ident::current();
    let now = wall_ns(SystemTime::now());
    let stale_ns = u64::try_from(options.stale_threshold.as_nanos()).unwrap_or(u64::MAX);
    LeaseFileRecord {
        version: SCHEMA_VERSION,
        owner: Some(owner.to_owned()),
        label: options.label.clone(),
        pid: me.pid,
        host: me.host,
        pid_ns: me.pid_ns,
        boot_id: me.boot_id,
        start_time: me.start_time,
        heartbeat,
        written_at_ns: now,
        acquired_at_ns,
        expires_at_ns: now.saturating_add(stale_ns),
        generation,
        tenure,
        protocol: Some(mode.as_str().to_owned()),
        partition: None,
        sort: None,
    }
}

/// A record as read.
#[derive(Debug)]
pub(crate) enum Read {
    Missing,
    Valid(Box<LeaseFileRecord>),
    Invalid {
        reason: String,
        fingerprint: u64,
        modified: Option<SystemTime>,
    },
}

pub(crate) fn read(path: &Path) -> Result<Read, FileLockError> {
    let Some(file) = read_record_file(path)? else {
        return Ok(Read::Missing);
    };
    Ok(match LeaseFileRecord::parse(&file.bytes) {
        Ok(record) => Read::Valid(Box::new(record)),
        Err(e) => {
            let mut hasher = DefaultHasher::new();
            file.bytes.hash(&mut hasher);
            file.inode.hash(&mut hasher);
            Read::Invalid {
                reason: e.to_string(),
                fingerprint: hasher.finish(),
                modified: file.modified,
            }
        }
    })
}

/// The lock's heartbeat thread: started at the first acquisition, parked between tenures, ended
/// when the `FileLock` is dropped. One thread per lock, so a heartbeat stuck in slow I/O on one
/// path never delays another lock's.
fn heartbeat_loop(shared: &Arc<Shared>) {
    let span = tracing::debug_span!("file_lock_heartbeat", path = %shared.path.display());
    let _enter = span.enter();
    let interval = shared.options.heartbeat_interval;
    loop {
        let epoch = {
            let mut state = lock(&shared.state);
            loop {
                if state.closed {
                    return;
                }
                if state.tenure.is_some() && state.lost.is_none() {
                    break state.epoch;
                }
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let mut next = Instant::now() + interval;
        'tenure: loop {
            {
                let mut state = lock(&shared.state);
                loop {
                    if state.closed {
                        return;
                    }
                    if state.epoch != epoch || state.tenure.is_none() {
                        break 'tenure;
                    }
                    let now = Instant::now();
                    if now >= next {
                        break;
                    }
                    state = shared
                        .wake
                        .wait_timeout(state, next - now)
                        .map(|(s, _)| s)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            }
            next = Instant::now() + interval;
            if !heartbeat_once(shared, epoch) {
                break 'tenure;
            }
        }
    }
}

/// One heartbeat; false when the tenure is over.
fn heartbeat_once(shared: &Shared, epoch: u64) -> bool {
    let opts = &shared.options;
    let result = (|| -> Result<Option<LostReason>, FileLockError> {
        let cs = shared
            .cs
            .enter(opts.heartbeat_interval.max(opts.stale_threshold / 4))?;
        let sent = Instant::now();
        let (owner, generation, heartbeat, acquired_at_ns, has_tenure) = {
            let state = lock(&shared.state);
            match &state.tenure {
                Some(t) if t.epoch == epoch => (
                    t.owner.clone(),
                    t.generation,
                    t.heartbeat,
                    t.acquired_at_ns,
                    t.tenure_file.is_some(),
                ),
                _ => return Ok(None),
            }
        };
        match read(&shared.path)? {
            Read::Valid(r)
                if r.owner.as_deref() == Some(owner.as_str()) && r.generation == generation => {}
            Read::Valid(r) if r.owner.is_some() => {
                return Ok(Some(LostReason::TakenOver {
                    holder: Some(Box::new(HolderInfo::from_record(&r))),
                }));
            }
            _ => return Ok(Some(LostReason::TakenOver { holder: None })),
        }
        let mut new_tenure = None;
        if shared.mode == LockMode::Kernel && !has_tenure {
            new_tenure = try_tenure(&shared.owner_path, opts.file_mode)?;
        }
        let record = make_record(
            shared.mode,
            opts,
            &owner,
            generation,
            heartbeat + 1,
            acquired_at_ns,
            has_tenure || new_tenure.is_some(),
        );
        if !cs.still_exclusive() {
            return Err(busy_lost(&shared.path));
        }
        replace_atomically(&shared.path, &record.to_bytes(), opts.file_mode, opts.fsync)?;
        drop(cs);
        tracing::trace!(generation, heartbeat = heartbeat + 1, "heartbeat written");
        let mut state = lock(&shared.state);
        if let Some(t) = state.tenure.as_mut().filter(|t| t.epoch == epoch) {
            t.heartbeat = heartbeat + 1;
            t.deadline = sent + opts.stale_threshold.saturating_sub(opts.margin());
            if new_tenure.is_some() {
                tracing::info!(generation, "tenure kernel lock obtained");
                t.tenure_file = new_tenure;
            }
        }
        Ok(None)
    })();
    let reason = match result {
        Ok(None) => return true,
        Ok(Some(reason)) => reason,
        Err(error) => {
            let state = lock(&shared.state);
            match &state.tenure {
                Some(t) if t.epoch == epoch && Instant::now() < t.deadline => {
                    tracing::warn!(%error, "heartbeat failed; retrying until the deadline");
                    return true;
                }
                Some(t) if t.epoch == epoch => LostReason::Untrusted {
                    reason: format!("heartbeats failed until the deadline: {error}"),
                },
                _ => return false,
            }
        }
    };
    {
        let mut state = lock(&shared.state);
        if state.epoch != epoch || state.tenure.is_none() {
            return false;
        }
        state.lost = Some(reason.clone());
        // Keep the tenure's generation visible, but let the kernel lock go to the new owner.
        if let Some(t) = state.tenure.as_mut() {
            t.tenure_file = None;
            t.deadline = Instant::now();
        }
    }
    tracing::warn!(path = %shared.path.display(), %reason, "file lock lost");
    if let Some(callback) = &opts.on_lease_lost {
        callback(&reason);
    }
    false
}
