//! Waiters are woken by the kernel, not by polling: with polling slowed to seconds, a waiter
//! still takes the lock within milliseconds of its holder letting go, on both faces.
// Unix only: kernel mode, which Windows has not (every lock there is heartbeat-only).
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::{LeaseBackend, LeaseKey, WaitOptions};
use lease_file::{DirectoryStore, FileLock, LockMode};

/// Far longer than the wake-up the test allows: only a kernel wake-up can beat it.
const SLOW_POLL: Duration = Duration::from_secs(5);
const ALLOWED: Duration = Duration::from_millis(500);

#[test]
fn a_waiting_directory_store_acquisition_is_woken_by_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let holder = DirectoryStore::open(dir.path()).unwrap();
    assert_eq!(holder.mode(), LockMode::Kernel);
    let waiter: Arc<dyn LeaseBackend> = Arc::new(DirectoryStore::open(dir.path()).unwrap());
    let key = LeaseKey::new("woken").unwrap();
    let lease = pollster::block_on(holder.acquire(&key, Duration::from_secs(60))).unwrap();
    let thread = {
        let key = key.clone();
        std::thread::spawn(move || {
            let wait = WaitOptions::new(Duration::from_secs(30)).with_backoff(SLOW_POLL, SLOW_POLL);
            let lease =
                pollster::block_on(waiter.acquire_with(&key, Duration::from_secs(60), &wait))
                    .unwrap();
            (Instant::now(), lease)
        })
    };
    // Let the waiter make its first attempt and block.
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    pollster::block_on(holder.release_lease(&lease)).unwrap();
    let (acquired, second) = thread.join().unwrap();
    let took = acquired.duration_since(released);
    assert!(took < ALLOWED, "the waiter took {took:?} after the release");
    assert!(second.fencing_token() > lease.fencing_token());
}

#[test]
fn a_waiting_file_lock_is_woken_by_the_release() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("woken.lease");
    let options = FileLock::builder(&path).with_retry_delay(SLOW_POLL);
    let holder = options.clone().build().unwrap();
    assert_eq!(holder.mode(), LockMode::Kernel);
    let guard = holder.acquire().unwrap();
    let fencing = guard.fencing_token();
    let thread = std::thread::spawn(move || {
        let waiter = options.build().unwrap();
        let got = waiter
            .acquire_with(&WaitOptions::new(Duration::from_secs(30)))
            .unwrap();
        (Instant::now(), got.fencing_token(), got)
    });
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    guard.release().unwrap();
    let (acquired, second, _waiter) = thread.join().unwrap();
    let took = acquired.duration_since(released);
    assert!(took < ALLOWED, "the waiter took {took:?} after the release");
    assert!(second > fencing);
}
