//! The blocking lock in one process: parity with the Go API, release fencing, loss reporting,
//! hostile files. A lock at `P` is a directory whose one state entry's name is the lease state
//! (read here with `lease_dir`, independently of the crate's code).
#![allow(clippy::unwrap_used)]

mod raw;

use raw::Raw as _;
mod lease_dir;

#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use lease_core::{LossReason, NotOwnedReason, WaitOptions};
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
use lease_dir::monotonic_ns;
use lease_dir::{Held, State, fnv};
use lease_file::{FileLock, FileLockBuilder, LockMode, ModePreference};

/// Why `guard`'s tenure can no longer be trusted, if it cannot: `check`'s error carries it.
fn loss(guard: &lease_file::FileLockGuard) -> Option<lease_core::LossReason> {
    match guard.check() {
        Err(lease_core::LeaseError::Lost { reason, .. }) => Some(reason),
        _ => None,
    }
}

fn fast(path: impl Into<std::path::PathBuf>) -> FileLockBuilder {
    FileLock::builder(path)
        .with_heartbeat_interval(Duration::from_millis(20))
        .with_stale_threshold(Duration::from_millis(300))
        .with_retry_delay(Duration::from_millis(10))
}

/// The held state of the lock at `path` (panics if it is free).
fn held(path: &Path) -> (String, Held) {
    match lease_dir::state(path) {
        (name, State::Held(h)) => (name, h),
        (name, State::Free(_)) => panic!("{} is free ({name})", path.display()),
    }
}

/// Renames the state entry of a lock whose holder keeps renewing it (so its name keeps
/// changing) to `to`, and returns the name it had.
fn rename_state(path: &Path, to: &str) -> String {
    loop {
        let (name, _) = lease_dir::state(path);
        match std::fs::rename(path.join(&name), path.join(to)) {
            Ok(()) => return name,
            // The heartbeat renamed it first: look again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// Waits until `cond` holds, for at most `limit`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Runs `f` on a thread and fails if it does not return within `limit` (a blocked open fails
/// the test instead of hanging it).
#[cfg(unix)]
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("still blocked after {limit:?}"))
}

// Not with `portable-paths` (lease-file's platforms page): asserts the state's shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn acquire_release_held_path_and_fencing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/dir/a.lease");
    let lock = FileLock::new(&path).unwrap();
    assert_eq!(lock.path(), path);
    assert_eq!(lock.mode(), LockMode::Kernel);
    let guard = lock.try_acquire().unwrap();
    let first = guard.fencing_token();
    assert!(guard.check().is_ok());
    // While the guard lives, acquiring through the same lock is contending with it.
    let again = lock.try_acquire().unwrap_err();
    assert!(again.is_held(), "{again}");
    assert_eq!(
        again.holder().and_then(|h| h.pid()),
        Some(std::process::id())
    );
    let (_, state) = held(&path);
    assert_eq!(state.generation, first.get());
    assert!(state.kernel.is_some(), "the holder holds the kernel lock");
    assert!(
        state.scale.is_some() && state.deadline_ns > monotonic_ns(),
        "a deadline ahead on this host's monotonic clock: {state:?}"
    );
    let record = lease_dir::description(&path);
    assert_eq!(record.pid, std::process::id());
    assert_eq!(record.generation, first.get());
    assert_eq!(
        fnv(record.owner.as_deref().unwrap().as_bytes()),
        state.token,
        "the description is this tenure's"
    );
    assert!(record.tenure);
    guard.release().unwrap();
    assert_eq!(
        lease_dir::state(&path).1,
        State::Free(first.get()),
        "release keeps the generation"
    );
    let second = lock.try_acquire().unwrap();
    assert!(second.fencing_token() > first);
    assert_eq!(held(&path).1.generation, second.fencing_token().get());
}

#[test]
fn acquire_waits_for_the_guard_of_the_same_lock_as_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let lock = Arc::new(fast(dir.path().join("a.lease")).build().unwrap());
    let first = lock.acquire().unwrap();
    let fencing = first.fencing_token();
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.acquire().unwrap();
            tx.send(guard.fencing_token()).unwrap();
            guard.release().unwrap();
        })
    };
    // The waiter waits (it would have been told "already held" before guards).
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    first.release().unwrap();
    let next = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(next > fencing);
    waiter.join().unwrap();
}

