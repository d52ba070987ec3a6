//! The link that makes a command die with `lease`, however `lease` dies.
//!
//! `lease run` does not start the command itself. It starts its own binary again as one of two
//! small internal steps, which arm the kernel's parent-death signal (`PR_SET_PDEATHSIG`, set
//! through nix's safe wrapper) *before* the command exists, then check that `lease` is still
//! their parent, which covers the race where `lease` dies before the link is set:
//!
//! * `lease guard` (the default): the leader of a new process group, which starts the command in
//!   that group and stays beside it. When `lease` dies (SIGKILL, the OOM killer, a panic), the
//!   guard kills the whole group with SIGKILL, children of the command included.
//! * `lease exec` (`--foreground`): sets the parent-death signal to SIGKILL and replaces itself
//!   with the command (`execvp`), which stays in `lease`'s process group so it can use the
//!   terminal. Only the command itself is linked; processes it starts are not.
//!
//! Both ignore the signals `lease` forwards (they are meant for the command), and exit with the
//! command's status (128 + N when signal N killed it). On a terminal (`--terminal`), the guard
//! makes its group the terminal's foreground before it starts the command (`terminal.rs`).
//! When `lease` dies, the guard also removes the deadline relay's directory.
//!
//! On files, the guard also receives a descriptor sharing the lease's kernel lock (`--lock-fd`),
//! so that the lock outlives `lease` until the command's group is gone, and the read end of the
//! parent link (`--parent-link-fd`), a pipe whose only writer is `lease run`. It keeps neither:
//! it starts `lease hold-lock` with both (the link as its standard input), in a process group of
//! its own, and closes its own copies before starting the command, which so inherits no
//! descriptor of the lock and cannot unlock it (a `flock(LOCK_UN)` on a shared open file
//! description frees it for every holder). The holder learns of `lease`'s death from the link
//! as soon as the guard does, kills the group itself and lets the lock go once no live process is
//! left in it (`hold.rs`): a contender waits for neither the guard's reaction nor its death.
//!
//! The guard also enforces the holder's deadline itself (`relay.rs`): if `lease` is alive but
//! not running (SIGSTOP, a hung process) and the deadline it last published arrives, the guard
//! kills the group with SIGKILL just before it. A healthy `lease` stops the command earlier.
//!
//! On macOS and FreeBSD (and Linux's `portable-paths` test build) there is no parent-death
//! signal: the guard hears of `lease`'s death from kqueue's `NOTE_EXIT` on `lease`'s pid (macOS,
//! FreeBSD), which raises the same SIGUSR2, and from its poll of `getppid`; on files `lease
//! hold-lock` hears of it from the parent link (there a FIFO in the relay's private directory)
//! and kills the group, the guard with it. `lease exec` is refused there (`sys.rs`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use std::os::unix::process::CommandExt;

use nix::unistd::{Pid, execvp, getpgrp, getppid};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::LinkArgs;
use crate::exit::{self, Failure};
use crate::relay::DeadlineWatch;

/// The signal the kernel sends the guard when `lease` dies. Anyone may send it too, so the guard
/// acts on it only after checking that its parent really changed.
const PARENT_DEATH: Signal = Signal::SIGUSR2;

/// Test-only fault point: wait this long before arming the link, so a test can kill `lease` in
/// the window the parent check covers. Compiled into debug builds only.
#[cfg(debug_assertions)]
const ARM_DELAY_ENV: &str = "LEASE_FAULT_LINK_ARM_DELAY_MS";

