//! What every mode shares: the run directory, the history, the clock, and when to stop.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};

use crate::cli::Common;
use crate::clock::SteppableClock;
use crate::history::{History, unix_ms};

/// How often waits look at the stop file and the parent.
const STOP_POLL: Duration = Duration::from_millis(50);

/// One actor process.
#[derive(Debug)]
pub(crate) struct Actor {
    run: PathBuf,
    /// Its history file.
    pub(crate) history: Arc<History>,
    /// Its steppable wall clock.
    pub(crate) clock: Arc<SteppableClock>,
    parent: Pid,
}

impl Actor {
    /// Ties the process to its parent (SIGKILL when the parent dies), opens the history and
    /// starts following the clock offset.
    ///
    /// # Errors
    /// The parent is already gone, or the history cannot be opened.
    pub(crate) fn start(common: &Common) -> Result<Self, String> {
        set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("cannot set PR_SET_PDEATHSIG: {e}"))?;
        // The parent may have died before the line above: then init (or a subreaper) adopted us.
        let parent = getppid();
        if parent == Pid::from_raw(1) {
            return Err("the parent died before the actor started".to_owned());
        }
        let history = History::open(&common.run, &common.proc_id)
            .map(Arc::new)
            .map_err(|e| format!("cannot open the history in {}: {e}", common.run.display()))?;
        let clock = SteppableClock::watching(common.run.clone(), &common.proc_id, history.clone());
        Ok(Self {
            run: common.run.clone(),
            history,
            clock,
            parent,
        })
    }

    /// The actor of a child forked from this one, logging as `proc_id` to a history file of
    /// its own: tied to this process (its parent now) as this one is to the orchestrator, and
    /// keeping the clock offset as it was at the fork (the child lives for one tenure).
    ///
    /// # Errors
    /// The parent-death signal cannot be set, or the history cannot be opened.
    pub(crate) fn forked(&self, proc_id: &str) -> Result<Self, String> {
        set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("cannot set PR_SET_PDEATHSIG: {e}"))?;
        let history = History::open(&self.run, proc_id)
            .map(Arc::new)
            .map_err(|e| format!("cannot open the history in {}: {e}", self.run.display()))?;
        Ok(Self {
            run: self.run.clone(),
            history,
            clock: self.clock.clone(),
            parent: getppid(),
        })
    }

    /// The run directory.
    pub(crate) fn run_dir(&self) -> &std::path::Path {
        &self.run
    }

    /// Whether to wind down: `<run>/stop` exists, or the parent is gone (should the kernel's
    /// parent-death signal not have come: it follows the parent *thread*).
    pub(crate) fn stopping(&self) -> bool {
        self.run.join("stop").exists() || getppid() != self.parent
    }

    /// This process's (possibly stepped) wall clock, in Unix milliseconds.
    pub(crate) fn wall_ms(&self) -> u64 {
        unix_ms(lease_core::Clock::now(self.clock.as_ref()))
    }

    /// Sleeps `duration` on this thread, waking early when stopping. `false` if stopping.
    pub(crate) fn sleep(&self, duration: Duration) -> bool {
        let end = Instant::now() + duration;
        loop {
            if self.stopping() {
                return false;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(STOP_POLL));
        }
    }

    /// Tries `attempt` (creating a table: `what`) every half second until it works; an error
    /// if the actor stops first. Each failure is printed.
    pub(crate) async fn until_ready<E: std::fmt::Display, F: Future<Output = Result<(), E>>>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> F,
    ) -> Result<(), String> {
        loop {
            match attempt().await {
                Ok(()) => return Ok(()),
                Err(error) => eprintln!("{}: {what}: {error}", self.history.proc_id()),
            }
            if !self.pause(Duration::from_millis(500)).await {
                return Err("stopped before the table was ready".to_owned());
            }
        }
    }

    /// [`sleep`](Self::sleep) for async code.
    pub(crate) async fn pause(&self, duration: Duration) -> bool {
        let end = tokio::time::Instant::now() + duration;
        loop {
            if self.stopping() {
                return false;
            }
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            tokio::time::sleep(left.min(STOP_POLL)).await;
        }
    }
}

/// A small xorshift generator for the actors' random choices (which key, how long): no
/// reproducibility is promised, the orchestrator's seed governs the faults.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// Seeded from the pid and the monotonic clock.
    pub(crate) fn new() -> Self {
        let seed = crate::history::mono_ns() ^ (u64::from(std::process::id()) << 32);
        Self(seed | 1)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.checked_rem(n).unwrap_or(0)
    }

    /// A duration in `[low, high]` milliseconds.
    pub(crate) fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high.saturating_sub(low) + 1))
    }
}

/// Runs `future` on a multi-threaded runtime (two workers) and shuts it down without waiting
/// more than a second for tasks still running: a worker stuck past its stop bound must not keep
/// the process alive.
///
/// # Errors
/// The runtime cannot start.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let output = runtime.block_on(future);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(output)
}
