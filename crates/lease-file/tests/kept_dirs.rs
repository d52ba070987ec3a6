//! Lock directories kept open between tenures (by `FileLock` and by `DirectoryStore`) are
//! trusted only while they are still the directory at the path: one moved away or removed by
//! hand is dropped and the path opened afresh, whether the kept one looks free or held.
#![allow(clippy::unwrap_used, missing_docs)]

mod raw;

use raw::Raw as _;
mod lease_dir;

use std::time::Duration;

use lease_core::NotOwnedReason;
use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};

const TTL: Duration = Duration::from_secs(30);

/// Why `guard`'s tenure can no longer be trusted, if it cannot: `check`'s error carries it.
fn loss(guard: &lease_file::FileLockGuard) -> Option<lease_core::LossReason> {
    match guard.check() {
        Err(lease_core::LeaseError::Lost { reason, .. }) => Some(reason),
        _ => None,
    }
}

#[test]
fn a_file_lock_never_acquires_through_a_kept_directory_that_was_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.lease");
    let a = FileLock::new(&path).unwrap();
    let b = FileLock::new(&path).unwrap();
    a.try_acquire().unwrap().release().unwrap();

    // Moved away while kept: `a` must not win in the old directory while `b` holds the new one.
    std::fs::rename(&path, dir.path().join("old.lease")).unwrap();
    let held = b.try_acquire().unwrap();
    let err = a.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    assert_eq!(
        err.holder()
            .and_then(|h| h.fencing_token())
            .map(|f| f.get()),
        Some(held.fencing_token().get())
    );
    let fencing = held.fencing_token();
    held.release().unwrap();
    let again = a.try_acquire().unwrap();
    assert!(again.fencing_token() > fencing);
    again.release().unwrap();

    // Removed while kept: a fresh directory, not an error.
    std::fs::remove_dir_all(&path).unwrap();
    let fresh = a.try_acquire().unwrap();
    assert!(b.try_acquire().unwrap_err().is_held());
    fresh.release().unwrap();
}

#[test]
fn a_file_lock_is_not_refused_by_a_kept_directory_that_was_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.lease");
    let a = FileLock::new(&path).unwrap();
    let b = FileLock::new(&path).unwrap();
    a.try_acquire().unwrap().release().unwrap();
    let _b_held = b.try_acquire().unwrap();
    assert!(a.try_acquire().unwrap_err().is_held());

    // `b` holds the old directory, moved away: the path names a new, free lock.
    std::fs::rename(&path, dir.path().join("old.lease")).unwrap();
    let guard = a.try_acquire().unwrap();
    assert!(guard.check().is_ok());
    guard.release().unwrap();
}

#[test]
fn a_store_never_acquires_through_a_kept_directory_that_was_moved_away() {
    let dir = tempfile::tempdir().unwrap();
    let key = LeaseKey::new("job").unwrap();
    let a = DirectoryStore::open(dir.path()).unwrap();
    let path = lease_dir::key_dir(dir.path(), &key);
    let b = DirectoryStore::open(dir.path()).unwrap();
    let lease = pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    pollster::block_on(a.release_lease(&lease)).unwrap();

    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    let held = pollster::block_on(b.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    let err = pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap_err();
    assert!(err.is_held(), "{err}");
    pollster::block_on(b.release_lease(&held)).unwrap();
    let again = pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(again.fencing_token() > held.fencing_token());
    pollster::block_on(a.release_lease(&again)).unwrap();

    std::fs::remove_dir_all(&path).unwrap();
    let fresh = pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(
        pollster::block_on(b.try_acquire(&key, TTL, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );
    pollster::block_on(a.release_lease(&fresh)).unwrap();

    // Refused through a kept directory held in a moved-away copy: the path is free.
    let lease = pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    pollster::block_on(a.release_lease(&lease)).unwrap();
    let _held = pollster::block_on(b.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(
        pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default()))
            .unwrap_err()
            .is_held()
    );
    std::fs::rename(&path, dir.path().join("moved-again")).unwrap();
    pollster::block_on(a.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
}

#[test]
fn a_store_renews_and_releases_by_the_name_it_gave_and_notices_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let key = LeaseKey::new("job").unwrap();
    let store = DirectoryStore::open(dir.path()).unwrap();
    let other = DirectoryStore::open(dir.path()).unwrap();
    let lease =
        pollster::block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    // Renewed through another handle of the same directory: the name this store remembers is
    // gone, so it looks, and carries on.
    let renewed = pollster::block_on(lease_core::LeaseBackend::renew(&other, &lease, TTL)).unwrap();
    let renewed =
        pollster::block_on(lease_core::LeaseBackend::renew(&store, &renewed, TTL)).unwrap();
    let renewed =
        pollster::block_on(lease_core::LeaseBackend::renew(&store, &renewed, TTL)).unwrap();
    pollster::block_on(store.release_lease(&renewed)).unwrap();
    assert!(
        pollster::block_on(store.release_lease(&renewed))
            .unwrap_err()
            .is_not_owned()
    );
    let next =
        pollster::block_on(other.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(next.fencing_token() > lease.fencing_token());
}

/// The label of the holder another lock on `path` is refused by.
fn holder_label(path: &std::path::Path) -> Option<String> {
    FileLock::new(path)
        .unwrap()
        .try_acquire()
        .unwrap_err()
        .holder()
        .and_then(|h| h.owner().map(str::to_owned))
}

#[test]
fn descriptions_follow_the_state_entry_even_when_it_is_replaced_by_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.lease");
    let labelled = |label: &str| FileLock::builder(&path).with_label(label).build();
    let (a, b) = (labelled("a").unwrap(), labelled("b").unwrap());
    for round in 0..3 {
        let held_a = a.try_acquire().unwrap();
        let fencing = held_a.fencing_token();
        assert_eq!(holder_label(&path).as_deref(), Some("a"), "round {round}");
        held_a.release().unwrap();
        let held_b = b.try_acquire().unwrap();
        assert!(held_b.fencing_token() > fencing);
        assert_eq!(holder_label(&path).as_deref(), Some("b"), "round {round}");
        held_b.release().unwrap();
    }
    // The free state entry replaced by hand with a copy (another inode, same name): the next
    // description goes to the copy, which is the state entry now.
    let entry = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("free.")
        })
        .unwrap();
    let copy = dir.path().join("copy");
    std::fs::copy(&entry, &copy).unwrap();
    std::fs::rename(&copy, &entry).unwrap();
    let held_a = a.try_acquire().unwrap();
    assert_eq!(holder_label(&path).as_deref(), Some("a"));
    held_a.release().unwrap();
}

#[test]
fn a_holder_whose_directory_is_removed_or_moved_loses_at_its_next_heartbeat() {
    use lease_core::LossReason;
    for remove in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.lease");
        let lock = FileLock::builder(&path)
            .with_heartbeat_interval(Duration::from_millis(20))
            .with_stale_threshold(Duration::from_secs(3))
            .build()
            .unwrap();
        let guard = lock.try_acquire().unwrap();
        if remove {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::rename(&path, dir.path().join("moved")).unwrap();
        }
        // Long before the deadline (2.7 s): the loss is the removal, not failing heartbeats.
        let started = std::time::Instant::now();
        while loss(&guard).is_none() && started.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            matches!(
                loss(&guard),
                Some(LossReason::NotOwned(
                    NotOwnedReason::TakenOver | NotOwnedReason::Missing
                ))
            ),
            "remove {remove}: {:?} after {:?}",
            loss(&guard),
            started.elapsed()
        );
        assert!(guard.check().is_err());
    }
}
