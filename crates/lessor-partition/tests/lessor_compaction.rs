//! The LUCI lessor's section listing: one listing per uncontended call, and with compaction a
//! record count bounded by what is leased now, not by every range ever leased.

use std::sync::Arc;
use std::time::Duration;

use lease_core::conformance::CountedBackend;
use lease_core::{LeaseListing as _, MemoryBackend};
use lessor_partition::{Grant, Lessor, Partition, PartitionSet, StoreLessor};
use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};

/// 300 calls on random sub-ranges of a 64-key space, one at a time: returns the section's
/// record count after them and the listings per call.
fn three_hundred_calls(compact: bool) -> (usize, f64) {
    // A memory store (clones share its records) whose listings are counted.
    let memory = MemoryBackend::new();
    let store = Arc::new(CountedBackend::new(Arc::new(memory.clone())));
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
        pollster::block_on(lessor.with_lease(
            "sweep",
            range,
            Duration::from_secs(60),
            Box::new(move |g: Grant| {
                Box::pin(async move {
                    assert_eq!(g.partitions(), &PartitionSet::from(range));
                })
            }),
        ))
        .expect("with_lease");
    }
    let records = pollster::block_on(memory.list_partition("lessor/sweep"))
        .expect("list")
        .len();
    let lists = store.counts().listings as f64 / f64::from(calls);
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
