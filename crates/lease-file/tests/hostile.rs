//! Hostile input placed on purpose: names planted in a lock directory, files of other protocols
//! (or of no protocol) at a lock path, a state entry deleted or a lock directory replaced under a
//! live holder, extreme option values, lock names that extend each other's.
//!
//! Whatever is planted, of any name, size or number, gives a typed error or is ignored: never a
//! panic, a spin, a second holder, or a change to a file this crate did not create.
// On Windows: every test but those that plant symbolic links or FIFOs (Windows links need a
// privilege), read Unix metadata, or are about kernel mode or a descriptor kept on a replaced
// directory; each says so.
#![cfg_attr(windows, allow(dead_code, unused_imports))]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
mod lease_dir;

#[cfg(unix)]
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_core::{LeaseError, LossReason, NotOwnedReason, WaitOptions};
use lease_file::{DirectoryStore, FileLock, FileLockBuilder, ModePreference};

/// Both modes.
#[cfg(unix)]
const MODES: &[ModePreference] = &[ModePreference::Kernel, ModePreference::HeartbeatOnly];
/// Heartbeat-only alone: Windows has no kernel mode.
#[cfg(windows)]
const MODES: &[ModePreference] = &[ModePreference::HeartbeatOnly];

fn fast(path: impl Into<std::path::PathBuf>) -> FileLockBuilder {
    FileLock::builder(path)
        .with_heartbeat_interval(Duration::from_millis(20))
        .with_stale_threshold(Duration::from_millis(300))
        .with_retry_delay(Duration::from_millis(10))
}

/// Runs `f` on a thread and fails if it neither returns nor panics within `limit`: a spinning
/// loop fails the test instead of hanging it.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The closure panicked: re-raise its panic here.
            match handle.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the closure returned without sending"),
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("still running after {limit:?}: spinning or ignoring its timeout")
        }
    }
}

/// Rounds of the races between creators: 5 under Wine, whose file operations go through
/// wineserver (20 rounds there took 2.2 and 2.7 s).
const ROUNDS: usize = if cfg!(windows) { 5 } else { 20 };

/// The names in a directory, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // Windows: the `cas` lock file every lock directory has there is no entry of the
        // protocol's.
        .filter(|name| !(cfg!(windows) && name == "cas"))
        .collect();
    names.sort();
    names
}

/// The lock directory's state entries this crate made: `free.`/`held.` names other than
/// `planted`.
fn states(dir: &Path, planted: &[String]) -> Vec<String> {
    entries(dir)
        .into_iter()
        .filter(|n| (n.starts_with("free.") || n.starts_with("held.")) && !planted.contains(n))
        .collect()
}

/// The one state entry of a lock directory nobody planted anything in (looked at again when a
/// heartbeat renamed it under the listing).
fn state(dir: &Path) -> String {
    lease_dir::state(dir).0
}

/// Field `i` of a state entry name (`held.<gen>.<seq>.<token>.<kernel>.<scale>.<deadline>.<duration>`).
fn field(name: &str, i: usize) -> &str {
    name.split('.').nth(i).unwrap()
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the scale deadlines in state names are on.
#[cfg(unix)]
fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    u64::try_from(now.tv_sec()).unwrap() * 1_000_000_000 + u64::try_from(now.tv_nsec()).unwrap()
}

/// Everything about a path that a write, a rename, a chmod or a removal would change.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    ino: u64,
    kind: String,
    mode: u32,
    len: u64,
    mtime_ns: i64,
    bytes: Option<Vec<u8>>,
    link: Option<PathBuf>,
    children: Vec<(String, Snapshot)>,
}

fn snapshot(path: &Path) -> Snapshot {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let kind = format!("{:?}", meta.file_type());
    let children = if meta.is_dir() {
        entries(path)
            .into_iter()
            .map(|n| {
                let child = snapshot(&path.join(&n));
                (n, child)
            })
            .collect()
    } else {
        Vec::new()
    };
    // Windows: no inode number or mode in std; the modification time in 100 ns units.
    #[cfg(unix)]
    let (ino, mode, mtime_ns) = (
        meta.ino(),
        meta.mode(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
    );
    #[cfg(windows)]
    let (ino, mode, mtime_ns) = (
        0,
        0,
        i64::try_from(std::os::windows::fs::MetadataExt::last_write_time(&meta)).unwrap(),
    );
    Snapshot {
        ino,
        kind,
        mode,
        len: meta.len(),
        mtime_ns,
        bytes: meta.is_file().then(|| std::fs::read(path).unwrap()),
        link: meta
            .file_type()
            .is_symlink()
            .then(|| std::fs::read_link(path).unwrap()),
        children,
    }
}

/// Names a process planting files by hand might choose that look like lease states but are not
/// in the one canonical form this crate writes (or are not state names at all).
const NOT_STATES: &[&str] = &[
    "free.007",
    "free.",
    "free.-1",
    "free.+1",
    "free.0x1",
    "free.1 ",
    "free.١",
    "free.18446744073709551616",
    "free.99999999999999999999999999999999999999",
    "free.1.done",
    "FREE.1",
    ".free.1",
    "held.garbage",
    "held.1",
    "held.0.0.00000000deadbeef.n.n.0.0",
    "held.1.0.00000000DEADBEEF.n.n.0.0",
    "held.1.0.00000000deadbeef.n.n.0.0.9",
    "held.1.0.deadbeef.n.n.0.0",
    "held.1.00.00000000deadbeef.n.n.0.0",
    "value.1.1.none",
    "data.00000000deadbeef",
    "lock",
];

/// [`NOT_STATES`] that this system can hold as names other than a state's: Windows drops a
/// name's trailing dots and spaces (`free.` and `free.1 ` are not names there), and its names
/// are case-insensitive (`FREE.1` *is* the state entry `free.1` there).
fn not_states() -> Vec<String> {
    let windows_name = |name: &str| {
        !name.ends_with('.')
            && !name.ends_with(' ')
            && !name.bytes().any(|b| b.is_ascii_uppercase())
    };
    NOT_STATES
        .iter()
        .filter(|name| !cfg!(windows) || windows_name(name))
        .map(|name| (*name).to_owned())
        .collect()
}

/// Planted names that are not canonical state names are ignored, in both modes: the lock works,
/// excludes, fences upwards, and leaves the planted files exactly as they were. (Replaces the
/// planted-epoch tests of the old protocol: its `P.cs.<n>` epochs made the next epoch
/// `u64::MAX + 1` and panicked, or wrapped and spun.)
#[test]
fn planted_state_like_names_in_a_lock_directory_are_ignored() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let setup = fast(&path).with_mode(mode).build().unwrap();
        setup.acquire().unwrap().release().unwrap();
        let mut planted: Vec<String> = not_states();
        for name in &planted {
            std::fs::write(path.join(name), b"planted").unwrap();
        }
        // A huge file under a state-like name is not read either.
        std::fs::write(path.join("held.x"), vec![b'x'; 4 << 20]).unwrap();
        planted.push("held.x".into());
        let before: Vec<Snapshot> = planted.iter().map(|n| snapshot(&path.join(n))).collect();

        let (lock, other) = within(Duration::from_secs(10), move || {
            let lock = fast(&path).with_mode(mode).build().unwrap();
            let guard = lock
                .acquire_with(&WaitOptions::new(Duration::from_secs(2)))
                .unwrap();
            let other = fast(&path).with_mode(mode).build().unwrap();
            assert!(other.try_acquire().unwrap_err().is_held(), "{mode:?}");
            (guard, other)
        });
        let first = lock.fencing_token();
        assert_eq!(first.get(), 2, "{mode:?}: continues from free.1");
        std::thread::sleep(Duration::from_millis(60)); // a few heartbeats among the junk
        assert!(lock.check().is_ok(), "{mode:?}");
        lock.release().unwrap();
        let next = other.try_acquire().unwrap();
        assert!(next.fencing_token() > first, "{mode:?}");
        next.release().unwrap();
        let path = dir.path().join("a.lease");
        assert_eq!(states(&path, &planted), ["free.3"], "{mode:?}");
        let after: Vec<Snapshot> = planted.iter().map(|n| snapshot(&path.join(n))).collect();
        assert_eq!(before, after, "{mode:?}: planted files are left alone");
    }
}