#[test]
fn a_guard_outlives_its_lock_and_keeps_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let guard = fast(&path).build().unwrap().try_acquire().unwrap();
    // Dropped lock, living guard: the heartbeat goes on past the stale threshold.
    std::thread::sleep(Duration::from_millis(500));
    assert!(guard.check().is_ok());
    assert!(
        fast(&path)
            .build()
            .unwrap()
            .try_acquire()
            .unwrap_err()
            .is_held()
    );
    let fencing = guard.fencing_token();
    drop(guard);
    let next = fast(&path).build().unwrap().try_acquire().unwrap();
    assert!(next.fencing_token() > fencing);
}

#[test]
fn held_error_names_pid_host_and_since() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let holder = fast(&path).with_label("alice").build().unwrap();
    let _held = holder.try_acquire().unwrap();
    // As in the Go package, a live holder fails acquire at once: the retry budget is for races.
    // Were the held error retried, two 10 s delays would pass first.
    let other = fast(&path)
        .with_acquire_retries(2)
        .with_retry_delay(Duration::from_secs(10))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = other.try_acquire().unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "held is not retried"
    );
    assert!(err.is_held(), "{err}");
    let h = err.holder().unwrap();
    assert_eq!(h.pid(), Some(std::process::id()));
    assert_eq!(h.owner(), Some("alice"));
    assert!(h.acquired_at().is_some());
    assert!(h.renewed_at().is_some());
    assert_eq!(
        held(&path).1.kernel.is_some(),
        cfg!(unix),
        "the holder holds the kernel lock (no kernel mode on Windows)"
    );
    let err = other
        .acquire_with(&WaitOptions::new(Duration::from_millis(100)))
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    // The holder is named once, by the last error (the timeout's source).
    let last = std::error::Error::source(&err).map(ToString::to_string);
    assert!(last.is_some_and(|last| last.contains("alice")), "{err:?}");
}

#[test]
fn dropped_guard_frees_the_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let holder = fast(&path).build().unwrap();
    let guard = holder.try_acquire().unwrap();
    let g1 = guard.fencing_token();
    drop(guard);
    assert_eq!(lease_dir::state(&path).1, State::Free(g1.get()));
    let other = fast(&path).build().unwrap();
    assert!(other.try_acquire().unwrap().fencing_token() > g1);
}

// Not with `portable-paths` (lease-file's platforms page): a free kernel lock proves a holder gone only on the shared scale, which the portable paths lack.
#[cfg(all(target_os = "linux", not(feature = "portable-paths")))]
#[test]
fn kernel_tenure_lets_a_contender_take_over_when_the_holder_vanishes() {
    // Simulate a crash: the state names a holder on this host that claims the kernel lock of
    // this very directory, with a deadline an hour away, and nobody holds that lock.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let holder = fast(&path).build().unwrap();
    let guard = holder.try_acquire().unwrap();
    let (_, real) = held(&path);
    guard.release().unwrap();
    let kernel = real.kernel.unwrap();
    let crashed = Held {
        generation: real.generation + 1,
        seq: 3,
        token: fnv(b"crashed-owner"),
        deadline_ns: monotonic_ns() + 3_600_000_000_000,
        ..real.clone()
    };
    let mut current = format!("free.{}", real.generation);
    let other = fast(&path).build().unwrap();
    // The kernel lock speaks only for this very directory and this host's clock: a claim on
    // another directory, or from another boot or host, proves nothing.
    for (what, claim) in [
        (
            "another directory",
            Held {
                kernel: Some(kernel ^ 1),
                ..crashed.clone()
            },
        ),
        (
            "another host's clock",
            Held {
                scale: Some(real.scale.unwrap() ^ 1),
                ..crashed.clone()
            },
        ),
        (
            "no shared clock",
            Held {
                scale: None,
                ..crashed.clone()
            },
        ),
    ] {
        std::fs::rename(path.join(&current), path.join(claim.name())).unwrap();
        current = claim.name();
        let err = other.try_acquire().unwrap_err();
        assert!(err.is_held(), "{what}: {err}");
        assert_eq!(lease_dir::state(&path).0, current, "{what}: untouched");
    }
    std::fs::rename(path.join(&current), path.join(crashed.name())).unwrap();
    let start = Instant::now();
    let g = other.try_acquire().unwrap();
    assert!(start.elapsed() < Duration::from_millis(100));
    assert_eq!(g.fencing_token().get(), crashed.generation + 1);
    let (_, now) = held(&path);
    assert_eq!(now.kernel, Some(kernel), "the new holder holds it in turn");
}

