//! Several OS processes share one lease directory (lease-file's `DirectoryStore`) as a fleet:
//! they balance, a SIGKILLed process's units are taken over within the session plus two
//! intervals, a clean stop hands over at once, and every unit's fencing token grows with every
//! change of owner across processes.
//!
//! The test binary re-runs itself as the worker processes (`child_worker` with
//! `LESSOR_FILE_CHILD` set); without that variable `child_worker` does nothing.

// Unix only: it SIGKILLs worker processes.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use lease_file::DirectoryStore;
use lessor_partition::{FleetEvent, Worker};

const CHILD_ENV: &str = "LESSOR_FILE_CHILD";
const UNITS: usize = 24;
const SESSION: Duration = Duration::from_millis(1500);
const INTERVAL: Duration = Duration::from_millis(250);

fn millis_now() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The worker process: runs until `<dir>/stop-<id>` appears, writing its units to
/// `<dir>/status-<id>` after every tick and every event to `<dir>/events-<id>`.
#[test]
fn child_worker() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, id) = spec.split_once(',').expect("dir,id");
    let (dir, id) = (PathBuf::from(dir), id.to_owned());
    let store = DirectoryStore::open(dir.join("leases")).expect("store");
    let log_path = dir.join(format!("events-{id}"));
    let worker = Worker::builder("files", id.clone())
        .with_store(std::sync::Arc::new(store))
        .with_units((0..UNITS).map(|u| format!("u{u:02}")))
        .with_session_duration(SESSION)
        .with_interval(INTERVAL)
        .build()
        .expect("worker");
    let events = worker.handle().events();
    std::thread::spawn(move || {
        for event in futures::executor::block_on_stream(events) {
            let line = match &event {
                FleetEvent::Gained {
                    unit,
                    fencing_token,
                    ..
                } => format!("gained {unit} {fencing_token}"),
                FleetEvent::Lost {
                    unit,
                    fencing_token,
                    ..
                } => format!("lost {unit} {fencing_token}"),
                _ => continue,
            };
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .expect("event log");
            writeln!(log, "{} {line}", millis_now()).expect("write event");
        }
    });
    let handle = worker.handle();
    let (_, thread) = worker.spawn_thread().expect("thread");
    let stop = dir.join(format!("stop-{id}"));
    let status = dir.join(format!("status-{id}"));
    loop {
        let units: Vec<String> = handle.snapshot().units.into_keys().collect();
        let tmp = dir.join(format!(".status-{id}.tmp"));
        std::fs::write(&tmp, units.join(" ")).expect("status");
        std::fs::rename(&tmp, &status).expect("status rename");
        if stop.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.stop();
    thread.join().expect("worker thread").expect("clean stop");
    std::fs::write(&status, "").expect("status");
}

fn spawn(dir: &Path, id: &str) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{},{id}", dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child")
}

fn status(dir: &Path, id: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("status-{id}")))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    start.elapsed()
}

fn balanced(dir: &Path, ids: &[&str]) -> bool {
    let counts: Vec<usize> = ids.iter().map(|id| status(dir, id).len()).collect();
    let mut all: Vec<String> = ids.iter().flat_map(|id| status(dir, id)).collect();
    all.sort();
    all.dedup();
    let (lo, hi) = (UNITS / ids.len(), UNITS.div_ceil(ids.len()));
    all.len() == UNITS
        && counts.iter().sum::<usize>() == UNITS
        && counts.iter().all(|c| (lo..=hi).contains(c))
}

#[test]
fn processes_share_units_through_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path();
    let ids = ["p1", "p2", "p3", "p4"];
    let mut children: BTreeMap<&str, Child> = ids.iter().map(|id| (*id, spawn(path, id))).collect();

    wait("four processes to balance", Duration::from_secs(60), || {
        balanced(path, &ids)
    });

    // SIGKILL one: no goodbye, its kernel locks drop, its session expires.
    let mut killed = children.remove("p2").expect("p2");
    killed.kill().expect("kill p2");
    killed.wait().expect("reap p2");
    let took = wait(
        "the others to take p2's units",
        Duration::from_secs(30),
        || balanced(path, &["p1", "p3", "p4"]),
    );
    // Session + two intervals, plus status polling and process scheduling slack.
    assert!(
        took < SESSION + INTERVAL * 2 + Duration::from_secs(2),
        "took {took:?}"
    );

    // A clean stop hands over at once.
    std::fs::write(path.join("stop-p3"), "").expect("stop p3");
    let took = wait("the clean handover of p3", Duration::from_secs(30), || {
        balanced(path, &["p1", "p4"])
    });
    assert!(
        took < INTERVAL * 4 + Duration::from_secs(1),
        "took {took:?}"
    );

    for id in ["p1", "p3", "p4"] {
        std::fs::write(path.join(format!("stop-{id}")), "").expect("stop");
    }
    for (id, mut child) in children {
        let exit = child.wait().expect("child exit");
        assert!(exit.success(), "{id} failed: {exit}");
    }

    // Across every process, each unit's fencing token grows with every new owner, and no two
    // processes were ever told they gained a unit under the same fencing token.
    let mut gains: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for id in ids {
        let log = std::fs::read_to_string(path.join(format!("events-{id}"))).unwrap_or_default();
        for line in log.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if let [_, "gained", unit, fencing] = parts.as_slice() {
                gains
                    .entry((*unit).to_owned())
                    .or_default()
                    .push((fencing.parse().expect("fencing"), id.to_owned()));
            }
        }
    }
    assert_eq!(gains.len(), UNITS);
    for (unit, mut list) in gains {
        list.sort();
        for pair in list.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "unit {unit}: fencing {} gained twice ({:?})",
                pair[0].0,
                pair
            );
        }
    }
}
