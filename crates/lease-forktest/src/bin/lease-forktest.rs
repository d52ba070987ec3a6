//! `lease-forktest FACE MODE HOW DIR`: acquires a lease, forks, lets the child dispose of its
//! copy of the lease one way, then checks in the parent that the lease is still its own.
//!
//! * FACE: `lock` (a [`FileLock`] guard) or `store` (a [`DirectoryStore`] lease kept by a
//!   lease-core [`BlockingLeaseGuard`], whose keeper renews it on a thread);
//! * MODE: `kernel` or `heartbeat` (heartbeat-only);
//! * HOW the child disposes of its copy: `drop` (then exits), `return` (returns from `main`
//!   with the copy in `main`'s frame), `unwind` (panics with it on the stack), `exit` (exits
//!   without dropping anything), `release` (an explicit release, which must be refused).
//!
//! * `delete`, `renew` (store only): the child deletes or renews the parent's lease through the
//!   inherited store with the lease's own owner and fencing tokens (read from the store's
//!   record, as any reader can), which must be refused;
//! * `cached` instead acquires and releases (so the face keeps the lock directory open, the
//!   idle cache), forks, and then parent and child both try to acquire: exactly one may get it,
//!   in each of `LEASE_FORK_ROUNDS` rounds (default 25), each in a fresh directory. The output
//!   says in how many rounds both got it.
//!
//! * `check`: the child's copy of the guard is not trusted: its `check` fails at once (the
//!   heartbeats or renewals are the parent's) and its `deadline` answers; and the child's copy of
//!   a lease-core guard on a [`MemoryBackend`] (the child's own copy of the store) is refused a
//!   release, which would otherwise reach the store with the parent's tokens;
//! * `inherit` instead acquires and releases (so the heartbeat thread or keeper runs in the
//!   parent), forks, and the child acquires through the inherited `FileLock` or store and holds
//!   for three lease lengths: its guard must keep checking (its own heartbeat thread beats) and a
//!   fresh contender must be refused all along;
//!
//! * `busy` instead keeps another thread of the parent locking the lease handle's state (a
//!   `FileLockGuard::check`, or polling a `LeaseGuard`'s `lost()`) without pause, and forks
//!   `LEASE_FORK_ROUNDS` children (default 100) that each drop their copy (the `FileLock`, the
//!   `LeaseGuard`) and exit: a fork lands while that thread holds the lock, which in the child
//!   stays locked forever. The output says how many children did not exit within 5 s (killed).
//!
//! Exit status 0 when the parent still holds: a contender on the same path is refused, the
//! parent's fencing token still checks, and keeps checking across its next heartbeats or
//! renewals; then the parent releases and the contender's token is greater. 1 and a message on
//! stderr otherwise; 2 for bad arguments.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{
    AcquireOptions, BlockingLeaseGuard, FencingToken, LeaseBackend, LeaseGuard, LeaseKey,
    MemoryBackend, WaitOptions,
};
use lease_file::{DirectoryStore, FileLock, FileLockGuard, ModePreference};
use lease_forktest::{Forked, fork, wait};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The lease's length in the store face, and the FileLock's stale threshold: short, so that
/// renewals and heartbeats happen within the scenario.
const LEASE: Duration = Duration::from_millis(900);
/// The FileLock's heartbeat interval and the store keeper's renewal interval.
const BEAT: Duration = Duration::from_millis(60);

