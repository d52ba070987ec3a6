//! Interoperation with the Go `kit/lockfile` `PIDLock` on one path, its steps emulated here as
//! the Go package takes them: `Acquire` creates `P` with `O_EXCL` and writes a compact JSON
//! record plus a newline (`{"version":1,"ownerID":...,"pid":...,"lastHeartbeatUnixNano":...}`),
//! or reads the `P` it found and judges it; a holder rewrites `P` in place (truncate + write)
//! every 250 ms; `Release` removes `P` if it still names its owner.
//!
//! A Go lock file at `P` is held for this crate (named, waited for, never taken over or
//! touched, however stale); this crate's lock directory at `P` makes every Go `Acquire` fail.
//! Plus the two modes of this crate on one path, under load.
// Unix only: the Go PIDLock emulated with Unix pids and permission bits.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

mod lease_dir;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use lease_core::{LeaseError, WaitOptions};
use lease_dir::State;
use lease_file::{FileLock, FileLockBuilder, LockMode, ModePreference};

const GO_LABEL: &str = "Go kit/lockfile PIDLock";

fn fast(path: impl Into<std::path::PathBuf>) -> FileLockBuilder {
    FileLock::builder(path)
        .with_heartbeat_interval(Duration::from_millis(20))
        .with_stale_threshold(Duration::from_millis(200))
        .with_retry_delay(Duration::from_millis(10))
}

fn unix_nanos(at: SystemTime) -> i64 {
    i64::try_from(
        at.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

/// The record as Go's `json.Marshal` writes it, plus the newline the package appends.
fn go_record(owner: &str, pid: u32, heartbeat: SystemTime) -> Vec<u8> {
    format!(
        "{{\"version\":1,\"ownerID\":\"{owner}\",\"pid\":{pid},\"lastHeartbeatUnixNano\":{}}}\n",
        unix_nanos(heartbeat)
    )
    .into_bytes()
}

/// Go's `Acquire` when `P` is absent: `O_CREATE|O_EXCL|O_WRONLY`, mode 0644, then the record.
fn go_create(path: &Path, bytes: &[u8]) -> std::io::Result<(u64, u64)> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(bytes)?;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// What the emulated Go holder saw.
#[derive(Debug, Default)]
struct GoReport {
    /// Every time it found its file other than it left it (moved, replaced, rewritten, gone).
    violations: Vec<String>,
    heartbeats: u32,
    /// Just before it removed its file.
    released_at: Option<Instant>,
}

/// A Go `PIDLock` holder: acquires at once, heartbeats every `interval` until `hold` has passed,
/// then releases.
struct GoHolder {
    handle: JoinHandle<GoReport>,
}

impl GoHolder {
    fn start(path: &Path, owner: &str, pid: u32, interval: Duration, hold: Duration) -> Self {
        let mut last = go_record(owner, pid, SystemTime::now());
        let id = go_create(path, &last).unwrap();
        let path = path.to_owned();
        let owner = owner.to_owned();
        let handle = std::thread::spawn(move || {
            let mut report = GoReport::default();
            let check = |report: &mut GoReport, last: &[u8]| match (
                std::fs::symlink_metadata(&path),
                std::fs::read(&path),
            ) {
                (Ok(meta), Ok(bytes)) if (meta.dev(), meta.ino()) == id && bytes == last => true,
                other => {
                    report.violations.push(format!("{other:?}"));
                    false
                }
            };
            let start = Instant::now();
            while start.elapsed() < hold {
                std::thread::sleep(interval.min(hold.saturating_sub(start.elapsed())));
                if !check(&mut report, &last) {
                    return report;
                }
                // The heartbeat: the same file rewritten in place.
                last = go_record(&owner, pid, SystemTime::now());
                let mut file = OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(&path)
                    .unwrap();
                file.write_all(&last).unwrap();
                report.heartbeats += 1;
            }
            // Release: only if the file still names this owner.
            if check(&mut report, &last) {
                report.released_at = Some(Instant::now());
                std::fs::remove_file(&path).unwrap();
            }
            report
        });
        Self { handle }
    }

    fn join(self) -> GoReport {
        self.handle.join().unwrap()
    }
}

/// A pid no process has (any more).
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn assert_go_holder(err: &LeaseError, pid: u32) {
    assert!(err.is_held(), "{err}");
    let holder = err.holder().unwrap();
    assert_eq!(holder.pid(), Some(pid), "{err}");
    assert!(holder.owner().unwrap().starts_with(GO_LABEL), "{err}");
    // Not a tenure of this protocol: no fencing generation (and no kernel lock of ours).
    assert_eq!(holder.fencing_token(), None, "{err}");
}

#[test]
fn a_live_go_pidlock_is_held_waited_for_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lock");
    let pid = std::process::id();
    let go = GoHolder::start(
        &path,
        "go-owner-1",
        pid,
        Duration::from_millis(250),
        Duration::from_millis(900),
    );
    let lock = fast(&path).build().unwrap();
    let err = lock.try_acquire().unwrap_err();
    assert_go_holder(&err, pid);
    let beat = err.holder().unwrap().renewed_at().unwrap();
    assert!(beat.elapsed().unwrap_or_default() < Duration::from_secs(1));
    assert!(err.to_string().contains("go-owner-1"), "{err}");
    assert_eq!(lock.holder().unwrap().unwrap().pid(), Some(pid));
    // Waiting: held until the Go process releases, then ours.
    let guard = lock
        .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
        .unwrap();
    let g = guard.fencing_token();
    let acquired = Instant::now();
    let report = go.join();
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.heartbeats >= 3, "{report:?}");
    assert!(
        acquired >= report.released_at.unwrap(),
        "acquired only after the Go release"
    );
    assert!(path.is_dir());
    assert_eq!(
        lease_dir::state(&path).1.held().unwrap().generation,
        g.get()
    );
}

