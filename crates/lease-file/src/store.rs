//! A directory of lease records implementing the lease-core contract.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Holder, Lease, LeaseBackend,
    LeaseError, LeaseKey, LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, RandomTokens,
    SystemClock, TokenSource, default_safety_margin, holder_deadline, validate_duration,
    validate_fenced_value,
};

use crate::cs::{Cs, LockMode, ModePreference, detect};
use crate::fenced::{self, MAX_FENCED_FILE_BYTES};
use crate::fsio::{ensure_dir, read_capped_file, replace_atomically, with_suffix};
use crate::lock::{Read, read};
use crate::{
    FileLockError, LeaseFileRecord, SCHEMA_VERSION, decode_file_name, fenced_file_name, ident,
    key_file_name,
};

const NAME: &str = "file";

/// The file [`DirectoryStore::open`] flocks to learn whether kernel locks work in the directory.
const PROBE: &str = ".mode-probe.lock";

/// Leases as files in one directory: the lease-core [`LeaseBackend`] and [`LeaseListing`] on a
/// local (or, in heartbeat-only mode, network) file system.
///
/// Each key is one record file named by [`key_file_name`] plus a never-deleted `.lock` companion
/// for critical sections. Expiry is judged, as the contract says, by the injected [`Clock`]'s
/// wall time against the record's `expires_at`, so every process sharing the directory must have
/// wall clocks that agree within the holders' safety margin (on one host they share one clock).
/// Holder deadlines come from [`holder_deadline`] measured before each operation.
///
/// The futures do their file I/O inline when first polled: a few local syscalls (see
/// [`FileLock`](crate::FileLock) for counts), no thread hop, no runtime needed.
///
/// ```
/// use lease_core::{LeaseBackend, LeaseBackendExt, LeaseKey, LeaseListing};
/// use lease_file::DirectoryStore;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store = DirectoryStore::open(dir.path())?;
/// let key = LeaseKey::with_sort_key("jobs", "nightly")?;
/// let lease = lease_core::block_on(store.acquire(&key, Duration::from_secs(30)))?;
/// assert!(lease_core::block_on(store.acquire(&key, Duration::from_secs(30))).unwrap_err().is_held());
/// let listed = lease_core::block_on(store.list_partition("jobs"))?;
/// assert_eq!(listed.len(), 1);
/// lease_core::block_on(store.release_lease(&lease))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Kept alive by a lease-core [`LeaseGuard`](lease_core::LeaseGuard) on a thread of its own:
///
/// ```
/// use lease_core::{KeeperOptions, LeaseBackend, LeaseBackendExt, LeaseGuard, LeaseKey};
/// use lease_file::DirectoryStore;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store: Arc<dyn LeaseBackend> = Arc::new(DirectoryStore::open(dir.path())?);
/// let key = LeaseKey::new("leader")?;
/// let lease = lease_core::block_on(store.acquire(&key, Duration::from_secs(3)))?;
/// let guard = LeaseGuard::spawn_thread(store.clone(), lease, KeeperOptions::default())?;
/// let fencing = guard.check()?;
/// assert_eq!(fencing, guard.fencing_token());
/// lease_core::block_on(guard.release())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct DirectoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    mode: LockMode,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    safety_margin: Option<Duration>,
    file_mode: u32,
    fsync: bool,
    cs_wait: Duration,
    /// Heartbeat-only mode keeps one critical-section object per key, so staleness of a
    /// critical section is timed across calls.
    file_cs: Mutex<HashMap<String, Arc<Cs>>>,
}

