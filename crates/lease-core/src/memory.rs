//! The reference in-process backend.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::backend::{
    default_safety_margin, fenced_write, holder_deadline, validate_duration, validate_fenced_value,
};
use crate::sync::lock;
use crate::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Holder, Lease, LeaseBackend,
    LeaseError, LeaseKey, LeaseListing, LeaseRecord, LeaseToken, NotOwnedReason, RandomTokens,
    SystemClock, TokenSource,
};

/// Leases in a `BTreeMap` behind a mutex: the reference implementation of the contract.
///
/// Clones share the same store, so clones act as separate clients of one store. Expiry is judged
/// by the backend's [`Clock`] at the moment of each operation. Every operation costs one mutex
/// acquisition and no I/O; listing a partition visits only that partition's keys. Used by the doc examples, the lessor's tests, and as the reference for
/// the other backends.
///
/// ```
/// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryBackend::builder().with_clock(clock.clone()).build();
/// let key = LeaseKey::new("rebuild-index")?;
/// let once = AcquireOptions::default();
///
/// let first = pollster::block_on(store.try_acquire(&key, Duration::from_secs(10), &once))?;
/// clock.advance(Duration::from_secs(11));
/// let second = pollster::block_on(store.try_acquire(&key, Duration::from_secs(10), &once))?;
/// assert!(second.fencing_token() > first.fencing_token());
/// assert!(pollster::block_on(store.renew(&first, Duration::from_secs(10))).unwrap_err().is_not_owned());
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    /// Ordered by key, so a partition's keys are one range, already in listing order.
    entries: Arc<Mutex<BTreeMap<LeaseKey, Entry>>>,
    values: Arc<Mutex<HashMap<LeaseKey, FencedEntry>>>,
    changes: crate::backend::Changes,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    safety_margin: Option<Duration>,
}

#[derive(Clone, Debug)]
struct Entry {
    holder: Option<HolderEntry>,
    fencing: u64,
}

#[derive(Clone, Debug)]
struct FencedEntry {
    fence: FencingToken,
    value: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
struct HolderEntry {
    token: LeaseToken,
    owner: Option<String>,
    acquired_at: SystemTime,
    expires_at: SystemTime,
    value: Option<String>,
}

impl HolderEntry {
    fn describe(&self, fencing: u64) -> Holder {
        let mut holder = Holder::new()
            .with_token(self.token.clone())
            .with_acquired_at(self.acquired_at)
            .with_expires_at(self.expires_at)
            .with_fencing(FencingToken::new(fencing));
        if let Some(owner) = &self.owner {
            holder = holder.with_owner(owner.clone());
        }
        if let Some(value) = &self.value {
            holder = holder.with_value(value.clone());
        }
        holder
    }
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("keys", &lock(&self.entries).len())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store on the system clock with random tokens: `builder().build()`.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder: set what differs from the defaults with its `with_*` methods, then
    /// [`build`](MemoryBackendBuilder::build). Every backend of this project is built this way.
    ///
    /// ```
    /// use lease_core::{ManualClock, MemoryBackend};
    /// use std::sync::Arc;
    ///
    /// let clock = Arc::new(ManualClock::new());
    /// let store = MemoryBackend::builder().with_clock(clock).build();
    /// # let _ = store;
    /// ```
    pub fn builder() -> MemoryBackendBuilder {
        MemoryBackendBuilder {
            clock: Arc::new(SystemClock),
            tokens: Arc::new(RandomTokens),
            safety_margin: None,
        }
    }

