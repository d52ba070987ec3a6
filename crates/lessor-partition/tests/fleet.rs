//! The fleet worker driven directly: fencing across owner changes, fenced checkpoints, the
//! background loop on the system clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use lease_core::{
    FencedValues, FencingToken, LeaseKey, LossReason, ManualClock, MemoryBackend, NotOwnedReason,
};
use lessor_partition::{Checkpoint, FleetEvent, UnitEnd, UnitTask, Worker};

/// Every event of the watched workers, read from their handles' streams.
#[derive(Default)]
struct Events {
    streams: Vec<(String, BoxStream<'static, FleetEvent>)>,
    seen: Vec<(String, FleetEvent)>,
}

type Log = Arc<Mutex<Events>>;

fn watch(log: &Log, id: &str, worker: &Worker) {
    let mut log = log.lock().expect("log");
    let stream = worker.handle().events().boxed();
    log.streams.push((id.to_owned(), stream));
}

/// Every event so far, in the order each worker queued them.
fn events(log: &Log) -> Vec<(String, FleetEvent)> {
    let mut log = log.lock().expect("log");
    let Events { streams, seen } = &mut *log;
    for (id, stream) in streams.iter_mut() {
        seen.extend(queued(stream).into_iter().map(|e| (id.clone(), e)));
    }
    seen.clone()
}

/// What `stream` has ready now, without waiting.
fn queued<T>(stream: &mut (impl futures::Stream<Item = T> + Unpin)) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(Some(item)) = stream.next().now_or_never() {
        out.push(item);
    }
    out
}

/// The units `worker` trusts now.
fn owned(worker: &Worker) -> usize {
    worker.handle().owned_units().len()
}

/// The fencing token of `unit` if `worker` owns it now.
fn owns(worker: &Worker, unit: &str) -> Option<FencingToken> {
    worker.handle().owns(unit)
}

fn worker(store: &MemoryBackend, id: &str, units: usize, log: &Log) -> Worker {
    let worker = Worker::builder("t", id)
        .with_store(Arc::new(store.clone()))
        .with_units((0..units).map(|u| format!("u{u:02}")))
        .build()
        .expect("worker");
    watch(log, id, &worker);
    worker
}

