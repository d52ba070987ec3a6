//! The processes of a chaos run: one *slot* per process that is kept running, restarted with a
//! new incarnation (and so a new `<proc>` name in the history) whenever it exits or is killed.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Backend;

/// The DynamoDB table every DynamoDB surface shares.
pub(crate) const TABLE: &str = "chaos";
/// The table the `table-restore` fault restores, and only the `runr*` slots use: a restore puts
/// old fenced values back too, which no store can prevent, so the actors whose history records
/// values stay on [`TABLE`].
pub(crate) const TABLE_RESTORED: &str = "chaos-restored";
/// The PostgreSQL table every PostgreSQL surface shares.
pub(crate) const PG_TABLE: &str = "chaos";
/// The key prefix every Redis surface shares.
pub(crate) const REDIS_PREFIX: &str = "chaos";
/// The recreation grace of every Redis surface (`lease run --recreation-grace`, the actors'
/// `--grace-ms`): longer than the longest lease taken under [`REDIS_PREFIX`] (3 s), so that
/// after a `store-restart` (a new incarnation) nothing is granted while a holder of the one
/// before may still run (docs/correctness.md, Redis).
const REDIS_GRACE_MS: u64 = 4000;
/// The per-attempt timeout of the PostgreSQL actors (and DynamoDB's): a blackholed statement
/// is given up and retried on a fresh connection while the holder's deadline allows.
const ATTEMPT_TIMEOUT_MS: &str = "800";
/// Dummy credentials and region for DynamoDB Local, which accepts any.
pub(crate) const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "local"),
    ("AWS_SECRET_ACCESS_KEY", "local"),
    ("AWS_REGION", "us-east-1"),
];
/// The skew allowance of the DynamoDB actors (`max_clock_skew`), which the checker is told.
pub(crate) const DYNAMO_SKEW: Duration = Duration::from_millis(500);

/// What a `FileLock` actor forks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fork {
    /// Nothing.
    No,
    /// In each tenure, a child that disposes of its copy of the held guard (`--fork-child`).
    Held,
    /// After each tenure, a child that contends for the lock with the parent's `FileLock`,
    /// its cached directory descriptor shared with the parent (`--fork-idle`).
    Idle,
}

/// What a slot runs.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    /// `lease-chaos-actor filelock` on `files/locks/<lock>`, kernel or heartbeat-only mode,
    /// forking as `fork` says.
    FileLock {
        lock: &'static str,
        kernel: bool,
        fork: Fork,
    },
    /// `lease run --file` of `lease-chaos-actor touch`.
    RunFile,
    /// `lease run --file files/shared --shared-dir` of `lease-chaos-actor touch`, on keys
    /// `s0`..`s3` in turn: the shared store the attacker owns.
    RunShared,
    /// `lease-chaos-actor prune` of `files/shared` every 200 ms, so its keys are created again
    /// and again under the attacker's eyes.
    Prune,
    /// `lease run --dynamo` (through the proxy) of `lease-chaos-actor touch`.
    RunDynamo,
    /// `lease run --postgres` (through the PostgreSQL proxy) of `lease-chaos-actor touch`.
    RunPostgres,
    /// `lease run --redis` (through the Redis proxy) of `lease-chaos-actor touch`.
    RunRedis,
    /// `lease run --holders 2` of `lease-chaos-actor touch` on the key `slots2`, on the files
    /// or through a proxy on DynamoDB, PostgreSQL or Redis: a counting lease, each holder in a
    /// slot.
    RunCounting,
    /// `lease-chaos-actor dynamo-lease`, `pg-lease` or `redis-lease`: a kept lease and fenced
    /// values, through the proxy.
    KeptLease,
    /// `lease-chaos-actor fleet` worker on the files, on DynamoDB, PostgreSQL or Redis.
    Fleet { worker: u32 },
    /// `lease-chaos-actor election` on `files/election` or on DynamoDB, PostgreSQL or Redis
    /// (through the proxy), key `leader`: a campaigner, or (`observe`) an observer.
    Election { observe: bool },
    /// `lease run --dynamo chaos-restored` of `touch`: the holders of the table that the
    /// `table-restore` fault restores.
    RunRestored,
    /// `lease-chaos-actor restore`: scans [`TABLE_RESTORED`] every second and restores it from
    /// an old scan when the `table-restore` fault asks, talking to DynamoDB Local directly (not
    /// through the proxy). Never killed or stopped by a fault.
    Restorer,
}

