//! Fenced values on the directory store: their namespace, hostile files, and racing writers.
// On Windows: every test but the hostile files' (symbolic links and FIFOs, read through Unix
// metadata) and the kernel mode's race.
#![cfg_attr(windows, allow(dead_code, unused_imports))]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
mod lease_dir;

#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lease_core::{
    FencedValues, FencingToken, LeaseBackend, LeaseError, LeaseKey, LeaseListing,
    MAX_FENCED_VALUE_BYTES, NotOwnedReason,
};
use lease_file::{DirectoryStore, MAX_FENCED_FILE_BYTES, ModePreference};
use pollster::block_on;

/// Prefix of fenced-value directories on disk (the store's private encoding, which these tests
/// plant and inspect files in).
const FENCED_PREFIX: &str = "fenced~";

/// Both modes (Windows has heartbeat-only alone).
#[cfg(unix)]
const MODES: &[ModePreference] = &[ModePreference::Kernel, ModePreference::HeartbeatOnly];
/// Heartbeat-only alone: Windows has no kernel mode.
#[cfg(windows)]
const MODES: &[ModePreference] = &[ModePreference::HeartbeatOnly];

fn t(n: u64) -> FencingToken {
    lease_core::backend::fencing_token(n)
}

/// A fenced value's directory: the prefix, then the key encoded as its lock directory's name
/// is, without the `.lease` suffix.
fn fenced_path(store: &Path, name: &LeaseKey) -> PathBuf {
    let lock_dir = lease_dir::key_dir(store, name);
    let stem = lock_dir.file_name().unwrap().to_str().unwrap();
    let stem = stem.strip_suffix(".lease").unwrap();
    store.join(format!("{FENCED_PREFIX}{stem}"))
}

#[test]
fn list_partition_never_returns_fenced_values_and_leases_are_independent() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let key = LeaseKey::with_sort_key("jobs", "nightly").unwrap();
        block_on(store.put_fenced(&key, t(50), b"progress")).unwrap();
        block_on(store.put_fenced(&LeaseKey::new("jobs").unwrap(), t(1), b"x")).unwrap();
        assert!(block_on(store.list_partition("jobs")).unwrap().is_empty());
        assert_eq!(block_on(store.inspect(&key)).unwrap(), None);
        // A lease under the same key starts at generation 1, unaffected by the fence.
        let lease = block_on(store.acquire(&key, Duration::from_secs(30))).unwrap();
        assert_eq!(lease.fencing_token(), t(1));
        let listed = block_on(store.list_partition("jobs")).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key(), &key);
        block_on(store.release_lease(&lease)).unwrap();
        assert_eq!(
            block_on(store.fence_and_read(&key, t(50))).unwrap(),
            Some(b"progress".to_vec())
        );
    }
}

#[test]
fn largest_value_round_trips_and_oversized_touches_nothing() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let name = LeaseKey::new("checkpoint").unwrap();
        let big: Vec<u8> = (0..MAX_FENCED_VALUE_BYTES)
            .map(|i| (i % 251) as u8)
            .collect();
        block_on(store.put_fenced(&name, t(1), &big)).unwrap();
        let data = data_files(&fenced_path(dir.path(), &name));
        assert_eq!(data.len(), 1, "{data:?}");
        assert_eq!(
            std::fs::metadata(&data[0]).unwrap().len(),
            MAX_FENCED_FILE_BYTES as u64
        );
        assert_eq!(
            block_on(store.fence_and_read(&name, t(1))).unwrap(),
            Some(big)
        );

        let other = LeaseKey::new("never-written").unwrap();
        let before = listing(dir.path());
        let err = block_on(store.put_fenced(&other, t(1), &vec![0; MAX_FENCED_VALUE_BYTES + 1]))
            .unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        assert_eq!(listing(dir.path()), before, "nothing created");
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The data files (`data.<nonce>`) in a fenced value's directory.
fn data_files(dir: &Path) -> Vec<PathBuf> {
    listing(dir)
        .into_iter()
        .filter(|n| n.starts_with("data."))
        .map(|n| dir.join(n))
        .collect()
}

/// The chain entries (`value.<fence>.<seq>.<nonce>`) in a fenced value's directory.
fn chain(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_iter()
        .filter(|n| n.starts_with("value."))
        .collect()
}

