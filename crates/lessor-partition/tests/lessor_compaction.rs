//! The LUCI lessor's section listing: one listing per uncontended call, and with compaction a
//! record count bounded by what is leased now, not by every range ever leased.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencingToken, Lease, LeaseBackend, LeaseError, LeaseKey,
    LeaseListing, LeaseRecord, LeaseToken, MemoryBackend,
};
use lessor_partition::{Grant, Lessor, Partition, StoreLessor};
use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};

/// A memory store that counts its listings.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryBackend,
    lists: AtomicU64,
}

impl LeaseBackend for Counting {
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
        self.inner.try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a Lease,
        duration: Duration,
    ) -> BoxFuture<'a, Result<Lease, LeaseError>> {
        self.inner.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a LeaseKey,
        token: &'a LeaseToken,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.release(key, token, fencing)
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.delete(key, holder, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.inner.inspect(key)
    }
}

impl LeaseListing for Counting {
    fn list_partition<'a>(
        &'a self,
        partition: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseRecord>, LeaseError>> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        self.inner.list_partition(partition)
    }
}

/// 300 calls on random sub-ranges of a 64-key space, one at a time: returns the section's
/// record count after them and the listings per call.
fn three_hundred_calls(compact: bool) -> (usize, f64) {
    let store = Arc::new(Counting::default());
    let mut lessor = StoreLessor::new(store.clone()).expect("a store that lists");
    if compact {
        lessor = lessor.with_compaction();
    }
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let calls = 300;
    for _ in 0..calls {
        let a = u128::from(rng.next_u64() % 64);
        let b = u128::from(rng.next_u64() % 64);
        let range = Partition::new(a.min(b), a.max(b) + 1).expect("non-empty");
        lease_core::executor::block_on(lessor.with_lease(
            "sweep",
            range,
            Duration::from_secs(60),
            Box::new(move |g: Grant| {
                Box::pin(async move {
                    assert_eq!(g.partitions().as_slice(), &[range]);
                })
            }),
        ))
        .expect("with_lease");
    }
    let records = lease_core::executor::block_on(store.inner.list_partition("lessor/sweep"))
        .expect("list")
        .len();
    let lists = store.lists.load(Ordering::Relaxed) as f64 / f64::from(calls);
    (records, lists)
}

#[test]
fn an_uncontended_call_lists_once_and_compaction_bounds_the_section() {
    let (kept, lists) = three_hundred_calls(false);
    let (compacted, compacted_lists) = three_hundred_calls(true);
    eprintln!(
        "300 calls on random sub-ranges: {kept} records without compaction, {compacted} with; \
         {lists} listings per call ({compacted_lists} with compaction)"
    );
    // Before: two listings per call (list, acquire, list again).
    assert!(lists <= 1.0, "{lists} listings per call");
    assert!(compacted_lists <= 1.0);
    // Every range released and its record deleted: nothing is leased now.
    assert_eq!(compacted, 0);
}
