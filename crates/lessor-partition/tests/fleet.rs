//! The fleet worker driven directly: fencing across owner changes, fenced checkpoints, the
//! background loop on the system clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::{
    FencedValues, FencingToken, LeaseKey, LossReason, ManualClock, MemoryBackend, NotOwnedReason,
};
use lessor_partition::{FleetEvent, Worker, WorkerHandle};

/// Every event of the watched workers, read from their handles' queues.
#[derive(Default)]
struct Events {
    handles: Vec<(String, WorkerHandle)>,
    seen: Vec<(String, FleetEvent)>,
}

type Log = Arc<Mutex<Events>>;

fn watch(log: &Log, worker: &Worker) {
    let mut log = log.lock().expect("log");
    log.handles.push((worker.id().to_owned(), worker.handle()));
}

/// Every event so far, in the order each worker queued them.
fn events(log: &Log) -> Vec<(String, FleetEvent)> {
    let mut log = log.lock().expect("log");
    let Events { handles, seen } = &mut *log;
    for (id, handle) in handles.iter() {
        while let Some(event) = handle.try_next_event() {
            seen.push((id.clone(), event));
        }
    }
    seen.clone()
}

fn worker(store: &MemoryBackend, id: &str, units: usize, log: &Log) -> Worker {
    let worker = Worker::builder("t", id)
        .with_store(Arc::new(store.clone()))
        .with_units((0..units).map(|u| format!("u{u:02}")))
        .build()
        .expect("worker");
    watch(log, &worker);
    worker
}

fn tick_all(workers: &mut [&mut Worker], clock: &ManualClock, rounds: usize) {
    for _ in 0..rounds {
        for w in workers.iter_mut() {
            lease_core::executor::block_on(w.tick()).expect("tick");
        }
        clock.advance(Duration::from_millis(2500));
    }
}

#[test]
fn every_change_of_owner_raises_the_units_fencing_token() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let log: Log = Arc::default();
    let (mut a, mut b, mut c) = (
        worker(&store, "a", 12, &log),
        worker(&store, "b", 12, &log),
        worker(&store, "c", 12, &log),
    );
    tick_all(&mut [&mut a], &clock, 3);
    assert_eq!(a.owned_units().len(), 12);
    tick_all(&mut [&mut a, &mut b], &clock, 4);
    assert_eq!(b.owned_units().len(), 6);
    // c joins, then a crashes (stops ticking), then b shuts down cleanly.
    tick_all(&mut [&mut a, &mut b, &mut c], &clock, 4);
    tick_all(&mut [&mut b, &mut c], &clock, 8);
    assert_eq!(
        a.owned_units().len(),
        0,
        "a crashed worker stops trusting once its session ends"
    );
    assert_eq!(b.owned_units().len() + c.owned_units().len(), 12);
    lease_core::executor::block_on(b.shutdown()).expect("shutdown");
    tick_all(&mut [&mut c], &clock, 2);
    assert_eq!(c.owned_units().len(), 12);

    let mut last: BTreeMap<String, FencingToken> = BTreeMap::new();
    let mut gains = 0;
    for (who, event) in events(&log).iter() {
        if let FleetEvent::Gained { unit, fencing, .. } = event {
            gains += 1;
            if let Some(before) = last.get(unit) {
                assert!(
                    fencing > before,
                    "{who} gained {unit} with {fencing} after {before}"
                );
            }
            last.insert(unit.clone(), *fencing);
        }
    }
    assert!(gains > 12 + 6, "owners changed: {gains} gains");
    assert!(events(&log).iter().any(|(_, e)| matches!(
        e,
        FleetEvent::Lost {
            reason: LossReason::Shutdown,
            ..
        }
    )));
}

#[test]
fn only_the_current_owner_can_write_a_checkpoint() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    // A fenced-value store apart from the lease store.
    let values = Arc::new(MemoryBackend::new());
    checkpoints_follow_the_owner(&clock, &store, Some(values));
}

#[test]
fn checkpoints_kept_in_the_lease_store_follow_the_owner() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    checkpoints_follow_the_owner(&clock, &store, None);
}

