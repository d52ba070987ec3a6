//! Races that need a pause at an exact point, made with the fault points of the `failpoints`
//! feature: `cargo test -p lease-file --features failpoints --test fault_points`. The `fail`
//! registry is process-wide, so this binary holds only tests that configure it, one at a time.
// Unix only: permission bits and Unix metadata in its checks.
#![cfg(unix)]
#![cfg(feature = "failpoints")]
#![allow(clippy::unwrap_used)]

mod nobody;
mod raw;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease_core::{LossReason, NotOwnedReason};
use lease_file::FileLock;

/// One test at a time: they share the fault point registry.
static SERIAL: Mutex<()> = Mutex::new(());

/// The fault points run (the `fail` crate's own `failpoints` feature is on): without it,
/// `fail_point!` compiles to nothing and every pause test would pass without pausing anything.
#[test]
fn the_fault_points_run() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    fail::cfg_callback("lease-file/before-acquire", move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lock = FileLock::builder(dir.path().join("a.lease"))
        .with_heartbeat_interval(Duration::from_millis(50))
        .build()
        .unwrap();
    lock.acquire().unwrap().release().unwrap();
    fail::remove("lease-file/before-acquire");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "fail_point! is compiled out"
    );
}

/// The lock directory replaced between a heartbeat's look at the path and its rename: the rename
/// renews the state in the directory moved away, where nobody looks any more. The holder must not
/// count that renewal: it used to extend its deadline from it and trust a tenure the contender on
/// the fresh directory already held, until its next heartbeat, and now reports the loss from that
/// very heartbeat. So the overlap with the contender stays within the deadline the holder had
/// when its directory was replaced.
#[test]
fn a_renewal_in_a_directory_replaced_under_the_heartbeat_is_not_trusted() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let moved = dir.path().join("a.lease.moved");
    let (lost_tx, lost) = std::sync::mpsc::channel();
    // Heartbeats 500 ms apart: the loss is reported by the paused heartbeat itself, not by the
    // next one.
    let holder = FileLock::builder(&path)
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_stale_threshold(Duration::from_secs(5))
        .on_lost(move |reason| {
            let _ = lost_tx.send((std::time::Instant::now(), reason.clone()));
        })
        .build()
        .unwrap()
        .acquire()
        .unwrap();

    let (paused_tx, paused) = std::sync::mpsc::channel::<()>();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let armed = Mutex::new(Some((paused_tx, go_rx)));
    fail::cfg_callback("lease-file/before-renew", move || {
        // The first heartbeat only: wait there while the test replaces the directory.
        let taken = armed.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((paused_tx, go_rx)) = taken {
            paused_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        }
    })
    .unwrap();
    paused
        .recv_timeout(Duration::from_secs(5))
        .expect("the holder's heartbeat reached the fault point");
    // The heartbeat has found the directory at the path; now it is replaced.
    std::fs::rename(&path, &moved).unwrap();
    let contender = FileLock::new(&path).unwrap().try_acquire().unwrap();
    assert_eq!(contender.fencing_token().get(), 1);
    let before = entries(&moved);
    let resumed = std::time::Instant::now();
    go.send(()).unwrap();

    // The paused rename goes through, in the directory moved away...
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while entries(&moved) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the heartbeat never renamed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // ... and the holder does not count it: it is told at once, not 500 ms later.
    let (at, reason) = lost.recv_timeout(Duration::from_secs(5)).unwrap();
    fail::remove("lease-file/before-renew");
    assert!(
        at - resumed < Duration::from_millis(250),
        "lost {:?} after the replaced renewal: {reason}",
        at - resumed
    );
    assert!(
        matches!(
            reason,
            LossReason::NotOwned(NotOwnedReason::TakenOver | NotOwnedReason::Missing)
        ),
        "{reason}"
    );
    assert!(holder.check().unwrap_err().is_not_owned());
    assert!(contender.check().is_ok());
    contender.release().unwrap();
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

mod prune {
    //! A prune (or delete) racing acquisitions of the same key, paused at each of its steps
    //! and at the acquirer's: one holder at a time, tokens above every earlier one.

    use super::SERIAL;
    use crate::raw::Raw as _;
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use lease_core::{AcquireOptions, LeaseBackend, LeaseKey, ManualClock};
    use lease_file::{DirectoryStore, ModePreference};

