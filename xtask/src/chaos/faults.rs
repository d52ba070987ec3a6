//! The seeded fault schedule of a chaos run, and how each fault is done.
//!
//! Faults are drawn from a *bag* holding every kind enabled for the run once: it is shuffled,
//! emptied one fault at a time, and refilled, so every kind fires about as often as every other
//! however short the run. The pauses between faults are drawn too, so a seed names the schedule.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::proxy::{Fault, Proxy};
use super::rng::Rng;
use super::slots::{DYNAMO_SKEW, Role, Slot};
use super::{Backend, mono_ns, wall_ms};
use crate::dynamo_local::Server;
use lease_testservers::{PgCluster, RedisServer, Reply, StopMode};

/// Every kind of fault, as `docs/chaos.md` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// SIGKILL of any process of the backend, `lease` itself included.
    SigKill,
    /// SIGSTOP for longer than the target's lease, then SIGCONT.
    SigStop,
    /// SIGSTOP of the command a `lease run` runs (not `lease` itself) for longer than the
    /// lease, then SIGCONT: `lease` must keep its promise that the command never runs
    /// unprotected, whatever its policy for a stopped command.
    CommandStop,
    /// Proxy: requests held back before they are forwarded.
    Delay,
    /// Proxy: connection closed without forwarding the request.
    Drop,
    /// Proxy: connection reset without forwarding the request.
    Reset,
    /// Proxy: request swallowed, no answer, connection left open.
    Blackhole,
    /// Proxy: request applied, its reply thrown away, connection closed.
    LostReply,
    /// Proxy: answered with DynamoDB's throttling error, not forwarded.
    Throttle,
    /// DynamoDB Local killed with SIGKILL and started again (on-disk database kept); PostgreSQL
    /// stopped (fast or immediate shutdown) and started again after an outage; Redis stopped
    /// (`SIGTERM`, its append-only file written) and started again from it after an outage: a
    /// new incarnation, whose recreation grace every Redis actor waits out.
    StoreRestart,
    /// PostgreSQL: 1 to 4 client connections ended by `pg_terminate_backend`, as an operator
    /// or an idle-session timeout does.
    TerminateBackend,
    /// Redis: 1 to 4 client connections ended by `CLIENT KILL ID`, as an operator does.
    ClientKill,
    /// Redis: `SCRIPT FLUSH`, the server's script cache emptied under its clients (their next
    /// `EVALSHA` answers `NOSCRIPT`).
    ScriptFlush,
    /// The `chaos-restored` table deleted, created again and filled with the items of a scan
    /// 3 to 12 s old, as a backup or point-in-time restore does (by the `restorer` slot).
    TableRestore,
    /// One process's wall clock stepped through its injected clock.
    ClockStep,
    /// A file of a lock directory that is not its state or value entry deleted.
    FileDelete,
    /// Garbage planted in a lock or store directory (removed again a few seconds later).
    FileGarbage,
}

impl Kind {
    /// The name in fault lines and reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::SigKill => "sigkill",
            Self::SigStop => "sigstop",
            Self::CommandStop => "command-stop",
            Self::Delay => "delay",
            Self::Drop => "drop",
            Self::Reset => "reset",
            Self::Blackhole => "blackhole",
            Self::LostReply => "lost-reply",
            Self::Throttle => "throttle",
            Self::StoreRestart => "store-restart",
            Self::TerminateBackend => "terminate-backend",
            Self::ClientKill => "client-kill",
            Self::ScriptFlush => "script-flush",
            Self::TableRestore => "table-restore",
            Self::ClockStep => "clock-step",
            Self::FileDelete => "file-delete",
            Self::FileGarbage => "file-garbage",
        }
    }

    /// The kinds that apply to `backend`.
    pub(crate) fn for_backend(backend: Backend) -> &'static [Kind] {
        match backend {
            Backend::File => &[
                Self::SigKill,
                Self::SigStop,
                Self::CommandStop,
                Self::ClockStep,
                Self::FileDelete,
                Self::FileGarbage,
            ],
            Backend::Dynamo => &[
                Self::SigKill,
                Self::SigStop,
                Self::CommandStop,
                Self::ClockStep,
                Self::Delay,
                Self::Drop,
                Self::Reset,
                Self::Blackhole,
                Self::LostReply,
                Self::Throttle,
                Self::StoreRestart,
                Self::TableRestore,
            ],
            // No clock step: PostgreSQL judges expiry by the server's clock alone, and the
            // actors' wall clocks are never read (a clock given to `PgLeases::with_clock` moves
            // the server's time: the crate's test hook). No throttle: PostgreSQL has no such
            // answer.
            Backend::Postgres => &[
                Self::SigKill,
                Self::SigStop,
                Self::CommandStop,
                Self::Delay,
                Self::Drop,
                Self::Reset,
                Self::Blackhole,
                Self::LostReply,
                Self::StoreRestart,
                Self::TerminateBackend,
            ],
            // As PostgreSQL: the server's clock (`TIME` in the scripts) judges expiry, and
            // Redis has no throttling answer. A restart keeps the data set (an append-only
            // file, written by the `SIGTERM`): one that lost it would lose fenced values and
            // checkpoints, which the checker holds to never going back and no grace brings back.
            Backend::Redis => &[
                Self::SigKill,
                Self::SigStop,
                Self::CommandStop,
                Self::Delay,
                Self::Drop,
                Self::Reset,
                Self::Blackhole,
                Self::LostReply,
                Self::StoreRestart,
                Self::ClientKill,
                Self::ScriptFlush,
            ],
        }
    }
}

