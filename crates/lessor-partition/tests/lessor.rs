//! The LUCI-style lessor: grants only the unleased part, ends with the callback, keeps sections
//! apart, and never grants one key to two concurrent callers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{LeaseBackend, LossReason, ManualClock, MemoryBackend};
use lessor_partition::{Grant, Lessor, Partition, PartitionSet, StoreLessor};
use proptest::prelude::Rng as _;
use proptest::test_runner::{RngAlgorithm, TestRng};

const MINUTE: Duration = Duration::from_secs(60);

fn p(text: &str) -> Partition {
    text.parse().expect("partition")
}

fn set(text: &str) -> PartitionSet {
    text.parse().expect("partition set")
}

/// Runs `with_lease` and returns what was granted.
fn grant(lessor: &StoreLessor, section: &str, range: Partition) -> PartitionSet {
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    pollster::block_on(lessor.with_lease(
        section,
        range,
        MINUTE,
        Box::new(move |g: Grant| {
            Box::pin(async move {
                *out.lock().expect("lock") = Some(g.partitions().clone());
            })
        }),
    ))
    .expect("with_lease");
    let granted = seen.lock().expect("lock").take();
    granted.expect("callback ran")
}

#[test]
fn grants_only_the_unleased_part_and_releases_after_the_callback() {
    let lessor = StoreLessor::new(Arc::new(MemoryBackend::new())).expect("a store that lists");
    let inner = Arc::new(Mutex::new(None));
    let inner2 = inner.clone();
    let lessor2 = lessor.clone();
    pollster::block_on(lessor.with_lease(
        "tq",
        p("10_20"),
        MINUTE,
        Box::new(move |outer| {
            Box::pin(async move {
                assert_eq!(outer.partitions(), &set("10_20"));
                assert_eq!(outer.leases().len(), 1);
                // While [10, 20) is held, a wider request gets only the rest...
                let rest = grant(&lessor2, "tq", p("0_30"));
                // ...and another section is not affected at all.
                let other = grant(&lessor2, "other-section", p("0_30"));
                // A request inside the held range gets nothing, but its callback still runs.
                let none = grant(&lessor2, "tq", p("12_18"));
                *inner2.lock().expect("lock") = Some((rest, other, none));
            })
        }),
    ))
    .expect("outer lease");
    let (rest, other, none) = inner.lock().expect("lock").take().expect("ran");
    assert_eq!(rest, set("0_10,20_30"));
    assert_eq!(other, set("0_30"));
    assert!(none.is_empty());
    // Everything was released when the callbacks returned.
    assert_eq!(
        grant(&lessor, "tq", Partition::universe()),
        PartitionSet::from(Partition::universe())
    );
}

#[test]
fn the_deadline_falls_before_expiry_and_drops_a_late_callback() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let lessor = StoreLessor::new(Arc::new(store)).expect("a store that lists");
    let start = lease_core::Clock::monotonic(&*clock);
    clock.set_auto_advance(true);
    let result = pollster::block_on(lessor.with_lease(
        "slow",
        p("0_100"),
        MINUTE,
        Box::new(move |g| {
            Box::pin(async move {
                assert!(g.deadline() < start + MINUTE);
                assert!(g.deadline() > start);
                std::future::pending::<()>().await;
            })
        }),
    ));
    let error = result.expect_err("the callback outlived its deadline");
    assert!(
        matches!(
            &error,
            lease_core::LeaseError::Lost {
                reason: LossReason::DeadlinePassed,
                ..
            }
        ),
        "{error:?}"
    );
    clock.set_auto_advance(false);
    // The lease was released anyway.
    assert_eq!(grant(&lessor, "slow", p("0_100")), set("0_100"));
}

/// A memory store that keeps no fenced values, and lists only when `lists`.
#[derive(Debug)]
struct Limited {
    inner: MemoryBackend,
    lists: bool,
}

