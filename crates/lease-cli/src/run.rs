//! `lease run`: hold a lease while a command runs, and stop the command if the lease is lost.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease_core::backend::{default_safety_margin, validate_duration};
use lease_core::{
    AcquireOptions, CountingLease, Holder, LeaseError, LeaseGuard, LeaseKey, LossReason,
    WaitOptions,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::backend::{Backend, lease_key, owner_description};
use crate::cli::RunArgs;
use crate::duration::fmt_duration;
use crate::exit::{self, Failure, signal_status, status_code};
use crate::guard::start_failure;
use lease_core::backend::fmt_time;

/// Environment variable that carries the fencing token to the command.
pub(crate) const FENCING_ENV: &str = "LEASE_FENCING_TOKEN";
/// The value published with `--value`, in the command's environment.
pub(crate) const VALUE_ENV: &str = "LEASE_VALUE";
/// Environment variable that carries the key to the command.
pub(crate) const KEY_ENV: &str = "LEASE_KEY";
/// Environment variable that carries the command's slot (`--holders`; 0 otherwise).
pub(crate) const SLOT_ENV: &str = "LEASE_SLOT";

/// What `lease run` was asked to do, validated.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    pub(crate) key: LeaseKey,
    /// `--holders N` above 1: the slots of `key`.
    pub(crate) counting: Option<CountingLease>,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) grace: Duration,
    pub(crate) foreground: bool,
    /// Standard input is this session's terminal: the command's group gets its foreground
    /// whenever `lease` has it, at the start or after `fg` (see `terminal.rs`).
    pub(crate) terminal: bool,
    pub(crate) command: Vec<OsString>,
    /// The `lease` binary, started again as the guard or exec step.
    pub(crate) link_program: PathBuf,
    /// The value published with the acquisition (`--value`), also given to the command.
    pub(crate) value: Option<String>,
}