/// Paths and endpoints every slot's command is built from.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The `lease-chaos-actor` binary.
    pub(crate) actor: PathBuf,
    /// The `lease` binary.
    pub(crate) lease: PathBuf,
    /// The run directory (`target/chaos/<seed>`).
    pub(crate) run: PathBuf,
    /// The proxy's endpoint, which every DynamoDB client uses.
    pub(crate) endpoint: Option<String>,
    /// DynamoDB Local's own endpoint (the same port across restarts): only the `restorer`
    /// uses it, as an operator restoring a table does not go through the clients' network.
    pub(crate) store_endpoint: Option<String>,
    /// `FileLock` actors claim without checking and hold 400 ms, and the Redis kept-lease
    /// actors hold a bare grant for two lease lengths without renewing or checking it
    /// (`--sabotage`).
    pub(crate) sabotage: bool,
    /// The PostgreSQL URL through the PostgreSQL proxy, which every PostgreSQL client uses.
    pub(crate) pg_url: Option<String>,
    /// The Redis URL through the Redis proxy, which every Redis client uses.
    pub(crate) redis_url: Option<String>,
}

impl Context {
    /// Where the file surfaces keep their locks and stores.
    pub(crate) fn files(&self) -> PathBuf {
        self.run.join("files")
    }
}

/// One process kept running for the whole run.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Stable name, the prefix of every incarnation's `<proc>`.
    pub(crate) name: String,
    /// The store it works on.
    pub(crate) backend: Backend,
    /// What it runs.
    pub(crate) role: Role,
    /// How many times it was started.
    pub(crate) incarnation: u32,
    child: Option<Child>,
    /// When a SIGSTOPped process gets its SIGCONT.
    pub(crate) stopped_until: Option<Instant>,
    respawn_at: Option<Instant>,
    /// Exit statuses seen, as text (`exit 0`, `signal 9`), with counts.
    pub(crate) exits: std::collections::BTreeMap<String, u32>,
}

impl Slot {
    /// A slot that starts at the first [`Slot::poll`].
    pub(crate) fn new(name: String, backend: Backend, role: Role) -> Self {
        Self {
            name,
            backend,
            role,
            incarnation: 0,
            child: None,
            stopped_until: None,
            respawn_at: Some(Instant::now()),
            exits: Default::default(),
        }
    }

    /// The `<proc>` name of the current incarnation.
    pub(crate) fn proc_name(&self) -> String {
        format!("{}.{}", self.name, self.incarnation)
    }

    /// The pid of the running incarnation, if any.
    pub(crate) fn pid(&self) -> Option<Pid> {
        let child = self.child.as_ref()?;
        i32::try_from(child.id()).ok().map(Pid::from_raw)
    }

    /// How long this slot's lease (or session) lasts: SIGSTOPs are longer than this.
    pub(crate) fn lease_length(&self) -> Duration {
        match (&self.role, self.backend) {
            (Role::FileLock { .. }, _) | (Role::Election { .. }, Backend::File) => {
                Duration::from_millis(1000)
            }
            (Role::RunFile | Role::RunShared | Role::Prune, _)
            | (Role::RunCounting, Backend::File)
            | (Role::Fleet { .. }, Backend::File) => Duration::from_secs(2),
            _ => Duration::from_secs(3),
        }
    }