impl fmt::Debug for DirectoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryStore")
            .field("dir", &self.inner.dir)
            .field("mode", &self.inner.mode)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl DirectoryStore {
    /// Opens (creating it if needed) the store in `dir`, detecting the [`LockMode`].
    ///
    /// # Errors
    /// If the directory cannot be created or probed.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, FileLockError> {
        Self::open_with_mode(dir, ModePreference::Auto)
    }

    /// Opens the store with a [`ModePreference`].
    ///
    /// # Errors
    /// As [`open`](Self::open), plus [`FileLockError::Unsupported`] when kernel locks are
    /// demanded and do not work.
    pub fn open_with_mode(
        dir: impl AsRef<Path>,
        preference: ModePreference,
    ) -> Result<Self, FileLockError> {
        let dir = dir.as_ref().to_owned();
        ensure_dir(&dir, 0o755)?;
        let (mode, reason) = detect(&dir, &dir.join(PROBE), 0o644, preference)?;
        tracing::debug!(dir = %dir.display(), ?mode, %reason, "directory store opened");
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                mode,
                clock: Arc::new(SystemClock),
                tokens: Arc::new(RandomTokens),
                safety_margin: None,
                file_mode: 0o644,
                fsync: false,
                cs_wait: Duration::from_secs(3),
                file_cs: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn update(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            f(inner);
        } else {
            let old = &self.inner;
            let mut inner = Inner {
                dir: old.dir.clone(),
                mode: old.mode,
                clock: old.clock.clone(),
                tokens: old.tokens.clone(),
                safety_margin: old.safety_margin,
                file_mode: old.file_mode,
                fsync: old.fsync,
                cs_wait: old.cs_wait,
                file_cs: Mutex::new(HashMap::new()),
            };
            f(&mut inner);
            self.inner = Arc::new(inner);
        }
        self
    }

    /// Uses `clock` for expiry and deadlines.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        self.update(|i| i.clock = clock)
    }

    /// Uses `tokens` to make owner tokens.
    pub fn with_token_source(self, tokens: Arc<dyn TokenSource>) -> Self {
        self.update(|i| i.tokens = tokens)
    }

    /// Overrides [`default_safety_margin`]. Zero trusts the whole lease; a margin as long as a
    /// lease or longer (such as `Duration::MAX`) makes acquiring or renewing it fail with
    /// [`LeaseError::InvalidInput`] naming `safety_margin`, writing nothing.
    pub fn with_safety_margin(self, margin: Duration) -> Self {
        self.update(|i| i.safety_margin = Some(margin))
    }

    /// Mode of created record, companion, epoch and fenced-value files (default 0644), exactly:
    /// the umask does not apply. Records hold owner tokens: anyone who can write the directory
    /// can act as any owner anyway, so the directory's mode is the access control. The mode probe
    /// [`open`](Self::open) created (`.mode-probe.lock`, 0644) is given this mode too, if this
    /// user owns it.
    pub fn with_file_mode(self, mode: u32) -> Self {
        let mode = mode & 0o7777;
        crate::fsio::chmod_if_own(&self.inner.dir.join(PROBE), mode);
        self.update(|i| i.file_mode = mode)
    }

    /// fsync records and the directory on every write (default off).
    pub fn with_fsync(self, fsync: bool) -> Self {
        self.update(|i| i.fsync = fsync)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Which protocol guards critical sections here.
    pub fn mode(&self) -> LockMode {
        self.inner.mode
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

    fn cs_for(&self, path: &Path, name: &str) -> Arc<Cs> {
        match self.inner.mode {
            LockMode::Kernel => {
                Arc::new(Cs::kernel(with_suffix(path, ".lock"), self.inner.file_mode))
            }
            _ => self
                .inner
                .file_cs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(name.to_owned())
                .or_insert_with(|| {
                    Arc::new(Cs::files(path, self.inner.file_mode, self.inner.cs_wait))
                })
                .clone(),
        }
    }

    /// Runs `f` inside the key's critical section with the current record.
    fn with_record<T>(
        &self,
        key: &LeaseKey,
        f: impl FnOnce(&Path, Read) -> Result<T, LeaseError>,
    ) -> Result<T, LeaseError> {
        let name = key_file_name(key)?;
        let path = self.inner.dir.join(&name);
        let cs = self.cs_for(&path, &name);
        let guard = cs.enter(self.inner.cs_wait).map_err(backend_error)?;
        let current = read(&path).map_err(backend_error)?;
        let result = f(&path, current);
        if result.is_ok() && !guard.still_exclusive() {
            tracing::warn!(%key, "critical section was reclaimed while inside it");
        }
        result
    }

    fn write(&self, path: &Path, record: &LeaseFileRecord) -> Result<(), LeaseError> {
        replace_atomically(
            path,
            &record.to_bytes(),
            self.inner.file_mode,
            self.inner.fsync,
        )
        .map_err(backend_error)
    }

    fn record(
        &self,
        key: &LeaseKey,
        owner: Option<&LeaseToken>,
        label: Option<String>,
        generation: u64,
        acquired_at: SystemTime,
        expires_at: SystemTime,
    ) -> LeaseFileRecord {
        let me = ident::current();
        LeaseFileRecord {
            version: SCHEMA_VERSION,
            owner: owner.map(|t| t.as_str().to_owned()),
            label,
            pid: me.pid,
            host: me.host,
            pid_ns: me.pid_ns,
            boot_id: me.boot_id,
            start_time: me.start_time,
            heartbeat: 0,
            written_at_ns: ns(self.inner.clock.now()),
            acquired_at_ns: ns(acquired_at),
            expires_at_ns: ns(expires_at),
            generation,
            tenure: false,
            protocol: Some(self.inner.mode.as_str().to_owned()),
            partition: Some(key.partition().to_owned()),
            sort: key.sort().map(str::to_owned),
        }
    }

    fn try_acquire_now(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        let margin = self.margin(duration)?;
        let sent = self.inner.clock.monotonic();
        self.with_record(key, |path, current| {
            let now = self.inner.clock.now();
            let expires_at = Self::expiry(now, duration)?;
            let previous = match current {
                Read::Missing => 0,
                Read::Valid(r) => {
                    if r.owner.is_some() && now < time(r.expires_at_ns) {
                        return Err(LeaseError::held(key.clone(), Some(holder_of(&r))));
                    }
                    r.generation
                }
                Read::Invalid { reason, .. } => return Err(corrupt(path, &reason)),
            };
            let generation = previous
                .checked_add(1)
                .ok_or_else(|| LeaseError::backend(NAME, false, "fencing generation exhausted"))?;
            let token = options
                .token()
                .cloned()
                .unwrap_or_else(|| self.inner.tokens.next_token());
            let record = self.record(
                key,
                Some(&token),
                options.owner().map(str::to_owned),
                generation,
                now,
                expires_at,
            );
            self.write(path, &record)?;
            tracing::debug!(%key, generation, token = %token, "file lease acquired");
            Ok(Lease::new(
                key.clone(),
                token,
                FencingToken::new(generation),
                duration,
                expires_at,
                holder_deadline(sent, duration, margin),
            ))
        })
    }

    fn renew_now(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        let margin = self.margin(duration)?;
        let sent = self.inner.clock.monotonic();
        let key = lease.key();
        self.with_record(key, |path, current| {
            let now = self.inner.clock.now();
            let expires_at = Self::expiry(now, duration)?;
            let mut record = match current {
                Read::Valid(r) => *r,
                Read::Missing => {
                    return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing));
                }
                Read::Invalid { reason, .. } => return Err(corrupt(path, &reason)),
            };
            match record.owner.as_deref() {
                None => return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)),
                Some(owner)
                    if owner != lease.token().as_str()
                        || record.generation != lease.fencing_token().get() =>
                {
                    return Err(LeaseError::not_owned(
                        key.clone(),
                        NotOwnedReason::TakenOver,
                    ));
                }
                Some(_) if now >= time(record.expires_at_ns) => {
                    return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Expired));
                }
                Some(_) => {}
            }
            record.expires_at_ns = ns(expires_at);
            record.written_at_ns = ns(now);
            record.heartbeat = record.heartbeat.saturating_add(1);
            self.write(path, &record)?;
            tracing::debug!(%key, generation = record.generation, "file lease renewed");
            Ok(Lease::new(
                key.clone(),
                lease.token().clone(),
                lease.fencing_token(),
                duration,
                expires_at,
                holder_deadline(sent, duration, margin),
            ))
        })
    }

    fn release_now(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        self.with_record(key, |path, current| {
            let mut record = match current {
                Read::Valid(r) => *r,
                Read::Missing => {
                    return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing));
                }
                Read::Invalid { reason, .. } => return Err(corrupt(path, &reason)),
            };
            match record.owner.as_deref() {
                Some(owner) if owner == token.as_str() && record.generation == fencing.get() => {}
                Some(_) => {
                    return Err(LeaseError::not_owned(
                        key.clone(),
                        NotOwnedReason::TakenOver,
                    ));
                }
                None => return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)),
            }
            // Released, not deleted: the generation survives for the next acquisition.
            record.owner = None;
            record.label = None;
            record.written_at_ns = ns(self.inner.clock.now());
            self.write(path, &record)?;
            tracing::debug!(%key, generation = record.generation, "file lease released");
            Ok(())
        })
    }

    fn inspect_now(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let path = self.inner.dir.join(key_file_name(key)?);
        record_of(key, &path)
    }

    fn list_now(&self, partition: &str) -> Result<Vec<LeaseRecord>, LeaseError> {
        let entries = std::fs::read_dir(&self.inner.dir).map_err(|e| {
            backend_error(crate::fsio::io_error("read directory", &self.inner.dir, e))
        })?;
        let mut keys: Vec<LeaseKey> = entries
            .flatten()
            .filter_map(|entry| decode_file_name(entry.file_name().to_str()?))
            .filter(|key| key.partition() == partition)
            .collect();
        keys.sort();
        let mut records = Vec::with_capacity(keys.len());
        for key in keys {
            let path = self.inner.dir.join(key_file_name(&key)?);
            if let Some(record) = record_of(&key, &path)? {
                records.push(record);
            }
        }
        Ok(records)
    }
}

