//! Item 9 of issue 9: every file the crate creates gets exactly the configured mode, whatever the
//! umask. The umask is process-wide, so this binary holds this single test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use lease_core::{FencedValues, FencingToken, LeaseBackendExt, LeaseKey};
use lease_file::{DirectoryStore, FileLock, FileLockOptions, LockMode, ModePreference};
use nix::sys::stat::{Mode, umask};

/// Every regular file in `dir` with its permission bits.
fn modes(dir: &Path) -> BTreeMap<String, u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().permissions().mode() & 0o7777,
            )
        })
        .collect()
}

fn show(modes: &BTreeMap<String, u32>) -> String {
    modes
        .iter()
        .map(|(name, mode)| format!("{name} {mode:o}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn assert_all(dir: &Path, expected: u32, at_least: &[&str]) {
    let modes = modes(dir);
    for name in at_least {
        assert!(
            modes.contains_key(*name),
            "{name} missing from {}",
            show(&modes)
        );
    }
    for (name, mode) in &modes {
        assert_eq!(
            *mode,
            expected,
            "{name} has mode {mode:o}, configured {expected:o} (all: {})",
            show(&modes)
        );
    }
}

/// Before: under umask 077, `P.lock` and `P.owner` came out 0600 and the epoch files
/// `P.cs.<n>` / `P.cs.<n>.done` 0600 (and under 022, a configured 0664 came out 0644), so a lock
/// shared by the users of a group failed with "permission denied" for everyone but the first.
/// The record alone got its mode (by `fchmod`). Now every created file gets `fchmod`ed.
#[test]
fn every_created_file_gets_exactly_the_configured_mode_under_a_restrictive_umask() {
    umask(Mode::from_bits_truncate(0o077));
    for file_mode in [0o644, 0o664, 0o600] {
        for preference in [ModePreference::Kernel, ModePreference::HeartbeatOnly] {
            // FileLock.
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("a.lease");
            let options = FileLockOptions::default()
                .with_heartbeat_interval(Duration::from_millis(10))
                .with_stale_threshold(Duration::from_millis(300))
                .with_file_mode(file_mode)
                .with_mode(preference);
            let lock = FileLock::with_options(&path, options).unwrap();
            lock.acquire().unwrap();
            std::thread::sleep(Duration::from_millis(50)); // a few heartbeats
            lock.release().unwrap();
            let expected: &[&str] = match lock.mode() {
                LockMode::Kernel => &["a.lease", "a.lease.lock", "a.lease.owner"],
                _ => &["a.lease", "a.lease.cs.1", "a.lease.cs.1.done"],
            };
            let context = format!("FileLock {file_mode:o} {preference:?}");
            eprintln!("{context}: {}", show(&modes(dir.path())));
            assert_all(dir.path(), file_mode, &expected[..1]);
            if lock.mode() == LockMode::Kernel {
                assert_all(dir.path(), file_mode, expected);
            } else {
                assert!(
                    modes(dir.path()).keys().any(|n| n.contains(".cs.")),
                    "{context}: no epoch file left to check"
                );
            }

            // DirectoryStore: records, companions, fenced values, the mode probe.
            let dir = tempfile::tempdir().unwrap();
            let store = DirectoryStore::open_with_mode(dir.path(), preference)
                .unwrap()
                .with_file_mode(file_mode);
            let key = LeaseKey::new("jobs").unwrap();
            let lease = lease_core::block_on(store.acquire(&key, Duration::from_secs(5))).unwrap();
            lease_core::block_on(store.put_fenced(&key, FencingToken::new(1), b"v")).unwrap();
            lease_core::block_on(store.release_lease(&lease)).unwrap();
            eprintln!(
                "store {file_mode:o} {preference:?}: {}",
                show(&modes(dir.path()))
            );
            assert_all(dir.path(), file_mode, &["jobs.lease"]);
        }
    }
}