/// The directory store ignores them too.
#[test]
fn the_store_ignores_planted_state_like_names() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let key = LeaseKey::new("jobs").unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let lease = pollster::block_on(store.acquire(&key, Duration::from_secs(5))).unwrap();
        pollster::block_on(store.release_lease(&lease)).unwrap();
        let lock_dir = lease_dir::key_dir(dir.path(), &key);
        for name in not_states() {
            std::fs::write(lock_dir.join(name), b"planted").unwrap();
        }
        let (store, lease) = within(Duration::from_secs(10), move || {
            let lease = pollster::block_on(store.acquire(&key, Duration::from_secs(5))).unwrap();
            (store, lease)
        });
        assert_eq!(lease.fencing_token().get(), 2);
        let record = pollster::block_on(store.inspect(lease.key()))
            .unwrap()
            .unwrap();
        assert_eq!(record.fencing_token().map(|f| f.get()), Some(2));
        assert!(record.holder().is_some());
        pollster::block_on(store.release_lease(&lease)).unwrap();
        for name in not_states() {
            assert_eq!(std::fs::read(lock_dir.join(name)).unwrap(), b"planted");
        }
    }
}

/// A directory, a symbolic link or a regular file planted under a valid state name makes two
/// states: contenders get a clear `Hostile` error at once (no spin until their timeout), never
/// the lease; the holder keeps heartbeating; nothing planted is followed or changed.
// Unix only: plants symbolic links.
#[cfg(unix)]
#[test]
fn a_second_valid_state_entry_is_hostile_and_never_makes_a_second_holder() {
    for &mode in MODES {
        for what in ["directory", "symlink", "file"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("a.lease");
            let precious = dir.path().join("precious");
            std::fs::write(&precious, b"do not touch").unwrap();
            let holder = fast(&path)
                .with_mode(mode)
                .build()
                .unwrap()
                .acquire()
                .unwrap();
            let generation = holder.fencing_token();
            // `free.1` is the holder's own release target; `free.0` what it came from.
            let planted = match what {
                "directory" => "free.1",
                "symlink" => "held.7.0.00000000deadbeef.n.n.0.1000000000",
                _ => "free.0",
            };
            let at = path.join(planted);
            match what {
                "directory" => std::fs::create_dir(&at).unwrap(),
                "symlink" => std::os::unix::fs::symlink(&precious, &at).unwrap(),
                _ => std::fs::write(&at, b"").unwrap(),
            }
            let context = format!("{mode:?} {what} {planted}");
            let before = snapshot(&at);
            let seq_before: u64 = field(&states(&path, &[planted.into()])[0], 2)
                .parse()
                .unwrap();

            let contender = fast(&path).with_mode(mode).build().unwrap();
            let start = Instant::now();
            let (contender, got, waited) = within(Duration::from_secs(5), move || {
                let got = contender.try_acquire();
                let waited = contender.acquire_with(&WaitOptions::new(Duration::from_secs(2)));
                (contender, got, waited)
            });
            for err in [got.unwrap_err(), waited.unwrap_err()] {
                assert!(err.is_corrupt(), "{context}: {err}");
                assert!(
                    err.to_string().contains("two lease states"),
                    "{context}: {err}"
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "{context}: {:?}",
                start.elapsed()
            );

            // The holder is unaffected: its heartbeats rename its own entry.
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(holder.check().unwrap(), generation, "{context}");
            let now = states(&path, &[planted.into()]);
            let seq_now: u64 = field(&now[0], 2).parse().unwrap();
            assert!(seq_now > seq_before, "{context}: heartbeats go on: {now:?}");

            // Its release target is taken: a typed error, and the tenure abandoned (the guard
            // is gone; its kernel lock dropped, its heartbeats stopped).
            let released = if what == "directory" {
                let err = holder.release().unwrap_err();
                assert!(err.is_corrupt(), "{context}: {err}");
                None
            } else {
                Some(holder)
            };
            assert_eq!(snapshot(&at), before, "{context}: left alone");
            assert_eq!(
                std::fs::read(&precious).unwrap(),
                b"do not touch",
                "{context}"
            );
            // Removed by hand, the lock works again.
            if what == "directory" {
                std::fs::remove_dir(&at).unwrap();
            } else {
                std::fs::remove_file(&at).unwrap();
            }
            if let Some(holder) = released {
                holder.release().unwrap();
            }
            // The abandoned tenure is taken over once it expires (at once with its kernel lock).
            let next = contender
                .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
                .unwrap();
            assert!(next.fencing_token() > generation, "{context}");
            next.release().unwrap();
        }
    }
}

/// A symbolic link as the only state entry is renamed like any entry and never followed: its
/// target is never opened, written or changed.
// Unix only: plants a symbolic link.
#[cfg(unix)]
#[test]
fn a_symbolic_link_as_the_state_entry_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let precious = dir.path().join("precious");
    std::fs::write(&precious, b"do not touch").unwrap();
    std::fs::create_dir(&path).unwrap();
    std::os::unix::fs::symlink(&precious, path.join("free.0")).unwrap();
    for &mode in MODES {
        let lock = fast(&path).with_mode(mode).build().unwrap();
        let guard = lock.acquire().unwrap();
        let other = fast(&path).with_mode(mode).build().unwrap();
        assert!(other.try_acquire().unwrap_err().is_held());
        std::thread::sleep(Duration::from_millis(60));
        guard.release().unwrap();
    }
    assert_eq!(std::fs::read(&precious).unwrap(), b"do not touch");
    assert_eq!(entries(&path), ["free.2"]);
    assert!(
        std::fs::symlink_metadata(path.join("free.2"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Junk in a lock directory is ignored up to a bound, and beyond it refused with a clear
/// `Hostile` error at once: never a scan without end, never a second holder. A live holder is
/// unaffected either way (it renames its own entry without listing).
// Unix only: it plants over 10,000 files, 26 s under Wine (each a round trip to wineserver);
// the cap is counted by the same loop over either system's listing.
#[cfg(unix)]
#[test]
fn many_junk_entries_are_ignored_and_too_many_are_refused() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let holder = fast(&path)
            .with_mode(mode)
            .build()
            .unwrap()
            .acquire()
            .unwrap();
        for i in 0..500 {
            std::fs::write(path.join(format!("junk{i}")), b"").unwrap();
            std::fs::write(path.join(format!("free.0{i}")), b"").unwrap();
        }
        std::fs::create_dir(path.join("free.x")).unwrap();
        std::fs::write(path.join("held.huge"), vec![b'x'; 1 << 20]).unwrap();
        let contender = fast(&path).with_mode(mode).build().unwrap();
        let contender = within(Duration::from_secs(5), move || {
            assert!(contender.try_acquire().unwrap_err().is_held());
            contender
        });

        for i in 500..10_000 {
            std::fs::write(path.join(format!("junk{i}")), b"").unwrap();
        }
        let start = Instant::now();
        let (contender, err) = within(Duration::from_secs(10), move || {
            let err = contender
                .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
                .unwrap_err();
            (contender, err)
        });
        assert!(err.is_corrupt(), "{mode:?}: {err}");
        assert!(err.to_string().contains("entries"), "{mode:?}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{mode:?}: {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(60));
        assert!(holder.check().is_ok(), "{mode:?}");
        holder.release().unwrap();
        assert!(
            contender.try_acquire().unwrap_err().is_corrupt(),
            "{mode:?}"
        );
        assert_eq!(
            entries(&path).len(),
            10_000 + 500 + 3,
            "{mode:?}: nothing removed"
        );
    }
}

/// The top of the generation range cannot be passed: a planted `free.<u64::MAX>` gives a typed
/// error at once, and `free.<u64::MAX - 1>` one last tenure. (The old protocol's equivalent was an
/// epoch planted at the top of its range.)
#[test]
fn the_top_of_the_generation_range_gives_a_typed_error() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join(format!("free.{}", u64::MAX - 1)), b"").unwrap();
        let lock = fast(&path).with_mode(mode).build().unwrap();
        let guard = lock.acquire().unwrap();
        assert_eq!(guard.fencing_token().get(), u64::MAX);
        let other = fast(&path).with_mode(mode).build().unwrap();
        assert!(other.try_acquire().unwrap_err().is_held());
        guard.release().unwrap();
        let start = Instant::now();
        let err = within(Duration::from_secs(5), move || {
            other
                .acquire_with(&WaitOptions::new(Duration::from_secs(2)))
                .unwrap_err()
        });
        assert!(err.is_corrupt(), "{mode:?}: {err}");
        assert!(err.to_string().contains("exhausted"), "{mode:?}: {err}");
        assert!(start.elapsed() < Duration::from_secs(1), "{mode:?}");
        assert_eq!(entries(&path), [format!("free.{}", u64::MAX)]);
    }
}

