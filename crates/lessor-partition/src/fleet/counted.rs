//! The worker's store, counting every request it sends: no request can go uncounted, whoever
//! adds it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken,
};

use crate::lessor::listing_of;

/// A lease store (that can list, checked when the worker is built) whose every request adds one
/// to a counter. Checkpoint requests are not sent through it: they are counted apart.
pub(crate) struct CountedStore {
    inner: Arc<dyn LeaseBackend>,
    requests: AtomicU64,
}

impl fmt::Debug for CountedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountedStore")
            .field("store", &self.inner.name())
            .field("requests", &self.requests())
            .finish()
    }
}

impl CountedStore {
    pub(crate) fn new(inner: Arc<dyn LeaseBackend>) -> Self {
        Self {
            inner,
            requests: AtomicU64::new(0),
        }
    }

    /// Requests sent so far.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The store's fenced values, counting one request (the caller sends one): `None` when the
    /// store keeps none.
    pub(crate) fn fenced(&self) -> Option<&dyn lease_core::FencedValues> {
        self.send().as_fenced_values()
    }

    /// Counts one request and returns the store to send it to.
    fn send(&self) -> &dyn LeaseBackend {
        self.requests.fetch_add(1, Ordering::Relaxed);
        &*self.inner
    }
}

impl LeaseBackend for CountedStore {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }

    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        Some(self)
    }

    fn try_acquire<'a>(
        &'a self,
        key: &'a LeaseKey,
        duration: Duration,
        options: &'a AcquireOptions,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.send().try_acquire(key, duration, options)
    }

    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.send().renew(lease, duration)
    }

    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.send().release(key, token, fencing)
    }

    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.send().inspect(key)
    }

    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.send().delete(key, holder, fencing)
    }
}

impl LeaseListing for CountedStore {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        match listing_of(self.send(), "list_partition") {
            Ok(listing) => listing.list_partition(partition),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }
}