    /// Reaps an exited incarnation, resumes a stop that is over, and starts the next
    /// incarnation when due. Returns whether a process was started.
    ///
    /// A process that cannot be started or waited for (`EAGAIN` from `fork` on a loaded
    /// machine, a full disk for its log) does not end the run, which would leave every other
    /// slot's process running with no one to stop it: the failure is counted in the slot's
    /// exits under what the system said, shown in the report, and the start retried in a
    /// second.
    pub(crate) fn poll(&mut self, context: &Context, now: Instant) -> bool {
        if self.stopped_until.is_some_and(|until| until <= now) {
            self.signal(Signal::SIGCONT);
            self.stopped_until = None;
        }
        if let Some(child) = &mut self.child {
            let what = match child.try_wait() {
                Ok(None) => None,
                Ok(Some(status)) => Some(
                    match (
                        status.code(),
                        std::os::unix::process::ExitStatusExt::signal(&status),
                    ) {
                        (Some(code), _) => format!("exit {code}"),
                        (None, Some(signal)) => format!("signal {signal}"),
                        (None, None) => "unknown".to_owned(),
                    },
                ),
                Err(error) => Some(format!("lost (wait failed: {error})")),
            };
            if let Some(what) = what {
                *self.exits.entry(what).or_default() += 1;
                self.child = None;
                self.stopped_until = None;
                self.respawn_at = Some(now + Duration::from_millis(100));
            }
        }
        if self.child.is_none() && self.respawn_at.is_some_and(|at| at <= now) {
            self.respawn_at = None;
            self.incarnation += 1;
            match self.spawn(context) {
                Ok(child) => {
                    self.child = Some(child);
                    return true;
                }
                Err(error) => {
                    *self
                        .exits
                        .entry(format!("not started: {error}"))
                        .or_default() += 1;
                    self.respawn_at = Some(now + Duration::from_secs(1));
                }
            }
        }
        false
    }

    fn spawn(&self, context: &Context) -> std::io::Result<Child> {
        let mut command = self.command(context);
        if matches!(self.backend, Backend::Postgres | Backend::Redis) {
            command = niced(&command);
        }
        let log = context.run.join("logs").join(format!("{}.log", self.name));
        let out = File::options().create(true).append(true).open(log)?;
        command
            .envs(AWS_ENV)
            // Every PostgreSQL surface is told its URL (the proxy's); `lease` would otherwise
            // take one from the environment of `cargo xtask test`.
            .env_remove("LEASE_POSTGRES_URL")
            .env_remove("LEASE_REDIS_URL")
            .env("TMPDIR", context.run.join("tmp"))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        command.spawn()
    }