/// The default grace between SIGTERM and SIGKILL, when the lease leaves room for it.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// How often the holder's deadline is checked while the command runs.
pub(crate) fn check_interval(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Time allowed for SIGKILL to take effect before the deadline.
fn kill_slack(ttl: Duration) -> Duration {
    (ttl / 20).min(Duration::from_millis(100))
}

/// The longest grace a lease of `ttl` leaves: stopping starts `grace + check + slack` before the
/// holder's deadline, and must not start while renewals (every ttl/3) are healthy, with room
/// for one failed renewal: half of `2/3 ttl - margin`.
pub(crate) fn max_grace(ttl: Duration) -> Duration {
    let margin = default_safety_margin(ttl);
    ((ttl * 2 / 3).saturating_sub(margin) / 2)
        .saturating_sub(check_interval(ttl))
        .saturating_sub(kill_slack(ttl))
}

impl RunPlan {
    fn from_args(args: &RunArgs) -> Result<Self, Failure> {
        let file_store = args.backend.is_file_store();
        let key = lease_key(args.key.as_deref(), args.path.as_deref(), file_store)?;
        validate_duration(args.ttl).map_err(|e| Failure::usage(format!("bad --ttl: {e}")))?;
        if args.ttl < Duration::from_millis(100) {
            return Err(Failure::usage(format!(
                "bad --ttl: {} leaves no time to renew; use at least 100ms",
                fmt_duration(args.ttl)
            )));
        }
        if args
            .command
            .first()
            .is_none_or(|program| program.is_empty())
        {
            return Err(Failure::usage(
                "missing command: lease run --key KEY -- COMMAND [ARGS...]",
            ));
        }
        let most = max_grace(args.ttl);
        let grace = match args.grace {
            // Half the room by default: the other half tolerates late renewals (a slow store)
            // before the command must be stopped.
            None => DEFAULT_GRACE.min(most / 2),
            Some(grace) if grace <= most => grace,
            Some(grace) => {
                return Err(Failure::usage(format!(
                    "bad --grace: {} does not fit a {} lease: SIGKILL must land before the \
                     holder's deadline, so stopping would begin while renewals are still \
                     healthy; use --grace {} or less, or a longer --ttl",
                    fmt_duration(grace),
                    fmt_duration(args.ttl),
                    fmt_duration(most)
                )));
            }
        };
        if args.foreground && !crate::sys::LINUX_CALLS {
            return Err(Failure::usage(crate::sys::NO_FOREGROUND));
        }
        let counting = match args.holders {
            1 => None,
            n => Some(
                CountingLease::new(key.clone(), n)
                    .map_err(|e| Failure::usage(format!("bad --holders: {e}")))?,
            ),
        };
        Ok(Self {
            key,
            counting,
            ttl: args.ttl,
            wait: args.wait,
            grace,
            foreground: args.foreground,
            terminal: !args.foreground && crate::terminal::controlling_terminal(),
            command: args.command.clone(),
            link_program: crate::sys::own_program().map_err(|e| {
                Failure::internal(format!("cannot find the lease program to start again: {e}"))
            })?,
            value: args.value.clone(),
        })
    }

    fn program(&self) -> String {
        self.command
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// `lease run`: parses, opens the store, runs.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Failure> {
    let plan = RunPlan::from_args(&args)?;
    let backend = crate::stores::open_for(&args.backend, args.path.as_deref(), plan.ttl).await?;
    run_plan(&backend, &plan).await
}

/// Acquires, runs the command under the lease, releases. Returns the exit status.
pub(crate) async fn run_plan(backend: &Backend, plan: &RunPlan) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let guard = tokio::select! {
        guard = acquire(backend, plan) => guard?,
        signal = signals.recv() => {
            eprintln!("lease: interrupted by {signal} while waiting for lease {}", plan.key);
            return Ok(signal_status(signal as i32));
        }
    };
    let fencing = guard.fencing_token();
    let slot = plan
        .counting
        .as_ref()
        .and_then(|counting| counting.slot_of(guard.key()))
        .unwrap_or(0);
    tracing::info!(key = %guard.key(), slot, %fencing, backend = backend.leases.name(), "lease acquired");

    let relay = if plan.foreground {
        None
    } else {
        match crate::relay::DeadlineRelay::create() {
            Ok(relay) => {
                relay.publish(guard.deadline());
                Some(relay)
            }
            Err(error) => {
                release(guard).await;
                return Err(Failure::internal(format!(
                    "cannot create the deadline relay for the guard: {error}"
                )));
            }
        }
    };
    let inherited = if plan.foreground {
        None
    } else {
        backend
            .kernel_lock
            .as_ref()
            .and_then(|share| share(guard.key(), fencing))
            .and_then(inheritable)
    };
    let (child, link) = match start(plan, (fencing.get(), slot), relay.as_ref(), inherited) {
        Ok(started) => started,
        Err(failure) => {
            release(guard).await;
            return Err(failure);
        }
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let result = supervise(plan, guard, child, &mut signals, relay.as_ref()).await;
    if plan.terminal && group.is_some_and(crate::terminal::is_foreground) {
        // The command's group had the terminal; `lease` is the shell's job: take it back.
        crate::terminal::give_foreground(nix::unistd::getpgrp());
    }
    // The lease is released and the command stopped: the holder may let the lock go.
    drop(link);
    result
}

/// Starts the command (see [`spawn`]). On files the guard inherits `inherited`, a share of the
/// lease's kernel lock, and hands it to `lease hold-lock`, which holds it until the command's
/// group is gone, so that the lock outlives `lease` itself until then: a contender can never
/// notice our death while the command still runs. The command itself gets no descriptor of it,
/// so it cannot unlock it (`flock -u`): see `guard.rs`. With the lock goes the parent link,
/// through which `lease hold-lock` learns of our death (or end) without waiting for the guard
/// (`hold.rs`); the caller keeps it until the lease is released and the command stopped. In the
/// foreground there is no guard and no group: only `lease` holds the lock.
fn start(
    plan: &RunPlan,
    tokens: (u64, u32),
    relay: Option<&crate::relay::DeadlineRelay>,
    inherited: Option<std::os::fd::OwnedFd>,
) -> Result<(Child, Option<ParentLink>), Failure> {
    use std::os::fd::AsRawFd;
    let link_dir = relay.map(crate::relay::DeadlineRelay::dir);
    let (link, link_end) = match inherited
        .as_ref()
        .zip(link_dir)
        .map(|(_, dir)| ParentLink::new(dir))
    {
        Some(Ok((link, end))) => (Some(link), Some(end)),
        Some(Err(error)) => {
            return Err(Failure::internal(format!(
                "cannot create the link to the kernel lock's holder: {error}"
            )));
        }
        None => (None, None),
    };
    let fds = inherited
        .as_ref()
        .map(AsRawFd::as_raw_fd)
        .zip(link_end.as_ref().map(AsRawFd::as_raw_fd));
    // Both are the guard's now (inherited); ours close when this returns.
    Ok((spawn(plan, tokens, relay, fds)?, link))
}

/// The writing end of the parent link (see `hold.rs`): only this process holds it (it is
/// close-on-exec), so the kernel closes it when `lease` dies. Dropping it says `lease` ended on
/// its own terms: one byte, then end-of-file. A pipe on Linux, a FIFO in the relay's private
/// directory `dir` on the portable paths (`sys::link_pipe`).
struct ParentLink(std::fs::File);

impl ParentLink {
    /// The link, and its read end made inheritable for the guard, which hands it to the
    /// holder.
    fn new(dir: &std::path::Path) -> std::io::Result<(Self, std::os::fd::OwnedFd)> {
        let (writer, reader) = crate::sys::link_pipe(dir)?;
        let reader = inheritable(reader).ok_or_else(|| {
            std::io::Error::other("cannot clear close-on-exec on the parent link")
        })?;
        Ok((Self(writer), reader))
    }
}

impl Drop for ParentLink {
    fn drop(&mut self) {
        use std::io::Write;
        if let Err(error) = self.0.write_all(b"e") {
            tracing::debug!(%error, "the kernel lock's holder is gone already");
        }
    }
}

/// Who holds a lease, as far as a waiting message cares: owner, since, fencing token.
type HolderIdentity = (
    Option<String>,
    Option<std::time::SystemTime>,
    Option<lease_core::FencingToken>,
);

/// Acquires the lease and starts keeping it (renewals every third of the TTL, on this
/// runtime): one attempt with `--wait 0`, which fails naming the holder when the lease is busy
/// (and lets the store retry nothing), else waiting with visible progress.
async fn acquire(backend: &Backend, plan: &RunPlan) -> Result<LeaseGuard, Failure> {
    let mut options = AcquireOptions::default().with_owner(owner_description());
    if let Some(value) = &plan.value {
        options = options.with_value(value.clone());
    }
    let announced: Arc<Mutex<Option<HolderIdentity>>> = Arc::default();
    let seen = announced.clone();
    let waiting_for = fmt_duration(plan.wait);
    // Not called for a single attempt: only between attempts of a wait.
    let wait = WaitOptions::new(plan.wait)
        .with_backoff(Duration::from_millis(25), Duration::from_secs(1))
        .on_wait(move |event| {
            let Some(holder) = event.holder else {
                tracing::debug!(key = %event.key, error = %event.last_error, "acquire failed; retrying");
                return;
            };
            // Once per holder, not once per attempt or renewal.
            let identity = (
                holder.owner().map(str::to_owned),
                holder.acquired_at(),
                holder.fencing_token(),
            );
            let mut last = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.as_ref() != Some(&identity) {
                eprintln!(
                    "lease: waiting for lease {} held by {} (waiting up to {waiting_for})",
                    event.key,
                    describe_holder(holder)
                );
                *last = Some(identity);
            }
        });
    let builder = match &plan.counting {
        Some(counting) => counting.lease(backend.leases.clone(), plan.ttl),
        None => LeaseGuard::builder(backend.leases.clone(), &plan.key, plan.ttl),
    };
    let started = Instant::now();
    let guard = builder
        .with_wait(wait)
        .with_options(options)
        .acquire()
        .await
        .map_err(|error| acquire_failure(&plan.key, &error))?;
    let waited = announced
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some();
    if waited {
        eprintln!(
            "lease: acquired lease {} (fencing token {}) after {}",
            guard.key(),
            guard.fencing_token(),
            fmt_duration(started.elapsed())
        );
    }
    Ok(guard)
}

fn acquire_failure(key: &LeaseKey, error: &LeaseError) -> Failure {
    match error {
        LeaseError::Held { .. } => Failure::new(
            exit::HELD,
            format!(
                "lease {key} is held by {}",
                holder_or_unknown(error.holder())
            ),
        ),
        LeaseError::Timeout {
            waited, last_error, ..
        } if last_error.as_deref().is_none_or(LeaseError::is_held) => Failure::new(
            exit::HELD,
            format!(
                "gave up after {} waiting for lease {key} held by {}",
                fmt_duration(*waited),
                holder_or_unknown(error.holder())
            ),
        ),
        // No keeper could start (the lease is released): ours, not the store's.
        LeaseError::Runtime { .. } => Failure::internal(format!(
            "cannot acquire lease {}: {}",
            crate::backend::shown_key(key),
            exit::report(error)
        )),
        _ => crate::stores::failure(
            &format!("cannot acquire lease {}", crate::backend::shown_key(key)),
            error,
        ),
    }
}

fn holder_or_unknown(holder: Option<&Holder>) -> String {
    holder.map_or_else(|| "another owner".to_owned(), describe_holder)
}

/// `pid 4242 on host build-7 since T (until U, fencing token 9)`: a holder for people.
pub(crate) fn describe_holder(holder: &Holder) -> String {
    // Another process's text (a Go lock file's owner, another user's label): shown escaped.
    let mut text = crate::out::safe(holder.owner().unwrap_or("another owner")).into_owned();
    if let Some(value) = holder.value() {
        text.push_str(&format!(" (value {value:?})"));
    }
    if let Some(since) = holder.acquired_at() {
        text.push_str(&format!(" since {}", fmt_time(since)));
    }
    let mut details = Vec::new();
    if let Some(until) = holder.expires_at() {
        details.push(format!("until {}", fmt_time(until)));
    }
    if let Some(fencing) = holder.fencing_token() {
        details.push(format!("fencing token {fencing}"));
    }
    if !details.is_empty() {
        text.push_str(&format!(" ({})", details.join(", ")));
    }
    text
}

/// `fd` with close-on-exec cleared, so that the next child inherits it.
fn inheritable(fd: std::os::fd::OwnedFd) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    match fcntl(&fd, F_SETFD(FdFlag::empty())) {
        Ok(_) => Some(fd),
        Err(error) => {
            tracing::warn!(%error, "cannot pass the kernel lock to the command");
            None
        }
    }
}

/// Starts the command through the link step (see `guard.rs`): `lease guard` leading a new
/// process group, or `lease exec` in the foreground.
fn spawn(
    plan: &RunPlan,
    (fencing, slot): (u64, u32),
    relay: Option<&crate::relay::DeadlineRelay>,
    lock_fd_and_link: Option<(i32, i32)>,
) -> Result<Child, Failure> {
    let mut command = Command::new(&plan.link_program);
    command
        .arg(if plan.foreground { "exec" } else { "guard" })
        .arg("--parent")
        .arg(std::process::id().to_string());
    if plan.terminal {
        command.arg("--terminal");
    }
    if let Some(relay) = relay {
        let poll = check_interval(plan.ttl);
        // Half the slack: lease's own SIGKILL comes first when lease is running.
        let kill_before = kill_slack(plan.ttl) / 2;
        command
            .arg("--deadline-file")
            .arg(relay.path())
            .arg("--poll-ms")
            .arg(poll.as_millis().to_string())
            .arg("--kill-before-ms")
            .arg(kill_before.as_millis().to_string());
    }
    if let Some((lock, link)) = lock_fd_and_link {
        command
            .arg("--lock-fd")
            .arg(lock.to_string())
            .arg("--parent-link-fd")
            .arg(link.to_string());
    }
    command
        .arg("--")
        .args(&plan.command)
        .env(KEY_ENV, plan.key.to_string())
        .env(FENCING_ENV, fencing.to_string())
        .env(SLOT_ENV, slot.to_string())
        .kill_on_drop(false);
    if let Some(value) = &plan.value {
        command.env(VALUE_ENV, value);
    }
    if !plan.foreground {
        // Its own process group, so that stopping it on loss reaches everything it started.
        command.process_group(0);
    }
    command
        .spawn()
        .map_err(|error| start_failure(plan.link_program.as_os_str(), &error))
}

/// Where signals for the command go: its process group, or just the command.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: i32,
    group: bool,
}

