//! `lease hold-lock`: the process that holds the lease's kernel lock (file store) for the
//! command's process group, so that the command itself holds no descriptor of it (see
//! `guard.rs`), and that lets it go the moment it may.
//!
//! Its standard input is the *parent link*: the read end of a pipe whose only writer is
//! `lease run`. `lease run` writes one byte when it ends on its own terms (it has stopped the
//! command and released the lease); end-of-file without that byte means it died (SIGKILL, the
//! OOM killer). Either way the kernel tells this process at once, without waiting for the guard:
//!
//! * `lease run` ended: wait until no live process is left in the command's group (it already
//!   stopped them, or left the guard to), then exit.
//! * `lease run` died: SIGKILL the command's group (the guard included, even if it is stopped
//!   or slow to react), wait until no live process is left in it, let the lock go, then remove
//!   the deadline relay's directory and say what happened.
//!
//! So a contender blocked on the kernel lock gets it one wake-up after the holder's death plus
//! the time the group takes to die, and never while a process of the command still runs.

use std::io::Read;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::cli::HoldLockArgs;

/// `lease hold-lock --group G --lock-fd N --parent P [--deadline-file F]`: see the module docs.
pub(crate) fn hold_lock(args: &HoldLockArgs) -> u8 {
    let ended = parent_ended();
    let group = Pid::from_raw(args.group);
    let killed = if ended {
        // Nothing more to say, and no pipe of `lease`'s caller kept open while stragglers that
        // survived `lease`'s own SIGKILL (uninterruptible I/O) finish dying.
        quiet_stderr();
        false
    } else {
        killpg(group, Signal::SIGKILL).is_ok()
    };
    if killed {
        // The guard leads the group and was killed with it: it can run nothing more, so the
        // lock need not wait for its teardown (a multi-threaded process is slow to die), only
        // for the command's processes.
        scan_until_gone(|| crate::run::group_alive_besides(args.group, args.group));
    } else {
        wait_until_gone(args.group);
    }
    // Only this process still shares the lock's open file description: closing it lets the
    // lock go now, not after this process's own teardown.
    if let Err(error) = nix::unistd::close(args.lock_fd) {
        tracing::debug!(fd = args.lock_fd, %error, "closing the kernel lock");
    }
    if !ended {
        if let Some(file) = &args.deadline_file {
            crate::relay::DeadlineWatch::new(file.clone()).clean_up();
        }
        // Killed by this process, or by the guard just before it (then the guard said nothing).
        eprintln!(
            "lease: the lease process (pid {}) died; the command's process group {} was killed \
             so nothing runs without the lease",
            args.parent, args.group
        );
    }
    tracing::debug!(
        group = args.group,
        ended,
        killed,
        "command group gone; the kernel lock is let go"
    );
    0
}

/// Blocks until `lease run` ends (true: it wrote its byte) or dies (false: end-of-file alone).
fn parent_ended() -> bool {
    link_ended(std::io::stdin())
}

/// Reads the parent link `link` to its end: true if a byte came first (`lease run` ended on its
/// own terms), false if end-of-file alone (it died).
pub(crate) fn link_ended(mut link: impl Read) -> bool {
    let mut buffer = [0u8; 64];
    let mut ended = false;
    loop {
        match link.read(&mut buffer) {
            Ok(0) => return ended,
            Ok(_) => ended = true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return ended,
        }
    }
}

/// Points standard error at `/dev/null`.
fn quiet_stderr() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stderr(null);
    }
}

/// How long [`wait_until_gone`] asks the kernel alone, and the first pause between scans.
const QUICK: Duration = Duration::from_micros(50);

/// The longest pause between two scans of `/proc`.
const SLOWEST: Duration = Duration::from_millis(10);

/// Returns once no live process is left in group `pgid`. A host's init often reaps orphaned
/// zombies at once, and then `kill(-group, 0)` alone says the group is gone; until they are
/// reaped (some container inits take seconds) only a scan of `/proc` tells them from live
/// processes. So ask the kernel alone for [`QUICK`], then scan (see [`scan_until_gone`]): a
/// handover is held back neither by a fixed poll nor by a slow reaper.
fn wait_until_gone(pgid: i32) {
    let group = Pid::from_raw(-pgid);
    let quick_until = Instant::now() + QUICK;
    while kill(group, None).is_ok() {
        if Instant::now() >= quick_until {
            scan_until_gone(|| crate::run::group_alive(pgid));
            return;
        }
        std::thread::yield_now();
    }
}

/// Scans `/proc` until `alive` says no: at once, then after [`QUICK`], the pause doubling up
/// to [`SLOWEST`].
fn scan_until_gone(alive: impl Fn() -> bool) {
    let mut pause = QUICK;
    while alive() {
        std::thread::sleep(pause);
        pause = (pause * 2).min(SLOWEST);
    }
}
