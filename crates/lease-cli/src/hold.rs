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
    // The guard's end is usually the group's: it kills the group (or the command ended and
    // `lease` killed what was left). A host's init often reaps the zombies within a few tens of
    // microseconds, and then one `kill(-group, 0)` says the group is gone; until they are reaped
    // (some container inits take seconds) only a scan of `/proc` tells them from live processes.
    // So look for the group alone for up to 100 µs, then check it fully, again after 100 µs,
    // doubling up to 10 ms: a handover is held back neither by a fixed poll nor by a slow reaper.
    let group = Pid::from_raw(-args.group);
    let quick_until = std::time::Instant::now() + Duration::from_micros(100);
    while nix::sys::signal::kill(group, None).is_ok() && std::time::Instant::now() < quick_until {
        std::thread::sleep(Duration::from_micros(20));
    }
    let mut pause = Duration::from_micros(100);
    while crate::run::group_alive(args.group) {
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
