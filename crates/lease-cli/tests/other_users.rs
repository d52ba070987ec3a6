//! Issue 22: another local user racing the file store. Root-only (it runs the attacker as
//! `nobody`); skipped with the reason printed otherwise.
//!
//! An unprivileged attacker (`tests/other_users/attacker.py`, run as `nobody` through
//! `setpriv`) owns the store directory, watches it with inotify and swaps every path root
//! touches there (temporary lock directories, lock directories, the CLI's old probe names, the
//! store directory itself) for symbolic links to a root-owned 0600 sentinel or its directory,
//! while root acquires, renews, writes fenced values and releases through `DirectoryStore`
//! (about a thousand keys, each lock directory created once), takes and releases `FileLock`s, and
//! runs `lease run --shared-dir` a few times. The sentinel's mode, owner, size and content never
//! change, and nothing is created outside the store. Before issue 22, the lock-directory
//! creation `chmod`ed the temporary directory by path, and the attacker turned the sentinel into
//! a 0755 file in most runs. `LEASE_LONG=1` runs ten times as many operations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use lease_core::{AcquireOptions, FencedValues, LeaseBackend, LeaseGuard, LeaseKey, WaitOptions};
use lease_file::{DirectoryStore, FileLock};

const NOBODY: u32 = 65534;

/// Drives the store's futures (they complete without waiting on anything) on this thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

fn root_only() -> Option<(PathBuf, PathBuf)> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: the attacker runs as another user, which needs root");
        return None;
    }
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    let setpriv = PathBuf::from("/usr/bin/setpriv");
    match python {
        Some(python) if setpriv.exists() => Some((python, setpriv)),
        _ => {
            eprintln!("SKIPPED: needs /usr/bin/python3 and /usr/bin/setpriv for the attacker");
            None
        }
    }
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
struct Sentinel {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    bytes: Vec<u8>,
}

fn sentinel(path: &Path) -> Sentinel {
    let meta = std::fs::symlink_metadata(path).unwrap();
    Sentinel {
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        size: meta.len(),
        bytes: std::fs::read(path).unwrap(),
    }
}