/// What the parent holds, and the child a copy of.
enum Held {
    Lock {
        lock: FileLock,
        guard: FileLockGuard,
    },
    Store {
        store: Arc<DirectoryStore>,
        guard: BlockingLeaseGuard,
    },
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [face, mode, how, dir] = args.as_slice() else {
        eprintln!(
            "usage: lease-forktest lock|store kernel|heartbeat drop|return|unwind|exit|release DIR"
        );
        return ExitCode::from(2);
    };
    let mode = match mode.as_str() {
        "kernel" => ModePreference::Kernel,
        "heartbeat" => ModePreference::HeartbeatOnly,
        _ => return ExitCode::from(2),
    };
    let dir = std::path::PathBuf::from(dir);
    if how == "cached" {
        return both_after_cached(face, mode, &dir);
    }
    if how == "busy" {
        return drops_while_busy(face, mode, &dir);
    }
    if how == "inherit" {
        return child_acquires_through_its_copy(face, mode, &dir);
    }
    let held = match acquire(face, mode, &dir) {
        Ok(held) => held,
        Err(message) => {
            eprintln!("lease-forktest: {message}");
            return ExitCode::from(1);
        }
    };
    // A lease-core guard on a store in this process's memory: the child's copy of the store
    // would carry out a release of it, so only the guard can refuse.
    let in_memory = match (how == "check").then(memory_guard).transpose() {
        Ok(guard) => guard,
        Err(message) => {
            eprintln!("lease-forktest: {message}");
            return ExitCode::from(1);
        }
    };
    let child = match fork() {
        Ok(Forked::Parent(child)) => child,
        Ok(Forked::Child) => {
            // The child, with its copy of `held` in this frame: returning from `main` runs its
            // destructors as a child that simply returns would.
            if how == "return" {
                return ExitCode::SUCCESS;
            }
            if let Some(copy) = in_memory {
                child_checks(&held, copy)
            }
            child_disposes(held, how)
        }
        Err(error) => {
            eprintln!("lease-forktest: fork: {error}");
            return ExitCode::from(1);
        }
    };
    let status = wait(child).unwrap_or(-1);
    if matches!(how.as_str(), "release" | "delete" | "renew" | "check") && status != 0 {
        eprintln!("lease-forktest: the child's {how} was not refused (exit status {status})");
        return ExitCode::from(1);
    }
    match still_ours(&held, mode, &dir)
        .and_then(|fencing| release_then_contend(held, mode, &dir, fencing))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lease-forktest: after the child ({how}, exit status {status}): {message}");
            ExitCode::from(1)
        }
    }
}

/// The forked child's part: dispose of its copy of the parent's lease as `how` says and exit:
/// 0 when what must be refused was refused, 3 when the parent's lease was ended through it.
fn child_disposes(held: Held, how: &str) -> ! {
    match how {
        "drop" => {
            drop(held);
            lease_forktest::exit_child(0);
        }
        "unwind" => {
            let _copy = held;
            panic!("the forked child unwinds with its copy of the lease");
        }
        "exit" => std::process::exit(0),
        "release" => {
            let refused = match held {
                Held::Lock { guard, .. } => guard.release().is_err_and(|e| e.is_unsupported()),
                // The guard's release goes through the inherited store, which refuses it.
                Held::Store { guard, .. } => guard.release().is_err_and(|e| e.is_unsupported()),
            };
            lease_forktest::exit_child(if refused { 0 } else { 3 });
        }
        "delete" | "renew" => {
            let Held::Store { store, .. } = &held else {
                lease_forktest::exit_child(2)
            };
            let refused = match end_through(store, how) {
                Ok(()) => {
                    eprintln!("lease-forktest: the child's {how} of its parent's lease succeeded");
                    false
                }
                Err(e) if e.is_unsupported() => true,
                Err(e) => {
                    eprintln!("lease-forktest: the child's {how} failed otherwise: {e}");
                    false
                }
            };
            lease_forktest::exit_child(if refused { 0 } else { 3 });
        }
        _ => lease_forktest::exit_child(2),
    }
}

/// A blocking lease-core guard on a [`MemoryBackend`] of this process's.
fn memory_guard() -> Result<BlockingLeaseGuard, String> {
    let store: Arc<dyn LeaseBackend> = Arc::new(MemoryBackend::new());
    LeaseGuard::builder(store, &key(), LEASE)
        .with_wait(WaitOptions::new(Duration::ZERO))
        .with_renew_every(BEAT)
        .acquire_blocking()
        .map_err(|e| format!("acquire in memory: {e}"))
}