/// `separate`: a fenced-value store apart from the lease store; `None`: the lease store's own.
fn checkpoints_follow_the_owner(
    clock: &ManualClock,
    store: &MemoryBackend,
    separate: Option<Arc<MemoryBackend>>,
) {
    let log: Log = Arc::default();
    let make = |id: &str| {
        let builder = Worker::builder("cp", id)
            .with_store(Arc::new(store.clone()))
            .with_units(["only"]);
        let builder = match &separate {
            Some(values) => builder.with_checkpoint_store(values.clone()),
            None => builder.with_checkpoints(),
        };
        let worker = builder.build().expect("worker");
        watch(&log, &worker);
        worker
    };
    let (mut a, mut b) = (make("a"), make("b"));
    tick_all(&mut [&mut a, &mut b], clock, 3);
    let (owner, other) = if a.owns("only").is_some() {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let old_fencing = owner.owns("only").expect("owned");
    lease_core::executor::block_on(owner.save_checkpoint("only", b"offset=41"))
        .expect("owner saves");
    let err = lease_core::executor::block_on(other.save_checkpoint("only", b"nope"))
        .expect_err("not owner");
    assert!(err.is_not_owned(), "{err:?}");
    assert_eq!(
        err.key().and_then(LeaseKey::sort),
        Some("only"),
        "names the unit"
    );

    // The owner pauses past its session; the other takes over and receives the checkpoint.
    tick_all(&mut [other], clock, 8);
    let new_fencing = other.owns("only").expect("taken over");
    assert!(new_fencing > old_fencing);
    let handed = events(&log).iter().rev().find_map(|(who, e)| match e {
        FleetEvent::Gained { checkpoint, .. } if who == other.id() => Some(checkpoint.clone()),
        _ => None,
    });
    assert_eq!(handed, Some(Some(b"offset=41".to_vec())));
    // The paused owner no longer trusts the unit; even bypassing the worker, its token is fenced.
    assert!(owner.owns("only").is_none());
    let values: &dyn FencedValues = match &separate {
        Some(values) => &**values,
        None => store,
    };
    let name = LeaseKey::with_sort_key("fleet/cp/checkpoints", "only").expect("name");
    let late = lease_core::executor::block_on(values.put_fenced(&name, old_fencing, b"late"))
        .expect_err("fenced out");
    assert!(late.is_not_owned(), "{late:?}");
    assert_eq!(late.not_owned_reason(), Some(NotOwnedReason::Fenced));
}

#[test]
fn run_loops_on_the_system_clock_and_hands_over_on_stop() {
    fn assert_send<T: Send>(_: &T) {}
    let store = MemoryBackend::new();
    let make = |id: &str| {
        Worker::builder("live", id)
            .with_store(Arc::new(store.clone()))
            .with_units((0..9).map(|u| format!("u{u}")))
            .with_session_duration(Duration::from_millis(600))
            .with_interval(Duration::from_millis(100))
            .build()
            .expect("worker")
    };
    let probe = make("probe");
    assert_send(&probe.run());
    let running: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|id| make(id).spawn_thread().expect("thread"))
        .collect();
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let count = |i: usize| running[i].0.snapshot().units.len();
    wait("balance", &|| (0..3).all(|i| count(i) == 3));
    running[0].0.stop();
    wait("handover", &|| {
        count(1) + count(2) == 9 && count(1).abs_diff(count(2)) <= 1
    });
    for (handle, thread) in running {
        handle.stop();
        let stats = thread.join().expect("thread").expect("clean stop");
        assert!(stats.ticks > 0);
    }
}

fn dynamic(store: &MemoryBackend, id: &str) -> Worker {
    Worker::builder("dyn", id)
        .with_store(Arc::new(store.clone()))
        .build()
        .expect("worker")
}

fn owned_total(workers: &[&Worker]) -> (usize, Vec<usize>) {
    let counts: Vec<usize> = workers.iter().map(|w| w.owned_units().len()).collect();
    let mut all: Vec<String> = workers
        .iter()
        .flat_map(|w| w.owned_units().into_keys())
        .collect();
    all.sort();
    all.dedup();
    (all.len(), counts)
}