    const MODES: [ModePreference; 2] = [ModePreference::Kernel, ModePreference::HeartbeatOnly];
    const D: Duration = Duration::from_secs(60);

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        pollster::block_on(f)
    }

    fn store(
        dir: &std::path::Path,
        mode: ModePreference,
        clock: &Arc<ManualClock>,
    ) -> DirectoryStore {
        DirectoryStore::builder(dir)
            .with_mode(mode)
            .with_clock(clock.clone())
            .build()
            .unwrap()
    }

    /// Runs `during` (once) when the fault point `point` is first reached, in the thread that
    /// reached it.
    fn once_at(point: &'static str, during: impl FnOnce() + Send + 'static) {
        let armed = Mutex::new(Some(during));
        fail::cfg_callback(point, move || {
            let taken = armed.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(during) = taken {
                during();
            }
        })
        .unwrap();
    }

    /// Each new fault point fires once per step of its kind: a key created, pruned (ended,
    /// then its directory removed), and created again.
    #[test]
    fn the_prune_fault_points_fire() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        const POINTS: [&str; 3] = [
            "lease-file/before-create",
            "lease-file/before-end",
            "lease-file/before-rmdir",
        ];
        for mode in MODES {
            let hits: Arc<Mutex<Vec<&str>>> = Arc::default();
            for point in POINTS {
                let hits = hits.clone();
                fail::cfg_callback(point, move || hits.lock().unwrap().push(point)).unwrap();
            }
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new());
            let store = store(dir.path(), mode, &clock);
            let key = LeaseKey::new("job").unwrap();
            let lease = block_on(store.acquire(&key, D)).unwrap();
            block_on(store.release_lease(&lease)).unwrap();
            assert_eq!(
                store.prune(Duration::ZERO).unwrap().removed,
                vec![key.clone()]
            );
            block_on(store.acquire(&key, D)).unwrap();
            for point in POINTS {
                fail::remove(point);
            }
            assert_eq!(
                *hits.lock().unwrap(),
                [POINTS[0], POINTS[1], POINTS[2], POINTS[0]],
                "{mode:?}"
            );
        }
    }

    /// The pruner observed `free.<g>` and is about to end the key; an acquirer takes it first.
    /// The prune's rename from `free.<g>` fails: the key stays, held.
    #[test]
    fn a_key_acquired_while_the_prune_is_paused_before_ending_it_stays_held() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new());
            let key = LeaseKey::new("job").unwrap();
            let old = block_on(store(dir.path(), mode, &clock).acquire(&key, D)).unwrap();
            block_on(store(dir.path(), mode, &clock).release_lease(&old)).unwrap();
            let got = Arc::new(Mutex::new(None));
            let (acquirer, k, slot) = (store(dir.path(), mode, &clock), key.clone(), got.clone());
            once_at("lease-file/before-end", move || {
                let lease = block_on(acquirer.try_acquire(&k, D, &AcquireOptions::default()));
                *slot.lock().unwrap() = Some((acquirer, lease));
            });
            let report = store(dir.path(), mode, &clock)
                .prune(Duration::ZERO)
                .unwrap();
            fail::remove("lease-file/before-end");
            let (acquirer, lease) = got.lock().unwrap().take().unwrap();
            let lease = lease.unwrap();
            assert!(report.removed.is_empty(), "{mode:?} {report:?}");
            assert_eq!(report.busy, 1, "{mode:?} {report:?}");
            assert!(lease.fencing_token() > old.fencing_token());
            let lease = block_on(acquirer.renew(&lease, D)).unwrap();
            let record = block_on(acquirer.inspect(&key)).unwrap().unwrap();
            assert_eq!(
                record.fencing_token(),
                Some(lease.fencing_token()),
                "{mode:?}"
            );
        }
    }

    /// The acquirer observed `free.<g>` and is about to rename it; the key is pruned meanwhile
    /// (heartbeat-only: in kernel mode the acquirer's kernel lock keeps the prune off). Its
    /// rename fails, it creates the key afresh, and its token is above the old ones.
    #[test]
    fn an_acquirer_paused_before_its_rename_while_the_key_is_pruned_gets_a_higher_token() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new());
            let key = LeaseKey::new("job").unwrap();
            let acquirer = store(dir.path(), mode, &clock);
            let old = block_on(acquirer.acquire(&key, D)).unwrap();
            block_on(acquirer.release_lease(&old)).unwrap();
            let reports = Arc::new(Mutex::new(Vec::new()));
            let (pruner, seen) = (store(dir.path(), mode, &clock), reports.clone());
            once_at("lease-file/before-acquire", move || {
                seen.lock()
                    .unwrap()
                    .push(pruner.prune(Duration::ZERO).unwrap());
            });
            let lease = block_on(acquirer.try_acquire(&key, D, &AcquireOptions::default()));
            fail::remove("lease-file/before-acquire");
            let lease = lease.unwrap();
            let report = reports.lock().unwrap().pop().unwrap();
            match mode {
                ModePreference::HeartbeatOnly => {
                    assert_eq!(report.removed, vec![key.clone()], "{report:?}")
                }
                _ => assert_eq!(report.busy, 1, "{mode:?} {report:?}"),
            }
            assert!(lease.fencing_token() > old.fencing_token(), "{mode:?}");
            let record = block_on(acquirer.inspect(&key)).unwrap().unwrap();
            assert_eq!(
                record.fencing_token(),
                Some(lease.fencing_token()),
                "{mode:?}"
            );
            assert!(
                block_on(store(dir.path(), mode, &clock).try_acquire(
                    &key,
                    D,
                    &AcquireOptions::default()
                ))
                .unwrap_err()
                .is_held(),
                "{mode:?}: one holder"
            );
        }
    }

    /// The pruner ended the key and emptied its directory, and is about to `rmdir` it; an
    /// acquirer finds the empty directory, removes it itself and creates the key afresh. The
    /// prune's `rmdir` then meets the new, non-empty directory and removes nothing.
    #[test]
    fn an_acquirer_while_the_prune_is_paused_before_its_rmdir_creates_the_key_afresh() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new());
            let key = LeaseKey::new("job").unwrap();
            let old = block_on(store(dir.path(), mode, &clock).acquire(&key, D)).unwrap();
            block_on(store(dir.path(), mode, &clock).release_lease(&old)).unwrap();
            let got = Arc::new(Mutex::new(None));
            let (acquirer, k, slot) = (store(dir.path(), mode, &clock), key.clone(), got.clone());
            once_at("lease-file/before-rmdir", move || {
                let lease = block_on(acquirer.try_acquire(&k, D, &AcquireOptions::default()));
                *slot.lock().unwrap() = Some((acquirer, lease));
            });
            let report = store(dir.path(), mode, &clock)
                .prune(Duration::ZERO)
                .unwrap();
            fail::remove("lease-file/before-rmdir");
            let (acquirer, lease) = got.lock().unwrap().take().unwrap();
            let lease = lease.unwrap();
            assert_eq!(report.removed, vec![key.clone()], "{mode:?} {report:?}");
            assert!(lease.fencing_token() > old.fencing_token(), "{mode:?}");
            let lease = block_on(acquirer.renew(&lease, D)).unwrap();
            assert_eq!(
                store(dir.path(), mode, &clock).keys().unwrap(),
                vec![key.clone()]
            );
            block_on(acquirer.release_lease(&lease)).unwrap();
        }
    }

    /// A creator read the clock for its first generation and is paused before putting its
    /// directory in place; meanwhile the key is created by another, acquired at a later clock
    /// reading, released and pruned. When the paused creator resumes, its token must still be
    /// above the one issued meanwhile: a prune or delete leaves a key alone while a creation of
    /// it is under way (and an ended directory in place), so the stale first generation is
    /// never published.
    #[test]
    fn a_creator_paused_before_its_rename_across_a_prune_never_issues_a_lower_token() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new());
            // A store that deleted once: new keys start from the clock.
            let seeder = store(dir.path(), mode, &clock);
            let other = LeaseKey::new("other").unwrap();
            let lease = block_on(seeder.acquire(&other, D)).unwrap();
            block_on(seeder.release_lease(&lease)).unwrap();
            seeder.prune(Duration::ZERO).unwrap();

            let key = LeaseKey::new("job").unwrap();
            let (paused_tx, paused) = mpsc::channel::<()>();
            let (go, go_rx) = mpsc::channel::<()>();
            let armed = Mutex::new(Some((paused_tx, go_rx)));
            fail::cfg_callback("lease-file/before-create", move || {
                let taken = armed.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some((paused_tx, go_rx)) = taken {
                    paused_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                }
            })
            .unwrap();
            let (creator, k) = (store(dir.path(), mode, &clock), key.clone());
            let stale = std::thread::spawn(move || {
                block_on(creator.try_acquire(&k, D, &AcquireOptions::default()))
            });
            paused.recv_timeout(Duration::from_secs(5)).unwrap();
            clock.advance(Duration::from_secs(1));
            let meanwhile = store(dir.path(), mode, &clock);
            let newer = block_on(meanwhile.acquire(&key, D)).unwrap();
            block_on(meanwhile.release_lease(&newer)).unwrap();
            clock.advance(Duration::from_secs(1));
            // The prune sees the creation under way and keeps the key (it would otherwise be
            // ended and left in place until the creation is over).
            let report = meanwhile.prune(Duration::ZERO).unwrap();
            assert_eq!(report.busy, 1, "{mode:?} {report:?}");
            go.send(()).unwrap();
            let resumed = stale.join().unwrap();
            fail::remove("lease-file/before-create");
            let resumed = resumed.unwrap();
            assert!(
                resumed.fencing_token() > newer.fencing_token(),
                "{mode:?}: {} issued after {}",
                resumed.fencing_token().get(),
                newer.fencing_token().get()
            );
        }
    }
}