impl LeaseBackend for Limited {
    fn name(&self) -> &'static str {
        "limited"
    }
    fn as_listing(&self) -> Option<&dyn lease_core::LeaseListing> {
        if self.lists {
            self.inner.as_listing()
        } else {
            None
        }
    }
    fn clock(&self) -> &dyn lease_core::Clock {
        self.inner.clock()
    }
    fn try_acquire<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
        duration: Duration,
        options: &'a lease_core::AcquireOptions,
    ) -> lease_core::BoxFuture<'a, Result<lease_core::Lease, lease_core::LeaseError>> {
        self.inner.try_acquire(key, duration, options)
    }
    fn renew<'a>(
        &'a self,
        lease: &'a lease_core::Lease,
        duration: Duration,
    ) -> lease_core::BoxFuture<'a, Result<lease_core::Lease, lease_core::LeaseError>> {
        self.inner.renew(lease, duration)
    }
    fn release<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
        token: &'a lease_core::LeaseToken,
        fencing: lease_core::FencingToken,
    ) -> lease_core::BoxFuture<'a, Result<(), lease_core::LeaseError>> {
        self.inner.release(key, token, fencing)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a lease_core::LeaseKey,
    ) -> lease_core::BoxFuture<'a, Result<Option<lease_core::LeaseRecord>, lease_core::LeaseError>>
    {
        self.inner.inspect(key)
    }
}

/// The lessor and the fleet need a store that lists, and checkpoints need fenced values: a store
/// without them is refused when the lessor or the worker is made, naming what is missing.
#[test]
fn a_store_without_what_is_needed_is_refused_when_built() {
    let unsupported = |error: lease_core::LeaseError, operation: &str| {
        assert!(
            matches!(&error, lease_core::LeaseError::Unsupported { operation: o, .. } if *o == operation),
            "{error:?}"
        );
    };
    let mute = Arc::new(Limited {
        inner: MemoryBackend::new(),
        lists: false,
    });
    unsupported(
        StoreLessor::new(mute.clone()).expect_err("cannot list"),
        "list_partition",
    );
    let worker = |store: Arc<Limited>| {
        lessor_partition::Worker::builder("f", "w")
            .with_store(store)
            .with_units(["u"])
    };
    unsupported(
        worker(mute).build().expect_err("cannot list"),
        "list_partition",
    );
    let lists = Arc::new(Limited {
        inner: MemoryBackend::new(),
        lists: true,
    });
    assert!(worker(lists.clone()).build().is_ok(), "listing is enough");
    unsupported(
        worker(lists)
            .with_checkpoints()
            .build()
            .expect_err("no fenced values"),
        "fenced checkpoints",
    );
}

#[test]
fn rejects_bad_input_before_writing() {
    let lessor = StoreLessor::new(Arc::new(MemoryBackend::new())).expect("a store that lists");
    let bad = pollster::block_on(lessor.with_lease(
        "s",
        p("0_1"),
        Duration::ZERO,
        Box::new(|_| Box::pin(async {})),
    ));
    assert!(matches!(bad, Err(ref e) if e.is_invalid_input()), "{bad:?}");
    let bad = pollster::block_on(lessor.with_lease(
        "new\nline",
        p("0_1"),
        MINUTE,
        Box::new(|_| Box::pin(async {})),
    ));
    assert!(bad.is_err());
}

/// Threads request random overlapping ranges of a 64-key space at once; inside each callback the
/// granted keys are marked in a shared table, which must never already be marked.
#[test]
fn concurrent_overlapping_requests_never_share_a_key() {
    let store = Arc::new(MemoryBackend::new());
    let table = Arc::new(Mutex::new([false; 64]));
    let granted_keys = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let lessor = StoreLessor::new(store.clone()).expect("a store that lists");
            let table = table.clone();
            let granted_keys = granted_keys.clone();
            std::thread::spawn(move || {
                let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[t as u8; 32]);
                for _ in 0..150 {
                    let a = u128::from(rng.next_u64() % 64);
                    let b = u128::from(rng.next_u64() % 64);
                    let range = Partition::new(a.min(b), a.max(b) + 1).expect("non-empty");
                    let table = table.clone();
                    let granted_keys = granted_keys.clone();
                    pollster::block_on(lessor.with_lease(
                        "race",
                        range,
                        MINUTE,
                        Box::new(move |g| {
                            Box::pin(async move {
                                let keys: Vec<usize> = (0..64u128)
                                    .filter(|k| g.partitions().contains(*k))
                                    .map(|k| k as usize)
                                    .collect();
                                {
                                    let mut t = table.lock().expect("lock");
                                    for k in &keys {
                                        assert!(!t[*k], "key {k} granted twice");
                                        t[*k] = true;
                                    }
                                }
                                granted_keys.fetch_add(keys.len() as u64, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_micros(200));
                                let mut t = table.lock().expect("lock");
                                for k in &keys {
                                    t[*k] = false;
                                }
                            })
                        }),
                    ))
                    .expect("with_lease");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no double grant");
    }
    assert!(granted_keys.load(Ordering::Relaxed) > 0);
}
