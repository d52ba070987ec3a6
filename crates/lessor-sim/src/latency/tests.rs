//! The simulator's own parts, tested alone: a request's timing, throttling, the checker.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use lease_core::{
    AcquireOptions, Clock, Lease, LeaseBackend, LeaseError, LeaseKey, ManualClock, MemoryBackend,
};

use super::check::Tracker;
use super::link::{Latency, LatencyStore, new_link};
use super::task::Task;
use super::{LatencySim, Violation, WorkerSpec};
use lessor_partition::Worker;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn acquire_later(
    latency: Latency,
) -> (
    Arc<ManualClock>,
    MemoryBackend,
    Task<Result<Lease, LeaseError>>,
) {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let slow = LatencyStore::new(store.clone(), new_link(latency, 1));
    let task = Task::new(async move {
        let key = LeaseKey::new("k")?;
        slow.try_acquire(&key, Duration::from_secs(10), &AcquireOptions::default())
            .await
    });
    (clock, store, task)
}

fn held(store: &MemoryBackend) -> bool {
    let Ok(key) = LeaseKey::new("k") else {
        return false;
    };
    pollster::block_on(store.inspect(&key))
        .ok()
        .flatten()
        .is_some_and(|r| r.holder().is_some())
}

#[test]
fn a_request_lands_halfway_and_its_deadline_counts_from_the_send() {
    let (clock, store, mut task) = acquire_later(Latency::fixed(ms(20)));
    let sent = clock.monotonic();
    assert!(task.poll().is_pending());
    clock.advance(ms(9));
    assert!(!task.is_ready() && !held(&store), "still on its way");
    clock.advance(ms(1));
    assert!(task.poll().is_pending(), "waiting for the reply");
    assert!(held(&store), "took effect halfway");
    clock.advance(ms(10));
    let Poll::Ready(Ok(lease)) = task.poll() else {
        panic!("the reply arrives after the whole latency");
    };
    // 10 s minus the default margin of 1 s, from the send, not from the store's write.
    assert_eq!(lease.deadline(), sent + Duration::from_secs(9));
}

/// Every operation of the contract goes through, each taking its latency (the optional ones
/// too: a wrapper that forgot one would answer `Unsupported` and change the protocol's path).
#[test]
fn every_operation_reaches_the_store_and_takes_its_latency() -> Result<(), LeaseError> {
    use lease_core::LeaseListing;
    use pollster::block_on;
    let clock = Arc::new(ManualClock::new());
    clock.set_auto_advance(true);
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let slow = LatencyStore::new(store, new_link(Latency::fixed(ms(20)), 1));
    let key = LeaseKey::with_sort_key("p", "k")?;
    let ten = Duration::from_secs(10);
    let options = AcquireOptions::default();
    let lease = block_on(slow.try_acquire(&key, ten, &options))?;
    let lease = block_on(slow.renew(&lease, ten))?;
    assert_eq!(block_on(slow.list_partition("p"))?.len(), 1);
    block_on(slow.release(lease.key(), lease.token(), lease.fencing_token()))?;
    let lease = block_on(slow.try_acquire(&key, ten, &options))?;
    let token = lease.token();
    block_on(slow.delete(&key, Some(token), Some(lease.fencing_token())))?;
    assert_eq!(block_on(slow.inspect(&key))?, None);
    assert_eq!(clock.elapsed(), ms(7 * 20));
    Ok(())
}

#[test]
fn a_throttled_request_fails_transiently_without_reaching_the_store() {
    let (clock, store, mut task) = acquire_later(Latency::fixed(ms(20)).with_throttling(1.0));
    assert!(task.poll().is_pending());
    clock.advance(ms(10));
    assert!(task.poll().is_pending());
    clock.advance(ms(10));
    let Poll::Ready(Err(error)) = task.poll() else {
        panic!("a throttled request fails after its latency");
    };
    assert!(error.is_transient(), "{error}");
    assert!(!held(&store));
}