/// The fault-free start of a run: every slot's first process starts and gets going (a debug
/// binary linking the AWS SDK starts in seconds on a loaded machine).
const WARM_UP: Duration = Duration::from_secs(5);

/// How long DynamoDB Local stays up between two `store-restart`s. A restart is an outage of
/// several seconds, longer on a loaded machine; drawn back to back (about every 12 s in a
/// one-minute run), they left the store down most of the minute, and a run under a load
/// average of 13 to 17 failed 2 times in 6 with "surfaces that did nothing: fleet-dynamo"
/// (seed 277599): workers that never got the store long enough to gain a unit. A restart drawn
/// sooner is tried again half a second later, then counted as skipped.
const STORE_UP_BEFORE_RESTART: Duration = Duration::from_secs(15);

/// How long PostgreSQL stays down in a `store-restart`, at most (drawn from 0.2 s): stopped
/// under its holders for up to a lease (3 s), so that some holders' deadlines pass while it is
/// down and some renewals succeed after it is back.
const PG_DOWN_MAX_MS: u64 = 3000;

/// How long Redis stays down in a `store-restart`, at most (drawn from 0.2 s), as PostgreSQL.
const REDIS_DOWN_MAX_MS: u64 = 3000;

/// A store's restarts: whether one is under way, and since when the store is up.
#[derive(Debug, Clone)]
struct Restarts {
    restarting: Arc<AtomicBool>,
    up_since: Arc<Mutex<Instant>>,
}

