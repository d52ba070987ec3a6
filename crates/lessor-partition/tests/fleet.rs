//! The fleet worker driven directly: fencing across owner changes, fenced checkpoints, the
//! background loop on the system clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::{FencingToken, ManualClock, MemoryBackend};
use lessor_partition::{
    CheckpointStore, Error, FleetEvent, LossCause, MemoryCheckpoints, StoreCheckpoints, Worker,
    WorkerHandle,
};

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
        .store(store.clone())
        .units((0..units).map(|u| format!("u{u:02}")))
        .build()
        .expect("worker");
    watch(log, &worker);
    worker
}

fn tick_all(workers: &mut [&mut Worker], clock: &ManualClock, rounds: usize) {
    for _ in 0..rounds {
        for w in workers.iter_mut() {
            lease_core::block_on(w.tick()).expect("tick");
        }
        clock.advance(Duration::from_millis(2500));
    }
}

#[test]
fn every_change_of_owner_raises_the_units_fencing_token() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::new().with_clock(clock.clone());
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
    lease_core::block_on(b.shutdown()).expect("shutdown");
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
            cause: LossCause::Shutdown,
            ..
        }
    )));
}

#[test]
fn only_the_current_owner_can_write_a_checkpoint() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::new().with_clock(clock.clone());
    checkpoints_follow_the_owner(&clock, &store, Arc::new(MemoryCheckpoints::new()));
}

#[test]
fn checkpoints_kept_in_the_lease_store_follow_the_owner() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryBackend::new().with_clock(clock.clone());
    let checkpoints = StoreCheckpoints::new(Arc::new(store.clone()), "cp").expect("checkpoints");
    checkpoints_follow_the_owner(&clock, &store, Arc::new(checkpoints));
}

fn checkpoints_follow_the_owner(
    clock: &ManualClock,
    store: &MemoryBackend,
    checkpoints: Arc<dyn CheckpointStore>,
) {
    let log: Log = Arc::default();
    let make = |id: &str| {
        let worker = Worker::builder("cp", id)
            .store(store.clone())
            .units(["only"])
            .checkpoints(checkpoints.clone())
            .build()
            .expect("worker");
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
    lease_core::block_on(owner.save_checkpoint("only", b"offset=41")).expect("owner saves");
    let err = lease_core::block_on(other.save_checkpoint("only", b"nope")).expect_err("not owner");
    assert!(matches!(err, Error::NotOwner { .. }));

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
    let late = lease_core::block_on(checkpoints.save("only", old_fencing, b"late"));
    assert!(
        matches!(late, Err(Error::Fenced { .. } | Error::NotOwner { .. })),
        "{late:?}"
    );
}

#[test]
fn run_loops_on_the_system_clock_and_hands_over_on_stop() {
    fn assert_send<T: Send>(_: &T) {}
    let store = MemoryBackend::new();
    let make = |id: &str| {
        Worker::builder("live", id)
            .store(store.clone())
            .units((0..9).map(|u| format!("u{u}")))
            .session_duration(Duration::from_millis(600))
            .interval(Duration::from_millis(100))
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
