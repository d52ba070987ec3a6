//! `lease hold-lock`: the process that holds the lease's kernel lock (file store) for the
//! command's process group, so that the command itself holds no descriptor of it (see
//! `guard.rs`).

use std::time::Duration;

use nix::unistd::Pid;

use crate::cli::HoldLockArgs;

/// `lease hold-lock --group G --lock-fd N`: keeps the inherited descriptor N (sharing the
/// lease's kernel lock) open, untouched, until the guard is gone (end-of-file on stdin) and no
/// live process is left in group G; then exits, and the kernel drops its share of the lock.
pub(crate) fn hold_lock(args: &HoldLockArgs) -> u8 {
    use std::io::Read;
    let mut buffer = [0u8; 64];
    let mut stdin = std::io::stdin();
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let group = Pid::from_raw(-args.group);
    // The group is usually gone within a millisecond of the guard (`lease` reaps it and releases
    // at once, and a waiter's `flock` wakes only when this process lets go): look again after
    // 100 µs, doubling up to 10 ms, so that a handover is not held back by a fixed poll.
    let mut pause = Duration::from_micros(100);
    while nix::sys::signal::kill(group, None).is_ok()
        && crate::run::has_live_member(args.group).unwrap_or(true)
    {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
    tracing::debug!(
        group = args.group,
        fd = args.lock_fd,
        "command group gone; letting go of the kernel lock"
    );
    0
}
