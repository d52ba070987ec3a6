//! The command under `lease run` holds no descriptor of the holder's kernel lock (issue 22,
//! item 5): a command that runs `flock -u` on every descriptor it has, and closes them all,
//! cannot let a contender in while the holder lives. And the process that holds the lock for
//! the command's group (`lease hold-lock`) acts on `lease`'s death itself, whatever state the
//! guard is in.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HELD: i32 = 75;

fn lease(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env("LEASE_DIR", dir)
        .env_remove("LEASE_LOG")
        // An exported PostgreSQL URL would make PostgreSQL the default store.
        .env_remove("LEASE_POSTGRES_URL")
        .env_remove("LEASE_REDIS_URL")
        .stdin(Stdio::null());
    command
}

/// Unlocks every descriptor the shell has (`flock -u`, run as its child, inherits them all and
/// acts on the shared open file descriptions), closes all but the standard three, says so, then
/// runs on for a while. bash, not sh: dash's `exec N>&-` takes one digit only.
const UNLOCK_EVERYTHING: &str = r#"
for fd in /proc/self/fd/*; do
    n=${fd##*/}
    flock -u "$n" 2>/dev/null
done
for fd in /proc/self/fd/*; do
    n=${fd##*/}
    case $n in 0|1|2) continue;; esac
    eval "exec $n>&-"
done
: > "$1"
sleep 2
"#;