/// A leader read the instant the rename makes it the holder, before it writes its description
/// (owner and published value, written just after): the read waits for the description. It
/// used to show "a holder still writing its description" with no value, and an election
/// observer, which reports each tenure once, then gave its followers a leader without the
/// address they route to (a 30-minute chaos run caught it: an observer reported token 13667
/// with no value).
#[test]
fn a_leader_read_mid_acquisition_is_shown_with_its_published_value() {
    use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
    use pollster::block_on;
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lease_file::DirectoryStore::open(dir.path()).unwrap());
    let key = LeaseKey::new("leader").unwrap();
    let (renamed, told) = std::sync::mpsc::channel::<()>();
    let renamed = Mutex::new(renamed);
    fail::cfg_callback("lease-file/before-describe", move || {
        let _ = renamed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(());
        std::thread::sleep(Duration::from_millis(5));
    })
    .unwrap();
    let holder = {
        let (store, key) = (store.clone(), key.clone());
        std::thread::spawn(move || {
            let options = AcquireOptions::default().with_value("10.0.0.7:8080");
            block_on(store.try_acquire(&key, Duration::from_secs(30), &options))
        })
    };
    told.recv_timeout(Duration::from_secs(10)).unwrap();
    let record = block_on(store.inspect(&key));
    let lease = holder.join().unwrap();
    fail::remove("lease-file/before-describe");
    let lease = lease.unwrap();
    let holder = record.unwrap().unwrap().holder().cloned().unwrap();
    assert_eq!(holder.fencing_token(), Some(lease.fencing_token()));
    assert_eq!(
        holder.value(),
        Some("10.0.0.7:8080"),
        "the leader is shown without its value: {holder:?}"
    );
}

