//! The terminal under `lease run`: the command's process group gets the terminal's foreground,
//! so it reads and is interrupted as under `flock(1)`, and a command stopped by the terminal
//! (SIGTSTP, SIGTTIN, SIGTTOU) is noticed, so that it never keeps a lease renewed.
//!
//! `lease run` starts the command in a process group of its own (the group kill needs one). On a
//! terminal that group would be a background job: reading the terminal stops it with SIGTTIN and
//! Ctrl-C reaches only `lease`. So when standard input is the terminal and `lease` is in its
//! foreground, the guard makes its group the terminal's foreground before it starts the command
//! (no window in which the command could read as a background job), and `lease` takes the
//! foreground back when the command is gone. Both change the foreground from a background group,
//! which the kernel allows only to a caller that blocks SIGTTOU: `lease run` blocks it in all its
//! threads (which also keeps its own messages from stopping it under `stty tostop`); the guard
//! blocks it around the one call. Children start with an empty signal mask (std resets it).
//!
//! Every call here is one or two syscalls, except [`own_group_orphaned`] (one `/proc` scan).

use std::io::IsTerminal;
use std::os::fd::AsFd;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgid, getpgrp, getsid, tcgetpgrp, tcsetpgrp};

/// Blocks SIGTTOU in the calling thread and in every thread it starts afterwards: call it on the
/// main thread before the runtime starts. See the module docs.
pub(crate) fn block_background_stops() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    if let Err(error) = set.thread_block() {
        tracing::debug!(%error, "cannot block SIGTTOU");
    }
}

/// Standard input, when it is a terminal whose foreground is this process's group.
pub(crate) fn foreground_terminal() -> Option<std::io::Stdin> {
    let stdin = std::io::stdin();
    (stdin.is_terminal() && tcgetpgrp(stdin.as_fd()).ok()? == getpgrp()).then_some(stdin)
}

/// Whether `group` is the foreground of the terminal on standard input.
pub(crate) fn is_foreground(group: Pid) -> bool {
    tcgetpgrp(std::io::stdin().as_fd()).is_ok_and(|fg| fg == group)
}

/// Makes `group` the foreground of the terminal on standard input. The caller blocks SIGTTOU
/// (see [`block_background_stops`]) or is in the foreground itself.
pub(crate) fn give_foreground(group: Pid) {
    if let Err(error) = tcsetpgrp(std::io::stdin().as_fd(), group) {
        tracing::debug!(%error, group = group.as_raw(), "cannot give the terminal's foreground");
    }
}

/// In the guard: makes this process group the terminal's foreground, with SIGTTOU blocked for
/// the one call (the guard starts as a background group).
pub(crate) fn take_foreground_for_own_group() {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    let blocked = set.thread_block().is_ok();
    give_foreground(getpgrp());
    if blocked && let Err(error) = set.thread_unblock() {
        tracing::debug!(%error, "cannot unblock SIGTTOU");
    }
}

/// The job-control signal that stopped child `pid` (SIGTSTP, SIGTTIN or SIGTTOU), if it is
/// stopped by one now. Leaves the child's state to be waited for (`WNOWAIT`), and never reports
/// or reaps an exit. A stop by SIGSTOP is not a terminal's: an operator or a debugger meant it.
pub(crate) fn stopped_by_terminal(pid: Pid) -> Option<Signal> {
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::Stopped(_, signal))
            if matches!(signal, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU) =>
        {
            Some(signal)
        }
        _ => None,
    }
}

/// Whether child `pid` is stopped now, by any signal (see [`stopped_by_terminal`]).
pub(crate) fn stopped(pid: Pid) -> bool {
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::Stopped(..)))
}

/// Whether this process's group is orphaned: no member has a parent in another group of the
/// same session, so no job-control shell can continue it, and the kernel discards SIGTSTP,
/// SIGTTIN and SIGTTOU sent to it. Reads `/proc` (`None` if it cannot).
pub(crate) fn own_group_orphaned() -> Option<bool> {
    let group = getpgrp();
    let session = getsid(None).ok()?;
    let mut has_outside_parent = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace().skip(1);
        let (Some(ppid), Some(pgrp)) = (fields.next(), fields.next()) else {
            continue;
        };
        let (Ok(ppid), Ok(pgrp)) = (ppid.parse::<i32>(), pgrp.parse::<i32>()) else {
            continue;
        };
        if pgrp != group.as_raw() || ppid <= 0 {
            continue;
        }
        let parent = Some(Pid::from_raw(ppid));
        if getpgid(parent).is_ok_and(|g| g != group) && getsid(parent).is_ok_and(|s| s == session) {
            has_outside_parent = true;
            break;
        }
    }
    Some(!has_outside_parent)
}