/// Everything about a path (and what is under it) that a write, rename or removal would change.
#[cfg(unix)]
fn snapshot(path: &Path) -> Vec<(String, u64, String, Option<Vec<u8>>)> {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let mut out = vec![(
        path.display().to_string(),
        meta.ino(),
        format!("{:?}", meta.file_type()),
        meta.is_file().then(|| std::fs::read(path).unwrap()),
    )];
    if meta.is_dir() {
        for name in listing(path) {
            out.extend(snapshot(&path.join(name)));
        }
    }
    out
}

/// No temporary directory left in the store, and in every fenced value's directory no data file
/// but the one its chain entry names.
fn assert_no_strays(dir: &Path) {
    for name in listing(dir) {
        assert!(!name.starts_with('.'), "temporary left: {name}");
        if name.starts_with(FENCED_PREFIX) {
            let value_dir = dir.join(&name);
            let entries = chain(&value_dir);
            assert_eq!(entries.len(), 1, "{name}: {entries:?}");
            let nonce = entries[0].rsplit('.').next().unwrap();
            let expected: Vec<PathBuf> = if nonce == "none" {
                Vec::new()
            } else {
                vec![value_dir.join(format!("data.{nonce}"))]
            };
            assert_eq!(data_files(&value_dir), expected, "{name}");
        }
    }
}

fn assert_permanent_naming(err: &LeaseError, path: &Path, what: &str) {
    // A hostile or damaged value is the store's record refused (`Corrupt`, or `Foreign` for
    // another protocol's file): permanent, never retried.
    assert!(
        (err.is_corrupt() || err.is_foreign()) && !err.is_transient(),
        "{what}: want a permanent refusal of the record, got {err:?}"
    );
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains(&path.display().to_string()),
        "{what}: the error names the path: {shown}"
    );
}

/// Whatever sits at a fenced value's path instead of its directory (a regular file of any
/// content, a symbolic link, a FIFO, a directory without a chain entry) is a permanent error
/// naming the path, for reads and writes alike, and is left exactly as it was; once removed by
/// hand, the name works again.
#[cfg(unix)]
#[test]
fn hostile_files_at_a_fenced_path_are_refused_and_left_alone() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();

        // A valid fenced value elsewhere, reachable only through a link.
        let target_store = DirectoryStore::open(outside.path()).unwrap();
        let target_name = LeaseKey::new("target").unwrap();
        block_on(target_store.put_fenced(&target_name, t(1), b"outside")).unwrap();
        let target = fenced_path(outside.path(), &target_name);
        let target_before = snapshot(&target);

        // A valid data file, to plant whole, truncated and flipped as the value's path.
        let valid = std::fs::read(&data_files(&target)[0]).unwrap();
        let mut flipped = valid.clone();
        flipped[20] ^= 0x40;

        type Plant = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Plant)> = vec![
            (
                "garbage",
                Box::new(|p| std::fs::write(p, b"{not a fenced file").unwrap()),
            ),
            ("empty", Box::new(|p| std::fs::write(p, b"").unwrap())),
            (
                "a lease record",
                Box::new(|p| {
                    std::fs::write(p, br#"{"version":1,"pid":7,"generation":3}"#).unwrap()
                }),
            ),
            ("a fenced file of the old format", {
                let v = valid.clone();
                Box::new(move |p| std::fs::write(p, &v).unwrap())
            }),
            ("truncated", {
                let v = valid.clone();
                Box::new(move |p| std::fs::write(p, &v[..v.len() - 3]).unwrap())
            }),
            ("bit flip", {
                let v = flipped.clone();
                Box::new(move |p| std::fs::write(p, &v).unwrap())
            }),
            (
                "oversized",
                Box::new(|p| std::fs::write(p, vec![b'x'; MAX_FENCED_FILE_BYTES + 1]).unwrap()),
            ),
            ("symlink", {
                let target = target.clone();
                Box::new(move |p| symlink(&target, p).unwrap())
            }),
            (
                "dangling symlink",
                Box::new(|p| symlink("/nonexistent/fenced", p).unwrap()),
            ),
            (
                "empty directory",
                Box::new(|p| std::fs::create_dir(p).unwrap()),
            ),
            (
                "directory of something else",
                Box::new(|p| {
                    std::fs::create_dir(p).unwrap();
                    std::fs::write(p.join("data.0000000000000001"), b"mine").unwrap();
                }),
            ),
            (
                "fifo",
                Box::new(|p| {
                    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
                }),
            ),
        ];
        for (i, (what, plant)) in cases.iter().enumerate() {
            let name = LeaseKey::with_sort_key("hostile", format!("case-{i}")).unwrap();
            let path = fenced_path(dir.path(), &name);
            plant(&path);
            let before = snapshot(&path);
            let read = block_on(store.fence_and_read(&name, t(100)));
            assert_permanent_naming(&read.unwrap_err(), &path, what);
            let put = block_on(store.put_fenced(&name, t(100), b"overwrite?"));
            assert_permanent_naming(&put.unwrap_err(), &path, what);
            assert_eq!(snapshot(&path), before, "{what}: left in place");
            // Once removed by hand, the name works again.
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
            block_on(store.put_fenced(&name, t(100), b"fresh")).unwrap();
            assert_eq!(
                block_on(store.fence_and_read(&name, t(100))).unwrap(),
                Some(b"fresh".to_vec())
            );
        }
        assert_eq!(snapshot(&target), target_before, "link target untouched");
        assert_no_strays(dir.path());
    }
}

