//! A store with verbatim names (`DirectoryStoreBuilder::with_verbatim_names`, what `lease run
//! --path` uses): key `NAME` is the lock at exactly `dir/NAME`, the same lock a `FileLock` on
//! that path takes and the path a Go `kit/lockfile` `PIDLock` uses.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::time::{Duration, SystemTime};

use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
use lease_file::{DirectoryStore, FileLock};
use pollster::block_on;

const TTL: Duration = Duration::from_secs(30);

#[test]
fn a_verbatim_key_is_the_file_lock_at_that_path() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::builder(dir.path())
        .with_verbatim_names()
        .build()
        .unwrap();
    let key = LeaseKey::new(".wave-dev.lock").unwrap();
    let path = dir.path().join(".wave-dev.lock");

    let lease = block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(path.is_dir(), "the lock directory is at the exact path");
    let lock = FileLock::new(&path).unwrap();
    let err = lock.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    block_on(store.release(&key, lease.token(), lease.fencing_token())).unwrap();

    // One fencing sequence across both faces.
    let guard = lock.try_acquire().unwrap();
    assert!(guard.fencing_token() > lease.fencing_token());
    let err = block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap_err();
    assert!(err.is_held(), "{err}");
    let fencing = guard.fencing_token();
    guard.release().unwrap();
    let again = block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap();
    assert!(again.fencing_token() > fencing);
}

#[test]
fn a_go_pidlock_at_a_verbatim_path_holds_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::builder(dir.path())
        .with_verbatim_names()
        .build()
        .unwrap();
    let path = dir.path().join("dev.lock");
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut file = std::fs::File::create_new(&path).unwrap();
    writeln!(
        file,
        "{{\"version\":1,\"ownerID\":\"go-1\",\"pid\":4242,\"lastHeartbeatUnixNano\":{nanos}}}"
    )
    .unwrap();
    let key = LeaseKey::new("dev.lock").unwrap();
    let err = block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap_err();
    assert!(err.is_held(), "{err}");
    assert_eq!(err.holder().and_then(|h| h.pid()), Some(4242), "{err}");
    let record = block_on(store.inspect(&key)).unwrap().unwrap();
    assert_eq!(record.holder().and_then(|h| h.pid()), Some(4242));
    assert!(path.is_file(), "the Go lock is left alone");
}

#[test]
fn a_verbatim_key_must_be_one_plain_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::builder(dir.path())
        .with_verbatim_names()
        .build()
        .unwrap();
    let long = "x".repeat(256);
    let bad = [
        LeaseKey::with_sort_key("job", "LOCK").unwrap(),
        LeaseKey::new(".").unwrap(),
        LeaseKey::new("..").unwrap(),
        LeaseKey::new("a/b").unwrap(),
        LeaseKey::new(long.as_str()).unwrap(),
    ];
    for key in bad {
        let err = block_on(store.try_acquire(&key, TTL, &AcquireOptions::default())).unwrap_err();
        assert!(err.is_invalid_input(), "{key}: {err}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}
