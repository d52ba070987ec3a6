//! A contender for the pause-injection tests (`tests/pauses.rs`): the test binary runs itself
//! again as the pauser ([`command`]), so the published package holds no pauser binary. Its
//! arguments:
//!
//! ```text
//! lease-file-pauser <face> <mode> <dir> <history> <run_ms> <stale_ms> <heartbeat_ms> <poll_ms>
//!     [start=<ms>] [hold=<ms>] [broken]
//! ```
//!
//! After waiting `start` ms, and until `run_ms` have passed: acquire one lock (one attempt every
//! `poll_ms`, jittered), hold it doing fenced work for a random while under twice the lease (or
//! `hold` ms), release it, rest a little. After a failed check the holder keeps checking (and
//! claiming nothing) for longer than a lease before it releases: a holder busy elsewhere notices
//! late, and its lease goes stale for someone to take over. Every event is appended to the
//! shared `history` file.
//!
//! `face` is `lock` (a [`FileLock`] at `<dir>/lock` with its heartbeat thread; fenced values in a
//! [`DirectoryStore`] at `<dir>/fenced`), `keeper` (a [`DirectoryStore`] at `<dir>/store`, each
//! lease kept by lease-core's [`LeaseGuard`] on its own thread) or `renew` (the same store, the
//! main loop renewing every `heartbeat_ms` itself). `mode` is `kernel` or `heartbeat-only`.
//! Leases last `stale_ms` (the `FileLock` stale threshold, the store lease duration).
//!
//! Fault points are configured by `FAILPOINTS` (read by `fail::FailScenario::setup`), e.g.
//! `lease-file/before-takeover=1*sleep(700)->2*off->1*sleep(700)`. Each configured point is
//! wrapped so that an evaluation that sleeps at least the configured time is also written to the
//! history as a `pause` event; the point's own actions (counts, probabilities, `->` chains) are
//! evaluated unchanged, by a shadow point.
//!
//! # History
//!
//! One line per event, written with one `write(2)` on an `O_APPEND` file (lines never
//! interleave): `pid key generation event start_ns end_ns value extra`, times on
//! `CLOCK_MONOTONIC`, which all processes of one host share; `extra` has no spaces.
//!
//! | event | start, end | value, extra |
//! |---|---|---|
//! | `acquired` | before the acquire call, after it returned | |
//! | `released`, `lost` | a trusted interval | `-`, what ended it |
//! | `check-failed` | the first failed check of a tenure | `-`, why |
//! | `lost-callback` | when the `FileLock` callback ran | `-`, the reason |
//! | `release-failed` | the release call | `-`, the error |
//! | `fenced-read` | the `fence_and_read` call | the value read (`none`) |
//! | `fenced-put-ok` | the `put_fenced` call | the value written, `f<fence>.p<pid>.w<n>` |
//! | `fenced-put-refused`, `fenced-read-refused` | the call | the value (or `-`), the error |
//! | `pause` | the pause | the fault point |
//!
//! # Trusted intervals
//!
//! Only what the library promised is claimed, and fenced work is only done after an Ok check:
//!
//! * `lock`: each run of Ok [`FileLockGuard::check`]s is an interval, from the acquisition (the first
//!   run) or the end of its first check (a later run: a heartbeat that landed late, nobody having
//!   taken over, makes the lease trusted again) to the *start* of its last check: never past a
//!   failed check or the lost callback, which comes after `check` fails.
//! * `keeper`, `renew`: from the acquisition to the deadline the holder was last told
//!   ([`Lease::deadline`], converted to `CLOCK_MONOTONIC` rounding down), the store's promise.
//!
//! Either ends before the release call starts. With `broken`, the process ignores every failed
//! check and claims its whole tenure until the release starts: the harness uses it to show that
//! the checker sees a real violation.

#[path = "../reexec/mod.rs"]
mod reexec;