/// One successful or refused put, timed on the monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    token: u64,
    seq: u64,
    started: Instant,
    finished: Instant,
    ok: bool,
}

fn race(mode: ModePreference) {
    const WRITERS: u64 = 8;
    const ROUNDS: u64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let name = LeaseKey::with_sort_key("checkpoints", "raced").unwrap();
    let barrier = Arc::new(Barrier::new(usize::try_from(WRITERS).unwrap()));
    let threads: Vec<_> = (1..=WRITERS)
        .map(|token| {
            // A store per thread: its own descriptors and critical-section state, as a separate
            // process would have.
            let store = DirectoryStore::builder(dir.path())
                .with_mode(mode)
                .build()
                .unwrap();
            let name = name.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut log = Vec::new();
                for seq in 0..ROUNDS {
                    let value = format!("token={token} seq={seq}");
                    let started = Instant::now();
                    let result = block_on(store.put_fenced(&name, t(token), value.as_bytes()));
                    let finished = Instant::now();
                    let ok = match result {
                        Ok(()) => true,
                        Err(e) if e.not_owned_reason() == Some(NotOwnedReason::Fenced) => false,
                        Err(e) => panic!("token {token}: {e}"),
                    };
                    log.push(Attempt {
                        token,
                        seq,
                        started,
                        finished,
                        ok,
                    });
                }
                log
            })
        })
        .collect();
    let log: Vec<Attempt> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();

    // The highest token is never refused, and its last value is what remains.
    assert!(log.iter().filter(|a| a.token == WRITERS).all(|a| a.ok));
    let store = DirectoryStore::builder(dir.path())
        .with_mode(mode)
        .build()
        .unwrap();
    assert_eq!(
        block_on(store.fence_and_read(&name, t(WRITERS))).unwrap(),
        Some(format!("token={WRITERS} seq={}", ROUNDS - 1).into_bytes())
    );
    // Once a token is refused it stays refused: the fence never goes down.
    for token in 1..WRITERS {
        let mine: Vec<_> = log.iter().filter(|a| a.token == token).collect();
        if let Some(first_refusal) = mine.iter().position(|a| !a.ok) {
            assert!(
                mine[first_refusal..].iter().all(|a| !a.ok),
                "token {token} wrote again after being fenced out"
            );
        }
    }
    // No lower token's write lands after a higher token's write completed.
    for higher in log.iter().filter(|a| a.ok) {
        for lower in log.iter().filter(|a| a.ok && a.token < higher.token) {
            assert!(
                lower.started < higher.finished,
                "token {} seq {} wrote after token {} seq {} had written",
                lower.token,
                lower.seq,
                higher.token,
                higher.seq
            );
        }
    }
    let refused = log.iter().filter(|a| !a.ok).count();
    assert!(refused > 0, "the race refused somebody");
    // Every refused writer removed its data file; every replaced value's file is gone.
    assert_no_strays(dir.path());
}