    /// Sends `signal` to the running incarnation; false if there is none.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        self.pid().is_some_and(|pid| kill(pid, signal).is_ok())
    }

    /// Stops the slot for good: SIGCONT (a stopped process cannot exit), then, if it has not
    /// exited by `deadline`, SIGKILL; waits for it.
    pub(crate) fn finish(&mut self, deadline: Instant) {
        self.respawn_at = None;
        self.signal(Signal::SIGCONT);
        if let Some(child) = &mut self.child {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.child = None;
    }

    fn command(&self, context: &Context) -> Command {
        let proc = self.proc_name();
        let files = context.files();
        match (&self.role, self.backend) {
            (Role::FileLock { lock, kernel, fork }, _) => {
                let mut command = actor(context, "filelock", &proc);
                command
                    .arg("--path")
                    .arg(files.join("locks").join(lock))
                    .args(["--mode", if *kernel { "kernel" } else { "heartbeat" }])
                    .args(["--stale-ms", "1000", "--heartbeat-ms", "100"])
                    .args(["--claims", "4"]);
                if context.sabotage {
                    command.args(["--hold-ms", "400", "--skip-check"]);
                } else if *fork == Fork::Held {
                    // Long enough for a contender to get in after a child that freed the lease.
                    command.args(["--hold-ms", "60", "--fork-child"]);
                } else if *fork == Fork::Idle {
                    command.args(["--hold-ms", "30", "--fork-idle"]);
                } else {
                    command.args(["--hold-ms", "8"]);
                }
                command
            }
            (Role::RunFile, _) => {
                let dir = files.join("run");
                let key = format!("file:{}/r0", dir.display());
                let mut command = Command::new(&context.lease);
                command
                    .arg("run")
                    .arg("--file")
                    .arg(&dir)
                    .args(["--key", "r0", "--ttl", "2s", "--wait", "3s", "--"]);
                touch(&mut command, context, &proc, "run-file", &key, 40);
                command
            }
            (Role::RunShared, _) => {
                let dir = super::attacker::shared_store(&context.run);
                let name = format!("s{}", self.incarnation % 4);
                let key = format!("file:{}/{name}", dir.display());
                let mut command = Command::new(&context.lease);
                command
                    .arg("run")
                    .arg("--file")
                    .arg(&dir)
                    .args(["--shared-dir", "--key", &name])
                    .args(["--ttl", "2s", "--wait", "3s", "--"]);
                touch(&mut command, context, &proc, "run-file", &key, 40);
                command
            }
            (Role::Prune, _) => {
                let mut command = actor(context, "prune", &proc);
                command
                    .arg("--dir")
                    .arg(super::attacker::shared_store(&context.run))
                    .args(["--every-ms", "200"]);
                command
            }
            (Role::RunDynamo, _) => {
                let mut command = Command::new(&context.lease);
                command
                    .args(["run", "--dynamo", TABLE, "--region", "us-east-1"])
                    .args([
                        "--endpoint",
                        context.endpoint.as_deref().unwrap_or_default(),
                    ])
                    .args(["--key", "r0", "--ttl", "3s", "--wait", "4s", "--"]);
                let key = format!("dynamo:{TABLE}/r0/LOCK");
                touch(&mut command, context, &proc, "run-dynamo", &key, 60);
                command
            }
            (Role::RunPostgres, _) => {
                let mut command = Command::new(&context.lease);
                command
                    .args([
                        "run",
                        "--postgres",
                        context.pg_url.as_deref().unwrap_or_default(),
                    ])
                    .args(["--table", PG_TABLE])
                    .args(["--key", "r0", "--ttl", "3s", "--wait", "4s", "--"]);
                let key = format!("postgres:{PG_TABLE}/r0");
                touch(
                    &mut command,
                    context,
                    &proc,
                    "run-postgres",
                    &key,
                    PG_TOUCH_EVERY,
                );
                command
            }
            (Role::RunRedis, _) => {
                let mut command = Command::new(&context.lease);
                command.arg("run");
                redis_lease_run(&mut command, context);
                command.args(["--key", "r0", "--ttl", "3s", "--wait", "4s", "--"]);
                let key = format!("redis:{REDIS_PREFIX}/r0");
                touch(
                    &mut command,
                    context,
                    &proc,
                    "run-redis",
                    &key,
                    PG_TOUCH_EVERY,
                );
                command
            }
            (Role::RunRestored, _) => {
                let mut command = Command::new(&context.lease);
                command
                    .args(["run", "--dynamo", TABLE_RESTORED, "--region", "us-east-1"])
                    .args([
                        "--endpoint",
                        context.endpoint.as_deref().unwrap_or_default(),
                    ])
                    .args(["--key", "r0", "--ttl", "3s", "--wait", "4s", "--"]);
                let key = format!("dynamo:{TABLE_RESTORED}/r0/LOCK");
                touch(&mut command, context, &proc, "run-dynamo", &key, 60);
                command
            }
            (Role::Restorer, _) => {
                let mut command = actor(context, "restore", &proc);
                command
                    .args([
                        "--endpoint",
                        context.store_endpoint.as_deref().unwrap_or_default(),
                    ])
                    .args(["--table", TABLE_RESTORED]);
                command
            }
            (Role::RunCounting, backend) => counting(context, &proc, backend),
            (Role::KeptLease, Backend::Postgres) => {
                let mut command = actor(context, "pg-lease", &proc);
                postgres(&mut command, context);
                command.args(["--keys", "p0,p1", "--ttl-ms", "3000"]);
                command
            }
            (Role::KeptLease, Backend::Redis) => {
                let mut command = actor(context, "redis-lease", &proc);
                redis(&mut command, context);
                // Sabotaged, both actors contend for one key: each holds a bare grant past its
                // expiry while the other takes it over, a double holder within seconds.
                let keys = if context.sabotage { "q0" } else { "q0,q1" };
                command.args(["--keys", keys, "--ttl-ms", "3000"]);
                if context.sabotage {
                    command.arg("--skip-check");
                }
                command
            }
            (Role::KeptLease, _) => {
                let mut command = actor(context, "dynamo-lease", &proc);
                command
                    .args([
                        "--endpoint",
                        context.endpoint.as_deref().unwrap_or_default(),
                    ])
                    .args(["--table", TABLE, "--keys", "d0,d1", "--ttl-ms", "3000"])
                    .args(["--skew-ms", &DYNAMO_SKEW.as_millis().to_string()])
                    .args(["--attempt-timeout-ms", ATTEMPT_TIMEOUT_MS]);
                command
            }
            (Role::Fleet { worker }, backend) => fleet(context, &proc, *worker, backend),
            (Role::Election { observe }, backend) => {
                let mut command = actor(context, "election", &proc);
                match backend {
                    Backend::File => command.arg("--dir").arg(files.join("election")).args([
                        "--ttl-ms",
                        "1000",
                        "--hold-ms",
                        "100",
                    ]),
                    // A lease as the other DynamoDB actors' (3 s), led a little longer.
                    Backend::Dynamo => command
                        .args(["--backend", "dynamo", "--table", TABLE])
                        .args([
                            "--endpoint",
                            context.endpoint.as_deref().unwrap_or_default(),
                        ])
                        .args(["--skew-ms", &DYNAMO_SKEW.as_millis().to_string()])
                        .args(["--attempt-timeout-ms", ATTEMPT_TIMEOUT_MS])
                        .args(["--ttl-ms", "3000", "--hold-ms", "400"]),
                    // As on DynamoDB; observers are woken by NOTIFY.
                    Backend::Postgres => {
                        command.args(["--backend", "postgres"]);
                        postgres(&mut command, context);
                        command.args(["--ttl-ms", "3000", "--hold-ms", "400"])
                    }
                    // As on PostgreSQL; observers are woken by the prefix's pub/sub channel.
                    Backend::Redis => {
                        command.args(["--backend", "redis"]);
                        redis(&mut command, context);
                        command.args(["--ttl-ms", "3000", "--hold-ms", "400"])
                    }
                };
                command
                    .args(["--key", "leader"])
                    .args(["--role", if *observe { "observe" } else { "campaign" }]);
                command
            }
        }
    }
}