impl DirectoryStore {
    /// Both [`FencedValues`] operations: one read-check-replace of the name's fenced-value file
    /// inside its critical section. `value` is `Some` for a put.
    fn fenced_now(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        if let Some(value) = value {
            validate_fenced_value(value)?;
        }
        let file = fenced_file_name(name)?;
        let path = self.inner.dir.join(&file);
        let cs = self.cs_for(&path, &file);
        let guard = cs.enter(self.inner.cs_wait).map_err(backend_error)?;
        let current = match read_capped_file(&path, MAX_FENCED_FILE_BYTES, "fenced value")
            .map_err(backend_error)?
        {
            None => None,
            Some(bytes) => {
                Some(fenced::parse(&bytes.bytes).map_err(|reason| corrupt_fenced(&path, &reason))?)
            }
        };
        let fence = fencing.get();
        if current.as_ref().is_some_and(|c| c.fence > fence) {
            return Err(LeaseError::not_owned(name.clone(), NotOwnedReason::Fenced));
        }
        let (changed, stored) = match value {
            Some(value) => (true, Some(value)),
            None => (
                current.as_ref().is_none_or(|c| c.fence < fence),
                current.as_ref().and_then(|c| c.value.as_deref()),
            ),
        };
        if changed {
            // Heartbeat-only mode: if our critical section was reclaimed as stale while we were
            // paused inside it, another writer may have raised the fence since our read.
            if !guard.still_exclusive() {
                return Err(LeaseError::backend(
                    NAME,
                    true,
                    format!(
                        "critical section of {} was reclaimed while inside it; nothing written",
                        path.display()
                    ),
                ));
            }
            replace_atomically(
                &path,
                &fenced::encode(fence, stored),
                self.inner.file_mode,
                self.inner.fsync,
            )
            .map_err(backend_error)?;
            tracing::debug!(%name, fence, put = value.is_some(), "fenced value written");
        }
        drop(guard);
        Ok(match value {
            Some(_) => None,
            None => current.and_then(|c| c.value),
        })
    }
}