/// A held state from a clock this process does not share (another host) is timed by
/// observation: `acquire_with` returns at its timeout when that is shorter than the holder's
/// duration, without spinning. (Replaces the old stuck-critical-section test.)
#[test]
fn acquire_with_is_honoured_while_a_holder_elsewhere_holds() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("held.1.0.00000000000000aa.n.n.0.3000000000"), b"").unwrap();
        let lock = fast(&path)
            .with_mode(mode)
            .with_heartbeat_interval(Duration::from_millis(200))
            .with_stale_threshold(Duration::from_secs(3))
            .build()
            .unwrap();
        let start = Instant::now();
        let err = within(Duration::from_secs(10), move || {
            lock.acquire_with(&WaitOptions::new(Duration::from_millis(300)))
                .unwrap_err()
        });
        let waited = start.elapsed();
        assert!(err.is_timeout(), "{mode:?}: {err}");
        assert_eq!(
            err.holder()
                .and_then(|h| h.fencing_token())
                .map(|f| f.get()),
            Some(1)
        );
        assert!(
            waited < Duration::from_millis(1000),
            "{mode:?}: waited {waited:?}"
        );
    }
}

/// A holder whose clock this process does not share is taken over once its state has stood
/// still for its whole duration on this process's monotonic clock, and not at first sight, every
/// time. (Replaces the old test of a stuck epoch reclaimed after exactly the stale threshold.)
// Unix only: a holder on this host's shared scale (CLOCK_MONOTONIC).
#[cfg(unix)]
#[test]
fn a_holder_on_another_clock_is_taken_over_after_its_duration_by_observation() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..100 {
        let path = dir.path().join(format!("a{round}.lease"));
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("held.1.0.00000000000000aa.n.n.0.5000000"), b"").unwrap();
        let mode = MODES[round % MODES.len()];
        let lock = fast(&path).with_mode(mode).build().unwrap();
        let err = lock.try_acquire().unwrap_err();
        assert!(err.is_held(), "round {round}: first sight: {err}");
        std::thread::sleep(Duration::from_millis(6));
        let guard = lock
            .try_acquire()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(guard.fencing_token().get(), 2);
        guard.release().unwrap();
    }
}