#[test]
fn a_live_holder_is_never_stale_and_learns_when_its_state_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let seen: Arc<Mutex<Vec<LossReason>>> = Arc::default();
    let seen2 = seen.clone();
    let holder = fast(&path)
        .on_lost(move |r| seen2.lock().unwrap().push(r.clone()))
        .build()
        .unwrap();
    let guard = holder.try_acquire().unwrap();
    let g1 = guard.fencing_token();
    let contender = fast(&path).build().unwrap();
    assert!(contender.try_acquire().unwrap_err().is_held());
    // The live holder keeps renewing past the stale threshold: the contender never calls it stale.
    std::thread::sleep(Duration::from_millis(500));
    assert!(contender.try_acquire().unwrap_err().is_held());
    assert!(guard.check().is_ok());
    let (_, now) = held(&path);
    assert_eq!(now.generation, g1.get());
    assert!(now.seq >= 5, "renewed meanwhile: {now:?}");
    // An operator forces the lease to another owner by renaming the state: the holder's next
    // renewal finds its name gone and reports TakenOver.
    let operator = Held {
        token: fnv(b"operator"),
        ..Held::hung(g1.get() + 10, Duration::from_millis(300))
    };
    rename_state(&path, &operator.name());
    assert!(wait_for(Duration::from_secs(2), || guard.check().is_err()));
    assert!(
        loss(&guard) == Some(LossReason::NotOwned(NotOwnedReason::TakenOver)),
        "{:?}",
        loss(&guard)
    );
    // The new owner is the operator's generation.
    assert_eq!(
        holder.holder().unwrap().and_then(|h| h.fencing_token()),
        Some(lease_core::backend::fencing_token(g1.get() + 10))
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(seen.lock().unwrap().len(), 1, "told once");
    let err = guard.release().unwrap_err();
    assert!(err.is_not_owned());
    assert_eq!(
        lease_dir::state(&path).0,
        operator.name(),
        "release touched nothing"
    );
}

#[test]
fn heartbeat_only_mode_works_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let a = fast(&path)
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    assert_eq!(a.mode(), LockMode::HeartbeatOnly);
    let b = fast(&path)
        .with_mode(ModePreference::HeartbeatOnly)
        .build()
        .unwrap();
    let guard = a.try_acquire().unwrap();
    let g1 = guard.fencing_token();
    let err = b.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.holder().is_some());
    // The holder claims no kernel lock, as its state entry says.
    assert_eq!(lease_dir::state(&path).1.held().unwrap().kernel, None);
    std::thread::sleep(Duration::from_millis(100));
    assert!(guard.check().is_ok());
    let (_, state) = held(&path);
    assert_eq!(
        state.kernel, None,
        "heartbeat-only never claims a kernel lock"
    );
    assert!(state.seq >= 2, "renewed meanwhile: {state:?}");
    assert_eq!(
        lease_dir::description(&path).protocol.as_deref(),
        Some("heartbeat-only")
    );
    guard.release().unwrap();
    assert!(b.try_acquire().unwrap().fencing_token() > g1);
    assert_eq!(lease_dir::entries(&path).len(), 1, "nothing but the state");
}

#[test]
fn invalid_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = FileLock::builder(dir.path().join("a"))
        .with_heartbeat_interval(Duration::from_secs(2))
        .with_stale_threshold(Duration::from_secs(3))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("stale_threshold"), "{err}");
}