fn tick_all(workers: &mut [&mut Worker], clock: &ManualClock, rounds: usize) {
    for _ in 0..rounds {
        for w in workers.iter_mut() {
            pollster::block_on(w.tick()).expect("tick");
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
    assert_eq!(owned(&a), 12);
    tick_all(&mut [&mut a, &mut b], &clock, 4);
    assert_eq!(owned(&b), 6);
    // c joins, then a crashes (stops ticking), then b shuts down cleanly.
    tick_all(&mut [&mut a, &mut b, &mut c], &clock, 4);
    tick_all(&mut [&mut b, &mut c], &clock, 8);
    assert_eq!(
        owned(&a),
        0,
        "a crashed worker stops trusting once its session ends"
    );
    assert_eq!(owned(&b) + owned(&c), 12);
    pollster::block_on(b.shutdown()).expect("shutdown");
    tick_all(&mut [&mut c], &clock, 2);
    assert_eq!(owned(&c), 12);

    let mut last: BTreeMap<String, FencingToken> = BTreeMap::new();
    let mut gains = 0;
    for (who, event) in events(&log).iter() {
        if let FleetEvent::Gained {
            unit,
            fencing_token: fencing,
            ..
        } = event
        {
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
            reason: UnitEnd::Shutdown,
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
        watch(&log, id, &worker);
        worker
    };
    let (mut a, mut b) = (make("a"), make("b"));
    tick_all(&mut [&mut a, &mut b], clock, 3);
    let ((owner, owner_id), (other, other_id)) = if owns(&a, "only").is_some() {
        ((&mut a, "a"), (&mut b, "b"))
    } else {
        ((&mut b, "b"), (&mut a, "a"))
    };
    let old_fencing = owns(owner, "only").expect("owned");
    pollster::block_on(owner.handle().save_checkpoint("only", b"offset=41")).expect("owner saves");
    let err =
        pollster::block_on(other.handle().save_checkpoint("only", b"nope")).expect_err("not owner");
    assert!(err.is_not_owned(), "{err:?}");
    assert_eq!(
        err.key().and_then(LeaseKey::sort),
        Some("only"),
        "names the unit"
    );

    // The owner pauses past its session; the other takes over and receives the checkpoint.
    tick_all(&mut [other], clock, 8);
    let new_fencing = owns(other, "only").expect("taken over");
    assert!(new_fencing > old_fencing);
    let handed = events(&log).iter().rev().find_map(|(who, e)| match e {
        FleetEvent::Gained { checkpoint, .. } if who == other_id => Some(checkpoint.clone()),
        _ => None,
    });
    assert_eq!(handed, Some(Checkpoint::Saved(b"offset=41".to_vec())));
    // The paused owner no longer trusts the unit; even bypassing the worker, its token is fenced.
    assert!(owns(owner, "only").is_none(), "{owner_id} paused");
    let values: &dyn FencedValues = match &separate {
        Some(values) => &**values,
        None => store,
    };
    let name = LeaseKey::with_sort_key("fleet/cp/checkpoints", "only").expect("name");
    let late =
        pollster::block_on(values.put_fenced(&name, old_fencing, b"late")).expect_err("fenced out");
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
    let counts: Vec<usize> = workers.iter().map(|w| owned(w)).collect();
    let mut all: Vec<String> = workers
        .iter()
        .flat_map(|w| w.handle().owned_units().into_keys())
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
        pollster::block_on(a.handle().add_units((0..6).map(|u| format!("s{u}")))).expect("add");
    assert_eq!(added, 6);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert_eq!(owned_total(&[&a, &b]), (6, vec![3, 3]));
    // Adding what exists adds nothing.
    let again = pollster::block_on(b.handle().add_units(["s0", "s9"])).expect("add");
    assert_eq!(again, 1);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert_eq!(owned_total(&[&a, &b]).0, 7);

    // The owner of s0 retires it: its record is deleted and nobody takes it again.
    let owner = if owns(&a, "s0").is_some() { "a" } else { "b" };
    let key = lease_core::LeaseKey::with_sort_key("fleet/dyn/units", "s0").expect("key");
    // A task for a unit gained from now on; for s0, retire through a task made by a handoff-free
    // path: lose it to the other worker first, then retire there.
    let holder = if owner == "a" { &mut a } else { &mut b };
    pollster::block_on(holder.shutdown()).expect("shutdown");
    let other = if owner == "a" { &mut b } else { &mut a };
    let mut units = other.handle().units(); // tasks are handed out from now on
    tick_all(&mut [&mut *other], &clock, 3);
    let task: UnitTask = queued(&mut units)
        .into_iter()
        .find(|t| t.unit() == "s0")
        .expect("the survivor gained s0 as a task");
    let fencing = task.check().expect("owned");
    pollster::block_on(task.retire()).expect("retire");
    let retired = task.check().expect_err("retired");
    assert!(
        matches!(
            &retired,
            lease_core::LeaseError::Lost {
                reason: LossReason::NotOwned(NotOwnedReason::Missing),
                ..
            }
        ),
        "{retired:?}"
    );
    assert_eq!(task.fencing_token(), fencing);
    assert_eq!(
        pollster::block_on(lease_core::LeaseBackend::inspect(&store, &key)).expect("inspect"),
        None,
        "the retired unit's record is deleted"
    );
    tick_all(&mut [&mut *other], &clock, 3);
    assert!(owns(other, "s0").is_none());
    assert_eq!(owned(other), 6, "the other units stay owned");
    let reason = pollster::block_on(task.lost());
    assert_eq!(reason, UnitEnd::Retired);
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
    let mut units = a.handle().units();
    tick_all(&mut [&mut a], &clock, 3);
    let task = queued(&mut units).pop().expect("a task for the unit");
    pollster::block_on(task.save_checkpoint(b"1")).expect("save");

    // "b" joins with a lower... no: "0b" sorts first, so the single unit's target moves to it.
    let mut b = make("0b");
    let mut b_events = b.handle().events();
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert!(
        owns(&a, "only").is_some(),
        "still a's while its task finishes"
    );
    assert!(owns(&b, "only").is_none());
    assert_eq!(pollster::block_on(task.lost()), UnitEnd::HandedOver);
    assert!(
        task.check().is_ok(),
        "a handoff leaves the unit owned until the task is done"
    );
    assert!(task.deadline() > lease_core::Clock::monotonic(&*clock));
    pollster::block_on(task.save_checkpoint(b"final")).expect("final save");
    drop(task);
    tick_all(&mut [&mut a, &mut b], &clock, 3);
    assert!(owns(&a, "only").is_none());
    assert!(owns(&b, "only").is_some());
    let checkpoint = queued(&mut b_events)
        .into_iter()
        .filter_map(|event| match event {
            FleetEvent::Gained { checkpoint, .. } => Some(checkpoint),
            _ => None,
        })
        .last();
    assert_eq!(checkpoint, Some(Checkpoint::Saved(b"final".to_vec())));
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
    pollster::block_on(z.shutdown()).expect("shutdown");
    let key = lease_core::LeaseKey::with_sort_key("fleet/t/sessions", "z").expect("key");
    let exists = || {
        pollster::block_on(lease_core::LeaseBackend::inspect(&store, &key))
            .expect("inspect")
            .is_some()
    };
    tick_all(&mut [&mut a], &clock, 8);
    assert!(exists(), "kept while recently released");
    tick_all(&mut [&mut a], &clock, 48);
    assert!(!exists(), "deleted after ten session durations released");
    assert_eq!(owned(&a), 4);
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
    let (mut a_units, mut b_units) = (a.handle().units(), b.handle().units());
    for round in 0..12 {
        tick_all(&mut [&mut a, &mut b], &clock, 1);
        eprintln!(
            "round {round}: {:?} {:?} {:?}",
            owned_total(&[&a, &b]),
            a.handle().snapshot(),
            b.handle().snapshot()
        );
    }
    assert_eq!(owned_total(&[&a, &b]), (8, vec![4, 4]));
    // The owner of u0 reports its load through the unit's task; the others' tasks are done.
    let u0 = queued(&mut a_units)
        .into_iter()
        .chain(queued(&mut b_units))
        .find(|task| task.unit() == "u0" && task.check().is_ok())
        .expect("u0 came as a task");
    u0.report_load(5.0);
    tick_all(&mut [&mut a, &mut b], &clock, 40);
    let (total, counts) = owned_total(&[&a, &b]);
    assert_eq!(total, 8);
    let (with_heavy, other) = if owns(&a, "u0").is_some() {
        (counts[0], counts[1])
    } else {
        (counts[1], counts[0])
    };
    // Loads 5 + k against 8 - 1 - k: balanced within a unit when k = 1 (6 against 6).
    assert!(with_heavy < other, "{with_heavy} vs {other}");
    let gains = |w: &Worker| w.handle().stats().gains;
    let moves = gains(&a) + gains(&b);
    tick_all(&mut [&mut a, &mut b], &clock, 40);
    assert_eq!(gains(&a) + gains(&b), moves, "settled: no more moves");
}

/// Found by the DynamoDB process test: once an ownership ended while its task was alive, the
/// units and events streams never ended after the worker stopped, so an application waiting on
/// them never exited.
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
    let (mut units, mut events) = (a.handle().units(), a.handle().events());
    tick_all(&mut [&mut a], &clock, 3);
    let task = queued(&mut units).pop().expect("a task");
    // a pauses past its session; b takes the unit; a learns it lost it while the task lives.
    clock.advance(Duration::from_secs(30));
    let mut b = make("b");
    tick_all(&mut [&mut b], &clock, 8);
    assert!(owns(&b, "only").is_some());
    pollster::block_on(a.tick()).expect("tick");
    // The session's own loss: its trust lapsed with no renewal answered (the pause).
    assert_eq!(
        pollster::block_on(task.lost()),
        UnitEnd::Lost(LossReason::DeadlinePassed)
    );
    let lost = task.check().expect_err("lost");
    assert!(
        matches!(
            &lost,
            lease_core::LeaseError::Lost {
                reason: LossReason::DeadlinePassed,
                ..
            }
        ),
        "{lost:?}"
    );
    assert!(task.deadline() <= lease_core::Clock::monotonic(&*clock));
    drop(task);
    pollster::block_on(a.shutdown()).expect("shutdown");
    assert!(
        matches!(units.next().now_or_never(), Some(None)),
        "units end"
    );
    queued(&mut events);
    assert!(
        matches!(events.next().now_or_never(), Some(None)),
        "events end"
    );
}

/// Issue 37, item 13: the fleet is safe while clock rates differ by less than `m / (2d)`; a
/// margin that leaves less than the 1 % floor (`d / 50`) is refused when the worker is built.
/// Before, a 10 ms margin on 10 s sessions (a 0.05 % tolerance) was accepted.
#[test]
fn a_safety_margin_below_the_clock_rate_floor_is_refused() {
    let store = MemoryBackend::new();
    let build = |session: Duration, margin: Option<Duration>| {
        let mut builder = Worker::builder("t", "w")
            .with_store(Arc::new(store.clone()))
            .with_units(["u0"])
            .with_session_duration(session);
        if let Some(margin) = margin {
            builder = builder.with_safety_margin(margin);
        }
        builder.build()
    };
    let secs = Duration::from_secs;
    let millis = Duration::from_millis;
    for (session, margin) in [
        (secs(10), millis(10)),
        (secs(10), millis(199)),
        (secs(60), millis(1199)),
    ] {
        let error = build(session, Some(margin)).expect_err("a margin below d / 50 is refused");
        assert!(error.is_invalid_input(), "{error}");
        assert!(error.to_string().contains("safety margin"), "{error}");
    }
    for (session, margin) in [
        (secs(10), Some(millis(200))),
        (secs(60), Some(millis(1200))),
    ] {
        build(session, margin).expect("a margin at the floor is accepted");
    }
    // Defaults stay at or above the floor at any session duration (the 5 s cap gives way).
    for session in [secs(10), secs(60), secs(600), secs(3600)] {
        build(session, None).expect("the default margin is accepted");
    }
}