fn go_record(pid: u32) -> Vec<u8> {
    format!(
        r#"{{"version":1,"ownerID":"go-owner","pid":{pid},"lastHeartbeatUnixNano":1700000000000000000}}"#
    )
    .into_bytes()
}

/// What sits at a lock path instead of a lock directory, in both modes: a Go `kit/lockfile`
/// `PIDLock` record (or its empty file, between create and write) counts as held by it; a
/// lease-file 0.1 record, garbage or a huge file is `Foreign`; a symbolic link, FIFO or a
/// directory that holds no state is `Hostile`. No panic, no hang, and nothing is modified,
/// followed or created next to it.
// Unix only: plants symbolic links and FIFOs.
#[cfg(unix)]
#[test]
fn files_at_the_lock_path_give_typed_errors_and_are_never_modified() {
    let cases: [(&str, &str); 11] = [
        ("go pidlock", "held"),
        ("empty file", "held"),
        ("0.1 record", "foreign"),
        ("0.1 held record", "foreign"),
        ("garbage", "foreign"),
        ("huge", "foreign"),
        ("symlink", "hostile"),
        ("dangling symlink", "hostile"),
        ("fifo", "hostile"),
        ("empty directory", "hostile"),
        ("unrelated directory", "hostile"),
    ];
    for &mode in MODES {
        for (what, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("a.lease");
            let precious = dir.path().join("precious");
            std::fs::write(&precious, b"do not touch").unwrap();
            match what {
                "go pidlock" => std::fs::write(&path, go_record(4242)).unwrap(),
                "empty file" => std::fs::write(&path, b"").unwrap(),
                "0.1 record" => {
                    std::fs::write(&path, br#"{"version":1,"pid":7,"generation":3}"#).unwrap()
                }
                "0.1 held record" => std::fs::write(
                    &path,
                    br#"{"version":1,"owner":"x","pid":7,"host":"h","generation":3,"tenure":true}"#,
                )
                .unwrap(),
                "garbage" => std::fs::write(&path, b"\x00\xff{\"version\":1,").unwrap(),
                "huge" => std::fs::write(&path, vec![b' '; 4 << 20]).unwrap(),
                "symlink" => std::os::unix::fs::symlink(&precious, &path).unwrap(),
                "dangling symlink" => {
                    std::os::unix::fs::symlink("/nonexistent/lock", &path).unwrap();
                }
                "fifo" => {
                    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644))
                        .unwrap()
                }
                "empty directory" => std::fs::create_dir(&path).unwrap(),
                _ => {
                    std::fs::create_dir(&path).unwrap();
                    std::fs::write(path.join("notes.txt"), b"mine").unwrap();
                }
            }
            // Planted long ago: an unparseable file younger than the Go package's
            // invalid-record threshold may be a Go lock being written, and reads as held.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                let old = std::time::SystemTime::now() - Duration::from_secs(3600);
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(old)
                    .unwrap();
            }
            let before = snapshot(dir.path());
            let context = format!("{mode:?} {what}");
            let (result, waited, holder) = {
                let path = path.clone();
                within(Duration::from_secs(5), move || {
                    let lock = fast(&path).with_mode(mode).build().unwrap();
                    let got = lock.try_acquire();
                    let waited = lock.acquire_with(&WaitOptions::new(Duration::from_millis(50)));
                    (got, waited, lock.holder())
                })
            };
            let err = match result {
                Ok(_) => panic!("{context}: acquired"),
                Err(e) => e,
            };
            let waited = match waited {
                Ok(_) => panic!("{context}: acquired by waiting"),
                Err(e) => e,
            };
            // Waiting for a foreign holder times out; anything else is refused at once.
            assert_eq!(
                waited.is_timeout(),
                expected == "held",
                "{context}: {waited}"
            );
            match expected {
                "held" => {
                    assert!(err.is_held(), "{context}: {err}");
                    let info = err.holder().unwrap();
                    // Not a tenure of this protocol (no generation, no kernel lock of ours),
                    // described by what is known of it.
                    assert_eq!(info.fencing_token(), None, "{context}");
                    assert!(info.owner().is_some(), "{context}");
                    if what == "go pidlock" {
                        assert_eq!(info.pid(), Some(4242), "{context}");
                        assert!(err.to_string().contains("go-owner"), "{context}: {err}");
                    }
                    assert_eq!(
                        holder.unwrap().map(|h| h.pid()),
                        Some(info.pid()),
                        "{context}: holder() agrees"
                    );
                }
                "foreign" => {
                    assert!(err.is_foreign(), "{context}: {err}");
                    assert!(holder.unwrap_err().is_foreign(), "{context}");
                }
                _ => {
                    assert!(err.is_corrupt(), "{context}: {err}");
                    assert!(holder.unwrap_err().is_corrupt(), "{context}");
                }
            }
            assert!(
                err.to_string().contains("a.lease"),
                "{context}: names the path: {err}"
            );
            assert_eq!(
                snapshot(dir.path()),
                before,
                "{context}: nothing modified or created"
            );

            // The store: a Go lock file at a key's path is held by it, the rest are errors.
            let key = LeaseKey::new("a").unwrap();
            let store = DirectoryStore::builder(dir.path())
                .with_mode(mode)
                .build()
                .unwrap();
            assert_eq!(lease_dir::key_dir(dir.path(), &key), path);
            let err = within(Duration::from_secs(5), move || {
                pollster::block_on(store.try_acquire(
                    &key,
                    Duration::from_secs(5),
                    &AcquireOptions::default(),
                ))
                .unwrap_err()
            });
            // The same vocabulary as the lock's, just above.
            match expected {
                "held" => assert!(err.is_held(), "store {context}: {err}"),
                "foreign" => assert!(err.is_foreign(), "store {context}: {err:?}"),
                _ => assert!(err.is_corrupt(), "store {context}: {err:?}"),
            }
            assert!(!err.is_transient(), "store {context}: {err:?}");
            assert_eq!(
                std::fs::read(&precious).unwrap(),
                b"do not touch",
                "{context}"
            );
        }
    }
}