#[test]
fn a_command_that_unlocks_every_inherited_descriptor_cannot_let_a_contender_in() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = dir.path().join("store");
    let ready = dir.path().join("unlocked");
    let mut holder = lease(dir.path())
        .arg("run")
        .arg("--file")
        .arg(&store)
        .args([
            "--key",
            "k",
            "--ttl",
            "30s",
            "--",
            "bash",
            "-c",
            UNLOCK_EVERYTHING,
            "bash",
        ])
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start lease run: {e}"));
    let limit = Instant::now() + Duration::from_secs(20);
    while !ready.exists() {
        assert!(Instant::now() < limit, "the command never got going");
        assert!(
            holder.try_wait().ok().flatten().is_none(),
            "the holder ended before its command unlocked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The holder lives (its command sleeps 2 s): every contender must be refused.
    let mut tries = 0;
    while holder.try_wait().ok().flatten().is_none() && tries < 15 {
        let contender = lease(dir.path())
            .arg("run")
            .arg("--file")
            .arg(&store)
            .args(["--key", "k", "--wait", "0", "--", "true"])
            .output()
            .unwrap_or_else(|e| panic!("start the contender: {e}"));
        let still_holding = holder.try_wait().ok().flatten().is_none();
        if still_holding {
            assert_eq!(
                contender.status.code(),
                Some(HELD),
                "a contender got in while the holder lives, after its command unlocked every \
                 descriptor: {}",
                String::from_utf8_lossy(&contender.stderr)
            );
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tries >= 3, "too few contenders ran while the holder lived");
    let output = holder
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for the holder: {e}"));
    assert!(
        output.status.success(),
        "the holder: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The guard stopped (a debugger, a stray SIGSTOP) when `lease` dies, under a supervisor that
/// adopts orphans in the same session (a child subreaper: `tini -s`, a container's init, here
/// the test process), so the kernel does not continue the group as it continues an orphaned
/// one. On main before this test the stopped guard could not act on its parent's death, so the
/// command's group kept the kernel lock (through `lease hold-lock`) for as long as the guard
/// stayed stopped, with its command running on and no lease holder alive: every contender
/// waited. Now the lock's holder hears of the death from its own link to `lease`, kills the
/// group (SIGKILL ends a stopped guard too) and lets the lock go.
// Linux only: it needs a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`; FreeBSD's
// `procctl(PROC_REAP_ACQUIRE)` has no safe wrapper) and reads the group from `/proc`.
#[cfg(target_os = "linux")]
#[test]
fn a_stopped_guard_does_not_keep_the_lock_of_a_dead_lease() {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    // Orphans of this test's processes come to this process, in this session.
    nix::sys::prctl::set_child_subreaper(true).unwrap_or_else(|e| panic!("subreaper: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = dir.path().join("store");
    let ready = dir.path().join("running");
    let said = dir.path().join("stderr");
    let mut holder = lease(dir.path())
        .arg("run")
        .arg("--file")
        .arg(&store)
        .args(["--key", "k", "--ttl", "30s", "--", "sh", "-c"])
        .arg(r#"cut -d' ' -f5 /proc/$$/stat > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 60"#)
        .arg("sh")
        .arg(&ready)
        .stdout(Stdio::null())
        // A file, not a pipe: on the old code the stopped group kept a pipe open for ever.
        .stderr(std::fs::File::create(&said).unwrap_or_else(|e| panic!("{e}")))
        .spawn()
        .unwrap_or_else(|e| panic!("start lease run: {e}"));
    let limit = Instant::now() + Duration::from_secs(20);
    let group = loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            break text
                .trim()
                .parse::<i32>()
                .unwrap_or_else(|e| panic!("pgid {text:?}: {e}"));
        }
        assert!(Instant::now() < limit, "the command never got going");
        std::thread::sleep(Duration::from_millis(10));
    };
    let lease_pid = Pid::from_raw(i32::try_from(holder.id()).unwrap_or_else(|e| panic!("{e}")));
    // `lease` first, so that it does not continue the guard it would see stopped; the guard
    // leads the group, so its pid is the group's id.
    kill(lease_pid, Signal::SIGSTOP).unwrap_or_else(|e| panic!("stop lease: {e}"));
    kill(Pid::from_raw(group), Signal::SIGSTOP).unwrap_or_else(|e| panic!("stop guard: {e}"));
    // The stopped guard cannot react to anything from here on.
    std::thread::sleep(Duration::from_millis(100));
    kill(lease_pid, Signal::SIGKILL).unwrap_or_else(|e| panic!("kill -9 lease: {e}"));
    let _ = holder.wait();
    // The portable paths (macOS, FreeBSD) tell the group's end by `killpg` alone, so its
    // zombies keep it until reaped: this process, their subreaper, reaps them as a system's
    // init would, members of that group only.
    let reaping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(cfg!(
        feature = "portable-paths"
    )));
    let reaper = {
        let reaping = reaping.clone();
        std::thread::spawn(move || {
            use nix::sys::wait::{Id, WaitPidFlag, waitid};
            while reaping.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = waitid(
                    Id::PGid(Pid::from_raw(group)),
                    WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG,
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    let contender = lease(dir.path())
        .arg("run")
        .arg("--file")
        .arg(&store)
        .args(["--key", "k", "--wait", "3s", "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("start the contender: {e}"));
    let waited = started.elapsed();
    reaping.store(false, std::sync::atomic::Ordering::SeqCst);
    reaper.join().unwrap_or_else(|_| panic!("the reaper"));
    // Whatever happened, leave no stopped process behind.
    let group_left = killpg(Pid::from_raw(group), Signal::SIGKILL).is_ok()
        && killpg(Pid::from_raw(group), Signal::SIGCONT).is_ok();
    assert_eq!(
        contender.status.code(),
        Some(0),
        "the contender never got the lease of the dead holder (its guard stopped): {}",
        String::from_utf8_lossy(&contender.stderr)
    );
    assert!(
        waited < Duration::from_secs(2),
        "the contender waited {waited:?}"
    );
    // The holder says it after letting the lock go: give it a moment.
    let limit = Instant::now() + Duration::from_secs(2);
    let said = loop {
        let text = std::fs::read_to_string(&said).unwrap_or_default();
        if text.contains("was killed") || Instant::now() >= limit {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        said.contains("died; the command's process group") && said.contains("was killed"),
        "the death is reported: {said}"
    );
    let _ = group_left;
}
