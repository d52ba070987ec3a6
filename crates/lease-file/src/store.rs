//! A directory of lease records implementing the lease-core contract.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use lease_core::backend::{
    default_safety_margin, fenced_write, fencing_token, holder_deadline, validate_duration,
    validate_fenced_value,
};
use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Holder, Lease, LeaseBackend,
    LeaseError, LeaseKey, LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, RandomTokens,
    TokenSource,
};

use crate::BACKEND as NAME;
use crate::encode::{decode_file_name, fenced_file_name, fnv, key_file_name, verbatim_file_name};
use crate::engine::{self, Attempt, Claim, Gone, Now, Observations, Timebase};
use crate::error::{FsError, key_of_path};
use crate::fenced::{self, MAX_FENCED_FILE_BYTES};
use crate::fsio::Base;
use crate::mode::{LockMode, ModePreference, detect};
use crate::prune::PruneReport;
use crate::record::LeaseFileRecord;
use crate::state::{self, Found, Held, KeyDir, Kind, Modes, State, Value, data_name, entry_names};
use crate::wake::Waiters;
/// The most released lock directories a store keeps open for the next acquisition of their key
/// (each is three descriptors: the directory, its stream, its state entry).
const IDLE_DIRS: usize = 32;

/// A lease this store acquired and holds the kernel lock of.
#[derive(Debug)]
struct Tenure {
    generation: u64,
    /// The lock directory, holding the kernel lock.
    kd: KeyDir,
    /// The state entry's name as this store last renamed it (acquisition or renewal), and what
    /// it says: the state is still exactly that unless someone else moved it on, which a rename
    /// from it finds out (`ENOENT`), so a renewal or release need not list the directory first.
    name: String,
    held: Held,
}

/// Leases as files in one directory: the lease-core [`LeaseBackend`], [`LeaseListing`] and
/// [`FencedValues`] on a local (or, in heartbeat-only mode, network) file system. Hold its
/// leases with lease-core's guards ([`LeaseGuard`](lease_core::LeaseGuard),
/// `CountingLease`, `Election`): they wait, renew and release on top of the single-attempt
/// contract this store implements.
///
/// ```
/// use lease_core::{LeaseGuard, LeaseKey, LeaseListing, WaitOptions};
/// use lease_file::DirectoryStore;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store = Arc::new(DirectoryStore::open(dir.path())?);
/// let key = LeaseKey::with_sort_key("jobs", "nightly")?;
/// let d = Duration::from_secs(30);
/// // Waits until acquired, then renews every 10 s on a thread of its own.
/// let guard = LeaseGuard::builder(store.clone(), &key, d).acquire_blocking()?;
/// // A zero wait is one attempt: turned away, told who holds it.
/// let busy = LeaseGuard::builder(store.clone(), &key, d)
///     .with_wait(WaitOptions::new(Duration::ZERO))
///     .acquire_blocking()
///     .unwrap_err();
/// assert!(busy.is_held());
/// assert_eq!(pollster::block_on(store.list_partition("jobs"))?.len(), 1);
/// guard.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Each key is one lock directory run by the crate's one protocol (see [`protocol`](crate::protocol)):
/// every change is one `rename` of its state entry from the exact name observed. Expiry never
/// reads the wall clock: a holder on the same clock scale (this host's `CLOCK_MONOTONIC`, or
/// one injected [`Clock`] with [`shared_monotonic`](Clock::shared_monotonic)) is expired once
/// its deadline on that scale has passed; any other holder once its state has stood still for
/// its duration on this store's monotonic clock; in kernel mode, a holder on this host whose
/// kernel lock is free, at once. Holder deadlines come from [`holder_deadline`] measured before
/// each operation.
///
/// The futures do their file I/O inline when first polled: a few local syscalls (in kernel
/// mode an acquire is 14, [`FileLock`](crate::FileLock)'s and one more `getpid` for the fork
/// check; a release 5, or 6 with the `ftruncate` that empties the entry of a tenure that
/// lasted; a renewal of a lease this store holds is one `rename`; counted with `strace` on
/// `benches/file_lease.rs`'s helper), no thread hop, no
/// runtime needed. The store keeps the lock directories of the leases it holds open, and up to
/// 32 released ones for the next acquisition of their keys (three descriptors each).
///
/// # Files
///
/// Key `(partition, sort)` is the lock directory `<dir>/<partition>.<sort>.lease` (without a
/// sort key, `<dir>/<partition>.lease`), each part percent-encoded: every byte outside
/// `[A-Za-z0-9_-]` becomes `%XX`, so no key escapes the directory (`("../etc", "pass wd")` is
/// `%2E%2E%2Fetc.pass%20wd.lease`) and [`keys`](Self::keys) decodes a listing back. An encoded
/// name is at most 200 bytes; a longer one is [`LeaseError::InvalidInput`]. With
/// [`with_verbatim_names`](DirectoryStoreBuilder::with_verbatim_names) the key's name is the
/// directory's name as it is. A fenced value named `(partition, sort)` lives in the directory
/// `<dir>/fenced~<partition>.<sort>` (encoded the same way, no suffix). Other names in the
/// directory are temporaries (`.lease-init.*`), the marker `.fencing-from-clock`, or not this
/// store's.
///
/// # Delete and prune
///
/// [`LeaseBackend::delete`] and [`prune`](DirectoryStore::prune) end a key's lock directory
/// by one rename of its state entry, from the exact name observed (`free.<g>`, or the holder's
/// `held.<g>...` for a delete naming the holder), to `dead.<g>`: the protocol's
/// compare-and-swap, so it happens iff the state is still exactly the one named, and once it
/// has, no acquisition can succeed in that directory (there is no `free.*` or `held.*` name
/// left to rename from; an acquirer that observed `free.<g>` before finds its rename fails).
/// Then the entry is unlinked and the directory removed with `rmdir`, which the kernel refuses
/// unless the directory is empty: a lock directory is created already holding its state, so
/// only an ended one can be removed, by anyone, however late. An acquirer that finds an ended
/// directory finishes its removal and creates the key afresh; in a store that deletes keys it
/// does the same with an empty directory at a key's path (a removal between its `unlink` and
/// its `rmdir`: it holds no state), which elsewhere is refused as planted.
///
/// A key whose creation is under way (its temporary `.lease-init.<hash>.<nonce>` exists) is not
/// deleted or pruned: a delete fails with a transient [`LeaseError::Backend`] naming the
/// temporary, and prune counts the key in [`PruneReport::busy`]. A temporary left by a creator
/// that crashed keeps its key so until it is removed by hand.
///
/// On a network file system (heartbeat-only mode), a state entry that another process still
/// has open when it is unlinked is silly-renamed (`.nfsXXXX`) by that client, and the ended
/// directory cannot be removed until that process closes it (a store keeps the entries of up
/// to 32 released keys open): until then acquisitions of the key fail as damaged, and a later
/// prune or acquisition removes it. Prune keys that are idle for longer than your processes
/// keep them.
///
/// *Fencing across a delete.* The first delete in a store creates the marker
/// `.fencing-from-clock` in its directory; from then on a lock directory created there starts
/// at `free.<m>`, `m` the store's wall clock in microseconds since the epoch, read after the
/// creator's temporary directory exists. An ended directory is removed only when a listing
/// of the store taken after it ended shows no creation of its key under way, so the first
/// generation of the next directory was read after the key ended. A pruned key's next token
/// is therefore above all its earlier ones as long as (1) the key saw fewer acquisitions than
/// microseconds passed since its directory was created, and (2) the wall clock has not stepped
/// back below its last generation between the prune and the re-creation. `prune` checks (2)
/// as far as it can: a key whose generation is not below its clock is kept (and counted in
/// [`PruneReport::ahead_of_clock`]). A store that never deleted a key starts every key at 1,
/// as before. (The contract lets a delete restart the counter; this store does not, under
/// those assumptions.)
///
/// Values kept by [`FencedValues`] are not keys: delete and prune leave them.
///
/// Costs: a delete is the renewal's listing plus one `renameat`, the marker's `openat`
/// (refused with `EEXIST` after the first), a listing of the store directory (to see that no
/// creation of the key is under way) and two `unlinkat`; prune costs are listed with it.
/// After a prune of every key, a store directory holds the marker only (an empty file: one
/// inode, no blocks); on ext4 the directory itself keeps the size its largest listing grew
/// it to (ext4 never shrinks a directory).
///
/// ```
/// use lease_core::{AcquireOptions, Holder, LeaseBackend, LeaseKey};
/// use lease_file::DirectoryStore;
/// use pollster::block_on;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store = DirectoryStore::open(dir.path())?;
/// let (key, d, once) = (LeaseKey::new("retired")?, Duration::from_secs(30), AcquireOptions::default());
/// let lease = block_on(store.try_acquire(&key, d, &once))?;
/// // A delete names the record as it stands: here, held by `lease`.
/// let record = block_on(store.inspect(&key))?.expect("on record");
/// block_on(store.delete(&key, record.holder().and_then(Holder::token), record.fencing_token()))?;
/// assert!(block_on(store.inspect(&key))?.is_none());
/// assert!(store.keys()?.is_empty());
/// let again = block_on(store.try_acquire(&key, d, &once))?;
/// assert!(again.fencing_token() > lease.fencing_token(), "seeded from the clock");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct DirectoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    /// The store's directory, opened once: every lock directory is created, opened, listed and
    /// checked relative to it.
    base: Arc<Base>,
    mode: LockMode,
    time: Timebase,
    tokens: Arc<dyn TokenSource>,
    safety_margin: Option<Duration>,
    file_mode: u32,
    dir_mode: u32,
    fsync: bool,
    /// Keys name their lock directories as they are ([`DirectoryStoreBuilder::with_verbatim_names`]).
    verbatim: bool,
    /// Expiry timed by observation, for holders whose clock this store does not share.
    seen: Arc<Observations>,
    /// The kernel locks of the leases this store acquired, by lock directory.
    tenures: Arc<Mutex<HashMap<PathBuf, Tenure>>>,
    /// Released lock directories kept open for the next acquisition of their key (at most
    /// [`IDLE_DIRS`]).
    idle: Arc<Mutex<HashMap<PathBuf, KeyDir>>>,
    /// Threads blocked in `flock` for waiting acquisitions.
    waiters: Waiters,
    /// The process that acquired each lease held through this store (by lock directory, with
    /// its generation), so that a `fork`ed child's copy of the store refuses to release its
    /// parent's leases.
    acquired_by: Mutex<HashMap<PathBuf, (u64, u32)>>,
}

