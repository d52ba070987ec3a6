//! Issue 37's fleet items on a real store: lease-file's `DirectoryStore` in a temporary
//! directory, heartbeat-only so that a manual clock decides every expiry (no sleeps), one store
//! object per worker as separate processes would have.
//!
//! * Item 12: a dead worker's units change owner once (the assigner hands none on).
//! * Item 10: after the directory is wiped under the fleet, with every old owner saving its
//!   checkpoint again before it notices, every unit is owned again within a session duration
//!   and a few intervals, whatever fencing counters the units had reached.

// Unix only: under Wine its 3 tests take 9.8 s (0.2 s on Linux), every file operation a round
// trip to wineserver; lease-file's own suites run there, and the fleet's logic in memory.
#![cfg(unix)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
use lease_file::{DirectoryStore, ModePreference};
use lessor_partition::Worker;

const SESSION: Duration = Duration::from_secs(10);
const INTERVAL: Duration = Duration::from_millis(2500);

fn store(dir: &Path, clock: &Arc<ManualClock>) -> DirectoryStore {
    DirectoryStore::builder(dir)
        .with_clock(clock.clone())
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .expect("store")
}

fn worker(
    dir: &Path,
    clock: &Arc<ManualClock>,
    id: &str,
    units: usize,
    checkpoints: bool,
) -> Worker {
    let builder = Worker::builder("files", id)
        .with_store(Arc::new(store(dir, clock)))
        .with_units((0..units).map(|u| format!("u{u:02}")))
        .with_session_duration(SESSION)
        .with_interval(INTERVAL);
    let builder = if checkpoints {
        builder.with_checkpoints()
    } else {
        builder
    };
    builder.build().expect("worker")
}

/// One round: every worker in `live` ticks, then the clock moves an interval.
fn round(workers: &mut [Worker], live: &[usize], clock: &ManualClock) {
    for &i in live {
        pollster::block_on(workers[i].tick()).expect("tick");
    }
    clock.advance(INTERVAL);
}

/// Whether every unit is trusted by exactly one of the `live` workers.
fn all_owned_once(workers: &[Worker], live: &[usize], units: usize) -> bool {
    let mut owners = vec![0; units];
    for &i in live {
        for (unit, _) in workers[i].handle().owned_units() {
            let n: usize = unit[1..].parse().expect("unit number");
            owners[n] += 1;
        }
    }
    assert!(
        owners.iter().all(|&n| n <= 1),
        "a unit trusted twice: {owners:?}"
    );
    owners.iter().all(|&n| n == 1)
}

#[test]
fn a_dead_workers_units_change_owner_once_on_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new());
    let units = 64;
    let mut workers: Vec<Worker> = (0..4)
        .map(|i| worker(dir.path(), &clock, &format!("w{i}"), units, false))
        .collect();
    let all: Vec<usize> = (0..4).collect();
    let mut rounds = 0;
    while !(all_owned_once(&workers, &all, units)
        && all
            .iter()
            .all(|&i| workers[i].handle().owned_units().len() == units / 4))
    {
        round(&mut workers, &all, &clock);
        rounds += 1;
        assert!(rounds < 60, "the fleet never balanced");
    }
    for _ in 0..4 {
        round(&mut workers, &all, &clock);
    }
    // Kill two workers that are not the assigner: they stop ticking, their records stay.
    let key = LeaseKey::with_sort_key("fleet/files/assigner", "lease").expect("key");
    let record = pollster::block_on(store(dir.path(), &clock).inspect(&key))
        .expect("inspect")
        .expect("an assigner record");
    let owner = record
        .holder()
        .and_then(|h| h.owner())
        .expect("an assigner");
    let assigner = all
        .iter()
        .copied()
        .find(|&i| format!("w{i}") == owner)
        .expect("the assigner is a worker");
    let victims: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| i != assigner)
        .take(2)
        .collect();
    let live: Vec<usize> = all
        .iter()
        .copied()
        .filter(|i| !victims.contains(i))
        .collect();
    let dead_units: usize = victims
        .iter()
        .map(|&i| workers[i].handle().owned_units().len())
        .sum();
    let before: Vec<(u64, u64)> = live
        .iter()
        .map(|&i| {
            let s = workers[i].handle().stats();
            (s.gains, s.losses)
        })
        .collect();
    let mut waited = Duration::ZERO;
    while !(all_owned_once(&workers, &live, units)
        && live
            .iter()
            .all(|&i| workers[i].handle().owned_units().len() == units / 2))
    {
        round(&mut workers, &live, &clock);
        waited += INTERVAL;
        assert!(
            waited <= SESSION * 6,
            "the dead workers' units were not all taken"
        );
    }
    for _ in 0..4 {
        round(&mut workers, &live, &clock);
    }
    let (mut gained, mut handed_on) = (0, 0);
    for (&i, &(g, l)) in live.iter().zip(&before) {
        let s = workers[i].handle().stats();
        gained += s.gains - g;
        handed_on += s.losses - l;
    }
    eprintln!(
        "files, W=4 L={units}, 2 killed ({dead_units} units): balanced again after {waited:?}; \
         survivors gained {gained}, handed {handed_on} on"
    );
    assert_eq!(handed_on, 0, "units handed on after the takeover");
    assert_eq!(gained, dead_units as u64);
}