#[cfg(unix)]
#[test]
fn racing_writers_highest_token_wins_kernel() {
    race(ModePreference::Kernel);
}

#[test]
fn racing_writers_highest_token_wins_heartbeat_only() {
    race(ModePreference::HeartbeatOnly);
}

#[test]
fn fence_only_then_value_then_empty() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let name = LeaseKey::new("n").unwrap();
        assert_eq!(block_on(store.fence_and_read(&name, t(3))).unwrap(), None);
        // The read fenced the name: an older writer is refused even though nothing was stored.
        let err = block_on(store.put_fenced(&name, t(2), b"old")).unwrap_err();
        assert_eq!(err.not_owned_reason(), Some(NotOwnedReason::Fenced));
        assert_eq!(block_on(store.fence_and_read(&name, t(3))).unwrap(), None);
        block_on(store.put_fenced(&name, t(3), b"")).unwrap();
        assert_eq!(
            block_on(store.fence_and_read(&name, t(3))).unwrap(),
            Some(Vec::new())
        );
        // Another store on the directory sees the same fence.
        let other = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        assert!(
            block_on(other.fence_and_read(&name, t(2)))
                .unwrap_err()
                .is_not_owned()
        );
    }
}

/// Writer A holds fence 3; writer B, with the newer fencing token 4, fences the name and writes
/// while A is paused (between A's read and its write: here a barrier). A's write is refused,
/// and B's value is what remains, whatever A wrote before; a fence without a write refuses A
/// just the same and keeps A's older value.
#[test]
fn a_writer_behind_a_newer_fence_is_refused_and_the_newer_value_stays() {
    for &mode in MODES {
        for b_writes in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let name = LeaseKey::new("checkpoint").unwrap();
            let barrier = Arc::new(Barrier::new(2));
            let a = {
                let store = DirectoryStore::builder(dir.path())
                    .with_mode(mode)
                    .build()
                    .unwrap();
                let (name, barrier) = (name.clone(), barrier.clone());
                std::thread::spawn(move || {
                    assert_eq!(block_on(store.fence_and_read(&name, t(3))).unwrap(), None);
                    block_on(store.put_fenced(&name, t(3), b"a1")).unwrap();
                    barrier.wait(); // A's first write is in
                    barrier.wait(); // A was paused until B fenced (and wrote)
                    let put = block_on(store.put_fenced(&name, t(3), b"a2"));
                    let read = block_on(store.fence_and_read(&name, t(3)));
                    (put, read)
                })
            };
            let b = {
                let store = DirectoryStore::builder(dir.path())
                    .with_mode(mode)
                    .build()
                    .unwrap();
                let (name, barrier) = (name.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let seen = block_on(store.fence_and_read(&name, t(4))).unwrap();
                    if b_writes {
                        block_on(store.put_fenced(&name, t(4), b"b")).unwrap();
                    }
                    barrier.wait();
                    seen
                })
            };
            assert_eq!(b.join().unwrap(), Some(b"a1".to_vec()), "B read A's value");
            let (put, read) = a.join().unwrap();
            let context = format!("{mode:?} b_writes={b_writes}");
            for err in [put.unwrap_err(), read.unwrap_err()] {
                assert_eq!(
                    err.not_owned_reason(),
                    Some(NotOwnedReason::Fenced),
                    "{context}: {err}"
                );
            }
            let store = DirectoryStore::builder(dir.path())
                .with_mode(mode)
                .build()
                .unwrap();
            let expected: &[u8] = if b_writes { b"b" } else { b"a1" };
            assert_eq!(
                block_on(store.fence_and_read(&name, t(4))).unwrap(),
                Some(expected.to_vec()),
                "{context}"
            );
            let value_dir = fenced_path(dir.path(), &name);
            assert!(chain(&value_dir)[0].starts_with("value.4."), "{context}");
            assert_no_strays(dir.path());
        }
    }
}