impl fmt::Debug for DirectoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryStore")
            .field("dir", &self.inner.dir)
            .field("mode", &self.inner.mode)
            .field("clock", self.inner.time.clock())
            .finish_non_exhaustive()
    }
}

/// Builds a [`DirectoryStore`]: [`DirectoryStore::builder`], `with_*` setters,
/// [`build`](Self::build).
///
/// ```
/// use lease_core::ManualClock;
/// use lease_file::{DirectoryStore, LockMode, ModePreference};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store = DirectoryStore::builder(dir.path())
///     .with_mode(ModePreference::Auto)
///     .with_clock(Arc::new(ManualClock::new()))
///     .with_safety_margin(Duration::from_millis(100))
///     .with_file_mode(0o600)
///     .with_fsync()
///     .build()?;
/// assert_eq!(store.mode(), LockMode::Kernel, "a local file system");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct DirectoryStoreBuilder {
    dir: PathBuf,
    preference: ModePreference,
    time: Timebase,
    tokens: Arc<dyn TokenSource>,
    safety_margin: Option<Duration>,
    file_mode: u32,
    dir_mode: u32,
    fsync: bool,
    verbatim: bool,
    shared_directory: bool,
}

impl fmt::Debug for DirectoryStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryStoreBuilder")
            .field("dir", &self.dir)
            .field("preference", &self.preference)
            .field("clock", self.time.clock())
            .field("safety_margin", &self.safety_margin)
            .field("file_mode", &format_args!("{:o}", self.file_mode))
            .field("fsync", &self.fsync)
            .field("verbatim", &self.verbatim)
            .field("shared_directory", &self.shared_directory)
            .finish_non_exhaustive()
    }
}

impl DirectoryStoreBuilder {
    /// Forces a [`ModePreference`] (default automatic).
    pub fn with_mode(mut self, preference: ModePreference) -> Self {
        self.preference = preference;
        self
    }

    /// Uses `clock` for deadlines and expiry. Processes share expiry judgements through
    /// [`Clock::shared_monotonic`] when the clock offers it, and time them by observation
    /// otherwise.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.time = Timebase::injected(clock);
        self
    }

    /// Uses `tokens` to make owner tokens.
    pub fn with_token_source(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Overrides [`default_safety_margin`]. Zero trusts the whole lease; a margin as long as a
    /// lease or longer (such as `Duration::MAX`) makes acquiring or renewing it fail with
    /// [`LeaseError::InvalidInput`] naming `safety_margin`, writing nothing.
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// Mode of created files (default 0644), less the umask, as `open(2)` applies it: nothing
    /// is ever made more readable than the umask allows. Lock directories get the same mode
    /// plus the matching search (`x`) bits, never write for others (0666 gives 0775). Anyone
    /// who can write a lock directory can act as any owner, so the modes are the access
    /// control.
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        let mode = mode & 0o7777;
        self.file_mode = mode;
        self.dir_mode = mode | ((mode & 0o444) >> 2);
        self
    }

    /// fsyncs every change (by default nothing is fsynced): lock and value directories after
    /// each rename, data files when written, and the store directory when a lock directory is
    /// created. Leases do not outlive a power loss anyway, but without it a fencing generation
    /// issued just before one may be issued again after it; call this if generations must never
    /// repeat, even across a power loss.
    pub fn with_fsync(mut self) -> Self {
        self.fsync = true;
        self
    }

    /// Names each key's lock directory by the key's name as it is (by default a reversible
    /// encoding, see [*Files*](DirectoryStore#files)), so that a lease lives at an exact path:
    /// key `job.lock` in a store on `dir` is the lock directory `dir/job.lock`, the very lock a
    /// [`FileLock`](crate::FileLock) on that path takes (one protocol, one engine), and the path
    /// a Go `kit/lockfile` `PIDLock` uses, which is then held for this store while the Go
    /// process holds it (see
    /// [*Other lock protocols*](crate::protocol#other-lock-protocols-on-the-same-path)). This is
    /// how `lease run --path` works.
    ///
    /// ```
    /// use lease_core::{LeaseGuard, LeaseKey};
    /// use lease_file::{DirectoryStore, FileLock};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Arc::new(DirectoryStore::builder(dir.path()).with_verbatim_names().build()?);
    /// let key = LeaseKey::new("job.lock")?;
    /// let guard = LeaseGuard::builder(store, &key, Duration::from_secs(30)).acquire_blocking()?;
    /// // The same lock as a FileLock on dir/job.lock:
    /// let lock = FileLock::new(dir.path().join("job.lock"))?;
    /// assert!(lock.try_acquire().unwrap_err().is_held());
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A key must then be one plain file name: no sort key, no `/`, not `.` or `..`, at most
    /// 255 bytes; others are [`LeaseError::InvalidInput`]. [`DirectoryStore::keys`] decodes
    /// only encoded names, so it does not list such keys.
    pub fn with_verbatim_names(mut self) -> Self {
        self.verbatim = true;
        self
    }

    /// Accepts a store directory and lock directories that users other than the caller and
    /// root can change: owned by another user, or group-writable (default off: such a
    /// directory is refused with [`LeaseError::InvalidInput`] naming its owner and mode). Any
    /// user who can write the store can then deny keys (by creating them first), release or
    /// take over the leases in it (by renaming their entries), and read holders'
    /// descriptions, owner tokens included; nothing outside the store's own entries is ever
    /// created, changed or removed, whatever they do. A directory anyone can write without the
    /// sticky bit is refused even so. See
    /// [*Shared directories and other users*](crate::protocol#shared-directories-and-other-users).
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = lease_file::DirectoryStore::builder(dir.path())
    ///     .with_shared_directory()
    ///     .build()?;
    /// # let _ = store;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_shared_directory(mut self) -> Self {
        self.shared_directory = true;
        self
    }

    /// Opens (creating it if needed) the store's directory and detects the [`LockMode`].
    ///
    /// # Errors
    /// [`LeaseError::Backend`] if the directory cannot be created or probed, or (permanent,
    /// saying why) when kernel locks are demanded ([`ModePreference::Kernel`]) and do not work.
    pub fn build(self) -> Result<DirectoryStore, LeaseError> {
        let dir = self.dir;
        let key = key_of_path(&dir)?;
        let base = Arc::new(
            Base::open(&dir, Some(0o755), self.shared_directory).map_err(|e| e.into_lease(&key))?,
        );
        let (mode, reason) = detect(&base, self.preference).map_err(|e| e.into_lease(&key))?;
        tracing::debug!(dir = %dir.display(), ?mode, %reason, "directory store opened");
        Ok(DirectoryStore {
            inner: Arc::new(Inner {
                dir,
                base,
                mode,
                time: self.time,
                tokens: self.tokens,
                safety_margin: self.safety_margin,
                file_mode: self.file_mode,
                dir_mode: self.dir_mode,
                fsync: self.fsync,
                verbatim: self.verbatim,
                seen: Arc::default(),
                tenures: Arc::default(),
                idle: Arc::default(),
                waiters: Waiters::default(),
                acquired_by: Mutex::default(),
            }),
        })
    }
}