impl Restarts {
    fn new() -> Self {
        Self {
            restarting: Arc::new(AtomicBool::new(false)),
            up_since: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// Runs `restart` on a thread of its own, unless the store has been up for less than
    /// [`STORE_UP_BEFORE_RESTART`] or a restart is under way; returns whether it started.
    fn start(&self, restart: impl FnOnce() + Send + 'static) -> bool {
        let up_since = *self.up_since.lock().unwrap_or_else(PoisonError::into_inner);
        if up_since.elapsed() < STORE_UP_BEFORE_RESTART
            || self.restarting.swap(true, Ordering::SeqCst)
        {
            return false;
        }
        let (restarting, up) = (self.restarting.clone(), self.up_since.clone());
        std::thread::spawn(move || {
            restart();
            *up.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
            restarting.store(false, Ordering::SeqCst);
        });
        true
    }

    fn under_way(&self) -> bool {
        self.restarting.load(Ordering::SeqCst)
    }
}

/// What faults act on.
#[derive(Debug)]
pub(crate) struct Targets<'a> {
    /// Every slot of the run.
    pub(crate) slots: &'a mut [Slot],
    /// The proxy in front of DynamoDB Local, if DynamoDB is in the run.
    pub(crate) proxy: Option<&'a Proxy>,
    /// DynamoDB Local, if in the run.
    pub(crate) store: Option<&'a Arc<Mutex<Server>>>,
    /// The proxy in front of PostgreSQL, if PostgreSQL is in the run.
    pub(crate) pg_proxy: Option<&'a Proxy>,
    /// The run's PostgreSQL cluster, if in the run.
    pub(crate) pg: Option<&'a Arc<Mutex<PgCluster>>>,
    /// The proxy in front of Redis, if Redis is in the run.
    pub(crate) redis_proxy: Option<&'a Proxy>,
    /// The run's Redis server, if in the run.
    pub(crate) redis: Option<&'a Arc<Mutex<RedisServer>>>,
    /// The run directory.
    pub(crate) run: &'a Path,
}

/// The schedule, the fault log, and the faults still to be undone.
#[derive(Debug)]
pub(crate) struct Faults {
    rng: Rng,
    kinds: Vec<(Backend, Kind)>,
    bag: Vec<(Backend, Kind)>,
    /// A fault drawn when it had no target, to be tried once more.
    retry: Option<(Backend, Kind)>,
    next_at: Instant,
    /// Mean pause between two faults.
    every: Duration,
    log: File,
    /// Planted garbage, removed at the instant given.
    planted: Vec<(Instant, PathBuf)>,
    /// How many table restores were asked for.
    restores: u64,
    /// Commands of `lease run` stopped by [`Kind::CommandStop`], continued at the instant given.
    stopped_commands: Vec<(Instant, Pid)>,
    /// The slot whose clock is stepped, per backend (at most one at a time, so that every
    /// step's size is also the largest disagreement between two processes).
    stepped: Vec<(Backend, PathBuf)>,
    /// DynamoDB Local's restarts.
    dynamo_restarts: Restarts,
    /// PostgreSQL's restarts.
    pg_restarts: Restarts,
    /// Redis's restarts.
    redis_restarts: Restarts,
    /// How many faults of each kind were done, per backend.
    pub(crate) done: std::collections::BTreeMap<(Backend, Kind), u64>,
    /// How many could not be done when drawn (no target at that moment), per kind.
    pub(crate) skipped: std::collections::BTreeMap<(Backend, Kind), u64>,
    /// Clock steps beyond the DynamoDB skew allowance.
    pub(crate) steps_beyond: u64,
}

impl Faults {
    /// A schedule for `backends`, one fault every `every` on average, logged to
    /// `<run>/faults.log`.
    pub(crate) fn new(
        seed: u64,
        backends: &[Backend],
        every: Duration,
        run: &Path,
    ) -> std::io::Result<Self> {
        let kinds = backends
            .iter()
            .flat_map(|&backend| {
                Kind::for_backend(backend)
                    .iter()
                    .map(move |&kind| (backend, kind))
            })
            .collect();
        Ok(Self {
            rng: Rng::new(seed),
            kinds,
            bag: Vec::new(),
            retry: None,
            next_at: Instant::now() + WARM_UP,
            every,
            log: File::options()
                .create(true)
                .append(true)
                .open(run.join("faults.log"))?,
            planted: Vec::new(),
            stopped_commands: Vec::new(),
            restores: 0,
            stepped: Vec::new(),
            dynamo_restarts: Restarts::new(),
            pg_restarts: Restarts::new(),
            redis_restarts: Restarts::new(),
            done: Default::default(),
            skipped: Default::default(),
            steps_beyond: 0,
        })
    }

    /// Does what is due at `now`: removes planted garbage whose time is up, and injects the
    /// next fault if its time has come.
    pub(crate) fn tick(&mut self, now: Instant, targets: &mut Targets<'_>) {
        self.planted.retain(|(until, path)| {
            if *until > now {
                return true;
            }
            let _ = remove_any(path);
            false
        });
        self.stopped_commands.retain(|&(until, pid)| {
            if until > now {
                return true;
            }
            let _ = kill(pid, Signal::SIGCONT);
            false
        });
        if now < self.next_at {
            return;
        }
        let every = u64::try_from(self.every.as_millis()).unwrap_or(1000);
        self.next_at = now + Duration::from_millis(self.rng.between(every / 2, every * 3 / 2));
        let retry = self.retry.take();
        let Some((backend, kind)) = retry.or_else(|| self.draw()) else {
            return;
        };
        match self.inject(backend, kind, targets) {
            Some((target, detail)) => {
                *self.done.entry((backend, kind)).or_default() += 1;
                let line = format!(
                    "fault {} {} {} {target} {detail}\n",
                    mono_ns(),
                    wall_ms(),
                    kind.name()
                );
                let _ = self.log.write_all(line.as_bytes());
            }
            // No target now (every process of the backend stopped, a restart still under
            // way): tried once more half a second later, then counted as skipped.
            None if retry.is_none() => {
                self.retry = Some((backend, kind));
                self.next_at = now + Duration::from_millis(500);
            }
            None => *self.skipped.entry((backend, kind)).or_default() += 1,
        }
    }

    /// The next fault of the bag, refilled and shuffled when empty.
    fn draw(&mut self) -> Option<(Backend, Kind)> {
        if self.bag.is_empty() {
            self.bag = self.kinds.clone();
            self.rng.shuffle(&mut self.bag);
        }
        self.bag.pop()
    }

