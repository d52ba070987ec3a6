//! Parity with the Go `kit/lockfile` PIDLock: the same API, options, defaults and behaviours,
//! each checked here by name; plus the races the Go package has and this one must not.
//! (Interoperation with a Go process on the same path: `go_interop.rs`.)
#![allow(clippy::unwrap_used)]

mod lease_dir;

use std::path::Path;
use std::time::{Duration, Instant};

use lease_core::WaitOptions;
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
use lease_dir::monotonic_ns;
use lease_dir::{Held, State, fnv};
use lease_file::{FileLock, FileLockBuilder};

fn fast(path: impl Into<std::path::PathBuf>) -> FileLockBuilder {
    FileLock::builder(path)
        .with_heartbeat_interval(Duration::from_millis(20))
        .with_stale_threshold(Duration::from_millis(400))
        .with_retry_delay(Duration::from_millis(10))
}

/// The held state of the lock at `path` (panics if it is free).
fn held(path: &Path) -> Held {
    lease_dir::state(path).1.held().unwrap().clone()
}

/// A diagnostic record claiming a holder by wall-clock timestamps only.
fn record_written_at(written_at_ns: u64, pid: u32, host: &str) -> Vec<u8> {
    serde_json::json!({
        "version": 1, "owner": "hung-owner", "pid": pid, "host": host,
        "heartbeat": 7, "generation": 1, "written_at_ns": written_at_ns,
        "acquired_at_ns": written_at_ns, "expires_at_ns": written_at_ns, "tenure": false,
    })
    .to_string()
    .into_bytes()
}

/// Plants a holder on a clock nobody shares, holding no kernel lock, whose state never changes:
/// a hung holder on another host, expired only once seen unchanged for `duration`.
fn plant_hung_holder(path: &Path, generation: u64, duration: Duration, written_at_ns: u64) {
    lease_dir::plant(
        path,
        &Held::hung(generation, duration).name(),
        &record_written_at(written_at_ns, 1, "elsewhere"),
    );
}

#[test]
fn record_has_schema_version_owner_pid_and_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = fast(&path).build().unwrap();
    let guard = lock.acquire().unwrap();
    let g = guard.fencing_token();
    let state = held(&path);
    let r = lease_dir::description(&path);
    assert_eq!(r.version, lease_dir::SCHEMA_VERSION);
    assert_eq!(
        fnv(r.owner.as_deref().unwrap().as_bytes()),
        state.token,
        "the owner id is the one the state names"
    );
    assert_eq!(r.pid, std::process::id());
    assert!(r.written_at_ns > 0 && r.acquired_at_ns > 0);
    assert_eq!(r.generation, g.get());
    let mode = if cfg!(windows) {
        "heartbeat-only"
    } else {
        "kernel"
    };
    assert_eq!(r.protocol.as_deref(), Some(mode));
    // The lease runs for the stale threshold; renewals count in the name (`seq`).
    assert_eq!(state.duration_ns, 400_000_000);
}

// Not with `portable-paths` (lease-file's platforms page): renewals move the deadline on the shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn owners_heartbeat_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = fast(&path).build().unwrap();
    let guard = lock.acquire().unwrap();
    let before = held(&path);
    std::thread::sleep(Duration::from_millis(150));
    let after = held(&path);
    assert!(
        after.seq >= before.seq + 3,
        "renewal {} -> {}",
        before.seq,
        after.seq
    );
    assert!(
        after.deadline_ns > before.deadline_ns,
        "each renewal moves the deadline"
    );
    assert_eq!(after.generation, before.generation);
    assert!(guard.check().is_ok());
}

#[test]
fn a_stale_lease_is_taken_over_after_its_duration_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    // The holder's own duration decides (600 ms), not this contender's stale threshold (400 ms).
    plant_hung_holder(&path, 41, Duration::from_millis(600), 1);
    let lock = fast(&path).build().unwrap();
    let start = Instant::now();
    assert!(
        lock.try_acquire().unwrap_err().is_held(),
        "fresh at first sight"
    );
    let guard = lock
        .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
        .unwrap();
    let generation = guard.fencing_token();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(600), "{waited:?}");
    assert!(waited < Duration::from_millis(2000), "{waited:?}");
    assert_eq!(generation.get(), 42);
    assert_eq!(held(&path).generation, 42);
}