/// Two workers that cannot see each other (each on its own store) both trust unit `u`: the
/// checker reports one episode, from when the second trusted it until both deadlines passed.
#[test]
fn the_checker_sees_two_trusting_owners_and_when_it_ends() {
    let clock = Arc::new(ManualClock::new());
    let units = vec!["u".to_owned()];
    let mut tracker = Tracker::new(&units);
    let mut workers: Vec<Worker> = ["a", "b"]
        .into_iter()
        .map(|id| {
            // Each on its own store: they cannot see each other.
            let store = MemoryBackend::builder().with_clock(clock.clone()).build();
            Worker::builder("f", id)
                .with_store(Arc::new(store))
                .with_units(units.clone())
                .build()
                .expect("a worker")
        })
        .collect();
    for _ in 0..3 {
        for worker in &mut workers {
            pollster::block_on(worker.tick()).expect("a tick");
        }
        clock.advance(ms(2500));
    }
    let handles: Vec<_> = workers.iter().map(Worker::handle).collect();
    for (i, covering) in [(0, true), (1, true)] {
        tracker.hold(i, "u", covering);
    }
    let named: Vec<_> = handles
        .iter()
        .map(|h| Some((h.snapshot().worker_id, h)))
        .collect();
    let as_refs: Vec<_> = named
        .iter()
        .map(|n| n.as_ref().map(|(id, h)| (id.as_str(), *h)))
        .collect();
    let since = clock.elapsed();
    tracker.check(since, clock.monotonic(), &as_refs);
    tracker.elapse(Duration::from_secs(1));
    clock.advance(Duration::from_secs(20));
    tracker.check(clock.elapsed(), clock.monotonic(), &as_refs);
    let [
        Violation::DoubleTrust {
            unit,
            since,
            until,
            owners,
        },
    ] = &tracker.violations[..]
    else {
        panic!("one episode: {:?}", tracker.violations);
    };
    assert_eq!(unit, "u");
    assert_eq!((*since, *until), (ms(7500), Some(ms(27_500))));
    let who: Vec<&str> = owners.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(who, ["a", "b"]);
    assert_eq!(tracker.metrics.double_trust_time, Duration::from_secs(1));
    assert_eq!(tracker.unowned, 0);
}

/// A paused worker is not polled, keeps its trust until its deadline, and resumes mid-tick;
/// the survivor takes its units once it is judged dead; a crashed worker's handle no longer
/// counts.
#[test]
fn pauses_and_crashes_move_units_and_count_as_disruptions() {
    let mut sim = LatencySim::new(8, 3).with_latency(Latency::uniform(ms(1), ms(5)));
    for _ in 0..2 {
        sim.add_worker(WorkerSpec::new()).expect("a worker");
    }
    assert!(sim.run_until_all_owned(Duration::from_secs(30)).is_some());
    let before = sim.owned_by(0);
    sim.pause(0, Duration::from_secs(30));
    assert!(!sim.is_running(0) && sim.unowned() == before);
    assert_eq!(sim.owned_by(0), before, "a paused worker keeps trusting");
    let took = sim.run_until_all_owned(Duration::from_secs(30));
    assert!(took.is_some_and(|t| t > Duration::from_secs(9)), "{took:?}");
    assert_eq!(sim.owned_by(0), 0, "its deadline passed");
    sim.crash(1);
    assert!(sim.handle(1).is_none());
    assert_eq!(sim.unowned(), 8);
    sim.run_for(Duration::from_secs(60));
    assert_eq!(
        sim.owned_by(0),
        8,
        "the paused worker resumed and took everything"
    );
    let faults: Vec<_> = sim.disruptions().iter().map(|d| d.fault.as_str()).collect();
    assert_eq!(faults, ["pause worker 0 for 30s", "crash worker 1"]);
    assert!(
        sim.disruptions()
            .iter()
            .all(|d| d.all_owned_after.is_some())
    );
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}