    /// Injects one fault; returns its target and detail for the log, or `None` if it had no
    /// target now.
    fn inject(
        &mut self,
        backend: Backend,
        kind: Kind,
        targets: &mut Targets<'_>,
    ) -> Option<(String, String)> {
        match kind {
            Kind::SigKill => self.sigkill(backend, targets),
            Kind::SigStop => self.sigstop(backend, targets),
            Kind::CommandStop => self.command_stop(backend, targets),
            Kind::ClockStep => self.clock_step(backend, targets),
            Kind::StoreRestart if backend == Backend::Postgres => self.pg_restart(targets),
            Kind::StoreRestart if backend == Backend::Redis => self.redis_restart(targets),
            Kind::ClientKill => self.client_kill(targets),
            Kind::ScriptFlush => self.script_flush(targets),
            Kind::StoreRestart => self.store_restart(targets),
            Kind::TerminateBackend => self.terminate_backend(targets),
            Kind::TableRestore => self.table_restore(targets),
            Kind::FileDelete => self.file_delete(targets.run),
            Kind::FileGarbage => self.file_garbage(targets.run),
            proxied if backend == Backend::Postgres => self.proxy_fault(proxied, targets.pg_proxy?),
            proxied if backend == Backend::Redis => self.proxy_fault(proxied, targets.redis_proxy?),
            proxied => self.proxy_fault(proxied, targets.proxy?),
        }
    }

