//! Parity with the Go `kit/lockfile` PIDLock: the same API, options, defaults and behaviours,
//! each checked here by name; plus the races the Go package has and this one must not.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use lease_file::{FileLock, FileLockOptions, LeaseFileRecord, ModePreference};

fn fast() -> FileLockOptions {
    FileLockOptions::default()
        .with_heartbeat_interval(Duration::from_millis(20))
        .with_stale_threshold(Duration::from_millis(400))
        .with_retry_delay(Duration::from_millis(10))
}

fn record(path: &std::path::Path) -> LeaseFileRecord {
    LeaseFileRecord::parse(&std::fs::read(path).unwrap()).unwrap()
}

/// Writes a record for a holder this process can neither probe (another host) nor prove dead
/// (no tenure claim), whose heartbeat never moves: a hung holder.
fn plant_hung_holder(path: &std::path::Path, generation: u64, written_at_ns: u64) {
    let text = serde_json::json!({
        "version": 1, "owner": "hung-owner", "pid": 1, "host": "elsewhere",
        "heartbeat": 7, "generation": generation, "written_at_ns": written_at_ns,
        "acquired_at_ns": written_at_ns, "tenure": false,
    });
    std::fs::write(path, text.to_string()).unwrap();
}

#[test]
fn defaults_match_the_go_package() {
    let o = FileLockOptions::default();
    assert_eq!(o.heartbeat_interval(), Duration::from_millis(250));
    assert_eq!(o.stale_threshold(), Duration::from_secs(3));
    // kit/lockfile: defaultAcquireRetryLimit 12, defaultAcquireRetryDelay 20 ms,
    // defaultInvalidLockStaleThreshold 1200 ms.
    assert_eq!(o.acquire_retries(), 12);
    assert_eq!(o.retry_delay(), Duration::from_millis(20));
    assert_eq!(o.invalid_record_stale(), Duration::from_millis(1200));
    assert_eq!(o.file_mode(), 0o644);
    assert_eq!(o.dir_mode(), 0o755);
}

#[test]
fn record_has_schema_version_owner_pid_and_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = FileLock::with_options(&path, fast()).unwrap();
    lock.acquire().unwrap();
    let r = record(&path);
    assert_eq!(r.version, lease_file::SCHEMA_VERSION);
    assert!(r.owner.is_some());
    assert_eq!(r.pid, std::process::id());
    assert!(r.written_at_ns > 0);
    assert_eq!(r.protocol.as_deref(), Some("kernel"));
}

#[test]
fn owners_heartbeat_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = FileLock::with_options(&path, fast()).unwrap();
    lock.acquire().unwrap();
    let before = record(&path).heartbeat;
    std::thread::sleep(Duration::from_millis(150));
    let after = record(&path).heartbeat;
    assert!(after >= before + 3, "heartbeat {before} -> {after}");
    assert!(lock.held());
}

#[test]
fn a_stale_lease_is_taken_over_after_the_threshold_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    plant_hung_holder(&path, 41, 1);
    let lock = FileLock::with_options(&path, fast()).unwrap();
    let start = Instant::now();
    assert!(
        lock.try_acquire().unwrap_err().is_held(),
        "fresh at first sight"
    );
    let generation = lock.acquire_timeout(Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_millis(1500), "{waited:?}");
    assert_eq!(generation.get(), 42);
}

#[test]
fn wall_clock_timestamps_do_not_decide_staleness() {
    // A record stamped an hour in the future (a clock jump) is still taken over on time, and one
    // stamped in 1970 is not taken over early: only the heartbeat counter, timed on our
    // monotonic clock, counts.
    for written_at_ns in [1u64, u64::MAX / 2] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        plant_hung_holder(&path, 1, written_at_ns);
        let lock = FileLock::with_options(&path, fast()).unwrap();
        assert!(lock.try_acquire().unwrap_err().is_held());
        let start = Instant::now();
        lock.acquire_timeout(Duration::from_secs(5)).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(300));
    }
}

#[test]
fn a_fresh_lock_object_per_attempt_still_sees_staleness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    plant_hung_holder(&path, 1, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lock = FileLock::with_options(&path, fast()).unwrap();
        match lock.try_acquire() {
            Ok(_) => break,
            Err(e) if e.is_held() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn pid_probe_only_on_the_same_host_and_namespace() {
    // A dead pid on another host proves nothing: the lease stays held.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    plant_hung_holder(&path, 1, 1);
    let lock = FileLock::with_options(&path, fast().with_liveness(|_| false)).unwrap();
    assert!(lock.try_acquire().unwrap_err().is_held());

    // The same record from this host and namespace, with a liveness override saying dead: free.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.lease");
    let holder = FileLock::with_options(&path, fast()).unwrap();
    holder.acquire().unwrap();
    let mut r = record(&path);
    drop(holder);
    r.owner = Some("crashed".into());
    r.pid = 999_999;
    r.tenure = false;
    std::fs::write(&path, r.to_bytes()).unwrap();
    let lock = FileLock::with_options(&path, fast().with_liveness(|pid| pid != 999_999)).unwrap();
    assert!(
        lock.try_acquire().is_ok(),
        "same host + namespace + dead pid: taken over at once"
    );

    // A recorded start time that does not match the live pid's: the pid was reused.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.lease");
    let holder = FileLock::with_options(&path, fast()).unwrap();
    holder.acquire().unwrap();
    let mut r = record(&path);
    drop(holder);
    r.owner = Some("reused".into());
    r.pid = 1; // alive, but not the process that wrote the record
    r.start_time = Some(u64::MAX);
    r.tenure = false;
    std::fs::write(&path, r.to_bytes()).unwrap();
    let lock = FileLock::with_options(&path, fast()).unwrap();
    assert!(
        lock.try_acquire().is_ok(),
        "a reused pid is not a live holder"
    );
}

#[test]
fn release_is_fenced_by_ownership_and_never_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let a = FileLock::with_options(&path, fast()).unwrap();
    let b = FileLock::with_options(&path, fast()).unwrap();
    assert!(b.release().unwrap_err().is_not_held(), "never acquired");
    let g = a.acquire().unwrap();
    assert!(b.release().unwrap_err().is_not_held());
    assert!(a.held());
    a.release().unwrap();
    assert!(
        path.exists(),
        "the record stays, released, with its generation"
    );
    assert_eq!(record(&path).generation, g.get());
    assert!(dir.path().join("a.lease.lock").exists() && dir.path().join("a.lease.owner").exists());
}

#[test]
fn mixed_protocols_on_one_path_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let hb =
        FileLock::with_options(&path, fast().with_mode(ModePreference::HeartbeatOnly)).unwrap();
    hb.acquire().unwrap();
    let kernel = FileLock::with_options(&path, fast()).unwrap();
    let err = kernel.try_acquire().unwrap_err();
    assert!(err.to_string().contains("protocol"), "{err}");
    hb.release().unwrap();
    kernel.try_acquire().unwrap();
}

#[test]
fn concurrent_threads_on_one_lock_object_acquire_once() {
    let dir = tempfile::tempdir().unwrap();
    let lock = FileLock::with_options(dir.path().join("a.lease"), fast()).unwrap();
    let wins = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| lock.try_acquire().is_ok()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|won| *won)
            .count()
    });
    assert_eq!(wins, 1);
}