#[test]
fn garbage_file_at_the_path_is_foreign_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let lock_at = |name: &str| fast(dir.path().join(name)).build().unwrap();
    let age = |path: &Path, by: Duration| {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    };
    // Garbage, and a lease-file 0.1 record (the old format): refused at once, never reclaimed,
    // whatever the invalid-record threshold.
    let old = b"{\"version\":1,\"pid\":7,\"generation\":3,\"owner\":\"x\"}\n".to_vec();
    for (name, bytes, says) in [
        (
            "garbage.lease",
            &b"{\"version\":1, \"pid\": tru"[..],
            "no format",
        ),
        ("old.lease", &old[..], "lease-file 0.1"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        age(&path, Duration::from_secs(2));
        let lock = lock_at(name);
        let err = lock.try_acquire().unwrap_err();
        assert!(err.is_foreign(), "{err}");
        assert!(err.to_string().contains(says), "{err}");
        let start = Instant::now();
        let err = lock
            .acquire_with(&WaitOptions::new(Duration::from_secs(2)))
            .unwrap_err();
        assert!(err.is_foreign(), "{err}");
        assert!(start.elapsed() < Duration::from_secs(1), "not waited for");
        std::thread::sleep(Duration::from_millis(350));
        assert!(lock.try_acquire().unwrap_err().is_foreign());
        assert!(path.is_file());
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "left untouched");
    }
    // Garbage modified a moment ago may be a Go lock file caught mid-write: held (as the Go
    // package counts it) until it has stood unparseable for 1.2 s, then foreign.
    let path = dir.path().join("fresh.lease");
    let bytes = b"{\"version\":1,\"ownerID\":\"go-ow";
    std::fs::write(&path, bytes).unwrap();
    let lock = lock_at("fresh.lease");
    let err = lock.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.to_string().contains("being written"), "{err}");
    age(&path, Duration::from_millis(1300));
    assert!(lock.try_acquire().unwrap_err().is_foreign());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left untouched");
    // An empty file is a Go kit/lockfile PIDLock being created: held, and never reclaimed.
    let path = dir.path().join("empty.lease");
    std::fs::write(&path, b"").unwrap();
    age(&path, Duration::from_secs(2));
    let lock = lock_at("empty.lease");
    let err = lock.try_acquire().unwrap_err();
    assert!(err.is_held(), "{err}");
    std::thread::sleep(Duration::from_millis(350));
    assert!(lock.try_acquire().unwrap_err().is_held());
    assert!(path.is_file() && std::fs::read(&path).unwrap().is_empty());
}

