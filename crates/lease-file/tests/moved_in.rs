//! Issue 37, item 4: root never writes, truncates or `chmod`s a file or directory that another
//! user brought into the store. Root-only (the attacker runs as `nobody` through `setpriv`);
//! skipped with the reason printed otherwise.
//!
//! * A user who can write a shared store squats a key's lock directory and moves into it, as
//!   its state entry `free.0`, a root-owned single-link file it can rename (one root left in a
//!   directory of that user's). Root then acquires and releases the key (a `DirectoryStore`
//!   and a `FileLock`, both with the shared-directory opt-in): the file's content and size
//!   never change. Before the fix (the entry was written when it was root's with one link),
//!   root overwrote it with a description in every round.
//!
//! The other half of the item, an existing root-owned directory swapped in for the temporary
//! root builds a lock directory in (at an exact point, so with a fault point), is in
//! `fault_points.rs`: `an_older_directory_swapped_in_for_a_temporary_is_never_chmodded_or_used`.
// Unix only: another user (`nobody`) and permission bits.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};

mod nobody;
use nobody::{NOBODY, as_nobody, mkdir_owned, root_only};

/// The file with inode `ino` in `dir`: its size and bytes.
fn by_inode(dir: &Path, ino: u64) -> Option<(u64, Vec<u8>)> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let meta = std::fs::symlink_metadata(e.path()).ok()?;
        (meta.ino() == ino).then(|| (meta.len(), std::fs::read(e.path()).unwrap_or_default()))
    })
}

#[test]
fn a_root_owned_file_moved_into_a_squatted_lock_directory_is_never_written() {
    let Some(setpriv) = root_only() else {
        return;
    };
    let rounds = 20;
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The attacker's own directory, where root once left files of its own, and the shared
    // store, which the attacker owns.
    let attic = top.path().join("attic");
    mkdir_owned(&attic, NOBODY, 0o755);
    let store_dir = top.path().join("store");
    mkdir_owned(&store_dir, NOBODY, 0o755);
    let store = DirectoryStore::builder(&store_dir)
        .with_shared_directory()
        .with_verbatim_names()
        .build()
        .unwrap();
    let mut written = Vec::new();
    for round in 0..rounds {
        for face in ["store", "lock"] {
            let name = format!("{face}-{round}");
            let victim = attic.join(&name);
            let original = format!("root's file {name}, not a lease\n").into_bytes();
            std::fs::write(&victim, &original).unwrap();
            let ino = std::fs::metadata(&victim).unwrap().ino();
            let lock_dir = store_dir.join(&name);
            as_nobody(
                &setpriv,
                &format!(
                    "mkdir -m 0755 '{}' && mv '{}' '{}/free.0'",
                    lock_dir.display(),
                    victim.display(),
                    lock_dir.display()
                ),
            );
            match face {
                "store" => {
                    let key = LeaseKey::new(name.clone()).unwrap();
                    let lease = pollster::block_on(store.try_acquire(
                        &key,
                        Duration::from_secs(30),
                        &AcquireOptions::default(),
                    ))
                    .unwrap();
                    // Long enough that a release erases a description it wrote.
                    std::thread::sleep(Duration::from_millis(15));
                    pollster::block_on(store.release(&key, lease.token(), lease.fencing_token()))
                        .unwrap();
                }
                _ => {
                    let lock = FileLock::builder(&lock_dir)
                        .with_shared_directory()
                        .build()
                        .unwrap();
                    let guard = lock.try_acquire().unwrap();
                    std::thread::sleep(Duration::from_millis(15));
                    guard.release().unwrap();
                }
            }
            let after = by_inode(&lock_dir, ino).expect("the moved-in file is still the entry");
            if after != (original.len() as u64, original.clone()) {
                written.push(name);
            }
        }
    }
    assert!(
        written.is_empty(),
        "root wrote into a file another user moved into the store in {} of {} rounds: {written:?}",
        written.len(),
        rounds * 2
    );
}