impl Target {
    fn of(child: &Child, foreground: bool) -> Option<Self> {
        let pid = i32::try_from(child.id()?).ok()?;
        Some(Self {
            pid,
            group: !foreground,
        })
    }

    fn send(self, signal: Signal) {
        let pid = if self.group { -self.pid } else { self.pid };
        if let Err(error) = kill(Pid::from_raw(pid), signal) {
            tracing::debug!(pid, %signal, %error, "could not signal the command");
        }
    }

    /// What is stopped in the command's group (nothing in the foreground, where there is no
    /// group of its own): see [`crate::terminal::stopped_in`].
    fn stopped(self) -> crate::terminal::Stopped {
        if self.group {
            let leader = Pid::from_raw(self.pid);
            crate::terminal::stopped_in(leader, leader)
        } else {
            crate::terminal::Stopped::default()
        }
    }

    /// Whether any process of the command's group is still alive (always false in the
    /// foreground, where the group is `lease`'s own); see [`group_alive`].
    fn group_alive(self) -> bool {
        self.group && group_alive(self.pid)
    }
}

/// Whether any process of group `pgid` is still alive. Zombies waiting for a parent that does
/// not reap them (some container inits take seconds) count as gone: they run nothing. One
/// `kill(-pgid, 0)` when the group is gone; otherwise a listing of `/proc`, one `getpgid` per
/// process and one `/proc/PID/stat` read per member of the group. Alive when `/proc` cannot be
/// read.
///
/// On the portable paths (macOS, FreeBSD: no `/proc` there) `killpg(pgid, 0)` alone: alive
/// until it fails with `ESRCH`. A zombie member keeps the group "alive" until its parent reaps
/// it (the guard its command, init or a subreaper the orphans), which only delays the lock's
/// release and the end of the run, never lets anything of the group run on.
pub(crate) fn group_alive(pgid: i32) -> bool {
    let exists = nix::sys::signal::killpg(Pid::from_raw(pgid), None).is_ok();
    if crate::sys::LINUX_CALLS {
        exists && has_live_member(pgid, None).unwrap_or(true)
    } else {
        exists
    }
}

/// [`group_alive`], not counting process `spared` (one that can run nothing more: SIGKILL is
/// pending for it), and without the first `kill(-pgid, 0)`. On the portable paths no process
/// can be left out: [`group_alive`] (`spared` counts until it is reaped).
pub(crate) fn group_alive_besides(pgid: i32, spared: i32) -> bool {
    if crate::sys::LINUX_CALLS {
        has_live_member(pgid, Some(spared)).unwrap_or(true)
    } else {
        group_alive(pgid)
    }
}