fn mkdir_owned(path: &Path, uid: u32, mode: u32) {
    std::fs::create_dir(path).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn another_user_racing_symlinks_never_makes_root_touch_anything_outside_the_store() {
    let Some((python, setpriv)) = root_only() else {
        return;
    };
    let long = std::env::var_os("LEASE_LONG").is_some();
    let rounds = if long { 10_000 } else { 700 };
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The attacker owns `parent` and the store in it (so it can rename the store itself).
    let parent = top.path().join("p");
    mkdir_owned(&parent, NOBODY, 0o755);
    let store_dir = parent.join("store");
    mkdir_owned(&store_dir, NOBODY, 0o755);
    let sentinel_dir = top.path().join("sentinel");
    std::fs::create_dir(&sentinel_dir).unwrap();
    let secret = sentinel_dir.join("secret");
    std::fs::write(&secret, b"root's secret, mode 0600\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = top.path().join("attacker.py");
    std::fs::write(&script, include_str!("other_users/attacker.py")).unwrap();
    // A lock directory the attacker made (group-shared, accepted with the opt-in) whose state
    // entry is a hard link to the sentinel: what `fs.protected_hardlinks=0` would let the
    // attacker plant, planted here by root on its behalf. Renamed like any state entry, it must
    // never be written.
    let planted = store_dir.join("planted.lease");
    mkdir_owned(&planted, NOBODY, 0o775);
    std::fs::hard_link(&secret, planted.join("free.0")).unwrap();
    let before = sentinel(&secret);
    let top_before = listing(top.path());
    let sentinel_dir_before = listing(&sentinel_dir);

    let stop = parent.join("stop");
    let ready = parent.join("ready");
    let attacker = Command::new(&setpriv)
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&python)
        .arg(&script)
        .args([&store_dir, &secret, &sentinel_dir, &stop, &ready])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "attacker never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    let mut ok = 0u32;
    let mut failed = 0u32;
    let mut shown = 0;
    let mut count = |r: Result<(), String>| match r {
        Ok(()) => ok += 1,
        Err(e) => {
            failed += 1;
            if shown < 8 {
                shown += 1;
                eprintln!("failed (expected now and then, under attack): {e}");
            }
        }
    };
    let open = || {
        DirectoryStore::builder(&store_dir)
            .with_shared_directory()
            .build()
    };
    let mut store = None;
    for i in 0..rounds {
        if store.is_none() || i % 100 == 0 {
            // Opened by path now and then: the store's own swap races it.
            store = open().ok();
        }
        let Some(store) = store.as_ref() else {
            count(Err("the store did not open".into()));
            continue;
        };
        // A new key every 8th round (its lock directory and fenced-value directory are created
        // under attack), existing ones otherwise.
        let key = LeaseKey::new(format!("k{}", if i % 8 == 0 { i } else { i % 64 })).unwrap();
        let run = || -> Result<(), lease_core::LeaseError> {
            // One attempt: a lease left held by a round the attacker broke is not waited for.
            let lease = block_on(store.try_acquire(
                &key,
                Duration::from_secs(5),
                &AcquireOptions::default(),
            ))?;
            let written = block_on(store.renew(&lease, Duration::from_secs(5)))
                .and_then(|lease| block_on(store.put_fenced(&key, lease.fencing_token(), b"v")));
            let released =
                block_on(store.release(lease.key(), lease.token(), lease.fencing_token()));
            written.and(released)
        };
        let result = run();
        count(result.map_err(|e| {
            let mut shown = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                shown.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            shown
        }));
        if i % 25 == 0 {
            // Prune removes and re-creates lock directories under attack (its `dead.<g>`
            // rename, `unlinkat` and `rmdir`, then the next round's creation).
            count(
                store
                    .prune(Duration::ZERO)
                    .map(drop)
                    .map_err(|e| e.to_string()),
            );
        }
        if i % 50 == 0 {
            let planted = LeaseKey::new("planted").unwrap();
            if let Ok(lease) = block_on(store.try_acquire(
                &planted,
                Duration::from_secs(5),
                &AcquireOptions::default(),
            )) {
                let _ = block_on(store.release(lease.key(), lease.token(), lease.fencing_token()));
            }
        }
        if i % 3 == 0 {
            let lock = FileLock::builder(store_dir.join(format!("f{i}.lock")))
                .with_shared_directory()
                .with_acquire_retries(0)
                .build();
            count(
                lock.and_then(|lock| {
                    let guard = lock.try_acquire()?;
                    guard.check()?;
                    guard.release()
                })
                .map_err(|e| e.to_string()),
            );
        }
    }
    let library_time = started.elapsed();
    let cli_runs = if long { 30 } else { 3 };
    for i in 0..cli_runs {
        let status = Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("run")
            .arg("--file")
            .arg(&store_dir)
            .args([
                "--shared-dir",
                "--key",
                &format!("c{i}"),
                "--wait",
                "0",
                "--",
                "true",
            ])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        count(if status.success() {
            Ok(())
        } else {
            Err(format!("lease run: {status}"))
        });
    }

    std::fs::write(&stop, b"").unwrap();
    let out = attacker.wait_with_output().unwrap();
    let did = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!(
        "{rounds} rounds ({library_time:?}, then {cli_runs} lease runs, {:?} in all): {ok} \
         operations succeeded, {failed} failed; the attacker: {did}",
        started.elapsed()
    );
    assert_eq!(
        sentinel(&secret),
        before,
        "the sentinel changed (attacker: {did})"
    );
    assert_eq!(
        listing(&sentinel_dir),
        sentinel_dir_before,
        "created beside the sentinel"
    );
    assert_eq!(listing(top.path()), top_before, "created outside the store");
    assert!(
        did.contains("temp="),
        "the attacker reported nothing: {did}"
    );
    // The attacker denies about half the creations and breaks some tenures: enough must still
    // go through for renewals, releases and fenced writes to have been attacked too.
    assert!(
        ok >= 20,
        "too few operations went through: {ok} of {}",
        ok + failed
    );
}

/// Issue 22 item 3: root refuses a store, a lock directory and a `FileLock` path that another
/// user can change (exit 64 from the CLI, naming the owner and the mode), and accepts each with
/// the opt-in.
#[test]
fn directories_other_users_can_change_are_refused_unless_shared() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: making directories owned by another user needs root");
        return;
    }
    let top = tempfile::tempdir().unwrap();
    // A store owned by another user.
    let theirs = top.path().join("theirs");
    mkdir_owned(&theirs, NOBODY, 0o755);
    let err = DirectoryStore::open(&theirs).unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("nobody") && shown.contains("0755"),
        "{shown}"
    );
    assert!(shown.contains("with_shared_directory"), "{shown}");
    DirectoryStore::builder(&theirs)
        .with_shared_directory()
        .build()
        .unwrap();
    // A group-writable store of root's.
    let group = top.path().join("group");
    mkdir_owned(&group, 0, 0o775);
    assert!(DirectoryStore::open(&group).unwrap_err().is_invalid_input());
    // A world-writable one without the sticky bit: refused even with the opt-in.
    let world = top.path().join("world");
    mkdir_owned(&world, 0, 0o777);
    let err = DirectoryStore::builder(&world)
        .with_shared_directory()
        .build()
        .unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("0777"),
        "{err}"
    );
    // Sticky and root-owned, like /tmp: accepted.
    let sticky = top.path().join("sticky");
    mkdir_owned(&sticky, 0, 0o1777);
    let store = DirectoryStore::open(&sticky).unwrap();

    // A lock directory another user made in it first.
    let key = LeaseKey::new("squatted").unwrap();
    // The key's lock directory: DIR/<encoded key>.lease (a plain name encodes as itself).
    let lock_dir = sticky.join("squatted.lease");
    mkdir_owned(&lock_dir, NOBODY, 0o777);
    std::fs::write(lock_dir.join("free.0"), b"").unwrap();
    let err = LeaseGuard::builder(Arc::new(store.clone()), &key, Duration::from_secs(5))
        .with_wait(WaitOptions::new(Duration::ZERO))
        .acquire_blocking()
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("nobody"), "{err}");
    std::fs::set_permissions(&lock_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = DirectoryStore::builder(&sticky)
        .with_shared_directory()
        .build()
        .unwrap();
    LeaseGuard::builder(Arc::new(shared), &key, Duration::from_secs(5))
        .acquire_blocking()
        .unwrap()
        .release()
        .unwrap();

    // A FileLock whose lock directory, or whose parent, another user owns.
    let lock_path = sticky.join("job.lock");
    mkdir_owned(&lock_path, NOBODY, 0o755);
    std::fs::write(lock_path.join("free.0"), b"").unwrap();
    let lock = FileLock::new(&lock_path).unwrap();
    let err = lock.try_acquire().unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("nobody"),
        "{err}"
    );
    let lock = FileLock::builder(&lock_path)
        .with_shared_directory()
        .build()
        .unwrap();
    lock.try_acquire().unwrap().release().unwrap();
    let err = FileLock::new(theirs.join("x.lock")).unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("nobody"),
        "{err}"
    );

    // The CLI: exit 64 naming owner and mode; accepted with --shared-dir.
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("run")
            .arg("--file")
            .arg(&theirs)
            .args(extra)
            .args(["--key", "k", "--wait", "0", "--", "true"])
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("nobody") && stderr.contains("0755"),
        "{stderr}"
    );
    assert!(stderr.contains("--shared-dir"), "{stderr}");
    let out = run(&["--shared-dir"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unmounts on drop, so a failing test leaves no mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Issue 22 item 9: on a file system out of inodes, an existing key is still acquired through
/// `lease run` (its state changes are renames, which need no inode). Before, the CLI's
/// writability probe could not create its file and `lease run` refused every key (exit 69).
/// Root-only: it mounts a small tmpfs.
#[test]
fn an_existing_key_stays_acquirable_with_no_inodes_left() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: mounting a tmpfs with few inodes needs root");
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let mount = top.path().join("mnt");
    std::fs::create_dir(&mount).unwrap();
    let mounted = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=1m,nr_inodes=64,mode=0755",
            "tmpfs",
        ])
        .arg(&mount)
        .status()
        .unwrap();
    if !mounted.success() {
        eprintln!("SKIPPED: cannot mount a tmpfs here");
        return;
    }
    let _mounted = Mounted(mount.clone());
    let store = mount.join("store");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("run")
            .arg("--file")
            .arg(&store)
            .args(["--key", "nightly", "--wait", "0", "--", "true"])
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Use up every inode left.
    let mut filled = 0;
    while std::fs::write(mount.join(format!("fill{filled}")), b"").is_ok() {
        filled += 1;
        assert!(filled < 1000, "the file system never ran out of inodes");
    }
    for _ in 0..3 {
        let out = run();
        assert!(
            out.status.success(),
            "with no inodes left: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