fn corrupt_fenced(path: &Path, reason: &str) -> LeaseError {
    LeaseError::backend(
        NAME,
        false,
        FileLockError::Hostile {
            path: path.to_owned(),
            reason: format!("corrupt fenced-value file: {reason}"),
        },
    )
}

fn record_of(key: &LeaseKey, path: &Path) -> Result<Option<LeaseRecord>, LeaseError> {
    match read(path).map_err(backend_error)? {
        Read::Missing => Ok(None),
        Read::Valid(r) => Ok(Some(LeaseRecord::new(
            key.clone(),
            r.owner.is_some().then(|| holder_of(&r)),
            FencingToken::new(r.generation),
        ))),
        Read::Invalid { reason, .. } => Err(corrupt(path, &reason)),
    }
}

fn ns(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn time(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

fn holder_of(record: &LeaseFileRecord) -> Holder {
    let mut holder = Holder::new()
        .with_owner(
            record
                .label
                .clone()
                .unwrap_or_else(|| format!("pid {} on {}", record.pid, record.host)),
        )
        .with_acquired_at(time(record.acquired_at_ns))
        .with_expires_at(time(record.expires_at_ns))
        .with_fencing(FencingToken::new(record.generation));
    if let Some(token) = record
        .owner
        .as_deref()
        .and_then(|t| LeaseToken::new(t).ok())
    {
        holder = holder.with_token(token);
    }
    holder
}

fn corrupt(path: &Path, reason: &str) -> LeaseError {
    LeaseError::backend(
        NAME,
        false,
        FileLockError::Hostile {
            path: path.to_owned(),
            reason: format!("unparseable lease record: {reason}"),
        },
    )
}

fn backend_error(error: FileLockError) -> LeaseError {
    let transient = error.is_transient();
    LeaseError::backend(NAME, transient, error)
}

impl LeaseBackend for DirectoryStore {
    fn name(&self) -> &'static str {
        NAME
    }

    fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move { self.try_acquire_now(key, duration, options) })
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        Box::pin(async move { self.renew_now(lease, duration) })
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
}