    fn margin(&self, duration: Duration) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| default_safety_margin(duration))
    }

    fn try_acquire_now(
        &self,
        key: &LeaseKey,
        duration: Duration,
        options: &AcquireOptions,
    ) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        crate::backend::validate_acquire_options(options)?;
        let sent = self.clock.monotonic();
        let now = self.clock.now();
        let mut entries = lock(&self.entries);
        let entry = entries.entry(key.clone()).or_insert(Entry {
            holder: None,
            fencing: 0,
        });
        if let Some(holder) = entry.holder.as_ref().filter(|h| now < h.expires_at) {
            return Err(LeaseError::held(
                key.clone(),
                Some(holder.describe(entry.fencing)),
            ));
        }
        let token = options
            .token()
            .cloned()
            .unwrap_or_else(|| self.tokens.next_token());
        if entry.holder.is_some() {
            crate::metrics::takeover(self.name());
        }
        entry.fencing += 1;
        let expires_at = now + duration;
        entry.holder = Some(HolderEntry {
            token: token.clone(),
            owner: options.owner().map(str::to_owned),
            acquired_at: now,
            expires_at,
            value: options.value().map(str::to_owned),
        });
        tracing::debug!(%key, fencing = entry.fencing, token = %token, "memory lease acquired");
        self.changes.notify();
        Ok(crate::backend::new_lease(
            key.clone(),
            token,
            FencingToken::new(entry.fencing),
            duration,
            expires_at,
            holder_deadline(sent, duration, self.margin(duration)),
        ))
    }

    fn renew_now(&self, lease: &Lease, duration: Duration) -> Result<Lease, LeaseError> {
        validate_duration(duration)?;
        let sent = self.clock.monotonic();
        let now = self.clock.now();
        let mut entries = lock(&self.entries);
        let key = lease.key();
        let Some(entry) = entries.get_mut(key) else {
            return Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing));
        };
        let same_tenure = entry.fencing == lease.fencing_token().get();
        match entry.holder.as_mut() {
            None => Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)),
            Some(h) if h.token != *lease.token() || !same_tenure => Err(LeaseError::not_owned(
                key.clone(),
                NotOwnedReason::TakenOver,
            )),
            Some(h) if now >= h.expires_at => {
                Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Expired))
            }
            Some(h) => {
                h.expires_at = now + duration;
                self.changes.notify();
                Ok(crate::backend::new_lease(
                    key.clone(),
                    lease.token().clone(),
                    lease.fencing_token(),
                    duration,
                    h.expires_at,
                    holder_deadline(sent, duration, self.margin(duration)),
                ))
            }
        }
    }

    fn release_now(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(key);
        match entry {
            Some(e)
                if e.fencing == fencing.get()
                    && e.holder.as_ref().is_some_and(|h| h.token == *token) =>
            {
                e.holder = None;
                tracing::debug!(%key, "memory lease released");
                self.changes.notify();
                Ok(())
            }
            Some(Entry {
                holder: Some(_), ..
            }) => Err(LeaseError::not_owned(
                key.clone(),
                NotOwnedReason::TakenOver,
            )),
            _ => Err(LeaseError::not_owned(key.clone(), NotOwnedReason::Missing)),
        }
    }

    /// The compare-and-delete, under the mutex: the entry goes iff it is in the named state.
    fn delete_now(
        &self,
        key: &LeaseKey,
        holder: Option<&LeaseToken>,
        fencing: FencingToken,
    ) -> Result<(), LeaseError> {
        let mut entries = lock(&self.entries);
        let refused = match entries.get(key) {
            None => Some(NotOwnedReason::Missing),
            Some(entry) => delete_refusal(entry, holder, fencing),
        };
        if let Some(reason) = refused {
            return Err(LeaseError::not_owned(key.clone(), reason));
        }
        entries.remove(key);
        self.changes.notify();
        tracing::debug!(%key, fencing = fencing.get(), held = holder.is_some(), "memory lease record deleted");
        Ok(())
    }

    fn inspect_now(&self, key: &LeaseKey) -> Option<LeaseRecord> {
        lock(&self.entries).get(key).map(|entry| entry.record(key))
    }
}

impl Entry {
    /// The record of this entry at `key`.
    fn record(&self, key: &LeaseKey) -> LeaseRecord {
        LeaseRecord::new(
            key.clone(),
            self.holder.as_ref().map(|h| h.describe(self.fencing)),
            FencingToken::new(self.fencing),
        )
    }
}

/// Why `entry` is not in the state `(holder, fencing)` a delete names, or `None` if it is. An
/// expired holder still holds the entry, as for release.
fn delete_refusal(
    entry: &Entry,
    holder: Option<&LeaseToken>,
    fencing: FencingToken,
) -> Option<NotOwnedReason> {
    let same_fencing = entry.fencing == fencing.get();
    match (&entry.holder, holder) {
        (Some(h), Some(token)) if h.token == *token && same_fencing => None,
        (None, None) if same_fencing => None,
        (None, Some(_)) => Some(NotOwnedReason::Missing),
        _ => Some(NotOwnedReason::TakenOver),
    }
}