/// Whether a process of group `pgid` that is not a zombie exists, from `/proc` (`None` if
/// unreadable). Stops at the first one found.
fn has_live_member(pgid: i32, spared: Option<i32>) -> Option<bool> {
    use std::io::Read;
    // `pid (comm) state ppid pgrp ...`: comm is at most 64 bytes (kernel threads' names
    // included), so the fields needed are within the first 256 bytes; one read gets them.
    let mut buffer = [0u8; 256];
    let live = std::fs::read_dir("/proc").ok()?.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return false;
        };
        if spared == Some(pid) {
            return false;
        }
        // One syscall tells the group; only members need their state read.
        if nix::unistd::getpgid(Some(Pid::from_raw(pid))) != Ok(Pid::from_raw(pgid)) {
            return false;
        }
        let Ok(mut file) = std::fs::File::open(entry.path().join("stat")) else {
            return false;
        };
        file.read(&mut buffer)
            .is_ok_and(|len| buffer.get(..len).is_some_and(|stat| live_in(stat, pgid)))
    });
    Some(live)
}

/// Whether a `/proc/PID/stat` line is a process of group `pgid` that is not a zombie. Bytes, not
/// text: a command may name itself with bytes that are not UTF-8 (`prctl(PR_SET_NAME)`), and
/// must not count as gone for it.
fn live_in(stat: &[u8], pgid: i32) -> bool {
    // comm may hold spaces and parentheses: the last `)` ends it.
    let Some(end) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    let mut fields = stat[end + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty());
    let (Some(state), Some(_ppid), Some(group)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let group = std::str::from_utf8(group).ok().and_then(|g| g.parse().ok());
    group == Some(pgid) && state != b"Z" && state != b"X"
}

/// Why `lease run` stops the command.
enum Stop {
    /// The keeper reports the lease lost or untrusted.
    Lost(LossReason),
    /// Renewals have failed for so long that waiting any longer would let SIGKILL land after
    /// the holder's deadline.
    Early { deadline_in: Duration },
    /// The terminal stopped the command, `lease` stopped with it (renewing nothing), and when
    /// continued the lease could no longer be trusted: the command is killed before it runs on.
    Suspended { signal: Signal, suspended: Duration },
    /// The terminal stopped the command for reading or writing it from the background, and
    /// nothing can continue `lease` (its process group is orphaned): it would never run again.
    Stalled { signal: Signal },
    /// The command stayed stopped (SIGSTOP, or a stop no job-control shell follows) for a
    /// whole TTL while `lease` ran: a stopped command does not keep its lease.
    StoppedTooLong { stopped: Duration },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lost(reason @ LossReason::NotOwned(_)) => write!(f, "lease lost: {reason}"),
            // Its source (the last renewal's error) says why.
            Self::Lost(reason) => write!(
                f,
                "lease can no longer be trusted: {}",
                exit::report(reason)
            ),
            Self::Early { deadline_in } => write!(
                f,
                "the lease could not be renewed and can be trusted for only {} more",
                fmt_duration(*deadline_in)
            ),
            Self::Suspended { signal, suspended } => write!(
                f,
                "the command was stopped by {signal} for {}, longer than the lease can be \
                 trusted without renewals",
                fmt_duration(*suspended)
            ),
            Self::Stalled { signal } => write!(
                f,
                "the command was stopped by {signal} (the terminal, used from the background) \
                 and nothing can continue it"
            ),
            Self::StoppedTooLong { stopped } => write!(
                f,
                "the command has been stopped for {}, as long as the lease's TTL: a stopped \
                 command does not keep its lease",
                fmt_duration(*stopped)
            ),
        }
    }
}

/// How long `lease`, continued after stopping its job with its command, waits for a signal that
/// came with the continue (a shell's `kill %N` sends SIGTERM, then SIGCONT) before it continues
/// the command: the signal is acted on first, so one `kill %N` ends a job whose command would
/// stop again at once (reading the terminal from the background).
const SIGNAL_WINDOW: Duration = Duration::from_millis(50);

