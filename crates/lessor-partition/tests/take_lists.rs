//! The assigner's take lists (issue 24) decide only what a follower looks at: a store that
//! answers every follower's list with *every* unit and a target of all of them (an assigner
//! gone wrong) still leaves every unit with at most one trusting owner at every instant, through
//! crashes and joins, and the fleet owns every unit again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOptions, BoxFuture, Clock, FencedValues, FencingToken, Lease, LeaseBackend, LeaseError,
    LeaseKey, LeaseListing, LeaseRecord, LeaseToken, ManualClock, MemoryBackend,
};
use lessor_partition::Worker;

const UNITS: usize = 48;

/// A memory store whose take lists lie: each keeps its plan digest (so followers act on it) but
/// names every unit, with a target of all of them.
#[derive(Debug)]
struct Lying {
    inner: MemoryBackend,
}

fn unit(i: usize) -> String {
    format!("u{i:02}")
}

impl LeaseBackend for Lying {
    fn name(&self) -> &'static str {
        "lying"
    }
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }
    fn as_listing(&self) -> Option<&dyn LeaseListing> {
        self.inner.as_listing()
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
    fn inspect<'a>(
        &'a self,
        key: &'a LeaseKey,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, LeaseError>> {
        self.inner.inspect(key)
    }
    fn delete<'a>(
        &'a self,
        key: &'a LeaseKey,
        holder: Option<&'a LeaseToken>,
        fencing: Option<FencingToken>,
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.delete(key, holder, fencing)
    }
}

impl FencedValues for Lying {
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(async move {
            let value = self.inner.fence_and_read(name, fencing).await?;
            if !name.partition().ends_with("/takes") {
                return Ok(value);
            }
            let Some(value) = value else {
                return Ok(None);
            };
            let text = String::from_utf8_lossy(&value);
            let head: Vec<&str> = text.lines().next().unwrap_or("").split(' ').collect();
            let mut lie = format!("{} {} {UNITS}", head[0], head[1]);
            for i in 0..UNITS {
                lie.push('\n');
                lie.push_str(&unit(i));
            }
            Ok(Some(lie.into_bytes()))
        })
    }
    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        self.inner.put_fenced(name, fencing, value)
    }
}

fn worker(store: &Arc<Lying>, id: &str) -> Worker {
    Worker::builder("lie", id)
        .with_store(store.clone())
        .with_units((0..UNITS).map(unit))
        .build()
        .expect("worker")
}

/// Every unit trusted by two running workers at once.
fn doubly_trusted(workers: &BTreeMap<String, Worker>) -> Vec<String> {
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for w in workers.values() {
        for u in w.handle().owned_units().keys() {
            *owners.entry(u.clone()).or_default() += 1;
        }
    }
    owners
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(u, _)| u)
        .collect()
}

fn owned(workers: &BTreeMap<String, Worker>) -> usize {
    workers
        .values()
        .map(|w| w.handle().owned_units().len())
        .sum()
}

#[test]
fn lying_take_lists_never_make_a_unit_trusted_twice() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(Lying {
        inner: MemoryBackend::builder().with_clock(clock.clone()).build(),
    });
    let mut workers: BTreeMap<String, Worker> = (0..4)
        .map(|i| (format!("w{i}"), worker(&store, &format!("w{i}"))))
        .collect();
    let mut next = 4;
    let mut full_ticks = 0;
    for tick in 0..80 {
        if tick % 12 == 11 {
            // A crash (dropped without a shutdown) and a replacement.
            let victim = workers.keys().nth(tick % workers.len()).cloned();
            if let Some(victim) = victim {
                workers.remove(&victim);
            }
            let id = format!("w{next}");
            next += 1;
            workers.insert(id.clone(), worker(&store, &id));
        }
        let ids: Vec<String> = workers.keys().cloned().collect();
        for id in ids {
            if let Some(w) = workers.get_mut(&id) {
                let _ = pollster::block_on(w.tick());
            }
            let twice = doubly_trusted(&workers);
            assert!(twice.is_empty(), "tick {tick}: trusted twice: {twice:?}");
        }
        full_ticks += usize::from(owned(&workers) == UNITS);
        clock.advance(Duration::from_millis(2500));
    }
    for _ in 0..12 {
        for w in workers.values_mut() {
            let _ = pollster::block_on(w.tick());
        }
        assert!(doubly_trusted(&workers).is_empty());
        clock.advance(Duration::from_millis(2500));
    }
    println!("lying take lists: fully owned at the end of {full_ticks} of 80 ticks");
    assert_eq!(owned(&workers), UNITS, "every unit owned again");
}