/// Builds a [`MemoryBackend`]; from [`MemoryBackend::builder`].
#[must_use = "a builder does nothing until built"]
pub struct MemoryBackendBuilder {
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    safety_margin: Option<Duration>,
}

impl fmt::Debug for MemoryBackendBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBackendBuilder")
            .field("clock", &self.clock)
            .field("safety_margin", &self.safety_margin)
            .finish_non_exhaustive()
    }
}

impl MemoryBackendBuilder {
    /// Uses `clock` for expiry and deadlines.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses `tokens` to make owner tokens.
    pub fn with_token_source(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Overrides [`default_safety_margin`](crate::backend::default_safety_margin).
    pub fn with_safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// The empty store. Nothing can fail: the builder has nothing to check.
    pub fn build(self) -> MemoryBackend {
        MemoryBackend {
            entries: Arc::default(),
            values: Arc::default(),
            changes: crate::backend::Changes::new(),
            clock: self.clock,
            tokens: self.tokens,
            safety_margin: self.safety_margin,
        }
    }
}

impl LeaseBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }

    fn as_fenced_values(&self) -> Option<&dyn FencedValues> {
        Some(self)
    }

    /// Every write of the store wakes every watch (one counter for the whole store: a write to
    /// another key wakes it too, harmlessly).
    fn watch_record(&self, key: &LeaseKey) -> Option<Box<dyn crate::RecordWatch>> {
        let _ = key;
        Some(self.changes.watch())
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        let result = self.try_acquire_now(key, duration, options);
        crate::metrics::acquisition(self.name(), &result);
        Box::pin(std::future::ready(result))
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        let sent = crate::metrics::started(&*self.clock);
        let result = self.renew_now(lease, duration);
        crate::metrics::renewal(self.name(), &*self.clock, lease, sent, &result);
        Box::pin(std::future::ready(result))
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(std::future::ready(self.release_now(key, token, fencing)))
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(std::future::ready(Ok(self.inspect_now(key))))
    }

    /// One mutex acquisition: the entry is removed iff it is in the named state. Fenced values
    /// are kept apart and stay.
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        // Every record here carries a counter: naming none names no record.
        let fencing = fencing.unwrap_or(FencingToken::NONE);
        Box::pin(std::future::ready(self.delete_now(key, holder, fencing)))
    }
}

impl LeaseListing for MemoryBackend {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        let entries = lock(&self.entries);
        // Keys order by partition first, so the partition's keys follow its bare key (the
        // least key with that partition), in key order.
        let records = match LeaseKey::new(partition) {
            Ok(first) => entries
                .range(first..)
                .take_while(|(k, _)| k.partition() == partition)
                .map(|(k, entry)| entry.record(k))
                .collect(),
            Err(_) => entries
                .iter()
                .filter(|(k, _)| k.partition() == partition)
                .map(|(k, entry)| entry.record(k))
                .collect(),
        };
        Box::pin(std::future::ready(Ok(records)))
    }
}

impl MemoryBackend {
    fn write_fenced(
        &self,
        name: &LeaseKey,
        fencing: FencingToken,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        if let Some(value) = value {
            validate_fenced_value(value)?;
        }
        let mut values = lock(&self.values);
        let entry = values.entry(name.clone()).or_insert(FencedEntry {
            fence: fencing,
            value: None,
        });
        fenced_write(entry.fence, fencing)
            .map_err(|reason| LeaseError::not_owned(name.clone(), reason))?;
        entry.fence = fencing;
        if let Some(value) = value {
            entry.value = Some(value.to_vec());
        }
        Ok(entry.value.clone())
    }
}

impl FencedValues for MemoryBackend {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(std::future::ready(self.write_fenced(name, fencing, None)))
    }

    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(std::future::ready(
            self.write_fenced(name, fencing, Some(value)).map(drop),
        ))
    }
}