/// The forked child's `check`: its copies are not trusted, and the in-memory guard's release is
/// refused. Exits 0 when so, 3 otherwise.
fn child_checks(held: &Held, in_memory: BlockingLeaseGuard) -> ! {
    // The deadline answers (without waiting for the parent's thread); nothing is trusted here.
    let check = match held {
        Held::Lock { guard, .. } => {
            let _ = guard.deadline();
            guard.check()
        }
        Held::Store { guard, .. } => {
            let _ = guard.deadline();
            guard.check()
        }
    };
    let mut failures = Vec::new();
    match check {
        Err(e) if e.is_not_owned() => {}
        other => failures.push(format!("the child's copy of the guard checks: {other:?}")),
    }
    match in_memory.check() {
        Err(e) if e.is_not_owned() => {}
        other => failures.push(format!("the child's in-memory guard checks: {other:?}")),
    }
    match in_memory.release() {
        Err(e) if e.is_unsupported() => {}
        other => failures.push(format!("the child's in-memory release: {other:?}")),
    }
    if failures.is_empty() {
        lease_forktest::exit_child(0);
    }
    eprintln!("lease-forktest: {}", failures.join("; "));
    lease_forktest::exit_child(3);
}

/// A face opened but not holding: what `inherit`'s child acquires through.
enum Opened {
    Lock(FileLock),
    Store(Arc<DirectoryStore>),
}

/// `inherit`: the parent acquires and releases through `face` (its heartbeat thread or keeper
/// has run), forks, and the child acquires through its copy and holds for three lease lengths
/// ([`child_holds`]); then the parent's own copy still acquires.
fn child_acquires_through_its_copy(
    face: &str,
    mode: ModePreference,
    dir: &std::path::Path,
) -> ExitCode {
    let run = || -> Result<(), String> {
        let opened = match acquire(face, mode, dir)? {
            Held::Lock { lock, guard } => {
                guard.release().map_err(|e| format!("release: {e}"))?;
                Opened::Lock(lock)
            }
            Held::Store { store, guard } => {
                guard.release().map_err(|e| format!("release: {e}"))?;
                Opened::Store(store)
            }
        };
        match fork().map_err(|e| format!("fork: {e}"))? {
            Forked::Child => lease_forktest::exit_child(match child_holds(opened, mode, dir) {
                Ok(()) => 0,
                Err(message) => {
                    eprintln!("lease-forktest: the child: {message}");
                    3
                }
            }),
            Forked::Parent(child) => {
                let status = wait(child).unwrap_or(-1);
                if status != 0 {
                    return Err(format!(
                        "the child's tenure through its copy failed (exit status {status})"
                    ));
                }
                if let Opened::Lock(lock) = opened {
                    let guard = lock
                        .try_acquire()
                        .map_err(|e| format!("the parent's own copy after the child: {e}"))?;
                    guard.release().map_err(|e| format!("release: {e}"))?;
                }
                Ok(())
            }
        }
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lease-forktest: inherit: {message}");
            ExitCode::from(1)
        }
    }
}

