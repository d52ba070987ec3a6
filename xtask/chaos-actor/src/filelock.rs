//! `filelock`: a `FileLock` acquired, claimed and released in a loop.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use lease_core::{LeaseError, WaitOptions};
use lease_file::{FileLock, FileLockBuilder, FileLockGuard, ModePreference};

use lease_forktest::Forked;

use crate::actor::{Actor, Rng};
use crate::cli::{FileLockArgs, LockModeArg};
use crate::history::{Surface, mono_ns};

/// The pause after an error, such as a hostile or garbage lock directory.
const ERROR_BACKOFF: Duration = Duration::from_millis(50);

/// Runs tenures until the actor stops. An error never ends the loop: it is logged, the lock is
/// made afresh (so no state of a failed call lingers) after a 50 ms pause, and the loop goes on.
pub(crate) fn run(args: &FileLockArgs, actor: &Actor) -> Result<(), String> {
    let surface = match args.mode {
        LockModeArg::Kernel => Surface::FileLockKernel,
        LockModeArg::Heartbeat => Surface::FileLockHeartbeat,
    };
    let key = format!("file:{}", args.path.display());
    let tenure = Tenure {
        args,
        actor,
        surface,
        key: &key,
    };
    let mut rng = Rng::new();
    let mut lock: Option<FileLock> = None;
    let mut children = Children::default();
    while !actor.stopping() {
        children.reap();
        let current = match lock.take() {
            Some(current) => current,
            None => match options(&args.path, args).build() {
                Ok(made) => made,
                Err(error) => {
                    tenure.failed("open", &error);
                    continue;
                }
            },
        };
        match tenure.once(&current) {
            Ok(()) => {
                if args.fork_idle {
                    children.fork_contender(&tenure, &current);
                }
                lock = Some(current);
                // Let a contender in between two tenures of this process.
                actor.sleep(rng.millis(0, 20));
            }
            Err((what, error)) => tenure.failed(what, &error),
        }
    }
    // A tenure cut short by a stop is released by its guard's drop.
    children.finish();
    Ok(())
}

/// How long a forked contender may live before its parent kills it: one acquisition's wait
/// and one tenure, with room for a loaded machine. (A child of a multi-threaded process may
/// find a lock held forever by a thread that did not come with it; it must not linger.)
const CHILD_LIMIT: Duration = Duration::from_secs(5);

/// The contenders an idle-fork actor has forked and not yet reaped.
#[derive(Default)]
struct Children {
    running: Vec<(Pid, Instant)>,
    forked: u64,
}

impl Children {
    /// Forks a child that makes one tenure of the same path with its copy of `lock` (idle
    /// after a release, its cached descriptors shared with this process) while the parent
    /// goes on, and exits.
    fn fork_contender(&mut self, tenure: &Tenure<'_>, lock: &FileLock) {
        if self.running.len() >= 2 {
            return;
        }
        self.forked += 1;
        let proc_id = format!("{}-f{}", tenure.actor.history.proc_id(), self.forked);
        match lease_forktest::fork() {
            Ok(Forked::Child) => {
                let code = match tenure.actor.forked(&proc_id) {
                    Ok(actor) => {
                        let contender = Tenure {
                            actor: &actor,
                            ..*tenure
                        };
                        match contender.once(lock) {
                            Ok(()) => 0,
                            Err((what, error)) => {
                                eprintln!("{proc_id}: {what}: {error}");
                                1
                            }
                        }
                    }
                    Err(error) => {
                        eprintln!("{proc_id}: {error}");
                        2
                    }
                };
                std::process::exit(code)
            }
            Ok(Forked::Parent(child)) => self.running.push((child, Instant::now())),
            Err(error) => eprintln!("{proc_id}: fork: {error}"),
        }
    }

    /// Reaps the children that exited; kills those past [`CHILD_LIMIT`].
    fn reap(&mut self) {
        self.running.retain(|&(pid, started)| {
            if started.elapsed() > CHILD_LIMIT {
                let _ = kill(pid, Signal::SIGKILL);
            }
            !matches!(
                waitpid(pid, Some(WaitPidFlag::WNOHANG)),
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
            )
        });
    }