use crate::raw::Raw as _;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lease_core::{
    AcquireOptions, BlockingLeaseGuard, FencedValues, Lease, LeaseBackend, LeaseGuard, LeaseKey,
    WaitOptions,
};
use lease_file::{DirectoryStore, FileLock, FileLockGuard, ModePreference};
use pollster::block_on;

static HISTORY: OnceLock<(File, String)> = OnceLock::new();

/// `CLOCK_MONOTONIC` in nanoseconds.
fn mono_ns() -> u64 {
    let now =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    u64::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000
        + u64::try_from(now.tv_nsec()).unwrap_or(0)
}

/// `at` on `CLOCK_MONOTONIC` (which `Instant` reads on Linux), never later than it really is.
fn instant_ns(at: Instant) -> u64 {
    let before = mono_ns();
    let now = Instant::now();
    match at.checked_duration_since(now) {
        Some(ahead) => before.saturating_add(u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX)),
        None => before.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX)),
    }
}

/// Appends one history line with a single `write(2)`.
fn log(generation: u64, event: &str, start: u64, end: u64, value: &str, extra: &str) {
    let Some((file, key)) = HISTORY.get() else {
        return;
    };
    let extra: String = extra
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .take(200)
        .collect();
    let extra = if extra.is_empty() {
        "-".to_owned()
    } else {
        extra
    };
    let line = format!(
        "{} {key} {generation} {event} {start} {end} {value} {extra}\n",
        std::process::id()
    );
    match (&*file).write(line.as_bytes()) {
        Ok(n) if n == line.len() => {}
        other => {
            eprintln!("lease-file-pauser: history write failed: {other:?}");
            std::process::exit(2);
        }
    }
}

/// A small xorshift for jitter, seeded from a random UUID.
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        Self(uuid::Uuid::new_v4().as_u64_pair().0 | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 { 0 } else { self.0 % n }
    }
}