/// Once the Go process removes its lock file, the path is free for this crate.
#[test]
fn a_go_lock_file_removed_by_its_owner_frees_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    std::fs::write(&path, go_record(4242)).unwrap();
    let lock = fast(&path).build().unwrap();
    assert!(lock.try_acquire().unwrap_err().is_held());
    std::fs::remove_file(&path).unwrap();
    let guard = lock.try_acquire().unwrap();
    assert_eq!(guard.fencing_token().get(), 1);
    assert!(path.is_dir());
    guard.release().unwrap();
}

/// The state entry deleted by hand (or by a cleaner) under a live holder: contenders get a clear
/// `Hostile` error, before and after the holder's deadline, in both modes; nobody ever takes the
/// lease over or writes a state in its place; the holder stops trusting its tenure at its
/// deadline. (In kernel mode the holder's kernel lock is free by then: it is not read as the
/// holder's death.)
#[test]
fn a_state_entry_deleted_under_a_live_holder_is_never_taken_over() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let (tx, rx) = mpsc::channel();
        let holder = fast(&path)
            .with_mode(mode)
            .on_lost(move |reason| {
                let _ = tx.send(reason.clone());
            })
            .build()
            .unwrap()
            .acquire()
            .unwrap();
        let name = state(&path);
        std::fs::remove_file(path.join(&name)).unwrap();
        let deleted = Instant::now();
        let contender = fast(&path).with_mode(mode).build().unwrap();
        let contender = within(Duration::from_secs(5), move || {
            let err = contender
                .acquire_with(&WaitOptions::new(Duration::from_secs(2)))
                .unwrap_err();
            assert!(err.is_corrupt(), "{err}");
            assert!(err.to_string().contains("missing"), "{err}");
            contender
        });
        // The holder's tenure ends by its deadline (300 ms stale threshold), as untrusted.
        let reason = rx.recv_timeout(Duration::from_secs(2)).unwrap();
        assert!(
            matches!(
                reason,
                LossReason::BackendFailing { .. } | LossReason::DeadlinePassed
            ),
            "{mode:?}: {reason}"
        );
        assert!(deleted.elapsed() < Duration::from_secs(1), "{mode:?}");
        assert!(holder.check().is_err());
        // Past the holder's deadline, with its kernel lock let go: still refused.
        std::thread::sleep(Duration::from_millis(400));
        for _ in 0..3 {
            let err = contender.try_acquire().unwrap_err();
            assert!(err.is_corrupt(), "{mode:?}: {err}");
        }
        assert!(entries(&path).is_empty(), "{mode:?}: nobody wrote a state");
        assert!(holder.release().unwrap_err().is_not_owned());
        // Removed by hand, the path starts afresh (on Windows with its `cas` file).
        #[cfg(windows)]
        std::fs::remove_file(path.join("cas")).unwrap();
        std::fs::remove_dir(&path).unwrap();
        let guard = contender.try_acquire().unwrap();
        assert_eq!(guard.fencing_token().get(), 1);
        guard.release().unwrap();
    }
}

/// Makes a copy of a lock directory at `to`: its state entry's name and content, in a new
/// directory (a restore from backup, an `rsync`), read together even while a heartbeat renames
/// the entry.
fn copy_dir(from: &Path, to: &Path) {
    let (name, _, bytes) = lease_dir::state_with_content(from);
    std::fs::create_dir(to).unwrap();
    std::fs::write(to.join(name), bytes).unwrap();
}

/// The lock directory renamed away and a fresh one created at the path under a live holder: the
/// contender on the fresh directory may acquire it (a new directory starts the generations
/// afresh), but the old holder learns at its next heartbeat that its tenure is over, long before
/// its deadline, and renews nothing after that.
// Unix only: the holder's descriptor is of the replaced directory (Windows goes by path: `lock::a_replaced_lock_directory_keeps_its_holder_on_windows_and_is_never_held_twice`).
#[cfg(unix)]
#[test]
fn a_lock_directory_replaced_under_a_live_holder_ends_its_tenure_at_the_next_heartbeat() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let moved = dir.path().join("a.lease.moved");
        let (tx, rx) = mpsc::channel();
        let stale = Duration::from_secs(2);
        let holder = fast(&path)
            .with_mode(mode)
            .with_heartbeat_interval(Duration::from_millis(50))
            .with_stale_threshold(stale)
            .on_lost(move |reason| {
                let _ = tx.send((Instant::now(), reason.clone()));
            })
            .build()
            .unwrap()
            .acquire()
            .unwrap();
        let g1 = holder.fencing_token();
        std::thread::sleep(Duration::from_millis(120));
        if mode == ModePreference::Kernel {
            assert_ne!(
                field(&state(&path), 4),
                "n",
                "the holder holds the kernel lock"
            );
        }
        let replaced = Instant::now();
        std::fs::rename(&path, &moved).unwrap();
        let at_replacement = state(&moved);
        let contender = fast(&path).with_mode(mode).build().unwrap();
        let contender = contender.try_acquire().unwrap();
        assert_eq!(contender.fencing_token().get(), 1, "{mode:?}");

        let (lost_at, reason) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            matches!(reason, LossReason::NotOwned(NotOwnedReason::Missing)),
            "{mode:?}: {reason}"
        );
        // Learnt by the next heartbeat, 50 ms apart; its deadline was at least 1.8 s away.
        let overlap = lost_at - replaced;
        assert!(
            overlap < Duration::from_millis(1000),
            "{mode:?}: {overlap:?}"
        );
        assert!(holder.check().unwrap_err().is_not_owned());
        // At most one renewal was in flight at the replacement; none after the loss.
        let last = state(&moved);
        let seq = |name: &str| field(name, 2).parse::<u64>().unwrap();
        assert!(
            seq(&last) <= seq(&at_replacement) + 1,
            "{mode:?}: {at_replacement} then {last}"
        );
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(state(&moved), last, "{mode:?}: no heartbeat after the loss");
        // The old holder's release touches neither directory.
        assert!(holder.release().unwrap_err().is_not_owned());
        assert_eq!(state(&moved), last);
        assert!(contender.check().is_ok());
        assert_eq!(field(&state(&path), 1), "1");
        contender.release().unwrap();
        assert_eq!(g1.get(), 1);
    }
}