/// In the forked child: acquires through the inherited face, then for three lease lengths
/// checks that a fresh contender is refused and that its guard still checks with its token;
/// then releases, and a contender gets a greater token.
fn child_holds(opened: Opened, mode: ModePreference, dir: &std::path::Path) -> Result<(), String> {
    let held = match opened {
        Opened::Lock(lock) => {
            let guard = lock
                .try_acquire()
                .map_err(|e| format!("acquire through the copy: {e}"))?;
            Held::Lock { lock, guard }
        }
        Opened::Store(store) => {
            let backend: Arc<dyn LeaseBackend> = store.clone();
            let guard = LeaseGuard::builder(backend, &key(), LEASE)
                .with_wait(WaitOptions::new(Duration::ZERO))
                .with_renew_every(BEAT)
                .acquire_blocking()
                .map_err(|e| format!("acquire through the copy: {e}"))?;
            Held::Store { store, guard }
        }
    };
    let fencing = match &held {
        Held::Lock { guard, .. } => guard.fencing_token(),
        Held::Store { guard, .. } => guard.fencing_token(),
    };
    let rounds = (LEASE * 3).as_millis() / (BEAT * 3).as_millis();
    for round in 0..rounds {
        contender_refused(mode, dir, &held).map_err(|e| format!("round {round}: {e}"))?;
        std::thread::sleep(BEAT * 3);
        let check = match &held {
            Held::Lock { guard, .. } => guard.check(),
            Held::Store { guard, .. } => guard.check(),
        };
        match check {
            Ok(token) if token == fencing => {}
            other => {
                return Err(format!(
                    "round {round} ({:?} in): the child's own tenure no longer checks: {other:?}",
                    BEAT * 3 * u32::try_from(round + 1).unwrap_or(u32::MAX)
                ));
            }
        }
    }
    release_then_contend(held, mode, dir, fencing)
}

fn key() -> LeaseKey {
    LeaseKey::new("forked").unwrap_or_else(|e| panic!("{e}"))
}

fn lock_at(dir: &std::path::Path, mode: ModePreference) -> Result<FileLock, String> {
    FileLock::builder(dir.join("forked.lease"))
        .with_mode(mode)
        .with_heartbeat_interval(BEAT)
        .with_stale_threshold(LEASE)
        .build()
        .map_err(|e| format!("open lock: {e}"))
}

fn store_at(dir: &std::path::Path, mode: ModePreference) -> Result<DirectoryStore, String> {
    DirectoryStore::builder(dir.join("store"))
        .with_mode(mode)
        .build()
        .map_err(|e| format!("open store: {e}"))
}

fn acquire(face: &str, mode: ModePreference, dir: &std::path::Path) -> Result<Held, String> {
    match face {
        "lock" => {
            let lock = lock_at(dir, mode)?;
            let guard = lock.try_acquire().map_err(|e| format!("acquire: {e}"))?;
            Ok(Held::Lock { lock, guard })
        }
        "store" => {
            let store = Arc::new(store_at(dir, mode)?);
            let backend: Arc<dyn LeaseBackend> = store.clone();
            let guard = LeaseGuard::builder(backend, &key(), LEASE)
                .with_wait(WaitOptions::new(Duration::ZERO))
                .with_renew_every(BEAT)
                .acquire_blocking()
                .map_err(|e| format!("acquire: {e}"))?;
            Ok(Held::Store { store, guard })
        }
        _ => Err(format!("unknown face {face}")),
    }
}

/// A fresh contender on the same path (its own descriptors, as another process's would be) is
/// refused, and the parent's fencing token checks, now and after a few heartbeats or renewals.
fn still_ours(
    held: &Held,
    mode: ModePreference,
    dir: &std::path::Path,
) -> Result<FencingToken, String> {
    let (fencing, check) = match held {
        Held::Lock { guard, .. } => (
            guard.fencing_token(),
            guard.check().map_err(|e| e.to_string()),
        ),
        Held::Store { guard, .. } => (
            guard.fencing_token(),
            guard.check().map_err(|e| e.to_string()),
        ),
    };
    let checked = check.map_err(|e| format!("the parent's lease no longer checks: {e}"))?;
    if checked != fencing {
        return Err(format!(
            "the parent's fencing token changed from {fencing} to {checked}"
        ));
    }
    for round in 0..2 {
        contender_refused(mode, dir, held).map_err(|e| format!("round {round}: {e}"))?;
        std::thread::sleep(BEAT * 3);
        let again = match held {
            Held::Lock { guard, .. } => guard.check().map_err(|e| e.to_string()),
            Held::Store { guard, .. } => guard.check().map_err(|e| e.to_string()),
        };
        match again {
            Ok(token) if token == fencing => {}
            other => {
                return Err(format!(
                    "round {round}: the parent's lease after its heartbeats: {other:?}"
                ));
            }
        }
    }
    Ok(fencing)
}

