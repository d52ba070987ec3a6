//! The terminal under `lease run`: the command's process group gets the terminal's foreground
//! whenever `lease` has it, so it reads and is interrupted as under `flock(1)`, and a stopped
//! command (SIGTSTP, SIGTTIN, SIGTTOU, or any stop seen in `/proc`) is noticed, so that it never
//! keeps a lease renewed for long.
//!
//! `lease run` starts the command in a process group of its own (the group kill needs one). On a
//! terminal that group would be a background job: reading the terminal stops it with SIGTTIN and
//! Ctrl-C reaches only `lease`. So when standard input is the terminal and `lease` is in its
//! foreground, the guard makes its group the terminal's foreground before it starts the command
//! (no window in which the command could read as a background job); a `lease` started in the
//! background gives its command the terminal when `fg` continues it; and `lease` takes the
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

/// Whether standard input is this session's controlling terminal (one whose foreground group
/// can be read), whether or not `lease` is in its foreground now: a job started with `&` gets
/// the terminal for its command once `fg` gives it to `lease`.
pub(crate) fn controlling_terminal() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal() && tcgetpgrp(stdin.as_fd()).is_ok()
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

/// In the guard: makes this process group the terminal's foreground if `lease` (process
/// `parent`) has it now, with SIGTTOU blocked for the one call (the guard starts as a background
/// group). A `lease run` started in the background (`&`) leaves the terminal to the shell: its
/// command gets it when `fg` gives it to `lease`.
pub(crate) fn take_foreground_for_own_group(parent: Pid) {
    let Ok(parent_group) = getpgid(Some(parent)) else {
        return;
    };
    if !is_foreground(parent_group) {
        tracing::debug!("lease is not in the terminal's foreground; leaving it to the shell");
        return;
    }
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
    stopped_by(pid)
        .filter(|signal| matches!(signal, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU))
}

/// The signal that stopped child `pid`, if it is stopped now (see [`stopped_by_terminal`]).
pub(crate) fn stopped_by(pid: Pid) -> Option<Signal> {
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::Stopped(_, signal)) => Some(signal),
        _ => None,
    }
}

/// What is stopped in the command's process group, from `/proc`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stopped {
    /// The command (the guard's child) is stopped by a signal (state `T`), whoever stopped it:
    /// the terminal, itself (`kill -TSTP $$`), an operator's `kill -STOP`. A process stopped by
    /// a debugger (`t`) is not: someone is working with it.
    pub(crate) command: bool,
    /// Some process of the group is stopped by a signal.
    pub(crate) any: bool,
}

/// What is stopped in process group `group`, whose leader `guard` started the command. One
/// listing of `/proc`, one `getpgid` per process, one `stat` read per member; nothing when
/// `/proc` cannot be read.
pub(crate) fn stopped_in(group: Pid, guard: Pid) -> Stopped {
    let mut stopped = Stopped::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return stopped;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
            .map(Pid::from_raw)
        else {
            continue;
        };
        if getpgid(Some(pid)) != Ok(group) {
            continue;
        }
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        if let Some((b'T', parent)) = state_and_parent(&stat) {
            stopped.any = true;
            stopped.command |= parent == guard.as_raw();
        }
    }
    stopped
}

/// The state letter and the parent of a `/proc/PID/stat` line (`pid (comm) state ppid ...`),
/// read after the last `)`, which ends the command name (it may hold spaces, parentheses and
/// bytes that are not UTF-8).
fn state_and_parent(stat: &[u8]) -> Option<(u8, i32)> {
    let end = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat
        .get(end + 1..)?
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty());
    let state = *fields.next()?.first()?;
    let parent = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    Some((state, parent))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_tells_state_and_parent() {
        assert_eq!(
            state_and_parent(b"4242 (sleep) T 4241 4240 4240 0 -1"),
            Some((b'T', 4241))
        );
        // The name may hold spaces, parentheses and bytes that are not UTF-8.
        assert_eq!(
            state_and_parent(b"4242 (a) b\xff) t 1 4240"),
            Some((b't', 1))
        );
        assert_eq!(state_and_parent(b"4242 (truncated"), None);
    }
}
