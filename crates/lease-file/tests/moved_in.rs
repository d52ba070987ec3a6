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
//! * (feature `failpoints`) The same user swaps an existing root-owned directory in for the
//!   temporary directory root has just made to build a lock directory in: root refuses it,
//!   never `fchmod`s it and never builds a lock in it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};

const NOBODY: u32 = 65534;

fn root_only() -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the attacker runs as another user, which needs root");
        return None;
    }
    let setpriv = PathBuf::from("/usr/bin/setpriv");
    if !setpriv.exists() {
        eprintln!("SKIPPED: needs /usr/bin/setpriv for the attacker");
        return None;
    }
    Some(setpriv)
}

/// Runs `script` with `sh -c` as `nobody`.
fn as_nobody(setpriv: &Path, script: &str) {
    let status = Command::new(setpriv)
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "the attacker's `{script}` failed");
}

fn mkdir_owned(path: &Path, uid: u32, mode: u32) {
    std::fs::create_dir(path).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

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

/// A root-owned directory made before (a mode no lock directory has, 0700) swapped in for root's
/// temporary directory, between its `mkdirat` and its `openat`, by `nobody`, who owns the
/// store: root refuses it (the creation fails, transiently), never `fchmod`s it, never
/// creates an entry in it, never renames it into place.
#[cfg(feature = "failpoints")]
#[test]
fn an_older_directory_swapped_in_for_a_temporary_is_never_chmodded_or_used() {
    let Some(setpriv) = root_only() else {
        return;
    };
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let store_dir = top.path().join("store");
    mkdir_owned(&store_dir, NOBODY, 0o755);
    let store = DirectoryStore::builder(&store_dir)
        .with_shared_directory()
        .build()
        .unwrap();
    let scenario = fail::FailScenario::setup();
    let rounds = 10;
    let mut touched = Vec::new();
    for round in 0..rounds {
        // Root's own directory in the store, made earlier, with a mode no lock directory has.
        let decoy = store_dir.join(format!("decoy-{round}"));
        std::fs::create_dir(&decoy).unwrap();
        std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o700)).unwrap();
        let decoy_ino = std::fs::metadata(&decoy).unwrap().ino();
        // Made before, as an existing directory is: more than a clock tick before root's
        // `mkdirat` (the check's resolution: the kernel stamps inodes from its coarse clock).
        std::thread::sleep(Duration::from_millis(30));
        let (store_path, decoy_path, setpriv) = (store_dir.clone(), decoy.clone(), setpriv.clone());
        fail::cfg_callback("lease-file/before-open-temp", move || {
            let Some(temp) = std::fs::read_dir(&store_path)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(".lease-init."))
                })
            else {
                return;
            };
            if decoy_path.exists() {
                as_nobody(
                    &setpriv,
                    &format!("mv -T '{}' '{}'", decoy_path.display(), temp.display()),
                );
            }
        })
        .unwrap();
        let key = LeaseKey::new(format!("k{round}")).unwrap();
        let result = pollster::block_on(store.try_acquire(
            &key,
            Duration::from_secs(30),
            &AcquireOptions::default(),
        ));
        fail::remove("lease-file/before-open-temp");
        if let Ok(lease) = &result {
            pollster::block_on(store.release(&key, lease.token(), lease.fencing_token())).unwrap();
        }
        // Wherever the decoy is now, by its inode.
        let found = walk(&store_dir)
            .into_iter()
            .find(|(_, meta)| meta.ino() == decoy_ino);
        let (path, meta) = found.expect("the decoy is somewhere in the store");
        let entries = std::fs::read_dir(&path).unwrap().count();
        if meta.mode() & 0o7777 != 0o700 || entries != 0 {
            touched.push(format!(
                "round {round}: the decoy is now {} (mode {:o}, {entries} entries); the acquire: {:?}",
                path.display(),
                meta.mode() & 0o7777,
                result.as_ref().map(|l| l.fencing_token())
            ));
        }
    }
    scenario.teardown();
    assert!(
        touched.is_empty(),
        "root used a directory swapped in for its temporary in {} of {rounds} rounds: {touched:#?}",
        touched.len()
    );
}

#[cfg(feature = "failpoints")]
fn walk(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        if meta.is_dir() {
            found.extend(walk(&entry.path()));
            found.push((entry.path(), meta));
        }
    }
    found
}