/// Runs until the command exits or the lease is lost; returns lease's exit status.
async fn supervise(
    plan: &RunPlan,
    guard: LeaseGuard,
    mut child: Child,
    signals: &mut Signals,
    relay: Option<&crate::relay::DeadlineRelay>,
) -> Result<u8, Failure> {
    let target = Target::of(&child, plan.foreground);
    let check_every = check_interval(plan.ttl);
    // Stopping starts this long before the holder's deadline, so SIGKILL lands by it.
    let stop_window = plan.grace + check_every + kill_slack(plan.ttl);
    let mut check = tokio::time::interval(check_every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lost = guard.lost();
    tokio::pin!(lost);
    // Since when the command has been stopped while `lease` ran (see `Stop::StoppedTooLong`).
    let mut stopped_since: Option<Instant> = None;
    // A signal that ends a process was forwarded: the command has its grace, then SIGKILL.
    let mut ending: Option<Ending> = None;
    let reason = loop {
        tokio::select! {
            // A signal first: after a stop, it must not wait behind a check that stops again.
            biased;
            signal = signals.recv() => forward(plan, target, signal, &mut ending),
            status = child.wait() => {
                let status = status.map_err(|e| Failure::internal(format!("waiting for the command: {e}")))?;
                return finish(plan, guard, status, target, signals).await;
            }
            reason = &mut lost => break Stop::Lost(reason),
            _ = check.tick() => {
                if let Some(ending) = &mut ending {
                    ending.enforce(plan, target);
                } else if let Some(target) = target.filter(|t| t.group)
                    && let Err(stop) = follow_stops(
                        plan, &guard, target, signals, &mut ending, &mut stopped_since, stop_window,
                    )
                    .await
                {
                    break stop;
                }
                if let Some(relay) = relay {
                    relay.publish(guard.deadline());
                }
                if let Err(error) = guard.check() {
                    break Stop::Lost(loss_reason(error));
                }
                let deadline_in = guard.deadline().saturating_duration_since(crate::relay::mono_now());
                if deadline_in <= stop_window {
                    break Stop::Early { deadline_in };
                }
            }
        }
    };
    stop(plan, guard, child, target, signals, &reason).await
}

/// Follows the command's stops at a check (see `docs/correctness.md`), and gives the command's
/// group the terminal whenever `lease` has it. A stop for job control on
/// a terminal (the guard stopped by SIGTSTP, SIGTTIN or SIGTTOU) stops `lease`'s own job when a
/// job-control shell can continue it (see [`stop_own_job`]); once continued, a signal that came
/// with the continue is acted on first, then [`resume_after_terminal_stop`] decides. Any other
/// stop of the command (`stopped_since` says since when) is borne for one TTL, then the run
/// ends ([`Stop::StoppedTooLong`]).
async fn follow_stops(
    plan: &RunPlan,
    guard: &LeaseGuard,
    target: Target,
    signals: &mut Signals,
    ending: &mut Option<Ending>,
    stopped_since: &mut Option<Instant>,
    stop_window: Duration,
) -> Result<(), Stop> {
    if plan.terminal
        && let Some(signal) = crate::terminal::stopped_by_terminal(Pid::from_raw(target.pid))
    {
        let orphaned = crate::terminal::own_group_orphaned().unwrap_or(true);
        let stopped_at = Instant::now();
        if !orphaned {
            stop_own_job(plan, signal);
            // Continued: by `fg`, `bg`, or a shell's `kill %N`, whose signal comes with the
            // continue and is acted on first.
            tokio::select! {
                biased;
                signal = signals.recv() => {
                    forward(plan, Some(target), signal, ending);
                    if ending.is_some() {
                        return Ok(());
                    }
                }
                () = tokio::time::sleep(SIGNAL_WINDOW) => {}
            }
        }
        let suspended = stopped_at.elapsed();
        resume_after_terminal_stop(
            plan,
            guard,
            target,
            signal,
            stop_window,
            orphaned,
            suspended,
        )?;
        *stopped_since = None;
    } else if plan.terminal && crate::terminal::is_foreground(nix::unistd::getpgrp()) {
        // `fg` of a job started with `&` that was not stopped: the terminal is the command's.
        crate::terminal::give_foreground(Pid::from_raw(target.pid));
    }
    if !target.stopped().command {
        *stopped_since = None;
        return Ok(());
    }
    let since = *stopped_since.get_or_insert_with(Instant::now);
    if since.elapsed() >= plan.ttl {
        return Err(Stop::StoppedTooLong {
            stopped: since.elapsed(),
        });
    }
    Ok(())
}

/// A signal that ends a process by default and that someone sent to end the run (not SIGUSR1,
/// SIGUSR2 or SIGALRM, which programs use for their own purposes).
fn ends_the_run(signal: Signal) -> bool {
    matches!(
        signal,
        Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT
    )
}

/// The run is ending on a signal sent to `lease`: the command has its grace to exit.
struct Ending {
    signal: Signal,
    kill_at: Instant,
    killed: bool,
}

impl Ending {
    /// Keeps a stopped command going (it handles the signal only once continued), and SIGKILLs
    /// it once its grace is over.
    fn enforce(&mut self, plan: &RunPlan, target: Option<Target>) {
        let Some(target) = target else {
            return;
        };
        if self.killed {
            return;
        }
        if Instant::now() >= self.kill_at {
            eprintln!(
                "lease: {} still running {} after {}; sending SIGKILL",
                plan.program(),
                fmt_duration(plan.grace),
                self.signal
            );
            target.send(Signal::SIGKILL);
            self.killed = true;
        } else if target.group && target.stopped().any {
            target.send(Signal::SIGCONT);
        }
    }
}

/// Forwards `signal` to the command. One that ends a process (see [`ends_the_run`]) is followed
/// by SIGCONT if the command is stopped, as a shell's `kill` continues a stopped job it
/// terminates, and starts the grace after which the command is SIGKILLed: a signal to `lease`
/// ends the run within its grace, stopped command or not.
fn forward(plan: &RunPlan, target: Option<Target>, signal: Signal, ending: &mut Option<Ending>) {
    tracing::info!(%signal, "forwarding signal to the command");
    let Some(target) = target else {
        return;
    };
    target.send(signal);
    if !ends_the_run(signal) {
        return;
    }
    let stopped = if target.group {
        target.stopped().any
    } else {
        crate::terminal::stopped_by(Pid::from_raw(target.pid)).is_some()
    };
    if stopped {
        target.send(Signal::SIGCONT);
    }
    if ending.is_none() {
        tracing::info!(key = %plan.key, %signal, grace = ?plan.grace, "ending the run");
        *ending = Some(Ending {
            signal,
            kill_at: Instant::now() + plan.grace,
            killed: false,
        });
    }
}

/// Why a guard's [`check`](LeaseGuard::check) failed: the reason its [`LeaseError::Lost`]
/// carries (the only error `check` returns).
fn loss_reason(error: LeaseError) -> LossReason {
    match error {
        LeaseError::Lost { reason, .. } => reason,
        other => LossReason::BackendFailing(Arc::new(other)),
    }
}

/// The terminal stopped the command's group (Ctrl-Z, the terminal used from the background, or
/// the command stopping itself, which the guard extends to its group): a stopped command must
/// not keep the lease renewed. A job-control shell can continue `lease` (its group is not
/// orphaned), so `lease` stops its own group (the shell's job) with the same signal: the shell
/// shows the job stopped and renewals stop with it. Returns once `lease` is continued (`fg`,
/// `bg`, a shell's `kill %N`).
fn stop_own_job(plan: &RunPlan, signal: Signal) {
    tracing::info!(key = %plan.key, %signal, "the command was stopped; stopping lease's job with it");
    // SIGTTOU is blocked in every thread of `lease` (see terminal.rs), so it would stay
    // pending: SIGTSTP stops it as well.
    let own = if signal == Signal::SIGTTOU {
        Signal::SIGTSTP
    } else {
        signal
    };
    // The whole of `lease`'s own group: it is the shell's job (a script running `lease`
    // included), which the terminal would have stopped had the command been in it.
    if let Err(error) = nix::sys::signal::killpg(nix::unistd::getpgrp(), own) {
        tracing::debug!(%error, "cannot stop lease itself");
    }
}

/// After a terminal stop (see [`stop_own_job`]): continues the command (giving it the terminal
/// when `lease` has it now: `fg`) if the lease can still be trusted, or kills it where it
/// stands if not. When nothing can continue `lease` (`orphaned`), the kernel's rule for orphaned
/// groups applies: Ctrl-Z is ignored (the command is continued at once), and a command that
/// needs the terminal it cannot get is stopped.
fn resume_after_terminal_stop(
    plan: &RunPlan,
    guard: &LeaseGuard,
    target: Target,
    signal: Signal,
    stop_window: Duration,
    orphaned: bool,
    suspended: Duration,
) -> Result<(), Stop> {
    let command_group = Pid::from_raw(target.pid);
    let trusted = guard.check().is_ok()
        && guard
            .deadline()
            .saturating_duration_since(crate::relay::mono_now())
            > stop_window;
    if !trusted {
        target.send(Signal::SIGKILL);
        return Err(Stop::Suspended { signal, suspended });
    }
    let can_have_terminal = crate::terminal::is_foreground(nix::unistd::getpgrp())
        || crate::terminal::is_foreground(command_group);
    if can_have_terminal {
        crate::terminal::give_foreground(command_group);
    } else if orphaned && signal != Signal::SIGTSTP {
        return Err(Stop::Stalled { signal });
    }
    tracing::info!(key = %plan.key, "continuing the command");
    target.send(Signal::SIGCONT);
    Ok(())
}

/// The command exited on its own: stop what it left in its group, release, and report its
/// status.
async fn finish(
    plan: &RunPlan,
    guard: LeaseGuard,
    status: ExitStatus,
    target: Option<Target>,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let code = status_code(status);
    if let Some(target) = target.filter(|t| t.group_alive()) {
        stop_stragglers(plan, &guard, target, signals).await;
    }
    if let Err(error) = guard.check() {
        let reason = Stop::Lost(loss_reason(error));
        release(guard).await;
        return Err(Failure::new(
            exit::LOST,
            format!(
                "{} exited with status {code}, but lease {} was lost before it finished: {reason}",
                plan.program(),
                plan.key
            ),
        ));
    }
    release(guard).await;
    tracing::info!(key = %plan.key, code, "command finished");
    Ok(code)
}

/// Processes the command left in its group are stopped before the lease is released, so nothing
/// of the command runs once another holder can be granted the lease: SIGTERM, then SIGKILL
/// after the grace period (or by the holder's deadline, whichever comes first).
async fn stop_stragglers(
    plan: &RunPlan,
    guard: &LeaseGuard,
    target: Target,
    signals: &mut Signals,
) {
    eprintln!(
        "lease: {} exited but left processes in its group; stopping them before releasing \
         lease {}: SIGTERM now, SIGKILL after {}",
        plan.program(),
        plan.key,
        fmt_duration(plan.grace)
    );
    target.send(Signal::SIGTERM);
    let slack = kill_slack(plan.ttl);
    // On the deadline's clock, which counts time suspended (not std's `Instant::now`).
    let now = crate::relay::mono_now;
    let kill_at = (now() + plan.grace).min(guard.deadline().checked_sub(slack).unwrap_or_else(now));
    let mut poll = tokio::time::interval(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = poll.tick() => {
                if !target.group_alive() {
                    return;
                }
                if now() >= kill_at {
                    break;
                }
            }
            signal = signals.recv() => target.send(signal),
        }
    }
    target.send(Signal::SIGKILL);
    let gone_by = Instant::now() + Duration::from_secs(5);
    while target.group_alive() && Instant::now() < gone_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The lease is lost, or about to be: SIGTERM the command, SIGKILL it after the grace period,
/// exit LOST.
async fn stop(
    plan: &RunPlan,
    guard: LeaseGuard,
    mut child: Child,
    target: Option<Target>,
    signals: &mut Signals,
    reason: &Stop,
) -> Result<u8, Failure> {
    let program = plan.program();
    // A command suspended past the lease's trust was killed where it stood: no grace.
    let grace_period = if matches!(reason, Stop::Suspended { .. }) {
        Duration::ZERO
    } else {
        plan.grace
    };
    announce_stop(plan, reason, grace_period);
    let stopped_at = Instant::now();
    if let Some(target) = target {
        if grace_period.is_zero() {
            target.send(Signal::SIGKILL);
        } else {
            target.send(Signal::SIGTERM);
            // A stopped command handles SIGTERM only once continued.
            target.send(Signal::SIGCONT);
        }
    }
    let grace = tokio::time::sleep(grace_period);
    tokio::pin!(grace);
    let mut killed = grace_period.is_zero();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = &mut grace, if !killed => {
                eprintln!("lease: {program} still running after {}; sending SIGKILL", fmt_duration(grace_period));
                if let Some(target) = target {
                    target.send(Signal::SIGKILL);
                }
                if let Err(error) = child.start_kill() {
                    tracing::debug!(%error, "start_kill failed");
                }
                killed = true;
            }
            signal = signals.recv() => {
                if let Some(target) = target {
                    target.send(signal);
                }
            }
        }
    };
    // The command's stop is timed here, not after the release below.
    let stopped_after = stopped_at.elapsed();
    if let Some(target) = target.filter(|t| t.group) {
        // Stragglers in the group die with the leader: the lease that protected them is gone.
        target.send(Signal::SIGKILL);
    }
    release(guard).await;
    let how = match status {
        Ok(status) => format!("status {}", status_code(status)),
        Err(error) => format!("an unknown status ({error})"),
    };
    let what = match reason {
        Stop::Stalled { .. } => format!("{program} could not go on under lease {}", plan.key),
        Stop::StoppedTooLong { .. } => {
            format!(
                "{program} stayed stopped, and lease {} was given up",
                plan.key
            )
        }
        _ => format!("lease {} was lost while {program} ran", plan.key),
    };
    Err(Failure::new(
        exit::LOST,
        format!(
            "{what}; it was stopped after {} with {how}",
            fmt_duration(stopped_after)
        ),
    ))
}