    /// A running process of `backend`, chosen at random (not one that is stopped already).
    fn pick<'s>(
        &mut self,
        backend: Backend,
        slots: &'s mut [Slot],
        filter: impl Fn(&Slot) -> bool,
    ) -> Option<&'s mut Slot> {
        let candidates: Vec<usize> = (0..slots.len())
            .filter(|&i| {
                let slot = &slots[i];
                slot.backend == backend
                    && slot.pid().is_some()
                    && slot.stopped_until.is_none()
                    && !matches!(slot.role, Role::Restorer)
                    && filter(slot)
            })
            .collect();
        let chosen = *candidates.get(self.rng.index(candidates.len()))?;
        slots.get_mut(chosen)
    }

    fn sigkill(&mut self, backend: Backend, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let slot = self.pick(backend, targets.slots, |_| true)?;
        slot.signal(Signal::SIGKILL)
            .then(|| (slot.proc_name(), "-".to_owned()))
    }

    fn sigstop(&mut self, backend: Backend, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let slot = self.pick(backend, targets.slots, |_| true)?;
        let lease = u64::try_from(slot.lease_length().as_millis()).unwrap_or(1000);
        // Longer than the lease: from 1.2 to 2.5 lease lengths.
        let stop = Duration::from_millis(self.rng.between(lease * 6 / 5, lease * 5 / 2));
        if !slot.signal(Signal::SIGSTOP) {
            return None;
        }
        slot.stopped_until = Some(Instant::now() + stop);
        Some((slot.proc_name(), format!("ms={}", stop.as_millis())))
    }

    /// Asks the `restorer` slot to restore `chaos-restored` from a scan 3 to 12 s old (a
    /// request file it acts on within 100 ms). None while a request is still pending or no
    /// restorer runs.
    fn table_restore(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let restorer = targets
            .slots
            .iter()
            .find(|slot| matches!(slot.role, Role::Restorer) && slot.pid().is_some())?;
        let dir = targets.run.join("restore");
        fs::create_dir_all(&dir).ok()?;
        let pending = fs::read_dir(&dir).ok()?.flatten().any(|entry| {
            let path = entry.path();
            path.extension().is_none() && !path.with_extension("done").exists()
        });
        if pending {
            return None;
        }
        self.restores += 1;
        let age_ms = self.rng.between(3_000, 12_000);
        let request = dir.join(format!("{:06}", self.restores));
        fs::write(&request, format!("{age_ms}\n")).ok()?;
        Some((
            restorer.proc_name(),
            format!("request={:06},age_ms={age_ms}", self.restores),
        ))
    }

    /// Stops the command of a running `lease run` (its child) for 1.2 to 2.5 lease lengths.
    fn command_stop(
        &mut self,
        backend: Backend,
        targets: &mut Targets<'_>,
    ) -> Option<(String, String)> {
        let runs = |slot: &Slot| {
            matches!(
                slot.role,
                Role::RunFile
                    | Role::RunShared
                    | Role::RunDynamo
                    | Role::RunPostgres
                    | Role::RunRedis
                    | Role::RunRestored
                    | Role::RunCounting
            )
        };
        let slot = self.pick(backend, targets.slots, runs)?;
        let command = children(slot.pid()?).into_iter().next()?;
        let lease = u64::try_from(slot.lease_length().as_millis()).unwrap_or(1000);
        let stop = Duration::from_millis(self.rng.between(lease * 6 / 5, lease * 5 / 2));
        kill(command, Signal::SIGSTOP).ok()?;
        self.stopped_commands.push((Instant::now() + stop, command));
        Some((
            slot.proc_name(),
            format!("command_pid={command},ms={}", stop.as_millis()),
        ))
    }

    /// Steps one process's wall clock: within the skew allowance seven times in ten, beyond it
    /// otherwise. The process stepped before on this backend is set back to 0 first.
    fn clock_step(
        &mut self,
        backend: Backend,
        targets: &mut Targets<'_>,
    ) -> Option<(String, String)> {
        let clocked = |slot: &Slot| {
            !matches!(
                slot.role,
                Role::RunFile
                    | Role::RunDynamo
                    | Role::RunPostgres
                    | Role::RunRedis
                    | Role::RunRestored
                    | Role::RunCounting
            )
        };
        let proc = self.pick(backend, targets.slots, clocked)?.proc_name();
        if let Some(at) = self.stepped.iter().position(|(b, _)| *b == backend) {
            let (_, previous) = self.stepped.remove(at);
            let _ = fs::write(previous, "0\n");
        }
        let skew = u64::try_from(DYNAMO_SKEW.as_millis()).unwrap_or(500);
        let within = self.rng.chance_percent(70);
        let size = if within {
            self.rng.between(skew / 10, skew * 9 / 10)
        } else {
            self.steps_beyond += 1;
            self.rng.between(skew * 3 / 2, skew * 4)
        };
        let offset = if self.rng.chance_percent(50) {
            i128::from(size)
        } else {
            -i128::from(size)
        };
        let path = targets.run.join("clock").join(&proc);
        fs::write(&path, format!("{offset}\n")).ok()?;
        self.stepped.push((backend, path));
        let verdict = if within { "within" } else { "beyond" };
        Some((proc, format!("offset_ms={offset},{verdict}_skew_{skew}ms")))
    }

    fn proxy_fault(&mut self, kind: Kind, proxy: &Proxy) -> Option<(String, String)> {
        let requests = u32::try_from(self.rng.between(1, 4)).unwrap_or(1);
        let (fault, extra) = match kind {
            Kind::Delay => {
                let ms = self.rng.between(50, 1500);
                (Fault::Delay(Duration::from_millis(ms)), format!(",ms={ms}"))
            }
            Kind::Blackhole => {
                let ms = self.rng.between(1000, 4000);
                (
                    Fault::Blackhole(Duration::from_millis(ms)),
                    format!(",ms={ms}"),
                )
            }
            Kind::Drop => (Fault::Drop, String::new()),
            Kind::Reset => (Fault::Reset, String::new()),
            Kind::LostReply => (Fault::LostReply, String::new()),
            _ => (Fault::Throttle, String::new()),
        };
        debug_assert_eq!(fault.kind(), kind.name());
        proxy.arm(fault, requests);
        Some(("proxy".to_owned(), format!("requests={requests}{extra}")))
    }

    /// Kills DynamoDB Local and starts it again, on a thread of its own (the JVM takes seconds
    /// to start); skipped while the previous restart is still under way.
    fn store_restart(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let store = targets.store?.clone();
        let started = self.dynamo_restarts.start(move || {
            let mut server = store.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(error) = server.restart() {
                eprintln!("chaos: DynamoDB Local did not come back: {error}");
            }
        });
        started.then(|| ("dynamodb-local".to_owned(), "-".to_owned()))
    }

    /// Stops PostgreSQL (a fast shutdown, which ends every session, or an immediate one, a
    /// crash: crash recovery at the next start) and starts it again 0.2 to 3 s later, on a
    /// thread of its own; skipped as DynamoDB Local's restarts are.
    fn pg_restart(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let cluster = targets.pg?.clone();
        let mode = if self.rng.chance_percent(50) {
            StopMode::Fast
        } else {
            StopMode::Immediate
        };
        let down = Duration::from_millis(self.rng.between(200, PG_DOWN_MAX_MS));
        let started = self.pg_restarts.start(move || {
            let mut cluster = cluster.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(error) = cluster.stop(mode) {
                eprintln!("chaos: PostgreSQL did not stop ({mode:?}): {error}");
            }
            std::thread::sleep(down);
            if let Err(error) = cluster.start_again() {
                eprintln!("chaos: PostgreSQL did not come back: {error}");
            }
            super::renice(&cluster);
        });
        let mode = if mode == StopMode::Fast {
            "fast"
        } else {
            "immediate"
        };
        started.then(|| {
            (
                "postgres".to_owned(),
                format!("mode={mode},down_ms={}", down.as_millis()),
            )
        })
    }

    /// Ends 1 to 4 random client connections of PostgreSQL with `pg_terminate_backend` (a
    /// `psql` of its own, directly to the server); none while a restart is under way.
    fn terminate_backend(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        if self.pg_restarts.under_way() {
            return None;
        }
        let cluster = targets.pg?.try_lock().ok()?;
        let wanted = self.rng.between(1, 4);
        let ended = cluster
            .psql(&format!(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (SELECT pid \
                 FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> \
                 pg_backend_pid() ORDER BY random() LIMIT {wanted}) AS chosen"
            ))
            .ok()?;
        Some((
            "postgres".to_owned(),
            format!("wanted={wanted},ended={}", ended.trim()),
        ))
    }

    /// Stops Redis (`SIGTERM`: it writes its append-only file) and starts it again from that
    /// file 0.2 to 3 s later, on a thread of its own; skipped as DynamoDB Local's restarts are.
    fn redis_restart(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        let server = targets.redis?.clone();
        let down = Duration::from_millis(self.rng.between(200, REDIS_DOWN_MAX_MS));
        let started = self.redis_restarts.start(move || {
            let mut server = server.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(error) = server.stop() {
                eprintln!("chaos: Redis did not stop: {error}");
            }
            std::thread::sleep(down);
            if let Err(error) = server.start_again() {
                eprintln!("chaos: Redis did not come back: {error}");
            }
            super::renice_redis(&server);
        });
        started.then(|| ("redis".to_owned(), format!("down_ms={}", down.as_millis())))
    }

    /// Ends 1 to 4 random client connections of Redis with `CLIENT KILL ID` (a connection of
    /// its own, directly to the server); none while a restart is under way.
    fn client_kill(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        if self.redis_restarts.under_way() {
            return None;
        }
        let server = targets.redis?.try_lock().ok()?;
        let list = server.command(&["CLIENT", "LIST"]).ok()?;
        // Every connection but the one asking (its command is `client|list`).
        let ids: Vec<String> = list
            .text()
            .lines()
            .filter(|line| !line.contains("cmd=client|list"))
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
            .map(str::to_owned)
            .collect();
        let wanted = self.rng.between(1, 4);
        let mut ended = 0;
        for _ in 0..wanted {
            let Some(id) = ids.get(self.rng.index(ids.len())) else {
                break;
            };
            if matches!(
                server.command(&["CLIENT", "KILL", "ID", id]),
                Ok(Reply::Int(1))
            ) {
                ended += 1;
            }
        }
        Some((
            "redis".to_owned(),
            format!("wanted={wanted},clients={},ended={ended}", ids.len()),
        ))
    }

    /// `SCRIPT FLUSH` on Redis (directly); none while a restart is under way.
    fn script_flush(&mut self, targets: &mut Targets<'_>) -> Option<(String, String)> {
        if self.redis_restarts.under_way() {
            return None;
        }
        let server = targets.redis?.try_lock().ok()?;
        let mode = if self.rng.chance_percent(50) {
            "SYNC"
        } else {
            "ASYNC"
        };
        server.command(&["SCRIPT", "FLUSH", mode]).ok()?;
        Some(("redis".to_owned(), format!("mode={}", mode.to_lowercase())))
    }

    /// Deletes one companion or temporary file: `lease run`'s deadline relay file (the guard
    /// reads the holder's deadline from it), or an entry of a lock or value directory that is
    /// neither its state entry (`free.*`, `held.*`), nor its value entry (`value.*`), nor the
    /// data file that entry names (stale data files, temporary files, planted junk).
    fn file_delete(&mut self, run: &Path) -> Option<(String, String)> {
        let mut candidates: Vec<(PathBuf, &str)> = relay_files(&run.join("tmp"))
            .into_iter()
            .map(|path| (path, "deadline-relay"))
            .collect();
        for dir in lock_dirs(&run.join("files")) {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            let names: Vec<String> = entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            let current_data: Vec<String> = names
                .iter()
                .filter_map(|name| name.strip_prefix("value."))
                .filter_map(|rest| rest.rsplit('.').next())
                .map(|nonce| format!("data.{nonce}"))
                .collect();
            for name in names {
                let protected = ["free.", "held.", "value."]
                    .iter()
                    .any(|p| name.starts_with(p))
                    || current_data.contains(&name);
                // Files only: a directory here is planted junk (removed on schedule) or, were
                // a store root ever taken for a lock directory, a lock directory itself, whose
                // deletion the contract does not survive (docs/correctness.md).
                let path = dir.join(&name);
                let is_file = fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir());
                if !protected && is_file {
                    candidates.push((path, "lock-dir-entry"));
                }
            }
        }
        let (victim, what) = candidates.get(self.rng.index(candidates.len()))?.clone();
        remove_any(&victim).ok()?;
        Some((short(run, &victim), what.to_owned()))
    }

    /// Plants one piece of garbage in a lock directory or a store directory, to be removed
    /// one to four seconds later.
    fn file_garbage(&mut self, run: &Path) -> Option<(String, String)> {
        let files = run.join("files");
        let mut dirs = lock_dirs(&files);
        dirs.extend([files.join("run"), files.join("fleet"), files.join("locks")]);
        // The counting leases' and the election's stores, where the run has them.
        dirs.extend(
            [files.join("counting"), files.join("election")]
                .into_iter()
                .filter(|dir| dir.is_dir()),
        );
        let dir = dirs.get(self.rng.index(dirs.len()))?.clone();
        let n = self.rng.next_u64() % 1_000_000;
        let (name, what) = match self.rng.between(0, 5) {
            0 => (format!("junk.{n}"), "random bytes"),
            1 => (format!("held.junk{n}"), "non-canonical state name"),
            2 => (format!("free.{n}"), "second canonical state entry"),
            3 => (format!("value.{n}.0.junk"), "value entry without data"),
            4 => (format!("big.{n}"), "8 MiB sparse file"),
            _ => (format!("dir.{n}"), "directory"),
        };
        let path = dir.join(&name);
        let planted = match what {
            "directory" => fs::create_dir(&path),
            "8 MiB sparse file" => File::create(&path).and_then(|f| f.set_len(8 << 20)),
            _ => {
                let bytes: Vec<u8> = (0..self.rng.between(0, 4096))
                    .map(|_| self.rng.next_u64() as u8)
                    .collect();
                fs::write(&path, bytes)
            }
        };
        planted.ok()?;
        let until = Instant::now() + Duration::from_millis(self.rng.between(1000, 4000));
        self.planted.push((until, path.clone()));
        Some((short(run, &path), what.replace(' ', "_")))
    }

    /// Removes every planted file and sets every stepped clock back to 0.
    pub(crate) fn undo_all(&mut self) {
        for (_, path) in self.planted.drain(..) {
            let _ = remove_any(&path);
        }
        for (_, pid) in self.stopped_commands.drain(..) {
            let _ = kill(pid, Signal::SIGCONT);
        }
        for (_, path) in self.stepped.drain(..) {
            let _ = fs::write(path, "0\n");
        }
    }

    /// Whether a store restart is under way.
    pub(crate) fn restarting(&self) -> bool {
        self.dynamo_restarts.under_way()
            || self.pg_restarts.under_way()
            || self.redis_restarts.under_way()
    }
}