/// A copy of a live holder's lock directory put in its place (a restore from backup) names the
/// holder's kernel lock on *another* directory: a kernel-mode contender gets the copy's kernel
/// lock at once but never reads that as the holder's death; it takes over only after the
/// copied deadline. The holder learns at its next heartbeat.
// Unix only: kernel mode.
#[cfg(unix)]
#[test]
fn a_restored_copy_of_a_lock_directory_is_not_mistaken_for_a_dead_holder() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let (tx, rx) = mpsc::channel();
        let holder = fast(&path)
            .with_mode(mode)
            .with_heartbeat_interval(Duration::from_millis(50))
            .with_stale_threshold(Duration::from_millis(600))
            .on_lost(move |reason| {
                let _ = tx.send(reason.clone());
            })
            .build()
            .unwrap()
            .acquire()
            .unwrap();
        let g1 = holder.fencing_token();
        std::thread::sleep(Duration::from_millis(60));
        let copy = dir.path().join("a.lease.copy");
        copy_dir(&path, &copy);
        std::fs::rename(&path, dir.path().join("a.lease.old")).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        let copied = state(&path);
        let deadline_ns: u64 = field(&copied, 6).parse().unwrap();

        let contender = fast(&path).with_mode(mode).build().unwrap();
        let err = contender.try_acquire().unwrap_err();
        assert!(err.is_held(), "{mode:?}: {err}");
        assert!(err.holder().is_some(), "{mode:?}");
        // The copied state still claims the holder's kernel lock (of the old directory) in
        // kernel mode.
        assert_eq!(
            field(&state(&path), 4) != "n",
            mode == ModePreference::Kernel,
            "{mode:?}"
        );
        let reason = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            matches!(
                reason,
                LossReason::NotOwned(NotOwnedReason::TakenOver | NotOwnedReason::Missing)
            ),
            "{mode:?}: {reason}"
        );
        let (contender, got) = within(Duration::from_secs(5), move || {
            let got = contender.acquire_with(&WaitOptions::new(Duration::from_secs(3)));
            (contender, got)
        });
        let at = monotonic_ns();
        let got = got.unwrap();
        assert!(got.fencing_token() > g1, "{mode:?}");
        assert!(
            at >= deadline_ns,
            "{mode:?}: taken over before the copied deadline"
        );
        got.release().unwrap();
        drop(contender);
    }
}

fn invalid_option(result: Result<FileLock, LeaseError>, option: &str) {
    match result {
        Err(LeaseError::InvalidInput { field: named, .. }) => {
            assert_eq!(named, option);
        }
        Err(other) => panic!("{option}: {other}"),
        Ok(_) => panic!("{option}: accepted"),
    }
}

/// Every `Duration` option beyond `lease_core::MAX_LEASE_DURATION` is `InvalidOption` naming
/// it, and so is zero where it means nothing (heartbeat interval, stale threshold); the largest
/// accepted values work. (Before issue 9, `Duration::MAX` options panicked on overflow.)
#[test]
fn extreme_lock_options_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let open = |options: FileLockBuilder| {
        within(Duration::from_secs(5), move || {
            let lock = options.build()?;
            // Acquire, so a bad value reaches the arithmetic it feeds.
            lock.try_acquire()?.release()?;
            Ok(lock)
        })
    };
    for extreme in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_secs(1 << 40),
    ] {
        invalid_option(
            open(FileLock::builder(&path).with_heartbeat_interval(extreme)),
            "heartbeat_interval",
        );
        invalid_option(
            open(FileLock::builder(&path).with_stale_threshold(extreme)),
            "stale_threshold",
        );
        invalid_option(
            open(FileLock::builder(&path).with_retry_delay(extreme)),
            "retry_delay",
        );
    }
    invalid_option(
        open(FileLock::builder(&path).with_heartbeat_interval(Duration::ZERO)),
        "heartbeat_interval",
    );
    invalid_option(
        open(
            FileLock::builder(&path)
                .with_heartbeat_interval(Duration::from_millis(1))
                .with_stale_threshold(Duration::ZERO),
        ),
        "stale_threshold",
    );
    // Zero means something for the retry delay: retry at once.
    open(fast(&path).with_retry_delay(Duration::ZERO)).unwrap();
    // The largest accepted values work (no overflow anywhere on the way), in both modes.
    let max = lease_core::MAX_LEASE_DURATION;
    for &mode in MODES {
        open(
            FileLock::builder(&path)
                .with_mode(mode)
                .with_heartbeat_interval(max / 2)
                .with_stale_threshold(max)
                .with_retry_delay(max),
        )
        .unwrap();
    }
    // acquire_with takes any timeout.
    let lock = fast(&path).build().unwrap();
    let _guard = lock.acquire_with(&WaitOptions::new(Duration::MAX)).unwrap();
    let other = fast(&path).build().unwrap();
    // A zero timeout is one attempt, refused as held, as a guard's zero wait is.
    assert!(
        other
            .acquire_with(&WaitOptions::new(Duration::ZERO))
            .unwrap_err()
            .is_held()
    );
    // A path that names no file is an invalid option, not a panic.
    invalid_option(fast("/").build(), "path");
    invalid_option(fast("a/..").build(), "path");
}

/// Issue 22 item 9: a lock name of up to 255 bytes (the file system's limit) works (before, a
/// name of 233-255 bytes failed with `ENAMETOOLONG` naming an internal temporary path, as a
/// backend failure), and a longer one is `InvalidInput` naming the limit, refused by `build`
/// before anything is created.
#[test]
fn lock_names_up_to_the_limit_work_and_longer_ones_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    for len in [232, 233, 250, 255] {
        let path = dir.path().join("x".repeat(len));
        let lock = fast(&path).build().unwrap();
        let guard = within(Duration::from_secs(5), move || lock.try_acquire().unwrap());
        guard.release().unwrap();
        assert!(path.is_dir(), "{len}");
        std::fs::remove_dir_all(&path).unwrap();
    }
    let err = fast(dir.path().join("x".repeat(256))).build().unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("255"), "{err}");
    assert!(entries(dir.path()).is_empty());
}