/// Says on stderr (and in a trace) why and how the command is being stopped.
fn announce_stop(plan: &RunPlan, reason: &Stop, grace_period: Duration) {
    let program = plan.program();
    if grace_period.is_zero() {
        eprintln!("lease: {reason} (key {}); killing {program}", plan.key);
    } else {
        eprintln!(
            "lease: {reason} (key {}); stopping {program}: SIGTERM now, SIGKILL after {}",
            plan.key,
            fmt_duration(grace_period)
        );
    }
    tracing::warn!(key = %plan.key, %reason, "lease lost while the command ran; stopping it");
}

/// The longest `lease run` spends releasing its lease once the command has stopped: one attempt
/// against a store that does not answer. Past it the lease is left to expire on its own.
pub(crate) const RELEASE_BUDGET: Duration = Duration::from_secs(2);

async fn release(guard: LeaseGuard) {
    let key = guard.key().clone();
    let Ok(released) = tokio::time::timeout(RELEASE_BUDGET, guard.release()).await else {
        eprintln!(
            "lease: could not release lease {key} within {} (it will expire on its own)",
            fmt_duration(RELEASE_BUDGET)
        );
        return;
    };
    match released {
        Ok(()) => tracing::debug!(%key, "lease released"),
        Err(error) if error.is_not_owned() => {
            tracing::debug!(%key, %error, "lease was no longer ours to release");
        }
        Err(error) => {
            eprintln!(
                "lease: could not release lease {key} (it will expire on its own): {}",
                exit::report(&error)
            );
        }
    }
}