// Unix only: symbolic links (Windows: they need a privilege).
#[cfg(unix)]
#[test]
fn symlinks_are_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, b"do not touch").unwrap();
    // A symlink at the lock path, to a file or to a real lock directory.
    let path = dir.path().join("a.lease");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let lock = fast(&path).build().unwrap();
    let err = lock.try_acquire().unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read(&target).unwrap(), b"do not touch");
    let real = dir.path().join("real.lease");
    let owner = fast(&real).build().unwrap();
    owner.try_acquire().unwrap().release().unwrap();
    let link = dir.path().join("link.lease");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = fast(&link).build().unwrap().try_acquire().unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert_eq!(lease_dir::state(&real).1, State::Free(1), "not acquired");
    // A state entry that is a symlink: its name is the state; its target is never written.
    let name = lease_dir::state(&real).0;
    std::fs::remove_file(real.join(&name)).unwrap();
    std::os::unix::fs::symlink(&target, real.join(&name)).unwrap();
    let guard = owner.try_acquire().unwrap();
    std::thread::sleep(Duration::from_millis(60));
    guard.release().unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"do not touch");
    let (name, state) = lease_dir::state(&real);
    assert_eq!(state, State::Free(2));
    assert!(
        std::fs::symlink_metadata(real.join(name))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

// Unix only: FIFOs.
#[cfg(unix)]
#[test]
fn planted_directories_fifos_and_huge_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let try_at = |path: &Path| fast(path).build().unwrap().try_acquire().unwrap_err();
    // A directory with no state entry (an empty one, or only junk): never guessed, never
    // repaired.
    let empty = dir.path().join("empty.lease");
    std::fs::create_dir(&empty).unwrap();
    let err = try_at(&empty);
    assert!(
        err.is_corrupt() && err.to_string().contains("missing"),
        "{err}"
    );
    assert!(lease_dir::entries(&empty).is_empty());
    let junk = dir.path().join("junk.lease");
    lease_dir::plant(&junk, "free.007", b"");
    let err = try_at(&junk);
    assert!(
        err.is_corrupt() && err.to_string().contains("missing"),
        "{err}"
    );
    assert_eq!(lease_dir::entries(&junk), ["free.007"]);
    // Two state entries.
    let two = dir.path().join("two.lease");
    lease_dir::plant(&two, "free.1", b"");
    std::fs::write(two.join("free.2"), b"").unwrap();
    let err = try_at(&two);
    assert!(
        err.is_corrupt() && err.to_string().contains("two lease states"),
        "{err}"
    );
    assert_eq!(lease_dir::entries(&two), ["free.1", "free.2"]);

    // A FIFO at the path must not block the open.
    let fifo = dir.path().join("f.lease");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let start = Instant::now();
    let err = try_at(&fifo);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "a FIFO must not block the open"
    );
    assert!(err.is_corrupt(), "{err}");

    let huge = dir.path().join("h.lease");
    std::fs::write(&huge, vec![b' '; 10 * 1024 * 1024]).unwrap();
    let err = try_at(&huge);
    assert!(
        err.is_foreign() && err.to_string().contains("bytes"),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&huge).unwrap().len(), 10 * 1024 * 1024);
}