fn contender_refused(
    mode: ModePreference,
    dir: &std::path::Path,
    held: &Held,
) -> Result<(), String> {
    let attempt = match held {
        Held::Lock { .. } => lock_at(dir, mode)?.try_acquire().map(|g| g.fencing_token()),
        Held::Store { .. } => pollster::block_on(store_at(dir, mode)?.try_acquire(
            &key(),
            LEASE,
            &AcquireOptions::default(),
        ))
        .map(|lease| lease.fencing_token()),
    };
    match attempt {
        Err(e) if e.is_held() => Ok(()),
        Err(e) => Err(format!("the contender failed otherwise: {e}")),
        Ok(token) => Err(format!(
            "a contender was granted fencing token {token} while the parent holds the lease"
        )),
    }
}

/// The parent releases; a contender then gets a greater token.
fn release_then_contend(
    held: Held,
    mode: ModePreference,
    dir: &std::path::Path,
    fencing: FencingToken,
) -> Result<(), String> {
    let next = match held {
        Held::Lock { lock, guard } => {
            guard
                .release()
                .map_err(|e| format!("the parent's release: {e}"))?;
            drop(lock);
            lock_at(dir, mode)?.try_acquire().map(|g| g.fencing_token())
        }
        Held::Store { store, guard } => {
            guard
                .release()
                .map_err(|e| format!("the parent's release: {e}"))?;
            pollster::block_on(store.try_acquire(&key(), LEASE, &AcquireOptions::default()))
                .map(|lease| lease.fencing_token())
        }
    }
    .map_err(|e| format!("the contender after the parent's release: {e}"))?;
    if next > fencing {
        Ok(())
    } else {
        Err(format!(
            "the contender's token {next} is not above the parent's {fencing}"
        ))
    }
}

/// The child's `delete` or `renew` of the parent's lease through the inherited store, with the
/// owner token and fencing token the store's record names (the tokens the child's copy of the
/// lease carries).
fn end_through(store: &DirectoryStore, how: &str) -> Result<(), lease_core::LeaseError> {
    let key = key();
    let record = pollster::block_on(store.inspect(&key))?.ok_or_else(|| {
        lease_core::LeaseError::not_owned(key.clone(), lease_core::NotOwnedReason::Missing)
    })?;
    let token = record
        .holder()
        .and_then(lease_core::Holder::token)
        .cloned()
        .ok_or_else(|| {
            lease_core::LeaseError::not_owned(key.clone(), lease_core::NotOwnedReason::Missing)
        })?;
    let fencing = record.fencing_token().ok_or_else(|| {
        lease_core::LeaseError::not_owned(key.clone(), lease_core::NotOwnedReason::Missing)
    })?;
    if how == "delete" {
        return pollster::block_on(store.delete(&key, Some(&token), Some(fencing)));
    }
    let lease = lease_core::backend::new_lease(
        key.clone(),
        token,
        fencing,
        LEASE,
        std::time::SystemTime::now() + LEASE,
        std::time::Instant::now() + LEASE / 2,
    );
    pollster::block_on(store.renew(&lease, LEASE)).map(drop)
}

/// `cached`: acquire and release (the face keeps the lock directory open), fork, both try to
/// acquire; counts the rounds in which both got it. Exit 0 when none did.
fn both_after_cached(face: &str, mode: ModePreference, dir: &std::path::Path) -> ExitCode {
    let rounds: u32 = std::env::var("LEASE_FORK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(25);
    let mut both = 0;
    for round in 0..rounds {
        let dir = dir.join(format!("round-{round}"));
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!("lease-forktest: {}: {e}", dir.display());
            return ExitCode::from(1);
        }
        match one_cached_round(face, mode, &dir) {
            Ok(true) => both += 1,
            Ok(false) => {}
            Err(message) => {
                eprintln!("lease-forktest: round {round}: {message}");
                return ExitCode::from(1);
            }
        }
    }
    println!("both held in {both} of {rounds} rounds");
    if both == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "lease-forktest: {face}: parent and child both acquired in {both} of {rounds} rounds"
        );
        ExitCode::from(1)
    }
}