/// The niceness of the PostgreSQL side of a run (its actors and its server): below the rest, so
/// that on a loaded machine it does not starve DynamoDB Local, whose restarts (a JVM starting)
/// then came too late in `--backend all` runs for `fleet-dynamo` to gain a unit in a minute (3
/// runs in 3 on a 2-core machine at a load of 15 to 25; none without the PostgreSQL side). The
/// PostgreSQL side pays with longer pauses, which are faults it must survive anyway.
pub(crate) const PG_NICENESS: &str = "10";

/// `command` run by `nice -n` [`PG_NICENESS`], which execs it: the same process id.
fn niced(command: &Command) -> Command {
    let mut niced = Command::new("nice");
    niced
        .args(["-n", PG_NICENESS])
        .arg(command.get_program())
        .args(command.get_args());
    niced
}

/// `lease-chaos-actor <mode> --proc <proc> --run <run>`.
fn actor(context: &Context, mode: &str, proc: &str) -> Command {
    let mut command = Command::new(&context.actor);
    command
        .arg(mode)
        .args(["--proc", proc])
        .arg("--run")
        .arg(&context.run);
    command
}

/// How far apart (ms) the command of a PostgreSQL `lease run` writes its claims: twice the
/// others' gap, so that each `lease` process (a new pool, a new `LISTEN` connection, each a
/// server process forked by PostgreSQL) lives about a second. Shorter, their churn starved
/// DynamoDB Local of a loaded 2-core machine in `--backend all` runs.
const PG_TOUCH_EVERY: u32 = 120;

/// Appends where PostgreSQL is to an actor's `command`: the proxy's URL, the table, the
/// attempt timeout.
fn postgres(command: &mut Command, context: &Context) {
    command
        .args(["--postgres", context.pg_url.as_deref().unwrap_or_default()])
        .args(["--table", PG_TABLE])
        .args(["--attempt-timeout-ms", ATTEMPT_TIMEOUT_MS]);
}

/// Appends where Redis is to an actor's `command`: the proxy's URL, the prefix, the
/// recreation grace, the attempt timeout.
fn redis(command: &mut Command, context: &Context) {
    command
        .args(["--redis", context.redis_url.as_deref().unwrap_or_default()])
        .args(["--prefix", REDIS_PREFIX])
        .args(["--grace-ms", &REDIS_GRACE_MS.to_string()])
        .args(["--attempt-timeout-ms", ATTEMPT_TIMEOUT_MS]);
}

/// Appends where Redis is to a `lease run` `command`: the proxy's URL, the prefix and the
/// recreation grace.
fn redis_lease_run(command: &mut Command, context: &Context) {
    command
        .args(["--redis", context.redis_url.as_deref().unwrap_or_default()])
        .args(["--prefix", REDIS_PREFIX])
        .args(["--recreation-grace", &format!("{REDIS_GRACE_MS}ms")]);
}