impl LeaseListing for DirectoryStore {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(async move { self.list_now(partition) })
    }
}

/// Fenced values live in the store directory, one file per name, named by
/// [`fenced_file_name`](crate::fenced_file_name) (a namespace no lease record name can reach, so
/// [`list_partition`](LeaseListing::list_partition) never returns them), in the binary format
/// documented with [`MAX_FENCED_FILE_BYTES`](crate::MAX_FENCED_FILE_BYTES): fence, value (up to
/// [`MAX_FENCED_VALUE_BYTES`](lease_core::MAX_FENCED_VALUE_BYTES)), checksum.
///
/// Each operation is one read-check-replace inside the name's critical section, the same
/// protocol as lease records (a `.lock` companion flocked in kernel mode, `O_EXCL` epochs in
/// heartbeat-only mode), so two writers can never both pass the fence check. The file is replaced
/// atomically (temporary file + `rename`), opened with `O_NOFOLLOW` and read up to
/// [`MAX_FENCED_FILE_BYTES`](crate::MAX_FENCED_FILE_BYTES); a file that is not a regular file
/// (symbolic link, directory, FIFO), oversized or corrupt is a permanent
/// [`LeaseError::Backend`] naming its path and is never overwritten.
///
/// Syscalls per operation, kernel mode: entering and leaving the critical section is an `open`
/// of the `.lock` companion, two `fstat`s, `flock`, an `lstat`, `flock(LOCK_UN)` and a `close`
/// (7); the read is an `open`, an `fstat`, two `read`s and a `close` (5, one `open` that fails
/// with `ENOENT` for a new name); the replacement is an `open(O_EXCL)` of the temporary file,
/// `fchmod`, `write`, `close` and `rename`, plus a `getrandom` and a `getpid` for the temporary
/// name (7, plus two `fsync`s and a directory `open`/`close` with
/// [`with_fsync`](DirectoryStore::with_fsync)). So 19 for [`put_fenced`](FencedValues::put_fenced)
/// and for a [`fence_and_read`](FencedValues::fence_and_read) that raises the fence (15 for a name
/// never written), and 12 for a `fence_and_read` at the current fence, which writes
/// nothing. A refused (stale) call costs the 12 and writes nothing. A value over the limit is
/// refused with [`LeaseError::InvalidInput`] before any syscall. Heartbeat-only mode replaces the
/// 7 critical-section syscalls with its epoch protocol: three directory scans, two `O_EXCL`
/// creations and the cleanup of the previous epoch, plus one `lstat` before the rename to check
/// the section was not reclaimed meanwhile (if it was, nothing is written and the error is
/// transient).
impl FencedValues for DirectoryStore {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(async move { self.fenced_now(name, fencing, None) })
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move { self.fenced_now(name, fencing, Some(value)).map(drop) })
    }
}
