//! Races that need a pause at an exact point, made with the fault points of the `failpoints`
//! feature: `cargo test -p lease-file --features failpoints --test fault_points`. The `fail`
//! registry is process-wide, so this binary holds only tests that configure it, one at a time.
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_file::{FileLock, FileLockOptions};

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
    let lock = FileLock::with_options(
        dir.path().join("a.lease"),
        FileLockOptions::default().with_heartbeat_interval(Duration::from_millis(50)),
    )
    .unwrap();
    lock.acquire().unwrap();
    lock.release().unwrap();
    fail::remove("lease-file/before-acquire");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "fail_point! is compiled out");
}