// Unix only: FIFOs.
#[cfg(unix)]
#[test]
fn a_fifo_as_the_state_entry_never_blocks() {
    // Its name is a state like any other; writing the description into it must not wait for a
    // reader (before the fix, the acquisition blocked in open(2) for ever, in both the lock and
    // the directory store).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    std::fs::create_dir(&path).unwrap();
    nix::unistd::mkfifo(
        &path.join("free.4"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let at = path.clone();
    let g = within(Duration::from_secs(5), move || {
        let lock = fast(&at).build().unwrap();
        let guard = lock.try_acquire().ok();
        let g = guard.as_ref().map(|g| g.fencing_token().get());
        let holder = fast(&at).build().unwrap().try_acquire().unwrap_err();
        drop(guard);
        (g, holder.is_held())
    });
    assert_eq!(g, (Some(5), true));
    let (name, state) = lease_dir::state(&path);
    assert_eq!(state, State::Free(5));
    assert!(
        std::fs::symlink_metadata(path.join(name))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

// Unix only: permission bits.
#[cfg(unix)]
#[test]
fn unreadable_lock_directory_gives_a_permission_error() {
    if nix::unistd::geteuid().is_root() {
        return; // root reads anything
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = fast(&path).build().unwrap();
    lock.try_acquire().unwrap().release().unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    let err = lock.try_acquire().unwrap_err();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(err.to_string().contains("permission"), "{err}");
}

// Unix only: permission bits.
#[cfg(unix)]
#[test]
fn creation_modes_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m/a.lease");
    let lock = fast(&path)
        .with_file_mode(0o600)
        .with_dir_mode(0o700)
        .build()
        .unwrap();
    let guard = lock.try_acquire().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // The lock directory gets the file mode plus search where it grants read, exactly.
    assert_eq!(mode(&path), 0o700);
    let (name, _) = lease_dir::state(&path);
    assert_eq!(mode(&path.join(name)), 0o600);
    assert_eq!(mode(&dir.path().join("m")) & 0o077, 0);
    guard.release().unwrap();
    // A group-shared lock: exactly the configured modes with the opt-in (issue 22); without
    // it, never writable by group or others, and the state entry (with the owner token)
    // readable by its owner only.
    let shared = dir.path().join("m/shared.lease");
    let lock = fast(&shared)
        .with_file_mode(0o664)
        .with_shared_directory()
        .build()
        .unwrap();
    let guard = lock.try_acquire().unwrap();
    assert_eq!(mode(&shared), 0o775);
    assert_eq!(mode(&shared.join(lease_dir::state(&shared).0)), 0o664);
    guard.release().unwrap();
    let private = dir.path().join("m/private.lease");
    let lock = fast(&private).with_file_mode(0o664).build().unwrap();
    let _guard = lock.try_acquire().unwrap();
    assert_eq!(mode(&private), 0o755);
    assert_eq!(mode(&private.join(lease_dir::state(&private).0)), 0o600);
}

#[test]
fn a_moved_lock_directory_is_lost_by_its_holder_and_never_held_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let moved = dir.path().join("moved.lease");
    let a = fast(&path).build().unwrap();
    let guard_a = a.try_acquire().unwrap();
    let g = guard_a.fencing_token();
    std::fs::rename(&path, &moved).unwrap();
    // Under its new name the directory still holds a's tenure and a's kernel lock: a contender
    // there is turned away until a lets go.
    let b = fast(&moved).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let gb = loop {
        match b.try_acquire() {
            Ok(gb) => break gb,
            Err(e) if e.is_held() && Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        guard_a.check().is_err(),
        "b acquired while a still trusted its tenure"
    );
    assert!(
        matches!(
            loss(&guard_a),
            Some(LossReason::NotOwned(
                NotOwnedReason::TakenOver | NotOwnedReason::Missing
            ))
        ),
        "the heartbeat noticed: {:?}",
        loss(&guard_a)
    );
    assert_eq!(
        gb.fencing_token().get(),
        g.get() + 1,
        "fencing continues in the moved directory"
    );
    assert!(guard_a.release().unwrap_err().is_not_owned());
    assert_eq!(
        held(&moved).1.generation,
        gb.fencing_token().get(),
        "a's release touched nothing"
    );
}

/// Moves the lock directory `path` to `old` and puts a copy of it, its state entry as it was
/// when copied, at `path` (a restore from backup, a sync tool).
fn replace_with_a_copy(path: &Path, old: &Path) {
    std::fs::rename(path, old).unwrap();
    let copy = path.with_file_name(".copy");
    std::fs::create_dir(&copy).unwrap();
    loop {
        let (name, _) = lease_dir::state(old);
        if std::fs::copy(old.join(&name), copy.join(&name)).is_ok() {
            break;
        }
    }
    std::fs::rename(&copy, path).unwrap();
}

/// Windows: every operation goes by path, so a holder renews in a copy that names its tenure
/// and keeps it; a contender stays refused. Never two holders either way.
#[cfg(windows)]
#[test]
fn a_replaced_lock_directory_keeps_its_holder_on_windows_and_is_never_held_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let old = dir.path().join("old.lease");
    let a = fast(&path).build().unwrap();
    let guard_a = a.try_acquire().unwrap();
    replace_with_a_copy(&path, &old);
    let b = fast(&path).build().unwrap();
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let err = b.try_acquire().map(drop).unwrap_err();
        assert!(err.is_held(), "{err}");
        assert!(guard_a.check().is_ok(), "a lost a tenure nobody took");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, state) = lease_dir::state(&path);
    assert_eq!(
        state.held().map(|h| h.generation),
        Some(guard_a.fencing_token().get())
    );
    let g = guard_a.fencing_token();
    guard_a.release().unwrap();
    assert!(b.try_acquire().unwrap().fencing_token() > g);
}

/// Unix: the holder's descriptor is of the old directory, so the replacement is seen.
#[cfg(unix)]
#[test]
fn a_replaced_lock_directory_is_lost_by_its_holder_and_never_held_twice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let old = dir.path().join("old.lease");
    let a = fast(&path).build().unwrap();
    let guard_a = a.try_acquire().unwrap();
    let g = guard_a.fencing_token();
    // Replace the directory by a copy of itself (a restore from backup, a sync tool): a new
    // inode whose state still names a's tenure, but not a kernel lock on itself.
    replace_with_a_copy(&path, &old);
    let replaced = Instant::now();
    let b = fast(&path).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let gb = loop {
        match b.try_acquire() {
            Ok(gb) => break gb,
            Err(e) if e.is_held() && Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(
        guard_a.check().is_err(),
        "b acquired while a still trusted its tenure"
    );
    assert!(
        matches!(
            loss(&guard_a),
            Some(LossReason::NotOwned(
                NotOwnedReason::TakenOver | NotOwnedReason::Missing
            ))
        ),
        "{:?}",
        loss(&guard_a)
    );
    assert!(
        replaced.elapsed() >= Duration::from_millis(200),
        "only a's deadline frees the copy: {:?}",
        replaced.elapsed()
    );
    assert_eq!(
        gb.fencing_token().get(),
        g.get() + 1,
        "fencing continues from the copied state"
    );
    // The old directory keeps a's last state; nobody renames in it any more.
    let (_, last) = held(&old);
    assert_eq!(last.generation, g.get());
}

#[test]
fn failing_heartbeats_are_tolerated_until_the_deadline_then_untrusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let seen: Arc<Mutex<Vec<(Instant, LossReason)>>> = Arc::default();
    let seen2 = seen.clone();
    let lock = fast(&path)
        .on_lost(move |r| seen2.lock().unwrap().push((Instant::now(), r.clone())))
        .build()
        .unwrap();
    let guard = lock.try_acquire().unwrap();
    let g = guard.fencing_token();
    // Take the state entry away: every renewal now fails (and contenders are refused).
    let name = rename_state(&path, "stash");
    std::thread::sleep(Duration::from_millis(120));
    assert!(
        guard.check().is_ok(),
        "a few failed heartbeats are tolerated"
    );
    let other = fast(&path).build().unwrap();
    assert!(other.try_acquire().unwrap_err().is_corrupt());
    // Put it back in time: renewals resume from the name the holder last wrote.
    std::fs::rename(path.join("stash"), path.join(&name)).unwrap();
    let stuck = lease_dir::parse(&name).unwrap();
    assert!(wait_for(Duration::from_secs(1), || {
        held(&path).1.seq > stuck.held().unwrap().seq
    }));
    assert!(guard.check().is_ok());
    // Now for good.
    rename_state(&path, "stash");
    let broken = Instant::now();
    assert!(wait_for(Duration::from_secs(3), || !seen
        .lock()
        .unwrap()
        .is_empty()));
    let (at, reason) = seen.lock().unwrap()[0].clone();
    match &reason {
        // The last heartbeat's error, whole, as the loss's source: the missing state entry.
        LossReason::BackendFailing(last) => {
            assert!(last.is_corrupt(), "{last:?}");
            assert!(std::error::Error::source(&reason).is_some(), "{reason:?}");
        }
        LossReason::DeadlinePassed => {}
        other => panic!("{other:?}"),
    }
    assert!(
        at.duration_since(broken) >= Duration::from_millis(150),
        "not before the deadline"
    );
    assert!(guard.check().is_err());
    assert_eq!(lease_dir::entries(&path), ["stash"], "nothing repaired");
    assert!(other.try_acquire().unwrap_err().is_corrupt());
    assert_eq!(guard.fencing_token(), g);
}

#[test]
fn store_keys_cannot_escape_the_directory() {
    use lease_core::LeaseKey;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    let store = lease_file::DirectoryStore::open(&dir).unwrap();
    let key = LeaseKey::with_sort_key("../../escape", "/etc/passwd").unwrap();
    let lease = pollster::block_on(store.acquire(&key, Duration::from_secs(5))).unwrap();
    let names: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["store"], "nothing outside the store directory");
    let inside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        inside
            .iter()
            .any(|n| dir.join(n) == lease_dir::key_dir(&dir, &key)),
        "{inside:?}"
    );
    pollster::block_on(store.release_lease(&lease)).unwrap();
    let long = LeaseKey::new("x".repeat(1000)).unwrap();
    let err = pollster::block_on(store.acquire(&long, Duration::from_secs(5))).unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}