/// Units added at run time reach every worker through the unit-set epoch, and a retired unit's
/// record is deleted, taken by nobody, and its share rebalanced.
#[test]
fn units_added_and_retired_at_run_time_are_planned_by_every_worker() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let (mut a, mut b) = (dynamic(&store, "a"), dynamic(&store, "b"));
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert_eq!(owned_total(&[&a, &b]).0, 0, "no units yet");

    let added =
        lease_core::executor::block_on(a.handle().add_units((0..6).map(|u| format!("s{u}"))))
            .expect("add");
    assert_eq!(added, 6);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert_eq!(owned_total(&[&a, &b]), (6, vec![3, 3]));
    // Adding what exists adds nothing.
    let again = lease_core::executor::block_on(b.handle().add_units(["s0", "s9"])).expect("add");
    assert_eq!(again, 1);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert_eq!(owned_total(&[&a, &b]).0, 7);

    // The owner of s0 retires it: its record is deleted and nobody takes it again.
    let (owner, handle) = if a.owns("s0").is_some() {
        ("a", a.handle())
    } else {
        ("b", b.handle())
    };
    assert!(
        handle.try_next_unit().is_none(),
        "tasks are handed out from now on"
    );
    let key = lease_core::LeaseKey::with_sort_key("fleet/dyn/units", "s0").expect("key");
    // A task for a unit gained from now on; for s0, retire through a task made by a handoff-free
    // path: lose it to the other worker first, then retire there.
    let holder = if owner == "a" { &mut a } else { &mut b };
    lease_core::executor::block_on(holder.shutdown()).expect("shutdown");
    let other = if owner == "a" { &mut b } else { &mut a };
    let other_handle = other.handle();
    assert!(other_handle.try_next_unit().is_none());
    tick_all(&mut [&mut *other], &clock, 3);
    let mut task = None;
    while let Some(t) = other_handle.try_next_unit() {
        if t.unit() == "s0" {
            task = Some(t);
        }
    }
    let task = task.expect("the survivor gained s0 as a task");
    lease_core::executor::block_on(task.retire()).expect("retire");
    assert!(!task.is_owned());
    assert_eq!(
        lease_core::executor::block_on(lease_core::LeaseBackend::inspect(&store, &key))
            .expect("inspect"),
        None,
        "the retired unit's record is deleted"
    );
    tick_all(&mut [&mut *other], &clock, 3);
    assert!(other.owns("s0").is_none());
    assert_eq!(other.owned_units().len(), 6, "the other units stay owned");
    let reason = lease_core::executor::block_on(task.lost());
    assert_eq!(reason, LossReason::Retired);
}

/// A unit being handed over stays with its task until the task has saved a final checkpoint and
/// dropped; the next owner reads exactly that checkpoint.
#[test]
fn a_handoff_waits_for_the_tasks_final_checkpoint() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let make = |id: &str| {
        Worker::builder("handoff", id)
            .with_store(Arc::new(store.clone()))
            .with_units(["only"])
            .with_checkpoints()
            .build()
            .expect("worker")
    };
    let mut a = make("a");
    let handle = a.handle();
    assert!(handle.try_next_unit().is_none());
    tick_all(&mut [&mut a], &clock, 3);
    let task = handle.try_next_unit().expect("a task for the unit");
    lease_core::executor::block_on(task.save_checkpoint(b"1")).expect("save");

    // "b" joins with a lower... no: "0b" sorts first, so the single unit's target moves to it.
    let mut b = make("0b");
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert!(
        a.owns("only").is_some(),
        "still a's while its task finishes"
    );
    assert!(b.owns("only").is_none());
    assert_eq!(
        lease_core::executor::block_on(task.lost()),
        LossReason::HandedOver
    );
    assert!(
        task.is_owned(),
        "a handoff leaves the unit owned until the task is done"
    );
    lease_core::executor::block_on(task.save_checkpoint(b"final")).expect("final save");
    drop(task);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert!(a.owns("only").is_none());
    assert!(b.owns("only").is_some());
    let gained = b.handle().try_next_event();
    let mut checkpoint = None;
    let mut next = gained;
    while let Some(event) = next {
        if let FleetEvent::Gained { checkpoint: c, .. } = event {
            checkpoint = c;
        }
        next = b.handle().try_next_event();
    }
    assert_eq!(checkpoint.as_deref(), Some(&b"final"[..]));
}

/// A departed worker's released session record is deleted by the sweeper once it has stayed
/// released for ten session durations.
#[test]
fn departed_workers_session_records_are_deleted() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let log: Log = Arc::default();
    let (mut a, mut z) = (worker(&store, "a", 4, &log), worker(&store, "z", 4, &log));
    tick_all(&mut [&mut a, &mut z], &clock, 4);
    lease_core::executor::block_on(z.shutdown()).expect("shutdown");
    let key = lease_core::LeaseKey::with_sort_key("fleet/t/sessions", "z").expect("key");
    let exists = || {
        lease_core::executor::block_on(lease_core::LeaseBackend::inspect(&store, &key))
            .expect("inspect")
            .is_some()
    };
    tick_all(&mut [&mut a], &clock, 8);
    assert!(exists(), "kept while recently released");
    tick_all(&mut [&mut a], &clock, 48);
    assert!(!exists(), "deleted after ten session durations released");
    assert_eq!(a.owned_units().len(), 4);
}