fn fault_arm_delay() {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var(ARM_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Whether `lease` (`parent`) is still this process's parent, and the kqueue watch of macOS and
/// FreeBSD did not see it die (see `sys.rs`: its exit is reported as it exits, before the
/// kernel has given the guard another parent).
fn parent_alive(parent: i32) -> bool {
    getppid() == Pid::from_raw(parent) && !crate::sys::parent_gone()
}

/// Why the guard kills the command's group.
#[derive(Clone, Copy, Debug)]
enum Cause {
    /// `lease` died.
    ParentDied,
    /// `lease` lives but did not renew by the deadline it published (stopped, or hung).
    DeadlineReached,
}

/// Nothing may run without the lease: kills this process group, the guard with it, after
/// saying why on stderr (unless `report` is false). Returns only if the kill failed.
fn kill_group(parent: i32, cause: Cause, report: bool) -> Failure {
    let group = getpgrp();
    let why = match cause {
        Cause::ParentDied => format!("the lease process (pid {parent}) died"),
        Cause::DeadlineReached => format!(
            "the lease process (pid {parent}) did not renew the lease by its deadline (is it \
             stopped?)"
        ),
    };
    if report {
        eprintln!(
            "lease: {why}; killing the command's process group {group} so nothing runs without the lease"
        );
    }
    tracing::warn!(
        parent,
        group = group.as_raw(),
        ?cause,
        "killing the command group"
    );
    match killpg(group, Signal::SIGKILL) {
        Ok(()) => Failure::new(exit::LOST, why),
        Err(error) => Failure::internal(format!(
            "{why}, and the command's process group {group} could not be killed: {error}"
        )),
    }
}

/// `lease` died: its deadline relay directory would be left behind (`lease run` cannot remove
/// it), so the guard removes it, then kills the group; `report`: whether to say so (on files
/// `lease hold-lock` does, and is usually first).
fn parent_died(parent: i32, watch: Option<&DeadlineWatch>, report: bool) -> Failure {
    if let Some(watch) = watch {
        watch.clean_up();
    }
    kill_group(parent, Cause::ParentDied, report)
}

/// Arms the parent-death signal on Linux, or starts the kqueue watch of `lease` on macOS and
/// FreeBSD, after the test-only delay (see `sys::watch_parent`). The caller checks the parent
/// next.
fn arm(parent: i32, death: Signal) -> Result<(), Failure> {
    fault_arm_delay();
    crate::sys::watch_parent(parent, death).map_err(|e| {
        Failure::internal(format!("cannot link the command to the lease process: {e}"))
    })
}

/// `lease guard --parent PID -- COMMAND...`: see the module docs.
pub(crate) async fn guard(args: LinkArgs) -> Result<u8, Failure> {
    let parent = args.parent;
    arm(parent, PARENT_DEATH)?;
    let install = |kind: SignalKind| {
        signal(kind).map_err(|e| Failure::internal(format!("cannot handle signals: {e}")))
    };
    let mut death = install(SignalKind::user_defined2())?;
    // Forwarded by `lease` (meant for the command), and SIGCHLD (see `extend_stop_to_group`).
    let mut ignored = [
        install(SignalKind::interrupt())?,
        install(SignalKind::terminate())?,
        install(SignalKind::hangup())?,
        install(SignalKind::quit())?,
        install(SignalKind::user_defined1())?,
        install(SignalKind::alarm())?,
        install(SignalKind::child())?,
    ];
    let mut watch = args.deadline_file.clone().map(DeadlineWatch::new);
    if !parent_alive(parent) {
        return Err(parent_died(parent, watch.as_ref(), true));
    }
    if args.terminal {
        // Before the command exists, so it never reads the terminal as a background job.
        crate::terminal::take_foreground_for_own_group(Pid::from_raw(parent));
    }
    // `lease hold-lock` reports `lease`'s death itself; the guard then kills quietly.
    let mut holder = match (args.lock_fd, args.parent_link_fd) {
        (Some(lock), Some(link)) => Some(hand_over_lock(&args, lock, link)?),
        _ => None,
    };
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .kill_on_drop(false)
        .spawn()
        .map_err(|error| start_failure(&args.command[0], &error))?;
    let kill_before = Duration::from_millis(args.kill_before_ms);
    // Also look at the parent on a timer, in case the signal went astray.
    let mut poll = tokio::time::interval(Duration::from_millis(args.poll_ms.max(1)));
    // Fires exactly at the last deadline read minus `kill_before`, not at the next poll.
    let kill_timer = tokio::time::sleep(Duration::MAX);
    tokio::pin!(kill_timer);
    loop {
        let [a, b, c, d, e, f, g] = &mut ignored;
        let due = tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Failure::internal(format!("waiting for the command: {e}")))?;
                return Ok(exit::status_code(status));
            }
            _ = death.recv() => false,
            _ = poll.tick() => false,
            () = &mut kill_timer => true,
            _ = a.recv() => false,
            _ = b.recv() => false,
            _ = c.recv() => false,
            _ = d.recv() => false,
            _ = e.recv() => false,
            _ = f.recv() => false,
            _ = g.recv() => false,
        };
        if !parent_alive(parent) {
            return Err(parent_died(parent, watch.as_ref(), !running(&mut holder)));
        }
        extend_stop_to_group(args.terminal, &child);
        if let Some(watch) = watch.as_mut()
            && let Some(left) = watch.left()
        {
            if left <= kill_before {
                watch.clean_up();
                return Err(kill_group(parent, Cause::DeadlineReached, true));
            }
            kill_timer
                .as_mut()
                .reset(tokio::time::Instant::now() + (left - kill_before));
        } else if due {
            kill_timer
                .as_mut()
                .reset(tokio::time::Instant::now() + Duration::from_secs(3600));
        }
    }
}