/// Wraps every configured `lease-file/...` fault point: its actions move to a shadow point that
/// the wrapper evaluates, timing it, and a sleep as long as the configured one is logged.
fn observe_fault_points() {
    for (name, actions) in fail::list() {
        if !name.starts_with("lease-file/") {
            continue;
        }
        let sleep_ms = actions
            .split("sleep(")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|ms| ms.parse::<u64>().ok());
        let shadow = format!("pauser-shadow/{name}");
        fail::cfg(shadow.clone(), &actions).expect("the actions FAILPOINTS gave");
        let point = name.clone();
        fail::cfg_callback(name, move || {
            let start = mono_ns();
            fail::fail_point!(shadow.as_str());
            let end = mono_ns();
            if sleep_ms.is_some_and(|ms| end - start >= ms * 1_000_000) {
                log(0, "pause", start, end, &point, "-");
            }
        })
        .expect("wrap the fault point");
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaceKind {
    Lock,
    Keeper,
    Renew,
}

struct Config {
    face: FaceKind,
    mode: ModePreference,
    dir: PathBuf,
    run: Duration,
    stale: Duration,
    heartbeat: Duration,
    poll: Duration,
    /// Wait this long before the first attempt.
    start: Duration,
    hold: Option<Duration>,
    broken: bool,
}

/// What one holder face does; the loop in [`contend`] is shared.
trait Face {
    /// One attempt: `Ok(Some(generation))` when acquired, `Ok(None)` when busy.
    fn try_acquire(&mut self) -> Result<Option<u64>, String>;
    /// Whether the tenure may still be trusted now (the store faces renew here when due).
    fn check(&mut self) -> Result<(), String>;
    /// The trust deadline the holder was told, in `CLOCK_MONOTONIC` ns (store faces).
    fn told_deadline(&self) -> Option<u64>;
    /// Ends the tenure (released or not).
    fn release(&mut self) -> Result<(), String>;
}

struct LockFace {
    lock: FileLock,
    guard: Option<FileLockGuard>,
}

impl Face for LockFace {
    fn try_acquire(&mut self) -> Result<Option<u64>, String> {
        match self.lock.try_acquire() {
            Ok(guard) => {
                let fencing = guard.fencing_token().get();
                self.guard = Some(guard);
                Ok(Some(fencing))
            }
            Err(e) if e.is_held() || e.is_transient() => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn check(&mut self) -> Result<(), String> {
        match &self.guard {
            Some(guard) => guard.check().map(drop).map_err(|e| e.to_string()),
            None => Err("no tenure".into()),
        }
    }

    fn told_deadline(&self) -> Option<u64> {
        None
    }

    fn release(&mut self) -> Result<(), String> {
        match self.guard.take() {
            Some(guard) => guard.release().map_err(|e| e.to_string()),
            None => Err("no tenure".into()),
        }
    }
}

struct StoreFace {
    store: Arc<DirectoryStore>,
    key: LeaseKey,
    duration: Duration,
    renew_every: Duration,
    keeper: bool,
    /// The explicit face's lease and when it was last renewed.
    lease: Option<(Lease, Instant)>,
    guard: Option<BlockingLeaseGuard>,
}

impl StoreFace {
    fn lease_deadline(&self) -> Option<Instant> {
        match (&self.guard, &self.lease) {
            (Some(guard), _) => Some(guard.deadline()),
            (None, Some((lease, _))) => Some(lease.deadline()),
            (None, None) => None,
        }
    }
}

impl Face for StoreFace {
    fn try_acquire(&mut self) -> Result<Option<u64>, String> {
        if self.keeper {
            // Kept by lease-core's keeper: one attempt (a zero wait), then renewed on a thread of
            // its own.
            let backend: Arc<dyn LeaseBackend> = self.store.clone();
            let guard = LeaseGuard::builder(backend, &self.key, self.duration)
                .with_wait(WaitOptions::new(Duration::ZERO))
                .with_renew_every(self.renew_every)
                .acquire_blocking();
            return match guard {
                Ok(guard) => {
                    let generation = guard.fencing_token().get();
                    self.guard = Some(guard);
                    Ok(Some(generation))
                }
                Err(e) if e.is_held() || e.is_transient() => Ok(None),
                Err(e) => Err(e.to_string()),
            };
        }
        let options = AcquireOptions::default();
        match block_on(self.store.try_acquire(&self.key, self.duration, &options)) {
            Ok(lease) => {
                let generation = lease.fencing_token().get();
                self.lease = Some((lease, Instant::now()));
                Ok(Some(generation))
            }
            Err(e) if e.is_held() || e.is_transient() => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn check(&mut self) -> Result<(), String> {
        if let Some(guard) = &self.guard {
            return guard.check().map(drop).map_err(|e| e.to_string());
        }
        let Some((lease, renewed)) = self.lease.as_mut() else {
            return Err("no lease".into());
        };
        if renewed.elapsed() >= self.renew_every
            && self.store.clock().monotonic() < lease.deadline()
        {
            // The explicit face: a renewal paused here stops the whole holder.
            match block_on(self.store.renew(lease, self.duration)) {
                Ok(next) => *lease = next,
                Err(e) => return Err(e.to_string()),
            }
            *renewed = Instant::now();
        }
        if self.store.clock().monotonic() < lease.deadline() {
            Ok(())
        } else {
            Err("deadline passed".into())
        }
    }

    fn told_deadline(&self) -> Option<u64> {
        self.lease_deadline().map(instant_ns)
    }

    fn release(&mut self) -> Result<(), String> {
        if let Some(guard) = self.guard.take() {
            return guard.release().map_err(|e| e.to_string());
        }
        match self.lease.take() {
            Some((lease, _)) => {
                block_on(self.store.release_lease(&lease)).map_err(|e| e.to_string())
            }
            None => Ok(()),
        }
    }
}

/// Fenced work on one resource with a tenure's fencing token.
struct Fenced {
    store: DirectoryStore,
    name: LeaseKey,
    writes: u64,
}

impl Fenced {
    fn read(&self, generation: u64) {
        let start = mono_ns();
        let got = block_on(
            self.store
                .fence_and_read(&self.name, lease_core::backend::fencing_token(generation)),
        );
        let end = mono_ns();
        match got {
            Ok(value) => {
                let value = value.map_or_else(
                    || "none".to_owned(),
                    |v| String::from_utf8_lossy(&v).into_owned(),
                );
                log(generation, "fenced-read", start, end, &value, "-");
            }
            Err(e) => log(
                generation,
                "fenced-read-refused",
                start,
                end,
                "-",
                &e.to_string(),
            ),
        }
    }

    fn put(&mut self, generation: u64) {
        self.writes += 1;
        let value = format!("f{generation}.p{}.w{}", std::process::id(), self.writes);
        let start = mono_ns();
        let put = block_on(self.store.put_fenced(
            &self.name,
            lease_core::backend::fencing_token(generation),
            value.as_bytes(),
        ));
        let end = mono_ns();
        match put {
            Ok(()) => log(generation, "fenced-put-ok", start, end, &value, "-"),
            Err(e) => log(
                generation,
                "fenced-put-refused",
                start,
                end,
                &value,
                &e.to_string(),
            ),
        }
    }
}

/// What a holder has proven of its trust: runs of Ok checks, each a trusted interval.
struct Trust {
    generation: u64,
    /// When the acquire call returned: the first run starts there.
    acquired: u64,
    checked: bool,
    /// The start of the current run of Ok checks.
    run: Option<u64>,
    /// The time taken just before the run's last Ok check.
    last_ok: u64,
    /// The first failed check: when, and why.
    failed: Option<(u64, String)>,
    /// Log the runs as the trusted intervals (the `lock` face, not broken).
    log_runs: bool,
}

impl Trust {
    fn new(generation: u64, acquired: u64, log_runs: bool) -> Self {
        Self {
            log_runs,
            generation,
            acquired,
            checked: false,
            run: None,
            last_ok: acquired,
            failed: None,
        }
    }

    /// Checks, with the time just before (`pre`) and just after. A check that is Ok proves trust
    /// at some instant inside the call: a run starts after its first Ok check (the first run at
    /// the acquisition) and ends before its last.
    fn check(&mut self, face: &mut dyn Face) -> bool {
        let pre = mono_ns();
        let result = face.check();
        let post = mono_ns();
        let first = !std::mem::replace(&mut self.checked, true);
        match result {
            Ok(()) => {
                if self.run.is_none() {
                    self.run = Some(if first { self.acquired } else { post });
                }
                self.last_ok = pre;
                true
            }
            Err(why) => {
                self.end("lost", &why);
                if self.failed.is_none() {
                    log(self.generation, "check-failed", pre, post, "-", &why);
                    self.failed = Some((pre, why));
                }
                false
            }
        }
    }

    /// Ends the current run, if any, logging it as a trusted interval.
    fn end(&mut self, event: &str, why: &str) {
        if let Some(start) = self.run.take()
            && self.log_runs
        {
            log(self.generation, event, start, self.last_ok, "-", why);
        }
    }
}

/// The contention loop shared by every face.
fn contend(config: &Config, face: &mut dyn Face, fenced: &mut Fenced) -> Result<(), String> {
    std::thread::sleep(config.start);
    let started = Instant::now();
    let mut jitter = Jitter::new();
    let mut tenures = 0;
    let stale_ms = u64::try_from(config.stale.as_millis()).unwrap_or(u64::MAX);
    while started.elapsed() < config.run && tenures < 200 {
        let t_call = mono_ns();
        let attempt = face.try_acquire()?;
        let t_ret = mono_ns();
        let Some(generation) = attempt else {
            let poll = u64::try_from(config.poll.as_micros()).unwrap_or(u64::MAX);
            std::thread::sleep(Duration::from_micros(poll / 2 + jitter.below(poll)));
            continue;
        };
        tenures += 1;
        log(generation, "acquired", t_call, t_ret, "-", "-");
        hold_tenure(config, face, fenced, &mut jitter, generation, t_ret);
        // Rest before contending again, so that every process gets tenures.
        std::thread::sleep(Duration::from_millis(jitter.below(stale_ms / 2)));
    }
    Ok(())
}

/// Holds one tenure won at `t_ret`: checks, raises the fence and writes until the hold is over,
/// then logs the trusted interval and releases.
fn hold_tenure(
    config: &Config,
    face: &mut dyn Face,
    fenced: &mut Fenced,
    jitter: &mut Jitter,
    generation: u64,
    t_ret: u64,
) {
    let stale_ms = u64::try_from(config.stale.as_millis()).unwrap_or(u64::MAX);
    let hold = match config.hold {
        Some(hold) => hold,
        None => Duration::from_millis(jitter.below(2 * stale_ms)),
    };
    // After a failed check, keep checking for longer than a lease before releasing: a holder
    // busy elsewhere notices late, and the lease goes stale for someone to take over (a
    // keeper renews through a paused release, and a prompt release frees a lease before it
    // can go stale). A check that is Ok again (a heartbeat that landed late, nobody having
    // taken over) is trusted again.
    let linger = config.stale + Duration::from_millis(jitter.below(stale_ms));
    let held_since = Instant::now();
    let runs = face.told_deadline().is_none() && !config.broken;
    let mut trust = Trust::new(generation, t_ret, runs);
    let mut raised = false;
    loop {
        let ok = trust.check(face);
        let failed_since = trust.failed.as_ref().map(|f| f.0);
        let lingered = failed_since.is_none_or(|at| mono_ns() - at >= nanos(linger));
        if held_since.elapsed() >= hold && (config.broken || lingered) {
            break;
        }
        if ok || config.broken {
            if !raised {
                // Raise the fence first (`before-fence`), then write (`before-put`).
                fenced.read(generation);
                raised = true;
            }
            fenced.put(generation);
            fenced.read(generation);
            trust.check(face);
        }
        std::thread::sleep(Duration::from_millis(2 + jitter.below(8)));
    }
    let release_start = mono_ns();
    let why = trust
        .failed
        .as_ref()
        .map_or("-", |f| f.1.as_str())
        .to_owned();
    let event = if trust.failed.is_some() {
        "lost"
    } else {
        "released"
    };
    if config.broken {
        // Claims the whole tenure, whatever its checks said.
        log(generation, event, t_ret, release_start, "-", &why);
    } else if let Some(told) = face.told_deadline() {
        // The store faces: the deadline the holder was told is the promise.
        log(generation, event, t_ret, told.min(release_start), "-", &why);
    } else {
        trust.end("released", "-");
    }
    if let Err(e) = face.release()
        && trust.failed.is_none()
    {
        log(
            generation,
            "release-failed",
            release_start,
            mono_ns(),
            "-",
            &e,
        );
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, String> {
    args.get(i)
        .ok_or_else(|| format!("missing {what}"))?
        .parse()
        .map_err(|_| format!("bad {what}"))
}

/// A trailing `name=<ms>` argument.
fn option(args: &[String], name: &str) -> Result<Option<u64>, String> {
    args.iter()
        .skip(9)
        .find_map(|a| a.strip_prefix(name))
        .map(|ms| ms.parse().map_err(|_| format!("bad {name}")))
        .transpose()
}

/// The configuration from the command line.
fn parse_config(args: &[String]) -> Result<Config, String> {
    let ms = |i, what| arg::<u64>(args, i, what).map(Duration::from_millis);
    Ok(Config {
        face: match args.get(1).map(String::as_str) {
            Some("lock") => FaceKind::Lock,
            Some("keeper") => FaceKind::Keeper,
            Some("renew") => FaceKind::Renew,
            other => return Err(format!("unknown face {other:?}")),
        },
        mode: match args.get(2).map(String::as_str) {
            Some("kernel") => ModePreference::Kernel,
            Some("heartbeat-only") => ModePreference::HeartbeatOnly,
            other => return Err(format!("unknown mode {other:?}")),
        },
        dir: arg(args, 3, "dir")?,
        run: ms(5, "run_ms")?,
        stale: ms(6, "stale_ms")?,
        heartbeat: ms(7, "heartbeat_ms")?,
        poll: ms(8, "poll_ms")?,
        start: Duration::from_millis(option(args, "start=")?.unwrap_or(0)),
        hold: option(args, "hold=")?.map(Duration::from_millis),
        broken: args.iter().skip(9).any(|a| a == "broken"),
    })
}

fn run(args: &[String]) -> Result<(), String> {
    let config = parse_config(args)?;
    let history: PathBuf = arg(args, 4, "history")?;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&history)
        .map_err(|e| format!("{}: {e}", history.display()))?;
    let key = match config.face {
        FaceKind::Lock => "lock",
        FaceKind::Keeper | FaceKind::Renew => "store",
    };
    let _ = HISTORY.set((file, key.to_owned()));
    let scenario = fail::FailScenario::setup();
    observe_fault_points();
    let fenced_dir = |sub: &str| -> Result<DirectoryStore, String> {
        DirectoryStore::builder(config.dir.join(sub))
            .with_mode(config.mode)
            .build()
            .map_err(|e| e.to_string())
    };
    let name = LeaseKey::new("resource").map_err(|e| e.to_string())?;
    let result = match config.face {
        FaceKind::Lock => {
            let lock = FileLock::builder(config.dir.join("lock"))
                .on_lost(|reason| {
                    let now = mono_ns();
                    log(0, "lost-callback", now, now, "-", &reason.to_string());
                })
                .with_mode(config.mode)
                .with_stale_threshold(config.stale)
                .with_heartbeat_interval(config.heartbeat)
                .with_label(format!("pauser {}", std::process::id()))
                .build()
                .map_err(|e| e.to_string())?;
            let mut fenced = Fenced {
                store: fenced_dir("fenced")?,
                name,
                writes: 0,
            };
            contend(&config, &mut LockFace { lock, guard: None }, &mut fenced)
        }
        FaceKind::Keeper | FaceKind::Renew => {
            let store = fenced_dir("store")?;
            let mut fenced = Fenced {
                store: store.clone(),
                name,
                writes: 0,
            };
            let mut face = StoreFace {
                store: Arc::new(store),
                key: LeaseKey::new("pause").map_err(|e| e.to_string())?,
                duration: config.stale,
                renew_every: config.heartbeat,
                keeper: config.face == FaceKind::Keeper,
                lease: None,
                guard: None,
            };
            contend(&config, &mut face, &mut fenced)
        }
    };
    scenario.teardown();
    result
}

/// Carries the arguments of a re-run of the test binary as a pauser, separated by U+001F.
const ARGS_ENV: &str = "LEASE_FILE_PAUSER_ARGS";

/// A command that runs this test binary again as a pauser with `args`: only the test
/// `pauser_process` runs in it, and it turns into the pauser ([`run_if_asked`]).
pub(crate) fn command<S: AsRef<str>>(args: &[S]) -> Command {
    reexec::command("pauser_process", ARGS_ENV, args)
}

/// In a process started by [`command`], runs the pauser and exits with its status; elsewhere
/// returns at once.
pub(crate) fn run_if_asked() {
    let Some(args) = reexec::args_if_asked(ARGS_ENV, "lease-file-pauser") else {
        return;
    };
    reexec::exit_with("lease-file-pauser", run(&args));
}
