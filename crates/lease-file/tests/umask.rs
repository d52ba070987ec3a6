//! Issue 22 item 7 (replacing issue 9's "exactly the configured mode, whatever the umask"):
//! created modes follow the umask, and the owner token is readable by its owner only, unless
//! the directory is explicitly shared. The umask is process-wide, so this binary holds this
//! single test.
// Unix only: the umask.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use lease_core::{FencedValues, LeaseBackend, LeaseKey};
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

/// Every entry under `root` has the mode `expected` gives for (its path, whether a directory),
/// and each name of `at_least` (a prefix of a path) is among them.
fn assert_all(root: &Path, expected: &dyn Fn(&str, bool) -> u32, at_least: &[&str], context: &str) {
    let modes = modes(root);
    for prefix in at_least {
        assert!(
            modes.keys().any(|name| name.starts_with(prefix)),
            "{context}: nothing like {prefix} in {}",
            show(&modes)
        );
    }
    for (name, (dir, mode)) in &modes {
        let expected = expected(name, *dir);
        assert_eq!(
            *mode,
            expected,
            "{context}: {name} has mode {mode:o}, expected {expected:o} (all: {})",
            show(&modes)
        );
    }
}

/// Whether `name` (a path under a store or a lock's parent) is a lease's state entry.
fn state_entry(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name);
    last.starts_with("free.") || last.starts_with("held.")
}

/// Issue 22 item 7: modes follow the umask. Every file and directory the crate creates gets the
/// configured mode less the umask (as `open(2)` and `mkdir(2)` apply it), and is never writable
/// by group or others unless the directory is explicitly shared; a lease's state entry, which
/// holds the owner token, is readable by its owner only. So under umask 077 nothing is readable
/// by others, and the owner token by nobody but the owner. (Before, issue 9's `chmod` gave
/// exactly the configured mode whatever the umask: 0644 entries showing every holder's owner
/// token.) With `with_shared_directory()` the configured modes are given exactly, through
/// the descriptors of what was just created, so a group can share the lock whatever the
/// creator's umask. The umask is process-wide, so this binary holds this single test.
#[test]
fn created_modes_follow_the_umask_and_tokens_stay_private_unless_shared() {
    // Made before the umask changes. The crate creates nothing but in them.
    let roots: Vec<_> = (0..64).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut roots = roots.iter();
    for mask in [0o077_u32, 0o022, 0o027, 0o002] {
        umask(mode(mask));
        for (file_mode, dir_mode) in [(0o644, 0o755), (0o664, 0o775)] {
            for shared in [false, true] {
                let preference = if file_mode == 0o644 {
                    ModePreference::Kernel
                } else {
                    ModePreference::HeartbeatOnly
                };
                let context = format!(
                    "umask {mask:03o}, mode {file_mode:o}, shared {shared}, {preference:?}"
                );
                let expected = |name: &str, dir: bool| {
                    let configured = if dir { dir_mode } else { file_mode };
                    if shared {
                        return configured;
                    }
                    let mode = configured & !mask & !0o022;
                    if state_entry(name) {
                        mode & 0o600
                    } else {
                        mode
                    }
                };
                // FileLock: the lock directory and its state entry, through acquisition,
                // heartbeats, release and a second tenure.
                let dir = roots.next().unwrap();
                let path = dir.path().join("a.lease");
                let mut options = FileLock::builder(&path)
                    .with_heartbeat_interval(Duration::from_millis(10))
                    .with_stale_threshold(Duration::from_millis(300))
                    .with_file_mode(file_mode)
                    .with_mode(preference);
                if shared {
                    options = options.with_shared_directory();
                }
                let lock = options.clone().build().unwrap();
                let guard = lock.acquire().unwrap();
                std::thread::sleep(Duration::from_millis(30)); // a few heartbeats
                guard.release().unwrap();
                let other = options.build().unwrap();
                let guard = other.acquire().unwrap();
                assert_all(
                    dir.path(),
                    &expected,
                    &["a.lease/held."],
                    &format!("FileLock held, {context}"),
                );
                guard.release().unwrap();
                assert_all(
                    dir.path(),
                    &expected,
                    &["a.lease/free.2"],
                    &format!("FileLock, {context}"),
                );

                // DirectoryStore: lock directories, state entries, fenced-value directories
                // and their data files.
                let dir = roots.next().unwrap();
                let mut store = DirectoryStore::builder(dir.path())
                    .with_mode(preference)
                    .with_file_mode(file_mode);
                if shared {
                    store = store.with_shared_directory();
                }
                let store = store.build().unwrap();
                let key = LeaseKey::new("jobs").unwrap();
                let lease =
                    pollster::block_on(store.acquire(&key, Duration::from_secs(5))).unwrap();
                let lease =
                    pollster::block_on(store.renew(&lease, Duration::from_secs(5))).unwrap();
                pollster::block_on(store.put_fenced(
                    &key,
                    lease_core::backend::fencing_token(1),
                    b"v",
                ))
                .unwrap();
                let only_fenced = LeaseKey::new("fenced-only").unwrap();
                pollster::block_on(
                    store.fence_and_read(&only_fenced, lease_core::backend::fencing_token(3)),
                )
                .unwrap();
                // The owner token is in the state entry's description.
                let held = modes(dir.path())
                    .into_keys()
                    .find(|name| name.starts_with("jobs.lease/held."))
                    .unwrap();
                let bytes = std::fs::read(dir.path().join(&held)).unwrap();
                assert!(
                    String::from_utf8_lossy(&bytes).contains(lease.token().as_str()),
                    "{context}: the description holds the token"
                );
                pollster::block_on(store.release_lease(&lease)).unwrap();
                assert_all(
                    dir.path(),
                    &expected,
                    &[
                        "jobs.lease/free.1",
                        "fenced~jobs/data.",
                        "fenced~jobs/value.1.",
                        "fenced~fenced-only/value.3.",
                    ],
                    &format!("store, {context}"),
                );
                if mask == 0o077 && !shared {
                    for (name, (_, mode)) in modes(dir.path()) {
                        assert_eq!(mode & 0o077, 0, "{context}: {name} {mode:o}");
                    }
                }
            }
        }
    }
    umask(mode(0o022));
}

/// Permission bits as a [`Mode`]: `mode_t` is 32 bits on Linux, 16 on macOS and FreeBSD.
#[allow(clippy::unnecessary_cast, clippy::cast_possible_truncation)]
fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits as nix::libc::mode_t)
}