/// On a terminal, a command that stopped itself (`kill -TSTP $$`, a program's own suspend) is
/// a stopped job to its shell; under `lease` the guard would run on and the shell would never
/// see it. The guard stops its whole group with the same signal, as the terminal's Ctrl-Z
/// would, and `lease run` then stops its job (`run.rs`): `fg` and `bg` work as for any command.
/// A stop by another signal (SIGSTOP) is not job control and is left to `lease run`'s bound;
/// without a terminal (`terminal` false) there is no job control to follow.
fn extend_stop_to_group(terminal: bool, child: &tokio::process::Child) {
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return;
    };
    if !terminal {
        return;
    }
    if let Some(signal) = crate::terminal::stopped_by_terminal(Pid::from_raw(pid)) {
        tracing::info!(%signal, "the command stopped itself; stopping its group with it");
        if let Err(error) = killpg(getpgrp(), signal) {
            tracing::debug!(%error, "cannot stop the command's group");
        }
    }
}

/// Whether `holder` (the guard's `lease hold-lock`, if any) is still running.
fn running(holder: &mut Option<std::process::Child>) -> bool {
    holder
        .as_mut()
        .is_some_and(|holder| matches!(holder.try_wait(), Ok(None)))
}

/// Starts `lease hold-lock` with the inherited lock descriptor `lock` and the parent link `link`
/// (as its standard input), then closes the guard's own copies of both, so that the command the
/// guard starts next inherits no descriptor of the lock: a `flock -u` on every descriptor the
/// command has cannot free it, and its lifetime does not hold the link open.
fn hand_over_lock(args: &LinkArgs, lock: i32, link: i32) -> Result<std::process::Child, Failure> {
    let cannot = |e: &dyn std::fmt::Display| {
        Failure::internal(format!(
            "cannot hand the kernel lock to its holder process: {e}"
        ))
    };
    // The inherited read end, opened again as a file of its own (an inherited descriptor number
    // cannot be adopted without `unsafe`; see `sys::open_link`): a pipe's end-of-file comes
    // once no writer is left, however many readers there are.
    let link_end =
        crate::sys::open_link(link, args.deadline_file.as_deref()).map_err(|e| cannot(&e))?;
    let program = crate::sys::own_program().map_err(|e| cannot(&e))?;
    let mut holder = std::process::Command::new(program);
    holder
        .arg("hold-lock")
        .arg("--group")
        .arg(getpgrp().as_raw().to_string())
        .arg("--lock-fd")
        .arg(lock.to_string())
        .arg("--parent")
        .arg(args.parent.to_string());
    if let Some(file) = &args.deadline_file {
        holder.arg("--deadline-file").arg(file);
    }
    let holder = holder
        .stdin(link_end)
        .stdout(std::process::Stdio::null())
        // Its own group: a signal to the command's group (SIGKILL when `lease` dies) must not
        // end it before the processes of the group are gone.
        .process_group(0)
        .spawn()
        .map_err(|e| cannot(&e))?;
    // Both were inherited from `lease run` for this hand-over and nothing else in this process
    // owns them.
    nix::unistd::close(lock).map_err(|e| cannot(&e))?;
    nix::unistd::close(link).map_err(|e| cannot(&e))?;
    Ok(holder)
}

/// `lease exec --parent PID -- COMMAND...`: see the module docs. Returns only on failure.
pub(crate) fn exec(args: &LinkArgs) -> Failure {
    if !crate::sys::LINUX_CALLS {
        // `lease run` refuses `--foreground` first; this is for a hand-started `lease exec`.
        return Failure::usage(crate::sys::NO_FOREGROUND);
    }
    if let Err(failure) = arm(args.parent, Signal::SIGKILL) {
        return failure;
    }
    if !parent_alive(args.parent) {
        return Failure::new(
            exit::LOST,
            "the lease process died before the command started; not starting it",
        );
    }
    let argv: Result<Vec<CString>, _> = args
        .command
        .iter()
        .map(|arg| CString::new(arg.as_bytes()))
        .collect();
    let Ok(argv) = argv else {
        return Failure::usage("the command contains a NUL byte");
    };
    let error = match execvp(&argv[0], &argv) {
        Ok(never) => match never {},
        Err(errno) => std::io::Error::from(errno),
    };
    start_failure(&args.command[0], &error)
}

/// Why a command could not start, as a shell reports it (127 not found, 126 not executable).
pub(crate) fn start_failure(program: &std::ffi::OsStr, error: &std::io::Error) -> Failure {
    let program = program.to_string_lossy();
    match error.kind() {
        std::io::ErrorKind::NotFound => {
            Failure::new(exit::NOT_FOUND, format!("{program}: command not found"))
        }
        std::io::ErrorKind::PermissionDenied => Failure::new(
            exit::NOT_EXECUTABLE,
            format!("{program}: cannot execute: {error}"),
        ),
        _ => Failure::new(
            exit::NOT_EXECUTABLE,
            format!("{program}: cannot start: {error}"),
        ),
    }
}