/// The children of `pid`, from `/proc/<pid>/task/*/children` (a child of any of its threads).
fn children(pid: Pid) -> Vec<Pid> {
    let mut found = Vec::new();
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    for task in fs::read_dir(tasks).into_iter().flatten().flatten() {
        let list = fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .map(Pid::from_raw),
        );
    }
    found
}

/// The files under `tmp` (the `TMPDIR` of every slot), two levels down, written in the last
/// five seconds: the deadline files of the `lease run` processes alive now (a killed one leaves
/// its relay directory behind).
fn relay_files(tmp: &Path) -> Vec<PathBuf> {
    let fresh = |file: &fs::DirEntry| {
        file.metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < Duration::from_secs(5)))
    };
    let mut found = Vec::new();
    for dir in fs::read_dir(tmp).into_iter().flatten().flatten() {
        for file in fs::read_dir(dir.path()).into_iter().flatten().flatten() {
            if fresh(&file) {
                found.push(file.path());
            }
        }
    }
    found.sort();
    found
}

/// Every lock or value directory under `files`: a directory holding a `free.*`, `held.*` or
/// `value.*` entry, at most three levels down.
fn lock_dirs(files: &Path) -> Vec<PathBuf> {
    // The store roots hold lock directories, never state: planted junk named like a state
    // entry must not make one of them look like a lock directory.
    let roots = [
        files.join("locks"),
        files.join("run"),
        files.join("counting"),
        files.join("fleet"),
        files.join("shared"),
        files.join("election"),
    ];
    let mut found = Vec::new();
    let mut queue = vec![(files.to_path_buf(), 0)];
    while let Some((dir, depth)) = queue.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut is_lock = false;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if ["free.", "held.", "value."]
                .iter()
                .any(|p| name.starts_with(p))
            {
                is_lock = true;
            } else if is_dir && depth < 3 {
                queue.push((entry.path(), depth + 1));
            }
        }
        if is_lock && dir != files && !roots.contains(&dir) {
            found.push(dir);
        }
    }
    found.sort();
    found
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    if path.is_dir() && !path.is_symlink() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