#[test]
fn a_stale_go_pidlock_is_never_taken_over_and_says_how_to_clear_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lock");
    let pid = dead_pid();
    // A Go holder that died 10 s ago: a Go contender would take it over (heartbeat older than
    // 3 s, pid dead); this crate never takes over another protocol's lock.
    let bytes = go_record(
        "go-owner-2",
        pid,
        SystemTime::now() - Duration::from_secs(10),
    );
    go_create(&path, &bytes).unwrap();
    let before = std::fs::symlink_metadata(&path).unwrap();
    let lock = fast(&path).build().unwrap();
    let err = lock.try_acquire().unwrap_err();
    assert_go_holder(&err, pid);
    let text = err.to_string();
    assert!(
        text.contains("go-owner-2") && text.contains(GO_LABEL),
        "{text}"
    );
    assert!(
        text.contains("removed by hand"),
        "says how to clear it: {text}"
    );
    let err = lock
        .acquire_with(&WaitOptions::new(Duration::from_millis(500)))
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.holder().unwrap().pid(), Some(pid));
    // The timeout leaves the holder to its last error, its source.
    let last = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        last.is_some_and(|last| last.contains("removed by hand")),
        "{err:?}"
    );
    let after = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "never rewritten");
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec()),
        (before.ino(), before.mtime(), before.mtime_nsec()),
        "never replaced or touched"
    );
    // Once removed by hand, the path is ours.
    std::fs::remove_file(&path).unwrap();
    lock.try_acquire().unwrap().release().unwrap();
}

/// Every step of a Go `Acquire` on `path`, each of which must fail while a lock directory is
/// there: the exclusive create, reading the file found to judge it, and removing it as stale
/// (`os.Remove`: unlink, then rmdir).
fn assert_go_cannot_acquire(path: &Path) {
    let before = lease_dir::entries(path);
    let record = go_record("go-owner-3", std::process::id(), SystemTime::now());
    let err = go_create(path, &record).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
    let err = std::fs::read(path).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eisdir()), "{err}");
    assert!(std::fs::remove_file(path).is_err(), "unlink");
    assert!(
        std::fs::remove_dir(path).is_err(),
        "rmdir of a non-empty directory"
    );
    let after = lease_dir::entries(path);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(
        lease_dir::parse(&after[0]).unwrap().generation(),
        lease_dir::parse(&before[0]).unwrap().generation(),
        "the state only renews meanwhile"
    );
}

fn libc_eisdir() -> i32 {
    nix::errno::Errno::EISDIR as i32
}

#[test]
fn a_go_process_can_never_acquire_while_the_lock_directory_exists() {
    let dir = tempfile::tempdir().unwrap();
    for mode in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
        let path: PathBuf = dir.path().join(format!("{mode:?}.lock"));
        let lock = fast(&path).with_mode(mode).build().unwrap();
        let guard = lock.acquire().unwrap();
        let g = guard.fencing_token();
        assert_go_cannot_acquire(&path);
        assert!(guard.check().is_ok());
        guard.release().unwrap();
        // Released, the directory stays with its generation: still never a Go lock's.
        assert_go_cannot_acquire(&path);
        assert_eq!(lease_dir::state(&path).1, State::Free(g.get()));
        assert!(lock.try_acquire().unwrap().fencing_token() > g);
    }
}

#[test]
fn a_go_lock_being_rewritten_or_removed_reads_as_held_never_as_foreign() {
    // A Go holder heartbeating far faster than its 250 ms (truncate + write, over and over) and
    // then releasing: every look this crate takes meanwhile must say held (or acquire once the
    // file is gone), never mistake a file caught between truncate and write, or removed between
    // two looks, for a foreign one.
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let path = dir.path().join(format!("{round}.lock"));
        let go = GoHolder::start(
            &path,
            "go-owner-4",
            std::process::id(),
            Duration::from_micros(50),
            Duration::from_millis(40),
        );
        let lock = fast(&path).build().unwrap();
        let mut looks = 0;
        loop {
            looks += 1;
            match lock.try_acquire() {
                Ok(_) => break,
                Err(e) if e.is_held() => {}
                Err(e) => panic!("round {round}, look {looks}: {e}"),
            }
        }
        let report = go.join();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert!(report.released_at.is_some());
        assert!(path.is_dir());
    }
}