/// What is planted or lost inside a fenced value's directory: its data file corrupt (garbage,
/// truncated, a flipped bit, empty, oversized), replaced by a link, a directory or a FIFO, or
/// missing; a second chain entry; the chain entry gone. Reads and writes alike get a permanent
/// error naming the directory, at once, and nothing there is written, renamed or removed: the
/// fence is not raised, the corrupt file is not replaced. (Before, a write replaced a corrupt or
/// missing value and deleted the corrupt file, a read raised the fence before finding the value
/// corrupt, and a missing data file was retried eight times and reported as transient.)
#[cfg(unix)]
#[test]
fn a_corrupt_or_missing_value_inside_its_directory_is_refused_and_left_alone() {
    for &mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let store = DirectoryStore::builder(dir.path())
            .with_mode(mode)
            .build()
            .unwrap();
        let outside = tempfile::tempdir().unwrap();
        let elsewhere = outside.path().join("data");
        std::fs::write(&elsewhere, b"do not touch").unwrap();

        type Plant = Box<dyn Fn(&Path, &Path)>;
        let rewrite = |f: fn(Vec<u8>) -> Vec<u8>| -> Plant {
            Box::new(move |_, data| {
                let bytes = std::fs::read(data).unwrap();
                std::fs::write(data, f(bytes)).unwrap();
            })
        };
        let cases: Vec<(&str, Plant)> = vec![
            ("garbage", rewrite(|_| b"{not a fenced file".to_vec())),
            ("truncated", rewrite(|b| b[..b.len() - 3].to_vec())),
            (
                "bit flip",
                rewrite(|mut b| {
                    b[20] ^= 0x40;
                    b
                }),
            ),
            ("empty", rewrite(|_| Vec::new())),
            (
                "oversized",
                rewrite(|_| vec![b'x'; MAX_FENCED_FILE_BYTES + 1]),
            ),
            ("symlink", {
                let elsewhere = elsewhere.clone();
                Box::new(move |_, data| {
                    std::fs::remove_file(data).unwrap();
                    symlink(&elsewhere, data).unwrap();
                })
            }),
            (
                "directory",
                Box::new(|_, data| {
                    std::fs::remove_file(data).unwrap();
                    std::fs::create_dir(data).unwrap();
                }),
            ),
            (
                "fifo",
                Box::new(|_, data| {
                    std::fs::remove_file(data).unwrap();
                    nix::unistd::mkfifo(data, nix::sys::stat::Mode::from_bits_truncate(0o644))
                        .unwrap();
                }),
            ),
            (
                "missing",
                Box::new(|_, data| std::fs::remove_file(data).unwrap()),
            ),
            (
                "two chain entries",
                Box::new(|value_dir, _| {
                    std::fs::write(value_dir.join("value.9.1.none"), b"").unwrap();
                }),
            ),
            (
                "no chain entry",
                Box::new(|value_dir, _| {
                    let entry = chain(value_dir).remove(0);
                    std::fs::remove_file(value_dir.join(entry)).unwrap();
                }),
            ),
        ];
        for (i, (what, plant)) in cases.iter().enumerate() {
            let name = LeaseKey::with_sort_key("inside", format!("case-{i}")).unwrap();
            block_on(store.put_fenced(&name, t(7), b"some value")).unwrap();
            let value_dir = fenced_path(dir.path(), &name);
            let data = data_files(&value_dir).remove(0);
            plant(&value_dir, &data);
            let before = snapshot(&value_dir);
            let context = format!("{mode:?} {what}");
            let read = block_on(store.fence_and_read(&name, t(100)));
            assert_permanent_naming(&read.unwrap_err(), &value_dir, &context);
            let put = block_on(store.put_fenced(&name, t(100), b"overwrite?"));
            assert_permanent_naming(&put.unwrap_err(), &value_dir, &context);
            let same = block_on(store.put_fenced(&name, t(7), b"same fence"));
            assert_permanent_naming(&same.unwrap_err(), &value_dir, &context);
            assert_eq!(snapshot(&value_dir), before, "{context}: left in place");
            // Once removed by hand, the name works again (from a fresh fence).
            std::fs::remove_dir_all(&value_dir).unwrap();
            block_on(store.put_fenced(&name, t(100), b"fresh")).unwrap();
            assert_eq!(
                block_on(store.fence_and_read(&name, t(100))).unwrap(),
                Some(b"fresh".to_vec()),
                "{context}"
            );
        }
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"do not touch");
        assert_no_strays(dir.path());
    }
}