/// `path` relative to the run directory, for fault lines (no spaces).
fn short(run: &Path, path: &Path) -> String {
    path.strip_prefix(run)
        .unwrap_or(path)
        .display()
        .to_string()
        .replace(' ', "_")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::chaos::history::TempRun;

    /// Writes a one-byte file at `path` under the run directory, with its parents.
    fn plant(run: &TempRun, path: &str) -> PathBuf {
        let path = run.dir.join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        fs::write(&path, "x").expect("write");
        path
    }

    #[test]
    fn every_kind_of_every_backend_is_drawn_once_per_round() {
        let run = TempRun::new("bag");
        let backends = [
            Backend::File,
            Backend::Dynamo,
            Backend::Postgres,
            Backend::Redis,
        ];
        let mut faults =
            Faults::new(7, &backends, Duration::from_secs(1), &run.dir).expect("faults");
        let per_round: usize = backends.iter().map(|&b| Kind::for_backend(b).len()).sum();
        let mut drawn: std::collections::BTreeMap<(Backend, Kind), u32> = Default::default();
        for _ in 0..3 * per_round {
            *drawn.entry(faults.draw().expect("a fault")).or_default() += 1;
        }
        assert_eq!(drawn.len(), per_round);
        assert!(drawn.values().all(|&n| n == 3), "{drawn:?}");
        // The same seed draws the same schedule.
        let mut again =
            Faults::new(7, &backends, Duration::from_secs(1), &run.dir).expect("faults");
        let mut first =
            Faults::new(7, &backends, Duration::from_secs(1), &run.dir).expect("faults");
        for _ in 0..per_round {
            assert_eq!(again.draw(), first.draw());
        }
    }

    #[test]
    fn file_delete_spares_state_value_and_current_data_entries() {
        let run = TempRun::new("delete");
        let keep = [
            plant(&run, "files/locks/a/free.3"),
            plant(&run, "files/run/r0.lease/held.4.0.1.n.2.3.4"),
            plant(&run, "files/fleet/fenced~u1/value.2.5.abc"),
            plant(&run, "files/fleet/fenced~u1/data.abc"),
        ];
        // Junk named like a state entry in a store root (as file-garbage plants) must not make
        // the root look like a lock directory whose entries, lock directories, may go.
        let planted = plant(&run, "files/run/free.433277");
        let lock_dir = plant(&run, "files/run/r0.lease/free.9");
        let stale = [
            plant(&run, "files/fleet/fenced~u1/data.old"),
            plant(&run, "files/locks/a/junk.1"),
            plant(&run, "tmp/lease-relay-1/deadline"),
        ];
        let mut faults =
            Faults::new(1, &[Backend::File], Duration::from_secs(1), &run.dir).expect("faults");
        let mut deleted = Vec::new();
        while let Some((target, what)) = faults.file_delete(&run.dir) {
            deleted.push((target, what));
            assert!(
                deleted.len() <= stale.len(),
                "deleted more than the stale files: {deleted:?}"
            );
        }
        assert_eq!(deleted.len(), stale.len(), "{deleted:?}");
        assert!(keep.iter().all(|path| path.exists()));
        assert!(planted.exists() && lock_dir.exists());
        assert!(stale.iter().all(|path| !path.exists()));
        assert!(deleted.iter().any(
            |(target, what)| target == "tmp/lease-relay-1/deadline" && what == "deadline-relay"
        ));
    }

    #[test]
    fn planted_garbage_goes_again_and_clock_steps_are_undone() {
        let run = TempRun::new("garbage");
        plant(&run, "files/locks/a/free.0");
        fs::create_dir_all(run.dir.join("files/run")).expect("run");
        fs::create_dir_all(run.dir.join("files/fleet")).expect("fleet");
        let mut faults =
            Faults::new(3, &[Backend::File], Duration::from_secs(1), &run.dir).expect("faults");
        let planted: Vec<_> = (0..12)
            .filter_map(|_| faults.file_garbage(&run.dir))
            .collect();
        assert_eq!(planted.len(), 12);
        assert!(
            planted
                .iter()
                .all(|(target, _)| run.dir.join(target).exists())
        );
        faults.undo_all();
        assert!(
            planted
                .iter()
                .all(|(target, _)| !run.dir.join(target).exists())
        );
        assert!(run.dir.join("files/locks/a/free.0").exists());
    }
}
