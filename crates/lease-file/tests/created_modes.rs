//! Issue 37, item 9: modes of what the crate creates beside its lock directories.
//!
//! * The fencing marker (`.fencing-from-clock`, made by the first delete or prune) follows the
//!   umask and is never `chmod`ed outside a shared store, like every file the store creates.
//!   Before, it was `chmod`ed to the configured mode whatever the umask (0644 under umask 077).
//! * A `FileLock` (and a store) configured with a world-writable mode in a shared directory
//!   makes lock directories it accepts: never writable by others. Before, `with_file_mode(0o666)`
//!   made a 0777 lock directory and then refused it as world-writable.
//!
//! The umask is process-wide: this binary changes it once, for both tests.
// Unix only: permission bits and the umask, which Windows has not.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::sync::Once;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};
use nix::sys::stat::{Mode, umask};

fn umask_077() {
    static SET: Once = Once::new();
    SET.call_once(|| {
        umask(Mode::from_bits_truncate(0o077));
    });
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn the_fencing_marker_follows_the_umask_outside_a_shared_store() {
    umask_077();
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::open(dir.path()).unwrap();
    let key = LeaseKey::new("job").unwrap();
    let lease = pollster::block_on(store.try_acquire(
        &key,
        Duration::from_secs(30),
        &AcquireOptions::default(),
    ))
    .unwrap();
    pollster::block_on(store.release(&key, lease.token(), lease.fencing_token())).unwrap();
    pollster::block_on(store.delete(&key, None, Some(lease.fencing_token()))).unwrap();
    let marker = dir.path().join(".fencing-from-clock");
    assert_eq!(
        mode_of(&marker),
        0o600,
        "the marker ignored the umask 077 (configured mode 0644)"
    );
}

#[test]
fn a_world_writable_mode_in_a_shared_directory_makes_locks_that_are_accepted() {
    umask_077();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.lock");
    let lock = FileLock::builder(&path)
        .with_shared_directory()
        .with_file_mode(0o666)
        .build()
        .unwrap();
    let guard = lock
        .try_acquire()
        .unwrap_or_else(|e| panic!("the lock refused the directory it made: {e}"));
    assert_eq!(mode_of(&path), 0o775, "group-shared, never world-writable");
    guard.release().unwrap();

    let store = DirectoryStore::builder(dir.path().join("store"))
        .with_shared_directory()
        .with_file_mode(0o666)
        .build()
        .unwrap();
    let key = LeaseKey::new("job").unwrap();
    let lease = pollster::block_on(store.try_acquire(
        &key,
        Duration::from_secs(30),
        &AcquireOptions::default(),
    ))
    .unwrap_or_else(|e| panic!("the store refused the directory it made: {e}"));
    pollster::block_on(store.release(&key, lease.token(), lease.fencing_token())).unwrap();
}
