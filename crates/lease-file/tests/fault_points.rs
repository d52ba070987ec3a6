//! Races that need a pause at an exact point, made with the fault points of the `failpoints`
//! feature: `cargo test -p lease-file --features failpoints --test fault_points`. The `fail`
//! registry is process-wide, so this binary holds only tests that configure it, one at a time.
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_file::{FileLock, LossReason, NotOwnedReason};

/// One test at a time: they share the fault point registry.
static SERIAL: Mutex<()> = Mutex::new(());

/// The fault points run (the `fail` crate's own `failpoints` feature is on): without it,
/// `fail_point!` compiles to nothing and every pause test would pass without pausing anything.
#[test]
fn the_fault_points_run() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    fail::cfg_callback("lease-file/before-acquire", move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lock = FileLock::builder(dir.path().join("a.lease"))
        .with_heartbeat_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    lock.acquire().unwrap().release().unwrap();
    fail::remove("lease-file/before-acquire");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "fail_point! is compiled out"
    );
}

/// The lock directory replaced between a heartbeat's look at the path and its rename: the rename
/// renews the state in the directory moved away, where nobody looks any more. The holder must not
/// count that renewal: it used to extend its deadline from it and trust a tenure the contender on
/// the fresh directory already held, until its next heartbeat, and now reports the loss from that
/// very heartbeat. So the overlap with the contender stays within the deadline the holder had
/// when its directory was replaced.
#[test]
fn a_renewal_in_a_directory_replaced_under_the_heartbeat_is_not_trusted() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let moved = dir.path().join("a.lease.moved");
    let (lost_tx, lost) = std::sync::mpsc::channel();
    // Heartbeats 500 ms apart: the loss is reported by the paused heartbeat itself, not by the
    // next one.
    let holder = FileLock::builder(&path)
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_stale_threshold(Duration::from_secs(5))
        .on_lost(move |reason| {
            let _ = lost_tx.send((std::time::Instant::now(), reason.clone()));
        })
        .build()
        .unwrap()
        .acquire()
        .unwrap();

    let (paused_tx, paused) = std::sync::mpsc::channel::<()>();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let armed = Mutex::new(Some((paused_tx, go_rx)));
    fail::cfg_callback("lease-file/before-renew", move || {
        // The first heartbeat only: wait there while the test replaces the directory.
        let taken = armed.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((paused_tx, go_rx)) = taken {
            paused_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        }
    })
    .unwrap();
    paused
        .recv_timeout(Duration::from_secs(5))
        .expect("the holder's heartbeat reached the fault point");
    // The heartbeat has found the directory at the path; now it is replaced.
    std::fs::rename(&path, &moved).unwrap();
    let contender = FileLock::new(&path).unwrap().try_acquire().unwrap();
    assert_eq!(contender.fencing_token().get(), 1);
    let before = entries(&moved);
    let resumed = std::time::Instant::now();
    go.send(()).unwrap();

    // The paused rename goes through, in the directory moved away...
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while entries(&moved) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the heartbeat never renamed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // ... and the holder does not count it: it is told at once, not 500 ms later.
    let (at, reason) = lost.recv_timeout(Duration::from_secs(5)).unwrap();
    fail::remove("lease-file/before-renew");
    assert!(
        at - resumed < Duration::from_millis(250),
        "lost {:?} after the replaced renewal: {reason}",
        at - resumed
    );
    assert!(
        matches!(
            reason,
            LossReason::NotOwned(NotOwnedReason::TakenOver | NotOwnedReason::Missing)
        ),
        "{reason}"
    );
    assert!(holder.check().unwrap_err().is_not_owned());
    assert!(contender.check().is_ok());
    contender.release().unwrap();
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