/// A safety margin that leaves nothing of a lease to trust is `LeaseError::InvalidInput` naming
/// `safety_margin`, and nothing is written. (Before issue 9 it was accepted and every lease came
/// back with a deadline already passed.)
#[test]
fn extreme_store_options_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let key = LeaseKey::new("jobs").unwrap();
    let duration = Duration::from_secs(5);
    for margin in [Duration::MAX, duration, Duration::from_secs(1 << 40)] {
        let store = DirectoryStore::builder(dir.path())
            .with_safety_margin(margin)
            .build()
            .unwrap();
        let err = pollster::block_on(store.acquire(&key, duration)).unwrap_err();
        assert!(err.is_invalid_input(), "{margin:?}: {err}");
        assert!(err.to_string().contains("safety_margin"), "{err}");
        assert!(pollster::block_on(store.inspect(&key)).unwrap().is_none());
    }
    // Zero: trust the whole lease.
    let store = DirectoryStore::builder(dir.path())
        .with_safety_margin(Duration::ZERO)
        .build()
        .unwrap();
    let lease = pollster::block_on(store.acquire(&key, duration)).unwrap();
    // Renewing with a margin that eats the lease is refused too.
    let eager = DirectoryStore::builder(dir.path())
        .with_safety_margin(Duration::MAX)
        .build()
        .unwrap();
    let err = pollster::block_on(eager.renew(&lease, duration)).unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    pollster::block_on(store.release_lease(&lease)).unwrap();
}

/// A clock at the end of time gives an error, not a panic.
#[test]
fn a_clock_at_the_end_of_time_is_an_error_not_a_panic() {
    #[derive(Debug)]
    struct EndOfTime;
    impl lease_core::Clock for EndOfTime {
        fn now(&self) -> std::time::SystemTime {
            // The last representable instant: any `now + duration` overflows. Its second differs
            // by system (Unix: `i64::MAX` seconds after the epoch; Windows: 2^64 100 ns ticks
            // after 1601), so it is searched for.
            let epoch = std::time::SystemTime::UNIX_EPOCH;
            let (mut lo, mut hi) = (0u64, i64::MAX as u64);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if epoch.checked_add(Duration::from_secs(mid)).is_some() {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let last = epoch + Duration::from_secs(lo);
            (1..=999_999_999u32)
                .rev()
                .step_by(100)
                .find_map(|ns| last.checked_add(Duration::from_nanos(u64::from(ns))))
                .unwrap_or(last)
        }
        fn monotonic(&self) -> Instant {
            Instant::now()
        }
        fn sleep(&self, duration: Duration) -> lease_core::BoxFuture<'static, ()> {
            lease_core::SystemClock.sleep(duration)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let key = LeaseKey::new("jobs").unwrap();
    let store = DirectoryStore::builder(dir.path())
        .with_clock(Arc::new(EndOfTime))
        .build()
        .unwrap();
    let err = within(Duration::from_secs(5), move || {
        pollster::block_on(store.acquire(&key, Duration::from_secs(5)))
    })
    .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("clock"), "{err}");
}

/// Locks whose names extend one another's (`a`, `a.b`, `a.init`, `a.init.x`) are created, all
/// at once from many threads, as separate directories: a temporary directory is
/// `.<name>.init.<16 hex>`, so two names' temporaries can never be the same name, and nothing
/// ever removes another lock's temporary. Temporaries left by a crashed creator stay where they
/// are (and are never taken for a lock); a successful creation leaves none of its own.
#[test]
fn locks_whose_names_extend_each_other_never_share_temporary_names() {
    let names = ["a", "a.b", "a.init", "a.init.x", "a.init.0123456789abcdef"];
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        // Temporaries crashed creators of `a`, `a.b`, `a.init.x` and `a.init` left behind
        // (the first is also the name of the lock `a.init.0123456789abcdef` with a dot
        // before it): none of them is a lock, none is ever removed.
        let crashed = [
            ".a.init.0123456789abcdef",
            ".a.b.init.0123456789abcdef",
            ".a.init.x.init.0123456789abcdef",
            ".a.init.init.0123456789abcdef",
        ];
        for name in crashed {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("free.0"), b"").unwrap();
        }
        let before: Vec<Snapshot> = crashed
            .iter()
            .map(|n| snapshot(&dir.path().join(n)))
            .collect();
        let threads = names.len() * 3;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let path = dir.path().join(names[i % names.len()]);
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let mode = MODES[i % MODES.len()];
                    let lock = fast(&path).with_mode(mode).build().unwrap();
                    barrier.wait();
                    let got = lock.try_acquire();
                    // Hold until every thread has tried.
                    barrier.wait();
                    got.map(|g| {
                        let fencing = g.fencing_token().get();
                        g.release().unwrap();
                        fencing
                    })
                    .map_err(|e| e.to_string())
                })
            })
            .collect();
        let results: Vec<Result<u64, String>> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        for (i, name) in names.iter().enumerate() {
            let mine: Vec<_> = results.iter().skip(i).step_by(names.len()).collect();
            // One holder per name: the others were told it is held (by their own name's).
            let won: Vec<_> = mine.iter().filter(|r| r.is_ok()).collect();
            assert_eq!(won, [&&Ok(1)], "round {round} {name}: {mine:?}");
            assert!(
                mine.iter().all(|r| r.as_ref().is_ok_and(|_| true)
                    || r.as_ref().is_err_and(|e| e.contains("is held by"))),
                "round {round} {name}: {mine:?}"
            );
            let path = dir.path().join(name);
            assert_eq!(
                entries(&path),
                ["free.1"],
                "round {round} {name}: its own directory"
            );
        }
        let after: Vec<Snapshot> = crashed
            .iter()
            .map(|n| snapshot(&dir.path().join(n)))
            .collect();
        assert_eq!(
            before, after,
            "round {round}: crashed temporaries left alone"
        );
        let mut expected: Vec<String> = names
            .iter()
            .map(|n| (*n).to_owned())
            .chain(crashed.iter().map(|n| (*n).to_owned()))
            .collect();
        expected.sort();
        assert_eq!(
            entries(dir.path()),
            expected,
            "round {round}: no temporary left"
        );
    }
}