/// The other side of the same window: a holder erases its description just before the rename
/// that releases it (so a free key costs no data block). A read between the two used to show
/// the ending tenure as a leader without owner or value (a second 30-minute chaos run caught an
/// observer reporting token 12206 so, just before its release); it now reads again and reports
/// the release.
#[test]
fn a_leader_read_mid_release_is_shown_released() {
    use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
    use pollster::block_on;
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(lease_file::DirectoryStore::open(dir.path()).unwrap());
    let key = LeaseKey::new("leader").unwrap();
    let options = AcquireOptions::default().with_value("10.0.0.7:8080");
    let lease = block_on(store.try_acquire(&key, Duration::from_secs(30), &options)).unwrap();
    // Long enough a tenure for its release to erase its description first.
    std::thread::sleep(Duration::from_millis(30));
    let (erased, told) = std::sync::mpsc::channel::<()>();
    let erased = Mutex::new(erased);
    fail::cfg_callback("lease-file/before-release", move || {
        let _ = erased
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(());
        std::thread::sleep(Duration::from_millis(5));
    })
    .unwrap();
    let releasing = {
        let store = store.clone();
        std::thread::spawn(move || {
            block_on(store.release(lease.key(), lease.token(), lease.fencing_token()))
        })
    };
    told.recv_timeout(Duration::from_secs(10)).unwrap();
    let record = block_on(store.inspect(&key));
    let released = releasing.join().unwrap();
    fail::remove("lease-file/before-release");
    released.unwrap();
    let record = record.unwrap().unwrap();
    assert!(
        record.holder().is_none(),
        "a tenure being released is shown as held without its description: {:?}",
        record.holder()
    );
}

/// Issue 37, item 4: another user swaps an existing directory of root's in for the temporary
/// root has just made to build a lock directory in. Root-only (the attacker runs as `nobody`
/// through `setpriv`); skipped with the reason printed otherwise. The rest of the item (files
/// moved into a squatted lock directory) is `tests/moved_in.rs`.
mod moved_in {
    use super::SERIAL;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::sync::PoisonError;
    use std::time::Duration;

    use lease_core::{AcquireOptions, LeaseBackend, LeaseKey};
    use lease_file::DirectoryStore;

    use super::nobody::{NOBODY, as_nobody, mkdir_owned, root_only};

    /// A root-owned directory made before (a mode no lock directory has, 0700) swapped in for root's
    /// temporary directory, between its `mkdirat` and its `openat`, by `nobody`, who owns the
    /// store: root refuses it (the creation fails, transiently), never `fchmod`s it, never
    /// creates an entry in it, never renames it into place.
    #[test]
    fn an_older_directory_swapped_in_for_a_temporary_is_never_chmodded_or_used() {
        let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
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
            let (store_path, decoy_path, setpriv) =
                (store_dir.clone(), decoy.clone(), setpriv.clone());
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
                pollster::block_on(store.release(&key, lease.token(), lease.fencing_token()))
                    .unwrap();
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
        assert!(
            touched.is_empty(),
            "root used a directory swapped in for its temporary in {} of {rounds} rounds: {touched:#?}",
            touched.len()
        );
    }

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
}