#[test]
fn a_wiped_directory_is_owned_again_within_a_session_whatever_the_counters() {
    let units = 8;
    for counters in [20_u64, 100] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new());
        // A fleet that has run for a while: every change of owner raised the counters.
        let raiser = store(dir.path(), &clock);
        for u in 0..units {
            let key =
                LeaseKey::with_sort_key("fleet/files/units", format!("u{u:02}")).expect("key");
            for _ in 0..counters {
                let lease = pollster::block_on(raiser.try_acquire(
                    &key,
                    SESSION,
                    &AcquireOptions::default(),
                ))
                .expect("acquire");
                pollster::block_on(raiser.release(&key, lease.token(), lease.fencing_token()))
                    .expect("release");
            }
        }
        drop(raiser);
        let mut workers: Vec<Worker> = (0..2)
            .map(|i| worker(dir.path(), &clock, &format!("w{i}"), units, true))
            .collect();
        let live = [0, 1];
        let mut rounds = 0;
        while !all_owned_once(&workers, &live, units) {
            round(&mut workers, &live, &clock);
            rounds += 1;
            assert!(rounds < 60, "the fleet never owned every unit");
        }
        let save_all = |workers: &[Worker]| {
            let mut saved = 0;
            for w in workers {
                let handle = w.handle();
                for (unit, fencing) in handle.owned_units() {
                    let data = format!("{unit}@{fencing}");
                    let save = handle.save_checkpoint(&unit, data.as_bytes());
                    saved += usize::from(pollster::block_on(save).is_ok());
                }
            }
            saved
        };
        assert_eq!(save_all(&workers), units);
        // The directory loses everything (a disk replaced, a volume restored empty).
        for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("wipe");
            } else {
                std::fs::remove_file(&path).expect("wipe");
            }
        }
        // Old owners save again before their next renewal shows them the loss.
        let resaved = save_all(&workers);
        let mut waited = Duration::ZERO;
        let limit = SESSION + INTERVAL * 4;
        let mut owned = false;
        while waited <= limit * 3 {
            round(&mut workers, &live, &clock);
            waited += INTERVAL;
            if waited > INTERVAL * 2 && all_owned_once(&workers, &live, units) {
                owned = true;
                break;
            }
        }
        let losses: u64 = workers
            .iter()
            .map(|w| w.handle().stats().store_losses)
            .sum();
        eprintln!(
            "files, counters {counters}: {resaved} re-saved after the wipe; every unit owned \
             again: {owned} after {waited:?}; {losses} store losses seen"
        );
        assert!(
            owned && waited <= limit,
            "counters {counters}: not owned again within {limit:?}"
        );
    }
}