impl DirectoryStore {
    /// Opens (creating it if needed) the store in `dir`, detecting the [`LockMode`]:
    /// `builder(dir).build()`.
    ///
    /// # Errors
    /// As [`DirectoryStoreBuilder::build`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LeaseError> {
        Self::builder(dir).build()
    }

    /// A builder for the store in `dir`: automatic mode, the system clock, random tokens, the
    /// default safety margin, mode 0644, no fsync.
    pub fn builder(dir: impl AsRef<Path>) -> DirectoryStoreBuilder {
        DirectoryStoreBuilder {
            dir: dir.as_ref().to_owned(),
            preference: ModePreference::Auto,
            time: Timebase::system(),
            tokens: Arc::new(RandomTokens),
            safety_margin: None,
            file_mode: 0o644,
            dir_mode: 0o755,
            fsync: false,
            verbatim: false,
            shared_directory: false,
        }
    }

    /// The lock directory of `key` in this store, whether or not it exists yet.
    fn lock_dir(&self, key: &LeaseKey) -> Result<PathBuf, LeaseError> {
        Ok(self.inner.dir.join(self.lock_name(key)?))
    }

    /// The file name of `key`'s lock directory in the store: the key's name as it is with
    /// [`DirectoryStoreBuilder::with_verbatim_names`], else its reversible encoding.
    fn lock_name(&self, key: &LeaseKey) -> Result<String, LeaseError> {
        if self.inner.verbatim {
            return verbatim_file_name(key).map(str::to_owned);
        }
        key_file_name(key)
    }

    /// Whether holders take the kernel lock here.
    pub fn mode(&self) -> LockMode {
        self.inner.mode
    }

    /// The keys with a lock directory in the store, in no particular order (fenced-value names
    /// are not keys and are not listed).
    ///
    /// ```
    /// use lease_core::{LeaseGuard, LeaseKey};
    /// use lease_file::DirectoryStore;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Arc::new(DirectoryStore::open(dir.path())?);
    /// let key = LeaseKey::with_sort_key("jobs", "nightly")?;
    /// let guard = LeaseGuard::builder(store.clone(), &key, Duration::from_secs(30)).acquire_blocking()?;
    /// guard.release()?;
    /// assert_eq!(store.keys()?, vec![key], "released keys stay until pruned");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Backend`] if the directory cannot be read.
    pub fn keys(&self) -> Result<Vec<LeaseKey>, LeaseError> {
        Ok(entry_names(&self.inner.base)
            .map_err(FsError::into_backend)?
            .iter()
            .filter_map(|name| decode_file_name(name.to_str()?))
            .collect())
    }

    /// A descriptor that shares the kernel lock of the lease on `key` with fencing token
    /// `fencing` (kernel mode, acquired through this store and not released; a guard's
    /// [`key`](lease_core::LeaseGuard::key) and [`fencing_token`](lease_core::LeaseGuard::fencing_token)
    /// name it), for a child process to inherit: the lock is then dropped by the kernel only
    /// when every process holding a copy has exited, so a contender cannot notice the holder's
    /// death while a process started under the lease still runs. The descriptor is
    /// close-on-exec; clear that flag on the copy a child should inherit. `None` when this store
    /// holds no kernel lock for that lease (another tenure of the key included), and in a
    /// `fork`ed child of the process that acquired it (the lock is the parent's). Unix only:
    /// on Windows every lock is heartbeat-only (see the [platforms](crate::platforms) page).
    ///
    /// ```
    /// use lease_core::{LeaseGuard, LeaseKey};
    /// use lease_file::DirectoryStore;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Arc::new(DirectoryStore::open(dir.path())?);
    /// let key = LeaseKey::new("job")?;
    /// let guard = LeaseGuard::builder(store.clone(), &key, Duration::from_secs(30)).acquire_blocking()?;
    /// assert!(store.kernel_lock_descriptor(guard.key(), guard.fencing_token()).is_some());
    /// guard.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(unix)]
    pub fn kernel_lock_descriptor(
        &self,
        key: &LeaseKey,
        fencing: FencingToken,
    ) -> Option<std::os::fd::OwnedFd> {
        let path = self.lock_dir(key).ok()?;
        let tenures = self.tenures();
        let tenure = tenures.get(&path)?;
        (tenure.generation == fencing.get())
            .then(|| tenure.kd.share().ok())
            .flatten()
    }

    /// The leases this store holds the kernel lock of, by lock directory.
    fn tenures(&self) -> MutexGuard<'_, HashMap<PathBuf, Tenure>> {
        self.inner
            .tenures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Which process acquired each lease held through this store.
    fn acquired_by(&self) -> MutexGuard<'_, HashMap<PathBuf, (u64, u32)>> {
        self.inner
            .acquired_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The released lock directories kept open.
    fn idle(&self) -> MutexGuard<'_, HashMap<PathBuf, KeyDir>> {
        self.inner
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The safety margin for a lease of `duration`: it must leave some of the lease to trust.
    fn margin(&self, duration: Duration) -> Result<Duration, LeaseError> {
        let margin = self
            .inner
            .safety_margin
            .unwrap_or_else(|| default_safety_margin(duration));
        if margin >= duration {
            return Err(LeaseError::invalid(
                "safety_margin",
                format!(
                    "{margin:?} leaves nothing of a {duration:?} lease to trust; it must be \
                     shorter than the lease"
                ),
            ));
        }
        Ok(margin)
    }

    /// `now + duration`, or an error naming the clock when that is past what [`SystemTime`] can
    /// hold (an injected clock at the end of time).
    fn expiry(now: SystemTime, duration: Duration) -> Result<SystemTime, LeaseError> {
        now.checked_add(duration).ok_or_else(|| {
            LeaseError::invalid(
                "clock",
                format!(
                    "the clock reads {now:?}: a lease of {duration:?} from then has no end time"
                ),
            )
        })
    }

    fn modes(&self) -> Modes {
        Modes {
            file: self.inner.file_mode,
            dir: self.inner.dir_mode,
            fsync: self.inner.fsync,
        }
    }

    fn lease_dir(&self, key: &LeaseKey, create: bool) -> Result<Option<KeyDir>, LeaseError> {
        let name = self.lock_name(key)?;
        KeyDir::open_seeded(
            &self.inner.base,
            name.as_ref(),
            Kind::Lease,
            create.then(|| self.modes()),
            &|| self.first_generation(),
        )
        .map(|kd| kd.map(|kd| kd.durable(self.inner.fsync)))
        .map_err(fs_error(key))
    }

    /// The new holder's description: its owner label and published value from `options`.
    fn describe(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        options: &AcquireOptions,
        now: &Now,
        duration: Duration,
    ) -> LeaseFileRecord {
        let label = options.owner().map(str::to_owned);
        let mut record =
            engine::holder_record(self.inner.mode, token.as_str(), label, now.wall, duration);
        record.partition = Some(key.partition().to_owned());
        record.sort = key.sort().map(str::to_owned);
        record.value = options.value().map(str::to_owned);
        record
    }

    /// A released lock directory kept for `path`, if any, opened by this process: one kept by
    /// the process this one was `fork`ed from shares its kernel lock with that process, so it
    /// is dropped (closing this process's copy only) and the caller opens the path afresh.
    fn take_idle(&self, path: &Path) -> Option<KeyDir> {
        let kd = self.idle().remove(path)?;
        if kd.opened_here() {
            return Some(kd);
        }
        tracing::debug!(path = %path.display(), "lock directory opened before a fork dropped");
        None
    }

    /// Keeps `kd` (without its kernel lock) for the next acquisition of its key, if there is
    /// room and this process opened it.
    fn keep_idle(&self, mut kd: KeyDir) {
        kd.unlock();
        if !kd.opened_here() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < IDLE_DIRS || idle.contains_key(kd.path()) {
            idle.insert(kd.path().to_owned(), kd);
        }
    }

    /// Keeps a won tenure's directory: with its kernel lock while the lease lasts, or, in
    /// heartbeat-only mode (nothing to hold), for the next acquisition of the key. An older
    /// tenure of the key through this store is over: its kernel lock goes.
    fn keep_tenure(&self, path: PathBuf, kd: KeyDir, name: String, held: Held) {
        let mut tenures = self.tenures();
        tenures.remove(&path);
        if kd.locked() {
            let generation = held.generation;
            tenures.insert(
                path,
                Tenure {
                    generation,
                    kd,
                    name,
                    held,
                },
            );
        } else {
            drop(tenures);
            self.keep_idle(kd);
        }
    }

    fn try_acquire_now(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        lease_core::backend::validate_acquire_options(options)?;
        let margin = self.margin(duration)?;
        Self::expiry(self.inner.time.now().wall, duration)?;
        let path = self.lock_dir(key)?;
        let token = options
            .token()
            .cloned()
            .unwrap_or_else(|| self.inner.tokens.next_token());
        let start = self.inner.time.now();
        let claim = Claim {
            token: token.as_str(),
            duration,
            kernel: self.inner.mode == LockMode::Kernel,
            record: self.describe(key, &token, options, &start, duration),
        };
        // A directory kept from an earlier tenure is checked against the path as a freshly
        // opened one would be; one that was removed or replaced, or fails, is dropped and the
        // attempt made again through a fresh one.
        let mut kept = self.take_idle(&path);
        let mut ended = 0;
        loop {
            let cached = kept.is_some();
            let mut kd = match kept.take() {
                Some(kd) => kd,
                None => self.lease_dir(key, true)?.ok_or_else(|| missing(key))?,
            };
            let attempt =
                match engine::try_acquire(&mut kd, &claim, &self.inner.time, &self.inner.seen) {
                    Err(_) if cached => continue,
                    // Deleted (or being deleted) under us: finish the removal, create afresh.
                    Err(_) if ended < 8 && self.finish_if_ended(key, &kd) => {
                        ended += 1;
                        continue;
                    }
                    other => other.map_err(fs_error(key))?,
                };
            return match attempt {
                Attempt::Won { held, name, now } => {
                    if cached && !kd.still_at_path() {
                        let _ = engine::release(&mut kd, &name, &held, None, &self.inner.time);
                        continue;
                    }
                    tracing::debug!(%key, generation = held.generation, token = %token, "file lease acquired");
                    let lease = lease_core::backend::new_lease(
                        key.clone(),
                        token,
                        lease_core::backend::fencing_token(held.generation),
                        duration,
                        Self::expiry(now.wall, duration)?,
                        holder_deadline(now.mono, duration, margin),
                    );
                    self.acquired_by()
                        .insert(path.clone(), (held.generation, std::process::id()));
                    self.keep_tenure(path, kd, name, held);
                    Ok(lease)
                }
                Attempt::Busy { found, holder } => {
                    if cached && !kd.still_at_path() {
                        continue;
                    }
                    let holder = self.holder(&kd, &found, holder.as_ref());
                    self.keep_idle(kd);
                    Err(LeaseError::held(key.clone(), Some(holder)))
                }
            };
        }
    }

    fn renew_now(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        let margin = self.margin(duration)?;
        Self::expiry(self.inner.time.now().wall, duration)?;
        let key = lease.key();
        let path = self.lock_dir(key)?;
        self.refuse_if_forked(key, &path, lease.fencing_token(), "renew")?;
        let mut tenures = self.tenures();
        if let Some(t) = tenures
            .get_mut(&path)
            .filter(|t| t.generation == lease.fencing_token().get())
        {
            let own = t.held.token == fnv(lease.token().as_str().as_bytes());
            // The directory this store holds the kernel lock on, and the name it last gave the
            // state: if the state is still exactly that, one rename renews it. Past its
            // deadline, the state is looked at below, to say whether it was also taken over.
            if own
                && !self.past_deadline(&t.held)
                && let Some((next, next_name, now)) = engine::renew(
                    &mut t.kd,
                    &t.name,
                    &t.held,
                    duration,
                    false,
                    &self.inner.time,
                )
                .map_err(fs_error(key))?
            {
                tracing::debug!(%key, generation = t.generation, seq = next.seq, "file lease renewed");
                t.held = next;
                t.name = next_name;
                return self.renewed(lease, duration, margin, &now);
            }
            // Moved on, past its deadline, or another token: look at it.
            return match self.renew_in(&mut t.kd, lease, duration) {
                Ok((next, next_name, now)) => {
                    t.held = next;
                    t.name = next_name;
                    self.renewed(lease, duration, margin, &now)
                }
                Err(e) => {
                    // The tenure is over: its kernel lock goes, so that the next one can take it.
                    // Not for another token's renewal, which says nothing about this tenure:
                    // freeing the lock would let a contender take over a live holder at once.
                    if e.is_not_owned() && own {
                        tenures.remove(&path);
                    }
                    Err(e)
                }
            };
        }
        drop(tenures);
        let mut kd = self.lease_dir(key, false)?.ok_or_else(|| missing(key))?;
        match self.renew_in(&mut kd, lease, duration) {
            Ok((_, _, now)) => self.renewed(lease, duration, margin, &now),
            Err(e) => {
                if e.is_not_owned() {
                    self.forget_tenure(&path, lease.fencing_token().get(), lease.token());
                }
                Err(e)
            }
        }
    }

    /// Whether this store's clock says the deadline of `held` passed (when it can tell).
    fn past_deadline(&self, held: &Held) -> bool {
        self.inner.time.now().past_deadline(held)
    }

    /// `lease` renewed for `duration` at `now`.
    fn renewed(
        &self,
        lease: &Lease,
        duration: Duration,
        margin: Duration,
        now: &Now,
    ) -> Result<Lease, LeaseError> {
        Ok(lease_core::backend::new_lease(
            lease.key().clone(),
            lease.token().clone(),
            lease.fencing_token(),
            duration,
            Self::expiry(now.wall, duration)?,
            holder_deadline(now.mono, duration, margin),
        ))
    }

    /// The renewal through `kd`: one rename from the state observed, if it is this tenure's and
    /// not past its deadline. Returns the new state and its name.
    fn renew_in(
        &self,
        kd: &mut KeyDir,
        lease: &Lease,
        duration: Duration,
    ) -> Result<(Held, String, Now), LeaseError> {
        let key = lease.key();
        let generation = lease.fencing_token().get();
        for _ in 0..4 {
            let found = live_state(kd, key)?;
            if let Some(gone) = engine::mismatch(&found, generation, lease.token().as_str()) {
                return Err(not_owned(key, gone));
            }
            let State::Held(held) = &found.state else {
                return Err(not_owned(key, Gone::Released));
            };
            if self.past_deadline(held) {
                return Err(not_owned(key, Gone::Expired));
            }
            if let Some(renewed) =
                engine::renew(kd, &found.name, held, duration, false, &self.inner.time)
                    .map_err(fs_error(key))?
            {
                tracing::debug!(%key, generation, seq = renewed.0.seq, "file lease renewed");
                return Ok(renewed);
            }
        }
        Err(LeaseError::backend(
            NAME,
            true,
            "the lease state kept changing under the renewal",
        ))
    }

    /// The release, refused in a forked child of the process that acquired the lease through
    /// this store (its kernel lock and state are the parent's); the record of who acquired it
    /// goes once the release is done or the lease is found gone.
    fn release_now(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        let path = self.lock_dir(key)?;
        self.refuse_if_forked(key, &path, fencing, "release")?;
        let result = self.release_own(key, token, fencing);
        if result
            .as_ref()
            .map_or_else(LeaseError::is_not_owned, |()| true)
        {
            let mut acquired_by = self.acquired_by();
            if acquired_by
                .get(&path)
                .is_some_and(|&(g, _)| g == fencing.get())
            {
                acquired_by.remove(&path);
            }
        }
        result
    }

    /// Refuses `op` on the tenure `fencing` of `key` (at `path`) when this store acquired it
    /// in another process: the process this one was `fork`ed from, which still holds it. A
    /// release, renewal or delete from the child would end or change the parent's lease. One
    /// `getpid` when this store acquired that tenure; nothing otherwise (a lease acquired
    /// elsewhere and handed over by its token is the caller's to end).
    fn refuse_if_forked(
        &self,
        key: &LeaseKey,
        path: &Path,
        fencing: FencingToken,
        op: &'static str,
    ) -> Result<(), LeaseError> {
        if let Some(&(generation, pid)) = self.acquired_by().get(path)
            && generation == fencing.get()
            && pid != std::process::id()
        {
            tracing::warn!(%key, generation, acquired_by = pid, op, "refused in a forked child");
            return Err(crate::forked_refusal(op));
        }
        Ok(())
    }

    fn release_own(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        let path = self.lock_dir(key)?;
        let mut tenures = self.tenures();
        if let Some(t) = tenures
            .get_mut(&path)
            .filter(|t| t.generation == fencing.get())
        {
            // The directory this store holds the kernel lock on, and the name it last gave the
            // state: if the state is still exactly that, one rename releases it. Otherwise (or
            // for another token) the state is looked at. The kernel lock goes with a release,
            // and only then: a release refused (another token, say) must not free the holder's
            // lock.
            let released = t.held.token == fnv(token.as_str().as_bytes())
                && engine::release(&mut t.kd, &t.name, &t.held, None, &self.inner.time)
                    .map_err(fs_error(key))?;
            let result = if released {
                tracing::debug!(%key, generation = fencing.get(), "file lease released");
                Ok(())
            } else {
                Self::release_in(&mut t.kd, key, token, fencing, &self.inner.time)
            };
            if result.is_ok()
                && let Some(t) = tenures.remove(&path)
            {
                drop(tenures);
                self.keep_idle(t.kd);
            }
            return result;
        }
        drop(tenures);
        let mut kd = match self.take_idle(&path) {
            Some(kd) if kd.still_at_path() => kd,
            _ => self.lease_dir(key, false)?.ok_or_else(|| missing(key))?,
        };
        let result = Self::release_in(&mut kd, key, token, fencing, &self.inner.time);
        if result.is_ok() {
            // Its kernel lock goes with it (held by another handle of this store, if any).
            self.tenures().remove(&path);
            self.keep_idle(kd);
        }
        result
    }

    /// The release through `kd`: one rename from the state observed, if it is this tenure's.
    fn release_in(
        kd: &mut KeyDir,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
        time: &Timebase,
    ) -> Result<(), LeaseError> {
        for _ in 0..4 {
            let found = live_state(kd, key)?;
            if let Some(gone) = engine::mismatch(&found, fencing.get(), token.as_str()) {
                return Err(not_owned(key, gone));
            }
            let State::Held(held) = &found.state else {
                return Err(not_owned(key, Gone::Released));
            };
            if engine::release(kd, &found.name, held, Some(found.ino), time)
                .map_err(fs_error(key))?
            {
                return Ok(());
            }
        }
        Err(LeaseError::backend(
            NAME,
            true,
            "the lease state kept changing under the release",
        ))
    }

    fn inspect_now(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let name = self.lock_name(key)?;
        let kd = match KeyDir::open(&self.inner.base, name.as_ref(), Kind::Lease, None) {
            Ok(Some(kd)) => kd,
            Ok(None) => return Ok(None),
            // Another protocol's lock file (a Go PIDLock) holds the key: shown as held, with
            // no fencing token of ours.
            Err(FsError::Held { holder, .. }) => {
                return Ok(Some(lease_core::backend::new_record(
                    key.clone(),
                    Some(*holder),
                    lease_core::backend::fencing_token(0),
                )));
            }
            Err(e) => return Err(e.into_lease(key)),
        };
        let mut kd = kd;
        // A holder is described just after the rename that made it the holder, and its
        // description is erased just before the rename that releases it: a read that falls
        // between the two finds no description of the current tenure. It reads the state again
        // until the description is there or the state has moved on, [`DESCRIPTION_READS`] times
        // at most: an observer that wakes on the rename reports the leader with its value, and
        // one that wakes on the erasure reports the release, not a leader without one. A holder
        // paused or killed in between is shown without a description.
        let mut reads = 0;
        let mut pause = Duration::from_micros(20);
        let (found, holder) = loop {
            reads += 1;
            let found = match live_state(&kd, key) {
                Ok(found) => found,
                // Deleted: absent, as if never seen.
                Err(e) if e.not_owned_reason() == Some(NotOwnedReason::Missing) => {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            let holder = match &found.state {
                State::Free(_) => None,
                // A holder whose kernel lock is free on this host has exited: the key is free,
                // as the next acquisition will find (it takes the lock first, as this check
                // does).
                State::Held(held) if self.holder_is_gone(&mut kd, held) => None,
                State::Held(held) => {
                    let record = engine::describe_tenure(&kd, &found);
                    if !record.as_ref().is_some_and(|r| describes(r, held))
                        && reads < DESCRIPTION_READS
                    {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(2));
                        continue;
                    }
                    Some(self.holder(&kd, &found, record.as_ref()))
                }
            };
            break (found, holder);
        };
        Ok(Some(lease_core::backend::new_record(
            key.clone(),
            holder,
            lease_core::backend::fencing_token(found.state.generation()),
        )))
    }

    /// Drops the kernel lock this store holds for tenure `generation` at `path`, if `token` is
    /// that tenure's: the tenure is over, and the next one should be able to take the lock. A
    /// call with another token (a forged or mistaken lease) leaves it: the holder is alive.
    fn forget_tenure(&self, path: &Path, generation: u64, token: &LeaseToken) {
        let mut tenures = self.tenures();
        if tenures.get(path).is_some_and(|t| {
            t.generation == generation && t.held.token == fnv(token.as_str().as_bytes())
        }) {
            tenures.remove(path);
        }
    }

    fn holder(&self, kd: &KeyDir, found: &Found, record: Option<&LeaseFileRecord>) -> Holder {
        let expires_at = match &found.state {
            State::Held(held) => Some(self.inner.time.display_expiry(
                kd.path(),
                &found.name,
                held,
                &self.inner.seen,
            )),
            State::Free(_) => None,
        };
        holder_of(found, record, expires_at)
    }

    /// Kernel mode: whether `held`'s holder has exited, by the rule a takeover uses
    /// ([`engine::holder_died`]), with the kernel lock taken for the look and let go at once.
    fn holder_is_gone(&self, kd: &mut KeyDir, held: &state::Held) -> bool {
        if self.inner.mode != LockMode::Kernel || held.kernel != Some(kd.id()) {
            return false;
        }
        let gone =
            kd.try_lock().unwrap_or(false) && engine::holder_died(kd, held, &self.inner.time.now());
        kd.unlock();
        gone
    }

    fn list_now(&self, partition: &str) -> Result<Vec<LeaseRecord>, LeaseError> {
        let mut keys: Vec<LeaseKey> = self
            .keys()?
            .into_iter()
            .filter(|key| key.partition() == partition)
            .collect();
        keys.sort();
        let mut records = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(record) = self.inspect_now(&key)? {
                records.push(record);
            }
        }
        Ok(records)
    }
}