/// Many processes' worth of creators of one lock at once: one directory, one holder, no
/// temporary left.
#[test]
fn concurrent_creators_of_one_lock_make_one_directory_and_one_holder() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lease");
        let barrier = Arc::new(Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let lock = fast(&path)
                        .with_mode(MODES[i % MODES.len()])
                        .build()
                        .unwrap();
                    barrier.wait();
                    let got = lock.try_acquire();
                    // Hold until everyone has tried (then the drop releases).
                    barrier.wait();
                    got.map(|g| g.fencing_token().get())
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
        assert_eq!(won, [&Ok(1)], "round {round}: {results:?}");
        assert_eq!(entries(dir.path()), ["a.lease"], "round {round}");
        assert_eq!(entries(&path), ["free.1"], "round {round}");
    }
}

/// The store's lock directories of keys `a`, `a`/`b` and `a.b` and the fenced value of `a`
/// never share a name, nor a temporary's.
#[test]
fn store_keys_that_extend_each_other_are_separate_directories() {
    use lease_core::FencedValues;
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::open(dir.path()).unwrap();
    let keys = [
        LeaseKey::new("a").unwrap(),
        LeaseKey::with_sort_key("a", "b").unwrap(),
        LeaseKey::new("a.b").unwrap(),
        LeaseKey::new("a.lease").unwrap(),
    ];
    let leases: Vec<_> = keys
        .iter()
        .map(|k| pollster::block_on(store.acquire(k, Duration::from_secs(5))).unwrap())
        .collect();
    pollster::block_on(store.put_fenced(&keys[0], lease_core::backend::fencing_token(1), b"v"))
        .unwrap();
    assert!(leases.iter().all(|l| l.fencing_token().get() == 1));
    assert_eq!(
        entries(dir.path()).len(),
        keys.len() + 1,
        "{:?}",
        entries(dir.path())
    );
    for lease in &leases {
        pollster::block_on(store.release_lease(lease)).unwrap();
    }
    assert!(entries(dir.path()).iter().all(|n| !n.starts_with('.')));
    assert_eq!(store.keys().unwrap().len(), keys.len());
}

/// CPU time of the calling thread.
#[cfg(unix)]
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::new(
        u64::try_from(t.tv_sec()).unwrap(),
        u32::try_from(t.tv_nsec()).unwrap(),
    )
}

/// A state that says its holder holds the kernel lock of *another* directory (a restored copy;
/// here planted, from a clock this process does not share) leaves this directory's kernel lock
/// free, and free proves nothing. A kernel-mode waiter must then look again every
/// `retry_delay`: it used to block for the kernel lock again at once, get it at once, find the
/// holder still not provably gone, and go round without ever sleeping, a core at 100 % until the
/// holder's duration had passed.
// Unix only: kernel mode.
#[cfg(unix)]
#[test]
fn waiting_for_a_holder_whose_kernel_lock_is_elsewhere_does_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(
        path.join("held.1.0.00000000000000aa.00000000000000ff.n.0.1000000000"),
        b"",
    )
    .unwrap();
    let lock = fast(&path)
        .with_mode(ModePreference::Kernel)
        .build()
        .unwrap();
    let (got, waited, cpu) = within(Duration::from_secs(10), move || {
        let start = Instant::now();
        let cpu = thread_cpu();
        let got = lock
            .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
            .map(|g| g.fencing_token().get());
        (got, start.elapsed(), thread_cpu() - cpu)
    });
    assert_eq!(got.unwrap(), 2);
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    // Polling every 10 ms costs a few milliseconds; the spin took all the CPU it was given.
    assert!(
        cpu < Duration::from_millis(80),
        "{cpu:?} of CPU to wait {waited:?}: spinning"
    );
}

/// A kernel-mode waiter that gave up never keeps the kernel lock. `acquire_with` waits for a
/// holder's kernel lock on a thread blocked in `flock`; that thread used to outlive the call, get
/// the lock when the holder let it go, and keep it for as long as the `FileLock` lived: from
/// whoever held the lease next after a timeout (so their crash would not be noticed at once),
/// and from this very lock's tenure after taking over a hung holder (its heartbeat could never
/// take the kernel lock it is meant to pick up once the hung holder lets go).
// Unix only: kernel mode.
#[cfg(unix)]
#[test]
fn a_waiter_that_gave_up_never_keeps_the_kernel_lock() {
    let kernel = |path| fast(path).with_mode(ModePreference::Kernel);
    let holds_kernel_lock = |path: &Path| {
        let name = state(path);
        name.starts_with("held.") && field(&name, 4) != "n"
    };

    // After a timeout.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let holder = kernel(&path).build().unwrap().acquire().unwrap();
    let waiter = kernel(&path).build().unwrap();
    let err = waiter
        .acquire_with(&WaitOptions::new(Duration::from_millis(100)))
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    holder.release().unwrap();
    std::thread::sleep(Duration::from_millis(50)); // a waiting thread would have the lock now
    let next = kernel(&path).build().unwrap().try_acquire().unwrap();
    assert!(
        holds_kernel_lock(&path),
        "after a timeout: {}",
        state(&path)
    );
    next.release().unwrap();
    drop(waiter);

    // After taking over a hung holder: one that keeps the kernel lock of this very directory
    // (here, this test) but renews nothing, on a clock not shared with us.
    let path = dir.path().join("b.lease");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(
        path.join("held.1.0.00000000000000aa.00000000000000ff.n.0.300000000"),
        b"",
    )
    .unwrap();
    let hung = std::fs::File::open(&path).unwrap();
    hung.lock().unwrap();
    let taker = kernel(&path)
        .build()
        .unwrap()
        .acquire_with(&WaitOptions::new(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(taker.fencing_token().get(), 2);
    assert!(!holds_kernel_lock(&path), "the hung holder still has it");
    drop(hung);
    let until = Instant::now() + Duration::from_secs(2);
    while !holds_kernel_lock(&path) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        holds_kernel_lock(&path),
        "the new owner's heartbeat never got the kernel lock: {}",
        state(&path)
    );
    assert!(taker.check().is_ok());
    taker.release().unwrap();
}