    /// Waits for every child (killing the late ones) before the actor exits.
    fn finish(&mut self) {
        while !self.running.is_empty() {
            self.reap();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn options(path: &std::path::Path, args: &FileLockArgs) -> FileLockBuilder {
    let mode = match args.mode {
        LockModeArg::Kernel => ModePreference::Kernel,
        LockModeArg::Heartbeat => ModePreference::HeartbeatOnly,
    };
    FileLock::builder(path)
        .with_mode(mode)
        .with_stale_threshold(Duration::from_millis(args.stale_ms))
        .with_heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
}

/// One process's tenures of one lock path.
struct Tenure<'a> {
    args: &'a FileLockArgs,
    actor: &'a Actor,
    surface: Surface,
    key: &'a str,
}

impl Tenure<'_> {
    /// One acquisition (a timeout or a live holder is not an error: `Ok` without a tenure), its
    /// claims and its release. `Err` names the call that failed.
    fn once(&self, lock: &FileLock) -> Result<(), (&'static str, LeaseError)> {
        let history = &self.actor.history;
        let sent = mono_ns();
        let wait = Duration::from_millis(self.args.acquire_timeout_ms);
        let guard = match lock.acquire_with(&WaitOptions::new(wait)) {
            Ok(guard) => guard,
            Err(error) if error.is_timeout() || error.is_held() => return Ok(()),
            Err(error) => return Err(("acquire", error)),
        };
        let token = guard.fencing_token().get();
        let acquired = mono_ns();
        history.acq(
            self.surface,
            self.key,
            token,
            sent,
            acquired,
            self.actor.wall_ms(),
        );
        if self.args.fork_child {
            let claims = self.args.claims.max(2);
            self.claims(&guard, token, claims / 2);
            // A different disposal each tenure, from the token: drop, release, unwind, exit.
            let how = token % 4;
            match lease_forktest::fork() {
                Ok(Forked::Child) => child_disposes(guard, how),
                Ok(Forked::Parent(child)) => {
                    let _ = lease_forktest::wait(child);
                }
                Err(error) => eprintln!("{}: fork: {error}", history.proc_id()),
            }
            self.claims(&guard, token, claims - claims / 2);
        } else {
            self.claims(&guard, token, self.args.claims.max(1));
        }
        guard.release().map_err(|error| ("release", error))?;
        history.rel(self.surface, self.key, token, mono_ns());
        Ok(())
    }

    /// `claims` claims, spaced as `--claims` claims spread over `hold_ms` are: the instant, then `check()`, then the line
    /// only if the check vouched for this tenure. Ends at the first failed check, or a stop.
    fn claims(&self, guard: &FileLockGuard, token: u64, claims: u32) {
        let step = Duration::from_millis(self.args.hold_ms) / self.args.claims.max(1);
        for _ in 0..claims {
            if !self.actor.sleep(step) {
                return;
            }
            let at = mono_ns();
            if self.args.skip_check {
                self.actor.history.claim(self.surface, self.key, token, at);
                continue;
            }
            match guard.check() {
                Ok(checked) if checked.get() == token => {
                    self.actor.history.claim(self.surface, self.key, token, at);
                }
                Ok(other) => {
                    let proc_id = self.actor.history.proc_id();
                    eprintln!("{proc_id}: check says fencing {other}, the tenure is {token}");
                    return;
                }
                Err(error) => {
                    eprintln!(
                        "{}: tenure {token} lost: {error}",
                        self.actor.history.proc_id()
                    );
                    return;
                }
            }
        }
    }

    fn failed(&self, what: &str, error: &LeaseError) {
        eprintln!("{}: {what}: {error}", self.actor.history.proc_id());
        self.actor.sleep(ERROR_BACKOFF);
    }
}

/// The forked child's part: dispose of its copy of the parent's guard one way (`how`: 0 drop,
/// 1 an explicit release, which must be refused, 2 unwind with it, 3 exit with it) and exit,
/// writing nothing to the history (the parent's history file is shared).
fn child_disposes(guard: FileLockGuard, how: u64) -> ! {
    match how {
        0 => drop(guard),
        1 => {
            if guard.release().is_ok() {
                // The parent's lease was freed: say so; the checker sees the overlap.
                eprintln!("forked child: release of the parent's lease succeeded");
                std::process::exit(3);
            }
        }
        2 => {
            std::panic::set_hook(Box::new(|_| {}));
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _copy = guard;
                panic!("the forked child unwinds with its copy of the guard");
            }));
        }
        _ => std::process::exit(0),
    }
    std::process::exit(0)
}