impl DirectoryStore {
    fn value_dir(&self, name: &LeaseKey) -> Result<KeyDir, LeaseError> {
        let file_name = fenced_file_name(name)?;
        KeyDir::open(
            &self.inner.base,
            file_name.as_ref(),
            Kind::Value,
            Some(self.modes()),
        )
        .map_err(|error| match error {
            // A regular file that would read as a Go lock at a lease's path holds nothing
            // at a fenced value's: it is simply not a value.
            FsError::Held { path, holder, .. } => LeaseError::corrupt(
                name.clone(),
                format!("{}: not a fenced value: {holder}", path.display()),
            ),
            other => other.into_lease(name),
        })?
        .map(|kd| kd.durable(self.inner.fsync))
        .ok_or_else(|| missing(name))
    }

    /// [`FencedValues::fence_and_read`]: the value the chain entry names, read and checked, then
    /// one rename that raises the fence.
    fn fence_and_read_now(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let kd = self.value_dir(name)?;
        let fence = fencing.get();
        for _ in 0..8 {
            let value = kd.value().map_err(fs_error(name))?;
            fenced_write(fencing_token(value.fence), fencing)
                .map_err(|reason| LeaseError::not_owned(name.clone(), reason))?;
            // Read before raising the fence, so a corrupt value is refused with nothing written.
            // A data file never changes once named: this is the value of the entry observed.
            let Some(current) = current_value(name, &kd, &value)? else {
                continue; // replaced since we listed: look again
            };
            if value.fence < fence {
                let raised = Value {
                    fence,
                    seq: value.seq.saturating_add(1),
                    nonce: value.nonce,
                };
                if !kd
                    .swap(&value.name(), &raised.name())
                    .map_err(fs_error(name))?
                {
                    continue;
                }
                tracing::debug!(%name, fence, "fence raised");
            }
            return Ok(current);
        }
        Err(LeaseError::backend(
            NAME,
            true,
            "the fenced value kept changing under the read",
        ))
    }

