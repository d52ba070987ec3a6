//! A backend wrapper that counts what it forwards, for tests and benchmarks that state a cost in
//! requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken,
};

/// A [`LeaseBackend`] that forwards every request to another and counts it, by kind, with the
/// records its reads return. It lists when the backend it wraps lists; it passes the wrapped
/// backend's fenced values through uncounted (a fleet's take lists and checkpoints travel only
/// when membership changes, never in the steady state such counts compare); it offers no change
/// notifications (callers poll, and every poll is counted).
///
/// ```
/// use lease_core::conformance::CountedBackend;
/// use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, MemoryBackend};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let store = CountedBackend::new(Arc::new(MemoryBackend::new()));
/// let key = LeaseKey::new("job")?;
/// let once = AcquireOptions::default();
/// pollster::block_on(store.try_acquire(&key, Duration::from_secs(10), &once))?;
/// pollster::block_on(store.inspect(&key))?;
/// let counts = store.counts();
/// assert_eq!((counts.requests, counts.acquires, counts.records), (2, 1, 1));
/// # Ok::<(), lease_core::LeaseError>(())
/// ```
#[derive(Debug)]
pub struct CountedBackend {
    inner: Arc<dyn LeaseBackend>,
    acquires: AtomicU64,
    renews: AtomicU64,
    releases: AtomicU64,
    deletes: AtomicU64,
    inspects: AtomicU64,
    listings: AtomicU64,
    records: AtomicU64,
}

/// A copy of a [`CountedBackend`]'s counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestCounts {
    /// Every request forwarded: the sum of the kinds below.
    pub requests: u64,
    /// `try_acquire` calls.
    pub acquires: u64,
    /// `renew` calls.
    pub renews: u64,
    /// `release` calls.
    pub releases: u64,
    /// `delete` calls.
    pub deletes: u64,
    /// `inspect` calls.
    pub inspects: u64,
    /// `list_partition` calls.
    pub listings: u64,
    /// Records the reads returned (`inspect` and `list_partition`).
    pub records: u64,
}

impl CountedBackend {
    /// Counts what is sent to `inner`, from zero.
    pub fn new(inner: Arc<dyn LeaseBackend>) -> Self {
        Self {
            inner,
            acquires: AtomicU64::new(0),
            renews: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            inspects: AtomicU64::new(0),
            listings: AtomicU64::new(0),
            records: AtomicU64::new(0),
        }
    }

    /// The counters now.
    pub fn counts(&self) -> RequestCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut counts = RequestCounts {
            requests: 0,
            acquires: load(&self.acquires),
            renews: load(&self.renews),
            releases: load(&self.releases),
            deletes: load(&self.deletes),
            inspects: load(&self.inspects),
            listings: load(&self.listings),
            records: load(&self.records),
        };
        counts.requests = counts.acquires
            + counts.renews
            + counts.releases
            + counts.deletes
            + counts.inspects
            + counts.listings;
        counts
    }

    /// Counts one request on `counter` and returns the backend to send it to.
    fn send(&self, counter: &AtomicU64) -> &dyn LeaseBackend {
        counter.fetch_add(1, Ordering::Relaxed);
        &*self.inner
    }
}

impl LeaseBackend for CountedBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        self.inner.as_listing().map(|_| self as &dyn LeaseListing)
    }

    fn as_fenced_values(&self) -> Option<&dyn crate::FencedValues> {
        self.inner.as_fenced_values()
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.send(&self.acquires)
            .try_acquire(key, duration, options)
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.send(&self.renews).renew(lease, duration)
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.send(&self.releases).release(key, token, fencing)
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        Box::pin(async move {
            let record = self.send(&self.inspects).inspect(key).await?;
            self.records
                .fetch_add(u64::from(record.is_some()), Ordering::Relaxed);
            Ok(record)
        })
    }

    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.send(&self.deletes).delete(key, holder, fencing)
    }
}

impl LeaseListing for CountedBackend {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        Box::pin(async move {
            let listing = self
                .send(&self.listings)
                .as_listing()
                .ok_or_else(|| LeaseError::unsupported(self.inner.name(), "list_partition"))?;
            let records = listing.list_partition(partition).await?;
            self.records
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            Ok(records)
        })
    }
}