#[test]
fn a_deleted_state_entry_under_a_live_holder_is_refused_never_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let holder = fast(&path).build().unwrap();
    let guard = holder.try_acquire().unwrap();
    loop {
        let (name, _) = lease_dir::state(&path);
        if std::fs::remove_file(path.join(name)).is_ok() {
            break;
        }
    }
    let other = fast(&path).build().unwrap();
    let err = other.try_acquire().unwrap_err();
    assert!(
        err.is_corrupt() && err.to_string().contains("missing"),
        "{err}"
    );
    let start = Instant::now();
    let err = other
        .acquire_with(&WaitOptions::new(Duration::from_secs(2)))
        .unwrap_err();
    assert!(err.is_corrupt(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "refused, not waited for"
    );
    // The holder cannot renew: it stops trusting its tenure at its deadline.
    assert!(wait_for(Duration::from_secs(2), || loss(&guard).is_some()));
    assert!(guard.check().is_err());
    assert!(
        matches!(
            loss(&guard),
            Some(LossReason::BackendFailing { .. } | LossReason::DeadlinePassed)
        ),
        "{:?}",
        loss(&guard)
    );
    assert!(
        other.try_acquire().unwrap_err().is_corrupt(),
        "never repaired"
    );
    assert!(lease_dir::entries(&path).is_empty());
}

