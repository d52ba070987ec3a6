//! Item 9 of issue 9: every file and directory the crate creates gets exactly the configured
//! mode, whatever the umask: files the file mode, lock and fenced-value directories the file mode
//! plus the matching search bits (0664 gives 0775, 0600 gives 0700). The umask is process-wide,
//! so this binary holds this single test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use lease_core::{FencedValues, LeaseBackend, LeaseBackendExt, LeaseKey};
use lease_file::{DirectoryStore, FileLock, ModePreference};
use nix::sys::stat::{Mode, umask};

/// Every file and directory under `root` (not `root` itself), by path relative to it, with its
/// kind and permission bits.
fn modes(root: &Path) -> BTreeMap<String, (bool, u32)> {
    let mut found = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            }
            let name = entry
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            found.insert(name, (meta.is_dir(), meta.permissions().mode() & 0o7777));
        }
    }
    found
}

fn show(modes: &BTreeMap<String, (bool, u32)>) -> String {
    modes
        .iter()
        .map(|(name, (dir, mode))| format!("{name}{} {mode:o}", if *dir { "/" } else { "" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every file under `root` has `file_mode`, every directory `dir_mode`, and each name of
/// `at_least` (a prefix of a path) is among them.
fn assert_all(root: &Path, file_mode: u32, dir_mode: u32, at_least: &[&str], context: &str) {
    let modes = modes(root);
    eprintln!("{context}: {}", show(&modes));
    for prefix in at_least {
        assert!(
            modes.keys().any(|name| name.starts_with(prefix)),
            "{context}: nothing like {prefix} in {}",
            show(&modes)
        );
    }
    for (name, (dir, mode)) in &modes {
        let expected = if *dir { dir_mode } else { file_mode };
        assert_eq!(
            *mode,
            expected,
            "{context}: {name} has mode {mode:o}, configured {expected:o} (all: {})",
            show(&modes)
        );
    }
}

/// Before: under umask 077 the old protocol's `P.lock` and `P.owner` companions and its epoch
/// files came out 0600 (and under 022 a configured 0664 came out 0644), so a lock shared by the
/// users of a group failed with "permission denied" for everyone but the first. Now the lock
/// directory, its state entries (which keep the mode through every rename), fenced-value
/// directories and their data files all get their mode by `chmod` after an exclusive create.
#[test]
fn every_created_file_and_directory_gets_exactly_the_configured_mode() {
    // Made before the umask changes: under umask 777 a new temporary directory could not even
    // be entered. The crate creates nothing but in them.
    let roots: Vec<_> = (0..48).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut roots = roots.iter();
    for mask in [0o077, 0o022, 0o777] {
        umask(Mode::from_bits_truncate(mask));
        for (file_mode, dir_mode) in [
            (0o644, 0o755),
            (0o664, 0o775),
            (0o600, 0o700),
            (0o640, 0o750),
        ] {
            for preference in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
                let context = format!("umask {mask:03o}, mode {file_mode:o}, {preference:?}");
                // FileLock: the lock directory and its state entry, through acquisition,
                // heartbeats, release and a second tenure.
                let dir = roots.next().unwrap();
                let path = dir.path().join("a.lease");
                let options = FileLock::builder(&path)
                    .with_heartbeat_interval(Duration::from_millis(10))
                    .with_stale_threshold(Duration::from_millis(300))
                    .with_file_mode(file_mode)
                    .with_mode(preference);
                let lock = options.clone().build().unwrap();
                let guard = lock.acquire().unwrap();
                std::thread::sleep(Duration::from_millis(50)); // a few heartbeats
                guard.release().unwrap();
                let other = options.build().unwrap();
                let guard = other.acquire().unwrap();
                assert_all(
                    dir.path(),
                    file_mode,
                    dir_mode,
                    &["a.lease/held."],
                    &format!("FileLock held, {context}"),
                );
                guard.release().unwrap();
                assert_all(
                    dir.path(),
                    file_mode,
                    dir_mode,
                    &["a.lease/free.2"],
                    &format!("FileLock, {context}"),
                );

                // DirectoryStore: lock directories, state entries, fenced-value directories
                // and their data files.
                let dir = roots.next().unwrap();
                let store = DirectoryStore::builder(dir.path())
                    .with_mode(preference)
                    .with_file_mode(file_mode)
                    .build()
                    .unwrap();
                let key = LeaseKey::new("jobs").unwrap();
                let lease =
                    lease_core::executor::block_on(store.acquire(&key, Duration::from_secs(5)))
                        .unwrap();
                let lease =
                    lease_core::executor::block_on(store.renew(&lease, Duration::from_secs(5)))
                        .unwrap();
                lease_core::executor::block_on(store.put_fenced(
                    &key,
                    lease_core::backend::fencing_token(1),
                    b"v",
                ))
                .unwrap();
                lease_core::executor::block_on(store.put_fenced(
                    &key,
                    lease_core::backend::fencing_token(2),
                    b"w",
                ))
                .unwrap();
                let only_fenced = LeaseKey::new("fenced-only").unwrap();
                lease_core::executor::block_on(
                    store.fence_and_read(&only_fenced, lease_core::backend::fencing_token(3)),
                )
                .unwrap();
                lease_core::executor::block_on(store.release_lease(&lease)).unwrap();
                assert_all(
                    dir.path(),
                    file_mode,
                    dir_mode,
                    &[
                        "jobs.lease/free.1",
                        "fenced~jobs/data.",
                        "fenced~jobs/value.2.",
                        "fenced~fenced-only/value.3.",
                    ],
                    &format!("store, {context}"),
                );
            }
        }
    }
    umask(Mode::from_bits_truncate(0o022));
}