/// Appends `lease-chaos-actor touch ...` (the command `lease run` runs) to `command`.
fn touch(
    command: &mut Command,
    context: &Context,
    proc: &str,
    surface: &str,
    key: &str,
    every: u32,
) {
    command
        .arg(&context.actor)
        .args(["touch", "--proc", proc])
        .arg("--run")
        .arg(&context.run)
        .args(["--surface", surface, "--key", key, "--ticks", "6"])
        .args(["--every-ms", &every.to_string()]);
}

/// How many holders the counting-lease actors allow, and the key they share: a key named
/// `slots<N>` is a counting lease of `N` holders to the checker.
pub(crate) const COUNTING_HOLDERS: u32 = 2;

/// `lease run --holders 2` of `touch` on the key `slots2`: on the files (ttl 2 s) or on
/// DynamoDB, PostgreSQL or Redis (ttl 3 s, through the proxy).
fn counting(context: &Context, proc: &str, backend: Backend) -> Command {
    let name = format!("slots{COUNTING_HOLDERS}");
    let mut command = Command::new(&context.lease);
    command.arg("run");
    let key = match backend {
        Backend::File => {
            let dir = context.files().join("counting");
            command.arg("--file").arg(&dir).args(["--ttl", "2s"]);
            format!("file:{}/{name}", dir.display())
        }
        Backend::Dynamo => {
            command
                .args(["--dynamo", TABLE, "--region", "us-east-1"])
                .args([
                    "--endpoint",
                    context.endpoint.as_deref().unwrap_or_default(),
                ])
                .args(["--ttl", "3s"]);
            format!("dynamo:{TABLE}/{name}/LOCK")
        }
        Backend::Postgres => {
            command
                .args(["--postgres", context.pg_url.as_deref().unwrap_or_default()])
                .args(["--table", PG_TABLE, "--ttl", "3s"]);
            format!("postgres:{PG_TABLE}/{name}")
        }
        Backend::Redis => {
            redis_lease_run(&mut command, context);
            command.args(["--ttl", "3s"]);
            format!("redis:{REDIS_PREFIX}/{name}")
        }
    };
    command
        .args(["--key", &name, "--holders", &COUNTING_HOLDERS.to_string()])
        .args(["--wait", "4s", "--"]);
    let (surface, every) = match backend {
        Backend::File => ("run-file", 40),
        Backend::Dynamo => ("run-dynamo", 40),
        Backend::Postgres => ("run-postgres", PG_TOUCH_EVERY),
        Backend::Redis => ("run-redis", PG_TOUCH_EVERY),
    };
    touch(&mut command, context, proc, surface, &key, every);
    command
}

/// A fleet worker on the files, on DynamoDB, on PostgreSQL or on Redis.
fn fleet(context: &Context, proc: &str, worker: u32, backend: Backend) -> Command {
    let mut command = actor(context, "fleet", proc);
    let worker = format!("w{worker}");
    match backend {
        Backend::File => command
            .args(["--backend", "file", "--dir"])
            .arg(context.files().join("fleet"))
            .args(["--session-ms", "2000", "--interval-ms", "300"])
            .args(["--margin-ms", "400", "--save-every-ms", "150"]),
        Backend::Dynamo => command
            .args(["--backend", "dynamo", "--table", TABLE])
            .args([
                "--endpoint",
                context.endpoint.as_deref().unwrap_or_default(),
            ])
            .args(["--session-ms", "3000", "--interval-ms", "600"])
            .args(["--margin-ms", "1000", "--save-every-ms", "400"])
            .args(["--skew-ms", &DYNAMO_SKEW.as_millis().to_string()])
            .args(["--attempt-timeout-ms", ATTEMPT_TIMEOUT_MS]),
        // The timings of DynamoDB's workers.
        Backend::Postgres => {
            command.args(["--backend", "postgres"]);
            postgres(&mut command, context);
            command
                .args(["--session-ms", "3000", "--interval-ms", "600"])
                .args(["--margin-ms", "1000", "--save-every-ms", "400"])
        }
        Backend::Redis => {
            command.args(["--backend", "redis"]);
            redis(&mut command, context);
            command
                .args(["--session-ms", "3000", "--interval-ms", "600"])
                .args(["--margin-ms", "1000", "--save-every-ms", "400"])
        }
    };
    command.args(["--fleet", "chaos", "--worker", &worker, "--units", "12"]);
    command
}