// Unix only: inode numbers.
#[cfg(unix)]
#[test]
fn readers_always_see_exactly_one_state_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let lock = FileLock::builder(&path)
        .with_heartbeat_interval(Duration::from_millis(1))
        .with_stale_threshold(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = lock.try_acquire().unwrap();
    let g = guard.fencing_token();
    let start = Instant::now();
    let mut reads = 0;
    let mut described = 0;
    let mut last = 0;
    while start.elapsed() < Duration::from_millis(400) {
        // Every listing sees one state: renewals are renames, never a delete and a create.
        let (name, state) = held(&path);
        assert_eq!(state.generation, g.get());
        assert!(state.seq >= last, "renewals never go back");
        last = state.seq;
        match std::fs::read(path.join(&name)) {
            Ok(bytes) => {
                let record = lease_dir::Record::parse(&bytes)
                    .unwrap_or_else(|e| panic!("torn description after {reads} reads: {e}"));
                assert_eq!(record.generation, g.get());
                assert_eq!(fnv(record.owner.unwrap().as_bytes()), state.token);
                described += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {} // renewed meanwhile
            Err(e) => panic!("{e}"),
        }
        reads += 1;
    }
    assert!(last > 20, "the holder renewed {last} times meanwhile");
    assert!(
        reads > 100 && described > 0,
        "{reads} reads, {described} described"
    );
    // The directory itself is never replaced.
    let ino = std::fs::metadata(&path).unwrap().ino();
    guard.release().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
}

/// The readers of `lease_dir` keep up with a state entry renamed under them as fast as a thread
/// can, as a heartbeat renames it: they read a name and its content together. Before, reading a
/// description listed the name and then opened it, and failed with `ENOENT` under load.
// Unix only: a check of the tests' own readers, the same on every system (10,000 reads
// take 35 s under Wine).
#[cfg(unix)]
#[test]
fn lease_dir_readers_keep_up_with_a_state_entry_renamed_under_them() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.lease");
    let held = Held::hung(3, Duration::from_secs(1));
    lease_dir::plant(
        &path,
        &held.name(),
        br#"{"version": 1, "pid": 1, "generation": 3}"#,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let renamer = {
        let (stop, path) = (Arc::clone(&stop), path.clone());
        std::thread::spawn(move || {
            let mut seq = held.seq;
            while !stop.load(Ordering::Relaxed) {
                let from = Held {
                    seq,
                    ..held.clone()
                }
                .name();
                let to = Held {
                    seq: seq + 1,
                    ..held.clone()
                }
                .name();
                std::fs::rename(path.join(from), path.join(to)).unwrap();
                seq += 1;
            }
            seq - held.seq
        })
    };
    for _ in 0..10_000 {
        assert_eq!(lease_dir::description(&path).generation, 3);
        assert_eq!(lease_dir::state(&path).1.generation(), 3);
    }
    stop.store(true, Ordering::Relaxed);
    let renames = renamer.join().unwrap();
    assert!(renames > 100, "renamed only {renames} times meanwhile");
}