    /// [`FencedValues::put_fenced`]: the value is written to a new data file first, then one
    /// rename makes the chain entry name it.
    fn put_fenced_now(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        bytes: &[u8],
    ) -> Result<(), LeaseError> {
        validate_fenced_value(bytes)?;
        let kd = self.value_dir(name)?;
        let fence = fencing.get();
        let nonce = uuid::Uuid::new_v4().as_u64_pair().0;
        let data = data_name(nonce);
        let mut created = false;
        let result = (|| {
            for _ in 0..8 {
                let value = kd.value().map_err(fs_error(name))?;
                fenced_write(fencing_token(value.fence), fencing)
                    .map_err(|reason| LeaseError::not_owned(name.clone(), reason))?;
                // The value replaced must be intact: a corrupt or lost one is refused as a read
                // of it is, never replaced (its file would be deleted with it).
                if current_value(name, &kd, &value)?.is_none() {
                    continue;
                }
                if !created {
                    kd.create(
                        &data,
                        self.inner.file_mode,
                        &fenced::encode(fence, Some(bytes)),
                        self.inner.fsync,
                    )
                    .map_err(fs_error(name))?;
                    created = true;
                }
                let next = Value {
                    fence,
                    seq: value.seq.saturating_add(1),
                    nonce: Some(nonce),
                };
                if kd
                    .swap(&value.name(), &next.name())
                    .map_err(fs_error(name))?
                {
                    if let Some(old) = value.nonce {
                        kd.remove(&data_name(old));
                    }
                    tracing::debug!(%name, fence, "fenced value written");
                    return Ok(true);
                }
            }
            Err(LeaseError::backend(
                NAME,
                true,
                "the fenced value kept changing under the write",
            ))
        })();
        if created && !matches!(result, Ok(true)) {
            kd.remove(&data);
        }
        result.map(drop)
    }
}

