//! The blocking face against a model, in both modes: random sequences of acquisitions, releases,
//! checks and dropped locks over several `FileLock`s on one path must agree with a model in which
//! at most one lock holds the path and every acquisition gets a greater fencing generation. (The
//! store face runs the lease-core conformance suite and its model in both modes:
//! `tests/conformance.rs`; both faces run one engine.)
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
use std::time::Duration;

use lease_file::{FileLock, FileLockBuilder, FileLockGuard, ModePreference};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    TryAcquire(usize),
    Release(usize),
    Check(usize),
    /// Drop the lock object (releasing if held) and make a new one for the same path.
    Replace(usize),
}

fn op(locks: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..locks).prop_map(Op::TryAcquire),
        2 => (0..locks).prop_map(Op::Release),
        1 => (0..locks).prop_map(Op::Check),
        1 => (0..locks).prop_map(Op::Replace),
    ]
}

fn options(path: impl Into<std::path::PathBuf>, mode: ModePreference) -> FileLockBuilder {
    // Long enough that no lease expires during a case: the model has no time.
    FileLock::builder(path)
        .with_mode(mode)
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_stale_threshold(Duration::from_secs(30))
}

fn run(mode: ModePreference, ops: &[Op]) -> Result<(), TestCaseError> {
    const LOCKS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("face.lease");
    let make = || options(&path, mode).build().unwrap();
    let mut locks: Vec<FileLock> = (0..LOCKS).map(|_| make()).collect();
    // What each lock holds: a guard, the only handle on a tenure.
    let mut guards: Vec<Option<FileLockGuard>> = (0..LOCKS).map(|_| None).collect();
    let mut holder: Option<usize> = None;
    let mut last = 0u64;
    for op in ops {
        match *op {
            Op::TryAcquire(i) => match locks[i].try_acquire() {
                Ok(guard) => {
                    let fencing = guard.fencing_token();
                    prop_assert_eq!(holder, None, "{:?}: acquired while {:?} holds", op, holder);
                    prop_assert!(
                        fencing.get() > last,
                        "fencing {} after {}",
                        fencing.get(),
                        last
                    );
                    last = fencing.get();
                    holder = Some(i);
                    guards[i] = Some(guard);
                }
                // Held by another lock, or by this lock's own guard: a contender either way.
                Err(e) if e.is_held() => {
                    prop_assert!(holder.is_some(), "{:?}: {}", op, e);
                    prop_assert_eq!(
                        e.holder().and_then(|h| h.fencing_token()).map(|f| f.get()),
                        Some(last)
                    );
                }
                Err(e) => prop_assert!(false, "{:?}: {}", op, e),
            },
            Op::Release(i) => match guards[i].take() {
                Some(guard) => {
                    prop_assert_eq!(holder, Some(i), "{:?}", op);
                    let released = guard.release();
                    prop_assert!(released.is_ok(), "{:?}: {:?}", op, released);
                    holder = None;
                }
                None => prop_assert_ne!(holder, Some(i), "{:?}", op),
            },
            Op::Check(i) => {
                let check = guards[i].as_ref().map(FileLockGuard::check);
                prop_assert_eq!(
                    check.as_ref().is_some_and(Result::is_ok),
                    holder == Some(i),
                    "{:?}",
                    op
                );
                if let Some(Ok(fencing)) = check {
                    prop_assert_eq!(fencing.get(), last);
                }
            }
            Op::Replace(i) => {
                // The lock and its guard are dropped: the guard releases.
                guards[i] = None;
                locks[i] = make();
                if holder == Some(i) {
                    holder = None;
                }
            }
        }
    }
    Ok(())
}

proptest! {
    // 12 cases under Wine, where 48 took 2.5 s.
    #![proptest_config(ProptestConfig {
        cases: if cfg!(windows) { 12 } else { 48 },
        ..ProptestConfig::default()
    })]

    #[cfg(unix)]
    #[test]
    fn file_locks_match_the_model_in_kernel_mode(ops in prop::collection::vec(op(3), 1..40)) {
        run(ModePreference::Kernel, &ops)?;
    }

    #[test]
    fn file_locks_match_the_model_heartbeat_only(ops in prop::collection::vec(op(3), 1..40)) {
        run(ModePreference::HeartbeatOnly, &ops)?;
    }
}

/// `with_fsync` on both faces: every rename is followed by an fsync of the lock directory; the
/// protocol behaves the same.
#[test]
fn both_faces_work_with_fsync() {
    use lease_core::{FencedValues, LeaseKey};
    let dir = tempfile::tempdir().unwrap();
    // Kernel mode where there is one (Windows has heartbeat-only mode alone).
    let lock = options(dir.path().join("durable.lease"), ModePreference::Auto)
        .with_fsync()
        .build()
        .unwrap();
    let first = lock.acquire().unwrap();
    let fencing = first.fencing_token();
    first.release().unwrap();
    let second = lock.acquire().unwrap();
    assert!(second.fencing_token() > fencing);
    second.release().unwrap();

    let store = lease_file::DirectoryStore::builder(dir.path().join("store"))
        .with_fsync()
        .build()
        .unwrap();
    let key = LeaseKey::new("durable").unwrap();
    let lease = pollster::block_on(store.acquire(&key, Duration::from_secs(30))).unwrap();
    let name = LeaseKey::new("checkpoint").unwrap();
    pollster::block_on(store.put_fenced(&name, lease.fencing_token(), b"v1")).unwrap();
    let read =
        pollster::block_on(store.fence_and_read(&name, lease_core::backend::fencing_token(9)))
            .unwrap();
    assert_eq!(read.as_deref(), Some(&b"v1"[..]));
    pollster::block_on(store.release_lease(&lease)).unwrap();
}