// Not with `portable-paths` (lease-file's platforms page): asserts the shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn wall_clock_timestamps_do_not_decide_staleness() {
    // A record stamped an hour in the future (a clock jump) is still taken over on time, and one
    // stamped in 1970 is not taken over early: only the state name standing still, timed on our
    // monotonic clock, counts.
    for written_at_ns in [1u64, u64::MAX / 2] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        plant_hung_holder(&path, 1, Duration::from_millis(400), written_at_ns);
        let lock = fast(&path).build().unwrap();
        assert!(lock.try_acquire().unwrap_err().is_held());
        let start = Instant::now();
        let _guard = lock
            .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
            .unwrap();
        assert!(start.elapsed() >= Duration::from_millis(300));
    }
    // A holder on this host's monotonic clock: its deadline decides, to the millisecond, whatever
    // its wall timestamps and however long its duration.
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.lease");
    let lock = fast(&probe).build().unwrap();
    let guard = lock.acquire().unwrap();
    let scale = held(&probe).scale;
    assert!(scale.is_some());
    guard.release().unwrap();
    let path = dir.path().join("a.lease");
    let deadline = monotonic_ns() + 500_000_000;
    let holder = Held {
        scale,
        deadline_ns: deadline,
        duration_ns: 3_600_000_000_000,
        ..Held::hung(5, Duration::ZERO)
    };
    lease_dir::plant(&path, &holder.name(), &record_written_at(1, 1, "elsewhere"));
    let lock = fast(&path).build().unwrap();
    assert!(lock.try_acquire().unwrap_err().is_held());
    let g = lock
        .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
        .unwrap();
    let at = monotonic_ns();
    assert!(at >= deadline, "not before the holder's deadline");
    assert!(at < deadline + 1_000_000_000, "soon after it");
    assert_eq!(g.fencing_token().get(), 6);
}

#[test]
fn a_fresh_lock_object_per_attempt_still_sees_staleness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    plant_hung_holder(&path, 1, Duration::from_millis(400), 1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(5);
    loop {
        let lock = fast(&path).build().unwrap();
        match lock.try_acquire() {
            Ok(_) => break,
            Err(e) if e.is_held() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(start.elapsed() >= Duration::from_millis(400));
}

#[test]
fn pids_never_decide_only_the_kernel_lock_or_time() {
    // The Go package frees a lock whose pid is dead. Here a recorded pid proves nothing (it may
    // be another host's, another namespace's, or reused): a holder described as a dead pid of
    // this very host stays held until its duration ran.
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.lease");
    let lock = fast(&probe).build().unwrap();
    let guard = lock.acquire().unwrap();
    let host = lease_dir::description(&probe).host;
    drop(guard);
    let path = dir.path().join("a.lease");
    lease_dir::plant(
        &path,
        &Held::hung(1, Duration::from_millis(400)).name(),
        &record_written_at(1, 999_999, &host),
    );
    let lock = fast(&path).build().unwrap();
    let start = Instant::now();
    assert!(lock.try_acquire().unwrap_err().is_held());
    std::thread::sleep(Duration::from_millis(200));
    assert!(lock.try_acquire().unwrap_err().is_held());
    let _guard = lock
        .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(400));
}

#[test]
fn release_is_fenced_by_ownership_and_never_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let a = fast(&path).build().unwrap();
    let guard = a.acquire().unwrap();
    let g = guard.fencing_token();
    // Only a guard releases: another lock on the path holds none, so it cannot release this
    // tenure (before guards, its `release` had to be refused at run time).
    let b = fast(&path).build().unwrap();
    assert!(b.try_acquire().unwrap_err().is_held());
    drop(b);
    assert!(guard.check().is_ok());
    assert_eq!(
        held(&path).generation,
        g.get(),
        "dropping another lock touched nothing"
    );
    guard.release().unwrap();
    assert!(
        path.is_dir(),
        "the lock directory stays, released, with its generation"
    );
    assert_eq!(lease_dir::state(&path).1, State::Free(g.get()));
    // No companions, epoch or temporary files: the lock is the directory alone.
    assert_eq!(lease_dir::entries(dir.path()), ["a.lease"]);
}

/// Unix: Windows has heartbeat-only mode alone.
#[cfg(unix)]
#[test]
fn mixed_modes_on_one_path_exclude_each_other() {
    use lease_file::{LockMode, ModePreference};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let hb = fast(&path)
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    let kernel = fast(&path).build().unwrap();
    assert_eq!(kernel.mode(), LockMode::Kernel);
    let held_hb = hb.acquire().unwrap();
    let g1 = held_hb.fencing_token();
    let err = kernel.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.holder().is_some());
    // The holder claims no kernel lock, as its state entry says.
    assert_eq!(lease_dir::state(&path).1.held().unwrap().kernel, None);
    // The heartbeat-only holder's renewals keep it live for the kernel-mode contender, which
    // gets the (unused) kernel lock but must not read that as the holder's death.
    std::thread::sleep(Duration::from_millis(600));
    assert!(kernel.try_acquire().unwrap_err().is_held());
    assert!(held_hb.check().is_ok());
    held_hb.release().unwrap();
    let held_kernel = kernel.try_acquire().unwrap();
    let g2 = held_kernel.fencing_token();
    assert!(g2 > g1);
    let err = hb.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.holder().is_some());
    // The holder holds the kernel lock, as its state entry says.
    assert!(lease_dir::state(&path).1.held().unwrap().kernel.is_some());
    held_kernel.release().unwrap();
    assert!(hb.try_acquire().unwrap().fencing_token() > g2);
}

#[test]
fn concurrent_threads_on_one_lock_object_acquire_once() {
    let dir = tempfile::tempdir().unwrap();
    let lock = fast(dir.path().join("a.lease")).build().unwrap();
    let wins = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| lock.try_acquire().ok()))
            .collect();
        // Every guard is kept until all threads are done: one lock, one holder.
        let guards: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        guards.iter().filter(|guard| guard.is_some()).count()
    });
    assert_eq!(wins, 1);
}