/// The face a `cached` round works through, after one tenure left its directory open.
enum Face {
    Lock(FileLock),
    Store(DirectoryStore),
}

/// What an attempt of a `cached` round got: its fencing token and what keeps it held.
type Kept = (FencingToken, Box<dyn std::any::Any>);

/// A face of `face`'s kind over `dir`, after one acquire and release (its lock directory is
/// then open in the face's cache).
fn cached_face(face: &str, mode: ModePreference, dir: &std::path::Path) -> Result<Face, String> {
    match face {
        "lock" => {
            let lock = lock_at(dir, mode)?;
            lock.try_acquire()
                .and_then(FileLockGuard::release)
                .map_err(|e| format!("first tenure: {e}"))?;
            Ok(Face::Lock(lock))
        }
        "store" => {
            let store = store_at(dir, mode)?;
            let once = AcquireOptions::default();
            let lease = pollster::block_on(store.try_acquire(&key(), LEASE, &once))
                .map_err(|e| format!("first tenure: {e}"))?;
            pollster::block_on(store.release(&key(), lease.token(), lease.fencing_token()))
                .map_err(|e| format!("first release: {e}"))?;
            Ok(Face::Store(store))
        }
        other => Err(format!("unknown face {other}")),
    }
}

/// One attempt, not waiting, through `face`.
fn attempt(face: &Face) -> Result<Kept, lease_core::LeaseError> {
    match face {
        Face::Lock(lock) => lock
            .try_acquire()
            .map(|g| (g.fencing_token(), Box::new(g) as Box<dyn std::any::Any>)),
        Face::Store(store) => {
            pollster::block_on(store.try_acquire(&key(), LEASE, &AcquireOptions::default()))
                .map(|l| (l.fencing_token(), Box::new(l) as Box<dyn std::any::Any>))
        }
    }
}

/// One round of `cached`: whether parent and child both held the lease at the same moment
/// (the child keeps what it acquired until the parent has tried, then exits without
/// releasing).
fn one_cached_round(
    face: &str,
    mode: ModePreference,
    dir: &std::path::Path,
) -> Result<bool, String> {
    let face = cached_face(face, mode, dir)?;
    // The child reports on `report` (0: refused as held, else the fencing token it got), then
    // waits for `go` to close before it exits.
    let (report_rx, report_tx) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (go_rx, go_tx) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let child = match fork() {
        Ok(Forked::Parent(child)) => child,
        Ok(Forked::Child) => {
            drop(go_tx);
            let (code, got) = match attempt(&face) {
                Ok((fencing, kept)) => (0, Some((fencing.get(), kept))),
                Err(e) if e.is_held() => (0, None),
                Err(e) => {
                    eprintln!("lease-forktest: the child's attempt failed otherwise: {e}");
                    (11, None)
                }
            };
            let word = got.as_ref().map_or(0, |(fencing, _)| *fencing);
            let _ = nix::unistd::write(&report_tx, &word.to_le_bytes());
            let mut byte = [0u8; 1];
            let _ = nix::unistd::read(&go_rx, &mut byte);
            // Exits without dropping anything (a guard's drop would release).
            lease_forktest::exit_child(code);
        }
        Err(e) => return Err(format!("fork: {e}")),
    };
    drop(report_tx);
    drop(go_rx);
    let mine = attempt(&face);
    let mut word = [0u8; 8];
    let read = nix::unistd::read(&report_rx, &mut word).map_err(|e| format!("read: {e}"));
    drop(go_tx);
    let status = wait(child).map_err(|e| format!("wait: {e}"))?;
    if read? != 8 || status != 0 {
        return Err(format!("the child's attempt failed (exit status {status})"));
    }
    let child_got = u64::from_le_bytes(word);
    let parent_got = match &mine {
        Ok((fencing, _)) => fencing.get(),
        Err(e) if e.is_held() => 0,
        Err(e) => return Err(format!("the parent's attempt failed otherwise: {e}")),
    };
    if parent_got == 0 && child_got == 0 {
        return Err("neither got the free lease".into());
    }
    let both = parent_got != 0 && child_got != 0;
    if both {
        eprintln!(
            "lease-forktest: both held: the parent with token {parent_got}, the child with {child_got}"
        );
    }
    drop(mine);
    Ok(both)
}