/// The value the chain entry `value` names, read and checked: `Some(None)` for a name only
/// fenced, `None` when the entry was replaced meanwhile (its data file goes with it: look again).
///
/// # Errors
/// [`LeaseError::Corrupt`] naming the data file when it is not a regular file, oversized or
/// corrupt, or missing while the entry still names it.
fn current_value(
    name: &LeaseKey,
    kd: &KeyDir,
    value: &Value,
) -> Result<Option<Option<Vec<u8>>>, LeaseError> {
    let Some(nonce) = value.nonce else {
        return Ok(Some(None));
    };
    let data = data_name(nonce);
    let path = kd.path().join(&data);
    match kd.open_file(&data).map_err(fs_error(name))? {
        Some(file) => read_value(name, &path, file).map(Some),
        None if kd.value().map_err(fs_error(name))? == *value => Err(corrupt_fenced(
            name,
            &path,
            "missing, though the value entry names it (deleted by hand or by a cleaner?)",
        )),
        None => Ok(None),
    }
}

fn read_value(
    name: &LeaseKey,
    path: &Path,
    mut file: std::fs::File,
) -> Result<Option<Vec<u8>>, LeaseError> {
    use std::io::Read as _;
    let io = |e| crate::fsio::io_error("read fenced value", path, e).into_lease(name);
    if !file.metadata().map_err(io)?.is_file() {
        return Err(corrupt_fenced(name, path, "not a regular file"));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_FENCED_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_FENCED_FILE_BYTES {
        return Err(corrupt_fenced(name, path, "larger than the limit"));
    }
    let parsed = fenced::parse(&bytes).map_err(|reason| corrupt_fenced(name, path, &reason))?;
    Ok(parsed.value)
}

fn corrupt_fenced(name: &LeaseKey, path: &Path, reason: &str) -> LeaseError {
    FsError::Hostile {
        path: path.to_owned(),
        reason: format!("corrupt fenced-value file: {reason}"),
    }
    .into_lease(name)
}

/// The live state of `kd`; a directory deleted (or being deleted) is the lease gone:
/// `NotOwned { Missing }`.
fn live_state(kd: &KeyDir, key: &LeaseKey) -> Result<Found, LeaseError> {
    kd.state().map_err(|e| {
        if deleted(kd) {
            missing(key)
        } else {
            e.into_lease(key)
        }
    })
}

/// Whether `kd` was deleted: ended (`dead.<g>`), or empty and either no longer at its path
/// (removed) or in a store that deletes keys (`store_deletes`: a removal between its unlink
/// and its `rmdir`). Elsewhere an empty directory at a key's path is not taken for one: it was
/// planted, and is refused as damaged like any lock directory without its state.
fn deleted_in(kd: &KeyDir, store_deletes: impl FnOnce() -> bool) -> bool {
    match kd.ended() {
        Ok(Some(state::Ended::Dead(_))) => true,
        Ok(Some(state::Ended::Empty)) => !kd.still_at_path() || store_deletes(),
        _ => false,
    }
}

fn deleted(kd: &KeyDir) -> bool {
    deleted_in(kd, || kd.store_has(SEEDED))
}

fn missing(key: &LeaseKey) -> LeaseError {
    LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)
}

fn not_owned(key: &LeaseKey, gone: Gone) -> LeaseError {
    let reason = match gone {
        Gone::Released => NotOwnedReason::Missing,
        Gone::TakenOver => NotOwnedReason::TakenOver,
        Gone::Expired => NotOwnedReason::Expired,
    };
    LeaseError::not_owned(key.clone(), reason)
}

/// The one mapping of the file machinery's errors for `key` ([`FsError::into_lease`]): a
/// foreign lock file at a key's path (a Go `PIDLock`) is `Held`, a hostile one `Corrupt`,
/// another protocol's `Foreign`, I/O `Backend`.
fn fs_error(key: &LeaseKey) -> impl Fn(FsError) -> LeaseError + '_ {
    move |error| error.into_lease(key)
}

