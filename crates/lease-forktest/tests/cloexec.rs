//! Every descriptor lease-file holds is close-on-exec (issue 22, item 4): a program started
//! while a `FileLock` and a `DirectoryStore` lease are held (kernel mode, so the lock
//! directories, their streams and state entries are all open) inherits none of them.

use std::process::Command;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock, ModePreference};

#[test]
fn a_program_started_while_leases_are_held_inherits_no_descriptor_of_them() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let lock = FileLock::builder(dir.path().join("held.lease"))
        .with_mode(ModePreference::Kernel)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = lock.try_acquire().unwrap_or_else(|e| panic!("{e}"));
    let store = DirectoryStore::builder(dir.path().join("store"))
        .with_mode(ModePreference::Kernel)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let key = LeaseKey::new("held").unwrap_or_else(|e| panic!("{e}"));
    let lease = pollster::block_on(store.try_acquire(
        &key,
        std::time::Duration::from_secs(30),
        &AcquireOptions::default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let listing = Command::new("ls")
        .args(["-l", "/proc/self/fd/"])
        .output()
        .unwrap_or_else(|e| panic!("run ls: {e}"));
    let text = String::from_utf8_lossy(&listing.stdout);
    let root = dir.path().display().to_string();
    assert!(
        !text.contains(&root),
        "a started program inherited descriptors under {root}:\n{text}"
    );
    assert!(guard.check().is_ok());
    pollster::block_on(store.release(&key, lease.token(), lease.fencing_token()))
        .unwrap_or_else(|e| panic!("{e}"));
}