/// The slots of one backend.
pub(crate) fn slots_for(backend: Backend) -> Vec<Slot> {
    let mut slots = Vec::new();
    let mut add = |name: String, role: Role| slots.push(Slot::new(name, backend, role));
    match backend {
        Backend::File => {
            for (i, (lock, kernel)) in [
                ("a", true),
                ("a", true),
                ("a", false),
                ("b", true),
                ("b", false),
            ]
            .into_iter()
            .enumerate()
            {
                add(
                    format!("fl{i}"),
                    Role::FileLock {
                        lock,
                        kernel,
                        fork: Fork::No,
                    },
                );
            }
            for (i, (lock, kernel)) in [("a", true), ("b", false)].into_iter().enumerate() {
                add(
                    format!("flfork{i}"),
                    Role::FileLock {
                        lock,
                        kernel,
                        fork: Fork::Held,
                    },
                );
            }
            for (i, (lock, kernel)) in [("a", true), ("b", false)].into_iter().enumerate() {
                add(
                    format!("flidle{i}"),
                    Role::FileLock {
                        lock,
                        kernel,
                        fork: Fork::Idle,
                    },
                );
            }
            for i in 0..3 {
                add(format!("runf{i}"), Role::RunFile);
            }
            for worker in 0..3 {
                add(format!("fleetf{worker}"), Role::Fleet { worker });
            }
            for i in 0..2 {
                add(format!("runs{i}"), Role::RunShared);
            }
            for i in 0..4 {
                add(format!("countf{i}"), Role::RunCounting);
            }
            add("prune0".to_owned(), Role::Prune);
            for i in 0..3 {
                add(format!("elect{i}"), Role::Election { observe: false });
            }
            for i in 0..2 {
                add(format!("watch{i}"), Role::Election { observe: true });
            }
        }
        Backend::Dynamo => {
            for i in 0..2 {
                add(format!("rund{i}"), Role::RunDynamo);
            }
            for i in 0..3 {
                add(format!("dl{i}"), Role::KeptLease);
            }
            for i in 0..3 {
                add(format!("runr{i}"), Role::RunRestored);
            }
            add("restorer".to_owned(), Role::Restorer);
            for i in 0..3 {
                add(format!("countd{i}"), Role::RunCounting);
            }
            for worker in 0..3 {
                add(format!("fleetd{worker}"), Role::Fleet { worker });
            }
            for i in 0..3 {
                add(format!("electd{i}"), Role::Election { observe: false });
            }
            for i in 0..2 {
                add(format!("watchd{i}"), Role::Election { observe: true });
            }
        }
        // Fewer than DynamoDB's, and niced (`PG_NICENESS`): the run's machine is shared.
        Backend::Postgres => {
            add("runp0".to_owned(), Role::RunPostgres);
            for i in 0..2 {
                add(format!("pl{i}"), Role::KeptLease);
            }
            for i in 0..3 {
                add(format!("countp{i}"), Role::RunCounting);
            }
            for worker in 0..2 {
                add(format!("fleetp{worker}"), Role::Fleet { worker });
            }
            for i in 0..2 {
                add(format!("electp{i}"), Role::Election { observe: false });
            }
            add("watchp0".to_owned(), Role::Election { observe: true });
        }
        // As PostgreSQL's, and niced the same (`PG_NICENESS`).
        Backend::Redis => {
            add("runq0".to_owned(), Role::RunRedis);
            for i in 0..2 {
                add(format!("ql{i}"), Role::KeptLease);
            }
            for i in 0..3 {
                add(format!("countq{i}"), Role::RunCounting);
            }
            for worker in 0..2 {
                add(format!("fleetq{worker}"), Role::Fleet { worker });
            }
            for i in 0..2 {
                add(format!("electq{i}"), Role::Election { observe: false });
            }
            add("watchq0".to_owned(), Role::Election { observe: true });
        }
    }
    slots
}

/// Creates the run directory's folders (see docs/chaos.md).
pub(crate) fn prepare(run: &Path) -> std::io::Result<()> {
    for dir in [
        "history",
        "clock",
        "logs",
        "tmp",
        "files/locks",
        "files/run",
        "files/counting",
        "files/fleet",
        "files/shared",
        "files/election",
    ] {
        fs::create_dir_all(run.join(dir))?;
    }
    Ok(())
}