fn time(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

/// How many times a read reads the state of a holder caught without its description (between
/// the rename that made it the holder and its description, or between the erasure of its
/// description and the rename that releases it) before showing it without one. The pauses
/// between reads double from 20 microseconds up to 2 milliseconds: about 20 milliseconds in
/// all.
const DESCRIPTION_READS: u32 = 16;

/// Whether `record` describes the tenure `held` (not an earlier holder's leftover).
fn describes(record: &LeaseFileRecord, held: &Held) -> bool {
    record.generation == held.generation
        && record.owner.as_deref().map(|t| fnv(t.as_bytes())) == Some(held.token)
}

/// The holder of the state `found`, as its name and (when it describes this very tenure) its
/// diagnostic record say; its expiry as [`Timebase::display_expiry`] shows it.
fn holder_of(
    found: &Found,
    record: Option<&LeaseFileRecord>,
    expires_at: Option<SystemTime>,
) -> Holder {
    let mut holder =
        Holder::new().with_fencing(lease_core::backend::fencing_token(found.state.generation()));
    let State::Held(held) = &found.state else {
        return holder;
    };
    if let Some(at) = expires_at {
        holder = holder.with_expires_at(at);
    }
    let record = record.filter(|r| describes(r, held));
    let Some(record) = record else {
        return holder.with_owner("a holder still writing its description");
    };
    holder = holder
        .with_owner(
            record
                .label
                .clone()
                .unwrap_or_else(|| format!("pid {} on {}", record.pid, record.host)),
        )
        .with_acquired_at(time(record.acquired_at_ns));
    if let Some(value) = &record.value {
        holder = holder.with_value(value.clone());
    }
    if let Some(token) = record
        .owner
        .as_deref()
        .and_then(|t| LeaseToken::new(t).ok())
    {
        holder = holder.with_token(token);
    }
    holder
}

/// Delete and prune: a lock directory ends by one rename of its state entry to `dead.<g>`,
/// then is removed (see *Delete and prune* on [`DirectoryStore`]).
impl DirectoryStore {
    /// The generation a lock directory created now starts from: 0 in a store where no key was
    /// ever deleted; once one was (the marker [`SEEDED`] exists), this store's wall clock in
    /// microseconds since the epoch, so that a re-created key's tokens continue above its old
    /// ones (the assumption is in [`protocol`](crate::protocol), *Deleting and pruning keys*).
    fn first_generation(&self) -> u64 {
        let marked = self
            .inner
            .base
            .dir()
            .stat(std::ffi::OsStr::new(SEEDED))
            .is_ok();
        if marked { self.clock_micros() } else { 0 }
    }

    /// This store's wall clock, in microseconds since the epoch (0 before it).
    fn clock_micros(&self) -> u64 {
        engine::wall_ns(self.inner.time.now().wall) / 1_000
    }

    /// Creates the marker [`SEEDED`] (if missing) before the first delete: from then on every
    /// lock directory created here starts from the clock.
    fn mark_seeded(&self, store: &crate::at::Dir) -> Result<(), FsError> {
        // As every file the store creates: the configured mode less the umask and never
        // writable by others, or, in a shared directory, exactly the configured mode, given
        // through the descriptor of the file just created.
        let shared = self.inner.base.shared();
        let mode = if shared {
            self.inner.file_mode
        } else {
            self.inner.file_mode & !0o022
        };
        match store.create_new(std::ffi::OsStr::new(SEEDED), mode) {
            Ok(file) => {
                if shared {
                    crate::at::set_mode(&file, mode).map_err(|e| {
                        crate::fsio::io_error("chmod", &self.inner.dir.join(SEEDED), e)
                    })?;
                }
                if self.inner.fsync {
                    store.sync().map_err(|e| {
                        crate::fsio::io_error("fsync store directory", &self.inner.dir, e)
                    })?;
                }
                tracing::info!(dir = %self.inner.dir.display(), "fencing now seeded from the clock");
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(crate::fsio::io_error(
                "create",
                &self.inner.dir.join(SEEDED),
                e,
            )),
        }
    }

    /// If `kd` (the lock directory of `key`) holds no live state, finishes its removal and
    /// says so: the caller opens the path afresh.
    fn finish_if_ended(&self, key: &LeaseKey, kd: &KeyDir) -> bool {
        if !deleted(kd) {
            return false;
        }
        let Ok(name) = self.lock_name(key) else {
            return false;
        };
        state::remove_ended(&self.inner.base, &name, kd, None);
        true
    }

    /// Ends `kd` (the lock directory of `key`) from the state `found`: true when this call
    /// ended it. The caller removes it ([`state::remove_ended`]).
    fn end(
        &self,
        store: &crate::at::Dir,
        key: &LeaseKey,
        kd: &KeyDir,
        found: &Found,
    ) -> Result<bool, LeaseError> {
        self.mark_seeded(store).map_err(fs_error(key))?;
        if !kd
            .end(&found.name, found.state.generation())
            .map_err(fs_error(key))?
        {
            return Ok(false);
        }
        let path = kd.path().to_owned();
        self.tenures().remove(&path);
        self.idle().remove(&path);
        Ok(true)
    }

    /// `fencing` is `None` for a key never acquired (`free.0`: its record has no token yet).
    fn delete_now(
        &self,
        key: &LeaseKey,
        holder: Option<&LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> Result<(), LeaseError> {
        let fence = fencing.map_or(0, FencingToken::get);
        if let Some(fencing) = fencing {
            self.refuse_if_forked(key, &self.lock_dir(key)?, fencing, "delete")?;
        }
        let Some(kd) = self.lease_dir(key, false)? else {
            return Err(missing(key));
        };
        let store = state::open_store_dir(&self.inner.base).map_err(fs_error(key))?;
        let name = self.lock_name(key)?;
        let listing = state::store_listing(&self.inner.base).map_err(fs_error(key))?;
        if state::creating(&listing, &name) {
            return Err(LeaseError::backend(
                NAME,
                true,
                format!(
                    "a creation of {} is under way (or a temporary .lease-init.* was left by \
                     a process that crashed: remove it once no process creates the key)",
                    kd.path().display()
                ),
            ));
        }
        for _ in 0..4 {
            let found = match live_state(&kd, key) {
                Err(e) if e.is_not_owned() => {
                    self.finish_if_ended(key, &kd);
                    return Err(e);
                }
                other => other?,
            };
            let refusal = match (holder, &found.state) {
                (Some(token), _) => engine::mismatch(&found, fence, token.as_str()),
                (None, State::Free(g)) if *g == fence => None,
                (None, _) => Some(Gone::TakenOver),
            };
            if let Some(gone) = refusal {
                return Err(not_owned(key, gone));
            }
            if self.end(&store, key, &kd, &found)? {
                tracing::info!(%key, generation = found.state.generation(), "file lease deleted");
                if !state::remove_ended(&self.inner.base, &name, &kd, None) {
                    tracing::debug!(%key, "ended lock directory left for the next acquisition");
                }
                return Ok(());
            }
        }
        Err(LeaseError::backend(
            NAME,
            true,
            "the lease state kept changing under the delete",
        ))
    }

    /// Removes every key that is free and whose lock directory has not changed for `idle_for`
    /// (by the system's wall clock against the directory's modification time), so that a store
    /// of many short-lived keys (job ids, tenants) does not grow without bound. Safe against
    /// every concurrent acquirer, renewal and release, in any process: each key ends by one
    /// rename from the exact `free.<g>` name observed (see *Delete and prune*), so a key acquired
    /// meanwhile is left alone, and an acquirer that observed `free.<g>` before the prune finds
    /// its rename fails and opens the re-created key instead. Held keys are never removed, nor
    /// (in kernel mode) a key whose kernel lock someone holds at that moment (an acquisition
    /// under way). Ended directories left by an interrupted delete are removed too.
    ///
    /// A key is also kept when its fencing generation is not below this store's clock in
    /// microseconds ([`PruneReport::ahead_of_clock`]), and one whose creation is under way
    /// ([`PruneReport::busy`]; a temporary `.lease-init.<hash>.<nonce>` left by a creator that
    /// crashed counts: remove it by hand). Re-created, a key would start from that
    /// clock, and its tokens would not continue above the old ones (see
    /// [*Deleting and pruning keys*](crate::protocol#deleting-and-pruning-keys)).
    ///
    /// Costs, per key: opening its directory and a stream on it (`openat`, `fstat`, four
    /// `fcntl`), listing it (two `getdents64`, an `lseek`), its `fstat` for the idle time, a
    /// `flock` in kernel mode, then `close`s: about 15 syscalls per key kept. A key removed
    /// adds the marker's `openat` (refused, `EEXIST`), the `renameat` that ends it, and, after
    /// the second listing of the store, opening and listing it again, two `unlinkat` (its
    /// entry, then the directory) and the `close`s: 30 syscalls per removed key, counted with
    /// `strace` on `tests/prune.rs`. Plus two listings of the store directory (`getdents64`,
    /// a few per thousand keys).
    ///
    /// ```
    /// use lease_core::{LeaseGuard, LeaseKey};
    /// use lease_file::DirectoryStore;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Arc::new(DirectoryStore::open(dir.path())?);
    /// let (key, d) = (LeaseKey::new("job-1")?, Duration::from_secs(30));
    /// let guard = LeaseGuard::builder(store.clone(), &key, d).acquire_blocking()?;
    /// assert!(store.prune(Duration::ZERO)?.removed.is_empty(), "held: kept");
    /// let fencing = guard.fencing_token();
    /// guard.release()?;
    /// let report = store.prune(Duration::ZERO)?;
    /// assert_eq!(report.removed, vec![key.clone()]);
    /// assert!(store.keys()?.is_empty());
    /// // Acquired again, it continues above every earlier token.
    /// let again = LeaseGuard::builder(store.clone(), &key, d).acquire_blocking()?;
    /// assert!(again.fencing_token() > fencing);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`LeaseError::Backend`] if the store directory cannot be opened or listed, or the
    /// marker that seeds fencing from the clock cannot be created. A key that cannot be read
    /// is kept and counted in [`PruneReport::unreadable`], not an error.
    pub fn prune(&self, idle_for: Duration) -> Result<PruneReport, LeaseError> {
        let dir = &self.inner.dir;
        let base = &self.inner.base;
        let store = state::open_store_dir(base).map_err(FsError::into_backend)?;
        let names = state::store_listing(base).map_err(FsError::into_backend)?;
        let clock = self.clock_micros();
        let mut report = PruneReport::default();
        // First every eligible key is ended, then one listing taken after all of them shows
        // which can be removed (none whose creation is under way: see `state::creating`).
        let mut ended = Vec::new();
        let creations = state::creations(&names);
        for name in &names {
            let Some(key) = name.to_str().and_then(decode_file_name) else {
                continue;
            };
            // A key being created is left alone, and so is one with a temporary left by a
            // creator that crashed: ended, it could not be removed while that is there.
            if name
                .to_str()
                .is_some_and(|n| state::creation_pending(&creations, n))
            {
                report.busy += 1;
                continue;
            }
            match self.prune_one(&store, &key, idle_for, clock) {
                Ok(Pruned::Ended) => ended.push(key),
                Ok(Pruned::Held) => report.held += 1,
                Ok(Pruned::Recent) => report.recent += 1,
                Ok(Pruned::Busy) => report.busy += 1,
                Ok(Pruned::AheadOfClock) => report.ahead_of_clock += 1,
                Ok(Pruned::Gone) => {}
                Err(e) => {
                    tracing::debug!(%key, error = %e, "prune: key kept");
                    report.unreadable += 1;
                }
            }
        }
        if !ended.is_empty() {
            let listing = state::store_listing(base).map_err(FsError::into_backend)?;
            let creations = state::creations(&listing);
            for key in &ended {
                let name = self.lock_name(key)?;
                // Whatever is at the path now: `remove_ended` unlinks only a `dead.<g>` entry,
                // and the `rmdir` removes only an empty directory.
                let removed =
                    match KeyDir::open(base, std::ffi::OsStr::new(&name), Kind::Lease, None) {
                        Ok(Some(kd)) => state::remove_ended(base, &name, &kd, Some(&creations)),
                        // Removed by someone else already (and perhaps created afresh).
                        Ok(None) | Err(_) => true,
                    };
                if removed {
                    report.removed.push(key.clone());
                } else {
                    tracing::info!(%key, "prune: ended key's directory left in place");
                    report.left_in_place += 1;
                }
            }
        }
        tracing::info!(
            dir = %dir.display(),
            removed = report.removed.len(),
            kept = report.kept(),
            "store pruned"
        );
        Ok(report)
    }

    /// Ends `key` if prunable (see [`prune`](Self::prune)); an ended directory found is
    /// `Ended` too.
    fn prune_one(
        &self,
        store: &crate::at::Dir,
        key: &LeaseKey,
        idle_for: Duration,
        clock: u64,
    ) -> Result<Pruned, LeaseError> {
        let Some(mut kd) = self.lease_dir(key, false)? else {
            return Ok(Pruned::Gone);
        };
        let found = match live_state(&kd, key) {
            Err(e) if e.is_not_owned() => return Ok(Pruned::Ended),
            // Empty, at the path: no state to lose (a removal interrupted between its unlink
            // and its rmdir, or planted).
            Err(_) if matches!(kd.ended(), Ok(Some(state::Ended::Empty))) => {
                return Ok(Pruned::Ended);
            }
            other => other?,
        };
        let State::Free(generation) = found.state else {
            return Ok(Pruned::Held);
        };
        let idle = kd
            .changed_at()
            .and_then(|at| SystemTime::now().duration_since(at).ok())
            .unwrap_or(Duration::ZERO);
        if idle < idle_for {
            return Ok(Pruned::Recent);
        }
        if generation >= clock {
            return Ok(Pruned::AheadOfClock);
        }
        if self.inner.mode == LockMode::Kernel && !kd.try_lock().map_err(fs_error(key))? {
            return Ok(Pruned::Busy);
        }
        Ok(if self.end(store, key, &kd, &found)? {
            tracing::debug!(%key, generation, "file lease pruned");
            Pruned::Ended
        } else {
            Pruned::Busy
        })
    }
}

/// The marker in a store directory that some key was once deleted: lock directories created
/// from then on start their generation from the clock.
const SEEDED: &str = ".fencing-from-clock";

/// What pruning did with one key.
enum Pruned {
    Ended,
    Held,
    Recent,
    Busy,
    AheadOfClock,
    Gone,
}

impl LeaseBackend for DirectoryStore {
    fn name(&self) -> &'static str {
        NAME
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.time.clock().as_ref()
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }

    fn as_fenced_values(&self) -> Option<&dyn FencedValues> {
        Some(self)
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let result = self.try_acquire_now(key, duration, options);
            lease_core::metrics::acquisition(self.name(), &result);
            result
        })
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move {
            let sent = lease_core::metrics::started(self.clock());
            let result = self.renew_now(lease, duration);
            lease_core::metrics::renewal(self.name(), self.clock(), lease, sent, &result);
            result
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move { self.release_now(key, token, fencing) })
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(async move { self.inspect_now(key) })
    }

    /// One rename of the state named to `dead.<g>`, then the directory removed (see *Delete and prune*
    /// on [`DirectoryStore`]). The key's next acquisition continues above its old tokens under
    /// the clock assumption of [*Deleting and pruning keys*](crate::protocol#deleting-and-pruning-keys).
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move { self.delete_now(key, holder, fencing) })
    }

    /// In kernel mode, when the holder holds the kernel lock: a thread blocked in `flock` on the
    /// lock directory (one per directory, shared by every waiter of this store) completes it the
    /// moment the holder releases or dies, so a waiting acquisition takes over at kernel speed
    /// instead of at its next poll.
    fn changed<'a>(&'a self, key: &'a LeaseKey) -> Option<BoxFuture<'a, ()>> {
        if self.inner.mode != LockMode::Kernel {
            return None;
        }
        let name = self.lock_name(key).ok()?;
        let woken = self
            .inner
            .waiters
            .when_released(&self.inner.base, name.as_ref())?;
        Some(Box::pin(woken))
    }

    /// The kernel reports every change of the key's lock directory (inotify, on Linux): a
    /// watch costs one inotify instance and a thread blocked reading it, and each change one
    /// wake-up. Elsewhere, `None`: observers poll.
    fn watch_record(&self, key: &LeaseKey) -> Option<Box<dyn lease_core::RecordWatch>> {
        #[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
        {
            let name = self.lock_name(key).ok()?;
            crate::watch::watch(&self.inner.base, name.as_ref())
        }
        #[cfg(any(not(target_os = "linux"), feature = "portable-paths"))]
        {
            let _ = key;
            None
        }
    }
}

