//! `filelock`: a `FileLock` acquired, claimed and released in a loop.

use std::time::Duration;

use lease_file::{
    FileLock, FileLockBuilder, FileLockGuard, LeaseError, ModePreference, WaitOptions,
};

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
    while !actor.stopping() {
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
                lock = Some(current);
                // Let a contender in between two tenures of this process.
                actor.sleep(rng.millis(0, 20));
            }
            Err((what, error)) => tenure.failed(what, &error),
        }
    }
    // A tenure cut short by a stop is released by its guard's drop.
    Ok(())
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
        self.claims(&guard, token);
        guard.release().map_err(|error| ("release", error))?;
        history.rel(self.surface, self.key, token, mono_ns());
        Ok(())
    }

    /// `claims` claims, evenly spread over `hold_ms`: the instant, then `check()`, then the line
    /// only if the check vouched for this tenure. Ends at the first failed check, or a stop.
    fn claims(&self, guard: &FileLockGuard, token: u64) {
        let claims = self.args.claims.max(1);
        let step = Duration::from_millis(self.args.hold_ms) / claims;
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