/// The signals `lease run` forwards to the command: those that end a process by default and
/// that someone sends on purpose (SIGPIPE is ignored by every Rust program already; SIGXCPU and
/// SIGXFSZ are limits of `lease` itself). Unhandled, each would end `lease` without releasing.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    user1: tokio::signal::unix::Signal,
    user2: tokio::signal::unix::Signal,
    alarm: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers. From here on these signals no longer kill `lease` itself.
    fn install() -> Result<Self, Failure> {
        let install = |kind: SignalKind| {
            signal(kind).map_err(|e| Failure::internal(format!("cannot handle signals: {e}")))
        };
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
            quit: install(SignalKind::quit())?,
            user1: install(SignalKind::user_defined1())?,
            user2: install(SignalKind::user_defined2())?,
            alarm: install(SignalKind::alarm())?,
        })
    }

    /// The next signal received. Cancel-safe.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.user1.recv() => Signal::SIGUSR1,
            _ = self.user2.recv() => Signal::SIGUSR2,
            _ = self.alarm.recv() => Signal::SIGALRM,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::{Lease, LeaseBackend, MemoryBackend};

    #[test]
    fn a_stat_line_tells_live_members_of_the_group() {
        assert!(live_in(b"4242 (sleep) S 4241 4240 4240 0 -1", 4240));
        assert!(
            !live_in(b"4242 (sleep) S 4241 4240 4240 0 -1", 4241),
            "another group"
        );
        assert!(
            !live_in(b"4242 (sleep) Z 4241 4240 4240 0 -1", 4240),
            "a zombie"
        );
        assert!(
            !live_in(b"4242 (sleep) X 4241 4240 4240 0 -1", 4240),
            "dead"
        );
        // comm may hold spaces, parentheses and bytes that are not UTF-8: a member still counts.
        assert!(live_in(b"4242 (a) b\xff) R 4241 4240 4240 0", 4240));
        assert!(live_in(b"4242 (\xff\xfe) S 1 4240 4240", 4240));
        assert!(!live_in(b"4242 (truncated", 4240));
    }

    #[test]
    fn the_running_test_is_a_live_member_of_its_own_group() {
        let own = nix::unistd::getpgrp().as_raw();
        assert!(group_alive(own));
        assert_eq!(has_live_member(own, None), Some(true));
        // A group that does not exist: no process of this test's group has that pid as group.
        assert!(!group_alive(i32::MAX));
    }

    /// A `sleep 30` leading a process group of its own, and that group's id.
    fn sleeping_group_leader() -> (std::process::Child, i32) {
        use std::os::unix::process::CommandExt;
        let leader = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let pgid = i32::try_from(leader.id()).expect("pid");
        (leader, pgid)
    }

    #[test]
    fn a_spared_process_does_not_keep_its_group_alive() {
        let (mut leader, pgid) = sleeping_group_leader();
        assert!(group_alive(pgid));
        // Without `/proc` no member can be left out: the spared leader counts.
        assert_eq!(
            group_alive_besides(pgid, pgid),
            !crate::sys::LINUX_CALLS,
            "only the spared leader is in it"
        );
        let _ = leader.kill();
        let _ = leader.wait();
    }

    /// A group's liveness as each path tells it: a live member keeps it alive; a zombie
    /// member does on the portable paths (`killpg(pgid, 0)` succeeds until it is reaped) and
    /// does not on Linux (its `/proc` state is `Z`); once reaped, the group is gone on both.
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    #[test]
    fn a_group_lives_until_its_last_member_is_reaped_by_killpg() {
        let (mut leader, pgid) = sleeping_group_leader();
        assert!(group_alive(pgid), "a live member");
        leader.kill().expect("kill");
        // Dead, not reaped: a zombie until `wait`.
        let zombie_by = Instant::now() + Duration::from_secs(5);
        while !crate::terminal::exited(Pid::from_raw(pgid)) {
            assert!(Instant::now() < zombie_by, "sleep did not die");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            group_alive(pgid),
            !crate::sys::LINUX_CALLS,
            "a zombie member counts only without /proc"
        );
        leader.wait().expect("reap");
        assert!(!group_alive(pgid), "reaped: gone");
    }

    fn memory() -> (Arc<MemoryBackend>, Backend) {
        let store = Arc::new(MemoryBackend::new());
        let backend = Backend {
            leases: store.clone(),
            all_keys: None,
            description: "memory store".to_owned(),
            kernel_lock: None,
        };
        (store, backend)
    }

    /// The store shows no holder of `key`: `lease run` released it.
    async fn assert_released(store: &MemoryBackend, key: &LeaseKey) {
        let record = store.inspect(key).await.expect("inspect").expect("record");
        assert!(record.holder().is_none(), "released: {record:?}");
    }

    /// An operator breaks the lease: release it with the holder's own token.
    async fn break_lease(store: &MemoryBackend, key: &LeaseKey) {
        let record = store.inspect(key).await.expect("inspect").expect("record");
        let token = record
            .holder()
            .and_then(Holder::token)
            .expect("held")
            .clone();
        store
            .release(key, &token, record.fencing_token().expect("a counter"))
            .await
            .expect("broken");
    }

    /// The `lease` binary beside this test binary (`target/debug/lease`; cargo builds it for
    /// the integration tests of the same run): the guard step is that binary started again.
    fn lease_binary() -> PathBuf {
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe
            .parent()
            .and_then(std::path::Path::parent)
            .expect("target dir");
        let lease = dir.join("lease");
        assert!(lease.exists(), "{} is built by cargo test", lease.display());
        lease
    }

    fn plan(key: &str, ttl_ms: u64, command: &[&str]) -> RunPlan {
        let ttl = Duration::from_millis(ttl_ms);
        RunPlan {
            key: LeaseKey::new(key).expect("key"),
            counting: None,
            ttl,
            wait: Duration::ZERO,
            grace: max_grace(ttl),
            foreground: false,
            terminal: false,
            command: command.iter().map(OsString::from).collect(),
            link_program: lease_binary(),
            value: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_command_sees_the_fencing_token_and_its_status_comes_back() {
        let (store, backend) = memory();
        let plan = plan(
            "env",
            2000,
            &[
                "sh",
                "-c",
                r#"test "$LEASE_KEY" = env && test "$LEASE_FENCING_TOKEN" = 1 && exit 7"#,
            ],
        );
        assert_eq!(run_plan(&backend, &plan).await.expect("ran"), 7);
        assert_released(&store, &plan.key).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_lease_is_refused_at_once_with_the_holder_named() {
        let (store, backend) = memory();
        let plan = plan("busy", 2000, &["true"]);
        let options = AcquireOptions::default().with_owner("pid 1 on host elsewhere");
        let _held = store
            .try_acquire(&plan.key, Duration::from_secs(30), &options)
            .await
            .expect("held");
        let failure = run_plan(&backend, &plan).await.expect_err("held");
        assert_eq!(failure.code, exit::HELD);
        assert!(
            failure.message.contains("pid 1 on host elsewhere"),
            "{failure}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_command_is_127_and_the_lease_is_released() {
        let (store, backend) = memory();
        let plan = plan("missing", 2000, &["/nonexistent/lease-test-command"]);
        // The guard step reports it on stderr and exits 127, which lease passes on.
        let code = run_plan(&backend, &plan).await.expect("ran the guard");
        assert_eq!(code, exit::NOT_FOUND);
        assert_released(&store, &plan.key).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_lease_stops_the_command() {
        let (store, backend) = memory();
        let plan = plan("lost", 600, &["sleep", "30"]);
        let key = plan.key.clone();
        let started = Instant::now();
        let running = tokio::spawn(async move { run_plan(&backend, &plan).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        break_lease(&store, &key).await;
        let failure = running.await.expect("joined").expect_err("lost");
        assert_eq!(failure.code, exit::LOST, "{failure}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
        let (store, backend) = memory();
        let mut plan = plan(
            "stubborn",
            3000,
            &["sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"],
        );
        plan.grace = Duration::from_millis(300);
        let key = plan.key.clone();
        let started = Instant::now();
        let running = tokio::spawn(async move { run_plan(&backend, &plan).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        break_lease(&store, &key).await;
        let failure = running.await.expect("joined").expect_err("lost");
        assert_eq!(failure.code, exit::LOST, "{failure}");
        assert!(failure.message.contains("status 137"), "{failure}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// What happens to renewals in [`Renewals`].
    #[derive(Debug, Clone, Copy)]
    enum RenewalFault {
        /// Every renewal fails as throttled.
        Fail,
        /// The store applies each renewal at once; its reply comes this late.
        Delay(Duration),
    }

    /// A memory store whose renewals suffer `RenewalFault`; everything else passes through.
    #[derive(Debug)]
    struct Renewals(Arc<MemoryBackend>, RenewalFault);

    impl Renewals {
        /// A `Backend` on such a store, as `lease run` opens one.
        fn backend(fault: RenewalFault) -> Backend {
            Backend {
                leases: Arc::new(Self(Arc::new(MemoryBackend::new()), fault)),
                all_keys: None,
                description: "faulty store".to_owned(),
                kernel_lock: None,
            }
        }
    }

    impl LeaseBackend for Renewals {
        fn name(&self) -> &'static str {
            "renewal-faults"
        }
        fn clock(&self) -> &dyn lease_core::Clock {
            self.0.clock()
        }
        fn try_acquire<'a>(
            &'a self,
            key: &'a LeaseKey,
            duration: Duration,
            options: &'a AcquireOptions,
        ) -> lease_core::BoxFuture<'a, Result<Lease, LeaseError>> {
            self.0.try_acquire(key, duration, options)
        }
        fn renew<'a>(
            &'a self,
            lease: &'a Lease,
            duration: Duration,
        ) -> lease_core::BoxFuture<'a, Result<Lease, LeaseError>> {
            Box::pin(async move {
                match self.1 {
                    RenewalFault::Fail => Err(LeaseError::backend(
                        "renewal-faults",
                        true,
                        "injected throttling",
                    )),
                    RenewalFault::Delay(delay) => {
                        let renewed = self.0.renew(lease, duration).await;
                        tokio::time::sleep(delay).await;
                        renewed
                    }
                }
            })
        }
        fn release<'a>(
            &'a self,
            key: &'a LeaseKey,
            token: &'a lease_core::LeaseToken,
            fencing: lease_core::FencingToken,
        ) -> lease_core::BoxFuture<'a, Result<(), LeaseError>> {
            self.0.release(key, token, fencing)
        }
        fn inspect<'a>(
            &'a self,
            key: &'a LeaseKey,
        ) -> lease_core::BoxFuture<'a, Result<Option<lease_core::LeaseRecord>, LeaseError>>
        {
            self.0.inspect(key)
        }
        fn delete<'a>(
            &'a self,
            key: &'a LeaseKey,
            holder: Option<&'a lease_core::LeaseToken>,
            fencing: Option<lease_core::FencingToken>,
        ) -> lease_core::BoxFuture<'a, Result<(), LeaseError>> {
            self.0.delete(key, holder, fencing)
        }
    }

    /// Issue 10: with renewals failing, a command that ignores SIGTERM is SIGKILLed *before*
    /// the holder's deadline (main waited for the deadline, then gave 10 s of grace: a 7 s
    /// overlap with the next holder by default).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failing_renewals_stop_the_command_before_the_deadline() {
        let backend = Renewals::backend(RenewalFault::Fail);
        let ttl = Duration::from_millis(3000);
        let plan = plan(
            "renewals-fail",
            3000,
            &["sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"],
        );
        assert_eq!(plan.grace, max_grace(ttl));
        let started = Instant::now();
        let failure = run_plan(&backend, &plan).await.expect_err("stopped");
        let took = started.elapsed();
        assert_eq!(failure.code, exit::LOST, "{failure}");
        assert!(failure.message.contains("status 137"), "{failure}");
        let deadline = ttl - default_safety_margin(ttl);
        assert!(
            took < deadline,
            "the command was stopped after {took:?}, past the deadline {deadline:?}"
        );
        // It was given the grace it was promised, less only the check interval.
        assert!(
            took > deadline
                - plan.grace
                - check_interval(ttl)
                - kill_slack(ttl)
                - Duration::from_millis(50),
            "{took:?}"
        );
    }

    /// Processes the command leaves in its group are stopped before the lease is released.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn processes_left_in_the_group_are_stopped_before_release() {
        let (store, backend) = memory();
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; exit 3", pid_file.display());
        let plan = plan("stragglers", 3000, &["sh", "-c", &script]);
        let started = Instant::now();
        assert_eq!(run_plan(&backend, &plan).await.expect("ran"), 3);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .expect("pid")
            .trim()
            .parse()
            .expect("pid");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X");
        assert!(
            !running,
            "the background process must be gone before the lease is released: {state}"
        );
        assert_released(&store, &plan.key).await;
    }

    /// The other side of stopping early: with the default grace, renewals that answer 700 ms
    /// late on a 3 s lease (well inside the tolerance the grace leaves) never stop the command.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_but_healthy_renewals_do_not_stop_the_command() {
        let backend = Renewals::backend(RenewalFault::Delay(Duration::from_millis(700)));
        let mut plan = plan("slow", 3000, &["sleep", "4"]);
        plan.grace = max_grace(plan.ttl) / 2;
        assert_eq!(run_plan(&backend, &plan).await.expect("ran to the end"), 0);
    }
}