/// Item 10's other path: the checkpoints live in a store of their own that keeps its data
/// while the lease directory is wiped, so no store epoch vanishes and no worker sees a loss at
/// its session start; the re-created unit records count from 1 again below the checkpoints'
/// fences. The first owner whose fenced read is refused while it holds the unit records the
/// loss itself, waits a session duration, and the units are taken once above every old fence,
/// with their checkpoints read back. Before, they were retaken one fencing step at a time.
#[test]
fn a_wiped_lease_directory_under_a_separate_checkpoint_store_is_owned_again() {
    let units = 8;
    let counters = 100_u64;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new());
    let checkpoints = Arc::new(
        lease_core::MemoryBackend::builder()
            .with_clock(clock.clone())
            .build(),
    );
    let raiser = store(dir.path(), &clock);
    for u in 0..units {
        let key = LeaseKey::with_sort_key("fleet/files/units", format!("u{u:02}")).expect("key");
        for _ in 0..counters {
            let lease =
                pollster::block_on(raiser.try_acquire(&key, SESSION, &AcquireOptions::default()))
                    .expect("acquire");
            pollster::block_on(raiser.release(&key, lease.token(), lease.fencing_token()))
                .expect("release");
        }
    }
    drop(raiser);
    let mut workers: Vec<Worker> = (0..2)
        .map(|i| {
            Worker::builder("files", format!("w{i}"))
                .with_store(Arc::new(store(dir.path(), &clock)))
                .with_checkpoint_store(checkpoints.clone())
                .with_units((0..units).map(|u| format!("u{u:02}")))
                .with_session_duration(SESSION)
                .with_interval(INTERVAL)
                .build()
                .expect("worker")
        })
        .collect();
    let live = [0, 1];
    let mut rounds = 0;
    while !all_owned_once(&workers, &live, units) {
        round(&mut workers, &live, &clock);
        rounds += 1;
        assert!(rounds < 60, "the fleet never owned every unit");
    }
    let mut old_owners = Vec::new();
    for w in &workers {
        let handle = w.handle();
        for (unit, fencing) in handle.owned_units() {
            let data = format!("{unit}@{fencing}");
            pollster::block_on(handle.save_checkpoint(&unit, data.as_bytes())).expect("save");
            old_owners.push((unit, fencing));
        }
    }
    for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("wipe");
        } else {
            std::fs::remove_file(&path).expect("wipe");
        }
    }
    let handles: Vec<_> = workers.iter().map(Worker::handle).collect();
    let events: Vec<_> = handles.iter().map(|h| h.events()).collect();
    let mut waited = Duration::ZERO;
    let limit = SESSION + INTERVAL * 6;
    let mut owned = false;
    while waited <= limit * 3 {
        round(&mut workers, &live, &clock);
        waited += INTERVAL;
        if waited > INTERVAL * 2 && all_owned_once(&workers, &live, units) {
            owned = true;
            break;
        }
    }
    let mut restored = 0;
    for mut stream in events {
        use futures::StreamExt as _;
        while let Some(Some(event)) = futures::FutureExt::now_or_never(stream.next()) {
            if let lessor_partition::FleetEvent::Gained {
                checkpoint: lessor_partition::Checkpoint::Saved(_),
                ..
            } = event
            {
                restored += 1;
            }
        }
    }
    let losses: u64 = workers
        .iter()
        .map(|w| w.handle().stats().store_losses)
        .sum();
    eprintln!(
        "files + a separate checkpoint store, counters {counters}: every unit owned again: \
         {owned} after {waited:?}; {restored} checkpoints read back; {losses} losses recorded"
    );
    assert!(owned && waited <= limit, "not owned again within {limit:?}");
    assert_eq!(restored, units, "every checkpoint read back");
    // An old owner's save still in flight lands now, at its old fence: refused, though the
    // new owners' unit fencing tokens count from 1 again.
    for (unit, fencing) in &old_owners {
        let name = LeaseKey::with_sort_key("fleet/files/checkpoints", unit.as_str()).expect("key");
        let late = pollster::block_on(lease_core::FencedValues::put_fenced(
            &*checkpoints,
            &name,
            *fencing,
            b"stale",
        ));
        let error = late.expect_err("an old owner's late save is refused");
        assert_eq!(
            error.not_owned_reason(),
            Some(lease_core::NotOwnedReason::Fenced),
            "{error}"
        );
    }
}