/// A worker's unit limit travels in its session token: every planner honours it, and the others
/// share the rest.
#[test]
fn a_workers_unit_limit_is_honoured_by_the_whole_fleet() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let make = |id: &str, cap: Option<usize>| {
        let builder = Worker::builder("caps", id)
            .with_store(Arc::new(store.clone()))
            .with_units((0..12).map(|u| format!("u{u:02}")));
        match cap {
            Some(cap) => builder.with_max_units(cap),
            None => builder,
        }
        .build()
        .expect("worker")
    };
    let (mut a, mut b, mut c) = (make("a", Some(2)), make("b", None), make("c", None));
    tick_all(&mut [&mut a, &mut b, &mut c], &clock, 8);
    assert_eq!(owned_total(&[&a, &b, &c]), (12, vec![2, 5, 5]));
    // Limits below the units leave the rest unowned, by design.
    let (mut x, mut y) = (make("x", Some(3)), make("y", Some(4)));
    drop((a, b, c));
    clock.advance(Duration::from_secs(30));
    tick_all(&mut [&mut x, &mut y], &clock, 10);
    assert_eq!(owned_total(&[&x, &y]), (7, vec![3, 4]));
}

/// Balancing by load: the worker holding a heavy unit ends up with fewer units, and the fleet
/// stops moving once balanced.
#[test]
fn balancing_by_load_gives_the_heavy_units_owner_fewer_units() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let make = |id: &str| {
        Worker::builder("load", id)
            .with_store(Arc::new(store.clone()))
            .with_units((0..8).map(|u| format!("u{u}")))
            .with_balance_by_load()
            .build()
            .expect("worker")
    };
    let (mut a, mut b) = (make("a"), make("b"));
    for round in 0..12 {
        tick_all(&mut [&mut a, &mut b], &clock, 1);
        eprintln!(
            "round {round}: {:?} {:?} {:?}",
            owned_total(&[&a, &b]),
            a.assignment(),
            b.assignment()
        );
    }
    assert_eq!(owned_total(&[&a, &b]), (8, vec![4, 4]));
    let heavy = if a.owns("u0").is_some() { &a } else { &b };
    heavy.handle().report_load("u0", 5.0);
    tick_all(&mut [&mut a, &mut b], &clock, 40);
    let (total, counts) = owned_total(&[&a, &b]);
    assert_eq!(total, 8);
    let (with_heavy, other) = if a.owns("u0").is_some() {
        (counts[0], counts[1])
    } else {
        (counts[1], counts[0])
    };
    // Loads 5 + k against 8 - 1 - k: balanced within a unit when k = 1 (6 against 6).
    assert!(with_heavy < other, "{with_heavy} vs {other}");
    let moves = a.stats().gains + b.stats().gains;
    tick_all(&mut [&mut a, &mut b], &clock, 40);
    assert_eq!(
        a.stats().gains + b.stats().gains,
        moves,
        "settled: no more moves"
    );
}

/// Found by the DynamoDB process test: once an ownership ended while its task was alive,
/// `next_unit()` and `next_event()` never returned `None` after the worker stopped, so an
/// application waiting on them never exited.
#[test]
fn the_units_and_events_streams_end_when_the_worker_stops() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::builder().with_clock(clock.clone()).build();
    let make = |id: &str| {
        Worker::builder("ends", id)
            .with_store(Arc::new(store.clone()))
            .with_units(["only"])
            .build()
            .expect("worker")
    };
    let mut a = make("a");
    let handle = a.handle();
    assert!(handle.try_next_unit().is_none());
    tick_all(&mut [&mut a], &clock, 3);
    let task = handle.try_next_unit().expect("a task");
    // a pauses past its session; b takes the unit; a learns it lost it while the task lives.
    clock.advance(Duration::from_secs(30));
    let mut b = make("b");
    tick_all(&mut [&mut b], &clock, 8);
    assert!(b.owns("only").is_some());
    lease_core::executor::block_on(a.tick()).expect("tick");
    // The session's own loss: its trust lapsed with no renewal answered (the pause).
    assert_eq!(
        lease_core::executor::block_on(task.lost()),
        LossReason::DeadlinePassed
    );
    drop(task);
    lease_core::executor::block_on(a.shutdown()).expect("shutdown");
    assert!(
        matches!(now(handle.next_unit()), Some(None)),
        "next_unit ends"
    );
    while handle.try_next_event().is_some() {}
    assert!(
        matches!(now(handle.next_event()), Some(None)),
        "next_event ends"
    );
}

/// Polls `future` once: its output if it is ready now.
fn now<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}