#[test]
fn go_locks_taken_and_released_in_turn_read_as_held_never_as_foreign() {
    // Go processes taking the path in turn (create, remove, create...): between two looks of
    // this crate the file may vanish or reappear. Each look says held, or takes the path once it
    // is free; a path that keeps changing under every look may say so as a transient error.
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let path = dir.path().join(format!("{round}.lock"));
        let go_path = path.clone();
        let record = go_record("go-owner-5", std::process::id(), SystemTime::now());
        // The first Go process holds the path before this crate's first look.
        go_create(&path, &record).unwrap();
        let churn = std::thread::spawn(move || {
            let mut turns = 0;
            let start = Instant::now();
            loop {
                std::fs::remove_file(&go_path).unwrap();
                turns += 1;
                // Churns for 100 ms at most, so that this crate gets the path in the end.
                if start.elapsed() >= Duration::from_millis(100) {
                    return turns;
                }
                match go_create(&go_path, &record) {
                    Ok(_) => {}
                    // This crate's directory is there: every Go Acquire fails from now on.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return turns,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        let lock = fast(&path).build().unwrap();
        let mut looks = 0;
        loop {
            looks += 1;
            match lock.try_acquire() {
                Ok(_) => break,
                Err(e) if e.is_held() || e.is_transient() => {}
                Err(e) => panic!("round {round}, look {looks}: {e}"),
            }
        }
        let turns = churn.join().unwrap();
        assert!(turns > 0);
        assert!(path.is_dir());
    }
}

#[test]
fn mixed_modes_on_one_path_never_hold_together_and_fence_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lock");
    // Renewals every 20 ms race the releases; the 2 s threshold keeps a thread starved on a
    // loaded machine from losing a tenure by expiry, which would let the other in legitimately.
    let options = fast(&path).with_stale_threshold(Duration::from_secs(2));
    let hb = options
        .clone()
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    let kernel = options.with_mode(ModePreference::Kernel).build().unwrap();
    assert_eq!(hb.mode(), LockMode::HeartbeatOnly);
    assert_eq!(kernel.mode(), LockMode::Kernel);
    const CYCLES: u32 = 2000;
    let holders = AtomicU32::new(0);
    let cycles = AtomicU32::new(0);
    let last = Mutex::new(0u64);
    let stop = AtomicBool::new(false);
    let wins: Vec<u32> = std::thread::scope(|s| {
        let handles: Vec<_> = [&hb, &kernel]
            .into_iter()
            .map(|lock| {
                let (holders, cycles, last, stop) = (&holders, &cycles, &last, &stop);
                let (hb, kernel) = (&hb, &kernel);
                s.spawn(move || {
                    let mut mine = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        match lock.try_acquire() {
                            Ok(guard) => {
                                let token = guard.fencing_token();
                                let before = holders.fetch_add(1, Ordering::SeqCst);
                                if before != 0 {
                                    stop.store(true, Ordering::SeqCst);
                                    let other: &FileLock =
                                        if std::ptr::eq(lock, hb) { kernel } else { hb };
                                    panic!(
                                        "two holders at once: {} mode took {token} while the \
                                         other still counted (the store says {:?})",
                                        lock.mode(),
                                        other.holder()
                                    );
                                }
                                {
                                    let mut last = last.lock().unwrap();
                                    assert!(token.get() > *last, "{} after {}", token, *last);
                                    *last = token.get();
                                }
                                mine += 1;
                                // Now and then long enough for renewals to race the release.
                                if mine.is_multiple_of(64) {
                                    std::thread::sleep(Duration::from_millis(25));
                                }
                                holders.fetch_sub(1, Ordering::SeqCst);
                                guard.release().unwrap();
                                if cycles.fetch_add(1, Ordering::SeqCst) + 1 >= CYCLES {
                                    stop.store(true, Ordering::SeqCst);
                                }
                            }
                            Err(e) if e.is_held() || e.is_transient() => {}
                            Err(e) => {
                                stop.store(true, Ordering::SeqCst);
                                panic!("{e}");
                            }
                        }
                        std::thread::yield_now();
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(cycles.load(Ordering::SeqCst) >= CYCLES);
    assert!(
        wins.iter().all(|w| *w >= CYCLES / 20),
        "both modes took real turns: {wins:?}"
    );
    let last = *last.lock().unwrap();
    assert_eq!(lease_dir::state(&path).1, State::Free(last));
    assert_eq!(
        u64::from(wins.iter().sum::<u32>()),
        last,
        "one generation per acquisition"
    );
}