impl LeaseListing for DirectoryStore {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(async move { self.list_now(partition) })
    }
}

/// Fenced values live in the store directory, one directory per name, named `fenced~` and the
/// key encoded as its lock directory's name is (a namespace no lease key's name can reach, so
/// [`list_partition`](LeaseListing::list_partition) never returns them). The directory holds one
/// chain entry `value.<fence>.<seq>.<nonce>`, whose name is the fence, and the data file
/// `data.<nonce>` it names, in the binary format documented with
/// [`MAX_FENCED_FILE_BYTES`](crate::MAX_FENCED_FILE_BYTES): fence, value (up to
/// [`MAX_FENCED_VALUE_BYTES`](lease_core::MAX_FENCED_VALUE_BYTES)), checksum.
///
/// Each operation reads the chain entry and the value it names, then makes at most one rename
/// from that exact entry name, the compare-and-swap lease states use:
/// [`fence_and_read`](FencedValues::fence_and_read) renames it to the higher fence;
/// [`put_fenced`](FencedValues::put_fenced) first creates a new data file with `O_EXCL` (with
/// the configured mode, fsynced with [`with_fsync`](DirectoryStoreBuilder::with_fsync)), renames the
/// entry to name it, then removes the old data file. A rename from a name that changed meanwhile
/// fails and the operation looks again, so two writers can never both pass the fence check, and a
/// writer paused for any length of time never replaces a value written under a newer fence.
///
/// Links are never followed (`O_NOFOLLOW` on every open). Anything but a directory at the name's
/// path, a second chain entry or none, and a data file that is not a regular file, oversized,
/// corrupt or missing, is a permanent [`LeaseError::Backend`] naming its path, for reads and
/// writes alike, and nothing is written, renamed or removed: the fence is not raised, the
/// damaged value not replaced. Remove the name's directory by hand to start it afresh. A value
/// over the limit is refused with [`LeaseError::InvalidInput`] before any syscall.
///
/// Costs: opening the name's directory and listing it, then opening, checking and reading the
/// current data file, for every operation; plus one `rename` for a `fence_and_read` that raises
/// the fence (none at the current fence); plus, for `put_fenced`, the new data file's creation,
/// `fchmod`, `write` and `close`, the `rename` and the old file's `unlink`.
impl FencedValues for DirectoryStore {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(async move { self.fence_and_read_now(name, fencing) })
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move { self.put_fenced_now(name, fencing, value) })
    }
}
