//! Issue 22 item 1, without root: a racer thread of the same user swaps every temporary lock
//! directory it sees in the store for a symbolic link to a 0600 sentinel, while lock
//! directories are created through both faces. The sentinel's mode, size and content never
//! change, and nothing is created outside the store. (The root-only test with an attacker run as
//! another user is lease-cli's `tests/other_users.rs`.) `LEASE_LONG=1` creates ten times as
//! many.
// Unix only: symbolic links swapped in by a racer (Windows: links need privileges) and permission bits.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};

#[test]
fn temporaries_swapped_for_links_never_reach_outside_the_store() {
    let rounds = if std::env::var_os("LEASE_LONG").is_some() {
        3_000
    } else {
        300
    };
    let top = tempfile::tempdir().unwrap();
    let store_dir = top.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let sentinel = top.path().join("sentinel");
    std::fs::write(&sentinel, b"sentinel\n").unwrap();
    std::fs::set_permissions(&sentinel, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&sentinel).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps, store_dir, sentinel) = (
            stop.clone(),
            swaps.clone(),
            store_dir.clone(),
            sentinel.clone(),
        );
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir(&store_dir).unwrap().flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with('.') && name.contains("init.") {
                        n += 1;
                        let moved = store_dir.join(format!(".junk-{n}"));
                        if std::fs::rename(entry.path(), moved).is_ok() {
                            let _ = std::os::unix::fs::symlink(&sentinel, entry.path());
                            swaps.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        })
    };
    let store = DirectoryStore::open(&store_dir).unwrap();
    let mut ok = 0;
    for i in 0..rounds {
        let key = LeaseKey::new(format!("k{i}")).unwrap();
        let once = AcquireOptions::default();
        if let Ok(lease) =
            pollster::block_on(store.try_acquire(&key, Duration::from_secs(5), &once))
        {
            ok += u32::from(pollster::block_on(store.release_lease(&lease)).is_ok());
        }
        let lock = FileLock::builder(store_dir.join(format!("f{i}.lock")))
            .with_acquire_retries(0)
            .build()
            .unwrap();
        if let Ok(guard) = lock.try_acquire() {
            ok += u32::from(guard.release().is_ok());
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    let after = std::fs::metadata(&sentinel).unwrap();
    eprintln!(
        "{rounds} rounds: {ok} tenures, {} temporaries swapped for links",
        swaps.load(Ordering::Relaxed)
    );
    assert_eq!(after.mode(), before.mode(), "the sentinel's mode changed");
    assert_eq!(after.len(), before.len());
    assert_eq!(std::fs::read(&sentinel).unwrap(), b"sentinel\n");
    let outside: Vec<_> = std::fs::read_dir(top.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(outside.len(), 2, "created outside the store: {outside:?}");
    assert!(ok > 0, "nothing was acquired");
}