/// `busy`: forks children while another thread locks the handle's state; each child drops its
/// copy and exits. Exit 0 when every child exited within 5 s.
fn drops_while_busy(face: &str, mode: ModePreference, dir: &std::path::Path) -> ExitCode {
    let rounds: u32 = std::env::var("LEASE_FORK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let hung = match face {
        "lock" => {
            let lock = match lock_at(dir, mode) {
                Ok(lock) => lock,
                Err(message) => return fail(&message),
            };
            let guard = match lock.try_acquire() {
                Ok(guard) => guard,
                Err(e) => return fail(&format!("acquire: {e}")),
            };
            let hung = std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = guard.check();
                    }
                });
                let hung = fork_dropping(rounds, &lock);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                hung
            });
            drop(guard);
            hung
        }
        "store" => {
            let store: Arc<dyn LeaseBackend> = match store_at(dir, mode) {
                Ok(store) => Arc::new(store),
                Err(message) => return fail(&message),
            };
            let guard = match pollster::block_on(
                LeaseGuard::builder(store, &key(), LEASE)
                    .with_wait(WaitOptions::new(Duration::ZERO))
                    .with_renew_every(BEAT)
                    .acquire(),
            ) {
                Ok(guard) => guard,
                Err(e) => return fail(&format!("acquire: {e}")),
            };
            let mut lost = guard.lost();
            let hung = std::thread::scope(|scope| {
                scope.spawn(|| {
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = std::future::Future::poll(std::pin::Pin::new(&mut lost), &mut cx);
                    }
                });
                let hung = fork_dropping(rounds, &guard);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                hung
            });
            drop(guard);
            hung
        }
        other => return fail(&format!("unknown face {other}")),
    };
    match hung {
        Ok(0) => {
            println!("0 of {rounds} children hung dropping their copy");
            ExitCode::SUCCESS
        }
        Ok(hung) => fail(&format!(
            "{hung} of {rounds} children hung dropping their copy of the {face} (killed after 5 s)"
        )),
        Err(message) => fail(&message),
    }
}

/// Forks `rounds` children, one after another, each of which drops its copy of `handle` (read
/// out of the parent's memory it was given: the parent keeps its own) and exits 0; counts those
/// still running 5 s later, which are killed.
fn fork_dropping<T>(rounds: u32, handle: &T) -> Result<u32, String> {
    let mut hung = 0;
    for _ in 0..rounds {
        match fork() {
            Ok(Forked::Child) => lease_forktest::drop_copy_and_exit(handle, 0),
            Ok(Forked::Parent(child)) => {
                if !exits_within(child, Duration::from_secs(5)) {
                    hung += 1;
                }
            }
            Err(e) => return Err(format!("fork: {e}")),
        }
    }
    Ok(hung)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("lease-forktest: {message}");
    ExitCode::from(1)
}

/// Waits up to `limit` for `child` to end; kills it (SIGKILL) and reaps it if it has not:
/// whether it ended by itself.
fn exits_within(child: Pid, limit: std::time::Duration) -> bool {
    let started = std::time::Instant::now();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(_) | Err(_) => return true,
        }
        if started.elapsed() >= limit {
            let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(child, None);
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
