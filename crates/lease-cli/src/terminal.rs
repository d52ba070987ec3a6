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
//!
//! Without `/proc` (macOS, FreeBSD, and Linux's `portable-paths` test build; see `sys.rs`):
//!
//! * [`stopped_in`] sees only whether the guard itself is stopped (`waitid` with `WNOWAIT` on
//!   `lease`'s own child), not each member of the group. A stop of the whole group (the
//!   terminal's Ctrl-Z, the guard extending the command's own SIGTSTP to its group, a
//!   `kill -STOP` to the group) stops the guard too and is seen; a SIGSTOP sent to the command
//!   alone is not, so such a command keeps its lease renewed while stopped (it runs nothing;
//!   `lease`'s signals and the lease's loss still end it).
//! * [`own_group_orphaned`] is decided from `lease`'s own parent: not orphaned when it is in
//!   the same session (a shell's job, or a script that is one), unknown otherwise (the callers
//!   then take the group as orphaned, as they do when `/proc` cannot be read).
//! * macOS: nix wraps no `waitid` there, and `waitpid(WUNTRACED)` would consume the exit status
//!   the runtime waits for, so no stop of a child can be read without reaping it. So the
//!   command does not get the terminal's foreground there ([`controlling_terminal`] is false):
//!   it runs as a background job of the terminal, as without a terminal. Reading the terminal
//!   stops it (SIGTTIN); Ctrl-C and Ctrl-\ reach `lease`, which forwards them to the command's
//!   group and kills it after its grace; Ctrl-Z stops `lease` alone, and the guard kills the
//!   command by the deadline `lease` published (`relay.rs`). Giving it the foreground instead
//!   would leave a Ctrl-Z'd command's group stopped, the shell waiting on a `lease` that
//!   never stops, and Ctrl-C queued to stopped processes: a terminal that hangs.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use nix::sys::signal::{SigSet, Signal};
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
    if cfg!(target_os = "macos") {
        // No stop of a child can be read there without reaping it: see the module docs.
        return false;
    }
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
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
pub(crate) fn stopped_by(pid: Pid) -> Option<Signal> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags) {
        Ok(WaitStatus::Stopped(_, signal)) => Some(signal),
        _ => None,
    }
}

/// Whether child `pid` has exited (a zombie), leaving it to be reaped (`WNOWAIT`). Tests only.
#[cfg(all(test, any(target_os = "linux", target_os = "freebsd")))]
pub(crate) fn exited(pid: Pid) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    matches!(
        waitid(Id::Pid(pid), flags),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
    )
}

/// macOS: never known (see the module docs: no `waitid` in nix there, and `waitpid` would
/// reap an exit the runtime waits for).
#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
pub(crate) fn stopped_by(_pid: Pid) -> Option<Signal> {
    None
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
/// Without `/proc` (see the module docs): whether the guard, `lease`'s child, is stopped.
pub(crate) fn stopped_in(group: Pid, guard: Pid) -> Stopped {
    if !crate::sys::LINUX_CALLS {
        let stopped = stopped_by(guard).is_some();
        return Stopped {
            command: stopped,
            any: stopped,
        };
    }
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
/// SIGTTIN and SIGTTOU sent to it. Reads `/proc` (`None` if it cannot). Without `/proc`, only
/// this process's own parent is looked at: `Some(false)` when it is in this session, `None`
/// otherwise.
pub(crate) fn own_group_orphaned() -> Option<bool> {
    let group = getpgrp();
    let session = getsid(None).ok()?;
    if !crate::sys::LINUX_CALLS {
        // Another member may have a parent in the session when ours is outside it: unknown.
        // Ours in the session (in another group: a shell's job; in this group: a script run as
        // the job, whose own parent cannot be read without `/proc`, taken as the job it almost
        // always is): not orphaned. Wrong only for an orphaned script's group, where the
        // SIGTSTP `lease` sends its group is discarded and a command stopped reading the
        // terminal is continued at each check instead of ending the run.
        let in_session = getsid(Some(nix::unistd::getppid())).ok()? == session;
        return in_session.then_some(false);
    }
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
